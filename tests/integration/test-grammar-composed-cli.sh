#!/usr/bin/env bash
# dsvisor grammar --composed: a forced DeepSeek-V3 tool call (the grammar the gateway
# sends for tool_choice "required") judged through the token masks of the fixture
# DeepSeek-V3 tokenizer, one JSON string per line: the canonical call passes; a wrong
# name, bad arguments, no end marker and a marker spelled in ordinary text do not; a
# special text that is not one token is an error naming the part (exit 2).
set -u
BUILD=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build" && pwd)}
FIX=${DSV_FIXTURES:-$(cd "$(dirname "$0")/../../../shared/fixtures" && pwd)}
TOK=$FIX/tokenizers/models/deepseek_v3/tokenizer.json
[ -f "$TOK" ] || { echo "missing $TOK"; echo "0 passed, 1 failed"; exit 1; }
T=$(mktemp -d /tmp/dsv-grammar-composed.XXXXXX)
trap 'rm -rf "$T"' EXIT
cat >"$T/spec.json" <<'SPEC'
{"sequence":[{"special":"<｜tool▁calls▁begin｜>"},{"repeat":{"sequence":[{"special":"<｜tool▁call▁begin｜>"},{"text":"function"},{"special":"<｜tool▁sep｜>"},{"one_of":[{"sequence":[{"text":"get_weather\n```json\n"},{"json_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}]},{"sequence":[{"text":"now\n```json\n"},{"json_schema":{"type":"object","additionalProperties":false}}]}]},{"text":"\n```"},{"special":"<｜tool▁call▁end｜>"}]},"min":1,"separator":{"text":"\n"}},{"special":"<｜tool▁calls▁end｜>"}]}
SPEC
cat >"$T/lines" <<'LINES'
"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"town\":\"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>"
"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> "
LINES
want='true true false false false false'
got=$("$BUILD/bin/dsvisor" grammar --composed "$T/spec.json" --tokenizer "$TOK" --check <"$T/lines" 2>"$T/err" |
      sed -n 's/.*"accept": *\(true\|false\).*/\1/p' | tr '\n' ' ' | sed 's/ $//')
passed=0 failed=0
if [ "$got" = "$want" ]; then passed=$((passed + 1)); echo "ok   composed-check: $got"
else failed=$((failed + 1)); echo "FAIL composed-check: want '$want', got '$got' ($(cat "$T/err"))"; fi
printf '%s' '{"sequence":[{"text":"a"},{"special":"<｜tool▁sep｜x"}]}' >"$T/bad.json"
"$BUILD/bin/dsvisor" grammar --composed "$T/bad.json" --tokenizer "$TOK" >"$T/bad.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'sequence\[1\]' "$T/bad.out" && grep -q 'not one token' "$T/bad.out"; then
  passed=$((passed + 1)); echo "ok   composed-error: names the part"
else
  failed=$((failed + 1)); echo "FAIL composed-error: exit $rc: $(cat "$T/bad.out")"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
