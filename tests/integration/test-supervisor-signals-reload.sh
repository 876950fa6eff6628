#!/usr/bin/env bash
# SIGHUP tells the truth, with the stub worker or dsvisor-worker (ARG stub|real):
#   - a reload that changes options of every kind applies each one it can — the model
#     (new weight images), the worker binary, worker options, the memory limit (a new
#     cgroup per instance), the restart policy — through one rolling restart, seen in
#     each new worker's binary, command line, weight mapping and cgroup file (and, with
#     dsvisor-worker, in the new model's greedy logprobs); and names
#     each one it cannot (placement, the gateway's address and served id, the cgroup
#     parent, a file value of an option the command line sets) with the reason, in a
#     warning and in `dsvisor status`;
#   - a new value that fails its check (a worker that is not executable, a model that
#     does not load) is named, the others of the same reload are still applied;
#   - a memory limit asked for where there is no memory controller stops the start
#     (exit 1, the option and the reason named), unless --allow-unenforced: then it runs
#     and status shows the limit not in effect, and a reload's new limit is applied and
#     said to be not in effect; without --allow-unenforced a reload's new limit is named
#     and not applied (root: a mount namespace without the memory hierarchy).
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-signals-reload.XXXXXX")
failed=0
# bin, dsvisor, dsv_model, DSV_CACHE_DIR and check()
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
case ${1:-stub} in # the worker: the stub (its command line and process contract), or dsvisor-worker
stub) worker="$bin/test-supervisor-stub-worker" ;;
real) worker="$bin/dsvisor-worker" ;;
*) echo "bad worker kind $1"; exit 2 ;;
esac
if [[ ! -x $worker ]]; then
        echo "SKIP: $worker is not built"
        exit 77
