#!/usr/bin/env bash
# deploy/prometheus.yml and dsvisor-rules.yml: promtool accepts both; the P99 recording
# rule and an alert give the expected answers on synthetic series (promtool test rules);
# every dsvisor_* name the config documents is one dsvisor exports (the sources), so a
# rename cannot leave the config behind; a broken copy fails, so the checks can fail.
set -euo pipefail
src="${DSV_SOURCE_DIR:?}"
if ! command -v promtool >/dev/null; then
        echo "SKIP: no promtool (Debian package prometheus)"
        exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-deploy-prometheus.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

failed=0
check() { # DESCRIPTION COMMAND...
        local what=$1
        shift
        if "$@" >"$tmp/out" 2>&1; then echo "ok     $what"; else echo "NOT OK $what"; sed 's/^/       /' "$tmp/out"; failed=1; fi
}

check "promtool check config deploy/prometheus.yml (and its rule file)" \
        promtool check config "$src/deploy/prometheus.yml"
check "promtool check rules deploy/dsvisor-rules.yml" promtool check rules "$src/deploy/dsvisor-rules.yml"

# 100 requests per 15 s on one worker: 80 under 0.5 s, 20 in (0.5 s, 1 s]. The 99th is
# the 19th of 20 in that bucket: 0.5 + 0.5 * 19/20 = 0.975 s.
cat >"$tmp/rules-test.yml" <<YAML
rule_files: [$src/deploy/dsvisor-rules.yml]
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'dsvisor_e2e_request_latency_seconds_bucket{host="h:8080",instance="0",numa_node="1",le="0.5"}'
        values: '0+80x20'
      - series: 'dsvisor_e2e_request_latency_seconds_bucket{host="h:8080",instance="0",numa_node="1",le="1"}'
        values: '0+100x20'
      - series: 'dsvisor_e2e_request_latency_seconds_bucket{host="h:8080",instance="0",numa_node="1",le="+Inf"}'
        values: '0+100x20'
      - series: 'dsvisor_instance_up{host="h:8080",instance="1",numa_node="0"}'
        values: '1 1 0x20'
    promql_expr_test:
      # In ms, rounded: rate() leaves the last bit of the quotient to chance.
      - expr: round(1000 * host_instance:dsvisor_e2e_request_latency_seconds:p99_1m)
        eval_time: 3m
        exp_samples:
          - labels: '{host="h:8080",instance="0",numa_node="1"}'
            value: 975
    alert_rule_test:
      - eval_time: 1m
        alertname: DsvisorInstanceDown
        exp_alerts: []
      - eval_time: 3m
        alertname: DsvisorInstanceDown
        exp_alerts:
          - exp_labels: {host: "h:8080", instance: "1", numa_node: "0"}
            exp_annotations:
              summary: "instance 1 on h:8080 takes no requests"
YAML
check "promtool test rules: P99 0.975 s per worker, InstanceDown after 2 min" promtool test rules "$tmp/rules-test.yml"
sed 's/value: 975/value: 950/' "$tmp/rules-test.yml" >"$tmp/rules-test-bad.yml"
check "a wrong expected P99 fails promtool test rules" bash -c "! promtool test rules '$tmp/rules-test-bad.yml'"

# Names: every dsvisor_* metric the config names is written somewhere in the sources.
names=$(grep -oh 'dsvisor_[a-z0-9_]*' "$src/deploy/prometheus.yml" "$src/deploy/dsvisor-rules.yml" | sed 's/_bucket$//' | sort -u)
for n in $names; do
        check "$n is exported by dsvisor" grep -rqw "$n" "$src/supervisor" --include='*.c'
done
for h in e2e_request_latency time_to_first_token inter_token_latency request_queue_time; do
        check "dsvisor_${h}_seconds is documented in prometheus.yml" grep -q "dsvisor_${h}_seconds" "$src/deploy/prometheus.yml"
done

# The relabelling this file relies on: scraped instance -> exported_instance -> instance.
check "metric_relabel_configs moves exported_instance back to instance" /usr/bin/python3 - "$src/deploy/prometheus.yml" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
job = [j for j in c["scrape_configs"] if j["job_name"] == "dsvisor"][0]
assert not job.get("honor_labels", False)
assert any(r.get("target_label") == "host" and r.get("source_labels") == ["__address__"] for r in job["relabel_configs"])
mr = job["metric_relabel_configs"]
assert any(r.get("source_labels") == ["exported_instance"] and r.get("target_label") == "instance" and r.get("regex") == "(.+)" for r in mr)
assert any(r.get("action") == "labeldrop" and r.get("regex") == "exported_instance" for r in mr)
PY

sed 's/^  scrape_interval: 5s/  scrape_interval: 5 seconds/' "$src/deploy/prometheus.yml" >"$tmp/bad.yml"
cp "$src/deploy/dsvisor-rules.yml" "$tmp/"
check "a broken copy fails promtool check config" bash -c "! promtool check config '$tmp/bad.yml'"
exit $failed
