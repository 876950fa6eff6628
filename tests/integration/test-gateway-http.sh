#!/usr/bin/env bash
# The gateway over HTTP with curl, in front of fake workers (tests/integration/fake-worker.c):
# OpenAI shapes streamed and not, bad input, limits, auth, admission (429/503), deadlines
# (504), cancel on disconnect, retry and mid-stream failure, worker restarts, health
# polling, and /metrics checked by promtool. Ends with "N passed, N failed".
set -u
B=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build-gw" && pwd)}/bin
for tool in curl python3 promtool; do
  command -v $tool >/dev/null || { echo "missing $tool (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
done
T=$(mktemp -d /tmp/dsv-gw-http.XXXXXX)   # 0700: the IPC sockets' directory must be private
PIDS=()
# stops PIDS; a process still there after 10 s is killed (its stacks were printed by stops())
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 100); do alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done; [ $alive = 0 ] && break; sleep 0.1; done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null; rm -rf "$T"
}
trap cleanup EXIT
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name" "$*"; fi; }
# stops PID: SIGTERM, then its exit status within 10 s must be 0; a process that does not
# stop has its threads' stacks printed (gdb) so a shutdown hang shows where it waits
stops() {
  local p=$1 i
  kill "$p" 2>/dev/null || return 1
  for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    echo "     pid $p still running 10 s after SIGTERM:"
    command -v gdb >/dev/null && gdb -p "$p" -batch -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' | sed 's/^/     /'
    kill -9 "$p"; wait "$p" 2>/dev/null; return 1
  fi
  wait "$p"; local rc=$?
  [ $rc = 0 ] || echo "     pid $p exited with status $rc"
  return $rc
}

# worker NAME [fake-worker options]: starts ipc://$T/NAME.sock, logs to $T/NAME.log
worker() {
  local n=$1; shift
  "$B/fake-worker" --url "ipc://$T/$n.sock" --log "$T/$n.log" "$@" 2>>"$T/$n.err" &
  PIDS+=($!); eval "PID_$n=$!"
  for _ in $(seq 50); do [ -S "$T/$n.sock" ] && return 0; sleep 0.05; done
  echo "worker $n did not start"; return 1
}
# server NAME [test-server options]: PORT_NAME holds its port; commands go to fd of $T/NAME.ctl
server() {
  local n=$1; shift
  mkfifo "$T/$n.ctl"
  "$B/dsvisor-gateway-test-server" --model dsv-test --port-file "$T/$n.port" "$@" <"$T/$n.ctl" >"$T/$n.out" 2>"$T/$n.err" &
  PIDS+=($!); eval "SPID_$n=$!"
  exec {fd}>"$T/$n.ctl"; eval "CTL_$n=$fd"
  for _ in $(seq 100); do [ -s "$T/$n.port" ] && break; sleep 0.05; done
  eval "PORT_$n=$(cat "$T/$n.port")"
  # links connect in the background: wait until /ready says so (or 2 s)
  for _ in $(seq 40); do curl -sf --max-time 5 "http://127.0.0.1:$(cat "$T/$n.port")/ready" >/dev/null && break; sleep 0.05; done
}
# ctl NAME "command": one command to the test server, waits for its answer line
ctl() {
  local n=$1 fd; eval "fd=\$CTL_$n"; local before; before=$(wc -l <"$T/$n.out")
  echo "$2" >&"$fd"
  for _ in $(seq 100); do [ "$(wc -l <"$T/$n.out")" -gt "$before" ] && break; sleep 0.02; done
  tail -n1 "$T/$n.out"
}
# post PORT PATH BODY [curl args]: body to $T/body, status to stdout, headers to $T/hdr
post() {
  local port=$1 path=$2 body=$3; shift 3
  curl -s --max-time 15 -o "$T/body" -D "$T/hdr" -w '%{http_code}' -H 'Content-Type: application/json' \
    "$@" --data-binary "$body" "http://127.0.0.1:$port$path"
}
get() { curl -s --max-time 10 -o "$T/body" -D "$T/hdr" -w '%{http_code}' "${@:2}" "http://127.0.0.1:$1"; }
# json EXPR: evaluates a Python expression over the parsed $T/body (as j)
json() { python3 -c "import json,sys; j=json.load(open('$T/body')); sys.exit(0 if ($1) else 1)" 2>/dev/null; }
is_error() { json "set(j['error'])=={'message','type','param','code'} and j['error']['type']=='$1'"; }
# sse: concatenated content of $T/body's chunks; checks framing
sse() {
  python3 - "$T/body" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), "bad framing"
