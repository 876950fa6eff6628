#!/usr/bin/env bash
# Worker restart-to-ready versus cold load: a restarted worker maps the
# supervisor's existing weight memfd instead of reading the model file again.
#
#   bench/restart_bench.sh BUILD_DIR [MODEL] [WORKER] [KILLS]
#     MODEL   native file or HF folder; default: a synthetic ~180 MB BF16 llama made by
#             gen_llama_st (2 layers, hidden 1024, vocab 32000) in a temporary folder
#     WORKER  path of the worker binary; default BUILD_DIR/bin/dsvisor-worker
#     KILLS   worker restarts measured (default 5)
#
# Prints, from the supervisor's log (its monotonic clock):
#   cold      `dsvisor start` -> every instance ready: model file read into the memfd
#             (page cache dropped first when we may), workers spawned, engines loaded
#             from the memfd, health "ready";
#   restart   worker 0's exit seen (pidfd) -> ready again: backoff (0 for the first
#             crash, then --restart-backoff-ms 1 doubling: 1, 2, 4... ms), spawn into the
#             cgroup, engine on the existing memfd, the worker's own "ready" message;
# and the same two seen from outside by polling `dsvisor status` in a shell loop (an
# upper bound: each poll costs a process start).
# Workers run with --n-ctx 512 (DSV_BENCH_N_CTX) and --max-batch 4 so the KV pool, which
# every start allocates afresh, stays small next to the weights.
set -euo pipefail
build=${1:?usage: restart_bench.sh BUILD_DIR [MODEL] [WORKER] [KILLS]}
model=${2:-}
worker=${3:-$build/bin/dsvisor-worker}
kills=${4:-5}
dsvisor="$build/bin/dsvisor"
work=$(mktemp -d "${TMPDIR:-/tmp}/restart_bench.XXXXXX")
export DSV_CACHE_DIR="$work/cache"
sup_pid=
cleanup() {
        [[ -n $sup_pid ]] && kill "$sup_pid" 2>/dev/null && wait "$sup_pid" 2>/dev/null || true
        rm -rf "$work"
}
trap cleanup EXIT

if [[ -z $model ]]; then
        "$build/bin/gen_llama_st" "$work/hf" 2 1024 2816 32000 >/dev/null
        model="$work/hf"
fi
# Convert once up front so "cold" measures loading, not conversion.
if [[ -d $model ]]; then
        "$dsvisor" convert --model-path "$model" --output-dir "$work/native" >/dev/null
        native="$work/native/model.dse"
else
        native=$model
fi
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true # cold: the file is read from disk

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# Worker 0's "pid state" without a Python start per poll (the poll interval matters here).
inst0() { "$dsvisor" status --json --runtime-dir "$work/run" 2>/dev/null |
        grep -o '"name":"0","pid":[0-9]*,"state":"[a-z]*"' | sed 's/.*"pid":\([0-9]*\),"state":"\([a-z]*\)"/\1 \2/'; }

t0=$(now_ms)
"$dsvisor" start --model "$native" --instances 2 --port 0 --runtime-dir "$work/run" --worker "$worker" \
        --restart-backoff-ms 1 --restart-limit 64 --n-ctx "${DSV_BENCH_N_CTX:-512}" --max-batch 4 --hugepages "${DSV_BENCH_HUGEPAGES:-auto}" >"$work/log" 2>&1 &
sup_pid=$!
until "$dsvisor" status --json --runtime-dir "$work/run" 2>/dev/null | grep -q '"instances_ready":2,'; do
        kill -0 "$sup_pid" 2>/dev/null || { cat "$work/log"; exit 1; }
done
cold=$(($(now_ms) - t0))
bytes=$(stat -c %s "$native")
weights=$(grep -o 'loaded in [0-9]* ms: [0-9]* bytes in [A-Za-z ]*' "$work/log" | head -1)
first=$(grep -o 'Instance 0 ready in [0-9]* ms' "$work/log" | head -1 | grep -o '[0-9]* ms')

restarts=()
for k in $(seq 1 "$kills"); do
        read -r pid state < <(inst0)
        [[ $state == ready ]] || { echo "worker 0 is $state before kill $k" >&2; exit 1; }
        t0=$(now_ms)
        kill -9 "$pid"
        while :; do
                read -r npid state < <(inst0) || true
                [[ $npid != "$pid" && $state == ready ]] && break
        done
        restarts+=($(($(now_ms) - t0)))
        sleep 0.3
done
mapfile -t spawn_ready < <(grep -o 'Instance 0 ready in [0-9]* ms' "$work/log" | tail -n +2 | grep -o '[0-9]* ms' | grep -o '[0-9]*')
mapfile -t exit_ready < <(grep -o 'Instance 0 ready in .* [0-9]* ms after the previous worker exited' "$work/log" |
        grep -o '[0-9]* ms after' | grep -o '[0-9]*')
mapfile -t delays < <(grep -o 'Instance 0: worker [0-9]* killed by signal 9; restarting in [0-9]* ms' "$work/log" |
        grep -o 'in [0-9]* ms' | grep -o '[0-9]*')
all_ready=$(grep -o 'All 2 instances ready in [0-9]* ms' "$work/log" | grep -o '[0-9]* ms')
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

echo "model: $native ($bytes bytes); worker: $worker; $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg)"
echo "weights: $weights"
echo "cold:    dsvisor start -> 2 instances ready: $all_ready (supervisor clock; $cold ms seen from outside)"
echo "         worker 0 spawn -> ready on the fresh image: $first"
echo "restart: kill -9 -> worker 0 ready again, $kills runs (supervisor clock):"
echo "         exit seen -> ready: median $(median "${exit_ready[@]}") ms, all: ${exit_ready[*]} ms"
echo "         of which backoff: ${delays[*]} ms; spawn -> ready: median $(median "${spawn_ready[@]}") ms, all: ${spawn_ready[*]} ms"
echo "         seen from outside (kill -9 -> status says a new pid is ready, polled back to back): median $(median "${restarts[@]}") ms, all: ${restarts[*]} ms"
