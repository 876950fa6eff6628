#!/usr/bin/env bash
# Soak (not in CI): dsvisor start under moderate open-loop load for a long
# time, sampling every worker's and the supervisor's RSS (all, and anonymous only: a leak
# shows there, code paged in does not) and open fds, and every instance's KV blocks in use
# (the gateway's /metrics, from the workers' stats). At the end it fits a least-squares
# line to each series (after the first 10% of samples: warm-up) and reports its slope per
# hour: a leak shows as a steady climb, so each slope must stay under --max-growth per
# hour, as a fraction of the series' first value (RSS, fds) or of the instance's KV pool
# (KV blocks), or the script exits 1. After the load has ended and in-flight requests
# have drained, every instance must be back at 0 KV blocks in use.
#
#   bench/soak.sh [--minutes 30] [--qps 4] [--interval 10] [--instances 2] [--threads 1]
#                 [--model M] [--worker PATH] [--max-tokens 32] [--build-dir DIR]
#                 [--max-growth 0.05] [--out DIR]
#
# The samples go to OUT/samples.csv (t_s, series, value), the load's JSON to
# OUT/load.json and the report to OUT/report.txt; OUT defaults to a new /tmp/dsv-soak.*
# folder, kept. Restarted workers start a new series (their pid is in its name); a restart
# is itself reported.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=30 QPS=4 INTERVAL=10 INSTANCES=2 THREADS=1 MODEL= WORKER= MAX_TOKENS=32 BUILD=$SRC/build MAX_GROWTH=0.05 OUT=
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES=$2 ;; --qps) QPS=$2 ;; --interval) INTERVAL=$2 ;; --instances) INSTANCES=$2 ;; --threads) THREADS=$2 ;;
    --model) MODEL=$2 ;; --worker) WORKER=$2 ;; --max-tokens) MAX_TOKENS=$2 ;; --build-dir) BUILD=$2 ;;
    --max-growth) MAX_GROWTH=$2 ;; --out) OUT=$2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
B=$BUILD/bin
. "$SRC/bench/start-dsvisor.sh"
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

args=(--instances "$INSTANCES" --threads-per-instance "$THREADS" --port 0)
[ -n "$MODEL" ] && args+=(--model "$MODEL")
[ -n "$WORKER" ] && args+=(--worker "$WORKER")
start_dsvisor soak.sh "${args[@]}"
echo "soak: dsvisor pid $SUP on port $PORT, $INSTANCES instances of $THREADS threads; $MINUTES min at $QPS QPS; samples every $INTERVAL s in $OUT" | tee "$OUT/report.txt"
echo "soak: started $(date -u +%FT%TZ) on $(uname -n), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/report.txt"

"$B/dsvisor-bench-load" --url "http://127.0.0.1:$PORT" --qps "$QPS" --duration $((MINUTES * 60)) --stream \
  --max-tokens "$MAX_TOKENS" --prompt-len uniform:8:64 --json >"$OUT/load.json" 2>"$OUT/load.err" &
LOADPID=$!

# sample T: one line per series into samples.csv
sample() {
  local t=$1 p
  for p in $SUP $(python3 -c "import json; print(' '.join(str(i['pid']) for i in json.load(open('$RUN/status.json'))['instances'] if i['pid'] > 0))"); do
    local name=worker-$p
    [ "$p" = "$SUP" ] && name=supervisor
    local rss anon; rss=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$p/status" 2>/dev/null) || continue
    anon=$(awk '/^RssAnon:/ {print $2 * 1024}' "/proc/$p/status" 2>/dev/null)
    [ -n "$rss" ] || continue
    echo "$t,$name.rss_bytes,$rss"
    [ -n "$anon" ] && echo "$t,$name.rss_anon_bytes,$anon"
    echo "$t,$name.open_fds,$(ls "/proc/$p/fd" 2>/dev/null | wc -l)"
  done
  kv_sample "$t"
}
kv_sample() {  # kv_sample T: KV blocks in use and the pool size per instance, from /metrics
  curl -s -m 5 "http://127.0.0.1:$PORT/metrics" |
    awk -v t="$1" '$1 ~ /^dsvisor_kv_blocks_(used|capacity)\{/ {
      n = $1; sub(/^dsvisor_/, "", n); i = n; sub(/\{.*/, "", n)
      sub(/.*instance="/, "", i); sub(/".*/, "", i)
      print t ",kv-" i "." n "," $2 }'
}
echo "t_s,series,value" >"$OUT/samples.csv"
t0=$SECONDS
while kill -0 "$LOADPID" 2>/dev/null; do
  dsvisor_status && sample $((SECONDS - t0)) >>"$OUT/samples.csv"
  printf '\rsoak: %d / %d s' $((SECONDS - t0)) $((MINUTES * 60)) >&2
  sleep "$INTERVAL"
