#!/usr/bin/env bash
# dsvisor start --cgroup-parent, and cgroups exactly as before after stop: the
# test makes a private group G (dsvtest-<pid>-sup) in every hierarchy this
# process has (v1 cpu/cpuset/memory and the v2 tree on the hybrid CI host), as systemd's
# Delegate=yes would give a service, and starts dsvisor inside it. dsvisor moves itself
# into G/supervisor (no internal processes) before it enables the controllers G offers
# in G's cgroup.subtree_control, puts its instances in G/inference/prod/, and on stop
# (dsvisor stop, then SIGTERM, then dsvisor stop with --rt-priority when it can: RT
# runtime handed down the levels) must leave every hierarchy below G as it found it: the
# same directories and the same subtree_control. Also the usage errors
# (exit 2) for paths that would leave the own group. Needs root; skipped (77) without a
# cgroup filesystem to write.
set -euo pipefail

bin="${DSV_BUILD_DIR:?}/bin"
dsvisor="$bin/dsvisor"
worker="$bin/test-supervisor-stub-worker"
model="${DSV_FIXTURES:?}/models/qwen2-bf16-tied"
cycles=3

if [[ $(id -u) != 0 || ! -w /sys/fs/cgroup ]] && ! touch /sys/fs/cgroup/.dsv-probe 2>/dev/null; then
        [[ $(id -u) == 0 ]] || { echo "SKIP: needs root"; exit 77; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-cgparent.XXXXXX")
export DSV_CACHE_DIR="$tmp/cache"
run="$tmp/run"
name="dsvtest-$$-sup"
sup_pid=
declare -a gdirs=() grels=() gtags=()
root_hugetlb=

cleanup() {
        [[ -n $sup_pid ]] && kill -9 "$sup_pid" 2>/dev/null || true
        wait 2>/dev/null || true
        # Innermost first; rmdir refuses a group that still has tasks.
        for d in "${gdirs[@]}"; do
                [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
        done
        [[ -n $root_hugetlb ]] && echo -hugetlb >"$root_hugetlb" 2>/dev/null || true
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

# ---- usage errors: nothing outside the own group, exit 2 ------------------------------
expect_usage_error() { # WHY ARGS...: exit 2 and WHY on stderr
        local why=$1 rc=0
        shift
        "$dsvisor" start --runtime-dir "$run" --worker "$worker" "$@" >"$tmp/err.log" 2>&1 || rc=$?
        [[ $rc == 2 ]] && grep -q -- "cgroup-parent" "$tmp/err.log" && grep -q -- "$why" "$tmp/err.log"
}
check "--cgroup-parent /sys/fs/cgroup/x: exit 2, absolute" expect_usage_error absolute --cgroup-parent /sys/fs/cgroup/x
check "--cgroup-parent ../escape: exit 2, '..'" expect_usage_error "'..'" --cgroup-parent ../escape
check "--cgroup-parent a//b: exit 2, empty component" expect_usage_error "empty component" --cgroup-parent a//b
echo '{"cgroup_parent": "a/../../b"}' >"$tmp/bad.json"
check "config cgroup_parent a/../../b: exit 2" expect_usage_error "'..'" --config "$tmp/bad.json"

# ---- G in every hierarchy ----------------------------------------------------------
mode=$(stat -f -c %T /sys/fs/cgroup)
while IFS=: read -r _ ctrls path; do
        case $ctrls in
        "") mount=/sys/fs/cgroup; [[ $mode == tmpfs ]] && mount=/sys/fs/cgroup/unified; tag=v2 ;;
        *cpuset*) mount=/sys/fs/cgroup/$ctrls; tag=cpuset ;;
        *memory*) mount=/sys/fs/cgroup/$ctrls; tag=memory ;;
        cpu | cpu,* | *,cpu | *,cpu,*) mount=/sys/fs/cgroup/$ctrls; tag=cpu ;;
        *) continue ;;
        esac
        [[ $(stat -f -c %T "$mount" 2>/dev/null) == cgroup* ]] || continue
        own=$mount${path%/}
        mkdir "$own/$name"
        gdirs+=("$own/$name")
        grels+=("${path%/}/$name")
        gtags+=("$tag")
        if [[ $tag == cpuset ]]; then # an empty v1 cpuset admits no task
                cat "$own/cpuset.cpus" >"$own/$name/cpuset.cpus"
                cat "$own/cpuset.mems" >"$own/$name/cpuset.mems"
        fi
        if [[ $tag == cpu && -e $own/$name/cpu.rt_runtime_us ]]; then
                # RT group scheduling: G gets RT runtime to hand down (the last cycle).
                echo 100000 >"$own/$name/cpu.rt_runtime_us" || true
        fi
        if [[ $tag == v2 ]] && grep -qw hugetlb "$own/cgroup.controllers" &&
                ! grep -qw hugetlb "$own/cgroup.subtree_control"; then
                # Something for G to delegate, as systemd would with Delegate=hugetlb.
                echo +hugetlb >"$own/cgroup.subtree_control"
                root_hugetlb="$own/cgroup.subtree_control"
        fi
