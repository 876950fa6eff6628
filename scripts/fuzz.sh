#!/usr/bin/env bash
# Runs every libFuzzer target of the project for a given time each and reports findings.
#
#     scripts/fuzz.sh [--time SECONDS | --cpu-seconds SECONDS] [--build-dir DIR] [--keep-corpus]
#                     [--save-corpus] [TARGET...]
#
# Configures a clang build with -DDSV_FUZZ=ON (default build-fuzz/ beside the sources):
# every fuzz target and every library it calls carries coverage instrumentation, ASan and
# UBSan, and no sanitizer report lets the run go on. Finds every fuzz-* target the CMake
# files define (tests/*.cmake under if(DSV_FUZZ)), builds them, and runs each for SECONDS
# (default 60) of wall time, or with --cpu-seconds until the target has used SECONDS of CPU
# time (for a campaign on a shared machine, where wall time says little; the run is then
# interrupted and ends as a clean one). Each run first replays the saved corpus tests/fuzz/corpus/TARGET/ and the
# seeds (tests/fuzz/TARGET.seeds/ plus inputs made from the shared fixtures), then
# extends a working corpus in DIR/fuzz-corpus/TARGET.
# A finding is an input libFuzzer saved (crash-*, leak-*, timeout-*, oom-* in
# DIR/fuzz-findings/TARGET/, beside the run's log) or any sanitizer report in the log,
# even when libFuzzer exits 0. Per target it prints the CPU seconds used, executions, corpus size, the
# coverage after replaying the saved inputs and at the end (libFuzzer's cov: edges and
# ft: features), and whether the parser's main functions were reached; a target that
# does not reach them did not run cleanly. Exit status: 1 if anything was found, 2 if
# a target could not be built, run or reach its parser, else 0. Reproduce a finding with
#     DIR/bin/TARGET DIR/fuzz-findings/TARGET/crash-...
# Without --keep-corpus the working corpus starts empty each run (what CI does);
# --save-corpus merges what the run found into tests/fuzz/corpus/TARGET/, minimised and
# without inputs over 8 KiB.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
TIME=60
CPU_LIMIT=0
BUILD=$SRC/build-fuzz
KEEP=0
SAVE=0
WANT=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) TIME=$2; shift 2 ;;
    --cpu-seconds) CPU_LIMIT=$2; shift 2 ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
    --keep-corpus) KEEP=1; shift ;;
    --save-corpus) SAVE=1; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; exit 2 ;;
    *) WANT+=("$1"); shift ;;
  esac
done
case "$TIME" in ''|*[!0-9]*) echo "fuzz.sh: --time wants whole seconds" >&2; exit 2 ;; esac
case "$CPU_LIMIT" in ''|*[!0-9]*) echo "fuzz.sh: --cpu-seconds wants whole seconds" >&2; exit 2 ;; esac
command -v clang >/dev/null || { echo "fuzz.sh: clang is missing (scripts/bootstrap.sh --with-tests)" >&2; exit 2; }
FIX=${DSV_FIXTURES:-$(realpath -m "$SRC/../shared/fixtures")}
export DSV_FIXTURES=$FIX

"$SRC/scripts/build-libmicrohttpd.sh" || exit 2  # the gateway's library, once per user
echo "fuzz.sh: configuring $BUILD (clang, DSV_FUZZ=ON)"
GEN=()  # the target list below is read from the Makefile generator's "help" target
[ -f "$BUILD/CMakeCache.txt" ] || GEN=(-G "Unix Makefiles")
if ! CC=clang cmake "${GEN[@]}" -S "$SRC" -B "$BUILD" -DDSV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DDSV_SHARED_DIR="$(dirname "$FIX")" >"$BUILD-configure.log" 2>&1; then
  tail -20 "$BUILD-configure.log"; echo "fuzz.sh: configure failed" >&2; exit 2
