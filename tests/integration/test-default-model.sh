#!/usr/bin/env bash
# The bundled default model (models/default) through the real engine: its logits
# on held-out KJV text (Revelation, never trained on) must agree with the training
# framework's own forward pass on the same BF16 weights (ref/, written by
# tools/train_default_model.py in float64), at DSV_CPU=scalar and at the detected level.
#
#   prompt logits   `dsvisor logits --tokens PROMPT`       vs ref/logits.f32         max abs <= 1e-3
#   greedy ids      its --greedy 16 (KV-cached decode)    vs ref/generated_ids.json identical
#   decode logits   `dsvisor logits --tokens PROMPT+GEN`  vs ref/decode_logits.f32  max abs <= 1e-3
#                   (rows P..P+15 of one forward equal the cached decode steps)
#   tokenizer       `dsvisor tokenize --model M --special` on the prompt text gives PROMPT
#   size            the committed folder stays <= 30 MB
#
# 1e-3 is the fixtures' tolerance for fp32 activations with fp32 accumulation
# (shared/fixtures/models/README.md); ref/manifest.json records the smallest greedy top-1
# margin and router selection gap, to tell a failure from a near-tie.
set -euo pipefail

dsvisor="${DSV_BUILD_DIR:?}/bin/dsvisor"
model="${DSV_SOURCE_DIR:?}/models/default"
ref="$model/ref"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-default-model.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export DSV_CACHE_DIR="$tmp/cache" # convert the committed files, never a stale cache

ids_csv() { python3 -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1])))))' "$@"; }
prompt=$(ids_csv "$ref/prompt_ids.json")
gen=$(ids_csv "$ref/generated_ids.json")

failed=0
run_level() { # NAME [DSV_CPU value]: writes $tmp/NAME.{prompt,full}.{f32,json}
        local name=$1
        local envs=(env -u DSV_CPU)
        [[ $# -gt 1 ]] && envs=(env "DSV_CPU=$2")
        if ! "${envs[@]}" "$dsvisor" logits --model "$model" --tokens "$prompt" \
                --out "$tmp/$name.prompt.f32" --greedy 16 >"$tmp/$name.prompt.json" ||
                ! "${envs[@]}" "$dsvisor" logits --model "$model" --tokens "$prompt,$gen" \
                        --out "$tmp/$name.full.f32" >"$tmp/$name.full.json"; then
                echo "NOT OK $name: dsvisor logits failed"
                failed=$((failed + 1))
                return 1
        fi
}

levels=()
run_level scalar scalar && levels+=(scalar)
run_level detected && levels+=(detected)

# tokenizer: the engine's SentencePiece encoding of the prompt text, BOS added
python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["reference"]["prompt_text"]))' \
        "$ref/manifest.json" >"$tmp/prompt.jsonl"
if "$dsvisor" tokenize --model "$model" --special <"$tmp/prompt.jsonl" >"$tmp/prompt.ids" 2>"$tmp/tok.err"; then
        :
else
        echo "dsvisor tokenize failed: $(cat "$tmp/tok.err")" >"$tmp/prompt.ids"
fi

python3 - "$ref" "$tmp" "$failed" "$model" "${levels[@]}" <<'EOF'
import json, os, struct, sys
from array import array

TOL = 1e-3
ref, tmp, failed, model, levels = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
passed = 0

def floats(path):
    a = array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a

def check(ok, what):
    global passed, failed
    print(("OK " if ok else "NOT OK ") + what)
    if ok:
        passed += 1
    else:
        failed += 1

def compare(name, got, want, vocab, row0=0):
    """max abs over rows of want vs rows row0.. of got; on failure the worst row's first values"""
    n_rows = len(want) // vocab
    if len(got) < (row0 + n_rows) * vocab:
        check(False, f"{name}: {len(got)} floats, expected at least {(row0 + n_rows) * vocab}")
        return
    worst, worst_at = 0.0, 0
    for i in range(n_rows * vocab):
        d = abs(got[row0 * vocab + i] - want[i])
        if not d <= worst:  # also catches NaN
            worst, worst_at = d if d == d else float("inf"), i
    check(worst <= TOL, f"{name}: max abs error {worst:.3e} (tolerance {TOL:g}) over {n_rows} rows")
    if worst > TOL:
        r = worst_at // vocab
        for j in range(r * vocab, r * vocab + 5):
            g, w = got[row0 * vocab + j], want[j]
            print(f"   row {r} [{j - r * vocab}] {'OK' if abs(g - w) <= TOL else 'NOT OK'} engine {g:.6f} reference {w:.6f}")

prompt = json.load(open(f"{ref}/prompt_ids.json"))
want_gen = json.load(open(f"{ref}/generated_ids.json"))
vocab = json.load(open(f"{model}/config.json"))["vocab_size"]
want_logits = floats(f"{ref}/logits.f32")
want_dec = floats(f"{ref}/decode_logits.f32")
assert len(want_logits) == len(prompt) * vocab and len(want_dec) == len(want_gen) * vocab

for lv in levels:
    compare(f"{lv}: prompt logits ({len(prompt)} held-out tokens)", floats(f"{tmp}/{lv}.prompt.f32"), want_logits, vocab)
    got_gen = json.load(open(f"{tmp}/{lv}.prompt.json"))["greedy"]
    check(got_gen == want_gen, f"{lv}: greedy ids {'identical' if got_gen == want_gen else f'{got_gen} != {want_gen}'}")
    compare(f"{lv}: decode logits (rows {len(prompt)}..{len(prompt) + len(want_gen) - 1})",
            floats(f"{tmp}/{lv}.full.f32"), want_dec, vocab, row0=len(prompt))

tok = open(f"{tmp}/prompt.ids").read().strip()
try:
    got_ids = json.loads(tok)["ids"]
except (ValueError, KeyError, TypeError):
    got_ids = tok
check(got_ids == prompt, "tokenizer: prompt text encodes to prompt_ids" +
      ("" if got_ids == prompt else f" (got {got_ids})"))

size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(model) for f in fs)
check(size <= 30 * 1024 * 1024, f"models/default is {size / 1e6:.1f} MB (limit 30 MiB)")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
