#!/usr/bin/env bash
# Runs every libFuzzer target of the project for a given time each and reports findings.
#
#     scripts/fuzz.sh [--time SECONDS] [--build-dir DIR] [--keep-corpus] [TARGET...]
#
# Configures a clang build with -DDSV_FUZZ=ON (default build-fuzz/ beside the sources),
# finds every fuzz-* target the CMake files define (tests/*.cmake under if(DSV_FUZZ)),
# builds them, and runs each for SECONDS (default 60) on a corpus kept in
# DIR/fuzz-corpus/TARGET, seeded from tests/fuzz/TARGET.seeds/ and from the shared
# fixtures where they fit. Inputs that crash, leak, hang or run out of memory are saved in
# DIR/fuzz-findings/TARGET/ (libFuzzer's crash-*, leak-*, timeout-*, oom-* files) with the
# run's log; the script prints one line per target and exits 1 if anything was found
# (2 if a target could not be built or run). Reproduce a finding with
#     DIR/bin/TARGET DIR/fuzz-findings/TARGET/crash-...
# Without --keep-corpus the corpus starts from the seeds each run (what CI does).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
TIME=60
BUILD=$SRC/build-fuzz
KEEP=0
WANT=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) TIME=$2; shift 2 ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
    --keep-corpus) KEEP=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; exit 2 ;;
    *) WANT+=("$1"); shift ;;
  esac
done
case "$TIME" in ''|*[!0-9]*) echo "fuzz.sh: --time wants whole seconds" >&2; exit 2 ;; esac
command -v clang >/dev/null || { echo "fuzz.sh: clang is missing (scripts/bootstrap.sh --with-tests)" >&2; exit 2; }
FIX=${DSV_FIXTURES:-$(realpath -m "$SRC/../shared/fixtures")}
export DSV_FIXTURES=$FIX

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
    fuzz-hfconfig-header)
      for f in "$FIX"/models/*/config.json; do [ -f "$f" ] && cp "$f" "$d/$(basename "$(dirname "$f")").json"; done ;;
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
      printf '%s' '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"temperature":0.7,"top_p":0.9,"stop":["\n"],"seed":3}' >"$d/chat.json" ;;
    fuzz-load-sse)
      printf '%s' $'\x20data: {"choices":[{"text":"hi","finish_reason":null}]}\n\ndata: {"error":{"message":"m","type":"server_error","code":"worker_lost"}}\r\n\r\n: c\ndata: [DONE]\n\n' >"$d/stream.txt" ;;
  esac
  i=$(find "$d" -type f | wc -l)
  echo "$i"
}

FINDINGS=0; BROKEN=0
printf '%-28s %12s %8s %8s  %s\n' target executions corpus seeds result
for t in "${TARGETS[@]}"; do
  bin=$BUILD/bin/$t
  corpus=$BUILD/fuzz-corpus/$t
  seeddir=$BUILD/fuzz-seeds/$t
  out=$BUILD/fuzz-findings/$t
  [ "$KEEP" = 1 ] || rm -rf "$corpus"
  rm -rf "$seeddir" "$out"
  mkdir -p "$corpus" "$seeddir" "$out"
  n_seeds=$(seeds "$t" "$seeddir")
  log=$out/fuzz.log
  # -timeout: one input running longer is a finding; the outer timeout only guards the run
  timeout --kill-after=10 $((TIME * 2 + 120)) "$bin" -max_total_time="$TIME" -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/" "$corpus" "$seeddir" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  n_corpus=$(find "$corpus" -type f | wc -l)
  found=$(find "$out" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  if [ -n "$found" ]; then
    FINDINGS=$((FINDINGS + 1))
    result="FOUND: $(echo "$found" | xargs -n1 basename | tr '\n' ' ')"
  elif [ "$rc" -ne 0 ]; then
    BROKEN=$((BROKEN + 1))
    result="FAILED (exit $rc, log $log)"
  else
    result=ok
  fi
  printf '%-28s %12s %8s %8s  %s\n' "$t" "${execs:-?}" "$n_corpus" "$n_seeds" "$result"
  if [ -n "$found" ] || [ "$rc" -ne 0 ]; then
    grep -m1 -E "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:" "$log" | sed 's/^/    /'
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
echo "fuzz.sh: ${#TARGETS[@]} targets, ${TIME} s each, no findings"
