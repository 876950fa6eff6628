#!/usr/bin/env bash
# deploy/haproxy.cfg: `haproxy -c` accepts it as shipped and as the integration test
# templates it (loopback bind and servers); it carries the choices deploy/README.md
# explains; a broken copy fails the same check, so the check can fail.
set -euo pipefail
cfg="${DSV_SOURCE_DIR:?}/deploy/haproxy.cfg"
if ! command -v haproxy >/dev/null; then
        echo "SKIP: no haproxy (scripts/bootstrap.sh --with-tests installs it)"
        exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-deploy-haproxy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

failed=0
check() { # DESCRIPTION COMMAND...
        local what=$1
        shift
        if "$@"; then echo "ok     $what"; else echo "NOT OK $what"; failed=1; fi
}
valid() { haproxy -c -q -f "$1" >"$tmp/out" 2>&1 || { cat "$tmp/out"; return 1; }; }

check "haproxy -c accepts deploy/haproxy.cfg" valid "$cfg"

# The template test-haproxy.sh uses: only bind and server lines change.
sed -E -e 's|^(\s*)bind .*|\1bind 127.0.0.1:18000|' \
        -e 's|^(\s*)server dsvisor-a .*|\1server dsvisor-a 127.0.0.1:18001|' \
        -e 's|^(\s*)server dsvisor-b .*|\1server dsvisor-b 127.0.0.1:18002|' "$cfg" >"$tmp/loopback.cfg"
check "haproxy -c accepts the loopback template" valid "$tmp/loopback.cfg"
check "the template changes 3 lines" test "$(diff "$cfg" "$tmp/loopback.cfg" | grep -c '^>')" -eq 3

for want in '^\s*balance leastconn$' '^\s*option httpchk GET /ready$' '^\s*http-check expect status 200$' \
        '^\s*option http-server-close$' '^\s*retry-on .*\b503\b' '^\s*retry-on .*conn-failure' \
        '^\s*option redispatch' '^\s*timeout server 60m$' '^\s*timeout client 60m$' \
        '^\s*timeout http-request ' '^\s*default-server .*\bcheck\b.*\binter 1s\b' \
        '^\s*http-request deny .* unless \{ path_beg /v1/ \}$'; do
        check "has $want" grep -Eq "$want" "$cfg"
done
# A retry after a response timeout could run a generation twice; killing sessions of a
# server marked down would cut the streams a draining host is finishing.
check "no retry on response-timeout" bash -c "! grep -Eq '^\s*retry-on .*response-timeout' '$cfg'"
check "no on-marked-down shutdown-sessions" bash -c "! grep -Eq '^[^#]*shutdown-sessions' '$cfg'"

sed 's/balance leastconn/balance leastconns/' "$cfg" >"$tmp/bad.cfg"
check "a broken copy fails haproxy -c" bash -c "! haproxy -c -q -f '$tmp/bad.cfg' >/dev/null 2>&1"
exit $failed
