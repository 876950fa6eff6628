#!/usr/bin/env bash
# What one refused request costs: the gateway (dsvisor-gateway-test-server in front of a
# fake worker whose queue is reported full, so every request is answered 429 by admission)
# and the load generator (dsvisor-bench-load, open loop, reading and timing every answer).
#
#   bench/refusal_cost.sh [--qps 400] [--duration 8] [--prompt-len 16] [--callgrind]
#       [--build-dir DIR]
#
# Printed: requests sent and refused, then CPU time per request (user + system) of the
# gateway process (from /proc, exited threads included) and of the load generator. With
# --callgrind both run under valgrind --tool=callgrind instead, at the same --qps (keep it
# low, about 100): instructions per refused request of the gateway (counters zeroed once
# it serves, dumped after the run) and per request of the load generator (the difference
# between a run of --duration and one of half as long, so start-up cancels out). Instruction
# counts do not depend on how loaded the host is; CPU times do, so the load average is
# printed with them. callgrind counts each iteration of a `rep` string instruction (glibc's
# large memset) as one instruction, where the CPU retires it as one.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
QPS=400 DURATION=8 PROMPT=16 CALLGRIND=0 BUILD=$SRC/build
while [ $# -gt 0 ]; do
  case "$1" in
    --qps) QPS=$2; shift ;; --duration) DURATION=$2; shift ;; --prompt-len) PROMPT=$2; shift ;;
    --callgrind) CALLGRIND=1 ;; --build-dir) BUILD=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "refusal_cost.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
B=$BUILD/bin
for f in dsvisor-gateway-test-server fake-worker dsvisor-bench-load; do
  [ -x "$B/$f" ] || { echo "refusal_cost.sh: $B/$f is not built" >&2; exit 2; }
done
[ "$CALLGRIND" = 0 ] || command -v valgrind >/dev/null || { echo "refusal_cost.sh: --callgrind needs valgrind" >&2; exit 2; }
T=$(mktemp -d /tmp/dsv-refusal-cost.XXXXXX)   # 0700: the IPC socket's directory must be private
PIDS=()
cleanup() { exec 9>&- 2>/dev/null; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

"$B/fake-worker" --url "ipc://$T/w0.sock" 2>"$T/worker.err" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$T/w0.sock" ] && break; sleep 0.05; done
GW=("$B/dsvisor-gateway-test-server")
[ "$CALLGRIND" = 1 ] && GW=(valgrind --tool=callgrind --callgrind-out-file="$T/gateway.cg" "${GW[@]}")
mkfifo "$T/ctl"
"${GW[@]}" --model dsv-test --port-file "$T/port" --instance w0="ipc://$T/w0.sock" --max-queue-per-instance 8 \
  <"$T/ctl" >"$T/gateway.out" 2>"$T/gateway.err" &
GWPID=$!
PIDS+=($GWPID)
exec 9>"$T/ctl"
for _ in $(seq 600); do [ -s "$T/port" ] && break; sleep 0.05; done
[ -s "$T/port" ] || { echo "refusal_cost.sh: the gateway did not start: $(cat "$T/gateway.err")" >&2; exit 1; }
URL=http://127.0.0.1:$(cat "$T/port")
for _ in $(seq 100); do curl -sf "$URL/ready" >/dev/null && break; sleep 0.05; done
# the worker's own report says its queue is full: admission refuses every request
echo "load 0 100000 8" >&9
for _ in $(seq 100); do grep -q '^ok' "$T/gateway.out" && break; sleep 0.05; done
status=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions" -d '{"model":"dsv-test","prompt":"a","max_tokens":1}')
[ "$status" = 429 ] || { echo "refusal_cost.sh: expected 429 with the queue full, got $status" >&2; exit 1; }

# load DURATION NAME [wrapper...]: one open-loop run, its report in $T/NAME.json, the
# wrapper's CPU time (bash's `time`) in $T/NAME.time
load() {
  local d=$1 n=$2; shift 2
  local TIMEFORMAT='%3U %3S'
  { time "$@" "$B/dsvisor-bench-load" --url "$URL" --qps "$QPS" --duration "$d" --prompt-len "$PROMPT" \
      --max-tokens 64 --timeout 30 --drain 10 --max-inflight 100000 --seed 1 --json >"$T/$n.json" 2>"$T/$n.err"; } \
    2>"$T/$n.time"
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
echo "refusal cost: $QPS requests/s for $DURATION s, prompt $PROMPT words; $(date -u +%FT%TZ) on $(nproc) CPUs," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$CALLGRIND" = 1 ]; then
  callgrind_control -z "$GWPID" >/dev/null 2>&1
  load "$DURATION" long valgrind --tool=callgrind --callgrind-out-file="$T/load-long.cg"
  callgrind_control -d "$GWPID" >/dev/null 2>&1
  load "$(python3 -c "print($DURATION / 2)")" short valgrind --tool=callgrind --callgrind-out-file="$T/load-short.cg"
  for _ in $(seq 100); do ls "$T"/gateway.cg.* >/dev/null 2>&1 && break; sleep 0.1; done
else
  t0=$(ticks "$GWPID")
  load "$DURATION" long
  t1=$(ticks "$GWPID")
fi
python3 - "$T" "$CALLGRIND" "${t0:-0}" "${t1:-0}" "$(getconf CLK_TCK)" <<'PY'
import glob, json, sys
T, callgrind, t0, t1, hz = sys.argv[1], sys.argv[2] == '1', int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def run(n): return json.load(open('%s/%s.json' % (T, n)))
def totals(path):
    for line in open(path):
        if line.startswith('totals:'): return int(line.split()[1])
    raise SystemExit('no totals in ' + path)
j = run('long')
sent, refused = j['sent'], j['rejected_429'] + j['rejected_503']
print('sent %d, refused %d (429 %d, 503 %d), completed %d, lost %d' %
      (sent, refused, j['rejected_429'], j['rejected_503'], j['completed'], j['lost']))
if refused != sent: print('WARNING: not every request was refused; the figures below mix in others')
if callgrind:
    gw = totals(sorted(glob.glob(T + '/gateway.cg.*'))[0])
    s = run('short')
    lg = (totals(T + '/load-long.cg') - totals(T + '/load-short.cg')) / max(1, sent - s['sent'])
    print('gateway: %.0f instructions per refused request' % (gw / max(1, refused)))
    print('load generator: %.0f instructions per request (runs of %d and %d requests)' % (lg, sent, s['sent']))
else:
    u, sy = (float(x) for x in open(T + '/long.time').read().split())
    print('gateway: %.1f us CPU per refused request' % ((t1 - t0) / hz * 1e6 / max(1, refused)))
    print('load generator: %.1f us CPU per request (user %.1f, system %.1f)' %
          ((u + sy) * 1e6 / sent, u * 1e6 / sent, sy * 1e6 / sent))
PY
