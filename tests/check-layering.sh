#!/usr/bin/env bash
# Enforces the dependency arrows of README "Architecture" on #include lines:
#   engine -> libc/libm/pthreads (+ cJSON, PCRE2, utf8proc in the model and tokenizer readers)
#   ipc -> nng, cJSON      policy -> libc only
#   worker -> engine, ipc (+ platform for NUMA binding)
#   supervisor/platform -> OS libraries      supervisor/gateway -> ipc, policy, libmicrohttpd, cJSON
#   supervisor -> policy, ipc, platform, gateway, engine (each through its public header)
#   bench -> the public headers, plus the one documented engine-internal header
#            engine/include/dse_internal.h; never tests/ or another module's private files
# Every module's own private headers stay its own: only public headers (an include/
# directory) cross a module boundary.
#
#   check-layering.sh              checks the source tree ($DSV_SOURCE_DIR, else ..)
#   check-layering.sh --self-test  checks that a tree with known violations is rejected
set -u

if [ "${1:-}" = "--self-test" ]; then
  # A copy of the real tree plus one planted violation per rule below must fail, each
  # with its own message; the clean copy must pass.
  self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  real=${DSV_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  status=0
  # only what the check reads: sources, headers and the bench CMake files
  mkdir -p "$tmp/base"
  (cd "$real" && find engine ipc policy worker supervisor bench \( -name node_modules -prune \) -o \
    -type f \( -name '*.c' -o -name '*.h' -o -name CMakeLists.txt \) -print | tar -cf - -T -) |
    tar -xf - -C "$tmp/base" || exit 1
  plant() { # file, include line, message expected in the output
    rm -rf "$tmp/tree"; cp -r "$tmp/base" "$tmp/tree"
    if [ -n "$1" ]; then
      mkdir -p "$tmp/tree/$(dirname "$1")"
      printf '%s\n' "$2" >>"$tmp/tree/$1"
    fi
    out=$(DSV_SOURCE_DIR="$tmp/tree" bash "$self" 2>&1); rc=$?
    if [ -z "$1" ]; then
      [ $rc -eq 0 ] || { echo "self-test: the clean tree fails:"; echo "$out"; status=1; }
    elif [ $rc -eq 0 ] || ! printf '%s' "$out" | grep -q "$3"; then
      echo "self-test: '$2' in $1 was not rejected ($3):"; echo "$out"; status=1
    fi
  }
  plant "" "" ""
  plant bench/worker_bench.c '#include "../tests/integration/worker-client.h"' 'layering violation in bench'
  plant bench/worker_bench.c '#include "t.h"' 'layering violation in bench'
  plant bench/model_bench.c '#include "kernels/kernels.h"' 'layering violation in bench'
  plant bench/model_bench.c '#include "../engine/src/internal.h"' 'layering violation in bench'
  plant bench/CMakeLists.txt 'target_include_directories(x PRIVATE ${CMAKE_SOURCE_DIR}/engine/src)' 'bench/CMakeLists.txt'
  plant supervisor/cmd_run.c '#include "gateway-internal.h"' 'layering violation in supervisor'
  plant supervisor/cmd_run.c '#include "model/model.h"' 'layering violation in supervisor'
  plant supervisor/gateway/src/http.c '#include "dsv_platform.h"' 'layering violation in supervisor/gateway'
  plant supervisor/gateway/src/http.c '#include "sup.h"' 'layering violation in supervisor/gateway'
  plant worker/serve.c '#include "kernels/kernels.h"' 'layering violation in worker'
  plant engine/src/session.c '#include "dsv_ipc.h"' 'layering violation in engine'
  [ $status -eq 0 ] && echo "self-test passed: every planted violation was rejected"
  exit $status
fi

src=${DSV_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1
fail=0
n_checks=0
n_failed=0
violation() { # where, why, hits
  echo "layering violation in $1 ($2):"; echo "$3"; fail=1; n_failed=$((n_failed + 1))
}

# module-dir, forbidden-regex, why [, dir to leave out ...]: no #include matching the regex.
check() {
  local dir=$1 re=$2 why=$3 hits
  shift 3
  n_checks=$((n_checks + 1))
  local prune=()
  for p in "$@"; do prune+=(-path "$p" -prune -o); done
  hits=$(find "$dir" "${prune[@]}" -type f \( -name '*.c' -o -name '*.h' \) -print 2>/dev/null |
    xargs -r grep -nE "^#include[[:space:]]*[<\"]($re)")
  [ -z "$hits" ] || violation "$dir" "$why" "$hits"
}

# module-dir, allowed-regex, why: every #include "..." names a file of the module itself
# (found beside the including file or at the module's top) or matches the regex.
check_only() {
  local dir=$1 re=$2 why=$3 hits="" f line name
  n_checks=$((n_checks + 1))
  while IFS= read -r f; do
    while IFS= read -r line; do
      name=${line#*:}; name=${name#*\"}; name=${name%%\"*}
      case $name in ../* | */../*) hits+="$f:$line"$'\n'; continue ;; esac
      [ -f "$(dirname "$f")/$name" ] && continue
      [ -f "$dir/$name" ] && continue
      printf '%s' "$name" | grep -qxE "$re" || hits+="$f:$line"$'\n'
    done < <(grep -nE '^#include[[:space:]]*"' "$f")
  done < <(find "$dir" -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null)
  [ -z "$hits" ] || violation "$dir" "$why" "${hits%$'\n'}"
}

engine_private='kernels/|model/|tok/|chat/|internal\.h|kv\.h|dse_internal\.h'
check engine   'nng/|hwloc|libcgroup|numa\.h|numaif\.h|systemd/|microhttpd|dsv_ipc|dsv_policy|dsv_platform|dsv_gateway' "engine may use only libc, libm, pthreads, cJSON, PCRE2, utf8proc"
check ipc      'dse\.h|dse_internal|hwloc|libcgroup|numa|systemd/|microhttpd|dsv_policy|dsv_platform|dsv_gateway' "ipc may use only nng and cJSON"
check policy   'nng/|cjson|cJSON|hwloc|libcgroup|numa|systemd/|microhttpd|dse\.h|dse_internal|dsv_ipc|dsv_platform|dsv_gateway|unistd\.h|sys/' "policy is pure logic over plain structs"
check worker   "hwloc|libcgroup|systemd/|microhttpd|dsv_policy|dsv_gateway|sup\.h|commands\.h|$engine_private" "worker sits on engine and ipc, through their public headers"
if [ -d supervisor/platform ]; then
  check supervisor/platform 'dse\.h|dse_internal|dsv_ipc|dsv_policy|dsv_gateway|microhttpd|sup\.h|commands\.h' "platform wraps OS libraries only"
fi
if [ -d supervisor/gateway ]; then
  check supervisor/gateway "dse\.h|dsv_platform|hwloc|libcgroup|numa|systemd/|sup\.h|commands\.h|cgroup-internal\.h|$engine_private" "the gateway may use only ipc, policy, libmicrohttpd and cJSON"
fi
if [ -d supervisor ]; then
  check supervisor "hwloc|libcgroup|numa\.h|numaif\.h|systemd/|microhttpd|gateway-internal\.h|cgroup-internal\.h|worker\.h|$engine_private" \
    "supervisor uses policy, ipc, platform, gateway and engine through their public headers" \
    supervisor/gateway supervisor/platform
fi
if [ -d bench ]; then
  check_only bench 'dse\.h|dse_internal\.h|dsv_ipc\.h|dsv_policy\.h|dsv_platform\.h|dsv_gateway\.h' \
    "bench uses the public headers and engine/include/dse_internal.h, never tests/ or engine/src headers"
  # engine/src reaches bench only through the dse_internal target that goes with dse_internal.h.
  n_checks=$((n_checks + 1))
  hits=$(find bench -name CMakeLists.txt -print0 | xargs -0 -r grep -n 'engine/src' |
    grep -v 'target_include_directories(dse_internal INTERFACE ')
  hits=$(printf '%s\n' "$hits" | grep -v ':[0-9]*:[[:space:]]*#')
  [ -z "$hits" ] || violation "bench/CMakeLists.txt" "engine/src goes only on the dse_internal target" "$hits"
fi
echo "$((n_checks - n_failed)) passed, $n_failed failed"
exit $fail
