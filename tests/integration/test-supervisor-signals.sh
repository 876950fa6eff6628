#!/usr/bin/env bash
# dsvisor start lifecycle edges with the stub worker:
#   - SIGHUP re-reads --config and restarts the instances one at a time while requests
#     run: every request is answered, each instance restarts exactly once;
#   - a worker that keeps dying hits the crash-loop limit: the supervisor gives up with
#     exit 1 and leaves no cgroup;
#   - a debugger calling into the supervisor (poll then fails with the kernel's internal
#     ERESTART_RESTARTBLOCK, 516) does not stop it;
#   - kill -9 of the supervisor takes its workers with it (PR_SET_PDEATHSIG): no orphans;
#   - --rt-priority on a host with no CPU free of instances is refused with the reason;
#   - bad options and config keys are clear errors (exit 2).
set -euo pipefail
bin="${DSV_BUILD_DIR:?}/bin"
dsvisor="$bin/dsvisor"
worker="$bin/test-supervisor-stub-worker"
model="${DSV_FIXTURES:?}/models/qwen2-bf16-tied"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-signals.XXXXXX")
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
status_field() { # RUN PYTHON-EXPR over j
        "$dsvisor" status --json --runtime-dir "$1" 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"
}
wait_ready() { # RUN SECONDS
        local deadline=$((SECONDS + $2))
        while ((SECONDS < deadline)); do
                [[ $(status_field "$1" 'j["instances_ready"] == j["instances_total"]' 2>/dev/null) == True ]] && return 0
                sleep 0.2
        done
        return 1
}

# ---- SIGHUP: rolling restart without a failed request
run="$tmp/run1"
echo '{"instances": 2, "hugepages": "off", "grace-ms": 2000}' >"$tmp/cfg.json"
"$dsvisor" start --config "$tmp/cfg.json" --model "$model" --port 0 --runtime-dir "$run" --worker "$worker" \
        >"$tmp/hup.log" 2>&1 &
sup_pid=$!
check "ready with the config file's 2 instances" wait_ready "$run" 120
check "config file values are in effect" test "$(status_field "$run" 'j["instances_total"]')" = 2
port=$(status_field "$run" 'j["port"]')
pids_before=$(status_field "$run" '" ".join(str(i["pid"]) for i in j["instances"])')
req() {
        curl -s -o /dev/null -w '%{http_code}\n' -m 20 "http://127.0.0.1:$port/v1/completions" \
                -H 'Content-Type: application/json' -d '{"model":"qwen2-bf16-tied","prompt":[5,6],"max_tokens":8}'
}
load() { for _ in $(seq 1 80); do req; sleep 0.05; done >"$tmp/codes"; }
load &
load_pid=$!
sleep 0.5
echo '{"instances": 2, "hugepages": "off", "grace-ms": 1500, "max-batch": 4}' >"$tmp/cfg.json"
kill -HUP "$sup_pid"
wait "$load_pid"
n_ok=$(grep -c '^200$' "$tmp/codes" || true)
echo "       requests during the rolling restart: $n_ok/80 answered 200 ($(sort "$tmp/codes" | uniq -c | tr '\n' ' '))"
check "every request during the rolling restart was answered" test "$n_ok" -eq 80
check "each instance restarted exactly once, one at a time" bash -c "
        for i in \$(seq 1 150); do
                r=\$('$dsvisor' status --json --runtime-dir '$run' | python3 -c 'import json,sys; j=json.load(sys.stdin); print(all(i[\"restarts\"] == 1 and i[\"state\"] == \"ready\" for i in j[\"instances\"]))')
                [[ \$r == True ]] && exit 0
                sleep 0.2
        done; exit 1"
