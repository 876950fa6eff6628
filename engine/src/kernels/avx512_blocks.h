/* What the AVX-512 kernel files (avx512.c, avx512_vnni.c, avx512_bf16.c) share: their
 * register and cache blocking, and lane masks. Everything here is a macro or static
 * inline, so it is compiled with the flags of the file that includes it and no AVX-512
 * code reaches another caller through the linker. */
#ifndef DSE_KERNELS_AVX512_BLOCKS_H
#define DSE_KERNELS_AVX512_BLOCKS_H

#include <immintrin.h>
#include <stdint.h>

#define TB 4                   /* tokens per register block */
#define RB 4                   /* rows per register block */
#define RS 64                  /* rows per super-block: their weights stay in L2 while every token block uses them */
#define KC 8192                /* columns per chunk of prepared activations (whole rows, mostly: the
                                * rows then stream front to back, as the prefetchers like) */
#define PC (KC / 64)           /* 64-column steps per chunk */

/* The register blocks' loops over rows and tokens must unroll completely (at -O2 GCC
 * leaves them rolled, and the accumulators then live in memory). */
#define UNROLL _Pragma("GCC unroll 16")

/* The first n lanes (none for n <= 0, all past the width). */
static inline __mmask64 mask64(int64_t n) {
        return n >= 64 ? ~(__mmask64)0 : n <= 0 ? 0 : (((__mmask64)1 << n) - 1);
}

static inline __mmask32 mask32(int64_t n) {
        return n >= 32 ? ~(__mmask32)0 : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

static inline __mmask16 mask16(int64_t n) {
        return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : ((1u << n) - 1));
}

#endif
