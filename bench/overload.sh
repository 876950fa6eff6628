#!/usr/bin/env bash
# Overload: dsvisor start with the real worker under open-loop load at multiples of its
# measured capacity; every request must end with an HTTP status line.
#
#   bench/overload.sh [--instances 1] [--threads 1] [--duration 15] [--max-tokens 64]
#       [--prompt-len 16] [--factors "0.7 1 2 5 10"] [--rounds 3] [--slices 1] [--capacity QPS]
#       [--model DIR] [--max-batch B] [--max-queue N] [--max-queue-wait-pct P] [--seed 1]
#       [--housekeeping-cpus LIST]
#       [--client-cpus auto|any|LIST] [--build-dir DIR] [--out DIR]
#
# --max-batch (default 8, the worker's own default), --max-queue (default 8) and
# --max-queue-wait-pct (default 50, dsvisor's own default) go to `dsvisor start` as they are.
# --rounds rounds on one running dsvisor, each measuring capacity and then every load
# factor, so each round's ratios are same-run and the spread between rounds shows how far
# one run can be trusted (about 5 minutes with the defaults on a quiet host). Capacity is
# measured first in each round (unless --capacity is given): closed loop with as many
# requests in flight as the instances run at once plus the queues they keep (--max-batch
# + --max-queue per instance, or fewer: the queue wait bound, --max-queue-wait-pct P of a
# service time, is a queue of P % of the full batch) for --duration seconds, so no
# client spins on refusals; its completed QPS is that round's "100 %". Then for each
# load factor F an open-loop Poisson run at F x that capacity for --duration seconds
# (dsvisor-bench-load --qps, no client-side cap on requests in flight),
# each after the previous one's requests have drained; odd rounds go up the factors, even
# rounds down, so a drift of the host over the run does not favour one factor. With
# --slices N the round runs in N passes of --duration/N seconds per run: each pass
# measures capacity again (a closed-loop slice) and then runs every factor at that
# capacity (the order reversed every other pass: 0.7 5 5 0.7 0.7 5 ...), so on a host
# whose speed drifts over minutes a factor still means that share of what the host can
# do then, and the factors share its slower and faster minutes instead of each having
# its own; a factor's slices (and the capacity's) are then reported as one run (counts
# and times added up, latency quantiles over the pooled histograms). Printed per run:
# offered and completed QPS, P50/P99 latency of the completed requests, refusals
# (429, 503, and by reason from dsvisor_requests_rejected_total and
# dsvisor_connections_refused_total, the run's difference), refusals without Retry-After,
# and lost (no HTTP answer); then where the CPU went: the share of the run the worker's
# step thread ran, waited runnable (run delay: another thread had its CPU) and slept
# (nothing to step), the tokens per engine step (from the worker's stats, polled each
# second), the step thread's CPU time per step and per token carried (what a step costs,
# apart from the time other threads held its CPU), and the CPU of the supervisor (gateway
# included) and of the load generator;
# and where a completed request's time went, on average: waiting in the worker's queue,
# prefill, decode, and the rest (gateway, IPC), from /metrics.
# Then the checks, per round and as the median (min..max) over the rounds: lost 0
# everywhere, P99 at 5x within 1.5x of P99 at 0.7x, completed QPS at 5x at least 0.95x the
# round's capacity. Raw JSON and metrics go to OUT (default a new /tmp/dsv-overload.*).
# The placement is printed first: the CPUs of the worker's step thread, of the
# supervisor's threads and of the load generator. --housekeeping-cpus is passed to
# `dsvisor start` (the gateway's CPUs, kept from the instances); --client-cpus pins the
# load generator (taskset). By default (--client-cpus auto) the load generator is pinned
# to the CPUs that no worker compute thread is pinned to (the worker's step thread and its
# pool threads each have one CPU), when there are any: a deployment's clients are on other
# machines, and on a small host the client's own CPU for sending and refusing requests
# would otherwise be taken from the worker's step thread and counted against the server.
# --client-cpus any leaves it unpinned; the placement line says which applied.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
INSTANCES=1 THREADS=1 DURATION=15 MAX_TOKENS=64 PROMPT=16 FACTORS="0.7 1 2 5 10" ROUNDS=3 SLICES=1 CAPACITY= MODEL=
MAX_BATCH=8 MAX_QUEUE=8 QUEUE_WAIT_PCT=50 SEED=1 BUILD=$SRC/build OUT= HOUSEKEEPING= CLIENT_CPUS=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --instances) INSTANCES=$2 ;; --threads) THREADS=$2 ;; --duration) DURATION=$2 ;;
    --max-tokens) MAX_TOKENS=$2 ;; --prompt-len) PROMPT=$2 ;; --factors) FACTORS=$2 ;;
    --rounds) ROUNDS=$2 ;; --slices) SLICES=$2 ;;
    --capacity) CAPACITY=$2 ;; --model) MODEL=$2 ;; --max-queue) MAX_QUEUE=$2 ;; --max-batch) MAX_BATCH=$2 ;; --seed) SEED=$2 ;;
    --max-queue-wait-pct) QUEUE_WAIT_PCT=$2 ;;
    --housekeeping-cpus) HOUSEKEEPING=$2 ;; --client-cpus) CLIENT_CPUS=$2 ;;
    --build-dir) BUILD=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,54p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "overload.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
