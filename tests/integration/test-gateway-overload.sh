#!/usr/bin/env bash
# The gateway under overload answers every request: dsvisor-bench-load drives
# dsvisor-gateway-test-server in front of a fake worker (tests/integration/fake-worker.c)
# open-loop at about 5x what its admission limits let through, with no client-side cap
# on requests in flight. Each request must end completed, 429 or 503 (sent == completed
# + 429 + 503, lost 0), every 429/503 with Retry-After, and /metrics must count the
# refusals by reason. Then the same with a connection limit far below the load: the
# accept path answers the excess 503 itself and counts it.
# Ends with "N passed, N failed".
set -u
B=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build" && pwd)}/bin
LOAD=$B/dsvisor-bench-load
for tool in python3 curl; do
  command -v $tool >/dev/null || { echo "missing $tool (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
done
T=$(mktemp -d /tmp/dsv-overload.XXXXXX)   # 0700: the IPC sockets' directory must be private
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; }

worker() {  # worker NAME [fake-worker options]
  local n=$1; shift
  "$B/fake-worker" --url "ipc://$T/$n.sock" "$@" 2>>"$T/$n.err" &
  PIDS+=($!)
  for _ in $(seq 50); do [ -S "$T/$n.sock" ] && return 0; sleep 0.05; done
  echo "worker $n did not start"; return 1
}
server() {  # server NAME [gateway-test-server options]: PORT holds its port
  local n=$1; shift
  "$B/dsvisor-gateway-test-server" --model dsv-test --port-file "$T/$n.port" "$@" \
    </dev/null >"$T/$n.out" 2>"$T/$n.err" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$T/$n.port" ] && break; sleep 0.05; done
  PORT=$(cat "$T/$n.port")
  for _ in $(seq 40); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.05; done
}
# check NAME FILE PYTHON-EXPR: the expression over the run's JSON object (j)
check() {
  if python3 -c "import json,sys; j=json.load(open('$2')); sys.exit(0 if ($3) else 1)" 2>/dev/null; then
    ok "$1"
  else
    bad "$1" "$3 — got: $(tr -d '\n' <"$2" | cut -c1-900)"
  fi
}
# metric FILE NAME{LABELS}: the sample's value (0 when absent)
metric() { awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print 0 }' "$1"; }
ANSWERED="j['lost'] == 0 and j['sent'] == j['completed'] + j['rejected_429'] + j['rejected_503'] and j['errors'] == j['rejected_429'] + j['rejected_503']"
RETRY_AFTER="j['rejected_without_retry_after'] == 0"
NO_CAP="--max-inflight 100000 --timeout 30 --drain 20"

# Admission: 2 running + 2 waiting, 8 tokens at 20 ms each (about 0.16 s a request), so
# about 25 requests/s get through; 125/s is 5x that.
worker w0 --delay-ms 20
server adm --instance w0="ipc://$T/w0.sock" --max-running 2 --max-queue-per-instance 2
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 125 --duration 8 --prompt-len 8 --max-tokens 8 --seed 3 $NO_CAP \
  --json >"$T/adm.json" 2>"$T/adm.err"
curl -s "http://127.0.0.1:$PORT/metrics" >"$T/adm.metrics"
check "5x admission: every request answered" "$T/adm.json" "$ANSWERED and j['sent'] > 600"
check "5x admission: Retry-After on every 429/503" "$T/adm.json" "$RETRY_AFTER"
check "5x admission: refused and served both" "$T/adm.json" "j['rejected_429'] > j['sent'] / 2 and j['completed'] > 50"
refused=$(python3 -c "import json; j=json.load(open('$T/adm.json')); print(j['rejected_429'] + j['rejected_503'])")
counted=0
for r in queue_full deadline no_instance worker_overloaded shutting_down; do
  counted=$((counted + $(metric "$T/adm.metrics" "dsvisor_requests_rejected_total{reason=\"$r\"}")))
done
[ "$counted" = "$refused" ] && [ "$(metric "$T/adm.metrics" 'dsvisor_requests_rejected_total{reason="queue_full"}')" -gt 0 ] &&
  ok "5x admission: dsvisor_requests_rejected_total counts them ($counted)" ||
  bad "5x admission: dsvisor_requests_rejected_total counts them" "client saw $refused, metrics say $counted"
grep -q '^dsvisor_admission_queue_length [0-9]' "$T/adm.metrics" && grep -q '^dsvisor_connections_refused_total 0$' "$T/adm.metrics" &&
  ok "5x admission: queue and connection metrics" || bad "5x admission: queue and connection metrics" "$(grep -E '^dsvisor_(adm|conn|http)' "$T/adm.metrics")"

# The connection limit: no queue limit, 16 tokens at 50 ms (0.8 s a request) at 100/s
# keep about 80 connections busy; 8 are allowed. The accept path answers the rest 503.
worker w1 --delay-ms 50
server conn --instance w1="ipc://$T/w1.sock" --max-connections 8
"$LOAD" --url "http://127.0.0.1:$PORT" --qps 100 --duration 5 --prompt-len 16 --max-tokens 16 --seed 4 $NO_CAP \
  --json >"$T/conn.json" 2>"$T/conn.err"
curl -s "http://127.0.0.1:$PORT/metrics" >"$T/conn.metrics"
check "connection limit: every request answered" "$T/conn.json" "$ANSWERED and j['sent'] > 300"
check "connection limit: Retry-After on every 503" "$T/conn.json" "$RETRY_AFTER"
check "connection limit: refused and served both" "$T/conn.json" "j['rejected_503'] > j['sent'] / 2 and j['completed'] > 20"
c503=$(python3 -c "import json; print(json.load(open('$T/conn.json'))['rejected_503'])")
[ "$(metric "$T/conn.metrics" dsvisor_connections_refused_total)" = "$c503" ] &&
  ok "connection limit: dsvisor_connections_refused_total counts them ($c503)" ||
  bad "connection limit: dsvisor_connections_refused_total counts them" "client saw $c503, $(grep '^dsvisor_connections_refused_total' "$T/conn.metrics")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
