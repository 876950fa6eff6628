#!/usr/bin/env bash
# Output drift detection end to end. Two fleets of `dsvisor start --instances 3` on the
# bundled default model under the same load, side by side: in "drift" the test hook
# DSV_TEST_PERTURB_LOGITS=2:0.7 multiplies instance 2's logits by 0.7 (worker/
# confidence.h), in "healthy" nothing is perturbed. A real Prometheus scrapes both with
# deploy/dsvisor-rules.yml. Checks, sampling /metrics every 3 s until the drift alert
# fires (at most 5 minutes):
# - drift: instance 2's dsvisor_instance_output_drift_pvalue is below 0.01 in every
#   sample that has one, instances 0 and 1 stay at or above it;
# - healthy: every instance stays at or above 0.01 in every sample;
# - Prometheus fires DsvisorOutputDrift for the drift fleet's instance 2 and for no other
#   instance of either fleet (pending or firing);
# - `dsvisor status` says DRIFTS for that instance only.
set -euo pipefail
if ! command -v prometheus >/dev/null; then
        echo "SKIP: no prometheus (Debian package prometheus)"
        exit 77
fi
src="${DSV_SOURCE_DIR:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-drift.XXXXXX")
failed=0
source "$src/tests/integration/test-deploy-lib.sh"
need_worker

prom_pid= load_pids=()
trap load_and_prom_cleanup EXIT

for fleet in drift healthy; do
        mkdir -p "$tmp/$fleet"
        if [[ $fleet == drift ]]; then hook=2:0.7; else hook=; fi
        DSV_TEST_PERTURB_LOGITS=$hook "$dsvisor" start --instances 3 --threads-per-instance 1 --host 127.0.0.1 \
                --port 0 --runtime-dir "$tmp/$fleet/run" --hugepages off --grace-ms 5000 >"$tmp/$fleet/log" 2>&1 &
        dsv_pid[$fleet]=$!
done
dsv_wait_ready drift 3 180
dsv_wait_ready healthy 3 180
check "the drift fleet's instance 2 (and no other) runs with the test hook on" \
        bash -c "[ \$(grep -c 'Test hook DSV_TEST_PERTURB_LOGITS' '$tmp/drift/log') = 1 ] &&
                 grep -q 'dsvisor-worker\[2\]: Test hook' '$tmp/drift/log' &&
                 ! grep -q 'Test hook' '$tmp/healthy/log'"

# The same load on both: 2 clients each, one request after another, varied prompts.
for fleet in drift healthy; do
        for c in 1 2; do
                (i=0; while :; do
                        i=$((i + 1))
                        curl -s -o /dev/null -m 60 "http://127.0.0.1:${dsv_port[$fleet]}/v1/completions" \
                                -H 'Content-Type: application/json' \
                                -d "{\"model\":\"default\",\"prompt\":\"And the LORD said unto $c $i\",\"max_tokens\":24,\"temperature\":1}" ||
                                sleep 0.5
                done) &
                load_pids+=($!)
        done
done

prom_start "127.0.0.1:${dsv_port[drift]},127.0.0.1:${dsv_port[healthy]}"
check "Prometheus is ready" curl -sf -m 2 "http://127.0.0.1:$prom_port/-/ready" -o /dev/null

python3 - "$api" "127.0.0.1:${dsv_port[drift]}" "127.0.0.1:${dsv_port[healthy]}" <<'PY' || failed=$((failed + 1))
import json, sys, time, urllib.parse, urllib.request
api, drift, healthy = sys.argv[1], sys.argv[2], sys.argv[3]
bad = 0
def check(what, ok, detail=""):
    global bad
    print(("ok     " if ok else "NOT OK ") + what + (f"\n       {detail}" if detail and not ok else ""))
    bad |= not ok

def pvalues(target):  # instance -> the smaller p-value of its signals
    text = urllib.request.urlopen(f"http://{target}/metrics", timeout=10).read().decode()
    p = {}
    for line in text.splitlines():
        if line.startswith("dsvisor_instance_output_drift_pvalue{"):
            labels, value = line.rsplit(" ", 1)
            inst = labels.split('instance="')[1].split('"')[0]
            p[inst] = min(p.get(inst, 1.0), float(value))
    return p

def alerts():
    q = urllib.parse.urlencode({"query": 'ALERTS{alertname="DsvisorOutputDrift"}'})
    j = json.load(urllib.request.urlopen(f"{api}/query?{q}", timeout=10))
    return [r["metric"] for r in j["data"]["result"]]

samples = {drift: {}, healthy: {}}
seen_alerts = []
fired = False
deadline = time.time() + 300
while time.time() < deadline:
    for t in (drift, healthy):
        for inst, p in pvalues(t).items():
            samples[t].setdefault(inst, []).append(p)
    a = alerts()
    seen_alerts += a
    fired = any(m["host"] == drift and m["instance"] == "2" and m["alertstate"] == "firing" for m in a)
    if fired and all(len(samples[t].get(i, [])) >= 10 for t in (drift, healthy) for i in "012"):
        break
    time.sleep(3)

for t, name in ((drift, "drift"), (healthy, "healthy")):
    for i in "012":
        s = samples[t].get(i, [])
        print(f"       {name} instance {i}: {len(s)} samples, p-value min {min(s) if s else '-'} max {max(s) if s else '-'}")
check("both fleets' instances have drift verdicts (10 samples or more each)",
      all(len(samples[t].get(i, [])) >= 10 for t in (drift, healthy) for i in "012"))
check("drift: instance 2's p-value is below 0.01 in every sample",
      samples[drift].get("2") and max(samples[drift]["2"]) < 0.01, samples[drift].get("2"))
check("drift: instances 0 and 1 stay at or above 0.01",
      all(min(samples[drift].get(i, [0])) >= 0.01 for i in "01"), {i: samples[drift].get(i) for i in "01"})
check("healthy: every instance stays at or above 0.01 under the same load",
      all(min(samples[healthy].get(i, [0])) >= 0.01 for i in "012"), samples[healthy])
check("Prometheus fires DsvisorOutputDrift for the drift fleet's instance 2", fired)
others = {(m["host"], m["instance"], m["alertstate"]) for m in seen_alerts
          if not (m["host"] == drift and m["instance"] == "2")}
check("and for no other instance of either fleet, pending or firing", not others, others)
sys.exit(1 if bad else 0)
PY

for fleet in drift healthy; do
        "$dsvisor" status --runtime-dir "$tmp/$fleet/run" >"$tmp/$fleet/status.txt"
done
check "dsvisor status: the drift fleet's instance 2 DRIFTS, 0 and 1 do not" \
        python3 - "$tmp/drift/status.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = dict(re.findall(r"^instance (\d+):(.*?)(?=^instance |\Z)", text, re.S | re.M))
ok = "output drift vs peers: DRIFTS" in blocks.get("2", "") and all(
    "output drift vs peers: none" in blocks.get(i, "") for i in "01")
print(text if not ok else "", end="")
sys.exit(0 if ok else 1)
PY
check "dsvisor status: no instance of the healthy fleet drifts" \
        bash -c "grep -c 'output drift vs peers: none' '$tmp/healthy/status.txt' | grep -qx 3"
if ((failed > 0)); then
        for fleet in drift healthy; do echo "--- $fleet log"; tail -20 "$tmp/$fleet/log"; done
fi
echo "$failed failed"
exit $((failed > 0))
