#!/usr/bin/env bash
# Every symbol libdse defines for other objects to link against carries the dse_ prefix
# (dse_ for the public API in dse.h, dse__ for what the engine's files share), so a
# program linking libdse meets no bare name of ours. A helper one file uses is static.
# Usage: check-dse-symbols.sh path/to/libdse.a
set -u
lib=${1:?usage: check-dse-symbols.sh path/to/libdse.a}
command -v nm >/dev/null || { echo "nm not found (binutils)"; exit 1; }
[ -f "$lib" ] || { echo "$lib not found: build the dse target first"; exit 1; }

# archive:member:address type name   for each global symbol an object defines
symbols=$(nm -A -g --defined-only "$lib") || { echo "nm could not read $lib"; exit 1; }
n=$(printf '%s\n' "$symbols" | awk 'NF == 3' | wc -l)
[ "$n" -gt 0 ] || { echo "nm found no defined global symbols in $lib"; exit 1; }
# ASan adds __odr_asan.NAME beside each global NAME it instruments: NAME is what is checked.
bad=$(printf '%s\n' "$symbols" | awk 'NF == 3 { name = $3; sub(/^__odr_asan[._]/, "", name) }
        NF == 3 && name !~ /^dse_/ { k = split($1, f, ":"); print "  " f[k - 1] ": " $3 " (" $2 ")" }')
if [ -n "$bad" ]; then
        echo "FAIL libdse exports symbols without the dse_ prefix (make them static, or name them dse__...):"
        echo "$bad"
        echo "0 passed, 1 failed"
        exit 1
fi
echo "$n symbols, all dse_-prefixed"
echo "1 passed, 0 failed"
