#!/bin/sh
# dsvisor-irq-affinity.sh CPULIST — moves every IRQ that can be moved onto the
# housekeeping CPUs CPULIST (e.g. "0,32": the CPUs `dsvisor plan` lists under
# housekeeping), so interrupts stop preempting the instances' compute threads.
#
# Managed IRQs (per-CPU NVMe and virtio queues) refuse the write with EIO: the kernel
# spreads them over all CPUs and shuts each one down with its CPU. They are counted
# and left alone; they fire only for I/O issued on their CPU.
# DSVISOR_HOST_ROOT=/ is the prefix of /proc (tests point it at a fake tree).
# See IRQ-AFFINITY.md for irqbalance and the kernel command line.
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 CPULIST" >&2
  exit 2
fi
root=${DSVISOR_HOST_ROOT:-/}
root=${root%/}
moved=0 refused=0
for d in "$root"/proc/irq/[0-9]*; do
  [ -w "$d/smp_affinity_list" ] || continue
  if (echo "$1" > "$d/smp_affinity_list") 2>/dev/null; then
    moved=$((moved + 1))
  else
    refused=$((refused + 1))
  fi
done
echo "dsvisor-irq-affinity: $moved IRQs moved to CPUs $1, $refused refused (managed)"
