#!/usr/bin/env bash
# deploy/grafana and deploy/dsvisor-rules.yml against a real Prometheus: `dsvisor start`
# (the bundled default model, two instances, --metrics-compat vllm) under a steady little
# load, Prometheus on loopback scraping it every second with deploy/prometheus.yml's own
# relabelling and rules (only targets and intervals changed). Then every PromQL
# expression of every dashboard panel and every rule is evaluated through the HTTP API
# (/api/v1/query) and must give a non-empty result of finite values:
# - dashboard: Grafana's $__rate_interval is 30s and $model_name the served model id;
# - alerts: the comparison is evaluated with `bool`, so the expression must yield its
#   series whether or not it fires (a firing test would need the fault it names);
# - vLLM's published dashboard's queries on the vllm: names (the compat export).
# Also: promtool check metrics on the live page (clean but for vLLM's own colon names),
# promtool check rules, promtool test rules deploy/dsvisor-rules-test.yml, a broken
# threshold fails that test, and the provisioning files and dashboard are well formed.
set -euo pipefail
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
        echo "SKIP: no prometheus/promtool (Debian package prometheus)"
        exit 77
fi
src="${DSV_SOURCE_DIR:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-grafana-prometheus.XXXXXX")
failed=0
source "$src/tests/integration/test-deploy-lib.sh"
need_worker

prom_pid= load_pids=()
trap load_and_prom_cleanup EXIT

# The bundled default model (no --model); its id is "default".
model_id=default
mkdir -p "$tmp/d"
"$dsvisor" start --instances 2 --threads-per-instance 1 --host 127.0.0.1 --port 0 --runtime-dir "$tmp/d/run" \
        --hugepages off --grace-ms 5000 --metrics-compat vllm >"$tmp/d/log" 2>&1 &
dsv_pid[d]=$!
dsv_wait_ready d 2 180
target="127.0.0.1:${dsv_port[d]}"
echo "       dsvisor on $target (pid ${dsv_pid[d]})"

# Steady load: 3 clients, one request after another, 8 tokens each, until the end.
for c in 1 2 3; do
        (while :; do
                curl -s -o /dev/null -m 60 "http://$target/v1/completions" -H 'Content-Type: application/json' \
                        -d "{\"model\":\"$model_id\",\"prompt\":\"The quick brown fox $c\",\"max_tokens\":8}" || sleep 0.5
        done) &
        load_pids+=($!)
done

prom_start "$target"
check "Prometheus is ready" curl -sf -m 2 "http://127.0.0.1:$prom_port/-/ready" -o /dev/null

curl -s -m 5 "http://$target/metrics" >"$tmp/metrics.txt"
check "promtool check metrics: the dsvisor names are clean" \
        bash -c "grep -v -e '^vllm:' -e '^# [A-Z]* vllm:' '$tmp/metrics.txt' | promtool check metrics"
promtool check metrics <"$tmp/metrics.txt" >"$tmp/lint.txt" 2>&1 || true
only_vllm_name_remarks() { # the colon, and _total on vLLM's iteration-tokens histogram
        grep -q . "$tmp/lint.txt" && ! grep -v -e "^vllm:[a-z0-9_]* metric names should not contain ':'\$" \
                -e '^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$' "$tmp/lint.txt"
}
check "promtool check metrics: the vllm: names' only remarks are about vLLM's own names" only_vllm_name_remarks

check "promtool check rules" promtool check rules "$src/deploy/dsvisor-rules.yml"
check "promtool test rules deploy/dsvisor-rules-test.yml" promtool test rules "$src/deploy/dsvisor-rules-test.yml"
mkdir -p "$tmp/broken"
sed 's/rate5m > 0.1$/rate5m > 0.3/' "$src/deploy/dsvisor-rules.yml" >"$tmp/broken/dsvisor-rules.yml"
cp "$src/deploy/dsvisor-rules-test.yml" "$tmp/broken/"
check "a broken throttling threshold fails the rules test" bash -c "! cmp -s '$src/deploy/dsvisor-rules.yml' '$tmp/broken/dsvisor-rules.yml' && ! promtool test rules '$tmp/broken/dsvisor-rules-test.yml' >/dev/null 2>&1"

# Every expression, retried until each one has data (rate() over 30 s and the rules'
# [1m] windows need that long of scrapes under load), at most 150 s.
python3 - "$src" "$api/query" "$model_id" <<'PY' || failed=$((failed + 1))
import json, math, re, sys, time, urllib.parse, urllib.request, yaml
src, api, model = sys.argv[1], sys.argv[2], sys.argv[3]
bad = 0
def check(what, ok, detail=""):
    global bad
    print(("ok     " if ok else "NOT OK ") + what + (f"\n       {detail}" if detail and not ok else ""))
    bad |= not ok

dash = json.load(open(f"{src}/deploy/grafana/dashboards/dsvisor.json"))
check("dashboard: uid, title, panels, templating (DS_PROMETHEUS, model_name)",
      8 <= len(dash["uid"]) <= 40 and dash["title"] and dash["panels"]
      and [v["name"] for v in dash["templating"]["list"]] == ["DS_PROMETHEUS", "model_name"])
