#!/usr/bin/env bash
# The steadiness experiment: the same load with and without isolation,
# each quiet and beside a noisy neighbour, and how much the neighbour moves the tail.
#
#   bench/steadiness/run.sh [--reps 5] [--requests 4000] [--qps 80] [--max-tokens 4]
#       [--prompt-len uniform:4:16] [--threads 1] [--hk-cpus 0] [--noisy-shares 2]
#       [--hogs 1] [--hog-mib MIB] [--rt-priority 0] [--model DIR] [--seed 1]
#       [--build-dir DIR] [--out DIR]
#
# Configurations (every process involved is one this script starts):
#   plain     dsvisor-gateway-test-server (the same gateway library as dsvisor) in front
#             of one dsvisor-worker of --threads threads, started by hand: no cgroup, no
#             pinning, no shares; load generator and neighbours free on every CPU too.
#   isolated  dsvisor start with its instance on the CPUs outside --hk-cpus (on 2 CPUs:
#             CPU 1): dsvisor start --cpus <those> --housekeeping-cpus <--hk-cpus>, which
#             gives the instance's cgroup cpuset.cpus = those CPUs and the worker --cpus,
#             and keeps the supervisor (with the gateway) on the housekeeping CPUs. The
#             load generator is pinned (taskset) to the housekeeping CPUs (--hk-cpus,
#             default 0); both run in group dsv-steady-<pid>-serve
#             (cpu.shares 1024; the instance's group is made below it); the neighbours
#             run in its sibling dsv-steady-<pid>-noisy: cpuset = the housekeeping CPUs,
#             cpu.shares --noisy-shares (default 2). Both groups are made directly below
#             this script's own cgroup in each of the v1 cpu, cpuset and memory
#             hierarchies (on a unified host: v2 cpuset and cpu.weight 1) and removed at
#             the end. SCHED_FIFO only with --rt-priority > 0 and where dsvisor's
#             preflight permits it (never on 2 CPUs: no CPU would be left free of FIFO).
#   quiet / noisy: noisy adds --hogs (default 1) CPU hogs (`yes`) and as many
#             memory-bandwidth hogs (`dd` from /dev/zero in blocks of --hog-mib MiB,
#             default twice the L3 the system reports: stores that stream to DRAM and
#             evict everything else from the shared L3).
#
# Method: in each repetition the four configurations run in a rotated order on the same
# requests and arrival schedule (dsvisor-bench-load --requests N --qps Q --seed S+rep:
# Poisson arrivals, short streamed requests, so P99 is a percentile of thousands of
# samples, not the maximum), each on a fresh server after an uncounted warm-up.
# Reported per configuration, as the median over repetitions with the min..max spread:
# achieved QPS, P50, P99, jitter (standard deviation of the latency), the worker's CPU
# time per request (times the QPS: how busy its core is) and the time its threads spent
# runnable but waiting for a CPU (run delay, /proc/PID/task/*/schedstat: how much
# something else held its CPU), what else used the instance's CPUs (isolated only: their
# busy time from /proc/stat minus the worker's) and the time the hypervisor stole from
# them (/proc/stat steal); per isolation mode the ratio P99(noisy)/P99(quiet),
# formed within each repetition (paired) and summarised the same way. Target: isolated
# <= 1.3. Raw JSON of every run, runs.txt, notes.txt and summary.json go to OUT (default
# a new /tmp/dsv-steady.*).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
REPS=5 REQUESTS=4000 QPS=80 MAX_TOKENS=4 PROMPT=uniform:4:16 THREADS=1 RTPRIO=0 HK_CPUS=0
NOISY_SHARES=2 MODEL=$SRC/models/default SEED=1 HOGS=1 BUILD=$SRC/build OUT=
L3_KIB=$(getconf LEVEL3_CACHE_SIZE 2>/dev/null || echo 0); L3_KIB=$(( ${L3_KIB:-0} / 1024 ))
HOG_MIB=$(( L3_KIB > 0 ? (2 * L3_KIB + 1023) / 1024 : 256 ))
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2 ;; --requests) REQUESTS=$2 ;; --qps) QPS=$2 ;; --max-tokens) MAX_TOKENS=$2 ;;
    --prompt-len) PROMPT=$2 ;; --threads) THREADS=$2 ;; --hk-cpus) HK_CPUS=$2 ;;
    --noisy-shares) NOISY_SHARES=$2 ;; --rt-priority) RTPRIO=$2 ;; --model) MODEL=$2 ;;
    --seed) SEED=$2 ;; --hogs) HOGS=$2 ;; --hog-mib) HOG_MIB=$2 ;; --build-dir) BUILD=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
