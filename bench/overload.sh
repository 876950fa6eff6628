#!/usr/bin/env bash
# Overload: dsvisor start with the real worker under open-loop load at multiples of its
# measured capacity; every request must end with an HTTP status line.
#
#   bench/overload.sh [--instances 1] [--threads 1] [--duration 15] [--max-tokens 64]
#       [--prompt-len 16] [--factors "0.7 1 2 5 10"] [--capacity QPS] [--model DIR]
#       [--max-queue N] [--seed 1] [--housekeeping-cpus LIST] [--client-cpus LIST]
#       [--build-dir DIR] [--out DIR]
#
# Capacity is measured first (unless --capacity is given): closed loop with as many
# requests in flight as the instances run at once plus their queues (max-batch 8 +
# --max-queue, per instance) for --duration seconds; its completed QPS is "100 %". Then
# for each load factor F an open-loop Poisson run at F x capacity for --duration seconds
# (dsvisor-bench-load --qps, no client-side cap on requests in flight), each after the
# previous one's requests have drained. Printed per factor: offered and completed QPS,
# P50/P99 latency of the completed requests, refusals (429, 503, and by reason from
# dsvisor_requests_rejected_total and dsvisor_connections_refused_total, the run's
# difference), refusals without Retry-After, and lost (no HTTP answer). Then the checks:
# lost 0 everywhere, P99 at 5x within 1.5x of P99 at 0.7x, completed QPS at 5x at least
# 0.95x the capacity. Raw JSON and metrics go to OUT (default a new /tmp/dsv-overload.*).
# --housekeeping-cpus is passed to `dsvisor start` (the gateway's CPUs, kept from the
# instances); --client-cpus pins the load generator (taskset), which on a small host stands
# in for clients on other machines: without it the client competes with the worker.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
INSTANCES=1 THREADS=1 DURATION=15 MAX_TOKENS=64 PROMPT=16 FACTORS="0.7 1 2 5 10" CAPACITY= MODEL=
MAX_QUEUE=8 SEED=1 BUILD=$SRC/build OUT= HOUSEKEEPING= CLIENT_CPUS=
while [ $# -gt 0 ]; do
  case "$1" in
    --instances) INSTANCES=$2 ;; --threads) THREADS=$2 ;; --duration) DURATION=$2 ;;
    --max-tokens) MAX_TOKENS=$2 ;; --prompt-len) PROMPT=$2 ;; --factors) FACTORS=$2 ;;
    --capacity) CAPACITY=$2 ;; --model) MODEL=$2 ;; --max-queue) MAX_QUEUE=$2 ;; --seed) SEED=$2 ;;
    --housekeeping-cpus) HOUSEKEEPING=$2 ;; --client-cpus) CLIENT_CPUS=$2 ;;
    --build-dir) BUILD=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "overload.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
B=$BUILD/bin
. "$SRC/bench/start-dsvisor.sh"
for f in dsvisor dsvisor-worker dsvisor-bench-load; do
  [ -x "$B/$f" ] || { echo "overload.sh: $B/$f is not built" >&2; exit 2; }
done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/dsv-overload.XXXXXX)
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/dsv-overload-run.XXXXXX)   # 0700: private IPC sockets
SUP=
cleanup() {
  [ -n "$SUP" ] && { "$B/dsvisor" stop --runtime-dir "$RUN/run" --wait-ms 30000 >/dev/null 2>&1 || kill -9 "$SUP"; }
  wait 2>/dev/null
  rm -rf "$RUN"
}
trap cleanup EXIT

args=(--instances "$INSTANCES" --threads-per-instance "$THREADS" --max-queue "$MAX_QUEUE" --port 0)
[ -n "$MODEL" ] && args+=(--model "$MODEL")
[ -n "$HOUSEKEEPING" ] && args+=(--housekeeping-cpus "$HOUSEKEEPING")
start_dsvisor overload.sh "${args[@]}"
URL=http://127.0.0.1:$PORT
CLIENT=()
[ -n "$CLIENT_CPUS" ] && CLIENT=(taskset -c "$CLIENT_CPUS")
LOAD=("${CLIENT[@]}" "$B/dsvisor-bench-load" --url "$URL" --prompt-len "$PROMPT" --max-tokens "$MAX_TOKENS" --timeout 120
      --drain 120 --max-inflight 100000 --json)
