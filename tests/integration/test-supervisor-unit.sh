#!/usr/bin/env bash
# deploy/dsvisor.service and dsvisor.slice pass `systemd-analyze verify` (systemd 252 on
# Debian 12) with no warning about either unit, and carry the settings checked below. A
# deliberately broken copy must fail the same check, so the check can fail.
set -euo pipefail
src="${DSV_SOURCE_DIR:?}/deploy"
dsvisor="${DSV_BUILD_DIR:?}/bin/dsvisor"
if ! command -v systemd-analyze >/dev/null; then
        echo "SKIP: no systemd-analyze"
        exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-supervisor-unit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

verify() { # DIR: 0 when both units verify without a word about them
        local out rc=0
        out=$(cd "$1" && systemd-analyze verify --man=no ./dsvisor.service ./dsvisor.slice 2>&1) || rc=$?
        if ((rc != 0)) || grep -E 'dsvisor\.(service|slice)' <<<"$out"; then
                echo "$out" | grep -E 'dsvisor' | head -5
                return 1
        fi
        return 0
}

failed=0
mkdir "$tmp/good" "$tmp/bad"
# verify checks that ExecStart's binary exists: point it at the build.
sed "s|/usr/local/bin/dsvisor|$dsvisor|" "$src/dsvisor.service" >"$tmp/good/dsvisor.service"
cp "$src/dsvisor.slice" "$tmp/good/"
if verify "$tmp/good"; then echo "ok     systemd-analyze verify"; else echo "NOT OK systemd-analyze verify"; failed=1; fi

for want in '^Type=notify$' '^NotifyAccess=main$' '^WatchdogSec=' '^Delegate=.*cpu.*cpuset.*memory' \
        '^LimitRTPRIO=49$' '^LimitMEMLOCK=' '^LimitRTTIME=' '^FileDescriptorStoreMax=[1-9]' '^Slice=dsvisor.slice$' \
        '^KillMode=control-group$' '^ExecReload=.*-HUP' '^Restart=on-failure$' \
        '^LoadCredential=api-keys:' '^ExecStart=.* --api-key-file %d/api-keys$'; do
        if grep -Eq "$want" "$src/dsvisor.service"; then echo "ok     has $want"; else echo "NOT OK has $want"; failed=1; fi
done
for note in 'cannot delegate the' 'hugetlb' 'not bound SCHED_FIFO' 'kills every worker'; do
        if grep -Eq "$note" "$src/dsvisor.service"; then echo "ok     documents '$note'"; else echo "NOT OK documents '$note'"; failed=1; fi
done
if grep -q '^RestrictRealtime=yes' "$src/dsvisor.service"; then echo "NOT OK RestrictRealtime would block FIFO"; failed=1; fi

sed 's/^Type=notify$/Type=notfy/' "$tmp/good/dsvisor.service" >"$tmp/bad/dsvisor.service"
cp "$src/dsvisor.slice" "$tmp/bad/"
if verify "$tmp/bad" >/dev/null; then echo "NOT OK a broken unit passes the check"; failed=1; else echo "ok     a broken unit fails the check"; fi
exit $failed
