#!/usr/bin/env bash
# Our engine against llama.cpp on the same GGUF file: a model written as GGUF by our
# writer (tests/gguf/gguf-from-hf-cli.c, llama.cpp's layout, a synthetic vocabulary so
# llama.cpp loads it; both sides are fed token ids) in F32 and F16, and quantized from
# the F32 file by llama-quantize (or our writer: QUANTIZER) to Q8_0 and Q4_0; for every
# prefix of the prompt, the next-token distribution of `dsvisor logits --model FILE.gguf`
# and of llama-server (n_probs = the whole vocabulary), compared as top-1 agreement and
# mean KL(llama.cpp || ours); then both greedy continuations of the prompt, each ending
# at its first </s> (for `default`, of the prompt's first 104 tokens, mid-verse)
# (llama-server keeps its cache between the prefixes, so each prefix costs one token). For
# Q8_0/Q4_0 our side runs twice, with int8 activations (the default) and float32 ones
# (DSV_ACT=f32). Every position whose top-1 differs is listed with each side's margin
# between its best two tokens (log-probability), to tell near-ties from real differences.
# Not run by CI (CI has no llama.cpp): it needs llama.cpp's binaries, e.g. Debian's
# llama.cpp-tools / libllama0 / libggml0 .debs unpacked with their glibc (LLAMA_RUN names
# a wrapper that runs a llama.cpp tool by name; /work/llama-deb/run.sh is one).
#
#   bench/gguf_vs_llamacpp.sh [MODEL] [TYPES]
#     MODEL: a llama/qwen2/DeepSeek folder of fixtures/models (default
#            llama-bf16-linear-rope; the prompt is its ref/prompt_ids.json), or `default`:
#            the trained models/default on held-out text (Revelation 21:1-4, a book it was
#            not trained on, tokenized by its own tokenizer after <s>). llama.cpp's
#            deepseek2 loader takes a model without q_lora_rank only at 26 or 27 layers
#            (its V2-Lite test), so such a model is written with zero layers appended up
#            to 26 (gguf-from-hf --pad-layers: each adds exactly zero to the residual);
#            the DeepSeek-V3 MTP module is dropped as llama.cpp's converter drops it.
#     TYPES: default "F32 F16 Q8_0 Q4_0"
#   env: BUILD (default build), LLAMA_RUN, GGML_BACKEND_PATH (a ggml CPU backend .so),
#        GGUF_FLAGS (gguf-from-hf options; default --kv-b-split for DeepSeek models, the
#        split attn_k_b/attn_v_b current converters write), GREEDY (continuation length,
#        default 16), DSV_FIXTURES, PORT (default 18931), DSV_CPU reaches our engine.
#        QUANTIZER: who writes the Q8_0/Q4_0 files: llama (default; llama-quantize from
#        our F32 file, with its own choice of type per tensor) or ours (gguf-from-hf,
#        ggml's reference quantizers, every matrix of the type).
#        KV: the cache type of both engines, f32 (default) or f16. With f32 llama-server
#        runs without flash attention (-fa off), whose CPU kernel rounds V to f16 even
#        in an f32 cache; with f16 ours keeps its own default (bf16) and llama.cpp its
#        (f16, flash attention auto). Int8 activations amplify a one-ulp difference
#        into a different rounding, so the caches must match for the int8 paths to.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$SRC/build}
FIX=${DSV_FIXTURES:-$(realpath -m "$SRC/../shared/fixtures")}
LLAMA_RUN=${LLAMA_RUN:-/work/llama-deb/run.sh}
PORT=${PORT:-18931}
FIXTURE=${1:-llama-bf16-linear-rope}
TYPES=${2:-F32 F16 Q8_0 Q4_0}
GREEDY=${GREEDY:-16}
KV=${KV:-f32}
QUANTIZER=${QUANTIZER:-llama}
case $QUANTIZER in llama | ours) ;; *) echo "gguf_vs_llamacpp: QUANTIZER is llama or ours, not '$QUANTIZER'" >&2; exit 2 ;; esac
case $KV in
f32) LLAMA_KV="-ctk f32 -ctv f32 -fa off"; export DSV_KV=f32 ;;
f16) LLAMA_KV="" ;;
*) echo "gguf_vs_llamacpp: KV is f32 or f16, not '$KV'" >&2; exit 2 ;;
esac
if [ "$FIXTURE" = default ]; then DIR=$SRC/models/default; else DIR=$FIX/models/$FIXTURE; fi
[ -f "$DIR/config.json" ] || { echo "gguf_vs_llamacpp: no model at $DIR" >&2; exit 2; }
MODEL_TYPE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model_type'])" "$DIR/config.json")
case $MODEL_TYPE in deepseek*) GGUF_FLAGS=${GGUF_FLAGS---kv-b-split} ;; *) GGUF_FLAGS=${GGUF_FLAGS-} ;; esac
EOS=$(python3 -c "import json,sys; e = json.load(open(sys.argv[1])).get('eos_token_id', -1); print(e[0] if isinstance(e, list) else e)" "$DIR/config.json")
PAD=$(python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))
lite = c['model_type'].startswith('deepseek') and not c.get('q_lora_rank') and c['num_hidden_layers'] < 26
print('--pad-layers 26' if lite else '')" "$DIR/config.json")
TMP=$(mktemp -d)
SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
export DSV_CACHE_DIR=$TMP/cache
if [ "$FIXTURE" = default ]; then
  TEXT="And I saw a new heaven and a new earth: for the first heaven and the first earth were passed away; and there was no more sea. And I John saw the holy city, new Jerusalem, coming down from God out of heaven, prepared as a bride adorned for her husband. And I heard a great voice out of heaven saying, Behold, the tabernacle of God is with men, and he will dwell with them, and they shall be his people, and God himself shall be with them, and be their God. And God shall wipe away all tears from their eyes; and there shall be no more death, neither sorrow, nor crying, neither shall there be any more pain: for the former things are passed away."
  IDS=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$TEXT" |
    "$BUILD/bin/dsvisor" tokenize --model "$DIR" --special |
    python3 -c 'import json,sys; ids = json.load(sys.stdin)["ids"]; print(",".join(map(str, ids[:-1] if ids[-1] == 2 else ids)))')
  # the passage ends a verse, where the model ends its text (</s>): the continuation
  # starts mid-verse, after "...and God himself shall be with them,"
  GREEDY_IDS=$(echo "$IDS" | cut -d, -f1-104)