case "$MAX_BATCH" in ''|*[!0-9]*|0) echo "overload.sh: --max-batch must be a whole number above 0, not '$MAX_BATCH'" >&2; exit 2 ;; esac
case "$QUEUE_WAIT_PCT" in ''|*[!0-9]*) echo "overload.sh: --max-queue-wait-pct must be a whole number, not '$QUEUE_WAIT_PCT'" >&2; exit 2 ;; esac
# the queue each instance keeps at capacity: --max-queue, or what the wait bound holds
KEPT_QUEUE=$(( QUEUE_WAIT_PCT > 0 && (MAX_BATCH * QUEUE_WAIT_PCT + 99) / 100 < MAX_QUEUE ? (MAX_BATCH * QUEUE_WAIT_PCT + 99) / 100 : MAX_QUEUE ))
case "$ROUNDS" in ''|*[!0-9]*|0) echo "overload.sh: --rounds must be a whole number above 0, not '$ROUNDS'" >&2; exit 2 ;; esac
case "$SLICES" in ''|*[!0-9]*|0) echo "overload.sh: --slices must be a whole number above 0, not '$SLICES'" >&2; exit 2 ;; esac
SLICE_S=$(python3 -c "print('%g' % ($DURATION / $SLICES))")
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

args=(--instances "$INSTANCES" --threads-per-instance "$THREADS" --max-batch "$MAX_BATCH" --max-queue "$MAX_QUEUE"
      --max-queue-wait-pct "$QUEUE_WAIT_PCT" --port 0)
[ -n "$MODEL" ] && args+=(--model "$MODEL")
[ -n "$HOUSEKEEPING" ] && args+=(--housekeeping-cpus "$HOUSEKEEPING")
start_dsvisor overload.sh "${args[@]}"
URL=http://127.0.0.1:$PORT
if [ "$CLIENT_CPUS" = auto ]; then
  # every CPU given to this script less the ones a worker thread alone is pinned to
  CLIENT_CPUS=$(python3 - "$RUN/status.json" <<'PY'
import glob, json, os, sys
compute = set()
for inst in json.load(open(sys.argv[1]))['instances']:
    for status in glob.glob('/proc/%d/task/*/status' % inst['pid']) if inst['pid'] > 0 else []:
        try:
            allowed = [l.split()[1] for l in open(status) if l.startswith('Cpus_allowed_list:')][0]
        except (OSError, IndexError):
            continue
        if allowed.isdigit():
            compute.add(int(allowed))
print(','.join(str(c) for c in sorted(os.sched_getaffinity(0) - compute)))
PY
)
  CLIENT_WHY="the CPUs free of worker compute threads (--client-cpus auto)"
  [ -n "$CLIENT_CPUS" ] || { CLIENT_CPUS=any; CLIENT_WHY="every CPU has a worker compute thread"; }
