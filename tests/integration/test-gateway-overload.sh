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
STUB_TMP=dsv-overload
source "$(dirname "$0")/gateway-stub-lib.sh"

# metric FILE NAME{LABELS}: the sample's value (0 when absent)
metric() { awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print 0 }' "$1"; }
ANSWERED="j['lost'] == 0 and j['sent'] == j['completed'] + j['rejected_429'] + j['rejected_503'] and j['errors'] == j['rejected_429'] + j['rejected_503']"
# overload NAME MIN-SENT LOAD-OPTIONS...: an open-loop run with no cap on requests in
# flight into $T/NAME.json, then /metrics into $T/NAME.metrics; checks that every
# request was answered and every refusal carried Retry-After.
overload() {
  local n=$1 min_sent=$2; shift 2
  "$LOAD" --url "http://127.0.0.1:$PORT" --max-inflight 100000 --timeout 30 --drain 20 "$@" --json \
    >"$T/$n.json" 2>"$T/$n.err"
  curl -s "http://127.0.0.1:$PORT/metrics" >"$T/$n.metrics"
  check "$n: every request answered" "$T/$n.json" "$ANSWERED and j['sent'] > $min_sent"
  check "$n: Retry-After on every 429/503" "$T/$n.json" "j['rejected_without_retry_after'] == 0"
}
# field NAME KEY: a number from the run's JSON report
field() { python3 -c "import json; print(json.load(open('$T/$1.json'))['$2'])"; }

# Admission: 2 running + 2 waiting, 8 tokens at 20 ms each (about 0.16 s a request), so
# about 25 requests/s get through; 125/s is 5x that.
worker w0 --delay-ms 20
stub_server adm --instance w0="ipc://$T/w0.sock" --max-running 2 --max-queue-per-instance 2
overload 5x-admission 600 --qps 125 --duration 8 --prompt-len 8 --max-tokens 8 --seed 3
check "5x-admission: refused and served both" "$T/5x-admission.json" "j['rejected_429'] > j['sent'] / 2 and j['completed'] > 50"
refused=$(( $(field 5x-admission rejected_429) + $(field 5x-admission rejected_503) ))
counted=0
for r in queue_full deadline no_instance worker_overloaded shutting_down; do
  counted=$((counted + $(metric "$T/5x-admission.metrics" "dsvisor_requests_rejected_total{reason=\"$r\"}")))
done
[ "$counted" = "$refused" ] && [ "$(metric "$T/5x-admission.metrics" 'dsvisor_requests_rejected_total{reason="queue_full"}')" -gt 0 ] &&
  ok "5x-admission: dsvisor_requests_rejected_total counts them ($counted)" ||
  bad "5x-admission: dsvisor_requests_rejected_total counts them" "client saw $refused, metrics say $counted"
grep -q '^dsvisor_admission_queue_length [0-9]' "$T/5x-admission.metrics" &&
  grep -q '^dsvisor_connections_refused_total 0$' "$T/5x-admission.metrics" &&
  ok "5x-admission: queue and connection metrics" ||
  bad "5x-admission: queue and connection metrics" "$(grep -E '^dsvisor_(adm|conn|http)' "$T/5x-admission.metrics")"

# The connection limit: no queue limit, 16 tokens at 50 ms (0.8 s a request) at 100/s
# keep about 80 connections busy; 8 are allowed. The accept path answers the rest 503.
worker w1 --delay-ms 50
stub_server conn --instance w1="ipc://$T/w1.sock" --max-connections 8
overload connection-limit 300 --qps 100 --duration 5 --prompt-len 16 --max-tokens 16 --seed 4
check "connection-limit: refused and served both" "$T/connection-limit.json" "j['rejected_503'] > j['sent'] / 2 and j['completed'] > 20"
c503=$(field connection-limit rejected_503)
[ "$(metric "$T/connection-limit.metrics" dsvisor_connections_refused_total)" = "$c503" ] &&
  ok "connection-limit: dsvisor_connections_refused_total counts them ($c503)" ||
  bad "connection-limit: dsvisor_connections_refused_total counts them" \
    "client saw $c503, $(grep '^dsvisor_connections_refused_total' "$T/connection-limit.metrics")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