fi
mapfile -t ALL < <(cmake --build "$BUILD" --target help | sed -n 's/^\.\.\. \(fuzz-[A-Za-z0-9_.-]*\).*/\1/p' | sort)
[ ${#ALL[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz-* targets found" >&2; exit 2; }
if [ ${#WANT[@]} -gt 0 ]; then
  for t in "${WANT[@]}"; do
    printf '%s\n' "${ALL[@]}" | grep -qx "$t" || { echo "fuzz.sh: no target '$t' (have: ${ALL[*]})" >&2; exit 2; }
  done
  TARGETS=("${WANT[@]}")
else
  TARGETS=("${ALL[@]}")
fi
echo "fuzz.sh: building ${#TARGETS[@]} targets: ${TARGETS[*]}"
if ! cmake --build "$BUILD" -j2 --target "${TARGETS[@]}" >"$BUILD-build.log" 2>&1; then
  grep -E "error|Error" "$BUILD-build.log" | head -20; echo "fuzz.sh: build failed (log: $BUILD-build.log)" >&2; exit 2
fi

# seeds TARGET DIR: fills DIR with starting inputs for TARGET
seeds() {
  local t=$1 d=$2 i=0
  [ -d "$SRC/tests/fuzz/$t.seeds" ] && cp "$SRC/tests/fuzz/$t.seeds"/* "$d"/ 2>/dev/null
  case "$t" in
    fuzz-gguf-import)
      # the container target's files: whole models of every architecture
      cp "$SRC/tests/fuzz/fuzz-gguf.seeds"/* "$d"/ ;;
    fuzz-hfconfig-header)
      # config.json alone, config.json NUL generation_config.json, and quantize_config.json
      for m in "$FIX"/models/*/; do
        n=$(basename "$m")
        [ -f "$m/config.json" ] || continue
        cp "$m/config.json" "$d/$n.json"
        [ -f "$m/generation_config.json" ] && { cat "$m/config.json"; printf '\0'; cat "$m/generation_config.json"; } >"$d/$n+gen.json"
        [ -f "$m/quantize_config.json" ] && cp "$m/quantize_config.json" "$d/$n.quantize.json"
      done ;;
    fuzz-safetensors-header)
      # the input is the data-section size (8 bytes little-endian) and the JSON header
      for f in "$FIX"/models/*/*.safetensors; do
        [ -f "$f" ] || continue
        python3 - "$f" "$d/$(basename "$(dirname "$f")")-$(basename "$f" .safetensors)" <<'PY'
import os, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = f.read(n)
data_size = os.path.getsize(sys.argv[1]) - 8 - n
open(sys.argv[2], "wb").write(struct.pack("<Q", data_size) + header)
PY
      done ;;
    fuzz-spm-load)
      for f in "$FIX"/tokenizers/models/sp_*/*.model; do [ -f "$f" ] && cp "$f" "$d/"; done ;;
    fuzz-tokenizer-encode|fuzz-spm-encode)
      # sample texts of the tokenizer fixtures, one file each
      [ -f "$FIX/tokenizers/corpus.jsonl" ] && python3 - "$FIX/tokenizers/corpus.jsonl" "$d" <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1], encoding="utf-8")):
    if i >= 32: break
    v = json.loads(line)
    text = v if isinstance(v, str) else v.get("text", "") if isinstance(v, dict) else ""
    if text:
        open("%s/text-%02d" % (sys.argv[2], i), "wb").write(bytes([i]) + text.encode("utf-8")[:2048])
