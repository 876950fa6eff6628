#!/usr/bin/env bash
# Enforces the dependency arrows of README "Architecture" on #include lines:
#   engine -> libc/libm/pthreads (+ cJSON, PCRE2, utf8proc in the model and tokenizer readers)
#   ipc -> nng, cJSON      policy -> libc only
#   worker -> engine, ipc (+ platform for NUMA binding)
#   supervisor -> policy, ipc, platform, engine
set -u
src=${DSV_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1
fail=0
n_checks=0
check() { # module-dir, forbidden-regex, why
  local hits
  n_checks=$((n_checks + 1))
  hits=$(grep -rnE "^#include[[:space:]]*[<\"]($2)" "$1" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layering violation in $1 ($3):"; echo "$hits"; fail=1
  fi
}
check engine   'nng/|hwloc|libcgroup|numa\.h|numaif\.h|systemd/|microhttpd|dsv_ipc|dsv_policy|dsv_platform' "engine may use only libc, libm, pthreads, cJSON, PCRE2, utf8proc"
check ipc      'dse\.h|hwloc|libcgroup|numa|systemd/|microhttpd|dsv_policy|dsv_platform' "ipc may use only nng and cJSON"
check policy   'nng/|cjson|cJSON|hwloc|libcgroup|numa|systemd/|microhttpd|dse\.h|dsv_ipc|dsv_platform|unistd\.h|sys/' "policy is pure logic over plain structs"
check worker   'hwloc|libcgroup|systemd/|microhttpd|dsv_policy' "worker sits on engine and ipc"
if [ -d supervisor/platform ]; then
  check supervisor/platform 'dse\.h|dsv_ipc|dsv_policy|microhttpd' "platform wraps OS libraries only"
fi
if [ $fail -eq 0 ]; then echo "$n_checks passed, 0 failed"; else echo "0 passed, $n_checks failed"; fi
exit $fail
