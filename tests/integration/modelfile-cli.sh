#!/usr/bin/env bash
# dsvisor convert / verify end to end: exit codes, messages, and no partial output.
set -u
bin=${DSV_BUILD_DIR:?}/bin/dsvisor
fx=${DSV_FIXTURES:?}/models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # name, condition...
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi
}

"$bin" convert --model-path "$fx/deepseek-v3-fp8-mtp" --output-dir "$tmp/out" >"$tmp/o" 2>"$tmp/e"
check convert_ok test $? -eq 0
check convert_wrote test -s "$tmp/out/model.dse"
check convert_mtp_copy_message grep -q "model.layers.3.shared_head.head.weight is a copy of lm_head.weight" "$tmp/e"
check convert_no_tmp_left test "$(ls "$tmp/out")" = model.dse

"$bin" verify "$tmp/out/model.dse" >"$tmp/o" 2>"$tmp/e"
check verify_ok test $? -eq 0
check verify_says_ok grep -q "^ok .*deepseek_v3, 3 layers + 1 MTP module" "$tmp/o"
"$bin" verify --values "$tmp/out/model.dse" >"$tmp/o" 2>"$tmp/e"
check verify_values_ok test $? -eq 0
check verify_values_finite grep -q "^ok .*; every value finite" "$tmp/o"

mkfifo "$tmp/fifo"
timeout 20 "$bin" verify "$tmp/fifo" >"$tmp/o" 2>"$tmp/e"
check verify_fifo_exit test $? -eq 1
check verify_fifo_message grep -q "is a FIFO, not a regular file" "$tmp/e"

# flip one byte of the first tensor in the data region (2 MiB in: the embedding)
printf '\x5a' | dd of="$tmp/out/model.dse" bs=1 seek=$((2097152 + 10)) conv=notrunc status=none
"$bin" verify "$tmp/out/model.dse" >"$tmp/o" 2>"$tmp/e"
check verify_bad_exit test $? -eq 1
check verify_names_tensor grep -q "tensor 'model.embed_tokens.weight': checksum mismatch" "$tmp/e"

truncate -s 3000000 "$tmp/out/model.dse"
"$bin" verify "$tmp/out/model.dse" >"$tmp/o" 2>"$tmp/e"
check verify_truncated_exit test $? -eq 1
check verify_truncated_message grep -q "truncated" "$tmp/e"

mkdir "$tmp/bad"
sed 's/"model_type": "llama"/"model_type": "falcon"/' "$fx/llama-bf16-linear-rope/config.json" >"$tmp/bad/config.json"
ln -s "$fx/llama-bf16-linear-rope/model.safetensors" "$tmp/bad/model.safetensors"
"$bin" convert --model-path "$tmp/bad" --output-dir "$tmp/out2" >"$tmp/o" 2>"$tmp/e"
check convert_bad_exit test $? -eq 1
check convert_bad_message grep -q "model_type 'falcon' is not supported" "$tmp/e"
check convert_bad_no_output test -z "$(ls -A "$tmp/out2")"

"$bin" convert --model-path "$fx/qwen2-awq-g32" >/dev/null 2>&1
check convert_usage_exit test $? -eq 2
"$bin" convert --model-path "$fx/qwen2-awq-g32" --output-dir "$tmp/out3" --quant-format gptq >/dev/null 2>"$tmp/e"
check convert_wrong_format_exit test $? -eq 1
"$bin" verify >/dev/null 2>&1
check verify_usage_exit test $? -eq 2

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
