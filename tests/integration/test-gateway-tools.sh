#!/usr/bin/env bash
# Reasoning and tool calls through real clients: the official `openai` client, the Vercel
# AI SDK (`ai` + `@ai-sdk/openai-compatible`) and LangChain JS (`@langchain/openai`),
# versions pinned in tests/integration/tool-clients/package-lock.json and installed with
# `npm ci` into the build directory on first run. The gateway is in front of scripted
# workers that render each request with the engine's chat template and answer with what
# an R1, DeepSeek-V3 or Qwen2.5 model writes, encoded with that model's real tokenizer
# (fixtures/tokenizers) and streamed through the engine's detokenizer. Afterwards every
# prompt the workers rendered is rendered again with python3-jinja2 (configured as
# transformers' apply_chat_template) and must be byte-identical.
set -u
BUILD=${DSV_BUILD_DIR:-$(cd "$(dirname "$0")/../../build" && pwd)}
B=$BUILD/bin
SRC=$(cd "$(dirname "$0")" && pwd)
FIX=${DSV_FIXTURES:-$(cd "$SRC/../../../shared/fixtures" 2>/dev/null && pwd)}/tokenizers
for tool in node npm python3 curl; do
  command -v $tool >/dev/null || { echo "missing $tool (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
done
python3 -c 'import jinja2' 2>/dev/null || { echo "missing python3-jinja2 (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
[ -f "$FIX/models/deepseek_v3/tokenizer.json" ] || { echo "missing fixtures in $FIX"; echo "0 passed, 1 failed"; exit 1; }
CLIENTS=$BUILD/tests/tool-clients
if ! cmp -s "$SRC/tool-clients/package-lock.json" "$CLIENTS/package-lock.json" 2>/dev/null ||
   [ ! -d "$CLIENTS/node_modules/@langchain/openai" ]; then
  rm -rf "$CLIENTS"; mkdir -p "$CLIENTS"
  cp "$SRC/tool-clients/package.json" "$SRC/tool-clients/package-lock.json" "$CLIENTS/"
  if ! (cd "$CLIENTS" && timeout 300 npm ci --no-audit --no-fund --silent >npm.log 2>&1); then
    echo "npm ci failed:"; tail -20 "$CLIENTS/npm.log"; rm -f "$CLIENTS/package-lock.json"; echo "0 passed, 1 failed"; exit 1
  fi
fi
T=$(mktemp -d /tmp/dsv-gw-tools.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

# R1's template is DeepSeek-V3's with two changes (as the R1 checkpoints ship it): the
# generation prompt opens the think block, and an earlier answer keeps only what follows
# its last "</think>".
python3 - "$FIX/models/deepseek_v3/tokenizer_config.json" "$T/r1.jinja" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))["chat_template"]
old_answer = "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
new_answer = ("{% set content = message['content'] %}{% if '</think>' in content %}"
              "{% set content = content.split('</think>')[-1] %}{% endif %}"
              "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}")
old_gen = "{{'<｜Assistant｜>'}}{% endif %}"
assert t.count(old_answer) == 1 and t.endswith(old_gen)
t = t.replace(old_answer, new_answer)
t = t[: -len(old_gen)] + "{{'<｜Assistant｜><think>\\n'}}{% endif %}"
open(sys.argv[2], "w").write(t)
EOF

CALL_PARIS='<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
CALL_TWO='Checking both.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Berlin\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
cat >"$T/r1.jsonl" <<EOF
{"match": "<｜tool▁outputs▁end｜>", "reply": "The tool says 18.\n</think>\n\nIt is 18°C and cloudy in Paris."}
{"match": "weather", "reply": "I should call the tool.\n</think>\n\n$CALL_PARIS"}
{"reply": "The user asks for 2+2.\nTwo and two make 4.\n</think>\n\nThe answer is 4."}
EOF
# tool_choice "required" or a named function: the constraint is the call in the
# template's own syntax (a composed grammar); the scripted worker walks these replies
# through its masks with the real tokenizer. One call where parallel calls are off.
FORCED_ONE='<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
FORCED_TWO='<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Lyon\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
cat >"$T/ds.jsonl" <<EOF
{"match": "\"max\":1", "reply": "$FORCED_ONE"}
{"match": "\"json_schema\"", "reply": "$FORCED_TWO"}
{"match": "<｜tool▁outputs▁end｜>", "reply": "It is 18°C and cloudy in Paris."}
{"match": "Tokyo", "reply": "$CALL_TWO"}
{"reply": "$CALL_PARIS"}
EOF
cat >"$T/qwen.jsonl" <<'EOF'
{"match": "\"json_schema\"", "reply": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Lyon\"}}\n</tool_call>"}
{"match": "<tool_response>", "reply": "It is 18°C and cloudy in Paris."}
{"reply": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}
EOF

worker() {  # worker NAME TOKENIZER [scripted-worker options]
  local n=$1 tok=$2; shift 2
  "$B/scripted-worker" --url "ipc://$T/$n.sock" --tokenizer "$FIX/models/$tok/tokenizer.json" \
    --script "$T/$n.jsonl" --log "$T/$n.log" "$@" 2>>"$T/$n.err" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -S "$T/$n.sock" ] && return 0; sleep 0.05; done
  echo "worker $n did not start: $(cat "$T/$n.err")"
}
server() {  # server NAME [gateway-test-server options]
  local n=$1; shift
  "$B/dsvisor-gateway-test-server" --model dsv-test --port-file "$T/$n.port" --instance "$n=ipc://$T/$n.sock" "$@" \
    </dev/null >"$T/$n.out" 2>"$T/$n.err.gw" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$T/$n.port" ] && break; sleep 0.05; done
  for _ in $(seq 60); do curl -sf "http://127.0.0.1:$(cat "$T/$n.port")/ready" >/dev/null && break; sleep 0.05; done
}
worker r1 deepseek_v3 --chat-template "$T/r1.jinja"
worker ds deepseek_v3
worker qwen qwen2_5
server r1 --reasoning-format deepseek --think-opened 1 --tool-format deepseek_v3
server ds --tool-format deepseek_v3
server qwen --tool-format hermes