assert events[-1] == "data: [DONE]", "no [DONE]"
out, errors, usage = [], [], None
for e in events[:-1]:
    j = json.loads(e[6:])
    if "error" in j: errors.append(j["error"]["code"]); continue
    if j.get("usage"): usage = j["usage"]
    for c in j["choices"]:
        out.append(c.get("text") or c.get("delta", {}).get("content") or "")
        if c.get("finish_reason"): out.append("|" + c["finish_reason"])
print("".join(out) + ("|error:" + ",".join(errors) if errors else "") + ("|usage:%d" % usage["total_tokens"] if usage else ""))
PY
}
export -f post get json is_error sse; export T
URL() { echo "ipc://$T/$1.sock"; }
completion() { echo "{\"model\":\"dsv-test\",\"prompt\":\"$1\",\"max_tokens\":${2:-50}${3:-}}"; }
chat() { echo "{\"model\":\"dsv-test\",\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}]${2:-}}"; }

# ---- one server, two healthy workers: the API ----------------------------------------------
worker a --delay-ms 2; worker b --delay-ms 2
server main --instance a="$(URL a)" --instance b="$(URL b)" --conn-timeout-s 2
P=$PORT_main
check health          [ "$(get $P/health)" = 200 ]
check ready           [ "$(get $P/ready)" = 200 ]
check models          bash -c "[ $(get $P/v1/models) = 200 ] && grep -q '\"id\":\"dsv-test\"' $T/body"
check unknown-url-404 bash -c "[ $(get $P/v1/nothing) = 404 ]"
check unknown-url-json is_error invalid_request_error
check wrong-method-405 [ "$(get $P/v1/chat/completions)" = 405 ]

s=$(post $P /v1/completions "$(completion 'the quick brown fox jumps' 3)")
check completion-200 [ "$s" = 200 ]
check completion-shape json "j['object']=='text_completion' and j['choices'][0]['text']=='the quick brown' and j['choices'][0]['finish_reason']=='length' and j['usage']=={'prompt_tokens':5,'completion_tokens':3,'total_tokens':8} and j['id'].startswith('cmpl-')"
s=$(post $P /v1/chat/completions "$(chat 'hello there world')")
check chat-200 [ "$s" = 200 ]
check chat-shape json "j['object']=='chat.completion' and j['choices'][0]['message']=={'role':'assistant','content':'hello there world'} and j['choices'][0]['finish_reason']=='stop' and j['usage']['completion_tokens']==3"
s=$(post $P /v1/chat/completions "$(chat 'one two three' ',"logprobs":true,"top_logprobs":2')")
check chat-logprobs json "len(j['choices'][0]['logprobs']['content'])==3 and j['choices'][0]['logprobs']['content'][1]['token']==' two' and len(j['choices'][0]['logprobs']['content'][0]['top_logprobs'])==2"
s=$(post $P /v1/completions "$(completion 'one two' 5 ',"logprobs":1')")
check completion-logprobs json "j['choices'][0]['logprobs']['tokens']==['one',' two'] and j['choices'][0]['logprobs']['text_offset']==[0,3]"

s=$(post $P /v1/chat/completions "$(chat 'hello there world' ',"stream":true')" -N)
check chat-stream-200 bash -c "[ $s = 200 ] && grep -qi '^content-type: text/event-stream' $T/hdr"
check chat-stream-content [ "$(sse)" = "hello there world|stop" ]
check chat-stream-role-first bash -c "head -c 400 $T/body | grep -q '\"delta\":{\"role\":\"assistant\"'"
check chat-stream-no-usage-by-default bash -c "! grep -q '\"usage\"' $T/body"
s=$(post $P /v1/chat/completions "$(chat 'hello there world' ',"stream":true,"stream_options":{"include_usage":true}')" -N)
check chat-stream-usage [ "$(sse)" = "hello there world|stop|usage:6" ]
s=$(post $P /v1/completions "$(completion 'a b c d' 2 ',"stream":true')" -N)
check completion-stream [ "$(sse)" = "a b|length" ]

