#!/usr/bin/env bash
# dsvisor-bench end to end on a small copy of a preset (deepseek-coder-1.3b, one layer):
# the generated file is a valid native model (`dsvisor verify` checks every CRC), it is
# cached (a second run does not regenerate it), `model --json` prints every key of
# the results page with sane values, `weights` runs both activation paths, and
# `model --threads 1,2` prints the thread-scaling figures. No timing is
# asserted: speed is what bench/RESULTS.md records, not what a test can check on a shared box.
set -u
bench=${DSV_BUILD_DIR:?}/bin/dsvisor-bench
dsvisor=${DSV_BUILD_DIR:?}/bin/dsvisor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DSV_CACHE_DIR=$work/cache
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
args=(--preset deepseek-coder-1.3b --layers 1 --threads 2 --prefill 8,33 --decode 3 --batches 1,2)

for fmt in int4 int8 bf16; do
  if "$bench" model "${args[@]}" --format "$fmt" --json >"$work/$fmt.json" 2>"$work/$fmt.err"; then ok; else bad "$fmt: exit $?: $(cat "$work/$fmt.err")"; fi
  grep -q generating "$work/$fmt.err" && ok || bad "$fmt: first run did not generate the model"
  f=$(ls "$DSV_CACHE_DIR"/bench/deepseek-coder-1.3b-"$fmt"-*-L1-v*.dse 2>/dev/null | head -1)
  if [ -n "$f" ] && "$dsvisor" verify "$f" >/dev/null 2>"$work/verify.err"; then ok; else bad "$fmt: verify '$f': $(cat "$work/verify.err" 2>/dev/null)"; fi
  python3 - "$work/$fmt.json" "$fmt" <<'PY' && ok || bad "$fmt: JSON keys or values"
import json, sys
o = json.load(open(sys.argv[1]))
need = ["preset", "format", "threads", "layers", "load_s", "rss_bytes", "bytes_per_token",
        "read_bw_bytes_per_s", "prefill_tok_s", "decode_tok_s", "roofline"]
missing = [k for k in need if k not in o]
assert not missing, missing
assert o["preset"] == "deepseek-coder-1.3b" and o["format"] == sys.argv[2] and o["layers"] == 1 and o["threads"] == 2
assert set(o["prefill_tok_s"]) == {"8", "33"} and set(o["decode_tok_s"]) == {"1", "2"}
assert all(v > 0 for v in list(o["prefill_tok_s"].values()) + list(o["decode_tok_s"].values()))
# no bound on the ratios themselves: they are speed, which benchmarks judge, and a
# CPU-starved probe can read slower than the decode it is paired with
assert o["read_bw_bytes_per_s"] > 1e8 and o["roofline"] > 0
# the roofline's bandwidth is the probe paired with batch 1's steps; roofline_best sets
# the same decode against the best single pass: both by the issue's formula
assert o["read_bw_best_bytes_per_s"] > 1e8 and o["roofline_best"] > 0
tps = o["decode_tok_s"]["1"] * o["bytes_per_token"]
assert abs(o["roofline"] - tps / o["read_bw_bytes_per_s"]) < 1e-3, o
assert abs(o["roofline_best"] - tps / o["read_bw_best_bytes_per_s"]) < 1e-3, o
# the paired probe reads where a token reads: not the embedding (a third of this file's
# weights, one row a token), and no experts in a dense model
mix = o["probe_mix"]
assert mix["unread"] < 0.02 and mix["experts"] == 0, mix
# batch-1 steps: the fastest no slower than the median nor than the mean (1 / tok/s)
st = o["decode_step_ms_b1"]
assert 0 < st["min"] <= st["median"], st
assert st["min"] <= 1e3 / o["decode_tok_s"]["1"] * 1.001, (st, o["decode_tok_s"])
# one layer: q k v o (2048x2048 each) + gate up down (5504x2048) + lm_head (32256x2048),
# at 0.5 / 1 / 2 bytes per weight plus scales: between 0.5x and 2.5x that count
n = 4 * 2048 * 2048 + 3 * 5504 * 2048 + 32256 * 2048
per = {"int4": 0.5, "int8": 1.0, "bf16": 2.0}[sys.argv[2]]
assert n * per < o["bytes_per_token"] < n * per * 1.25, (o["bytes_per_token"], n * per)
assert o["rss_bytes"] > o["weight_bytes"] * 0.5
# how much of the measuring the host took: CPU share and weights read back from disk
assert 0 < o["cpu_share"] <= 1.05 and isinstance(o["major_faults"], int) and o["major_faults"] >= 0, o
PY
done
"$bench" model "${args[@]}" --format int8 --json >/dev/null 2>"$work/again.err" || bad "second run: $(cat "$work/again.err")"
grep -q generating "$work/again.err" && bad "second run regenerated the cached model" || ok
for fmt in int4 int8 bf16; do
  if "$bench" weights --preset deepseek-coder-1.3b --layers 1 --threads 2 --format "$fmt" --batches 1,3 --json >"$work/w.json" 2>"$work/w.err"; then ok; else bad "weights $fmt: $(cat "$work/w.err")"; fi
  python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