PY
      ;;
    fuzz-chat-template)
      for f in "$FIX"/tokenizers/models/*/tokenizer_config.json; do
        [ -f "$f" ] || continue
        python3 -c "import json,sys; t=json.load(open(sys.argv[1])).get('chat_template'); t=t if isinstance(t,str) else (t[0]['template'] if isinstance(t,list) and t else ''); open(sys.argv[2],'w').write(t)" \
          "$f" "$d/$(basename "$(dirname "$f")").jinja" 2>/dev/null
      done ;;
    fuzz-gateway-request)
      printf '%s' '{"model":"m","prompt":"hello there","max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}' >"$d/completion.json"
      printf '%s' '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"temperature":0.7,"top_p":0.9,"stop":["\n"],"seed":3}' >"$d/chat.json"
      printf '%s' '{"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"18C"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"tool_choice":"auto","parallel_tool_calls":false,"reasoning_format":"deepseek"}' >"$d/tools.json"
      printf '%s' '{"model":"m","messages":[{"role":"user","content":"w?"}],"tools":[{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object","$defs":{"c":{"type":"string"}},"properties":{"city":{"$ref":"#/$defs/c"}},"required":["city"]}}},{"type":"function","function":{"name":"now"}}],"tool_choice":"required","stop":["}"]}' >"$d/tool-choice.json" ;;
    fuzz-gateway-chat-output)
      # byte 0: format (0 none, 1 deepseek_v3, 2 hermes, 3 llama3_json) | 4 split | 8 opened | 16 parallel | 32 json calls
      printf '\x1d\x07%s' 'Plan.</think>\n\nSure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' >"$d/deepseek"
      printf '\x16\x03%s' $'<think>\nhm</think>ok\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}' >"$d/hermes"
      printf '\x13\x05%s' '<|python_tag|>{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}' >"$d/llama"
      printf '\x30\x02%s' '[{"name":"f","arguments":{"a":1}},{"name":"g","arguments":{}}]' >"$d/json-calls" ;;
    fuzz-grammar-schema)
      # each corpus schema with its first instance, compact, after a NUL
      [ -d "$FIX/json-schema/schemas" ] && python3 - "$FIX/json-schema/schemas" "$d" <<'PY'
import json, os, sys
for name in sorted(os.listdir(sys.argv[1]))[::8]:
    doc = json.load(open(os.path.join(sys.argv[1], name), encoding="utf-8"))
    data = json.dumps(doc["tests"][0]["data"], separators=(",", ":"), ensure_ascii=False) if doc["tests"] else ""
    out = json.dumps(doc["schema"], separators=(",", ":")).encode() + b"\0" + data.encode()
    if len(out) <= 8192:
        open(os.path.join(sys.argv[2], name), "wb").write(out)
PY
      ;;
    fuzz-kv-disk)
      # byte 0: 2 re-seal (| 1 the index (| 8 and a slot)) | 4 truncate; the identity is the target's own
      python3 - "$d" <<'PY'
import struct, sys
head = b"DSVKVTR2" + struct.pack("<IIiiiiQQQ", 1, 2, 0, 4, 1, 16, 64, 4, 512)
open(sys.argv[1] + "/header", "wb").write(b"\x02" + head + b"\0" * 8)
open(sys.argv[1] + "/header-truncated", "wb").write(b"\x06" + head + b"\0" * 8)
entry = struct.pack("<QQII", 7, 0, 0, 0) + struct.pack("<QQII", 9, 7, 3, 0)
open(sys.argv[1] + "/index", "wb").write(b"\x03" + b"DSVKVIX1" + struct.pack("<IIQII", 0, 0, 2, 0, 0) + entry)
one = b"DSVKVIX1" + struct.pack("<IIQII", 0, 0, 1, 0, 0) + struct.pack("<QQII", 7, 0, 2, 0)
def slot(key, parent): return struct.pack("<IIQQ", 0, 0, key, parent) + struct.pack("<4i", 5, 6, 7, 8) + bytes(range(64))
open(sys.argv[1] + "/index-slot", "wb").write(b"\x0b" + one + slot(7, 0))
open(sys.argv[1] + "/index-slot-other-block", "wb").write(b"\x0b" + one + slot(8, 7))
PY
      ;;
    fuzz-load-sse)
      printf '%s' $'\x20data: {"choices":[{"text":"hi","finish_reason":null}]}\n\ndata: {"error":{"message":"m","type":"server_error","code":"worker_lost"}}\r\n\r\n: c\ndata: [DONE]\n\n' >"$d/stream.txt" ;;
  esac
  i=$(find "$d" -type f | wc -l)
  echo "$i"
}

# reached_functions TARGET: the functions whose coverage shows the target reached its
# parser's deep paths; NAME/FILE names a static function of that file. A static function
# inlined into its only caller has no coverage entry of its own: name its caller instead.
reached_functions() {
  case "$1" in
    fuzz-native-header)
      echo dse__native_parse parse_hparams parse_entry/format.c check_schema dse__hparams_validate dse__model_schema ;;
    fuzz-safetensors-header) echo dse__st_parse_header json_u64 cmp_begin cmp_name ;;
    fuzz-gguf) echo dse__gguf_parse get_string/gguf_file.c parse_tensor_info check_unique parse_alignment dse__gguf_get_i64 dse__gguf_str_next dse__ggml_dequantize ;;
    fuzz-gguf-import) echo dse__gguf_import parse_deepseek2 source_read/gguf_import.c dse__gguf_tokenizer_files ;;
    fuzz-hfconfig-header)
      echo dse__hf_parse_config parse_deepseek parse_rope_scaling parse_quant parse_quant_object \
        dse__hf_parse_quantize_config dse__hparams_validate dse__model_schema dse__ct_scheme_for any_matches/compressed_tensors.c ;;
    fuzz-ipc-decode)
      echo dsv_ipc_msgs_decode decode_envelope decode_body dsv_ipc_msg_encode dsv_ipc_event_encode decode_constraint \
        dsv_ipc_batch_add dsv_ipc_batch_message ;;
    fuzz-supervisor-config) echo sup_config_apply_json set_text/config.c set_int/config.c dsv_cgroup_parent_check ;;
    fuzz-gateway-request) echo dsv__gw_request_parse dsv__gw_messages_parse dsv__gw_tools_parse parse_stop parse_logprobs dsv__gw_utf8_valid \
        dsv__gw_error_json json_string_put/request.c \
        dsv__gw_parse_constraint parse_logit_bias ;;
    fuzz-gateway-chat-output) echo dsv__gw_think_push dsv__gw_tools_push parse_section/tool_calls.c json_call/tool_calls.c scan_content/tool_calls.c dsv__gw_tools_read_json_calls dsv__gw_chat_out_delta ;;
    fuzz-gateway-http) echo dsv__gw_strict_target_ok dsv__gw_strict_header_block dsv__gw_strict_request scan_field/http_strict.c dsv__gw_json_strict dsv__gw_request_parse dsv__gw_tokenize ;;
    fuzz-load-sse) echo load_sse_feed load_answer_classify ;;
    fuzz-kv-disk) echo dse__kv_disk_open load_index/kv_disk.c dse__kv_disk_load ;;
    fuzz-chat-template) echo dse__jinja_parse parse_body/jinja_parse.c dse__jinja_render eval/jinja_eval.c apply_filter binop/jinja_eval.c ;;
    fuzz-tokenizer-load)
      echo dse__tok_bpe_init parse_model/tok_bpe.c parse_normalizer parse_pretokenizer parse_decoder \
        parse_post_processor parse_config/tok_bpe.c ;;
    fuzz-tokenizer-encode) echo bpe_encode dse__bpe_model_encode dse__bpe_normalize split_spans dse__bpe_decode ;;
    fuzz-spm-load) echo dse__spm_proto_parse dse__tok_spm_init dse__spm_normalizer_init dse__spm_trie_insert ;;
    fuzz-spm-encode) echo encode_with dse__spm_normalize bpe_resegment spm_decode ;;
    fuzz-grammar-schema)
      echo dse_grammar_compile_json_schema compile_body/schema_compile.c emit_types/schema_compile.c \
        emit_object_members/schema_compile.c emit_union/schema_compile.c dse__schema_merge_all_of dse__regex_rule \
        dse__grammar_matcher_step ;;
    fuzz-grammar-gbnf)
      echo dse_grammar_compile_gbnf parse_alternates/gbnf_compile.c piece_rule/gbnf_compile.c \
        parse_char/gbnf_compile.c dse__grammar_rule_codepoints dse__grammar_check dse__grammar_matcher_step ;;
    fuzz-grammar-composed)
      echo dse_grammar_compile_composed compile_part/grammar_compose.c compile_repeat/grammar_compose.c \
        compile_list/grammar_compose.c dse__schema_compile_into dse__grammar_accept_special \
        dse__grammar_mask_specials ;;
    fuzz-grammar-regex)
      echo dse_grammar_compile_regex parse_disjunction/regex_compile.c parse_escape/regex_compile.c \
        class_atom/regex_compile.c dse__grammar_rule_repeat dse__grammar_check dse__grammar_matcher_step ;;
  esac
}

# cov_at EVENT LOG: "cov/ft" of libFuzzer's last EVENT line (INITED: after the replay, DONE: at the end)
cov_at() { sed -n "s/^#[0-9]*[[:space:]]*$1 .*cov: \([0-9]*\) ft: \([0-9]*\).*/\1\/\2/p" "$2" | tail -1; }