fi
model_a="$dsv_model"
model_b="$DSV_FIXTURES/models/llama3-rope-gqa"
sup_pid=
cleanup() {
        [[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null || true
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT

status_field() { # RUN PYTHON-EXPR over j
        "$dsvisor" status --json --runtime-dir "$1" 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"
}
wait_for() { # RUN PYTHON-EXPR over j: until it is True, up to 2 minutes
        for _ in $(seq 1 600); do
                [[ $(status_field "$1" "$2" 2>/dev/null) == True ]] && return 0
                sleep 0.2
        done
        return 1
}
wait_ready() { wait_for "$1" 'j["instances_ready"] == j["instances_total"]'; }
# every instance restarted $2 times and is ready again
wait_rolled() { wait_for "$1" "all(i['restarts'] == $2 and i['state'] == 'ready' for i in j['instances'])"; }
complete() { # OUT: a greedy completion of the same prompt into OUT; prints the HTTP code
        curl -s -o "$1" -w '%{http_code}' -m 20 "http://127.0.0.1:$(status_field "$run" 'j["port"]')/v1/completions" \
                -H 'Content-Type: application/json' \
                -d '{"model":"qwen2-bf16-tied","prompt":[5,6,7,8],"max_tokens":8,"temperature":0,"logprobs":1}'
}
pids() { status_field "$1" '" ".join(str(i["pid"]) for i in j["instances"])'; }

# ---- one reload, options of every kind
run="$tmp/run1"
cp "$worker" "$tmp/worker-b"
cat >"$tmp/cfg.json" <<EOF
{"instances": 2, "hugepages": "off", "model": "$model_a", "worker": "$worker", "grace-ms": 2000,
 "memory-max-mib": 600, "restart-limit": 5}
EOF
"$dsvisor" start --config "$tmp/cfg.json" --port 0 --runtime-dir "$run" >"$tmp/reload.log" 2>&1 &
sup_pid=$!
check "ready with the first configuration" wait_ready "$run"
check "status has no reload yet" test "$(status_field "$run" 'j["reload"]')" = None
pids_before=$(pids "$run")
check "the first model answers" test "$(complete "$tmp/before.json")" = 200
cat >"$tmp/cfg.json" <<EOF
{"instances": 3, "hugepages": "off", "model": "$model_b", "worker": "$tmp/worker-b", "grace-ms": 1500,
 "n-ctx": 512, "memory-max-mib": 700, "restart-limit": 9, "no-housekeeping": true, "host": "127.0.0.2",
 "cgroup-parent": "reload/test", "port": 8123}
EOF
kill -HUP "$sup_pid"
check "the reload rolled: each instance restarted once and is ready" wait_rolled "$run" 1
status_field "$run" 'json.dumps(j["reload"], indent=1)' >"$tmp/reload.json"
check "status names what was applied: model, worker, grace-ms, n-ctx, memory-max-mib, restart-limit" \
        test "$(status_field "$run" '" ".join(sorted(a["option"] for a in j["reload"]["applied"]))')" = \
        "grace-ms memory-max-mib model n-ctx restart-limit worker"
check "status names what was not applied, each with its reason" \
        test "$(status_field "$run" '" ".join(sorted(a["option"] for a in j["reload"]["not_applied"] if a["reason"]))')" = \
        "cgroup-parent host instances model-id no-housekeeping port"
check "the port the command line set is named as such" bash -c "
        grep -q '^<4>dsvisor: Reload: port NOT applied: the command line sets it' '$tmp/reload.log'"
for o in instances no-housekeeping host cgroup-parent model-id; do
        check "a warning names $o" grep -q "^<4>dsvisor: Reload: $o NOT applied: ..*" "$tmp/reload.log"
done
check "what was not applied kept its running value (2 instances, 127.0.0.1, served as qwen2-bf16-tied)" \
        test "$(status_field "$run" 'j["instances_total"], j["host"], j["model_id"]')" = "2 127.0.0.1 qwen2-bf16-tied"
pids_after=$(pids "$run")
check "both workers were replaced ($pids_before -> $pids_after)" bash -c "
        for p in $pids_before; do [[ ' $pids_after ' == *\" \$p \"* ]] && exit 1; done; exit 0"
model_path=$(status_field "$run" 'j["model"]')
model_key="$(stat -c %s "$model_path")-$(stat -c %Y "$model_path")"
check "status serves the new model ($model_path)" bash -c "[[ '$model_path' == *llama3-rope-gqa* ]]"
for p in $pids_after; do
        check "worker $p runs the new binary" test "$(readlink "/proc/$p/exe")" = "$tmp/worker-b"
        check "worker $p got the new options (--n-ctx 512 --grace-ms 1500)" bash -c "
                tr '\0' ' ' </proc/$p/cmdline | grep -q -- '--grace-ms 1500 .*--n-ctx 512'"
        check "worker $p maps the new model's weight image (dsvisor-weights-n*-$model_key)" \
                grep -q "memfd:dsvisor-weights-n[0-9]*-$model_key " "/proc/$p/maps"
done
check "the gateway still answers for the served id" test "$(complete "$tmp/after.json")" = 200
if [[ $worker == "$bin/dsvisor-worker" ]]; then
        check "the new model answers: its greedy completion's logprobs differ from the old model's" bash -c "
                t() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"choices\"][0][\"logprobs\"])' \"\$1\"; }
                [[ \$(t '$tmp/before.json') != \$(t '$tmp/after.json') ]]"
fi
status_field "$run" '"\n".join("%s %s %s" % (l["in_effect"], l["value"], i["cgroup"]) for i in j["instances"] for l in i["limits"] if l["limit"] == "memory.max")' >"$tmp/memlimits"
check "each instance's new cgroup has the new memory limit in effect (700 MiB)" bash -c "
        [[ \$(grep -c '^True 734003200 ' '$tmp/memlimits') == 2 ]]"
while read -r _ _ groups; do
        mem=$(echo "$groups" | tr ',' '\n' | sed -n 's/^ *v1 memory //p')
        v2=$(echo "$groups" | tr ',' '\n' | sed -n 's/^ *v2 //p')
        if [[ -n $mem ]]; then file="$mem/memory.limit_in_bytes"; else file="$v2/memory.max"; fi
        check "$file says 734003200" test "$(cat "$file")" = 734003200
done <"$tmp/memlimits"

# ---- a new value that fails its check is named; the rest of the reload still applies
memfd_inode() { awk '/memfd:dsvisor-weights/ {print $5; exit}' "/proc/$1/maps"; }
inode_before=$(memfd_inode "$(pids "$run" | cut -d' ' -f1)")
sed -i "s|\"worker\": \"$tmp/worker-b\"|\"worker\": \"$tmp/no-such-worker\", \"max-batch\": 4|; s|\"hugepages\": \"off\"|\"hugepages\": \"auto\"|" \
        "$tmp/cfg.json"
kill -HUP "$sup_pid"
check "the second reload rolled too" wait_rolled "$run" 2
check "the worker that is not executable is named with the reason" \
        test "$(status_field "$run" '[a["reason"] for a in j["reload"]["not_applied"] if a["option"] == "worker"][0]')" = \
        "'$tmp/no-such-worker' is not executable: No such file or directory"
check "hugepages and max-batch from the same reload were applied" \
        test "$(status_field "$run" '[a["option"] for a in j["reload"]["applied"]]')" = "['hugepages', 'max-batch']"
check "status shows hugepages auto" test "$(status_field "$run" 'j["hugepages"]')" = auto
for p in $(pids "$run"); do
        check "worker $p maps the new weight image of hugepages auto (memfd inode $inode_before -> $(memfd_inode "$p"))" \
                bash -c "[[ -n '$(memfd_inode "$p")' && '$(memfd_inode "$p")' != '$inode_before' ]]"
        check "worker $p still runs the binary that worked, with --max-batch 4" bash -c "
                [[ \$(readlink /proc/$p/exe) == '$tmp/worker-b' ]] && tr '\0' ' ' </proc/$p/cmdline | grep -q -- '--max-batch 4'"
done
check "dsvisor status prints the reload" bash -c "
        '$dsvisor' status --runtime-dir '$run' | grep -q 'NOT applied  worker .*is not executable'"

# ---- a model that does not load is named, and nothing restarts for it
sed -i "s|\"model\": \"$model_b\"|\"model\": \"$tmp/no-such-model\"|" "$tmp/cfg.json"
pids_before=$(pids "$run")
kill -HUP "$sup_pid"
check "a model that does not load is named with the reason" wait_for "$run" \
        '[a["reason"] for a in j["reload"]["not_applied"] if a["option"] == "model"] == ["the model could not be resolved: No such file or directory (logged)"]'
sleep 1
check "the running model and workers stay ($pids_before)" test "$(status_field "$run" 'j["model"]') $(pids "$run")" = \
        "$model_path $pids_before"
kill -TERM "$sup_pid"
rc=0
wait "$sup_pid" || rc=$?
sup_pid=
check "stopped with exit 0" test "$rc" -eq 0

# ---- a memory limit without a memory controller
skipped=0
if [[ $(id -u) != 0 ]]; then
        echo "SKIP   unenforced limits: a mount namespace without the memory hierarchy needs root"
        skipped=1
else
        # In a private mount namespace the memory hierarchy (v1), or every cgroup (v2 only),
        # is gone; the command runs there with the same pid (unshare and sh exec it).
        no_memcg=(unshare -m --propagation private sh -c '
                if mountpoint -q /sys/fs/cgroup/memory; then umount -l /sys/fs/cgroup/memory
                else umount -l /sys/fs/cgroup; fi && exec "$@"' sh)
        rc=0
        timeout 120 "${no_memcg[@]}" "$dsvisor" start --model "$model_a" --instances 1 --port 0 \
                --runtime-dir "$tmp/run2" --worker "$worker" --hugepages off --memory-max-mib 512 \
                >"$tmp/unenforced.log" 2>&1 || rc=$?
        check "--memory-max-mib without a memory controller stops the start (exit $rc)" test "$rc" -eq 1
        check "the error names the option, the reason and --allow-unenforced" \
                grep -q -- '--memory-max-mib is not in effect (memory.max: .*); pass --allow-unenforced' "$tmp/unenforced.log"
        check "no worker was started" bash -c "! grep -q 'worker pid' '$tmp/unenforced.log'"
        echo '{"memory-max-mib": 512}' >"$tmp/cfg3.json"
        "${no_memcg[@]}" "$dsvisor" start --model "$model_a" --instances 1 --port 0 --runtime-dir "$tmp/run3" \
                --worker "$worker" --hugepages off --config "$tmp/cfg3.json" --allow-unenforced >"$tmp/allowed.log" 2>&1 &
        sup_pid=$!
        check "--allow-unenforced: it runs" wait_ready "$tmp/run3"
        check "--allow-unenforced: status shows memory.max not in effect, with the reason" test "$(status_field "$tmp/run3" \
                '[(l["in_effect"], bool(l["reason"])) for l in j["instances"][0]["limits"] if l["limit"] == "memory.max"]')" \
                = "[(False, True)]"
        echo '{"memory-max-mib": 256}' >"$tmp/cfg3.json"
        kill -HUP "$sup_pid"
        check "--allow-unenforced: a new memory limit is applied and said to be NOT in effect" bash -c "
                for i in \$(seq 1 100); do
                        '$dsvisor' status --json --runtime-dir '$tmp/run3' | python3 -c '
import json, sys
j = json.load(sys.stdin)
a = [x[\"how\"] for x in (j[\"reload\"] or {}).get(\"applied\", []) if x[\"option\"] == \"memory-max-mib\"]
sys.exit(0 if a and \"NOT in effect\" in a[0] else 1)' && exit 0
                        sleep 0.1
                done; exit 1"
        "$dsvisor" stop --runtime-dir "$tmp/run3" >/dev/null
        rc=0
        wait "$sup_pid" || rc=$?
        sup_pid=
        check "--allow-unenforced: stopped with exit 0" test "$rc" -eq 0

        echo '{"instances": 1}' >"$tmp/cfg4.json"
        "${no_memcg[@]}" "$dsvisor" start --model "$model_a" --port 0 --runtime-dir "$tmp/run4" --worker "$worker" \
                --hugepages off --config "$tmp/cfg4.json" >"$tmp/nolimit.log" 2>&1 &
        sup_pid=$!
        check "without a memory limit it starts where there is no memory controller" wait_ready "$tmp/run4"
        echo '{"instances": 1, "memory-max-mib": 256}' >"$tmp/cfg4.json"
        kill -HUP "$sup_pid"
        sleep 1
        check "a reload's memory limit that would not be in effect is named, not applied" \
                grep -q '^<4>dsvisor: Reload: memory-max-mib NOT applied: .*; it would not be in effect' "$tmp/nolimit.log"
        kill -TERM "$sup_pid"
        wait "$sup_pid" || true
        sup_pid=
fi

if ((failed > 0)); then
        cat "$tmp/reload.json" 2>/dev/null || true
        for f in reload unenforced allowed nolimit; do echo "--- $f.log"; cat "$tmp/$f.log" 2>/dev/null || true; done
fi
echo "$failed failed"
((failed > 0)) && exit 1
((skipped > 0)) && exit 77
exit 0
