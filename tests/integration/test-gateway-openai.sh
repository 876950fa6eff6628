#!/usr/bin/env bash
# The gateway driven by the official `openai` npm client (tests/integration/
# test-gateway-openai.mjs), in front of fake workers. The client is installed from the
# npm registry into the build directory (gitignored) on first run; without node or npm
# this test fails, it does not skip (scripts/bootstrap.sh --with-tests installs them).
set -u
BUILD=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build-gw" && pwd)}
B=$BUILD/bin
SRC=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
  command -v $tool >/dev/null || { echo "missing $tool (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
done
CLIENT=$BUILD/tests/openai-client
if [ ! -f "$CLIENT/node_modules/openai/package.json" ]; then
  mkdir -p "$CLIENT"
  (cd "$CLIENT" && [ -f package.json ] || echo '{"name":"dsv-openai-client","private":true}' >package.json)
  if ! (cd "$CLIENT" && timeout 240 npm install --no-audit --no-fund --silent openai >npm.log 2>&1); then
    echo "npm install openai failed:"; tail -20 "$CLIENT/npm.log"; echo "0 passed, 1 failed"; exit 1
  fi
fi
T=$(mktemp -d /tmp/dsv-gw-openai.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
worker() {
  local n=$1; shift
  "$B/fake-worker" --url "ipc://$T/$n.sock" --log "$T/$n.log" "$@" &
  PIDS+=($!)
  for _ in $(seq 50); do [ -S "$T/$n.sock" ] && return 0; sleep 0.05; done
}
server() {
  local n=$1; shift
  "$B/dsvisor-gateway-test-server" --model dsv-test --port-file "$T/$n.port" --api-keys "$T/keys" "$@" </dev/null &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$T/$n.port" ] && break; sleep 0.05; done
  for _ in $(seq 40); do curl -sf "http://127.0.0.1:$(cat "$T/$n.port")/ready" >/dev/null && break; sleep 0.05; done
}
echo sk-openai-test >"$T/keys"
worker a --delay-ms 2; worker b --delay-ms 2; worker die2 --delay-ms 20 --die-after-tokens 2
server main --instance a="ipc://$T/a.sock" --instance b="ipc://$T/b.sock"
server ms --instance die2="ipc://$T/die2.sock"
GW_URL="http://127.0.0.1:$(cat "$T/main.port")" GW_DYING_URL="http://127.0.0.1:$(cat "$T/ms.port")" \
  GW_WORKER_LOGS="$T/a.log:$T/b.log" \
  GW_KEY=sk-openai-test NODE_PATH="$CLIENT/node_modules" \
  timeout 120 node "$SRC/test-gateway-openai.mjs" "$CLIENT/node_modules/openai/index.mjs"
