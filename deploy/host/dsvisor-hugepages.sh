#!/bin/sh
# dsvisor-hugepages.sh — reserves 2 MiB HugePages per NUMA node for dsvisor's weight
# images (one shared, read-only image per node that hosts instances), early at boot
# while memory is still unfragmented. Run by dsvisor-hugepages.service.
#
# Configuration (/etc/default/dsvisor-hugepages, or the environment):
#   DSVISOR_HUGEPAGES="0:20480 1:20480"   node:pages pairs, written as given; or
#   DSVISOR_MODEL=/var/lib/dsvisor/model.dsv and DSVISOR_NODES="0 1"
#                                         ceil(model size / 2 MiB) pages on each node
#                                         (what `dsvisor doctor --model` asks for)
#   DSVISOR_HOST_ROOT=/                   prefix of /sys (tests point it at a fake tree)
#
# Why per node and not vm.nr_hugepages: the global knob spreads pages evenly over all
# nodes, and a node without instances would hold pages nobody maps. Why at boot: later,
# free memory is fragmented and the kernel may find fewer contiguous 2 MiB blocks than
# asked; the script reads the count back and fails loudly when it got fewer.
# Equivalent kernel command line (Linux 5.16+): hugepagesz=2M hugepages=0:20480,1:20480
set -eu
root=${DSVISOR_HOST_ROOT:-/}
root=${root%/}
conf=${DSVISOR_HUGEPAGES_CONF:-/etc/default/dsvisor-hugepages}
# shellcheck disable=SC1090
[ -r "$conf" ] && . "$conf"

pairs=${DSVISOR_HUGEPAGES:-}
if [ -z "$pairs" ] && [ -n "${DSVISOR_MODEL:-}" ]; then
  bytes=$(stat -Lc %s "$DSVISOR_MODEL")
  pages=$(( (bytes + 2097151) / 2097152 ))
  for n in ${DSVISOR_NODES:-0}; do pairs="$pairs $n:$pages"; done
fi
if [ -z "$pairs" ]; then
  echo "dsvisor-hugepages: set DSVISOR_HUGEPAGES or DSVISOR_MODEL in $conf" >&2
  exit 1
fi

rc=0
for pair in $pairs; do
  node=${pair%%:*}
  want=${pair#*:}
  f="$root/sys/devices/system/node/node$node/hugepages/hugepages-2048kB/nr_hugepages"
  if [ ! -w "$f" ]; then
    echo "dsvisor-hugepages: node $node has no 2 MiB pool ($f)" >&2
    rc=1
    continue
  fi
  echo "$want" > "$f"
  got=$(cat "$f")
  if [ "$got" -lt "$want" ]; then
    echo "dsvisor-hugepages: node $node: reserved $got of $want pages (memory fragmented; reserve on the kernel command line)" >&2
    rc=1
  else
    echo "dsvisor-hugepages: node $node: $got pages of 2 MiB"
  fi
done
exit $rc
