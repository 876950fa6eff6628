#!/usr/bin/env bash
# The forced tool call in a template's own syntax end to end: `dsvisor start` on the
# bundled default model with a chat template (--chat-template) that has a tool-call
# syntax, the real worker decoding under the composed grammar, the official openai
# client (pinned in tests/integration/structured-clients) reading the calls
# (test-tool-syntax-e2e.mjs). The fixture models whose tokenizers carry the DeepSeek-V3
# and Qwen2.5 markers are not paired with weights here (the fixture weights have
# vocabularies of at most 512), so: a Llama 3.1 JSON syntax (no marker tokens) is served
# and answered; a Hermes syntax is refused naming the "<tool_call>" marker the bundled
# tokenizer lacks as one token. The DeepSeek-V3 and Hermes syntaxes are walked through the
# masks with their real tokenizers in test-grammar-compose, test-gateway-tool-syntax and
# (behind the gateway, scripted worker) test-gateway-tools.
set -u
BUILD=${DSV_BUILD_DIR:?}
SRC=$(cd "$(dirname "$0")" && pwd)
MODEL=${DSV_SOURCE_DIR:?}/models/default
. "$SRC/structured-clients.sh"
T=$(mktemp -d /tmp/dsv-tool-syntax.XXXXXX)
export DSV_CACHE_DIR="$T/cache"
SUP=
cleanup() { [ -n "$SUP" ] && kill "$SUP" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

# The bundled template with the tools shown and assistant calls written in the syntax.
cat >"$T/llama.jinja" <<'TMPL'
{{ bos_token }}{% if tools %}<|user|>Functions (ipython): {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}{% for message in messages %}{% if message['role'] == 'assistant' %}<|assistant|>{% if message.tool_calls %}{% for c in message.tool_calls %}{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments }}{{ '}' }}{% endfor %}{% else %}{{ message['content'] }}{% endif %}{{ eos_token }}{% else %}<|user|>{{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}
TMPL
sed 's/Functions (ipython): /Call as <tool_call>{"name": ..., "arguments": ...}<\/tool_call>: /' "$T/llama.jinja" >"$T/hermes.jinja"

rc=0
for form in llama hermes; do
  "$BUILD/bin/dsvisor" start --model "$MODEL" --model-id default --instances 1 --threads-per-instance 2 --port 0 \
    --runtime-dir "$T/run-$form" --max-batch 4 --hugepages off --chat-template "$T/$form.jinja" >"$T/start-$form.log" 2>&1 &
  SUP=$!
  PORT=
  for _ in $(seq 600); do
    if "$BUILD/bin/dsvisor" status --json --runtime-dir "$T/run-$form" >"$T/status.json" 2>/dev/null &&
       PORT=$(python3 -c "import json,sys; j=json.load(open('$T/status.json')); sys.exit(1) if j['instances_ready'] != j['instances_total'] else print(j['port'])"); then
      break
    fi
    kill -0 "$SUP" 2>/dev/null || { echo "dsvisor start exited:"; tail -20 "$T/start-$form.log"; echo "0 passed, 1 failed"; exit 1; }
    PORT=
    sleep 0.2
  done
  [ -n "$PORT" ] || { echo "dsvisor did not become ready"; tail -20 "$T/start-$form.log"; echo "0 passed, 1 failed"; exit 1; }
  grep -q "tool calls $( [ $form = llama ] && echo llama3_json || echo hermes)" "$T/start-$form.log" ||
    { echo "NOT OK $form: the template's tool-call syntax was not detected: $(grep -i 'chat output' "$T/start-$form.log")"; rc=1; }
  NODE_PATH="$CLIENTS/node_modules" timeout 300 node "$SRC/test-tool-syntax-e2e.mjs" "$form" "http://127.0.0.1:$PORT" || rc=1
  kill "$SUP" 2>/dev/null; wait "$SUP" 2>/dev/null; SUP=
done
exit $rc