B=$BUILD/bin
for f in dsvisor dsvisor-worker dsvisor-bench-load dsvisor-gateway-test-server; do
  [ -x "$B/$f" ] || { echo "run.sh: $B/$f is not built" >&2; exit 2; }
done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/dsv-steady.XXXXXX)
mkdir -p "$OUT"
W=$(mktemp -d /tmp/dsv-steady-run.XXXXXX)   # 0700: private IPC sockets
export DSV_CACHE_DIR=${DSV_CACHE_DIR:-$W/cache}
SERVER_PIDS=() HOG_PIDS=() SUP= WORKER_PIDS=()

# ---- CPU sets: housekeeping (supervisor, gateway, load generator, neighbours when
# isolated) and the instance's CPUs (everything else) ----
ALL_CPUS=$(python3 -c "import os; print(','.join(map(str, sorted(os.sched_getaffinity(0)))))")
expand() { python3 -c "
import sys
s = set()
for part in sys.argv[1].split(','):
    if part:
        a, _, b = part.partition('-'); s.update(range(int(a), int(b or a) + 1))
print(' '.join(map(str, sorted(s))))" "$1"; }
INST_CPUS=$(python3 -c "
import sys
a, h = set(map(int, sys.argv[1].split())), set(map(int, sys.argv[2].split()))
print(','.join(map(str, sorted(a - h))))" "$(expand "$ALL_CPUS")" "$(expand "$HK_CPUS")")
[ -n "$INST_CPUS" ] || { echo "run.sh: --hk-cpus $HK_CPUS leaves no CPU for the instance" >&2; exit 2; }
N_INST_CPUS=$(echo "$INST_CPUS" | tr ',' '\n' | wc -l)

# ---- cgroups: dsv-steady-<pid>-serve and its sibling dsv-steady-<pid>-noisy, directly
# below our own group in each hierarchy. Siblings, not children of one common group: with
# v1 cpu.shares a parent group's weight on a CPU follows its children's load there, so
# hogs inside a common parent would spend the parent's share of CPU 0 and leave the
# supervisor waiting behind everything else on the machine when it wakes up. ----
CG_SERVE=() CG_NOISY=() CG_KIND=
cg_write() { echo "$2" >"$1" 2>>"$OUT/notes.txt" || { echo "run.sh: cannot write '$2' to $1" | tee -a "$OUT/notes.txt" >&2; return 1; }; }
cgroups_make() {
  local name=dsv-steady-$$ c root rel base
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then   # unified (v2) host
    CG_KIND=v2
    rel=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
    base=/sys/fs/cgroup${rel%/}
    # a v2 group with processes cannot enable controllers for its children ("no internal
    # processes"): this needs the script to run in a group of its own, e.g. systemd-run --scope
    cg_write "$base/cgroup.subtree_control" "+cpu +cpuset" || return 1
    mkdir "$base/$name-serve" "$base/$name-noisy" || return 1
    CG_SERVE+=("$base/$name-serve") CG_NOISY+=("$base/$name-noisy")
    cg_write "$base/$name-noisy/cpuset.cpus" "$HK_CPUS" && cg_write "$base/$name-noisy/cpu.weight" 1 || return 1
    return 0
  fi
  CG_KIND=v1
  for c in cpu cpuset memory; do
    root=$(awk -v c="$c" '$3 == "cgroup" && $4 ~ "(^|,)" c "(,|$)" {print $2; exit}' /proc/mounts)
    [ -n "$root" ] || { echo "run.sh: no v1 $c hierarchy" | tee -a "$OUT/notes.txt" >&2; return 1; }
    rel=$(awk -F: -v c="$c" '$2 ~ "(^|,)" c "(,|$)" {print $3}' /proc/self/cgroup)
    base=$root${rel%/}
    mkdir "$base/$name-serve" "$base/$name-noisy" || return 1
    CG_SERVE+=("$base/$name-serve") CG_NOISY+=("$base/$name-noisy")
    case $c in
      cpuset)
        cg_write "$base/$name-serve/cpuset.cpus" "$ALL_CPUS" && cg_write "$base/$name-serve/cpuset.mems" "$(cat "$base/cpuset.mems")" &&
          cg_write "$base/$name-noisy/cpuset.cpus" "$HK_CPUS" && cg_write "$base/$name-noisy/cpuset.mems" "$(cat "$base/cpuset.mems")" ||
          return 1 ;;
      cpu)
        cg_write "$base/$name-serve/cpu.shares" 1024 && cg_write "$base/$name-noisy/cpu.shares" "$NOISY_SHARES" || return 1 ;;
    esac
  done
}
cgroups_remove() {
  local d
  for d in "${CG_SERVE[@]}" "${CG_NOISY[@]}"; do [ -d "$d" ] && { rmdir "$d" 2>/dev/null || echo "run.sh: could not remove $d" >&2; }; done
}
# into GROUP...: the calling (sub)shell joins the groups (then exec's what it runs)
into() { local d; for d in "$@"; do echo "$BASHPID" >"$d/cgroup.procs" || return 1; done; }

