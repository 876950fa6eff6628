# Sourced by the bench scripts that load a running `dsvisor start` (overload.sh, soak.sh):
#   start_dsvisor NAME ARGS...   starts `$B/dsvisor start ARGS --runtime-dir $RUN/run` in
#   the background with its log in $OUT/supervisor.log, waits until every instance is
#   ready, and sets SUP (its pid) and PORT. Exits with the log's tail if it dies first.
#   dsvisor_status               refreshes $RUN/status.json (`dsvisor status --json`).
dsvisor_status() { "$B/dsvisor" status --json --runtime-dir "$RUN/run" >"$RUN/status.json" 2>/dev/null; }

start_dsvisor() {
  local name=$1; shift
  "$B/dsvisor" start "$@" --runtime-dir "$RUN/run" >"$OUT/supervisor.log" 2>&1 &
  SUP=$!
  local _
  for _ in $(seq 1200); do
    dsvisor_status &&
      python3 -c "import json,sys; j=json.load(open('$RUN/status.json')); sys.exit(0 if j['instances_ready'] == j['instances_total'] else 1)" &&
      break
    kill -0 "$SUP" 2>/dev/null || { echo "$name: the supervisor exited"; tail "$OUT/supervisor.log"; exit 1; }
    sleep 0.2
  done
  PORT=$(python3 -c "import json; print(json.load(open('$RUN/status.json'))['port'])")
}
