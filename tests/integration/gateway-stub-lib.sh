# Sourced by test-load-gateway.sh and test-gateway-overload.sh: dsvisor-bench-load against
# dsvisor-gateway-test-server in front of fake workers. Sets B (the build's bin), LOAD and
# T (a private scratch dir, removed on exit with every process in PIDS); ok/bad count into
# pass/fail; worker starts a fake worker, stub_server the gateway; check tests a run's
# JSON report. Expects
# STUB_TMP, the scratch dir's name prefix.
B=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build-ld" && pwd)}/bin
LOAD=$B/dsvisor-bench-load
for tool in python3 curl; do
  command -v $tool >/dev/null || { echo "missing $tool (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
done
T=$(mktemp -d "/tmp/$STUB_TMP.XXXXXX")   # 0700: the IPC sockets' directory must be private
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; }

worker() {  # worker NAME [fake-worker options]
  local n=$1; shift
  "$B/fake-worker" --url "ipc://$T/$n.sock" "$@" 2>>"$T/$n.err" &
  PIDS+=($!)
  for _ in $(seq 50); do [ -S "$T/$n.sock" ] && return 0; sleep 0.05; done
  echo "worker $n did not start"; return 1
}
# stub_server NAME [gateway-test-server options]: started and ready; PORT holds its port
stub_server() {
  local n=$1; shift
  "$B/dsvisor-gateway-test-server" --model dsv-test --port-file "$T/$n.port" "$@" \
    </dev/null >"$T/$n.out" 2>"$T/$n.err" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$T/$n.port" ] && break; sleep 0.05; done
  PORT=$(cat "$T/$n.port")
  for _ in $(seq 40); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.05; done
}
# check NAME FILE PYTHON-EXPR: the expression over the run's JSON object (j)
check() {
  if python3 -c "import json,sys; j=json.load(open('$2')); sys.exit(0 if ($3) else 1)" 2>/dev/null; then
    ok "$1"
  else
    bad "$1" "$3 — got: $(tr -d '\n' <"$2" | cut -c1-600)"
  fi
}
