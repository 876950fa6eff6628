#!/usr/bin/env bash
# The seed's command names as installed by `cmake --install`: deepseek-convert converts
# the bundled model (an HF folder) for each --quant-format and the result verifies;
# a format it does not know is refused; ds-runtime serves the installed model on the
# given host and port (GET /health, /v1/models, one completion), then stops on SIGTERM.
set -euo pipefail
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-frontends.XXXXXX")
failed=0
source "${DSV_SOURCE_DIR:?}/tests/integration/test-deploy-lib.sh"
need_worker
pid=
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

cmake --install "$DSV_BUILD_DIR" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
p="$tmp/prefix/bin"
check "installed: dsvisor, dsvisor-worker, deepseek-convert, ds-runtime and the default model" bash -c \
        "[ -x $p/dsvisor ] && [ -x $p/dsvisor-worker ] && [ -x $p/deepseek-convert ] && [ -x $p/ds-runtime ] &&
         [ -f $tmp/prefix/share/dsvisor/models/default/config.json ]"

model="$tmp/prefix/share/dsvisor/models/default"
for q in bf16 int8 int4; do
        check "deepseek-convert --quant-format $q writes a model that verifies" bash -c \
                "'$p/deepseek-convert' --model-path '$model' --output-dir '$tmp/out-$q' --quant-format $q >'$tmp/conv-$q.log' 2>&1 &&
                 '$p/dsvisor' verify '$tmp/out-$q/model.dse' >/dev/null"
done
check "deepseek-convert --quant-format awq on a BF16 checkpoint: refused by dsvisor convert" \
        bash -c "! '$p/deepseek-convert' --model-path '$model' --output-dir '$tmp/out-awq' --quant-format awq >/dev/null 2>&1"
set +e
"$p/deepseek-convert" --model-path "$model" --output-dir "$tmp/out-x" --quant-format fp4 >/dev/null 2>"$tmp/err"
rc=$?
set -e
check "deepseek-convert --quant-format fp4: exit 2 naming the formats" bash -c "[ $rc = 2 ] && grep -q 'awq, gptq, int4, int8, bf16' '$tmp/err'"
check "deepseek-convert without --output-dir: usage, exit 2" bash -c \
        "'$p/deepseek-convert' --model-path '$model' --quant-format int8 2>/dev/null; [ \$? = 2 ]"

port=$(free_port)
DSV_CACHE_DIR="$tmp/cache" "$p/ds-runtime" --model "$model" --host 127.0.0.1 --port "$port" --threads 1 \
        --runtime-dir "$tmp/run" --hugepages off >"$tmp/runtime.log" 2>&1 &
pid=$!
up=0
for _ in $(seq 1 600); do
        if curl -sf -m 2 "http://127.0.0.1:$port/ready" >/dev/null; then up=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
done
check "ds-runtime serves on the given host and port" [ $up = 1 ]
"$p/dsvisor" status --json --runtime-dir "$tmp/run" >"$tmp/status.json" 2>/dev/null || true
check "ds-runtime runs one instance with --threads threads" python3 -c "
import json; j = json.load(open('$tmp/status.json'))
assert len(j['instances']) == 1 and j['instances'][0]['threads'] == 1, j['instances']"
check "ds-runtime answers a completion" bash -c "curl -sf -m 60 http://127.0.0.1:$port/v1/completions \
        -H 'Content-Type: application/json' -d '{\"model\":\"default\",\"prompt\":\"And God said\",\"max_tokens\":4}' |
        grep -q '\"text_completion\"'"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
check "ds-runtime stops cleanly on SIGTERM" [ $rc = 0 ]
if ((failed)); then sed 's/^/       /' "$tmp/runtime.log" | tail -20; fi
exit $((failed > 0))
