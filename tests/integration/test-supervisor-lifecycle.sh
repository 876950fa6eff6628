#!/usr/bin/env bash
# dsvisor start end to end: two instances on a fixture model, wait for
# ready, query status, share the weights (one copy for both workers), kill -9 one worker
# while requests run (it comes back, every request is answered), stop (no process, no
# cgroup, no socket left).
#
#   test-supervisor-lifecycle.sh WORKER HUGEPAGES
#     WORKER     stub: tests/integration/test-supervisor-stub-worker.c (the worker's
#                command line and process contract, no engine); real: dsvisor-worker
#                (skipped, exit 77, when it is not built)
#     HUGEPAGES  off: shmem memfd; off-thp: the same with shmem_enabled set to advise
#                here (root), the previous setting restored on exit; require: 2 MiB pages
#                reserved here first (root), the previous nr_hugepages restored on exit
set -euo pipefail

worker_kind=${1:-stub}
hp=${2:-off}
bin="${DSV_BUILD_DIR:?}/bin"
dsvisor="$bin/dsvisor"
model="${DSV_FIXTURES:?}/models/qwen2-bf16-tied"
case $worker_kind in
stub) worker="$bin/test-supervisor-stub-worker" ;;
real) worker="$bin/dsvisor-worker" ;;
*) echo "bad worker kind $worker_kind"; exit 2 ;;
esac
if [[ ! -x $worker ]]; then
        echo "SKIP: $worker is not built"
        exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor.XXXXXX")
