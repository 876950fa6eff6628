#!/usr/bin/env bash
# The main job: `dsvisor start --instances 2` serving the bundled default model
# (models/default, a small DeepSeek-V3-architecture model trained on the KJV) on
# 127.0.0.1:${DSV_PORT:-8080}, in the foreground until Ctrl-C. Once the instances are ready,
# one example chat request is sent and its reply printed, so a first run shows text.
set -euo pipefail
build=${1:-build}
port=${DSV_PORT:-8080}
url="http://127.0.0.1:$port"

"$build/bin/dsvisor" cpuinfo

first_request() {
        for _ in $(seq 1 120); do
                curl -sf "$url/ready" >/dev/null 2>&1 && break
                sleep 0.5
        done
        local body='{"model":"default","messages":[{"role":"user","content":"What can you tell me about the sea?"}],"max_tokens":48,"temperature":0.8,"seed":7}'
        echo
        echo "== curl $url/v1/chat/completions -d '$body'"
        curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body"
        echo
        echo "== serving on $url (OpenAI API, /metrics); 'dsvisor status' in another shell; Ctrl-C stops"
}
first_request &
exec "$build/bin/dsvisor" start --instances 2 --port "$port"
