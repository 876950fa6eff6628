#!/usr/bin/env bash
# Tokenizer speed, side by side: libdse (bench_tokenizer) and Hugging Face `tokenizers`
# (npm, the Rust library through its Node binding) encode the same mixed English/code/
# Chinese text with the DeepSeek-V3 tokenizer.json, one thread each. Both must produce
# identical ids before anything is timed. Then the load time as a user meets it: LOADS
# fresh processes each (alternating, not pinned) do nothing but load the tokenizer.json
# once; the median and the worst wall time count (libdse also reports the load's CPU time,
# which on a shared machine shows how much of the wall time was waiting for a CPU).
#
#   bench/tokenizer/run.sh [BUILD_DIR] [ROUNDS] [REPEATS] [LOADS]    (default: build, 3, 3, 20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build}
rounds=${2:-3}
repeats=${3:-3}
loads=${4:-20}
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

# fresh-process loads, alternating the two
: >"$tmp/dse.load"
: >"$tmp/hf.load"
for _ in $(seq "$loads"); do
        "$build/bin/bench_tokenizer" --load-once "$tok" >>"$tmp/dse.load"
        node "$here/hf_bench.js" load-once "$tok" >>"$tmp/hf.load"
done
# "median worst" of column COL
stats() { sort -g -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { printf "%.1f %.1f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2, v[NR] }'; }
read -r dse_med dse_max <<<"$(stats "$tmp/dse.load" 2)"
read -r dse_cpu_med dse_cpu_max <<<"$(stats "$tmp/dse.load" 4)"
read -r hf_med hf_max <<<"$(stats "$tmp/hf.load" 2)"

bytes=$(stat -c %s "$tmp/text.txt")
read -r _ _ _ _ hf_s _ <"$tmp/hf.out"
read -r _ _ _ _ dse_s _ <"$tmp/dse.out"
awk -v b="$bytes" -v hs="$hf_s" -v ds="$dse_s" -v n="$loads" -v dm="$dse_med" -v dx="$dse_max" -v cm="$dse_cpu_med" \
    -v cx="$dse_cpu_max" -v hm="$hf_med" -v hx="$hf_max" -v la="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
        printf "| implementation | load ms, fresh process: median / worst of %d | encode MB/s |\n| --- | ---: | ---: |\n", n
        printf "| Hugging Face tokenizers 0.23.2 (Node binding) | %.1f / %.1f | %.2f |\n", hm, hx, b / hs / 1e6
        printf "| libdse | %.1f / %.1f (CPU %.1f / %.1f) | %.2f |\n", dm, dx, cm, cx, b / ds / 1e6
        printf "encode speed libdse / Hugging Face = %.2fx on %d bytes; load average at the end %s\n", hs / ds, b, la
}'
