#!/usr/bin/env bash
# dsvisor start under a CPU binding: `taskset -c C dsvisor start --instances 1` on the
# bundled model puts every thread of the worker on CPU C only (Cpus_allowed_list of
# /proc/PID/task/*/status, which is sched_getaffinity), and the instance's cpuset group
# (v1 cpuset.cpus, or v2 cpuset.cpus where the v2 tree has the controller) says C too,
# C being the last CPU this test may use. Then, on two CPUs, --cpus and
# --housekeeping-cpus: the worker on one, the supervisor's threads on the other.
# Lists outside the binding or overlapping are refused with the CPUs named.
set -euo pipefail

bin="${DSV_BUILD_DIR:?}/bin"
dsvisor="$bin/dsvisor"
[[ -x $bin/dsvisor-worker ]] || { echo "SKIP: dsvisor-worker is not built"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-given-cpus.XXXXXX")
export DSV_CACHE_DIR="$tmp/cache"
sup_pid=
cleanup() {
        [[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null || true
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT

failed=0
check() { # DESCRIPTION COMMAND...
        local what=$1
        shift
        if "$@"; then echo "ok     $what"; else echo "NOT OK $what"; failed=$((failed + 1)); fi
}

allowed=$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')
read -ra cpus <<<"$allowed"
last=${cpus[-1]}

# start_on MASK RUN ARGS...: starts dsvisor under taskset, waits until its one instance is ready
start_on() {
        local mask=$1 run=$2
        shift 2
        taskset -c "$mask" "$dsvisor" start --instances 1 --port 0 --runtime-dir "$run" --hugepages off \
                --grace-ms 2000 "$@" >"$tmp/start.log" 2>&1 &
        sup_pid=$!
        local deadline=$((SECONDS + 240))
        while ((SECONDS < deadline)); do
                if "$dsvisor" status --json --runtime-dir "$run" >"$tmp/status.json" 2>/dev/null &&
                        python3 -c "import json,sys; j=json.load(open('$tmp/status.json')); sys.exit(0 if j['instances_ready'] == 1 else 1)"; then
                        return 0
                fi
                kill -0 "$sup_pid" 2>/dev/null || break
                sleep 0.5
        done
        echo "NOT OK dsvisor under taskset -c $mask did not become ready"
        cat "$tmp/start.log"
        exit 1
}

stop() {
        kill -TERM "$sup_pid"
        wait "$sup_pid" || true
        sup_pid=
}

# threads_on PID LIST: every thread of PID may run on exactly LIST
threads_on() {
        local t ok=0
        for t in /proc/"$1"/task/*/status; do
                local got
                got=$(awk '/^Cpus_allowed_list:/ {print $2}' "$t" 2>/dev/null) || continue
                [[ -z $got || $got == "$2" ]] || { echo "  $t: Cpus_allowed_list $got, want $2"; ok=1; }
        done
        return $ok
}

# group_cpus PID: cpuset.cpus of PID's cpuset group (v1, else v2 when it has the file)
group_cpus() {
        local rel
        rel=$(awk -F: '$2 ~ /(^|,)cpuset(,|$)/ {print $3}' /proc/"$1"/cgroup)
        if [[ -n $rel && -r /sys/fs/cgroup/cpuset$rel/cpuset.cpus ]]; then
                cat "/sys/fs/cgroup/cpuset$rel/cpuset.cpus"
                return
        fi
        rel=$(awk -F: '$1 == 0 {print $3}' /proc/"$1"/cgroup)
        for tree in /sys/fs/cgroup /sys/fs/cgroup/unified; do
                [[ -r $tree$rel/cpuset.cpus ]] && { cat "$tree$rel/cpuset.cpus"; return; }
        done
        echo "(no cpuset group)"
}

worker_pid() {
        python3 -c "import json; print(json.load(open('$tmp/status.json'))['instances'][0]['pid'])"
}

# ---- taskset -c LAST: the binding is the machine
start_on "$last" "$tmp/run1"
wpid=$(worker_pid)
check "worker threads on CPU $last only" threads_on "$wpid" "$last"
check "worker's cpuset group has cpuset.cpus $last" test "$(group_cpus "$wpid")" == "$last"
check "status shows CPUs $last" python3 -c "import json,sys; sys.exit(0 if json.load(open('$tmp/status.json'))['instances'][0]['cpus'] == '$last' else 1)"
check "supervisor threads stay on CPU $last" threads_on "$sup_pid" "$last"
group=$(awk -F: '$2 ~ /(^|,)cpuset(,|$)/ {print $3}' /proc/"$wpid"/cgroup)
stop
check "the instance group is gone after stop" test ! -e "/sys/fs/cgroup/cpuset$group"

# ---- --cpus and --housekeeping-cpus on two CPUs of the binding
if ((${#cpus[@]} >= 2)); then
        hk=${cpus[0]}
        start_on "$hk,$last" "$tmp/run2" --cpus "$last" --housekeeping-cpus "$hk"
        wpid=$(worker_pid)
        check "--cpus $last: worker threads on CPU $last only" threads_on "$wpid" "$last"
        check "--cpus $last: cpuset.cpus $last" test "$(group_cpus "$wpid")" == "$last"
        check "--housekeeping-cpus $hk: supervisor and gateway threads on CPU $hk" threads_on "$sup_pid" "$hk"
        stop
else
        echo "skip   --cpus/--housekeeping-cpus: one CPU only"
fi

# ---- errors name the CPUs
expect_error() { # DESCRIPTION PATTERN ARGS...
        local what=$1 pattern=$2
        shift 2
        local rc=0
        taskset -c "$last" "$dsvisor" start --instances 1 --port 0 --runtime-dir "$tmp/run3" "$@" >"$tmp/err.log" 2>&1 || rc=$?
        check "$what" bash -c "(( $rc != 0 )) && grep -q -- '$pattern' '$tmp/err.log'"
}
outside=$((last + 1))
expect_error "--cpus outside the binding is refused" "CPU $outside is not among the CPUs dsvisor was given ($last)" --cpus "$outside"
expect_error "overlapping lists are refused" "both list CPUs $last" --cpus "$last" --housekeeping-cpus "$last"
check "plan under taskset shows the given set" bash -c \
        "taskset -c '$last' '$dsvisor' plan | grep -q '^given: CPUs $last, '"

echo "$failed failed"
((failed == 0))
