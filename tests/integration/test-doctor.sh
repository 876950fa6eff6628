#!/usr/bin/env bash
# dsvisor doctor against fake /proc and /sys trees: a
# well-tuned host, a default Debian 12 host, a VM like the CI machine, an empty root,
# hosts that must fail, and the default Debian host after deploy/host/ is applied.
# Each tree is written here, file by file, so the expected verdicts sit next to the
# values that cause them.
set -u
BIN=${DSV_BUILD_DIR:-build}/bin/dsvisor
SRC=${DSV_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0 failed=0

ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

put() { # put PATH LINE...: one file with the given lines
  local f=$1
  shift
  mkdir -p "$(dirname "$f")"
  printf '%s\n' "$@" > "$f"
}

# Two NUMA nodes of 4 cores x 2 PUs: 'pack:1 numa:2 core:4 pu:2' in hwloc's numbering,
# CPUs 0-7 on node 0 and 8-15 on node 1. The plan keeps core 0 (CPUs 0-1) for
# housekeeping: instance CPUs 2-15.
TOPO2='pack:1 numa:2 core:4 pu:2'
MODEL=$((40 << 30)) # 40 GiB: 20480 pages of 2 MiB per node

base_tree() { # base_tree ROOT: what every Linux host has, values set per profile later
  local r=$1
  put "$r/sys/devices/system/cpu/possible" "0-15"
  put "$r/proc/sys/kernel/sched_rt_period_us" 1000000
  put "$r/proc/sys/kernel/osrelease" "6.1.0-28-amd64"
  put "$r/proc/cmdline" "BOOT_IMAGE=/vmlinuz-6.1.0-28-amd64 root=/dev/sda1 ro quiet"
  for n in 0 1; do
    put "$r/sys/devices/system/node/node$n/meminfo" "Node $n MemTotal:       67108864 kB" "Node $n MemFree:        60000000 kB"
  done
}

irqs() { # irqs ROOT AFFINITY EFF24 EFF25 EFF26 EFF40 EFF41: five active IRQs allowed on
  # AFFINITY, each effective on one CPU as x86 delivers them, and IRQ 99 that never fired
  local r=$1 aff=$2 eff=("${@:3}") k=0
  {
    echo "            CPU0       CPU1"
    for i in 24 25 26 40 41; do echo " $i:        100          5   IO-APIC   $i-edge      dev$i"; done
    echo " 99:          0          0   IO-APIC   99-edge      idle"
    echo "LOC:     287548     262431   Local timer interrupts"
  } > "$r/proc/interrupts"
  for i in 24 25 26 40 41 99; do
    put "$r/proc/irq/$i/smp_affinity_list" "$aff"
    put "$r/proc/irq/$i/effective_affinity_list" "${eff[$k]:-0}"
    k=$((k + 1))
  done
}

limits() { # limits ROOT MEMLOCK RTPRIO CAPEFF
  local r=$1
  mkdir -p "$r/proc/self"
  {
    echo "Limit                     Soft Limit           Hard Limit           Units     "
    echo "Max open files            1024                 524288               files     "
    echo "Max locked memory         $2                   $2                   bytes     "
    echo "Max realtime priority     $3                   $3                             "
  } > "$r/proc/self/limits"
  put "$r/proc/self/status" "Name:	dsvisor" "CapInh:	0000000000000000" "CapEff:	$4"
}

flags() { # flags ROOT LEVEL
  local f="fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt"
  [ "$2" != scalar ] && f="$f avx avx2 fma f16c"
  [ "$2" = avx512 ] && f="$f avx512f avx512dq avx512bw avx512vl avx512_vnni"
  put "$1/proc/cpuinfo" "processor	: 0" "vendor_id	: GenuineIntel" "flags		: $f" ""
}

unified() { # unified ROOT OWN CONTROLLERS
  put "$1/proc/self/mounts" "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0" \
    "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0"
  put "$1/proc/self/cgroup" "0::$2"
  put "$1/sys/fs/cgroup$2/cgroup.controllers" "$3"
}

governor() { # governor ROOT DRIVER GOVERNOR
  for c in $(seq 0 15); do
    put "$1/sys/devices/system/cpu/cpu$c/cpufreq/scaling_driver" "$2"
    put "$1/sys/devices/system/cpu/cpu$c/cpufreq/scaling_governor" "$3"
  done
}

hugepages() { # hugepages ROOT NR FREE
  for n in 0 1; do
    put "$1/sys/devices/system/node/node$n/hugepages/hugepages-2048kB/nr_hugepages" "$2"
    put "$1/sys/devices/system/node/node$n/hugepages/hugepages-2048kB/free_hugepages" "$3"
  done
}

make_tuned() {
  local r=$1
  base_tree "$r"
  unified "$r" /system.slice/dsvisor.service "cpuset cpu io memory hugetlb pids"
  governor "$r" intel_pstate performance
  put "$r/sys/kernel/mm/transparent_hugepage/enabled" "always [madvise] never"
  put "$r/sys/kernel/mm/transparent_hugepage/defrag" "always defer [defer+madvise] madvise never"
  put "$r/sys/kernel/mm/transparent_hugepage/shmem_enabled" "always within_size [advise] never deny force"
  hugepages "$r" 20480 20480
  put "$r/proc/sys/kernel/sched_rt_runtime_us" 950000
  put "$r/proc/sys/kernel/numa_balancing" 0
  put "$r/boot/config-6.1.0-28-amd64" "CONFIG_CGROUP_SCHED=y" "CONFIG_FAIR_GROUP_SCHED=y" "# CONFIG_RT_GROUP_SCHED is not set"
  limits "$r" unlimited 49 0000000000000000
  irqs "$r" 0-1 0 1 0 1 0
  put "$r/sys/devices/system/cpu/smt/control" on
  flags "$r" avx512
}

make_debian() { # Debian 12 defaults, dsvisor run by a unit with Delegate=
  local r=$1
  base_tree "$r"
  unified "$r" /system.slice/dsvisor.service "cpuset cpu io memory pids"
  governor "$r" intel_pstate powersave
  put "$r/sys/kernel/mm/transparent_hugepage/enabled" "[always] madvise never"
  put "$r/sys/kernel/mm/transparent_hugepage/defrag" "always defer defer+madvise [madvise] never"
  put "$r/sys/kernel/mm/transparent_hugepage/shmem_enabled" "always within_size advise [never] deny force"
  hugepages "$r" 0 0
  put "$r/proc/sys/kernel/sched_rt_runtime_us" 950000
  put "$r/proc/sys/kernel/numa_balancing" 1
  put "$r/boot/config-6.1.0-28-amd64" "CONFIG_CGROUP_SCHED=y" "# CONFIG_RT_GROUP_SCHED is not set"
  limits "$r" 8388608 0 0000000000000000
  irqs "$r" 0-15 0 3 5 9 12
  put "$r/sys/devices/system/cpu/smt/control" on
  flags "$r" avx2
}

make_vm() { # like the CI VM: hybrid cgroups with RT group scheduling, no cpufreq, one node
  local r=$1
  put "$r/sys/devices/system/cpu/possible" "0-1"
  put "$r/proc/sys/kernel/sched_rt_period_us" 1000000
  put "$r/proc/sys/kernel/sched_rt_runtime_us" 950000
  put "$r/proc/sys/kernel/numa_balancing" 0
  put "$r/proc/sys/kernel/osrelease" "6.18.44-fc"
  put "$r/proc/cmdline" "console=ttyS0 quiet"
  put "$r/proc/self/mounts" "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0" \
    "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0" \
    "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0" \
    "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0" \
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0"
  put "$r/proc/self/cgroup" "4:memory:/" "3:cpuset:/" "1:cpu:/" "0::/"
  put "$r/sys/fs/cgroup/unified/cgroup.controllers" "hugetlb"
  put "$r/sys/fs/cgroup/cpu/cpu.rt_runtime_us" 950000
  put "$r/sys/kernel/mm/transparent_hugepage/enabled" "always [madvise] never"
  put "$r/sys/kernel/mm/transparent_hugepage/defrag" "always defer defer+madvise [madvise] never"
  put "$r/sys/kernel/mm/transparent_hugepage/shmem_enabled" "always within_size advise [never] deny force"
  put "$r/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled" "always [inherit] within_size advise never"
  put "$r/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages" 0
  put "$r/sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages" 0
  put "$r/sys/devices/system/node/node0/meminfo" "Node 0 MemTotal:        8134372 kB"
  limits "$r" 8388608 0 000001ffffffffff
  irqs "$r" 0-1 0 1 1 0 1
  put "$r/sys/devices/system/cpu/smt/control" notsupported
  flags "$r" avx2
}

# run_doctor NAME WANT_EXIT ARGS...: runs the doctor, keeps its output in $TMP/NAME.out
run_doctor() {
  local name=$1 want=$2; shift 2
  "$BIN" doctor "$@" > "$TMP/$name.out" 2> "$TMP/$name.err"
  local got=$?
  if [ "$got" -eq "$want" ]; then ok "$name: exit $got"; else
    bad "$name: exit $got, expected $want"; cat "$TMP/$name.out" "$TMP/$name.err"; fi
}

# expect NAME CHECK STATUS [FOUND-SUBSTRING]: the check's line has that status (and text)
expect() {
  local line
  line=$(grep -E "^[a-z]+ +$2 " "$TMP/$1.out")
  if [ -z "$line" ]; then bad "$1: no line for $2"; return; fi
  if [[ $line != "$3 "* ]]; then bad "$1: $2 is not $3: $line"; return; fi
  if [ $# -ge 4 ] && [[ $line != *"$4"* ]]; then bad "$1: $2 lacks '$4': $line"; return; fi
  ok "$1: $2 $3${4:+ ($4)}"
}

# ---- well-tuned host: every check ok -----------------------------------------------
make_tuned "$TMP/tuned"
run_doctor tuned 0 --root "$TMP/tuned" --topology "$TOPO2" --model-bytes $MODEL
for c in cgroup-mode cgroup-controllers cpufreq-driver cpufreq-governor thp-enabled thp-defrag thp-shmem \
  hugepages-node0 hugepages-node1 rt-throttling rt-group-sched numa-balancing rlimit-memlock \
  rlimit-rtprio irq-affinity smt cpu-features placement; do
  expect tuned "$c" ok
done
expect tuned irq-affinity ok "none of 5 active IRQs"
expect tuned placement ok "2 instances on nodes 0,1, CPUs 2-15"
if grep -qE "^(warn|fail|unknown) " "$TMP/tuned.out"; then bad "tuned: a check is not ok"; else ok "tuned: nothing but ok"; fi
if grep -q engine-kernels "$TMP/tuned.out"; then bad "tuned: engine level reported for a fake root"; else ok "tuned: no engine line for a fake root"; fi

# ---- default Debian 12 host: warnings, each with the value that causes it ------------
make_debian "$TMP/debian"
run_doctor debian 1 --root "$TMP/debian" --topology "$TOPO2" --model-bytes $MODEL
expect debian cgroup-mode ok unified
expect debian cpufreq-governor warn "powersave on CPUs 2-15"
expect debian thp-enabled warn always
expect debian thp-defrag ok madvise
expect debian thp-shmem warn never "4 KiB pages"
expect debian hugepages-node0 warn "0 free of 0"
expect debian hugepages-node1 warn
expect debian numa-balancing warn
expect debian rlimit-memlock warn "8192 KiB"
expect debian rlimit-rtprio warn
expect debian rt-group-sched ok "off (/boot/config-6.1.0-28-amd64)"
expect debian irq-affinity warn "4 of 5 active IRQs may fire on instance CPUs: 25-26,40-41"
expect debian cpu-features ok avx2
# JSON: the same verdicts, machine-readable
run_doctor debian-json 1 --root "$TMP/debian" --topology "$TOPO2" --model-bytes $MODEL --json
if python3 - "$TMP/debian-json.out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in d["checks"]}
assert d["status"] == "warn" and d["exit_code"] == 1, d["status"]
assert c["thp-enabled"]["status"] == "warn" and c["thp-enabled"]["found"] == "always"
assert c["thp-enabled"]["recommended"] == "madvise" and c["thp-enabled"]["reason"]
assert c["hugepages-node1"]["recommended"].startswith(">= 20480 free")
assert all(x["status"] in ("ok", "warn", "fail", "unknown") for x in d["checks"])
EOF
then ok "debian-json: verdicts and fields"; else bad "debian-json: verdicts and fields"; fi
# --pid: the limits and cgroup of a running dsvisor, not of the doctor's own process
mkdir -p "$TMP/debian/proc/4242"
cp "$TMP/debian/proc/self/"* "$TMP/debian/proc/4242/"
limits "$TMP/debian" unlimited 49 0000000000000000 # rewrites proc/self only
mv "$TMP/debian/proc/self/limits" "$TMP/debian/proc/4242/limits"
cp "$TMP/debian/proc/4242/status" "$TMP/debian/proc/self/status"
limits "$TMP/debian" 8388608 0 0000000000000000
run_doctor debian-pid 1 --root "$TMP/debian" --topology "$TOPO2" --model-bytes $MODEL --pid 4242
expect debian-pid rlimit-memlock ok unlimited
expect debian-pid rlimit-rtprio ok 49
run_doctor debian-nopid 1 --root "$TMP/debian" --topology "$TOPO2" --model-bytes $MODEL --pid 4343
expect debian-nopid rlimit-memlock unknown
expect debian-nopid cgroup-mode unknown
# Without a model size the HugePages need is unknown, which does not change the exit code.
run_doctor debian-nomodel 1 --root "$TMP/debian" --topology "$TOPO2"
expect debian-nomodel hugepages-node0 unknown "0 free of 0"
# One instance: only node 0 is checked for HugePages.
run_doctor debian-one 1 --root "$TMP/debian" --topology "$TOPO2" --model-bytes $MODEL --instances 1
if grep -q hugepages-node1 "$TMP/debian-one.out"; then bad "debian-one: node 1 checked without an instance"; else ok "debian-one: node 1 not checked"; fi

# ---- a VM like the CI machine ------------------------------------------------------
make_vm "$TMP/vm"
run_doctor vm 1 --root "$TMP/vm" --topology "numa:1 core:2 pu:1" --model-bytes $((1 << 30))
expect vm cgroup-mode warn hybrid
expect vm cgroup-controllers ok "cpu cpuset memory hugetlb"
expect vm thp-shmem warn never
expect vm cpufreq-driver unknown "no cpufreq"
expect vm cpufreq-governor unknown
expect vm rt-group-sched warn "cpu.rt_runtime_us in /sys/fs/cgroup/cpu"
expect vm rlimit-memlock ok "CAP_IPC_LOCK"
expect vm rlimit-rtprio ok "CAP_SYS_NICE"
expect vm smt ok notsupported
expect vm hugepages-node0 warn "0 free of 0"
expect vm numa-balancing ok

# ---- failures: exit 2 ----------------------------------------------------------------
# The weights do not fit in the node's memory (8 GiB node, 16 GiB model).
run_doctor vm-bigmodel 2 --root "$TMP/vm" --topology "numa:1 core:2 pu:1" --model-bytes $((16 << 30))
expect vm-bigmodel hugepages-node0 fail "node memory 7943 MiB"
# No cpuset controller anywhere: instances cannot be pinned.
cp -r "$TMP/tuned" "$TMP/nocpuset"
put "$TMP/nocpuset/sys/fs/cgroup/system.slice/dsvisor.service/cgroup.controllers" "cpu io memory pids"
run_doctor nocpuset 2 --root "$TMP/nocpuset" --topology "$TOPO2" --model-bytes $MODEL
expect nocpuset cgroup-controllers fail "cpu memory in /system.slice/dsvisor.service"
# No cgroup filesystem at all.
cp -r "$TMP/tuned" "$TMP/nocgroup"
put "$TMP/nocgroup/proc/self/mounts" "sysfs /sys sysfs rw 0 0"
run_doctor nocgroup 2 --root "$TMP/nocgroup" --topology "$TOPO2" --model-bytes $MODEL
expect nocgroup cgroup-mode fail "no cgroup filesystem"

# ---- other single settings -----------------------------------------------------------
cp -r "$TMP/tuned" "$TMP/norttl"
put "$TMP/norttl/proc/sys/kernel/sched_rt_runtime_us" -1
put "$TMP/norttl/proc/cmdline" "quiet rt_group_sched=1"
put "$TMP/norttl/sys/kernel/mm/transparent_hugepage/defrag" "[always] defer defer+madvise madvise never"
put "$TMP/norttl/sys/devices/system/cpu/cpu9/cpufreq/scaling_governor" schedutil
put "$TMP/norttl/sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages" 100
run_doctor norttl 1 --root "$TMP/norttl" --topology "$TOPO2" --model-bytes $MODEL
expect norttl rt-throttling warn "-1/1000000 us (no limit)"
expect norttl rt-group-sched warn "rt_group_sched=1 on the command line"
expect norttl thp-defrag warn always
expect norttl cpufreq-governor warn "performance on CPUs 2-8,10-15; schedutil on CPUs 9"
expect norttl hugepages-node0 ok
expect norttl hugepages-node1 warn "100 free of 20480"

# ---- an empty root: every check unknown, none an error --------------------------------
mkdir -p "$TMP/empty"
run_doctor empty 0 --root "$TMP/empty" --topology "$TOPO2" --model-bytes $MODEL
n_unknown=$(grep -cE "^unknown " "$TMP/empty.out")
if [ "$n_unknown" -ge 15 ] && ! grep -qE "^(warn|fail) " "$TMP/empty.out"; then
  ok "empty: $n_unknown checks unknown, no warn or fail"
else bad "empty: $n_unknown unknown"; cat "$TMP/empty.out"; fi

# ---- this host: the engine's kernel level is checked only against the real root --------
DSV_CPU=bogus "$BIN" doctor --topology "$TOPO2" > "$TMP/engine-bad.out" 2>&1
rc=$?
if [ $rc -eq 2 ]; then ok "engine-bad: exit 2"; else bad "engine-bad: exit $rc, expected 2"; fi
expect engine-bad engine-kernels fail
DSV_CPU=scalar "$BIN" doctor --topology "$TOPO2" > "$TMP/engine-scalar.out" 2>&1
rc=$?
if [ $rc -ge 1 ]; then ok "engine-scalar: exit $rc"; else bad "engine-scalar: exit $rc, expected 1 or 2"; fi
expect engine-scalar engine-kernels warn "using scalar"

# ---- usage errors: exit 3 --------------------------------------------------------------
run_doctor usage-bad-instances 3 --instances zero
run_doctor usage-both-models 3 --model /dev/null --model-bytes 5
run_doctor usage-bad-topology 3 --topology "nonsense:9"

# ---- deploy/host applied to the default Debian host: every check ok ------------------
# Each step does what installing the file does on a real host; where the kernel would
# react to a write (free pages follow the reservation, effective IRQ affinity follows
# smp_affinity_list), the step plays the kernel.
D=$TMP/deployed
cp -r "$TMP/debian" "$D"
H=$SRC/deploy/host
# sysctl.d: key a.b.c = v goes to proc/sys/a/b/c
while IFS= read -r line; do
  line=${line%%#*}
  [[ $line == *=* ]] || continue
  key=$(echo "${line%%=*}" | tr -d ' ') val=$(echo "${line#*=}" | tr -d ' ')
  put "$D/proc/sys/${key//.//}" "$val"
done < "$H/sysctl.d/90-dsvisor.conf"
# tmpfiles.d: "w PATH - - - - ARG" writes ARG into every existing file PATH matches
while read -r type path _ _ _ _ arg; do
  [ "$type" = w ] || continue
  for f in $D$path; do [ -f "$f" ] && echo "$arg" > "$f"; done
done < "$H/tmpfiles.d/dsvisor-host.conf"
# THP sysfs files show the choice in brackets; the kernel rewrites them on a write
for f in enabled defrag shmem_enabled; do
  p=$D/sys/kernel/mm/transparent_hugepage/$f; v=$(cat "$p")
  case $f in
  enabled) all="always madvise never" ;;
  defrag) all="always defer defer+madvise madvise never" ;;
  shmem_enabled) all="always within_size advise never deny force" ;;
  esac
  out=""
  for w in $all; do if [ "$w" = "$v" ]; then out="$out [$w]"; else out="$out $w"; fi; done
  echo "${out# }" > "$p"
