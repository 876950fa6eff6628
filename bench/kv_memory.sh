#!/usr/bin/env bash
# Memory per KV cache type: for each preset, one `dsvisor-bench model` run per type
# (f32, bf16, fp8, int8) with a KV pool of KV_TOKENS positions for each of BATCH
# sequences, made resident (dse_kv_cache_prefault) before decoding. Prints, per type, the
# KV bytes per token as laid out and as measured (the RSS growth when the pool was
# prefaulted, over its positions), both against f32's from the same script run, and the
# process RSS against weights + KV + scratch (the engine aims at <= 1.05).
# Usage: bench/kv_memory.sh BUILD_DIR [KV_TOKENS] [BATCH] [PRESET:FORMAT:LAYERS ...]
set -euo pipefail
build=${1:?usage: kv_memory.sh BUILD_DIR [KV_TOKENS] [BATCH] [PRESET:FORMAT:LAYERS ...]}
kv_tokens=${2:-8192}
batch=${3:-4}
shift $(($# < 3 ? $# : 3))
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(deepseek-v2-lite:int4:2 r1-distill-qwen-1.5b:int4:4)
bench="$build/bin/dsvisor-bench"
[ -x "$bench" ] || { echo "kv_memory.sh: $bench not found (build the dsvisor-bench target)"; exit 1; }

for p in "${presets[@]}"; do
        IFS=: read -r preset format layers <<<"$p"
        echo "== $preset $format, $layers layers: $batch sequences x $kv_tokens positions of KV"
        out=""
        for t in f32 bf16 fp8 int8; do
                line=$("$bench" model --preset "$preset" --format "$format" --layers "$layers" --batches "$batch" \
                        --prefill none --decode 4 --kv-tokens "$kv_tokens" --kv-dtype "$t" --json)
                out+="$line"$'\n'
        done
        printf '%s' "$out" | python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
f32 = runs[0]
print("  %-5s %12s %10s %14s %10s %9s %9s" % ("kv", "bytes/token", "vs f32", "resident/tok", "vs f32", "KV MiB", "rss_ratio"))
for r in runs:
    print("  %-5s %12d %10.3f %14.1f %10.3f %9.1f %9.3f" % (
        r["kv_dtype"], r["kv_bytes_per_token"], r["kv_bytes_per_token"] / f32["kv_bytes_per_token"],
        r["kv_resident_bytes_per_token"], r["kv_resident_bytes_per_token"] / f32["kv_resident_bytes_per_token"],
        r["kv_bytes"] / 2**20, r["rss_ratio"]))
print("  (cpu share of the runs: %s; the figures above are byte counts, not timings)" %
      ", ".join("%.2f" % r["cpu_share"] for r in runs))
'
done