check("every panel has a type, title, gridPos in the 24-column grid, datasource and targets",
      all(p["type"] and p["title"] and p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"]
          and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in dash["panels"]))
for f in ("datasources", "dashboards"):
    y = yaml.safe_load(open(f"{src}/deploy/grafana/provisioning/{f}/dsvisor.yaml"))
    check(f"provisioning/{f}/dsvisor.yaml: apiVersion 1 and one entry",
          y["apiVersion"] == 1 and len(y["datasources" if f == "datasources" else "providers"]) == 1)

exprs = []
for p in dash["panels"]:
    for t in p["targets"]:
        e = t["expr"].replace("$__rate_interval", "30s").replace("$model_name", model)
        exprs.append((f"panel '{p['title']}' {t['refId']}", e))
rules = yaml.safe_load(open(f"{src}/deploy/dsvisor-rules.yml"))
comparison = re.compile(r"\s(==|!=|>=|<=|>|<)\s+(?=[0-9.]+\s*$)")
for g in rules["groups"]:
    for r in g["rules"]:
        if "record" in r:
            exprs.append((f"rule {r['record']}", r["expr"]))
        else:
            e, n = comparison.subn(r" \1 bool ", r["expr"].strip())
            check(f"alert {r['alert']}: one trailing comparison with a number", n == 1, r["expr"])
            exprs.append((f"alert {r['alert']} (bool)", e))
m = f'{{model_name="{model}"}}'
for e in (f"histogram_quantile(0.99, sum by(le)(rate(vllm:e2e_request_latency_seconds_bucket{m}[30s])))",
          f"rate(vllm:e2e_request_latency_seconds_sum{m}[30s]) / rate(vllm:e2e_request_latency_seconds_count{m}[30s])",
          f"rate(vllm:prompt_tokens_total{m}[30s])", f"rate(vllm:generation_tokens_total{m}[30s])",
          f"histogram_quantile(0.5, sum by(le)(rate(vllm:time_per_output_token_seconds_bucket{m}[30s])))",
          f"histogram_quantile(0.5, sum by(le)(rate(vllm:inter_token_latency_seconds_bucket{m}[30s])))",
          f"histogram_quantile(0.9, sum by(le)(rate(vllm:time_to_first_token_seconds_bucket{m}[30s])))",
          f"vllm:num_requests_running{m}", f"vllm:num_requests_waiting{m}", f"vllm:kv_cache_usage_perc{m}",
          f"sum by(le)(increase(vllm:request_prompt_tokens_bucket{m}[30s]))",
          f"sum by(le)(increase(vllm:request_generation_tokens_bucket{m}[30s]))",
          f"sum by(finished_reason)(increase(vllm:request_success_total{m}[30s]))",
          f"rate(vllm:request_queue_time_seconds_sum{m}[30s])", f"rate(vllm:request_prefill_time_seconds_sum{m}[30s])",
          f"rate(vllm:request_decode_time_seconds_sum{m}[30s])", f"rate(vllm:request_inference_time_seconds_sum{m}[30s])",
          f"rate(vllm:prefix_cache_hits_total{m}[30s]) / rate(vllm:prefix_cache_queries_total{m}[30s])",
          f"vllm:cache_config_info{m}",
          f"histogram_quantile(0.5, sum by(le)(rate(vllm:iteration_tokens_total_bucket{m}[30s])))"):
    exprs.append(("vLLM dashboard", e))

def evaluate(e):
    data = urllib.parse.urlencode({"query": e}).encode()
    try:
        j = json.load(urllib.request.urlopen(api, data, timeout=10))
    except Exception as ex:  # 400/422 carry the error in the body
        body = getattr(ex, "read", lambda: b"")()
        return f"{ex} {body[:300]!r}"
    if j.get("status") != "success":
        return f"status {j.get('status')}: {j.get('error')}"
    res = j["data"]["result"]
    if j["data"]["resultType"] != "vector" or not res:
        return f"empty ({j['data']['resultType']})"
    vals = [float(r["value"][1]) for r in res]
    if not all(math.isfinite(v) for v in vals):
        return f"not finite: {res}"
    return None

deadline = time.time() + 150
pending = {what + ": " + e: e for what, e in exprs}
why = {}
while pending and time.time() < deadline:
    for k, e in list(pending.items()):
        w = evaluate(e)
        if w is None:
            del pending[k]
        else:
            why[k] = w
    if pending:
        time.sleep(3)
print(f"       {len(exprs)} expressions, {len(exprs) - len(pending)} with finite data")
for what, e in exprs:
    k = what + ": " + e
    check(f"{what} has finite data", k not in pending, f"{e}\n       {why.get(k)}")
sys.exit(1 if bad else 0)
PY
if ((failed > 0)); then
        echo "--- prometheus log"; tail -20 "$tmp/prometheus.log"
        echo "--- dsvisor log"; tail -20 "$tmp/d/log"
fi
echo "$failed failed"
exit $((failed > 0))
