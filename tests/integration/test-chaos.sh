#!/usr/bin/env bash
# Chaos under load: dsvisor start with 2 instances, dsvisor-bench-load
# driving it, and faults injected from outside.
#
#   test-chaos.sh [kill|stop|term|all]   (default all)
#     kill  kill -9 a random ready worker every 3-6 s (seeded) for CHAOS_KILL_S (60) s
#           under steady streamed and non-streamed load: every non-streamed request
#           completes, a streamed one completes or (only once it had begun) ends with an
#           explicit error; nothing is lost; the supervisor stays up; both instances are
#           ready again at the end.
#     stop  SIGSTOP one worker under load: its health goes silent, the gateway stops routing
#           to it, the supervisor kills and replaces it (its unhealthy-kill timeout is 30 s);
#           the requests it held are retried elsewhere or, for begun streams, errored; none
#           lost.
#     term  SIGTERM to the supervisor with requests in flight: each of them completes within
#           the grace period, and the supervisor exits 0.
#   Each phase prints "counts: sent N completed N retried N errored N lost N" per load.
#   Worker: CHAOS_WORKER=stub (default; tests/integration/test-supervisor-stub-worker.c,
#   the worker's process contract without the engine) or real (dsvisor-worker).
set -uo pipefail
PHASES=${1:-all}
[ "$PHASES" = all ] && PHASES="kill stop term"
B=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build-ld" && pwd)}/bin
FIX=${DSV_FIXTURES:-$(cd "$(dirname "$0")/../../../shared/fixtures" && pwd)}
KILL_S=${CHAOS_KILL_S:-60}
SEED=${CHAOS_SEED:-$$}
DSVISOR=$B/dsvisor
LOAD=$B/dsvisor-bench-load
case ${CHAOS_WORKER:-stub} in
  stub) WORKER=$B/test-supervisor-stub-worker ;;
  real) WORKER=$B/dsvisor-worker ;;
  *) echo "CHAOS_WORKER: stub or real"; exit 2 ;;
esac
for f in "$DSVISOR" "$LOAD" "$WORKER"; do
  [ -x "$f" ] || { echo "SKIP: $f is not built"; exit 77; }
done
MODEL=$FIX/models/qwen2-bf16-tied

T=$(mktemp -d /tmp/dsv-chaos.XXXXXX)
export DSV_CACHE_DIR=$T/cache
RUN=$T/run
SUP=
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$SUP" ] && kill -9 "$SUP" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what" "$*"; fi; }
RANDOM=$((SEED % 32768))
echo "chaos: seed $SEED, worker ${CHAOS_WORKER:-stub}, phases: $PHASES"

