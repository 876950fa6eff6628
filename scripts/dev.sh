#!/usr/bin/env bash
# The README's two set-up commands:
#   scripts/dev.sh demo   install, build, and run the main job on the bundled default model
#   scripts/dev.sh test   install, build, and run the whole test suite
# Both test commands fail on a skipped test (exit 77) that tests/skips.allow does not
# list for that run (tests/check-skips.py reads ctest's JUnit report).
# Extra: scripts/dev.sh asan     (unit tests under ASan+UBSan, as CI runs them)
#        scripts/dev.sh release  (an optimised -O3 Release build: its inlining shows
#                                 warnings, errors here, that -O2 does not)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=$(nproc)

# ctest in the current build folder, then the skips it reported against the allow-list.
run_tests() { # check-skips args..., then -- ctest args...
  local skip_args=()
  while [ "$1" != -- ]; do skip_args+=("$1"); shift; done
  shift
  local rc=0
  rm -f Testing/junit.xml
  ctest --output-junit "$PWD/Testing/junit.xml" "$@" || rc=$?
  python3 "$top/tests/check-skips.py" Testing/junit.xml "$top/tests/skips.allow" "${skip_args[@]}" || rc=1
  return "$rc"
}

build() { # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
}

case "${1:-}" in
  demo)
    scripts/bootstrap.sh
    build build
    exec scripts/demo.sh build
    ;;
  test)
    scripts/bootstrap.sh --with-tests
    build build
    cd build && run_tests -- --output-on-failure -j"$jobs" ${CTEST_ARGS:-}
    ;;
  asan)
    scripts/bootstrap.sh --with-tests
    build build-asan -DDSV_SANITIZE=ON
    cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      run_tests --asan -- --output-on-failure -j"$jobs" -L unit
    ;;
  release)
    scripts/bootstrap.sh
    build build-release -DCMAKE_BUILD_TYPE=Release
    ;;
  *)
    echo "usage: scripts/dev.sh demo|test|asan|release" >&2
    exit 2
    ;;
esac