GW_R1="http://127.0.0.1:$(cat "$T/r1.port")" GW_DS="http://127.0.0.1:$(cat "$T/ds.port")" \
  GW_QWEN="http://127.0.0.1:$(cat "$T/qwen.port")" NODE_PATH="$CLIENTS/node_modules" \
  timeout 180 node "$SRC/test-gateway-tools.mjs" "$CLIENTS/node_modules" | tee "$T/node.out"

# Every prompt the workers rendered, rendered again by python3-jinja2.
python3 - "$FIX" "$T" <<'EOF'
import json, sys
import jinja2
from jinja2.ext import loopcontrols
fix, t = sys.argv[1], sys.argv[2]
def env():
    e = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    e.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    return e
import jinja2.sandbox
cases = {"r1": ("deepseek_v3", open(t + "/r1.jinja").read()), "ds": ("deepseek_v3", None), "qwen": ("qwen2_5", None)}
passed = failed = 0
for name, (model, src) in cases.items():
    cfg = json.load(open(f"{fix}/models/{model}/tokenizer_config.json"))
    tvars = json.loads(open(f"{fix}/chat/{model}.jsonl").readline())["template_vars"]
    tmpl = env().from_string(src or cfg["chat_template"])
    lines = [json.loads(l) for l in open(f"{t}/{name}.log")]
    bad = []
    for i, l in enumerate(lines):
        want = tmpl.render(messages=l["messages"], tools=l["tools"], add_generation_prompt=True,
                           bos_token=tvars.get("bos_token", ""), eos_token=tvars.get("eos_token", ""))
        if want != l["rendered"]:
            k = next((j for j in range(min(len(want), len(l["rendered"]))) if want[j] != l["rendered"][j]),
                     min(len(want), len(l["rendered"])))
            bad.append(f"request {i}: differs at {k}: jinja2 {want[k-20:k+40]!r} ours {l['rendered'][k-20:k+40]!r}")
    tool_turns = sum(1 for l in lines if any(m.get("tool_calls") or m["role"] == "tool" for m in l["messages"]))
    if not bad and lines and (name == "r1" or tool_turns):
        passed += 1
        print(f"ok   jinja2-{name}: {len(lines)} prompts ({tool_turns} with tool turns) render identically")
    else:
        failed += 1
        print(f"FAIL jinja2-{name}: {len(lines)} prompts, {tool_turns} with tool turns; " + "; ".join(bad[:3]))
# Earlier reasoning never reaches the prompt.
leaks = [l for l in open(f"{t}/r1.log") if "SECRET" in json.loads(l)["rendered"]]
if leaks:
    failed += 1
    print(f"FAIL r1-history: earlier reasoning reached the prompt: {leaks[0][:200]}")
else:
    passed += 1
    print("ok   r1-history: earlier reasoning (reasoning_content and a think block in content) left out")
print(f"{passed} passed, {failed} failed", file=open(f"{t}/py.out", "w"))
print(f"{passed} passed, {failed} failed")
EOF
node_line=$(tail -1 "$T/node.out"); py_line=$(tail -1 "$T/py.out" 2>/dev/null || echo "0 passed, 1 failed")
np=$(echo "$node_line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p')
pp=$(echo "$py_line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p')
set -- ${np:-0 1} ${pp:-0 1}
echo "total: $(($1 + $3)) passed, $(($2 + $4)) failed"
[ "$2" = 0 ] && [ "$4" = 0 ] && [ "$1" -gt 0 ]
