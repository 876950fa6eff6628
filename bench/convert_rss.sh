#!/usr/bin/env bash
# Peak memory of `dsvisor convert` on a synthetic multi-GB BF16 llama checkpoint
# (bench/gen_llama_st.c): the converter streams tensor by tensor, so its maximum
# resident set size should track the largest tensor (or one 16 MiB row block), not
# the model. Usage: bench/convert_rss.sh BUILD_DIR [WORK_DIR] [N_LAYERS]
# Needs about 2x the model size (~8 GB at the default 8 layers) of free disk.
set -euo pipefail
build=${1:?usage: convert_rss.sh BUILD_DIR [WORK_DIR] [N_LAYERS]}
work=${2:-$(mktemp -d)}
layers=${3:-8}
trap 'rm -rf "$work/hf" "$work/out"' EXIT

"$build/bin/gen_llama_st" "$work/hf" "$layers"
model_bytes=$(stat -c %s "$work/hf/model.safetensors")

for q in auto int8; do
  /usr/bin/time -v "$build/bin/dsvisor" convert --model-path "$work/hf" --output-dir "$work/out" \
    --quant-format "$q" >"$work/convert.out" 2>"$work/time.txt"
  rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time.txt")
  out_bytes=$(stat -c %s "$work/out/model.dse")
  awk -v q="$q" -v m="$model_bytes" -v o="$out_bytes" -v r="$rss_kb" -v w="$wall" 'BEGIN {
    printf "quant=%-5s model=%.2f GB  output=%.2f GB  peak RSS=%.1f MiB (%.2f%% of the model)  wall=%s\n",
           q, m / 1e9, o / 1e9, r / 1024, 100 * r * 1024 / m, w }'
  rm -rf "$work/out"
done