else
  CLIENT_WHY="--client-cpus $CLIENT_CPUS"
fi
CLIENT=()
[ "$CLIENT_CPUS" != any ] && CLIENT=(taskset -c "$CLIENT_CPUS")
LOAD=("${CLIENT[@]}" "$B/dsvisor-bench-load" --url "$URL" --prompt-len "$PROMPT" --max-tokens "$MAX_TOKENS" --timeout 120
      --drain 120 --max-inflight 100000 --json)
# The first instance's worker: its main thread (tid = pid) drives every engine step.
WORKER=$(python3 -c "import json; print(json.load(open('$RUN/status.json'))['instances'][0]['pid'])")
# affinity TID: the thread's allowed CPUs
affinity() { taskset -pc "$1" 2>/dev/null | sed 's/.*: //'; }
sup_cpus=$(for t in /proc/"$SUP"/task/*; do affinity "${t##*/}"; done | sort -u | paste -sd' ')
echo "overload: dsvisor pid $SUP on port $PORT, $INSTANCES instance(s) of $THREADS thread(s), max-queue $MAX_QUEUE," \
     "max-batch $MAX_BATCH, max-queue-wait-pct $QUEUE_WAIT_PCT (capacity with $(( MAX_BATCH + KEPT_QUEUE )) in flight per instance);" \
     "prompt $PROMPT words, $MAX_TOKENS tokens, $DURATION s per run in $SLICES slice(s), $ROUNDS round(s);" \
     "housekeeping CPUs ${HOUSEKEEPING:-default}, client CPUs $CLIENT_CPUS; $(date -u +%FT%TZ) on $(nproc) CPUs," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/report.txt"