done
# the HugePages unit's script, sized from a model file of MODEL bytes (sparse)
truncate -s $MODEL "$TMP/model.dsv"
if DSVISOR_HOST_ROOT=$D DSVISOR_HUGEPAGES_CONF=/nonexistent DSVISOR_MODEL=$TMP/model.dsv DSVISOR_NODES="0 1" \
  sh "$H/dsvisor-hugepages.sh" > "$TMP/hp.out" 2>&1; then ok "deployed: dsvisor-hugepages.sh"; else
  bad "deployed: dsvisor-hugepages.sh"; cat "$TMP/hp.out"; fi
for n in 0 1; do
  p=$D/sys/devices/system/node/node$n/hugepages/hugepages-2048kB
  cp "$p/nr_hugepages" "$p/free_hugepages"
done
# the unit's limits drop-in
mem=$(sed -n 's/^LimitMEMLOCK=//p' "$H/dsvisor.service.d/limits.conf")
rt=$(sed -n 's/^LimitRTPRIO=//p' "$H/dsvisor.service.d/limits.conf")
[ "$mem" = infinity ] && mem=unlimited
limits "$D" "$mem" "$rt" 0000000000000000
# the IRQ script onto the housekeeping CPUs the plan keeps (core 0: CPUs 0-1)
DSVISOR_HOST_ROOT=$D sh "$H/dsvisor-irq-affinity.sh" 0-1 > "$TMP/irq.out"
if grep -q "6 IRQs moved" "$TMP/irq.out"; then ok "deployed: dsvisor-irq-affinity.sh"; else bad "deployed: irq script: $(cat "$TMP/irq.out")"; fi
for d in "$D"/proc/irq/*/; do cp "$d/smp_affinity_list" "$d/effective_affinity_list"; done
run_doctor deployed 0 --root "$D" --topology "$TOPO2" --model "$TMP/model.dsv"
if grep -qE "^(warn|fail|unknown) " "$TMP/deployed.out"; then bad "deployed: not all ok"; cat "$TMP/deployed.out"; else
  ok "deployed: every check ok"; fi
expect deployed hugepages-node1 ok "20480 free of 20480"
expect deployed thp-shmem ok advise

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