cleanup() {
  noise_stop
  server_stop
  cgroups_remove
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # so the EXIT trap stops everything and removes the groups

# ---- noisy neighbour ----
noise_start() {  # noise_start plain|isolated
  local i
  for i in $(seq "$HOGS"); do
    if [ "$1" = isolated ]; then
      (into "${CG_NOISY[@]}" && exec yes) >/dev/null & HOG_PIDS+=($!)
      (into "${CG_NOISY[@]}" && exec dd if=/dev/zero of=/dev/null bs=${HOG_MIB}M count=100000000 status=none) & HOG_PIDS+=($!)
    else
      yes >/dev/null & HOG_PIDS+=($!)
      dd if=/dev/zero of=/dev/null bs=${HOG_MIB}M count=100000000 status=none & HOG_PIDS+=($!)
    fi
  done
}
noise_stop() {
  local p
  for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${HOG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  HOG_PIDS=()
}

# ---- servers ----
PORT=
server_start() {  # server_start plain|isolated
  rm -rf "$W/run"; mkdir -m 700 "$W/run"
  WORKER_PIDS=()
  if [ "$1" = plain ]; then
    "$B/dsvisor-worker" --model "$MODEL" --listen "ipc://$W/run/w0.sock" --threads "$THREADS" \
      --instance w0 2>>"$OUT/plain-workers.log" &
    SERVER_PIDS+=($!) WORKER_PIDS+=($!)
    "$B/dsvisor-gateway-test-server" --model "$(basename "$MODEL")" --port-file "$W/run/port" \
      --instance "w0=ipc://$W/run/w0.sock" --health-ms 200 </dev/null >/dev/null 2>>"$OUT/plain-gateway.log" &
    SERVER_PIDS+=($!)
    for _ in $(seq 100); do [ -s "$W/run/port" ] && break; sleep 0.1; done
    PORT=$(cat "$W/run/port")
    for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && return 0; sleep 0.1; done
    echo "run.sh: plain server not ready" >&2; return 1
  fi
  (into "${CG_SERVE[@]}" && exec "$B/dsvisor" start --model "$MODEL" --instances 1 \
    --cpus "$INST_CPUS" --housekeeping-cpus "$HK_CPUS" --threads-per-instance "$THREADS" --rt-priority "$RTPRIO" --port 0 --runtime-dir "$W/run/sup") >>"$OUT/isolated-supervisor.log" 2>&1 &
  SUP=$!
  for _ in $(seq 1200); do
    if "$B/dsvisor" status --json --runtime-dir "$W/run/sup" >"$W/status.json" 2>/dev/null &&
       python3 -c "import json,sys; j=json.load(open('$W/status.json')); sys.exit(0 if j['instances_ready'] == j['instances_total'] else 1)"; then
      PORT=$(python3 -c "import json; print(json.load(open('$W/status.json'))['port'])")
      WORKER_PIDS=($(python3 -c "import json; print(' '.join(str(i['pid']) for i in json.load(open('$W/status.json'))['instances']))"))
      cp "$W/status.json" "$OUT/isolated-status.json"
      return 0
    fi
    kill -0 "$SUP" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$RTPRIO" -gt 0 ] && ! kill -0 "$SUP" 2>/dev/null && grep -q "rt-priority.*refused" "$OUT/isolated-supervisor.log"; then
    # SCHED_FIFO "where permitted": this host refuses it; every isolated run goes without
    echo "SCHED_FIFO refused by dsvisor start: $(grep -m1 'rt-priority.*refused' "$OUT/isolated-supervisor.log" | sed 's/^<[0-9]>//')" |
      tee -a "$OUT/notes.txt" >&2
    wait "$SUP" 2>/dev/null; SUP=
    RTPRIO=0
    server_start isolated
    return
  fi
  echo "run.sh: dsvisor start not ready" >&2; tail "$OUT/isolated-supervisor.log" >&2; return 1
}
server_stop() {
  if [ -n "$SUP" ]; then
    "$B/dsvisor" stop --runtime-dir "$W/run/sup" --wait-ms 30000 >/dev/null 2>&1 || kill -9 "$SUP" 2>/dev/null
    wait "$SUP" 2>/dev/null; SUP=
  fi
  local p
  for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 100); do  # up to 10 s, then SIGKILL: a hung shutdown must not stall the experiment
    local alive=0
    for p in "${SERVER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${SERVER_PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null && { echo "run.sh: pid $p ignored SIGTERM for 10 s, killed" | tee -a "$OUT/notes.txt" >&2; kill -9 "$p"; }
    wait "$p" 2>/dev/null
  done
  SERVER_PIDS=()
}

cputime() {  # cputime PID...: ns of CPU the processes used (utime + stime, all threads)
  local p tck; tck=$(getconf CLK_TCK)
  for p in "$@"; do sed 's/.*) //' /proc/"$p"/stat 2>/dev/null; done | awk -v t="$tck" '{n += $12 + $13} END {printf "%.0f\n", n * 1e9 / t}'
}
cpustat() {  # cpustat: ns busy (user, nice, system, irq, softirq) and stolen by the hypervisor
             # on the instance's CPUs, and the monotonic clock
  awk -v cpus=",$INST_CPUS," -v t="$(getconf CLK_TCK)" '$1 ~ /^cpu[0-9]+$/ && index(cpus, "," substr($1, 4) ",") {
      b += $2 + $3 + $4 + $7 + $8; st += $9 } END {printf "%.0f %.0f\n", b * 1e9 / t, st * 1e9 / t}' /proc/stat
  python3 -c "import time; print(time.monotonic_ns())"
}
rundelay() {  # rundelay PID...: ns the processes' threads spent runnable but waiting for a CPU
  local p
  for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{n += $2} END {printf "%.0f\n", n}'
}

