#!/usr/bin/env bash
# The gateway's status page (GET /) in a real browser: Debian's headless chromium, driven
# by the pinned npm playwright-core (tests/integration/status-page-client; no browser is
# downloaded), against `dsvisor start --instances 2` on the bundled default model with an
# API key. test-status-page.mjs checks that the page lists both instances with their
# CPUs (as `dsvisor status` reports them), refuses a chat without the key, streams a reply
# once the key is typed, shows that instance's live figures, makes no request off this
# server, and saves a screenshot (build/tests/status-page.png) that it decodes and finds
# non-blank. Without node, npm or chromium the test fails, it does not skip
# (scripts/bootstrap.sh --with-tests).
set -euo pipefail
src="${DSV_SOURCE_DIR:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-status-page.XXXXXX")
failed=0
source "$src/tests/integration/test-deploy-lib.sh"
need_worker
chromium=${DSV_CHROMIUM:-/usr/bin/chromium}
for tool in node npm "$chromium"; do
        command -v "$tool" >/dev/null || { echo "NOT OK missing $tool (scripts/bootstrap.sh --with-tests)"; exit 1; }
done
cleanup() {
        dsv_stop_all
        rm -rf "$tmp"
}
trap cleanup EXIT

client_src="$src/tests/integration/status-page-client"
client="${DSV_BUILD_DIR:?}/tests/status-page-client"
if ! cmp -s "$client_src/package-lock.json" "$client/package-lock.json" 2>/dev/null ||
        [[ ! -f $client/node_modules/playwright-core/package.json ]]; then
        rm -rf "$client" && mkdir -p "$client"
        cp "$client_src/package.json" "$client_src/package-lock.json" "$client/"
        if ! (cd "$client" && timeout 300 npm ci --no-audit --no-fund --silent >npm.log 2>&1); then
                echo "NOT OK npm ci failed:"; tail -20 "$client/npm.log"; exit 1
        fi
fi

key=sk-status-page-test
mkdir -p "$tmp/d"
"$dsvisor" start --instances 2 --threads-per-instance 1 --host 127.0.0.1 --port 0 --runtime-dir "$tmp/d/run" \
        --hugepages off --grace-ms 5000 --api-key "$key" >"$tmp/d/log" 2>&1 &
dsv_pid[d]=$!
dsv_wait_ready d 2 180
base="http://127.0.0.1:${dsv_port[d]}"
code() { curl -s -m 10 -o /dev/null -w '%{http_code}' "$@"; }
check "GET / is the page (HTML, open like /metrics without --protect-metrics)" \
        bash -c "[ \"\$(curl -s -m 10 -o /dev/null -w '%{http_code} %{content_type}' $base/)\" = '200 text/html; charset=utf-8' ]"
check "GET /status is open like /metrics, /v1/models needs the key" \
        [ "$(code "$base/status")$(code "$base/v1/models")" = 200401 ]
check "the page's Content-Security-Policy allows this server only" \
        bash -c "curl -s -m 10 -D - -o /dev/null $base/ | grep -qi \"^content-security-policy: default-src 'none';.*connect-src 'self'\""

# What the supervisor reports, for the browser to find on the page.
python3 - "$tmp/d/status.json" >"$tmp/expect.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(json.dumps([{"name": i["name"], "cpus": i["cpus"]} for i in j["instances"]]))
PY
if ! DSV_URL="$base/" DSV_KEY="$key" DSV_EXPECT="$(cat "$tmp/expect.json")" DSV_CHROMIUM="$chromium" \
        DSV_SCREENSHOT="$DSV_BUILD_DIR/tests/status-page.png" NODE_PATH="$client/node_modules" \
        timeout 240 node "$src/tests/integration/test-status-page.mjs"; then
        failed=$((failed + 1))
fi
if ((failed > 0)); then
        echo "--- dsvisor log"; tail -20 "$tmp/d/log"
fi
echo "$failed failed"
exit $((failed > 0))
