#!/usr/bin/env bash
# What a new user sees: fifty short chat messages (default-chat-prompts.txt: questions,
# requests, greetings, single words, sentences ending in . ? !) sent with curl to
# `dsvisor start` on the bundled default model, with the README demo's sampling settings
# (max_tokens 48, temperature 0.8, seed 7). The model must answer, not stop at once:
#   * >= 95 % of the replies have at least 8 words,
#   * >= 80 % of all reply words are English dictionary words (Debian wamerican),
#   * more replies end by "stop" (the model's own </s>) than by "length".
# Nothing forces the length: no token is banned or required.
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-default-chat-replies.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
dsv_model="$DSV_SOURCE_DIR/models/default"
dsv_model_id=default
dict=/usr/share/dict/american-english
need_worker
if [[ ! -r $dict ]]; then
        echo "SKIP: $dict is missing (Debian wamerican, scripts/bootstrap.sh --with-tests)"
        exit 77
fi
trap 'dsv_stop_all; rm -rf "$tmp"' EXIT

dsv_start c 1
dsv_wait_ready c 1 120
url="http://127.0.0.1:${dsv_port[c]}/v1/chat/completions"
n=0
while IFS= read -r prompt; do
        [[ -z $prompt || $prompt == \#* ]] && continue
        n=$((n + 1))
        body=$(python3 -c 'import json, sys
print(json.dumps({"model": "default", "messages": [{"role": "user", "content": sys.argv[1]}],
                  "max_tokens": 48, "temperature": 0.8, "seed": 7}))' "$prompt")
        if ! curl -sf -m 120 "$url" -H 'Content-Type: application/json' -d "$body" >"$tmp/reply.$n.json"; then
                echo "NOT OK request $n ($prompt) failed"
                failed=1
        fi
        printf '%s\n' "$prompt" >"$tmp/prompt.$n.txt"
done <"$DSV_SOURCE_DIR/tests/integration/default-chat-prompts.txt"

python3 - "$tmp" "$n" "$dict" "$failed" <<'PY'
import json, re, sys

tmp, n, dict_path, failed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
words_of = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
with open(dict_path, encoding="utf-8", errors="replace") as f:
    dictionary = {w.strip().lower() for w in f if w.strip()}

def known(word):
    w = word.lower()
    return w in dictionary or (w.endswith("'s") and w[:-2] in dictionary)

long_enough = stops = lengths = words = known_words = 0
for i in range(1, n + 1):
    prompt = open(f"{tmp}/prompt.{i}.txt").read().strip()
    try:
        choice = json.load(open(f"{tmp}/reply.{i}.json"))["choices"][0]
    except (OSError, ValueError, KeyError, IndexError):
        print(f"NOT OK {prompt!r}: no reply")
        failed = 1
        continue
    text, finish = choice["message"]["content"], choice["finish_reason"]
    ws = words_of.findall(text)
    long_enough += len(ws) >= 8
    stops += finish == "stop"
    lengths += finish == "length"
    words += len(ws)
    known_words += sum(map(known, ws))
    print(f"{prompt!r} -> [{finish}, {len(ws)} words] {text!r}")

def check(ok, what):
    global failed
    print(("OK " if ok else "NOT OK ") + what)
    failed |= not ok

check(long_enough >= 0.95 * n, f"{long_enough}/{n} replies have at least 8 words (need 95 %)")
check(words > 0 and known_words >= 0.8 * words,
      f"{known_words}/{words} reply words are in {dict_path} (need 80 %)")
check(stops > lengths, f"{stops} replies end by stop, {lengths} by length")
sys.exit(1 if failed else 0)
PY