done </proc/self/cgroup
if ((${#gdirs[@]} == 0)); then
        echo "SKIP: no cgroup hierarchy to write here"
        exit 77
fi
echo "ok     private own group in: ${gtags[*]}"

snapshot() { # every directory and subtree_control below each G
        local i
        for i in "${!gdirs[@]}"; do
                (cd "${gdirs[$i]}" && find . -type d | sort | sed "s|^|${gtags[$i]}: |")
                (cd "${gdirs[$i]}" && find . -name cgroup.subtree_control | sort | while read -r f; do
                        echo "${gtags[$i]}: $f = $(cat "$f")"
                done)
        done
}
snapshot >"$tmp/before"

jq_py() { python3 -c "import json,sys; j=json.load(open('$tmp/status.json')); $1"; }
status_json() { "$dsvisor" status --json --runtime-dir "$run" >"$tmp/status.json" 2>/dev/null; }
wait_ready() { # SECONDS INSTANCES
        local deadline=$((SECONDS + $1))
        while ((SECONDS < deadline)); do
                if status_json && jq_py "sys.exit(0 if j['instances_ready'] == $2 else 1)"; then
                        return 0
                fi
                kill -0 "$sup_pid" 2>/dev/null || return 1
                sleep 0.2
        done
        return 1
}

# The last cycle runs --rt-priority on a pretend 3-core machine (CPU 0 stays free of compute
# threads), when RT throttling is on and G could get RT runtime: every v1 cpu level made
# below G must get runtime for the instances' FIFO threads.
rt_cycle=0
cpu_g=
for i in "${!gdirs[@]}"; do [[ ${gtags[$i]} == cpu ]] && cpu_g=${gdirs[$i]}; done
if [[ $(cat /proc/sys/kernel/sched_rt_runtime_us) != -1 && -n $cpu_g && -e $cpu_g/cpu.rt_runtime_us &&
        $(cat "$cpu_g/cpu.rt_runtime_us") -gt 0 ]] && (($(nproc) >= 2)); then
        rt_cycle=$cycles
fi
for ((cycle = 1; cycle <= cycles; cycle++)); do
        n_inst=2
        extra=()
        if ((cycle == rt_cycle)); then
                n_inst=1
                extra=(--threads-per-instance 1 --rt-priority 10)
                export HWLOC_SYNTHETIC="numa:1 core:3 pu:1"
        fi
        # The subshell joins G everywhere, then becomes dsvisor: G holds only dsvisor.
        (
                for d in "${gdirs[@]}"; do echo "$BASHPID" >"$d/cgroup.procs"; done
                exec "$dsvisor" start --model "$model" --instances $n_inst --port 0 --runtime-dir "$run" \
                        --worker "$worker" --hugepages off --grace-ms 2000 --cgroup-parent inference/prod "${extra[@]}"
        ) >"$tmp/start-$cycle.log" 2>&1 &
        sup_pid=$!
        unset HWLOC_SYNTHETIC
        if ! wait_ready 120 $n_inst; then
                echo "NOT OK cycle $cycle: supervisor did not become ready"
                cat "$tmp/start-$cycle.log"
                exit 1
        fi
        for i in "${!gdirs[@]}"; do
                tag=${gtags[$i]}
                want="${gdirs[$i]}/inference/prod/dsvisor-$sup_pid-worker-"
                label=$([[ $tag == v2 ]] && echo "v2" || echo "v1 $tag")
                check "cycle $cycle: status shows the $label groups below inference/prod" jq_py "
sys.exit(0 if all('$label $want' + i['name'] in i['cgroup'] for i in j['instances']) else 1)"
                for p in $(jq_py 'print(" ".join(str(i["pid"]) for i in j["instances"]))'); do
                        rel="${grels[$i]}/inference/prod/dsvisor-$sup_pid-worker-"
                        check "cycle $cycle: worker $p is in $tag $rel*" grep -q ":$rel[01]\$" "/proc/$p/cgroup"
                done
                if [[ $tag == v2 ]]; then
                        check "cycle $cycle: dsvisor moved itself to G/supervisor" \
                                grep -qx "$sup_pid" "${gdirs[$i]}/supervisor/cgroup.procs"
                        if [[ -n $root_hugetlb ]] || grep -qw hugetlb "${gdirs[$i]}/cgroup.controllers"; then
                                check "cycle $cycle: hugetlb enabled in G and in each level" bash -c "
grep -qw hugetlb '${gdirs[$i]}/cgroup.subtree_control' &&
grep -qw hugetlb '${gdirs[$i]}/inference/cgroup.subtree_control' &&
grep -qw hugetlb '${gdirs[$i]}/inference/prod/cgroup.subtree_control'"
                        fi
                fi
        done
        if ((cycle == rt_cycle)); then
                check "cycle $cycle: compute threads SCHED_FIFO/10" jq_py \
                        'sys.exit(0 if j["instances"][0]["sched"] == "SCHED_FIFO/10" else 1)'
                check "cycle $cycle: cpu.rt_runtime_us in effect for the instance" jq_py '
sys.exit(0 if any(l["limit"] == "cpu.rt_runtime_us" and l["in_effect"] for l in j["instances"][0]["limits"]) else 1)'
                check "cycle $cycle: RT runtime handed down G/inference/prod (levels made by dsvisor)" bash -c "
((\$(cat '$cpu_g/inference/cpu.rt_runtime_us') > 0 && \$(cat '$cpu_g/inference/prod/cpu.rt_runtime_us') > 0))"
        fi
        check "cycle $cycle: status text names the parent" bash -c \
                "'$dsvisor' status --runtime-dir '$run' | grep -qx 'cgroup parent: <own cgroup>/inference/prod'"

        if ((cycle == 2)); then
                kill -TERM "$sup_pid"
        else
                check "cycle $cycle: dsvisor stop returns 0" "$dsvisor" stop --runtime-dir "$run" --wait-ms 30000
        fi
        rc=0
        wait "$sup_pid" || rc=$?
        sup_pid=
        check "cycle $cycle: the supervisor exited 0" test "$rc" -eq 0
        snapshot >"$tmp/after"
        if ! check "cycle $cycle: every hierarchy below G as before" cmp -s "$tmp/before" "$tmp/after"; then
                diff "$tmp/before" "$tmp/after" || true
                grep -i cgroup "$tmp/start-$cycle.log" || true
        fi
done

if ((failed > 0)); then
        echo "--- last supervisor log"
        cat "$tmp/start-$cycles.log"
fi
echo "$failed failed"
((failed == 0))
