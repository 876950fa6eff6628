#!/usr/bin/env bash
# GGUF files through the dsvisor command line: `convert --model-path FILE.gguf`, `logits
# --model FILE.gguf` (the cached conversion) against the fixture's reference greedy ids,
# `verify` of the converted file, and a broken file refused with a message.
set -u
bin=${DSV_BUILD_DIR:?}/bin
fx=${DSV_FIXTURES:?}/models/llama-bf16-linear-rope
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DSV_CACHE_DIR=$tmp/cache
pass=0 fail=0
check() { # name, condition...
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi
}

"$bin/gguf-from-hf" "$fx" "$tmp/m.gguf" Q8_0
check write_gguf test -s "$tmp/m.gguf"
"$bin/dsvisor" convert --model-path "$tmp/m.gguf" --output-dir "$tmp/out" >"$tmp/o" 2>"$tmp/e"
check convert_ok test $? -eq 0
check convert_names_the_mapping grep -q "Q8_0 tensors: matrices as Q8 group 32" "$tmp/e"
check convert_label grep -q "auto/gguf" "$tmp/o"
"$bin/dsvisor" verify "$tmp/out/model.dse" >"$tmp/o" 2>"$tmp/e"
check verify_ok test $? -eq 0

# the greedy continuation of the prompt through the cache, as the reference gives it
ids=$(tr -d '[] \n' <"$fx/ref/prompt_ids.json")
want=$(tr -d ' \n' <"$fx/ref/generated_ids.json" | cut -d, -f1-4 | tr -d '[]')
"$bin/dsvisor" logits --model "$tmp/m.gguf" --tokens "$ids" --out "$tmp/l.f32" --greedy 4 >"$tmp/o" 2>"$tmp/e"
check logits_ok test $? -eq 0
F32=$tmp/f32.gguf
"$bin/gguf-from-hf" "$fx" "$F32" F32
DSV_CPU=scalar DSV_ACT=f32 "$bin/dsvisor" logits --model "$F32" --tokens "$ids" --greedy 4 >"$tmp/o" 2>"$tmp/e"
check logits_f32_greedy_is_the_reference grep -q "\"greedy\":\[$want\]" "$tmp/o"
check cached_conversion test "$(ls "$DSV_CACHE_DIR" | grep -c '\.dse$')" -eq 2

printf 'GGUF\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' >"$tmp/v1.gguf"
"$bin/dsvisor" convert --model-path "$tmp/v1.gguf" --output-dir "$tmp/out1" >"$tmp/o" 2>"$tmp/e"
check broken_exit test $? -eq 1
check broken_message grep -q "GGUF version 1 is not supported" "$tmp/e"
check broken_no_output test ! -e "$tmp/out1/model.dse"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