status() { "$DSVISOR" status --json --runtime-dir "$RUN" >"$T/status.json" 2>/dev/null; }
st() { python3 -c "import json,sys; j=json.load(open('$T/status.json')); $1"; }
ready_pids() { status && st 'print(" ".join(str(i["pid"]) for i in j["instances"] if i["state"] == "ready"))'; }
# all_ready SECONDS: until status says both instances are ready
all_ready() {
  local deadline=$((SECONDS + $1))
  while [ $SECONDS -lt $deadline ]; do
    status && st 'sys.exit(0 if j["instances_ready"] == 2 else 1)' && return 0
    kill -0 "$SUP" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
retries() { curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | awk '$1 == "dsvisor_request_retries_total" {print $2+0}'; }

start_supervisor() {
  "$DSVISOR" start --model "$MODEL" --instances 2 --port 0 --runtime-dir "$RUN" --worker "$WORKER" \
    --hugepages off --grace-ms "${1:-5000}" --restart-limit 64 --restart-backoff-max-ms 1000 \
    >>"$T/sup.log" 2>&1 &
  SUP=$!
  if ! all_ready 120; then bad "supervisor ready"; tail -30 "$T/sup.log"; exit 1; fi
  PORT=$(st 'print(j["port"])')
}
# load NAME ARGS...: a background run of dsvisor-bench-load, JSON to $T/NAME.json
load() {
  local n=$1; shift
  "$LOAD" --url "http://127.0.0.1:$PORT" --json --timeout 90 --drain 60 --seed "$SEED" "$@" >"$T/$n.json" 2>"$T/$n.err" &
  PIDS+=($!); eval "LOAD_${n//-/_}=$!"
}
# counts NAME RETRIED: prints the line and checks lost == 0 and the error rule
counts() {
  local n=$1 retried=$2 streamed=$3
  python3 - "$T/$n.json" "$retried" "$n" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("     %s counts: sent %d completed %d retried %s (gateway-wide) errored %d (%d after the first token) lost %d; p99 %s s; errors %s lost %s"
      % (sys.argv[3], j["sent"], j["completed"], sys.argv[2], j["errors"], j["errors_after_first_token"], j["lost"],
         j["p99_s"], j["errors_by_kind"], j["lost_by_kind"]))
PY
  local expr="j['sent'] > 0 and j['lost'] == 0 and j['sent'] == j['completed'] + j['errors']"
  if [ "$streamed" = 1 ]; then
    expr="$expr and j['errors'] == j['errors_after_first_token']"   # only begun streams may error
  else
    expr="$expr and j['errors'] == 0"
  fi
  if python3 -c "import json,sys; j=json.load(open('$T/$n.json')); sys.exit(0 if ($expr) else 1)"; then
    ok "$n: nothing lost$([ "$streamed" = 1 ] && echo ', errors only on begun streams' || echo ', every request completed')"
  else
    bad "$n: $expr"
  fi
}

phase_kill() {
  start_supervisor 5000
  local r0; r0=$(retries)
  load kill-stream --qps 8 --duration "$KILL_S" --stream --prompt-len uniform:4:16 --output-len uniform:20:120
  load kill-plain --qps 8 --duration "$KILL_S" --prompt-len uniform:4:16 --output-len uniform:20:120
  local end=$((SECONDS + KILL_S)) kills=0
  sleep 2
  while [ $SECONDS -lt $((end - 3)) ]; do
    local pids; pids=($(ready_pids))
    if [ ${#pids[@]} -eq 2 ]; then  # one fault at a time: both up before the next kill
      local victim=${pids[$((RANDOM % 2))]}
      kill -9 "$victim" 2>/dev/null && kills=$((kills + 1))
    fi
    sleep $((3 + RANDOM % 4))
  done
  wait "$LOAD_kill_stream" "$LOAD_kill_plain"
  local retried=$(( $(retries) - r0 ))
  echo "     killed $kills workers in $KILL_S s"
  check "kill: at least $((KILL_S / 8)) kills happened" test "$kills" -ge $((KILL_S / 8))
  counts kill-stream "$retried" 1
  counts kill-plain "$retried" 0
  check "kill: the supervisor is still up" kill -0 "$SUP"
  check "kill: both instances ready again" all_ready 30
  check "kill: restarts counted" st "sys.exit(0 if sum(i['restarts'] for i in j['instances']) >= $kills else 1)"
  stop_supervisor
}

phase_stop() {
  start_supervisor 5000
  local r0; r0=$(retries)
  status
  local victim; victim=$(st 'print(j["instances"][0]["pid"])')
  local restarts0; restarts0=$(st 'print(j["instances"][0]["restarts"])')
  load stop-stream --qps 6 --duration 45 --stream --prompt-len uniform:4:16 --output-len uniform:20:120
  load stop-plain --qps 6 --duration 45 --prompt-len uniform:4:16 --output-len uniform:20:120
  sleep 3
  kill -STOP "$victim"
  local t_stop=$SECONDS replaced=0
  while [ $((SECONDS - t_stop)) -lt 42 ]; do
    if status && st "i=j['instances'][0]; sys.exit(0 if i['state'] == 'ready' and i['pid'] != $victim and i['restarts'] > $restarts0 else 1)"; then
      replaced=1; break
    fi
    sleep 0.5
  done
  echo "     stopped worker $victim; replaced after $((SECONDS - t_stop)) s"
  check "stop: the stopped worker was replaced" test "$replaced" = 1
  check "stop: the stopped worker is gone" bash -c "! kill -0 $victim 2>/dev/null || grep -q '^State:.*Z' /proc/$victim/status"
  check "stop: the supervisor said why" grep -q "no healthy answer" "$T/sup.log"
  wait "$LOAD_stop_stream" "$LOAD_stop_plain"
  local retried=$(( $(retries) - r0 ))
  counts stop-stream "$retried" 1
  counts stop-plain "$retried" 0
  # only the few requests the stopped worker held wait for its replacement; the rest were
  # routed to the other instance once its health went silent
  check "stop: new requests were routed around the stopped worker (P90 < 5 s)" python3 -c "
import json,sys; sys.exit(0 if all(json.load(open('$T/%s.json' % n))['p90_s'] < 5 for n in ('stop-stream', 'stop-plain')) else 1)"
  check "stop: the supervisor is still up" kill -0 "$SUP"
  stop_supervisor
}

phase_term() {
  start_supervisor 8000
  # 8 requests of 300 tokens (1.5 s at the stub's 5 ms per token), all in flight at SIGTERM
  load term --concurrency 8 --requests 8 --prompt-len 8 --max-tokens 300
  sleep 0.5
  local t0=$SECONDS
  kill -TERM "$SUP"
  local rc=0
  wait "$SUP" || rc=$?
  local took=$((SECONDS - t0))
  SUP=
  wait "$LOAD_term"
  echo "     supervisor exited $rc after $took s (grace 8 s)"
  counts term 0 0
  check "term: all 8 in-flight requests completed" \
    python3 -c "import json,sys; j=json.load(open('$T/term.json')); sys.exit(0 if j['completed'] == 8 else 1)"
  check "term: the supervisor exited 0 within the grace period" test "$rc" = 0 -a "$took" -le 9
}

stop_supervisor() {
  "$DSVISOR" stop --runtime-dir "$RUN" --wait-ms 30000 >/dev/null 2>&1
  wait "$SUP" 2>/dev/null
  SUP=
}

for p in $PHASES; do
  case $p in
    kill) phase_kill ;;
    stop) phase_stop ;;
    term) phase_term ;;
    *) echo "unknown phase '$p'"; exit 2 ;;
  esac
done
if [ "$fail" -gt 0 ]; then echo "--- supervisor log (tail)"; tail -40 "$T/sup.log"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