echo "overload: dsvisor pid $SUP on port $PORT, $INSTANCES instance(s) of $THREADS thread(s), max-queue $MAX_QUEUE;" \
     "prompt $PROMPT words, $MAX_TOKENS tokens, $DURATION s per run;" \
     "housekeeping CPUs ${HOUSEKEEPING:-default}, client CPUs ${CLIENT_CPUS:-any}; $(date -u +%FT%TZ) on $(nproc) CPUs," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/report.txt"

# warm-up, uncounted
"${LOAD[@]}" --concurrency 2 --requests 8 --seed "$SEED" >/dev/null 2>&1
if [ -z "$CAPACITY" ]; then
  "${LOAD[@]}" --concurrency $(( INSTANCES * (8 + MAX_QUEUE) )) --duration "$DURATION" --seed "$SEED" \
    >"$OUT/capacity.json" 2>"$OUT/capacity.err"
  CAPACITY=$(python3 -c "import json; print('%.2f' % json.load(open('$OUT/capacity.json'))['qps'])")
fi
echo "capacity: $CAPACITY completed QPS" | tee -a "$OUT/report.txt"

for f in $FACTORS; do
  qps=$(python3 -c "print('%.2f' % ($f * $CAPACITY))")
  curl -s "$URL/metrics" >"$OUT/metrics-before-$f.txt"
  "${LOAD[@]}" --qps "$qps" --duration "$DURATION" --seed "$SEED" >"$OUT/load-$f.json" 2>"$OUT/load-$f.err"
  curl -s "$URL/metrics" >"$OUT/metrics-after-$f.txt"
done

python3 - "$OUT" "$CAPACITY" $FACTORS <<'PY' | tee -a "$OUT/report.txt"
import json, re, sys
out, capacity, factors = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
def refusals(path):
    r = {}
    for line in open(path):
        m = re.match(r'dsvisor_requests_rejected_total\{reason="(\w+)"\} (\d+)', line)
        if m: r[m.group(1)] = int(m.group(2))
        m = re.match(r'dsvisor_connections_refused_total (\d+)', line)
        if m: r['connection_limit'] = int(m.group(1))
    return r
def ms(v): return '%.0f' % (v * 1000) if v is not None else '-'
print('%-6s %8s %9s %8s %8s %6s %6s %9s %5s  %s' % ('factor', 'offered', 'completed', 'P50 ms', 'P99 ms',
      '429', '503', 'no R-A', 'lost', 'rejected by reason'))
rows = {}
for f in factors:
    j = json.load(open('%s/load-%s.json' % (out, f)))
    a, b = refusals('%s/metrics-before-%s.txt' % (out, f)), refusals('%s/metrics-after-%s.txt' % (out, f))
    why = ', '.join('%s %d' % (k, b[k] - a.get(k, 0)) for k in sorted(b) if b[k] - a.get(k, 0))
    rows[f] = j
    print('%-6s %8.1f %9.1f %8s %8s %6d %6d %9d %5d  %s' % (f, j['target_qps'], j['qps'], ms(j['p50_s']),
          ms(j['p99_s']), j['rejected_429'], j['rejected_503'], j['rejected_without_retry_after'], j['lost'],
          why or '-'))
lost = sum(j['lost'] + j['errors'] - j['rejected_429'] - j['rejected_503'] for j in rows.values())
print('every request answered (lost 0, no other errors): %s' % ('yes' if lost == 0 else 'NO (%d)' % lost))
if '0.7' in rows and '5' in rows and rows['0.7']['p99_s'] and rows['5']['p99_s']:
    r = rows['5']['p99_s'] / rows['0.7']['p99_s']
    print('P99 at 5x / P99 at 0.7x: %.2f (target <= 1.5)' % r)
if '5' in rows:
    print('completed QPS at 5x / capacity: %.2f (target >= 0.95)' % (rows['5']['qps'] / capacity))
    if '1' in rows and rows['1']['qps']:
        print('completed QPS at 5x / completed at 1x (open loop): %.2f' % (rows['5']['qps'] / rows['1']['qps']))
PY
