#!/usr/bin/env bash
# `dsvisor start --speculative ngram` end to end: the workers get the options, a greedy
# completion of a prompt that repeats itself is the same as on a plain `dsvisor start`,
# and /metrics shows the instance's draft and accepted token counters and its
# acceptance-length histogram (cumulative buckets, +Inf equal to _count, _sum the
# accepted drafts). A bad --speculative value is refused before anything starts, and so
# is mtp for a model without an MTP module, naming it. `--speculative mtp` on the bundled
# default model (DeepSeek-V3 with one MTP module) gives the plain completion and counts
# its drafts; so does `--draft-model` (the bundled model converted to int8 drafting for
# it; config key draft-model), while a draft model with another tokenizer, a relative
# path or one given with another method is refused before anything starts.
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-spec-metrics.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
need_worker
trap 'dsv_stop_all; rm -rf "$tmp"' EXIT

start() { # NAME ARGS...
        local name=$1
        shift
        mkdir -p "$tmp/$name"
        "$dsvisor" start --model "$dsv_model" --instances 1 --threads-per-instance 1 --host 127.0.0.1 --port 0 \
                --runtime-dir "$tmp/$name/run" --hugepages off --grace-ms 5000 "$@" >"$tmp/$name/log" 2>&1 &
        dsv_pid[$name]=$!
}

check "a bad method is refused" bash -c "! '$dsvisor' start --model '$dsv_model' --speculative draft --port 0 \
        --runtime-dir '$tmp/bad' 2>'$tmp/bad.err' && grep -q 'speculative' '$tmp/bad.err'"
check "mtp without an MTP module is refused" bash -c "! '$dsvisor' start --model '$dsv_model' --speculative mtp \
        --port 0 --runtime-dir '$tmp/bad-mtp' 2>'$tmp/bad-mtp.err' && grep -q 'has no MTP module' '$tmp/bad-mtp.err'"

default_model="$DSV_SOURCE_DIR/models/default"
check "a draft model with another tokenizer is refused" bash -c "! '$dsvisor' start --model '$default_model' \
        --draft-model '$dsv_model' --port 0 --runtime-dir '$tmp/bad-draft' 2>'$tmp/bad-draft.err' &&
        grep -q 'draft-model $dsv_model: its tokenizer differs' '$tmp/bad-draft.err'"
check "a relative draft model path is refused" bash -c "! '$dsvisor' start --model '$default_model' \
        --draft-model models/default --port 0 --runtime-dir '$tmp/bad-draft2' 2>'$tmp/bad-draft2.err' &&
        grep -q 'absolute' '$tmp/bad-draft2.err'"
check "a draft model with another method is refused" bash -c "! '$dsvisor' start --model '$default_model' \
        --speculative ngram --draft-model '$default_model' --port 0 --runtime-dir '$tmp/bad-draft3' \
        2>'$tmp/bad-draft3.err' && grep -q 'draft-model goes with speculative draft' '$tmp/bad-draft3.err'"
"$dsvisor" convert --model-path "$default_model" --output-dir "$tmp/draft" --quant-format int8 >"$tmp/convert.log" 2>&1 ||
        { echo "NOT OK converting the draft model"; cat "$tmp/convert.log"; exit 1; }
printf '{"draft-model": "%s"}\n' "$tmp/draft/model.dse" >"$tmp/draft.json"

start spec --speculative ngram --spec-k-min 1 --spec-k-max 4
start plain --speculative off
dsv_wait_ready spec 1 120
dsv_wait_ready plain 1 120
dsv_model="$default_model" start mtp --speculative mtp --spec-k-max 3
dsv_model="$default_model" start default_plain --speculative off
dsv_wait_ready mtp 1 180
dsv_wait_ready default_plain 1 180
dsv_model="$default_model" start draft --config "$tmp/draft.json" --spec-k-max 3
dsv_wait_ready draft 1 180
check "the worker got the draft model" grep -q -- "--draft-model $tmp/draft/model.dse" <(tr '\0' ' ' </proc/$(pgrep -P "${dsv_pid[draft]}" -f dsvisor-worker | head -1)/cmdline; echo)
check "the worker got the options" grep -q -- "--speculative ngram" <(tr '\0' ' ' </proc/$(pgrep -P "${dsv_pid[spec]}" -f dsvisor-worker | head -1)/cmdline; echo) 

