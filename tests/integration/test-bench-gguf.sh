#!/usr/bin/env bash
# dsvisor-bench gguf end to end on a small copy of a preset (deepseek-coder-1.3b, one
# layer, Q4_0 from the writer's ggml reference quantizer): the same file every time
# (weights seeded by tensor name), `dsvisor convert` imports it with the preset's shapes
# and keeps its Q4_0 matrices as native Q4, `dsvisor-bench model --gguf` runs on it with
# the file's own layer count and GGUF's group 32; a format it does not write is a usage
# error. No timing is asserted.
set -u
bench=${DSV_BUILD_DIR:?}/bin/dsvisor-bench
dsvisor=${DSV_BUILD_DIR:?}/bin/dsvisor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DSV_CACHE_DIR=$work/cache
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
gen=(gguf --preset deepseek-coder-1.3b --layers 1 --format q4_0)

"$bench" "${gen[@]}" --out "$work/a.gguf" 2>"$work/a.err" && ok || bad "gguf: $(cat "$work/a.err")"
"$bench" "${gen[@]}" --out "$work/b.gguf" 2>"$work/b.err" && ok || bad "gguf again: $(cat "$work/b.err")"
cmp -s "$work/a.gguf" "$work/b.gguf" && ok || bad "two runs wrote different files"

"$dsvisor" convert --model-path "$work/a.gguf" --output-dir "$work/native" >"$work/convert.out" 2>"$work/convert.err" &&
  ok || bad "convert: $(cat "$work/convert.err")"
grep -q "llama, 1 layers, hidden 2048, vocab 32256" "$work/convert.out" && ok || bad "convert: $(cat "$work/convert.out")"
grep -q "Q4_0 tensors: matrices as Q4 group 32" "$work/convert.err" && ok || bad "convert log: $(cat "$work/convert.err")"

"$bench" model --preset deepseek-coder-1.3b --format int4 --gguf "$work/a.gguf" --threads 2 --prefill 8 --decode 3 \
  --batches 1 --json >"$work/model.json" 2>"$work/model.err" && ok || bad "model --gguf: $(cat "$work/model.err")"
python3 - "$work/model.json" <<'PY' && ok || bad "model --gguf: JSON $(cat "$work/model.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["layers"] == 1 and o["group"] == 32 and o["format"] == "int4", o
assert o["decode_tok_s"]["1"] > 0 and o["prefill_tok_s"]["8"] > 0, o
PY

"$bench" gguf --preset deepseek-coder-1.3b --format q5_0 --out "$work/c.gguf" 2>/dev/null
[ $? = 2 ] && [ ! -e "$work/c.gguf" ] && ok || bad "an unknown format was not a usage error"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
