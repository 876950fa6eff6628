/* AVX2 + FMA + F16C kernels (this file alone is compiled with -mavx2 -mfma -mf16c).
 * Each routine computes exactly what its `_ref` twin in ref.c computes, 8 columns at a
 * time with float32 FMA accumulation; only the summation order differs. Helpers are
 * static inline so no AVX2 code reaches other callers through the linker. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"

static inline float hsum8(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        return _mm_cvtss_f32(s);
}

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

static inline __m256 load_f8x8(const uint8_t *p, const float *lut) {
        __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        return _mm256_i32gather_ps(lut, idx, 4);
}

/* Eight 4-bit values of columns c..c+7 (c even) from the four bytes at p, low nibble
 * first: duplicate each byte, widen, shift odd lanes by 4, mask. */
static inline __m256 load_q4x8(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, sizeof v);
        __m128i b = _mm_cvtsi32_si128((int)v);
        b = _mm_unpacklo_epi8(b, b);
        __m256i w = _mm256_cvtepu8_epi32(b);
        w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
        return _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(0xf)));
}

static void matvec_f32_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const float *W = w->data; /* (rows, cols) */
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const float *row = W + r * n;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c + 16 <= n; c += 16) {
                        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(x + c), a0);
                        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
                }
                for (; c + 8 <= n; c += 8)
                        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(x + c), a0);
                float acc = hsum8(_mm256_add_ps(a0, a1));
                for (; c < n; c++)
                        acc += row[c] * x[c];
                y[r] = acc;
        }
}

static void matvec_bf16_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint16_t *W = w->data; /* (rows, cols) */
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const uint16_t *row = W + r * n;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c + 16 <= n; c += 16) {
                        a0 = _mm256_fmadd_ps(load_bf16x8(row + c), _mm256_loadu_ps(x + c), a0);
                        a1 = _mm256_fmadd_ps(load_bf16x8(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
                }
                for (; c + 8 <= n; c += 8)
                        a0 = _mm256_fmadd_ps(load_bf16x8(row + c), _mm256_loadu_ps(x + c), a0);
                float acc = hsum8(_mm256_add_ps(a0, a1));
                for (; c < n; c++)
                        acc += dse__kern_bf16_to_f32(row[c]) * x[c];
                y[r] = acc;
        }
}

static void matvec_f16_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint16_t *W = w->data; /* (rows, cols) */
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const uint16_t *row = W + r * n;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c + 16 <= n; c += 16) {
                        a0 = _mm256_fmadd_ps(load_f16x8(row + c), _mm256_loadu_ps(x + c), a0);
                        a1 = _mm256_fmadd_ps(load_f16x8(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
                }
                for (; c + 8 <= n; c += 8)
                        a0 = _mm256_fmadd_ps(load_f16x8(row + c), _mm256_loadu_ps(x + c), a0);
                float acc = hsum8(_mm256_add_ps(a0, a1));
                for (; c < n; c++)
                        acc += dse__kern_f16_to_f32(row[c]) * x[c];
                y[r] = acc;
        }
}

static void matvec_f8_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint8_t *W = w->data; /* (rows, cols) */
        const float *lut = dse__f8e4m3_table();
        int64_t n = w->cols;
        for (int64_t r = r0; r < r1; r++) {
                const uint8_t *row = W + r * n;
                const float *srow = w->scale + (r / DSE_F8_BLOCK) * w->n_groups; /* (n_groups) */
                float acc = 0.0f;
                for (int64_t c0 = 0; c0 < n; c0 += DSE_F8_BLOCK) {
                        int64_t c1 = c0 + DSE_F8_BLOCK < n ? c0 + DSE_F8_BLOCK : n, c = c0;
                        __m256 a = _mm256_setzero_ps();
                        for (; c + 8 <= c1; c += 8)
                                a = _mm256_fmadd_ps(load_f8x8(row + c, lut), _mm256_loadu_ps(x + c), a);
                        float part = hsum8(a);
                        for (; c < c1; c++)
                                part += lut[row[c]] * x[c];
                        acc += part * srow[c0 / DSE_F8_BLOCK];
                }
                y[r] = acc;
        }
}

static void matvec_q8_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const int8_t *W = w->data; /* (rows, cols) */
        int64_t n = w->cols, G = w->group_size;
        for (int64_t r = r0; r < r1; r++) {
                const int8_t *row = W + r * n;
                const float *srow = w->scale + r * w->n_groups; /* (n_groups) */
                __m256 acc = _mm256_setzero_ps();
                float tail = 0.0f;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c = g * G, c1 = c + G < n ? c + G : n;
                        __m256 part = _mm256_setzero_ps();
                        for (; c + 8 <= c1; c += 8)
                                part = _mm256_fmadd_ps(load_i8x8(row + c), _mm256_loadu_ps(x + c), part);
                        float t = 0.0f;
                        for (; c < c1; c++)
                                t += (float)row[c] * x[c];
                        acc = _mm256_fmadd_ps(part, _mm256_set1_ps(srow[g]), acc);
                        tail += t * srow[g];
                }
                y[r] = hsum8(acc) + tail;
        }
}

