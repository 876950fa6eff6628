#!/usr/bin/env bash
# tests/check-skips.py: a skipped test passes the run only when tests/skips.allow-style
# rules list it for this kind of run; a malformed rule is an error.
set -u
check=${DSV_SOURCE_DIR:-$(dirname "$0")/../..}/tests/check-skips.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
expect() { # want-status description args...
  local want=$1 what=$2; shift 2
  python3 "$check" "$@" >"$tmp/out" 2>&1
  local got=$?
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); echo "ok   $what"
  else fail=$((fail + 1)); echo "FAIL $what: exit $got, want $want"; cat "$tmp/out"; fi
}
cat >"$tmp/j.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="3" failures="0" disabled="0" skipped="1">
	<testcase name="test-a" classname="test-a" time="0.1" status="run"><system-out>1 passed</system-out></testcase>
	<testcase name="test-b-stub" classname="test-b-stub" time="0.1" status="notrun">
		<skipped message="SKIP_RETURN_CODE=77"/>
		<system-out>SKIP: needs a thing</system-out>
	</testcase>
</testsuite>
XML
: >"$tmp/none"
expect 1 "an unlisted skip fails" "$tmp/j.xml" "$tmp/none"
grep -q "skip NOT allowed: test-b-stub: SKIP: needs a thing" "$tmp/out" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL the refusal names the test and its reason"; cat "$tmp/out"; }
printf '# comment\n\ntest-b-* host the host may lack the thing\n' >"$tmp/host"
expect 0 "a listed skip (pattern, host) passes" "$tmp/j.xml" "$tmp/host"
printf 'test-b-stub asan ASan replaces malloc\n' >"$tmp/asan"
expect 1 "an asan-only skip fails the plain run" "$tmp/j.xml" "$tmp/asan"
expect 0 "an asan-only skip passes the asan run" "$tmp/j.xml" "$tmp/asan" --asan
printf 'test-b-stub non-root needs root\n' >"$tmp/nonroot"
if [ "$(id -u)" = 0 ]; then want=1; else want=0; fi
expect $want "a non-root skip passes only when not root" "$tmp/j.xml" "$tmp/nonroot"
printf 'test-b-stub host\n' >"$tmp/noreason"
expect 1 "a rule without a reason is refused" "$tmp/j.xml" "$tmp/noreason"
printf 'test-b-stub sometimes it fails\n' >"$tmp/badwhen"
expect 1 "a rule with an unknown condition is refused" "$tmp/j.xml" "$tmp/badwhen"
printf "<testsuite><testcase name=\"test-a\" status=\"run\"/></testsuite>\n" >"$tmp/ran.xml"
expect 0 "the project's tests/skips.allow parses" "$tmp/ran.xml" "$(dirname "$check")/skips.allow" --asan
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
