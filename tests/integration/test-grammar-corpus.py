#!/usr/bin/env python3
"""Runs `dsvisor grammar --check` over the JSON Schema corpus (fixtures/json-schema, read
in place) and reports per dataset: schemas, schemas compiled, instances judged right,
validation errors (a valid instance rejected) and invalidation errors (an invalid one
accepted). Fails on any validation or invalidation error among the schemas that
compile, except the instances listed with their reason in KNOWN (tests/grammar-corpus.known:
"file<TAB>test description<TAB>why"); a listed instance that is judged right again fails
too, so the list never goes stale. A schema the compiler refuses is a compile error,
reported by keyword.

  test-grammar-corpus.py TOKENIZER_FILE KNOWN     (env: DSV_FIXTURES, DSV_BUILD_DIR)
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile


def main():
    tokenizer = sys.argv[1]
    known = {}
    with open(sys.argv[2], encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                file, desc, why = line.rstrip("\n").split("\t")
                known[(file, desc)] = why
    known_seen = set()
    fixtures = os.environ.get("DSV_FIXTURES", "")
    corpus = os.path.join(fixtures, "json-schema", "schemas")
    dsvisor = os.path.join(os.environ.get("DSV_BUILD_DIR", "build"), "bin", "dsvisor")
    if not os.path.isdir(corpus) or not os.path.exists(tokenizer):
        print(f"skip: no corpus at {corpus} or no tokenizer {tokenizer}")
        return 77
    stats = collections.defaultdict(lambda: collections.Counter())
    refused = collections.Counter()
    wrong = []
    for name in sorted(os.listdir(corpus)):
        if not name.endswith(".json"):
            continue
        dataset = name.split("---")[0] if "---" in name else re.sub(r"_\d+\.json$", "", name)
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            doc = json.load(f)
        tests = doc["tests"]
        st = stats[dataset]
        st["schemas"] += 1
        st["instances"] += len(tests)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
            json.dump(doc["schema"], tmp)
        try:
            lines = "".join(json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False) + "\n" for t in tests)
            p = subprocess.run([dsvisor, "grammar", "--schema", tmp.name, "--tokenizer", tokenizer, "--check",
                                "--json"], input=lines.encode(), capture_output=True, timeout=600)
        finally:
            os.unlink(tmp.name)
        out = p.stdout.decode().splitlines()
        if p.returncode == 2:
            msg = json.loads(out[0])["error"] if out else p.stderr.decode()
            kw = re.match(r"'([^']*)'", msg)
            refused[kw.group(1) if kw else msg] += 1
            continue
        if p.returncode != 0 or len(out) != len(tests):
            print(f"FAIL {name}: dsvisor grammar exited {p.returncode}: {p.stderr.decode().strip()}")
            st["crashes"] += 1
            continue
        st["compiled"] += 1
        st["compiled_instances"] += len(tests)
        for t, line in zip(tests, out):
            accept = json.loads(line)["accept"]
            if (name, t["description"]) in known:
                known_seen.add((name, t["description"]))
                if accept == t["valid"]:
                    wrong.append(f"listed in KNOWN but judged right now: {name}: {t['description']}")
                    st["stale_known"] += 1
                else:
                    st["known_wrong"] += 1
                    print(f"known: {name}: {t['description']}: {known[(name, t['description'])]}")
            elif accept == t["valid"]:
                st["right"] += 1
            elif t["valid"]:
                st["validation_errors"] += 1
                wrong.append(f"validation error (valid instance rejected): {name}: {t['description']}: {line}")
            else:
                st["invalidation_errors"] += 1
                wrong.append(f"invalidation error (invalid instance accepted): {name}: {t['description']}")
    total = collections.Counter()
    print(f"{'dataset':28} {'schemas':>7} {'compiled':>8} {'instances':>9} {'right':>6} {'valErr':>6} {'invalErr':>8}")
    for ds, st in sorted(stats.items()):
        total.update(st)
        print(f"{ds:28} {st['schemas']:7} {st['compiled']:8} {st['compiled_instances']:9} {st['right']:6} "
              f"{st['validation_errors']:6} {st['invalidation_errors']:8}")
    print(f"{'total':28} {total['schemas']:7} {total['compiled']:8} {total['compiled_instances']:9} "
          f"{total['right']:6} {total['validation_errors']:6} {total['invalidation_errors']:8}")
    print("compile errors by keyword: " + ", ".join(f"{k} {n}" for k, n in refused.most_common()))
    for w in wrong:
        print(w)
    for k in sorted(set(known) - known_seen):
        wrong.append(f"listed in KNOWN but not judged (schema refused or gone): {k[0]}: {k[1]}")
    failed = total["validation_errors"] + total["invalidation_errors"] + total["crashes"] + total["stale_known"]
    failed += len(set(known) - known_seen)
    print("FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
