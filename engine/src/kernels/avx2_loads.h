/* Eight elements of a stored format widened to a ymm of floats, and the horizontal sum:
 * what avx2.c (weights), q4_f32_rows.h and avx2_kv.c (KV rows) share. Include only from
 * files compiled with -mavx2 -mf16c. */
#ifndef DSE_KERNELS_AVX2_LOADS_H
#define DSE_KERNELS_AVX2_LOADS_H

#include <immintrin.h>
#include <stdint.h>

static inline __m256 load_bf16x8(const uint16_t *p) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline __m256 load_f16x8(const uint16_t *p) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_i8x8(const int8_t *p) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* e4m3 through the 256-entry table (dse__f8e4m3_table). */
static inline __m256 load_f8x8(const uint8_t *p, const float *lut) {
        __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        return _mm256_i32gather_ps(lut, idx, 4);
}

/* The sum of a ymm's 8 floats. */
static inline float hsum8(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        return _mm_cvtss_f32(s);
}

/* The sums of eight ymm's floats, v[i]'s in lane i; each lane's reduction is the same
 * tree whichever slot it takes. */
static inline __m256 hsum8x8(const __m256 v[8]) {
        __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
        __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
        /* s0123: v0..v3's low halves' sums in the low 128 bits, their high halves' above */
        return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

#endif
