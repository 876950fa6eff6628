#!/usr/bin/env bash
# dsvisor-bench model --threads 1,2 end to end on a two-layer V2-Lite (layer 1 is MoE): the
# JSON has each count's tok/s and read bandwidth per round, the ratio medians, and the
# pool's calls by label, the three MoE regions once per step among them, with idle,
# imbalance and absent shares in [0, 1] and the serial part; a thread list is refused
# where it has no meaning (weights). No timing is asserted.
set -u
bench=${DSV_BUILD_DIR:?}/bin/dsvisor-bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DSV_CACHE_DIR=$work/cache
fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
args=(--preset deepseek-v2-lite --layers 2 --format int4 --decode 3 --rounds 2)
if ! "$bench" model "${args[@]}" --threads 1,2 --json >"$work/out.json" 2>"$work/err"; then
  bad "exit $?: $(tail -5 "$work/err")"
fi
python3 - "$work/out.json" <<'PY' || bad "JSON keys or values: $(cat "$work/out.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["mode"] == "thread_scaling" and o["rounds"] == 2 and o["steps"] == 3, o
assert [c["threads"] for c in o["counts"]] == [1, 2], o["counts"]
assert 0 < o["amdahl_serial_fraction"] < 1, o
assert o["core0_threads"] >= 0, o
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
        assert all(0 <= p[k] <= 1 for k in ("idle", "imbalance", "absent")), p
        assert p["wall_us"] > 0 and p["task_cpu_us"] >= 0, p
        assert p["start_delay_us"] >= 0 and 0 <= p["woken"] <= 1, p
    if c["threads"] == 1:
        assert c["decode_ratio_median"] == 1 and all(p["absent"] == 0 for p in c["calls"]), c
PY
"$bench" weights --preset deepseek-v2-lite --layers 2 --format int4 --threads 1,2 >/dev/null 2>&1 &&
  bad "weights accepted a thread list"
[ "$fail" = 0 ] && echo "ok: dsvisor-bench model --threads 1,2" || exit 1
