#!/usr/bin/env bash
# The hostile-client suite (test-gateway-hostile.py: raw-socket smuggling patterns,
# header, URL and JSON edge cases, limits, slow clients) against `dsvisor start` with the
# real worker on the bundled model (models/default). Each case checks its class of answer
# and that GET /health still answers after it; the suite ends by checking that the
# dsvisor that answered is the one started, so no case passes by a crash and restart.
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-gateway-hostile.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
dsv_model="$DSV_SOURCE_DIR/models/default"
dsv_model_id=default
need_worker
trap 'dsv_stop_all; rm -rf "$tmp"' EXIT

dsv_start h 1
dsv_wait_ready h 1 120
python3 "$DSV_SOURCE_DIR/tests/integration/test-gateway-hostile.py" 127.0.0.1 "${dsv_port[h]}" "$dsv_model_id" \
        "${dsv_pid[h]}" || failed=1
if ((failed)); then
        echo "dsvisor's log:"
        sed 's/^/       /' "$tmp/h/log" | tail -40
fi
exit $failed