# children_cpu_seconds VAR: sets VAR to the user + system CPU seconds of this shell's
# finished children so far (times must run in this shell, not in a subshell)
children_cpu_seconds() {
  times >"$BUILD/times.txt"
  printf -v "$1" '%s' "$(tail -1 "$BUILD/times.txt" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); n += p[1] * 60 + p[2] } printf "%d", n }')"
}

# run_for_cpu_seconds LOG BIN ARGS...: runs BIN until it has used CPU_LIMIT seconds of CPU
# time, then interrupts it (libFuzzer prints its final stats and exits with its default
# interrupt status, INTERRUPT_EXIT); that interruption counts as a clean end (exit 0).
INTERRUPT_EXIT=72
run_for_cpu_seconds() {
  local log=$1; shift
  local tick used pid stat
  tick=$(getconf CLK_TCK)
  "$@" -max_total_time=0 >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    stat=$(cut -d' ' -f14,15 "/proc/$pid/stat" 2>/dev/null) || break
    used=$(( (${stat% *} + ${stat#* }) / tick ))
    if [ "$used" -ge "$CPU_LIMIT" ]; then kill -INT "$pid"; break; fi
    sleep 2
  done
  wait "$pid"
  local rc=$?
  [ "$rc" -eq "$INTERRUPT_EXIT" ] && grep -q 'libFuzzer: run interrupted' "$log" && rc=0
  return "$rc"
}

SAVED_MAX_BYTES=8192
SANITIZER_REPORT='runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|MemorySanitizer|libFuzzer)|SUMMARY: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer)'
FINDINGS=0; BROKEN=0
printf '%-24s %6s %10s %7s %7s %17s %17s %8s  %s\n' target "cpu s" executions corpus seeds "replay cov/ft" "final cov/ft" reached result
for t in "${TARGETS[@]}"; do
  bin=$BUILD/bin/$t
  corpus=$BUILD/fuzz-corpus/$t
  seeddir=$BUILD/fuzz-seeds/$t
  saved=$SRC/tests/fuzz/corpus/$t
  out=$BUILD/fuzz-findings/$t
  [ "$KEEP" = 1 ] || rm -rf "$corpus"
  rm -rf "$seeddir" "$out"
  mkdir -p "$corpus" "$seeddir" "$out"
  n_seeds=$(seeds "$t" "$seeddir")
  inputs=("$corpus" "$seeddir")
  [ -d "$saved" ] && inputs+=("$saved")
  log=$out/fuzz.log
  # -timeout: one input running longer is a finding; the outer timeout only guards the run.
  # -print_coverage: the covered functions, to show the parser was reached.
  children_cpu_seconds cpu_before
  if [ "$CPU_LIMIT" -gt 0 ]; then
    run_for_cpu_seconds "$log" "$bin" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -print_coverage=1 -artifact_prefix="$out/" "${inputs[@]}"
    rc=$?
  else
    timeout --kill-after=10 $((TIME * 2 + 120)) "$bin" -max_total_time="$TIME" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -print_coverage=1 -artifact_prefix="$out/" "${inputs[@]}" >"$log" 2>&1
    rc=$?
  fi
  children_cpu_seconds cpu_after
  cpu=$((cpu_after - cpu_before))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  n_corpus=$(find "$corpus" -type f | wc -l)
  replay=$(cov_at INITED "$log")
  final=$(cov_at DONE "$log")
  [ -n "$final" ] || final=$(cov_at '[A-Za-z]*' "$log")  # an interrupted run ends without DONE
  want=$(reached_functions "$t")
  missing=()
  edges=()
  for f in $want; do
    file=${f#*/}; [ "$file" = "$f" ] && file=
    e=$(sed -n -E "s/^COVERED_FUNC: hits: [0-9]+ edges: ([0-9]+\/[0-9]+) ${f%%/*} [^ ]*${file}:.*/\1/p" "$log" | head -1)
    if [ -n "$e" ]; then edges+=("${f%%/*} $e"); else missing+=("$f"); fi
  done
  n_want=$(echo $want | wc -w)
  found=$(find "$out" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  report=$(grep -m1 -E "$SANITIZER_REPORT" "$log")
  if [ -n "$found" ] || [ -n "$report" ]; then
    FINDINGS=$((FINDINGS + 1))
    if [ -n "$found" ]; then
      result="FOUND: $(echo "$found" | xargs -n1 basename | tr '\n' ' ')"
    else
      result="FOUND: sanitizer report (log $log)"
    fi
  elif [ "$rc" -ne 0 ]; then
    BROKEN=$((BROKEN + 1))
    result="FAILED (exit $rc, log $log)"
  elif [ -z "$want" ]; then
    BROKEN=$((BROKEN + 1))
    result="NO PARSER LIST: name its parser's functions in reached_functions"
  elif [ ${#missing[@]} -gt 0 ]; then
    BROKEN=$((BROKEN + 1))
    result="NOT REACHED: ${missing[*]} (log $log)"
  else
    result=ok
  fi
  printf '%-24s %6s %10s %7s %7s %17s %17s %8s  %s\n' "$t" "$cpu" "${execs:-?}" "$n_corpus" "$n_seeds" "${replay:-?}" "${final:-?}" \
    "$((n_want - ${#missing[@]}))/$n_want" "$result"
  [ -n "$report" ] && echo "    $report"
  [ ${#edges[@]} -gt 0 ] && echo "    edges covered: $(printf '%s, ' "${edges[@]}" | sed 's/, $//')"
  if [ "$SAVE" = 1 ] && [ -z "$found" ] && [ -z "$report" ] && [ "$rc" -eq 0 ]; then
    # minimised: of the saved inputs and this run's new ones up to SAVED_MAX_BYTES, only
    # those adding an edge (-use_counters=0: hit-count variety is found again in a few
    # seconds; larger inputs, such as whole model or tokenizer files, come back each run
    # as seeds) so that the saved corpus stays small. libFuzzer names an input by its
    # SHA-1, so one name in both folders is one input: cp -n keeps the first
    merged=$BUILD/fuzz-merge/$t
    small=$BUILD/fuzz-merge/$t.small
    rm -rf "$merged" "$small" && mkdir -p "$merged" "$small" "$saved"
    find "$saved" "$corpus" -type f -size -$((SAVED_MAX_BYTES + 1))c -exec cp -n -t "$small" {} +
    if "$bin" -merge=1 -use_counters=0 -timeout=25 -rss_limit_mb=2048 "$merged" "$small" >"$out/merge.log" 2>&1; then
      rm -f "$saved"/* && cp "$merged"/* "$saved"/ 2>/dev/null
      echo "    saved corpus: $(find "$saved" -type f | wc -l) inputs, $(du -sb "$saved" | cut -f1) bytes in ${saved#"$SRC"/}"
    else
      echo "    merge failed (log $out/merge.log)"; BROKEN=$((BROKEN + 1))
    fi
  fi
done
if [ "$FINDINGS" -gt 0 ]; then
  echo "fuzz.sh: findings in $FINDINGS of ${#TARGETS[@]} targets (inputs and logs in $BUILD/fuzz-findings/)"
  exit 1
fi
if [ "$BROKEN" -gt 0 ]; then
  echo "fuzz.sh: $BROKEN of ${#TARGETS[@]} targets did not run cleanly"
  exit 2
fi
if [ "$CPU_LIMIT" -gt 0 ]; then
  echo "fuzz.sh: ${#TARGETS[@]} targets, ${CPU_LIMIT} CPU seconds each, no findings"
else
  echo "fuzz.sh: ${#TARGETS[@]} targets, ${TIME} s each, no findings"
fi
