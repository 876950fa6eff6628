# Sourced by test-haproxy.sh, test-prometheus.sh, test-grafana-prometheus.sh and
# test-supervisor-malloc-env.sh (and others): run
# `dsvisor start` (the real worker, a fixture model) on a loopback port of its own choosing,
# wait until it is ready, stop it, pick free ports, and a check helper. Expects $tmp (a
# scratch dir) and `failed`.
bin="${DSV_BUILD_DIR:?}/bin"
dsvisor="$bin/dsvisor"
dsv_model="${DSV_FIXTURES:?}/models/qwen2-bf16-tied"
dsv_model_id=qwen2-bf16-tied
export DSV_CACHE_DIR="$tmp/cache"

check() { # DESCRIPTION COMMAND...
        local what=$1
        shift
        if "$@"; then echo "ok     $what"; else echo "NOT OK $what"; failed=$((failed + 1)); fi
}

need_worker() {
        if [[ ! -x $bin/dsvisor-worker || ! -x $dsvisor ]]; then
                echo "SKIP: dsvisor or dsvisor-worker is not built"
                exit 77
        fi
}

free_port() { # a TCP port free on 127.0.0.1 now
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# dsv_start NAME INSTANCES [OPTION...]: starts dsvisor in the background with its own
# runtime dir ($tmp/NAME/run) and log ($tmp/NAME/log), the options added; sets
# dsv_pid[NAME].
declare -A dsv_pid dsv_port
dsv_start() {
        local name=$1 n=$2
        shift 2
        mkdir -p "$tmp/$name"
        "$dsvisor" start --model "$dsv_model" --instances "$n" --threads-per-instance 1 --host 127.0.0.1 --port 0 \
                --runtime-dir "$tmp/$name/run" --hugepages off --grace-ms 5000 "$@" >"$tmp/$name/log" 2>&1 &
        dsv_pid[$name]=$!
}

# dsv_wait_ready NAME INSTANCES SECONDS: until `dsvisor status` says every instance is
# ready; sets dsv_port[NAME].
dsv_wait_ready() {
        local name=$1 n=$2 deadline=$((SECONDS + $3))
        while ((SECONDS < deadline)); do
                if "$dsvisor" status --json --runtime-dir "$tmp/$name/run" >"$tmp/$name/status.json" 2>/dev/null &&
                        python3 - "$tmp/$name/status.json" "$n" <<'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if j["instances_ready"] == int(sys.argv[2]) and j["state"] == "ready" else 1)
PY
                        dsv_port[$name]=$(python3 -c "import json; print(json.load(open('$tmp/$name/status.json'))['port'])")
                        return 0
                fi
                kill -0 "${dsv_pid[$name]}" 2>/dev/null || break
                sleep 0.2
        done
        echo "dsvisor $name did not become ready; its log:"
        sed 's/^/       /' "$tmp/$name/log"
        return 1
}

# dsv_stop_all: SIGTERM every dsvisor still running, SIGKILL after 15 s. For trap EXIT.
dsv_stop_all() {
        local p
        for p in "${dsv_pid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
        for _ in $(seq 1 150); do
                local alive=0
                for p in "${dsv_pid[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
                ((alive)) || break
                sleep 0.1
        done
        for p in "${dsv_pid[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
}

# load_and_prom_cleanup: for trap EXIT in tests that run load loops ($load_pids),
# Prometheus ($prom_pid, empty when not started) and dsvisor: stops them all, then
# removes $tmp.
load_and_prom_cleanup() {
        local p
        for p in "${load_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
        [[ -n $prom_pid ]] && kill -TERM "$prom_pid" 2>/dev/null || true
        dsv_stop_all
        for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
        [[ -n $prom_pid ]] && wait "$prom_pid" 2>/dev/null || true
        rm -rf "$tmp"
}

# metric URL NAME_AND_LABELS: the value of one sample on a /metrics page (0 when absent).
metric() {
        curl -s -m 5 "$1" | awk -v k="$2" '$1 == k {v = $2} END {print v + 0}'
}

# dsv_wait_exit NAME SECONDS: sets dsv_rc to dsvisor NAME's exit status once it exits,
# or to "timeout" (after saving its threads' stacks in $tmp/NAME/stuck.txt and SIGKILLing
# it) after SECONDS. Not for $(...): wait needs the parent shell.
dsv_wait_exit() {
        local p=${dsv_pid[$1]} deadline=$((SECONDS + $2))
        dsv_rc=0
        while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
        if kill -0 "$p" 2>/dev/null; then
                command -v gdb >/dev/null && gdb -p "$p" -batch -ex 'thread apply all bt' >"$tmp/$1/stuck.txt" 2>&1
                kill -KILL "$p"
                wait "$p" 2>/dev/null || true
                dsv_rc=timeout
                return
        fi
        wait "$p" || dsv_rc=$?
}

# prom_start TARGET[,TARGET...]: Prometheus on a free loopback port scraping them every second with
# deploy/prometheus.yml's relabelling and rules (only targets and intervals changed), its
# TSDB in $tmp/tsdb, its log in $tmp/prometheus.log; waits until it is ready. Sets
# prom_pid, prom_port and api (the HTTP API's base URL); the caller stops it.
prom_start() {
        prom_port=$(free_port)
        python3 - "$DSV_SOURCE_DIR/deploy/prometheus.yml" "$1" >"$tmp/prometheus.yml" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
c["rule_files"] = [sys.argv[1].rsplit("/", 1)[0] + "/" + f for f in c["rule_files"]]
job = [j for j in c["scrape_configs"] if j["job_name"] == "dsvisor"][0]
job["static_configs"] = [{"targets": sys.argv[2].split(",")}]
print(yaml.safe_dump(c, sort_keys=False))
PY
        prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
                --web.listen-address="127.0.0.1:$prom_port" --storage.tsdb.retention.time=1h >"$tmp/prometheus.log" 2>&1 &
        prom_pid=$!
        api="http://127.0.0.1:$prom_port/api/v1"
        for _ in $(seq 1 150); do curl -sf -m 1 "http://127.0.0.1:$prom_port/-/ready" >/dev/null && break; sleep 0.2; done
}
