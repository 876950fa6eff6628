/* read_probe.h's streaming reads. One loop per load width, specialised by the number of
 * concurrent streams (the slice cut in S equal parts read side by side, 256 bytes of each
 * per step, as a matmul reads its block of rows) and by the prefetch (one per 64-byte
 * line, DSE_PREFETCH_AHEAD bytes ahead, into L2, as avx512.c's q4_block and q8_block
 * issue them). Several streams matter: one core's L2 streamer follows each stream only so
 * far ahead, and a kernel that reads several row blocks side by side outruns one
 * prefetched stream (dse-kernel-bench --float shows it). */
#include <immintrin.h>

#include "dse_internal.h"
#include "read_probe.h"

static const struct {
        int streams, prefetch;
} variants[READ_PROBE_VARIANTS] = {{1, 0}, {1, 1}, {4, 0}, {4, 1}, {8, 0}, {8, 1}};

/* One step's 256 bytes of a stream, prefetched a line at a time. */
static inline void prefetch_step(const void *q) {
        for (int o = 0; o < 256; o += 64)
                _mm_prefetch((const char *)q + o + DSE_PREFETCH_AHEAD, _MM_HINT_T1);
}

__attribute__((target("avx512f"))) static inline uint64_t read_avx512(const uint8_t *p, size_t n, const int S,
                                                                        const int pf) {
        size_t part = n / (size_t)S / 256 * 256;
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i < part; i += 256)
                for (int s = 0; s < S; s++) {
                        const uint8_t *q = p + (size_t)s * part + i;
                        if (pf)
                                prefetch_step(q);
                        a0 = _mm512_xor_si512(a0, _mm512_load_si512(q));
                        a1 = _mm512_xor_si512(a1, _mm512_load_si512(q + 64));
                        a2 = _mm512_xor_si512(a2, _mm512_load_si512(q + 128));
                        a3 = _mm512_xor_si512(a3, _mm512_load_si512(q + 192));
                }
        __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
        return (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(a));
}

__attribute__((target("avx2"))) static inline uint64_t read_avx2(const uint8_t *p, size_t n, const int S,
                                                                  const int pf) {
        size_t part = n / (size_t)S / 256 * 256;
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = 0; i < part; i += 256)
                for (int s = 0; s < S; s++) {
                        const uint8_t *q = p + (size_t)s * part + i;
                        if (pf)
                                prefetch_step(q);
                        for (int o = 0; o < 256; o += 128) {
                                a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(q + o)));
                                a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(q + o + 32)));
                                a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(q + o + 64)));
                                a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(q + o + 96)));
                        }
                }
        __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
        return (uint64_t)_mm_cvtsi128_si64(_mm256_castsi256_si128(a));
}

static inline uint64_t read_scalar(const uint8_t *p, size_t n, const int S, const int pf) {
        size_t part = n / (size_t)S / 256 * 256;
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (size_t i = 0; i < part; i += 256)
                for (int s = 0; s < S; s++) {
                        const uint64_t *q = (const uint64_t *)(p + (size_t)s * part + i);
                        if (pf)
                                prefetch_step(q);
                        for (int j = 0; j < 32; j += 4) {
                                a0 ^= q[j];
                                a1 ^= q[j + 1];
                                a2 ^= q[j + 2];
                                a3 ^= q[j + 3];
                        }
                }
        return a0 ^ a1 ^ a2 ^ a3;
}

/* Each (streams, prefetch) pair as its own loop, so neither is a runtime test inside it. */
#define DISPATCH(fn)                                                                                           \
        switch (variants[variant].streams * 2 + variants[variant].prefetch) {                                 \
        case 2: return fn(p, n, 1, 0);                                                                         \
        case 3: return fn(p, n, 1, 1);                                                                         \
        case 8: return fn(p, n, 4, 0);                                                                         \
        case 9: return fn(p, n, 4, 1);                                                                         \
        case 16: return fn(p, n, 8, 0);                                                                        \
        default: return fn(p, n, 8, 1);                                                                        \
        }

uint64_t read_probe(const uint8_t *p, size_t n, int variant) {
        if (variant < 0 || variant >= READ_PROBE_VARIANTS)
                variant = 0;
        if (__builtin_cpu_supports("avx512f"))
                DISPATCH(read_avx512)
        if (__builtin_cpu_supports("avx2"))
                DISPATCH(read_avx2)
        DISPATCH(read_scalar)
}

const char *read_probe_name(int variant) {
        static const char *const names[3][READ_PROBE_VARIANTS] = {
                {"avx512 1 stream", "avx512 1 stream+prefetch", "avx512 4 streams", "avx512 4 streams+prefetch",
                 "avx512 8 streams", "avx512 8 streams+prefetch"},
                {"avx2 1 stream", "avx2 1 stream+prefetch", "avx2 4 streams", "avx2 4 streams+prefetch",
                 "avx2 8 streams", "avx2 8 streams+prefetch"},
                {"scalar 1 stream", "scalar 1 stream+prefetch", "scalar 4 streams", "scalar 4 streams+prefetch",
                 "scalar 8 streams", "scalar 8 streams+prefetch"},
        };
        int w = __builtin_cpu_supports("avx512f") ? 0 : __builtin_cpu_supports("avx2") ? 1 : 2;
        return (unsigned)variant < READ_PROBE_VARIANTS ? names[w][variant] : "?";
}
