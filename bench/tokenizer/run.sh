#!/usr/bin/env bash
# Tokenizer speed, side by side: libdse (bench_tokenizer) and Hugging Face `tokenizers`
# (npm, the Rust library through its Node binding) encode the same mixed English/code/
# Chinese text with the DeepSeek-V3 tokenizer.json, one thread each. Both must produce
# identical ids before anything is timed.
#
#   bench/tokenizer/run.sh [BUILD_DIR] [ROUNDS] [REPEATS]     (default: build, 3, 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build}
rounds=${2:-3}
repeats=${3:-3}
fixtures=${DSV_FIXTURES:-$src/../shared/fixtures}
tok="$fixtures/tokenizers/models/deepseek_v3/tokenizer.json"

if [[ ! -d $here/node_modules/tokenizers ]]; then
        npm install --prefix "$here" --no-save --no-package-lock tokenizers@0.23.2 >/dev/null
fi
[[ -x $build/bin/bench_tokenizer ]] || cmake --build "$build" --target bench_tokenizer -j2 >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
node "$here/hf_bench.js" make-text "$fixtures/tokenizers/corpus.jsonl" "$src" "$tmp/text.txt"
# Pin both to one CPU so neither gets help from a second core, and alternate the two
# programs (REPEATS times, ROUNDS encodes each) so load from other processes on a shared
# machine hits both alike; each side's best time counts.
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[,-].*//')
: >"$tmp/hf.all"
: >"$tmp/dse.all"
for _ in $(seq "$repeats"); do
        taskset -c "$cpu" node "$here/hf_bench.js" bench "$tok" "$tmp/text.txt" "$tmp/hf_ids.bin" "$rounds" >>"$tmp/hf.all"
        taskset -c "$cpu" "$build/bin/bench_tokenizer" "$tok" "$tmp/text.txt" "$tmp/hf_ids.bin" "$rounds" >>"$tmp/dse.all"
done
# columns: name load_ms L best_s S [...]; keep the minimum of each column
best() { awk '{ for (i = 3; i <= NF; i += 2) if (NR == 1 || $i < m[i]) m[i] = $i }
              END { printf "%s", $1; for (i = 2; i <= NF; i += 2) printf " %s %s", $i, m[i + 1]; print "" }' "$1"; }
best "$tmp/hf.all" >"$tmp/hf.out"
best "$tmp/dse.all" >"$tmp/dse.out"

bytes=$(stat -c %s "$tmp/text.txt")
read -r _ _ hf_load _ hf_s _ <"$tmp/hf.out"
read -r _ _ dse_load _ dse_s _ dse_cpu_load <"$tmp/dse.out"
awk -v b="$bytes" -v hl="$hf_load" -v hs="$hf_s" -v dl="$dse_load" -v ds="$dse_s" -v dc="$dse_cpu_load" 'BEGIN {
        printf "| implementation | load ms | encode MB/s |\n| --- | ---: | ---: |\n"
        printf "| Hugging Face tokenizers 0.23.2 (Node binding) | %.1f | %.2f |\n", hl, b / hs / 1e6
        printf "| libdse | %.1f (cpu %.1f) | %.2f |\n", dl, dc, b / ds / 1e6
        printf "encode speed libdse / Hugging Face = %.2fx on %d bytes\n", hs / ds, b
}'