# 40 concurrent requests, half streamed: every answer complete and right
conc=()
for i in $(seq 40); do
  if [ $((i % 2)) = 0 ]; then
    curl -s -N --max-time 20 -o "$T/conc$i" -d "$(chat "c$i d$i e$i" ',"stream":true')" "http://127.0.0.1:$P/v1/chat/completions" &
  else
    curl -s --max-time 20 -o "$T/conc$i" -d "$(completion "c$i d$i e$i" 5)" "http://127.0.0.1:$P/v1/completions" &
  fi
  conc+=($!)
done
wait "${conc[@]}"
good=0
for i in $(seq 40); do
  if [ $((i % 2)) = 0 ]; then cp "$T/conc$i" "$T/body"; [ "$(sse)" = "c$i d$i e$i|stop" ] && good=$((good + 1))
  else grep -q "\"text\":\"c$i d$i e$i\"" "$T/conc$i" && good=$((good + 1)); fi
done
check concurrent-40 [ "$good" = 40 ]
# two requests on one kept-alive connection
out=$(curl -s --max-time 10 -o /dev/null -w '%{http_code} %{num_connects}\n' -d "$(completion 'keep alive' 2)" \
      "http://127.0.0.1:$P/v1/completions" --next -s -o /dev/null -w '%{http_code} %{num_connects}\n' \
      -d "$(completion 'keep alive' 2)" "http://127.0.0.1:$P/v1/completions")
check keep-alive [ "$(echo $out)" = "200 1 200 0" ]

# ---- bad input: 4xx JSON, server unaffected -------------------------------------------------
check malformed-json     bash -c "[ \$(post $P /v1/completions '{\"model\":\"dsv-test\",') = 400 ]"
check malformed-json-shape is_error invalid_request_error
check wrong-type         [ "$(post $P /v1/completions '{"model":"dsv-test","prompt":"x","temperature":"hot"}')" = 400 ]
check wrong-type-param   json "j['error']['param']=='temperature'"
check huge-number        [ "$(post $P /v1/completions '{"model":"dsv-test","prompt":"x","max_tokens":1e308}')" = 400 ]
check negative-max-tokens [ "$(post $P /v1/completions '{"model":"dsv-test","prompt":"x","max_tokens":-5}')" = 400 ]
check absurd-max-tokens  [ "$(post $P /v1/completions '{"model":"dsv-test","prompt":"x","max_tokens":99999999}')" = 400 ]
printf '{"model":"dsv-test","prompt":"caf\xff"}' >"$T/badutf8"
check invalid-utf8       [ "$(post $P /v1/completions "@$T/badutf8")" = 400 ]
check unknown-model-404  [ "$(post $P /v1/completions '{"model":"gpt-4","prompt":"x"}')" = 404 ]
check unknown-model-code json "j['error']['code']=='model_not_found'"
head -c $((10 << 20)) /dev/zero | tr '\0' 'a' >"$T/big"
check body-10MB-413      [ "$(post $P /v1/completions "@$T/big")" = 413 ]
head -c $((2 << 20)) /dev/zero | tr '\0' 'a' >"$T/big2"
check chunked-2MB-413    [ "$(post $P /v1/completions "@$T/big2" -H 'Transfer-Encoding: chunked')" = 413 ]
python3 -c "print('{\"model\":\"dsv-test\",\"prompt\":\"' + 'x ' * 200000 + '\"}')" >"$T/longprompt"
check prompt-too-long    bash -c "[ \$(post $P /v1/completions @$T/longprompt) = 400 ] && grep -q context_length_exceeded $T/body"
check worker-400         bash -c "[ \$(post $P /v1/completions '$(completion __error__ 5)') = 400 ] && grep -q 'the fake worker refuses' $T/body"
check worker-500-no-internals bash -c "[ \$(post $P /v1/completions '$(completion __internal__ 5)') = 500 ] && ! grep -q secret $T/body"
check worker-overloaded-429 bash -c "[ \$(post $P /v1/completions '$(completion __overload__ 5)') = 429 ] && grep -qi '^retry-after:' $T/hdr"
# a half-sent request is dropped after the connection timeout (2 s), the server unaffected
exec {slow}<>"/dev/tcp/127.0.0.1/$P"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"model"' >&$slow
t0=$(date +%s.%N); timeout 6 cat <&$slow >/dev/null; rc=$?; t1=$(date +%s.%N)
exec {slow}>&-
check slow-request-closed bash -c "[ $rc = 0 ] && python3 -c 'import sys; sys.exit(0 if 1.5 < $t1 - $t0 < 5 else 1)'"
check server-still-serves bash -c "[ \$(post $P /v1/completions '$(completion 'still alive' 5)') = 200 ]"
check no-paths-in-errors bash -c "! grep -l -e '/tmp' -e '\.c:' $T/body >/dev/null"