else
  IDS=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1])))))" "$DIR/ref/prompt_ids.json")
  GREEDY_IDS=$IDS
fi
echo "model $FIXTURE ($MODEL_TYPE${PAD:+, $PAD}), prompt of $(echo "$IDS" | tr ',' '\n' | wc -l) tokens, greedy $GREEDY after $(echo "$GREEDY_IDS" | tr ',' '\n' | wc -l); ours: DSV_CPU=${DSV_CPU:-detected}; KV cache $KV; quantizer $QUANTIZER; llama.cpp backend ${GGML_BACKEND_PATH:-default}; $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-5s %7s %10s %10s %8s  %s\n' type ours top-1 "mean KL" "max KL" greedy "first divergence; positions whose top-1 differs (llama.cpp / our margin of best over second, nats)"
for T in $TYPES; do
  G=$TMP/$FIXTURE-$T.gguf
  # shellcheck disable=SC2086 # GGUF_FLAGS and PAD are lists of options
  case $T in
  Q*) if [ "$QUANTIZER" = llama ]; then
        "$BUILD/bin/gguf-from-hf" "$DIR" "$TMP/f32.gguf" F32 --synthetic-vocab $GGUF_FLAGS $PAD
        "$LLAMA_RUN" llama-quantize "$TMP/f32.gguf" "$G" "$T" >"$TMP/quantize.log" 2>&1 || { tail -5 "$TMP/quantize.log" >&2; exit 1; }
        rm -f "$TMP/f32.gguf"
      else
        "$BUILD/bin/gguf-from-hf" "$DIR" "$G" "$T" --synthetic-vocab $GGUF_FLAGS $PAD
      fi ;;
  *) "$BUILD/bin/gguf-from-hf" "$DIR" "$G" "$T" --synthetic-vocab $GGUF_FLAGS $PAD ;;
  esac
  case $T in Q*) ACTS="int8 f32" ;; *) ACTS=default ;; esac
  for A in $ACTS; do
    if [ "$A" = default ]; then unset DSV_ACT; else export DSV_ACT=$A; fi
    if ! { "$BUILD/bin/dsvisor" logits --model "$G" --tokens "$IDS" --out "$TMP/ours-$A.f32" 2>"$TMP/ours-$A.log" >/dev/null &&
      "$BUILD/bin/dsvisor" logits --model "$G" --tokens "$GREEDY_IDS" --greedy "$GREEDY" >"$TMP/ours-$A-greedy.json" \
        2>>"$TMP/ours-$A.log"; }; then
      cat "$TMP/ours-$A.log" >&2
      exit 1
    fi
  done
  unset DSV_ACT
  # shellcheck disable=SC2086 # LLAMA_KV is a list of options
  "$LLAMA_RUN" llama-server -m "$G" --host 127.0.0.1 --port "$PORT" -c 512 -t 2 --no-warmup $LLAMA_KV >"$TMP/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 240); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 "$SERVER" 2>/dev/null || { tail -5 "$TMP/server.log" >&2; exit 1; }
    sleep 0.5
  done
  # shellcheck disable=SC2086 # ACTS is a list
  python3 - "$IDS" "$GREEDY_IDS" "$TMP" "$PORT" "$T" "$GREEDY" "$EOS" $ACTS <<'PY'
