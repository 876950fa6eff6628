#!/usr/bin/env bash
# Slow clients against a well-behaved stream: dsvisor start with the real worker; one
# streaming client (dsvisor-bench-load --stream --concurrency 1) measures inter-token
# latency (ITL) while nothing else connects ("quiet"), then while N slow clients hold
# connections ("slow"): a third send their header a byte per second, a third connect and
# say nothing, a third send a whole header and then their body a byte per second. The
# phases alternate quiet, slow, quiet, slow, quiet in one run, so the host's load drifts
# into both alike; printed: each phase's ITL P50/P99 and samples, the slow phases' P99
# over the quiet phases' (the median of each), the slow clients still connected at the
# end of each slow phase, and the gateway's connection gauges. The goal: slow/quiet P99
# <= 1.2. This is a same-run ratio: say how loaded the host was when quoting it.
#
#   bench/slow-clients-itl.sh [--slow 200] [--duration 20] [--max-tokens 64] [--threads 1]
#       [--model DIR] [--build-dir DIR] [--out DIR]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
SLOW=200 DURATION=20 MAX_TOKENS=64 THREADS=1 MODEL= BUILD=$SRC/build OUT=
while [ $# -gt 0 ]; do
  case "$1" in
    --slow) SLOW=$2 ;; --duration) DURATION=$2 ;; --max-tokens) MAX_TOKENS=$2 ;; --threads) THREADS=$2 ;;
    --model) MODEL=$2 ;; --build-dir) BUILD=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "slow-clients-itl.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
B=$BUILD/bin
. "$SRC/bench/start-dsvisor.sh"
for f in dsvisor dsvisor-worker dsvisor-bench-load; do
  [ -x "$B/$f" ] || { echo "slow-clients-itl.sh: $B/$f is not built" >&2; exit 2; }
done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/dsv-slow-clients.XXXXXX)
RUN=$OUT
export DSV_CACHE_DIR=$OUT/cache
[ -n "$MODEL" ] || MODEL=$SRC/models/default

# The slow clients must outlast a phase: deadlines above it, room for all of them.
HOLD=$((DURATION + 15))
start_dsvisor slow-clients --model "$MODEL" --instances 1 --threads-per-instance "$THREADS" --port 0 \
  --hugepages off --max-connections $((SLOW + 64)) --first-byte-timeout-s "$HOLD" --header-timeout-s "$HOLD" \
  --body-timeout-s "$HOLD" --idle-timeout-s "$HOLD"
trap 'kill -TERM $SUP 2>/dev/null; wait $SUP 2>/dev/null' EXIT
URL=http://127.0.0.1:$PORT

phase() { # NAME: one streaming client for DURATION seconds -> $OUT/NAME.json
  "$B/dsvisor-bench-load" --url "$URL" --stream --concurrency 1 --duration "$DURATION" \
    --max-tokens "$MAX_TOKENS" --prompt-len 8 --seed 1 --json >"$OUT/$1.json" 2>"$OUT/$1.err"
}

slow_clients() { # NAME: holds SLOW slow connections for HOLD seconds; writes how many stayed
  python3 - 127.0.0.1 "$PORT" "$SLOW" "$HOLD" >"$OUT/$1-clients.txt" <<'PY'
import socket, sys, time
host, port, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
header = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
         b"X-Pad: " + b"a" * 200 + b"\r\nContent-Length: 4000\r\n\r\n"
socks = []
for i in range(n):
    try:
        s = socket.create_connection((host, port), timeout=5)
    except OSError:
        continue
    s.setblocking(False)
    kind = i % 3  # 0: header a byte a second, 1: silent, 2: body a byte a second
    if kind == 2:
        s.sendall(header)
    socks.append([s, kind, 0])
t_end = time.monotonic() + hold
while time.monotonic() < t_end:
    for c in socks:
        s, kind, sent = c
        try:
            if kind == 0 and sent < len(header):
                s.send(header[sent:sent + 1])
                c[2] += 1
            elif kind == 2:
                s.send(b" ")
        except OSError:
            c[1] = -1
    time.sleep(1.0)
alive = 0
for s, kind, _ in socks:
    try:
        alive += kind >= 0 and s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        alive += kind >= 0
    except OSError:
        pass
    s.close()
print(f"{len(socks)} connected, {alive} still connected after {hold:.0f} s")
PY
}

gauges() { curl -s -m 5 "$URL/metrics" | grep -E '^dsvisor_http_(connections|connections_pending|threads_max) ' | tr '\n' ' '; }

echo "slow-clients-itl: $SLOW slow clients, phases of ${DURATION}s, $THREADS compute thread(s), load $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for p in quiet1 slow1 quiet2 slow2 quiet3; do
  case $p in
    slow*)
      slow_clients "$p" &
      CL=$!
      sleep 3 # let them connect before the stream starts
      phase "$p"
      echo "  $p gateway: $(gauges)"
      wait $CL
      ;;
    *) phase "$p" ;;
  esac
done
echo "  load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = {}
for p in ("quiet1", "slow1", "quiet2", "slow2", "quiet3"):
    j = json.load(open(f"{out}/{p}.json"))
    rows[p] = j
    extra = open(f"{out}/{p}-clients.txt").read().strip() if p.startswith("slow") else ""
    print(f"  {p:7s} ITL P50 {j['itl_p50_s'] * 1e3:7.2f} ms  P99 {j['itl_p99_s'] * 1e3:7.2f} ms  "
          f"samples {int(j['itl_samples']):6d}  errors {sum(j.get('errors', {}).values()) if isinstance(j.get('errors'), dict) else j.get('errors', 0)}"
          + (f"  ({extra})" if extra else ""))
quiet = statistics.median(rows[p]["itl_p99_s"] for p in ("quiet1", "quiet2", "quiet3"))
slow = statistics.median(rows[p]["itl_p99_s"] for p in ("slow1", "slow2"))
ratio = slow / quiet if quiet > 0 else float("inf")
print(f"P99 ITL slow/quiet: {ratio:.3f} (goal <= 1.2: {'met' if ratio <= 1.2 else 'NOT met'}); raw JSON in {out}")
PY