echo "placement: worker $WORKER step thread on CPUs $(affinity "$WORKER"), its other threads on" \
     "$(for t in /proc/"$WORKER"/task/*; do [ "${t##*/}" = "$WORKER" ] || affinity "${t##*/}"; done | sort -u | paste -sd' ');" \
     "supervisor threads (gateway included) on $sup_cpus; load generator on CPUs $CLIENT_CPUS ($CLIENT_WHY)" |
  tee -a "$OUT/report.txt"

# sample NAME: the worker step thread's schedstat (run ns, run-delay ns) and the
# supervisor's CPU ticks (every thread, exited ones included) into $OUT/NAME
sample() {
  echo "$(cut -d' ' -f1-2 /proc/"$WORKER"/task/"$WORKER"/schedstat 2>/dev/null || echo '- -')" \
       "$(awk '{ print $14 + $15 }' /proc/"$SUP"/stat)" >"$OUT/$1"
}
# run NAME LOAD-OPTIONS...: one load run into $OUT/NAME.json, with /metrics, the samples
# and the load generator's CPU time (real, user, system seconds) around it
run() {
  local n=$1; shift
  curl -s "$URL/metrics" >"$OUT/$n.metrics-before"
  sample "$n.sample-before"
  { TIMEFORMAT='%R %U %S'; time "${LOAD[@]}" "$@" --seed "$SEED" >"$OUT/$n.json" 2>"$OUT/$n.err"; } 2>"$OUT/$n.client-cpu"
  sample "$n.sample-after"
  curl -s "$URL/metrics" >"$OUT/$n.metrics-after"
}

# warm-up, uncounted
"${LOAD[@]}" --concurrency 2 --requests 8 --seed "$SEED" >/dev/null 2>&1
# measure_capacity NAME: a closed-loop run into NAME; prints its completed QPS
measure_capacity() {
  run "$1" --concurrency $(( INSTANCES * (MAX_BATCH + KEPT_QUEUE) )) --duration "$2"
  python3 -c "import json; print('%.2f' % json.load(open('$OUT/$1.json'))['qps'])"
}
for r in $(seq "$ROUNDS"); do
  order=$FACTORS
  [ $((r % 2)) = 0 ] && order=$(echo "$FACTORS" | tr ' ' '\n' | tac | paste -sd' ')
  caps=
  for k in $(seq "$SLICES"); do
    o=$order name_k=
    [ "$SLICES" -gt 1 ] && name_k=-s$k
    [ $((k % 2)) = 0 ] && o=$(echo "$order" | tr ' ' '\n' | tac | paste -sd' ')
    cap=$CAPACITY
    [ -z "$CAPACITY" ] && cap=$(measure_capacity "r$r-capacity$name_k" "$SLICE_S")
    caps="$caps $cap"
    for f in $o; do
      run "r$r-$f$name_k" --qps "$(python3 -c "print('%.2f' % ($f * $cap))")" --duration "$SLICE_S"
    done
  done
  echo "${caps# }" >"$OUT/r$r-capacity.qps"
  echo "round $r: capacity${caps} completed QPS (per slice); factors in the order $order" | tee -a "$OUT/report.txt"
done

python3 - "$OUT" "$ROUNDS" "$SLICES" "$(getconf CLK_TCK)" "$SRC" $FACTORS <<'PY' | tee -a "$OUT/report.txt"
import json, os, re, statistics, sys
out, rounds, slices, tck, factors = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[6:]
sys.path.insert(0, os.path.join(sys.argv[5], 'bench', 'load'))
import pool
PHASES = ('e2e_request_latency', 'request_queue_time', 'request_prefill_time', 'request_decode_time')
def metrics(path):
    r, it, ph = {}, [0.0, 0.0], {}
    for line in open(path):
        m = re.match(r'dsvisor_requests_rejected_total\{reason="(\w+)"\} (\d+)', line)
        if m: r[m.group(1)] = int(m.group(2))
        m = re.match(r'dsvisor_connections_refused_total (\d+)', line)
        if m: r['connection_limit'] = int(m.group(1))
        m = re.match(r'dsvisor_iteration_tokens_(sum|count)\{[^}]*\} ([0-9.e+]+)', line)
        if m: it[m.group(1) == 'count'] += float(m.group(2))
        m = re.match(r'dsvisor_(%s)_seconds_(sum|count)\{[^}]*\} ([-0-9.e+]+)' % '|'.join(PHASES), line)
        if m: ph[m.groups()[:2]] = ph.get(m.groups()[:2], 0.0) + float(m.group(3))
    return r, it, ph
def ms(v): return '%.0f' % (v * 1000) if v is not None else '-'
def pct(v): return '%.0f' % (v * 100) if v is not None else '-'
COUNTS = ('sent', 'completed', 'errors', 'lost', 'rejected_429', 'rejected_503', 'rejected_without_retry_after',
          'elapsed_s')
def measure(n):
    """One load run's additive quantities: the report's counts, the differences of /metrics
    and of the samples around it, and its wall and CPU time."""
    j = json.load(open(n + '.json'))
    (a, ia, pa), (b, ib, pb) = metrics(n + '.metrics-before'), metrics(n + '.metrics-after')
    s0, s1 = open(n + '.sample-before').read().split(), open(n + '.sample-after').read().split()
    wall, user, sys_ = map(float, open(n + '.client-cpu').read().split()[-3:])
    m = {k: j[k] for k in COUNTS}
    m['report'], m['target_qps'] = j, j['target_qps']
    m['why'] = {k: b[k] - a.get(k, 0) for k in b}
    m['steps'], m['step_tokens'] = ib[1] - ia[1], ib[0] - ia[0]
    m['phases'] = {k: pb.get(k, 0) - pa.get(k, 0) for k in pb}
    m['wall'], m['client_s'] = wall, user + sys_
    m['sup_s'] = (float(s1[2]) - float(s0[2])) / tck
    m['run_ns'] = m['delay_ns'] = None
    if s0[0] != '-' and s1[0] != '-':
        m['run_ns'], m['delay_ns'] = int(s1[0]) - int(s0[0]), int(s1[1]) - int(s0[1])
    return m
def combine(parts):
    """The slices of one (round, factor) as one run: counts, times and /metrics add up;
    latency quantiles over the pooled histograms (bench/load/pool.py)."""
    j = {k: sum(p[k] for p in parts) for k in COUNTS}
    # offered: each slice's rate over its time (a pass offers F x its own capacity)
    j['target_qps'] = sum((p['target_qps'] or 0) * p['elapsed_s'] for p in parts) / j['elapsed_s'] \
        if parts[0]['target_qps'] and j['elapsed_s'] > 0 else parts[0]['target_qps']
    j['qps'] = j['completed'] / j['elapsed_s'] if j['elapsed_s'] > 0 else 0
    reports = [p['report'] for p in parts]
    j['p50_s'], j['p99_s'] = pool.quantile(reports, 0.5), pool.quantile(reports, 0.99)
    why = {}
    for p in parts:
        for k, v in p['why'].items():
            why[k] = why.get(k, 0) + v
    j['why'] = ', '.join('%s %d' % (k, why[k]) for k in sorted(why) if why[k])
    steps, tokens = sum(p['steps'] for p in parts), sum(p['step_tokens'] for p in parts)
    j['tokens_per_step'] = tokens / steps if steps > 0 else None
    ph = {}
    for p in parts:
        for k, v in p['phases'].items():
            ph[k] = ph.get(k, 0) + v
    done = ph.get((PHASES[0], 'count'), 0)
    j['phases'] = [ph.get((k, 'sum'), 0) / done for k in PHASES] if done > 0 else None
    wall = sum(p['wall'] for p in parts)
    j['client_cpu'] = sum(p['client_s'] for p in parts) / wall
    j['sup_cpu'] = sum(p['sup_s'] for p in parts) / wall
    if all(p['run_ns'] is not None for p in parts):
        run_s = sum(p['run_ns'] for p in parts) / 1e9
        j['w_run'] = run_s / wall
        j['w_delay'] = sum(p['delay_ns'] for p in parts) / 1e9 / wall
        j['w_idle'] = max(0.0, 1 - j['w_run'] - j['w_delay'])
        # the step thread's CPU time per engine step and per token it carried: what a
        # step costs, apart from the time others' threads held its CPU
        j['step_cpu_ms'] = run_s * 1e3 / steps if steps > 0 else None
        j['token_cpu_us'] = run_s * 1e6 / tokens if tokens > 0 else None
    return j
runs = {}
for r in range(1, rounds + 1):
    for f in ['capacity'] + factors:
        names = ['%s/r%d-%s' % (out, r, f)] if slices == 1 else \
                ['%s/r%d-%s-s%d' % (out, r, f, k) for k in range(1, slices + 1)]
        parts = []
        for n in names:
            try:
                parts.append(measure(n))
            except (OSError, ValueError):
                continue
        if parts:
            runs[(r, f)] = combine(parts)
print('%-5s %-8s %8s %9s %7s %7s %6s %6s %6s %5s  %s' % ('round', 'factor', 'offered', 'completed', 'P50 ms',
      'P99 ms', '429', '503', 'no R-A', 'lost', 'rejected by reason'))
for (r, f), j in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != 'capacity', float(kv[0][1]) if kv[0][1] != 'capacity' else 0)):
    print('%-5d %-8s %8s %9.1f %7s %7s %6d %6d %6d %5d  %s' % (r, f, '%.1f' % j['target_qps'] if j['target_qps'] else 'closed',
          j['qps'], ms(j['p50_s']), ms(j['p99_s']), j['rejected_429'], j['rejected_503'],
          j['rejected_without_retry_after'], j['lost'], j['why'] or '-'))
