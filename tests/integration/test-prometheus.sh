#!/usr/bin/env bash
# deploy/prometheus.yml against a real Prometheus: `dsvisor start` with
# two instances on loopback, Prometheus on loopback scraping its /metrics every second
# with the config's own relabelling (only targets and intervals changed), some requests,
# then the HTTP API must answer
#   histogram_quantile(0.99, sum by (le, instance) (rate(dsvisor_e2e_request_latency_seconds_bucket[30s])))
# with one series per dsvisor instance ("0" and "1"), each a latency within the bucket
# that holds that instance's slowest request; the recording rule from dsvisor-rules.yml
# gives the same per (host, instance). `promtool check metrics` passes on the live page.
set -euo pipefail
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
        echo "SKIP: no prometheus/promtool (Debian package prometheus)"
        exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-prometheus.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
need_worker

prom_pid=
cleanup() {
        [[ -n $prom_pid ]] && kill -TERM "$prom_pid" 2>/dev/null || true
        dsv_stop_all
        [[ -n $prom_pid ]] && wait "$prom_pid" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT

dsv_start d 2
dsv_wait_ready d 2 120
target="127.0.0.1:${dsv_port[d]}"
echo "       dsvisor on $target (pid ${dsv_pid[d]})"

prom_start "$target"
check "Prometheus is ready" curl -sf -m 2 "http://127.0.0.1:$prom_port/-/ready" -o /dev/null
query() { # PROMQL -> JSON result on stdout
        curl -s -m 5 -G "$api/query" --data-urlencode "query=$1"
}
# rate() needs a sample from before the requests: wait for two scrapes of the zero counts.
for _ in $(seq 1 50); do
        query 'count_over_time(dsvisor_e2e_request_latency_seconds_count[1m])' | grep -q '"value":\[[0-9.]*,"[2-9]' && break
        sleep 0.2
done

# 40 requests, 4 at a time: the gateway's power-of-two routing reaches both instances.
req() {
        curl -s -o /dev/null -w '%{http_code}\n' -m 30 "http://$target/v1/completions" -H 'Content-Type: application/json' \
                -d "{\"model\":\"$dsv_model_id\",\"prompt\":[1,2,3],\"max_tokens\":8,\"temperature\":0}"
}
client_pids=()
for c in 1 2 3 4; do
        (for _ in $(seq 1 10); do req; sleep 0.1; done >"$tmp/codes.$c") &
        client_pids+=($!)
done
wait "${client_pids[@]}"
check "40 requests answered 200" test "$(cat "$tmp"/codes.* | grep -c '^200$')" -eq 40

curl -s -m 5 "http://$target/metrics" >"$tmp/metrics.txt"
check "promtool check metrics passes on the live /metrics" bash -c "promtool check metrics <'$tmp/metrics.txt'"
# The per-instance families beyond the latency histograms: worker-reported KV
# blocks and preemptions, restarts, HugePage bytes, and cgroup CPU throttling (the v1 or
# v2 cpu controller exists on every host this runs on).
for fam in dsvisor_kv_blocks_used dsvisor_kv_blocks_capacity dsvisor_preemptions_total dsvisor_kv_bytes_per_token \
           dsvisor_worker_restarts_total dsvisor_weights_hugepages_bytes dsvisor_weights_thp_bytes dsvisor_instance_up \
           dsvisor_num_requests_running dsvisor_num_requests_waiting dsvisor_requests_total \
           dsvisor_cgroup_cpu_throttled_seconds_total; do
        check "/metrics has $fam" grep -q "^$fam" "$tmp/metrics.txt"
done
for i in 0 1; do
        n=$(awk -v k="dsvisor_e2e_request_latency_seconds_count{instance=\"$i\"," 'index($1, k) == 1 {print $2}' "$tmp/metrics.txt")
        echo "       instance $i served ${n:-0} requests"
done
sleep 4 # a few scrapes and rule evaluations after the last request

query 'histogram_quantile(0.99, sum by (le, instance) (rate(dsvisor_e2e_request_latency_seconds_bucket[30s])))' >"$tmp/p99.json"
query 'host_instance:dsvisor_e2e_request_latency_seconds:p99_1m' >"$tmp/rule.json"
query 'up{job="dsvisor"}' >"$tmp/up.json"
query 'count by (__name__) ({exported_instance!=""})' >"$tmp/exported.json"
python3 - "$tmp" "$target" <<'PY' || failed=$((failed + 1))
import json, math, re, sys
tmp, target = sys.argv[1], sys.argv[2]
bad = 0
def check(what, ok):
    global bad
    print(("ok     " if ok else "NOT OK ") + what)
    bad |= not ok

# The bucket holding each instance's slowest request bounds its P99 from above.
buckets = {}
for line in open(f"{tmp}/metrics.txt"):
    m = re.match(r'dsvisor_e2e_request_latency_seconds_bucket\{instance="([^"]+)",numa_node="[^"]*",(?:model_name="[^"]*",)?le="([^"]+)"\} (\d+)', line)
    if m:
        buckets.setdefault(m[1], []).append((float(m[2]), int(m[3])))
upper = {i: min(le for le, n in b if n == max(n for _, n in b)) for i, b in buckets.items()}
served = {i: max(n for _, n in b) for i, b in buckets.items()}

p99 = json.load(open(f"{tmp}/p99.json"))
res = p99["data"]["result"] if p99.get("status") == "success" else []
got = {r["metric"].get("instance"): float(r["value"][1]) for r in res}
print("       P99 e2e latency per instance from Prometheus:",
      ", ".join(f"{i}: {v * 1000:.1f} ms (bucket bound {upper.get(i, float('nan')) * 1000:g} ms, {served.get(i)} requests)"
                for i, v in sorted(got.items())))
check("the query succeeds", p99.get("status") == "success")
check("one series per dsvisor instance (0, 1)", sorted(got) == ["0", "1"] and len(res) == 2)
check("each instance served requests", all(served.get(i, 0) > 0 for i in ("0", "1")))
check("each P99 is finite, > 0 and within its slowest request's bucket",
      all(math.isfinite(v) and 0 < v <= upper[i] for i, v in got.items()) and bool(got))

rule = json.load(open(f"{tmp}/rule.json"))["data"]["result"]
check("recording rule: one series per (host, instance), host = the target",
      sorted((r["metric"].get("host"), r["metric"].get("instance")) for r in rule) == [(target, "0"), (target, "1")])
check("recording rule values are finite", all(math.isfinite(float(r["value"][1])) for r in rule) and bool(rule))

up = json.load(open(f"{tmp}/up.json"))["data"]["result"]
check("up == 1 for the target, instance = host = host:port",
      len(up) == 1 and up[0]["value"][1] == "1" and up[0]["metric"]["instance"] == target and up[0]["metric"]["host"] == target)
check("no series keeps exported_instance", json.load(open(f"{tmp}/exported.json"))["data"]["result"] == [])
sys.exit(1 if bad else 0)
PY
if ((failed > 0)); then
        echo "--- prometheus log"; tail -20 "$tmp/prometheus.log"
        echo "--- dsvisor log"; tail -20 "$tmp/d/log"
fi
echo "$failed failed"
exit $((failed > 0))
