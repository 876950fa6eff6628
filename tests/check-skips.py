#!/usr/bin/env python3
"""Fails a test run that skipped a test tests/skips.allow does not allow.

    tests/check-skips.py JUNIT ALLOW [--asan]

JUNIT is ctest's --output-junit file. ALLOW lists, one a line, a test name (a shell
pattern), when the skip is allowed and why:

    asan      only in the ASan+UBSan build (pass --asan)
    non-root  only when the tests run as a user other than root
    host      anywhere: it needs a kernel feature or hardware the host may lack

A skip is a test ctest did not run or reports skipped (exit 77, SKIP_RETURN_CODE). Every
allowed skip is printed with its reason; an unlisted one fails the run with the test's
own "SKIP:" line."""
import fnmatch
import os
import sys
import xml.etree.ElementTree as ET

WHEN = ("asan", "non-root", "host")


def read_allow(path):
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[1] not in WHEN:
                sys.exit(f"{path}:{n}: want 'test-name {'|'.join(WHEN)} reason', got: {line}")
            rules.append((parts[0], parts[1], parts[2]))
    return rules


def skip_line(case):
    out = case.findtext("system-out") or ""
    for line in out.splitlines():
        if "SKIP" in line:
            return line.strip()
    return "(no SKIP: line in its output)"


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--asan"):
        sys.exit(__doc__.split("\n\n")[1])
    junit, allow, asan = argv[1], argv[2], len(argv) == 4
    rules = read_allow(allow)
    in_effect = {"asan": asan, "non-root": os.geteuid() != 0, "host": True}
    bad = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("status") not in ("notrun", "disabled") and case.find("skipped") is None:
            continue
        name = case.get("name")
        rule = next((r for r in rules if fnmatch.fnmatchcase(name, r[0]) and in_effect[r[1]]), None)
        if rule:
            print(f"skip allowed: {name} ({rule[1]}: {rule[2]})")
        else:
            print(f"skip NOT allowed: {name}: {skip_line(case)} (not in {allow} for this run)")
            bad += 1
    if bad:
        print(f"{bad} skipped test(s) not in {allow}: install what they need (scripts/bootstrap.sh "
              f"--with-tests), or list them there with the reason, for review")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