# ---- readiness and 503 -----------------------------------------------------------------------
ctl main "ready 0 0" >/dev/null; ctl main "ready 1 0" >/dev/null
check ready-503          [ "$(get $P/ready)" = 503 ]
s=$(post $P /v1/completions "$(completion 'x y' 2)")
check no-instance-503    bash -c "[ $s = 503 ] && grep -qi '^retry-after: 5' $T/hdr"
ctl main "ready 1 1" >/dev/null
check ready-again        [ "$(get $P/ready)" = 200 ]
s=$(post $P /v1/completions "$(completion 'x y' 2)")
check routes-to-ready-one bash -c "[ $s = 200 ] && [ \$(grep -c request $T/b.log) -ge 1 ]"
ctl main "ready 0 1" >/dev/null

# ---- worker restart at the same URL, and a link replaced with another URL -----------------
kill "$PID_a"; wait "$PID_a" 2>/dev/null; rm -f "$T/a.sock"
sleep 0.3
check restart-down bash -c "curl -s --max-time 10 http://127.0.0.1:$P/metrics | grep -q 'dsvisor_instance_up{instance=\"a\",numa_node=\"0\",model_name=\"dsv-test\"} 0'"
worker a --delay-ms 2
for _ in $(seq 60); do curl -s --max-time 10 "http://127.0.0.1:$P/metrics" | grep -q 'dsvisor_instance_up{instance="a",numa_node="0",model_name="dsv-test"} 1' && break; sleep 0.1; done
check restart-up bash -c "curl -s --max-time 10 http://127.0.0.1:$P/metrics | grep -q 'dsvisor_instance_up{instance=\"a\",numa_node=\"0\",model_name=\"dsv-test\"} 1'"
worker c --delay-ms 2
check set-url [ "$(ctl main "url 1 $(URL c)")" = "ok 0" ]
ctl main "ready 0 0" >/dev/null; sleep 0.3
s=$(post $P /v1/completions "$(completion 'via c' 2)")
check set-url-routes bash -c "[ $s = 200 ] && grep -q request $T/c.log"
check remove [ "$(ctl main "remove 1")" = "ok 0" ]
check remove-gone bash -c "! curl -s --max-time 10 http://127.0.0.1:$P/metrics | grep -q 'instance=\"b\"'"
check add [ "$(ctl main "add b2 $(URL b)")" = "ok 1" ]
ctl main "ready 0 1" >/dev/null

# ---- metrics ---------------------------------------------------------------------------------
curl -s --max-time 10 "http://127.0.0.1:$P/metrics" >"$T/metrics"
check promtool bash -c "promtool check metrics <$T/metrics"
for m in dsvisor_e2e_request_latency_seconds dsvisor_time_to_first_token_seconds dsvisor_inter_token_latency_seconds dsvisor_request_queue_time_seconds; do
  check "metric-$m" grep -q "^${m}_bucket{instance=\"a\",numa_node=\"0\",model_name=\"dsv-test\",le=\"+Inf\"}" "$T/metrics"
