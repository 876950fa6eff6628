#!/usr/bin/env bash
# deploy/haproxy.cfg in front of two `dsvisor start` processes: the real
# HAProxy on 127.0.0.1 balances a bounded load over both; one dsvisor gets SIGTERM in the
# middle of it. It drains (new requests: 503, /ready: 503) and exits; HAProxy retries its
# 503s and refused connections on the other host and marks it down by /ready. At most
# the requests in flight at the SIGTERM may fail (with the drain, none should); every
# other request is answered in full, streamed ones with their final `data: [DONE]`.
set -euo pipefail
if ! command -v haproxy >/dev/null; then
        echo "SKIP: no haproxy (scripts/bootstrap.sh --with-tests installs it)"
        exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-haproxy.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
need_worker

haproxy_pid=
client_pids=()
cleanup() {
        touch "$tmp/stop-load"
        [[ -n ${client_pids[*]:-} ]] && kill -TERM "${client_pids[@]}" 2>/dev/null || true
        [[ -n $haproxy_pid ]] && kill -TERM "$haproxy_pid" 2>/dev/null || true
        dsv_stop_all
        [[ -n $haproxy_pid ]] && wait "$haproxy_pid" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT

dsv_start a 1
dsv_start b 1
dsv_wait_ready a 1 120
dsv_wait_ready b 1 120
echo "       dsvisor a on :${dsv_port[a]} (pid ${dsv_pid[a]}), b on :${dsv_port[b]} (pid ${dsv_pid[b]})"

# deploy/haproxy.cfg with only the bind and server lines changed (as test-deploy-haproxy).
lb_port=$(free_port)
sed -E -e "s|^(\s*)bind .*|\1bind 127.0.0.1:$lb_port|" \
        -e "s|^(\s*)server dsvisor-a .*|\1server dsvisor-a 127.0.0.1:${dsv_port[a]}|" \
        -e "s|^(\s*)server dsvisor-b .*|\1server dsvisor-b 127.0.0.1:${dsv_port[b]}|" \
        "$DSV_SOURCE_DIR/deploy/haproxy.cfg" >"$tmp/haproxy.cfg"
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
haproxy_pid=$!
lb="http://127.0.0.1:$lb_port"
for _ in $(seq 1 50); do curl -s -o /dev/null -m 1 "$lb/v1/models" && break; sleep 0.1; done

# One request: prints "CODE OK|BAD". A streamed answer is OK only when it ends with
# data: [DONE] and carries no error event.
req() { # STREAM(true|false) TAG
        local body="$tmp/body.$2" code
        code=$(curl -s -o "$body" -w '%{http_code}' -m 30 "$lb/v1/completions" -H 'Content-Type: application/json' \
                -d "{\"model\":\"$dsv_model_id\",\"prompt\":[1,2,3],\"max_tokens\":16,\"temperature\":0,\"stream\":$1}") || true
        local ok=0
        if [[ $code == 200 && $1 == false ]]; then
                grep -q '"finish_reason"' "$body" && ok=1
        elif [[ $code == 200 ]]; then
                grep -q '^data: \[DONE\]' "$body" && ! grep -q '"error"' "$body" && ok=1
        fi
        if ((ok)); then
                echo "$code OK"
        else
                echo "$code BAD"
                { echo "--- $2 at $(date +%T.%N): $code"; head -c 400 "$body"; echo; } >>"$tmp/bad-bodies.$2"
        fi
}

check "HAProxy answers /v1/models" test "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$lb/v1/models")" = 200
check "HAProxy does not forward /metrics (404)" test "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$lb/metrics")" = 404
check "a streamed answer passes through whole" test "$(req true s0)" = "200 OK"

