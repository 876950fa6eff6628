#!/usr/bin/env bash
# Runs dsvisor-bench model over the preset x format x threads matrix and prints one JSON
# object per line, preceded by the machine's load, so a results table can be built from
# the output.
#
#     bench/run_model_matrix.sh BUILD_DIR [THREADS...]        # default threads: 2 1
#
# Environment: PRESETS (default: r1-distill-qwen-1.5b deepseek-v2-lite deepseek-coder-1.3b),
# FORMATS (int4 int8 bf16), LAYERS_<preset with - and . as _> to reduce a preset's layers
# (default LAYERS_deepseek_v2_lite=8, the size the engine targets are set for; 0 = all 27), EXTRA (more
# dsvisor-bench arguments, e.g. "--prefill 128 --decode 16" for a quick pass), DSV_ACT
# (f32 to time the exact float-activation path; default int8 for Q8/Q4 weights),
# HUGEPAGES ("0 1": each run with the weights in the file mapping, then in a hugetlb
# memfd as the supervisor serves them, dsvisor-bench --hugepages; "shmem": in a shmem
# memfd, as it serves them without HugePages, --shmem; default 0).
set -euo pipefail
build=${1:?usage: run_model_matrix.sh BUILD_DIR [THREADS...]}
shift
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(2 1)
bench="$build/bin/dsvisor-bench"
presets=${PRESETS:-"r1-distill-qwen-1.5b deepseek-v2-lite deepseek-coder-1.3b"}
: "${LAYERS_deepseek_v2_lite:=8}"
export LAYERS_deepseek_v2_lite
formats=${FORMATS:-"int4 int8 bf16"}
hugepages=${HUGEPAGES:-0}
echo "# $(date -u +%FT%TZ) $(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)" \
  "commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?') DSV_ACT=${DSV_ACT:-int8}"
for p in $presets; do
  var="LAYERS_$(echo "$p" | tr -- '-.' '__')"
  layers=${!var:-0}
  for f in $formats; do
    for t in "${threads[@]}"; do
      for h in $hugepages; do
        echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
        args=(model --preset "$p" --format "$f" --threads "$t" --json)
        [ "$layers" -gt 0 ] && args+=(--layers "$layers")
        [ "$h" = 1 ] && args+=(--hugepages)
        [ "$h" = shmem ] && args+=(--shmem)
        # shellcheck disable=SC2086
        "$bench" "${args[@]}" ${EXTRA:-} || echo "# failed ($?): ${args[*]}"
        echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
      done
    done
  done
done
