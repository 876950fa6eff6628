#!/usr/bin/env bash
# dsvisor-bench-load against dsvisor-gateway-test-server in front of fake workers
# (tests/integration/fake-worker.c): open and closed loop, streamed and not. Checks that
# every request is accounted for (sent == completed + errors + lost), that a healthy
# server loses nothing, that a dead port loses everything, that a worker dying
# mid-stream yields explicit errors and no lost request, and the JSON keys of its report;
# then the same straight against a fake worker over ipc://.
# Ends with "N passed, N failed".
set -u
STUB_TMP=dsv-load
source "$(dirname "$0")/gateway-stub-lib.sh"

server() {  # server NAME INSTANCE...: PORT holds its port
  local n=$1; shift
  local args=()
  for i in "$@"; do args+=(--instance "$i=ipc://$T/$i.sock"); done
  stub_server "$n" "${args[@]}"
}
ACCOUNTED="j['sent'] == j['completed'] + j['errors'] + j['lost']"
KEYS="all(k in j for k in ('sent','completed','errors','lost','qps','p50_s','p99_s','ttft_p99_s','itl_p99_s','jitter_s'))"

worker w0 --delay-ms 2
worker w1 --delay-ms 2
server gw w0 w1

# open loop, streamed: Poisson at 40 QPS for 3 s (about 120 requests)
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 40 --duration 3 --stream --prompt-len uniform:4:12 \
  --max-tokens 8 --seed 7 --json >"$T/open.json" 2>"$T/open.err"
check "open-stream keys" "$T/open.json" "$KEYS and j['mode'] == 'open'"
check "open-stream accounted" "$T/open.json" "$ACCOUNTED and j['lost'] == 0 and j['errors'] == 0"
check "open-stream volume" "$T/open.json" "80 <= j['sent'] <= 170 and j['completed'] == j['sent'] and j['qps'] > 20"
check "open-stream latencies" "$T/open.json" \
  "0 < j['ttft_p99_s'] and 0 < j['itl_p50_s'] <= j['itl_p99_s'] and 0 < j['p50_s'] <= j['p99_s'] <= j['max_s'] and j['jitter_s'] > 0 and j['ttft_p99_s'] <= j['max_s']"
# the histogram's buckets in the report pool back to its own quantiles (bench/load/pool.py,
# what bench/overload.sh --slices pools runs with)
POOL="__import__('sys').path.insert(0, '$(cd "$(dirname "$0")/../.." && pwd)/bench/load') or __import__('pool')"
check "open-stream buckets pool to its quantiles" "$T/open.json" \
  "sum(b[2] for b in j['latency_buckets_ns']) == j['completed'] and all(($POOL).quantile([j], q) == j[k] for q, k in ((0.5, 'p50_s'), (0.9, 'p90_s'), (0.99, 'p99_s'), (0.999, 'p999_s'))) and ($POOL).quantile([j, j], 0.99) == j['p99_s'] and 0 < j['min_s'] <= j['p50_s']"
# the fake worker answers one token per prompt word, at most max_tokens: 4..8 each
check "open-stream tokens" "$T/open.json" "4 * j['completed'] <= j['output_tokens'] <= 8 * j['completed']"

# the same seed sends the same number of requests on the same schedule
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 40 --duration 3 --stream --prompt-len uniform:4:12 \
  --max-tokens 8 --seed 7 --json >"$T/open2.json" 2>/dev/null
if python3 -c "import json; a=json.load(open('$T/open.json')); b=json.load(open('$T/open2.json')); exit(0 if a['sent']==b['sent'] else 1)"; then
  ok "same seed, same schedule"; else bad "same seed, same schedule"; fi

# --requests bounds the count exactly
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 200 --requests 50 --json >"$T/req.json" 2>/dev/null
check "open --requests 50" "$T/req.json" "j['sent'] == 50 and j['completed'] == 50"

# closed loop, not streamed: no TTFT or ITL samples, only whole answers
"$LOAD" --url "http://127.0.0.1:$PORT" --concurrency 4 --duration 2 --json >"$T/closed.json" 2>/dev/null
check "closed keys" "$T/closed.json" "$KEYS and j['mode'] == 'closed'"
check "closed accounted" "$T/closed.json" "$ACCOUNTED and j['lost'] == 0 and j['errors'] == 0 and j['sent'] > 20"
check "closed has no stream timings" "$T/closed.json" "j['ttft_p99_s'] is None and j['itl_p99_s'] is None and j['p99_s'] > 0"

