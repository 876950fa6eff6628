#!/usr/bin/env bash
# Our engine against llama.cpp on the same GGUF file: a model fixture written as GGUF
# (tests/gguf/gguf-from-hf-cli.c, llama.cpp's layout, a synthetic vocabulary so
# llama.cpp loads it) in F32, F16, Q8_0 and Q4_0; for every prefix of the fixture's
# prompt, the next-token distribution of `dsvisor logits --model FILE.gguf` and of
# llama-server (n_probs = the whole vocabulary), compared as top-1 agreement and mean
# KL(llama.cpp || ours); then both 16-token greedy continuations of the whole prompt.
# Not run by CI: it needs llama.cpp's binaries, e.g. Debian's llama.cpp-tools /
# libllama0 / libggml0 .debs unpacked with their glibc (LLAMA_RUN names a wrapper that
# runs a llama.cpp tool by name; /work/llama-deb/run.sh is one).
#
#   bench/gguf_vs_llamacpp.sh [FIXTURE] [TYPES]
#     FIXTURE: a llama/qwen2/DeepSeek folder of fixtures/models (default
#              llama-bf16-linear-rope). llama.cpp's deepseek2 loader takes a model
#              without q_lora_rank only at 26 or 27 layers (its V2-Lite test), so of the
#              DeepSeek fixtures deepseek-v2-mla-qlora-yarn and deepseek-v3-noaux-yarn run
#     TYPES:   default "F32 F16 Q8_0 Q4_0"
#   env: BUILD (default build), LLAMA_RUN, GGML_BACKEND_PATH (a ggml CPU backend .so),
#        GGUF_FLAGS (gguf-from-hf options; default --kv-b-split for DeepSeek fixtures,
#        the split attn_k_b/attn_v_b current converters write),
#        DSV_FIXTURES, PORT (default 18931); DSV_ACT / DSV_CPU reach our engine (llama.cpp
#        multiplies Q8_0/Q4_0 weights by activations it quantizes to 8 bits per 32)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$SRC/build}
FIX=${DSV_FIXTURES:-$(realpath -m "$SRC/../shared/fixtures")}
LLAMA_RUN=${LLAMA_RUN:-/work/llama-deb/run.sh}
PORT=${PORT:-18931}
FIXTURE=${1:-llama-bf16-linear-rope}
TYPES=${2:-F32 F16 Q8_0 Q4_0}
DIR=$FIX/models/$FIXTURE
case $FIXTURE in deepseek*) GGUF_FLAGS=${GGUF_FLAGS---kv-b-split} ;; *) GGUF_FLAGS=${GGUF_FLAGS-} ;; esac
[ -x "$LLAMA_RUN" ] || { echo "gguf_vs_llamacpp: no llama.cpp runner at $LLAMA_RUN (set LLAMA_RUN)" >&2; exit 2; }
for b in dsvisor gguf-from-hf; do
  [ -x "$BUILD/bin/$b" ] || { echo "gguf_vs_llamacpp: build $b first ($BUILD/bin)" >&2; exit 2; }
done
TMP=$(mktemp -d)
SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
export DSV_CACHE_DIR=$TMP/cache
IDS=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1])))))" "$DIR/ref/prompt_ids.json")
echo "fixture $FIXTURE, prompt of $(echo "$IDS" | tr ',' '\n' | wc -l) tokens; ours: DSV_ACT=${DSV_ACT:-default} DSV_CPU=${DSV_CPU:-detected}; $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %8s %10s %12s %10s  %s\n' type top-1 "mean KL" "max KL" "greedy" "first divergence"
for T in $TYPES; do
  G=$TMP/$FIXTURE-$T.gguf
  # shellcheck disable=SC2086 # GGUF_FLAGS is a list of options
  "$BUILD/bin/gguf-from-hf" "$DIR" "$G" "$T" --synthetic-vocab $GGUF_FLAGS
  "$BUILD/bin/dsvisor" logits --model "$G" --tokens "$IDS" --out "$TMP/ours.f32" --greedy 16 >"$TMP/ours-greedy.json" 2>"$TMP/ours.log"
  "$LLAMA_RUN" llama-server -m "$G" --host 127.0.0.1 --port "$PORT" -c 512 -t 2 --no-warmup >"$TMP/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 "$SERVER" 2>/dev/null || { tail -5 "$TMP/server.log" >&2; exit 1; }
    sleep 0.5
  done
  python3 - "$IDS" "$TMP/ours.f32" "$TMP/ours-greedy.json" "$PORT" "$T" <<'PY'
import json, math, struct, sys, urllib.request
ids = [int(x) for x in sys.argv[1].split(",")]
raw = open(sys.argv[2], "rb").read()
P = len(ids); V = len(raw) // 4 // P
ours = struct.unpack("<%df" % (P * V), raw)
greedy_ours = json.load(open(sys.argv[3]))
greedy_ours = greedy_ours.get("greedy", greedy_ours) if isinstance(greedy_ours, dict) else greedy_ours
url = "http://127.0.0.1:%s/completion" % sys.argv[4]
def ask(prompt, n_predict, n_probs):
    body = {"prompt": prompt, "n_predict": n_predict, "n_probs": n_probs, "temperature": 0,
            "cache_prompt": False, "return_tokens": True, "ignore_eos": True}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))
top1 = 0; kls = []
for t in range(1, P + 1):
    row = ours[(t - 1) * V: t * V]
    m = max(row); lse = m + math.log(sum(math.exp(x - m) for x in row))
    lq = [x - lse for x in row]
    resp = ask(ids[:t], 1, V)
    if "completion_probabilities" not in resp:
        sys.exit("llama-server gave no probabilities for prefix %d: %s" % (t, json.dumps(resp)[:300]))
    d = resp["completion_probabilities"][0]["top_logprobs"]
    lp = [-math.inf] * V
    for e in d:
        lp[e["id"]] = e["logprob"]
    kl = sum(math.exp(a) * (a - b) for a, b in zip(lp, lq) if a > -math.inf)
    kls.append(kl)
    top1 += max(range(V), key=lambda i: lp[i]) == max(range(V), key=lambda i: lq[i])
gen = ask(ids, 16, 0).get("tokens", [])
first = next((i for i, (a, b) in enumerate(zip(gen, greedy_ours)) if a != b), None)
if first is None and len(gen) != len(greedy_ours):
    first = min(len(gen), len(greedy_ours))
same = "identical" if first is None else "differ"
print("%-5s %7.1f%% %10.3g %12.3g %10s  %s" % (sys.argv[5], 100.0 * top1 / P, sum(kls) / P, max(kls), same,
      "-" if first is None else "token %d (ours %s, llama.cpp %s)" % (first, greedy_ours[first:first + 3], gen[first:first + 3])))
PY
  kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=
done