load() {  # load plain|isolated OUTFILE [extra args]: the load generator, beside the server
  local mode=$1 f=$2; shift 2
  local cmd=("$B/dsvisor-bench-load" --url "http://127.0.0.1:$PORT" --model "$(basename "$MODEL")" --stream
    --max-tokens "$MAX_TOKENS" --prompt-len "$PROMPT" --json --timeout 120 "$@")
  if [ "$mode" = isolated ]; then
    (into "${CG_SERVE[@]}" && exec taskset -c "$HK_CPUS" "${cmd[@]}") >"$f" 2>/dev/null
  else
    "${cmd[@]}" >"$f" 2>/dev/null
  fi
}

CONFIGS=(plain-quiet isolated-quiet plain-noisy isolated-noisy)
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(uname -n), kernel $(uname -r), $(nproc) CPUs ($ALL_CPUS), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null | tr '\n' ' ')"
  echo "resctrl (memory bandwidth allocation): $(grep -q resctrl /proc/filesystems && echo available || echo 'not in this kernel/VM')"
  echo "args: reps=$REPS requests=$REQUESTS qps=$QPS max_tokens=$MAX_TOKENS prompt=$PROMPT threads=$THREADS hk_cpus=$HK_CPUS instance_cpus=$INST_CPUS noisy_shares=$NOISY_SHARES hogs=$HOGS+$HOGS hog_mib=$HOG_MIB l3_kib=$L3_KIB rt=$RTPRIO seed=$SEED+rep model=$MODEL"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/notes.txt"