print('where the CPU went, % of each run\'s wall time (worker: its step thread; tokens per step from the stats poll;')
print('step CPU: the step thread\'s CPU time per step, ms, and per token carried, us):')
print('%-5s %-8s %8s %9s %8s %9s %9s %9s %10s %7s' % ('round', 'factor', 'w. runs', 'w. waits', 'w. idle', 'tok/step',
      'step CPU', 'tok CPU', 'supervisor', 'client'))
for (r, f), j in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != 'capacity', float(kv[0][1]) if kv[0][1] != 'capacity' else 0)):
    print('%-5d %-8s %8s %9s %8s %9s %9s %9s %10s %7s' % (r, f, pct(j.get('w_run')), pct(j.get('w_delay')), pct(j.get('w_idle')),
          '%.1f' % j['tokens_per_step'] if j['tokens_per_step'] else '-',
          '%.2f' % j['step_cpu_ms'] if j.get('step_cpu_ms') else '-',
          '%.0f' % j['token_cpu_us'] if j.get('token_cpu_us') else '-', pct(j['sup_cpu']), pct(j['client_cpu'])))
print('where the time of a completed request went, mean ms (gateway\'s /metrics; queue: waiting in the worker for')
print('a running slot; gateway: end to end less the worker\'s three, i.e. HTTP, routing and IPC):')
print('%-5s %-8s %8s %8s %8s %8s %8s' % ('round', 'factor', 'e2e', 'queue', 'prefill', 'decode', 'gateway'))
for (r, f), j in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != 'capacity', float(kv[0][1]) if kv[0][1] != 'capacity' else 0)):
    p = j['phases']
    print('%-5d %-8s %8s %8s %8s %8s %8s' % ((r, f) + (tuple(ms(v) for v in p) + (ms(p[0] - p[1] - p[2] - p[3]),) if p else ('-',) * 5)))
