#!/usr/bin/env bash
# dsvisor start without glibc's malloc thread cache (supervisor/malloc_env.c): the
# supervisor re-executes itself with glibc.malloc.tcache_count=0 in GLIBC_TUNABLES, under
# the same pid and keeping the user's other tunables; its workers get the original
# environment back (no tunable, no marker) and keep their cache; a tcache_count the user
# set is kept and nothing is re-executed. Two instances of the stub worker, three starts:
#   none      GLIBC_TUNABLES unset
#   other     GLIBC_TUNABLES=glibc.malloc.perturb=0 (the default value: harmless)
#   user      GLIBC_TUNABLES=glibc.malloc.tcache_count=2
# The LD_PRELOAD probe (tcache-probe.so) tells from inside each process whether its cache
# is on; it is left out in a sanitizer build (ASan must be the first library loaded and
# replaces malloc anyway), where only the environments are checked.
# Note: glibc 2.36 parses GLIBC_TUNABLES in place, so /proc/<pid>/environ shows only its
# first item; the supervisor puts its tunable first for that reason.
set -euo pipefail

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-malloc-env.XXXXXX")
failed=0
# bin, dsvisor, dsv_model, DSV_CACHE_DIR and check()
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
worker="$bin/test-supervisor-stub-worker"
probe="$bin/tcache-probe.so"
sup_pid=
cleanup() {
        [[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null || true
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT

use_probe=1
if grep -qa __asan_init "$dsvisor"; then # gcc links libasan, clang a static runtime
        use_probe=0
        echo "note: sanitizer build, the tcache probe is not preloaded"
fi

# env_of PID NAME: the variable's value in the process's initial environment ("<unset>").
env_of() {
        local v
        v=$(tr '\0' '\n' <"/proc/$1/environ" | sed -n "s/^$2=//p" | head -1)
        if tr '\0' '\n' <"/proc/$1/environ" | grep -q "^$2="; then printf '%s' "$v"; else printf '<unset>'; fi
}
probe_of() { cat "$tmp/probe-$1/$2" 2>/dev/null | tr '\n' ' ' | sed 's/ $//'; }

# run CASE [GLIBC_TUNABLES]: starts two instances and waits until both are ready; sets
# sup_pid and worker_pids.
run() {
        local case=$1 run="$tmp/run-$1"
        mkdir -p "$tmp/probe-$case"
        local -a envs=(env -u GLIBC_TUNABLES -u DSV_ORIG_GLIBC_TUNABLES TCACHE_PROBE_DIR="$tmp/probe-$case")
        ((use_probe)) && envs+=(LD_PRELOAD="$probe")
        (($# > 1)) && envs+=(GLIBC_TUNABLES="$2")
        "${envs[@]}" "$dsvisor" start --model "$dsv_model" --instances 2 --port 0 --runtime-dir "$run" \
                --worker "$worker" --hugepages off --grace-ms 1000 >"$tmp/start-$case.log" 2>&1 &
        sup_pid=$!
        local deadline=$((SECONDS + 60))
        while ((SECONDS < deadline)); do
                if "$dsvisor" status --json --runtime-dir "$run" >"$tmp/status.json" 2>/dev/null &&
                        python3 -c "import json,sys; j=json.load(open('$tmp/status.json')); sys.exit(0 if j['instances_ready'] == 2 else 1)"; then
                        break
                fi
                kill -0 "$sup_pid" 2>/dev/null || break
                sleep 0.2
        done
        worker_pids=($(python3 -c "import json; j=json.load(open('$tmp/status.json')); print(' '.join(str(i['pid']) for i in j['instances']))" 2>/dev/null || true))
        if ((${#worker_pids[@]} != 2)); then
                echo "NOT OK $case: supervisor did not become ready"
                cat "$tmp/start-$case.log"
                exit 1
        fi
        check "$case: the supervisor is still named dsvisor (not 'exe')" test "$(cat "/proc/$sup_pid/comm")" = dsvisor
        check "$case: the supervisor kept its pid through the re-exec" \
                test "$(python3 -c "import json; print(json.load(open('$tmp/status.json'))['pid'])")" = "$sup_pid"
}
stop() {
        "$dsvisor" stop --runtime-dir "$tmp/run-$1" --wait-ms 20000 >/dev/null
        wait "$sup_pid" || true
        sup_pid=
}

# reexecuted CASE MARKER WORKER_TUNABLES: the supervisor runs with its tunable first and
# the marker MARKER; each worker has WORKER_TUNABLES ("<unset>": none) and no marker, and
# (probe) the supervisor's cache went off with the re-exec while the workers kept theirs.
reexecuted() {
        local case=$1 marker=$2 tunables=$3 p
        check "$case: the supervisor's GLIBC_TUNABLES starts with glibc.malloc.tcache_count=0" \
                test "$(env_of "$sup_pid" GLIBC_TUNABLES)" = glibc.malloc.tcache_count=0
        check "$case: the supervisor's marker is '$marker'" test "$(env_of "$sup_pid" DSV_ORIG_GLIBC_TUNABLES)" = "$marker"
        for p in "${worker_pids[@]}"; do
                check "$case: worker $p has GLIBC_TUNABLES $tunables" test "$(env_of "$p" GLIBC_TUNABLES)" = "$tunables"
                check "$case: worker $p has no marker" test "$(env_of "$p" DSV_ORIG_GLIBC_TUNABLES)" = "<unset>"
        done
        if ((use_probe)); then
                check "$case: supervisor: cache on before the re-exec, off after" \
                        test "$(probe_of "$case" "$sup_pid")" = "tcache on tcache off"
                for p in "${worker_pids[@]}"; do
                        check "$case: worker $p keeps its cache" test "$(probe_of "$case" "$p")" = "tcache on"
                done
        fi
}

run none
reexecuted none - "<unset>"
stop none

run other glibc.malloc.perturb=0
reexecuted other +glibc.malloc.perturb=0 glibc.malloc.perturb=0
stop other

run user glibc.malloc.tcache_count=2
check "user: the user's tcache_count is kept" test "$(env_of "$sup_pid" GLIBC_TUNABLES)" = glibc.malloc.tcache_count=2
check "user: no re-exec (no marker)" test "$(env_of "$sup_pid" DSV_ORIG_GLIBC_TUNABLES)" = "<unset>"
for p in "${worker_pids[@]}"; do
        check "user: worker $p has the user's GLIBC_TUNABLES" test "$(env_of "$p" GLIBC_TUNABLES)" = glibc.malloc.tcache_count=2
done
if ((use_probe)); then
        check "user: the supervisor ran once, cache on (count 2)" test "$(probe_of user "$sup_pid")" = "tcache on"
fi
stop user

if ((failed)); then
        echo "$failed check(s) failed"
        exit 1
fi
echo "all checks passed"