prompt='[3,44,85,126,167,3,44,85,126,167,3,44,85,126,167,3,44]'
complete() { # NAME -> the completion's token text
        curl -s -m 60 "http://127.0.0.1:${dsv_port[$1]}/v1/completions" -H 'Content-Type: application/json' \
                -d "{\"model\":\"$dsv_model_id\",\"prompt\":$prompt,\"max_tokens\":48,\"temperature\":0}" |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
a=$(complete spec)
b=$(complete plain)
check "the same completion with and without speculation" test "$a" == "$b"
model_id_of() { curl -s -m 10 "http://127.0.0.1:${dsv_port[$1]}/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])'; }
complete_text() { # NAME -> greedy completion of a Bible verse on the default model
        curl -s -m 120 "http://127.0.0.1:${dsv_port[$1]}/v1/completions" -H 'Content-Type: application/json' \
                -d "{\"model\":\"$(model_id_of "$1")\",\"prompt\":\"In the beginning God created the heaven and the earth. And\",\"max_tokens\":40,\"temperature\":0}" |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
a=$(complete_text mtp)
b=$(complete_text default_plain)
check "the same completion with and without MTP drafts" test -n "$a" -a "$a" == "$b"
c=$(complete_text draft)
check "the same completion with and without a draft model" test -n "$c" -a "$c" == "$b"
check "the draft model's drafts were accepted" bash -c "for _ in \$(seq 1 50); do
        curl -s -m 5 'http://127.0.0.1:${dsv_port[draft]}/metrics' |
                awk '\$1 ~ /^dsvisor_spec_decode_accepted_tokens_total/ {n += \$2} END {exit !(n > 0)}' && exit 0
        sleep 0.2; done; exit 1"
# the gateway's worker counters come with its next stats poll (about once a second)
check "MTP drafts were accepted" bash -c "for _ in \$(seq 1 50); do
        curl -s -m 5 'http://127.0.0.1:${dsv_port[mtp]}/metrics' |
                awk '\$1 ~ /^dsvisor_spec_decode_accepted_tokens_total/ {n += \$2} END {exit !(n > 0)}' && exit 0
        sleep 0.2; done; exit 1"

url="http://127.0.0.1:${dsv_port[spec]}/metrics"
for _ in $(seq 1 100); do
        [[ $(curl -s -m 5 "$url" | awk '$1 ~ /^dsvisor_spec_decode_accepted_tokens_total/ {print $2 + 0}') -gt 0 ]] && break
        sleep 0.1
done
curl -s -m 5 "$url" >"$tmp/metrics.txt"
python3 - "$tmp/metrics.txt" <<'PY' && echo "ok     speculation counters and histogram on /metrics" || { echo "NOT OK speculation metrics"; grep spec_decode "$tmp/metrics.txt" | sed 's/^/       /'; exit 1; }
import re, sys
v = {}
for line in open(sys.argv[1]):
    if line.startswith("dsvisor_spec_decode"):
        k, x = line.rsplit(" ", 1)
        v[re.sub(r'instance="[^"]*",?', "", k)] = float(x)
def get(prefix):
    m = [x for k, x in v.items() if k.startswith(prefix)]
    assert len(m) == 1, (prefix, m)
    return m[0]
drafts, accepted = get("dsvisor_spec_decode_draft_tokens_total"), get("dsvisor_spec_decode_accepted_tokens_total")
count, total = get("dsvisor_spec_decode_acceptance_length_count"), get("dsvisor_spec_decode_acceptance_length_sum")
inf = [x for k, x in v.items() if 'le="+Inf"' in k][0]
buckets = [x for k, x in sorted(v.items()) if "_bucket" in k and "+Inf" not in k]
assert 0 < accepted <= drafts, (accepted, drafts)
assert total == accepted and inf == count > 0, (total, accepted, inf, count)
assert buckets == sorted(buckets) and buckets[-1] == count, buckets
PY
if command -v promtool >/dev/null; then
        check "promtool check metrics passes" bash -c "promtool check metrics <'$tmp/metrics.txt'"
fi
exit $((failed > 0))