# Bounded load: C clients, half streaming, back to back until the stop file appears.
C=4
client() { # I
        local stream=false
        ((($1 % 2) == 1)) && stream=true
        while [[ ! -e $tmp/stop-load ]]; do
                echo "$(date +%s.%N) $(req $stream c$1)"
        done >"$tmp/codes.$1"
}
a_before=$(metric "http://127.0.0.1:${dsv_port[a]}/metrics" 'dsvisor_requests_total{code="200"}')
b_before=$(metric "http://127.0.0.1:${dsv_port[b]}/metrics" 'dsvisor_requests_total{code="200"}')
client_pids=()
for i in $(seq 1 $C); do
        client "$i" &
        client_pids+=($!)
done
sleep 3
a_mid=$(metric "http://127.0.0.1:${dsv_port[a]}/metrics" 'dsvisor_requests_total{code="200"}')
b_mid=$(metric "http://127.0.0.1:${dsv_port[b]}/metrics" 'dsvisor_requests_total{code="200"}')
t_kill=$(date +%s.%N)
kill -TERM "${dsv_pid[a]}"
dsv_wait_exit a 20
t_exit=$(date +%s.%N)
sleep 4 # past HAProxy's fall 2 x inter 1s: b alone
touch "$tmp/stop-load"
wait "${client_pids[@]}" # each ends within curl's -m 30 of the stop file
b_end=$(metric "http://127.0.0.1:${dsv_port[b]}/metrics" 'dsvisor_requests_total{code="200"}')

cat "$tmp"/codes.* >"$tmp/all"
n_all=$(wc -l <"$tmp/all")
n_ok=$(grep -c ' 200 OK$' "$tmp/all" || true)
n_bad=$((n_all - n_ok))
n_after=$(awk -v t="$t_exit" '$1 > t' "$tmp/all" | wc -l)
n_after_ok=$(awk -v t="$t_exit" '$1 > t && / 200 OK$/' "$tmp/all" | wc -l)
echo "       $n_all requests, $n_ok answered in full, $n_bad not ($(awk '{print $2, $3}' "$tmp/all" | sort | uniq -c | tr '\n' ' '))"
echo "       before the SIGTERM: a served $((a_mid - a_before)), b $((b_mid - b_before)); a drained and exited after $(python3 -c "print(f'{$t_exit - $t_kill:.2f}')") s;" \
        "b served $((b_end - b_mid)) after; $n_after requests finished after a exited"
echo "       HAProxy redispatched $(grep -cE ' [0-9]+/[0-9]+/[0-9]+/[0-9]+/\+[0-9]+ ' "$tmp/haproxy.log" || true) requests to the other server (retry-on)"
check "the load ran (>= 20 requests)" test "$n_all" -ge 20
check "leastconn spread the load before the SIGTERM (both hosts served)" test $((a_mid - a_before)) -gt 0 -a $((b_mid - b_before)) -gt 0
check "dsvisor a drained and exited 0 ($dsv_rc)" test "$dsv_rc" = 0
check "at most the $C requests in flight failed ($n_bad)" test "$n_bad" -le "$C"
check "b answered the requests after a exited ($n_after_ok/$n_after)" test "$n_after_ok" -gt 0
cat "$tmp"/bad-bodies.* 2>/dev/null | sed 's/^/       /' || true
check "HAProxy saw a go DOWN" grep -q 'dsvisor-a is DOWN' "$tmp/haproxy.log"
check "HAProxy kept b UP" bash -c "! grep -q 'dsvisor-b is DOWN' '$tmp/haproxy.log'"
if ((failed > 0)); then
        echo "--- haproxy log: errors, retries, state changes"
        grep -Ev '" 200 [0-9]+ - - ---- [0-9/]+ 0/0 ' "$tmp/haproxy.log" | tail -30
        echo "--- dsvisor a log"; tail -20 "$tmp/a/log"
        if [[ -s $tmp/a/stuck.txt ]]; then echo "--- dsvisor a threads when it did not exit"; grep -E '^(Thread|#)' "$tmp/a/stuck.txt" | head -80; fi
fi
echo "$failed failed"
exit $((failed > 0))
