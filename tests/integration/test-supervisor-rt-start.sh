#!/usr/bin/env bash
# dsvisor start --rt-priority end to end on a pretend 3-core machine
# (HWLOC_SYNTHETIC="numa:1 core:3 pu:1"): the plan keeps CPU 0 for the supervisor and
# gives the instance CPUs "1-2" (CPU 2 does not exist here, so cpuset.cpus is reported
# not in effect and the worker's own pinning keeps it on CPU 1). With RT group scheduling
# the instance's v1 cpu group gets cpu.rt_runtime_us, the worker's non-nng threads run
# SCHED_FIFO 10 with SCHED_RESET_ON_FORK, nng's threads stay SCHED_OTHER, no compute
# thread may run on CPU 0, the supervisor's HTTP threads run SCHED_FIFO 11 there and its
# other threads SCHED_OTHER, and requests are answered.
#   test-supervisor-rt-start.sh stub|real
set -euo pipefail
kind=${1:-stub}
bin="${DSV_BUILD_DIR:?}/bin"
dsvisor="$bin/dsvisor"
case $kind in
stub) worker="$bin/test-supervisor-stub-worker" ;;
real) worker="$bin/dsvisor-worker" ;;
esac
[[ -x $worker ]] || { echo "SKIP: $worker is not built"; exit 77; }
(($(nproc) >= 2)) || { echo "SKIP: needs CPU 1"; exit 77; }
[[ $(cat /proc/sys/kernel/sched_rt_runtime_us) != -1 ]] || { echo "SKIP: RT throttling is off"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-rt-start.XXXXXX")
export DSV_CACHE_DIR="$tmp/cache"
sup_pid=
cleanup() {
        [[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null || true
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
check() {
        local what=$1
        shift
        if "$@"; then echo "ok     $what"; else echo "NOT OK $what"; failed=$((failed + 1)); fi
}
run="$tmp/run"
HWLOC_SYNTHETIC="numa:1 core:3 pu:1" "$dsvisor" start --model "${DSV_FIXTURES:?}/models/qwen2-bf16-tied" \
        --instances 1 --threads-per-instance 1 --port 0 --runtime-dir "$run" --worker "$worker" \
        --n-ctx 256 --max-batch 2 --rt-priority 10 --hugepages off >"$tmp/log" 2>&1 &
sup_pid=$!
ready=0
for _ in $(seq 1 300); do
        if "$dsvisor" status --json --runtime-dir "$run" >"$tmp/s.json" 2>/dev/null &&
                grep -q '"instances_ready":1' "$tmp/s.json"; then
                ready=1
                break
        fi
        kill -0 "$sup_pid" 2>/dev/null || break
        sleep 0.2
done
check "ready with --rt-priority 10" test $ready = 1
py() { python3 -c "import json,sys; j=json.load(open('$tmp/s.json')); $1"; }
wpid=$(py 'print(j["instances"][0]["pid"])')
check "status: compute threads SCHED_FIFO/10" py 'sys.exit(0 if j["instances"][0]["sched"] == "SCHED_FIFO/10" else 1)'
check "status: cpu.rt_runtime_us granted to the instance group" py '
sys.exit(0 if any(l["limit"] == "cpu.rt_runtime_us" and l["in_effect"] for l in j["instances"][0]["limits"]) else 1)'
n_fifo=0
bad=0
for t in /proc/"$wpid"/task/*; do
        pol=$(chrt -p "$(basename "$t")" | head -1)
        comm=$(cat "$t/comm")
        cpus=$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")
        if [[ $pol == *SCHED_FIFO* ]]; then
                n_fifo=$((n_fifo + 1))
                [[ $pol == *SCHED_RESET_ON_FORK* && $comm != nng:* && $cpus == 1 ]] || bad=$((bad + 1))
                [[ $(chrt -p "$(basename "$t")" | sed -n 2p) == *": 10" ]] || bad=$((bad + 1))
        elif [[ $comm != nng:* ]]; then
                bad=$((bad + 1))
        fi
done
check "worker: $n_fifo FIFO thread(s), each priority 10, reset-on-fork, CPU 1 only; nng threads SCHED_OTHER" \
        test "$n_fifo" -ge 1 -a "$bad" -eq 0
check "RLIMIT_RTTIME set on the worker" bash -c "grep -E '^Max realtime timeout +10000000 +10000000' /proc/$wpid/limits >/dev/null"
check "status: the HTTP threads run SCHED_FIFO 11" py 'sys.exit(0 if j["gateway"]["http_rt_priority"] == 11 else 1)'
# The HTTP threads (the accept thread and libmicrohttpd's) run SCHED_FIFO 11, one above
# the compute threads, on CPU 0 only; every other thread of the supervisor SCHED_OTHER.
# A connection held open (its request unfinished) shows a per-connection thread too.
exec 3<>"/dev/tcp/127.0.0.1/$(py 'print(j["port"])')"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{' >&3
sleep 0.5
n_http=0
bad=0
for t in /proc/"$sup_pid"/task/*; do
        pol=$(chrt -p "$(basename "$t")")
        comm=$(cat "$t/comm")
        cpus=$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")
        case $comm in
        dsv-accept | MHD-*)
                n_http=$((n_http + 1))
                [[ $pol == *SCHED_FIFO*": 11" && $cpus == 0 ]] || { echo "       $comm: $pol on $cpus"; bad=$((bad + 1)); }
                ;;
        *) [[ $pol == *SCHED_OTHER* ]] || { echo "       $comm: $pol"; bad=$((bad + 1)); } ;;
        esac
done
exec 3>&-
check "supervisor: $n_http HTTP thread(s) SCHED_FIFO 11 on CPU 0 (accept, polling, a connection); the rest SCHED_OTHER" \
        test "$n_http" -ge 3 -a "$bad" -eq 0
port=$(py 'print(j["port"])')
# One instance only: a 503 means its health reply was late (seen once in ~5 runs on this
# loaded host right after FIFO was applied); the body is kept to tell why.
codes=
for _ in 1 2 3; do
        code=$(curl -s -o "$tmp/body" -w '%{http_code}' -m 20 "http://127.0.0.1:$port/v1/completions" \
                -H 'Content-Type: application/json' -d '{"model":"qwen2-bf16-tied","prompt":[1,2,3],"max_tokens":4}')
        codes="$codes $code"
        [[ $code == 200 ]] && break
        echo "       HTTP $code: $(head -c 300 "$tmp/body")"
        sleep 1
done
check "a request is answered (HTTP$codes)" test "$code" = 200
check "/metrics: dsvisor_worker_sched_fifo 1" bash -c "curl -s -m 10 http://127.0.0.1:$port/metrics |
        grep -q '^dsvisor_worker_sched_fifo{instance=\"0\",numa_node=\"0\"} 1'"
check "stop" "$dsvisor" stop --runtime-dir "$run" --wait-ms 30000
wait "$sup_pid" || true
sup_pid=
((failed)) && cat "$tmp/log"
echo "$failed failed"
exit $((failed > 0))