static void matvec_q4_avx2(const struct dse_qmat *w, const float *x, float *y, int64_t r0, int64_t r1) {
        const uint8_t *W = w->data; /* (rows, (cols+1)/2) */
        int64_t n = w->cols, G = w->group_size, row_bytes = (n + 1) / 2;
        for (int64_t r = r0; r < r1; r++) {
                const uint8_t *row = W + r * row_bytes;
                const float *srow = w->scale + r * w->n_groups;  /* (n_groups) */
                const uint8_t *zrow = w->zero + r * w->n_groups; /* (n_groups) */
                __m256 acc = _mm256_setzero_ps();
                float tail = 0.0f;
                for (int64_t g = 0; g < w->n_groups; g++) {
                        int64_t c = g * G, c1 = c + G < n ? c + G : n;
                        float z = (float)zrow[g], t = 0.0f;
                        if (c & 1) { /* odd group size: align to a byte */
                                t = ((float)(row[c / 2] >> 4) - z) * x[c];
                                c++;
                        }
                        __m256 vz = _mm256_set1_ps(z), part = _mm256_setzero_ps();
                        for (; c + 8 <= c1; c += 8)
                                part = _mm256_fmadd_ps(_mm256_sub_ps(load_q4x8(row + c / 2), vz),
                                                       _mm256_loadu_ps(x + c), part);
                        for (; c < c1; c++) {
                                uint8_t b = row[c / 2];
                                t += ((float)((c & 1) ? b >> 4 : b & 0xf) - z) * x[c];
                        }
                        acc = _mm256_fmadd_ps(part, _mm256_set1_ps(srow[g]), acc);
                        tail += t * srow[g];
                }
                y[r] = hsum8(acc) + tail;
        }
}

/* out[c] = W[r, c]: 8 columns per step, the _ref twin's conversions for the tail. */
static void dequant_row_avx2(const struct dse_qmat *w, int64_t r, float *out) {
        int64_t n = w->cols, c = 0;
        switch (w->dtype) {
        case DSE_DTYPE_F16: {
                const uint16_t *row = (const uint16_t *)w->data + r * n;
                for (; c + 8 <= n; c += 8)
                        _mm256_storeu_ps(out + c, load_f16x8(row + c));
                for (; c < n; c++)
                        out[c] = dse__kern_f16_to_f32(row[c]);
                return;
        }
        case DSE_DTYPE_BF16: {
                const uint16_t *row = (const uint16_t *)w->data + r * n;
                for (; c + 8 <= n; c += 8)
                        _mm256_storeu_ps(out + c, load_bf16x8(row + c));
                for (; c < n; c++)
                        out[c] = dse__kern_bf16_to_f32(row[c]);
                return;
        }
        case DSE_DTYPE_F8_E4M3: {
                const uint8_t *row = (const uint8_t *)w->data + r * n;
                const float *lut = dse__f8e4m3_table();
                const float *srow = w->scale + (r / DSE_F8_BLOCK) * w->n_groups;
                for (; c + 8 <= n; c += 8) /* 8 divides 128: a step never straddles two blocks */
                        _mm256_storeu_ps(out + c, _mm256_mul_ps(load_f8x8(row + c, lut),
                                                                _mm256_set1_ps(srow[c / DSE_F8_BLOCK])));
                for (; c < n; c++)
                        out[c] = lut[row[c]] * srow[c / DSE_F8_BLOCK];
                return;
        }
        default:
                dse__kernels_ref_dequant_row(w, r, out);
                return;
        }
}

static float dot_avx2(const float *a, const float *b, int64_t n) {
        __m256 a0 = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        float acc = hsum8(a0);
        for (; i < n; i++)
                acc += a[i] * b[i];
        return acc;
}

static void axpy_avx2(float a, const float *x, float *y, int64_t n) {
        __m256 va = _mm256_set1_ps(a);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        for (; i < n; i++)
                y[i] += a * x[i];
}

void dse__kernels_fill_avx2(struct dse_kernels *k) {
        k->level = DSE_CPU_AVX2;
        k->matvec[DSE_DTYPE_F32] = matvec_f32_avx2;
        k->matvec[DSE_DTYPE_F16] = matvec_f16_avx2;
        k->matvec[DSE_DTYPE_BF16] = matvec_bf16_avx2;
        k->matvec[DSE_DTYPE_F8_E4M3] = matvec_f8_avx2;
        k->matvec[DSE_DTYPE_Q8] = matvec_q8_avx2;
        k->matvec[DSE_DTYPE_Q4] = matvec_q4_avx2;
        k->dequant_row = dequant_row_avx2;
        k->dot = dot_avx2;
        k->axpy = axpy_avx2;
}
