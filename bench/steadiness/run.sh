#!/usr/bin/env bash
# The steadiness experiment (issue 9 item 2): the same load with and without isolation,
# each quiet and beside a noisy neighbour, and how much the neighbour moves the tail.
#
#   bench/steadiness/run.sh [--reps 3] [--requests 3000] [--qps 40] [--max-tokens 4]
#       [--prompt-len uniform:4:16] [--instances 1] [--threads 1] [--rt-priority 10]
#       [--model DIR] [--seed 1] [--hogs N] [--build-dir DIR] [--out DIR]
#
# Configurations:
#   plain     dsvisor-gateway-test-server (the same gateway library) in front of
#             dsvisor-worker processes started by hand: no cgroup, no pinning, SCHED_OTHER.
#   isolated  dsvisor start: a cgroup per worker, threads pinned to their cores, SCHED_FIFO
#             at --rt-priority where the kernel permits (else the supervisor's fallback,
#             recorded from `dsvisor status`).
#   each quiet, and noisy: N CPU hogs (`yes`) plus N memory-bandwidth hogs (`dd` of 64 MiB
#   blocks from /dev/zero) started in a sibling cgroup created for them (v2: next to the
#   supervisor's own cgroup; v1: in each of the cpu, cpuset and memory hierarchies);
#   where no cgroup can be made they run as plain processes and the report says so.
#
# Method: every run sends the same requests on the same schedule (dsvisor-bench-load
# --requests N --qps Q --seed S: Poisson arrivals, short streamed requests, so P99 is a
# real percentile of thousands of samples, not the maximum), after a warm-up that is not
# counted. The four configurations run in a rotated order in each repetition, so slow
# drift of the shared machine does not favour one. Reported per configuration: the median
# over repetitions of achieved QPS, P99 and jitter (standard deviation of the latency),
# with the min..max spread; and per isolation mode the ratio P99(noisy)/P99(quiet), formed
# within each repetition (paired) and summarised the same way. Target: isolated <= 1.3.
# Raw JSON of every run and summary.json go to OUT (default a new /tmp/dsv-steady.*).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
REPS=3 REQUESTS=3000 QPS=40 MAX_TOKENS=4 PROMPT=uniform:4:16 INSTANCES=1 THREADS=1 RTPRIO=10
MODEL=$SRC/models/default SEED=1 HOGS=$(nproc) BUILD=$SRC/build OUT=
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2 ;; --requests) REQUESTS=$2 ;; --qps) QPS=$2 ;; --max-tokens) MAX_TOKENS=$2 ;;
    --prompt-len) PROMPT=$2 ;; --instances) INSTANCES=$2 ;; --threads) THREADS=$2 ;;
    --rt-priority) RTPRIO=$2 ;; --model) MODEL=$2 ;; --seed) SEED=$2 ;; --hogs) HOGS=$2 ;;
    --build-dir) BUILD=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
SERVER_PIDS=() HOG_PIDS=() SUP= NOISY_CG=()
cleanup() {
  noise_stop
  server_stop
  rm -rf "$W"
}
trap cleanup EXIT

