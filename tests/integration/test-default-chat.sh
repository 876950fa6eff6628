#!/usr/bin/env bash
# `dsvisor run --chat` on the bundled default model (models/default: a SentencePiece
# tokenizer.model with a tokenizer_config.json carrying the chat template). The model
# folder is converted into a fresh cache, so the tokenizer comes from the native file's
# embedded tokenizer.model + tokenizer_config.json (dse_model_tokenizer).
set -euo pipefail

dsvisor="${DSV_BUILD_DIR:?}/bin/dsvisor"
model="${DSV_SOURCE_DIR:?}/models/default"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DSV_CACHE_DIR="$tmp/cache"
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# 1. The chat prompt: "<s>" from the template is BOS (id 1), then the user turn encoded
#    as SentencePiece encodes it alone, role markers as single pieces (legacy
#    LlamaTokenizer; spm_encode is the reference).
turn='<|user|>And God said<|assistant|>'
want="[1,$(echo "$turn" | spm_encode --model="$model/tokenizer.model" --output_format=id | tr ' ' ',')]"
got=$(echo "\"<s>$turn\"" | "$dsvisor" tokenize --model "$model" | tr -d ' ')
[[ $got == "{\"ids\":$want}" ]] || fail "tokenize '<s>$turn': got $got, want {\"ids\":$want}"

# 2. dsvisor run --chat generates text and exits 0.
if "$dsvisor" run --model "$model" --chat "And God said" -n 16 --seed 1 >"$tmp/out" 2>"$tmp/err"; then
        [[ -n $(tr -d '[:space:]' <"$tmp/out") ]] || fail "run --chat printed no text (stderr: $(cat "$tmp/err"))"
else
        fail "run --chat exited $? (stderr: $(cat "$tmp/err"))"
fi
# Same seed, same text: the chat prompt is deterministic.
"$dsvisor" run --model "$model" --chat "And God said" -n 16 --seed 1 >"$tmp/out2" 2>/dev/null || fail "second run failed"
cmp -s "$tmp/out" "$tmp/out2" || fail "two runs with --seed 1 differ"

if [[ $failed -eq 0 ]]; then echo "3 passed, 0 failed"; else echo "0 passed, 3 failed"; fi
exit $failed