lost = sum(j['lost'] + j['errors'] - j['rejected_429'] - j['rejected_503'] for j in runs.values())
print('every request answered (lost 0, no other errors): %s' % ('yes' if lost == 0 else 'NO (%d)' % lost))
def judged(name, target, better, ratio):
    vals = []
    for r in range(1, rounds + 1):
        v = ratio(r)
        if v is not None:
            vals.append(v)
    if not vals:
        return
    ok = sum(1 for v in vals if (v <= target if better == 'below' else v >= target))
    print('%s: median %.2f (min %.2f, max %.2f; rounds %s), target %s %.2f, met in %d of %d rounds' % (
          name, statistics.median(vals), min(vals), max(vals), ' '.join('%.2f' % v for v in vals),
          '<=' if better == 'below' else '>=', target, ok, len(vals)))
def get(r, f, k):
    j = runs.get((r, f))
    return j[k] if j and j[k] else None
def cap(r):  # the round's capacity runs pooled, or --capacity
    return runs[(r, 'capacity')]['qps'] if (r, 'capacity') in runs else float(open('%s/r%d-capacity.qps' % (out, r)).read().split()[0])
if '5' in factors and '0.7' in factors:
    judged('P99 at 5x / P99 at 0.7x', 1.5, 'below',
           lambda r: get(r, '5', 'p99_s') / get(r, '0.7', 'p99_s') if get(r, '5', 'p99_s') and get(r, '0.7', 'p99_s') else None)
if '5' in factors:
    judged('completed QPS at 5x / the round\'s capacity', 0.95, 'above',
           lambda r: get(r, '5', 'qps') / cap(r) if get(r, '5', 'qps') is not None else None)
    if '1' in factors:
        judged('completed QPS at 5x / completed at 1x (open loop)', 0.95, 'above',
               lambda r: get(r, '5', 'qps') / get(r, '1', 'qps') if get(r, '5', 'qps') and get(r, '1', 'qps') else None)
caps = [cap(r) for r in range(1, rounds + 1)]
if len(caps) > 1:
    print('capacity over the rounds: %s QPS (spread %.0f %% of the median)' % (
          ' '.join('%.1f' % c for c in caps), (max(caps) - min(caps)) * 100 / statistics.median(caps)))
PY