# chat API, streamed, human table
"$LOAD" --url "http://127.0.0.1:$PORT" --api chat --concurrency 2 --requests 10 --stream >"$T/table.txt" 2>/dev/null
if grep -q "^sent 10  completed 10  errors 0 (0 after the first token)  lost 0" "$T/table.txt" &&
   grep -q "^latency " "$T/table.txt" && grep -q "^itl " "$T/table.txt"; then
  ok "chat table"; else bad "chat table" "$(cat "$T/table.txt")"; fi

# a worker that dies mid-stream behind a gateway with no other worker: requests it had
# begun end with an error event, the rest are refused (503): errors, never lost
worker w2 --delay-ms 5 --die-after-tokens 20
server gw2 w2
"$LOAD" --url "http://127.0.0.1:$PORT" --model dsv-test --qps 20 --duration 2 --stream --prompt-len 12 \
  --max-tokens 12 --json >"$T/die.json" 2>/dev/null
check "dying worker accounted" "$T/die.json" "$ACCOUNTED and j['lost'] == 0 and j['errors'] > 0"
check "dying worker: mid-stream errors are explicit" "$T/die.json" \
  "j['errors_after_first_token'] >= 1 and any(k.startswith('stream_error:') for k in j['errors_by_kind'])"

# streams that stall after two tokens: lost when the drain time runs out, or at --timeout
worker w5 --delay-ms 1 --stall-after 2
server gw3 w5
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 20 --duration 1 --stream --drain 1 --json >"$T/stall.json" 2>/dev/null
check "stalled streams: lost at the drain deadline" "$T/stall.json" \
  "$ACCOUNTED and j['sent'] > 5 and j['lost'] == j['sent'] and j['lost_by_kind'] == {'drain_timeout': j['sent']} and j['ttft_p99_s'] > 0"
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 20 --duration 1 --timeout 1 --json >"$T/stall2.json" 2>/dev/null
check "stalled answers: lost at --timeout" "$T/stall2.json" \
  "$ACCOUNTED and j['sent'] > 5 and j['lost_by_kind'] == {'timeout': j['sent']}"

# nothing listening: every request is lost, and says why
DEAD=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
"$LOAD" --url "http://127.0.0.1:$DEAD" --model m --qps 50 --duration 1 --json >"$T/dead.json" 2>/dev/null
check "dead port: all lost" "$T/dead.json" \
  "$ACCOUNTED and j['sent'] > 10 and j['lost'] == j['sent'] and j['completed'] == 0 and j['p99_s'] is None and any(k.startswith('transport:') for k in j['lost_by_kind'])"

# straight to a worker over ipc/ (no gateway): same accounting; every answer streams
worker w3 --delay-ms 2
"$LOAD" --url "ipc://$T/w3.sock" --qps 40 --duration 2 --prompt-len uniform:4:12 --max-tokens 8 --json \
  >"$T/direct.json" 2>/dev/null
check "worker direct" "$T/direct.json" \
  "$KEYS and $ACCOUNTED and j['lost'] == 0 and j['errors'] == 0 and j['sent'] >= 40 and j['ttft_p99_s'] > 0 and 4 * j['completed'] <= j['output_tokens'] <= 8 * j['completed']"
# a worker that dies: what it held is lost (nobody else can answer it), and says so.
# One request at a time, so the first 12-token answer completes before the worker's 20th
# token whatever the timing (open-loop arrivals bunched on a loaded host interleaved the
# streams until none had finished when the worker died).
worker w4 --delay-ms 5 --die-after-tokens 20
"$LOAD" --url "ipc://$T/w4.sock" --concurrency 1 --duration 2 --prompt-len 12 --max-tokens 12 --json \
  >"$T/direct-die.json" 2>/dev/null
check "worker direct, worker dies" "$T/direct-die.json" \
  "$ACCOUNTED and j['completed'] >= 1 and j['lost'] >= 1 and 'worker_gone' in j['lost_by_kind']"

# usage: bad arguments exit 2; non-loopback hosts are refused
rc() { "$LOAD" "$@" >/dev/null 2>&1; echo $?; }
[ "$(rc --qps 5 --duration 1)" = 2 ] && ok "no --url: exit 2" || bad "no --url: exit 2"
[ "$(rc --url http://127.0.0.1:1 --qps 5 --concurrency 2 --duration 1)" = 2 ] && ok "qps and concurrency: exit 2" || bad "qps and concurrency: exit 2"
[ "$(rc --url http://127.0.0.1:1 --qps 5)" = 2 ] && ok "no duration: exit 2" || bad "no duration: exit 2"
[ "$(rc --url http://192.0.2.1:80 --qps 5 --duration 1)" = 2 ] && ok "remote host refused" || bad "remote host refused"
[ "$(rc --url http://127.0.0.1:1 --qps 5 --duration 1 --output-len uniform:9:3)" = 2 ] && ok "bad DIST: exit 2" || bad "bad DIST: exit 2"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