# ---- noisy neighbour ----
noise_cgroups() {  # creates the sibling cgroup(s) once; NOISY_CG lists their directories
  [ ${#NOISY_CG[@]} -gt 0 ] && return
  local name=dsv-steady-noisy-$$
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    local own; own=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
    local d=/sys/fs/cgroup${own%/*}/$name
    mkdir "$d" 2>/dev/null && NOISY_CG+=("$d")
  else
    local c
    for c in cpu cpuset memory; do
      local root; root=$(awk -v c="$c" '$3 == "cgroup" && $4 ~ "(^|,)" c "(,|$)" {print $2; exit}' /proc/mounts)
      [ -n "$root" ] || continue
      local rel; rel=$(awk -F: -v c="$c" '$2 ~ "(^|,)" c "(,|$)" {print $3}' /proc/self/cgroup)
      local d=$root${rel%/*}/$name
      mkdir "$d" 2>/dev/null || continue
      if [ "$c" = cpuset ]; then
        cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus" 2>/dev/null
        cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems" 2>/dev/null
      fi
      NOISY_CG+=("$d")
    done
  fi
  echo "noisy neighbour cgroups: ${NOISY_CG[*]:-none (hogs run as plain processes)}" | tee -a "$OUT/notes.txt"
}
noise_start() {
  noise_cgroups
  local i
  for i in $(seq "$HOGS"); do
    yes >/dev/null & HOG_PIDS+=($!)
    dd if=/dev/zero of=/dev/null bs=64M count=100000000 status=none & HOG_PIDS+=($!)
  done
  local d p
  for d in "${NOISY_CG[@]}"; do
    for p in "${HOG_PIDS[@]}"; do echo "$p" >"$d/cgroup.procs" 2>/dev/null; done
  done
}
noise_stop() {
  local p
  for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${HOG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  HOG_PIDS=()
}
remove_noise_cgroups() {
  local d
  for d in "${NOISY_CG[@]}"; do rmdir "$d" 2>/dev/null; done
}

# ---- servers ----
PORT=
server_start() {  # server_start plain|isolated
  rm -rf "$W/run"; mkdir -m 700 "$W/run"
  if [ "$1" = plain ]; then
    local args=() i
    for i in $(seq 0 $((INSTANCES - 1))); do
      "$B/dsvisor-worker" --model "$MODEL" --listen "ipc://$W/run/w$i.sock" --threads "$THREADS" \
        --instance "w$i" 2>>"$OUT/plain-workers.log" &
      SERVER_PIDS+=($!)
      args+=(--instance "w$i=ipc://$W/run/w$i.sock")
    done
    "$B/dsvisor-gateway-test-server" --model "$(basename "$MODEL")" --port-file "$W/run/port" "${args[@]}" \
      --health-ms 200 </dev/null >/dev/null 2>>"$OUT/plain-gateway.log" &
    SERVER_PIDS+=($!)
    for _ in $(seq 100); do [ -s "$W/run/port" ] && break; sleep 0.1; done
    PORT=$(cat "$W/run/port")
    for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && return 0; sleep 0.1; done
    echo "run.sh: plain server not ready" >&2; return 1
  fi
  "$B/dsvisor" start --model "$MODEL" --instances "$INSTANCES" --threads-per-instance "$THREADS" \
    --rt-priority "$RTPRIO" --port 0 --runtime-dir "$W/run/sup" >>"$OUT/isolated-supervisor.log" 2>&1 &
  SUP=$!
  for _ in $(seq 1200); do
    if "$B/dsvisor" status --json --runtime-dir "$W/run/sup" >"$W/status.json" 2>/dev/null &&
       python3 -c "import json,sys; j=json.load(open('$W/status.json')); sys.exit(0 if j['instances_ready'] == j['instances_total'] else 1)"; then
      PORT=$(python3 -c "import json; print(json.load(open('$W/status.json'))['port'])")
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

load() {  # load OUTFILE [extra args]: the measured run
  local f=$1; shift
  "$B/dsvisor-bench-load" --url "http://127.0.0.1:$PORT" --model "$(basename "$MODEL")" --stream \
    --max-tokens "$MAX_TOKENS" --prompt-len "$PROMPT" --json --timeout 120 "$@" >"$f" 2>/dev/null
}

CONFIGS=(plain-quiet isolated-quiet plain-noisy isolated-noisy)
echo "steadiness: $REPS reps x ${#CONFIGS[@]} configurations, $REQUESTS requests at $QPS QPS each, seed $SEED; out $OUT"
{
  echo "date: $(date -u +%FT%TZ)"; echo "kernel: $(uname -r)"; echo "cpus: $(nproc)"
  echo "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null | tr '\n' ' ')"
  echo "args: reps=$REPS requests=$REQUESTS qps=$QPS max_tokens=$MAX_TOKENS prompt=$PROMPT instances=$INSTANCES threads=$THREADS rt=$RTPRIO model=$MODEL"
} >"$OUT/notes.txt"
for rep in $(seq "$REPS"); do
  for k in $(seq 0 3); do
    cfg=${CONFIGS[$(((k + rep - 1) % 4))]}
    mode=${cfg%-*} noise=${cfg#*-}
    server_start "$mode" || exit 1
    load "$W/warmup.json" --concurrency 2 --requests 50 --seed 999   # not counted
    [ "$noise" = noisy ] && { noise_start; sleep 2; }
    load "$OUT/$cfg-$rep.json" --qps "$QPS" --requests "$REQUESTS" --seed "$SEED"
    noise_stop
    server_stop
    python3 -c "import json; j=json.load(open('$OUT/$cfg-$rep.json')); print('rep %d %-15s sent %d completed %d errors %d lost %d  %.2f QPS  p50 %.4f  p99 %.4f  jitter %.4f s' % ($rep, '$cfg', j['sent'], j['completed'], j['errors'], j['lost'], j['qps'], j['p50_s'] or 0, j['p99_s'] or 0, j['jitter_s']))"
  done
done
remove_noise_cgroups

python3 - "$OUT" "$REPS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
cfgs = ["plain-quiet", "plain-noisy", "isolated-quiet", "isolated-noisy"]
runs = {c: [json.load(open("%s/%s-%d.json" % (out, c, r))) for r in range(1, reps + 1)] for c in cfgs}
def summ(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
summary = {"configs": {}, "ratios": {}}
print("\n| configuration | mean QPS | P99 s | jitter s | completed/sent | lost |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for c in cfgs:
    q = summ([j["qps"] for j in runs[c]])
    p = summ([j["p99_s"] or float("inf") for j in runs[c]])
    s = summ([j["jitter_s"] for j in runs[c]])
    done = sum(j["completed"] for j in runs[c]); sent = sum(j["sent"] for j in runs[c])
    lost = sum(j["lost"] for j in runs[c])
    summary["configs"][c] = {"qps": q, "p99_s": p, "jitter_s": s, "completed": done, "sent": sent, "lost": lost}
    print("| %s | %.2f (%.2f..%.2f) | %.4f (%.4f..%.4f) | %.4f (%.4f..%.4f) | %d/%d | %d |"
          % (c, q["median"], q["min"], q["max"], p["median"], p["min"], p["max"], s["median"], s["min"], s["max"], done, sent, lost))
print("\n| isolation | P99(noisy)/P99(quiet), paired per repetition | target |")
print("| --- | ---: | --- |")
for mode in ("plain", "isolated"):
    r = summ([(n["p99_s"] or float("inf")) / (q["p99_s"] or float("inf"))
              for q, n in zip(runs[mode + "-quiet"], runs[mode + "-noisy"])])
    summary["ratios"][mode] = r
    verdict = ("met" if r["median"] <= 1.3 else "NOT met") if mode == "isolated" else "-"
    print("| %s | %.2f (%.2f..%.2f) | %s |" % (mode, r["median"], r["min"], r["max"], "<= 1.3 " + verdict if mode == "isolated" else verdict))
json.dump(summary, open(out + "/summary.json", "w"), indent=1)
PY
echo "notes:"; cat "$OUT/notes.txt"
[ -f "$OUT/isolated-status.json" ] && python3 -c "
import json; j=json.load(open('$OUT/isolated-status.json'))
print('isolated: cgroups', j.get('cgroups'), '; rt_fallbacks', j.get('rt_fallbacks'))
for i in j['instances']:
    print('  instance', i['name'], 'cpus', i['cpus'], 'sched', i['sched'], 'cgroup', i['cgroup'])
    for l in i.get('limits', []):
        print('    limit', l.get('limit'), l.get('value'), 'in effect' if l.get('in_effect') else 'NOT in effect: ' + str(l.get('reason')))
"
