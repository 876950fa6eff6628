#!/usr/bin/env bash
# dsvisor start --log-format json: every line the supervisor and its workers write is one
# JSON object with time, level, source, instance, event and fields; no request is logged
# and a request's prompt appears in no line unless --log-requests is given, and then the
# request line carries it. The default text format keeps "<prio>dsvisor...: " lines, also
# without the prompt. A bad --log-format is refused naming the option.
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-log-format.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
need_worker
trap 'dsv_stop_all; rm -rf "$tmp"' EXIT

# run NAME OPTIONS...: dsvisor (the bundled default model, one instance) with OPTIONS, one
# completion and one chat request each carrying a marker prompt, then a clean stop.
run() {
        local name=$1
        shift
        mkdir -p "$tmp/$name"
        "$dsvisor" start --instances 1 --threads-per-instance 1 --host 127.0.0.1 --port 0 \
                --runtime-dir "$tmp/$name/run" --hugepages off --grace-ms 5000 "$@" >"$tmp/$name/log" 2>&1 &
        dsv_pid[$name]=$!
        dsv_wait_ready "$name" 1 120
        local url="http://127.0.0.1:${dsv_port[$name]}"
        curl -s -m 60 -o "$tmp/$name/c.json" "$url/v1/completions" -H 'Content-Type: application/json' \
                -d '{"model":"default","prompt":"SECRET-MARKER-7f3a in the beginning","max_tokens":4}'
        curl -s -m 60 -o "$tmp/$name/chat.json" "$url/v1/chat/completions" -H 'Content-Type: application/json' \
                -d '{"model":"default","messages":[{"role":"user","content":"CHAT-MARKER-91c2 hello"}],"max_tokens":4}'
        kill -TERM "${dsv_pid[$name]}"
        dsv_wait_exit "$name" 30
        check "$name: answered and stopped cleanly" \
                bash -c "grep -q '\"choices\"' '$tmp/$name/c.json' && grep -q '\"choices\"' '$tmp/$name/chat.json' && [[ $dsv_rc == 0 ]]"
}

run json --log-format json
python3 - "$tmp/json/log" <<'PY' || failed=$((failed + 1))
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l]
bad = 0
def check(what, ok, detail=""):
    global bad
    print(("ok     " if ok else "NOT OK ") + what + (f"\n       {detail}" if detail and not ok else ""))
    bad |= not ok
objs = []
for l in lines:
    try:
        objs.append(json.loads(l))
    except ValueError:
        check("every line is one JSON object", False, l)
check(f"{len(lines)} lines, every one a JSON object", len(objs) == len(lines) and len(lines) > 5)
keys = {"time", "level", "source", "instance", "event", "fields"}
check("each has exactly time, level, source, instance, event, fields",
      all(set(o) == keys for o in objs), [o for o in objs if set(o) != keys][:1])
check("time is RFC 3339 UTC with milliseconds", all(len(o["time"]) == 24 and o["time"].endswith("Z") for o in objs))
check("levels are syslog names", all(o["level"] in ("err", "warning", "notice", "info", "debug") for o in objs))
check("the workers' lines name their instance",
      any(o["source"] == "dsvisor-worker" and o["instance"] == "0" for o in objs))
check("the supervisor's lines have instance null and free text in fields.message",
      any(o["source"] == "dsvisor" and o["instance"] is None and o["event"] == "log" and o["fields"]["message"]
          for o in objs))
check("no request line without --log-requests", not any(o["event"] == "request" for o in objs))
check("no prompt text in any line", not any("MARKER" in l for l in lines))
sys.exit(1 if bad else 0)
PY

run jsonreq --log-format json --log-requests
python3 - "$tmp/jsonreq/log" <<'PY' || failed=$((failed + 1))
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
req = [o for o in objs if o["event"] == "request"]
ok = len(req) == 2 and all(o["instance"] == "0" and o["fields"]["prompt_tokens"] > 0 and
                           o["fields"]["finish_reason"] in ("stop", "length") for o in req)
ok &= [o["fields"]["endpoint"] for o in req] == ["completions", "chat"]
ok &= req[0]["fields"]["prompt"] == "SECRET-MARKER-7f3a in the beginning"
ok &= json.loads(req[1]["fields"]["prompt"])[0]["content"] == "CHAT-MARKER-91c2 hello"
print(("ok     " if ok else "NOT OK ") + "--log-requests: one request line per request, with instance, tokens and prompt")
if not ok:
    print(req)
sys.exit(0 if ok else 1)
PY

run text
check "text (default): every line starts <prio>dsvisor" bash -c "! grep -v -E '^<[0-7]>dsvisor(-worker\\[0\\])?: ' '$tmp/text/log' | grep -q ."
check "text (default): no prompt text" bash -c "! grep -q MARKER '$tmp/text/log'"

check "--log-format yaml is refused naming the option" \
        bash -c "! '$dsvisor' start --log-format yaml --runtime-dir '$tmp/bad' 2>'$tmp/bad.err' && grep -q 'log-format' '$tmp/bad.err'"

echo "$failed failed"
exit $((failed > 0))
