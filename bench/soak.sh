#!/usr/bin/env bash
# Soak (issue 9 item 4; not in CI): dsvisor start under moderate open-loop load for a long
# time, sampling every worker's and the supervisor's RSS and open fds, and the KV blocks in
# use when /metrics exports them. At the end it fits a least-squares line to each series
# and reports its slope per hour and the change over the run: a leak shows as a steady
# climb, so each slope must stay under --max-growth (fraction of the starting value per
# hour, default 0.05) or the script exits 1.
#
#   bench/soak.sh [--minutes 30] [--qps 4] [--interval 10] [--instances 2]
#                 [--model M] [--worker PATH] [--max-tokens 32] [--build-dir DIR]
#                 [--max-growth 0.05] [--out DIR]
#
# The samples go to OUT/samples.csv (t_s, series, value) and the load's JSON to
# OUT/load.json; OUT defaults to a new /tmp/dsv-soak.* folder, kept. Restarted workers
# start a new series (their pid is in its name); a restart is itself reported.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=30 QPS=4 INTERVAL=10 INSTANCES=2 MODEL= WORKER= MAX_TOKENS=32 BUILD=$SRC/build MAX_GROWTH=0.05 OUT=
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES=$2 ;; --qps) QPS=$2 ;; --interval) INTERVAL=$2 ;; --instances) INSTANCES=$2 ;;
    --model) MODEL=$2 ;; --worker) WORKER=$2 ;; --max-tokens) MAX_TOKENS=$2 ;; --build-dir) BUILD=$2 ;;
    --max-growth) MAX_GROWTH=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
B=$BUILD/bin
for f in "$B/dsvisor" "$B/dsvisor-bench-load"; do [ -x "$f" ] || { echo "soak.sh: $f is not built" >&2; exit 2; }; done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/dsv-soak.XXXXXX)
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/dsv-soak-run.XXXXXX)
SUP= LOADPID=
cleanup() {
  [ -n "$LOADPID" ] && kill "$LOADPID" 2>/dev/null
  [ -n "$SUP" ] && { "$B/dsvisor" stop --runtime-dir "$RUN/run" --wait-ms 30000 >/dev/null 2>&1 || kill -9 "$SUP"; }
  wait 2>/dev/null
  rm -rf "$RUN"
}
trap cleanup EXIT

args=(--instances "$INSTANCES" --port 0 --runtime-dir "$RUN/run")
[ -n "$MODEL" ] && args+=(--model "$MODEL")
[ -n "$WORKER" ] && args+=(--worker "$WORKER")
"$B/dsvisor" start "${args[@]}" >"$OUT/supervisor.log" 2>&1 &
SUP=$!
status() { "$B/dsvisor" status --json --runtime-dir "$RUN/run" >"$RUN/status.json" 2>/dev/null; }
for _ in $(seq 600); do
  status && python3 -c "import json,sys; j=json.load(open('$RUN/status.json')); sys.exit(0 if j['instances_ready'] == j['instances_total'] else 1)" && break
  kill -0 "$SUP" 2>/dev/null || { echo "soak.sh: the supervisor exited"; tail "$OUT/supervisor.log"; exit 1; }
  sleep 0.2
done
PORT=$(python3 -c "import json; print(json.load(open('$RUN/status.json'))['port'])")
echo "soak: dsvisor pid $SUP on port $PORT, $INSTANCES instances; $MINUTES min at $QPS QPS; samples every $INTERVAL s in $OUT"

"$B/dsvisor-bench-load" --url "http://127.0.0.1:$PORT" --qps "$QPS" --duration $((MINUTES * 60)) --stream \
  --max-tokens "$MAX_TOKENS" --prompt-len uniform:8:64 --json >"$OUT/load.json" 2>"$OUT/load.err" &
LOADPID=$!

# sample T: one line per series into samples.csv
sample() {
  local t=$1 p
  for p in $SUP $(python3 -c "import json; print(' '.join(str(i['pid']) for i in json.load(open('$RUN/status.json'))['instances'] if i['pid'] > 0))"); do
    local name=worker-$p
    [ "$p" = "$SUP" ] && name=supervisor
    local rss; rss=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$p/status" 2>/dev/null) || continue
    [ -n "$rss" ] || continue
    echo "$t,$name.rss_bytes,$rss"
    echo "$t,$name.open_fds,$(ls "/proc/$p/fd" 2>/dev/null | wc -l)"
  done
  curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | awk -v t="$t" '$1 ~ /kv_blocks_used/ {gsub(/[{}",=]/, "_", $1); print t "," $1 "," $2}'
}
echo "t_s,series,value" >"$OUT/samples.csv"
t0=$SECONDS
while kill -0 "$LOADPID" 2>/dev/null; do
  status && sample $((SECONDS - t0)) >>"$OUT/samples.csv"
  printf '\rsoak: %d / %d s' $((SECONDS - t0)) $((MINUTES * 60)) >&2
  sleep "$INTERVAL"
done
echo >&2
wait "$LOADPID"; LOADPID=
status && restarts=$(python3 -c "import json; print(sum(i['restarts'] for i in json.load(open('$RUN/status.json'))['instances']))")

python3 - "$OUT/samples.csv" "$OUT/load.json" "$MAX_GROWTH" "${restarts:-?}" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
load = json.load(open(sys.argv[2]))
max_growth = float(sys.argv[3])
series = {}
for r in rows:
    series.setdefault(r["series"], []).append((float(r["t_s"]), float(r["value"])))
print("load: sent %d completed %d errors %d lost %d, %.2f QPS, p99 %s s; worker restarts %s"
      % (load["sent"], load["completed"], load["errors"], load["lost"], load["qps"], load["p99_s"], sys.argv[4]))
if not any("kv_blocks_used" in s for s in series):
    print("KV blocks: not measured (the gateway's /metrics exports no kv_blocks_used series)")
print("%-40s %8s %14s %14s %16s %9s" % ("series", "samples", "first", "last", "slope per hour", "verdict"))
bad = 0
for name, pts in sorted(series.items()):
    n = len(pts)
    if n < 3:
        continue
    # least squares over the second half of a warm-up: skip the first 10% of samples
    pts = pts[n // 10:]
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (v - mv) for t, v in pts) / var if var else 0.0
    per_h = slope * 3600
    base = max(pts[0][1], 1.0)
    ok = per_h <= max_growth * base
    bad += not ok
    print("%-40s %8d %14.0f %14.0f %+16.1f %9s" % (name, n, pts[0][1], pts[-1][1], per_h, "flat" if ok else "GROWS"))
ok = bad == 0 and load["lost"] == 0
print("soak: %s" % ("flat, nothing lost" if ok else "%d series grow faster than %.0f%%/h, %d lost" % (bad, max_growth * 100, load["lost"])))
sys.exit(0 if ok else 1)
PY