export DSV_CACHE_DIR="$tmp/cache"
run="$tmp/run"
sup_pid=
added_pages=0
shmem_knob=/sys/kernel/mm/transparent_hugepage/shmem_enabled
shmem_old=
cleanup() {
        [[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null || true
        wait 2>/dev/null || true
        if ((added_pages > 0)); then
                cur=$(cat /proc/sys/vm/nr_hugepages)
                echo $((cur - added_pages)) >/proc/sys/vm/nr_hugepages
        fi
        [[ -n $shmem_old ]] && echo "$shmem_old" >"$shmem_knob"
        rm -rf "$tmp"
}
trap cleanup EXIT

failed=0
check() { # DESCRIPTION COMMAND...
        local what=$1
        shift
        if "$@"; then
                echo "ok     $what"
        else
                echo "NOT OK $what"
                failed=$((failed + 1))
        fi
}
jq_py() { python3 -c "import json,sys; j=json.load(open('$tmp/status.json')); $1"; }
status_json() { "$dsvisor" status --json --runtime-dir "$run" >"$tmp/status.json" 2>/dev/null; }

if [[ $hp == require ]]; then
        free_before=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
        added_pages=8 # the converted fixture is 4 MiB: 2 pages, with room to spare
        cur=$(cat /proc/sys/vm/nr_hugepages)
        echo $((cur + added_pages)) >/proc/sys/vm/nr_hugepages
        got=$(cat /proc/sys/vm/nr_hugepages)
        if ((got < cur + 2)); then
                echo "SKIP: could not reserve 2 MiB pages (nr_hugepages $got)"
                exit 77
        fi
fi

sup_hp=$hp
if [[ $hp == off-thp ]]; then
        shmem_old=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$shmem_knob")
        echo advise >"$shmem_knob"
        sup_hp=off
fi

"$dsvisor" start --model "$model" --instances 2 --port 0 --runtime-dir "$run" --worker "$worker" \
        --hugepages "$sup_hp" --grace-ms 3000 >"$tmp/start.log" 2>&1 &
sup_pid=$!

wait_ready() { # SECONDS: until status says every instance is ready
        local deadline=$((SECONDS + $1))
        while ((SECONDS < deadline)); do
                if status_json && jq_py 'sys.exit(0 if j["instances_ready"] == 2 and all(i["state"] == "ready" for i in j["instances"]) else 1)'; then
                        return 0
                fi
                kill -0 "$sup_pid" 2>/dev/null || return 1
                sleep 0.2
        done
        return 1
}
if ! wait_ready 120; then
        echo "NOT OK supervisor did not become ready"
        cat "$tmp/start.log"
        exit 1
fi
echo "ok     2 instances ready"

# The worker reports the page size its weights came in (dse_model_huge_bytes): all in
# 2 MiB pages from the hugetlb memfd, and from shmem (off) when shmem THP is on (the
# image asks for it); with shmem THP never, 4 KiB pages and a warning.
if [[ $worker_kind == real && ($hp == require || $hp == off-thp) ]]; then
        check "workers map the weights in 2 MiB pages" \
                grep -q 'dsvisor-worker\[0\]: 100% of the weights mapped in 2 MiB pages' "$tmp/start.log"
elif [[ $worker_kind == real ]] && grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/shmem_enabled; then
        check "workers warn that the weights are in 4 KiB pages" \
                grep -q "dsvisor-worker\[0\]: Only 0% of the weights are mapped in 2 MiB pages: the --model-fd image" "$tmp/start.log"
fi

port=$(jq_py 'print(j["port"])')
pids=($(jq_py 'print(" ".join(str(i["pid"]) for i in j["instances"]))'))
check "status: pid, node, CPUs, cgroup, limits, sched, restarts, an idle queue per instance" jq_py '
ok = all(i["pid"] > 0 and i["numa_node"] >= 0 and i["cpus"] and i["sched"].startswith("SCHED_OTHER")
         and i["restarts"] == 0 and isinstance(i["limits"], list) and i["uptime_s"] > 0
         and i["queue_depth"] == 0 and i["running"] == 0 for i in j["instances"])
sys.exit(0 if ok else 1)'
check "status text shows both instances" bash -c "'$dsvisor' status --runtime-dir '$run' | grep -c '^instance [01]: pid' | grep -qx 2"
for p in "${pids[@]}"; do
        check "worker $p runs in its own cgroup" bash -c "grep -q 'dsvisor-$sup_pid-worker-' /proc/$p/cgroup"
        check "worker $p has the supervisor as parent" bash -c "[[ \$(awk '/^PPid:/ {print \$2}' /proc/$p/status) == $sup_pid ]]"
done
check "control socket is 0600 in a 0700 directory" bash -c "[[ \$(stat -c %a '$run') == 700 && \$(stat -c %a '$run/control.sock') == 600 ]]"

# One copy of the weights for both workers. The image is the memfd the supervisor made.
image_bytes=$(jq_py 'print(j["weights"][0]["bytes"])')
if [[ $hp == require ]]; then
        check "weights are in HugePages" jq_py 'sys.exit(0 if j["weights"][0]["hugepages"] and all(i["weights_hugepages_bytes"] > 0 for i in j["instances"]) else 1)'
        shared_kb=0
        for p in "${pids[@]}"; do
                kb=$(awk '/dsvisor-weights/ {m=1; next} /^[0-9a-f]+-[0-9a-f]+ / {m=0} m && /^Shared_Hugetlb:/ {s+=$2} END {print s+0}' /proc/$p/smaps)
                check "worker $p maps the whole HugePages image ($kb kB shared)" test $((kb * 1024)) -eq "$image_bytes"
        done
else
        pss_kb=0
        for p in "${pids[@]}"; do
                kb=$(awk '/dsvisor-weights/ {m=1; next} /^[0-9a-f]+-[0-9a-f]+ / {m=0} m && /^Pss:/ {s+=$2} END {print s+0}' /proc/$p/smaps)
                pss_kb=$((pss_kb + kb))
        done
        image_kb=$((image_bytes / 1024))
        echo "       summed PSS of the weight mapping over 2 workers: $pss_kb kB; image: $image_kb kB"
        check "2 workers cost one copy of the weights (summed PSS within 5% of the image)" \
                test $((pss_kb * 100)) -ge $((image_kb * 95)) -a $((pss_kb * 100)) -le $((image_kb * 105))
        check "rollup PSS of each worker is below the image size + 64 MiB private" bash -c "
                for p in ${pids[*]}; do r=\$(awk '/^Pss:/ {print \$2}' /proc/\$p/smaps_rollup); ((r < $image_kb + 65536)) || exit 1; done"
fi
shmem_pmd_kb() { # PID: kB of the weight image the worker maps with 2 MiB pages of shmem
        awk '/dsvisor-weights/ {m=1; next} /^[0-9a-f]+-[0-9a-f]+ / {m=0} m && /^ShmemPmdMapped:/ {s+=$2} END {print s+0}' /proc/$1/smaps
}
if [[ $hp == off-thp ]]; then
        check "status: the image is all in transparent 2 MiB pages" \
                jq_py 'sys.exit(0 if j["weights"][0]["thp_bytes"] == j["weights"][0]["bytes"] > 0 else 1)'
        check "status text says so" bash -c "'$dsvisor' status --runtime-dir '$run' | grep -q 'normal pages, 100% in transparent 2 MiB pages at load'"
        for p in "${pids[@]}"; do
                kb=$(shmem_pmd_kb "$p")
                check "worker $p maps the whole shmem image in 2 MiB pages ($kb kB)" test $((kb * 1024)) -eq "$image_bytes"
        done
fi

# Requests keep being answered while worker 0 is killed and comes back.
req() {
        curl -s -o /dev/null -w '%{http_code}\n' -m 20 "http://127.0.0.1:$port/v1/completions" \
                -H 'Content-Type: application/json' \
                -d '{"model":"qwen2-bf16-tied","prompt":[1,2,3],"max_tokens":4,"temperature":0}'
}
load() { for _ in $(seq 1 60); do req; sleep 0.05; done >"$tmp/codes"; }
load &
load_pid=$!
sleep 0.7
# The weight memfd as the workers map it: device:inode of the mapping.
map_id() { awk '/dsvisor-weights/ {print $4 ":" $5; exit}' "/proc/$1/maps"; }
weights_id=$(map_id "${pids[1]}")
kill -9 "${pids[0]}"
wait "$load_pid"
n_ok=$(grep -c '^200$' "$tmp/codes" || true)
n_all=$(wc -l <"$tmp/codes")
echo "       requests during the kill: $n_ok/$n_all answered 200 ($(sort "$tmp/codes" | uniq -c | tr '\n' ' '))"
check "every request during the kill was answered" test "$n_ok" -eq "$n_all" -a "$n_all" -eq 60
check "the killed worker came back (new pid, ready, restarts 1)" bash -c "
        for i in \$(seq 1 100); do
                '$dsvisor' status --json --runtime-dir '$run' >'$tmp/s2.json' 2>/dev/null &&
                python3 -c \"import json,sys; i=json.load(open('$tmp/s2.json'))['instances'][0]; sys.exit(0 if i['state']=='ready' and i['restarts']==1 and i['pid'] not in (0, ${pids[0]}) else 1)\" && exit 0
                sleep 0.2
        done; exit 1"
check "the kill was noticed and logged" grep -q "Instance 0: worker ${pids[0]} killed by signal 9" "$tmp/start.log"
check "a request after the restart is answered" test "$(req)" = 200
new_pid=$(python3 -c "import json; print(json.load(open('$tmp/s2.json'))['instances'][0]['pid'])")
check "the restarted worker maps the same weight memfd ($weights_id)" test "$(map_id "$new_pid")" = "$weights_id"
if [[ $hp == require ]]; then
        kb=$(awk '/dsvisor-weights/ {m=1; next} /^[0-9a-f]+-[0-9a-f]+ / {m=0} m && /^Shared_Hugetlb:/ {s+=$2} END {print s+0}' /proc/$new_pid/smaps)
        check "... and all of it in HugePages ($kb kB shared)" test $((kb * 1024)) -eq "$image_bytes"
elif [[ $hp == off-thp ]]; then
        kb=$(shmem_pmd_kb "$new_pid")
        check "... and all of it in 2 MiB pages of shmem ($kb kB)" test $((kb * 1024)) -eq "$image_bytes"
fi

# Stop: drains, stops the workers, removes the cgroups and the control socket.
check "dsvisor stop returns 0" "$dsvisor" stop --runtime-dir "$run" --wait-ms 30000
rc=0
wait "$sup_pid" || rc=$?
sup_pid_done=$sup_pid
sup_pid=
check "the supervisor exited 0" test "$rc" -eq 0
for p in "${pids[1]}" "$new_pid"; do
        check "worker $p is gone" bash -c "! kill -0 $p 2>/dev/null"
done
check "no cgroup left" bash -c "! find /sys/fs/cgroup -maxdepth 4 -name 'dsvisor-$sup_pid_done-worker-*' 2>/dev/null | grep -q ."
check "no control socket left" test ! -e "$run/control.sock"
if [[ $hp == require ]]; then
        # Other jobs on this host may change the pool meanwhile: at least ours came back.
        check "HugePages given back on stop" test "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -ge "$free_before"
fi

if ((failed > 0)); then
        echo "--- supervisor log"
        cat "$tmp/start.log"
fi
echo "$failed failed"
exit $((failed > 0))