assert o["matrices"] == 8 and len(o["passes"]) == 2, o
for p in o["passes"]:
    assert p["f32act_s"] > 0
    assert (p["xq_s"] > 0) == (sys.argv[2] != "bf16")
' "$work/w.json" "$fmt" && ok || bad "weights $fmt JSON: $(cat "$work/w.json")"
done
# --shmem: the weights copied into a shmem memfd, as the supervisor serves them without HugePages
if "$bench" model "${args[@]}" --format int4 --shmem --json >"$work/shmem.json" 2>"$work/shmem.err"; then ok; else bad "--shmem: $(cat "$work/shmem.err")"; fi
python3 -c '
import json, sys
o, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert o["weights_in"] == "shmem" and o["hugepages"] is False and 0 <= o["pmd_share"] <= 1, o
assert f["weights_in"] == "file" and o["bytes_per_token"] == f["bytes_per_token"] and o["roofline"] > 0, (o, f)
' "$work/shmem.json" "$work/int4.json" && ok || bad "--shmem JSON: $(cat "$work/shmem.json")"
# --threads 1,2 (bench/thread_scaling.c) on a two-layer V2-Lite (layer 1 is MoE): each
# count's tok/s and read bandwidth per round, the ratio medians, and the pool's calls by
# label, the three MoE regions once per step among them, with idle, imbalance, absent and
# woken shares in [0, 1] and the serial part; a thread list is refused by `weights`.
targs=(--preset deepseek-v2-lite --layers 2 --format int4 --decode 3 --rounds 2)
if "$bench" model "${targs[@]}" --threads 1,2 --json >"$work/threads.json" 2>"$work/threads.err"; then ok; else bad "--threads 1,2: exit $?: $(tail -5 "$work/threads.err")"; fi
python3 - "$work/threads.json" <<'PY' && ok || bad "--threads 1,2 JSON keys or values: $(cat "$work/threads.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["mode"] == "thread_scaling" and o["rounds"] == 2 and o["steps"] == 3, o
assert [c["threads"] for c in o["counts"]] == [1, 2], o["counts"]
assert 0 < o["amdahl_serial_fraction"] < 1 and o["core0_threads"] >= 0, o
for c in o["counts"]:
    assert len(c["decode_tok_s"]) == 2 and all(v > 0 for v in c["decode_tok_s"]), c
    assert len(c["read_bw_bytes_per_s"]) == 2 and all(v > 1e8 for v in c["read_bw_bytes_per_s"]), c
    assert c["decode_ratio_median"] > 0 and c["read_ratio_median"] > 0, c
    assert 0 < c["main_cpu_us"] and 0 < c["serial_cpu_us"] < c["main_cpu_us"] * 1.01, c
    calls = {p["label"]: p for p in c["calls"]}
    for label in ("moe: router, shared gate/up", "moe: shared down, routed gate/up", "moe: routed down"):
        assert calls[label]["calls_per_step"] == 1, (label, calls)
    assert calls["lm head"]["calls_per_step"] >= 1 and "attention: o_proj" in calls, calls
    for p in c["calls"]:
        assert all(0 <= p[k] <= 1 for k in ("idle", "imbalance", "absent", "woken")), p
        assert p["wall_us"] > 0 and p["task_cpu_us"] >= 0 and p["start_delay_us"] >= 0, p
    if c["threads"] == 1:
        assert c["decode_ratio_median"] == 1 and all(p["absent"] == 0 for p in c["calls"]), c
PY
"$bench" weights "${targs[@]}" --threads 1,2 >/dev/null 2>&1 && bad "weights accepted a thread list" || ok
"$bench" model "${targs[@]}" --threads 1,2 --depth 64 >/dev/null 2>&1 && bad "a thread list took --depth, which it ignores" || ok
"$bench" model --preset nope --format int4 >/dev/null 2>&1 && bad "unknown preset accepted" || ok
"$bench" model --preset deepseek-coder-1.3b --format int3 >/dev/null 2>&1 && bad "unknown format accepted" || ok
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