done
check metric-status-counts bash -c "grep -q 'dsvisor_requests_total{code=\"200\"}' $T/metrics && grep -q 'dsvisor_requests_total{code=\"503\"} 1' $T/metrics && grep -q 'dsvisor_requests_total{code=\"413\"} 2' $T/metrics"
check metric-tokens grep -q '^dsvisor_generation_tokens_total{instance="a",numa_node="0",model_name="dsv-test"} [1-9]' "$T/metrics"
check metric-hook grep -q '^dsvisor_test_hook_scrapes_total [1-9]' "$T/metrics"

# ---- API keys -------------------------------------------------------------------------------
printf '# test keys\nsk-test-one\nsk-test-two\n' >"$T/keys"
worker keyed --delay-ms 2
server auth --instance keyed="$(URL keyed)" --api-keys "$T/keys"
PA=$PORT_auth
check auth-missing-401 bash -c "[ \$(post $PA /v1/completions '$(completion 'x' 1)') = 401 ] && grep -q invalid_api_key $T/body"
check auth-wrong-401   [ "$(post $PA /v1/completions "$(completion x 1)" -H 'Authorization: Bearer sk-test-on')" = 401 ]
s=$(post $PA /v1/completions "$(completion x 1)" -H "Authorization: Bearer sk-test-two"; echo " rc=$?"); cat $T/hdr $T/body; check auth-ok [ "$s" = "200 rc=0" ]
check auth-models-401  [ "$(get $PA/v1/models)" = 401 ]
check auth-health-open [ "$(get $PA/health)" = 200 ]
check auth-metrics-open [ "$(get $PA/metrics)" = 200 ]
check auth-status-page-open bash -c "[ \$(get $PA/) = 200 ] && grep -qi '^content-type: text/html' $T/hdr"
check auth-status-open bash -c "[ \$(get $PA/status) = 200 ] && grep -q '\"keys\":true' $T/body && grep -q '\"name\":\"keyed\"' $T/body"
server authp --instance keyed="$(URL keyed)" --api-keys "$T/keys" --protect-metrics 1
PP=$PORT_authp
check protect-metrics-401 bash -c "[ \$(get $PP/metrics) = 401 ] && grep -qi '^www-authenticate: Bearer' $T/hdr"
check protect-metrics-key [ "$(get $PP/metrics -H 'Authorization: Bearer sk-test-one')" = 200 ]
check protect-health-401 [ "$(get $PP/health)" = 401 ]
check protect-root-401 [ "$(get $PP/)" = 401 ]
check protect-unknown-key-404 [ "$(get $PP/nothing -H 'Authorization: Bearer sk-test-one')" = 404 ]
check protect-root-key-page [ "$(get $PP/ -H 'Authorization: Bearer sk-test-one')" = 200 ]
check protect-status-401 [ "$(get $PP/status)" = 401 ]
check protect-ready-open bash -c "[ \$(get $PP/ready) != 401 ]"

# ---- admission: queue limit -> 429 + Retry-After ---------------------------------------------
worker slow --delay-ms 300
server adm --instance slow="$(URL slow)" --max-running 1 --max-queue-per-instance 1
PQ=$PORT_adm
for i in 1 2; do curl -s --max-time 10 -o /dev/null -d "$(completion 'w1 w2 w3 w4' 4)" "http://127.0.0.1:$PQ/v1/completions" & PIDS+=($!); sleep 0.2; done
# both admitted (one running, one waiting) before the third arrives, however loaded the host
for _ in $(seq 50); do curl -s --max-time 5 "http://127.0.0.1:$PQ/metrics" | grep -q '^dsvisor_num_requests_waiting{instance="slow",numa_node="0",model_name="dsv-test"} 1' && break; sleep 0.1; done
s=$(post $PQ /v1/completions "$(completion 'x' 1)")
check queue-full-429 bash -c "[ $s = 429 ] && grep -qi '^retry-after: [0-9]' $T/hdr && grep -q rate_limit_exceeded $T/body"