cgroups_make || { echo "run.sh: could not make the cgroups for the isolated configuration" >&2; exit 1; }
echo "cgroups ($CG_KIND): serve ${CG_SERVE[*]}; noisy ${CG_NOISY[*]}" >>"$OUT/notes.txt"
echo "steadiness: $REPS reps x ${#CONFIGS[@]} configurations, $REQUESTS requests at $QPS QPS each; out $OUT"
for rep in $(seq "$REPS"); do
  for k in $(seq 0 3); do
    cfg=${CONFIGS[$(((k + rep - 1) % 4))]}
    mode=${cfg%-*} noise=${cfg#*-}
    server_start "$mode" || exit 1
    load "$mode" "$W/warmup.json" --concurrency 2 --requests 50 --seed 999   # not counted
    [ "$noise" = noisy ] && { noise_start "$mode"; sleep 2; }
    w0=$(rundelay "${WORKER_PIDS[@]}") u0=$(cputime "${WORKER_PIDS[@]}") t0=$(date -u +%T) s0=($(cpustat))
    load "$mode" "$OUT/$cfg-$rep.json" --qps "$QPS" --requests "$REQUESTS" --seed $((SEED + rep - 1))
    s1=($(cpustat))
    echo "$(($(rundelay "${WORKER_PIDS[@]}") - w0)) $(($(cputime "${WORKER_PIDS[@]}") - u0))" \
      "$((s1[0] - s0[0])) $((s1[1] - s0[1])) $((s1[2] - s0[2]))" >"$OUT/$cfg-$rep.wait"
    noise_stop
    server_stop
    python3 -c "import json; j=json.load(open('$OUT/$cfg-$rep.json')); w, u, b, st, el = map(int, open('$OUT/$cfg-$rep.wait').read().split())
print('rep %d %s %-15s sent %d completed %d errors %d lost %d  %.2f QPS  p50 %.4f  p99 %.4f  jitter %.4f s  worker: CPU %.2f ms, wait for CPU %.2f ms per request; CPU $INST_CPUS: %.1f%% busy, %.1f%% stolen' % ($rep, '$t0', '$cfg', j['sent'], j['completed'], j['errors'], j['lost'], j['qps'], j['p50_s'] or 0, j['p99_s'] or 0, j['jitter_s'], u / 1e6 / j['sent'], w / 1e6 / j['sent'], 100 * b / el / $N_INST_CPUS, 100 * st / el / $N_INST_CPUS))" |
      tee -a "$OUT/runs.txt"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/notes.txt"

python3 - "$OUT" "$REPS" "$N_INST_CPUS" <<'PY'
import json, statistics, sys
out, reps, ncpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfgs = ["plain-quiet", "plain-noisy", "isolated-quiet", "isolated-noisy"]
runs = {c: [json.load(open("%s/%s-%d.json" % (out, c, r))) for r in range(1, reps + 1)] for c in cfgs}
wait = {c: [list(map(int, open("%s/%s-%d.wait" % (out, c, r)).read().split())) for r in range(1, reps + 1)] for c in cfgs}
inf = float("inf")
def summ(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
def fmt(s, f="%.4f"):
    return (f + " (" + f + ".." + f + ")") % (s["median"], s["min"], s["max"])
summary = {"configs": {}, "ratios": {}}
print("\n| configuration | mean QPS | P50 s | P99 s | jitter s | worker CPU ms/request | worker wait for CPU ms/request | others' CPU on the instance's CPUs % | stolen % | completed/sent | errors | lost |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in cfgs:
    q = summ([j["qps"] for j in runs[c]])
    p50 = summ([j["p50_s"] or inf for j in runs[c]])
    p = summ([j["p99_s"] or inf for j in runs[c]])
    s = summ([j["jitter_s"] for j in runs[c]])
    ww = summ([w[0] / 1e6 / max(j["sent"], 1) for w, j in zip(wait[c], runs[c])])
    wu = summ([w[1] / 1e6 / max(j["sent"], 1) for w, j in zip(wait[c], runs[c])])
    # busy time of the instance's CPUs not spent by the worker: only the isolated worker
    # is confined to them, so this is what else ran there (kernel threads, interrupts,
    # processes of other users that are free on every CPU)
    oth = summ([100 * (w[2] - w[1]) / w[4] / ncpu for w in wait[c]]) if c.startswith("isolated") else None
    stl = summ([100 * w[3] / w[4] / ncpu for w in wait[c]])
    done = sum(j["completed"] for j in runs[c]); sent = sum(j["sent"] for j in runs[c])
    errs = sum(j["errors"] for j in runs[c]); lost = sum(j["lost"] for j in runs[c])
    summary["configs"][c] = {"qps": q, "p50_s": p50, "p99_s": p, "jitter_s": s, "worker_cpu_ms_per_request": wu, "others_on_instance_cpus_pct": oth, "stolen_pct": stl, "worker_cpu_wait_ms_per_request": ww,
                             "completed": done, "sent": sent, "errors": errs, "lost": lost}
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d | %d | %d |" % (c, fmt(q, "%.2f"), fmt(p50), fmt(p), fmt(s), fmt(wu, "%.2f"), fmt(ww, "%.2f"),
                                                           fmt(oth, "%.1f") if oth else "-", fmt(stl, "%.1f"),
                                                           done, sent, errs, lost))
print("\n| isolation | P99(noisy)/P99(quiet), paired per repetition: median (min..max) | per repetition | target |")
print("| --- | ---: | --- | --- |")
for mode in ("plain", "isolated"):
    rs = [(n["p99_s"] or inf) / (q["p99_s"] or inf) for q, n in zip(runs[mode + "-quiet"], runs[mode + "-noisy"])]
    r = summ(rs)
    summary["ratios"][mode] = dict(r, per_rep=rs)
    target = ("<= 1.3: " + ("met" if r["median"] <= 1.3 else "NOT met") +
              ("" if r["max"] <= 1.3 else ", %d of %d repetitions above" % (sum(x > 1.3 for x in rs), len(rs)))
              if mode == "isolated" else "-")
    print("| %s | %s | %s | %s |" % (mode, fmt(r, "%.2f"), " ".join("%.2f" % x for x in rs), target))
json.dump(summary, open(out + "/summary.json", "w"), indent=1)
PY
echo; echo "notes:"; cat "$OUT/notes.txt"
[ -f "$OUT/isolated-status.json" ] && python3 -c "
import json; j=json.load(open('$OUT/isolated-status.json'))
print('isolated: cgroups', j.get('cgroups'))
for i in j['instances']:
    print('  instance', i['name'], 'cpus', i['cpus'], 'threads', i.get('threads'), 'sched', i['sched'], 'cgroup', i['cgroup'])
    for l in i.get('limits', []):
        print('    limit', l.get('limit'), l.get('value'), 'in effect' if l.get('in_effect') else 'NOT in effect: ' + str(l.get('reason')))
"
