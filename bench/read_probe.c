/* read_probe.h's streaming reads. Each width has one loop, with the kernels' prefetch
 * (one prefetch per 64-byte line, DSE_PREFETCH_AHEAD bytes ahead, into L2, as avx512.c's
 * q4_block and q8_block issue them) or without it. */
#include <immintrin.h>

#include "kernels/kernels.h"
#include "read_probe.h"

#define UNROLL_LINES(body) body(0) body(64) body(128) body(192)

__attribute__((target("avx512f"))) static inline uint64_t read_avx512(const uint8_t *p, size_t n, const int pf) {
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i + 256 <= n; i += 256) {
                if (pf) {
#define PF(o) _mm_prefetch((const char *)(p + i + (o) + DSE_PREFETCH_AHEAD), _MM_HINT_T1);
                        UNROLL_LINES(PF)
                }
                a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
                a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
                a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
                a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
        }
        __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
        return (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(a));
}

__attribute__((target("avx2"))) static inline uint64_t read_avx2(const uint8_t *p, size_t n, const int pf) {
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i + 256 <= n; i += 256) {
                if (pf) {
                        UNROLL_LINES(PF)
                }
                a0 = _mm256_xor_si256(a0, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(p + i)),
                                                           _mm256_load_si256((const __m256i *)(p + i + 32))));
                a1 = _mm256_xor_si256(a1, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(p + i + 64)),
                                                           _mm256_load_si256((const __m256i *)(p + i + 96))));
                a2 = _mm256_xor_si256(a2, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(p + i + 128)),
                                                           _mm256_load_si256((const __m256i *)(p + i + 160))));
                a3 = _mm256_xor_si256(a3, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(p + i + 192)),
                                                           _mm256_load_si256((const __m256i *)(p + i + 224))));
        }
        __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
        return (uint64_t)_mm_cvtsi128_si64(_mm256_castsi256_si128(a));
}

static uint64_t read_scalar(const uint8_t *p, size_t n, const int pf) {
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (size_t i = 0; i + 256 <= n; i += 256) {
                if (pf) {
                        UNROLL_LINES(PF)
                }
                const uint64_t *q = (const uint64_t *)(p + i);
                for (int j = 0; j < 32; j += 4) {
                        a0 ^= q[j];
                        a1 ^= q[j + 1];
                        a2 ^= q[j + 2];
                        a3 ^= q[j + 3];
                }
        }
        return a0 ^ a1 ^ a2 ^ a3;
}
#undef PF

uint64_t read_probe(const uint8_t *p, size_t n, int variant) {
        int pf = variant == READ_PROBE_PREFETCH;
        if (__builtin_cpu_supports("avx512f"))
                return pf ? read_avx512(p, n, 1) : read_avx512(p, n, 0);
        if (__builtin_cpu_supports("avx2"))
                return pf ? read_avx2(p, n, 1) : read_avx2(p, n, 0);
        return pf ? read_scalar(p, n, 1) : read_scalar(p, n, 0);
}

const char *read_probe_name(int variant) {
        int pf = variant == READ_PROBE_PREFETCH;
        if (__builtin_cpu_supports("avx512f"))
                return pf ? "avx512+prefetch" : "avx512";
        if (__builtin_cpu_supports("avx2"))
                return pf ? "avx2+prefetch" : "avx2";
        return pf ? "scalar+prefetch" : "scalar";
}