# ---- load fed by the caller steers routing and admission ------------------------------------
worker lx --delay-ms 2; worker ly --delay-ms 2
server lb --instance lx="$(URL lx)" --instance ly="$(URL ly)" --max-queue-per-instance 4
ctl lb "load 0 0 50" >/dev/null
for i in 1 2 3 4; do post $PORT_lb /v1/completions "$(completion 'steer me' 2)" >/dev/null; done
check load-steers-routing bash -c "[ ! -s $T/lx.log ] && [ \$(grep -c request $T/ly.log) = 4 ]"
ctl lb "load 0 9 0" >/dev/null; ctl lb "load 1 9 0" >/dev/null
check load-queue-full-429 bash -c "[ \$(post $PORT_lb /v1/completions '$(completion x 1)') = 429 ] && grep -qi '^retry-after:' $T/hdr"
# with every queue full the refusal comes before the body is parsed: a body that is not
# JSON gets the same 429 (whole, with Retry-After) and counts as queue_full; once there
# is room it is a 400 again
check load-queue-full-before-parse bash -c "[ \$(post $PORT_lb /v1/completions '{not json') = 429 ] && grep -qi '^retry-after: [0-9]' $T/hdr && is_error rate_limit_error && json \"j['error']['code'] == 'rate_limit_exceeded'\""
check load-queue-full-before-parse-counted bash -c "curl -s http://127.0.0.1:$PORT_lb/metrics | grep -q '^dsvisor_requests_rejected_total{reason=\"queue_full\"} 2$'"
ctl lb "load 0 -" >/dev/null; ctl lb "load 1 -" >/dev/null
check load-cleared [ "$(post $PORT_lb /v1/completions "$(completion x 1)")" = 200 ]
check load-cleared-parse-400 bash -c "[ \$(post $PORT_lb /v1/completions '{not json') = 400 ] && is_error invalid_request_error"

# ---- deadline -> 504, and the worker is told to cancel --------------------------------------
worker stall --delay-ms 5 --stall-after 1
server dl --instance stall="$(URL stall)" --timeout-ms 800
PD=$PORT_dl
t0=$(date +%s.%N); s=$(post $PD /v1/completions "$(completion 'a b c d' 4)"); t1=$(date +%s.%N)
check deadline-504 bash -c "[ $s = 504 ] && grep -q deadline_exceeded $T/body && python3 -c 'import sys; sys.exit(0 if $t1 - $t0 < 3 else 1)'"
sleep 0.2
check deadline-cancels grep -q '^cancel ' "$T/stall.log"
s=$(post $PD /v1/chat/completions "$(chat 'a b c d' ',"stream":true')" -N)
check deadline-stream-error-event bash -c "[ $s = 200 ] && [ \"\$(sse)\" = 'a|error:deadline_exceeded' ]"

# ---- a client that disconnects cancels its generation ----------------------------------------
worker dis --delay-ms 200
server dc --instance dis="$(URL dis)"
PC=$PORT_dc
curl -s -N --max-time 0.7 -o /dev/null -d "$(chat 'one two three four five six seven eight nine ten' ',"stream":true')" "http://127.0.0.1:$PC/v1/chat/completions"
sleep 0.5
check disconnect-stream-cancels grep -q '^cancel ' "$T/dis.log"
curl -s --max-time 0.5 -o /dev/null -d "$(completion 'one two three four five six seven eight nine ten' 10)" "http://127.0.0.1:$PC/v1/completions"
sleep 0.5
check disconnect-blocking-cancels [ "$(grep -c '^cancel ' "$T/dis.log")" = 2 ]

