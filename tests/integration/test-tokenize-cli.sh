#!/usr/bin/env bash
# `dsvisor tokenize` end to end: fixture lines in, reference ids (and decoded text) out,
# for tokenizer.json files, a SentencePiece .model, and a model folder's embedded
# tokenizer (--model); plus the exit codes for bad input.
set -euo pipefail

dsvisor="${DSV_BUILD_DIR:?}/bin/dsvisor"
F="${DSV_FIXTURES:?}/tokenizers"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
N=40

# check NAME ENCODINGS_FILE TOKENIZER_ARGS...: first N lines, encode (flags from the
# file name) and decode, compared with the reference.
check() {
        local name=$1 file=$2
        shift 2
        local flags=()
        [[ $file == *.special.jsonl ]] && flags=(--special)
        head -n "$N" "$F/encodings/$file" >"$tmp/ref"
        sed -E 's/^.*"text": ?("([^"\\]|\\.)*").*$/\1/' "$tmp/ref" >"$tmp/in"
        sed -E 's/^.*"ids": ?(\[[^]]*\]).*$/{"ids":\1}/; s/ //g' "$tmp/ref" >"$tmp/want"
        sed -E 's/^.*"ids": ?(\[[^]]*\]).*$/\1/' "$tmp/ref" >"$tmp/ids"
        sed -E 's/^.*"decoded": ?("([^"\\]|\\.)*").*$/\1/' "$tmp/ref" >"$tmp/want_text"
        if ! "$dsvisor" tokenize "$@" "${flags[@]}" <"$tmp/in" >"$tmp/got"; then
                echo "FAIL $name $file: dsvisor tokenize exited with an error"
                failed=1
                return
        fi
        local agree
        agree=$(paste -d '\n' "$tmp/got" "$tmp/want" | paste - - | awk -F '\t' '$1 == $2' | wc -l)
        echo "$name $file: $agree/$N encodings agree"
        if [[ $agree -ne $N ]]; then
                diff "$tmp/got" "$tmp/want" | head -n 6
                failed=1
        fi
        # decode: compare the lines whose reference text has no escapes (the JSON
        # escaping style of control characters is not part of the contract)
        "$dsvisor" tokenize "$@" --decode <"$tmp/ids" >"$tmp/got_text"
        local bad
        bad=$(paste "$tmp/got_text" "$tmp/want_text" | awk -F '\t' 'index($2, "\\") == 0 && $1 != $2' | wc -l)
        local checked
        checked=$(awk 'index($0, "\\") == 0' "$tmp/want_text" | wc -l)
        echo "$name $file: $((checked - bad))/$checked decodings agree"
        [[ $bad -eq 0 && $checked -gt 0 ]] || failed=1
}

for name in deepseek_v3 qwen2_5 llama3 mistral7b; do
        for file in "$name.jsonl" "$name.special.jsonl"; do
                check "$name" "$file" --tokenizer "$F/models/$name/tokenizer.json"
        done
done
check sp_bpe sp_bpe.special.jsonl --tokenizer "$F/models/sp_bpe/sp_bpe.model"

# --model: a Hugging Face folder (a tiny Qwen2 checkpoint plus the Qwen2.5 tokenizer
# files) is converted into the cache once; its embedded tokenizer must give the same ids.
mkdir -p "$tmp/hf"
cp "$DSV_FIXTURES/models/qwen2-bf16-tied/config.json" "$DSV_FIXTURES/models/qwen2-bf16-tied/model.safetensors" "$tmp/hf/"
cp "$F/models/qwen2_5/tokenizer.json" "$F/models/qwen2_5/tokenizer_config.json" "$tmp/hf/"
DSV_CACHE_DIR="$tmp/cache" check qwen2_5-model qwen2_5.jsonl --model "$tmp/hf"

# bad input: exit status 1 with a message naming the line; usage errors exit 2
expect_fail() {
        local want=$1 what=$2
        shift 2
        local rc=0
        "$@" >/dev/null 2>"$tmp/err" || rc=$?
        if [[ $rc -ne $want ]] || [[ ! -s $tmp/err ]]; then
                echo "FAIL $what: exit $rc (want $want), stderr: $(cat "$tmp/err")"
                failed=1
        else
                echo "ok   $what: $(head -n 1 "$tmp/err")"
        fi
}
tj="$F/models/llama3/tokenizer.json"
printf '"ok"\n"\xff\xfe"\n' >"$tmp/bad_utf8"
expect_fail 1 "invalid UTF-8" "$dsvisor" tokenize --tokenizer "$tj" <"$tmp/bad_utf8"
printf 'not json\n' >"$tmp/bad_json"
expect_fail 1 "not a JSON string" "$dsvisor" tokenize --tokenizer "$tj" <"$tmp/bad_json"
printf '[1, -5]\n' >"$tmp/bad_ids"
expect_fail 1 "negative id" "$dsvisor" tokenize --tokenizer "$tj" --decode <"$tmp/bad_ids"
printf '[999999999]\n' >"$tmp/big_id"
expect_fail 1 "id out of range" "$dsvisor" tokenize --tokenizer "$tj" --decode <"$tmp/big_id"
expect_fail 1 "missing file" "$dsvisor" tokenize --tokenizer "$tmp/nope/tokenizer.json" </dev/null
expect_fail 2 "no tokenizer given" "$dsvisor" tokenize </dev/null

if [[ $failed -ne 0 ]]; then
        echo "test-tokenize-cli: FAILED"
        exit 1
fi
echo "test-tokenize-cli: all checks passed"