pids_after=$(status_field "$run" '" ".join(str(i["pid"]) for i in j["instances"])')
check "both workers were replaced ($pids_before -> $pids_after)" bash -c "
        for p in $pids_before; do [[ ' $pids_after ' == *\" \$p \"* ]] && exit 1; done; exit 0"
check "the drains did not overlap" python3 - "$tmp/hup.log" <<'EOF'
import re, sys
draining = None
for line in open(sys.argv[1]):
    m = re.search(r"Reload: draining instance (\d+)", line)
    if m:
        if draining is not None:
            sys.exit(1)
        draining = m.group(1)
    m = re.search(r"Instance (\d+) ready in", line)
    if m and m.group(1) == draining:
        draining = None
EOF
echo '{"instances": 2, "bogus": 1}' >"$tmp/cfg.json"
kill -HUP "$sup_pid"
sleep 1
check "a bad config on SIGHUP is refused and the old one kept" grep -q 'Reload failed, keeping the running configuration: .*unknown key "bogus"' "$tmp/hup.log"
worker_pids=$(status_field "$run" '" ".join(str(i["pid"]) for i in j["instances"])')

# ---- a debugger calling a function in the supervisor interrupts its poll
for _ in 1 2 3; do gdb -p "$sup_pid" -batch -ex 'call (int)getpid()' >/dev/null 2>&1 || true; sleep 0.3; done
sleep 0.5
check "the supervisor outlives a debugger's calls" kill -0 "$sup_pid"
check "and still serves" test "$(req)" = 200
check "no poll failure logged" bash -c "! grep -q 'poll failed' '$tmp/hup.log'"

# ---- kill -9 of the supervisor: the workers die with it
v2_own=$(sed -n 's/^0:://p' /proc/self/cgroup)
v2_mount=/sys/fs/cgroup
[[ $(stat -f -c %T /sys/fs/cgroup) == tmpfs ]] && v2_mount=/sys/fs/cgroup/unified
v2_own=$v2_mount${v2_own%/}
marks() { # DIR: its dsvisor xattrs, one per line
        python3 -c "import os,sys; print('\n'.join(a for a in os.listxattr(sys.argv[1]) if a.startswith('trusted.dsvisor.')))" "$1" 2>/dev/null || true
}
killed_v2_group="$v2_own/dsvisor-$sup_pid-worker-0"
check "the supervisor records the v2 groups it made (trusted.dsvisor.made on $killed_v2_group)" bash -c "
        [[ ! -d '$v2_own' ]] || python3 -c \"import os,sys; sys.exit(0 if os.getxattr('$killed_v2_group', 'trusted.dsvisor.made') == b'$sup_pid' else 1)\""
marks "$v2_own" >"$tmp/marks-before-kill"
kill -9 "$sup_pid"
wait "$sup_pid" 2>/dev/null || true
check "workers die with a killed supervisor (no orphans)" bash -c "
        for i in \$(seq 1 50); do alive=0; for p in $worker_pids; do kill -0 \$p 2>/dev/null && alive=1; done
        ((alive == 0)) && exit 0; sleep 0.1; done; exit 1"
# A killed supervisor cannot remove its (now empty) groups: the next start does.
killed_sup=$sup_pid
sup_pid=

# ---- SIGTERM drains: an in-flight request finishes, new ones are refused, exit 0
run="$tmp/run4"
"$dsvisor" start --model "$model" --instances 2 --port 0 --runtime-dir "$run" --worker "$worker" \
        --hugepages off --grace-ms 8000 >"$tmp/drain.log" 2>&1 &
sup_pid=$!
check "drain: ready" wait_ready "$run" 120
marks "$v2_own" >"$tmp/marks-after-restart"
echo "       (records on $v2_own before the kill: $(tr '\n' ' ' <"$tmp/marks-before-kill"))"
check "the next start took over the killed supervisor's record of the controllers it enabled" \
        bash -c "! grep -qx 'trusted.dsvisor.enabled.$killed_sup' '$tmp/marks-after-restart'"
check "the next start removed the killed supervisor's empty cgroups" bash -c "
        grep -q \"cgroup '.*dsvisor-$killed_sup-worker-0' left by supervisor $killed_sup, which is gone\" '$tmp/drain.log' &&
        ! find /sys/fs/cgroup -mindepth 1 -maxdepth 4 -type d -name 'dsvisor-$killed_sup-worker-*' | grep -q ."
port=$(status_field "$run" 'j["port"]')
curl -s -m 30 -o "$tmp/long.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
        -H 'Content-Type: application/json' -d '{"model":"qwen2-bf16-tied","prompt":[5],"max_tokens":300}' \
        >"$tmp/long.code" &
long_pid=$!
sleep 0.5
kill -TERM "$sup_pid"
sleep 0.3
code_new=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/v1/completions" \
        -H 'Content-Type: application/json' -d '{"model":"qwen2-bf16-tied","prompt":[5],"max_tokens":2}' || true)
wait "$long_pid" || true
rc=0
wait "$sup_pid" || rc=$?
sup_pid=
check "drain: the in-flight request finished (200, 300 tokens)" bash -c "
        [[ \$(cat '$tmp/long.code') == 200 ]] && grep -q '\"completion_tokens\":300' '$tmp/long.json'"
check "drain: a new request during the drain is refused ($code_new)" bash -c "[[ '$code_new' == 503 ]]"
check "drain: exit 0 after SIGTERM" test "$rc" -eq 0

# ---- crash loop: a worker that exits at once
run="$tmp/run2"
rc=0
timeout 60 "$dsvisor" start --model "$model" --instances 1 --port 0 --runtime-dir "$run" --worker /bin/false \
        --restart-limit 3 --restart-backoff-ms 10 --hugepages off >"$tmp/loop.log" 2>&1 || rc=$?
check "crash loop: the supervisor gives up with exit 1 (got $rc)" test "$rc" -eq 1
check "crash loop: the restarts backed off and the limit was logged" bash -c "
        grep -q 'restarting in 10 ms' '$tmp/loop.log' && grep -q 'restarting in 20 ms' '$tmp/loop.log' &&
        grep -q 'crash loop, giving up' '$tmp/loop.log'"
cg=$(grep -o '/sys/fs/cgroup/[^ :]*dsvisor-[0-9]*-worker-0' "$tmp/loop.log" | head -1)
check "crash loop: its cgroup ($cg) was removed" bash -c "[[ -n '$cg' && ! -e '$cg' ]] && ! grep -q 'Failed to remove cgroup' '$tmp/loop.log'"

# ---- --rt-priority preflight
ncpu=$(nproc)
rc=0
"$dsvisor" start --model "$model" --port 0 --runtime-dir "$tmp/run3" --worker "$worker" --rt-priority 10 \
        --no-housekeeping >"$tmp/rt.log" 2>&1 || rc=$?
check "--rt-priority with every CPU given to instances is refused ($ncpu CPUs)" bash -c "
        [[ $rc == 1 ]] && grep -q 'rt-priority 10 refused: no CPU is left free of FIFO compute threads' '$tmp/rt.log'"

# ---- usage errors
rc=0
"$dsvisor" start --instances many >"$tmp/e1.log" 2>&1 || rc=$?
check "bad option value: exit 2 naming it" bash -c "[[ $rc == 2 ]] && grep -q \"instances: 'many' is not an integer\" '$tmp/e1.log'"
echo '{"instances": 2, "hugepage": "off"}' >"$tmp/bad.json"
rc=0
"$dsvisor" start --config "$tmp/bad.json" >"$tmp/e2.log" 2>&1 || rc=$?
check "unknown config key: exit 2 naming it" bash -c "[[ $rc == 2 ]] && grep -q 'unknown key \"hugepage\"' '$tmp/e2.log'"
rc=0
"$dsvisor" status --runtime-dir "$tmp/nothing" >"$tmp/e3.log" 2>&1 || rc=$?
check "status without a supervisor: exit 1 with the reason" bash -c "[[ $rc == 1 ]] && grep -q 'no running supervisor' '$tmp/e3.log'"

if ((failed > 0)); then
        for f in hup drain loop rt; do echo "--- $f.log"; cat "$tmp/$f.log" 2>/dev/null || true; done
fi
echo "$failed failed"
exit $((failed > 0))
