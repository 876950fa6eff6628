#!/usr/bin/env bash
# The SIMD kernel objects in libdse hold only instructions of the level they are installed
# for (engine/CMakeLists.txt sets each file's flags; src/kernels/kernels.c installs its
# entries): avx512.c and avx512_kv.c run on every AVX-512 F+BW+VL CPU, so no VNNI, BF16
# or AMX instruction may appear in them; avx512_vnni.c none of BF16 or AMX, avx512_bf16.c
# and avx512_bf16_kv.c none of VNNI or AMX, avx2.c none of AVX-512 at all, and no other
# object any of AVX-512 (an AVX2 function chosen at run time, as the tokenizer's UTF-8
# check, is allowed there).
# Usage: check-kernel-isa.sh path/to/libdse.a
set -u
lib=${1:?usage: check-kernel-isa.sh path/to/libdse.a}
command -v objdump >/dev/null || { echo "objdump not found (binutils)"; exit 1; }
[ -f "$lib" ] || { echo "$lib not found: build the dse target first"; exit 1; }

vnni='vpdpbusds?|vpdpwssds?'
bf16='vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16'
amx='ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilezero|tilerelease|tdpb[su][su]d|tdpbf16ps|tdpfp16ps'
avx512='%zmm|%k[0-7]|\{%k'

# member<TAB>instruction, one line per instruction of the archive
listing=$(objdump -d --no-show-raw-insn "$lib" | awk '
        /:[ \t]+file format / { m = $1; sub(/:$/, "", m); next }
        /^[ \t]+[0-9a-f]+:\t/ { split($0, f, "\t"); print m "\t" f[2] }')
[ -n "$listing" ] || { echo "objdump found no instructions in $lib"; exit 1; }

fail=0
n_checks=0
n_failed=0
# forbid member what-regex why
forbid() {
        local hits
        n_checks=$((n_checks + 1))
        hits=$(printf '%s\n' "$listing" | awk -F'\t' -v m="$1" '$1 == m { print $2 }' | grep -E "$2" | sort | uniq -c | sort -rn | head -5)
        if [ -n "$hits" ]; then
                echo "FAIL $1 holds instructions it may not ($3):"; echo "$hits"; fail=1; n_failed=$((n_failed + 1))
        fi
}
# expect member what-regex why: the object exists and the listing shows what it is for,
# so a renamed file or an objdump that prints something else cannot pass unseen
expect() {
        n_checks=$((n_checks + 1))
        if ! printf '%s\n' "$listing" | awk -F'\t' -v m="$1" '$1 == m { print $2 }' | grep -qE "$2"; then
                echo "FAIL $1: no $3 in it (is it still in libdse, under this name?)"; fail=1; n_failed=$((n_failed + 1))
        fi
}

expect avx2.c.o '%ymm' "AVX2 instruction"
expect avx2_q8_xq.c.o 'vpmaddubsw' "vpmaddubsw"
expect avx512.c.o '%zmm' "AVX-512 instruction"
expect avx512_kv.c.o '%zmm' "AVX-512 instruction"
expect avx512_vnni.c.o 'vpdpbusd' "vpdpbusd"
expect avx512_bf16.c.o 'vdpbf16ps' "vdpbf16ps"
expect avx512_bf16_kv.c.o 'vdpbf16ps' "vdpbf16ps"
expect amx.c.o 'tdpbssd' "AMX tile product"

forbid avx512.c.o "$vnni|$bf16|$amx" "avx512.c runs on AVX-512 F+BW+VL CPUs without VNNI or BF16"
forbid avx512_kv.c.o "$vnni|$bf16|$amx" "avx512_kv.c runs on AVX-512 F+BW+VL CPUs without VNNI or BF16"
forbid avx512_vnni.c.o "$bf16|$amx" "avx512_vnni.c runs on VNNI CPUs without BF16 or AMX"
forbid avx512_bf16.c.o "$vnni|$amx" "avx512_bf16.c runs on BF16 CPUs without VNNI or AMX"
forbid avx512_bf16_kv.c.o "$vnni|$amx" "avx512_bf16_kv.c runs on BF16 CPUs without VNNI or AMX"
forbid avx2.c.o "$avx512|$vnni|$bf16|$amx" "avx2.c runs on AVX2 CPUs"
for m in $(printf '%s\n' "$listing" | cut -f1 | sort -u); do
        case $m in
        avx2.c.o | avx512.c.o | avx512_kv.c.o | avx512_vnni.c.o | avx512_bf16.c.o | avx512_bf16_kv.c.o | amx.c.o) ;;
        *) forbid "$m" "$avx512|$vnni|$bf16|$amx" "only the kernel files hold AVX-512 code" ;;
        esac
done

echo "$((n_checks - n_failed)) passed, $n_failed failed"
exit $fail
