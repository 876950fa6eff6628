#!/usr/bin/env bash
# Structured output end to end: `dsvisor start` on the bundled default model, then
# test-structured-output.py (response_format json_schema for a set of schemas, chat and
# completions, streamed and not, each reply judged by python3-jsonschema; json_object,
# guided_*, a refused keyword, logit_bias, logprob alternatives) and
# test-structured-clients.mjs (the openai client's chat.completions.parse with zod, the
# AI SDK's generateObject) and test-tool-choice.mjs (tool_choice "required" and a named
# function with the openai client: calls whose arguments pass their schema). The node clients are installed from the lock file in
# tests/integration/structured-clients into the build directory on first run; without
# node, npm or python3-jsonschema the test fails, it does not skip
# (scripts/bootstrap.sh --with-tests installs them).
set -u
BUILD=${DSV_BUILD_DIR:?}
SRC=$(cd "$(dirname "$0")" && pwd)
MODEL=${DSV_SOURCE_DIR:?}/models/default
python3 -c 'import jsonschema' 2>/dev/null || { echo "missing python3-jsonschema"; echo "0 passed, 1 failed"; exit 1; }
. "$SRC/structured-clients.sh"
T=$(mktemp -d /tmp/dsv-structured.XXXXXX)
export DSV_CACHE_DIR="$T/cache"
SUP=
cleanup() { [ -n "$SUP" ] && kill "$SUP" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
"$BUILD/bin/dsvisor" start --model "$MODEL" --model-id default --instances 1 --threads-per-instance 2 --port 0 \
  --runtime-dir "$T/run" --max-batch 8 --hugepages off >"$T/start.log" 2>&1 &
SUP=$!
PORT=
for _ in $(seq 600); do
  if "$BUILD/bin/dsvisor" status --json --runtime-dir "$T/run" >"$T/status.json" 2>/dev/null &&
     PORT=$(python3 -c "import json,sys; j=json.load(open('$T/status.json')); sys.exit(1) if j['instances_ready'] != j['instances_total'] else print(j['port'])"); then
    break
  fi
  kill -0 "$SUP" 2>/dev/null || { echo "dsvisor start exited:"; tail -20 "$T/start.log"; echo "0 passed, 1 failed"; exit 1; }
  PORT=
  sleep 0.2
done
[ -n "$PORT" ] || { echo "dsvisor did not become ready"; tail -20 "$T/start.log"; echo "0 passed, 1 failed"; exit 1; }
URL=http://127.0.0.1:$PORT
rc=0
timeout 900 python3 "$SRC/test-structured-output.py" "$URL" "$BUILD/bin/dsvisor" "$MODEL" || rc=1
NODE_PATH="$CLIENTS/node_modules" timeout 300 node "$SRC/test-structured-clients.mjs" "$URL" || rc=1
NODE_PATH="$CLIENTS/node_modules" timeout 300 node "$SRC/test-tool-choice.mjs" "$URL" || rc=1
exit $rc
