#!/usr/bin/env bash
# The gateway's rooms and their one-way arrows (supervisor/gateway/README.md "Rooms"),
# checked on #include lines and on calls between the rooms' dsv__gw_ functions:
#   server -> OpenAI shaping, calls, metrics;  calls -> OpenAI shaping, metrics;
#   OpenAI shaping -> (buf only);  metrics -> nothing.
set -u
src=${DSV_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$src/supervisor/gateway/src" || exit 1
fail=0
n=0
# room-files, forbidden include regex, forbidden call regex, why
check() {
  n=$((n + 1))
  local hits
  hits=$(grep -nE "^#include[[:space:]]*\"($2)\"" $1 2>/dev/null; grep -nE "\\b($3)\\(" $1 2>/dev/null | grep -v '^\S*:[0-9]*:\s*\(/\*\|\*\)')
  if [ -n "$hits" ]; then
    echo "gateway room violation in $1 ($4):"; echo "$hits"; fail=1
  fi
}
server_fns='dsv__gw_reply[a-z_]*|dsv__gw_completion|dsv__gw_keys_[a-z]+'
calls_fns='dsv__gw_call_[a-z_]+|dsv__gw_calls_[a-z]+|dsv__gw_instances?_[a-z_]+|dsv__gw_event_free|dsv__gw_now_ns'
openai_fns='dsv__gw_request_[a-z]+|dsv__gw_answer_[a-z_]+|dsv__gw_sse_[a-z]+|dsv__gw_error_[a-z]+|dsv__gw_worker_error'
metrics_fns='dsv__gw_metrics_[a-z_]+|dsv__gw_hist_[a-z]+'
check "request.c json_strict.c response.c sse.c openai.h" 'server\.h|keys\.h|calls\.h|metrics\.h' "$server_fns|$calls_fns|$metrics_fns" \
  "OpenAI shaping is pure"
check "metrics.c metrics.h" 'server\.h|keys\.h|calls\.h|openai\.h|buf\.h' "$server_fns|$calls_fns|$openai_fns" \
  "metrics is a leaf"
check "calls.c calls.h" 'server\.h|keys\.h' "$server_fns|microhttpd|MHD_[a-z_]+" "calls know nothing of HTTP"
check "buf.c buf.h" 'server\.h|keys\.h|calls\.h|metrics\.h|openai\.h' "$server_fns|$calls_fns|$openai_fns|$metrics_fns" \
  "buf sits below the rooms"
check "keys.c keys.h" 'server\.h|calls\.h|metrics\.h|openai\.h' "$calls_fns|$openai_fns|$metrics_fns" \
  "auth needs nothing of the other rooms"
for f in *.c *.h; do
  n=$((n + 1))
  if grep -qE 'dsv__gw_http_(start|stop)' "$f"; then echo "$f: dsv__gw_http_* is gone"; fail=1; fi
done
if [ $fail -eq 0 ]; then echo "$n passed, 0 failed"; else echo "some of $n checks failed"; fi
exit $fail
