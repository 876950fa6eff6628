#!/usr/bin/env bash
# dsvisor-bench spec end to end on a one-layer preset and the bundled model, a few
# passages: the JSON has verify_cost for k = 1..4, acceptance and speedup for ngram,
# mtp (the bundled model has an MTP module) and draft (the bundled model in int8 as
# --draft-model), the three tasks with each method's drafts,
# and no request whose tokens differ between the plain and a speculative worker (the
# draft model on the sampled task excepted: same distribution, other draws); without
# --held-out it says what to give. No timing is asserted. The worker drafts where its
# measured costs say drafting pays, and otherwise only in its probes after plain
# stretches, so each task has six passages: enough probes that every method drafts.
set -u
bench=${DSV_BUILD_DIR:?}/bin/dsvisor-bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DSV_CACHE_DIR=$work/cache
fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
cat >"$work/text.txt" <<'TXT'
And I saw a new heaven and a new earth: for the first heaven and the first earth were passed away; and there was no more sea.
And I John saw the holy city, new Jerusalem, coming down from God out of heaven, prepared as a bride adorned for her husband.
And he that sat upon the throne said, Behold, I make all things new. And he said unto me, Write: for these words are true and faithful.
And he said unto me, It is done. I am Alpha and Omega, the beginning and the end. I will give unto him that is athirst of the fountain of the water of life freely.
He that overcometh shall inherit all things; and I will be his God, and he shall be my son.
And the city had no need of the sun, neither of the moon, to shine in it: for the glory of God did lighten it, and the Lamb is the light thereof.
TXT
args=(spec --preset deepseek-coder-1.3b --layers 1 --format int4 --threads 1
      --serve-model "${DSV_SOURCE_DIR:?}/models/default" --passages 6 --max-tokens 24)
"${DSV_BUILD_DIR}/bin/dsvisor" convert --model-path "${DSV_SOURCE_DIR}/models/default" --output-dir "$work/draft" \
  --quant-format int8 >"$work/convert.log" 2>&1 || bad "converting the draft model: $(tail -3 "$work/convert.log")"
if ! "$bench" "${args[@]}" --draft-model "$work/draft/model.dse" --held-out "$work/text.txt" --json \
  >"$work/out.json" 2>"$work/err"; then
  bad "exit $?: $(tail -5 "$work/err")"
fi
python3 - "$work/out.json" <<'PY' || bad "JSON keys or values: $(cat "$work/out.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["bench"] == "spec" and o["preset"] == "deepseek-coder-1.3b", o
assert set(o["verify_cost"]) == {"1", "2", "3", "4"} and all(v > 0 for v in o["verify_cost"].values())
assert set(o["serve_model_verify_cost"]) == {"1", "2", "3", "4"}
assert 0 <= o["acceptance"]["ngram"] <= 1 and o["speedup"]["ngram"] > 0
assert 0 < o["acceptance"]["mtp"] <= 1 and o["speedup"]["mtp"] > 0
assert set(o["tasks"]) == {"held_out", "held_out_sampled", "echo"}
assert all(t["draft_tokens"] > 0 for t in o["tasks"].values()), o["tasks"]
assert all(t["mtp"]["draft_tokens"] > 0 for t in o["tasks"].values()), o["tasks"]
assert 0 < o["acceptance"]["draft"] <= 1 and o["speedup"]["draft"] > 0
assert all(t["draft"]["draft_tokens"] > 0 for t in o["tasks"].values()), o["tasks"]
assert o["outputs_differ"] == 0 and o["passages"] == 6
PY
if "$bench" "${args[@]}" >/dev/null 2>"$work/err2"; then bad "no --held-out: exit 0"; fi
grep -q -- "--held-out" "$work/err2" || bad "no --held-out: message: $(cat "$work/err2")"
[ "$fail" = 0 ] && echo "ok: dsvisor-bench spec" || exit 1