done
echo >&2
wait "$LOADPID"; LOADPID=
# idle: the load has ended; wait (up to 60 s) for the workers' stats to show every KV block free
: >"$RUN/idle.csv"
for _ in $(seq 60); do
  sleep 1
  kv_sample idle >"$RUN/idle.csv"
  [ -s "$RUN/idle.csv" ] && ! awk -F, '$2 ~ /kv_blocks_used$/ && $3 != 0 {exit 1}' "$RUN/idle.csv" && break
done
dsvisor_status && restarts=$(python3 -c "import json; print(sum(i['restarts'] for i in json.load(open('$RUN/status.json'))['instances']))")

python3 - "$OUT/samples.csv" "$OUT/load.json" "$MAX_GROWTH" "${restarts:-?}" "$RUN/idle.csv" <<'PY' 2>&1 | tee -a "$OUT/report.txt"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
idle = [l.strip().split(",") for l in open(sys.argv[5]) if l.strip()]
load = json.load(open(sys.argv[2]))
max_growth = float(sys.argv[3])
series = {}
for r in rows:
    series.setdefault(r["series"], []).append((float(r["t_s"]), float(r["value"])))
print("load: sent %d completed %d errors %d lost %d, %.2f QPS, p99 %s s; worker restarts %s"
      % (load["sent"], load["completed"], load["errors"], load["lost"], load["qps"], load["p99_s"], sys.argv[4]))
if not any(s.endswith("kv_blocks_used") for s in series):
    print("KV blocks: not measured (the gateway's /metrics exports no dsvisor_kv_blocks_used series)")
def fit(pts):
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    return (sum((t - mt) * (v - mv) for t, v in pts) / var if var else 0.0), mv
print("%-36s %7s %12s %12s %12s %14s %9s %7s" % ("series", "samples", "first", "last", "mean", "slope per hour", "of base", "verdict"))
bad = 0
for name, pts in sorted(series.items()):
    if name.endswith("kv_blocks_capacity"):
        continue
    n = len(pts)
    if n < 3:
        continue
    pts = pts[n // 10:]  # the first 10% of samples are warm-up
    slope, mean = fit(pts)
    per_h = slope * 3600
    if name.endswith("kv_blocks_used"):  # relative to the instance's pool: 0 blocks is a valid start
        cap = series.get(name[:-len("used")] + "capacity", [(0, 0.0)])
        base = max(max(v for _, v in cap), 1.0)
    else:
        base = max(pts[0][1], 1.0)
    ok = per_h <= max_growth * base
    bad += not ok
    print("%-36s %7d %12.0f %12.0f %12.1f %+14.1f %+8.2f%% %7s" % (name, len(pts), pts[0][1], pts[-1][1], mean, per_h,
                                                               100 * per_h / base, "flat" if ok else "GROWS"))
idle_used = [(r[1], float(r[2])) for r in idle if r[1].endswith("kv_blocks_used")]
idle_ok = bool(idle_used) and all(v == 0 for _, v in idle_used)
print("KV blocks in use once idle after the load: %s" % (", ".join("%s %d" % (n.split(".")[0], v) for n, v in idle_used) or "not measured"))
if not idle_used:
    idle_ok = not any(s.endswith("kv_blocks_used") for s in series)
ok = bad == 0 and load["lost"] == 0 and idle_ok
print("soak: %s" % ("flat, nothing lost, KV pool empty when idle" if ok else
                    "%d series grow faster than %.0f%%/h of their base, %d lost, KV empty when idle: %s"
                    % (bad, max_growth * 100, load["lost"], "yes" if idle_ok else "NO")))
sys.exit(0 if ok else 1)
PY
