#!/usr/bin/env bash
# dsvisor run end to end on a fixture model (llama3-rope-gqa, vocab 512) given a
# synthetic byte-level tokenizer (chat-run/: 256 byte pieces, 254 two-letter pieces, <s>,
# </s>, a small chat template). Greedy output must equal the greedy ids of
# `dsvisor logits` decoded by `dsvisor tokenize --decode`; seeded sampling must repeat;
# --chat must feed the template's rendering; unsupported templates must fail loudly.
set -u
bin=${DSV_BUILD_DIR:?}/bin/dsvisor
src=${DSV_SOURCE_DIR:?}
fix=${DSV_FIXTURES:?}/models/llama3-rope-gqa
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DSV_CACHE_DIR=$work/cache
mkdir "$work/model"
for f in config.json generation_config.json model.safetensors; do ln -s "$fix/$f" "$work/model/$f"; done
cp "$src/tests/integration/chat-run/tokenizer.json" "$src/tests/integration/chat-run/tokenizer_config.json" "$work/model/"
m=$work/model
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# 1. greedy run == logits' greedy continuation, decoded
prompt='Hello, world'
if "$bin" run --model "$m" --prompt "$prompt" -n 16 --temperature 0 --threads 1 >"$work/out" 2>"$work/err"; then ok; else bad "run exited $?: $(cat "$work/err")"; fi
ids=$(printf '%s\n' "\"$prompt\"" | "$bin" tokenize --model "$m" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))')
"$bin" logits --model "$m" --tokens "$ids" --greedy 16 >"$work/greedy.json"
python3 - "$work" <<'EOF' && ok || bad "greedy text or the stderr summary differs"
import json, re, subprocess, sys, os
work = sys.argv[1]
greedy = json.load(open(f"{work}/greedy.json"))["greedy"]
n_gen = len(greedy)
if 1 in greedy:                      # </s> ends generation; it is counted, not printed
    n_gen = greedy.index(1) + 1
    greedy = greedy[:greedy.index(1)]
dec = subprocess.run([os.environ["DSV_BUILD_DIR"] + "/bin/dsvisor", "tokenize", "--model", f"{work}/model", "--decode"],
                     input=json.dumps(greedy) + "\n", capture_output=True, text=True, check=True).stdout
want = json.loads(dec.splitlines()[0])
got = open(f"{work}/out", encoding="utf-8").read()
err = open(f"{work}/err").read()
m = re.search(r"^prompt: (\d+) tokens, [0-9.]+ tok/s; generation: (\d+) tokens, [0-9.]+ tok/s$", err, re.M)
print(f"greedy: want {want!r}, got {got[:-1]!r}; stderr: {err.strip()!r}")
sys.exit(0 if got == want + "\n" and m and int(m.group(1)) == 12 and int(m.group(2)) == n_gen else 1)
EOF

