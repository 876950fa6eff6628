#!/usr/bin/env bash
# dsvisor plan on synthetic machines, an uneven XML machine and this machine: checks the
# --json output (python3) for disjoint whole-core slices, node binding, housekeeping,
# evenness and reported oversubscription. Ends with "N passed, N failed".
set -u
bin=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build" && pwd)}/bin/dsvisor
tmp=$(mktemp -d /tmp/dsv-test-plan.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

ok() { echo "ok   $1" >&2; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2" >&2; failed=$((failed + 1)); }

# check NAME PYTHON-ASSERTIONS -- DSVISOR-PLAN-ARGS...: runs plan --json, then the
# assertions with `p` = the parsed plan and the helpers below.
check() {
  local name=$1 asserts=$2
  shift 3
  if ! "$bin" plan --json "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"; then
    fail "$name" "dsvisor plan $* exited $?: $(cat "$tmp/$name.err")"
    return
  fi
  if out=$(python3 - "$tmp/$name.json" "$asserts" 2>&1 <<'EOF'
import json, os, sys
p = json.load(open(sys.argv[1]))
insts = p["instances"]

def invariants(smt=None):
    """Whole cores (smt PUs each, when given), disjoint slices (unless shared), memory on
    the instance's node."""
    seen = set()
    hk = p["housekeeping"]
    if hk:
        assert hk["n_cores"] == 1 and (smt is None or len(hk["cpus"]) == smt), hk
        seen |= set(hk["cpus"])
    for i in insts:
        assert i["memory_node"] == i["node"], i
        assert i["n_cores"] == len(i["cores"]) >= 1, i
        assert smt is None or len(i["cpus"]) == smt * i["n_cores"], i
        assert i["threads"] >= 1
        if not i["shared"]:
            assert not (set(i["cpus"]) & seen), ("overlap", i)
            seen |= set(i["cpus"])

def per_node():
    counts = {}
    for i in insts:
        counts[i["node"]] = counts.get(i["node"], 0) + 1
    return counts

exec(sys.argv[2])
EOF
  ); then
    ok "$name"
  else
    fail "$name" "$out"
  fi
}

# 2 sockets × 2 NUMA nodes × 16 cores × 2 PUs; hwloc numbers a core's PUs 2c, 2c+1.
S4="pack:2 numa:2 core:16 pu:2"
check two_sockets_default '
invariants(2)
assert p["topology"]["nodes"] == 4 and p["topology"]["cpus"] == 128
assert [i["node"] for i in insts] == [0, 1, 2, 3]
assert p["housekeeping"]["cpus"] == [0, 1] and p["housekeeping"]["node"] == 0
assert [i["threads"] for i in insts] == [15, 16, 16, 16]
assert insts[0]["cpulist"] == "2-31" and insts[3]["cpulist"] == "96-127"
assert not p["oversubscribed"] and p["warnings"] == [] and p["unused_nodes"] == []
' -- --topology "$S4"

check two_sockets_eight_instances '
invariants(2)
assert len(insts) == 8 and set(per_node().values()) == {2}
assert not p["oversubscribed"]
' -- --topology "$S4" --instances 8

check two_sockets_threads_cap '
invariants(2)
assert all(i["threads"] == 4 for i in insts) and not p["oversubscribed"]
' -- --topology "$S4" --threads-per-instance 4

check two_sockets_two_instances_unused_nodes '
invariants(2)
assert [i["node"] for i in insts] == [0, 1] and p["unused_nodes"] == [2, 3]
assert any("no instance" in w for w in p["warnings"])
' -- --topology "$S4" --instances 2

# --cpus/--housekeeping-cpus: a Kubernetes-style pod set (cores 3, 5 on node 0 and 17,
# 18 on node 1) and the supervisor on core 0.
check two_sockets_pod_cpus '
assert [i["cpulist"] for i in insts] == ["6-7,10-11", "34-37"] and [i["memory_node"] for i in insts] == [0, 1]
assert p["housekeeping"]["cpulist"] == "0-1" and p["given"]["cpus"] == "0-127"
assert [i["threads"] for i in insts] == [2, 2] and p["unused_nodes"] == [2, 3]
' -- --topology "$S4" --cpus 6-7,10-11,34-37 --housekeeping-cpus 0-1

check eight_nodes '
invariants(1)
assert len(insts) == 8 and [i["n_cores"] for i in insts] == [7] + [8] * 7
' -- --topology "numa:8 core:8 pu:1"

check eight_nodes_twenty_instances '
invariants(1)
c = per_node()
assert len(insts) == 20 and sorted(c.values()) == [2] * 4 + [3] * 4 and c[0] == 2
' -- --topology "numa:8 core:8 pu:1" --instances 20

check this_machine_shape_oversubscribed '
invariants(1)
assert p["housekeeping"] is None
assert len(insts) == 3 and all(i["shared"] for i in insts) and p["oversubscribed"]
assert any("3 instances on 2 free cores" in w for w in p["warnings"])
' -- --topology "pack:1 numa:1 core:2 pu:1" --instances 3

check threads_over_share_oversubscribed '
invariants(1)
assert insts[0]["threads"] == 8 and p["oversubscribed"]
assert any("8 threads on 2 cores" in w for w in p["warnings"])
' -- --topology "pack:1 numa:1 core:2 pu:1" --threads-per-instance 8

# An uneven machine: nodes with 6, 4 and 2 cores, saved as XML by lstopo.
uneven="numa:3 core:6 pu:1"
if command -v lstopo-no-graphics >/dev/null && command -v hwloc-calc >/dev/null &&
  lstopo-no-graphics -i "$uneven" --restrict "$(hwloc-calc -i "$uneven" pu:0-5 pu:6-9 pu:12-13)" \
    "$tmp/uneven.xml" 2>"$tmp/lstopo.err"; then
  check uneven_xml '
invariants(1)
assert [i["n_cores"] for i in insts] == [5, 4, 2]
assert [i["cpulist"] for i in insts] == ["1-5", "6-9", "12-13"]
' -- --topology-xml "$tmp/uneven.xml"
  check uneven_xml_five_instances '
invariants(1)
c = per_node()
assert c == {0: 2, 1: 2, 2: 1}, c
assert [i["n_cores"] for i in insts] == [3, 2, 2, 2, 2]
' -- --topology-xml "$tmp/uneven.xml" --instances 5
else
  fail uneven_xml "lstopo-no-graphics/hwloc-calc (Debian package hwloc) could not write the XML machine"
fi

check this_machine '
invariants()
allowed = os.sched_getaffinity(0)
assert p["topology"]["source"] == "system" and p["topology"]["cpus"] == len(allowed)
used = set(c for i in insts for c in i["cpus"]) | set(p["housekeeping"]["cpus"] if p["housekeeping"] else [])
assert used <= allowed, (used, allowed)
assert len(insts) >= 1 and (p["housekeeping"] is not None) == (p["topology"]["cores"] > 2)
' --

# Usage errors and unreadable topologies: exit codes 2 and 1, a message on stderr.
expect_exit() { # name, code, args...
  local name=$1 want=$2
  shift 2
  "$bin" plan "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ] && [ -s "$tmp/err" ]; then ok "$name"; else fail "$name" "exit $got (want $want), stderr: $(cat "$tmp/err")"; fi
}
expect_exit zero_instances 2 --instances 0
expect_exit bad_threads 2 --threads-per-instance x
expect_exit two_topologies 2 --topology "numa:1 pu:1" --topology-xml /dev/null
expect_exit bad_synthetic 1 --topology "bogus:9"
expect_exit missing_xml 1 --topology-xml "$tmp/missing.xml"
expect_exit too_many_instances 1 --topology "numa:1 pu:1" --instances 100000
expect_exit cpus_outside 1 --topology "numa:1 core:4" --cpus 2-9
expect_exit cpus_overlap 1 --topology "numa:1 core:4" --cpus 1-3 --housekeeping-cpus 0-1
expect_exit cpus_too_few 1 --topology "numa:1 core:4" --cpus 1 --instances 2
expect_exit housekeeping_contradiction 1 --topology "numa:1 core:4" --housekeeping-cpus 0 --no-housekeeping

if "$bin" plan --topology "$S4" >"$tmp/text" 2>&1 && grep -q '^instance 3: node 3, 16 cores, CPUs 96-127, memory node 3, 16 threads$' "$tmp/text" &&
  grep -q '^housekeeping: CPUs 0-1 (node 0)$' "$tmp/text"; then
  ok text_output
else
  fail text_output "$(cat "$tmp/text")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