# ---- a stream's idle limit: tokens slower than it still flow; a client that stops reading is
# dropped once a block cannot be written for that long, and its generation cancelled ---------
worker slowtok --delay-ms 1500
server st --instance slowtok="$(URL slowtok)" --conn-timeout-s 1
s=$(post $PORT_st /v1/completions "$(completion 'a b c' 3 ',"stream":true')" -N)
check stream-slower-than-idle-limit bash -c "[ $s = 200 ] && [ \"\$(sse)\" = 'a b c|stop' ]"
worker stallread --delay-ms 10
server sr --instance stallread="$(URL stallread)" --conn-timeout-s 2
# 4000 tokens with 20 alternatives each are megabytes of events: more than the sockets hold
python3 - "$PORT_sr" "$T/stallread.log" <<'PY' &
import json, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", int(sys.argv[1])))
body = json.dumps({"model": "dsv-test", "prompt": "w " * 4000, "max_tokens": 4096, "stream": True,
                   "logprobs": 20}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and "cancel" not in open(sys.argv[2]).read():
    time.sleep(0.2)
PY
PIDS+=($!); stall_client=$!
wait $stall_client
check stalled-reader-cancelled grep -q '^cancel ' "$T/stallread.log"

# ---- retries: a worker dying before its first token is retried elsewhere ---------------------
worker die0 --delay-ms 2 --die-after-tokens 0; worker good --delay-ms 2
server rt --instance die0="$(URL die0)" --instance good="$(URL good)" --route round-robin
PR=$PORT_rt
s1=$(post $PR /v1/completions "$(completion 'alpha beta' 5)"); b1=$(cat $T/body)
s2=$(post $PR /v1/chat/completions "$(chat 'alpha beta' ',"stream":true')" -N); c2=$(sse)
check retry-transparent bash -c "[ $s1 = 200 ] && [ $s2 = 200 ] && [[ '$b1' == *'alpha beta'* ]] && [ '$c2' = 'alpha beta|stop' ]"
check retry-counted bash -c "curl -s --max-time 10 http://127.0.0.1:$PR/metrics | grep -q '^dsvisor_request_retries_total 1$'"

# ---- a worker dying mid-stream: explicit error event, then [DONE]; nothing hangs -------------
worker die2 --delay-ms 20 --die-after-tokens 2
server ms --instance die2="$(URL die2)"
PM=$PORT_ms
t0=$(date +%s.%N); s=$(post $PM /v1/chat/completions "$(chat 'one two three four five' ',"stream":true')" -N); rc=$?; t1=$(date +%s.%N)
check midstream-error-event bash -c "[ $s = 200 ] && [ \"\$(sse)\" = 'one two|error:instance_failed' ]"
check midstream-no-hang python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 3 else 1)"
s=$(post $PM /v1/completions "$(completion 'x' 1)")
check midstream-then-503 [ "$s" = 503 ]

# ---- health polling decides readiness ----------------------------------------------------------
worker loading --state loading
server hp --instance loading="$(URL loading)" --health-ms 100
sleep 0.4
check health-poll-loading [ "$(get $PORT_hp/ready)" = 503 ]
worker readyw --state ready
ctl hp "url 0 $(URL readyw)" >/dev/null
for _ in $(seq 30); do [ "$(get $PORT_hp/ready)" = 200 ] && break; sleep 0.1; done
check health-poll-ready [ "$(get $PORT_hp/ready)" = 200 ]

# a worker restarted behind an unbroken pipe shows in its health reply's boot id: its stream
# fails over at the next poll instead of waiting for the deadline (uptime alone missed it
# when the gateway's first poll came early and the next one late)
worker rs --delay-ms 20 --restart-after-tokens 1
server rsv --instance rs="$(URL rs)" --health-ms 100
t0=$(date +%s.%N); s=$(post $PORT_rsv /v1/chat/completions "$(chat 'one two three' ',"stream":true')" -N); t1=$(date +%s.%N)
check restart-boot-id-error-event bash -c "[ $s = 200 ] && [ \"\$(sse)\" = 'one|error:instance_failed' ] && python3 -c 'import sys; sys.exit(0 if $t1 - $t0 < 3 else 1)'"

# every server still up, then each stops cleanly on SIGTERM (exit 0 within 10 s)
for n in main auth adm lb dl dc rt ms hp rsv; do
  eval "p=\$SPID_$n"
  kill -0 "$p" 2>/dev/null || bad "server-$n-alive"
done
for n in main auth adm lb dl dc rt ms hp rsv; do
  eval "p=\$SPID_$n"
  check "clean-stop-$n" stops "$p"
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