# 1b. --stop: a piece of the greedy text (spanning two-letter tokens) ends the output before it
stop=$(python3 -c '
import re, sys
m = re.search(r"[a-zA-Z]{3,}", open(sys.argv[1], encoding="utf-8").read()[1:])
print(m.group(0)[1:4] if m else "")' "$work/out")
if [ -n "$stop" ]; then
  "$bin" run --model "$m" --prompt "$prompt" -n 16 --temperature 0 --threads 1 --stop "$stop" --stop "never" >"$work/stopped" 2>/dev/null
  python3 - "$work/out" "$work/stopped" "$stop" <<'EOF' && ok || bad "--stop '$stop' did not cut the output before it"
import sys
full = open(sys.argv[1], encoding="utf-8").read()
got = open(sys.argv[2], encoding="utf-8").read()
sys.exit(0 if got == full[:full.index(sys.argv[3])] + "\n" else 1)
EOF
fi

# 1c. a native model file (tokenizer embedded by convert) gives the same greedy text
if "$bin" convert --model-path "$m" --output-dir "$work/native" >/dev/null 2>&1 &&
   "$bin" run --model "$work/native/model.dse" --prompt "$prompt" -n 16 --temperature 0 --threads 1 >"$work/native.out" 2>/dev/null &&
   cmp -s "$work/out" "$work/native.out"; then ok; else bad "run on the converted native file differs"; fi

# 2. a seed reproduces a sampled run; another seed changes it
for s in 7 7 8; do
  "$bin" run --model "$m" --prompt "$prompt" -n 24 --temperature 1.2 --top-k 0 --top-p 1 --min-p 0 --seed $s --threads 1 >"$work/s$s.$RANDOM" 2>/dev/null
done
set -- "$work"/s7.* ; if [ $# -eq 2 ] && cmp -s "$1" "$2"; then ok; else bad "seed 7 did not repeat"; fi
if ! cmp -s "$1" "$work"/s8.*; then ok; else bad "seed 8 gave the seed-7 text"; fi

# 3. --chat renders the model's template: <s> + "<|user|>\nHi there\n<|assistant|>\n" bytes
"$bin" run --model "$m" --chat "  Hi there " -n 2 --temperature 0 --threads 1 >/dev/null 2>"$work/err"
want=$((1 + $(printf '<|user|>\nHi there\n<|assistant|>\n' | wc -c)))
if grep -q "^prompt: $want tokens" "$work/err"; then ok; else bad "--chat prompt: want $want tokens: $(cat "$work/err")"; fi
"$bin" run --model "$m" --chat "Hi" --system "Be brief." -n 2 --temperature 0 --threads 1 >/dev/null 2>"$work/err"
want=$((1 + $(printf '<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n' | wc -c)))
if grep -q "^prompt: $want tokens" "$work/err"; then ok; else bad "--system prompt: want $want tokens: $(cat "$work/err")"; fi

# 4. --chat-template FILE replaces it; a construct outside the subset is an explicit error
printf '{%% for m in messages %%}{{ m.content | upper }}{%% endfor %%}' >"$work/t.jinja"
"$bin" run --model "$m" --chat "abc" --chat-template "$work/t.jinja" -n 1 --temperature 0 --threads 1 >/dev/null 2>"$work/err"
if grep -q "^prompt: 3 tokens" "$work/err"; then ok; else bad "--chat-template: $(cat "$work/err")"; fi
# the reference rendering of qwen2_5:single_user (fixtures chat/qwen2_5.jsonl) through run:
# this byte-level tokenizer has no <|im_start|>, so the prompt is one id per byte
python3 - "$DSV_FIXTURES/tokenizers" "$work" <<'EOF'
import json, sys
root, work = sys.argv[1], sys.argv[2]
open(f"{work}/qwen.jinja", "w").write(json.load(open(f"{root}/models/qwen2_5/tokenizer_config.json"))["chat_template"])
case = next(json.loads(l) for l in open(f"{root}/chat/qwen2_5.jsonl") if '"qwen2_5:single_user"' in l)
open(f"{work}/qwen.msg", "w").write(case["messages"][0]["content"])
open(f"{work}/qwen.len", "w").write(str(len(case["rendered"].encode("utf-8"))))
EOF
"$bin" run --model "$m" --chat "$(cat "$work/qwen.msg")" --chat-template "$work/qwen.jinja" -n 1 --temperature 0 --threads 1 >/dev/null 2>"$work/err"
if grep -q "^prompt: $(cat "$work/qwen.len") tokens" "$work/err"; then ok; else bad "qwen2_5 template through run: want $(cat "$work/qwen.len") tokens: $(cat "$work/err")"; fi
printf '{%% include "other.jinja" %%}' >"$work/bad.jinja"
if "$bin" run --model "$m" --chat "abc" --chat-template "$work/bad.jinja" -n 1 --threads 1 >/dev/null 2>"$work/err"; then
  bad "an unsupported template was accepted"
elif grep -q -- "--chat-template FILE" "$work/err"; then ok; else bad "unsupported template message: $(cat "$work/err")"; fi

# 5. an empty prompt (this tokenizer adds no BOS) is an error, not a generation from nothing
if "$bin" run --model "$m" --prompt "" -n 1 --threads 1 >/dev/null 2>"$work/err"; then bad "an empty prompt was accepted"
elif grep -q "prompt is empty" "$work/err"; then ok; else bad "empty prompt message: $(cat "$work/err")"; fi

# 6. usage errors exit 2
"$bin" run --prompt x >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "missing --model is not a usage error"
"$bin" run --model "$m" --prompt x --chat y >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--prompt with --chat is not a usage error"
"$bin" run --model "$m" --prompt x --top-p 0 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--top-p 0 is not a usage error"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
