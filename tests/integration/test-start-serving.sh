#!/usr/bin/env bash
# `dsvisor start`'s serving options end to end, with the real worker on models/default:
#   run "a" (HTTP): API keys from --api-key and --api-key-file, served names and
#     max_model_len in /v1/models, max_tokens up to the context by default, prompt byte
#     and token limits, --chat-template, CORS preflights and headers, the per-address
#     cap and the first-byte, header and body deadlines (raw sockets: 429 and 408 status
#     lines), their counters and the connection budget in /metrics, and no key in the
#     log, /metrics or `dsvisor status`;
#   run "b" (HTTPS from a certificate openssl makes now, curl --cacert): --protect-metrics
#     puts /health, /metrics and / behind the key (/ready stays open), and
#     --request-timeout-ms bounds a completion (504);
#   starts that must be refused, each with a message naming the cause: a non-loopback
#     host without a key, a key file others can read, a chat template that does not
#     compile, a TLS key that does not match its certificate.
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-start-serving.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
dsv_model="$DSV_SOURCE_DIR/models/default"
need_worker
if ! command -v openssl >/dev/null; then
        echo "SKIP: no openssl (scripts/bootstrap.sh --with-tests installs it)"
        exit 77
fi
trap 'dsv_stop_all; rm -rf "$tmp"' EXIT

cli_key=sk-cli-$RANDOM$RANDOM-secret
file_key=sk-file-$RANDOM$RANDOM-secret
printf '# keys\n%s\n' "$file_key" >"$tmp/keys"
chmod 600 "$tmp/keys"
# A template of the message contents alone: the prompt is much shorter than the model's.
printf '%s' '{% for m in messages %}{{ m.content }}{% endfor %}' >"$tmp/plain.jinja"

# ---- starts that are refused ------------------------------------------------------------
refused() { # NAME PATTERN OPTION...: dsvisor start exits non-zero, its log matching PATTERN
        local name=$1 pattern=$2
        shift 2
        mkdir -p "$tmp/$name"
        if timeout 120 "$dsvisor" start --model "$dsv_model" --instances 1 --threads-per-instance 1 --port 0 \
                --runtime-dir "$tmp/$name/run" --hugepages off "$@" >"$tmp/$name/log" 2>&1; then
                return 1
        fi
        grep -q -- "$pattern" "$tmp/$name/log" || { sed 's/^/       /' "$tmp/$name/log"; return 1; }
}
check "a non-loopback host without a key is refused" refused open "allow-unauthenticated" --host 0.0.0.0
cp "$tmp/keys" "$tmp/keys-open"
chmod 644 "$tmp/keys-open"
check "a key file others can read is refused" refused keymode "keys-open' is open to other users" \
        --api-key-file "$tmp/keys-open"
printf '%s' '{% for m in messages %}{{ m.content }' >"$tmp/bad.jinja"
check "a chat template that does not compile is refused, naming the file" refused badtmpl "bad.jinja" \
        --chat-template "$tmp/bad.jinja"

# ---- run a: HTTP --------------------------------------------------------------------------
dsv_start a 1 --api-key "$cli_key" --api-key-file "$tmp/keys" --served-model-name ds --served-model-name deepseek-r1 \
        --n-ctx 64 --max-prompt-bytes 2048 --max-prompt-tokens 20 --chat-template "$tmp/plain.jinja" \
        --cors-origins "https://app.example, http://localhost:3000" --max-connections-per-ip 4 \
        --first-byte-timeout-s 2 --header-timeout-s 3 --body-timeout-s 3
dsv_wait_ready a 1 120 || exit 1
A="http://127.0.0.1:${dsv_port[a]}"
code() { curl -s -o "$tmp/body" -D "$tmp/hdr" -w '%{http_code}' -m 60 "$@"; }
json() { python3 -c "import json,sys; j=json.load(open('$tmp/body')); sys.exit(0 if ($1) else 1)"; }
auth=(-H "Authorization: Bearer $cli_key")