import json, math, struct, sys, urllib.request
ids = [int(x) for x in sys.argv[1].split(",")]
greedy_ids = [int(x) for x in sys.argv[2].split(",")]
tmp, port, gtype, n_greedy, eos, acts = sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7]), sys.argv[8:]
P = len(ids)
url = "http://127.0.0.1:%s/completion" % port
def ask(prompt, n_predict, n_probs):
    body = {"prompt": prompt, "n_predict": n_predict, "n_probs": n_probs, "temperature": 0,
            "cache_prompt": True, "return_tokens": True}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))
def log_softmax(row):
    m = max(row); lse = m + math.log(sum(math.exp(x - m) for x in row))
    return [x - lse for x in row]
def best_two(lp):
    order = sorted(range(len(lp)), key=lambda i: -lp[i])[:2]
    return order[0], lp[order[0]] - lp[order[1]]
V = len(open("%s/ours-%s.f32" % (tmp, acts[0]), "rb").read()) // 4 // P
theirs = []
for t in range(1, P + 1):
    resp = ask(ids[:t], 1, V)
    if "completion_probabilities" not in resp:
        sys.exit("llama-server gave no probabilities for prefix %d: %s" % (t, json.dumps(resp)[:300]))
    lp = [-math.inf] * V
    for e in resp["completion_probabilities"][0]["top_logprobs"]:
        lp[e["id"]] = e["logprob"]
    theirs.append(lp)
# llama-server's ignore_eos would bias </s> to -inf; instead both continuations end at
# the first </s> (which llama-server does not list)
resp = ask(greedy_ids, n_greedy, 0)
gen = resp.get("tokens", [])
if resp.get("stop_type") == "eos" and (not gen or gen[-1] != eos):
    gen.append(eos)
for act in acts:
    raw = open("%s/ours-%s.f32" % (tmp, act), "rb").read()
    ours = struct.unpack("<%df" % (P * V), raw)
    g = json.load(open("%s/ours-%s-greedy.json" % (tmp, act)))
    greedy_ours = g.get("greedy", g) if isinstance(g, dict) else g
    if eos in greedy_ours:
        greedy_ours = greedy_ours[:greedy_ours.index(eos) + 1]
    top1 = 0; kls = []; differ = []
    for t in range(P):
        lq = log_softmax(ours[t * V:(t + 1) * V]); lp = theirs[t]
        kls.append(sum(math.exp(a) * (a - b) for a, b in zip(lp, lq) if a > -math.inf))
        (ip, mp), (iq, mq) = best_two(lp), best_two(lq)
        if ip == iq:
            top1 += 1
        else:
            differ.append("%d (%.3g / %.3g)" % (t, mp, mq))
    first = next((i for i, (a, b) in enumerate(zip(gen, greedy_ours)) if a != b), None)
    if first is None and len(gen) != len(greedy_ours):
        first = min(len(gen), len(greedy_ours))
    print("%-5s %-5s %6.1f%% %10.3g %10.3g %8s  %s%s" % (gtype, act, 100.0 * top1 / P, sum(kls) / P, max(kls),
          "same %d" % len(gen) if first is None else "differ",
          "-" if first is None else "token %d (ours %s, llama.cpp %s)" % (first, greedy_ours[first:first + 3], gen[first:first + 3]),
          "; " + ", ".join(differ) if differ else ""), flush=True)
PY
  kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=
done