check "no key: 401 with WWW-Authenticate: Bearer" bash -c \
        "[ \"\$(curl -s -D - -o /dev/null -m 10 $A/v1/models | tr -d '\r' | grep -ci '^www-authenticate: Bearer$')\" = 1 ] &&
         [ \"\$(curl -s -o /dev/null -w '%{http_code}' -m 10 $A/v1/models)\" = 401 ]"
check "a wrong key: 401" [ "$(code -H 'Authorization: Bearer sk-wrong' "$A/v1/models")" = 401 ]
check "the --api-key key: 200" [ "$(code "${auth[@]}" "$A/v1/models")" = 200 ]
check "/v1/models lists both served names with max_model_len 64" json \
        "[m['id'] for m in j['data']] == ['ds', 'deepseek-r1'] and all(m['max_model_len'] == 64 for m in j['data'])"
check "the --api-key-file key: 200" [ "$(code -H "Authorization: Bearer $file_key" "$A/v1/models")" = 200 ]
check "/health and /metrics stay open without --protect-metrics" \
        [ "$(code "$A/health")$(code "$A/metrics")" = 200200 ]

chat='{"model":"deepseek-r1","messages":[{"role":"user","content":"And God said"}],"temperature":0}'
s=$(code "${auth[@]}" -H 'Content-Type: application/json' -d "$chat" "$A/v1/chat/completions")
# With a fixed default above 64 - prompt the worker would refuse the request (400).
check "no max_tokens: generates within the rest of the context (n-ctx 64)" bash -c "[ $s = 200 ] && python3 -c \"
import json; j = json.load(open('$tmp/body')); u = j['usage']
assert j['model'] == 'ds' and u['prompt_tokens'] + u['completion_tokens'] <= 64, j
assert j['choices'][0]['finish_reason'] == 'stop' or u['prompt_tokens'] + u['completion_tokens'] == 64, j\""
check "--chat-template renders the chat: the prompt is the content alone" \
        python3 -c "import json; assert json.load(open('$tmp/body'))['usage']['prompt_tokens'] <= 6"
long=$(python3 -c "print(' '.join(['word'] * 600))")
s=$(code "${auth[@]}" -H 'Content-Type: application/json' \
        -d "{\"model\":\"ds\",\"prompt\":\"$long\",\"max_tokens\":1}" "$A/v1/completions")
check "a prompt over --max-prompt-bytes: 400" [ "$s" = 400 ]
mid=$(python3 -c "print(' '.join(['And God said'] * 12))")
s=$(code "${auth[@]}" -H 'Content-Type: application/json' \
        -d "{\"model\":\"ds\",\"prompt\":\"$mid\",\"max_tokens\":1}" "$A/v1/completions")
check "a prompt over --max-prompt-tokens: 400 context_length_exceeded" \
        bash -c "[ $s = 400 ] && grep -q context_length_exceeded $tmp/body"

post() { code "${auth[@]}" -H 'Content-Type: application/json' -d "$2" "$A/$1"; }
check "POST /tokenize without a key: 401" [ "$(code -d '{"prompt":"a"}' "$A/tokenize")" = 401 ]
s=$(post tokenize '{"model":"deepseek-r1","prompt":"And God said","add_special_tokens":false}')
check "POST /tokenize: vLLM's shape" bash -c "[ $s = 200 ] && python3 -c \"
import json; j = json.load(open('$tmp/body'))
assert set(j) == {'count', 'max_model_len', 'tokens', 'token_strs'} and j['count'] == len(j['tokens']) > 0, j
assert j['max_model_len'] == 64 and j['token_strs'] is None, j\""
cp "$tmp/body" "$tmp/tok.json"
s=$(post detokenize "{\"tokens\":$(python3 -c "import json; print(json.load(open('$tmp/tok.json'))['tokens'])")}")
check "POST /detokenize gives the text back" bash -c "[ $s = 200 ] && python3 -c \"
import json; assert json.load(open('$tmp/body')) == {'prompt': 'And God said'}\""
s=$(post tokenize '{"messages":[{"role":"user","content":"And God said"}]}')
check "POST /tokenize of messages renders the served chat template" bash -c "[ $s = 200 ] && python3 -c \"
import json; assert json.load(open('$tmp/body'))['tokens'] == json.load(open('$tmp/tok.json'))['tokens']\""
s=$(post tokenize '{"prompt":"a","frob":1}')
check "POST /tokenize with an unknown field: 400 naming it" bash -c "[ $s = 400 ] && grep -q frob $tmp/body"
check "POST /detokenize of an id outside the vocabulary: 400" [ "$(post detokenize '{"tokens":[99999999]}')" = 400 ]
check "POST /tokenize of another model: 404" [ "$(post tokenize '{"model":"gpt-4","prompt":"a"}')" = 404 ]

s=$(code -X OPTIONS -H 'Origin: https://app.example' -H 'Access-Control-Request-Method: POST' \
        -H 'Access-Control-Request-Headers: authorization, content-type' "$A/v1/chat/completions")
hdr() { tr -d '\r' <"$tmp/hdr" | grep -i "^$1: " | cut -d' ' -f2-; }
check "CORS preflight from an allowed origin: 204 with the allow headers" bash -c \
        "[ $s = 204 ] && [ \"$(hdr access-control-allow-origin)\" = https://app.example ] &&
         [[ \"$(hdr access-control-allow-methods)\" == *POST* ]] &&
         [ \"$(hdr access-control-allow-headers)\" = 'authorization, content-type' ] &&
         [ -n \"$(hdr access-control-max-age)\" ]"
s=$(code -X OPTIONS -H 'Origin: https://evil.example' -H 'Access-Control-Request-Method: POST' "$A/v1/chat/completions")
check "CORS preflight from another origin: no allow-origin" bash -c "[ $s = 204 ] && [ -z \"$(hdr access-control-allow-origin)\" ]"
s=$(code "${auth[@]}" -H 'Origin: http://localhost:3000' "$A/v1/models")
check "an answer to an allowed origin carries Access-Control-Allow-Origin and Vary" bash -c \
        "[ $s = 200 ] && [ \"$(hdr access-control-allow-origin)\" = http://localhost:3000 ] && [ \"$(hdr vary)\" = Origin ]"
s=$(code -H 'Origin: http://localhost:3000' "$A/v1/models")
check "a 401 to an allowed origin carries it too (the browser can read why)" bash -c \
        "[ $s = 401 ] && [ \"$(hdr access-control-allow-origin)\" = http://localhost:3000 ]"

# Raw sockets: the per-address cap and the deadlines, each answer a status line.
python3 - 127.0.0.1 "${dsv_port[a]}" "$cli_key" <<'PY' || failed=$((failed + 1))
import socket, sys, time
host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
bad = 0
def check(what, ok, detail=""):
    global bad
    print(("ok     " if ok else "NOT OK ") + what + ("" if ok else f": {detail}"))
    bad |= not ok
def conn():
    s = socket.create_connection((host, port), timeout=15)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
def answer(s):
    """Everything until the server closes (or 15 s): (bytes, seconds)."""
    t0, buf = time.monotonic(), b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    except (socket.timeout, ConnectionResetError):
        pass
    return buf, time.monotonic() - t0

# 4 connections from 127.0.0.1 held open (half a header each), the 5th refused 429
held = [conn() for _ in range(4)]
for s in held:
    s.sendall(b"GET /health HTTP/1.1\r\n")
time.sleep(0.3)
s = conn()
got, _ = answer(s)
check("the 5th connection from one address: 429 status line, closed",
      got.startswith(b"HTTP/1.1 429 ") and b"Retry-After:" in got, got[:80])
for h in held:
    h.close()
time.sleep(0.3)
s = conn()
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
got, _ = answer(s)
check("once they close, a connection is served again", got.startswith(b"HTTP/1.1 200 "), got[:80])

# a silent connection: 408 after the first-byte deadline (2 s)
s = conn()
got, took = answer(s)
check("a silent connection: 408 after the first-byte deadline",
      got.startswith(b"HTTP/1.1 408 ") and 1.5 <= took <= 6, f"{got[:60]!r} after {took:.1f} s")

# a header sent one byte per second: 408 and closed after the header deadline (3 s)
s = conn()
s.settimeout(0.05)
req, t0, got = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100 + b"\r\n\r\n", time.monotonic(), b""
for b in req:
    try:
        s.sendall(bytes([b]))
    except OSError:
        break
    try:
        c = s.recv(65536)
        got += c
        if not c:
            break
    except socket.timeout:
        pass
    except OSError:
        break
    time.sleep(0.95)
took = time.monotonic() - t0
check("a header sent one byte per second: 408, closed after the header deadline",
      got.startswith(b"HTTP/1.1 408 ") and 2.5 <= took <= 7, f"{got[:60]!r} after {took:.1f} s")

# a body that trickles: closed after the body deadline (3 s), without an answer
s = conn()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Authorization: Bearer " + key + b"\r\nContent-Length: 200\r\n\r\n")
t0, closed = time.monotonic(), False
s.settimeout(0.05)
for _ in range(200):
    try:
        s.sendall(b" ")
        if s.recv(65536) == b"":
            closed = True
            break
    except socket.timeout:
        pass
    except OSError:
        closed = True
        break
    time.sleep(0.5)
took = time.monotonic() - t0
check("a body sent a byte per half second: closed after the body deadline", closed and 2.5 <= took <= 8,
      f"closed {closed} after {took:.1f} s")
sys.exit(1 if bad else 0)
PY

metrics=$(curl -s -m 10 "$A/metrics")
metrics_ok() { # PYTHON-EXPRESSION over m, the samples by name and labels
        python3 -c "
import sys
m = {l.split(' ')[0]: float(l.split(' ')[1]) for l in sys.stdin.read().splitlines() if l and l[0] != '#'}
sys.exit(0 if ($1) else 1)" <<<"$metrics"
}
check "/metrics: per-phase client timeouts counted" metrics_ok \
        "all(m['dsvisor_http_client_timeouts_total{phase=\"%s\"}' % p] >= 1 for p in ('first_byte', 'header', 'body'))"
check "/metrics: per-address refusals and the connection budget" metrics_ok \
        "m['dsvisor_connections_refused_per_ip_total'] >= 1 and m['dsvisor_http_connections_per_ip_max'] == 4 and
         m['dsvisor_http_threads_max'] == m['dsvisor_http_connections_max'] + 2 and
         m['dsvisor_http_connections_pending'] == 0"
"$dsvisor" status --json --runtime-dir "$tmp/a/run" >"$tmp/a/status.json"
printf '%s\n' "$metrics" >"$tmp/a/metrics.txt"
check "no key in the log, /metrics or dsvisor status" \
        bash -c "! grep -q -e '$cli_key' -e '$file_key' '$tmp/a/log' '$tmp/a/status.json' '$tmp/a/metrics.txt'"

# ---- run b: HTTPS, protect-metrics, a request deadline ------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=localhost \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null
chmod 600 "$tmp/tls.key"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=other \
        -keyout "$tmp/other.key" -out "$tmp/other.crt" 2>/dev/null
chmod 600 "$tmp/other.key"
check "a TLS key that does not match its certificate is refused" refused tlsmismatch "TLS certificate and key were refused" \
        --tls-cert "$tmp/tls.crt" --tls-key "$tmp/other.key"
dsv_start b 1 --tls-cert "$tmp/tls.crt" --tls-key "$tmp/tls.key" --api-key "$cli_key" --protect-metrics \
        --request-timeout-ms 1
dsv_wait_ready b 1 120 || exit 1
B="https://127.0.0.1:${dsv_port[b]}"
tls=(--cacert "$tmp/tls.crt")
check "HTTPS with the served certificate: /v1/models 200" [ "$(code "${tls[@]}" "${auth[@]}" "$B/v1/models")" = 200 ]
check "plain HTTP to the HTTPS port gets no HTTP answer" bash -c \
        "! curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:${dsv_port[b]}/health | grep -q 200"
check "--protect-metrics: /health, /metrics and / are 401 without a key" \
        [ "$(code "${tls[@]}" "$B/health")$(code "${tls[@]}" "$B/metrics")$(code "${tls[@]}" "$B/")" = 401401401 ]
check "--protect-metrics: with the key, /health and /metrics 200, an unknown URL 404" \
        [ "$(code "${tls[@]}" "${auth[@]}" "$B/health")$(code "${tls[@]}" "${auth[@]}" "$B/metrics")$(code "${tls[@]}" "${auth[@]}" "$B/nothing")" = 200200404 ]
check "--protect-metrics: with the key, the status page / and /status 200" \
        [ "$(code "${tls[@]}" "${auth[@]}" "$B/")$(code "${tls[@]}" "${auth[@]}" "$B/status")" = 200200 ]
check "--protect-metrics: /ready stays open for probes" [ "$(code "${tls[@]}" "$B/ready")" = 200 ]
s=$(code "${tls[@]}" "${auth[@]}" -H 'Content-Type: application/json' \
        -d '{"model":"default","prompt":"And God said","max_tokens":50}' "$B/v1/completions")
check "--request-timeout-ms 1: the completion is 504 deadline_exceeded" \
        bash -c "[ $s = 504 ] && grep -q deadline_exceeded $tmp/body"
check "no key in run b's log" bash -c "! grep -q -e '$cli_key' '$tmp/b/log'"

if ((failed)); then
        for r in a b; do
                echo "dsvisor $r's log:"
                sed 's/^/       /' "$tmp/$r/log" | tail -30
        done
fi
exit $((failed > 0))
