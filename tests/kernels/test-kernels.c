/* Every kernel of struct dse_kernels, at every level up to the detected one, against a
 * float64 oracle written from the format definitions (kernels.h) and against its _ref
 * twin, on seeded random data and awkward shapes (1 row, 1 column, odd tails, columns not
 * a multiple of the group, partial FP8 edge blocks). */
#include <stdint.h>

#include "gguf_writer.h"
#include "kernels/kernels.h"
#include "kernel-test-data.h"
#include "t.h"

/* Tolerance: the float32 rounding of a sum of n terms is bounded by ~n*eps*sum|terms|;
 * we allow 1e-5 relative to sum|w*x| (n <= 300 here) plus a tiny absolute floor. */
#define REL_TOL 1e-5
#define ABS_TOL 1e-6

/* Independent decoders for the oracle (the ref.c converters are checked separately;
 * e4m3's is kernel-test-data.h's). */
static double f16_value(uint16_t h) {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
        return s ? -v : v;
}

struct mat_case {
        int64_t rows, cols;
        int32_t group;
};

struct mat_buf {
        struct dse_qmat w;
        void *data;
        float *scale;
        uint8_t *zero;
        uint16_t *scale_f16;
};

/* The formats the tests make: every weight dtype, and Q4 in its symmetric form with fp16
 * scales (GGUF Q4_0's). */
enum { MAT_Q4_F16 = DSE_DTYPE_COUNT };

static void mat_make(struct mat_buf *m, int fmt, struct mat_case c) {
        memset(m, 0, sizeof *m);
        enum dse_dtype dt = fmt == MAT_Q4_F16 ? DSE_DTYPE_Q4 : (enum dse_dtype)fmt;
        m->w.dtype = dt;
        m->w.rows = c.rows;
        m->w.cols = c.cols;
        size_t n = (size_t)(c.rows * c.cols);
        switch (dt) {
        case DSE_DTYPE_F32: {
                float *d = malloc(n * 4);
                for (size_t i = 0; i < n; i++)
                        d[i] = rng_unit();
                m->data = d;
                break;
        }
        case DSE_DTYPE_F16: {
                uint16_t *d = malloc(n * 2);
                for (size_t i = 0; i < n; i++) /* exponents 5..19: normal, |v| < 32 */
                        d[i] = (uint16_t)((rng_u32() & 0x8000) | ((5 + rng_u32() % 15) << 10) | (rng_u32() & 0x3ff));
                if (n > 1)
                        d[1] = 0x0201; /* a subnormal */
                m->data = d;
                break;
        }
        case DSE_DTYPE_BF16: {
                uint16_t *d = malloc(n * 2);
                for (size_t i = 0; i < n; i++)
                        d[i] = (uint16_t)((rng_u32() & 0x8000) | ((120 + rng_u32() % 10) << 7) | (rng_u32() & 0x7f));
                m->data = d;
                break;
        }
        case DSE_DTYPE_F8_E4M3: {
                uint8_t *d = malloc(n);
                for (size_t i = 0; i < n; i++) {
                        d[i] = (uint8_t)rng_u32();
                        if ((d[i] & 0x7f) == 0x7f)
                                d[i] ^= 1; /* no NaN */
                }
                m->data = d;
                m->w.n_groups = (c.cols + DSE_F8_BLOCK - 1) / DSE_F8_BLOCK;
                int64_t ns = (c.rows + DSE_F8_BLOCK - 1) / DSE_F8_BLOCK * m->w.n_groups;
                m->scale = malloc((size_t)ns * 4);
                for (int64_t i = 0; i < ns; i++)
                        m->scale[i] = 0.001f + 0.01f * (rng_unit() + 1.0f);
                break;
        }
        case DSE_DTYPE_Q8:
        case DSE_DTYPE_Q4: {
                m->w.group_size = c.group;
                m->w.n_groups = (c.cols + c.group - 1) / c.group;
                size_t bytes = dt == DSE_DTYPE_Q8 ? n : (size_t)((c.rows + 15) / 16 * ((c.cols + 31) / 32) * 256);
                uint8_t *d = malloc(bytes);
                for (size_t i = 0; i < bytes; i++)
                        d[i] = (uint8_t)rng_u32();
                m->data = d;
                /* Q4: rows padded to 16, filled like the rest: no kernel may use them */
                size_t ns = (size_t)((dt == DSE_DTYPE_Q4 ? (c.rows + 15) / 16 * 16 : c.rows) * m->w.n_groups);
                if (fmt == MAT_Q4_F16) {
                        /* both signs (ggml's Q4_0 scale is negative when the block's largest
                         * magnitude is negative), exponents 2^-11 .. 2^-3, one subnormal */
                        m->scale_f16 = malloc(ns * 2);
                        for (size_t i = 0; i < ns; i++)
                                m->scale_f16[i] = (uint16_t)((rng_u32() & 0x8000) | ((4 + rng_u32() % 9) << 10) |
                                                             (rng_u32() & 0x3ff));
                        m->scale_f16[ns / 2] = 0x8123;
                        break;
                }
                m->scale = malloc(ns * 4);
                m->zero = malloc(ns);
                for (size_t i = 0; i < ns; i++) {
                        m->scale[i] = 0.01f * (rng_unit() + 1.5f);
                        m->zero[i] = (uint8_t)(rng_u32() % 16);
                }
                break;
        }
        default:
                break;
        }
        m->w.data = m->data;
        m->w.scale = m->scale;
        m->w.zero = dt == DSE_DTYPE_Q4 ? m->zero : NULL;
        m->w.scale_f16 = m->scale_f16;
}

static void mat_free(struct mat_buf *m) {
        free(m->data);
        free(m->scale);
        free(m->zero);
        free(m->scale_f16);
}

/* W[r, c] straight from the format definitions in kernels.h. */
static double oracle_w(const struct dse_qmat *w, int64_t r, int64_t c) {
        int64_t i = r * w->cols + c;
        switch (w->dtype) {
        case DSE_DTYPE_F32: return ((const float *)w->data)[i];
        case DSE_DTYPE_F16: return f16_value(((const uint16_t *)w->data)[i]);
        case DSE_DTYPE_BF16: {
                uint32_t bits = (uint32_t)((const uint16_t *)w->data)[i] << 16;
                float f;
                memcpy(&f, &bits, 4);
                return f;
        }
        case DSE_DTYPE_F8_E4M3:
                return f8_value(((const uint8_t *)w->data)[i]) *
                       w->scale[(r / 128) * w->n_groups + c / 128];
        case DSE_DTYPE_Q8:
                return (double)((const int8_t *)w->data)[i] * w->scale[r * w->n_groups + c / w->group_size];
        case DSE_DTYPE_Q4: {
                /* 16 rows interleaved: tiles of 16 rows x 32 columns, 256 bytes each;
                 * byte 64k + 4L + e of a tile: columns 8k + e (low) and 8k + 4 + e (high) */
                int64_t tile = (r / 16) * ((w->cols + 31) / 32) + c / 32, k = c % 32 / 8, e = c % 8;
                uint8_t b = ((const uint8_t *)w->data)[tile * 256 + 64 * k + 4 * (r % 16) + e % 4];
                int q = e >= 4 ? b >> 4 : b & 15;
                /* scales and zero points: 16 rows interleaved, 16 per row block and group */
                int64_t g = ((r / 16) * w->n_groups + c / w->group_size) * 16 + r % 16;
                if (w->scale_f16)
                        return (q - 8) * f16_value(w->scale_f16[g]);
                return (q - (int)w->zero[g]) * (double)w->scale[g];
        }
        default: return NAN;
        }
}

/* W[r, :] . x in float64 from the format definitions; *ret_mag = sum |W[r, c] * x[c]|,
 * the scale of the float32 rounding the tolerance allows. */
static double oracle_row(const struct dse_qmat *w, int64_t r, const float *x, double *ret_mag) {
        double sum = 0, mag = 0;
        for (int64_t c = 0; c < w->cols; c++) {
                double p = oracle_w(w, r, c) * x[c];
                sum += p;
                mag += fabs(p);
        }
        *ret_mag = mag;
        return sum;
}

static const struct mat_case cases[] = {
        {1, 1, 32},   {1, 8, 32},    {3, 7, 32},    {2, 16, 16},  {5, 33, 32},  {7, 64, 32},
        {4, 100, 32}, {9, 130, 64},  {3, 45, 15},   {2, 9, 3},    {130, 200, 128}, {129, 257, 128},
        {6, 300, 128}, {3, 512, 128}, {2, 521, 32}, {3, 77, 21},
};

static const int mat_dtypes[] = {
        DSE_DTYPE_F32, DSE_DTYPE_F16, DSE_DTYPE_BF16, DSE_DTYPE_F8_E4M3, DSE_DTYPE_Q8, DSE_DTYPE_Q4, MAT_Q4_F16,
};

static const char *fmt_name(int fmt) {
        static const char *const names[] = {"F32", "F16", "BF16", "F8_E4M3", "Q8", "Q4"};
        return fmt == MAT_Q4_F16 ? "Q4 (fp16 scales)"
               : (unsigned)fmt < sizeof names / sizeof names[0] ? names[fmt] : "?";
}

static const char *mat_name(const struct dse_qmat *w) {
        return fmt_name(w->scale_f16 ? MAT_Q4_F16 : (int)w->dtype);
}


/* The kernel tables the int8-activation tests resolve: every level, and AVX-512 with
 * each of its sub-features (those the CPU lacks are skipped). */
static const unsigned kernel_tables[][2] = {
        {DSE_CPU_SCALAR, 0},
        {DSE_CPU_AVX2, 0},
        {DSE_CPU_AVX512, 0},
        {DSE_CPU_AVX512, DSE_KFEAT_VNNI},
        {DSE_CPU_AVX512, DSE_KFEAT_VNNI | DSE_KFEAT_T8},
        {DSE_CPU_AVX512, DSE_KFEAT_VNNI | DSE_KFEAT_T8 | DSE_KFEAT_AMX},
};

/* The AVX-512 sub-features of matmul_xq this CPU (and Linux, for AMX) allows. */
static unsigned detected_features(void) {
        struct dse_cpu_info cpu;
        unsigned feat = 0;
        if (dse_cpu_detect(&cpu, NULL) >= 0) {
                feat |= cpu.avx512vnni ? DSE_KFEAT_VNNI | DSE_KFEAT_T8 : 0;
                feat |= cpu.amx_tile && cpu.amx_int8 && dse__kernels_amx_usable() ? DSE_KFEAT_AMX : 0;
        }
        return feat;
}

TEST(converters_known_values) {
        ASSERT_NEAR(dse__kern_f16_to_f32(0x3c00), 1.0, 0);
        ASSERT_NEAR(dse__kern_f16_to_f32(0xc000), -2.0, 0);
        ASSERT_NEAR(dse__kern_f16_to_f32(0x7bff), 65504.0, 0);
        ASSERT_NEAR(dse__kern_f16_to_f32(0x0001), ldexp(1, -24), 0);
        ASSERT_NEAR(dse__kern_bf16_to_f32(0x3f80), 1.0, 0);
        ASSERT_NEAR(dse__kern_bf16_to_f32(0xc0a0), -5.0, 0);
        ASSERT_NEAR(dse__kern_f8e4m3_to_f32(0x38), 1.0, 0);
        ASSERT_NEAR(dse__kern_f8e4m3_to_f32(0x7e), 448.0, 0);
        ASSERT_NEAR(dse__kern_f8e4m3_to_f32(0xfe), -448.0, 0);
        ASSERT_NEAR(dse__kern_f8e4m3_to_f32(0x01), ldexp(1, -9), 0);
        ASSERT_NEAR(dse__kern_f8e4m3_to_f32(0x08), ldexp(1, -6), 0);
        ASSERT_NEAR(dse__kern_f8e4m3_to_f32(0x0f), 1.875 * ldexp(1, -6), 0);
        ASSERT_TRUE(isnan(dse__kern_f8e4m3_to_f32(0x7f)));
        ASSERT_TRUE(isnan(dse__kern_f8e4m3_to_f32(0xff)));
        const float *lut = dse__f8e4m3_table();
        for (int i = 0; i < 256; i++)
                if ((i & 0x7f) != 0x7f)
                        ASSERT_NEAR(lut[i], f8_value((uint8_t)i), 0);
        for (uint32_t h = 0; h < 0x7c00; h += 7)
                ASSERT_NEAR(dse__kern_f16_to_f32((uint16_t)h), f16_value((uint16_t)h), 0);
}

TEST(matvec_all_formats_all_levels) {
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (size_t d = 0; d < sizeof mat_dtypes / sizeof mat_dtypes[0]; d++) {
                for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                        rng_seed(1000 * d + ci);
                        struct mat_buf m;
                        mat_make(&m, mat_dtypes[d], cases[ci]);
                        const struct dse_qmat *w = &m.w;
                        float *x = malloc((size_t)w->cols * 4);
                        float *y_ref = malloc((size_t)w->rows * 4), *y = malloc((size_t)w->rows * 4);
                        double *want = malloc((size_t)w->rows * 8), *mag = malloc((size_t)w->rows * 8);
                        for (int64_t c = 0; c < w->cols; c++)
                                x[c] = rng_unit();
                        for (int64_t r = 0; r < w->rows; r++) {
                                want[r] = mag[r] = 0;
                                for (int64_t c = 0; c < w->cols; c++) {
                                        double t = oracle_w(w, r, c) * x[c];
                                        want[r] += t;
                                        mag[r] += fabs(t);
                                }
                        }
                        struct dse_kernels kref;
                        ASSERT_OK(dse_kernels_resolve(DSE_CPU_SCALAR, &kref));
                        kref.matvec[w->dtype](w, x, y_ref, 0, w->rows);
                        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                                struct dse_kernels k;
                                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                                ASSERT_TRUE(k.matvec[w->dtype] != NULL);
                                for (int64_t r = 0; r < w->rows; r++)
                                        y[r] = NAN;
                                /* two row ranges, as the pool splits them */
                                int64_t mid = w->rows / 2;
                                k.matvec[w->dtype](w, x, y, 0, mid);
                                k.matvec[w->dtype](w, x, y, mid, w->rows);
                                for (int64_t r = 0; r < w->rows; r++) {
                                        double tol = REL_TOL * mag[r] + ABS_TOL;
                                        if (!(fabs(y[r] - want[r]) <= tol) || !(fabs(y[r] - y_ref[r]) <= 2 * tol))
                                                T_FAIL("%s level %s case %zu (%lldx%lld g%d) row %lld: got %.9g ref %.9g "
                                                       "oracle %.9g (tol %.3g) NOT OK",
                                                       mat_name(w),
                                                       dse_cpu_level_to_string((enum dse_cpu_level)lvl), ci,
                                                       (long long)w->rows, (long long)w->cols, cases[ci].group,
                                                       (long long)r, y[r], y_ref[r], want[r], tol);
                                }
                                n_checked++;
                        }
                        /* dequant_row against the oracle, element by element, and bit for bit
                         * against the _ref twin (the same operations per element), at every level */
                        float *row = malloc((size_t)w->cols * 4), *row_ref = malloc((size_t)w->cols * 4);
                        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                                struct dse_kernels k;
                                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                                for (int64_t r = 0; r < w->rows; r += 1 + w->rows / 3) {
                                        k.dequant_row(w, r, row);
                                        kref.dequant_row(w, r, row_ref);
                                        for (int64_t c = 0; c < w->cols; c++) {
                                                ASSERT_NEAR(row[c], oracle_w(w, r, c), 1e-7 * fabs(oracle_w(w, r, c)));
                                                ASSERT_TRUE(memcmp(&row[c], &row_ref[c], sizeof(float)) == 0);
                                        }
                                }
                        }
                        free(row);
                        free(row_ref);
                        free(x);
                        free(y_ref);
                        free(y);
                        free(want);
                        free(mag);
                        mat_free(&m);
                }
        }
        fprintf(stderr, "  %d matvec (format, shape, level) combinations checked up to level %s\n", n_checked,
                dse_cpu_level_to_string(top));
}

TEST(vector_helpers_all_levels) {
        enum dse_cpu_level top = detected_level();
        static const int64_t lens[] = {1, 7, 8, 9, 31, 64, 129};
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                        int64_t n = lens[li];
                        rng_seed(77 + (uint64_t)li);
                        float a[129], b[129], y[129], y0[129], out[129];
                        double dot = 0, mag = 0, ss = 0;
                        for (int64_t i = 0; i < n; i++) {
                                a[i] = rng_unit();
                                b[i] = rng_unit();
                                y0[i] = y[i] = rng_unit();
                                dot += (double)a[i] * b[i];
                                mag += fabs((double)a[i] * b[i]);
                                ss += (double)a[i] * a[i];
                        }
                        ASSERT_NEAR(k.dot(a, b, n), dot, REL_TOL * mag + ABS_TOL);
                        k.axpy(0.75f, a, y, n);
                        for (int64_t i = 0; i < n; i++)
                                ASSERT_NEAR(y[i], y0[i] + 0.75 * a[i], 1e-6);
                        /* softmax of 4*a (spread-out logits), swiglu of (a, b) */
                        double mx = -1e9, se = 0;
                        for (int64_t i = 0; i < n; i++) {
                                out[i] = 4 * a[i];
                                mx = out[i] > mx ? out[i] : mx;
                        }
                        for (int64_t i = 0; i < n; i++)
                                se += exp(4.0 * a[i] - mx);
                        k.softmax(out, n);
                        for (int64_t i = 0; i < n; i++)
                                ASSERT_NEAR(out[i], exp(4.0 * a[i] - mx) / se, 1e-6);
                        for (int64_t i = 0; i < n; i++)
                                out[i] = a[i];
                        k.swiglu(out, b, n);
                        for (int64_t i = 0; i < n; i++)
                                ASSERT_NEAR(out[i], a[i] / (1 + exp(-(double)a[i])) * b[i], 1e-6);
                        k.rmsnorm(out, a, b, n, 1e-6f);
                        double inv = 1.0 / sqrt(ss / (double)n + 1e-6);
                        for (int64_t i = 0; i < n; i++)
                                ASSERT_NEAR(out[i], b[i] * a[i] * inv, 1e-5 * (1 + fabs(b[i] * a[i] * inv)));
                        /* and exactly ggml's rms_norm then its weight: float squares summed
                         * in float64, the mean rounded to float */
                        double sq = 0;
                        for (int64_t i = 0; i < n; i++)
                                sq += (double)(a[i] * a[i]);
                        float finv = 1.0f / sqrtf((float)(sq / (double)n) + 1e-6f);
                        for (int64_t i = 0; i < n; i++)
                                ASSERT_FLOAT_EQ(out[i], (a[i] * finv) * b[i]);
                }
        }
}

/* axpy_rows at every level, every format: bit for bit the level's dequant_row then axpy
 * row by row (absorbed MLA relies on it: a session's results do not change with the
 * kernel), and near the float64 sum. The shapes add MLA's kv_b_proj head (128 rows of 512
 * columns), Q4 widths that end in 1 to 3 chunks of 32 columns past a 128-column block, Q8
 * widths that end in 7 pieces of 16 or whose groups of 48 straddle blocks, and a row wider
 * than the AVX2 version's stack buffer. */
static const struct mat_case axpy_rows_cases[] = {
        {128, 512, 128}, {64, 512, 32}, {8, 96, 32}, {5, 160, 32}, {3, 224, 64}, {2, 64, 64}, {3, 1100, 32}, {4, 112, 16}, {3, 240, 48},
};

static void check_axpy_rows(const struct dse_kernels *k, int dt, struct mat_case c, uint64_t seed) {
        rng_seed(seed);
        struct mat_buf m;
        mat_make(&m, dt, c);
        int64_t r0 = c.rows > 2 ? (int64_t)(rng_u32() % (uint32_t)(c.rows / 2)) : 0, n = c.rows - r0;
        float *a = malloc((size_t)n * sizeof *a), *y = malloc((size_t)c.cols * sizeof *y);
        float *want = malloc((size_t)c.cols * sizeof *want), *row = malloc((size_t)c.cols * sizeof *row);
        double *sum = calloc((size_t)c.cols, sizeof *sum), *mag = calloc((size_t)c.cols, sizeof *mag);
        ASSERT_TRUE(a && y && want && row && sum && mag);
        for (int64_t i = 0; i < n; i++)
                a[i] = rng_unit();
        for (int64_t j = 0; j < c.cols; j++) {
                want[j] = y[j] = rng_unit();
                sum[j] = y[j];
                mag[j] = fabs(y[j]);
        }
        for (int64_t i = 0; i < n; i++) {
                k->dequant_row(&m.w, r0 + i, row);
                k->axpy(a[i], row, want, c.cols);
                for (int64_t j = 0; j < c.cols; j++) {
                        double t = (double)a[i] * oracle_w(&m.w, r0 + i, j);
                        sum[j] += t;
                        mag[j] += fabs(t);
                }
        }
        k->axpy_rows(&m.w, r0, n, a, y);
        for (int64_t j = 0; j < c.cols; j++) {
                if (memcmp(&y[j], &want[j], sizeof y[j]) != 0)
                        fprintf(stderr, "  %s %s %lldx%lld g%d: column %lld: %.9g, dequant_row + axpy %.9g\n",
                                dse_cpu_level_to_string(k->level), fmt_name(dt), (long long)c.rows,
                                (long long)c.cols, c.group, (long long)j, y[j], want[j]);
                ASSERT_TRUE(memcmp(&y[j], &want[j], sizeof y[j]) == 0);
                ASSERT_NEAR(y[j], sum[j], REL_TOL * mag[j] + ABS_TOL);
        }
        free(a);
        free(y);
        free(want);
        free(row);
        free(sum);
        free(mag);
        mat_free(&m);
}

TEST(axpy_rows_all_formats_all_levels) {
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t di = 0; di < sizeof mat_dtypes / sizeof mat_dtypes[0]; di++) {
                        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++, n_checked++)
                                check_axpy_rows(&k, mat_dtypes[di], cases[ci], 500 + 17 * di + ci);
                        for (size_t ci = 0; ci < sizeof axpy_rows_cases / sizeof axpy_rows_cases[0]; ci++, n_checked++)
                                check_axpy_rows(&k, mat_dtypes[di], axpy_rows_cases[ci], 900 + 17 * di + ci);
                }
        }
        fprintf(stderr, "  %d axpy_rows (format, shape, level) combinations checked up to level %s\n", n_checked,
                dse_cpu_level_to_string(top));
}

/* attn_scores and attn_accum at every level against double sums: runs of 1..40 keys
 * (around the 16-key blocks), lengths around the vector widths and MLA's 576, rows of a
 * wider stride as a KV block lays them out. */
TEST(attention_runs_all_levels) {
        enum dse_cpu_level top = detected_level();
        static const int64_t lens[] = {1, 7, 8, 16, 33, 64, 128, 130, 200, 576};
        static const int64_t runs[] = {1, 3, 15, 16, 17, 32, 40};
        int n_checked = 0;
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                                int64_t len = lens[li], n = runs[ri], ld = 2 * len + 3;
                                rng_seed(1000 + 31 * li + ri);
                                float *q = malloc((size_t)len * sizeof *q), *rows = malloc((size_t)(n * ld) * sizeof *rows);
                                float *sc = malloc((size_t)n * sizeof *sc), *out = malloc((size_t)len * sizeof *out);
                                float *out0 = malloc((size_t)len * sizeof *out0);
                                ASSERT_TRUE(q && rows && sc && out && out0);
                                for (int64_t i = 0; i < len; i++) {
                                        q[i] = rng_unit();
                                        out0[i] = out[i] = rng_unit();
                                }
                                for (int64_t i = 0; i < n * ld; i++)
                                        rows[i] = rng_unit();
                                k.attn_scores(q, rows, ld, n, len, 0.125f, sc);
                                for (int64_t t = 0; t < n; t++) {
                                        double dot = 0, mag = 0;
                                        for (int64_t i = 0; i < len; i++) {
                                                dot += (double)q[i] * rows[t * ld + i];
                                                mag += fabs((double)q[i] * rows[t * ld + i]);
                                        }
                                        ASSERT_NEAR(sc[t], 0.125 * dot, 0.125 * (REL_TOL * mag + ABS_TOL));
                                }
                                k.attn_accum(sc, rows + len, ld, n, len, out); /* the v half of each row */
                                for (int64_t i = 0; i < len; i++) {
                                        double want = out0[i], mag = fabs(out0[i]);
                                        for (int64_t t = 0; t < n; t++) {
                                                want += (double)sc[t] * rows[t * ld + len + i];
                                                mag += fabs((double)sc[t] * rows[t * ld + len + i]);
                                        }
                                        ASSERT_NEAR(out[i], want, REL_TOL * mag + ABS_TOL);
                                }
                                free(q);
                                free(rows);
                                free(sc);
                                free(out);
                                free(out0);
                                n_checked++;
                        }
        }
        fprintf(stderr, "  %d attention (length, run, level) combinations checked up to level %s\n", n_checked,
                dse_cpu_level_to_string(top));
}

TEST(resolve_rejects_bad_level) {
        struct dse_kernels k;
        ASSERT_ERR(dse_kernels_resolve(DSE_CPU_LEVEL_COUNT, &k), -EINVAL);
        ASSERT_ERR(dse_kernels_resolve(DSE_CPU_SCALAR, NULL), -EINVAL);
}

/* ---- n tokens at once, and int8 activations ------------------------------------------ */

/* Matmul shapes: the matvec cases plus blocks of 4 rows with tails, and group sizes the
 * integer kernels take (multiples of 32) next to ones they hand to the reference. */
static const struct mat_case mm_cases[] = {
        {1, 1, 32},   {1, 8, 32},    {3, 7, 32},   {5, 33, 32},   {7, 64, 32},  {4, 100, 32}, {9, 130, 64},
        {3, 45, 15},  {2, 9, 3},     {6, 300, 128}, {13, 257, 128}, {8, 96, 32}, {17, 160, 64}, {4, 31, 32},
        {11, 1536, 128}, {2, 63, 32}, {21, 200, 128}, {5, 200, 96}, {3, 128, 64}, {6, 97, 96},
        /* past the AVX-512 kernels' blocking: 64-row super-blocks, 2048- and 8192-column chunks (a
         * g192 group straddles the chunk edge), odd column tails after a chunk */
        {70, 2200, 128}, {67, 2100, 32}, {5, 2500, 192}, {2, 4161, 64}, {40, 2112, 32},
        {3, 8400, 192}, {5, 8300, 64}, {2, 8200, 32},
        /* decode takes whole rows up to TB / n times the chunk (a lone token: 32768 Q8 or
         * 65536 Q4 columns, Q4's group sums permitting), wider ones the chunked path */
        {3, 20000, 64}, {2, 33000, 128},
};
/* Token counts around the 4-token register blocks, the AVX-512 8-token blocks (a short
 * last block padded from 5, a rest of 1-4 left to the 4-token blocks) and Q8's 16-token
 * blocks (16 alone, then a rest of 1, 8 or 5 left to the others); more than 9 only on the
 * smaller shapes. */
static const int64_t mm_tokens[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 21, 24, 32};
#define MM_BIG_TOKENS_MAX_ELEMS 100000

/* x (n, ldx) with ldx > cols, so row strides are honoured. */
static float *make_x(int64_t n, int64_t cols, int64_t ldx) {
        float *x = malloc((size_t)(n * ldx) * sizeof(float));
        for (int64_t i = 0; i < n * ldx; i++)
                x[i] = rng_unit();
        if (n * ldx > 3)
                x[2] = 0.0f; /* an exact zero */
        for (int64_t c = 0; c < cols && c < 32 && n > 1; c++)
                x[ldx + c] = 0.0f; /* token 1's first block all zero: d = 0 */
        return x;
}

TEST(matmul_all_formats_all_levels) {
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (size_t d = 0; d < sizeof mat_dtypes / sizeof mat_dtypes[0]; d++) {
                for (size_t ci = 0; ci < sizeof mm_cases / sizeof mm_cases[0]; ci++) {
                        for (size_t ti = 0; ti < sizeof mm_tokens / sizeof mm_tokens[0]; ti++) {
                                if (mm_tokens[ti] > 9 && mm_cases[ci].rows * mm_cases[ci].cols > MM_BIG_TOKENS_MAX_ELEMS)
                                        continue;
                                rng_seed(5000 + 100 * d + 10 * ci + ti);
                                struct mat_buf m;
                                mat_make(&m, mat_dtypes[d], mm_cases[ci]);
                                const struct dse_qmat *w = &m.w;
                                int64_t n = mm_tokens[ti], ldx = w->cols + 3, ldy = w->rows + 2;
                                float *x = make_x(n, w->cols, ldx);
                                float *y = malloc((size_t)(n * ldy) * sizeof(float));
                                for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                                        struct dse_kernels k;
                                        ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                                        ASSERT_TRUE(k.matmul[w->dtype] != NULL);
                                        for (int64_t i = 0; i < n * ldy; i++)
                                                y[i] = NAN;
                                        int64_t mid = w->rows / 2;
                                        k.matmul[w->dtype](w, x, ldx, n, y, ldy, 0, mid);
                                        k.matmul[w->dtype](w, x, ldx, n, y, ldy, mid, w->rows);
                                        for (int64_t t = 0; t < n; t++) {
                                                for (int64_t r = 0; r < w->rows; r++) {
                                                        double mag, want = oracle_row(w, r, x + t * ldx, &mag);
                                                        double tol = REL_TOL * mag + ABS_TOL;
                                                        if (!(fabs(y[t * ldy + r] - want) <= tol))
                                                                T_FAIL("matmul %s level %s case %zu (%lldx%lld g%d) n %lld "
                                                                       "token %lld row %lld: got %.9g oracle %.9g NOT OK",
                                                                       mat_name(w),
                                                                       dse_cpu_level_to_string((enum dse_cpu_level)lvl),
                                                                       ci, (long long)w->rows, (long long)w->cols,
                                                                       mm_cases[ci].group, (long long)n, (long long)t,
                                                                       (long long)r, y[t * ldy + r], want);
                                                }
                                                for (int64_t r = w->rows; r < ldy; r++)
                                                        ASSERT_TRUE(isnan(y[t * ldy + r])); /* untouched */
                                        }
                                        n_checked++;
                                }
                                free(x);
                                free(y);
                                mat_free(&m);
                        }
                }
        }
        fprintf(stderr, "  %d matmul (format, shape, tokens, level) combinations checked up to level %s\n", n_checked,
                dse_cpu_level_to_string(top));
}

/* Q4 float matmul at every level: a token's result for a row is bit for bit the same
 * whatever the number of tokens in the call and however the rows are split (the kernel
 * computes whole 16-row blocks and stores only the rows asked for; a session's results
 * must not change with the batch or the thread split). Rows 1..40 cut into ranges that
 * start and end inside 16-row blocks; groups that tile 32 columns and ones that do not. */
TEST(matmul_q4_batch_and_split_invariant) {
        static const struct mat_case qc[] = {{37, 200, 32}, {40, 300, 128}, {19, 97, 96}, {21, 77, 21}, {1, 64, 64}};
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t ci = 0; ci < sizeof qc / sizeof qc[0]; ci++) {
                        rng_seed(7100 + ci);
                        struct mat_buf m;
                        mat_make(&m, DSE_DTYPE_Q4, qc[ci]);
                        const struct dse_qmat *w = &m.w;
                        int64_t n = 7, ldx = w->cols + 1, ldy = w->rows;
                        float *x = make_x(n, w->cols, ldx);
                        float *all = malloc((size_t)(n * ldy) * sizeof(float)), *one = malloc((size_t)ldy * sizeof(float));
                        ASSERT_TRUE(all && one);
                        k.matmul[DSE_DTYPE_Q4](w, x, ldx, n, all, ldy, 0, w->rows);
                        for (int64_t t = 0; t < n; t++) {
                                /* token t alone (matvec) over ranges of 1 + (t * 5) % 19 rows */
                                int64_t len = 1 + (t * 5) % 19;
                                for (int64_t r = 0; r < w->rows; r += len)
                                        k.matvec[DSE_DTYPE_Q4](w, x + t * ldx, one, r, r + len < w->rows ? r + len : w->rows);
                                for (int64_t r = 0; r < w->rows; r++)
                                        if (memcmp(&one[r], &all[t * ldy + r], sizeof(float)) != 0)
                                                T_FAIL("Q4 level %s case %zu token %lld row %lld: alone %.9g, with %lld "
                                                       "tokens %.9g NOT OK",
                                                       dse_cpu_level_to_string((enum dse_cpu_level)lvl), ci, (long long)t,
                                                       (long long)r, one[r], (long long)n, all[t * ldy + r]);
                                /* tokens t.. in a call of their own (a different blocking of tokens) */
                                float *part = malloc((size_t)((n - t) * ldy) * sizeof(float));
                                ASSERT_TRUE(part != NULL);
                                k.matmul[DSE_DTYPE_Q4](w, x + t * ldx, ldx, n - t, part, ldy, 0, w->rows);
                                ASSERT_TRUE(memcmp(part, all + t * ldy, (size_t)((n - t) * ldy) * sizeof(float)) == 0);
                                free(part);
                        }
                        n_checked++;
                        free(x);
                        free(all);
                        free(one);
                        mat_free(&m);
                }
        }
        fprintf(stderr, "  %d Q4 matmul (shape, level) combinations checked up to level %s\n", n_checked,
                dse_cpu_level_to_string(top));
}

/* Q4 with fp16 scales is the float-scale form with those scales widened and every zero
 * point 8: every kernel at every level (AVX-512 with each of its sub-features) gives the
 * same bits on the two, the kernels differing only in how they read s and z. Groups that
 * tile 32 columns and ones that do not, rows cut inside 16-row blocks, 1 to 17 tokens. */
TEST(q4_fp16_scales_equal_float_form_bitwise) {
        static const struct mat_case qc[] = {{37, 200, 32}, {40, 300, 128}, {16, 4096, 32}, {19, 97, 96},
                                             {21, 77, 21},  {3, 1100, 32},  {130, 256, 64}};
        static const int64_t toks[] = {1, 2, 3, 8, 17};
        enum dse_cpu_level top = detected_level();
        unsigned top_feat = detected_features();
        int n_checked = 0;
        for (size_t ci = 0; ci < sizeof qc / sizeof qc[0]; ci++) {
                rng_seed(7700 + ci);
                struct mat_buf m;
                mat_make(&m, MAT_Q4_F16, qc[ci]);
                const struct dse_qmat *wh = &m.w;
                size_t ns = (size_t)((wh->rows + 15) / 16 * 16 * wh->n_groups);
                float *sc = malloc(ns * sizeof *sc);
                uint8_t *zp = malloc(ns);
                ASSERT_TRUE(sc && zp);
                for (size_t i = 0; i < ns; i++) {
                        sc[i] = dse__kern_f16_to_f32(m.scale_f16[i]);
                        zp[i] = 8;
                }
                struct dse_qmat wf = *wh;
                wf.scale = sc;
                wf.zero = zp;
                wf.scale_f16 = NULL;
                int64_t rows = wh->rows, cols = wh->cols, nmax = toks[sizeof toks / sizeof toks[0] - 1];
                int64_t ldx = cols + 1, ldy = rows + 1, r0 = rows > 2 ? rows / 3 : 0;
                float *x = make_x(nmax, cols, ldx);
                size_t ylen = (size_t)(nmax * ldy > cols ? nmax * ldy : cols); /* outputs of rows or of columns */
                float *ya = malloc(ylen * sizeof(float)), *yb = malloc(ylen * sizeof(float));
                float *a = malloc((size_t)rows * sizeof(float));
                void *mem = aligned_alloc(64, dse__xq_bytes(nmax, cols));
                ASSERT_TRUE(ya && yb && a && mem);
                for (int64_t i = 0; i < rows; i++)
                        a[i] = rng_unit();
                for (size_t cfg = 0; cfg < sizeof kernel_tables / sizeof kernel_tables[0]; cfg++) {
                        if ((int)kernel_tables[cfg][0] > (int)top || (kernel_tables[cfg][1] & ~top_feat))
                                continue;
                        struct dse_kernels k;
                        ASSERT_OK(dse__kernels_resolve_with((enum dse_cpu_level)kernel_tables[cfg][0],
                                                            kernel_tables[cfg][1], &k));
                        const char *lv = dse_cpu_level_to_string(k.level);
#define SAME(what, len)                                                                                         \
        do {                                                                                                    \
                if (memcmp(ya, yb, (size_t)(len) * sizeof(float)) != 0)                                       \
                        T_FAIL("%s level %s features %u case %zu (%lldx%lld g%d): fp16 and float forms differ", \
                               what, lv, kernel_tables[cfg][1], ci, (long long)rows, (long long)cols,           \
                               qc[ci].group);                                                                  \
        } while (0)
                        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
                                int64_t n = toks[ti];
                                memset(ya, 0, (size_t)(n * ldy) * sizeof(float));
                                memset(yb, 0, (size_t)(n * ldy) * sizeof(float));
                                k.matmul[DSE_DTYPE_Q4](wh, x, ldx, n, ya, ldy, r0, rows);
                                k.matmul[DSE_DTYPE_Q4](&wf, x, ldx, n, yb, ldy, r0, rows);
                                SAME("matmul", n * ldy);
                                struct dse_xq xq;
                                dse__xq_init(&xq, mem, n, cols);
                                k.quantize_xq(x, ldx, &xq);
                                k.matmul_xq[DSE_DTYPE_Q4](wh, &xq, ya, ldy, r0, rows);
                                k.matmul_xq[DSE_DTYPE_Q4](&wf, &xq, yb, ldy, r0, rows);
                                SAME("matmul_xq", n * ldy);
                        }
                        memset(ya, 0, (size_t)ldy * sizeof(float));
                        memset(yb, 0, (size_t)ldy * sizeof(float));
                        k.matvec[DSE_DTYPE_Q4](wh, x, ya, 0, rows);
                        k.matvec[DSE_DTYPE_Q4](&wf, x, yb, 0, rows);
                        SAME("matvec", rows);
                        for (int64_t r = 0; r < rows; r += 1 + rows / 5) {
                                k.dequant_row(wh, r, ya);
                                k.dequant_row(&wf, r, yb);
                                SAME("dequant_row", cols);
                        }
                        memset(ya, 0, (size_t)cols * sizeof(float));
                        memset(yb, 0, (size_t)cols * sizeof(float));
                        k.axpy_rows(wh, r0, rows - r0, a, ya);
                        k.axpy_rows(&wf, r0, rows - r0, a, yb);
                        SAME("axpy_rows", cols);
#undef SAME
                        n_checked++;
                }
                free(x);
                free(ya);
                free(yb);
                free(a);
                free(mem);
                free(sc);
                free(zp);
                mat_free(&m);
        }
        fprintf(stderr, "  %d Q4 fp16-scale (shape, level) combinations equal the float form up to level %s\n",
                n_checked, dse_cpu_level_to_string(top));
}

/* Float-activation matmul of every format at every level: a token's result for a row is
 * bit for bit its matvec's, whatever the number of tokens in the call (1..9, around the
 * token tiles), where the token sits in it and how the rows are cut (the batched MTP
 * catch-up's rows must equal the rows written one step at a time), and within the
 * oracle's tolerance as matmul_all_formats_all_levels checks it. Odd rows and columns
 * around the row blocks and the 8- and 16-column steps. */
TEST(matmul_tokens_equal_matvec_bitwise_all_levels) {
        static const struct mat_case tc[] = {{1, 1, 32}, {3, 7, 32}, {5, 9, 32},    {2, 15, 32},   {7, 17, 32},
                                             {9, 23, 32}, {6, 31, 32}, {11, 40, 32}, {13, 161, 32}, {5, 193, 64},
                                             {3, 384, 128}, {17, 201, 128}};
        enum dse_cpu_level top = detected_level();
        int n_checked = 0;
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t d = 0; d < sizeof mat_dtypes / sizeof mat_dtypes[0]; d++)
                        for (size_t ci = 0; ci < sizeof tc / sizeof tc[0]; ci++)
                                for (int64_t n = 1; n <= 9; n++) {
                                        rng_seed(8300 + 1000 * d + 10 * ci + (uint64_t)n);
                                        struct mat_buf m;
                                        mat_make(&m, mat_dtypes[d], tc[ci]);
                                        const struct dse_qmat *w = &m.w;
                                        int64_t ldx = w->cols + 5, ldy = w->rows + 1;
                                        float *x = make_x(n, w->cols, ldx);
                                        float *all = malloc((size_t)(n * ldy) * sizeof(float));
                                        float *one = malloc((size_t)ldy * sizeof(float));
                                        ASSERT_TRUE(all && one);
                                        /* rows cut at an odd place, as a thread split may */
                                        int64_t cut = w->rows * 2 / 5;
                                        k.matmul[w->dtype](w, x, ldx, n, all, ldy, 0, cut);
                                        k.matmul[w->dtype](w, x, ldx, n, all, ldy, cut, w->rows);
                                        for (int64_t t = 0; t < n; t++) {
                                                int64_t len = 1 + (t * 3) % 5;
                                                for (int64_t r = 0; r < w->rows; r += len)
                                                        k.matvec[w->dtype](w, x + t * ldx, one, r,
                                                                           r + len < w->rows ? r + len : w->rows);
                                                for (int64_t r = 0; r < w->rows; r++) {
                                                        double mag, want = oracle_row(w, r, x + t * ldx, &mag);
                                                        if (memcmp(&one[r], &all[t * ldy + r], sizeof(float)) != 0 ||
                                                            !(fabs(all[t * ldy + r] - want) <= REL_TOL * mag + ABS_TOL))
                                                                T_FAIL("matmul %s level %s case %zu (%lldx%lld) token %lld "
                                                                       "of %lld row %lld: %.9g, matvec %.9g, oracle %.9g "
                                                                       "NOT OK",
                                                                       mat_name(w),
                                                                       dse_cpu_level_to_string((enum dse_cpu_level)lvl),
                                                                       ci, (long long)w->rows, (long long)w->cols,
                                                                       (long long)t, (long long)n, (long long)r,
                                                                       all[t * ldy + r], one[r], want);
                                                }
                                        }
                                        n_checked++;
                                        free(x);
                                        free(all);
                                        free(one);
                                        mat_free(&m);
                                }
        }
        fprintf(stderr, "  %d (level, format, shape, tokens) matmuls equal their matvecs up to level %s\n",
                n_checked, dse_cpu_level_to_string(top));
}

/* v rounded to its first `bits` significant bits, to nearest with ties to even. */
static float round_to_bits(float v, int bits) {
        int e;
        double m = frexp(v, &e); /* v = m * 2^e, 0.5 <= |m| < 1 */
        return (float)ldexp(nearbyint(ldexp(m, bits)), e - bits);
}

/* The activation scale is the one a ggml Q8_0 block holds (fp16): equal to the float16
 * conversion wherever that is a normal fp16 number, and as precise below that range. */
TEST(xq_scale_is_fp16_precision) {
        static const float amax[] = {1.0f, 0.5f, 127.0f, 3.14159265f, 1.0e-3f, 6.5e4f, 1.0e-30f, 0.0f};
        for (size_t i = 0; i < sizeof amax / sizeof amax[0]; i++) {
                float d = dse__xq_scale(amax[i]);
                ASSERT_FLOAT_EQ(d, round_to_bits(amax[i] / 127.0f, 11));
                if (d >= 0x1p-14f && d <= 65504.0f)
                        ASSERT_FLOAT_EQ(dse__kern_f16_to_f32(gguf_f32_to_f16(amax[i] / 127.0f)), d);
        }
        ASSERT_FLOAT_EQ(dse__xq_scale(127.0f * (1.0f + 0x1p-11f)), 1.0f); /* a tie: to even */
        ASSERT_FLOAT_EQ(dse__xq_scale(127.0f * (1.0f + 0x1p-11f + 0x1p-20f)), 1.0f + 0x1p-10f);
        ASSERT_FLOAT_EQ(dse__xq_scale(0.0f), 0.0f);
}

TEST(quantize_xq_matches_definition_all_levels) {
        enum dse_cpu_level top = detected_level();
        static const int64_t lens[] = {1, 5, 31, 32, 33, 64, 100, 257, 1536};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                int64_t cols = lens[li], n = 3, ldx = cols + 1;
                rng_seed(300 + li);
                float *x = make_x(n, cols, ldx);
                x[0] = 0.5f; /* a tie at the block max: 127 exactly */
                struct dse_xq ref, got;
                void *mref = aligned_alloc(64, dse__xq_bytes(n, cols)), *mgot = aligned_alloc(64, dse__xq_bytes(n, cols));
                dse__xq_init(&ref, mref, n, cols);
                dse__xq_init(&got, mgot, n, cols);
                struct dse_kernels k0;
                ASSERT_OK(dse_kernels_resolve(DSE_CPU_SCALAR, &k0));
                k0.quantize_xq(x, ldx, &ref);
                /* the definition: d = max|x|/127 to fp16's 11 significant bits,
                 * q = round(x * 127/max|x|), padding 0 */
                for (int64_t t = 0; t < n; t++)
                        for (int64_t b = 0; b < ref.n_blocks; b++) {
                                double amax = 0;
                                for (int64_t c = b * 32; c < (b + 1) * 32 && c < cols; c++)
                                        amax = fmax(amax, fabs(x[t * ldx + c]));
                                float dd = ref.d[t * ref.n_blocks + b];
                                float id = amax > 0 ? 127.0f / (float)amax : 0.0f;
                                ASSERT_FLOAT_EQ(dd, round_to_bits((float)amax / 127.0f, 11));
                                for (int64_t c = b * 32; c < (b + 1) * 32; c++) {
                                        int q = ref.q[t * ref.n_blocks * 32 + c];
                                        ASSERT_TRUE(q >= -127 && q <= 127);
                                        if (c >= cols)
                                                ASSERT_EQ(q, 0);
                                        else
                                                ASSERT_EQ(q, (long long)nearbyintf(x[t * ldx + c] * id));
                                }
                        }
                for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                        struct dse_kernels k;
                        ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                        memset(mgot, 0x5a, dse__xq_bytes(n, cols));
                        k.quantize_xq(x, ldx, &got);
                        if (memcmp(got.q, ref.q, (size_t)(n * ref.n_blocks * 32)) != 0 ||
                            memcmp(got.d, ref.d, (size_t)(n * ref.n_blocks) * sizeof(float)) != 0)
                                T_FAIL("quantize_xq level %s cols %lld: not bit-identical to the reference NOT OK",
                                       dse_cpu_level_to_string((enum dse_cpu_level)lvl), (long long)cols);
                }
                free(mref);
                free(mgot);
                free(x);
        }
}

TEST(matmul_xq_q8_q4_all_levels) {
        enum dse_cpu_level top = detected_level();
        unsigned top_feat = detected_features();
        static const int dts[] = {DSE_DTYPE_Q8, DSE_DTYPE_Q4, MAT_Q4_F16};
        int n_checked = 0;
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
                for (size_t ci = 0; ci < sizeof mm_cases / sizeof mm_cases[0]; ci++) {
                        for (size_t ti = 0; ti < sizeof mm_tokens / sizeof mm_tokens[0]; ti++) {
                                if (mm_tokens[ti] > 9 && mm_cases[ci].rows * mm_cases[ci].cols > MM_BIG_TOKENS_MAX_ELEMS)
                                        continue;
                                rng_seed(9000 + 100 * d + 10 * ci + ti);
                                struct mat_buf m;
                                mat_make(&m, dts[d], mm_cases[ci]);
                                const struct dse_qmat *w = &m.w;
                                int64_t n = mm_tokens[ti], cols = w->cols, ldx = cols + 1, ldy = w->rows + 1;
                                float *x = make_x(n, cols, ldx);
                                struct dse_xq xq;
                                void *mem = aligned_alloc(64, dse__xq_bytes(n, cols));
                                dse__xq_init(&xq, mem, n, cols);
                                struct dse_kernels k0;
                                ASSERT_OK(dse_kernels_resolve(DSE_CPU_SCALAR, &k0));
                                k0.quantize_xq(x, ldx, &xq);
                                float *y = malloc((size_t)(n * ldy) * sizeof(float));
                                /* every level, and AVX-512 with and without its VNNI entries */
                                for (size_t cfg = 0; cfg < sizeof kernel_tables / sizeof kernel_tables[0]; cfg++) {
                                        int lvl = (int)kernel_tables[cfg][0];
                                        unsigned feat = kernel_tables[cfg][1];
                                        if (lvl > (int)top || (feat & ~top_feat))
                                                continue;
                                        struct dse_kernels k;
                                        ASSERT_OK(dse__kernels_resolve_with((enum dse_cpu_level)lvl, feat, &k));
                                        ASSERT_TRUE(k.matmul_xq[w->dtype] != NULL);
                                        for (int64_t i = 0; i < n * ldy; i++)
                                                y[i] = NAN;
                                        int64_t mid = (w->rows + 1) / 2;
                                        k.matmul_xq[w->dtype](w, &xq, y, ldy, 0, mid);
                                        k.matmul_xq[w->dtype](w, &xq, y, ldy, mid, w->rows);
                                        for (int64_t t = 0; t < n; t++) {
                                                const int8_t *q = xq.q + t * xq.n_blocks * 32;
                                                const float *dq = xq.d + t * xq.n_blocks;
                                                for (int64_t r = 0; r < w->rows; r++) {
                                                        /* exact: W times the quantized x; loose: W times x,
                                                         * off by at most sum |W| d/2 */
                                                        double want_q = 0, mag = 0, want_x = 0, bound = 0;
                                                        for (int64_t c = 0; c < cols; c++) {
                                                                double wv = oracle_w(w, r, c), xv = dq[c / 32] * (double)q[c];
                                                                want_q += wv * xv;
                                                                mag += fabs(wv * xv);
                                                                want_x += wv * x[t * ldx + c];
                                                                bound += fabs(wv) * dq[c / 32] * 0.5;
                                                        }
                                                        double got = y[t * ldy + r], tol = REL_TOL * mag + ABS_TOL;
                                                        if (!(fabs(got - want_q) <= tol) || !(fabs(got - want_x) <= bound + tol))
                                                                T_FAIL("matmul_xq %s level %s case %zu (%lldx%lld g%d) n %lld "
                                                                       "token %lld row %lld%s: got %.9g, exact on quantized x "
                                                                       "%.9g (tol %.3g), on float x %.9g (bound %.3g) NOT OK",
                                                                       mat_name(w),
                                                                       dse_cpu_level_to_string((enum dse_cpu_level)lvl),
                                                                       ci, (long long)w->rows, (long long)cols,
                                                                       mm_cases[ci].group, (long long)n, (long long)t,
                                                                       (long long)r, feat & DSE_KFEAT_AMX ? " (amx)" : feat & DSE_KFEAT_T8 ? " (vnni t8)" : feat ? " (vnni)" : "", got, want_q,
                                                                       tol, want_x, bound);
                                                }
                                                ASSERT_TRUE(isnan(y[t * ldy + w->rows])); /* untouched */
                                        }
                                        n_checked++;
                                }
                                free(y);
                                free(mem);
                                free(x);
                                mat_free(&m);
                        }
                }
        }
        fprintf(stderr, "  %d matmul_xq (format, shape, tokens, level) combinations checked up to level %s\n",
                n_checked, dse_cpu_level_to_string(top));
}

/* Q4 (and Q8) matmul_xq with enough tokens for the AMX tiles (16) and a partial token
 * block, on shapes past the AMX blocking (two 2048-column chunks, two 128-row
 * super-blocks) with a partial last row block, called over three row ranges that start
 * and end inside row blocks. Each level against the oracle; and the levels whose float
 * order must not depend on the batch (AVX2, AVX-512 VNNI without the 8-token layout:
 * what DSV_NO_AMX=1 serves) bit for bit against each token alone over the whole matrix. */
TEST(matmul_xq_many_tokens_cut_rows) {
        static const struct mat_case cases[] = {{150, 2100, 128}, {37, 4200, 64}, {130, 96, 32}, {16, 64, 32}};
        static const int64_t toks[] = {16, 19, 35};
        static const unsigned cfgs[][3] = {/* level, features, batch-invariant */
                                           {DSE_CPU_AVX2, 0, 1},
                                           {DSE_CPU_AVX512, DSE_KFEAT_VNNI, 1},
                                           {DSE_CPU_AVX512, DSE_KFEAT_VNNI | DSE_KFEAT_T8, 0},
                                           {DSE_CPU_AVX512, DSE_KFEAT_VNNI | DSE_KFEAT_T8 | DSE_KFEAT_AMX, 0}};
        enum dse_cpu_level top = detected_level();
        unsigned top_feat = detected_features();
        static const int dts[] = {DSE_DTYPE_Q4, DSE_DTYPE_Q8, MAT_Q4_F16};
        int n_checked = 0;
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
                        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
                                rng_seed(9700 + 100 * d + 10 * ci + ti);
                                struct mat_buf m;
                                mat_make(&m, dts[d], cases[ci]);
                                const struct dse_qmat *w = &m.w;
                                int64_t n = toks[ti], cols = w->cols, ldx = cols + 3, ldy = w->rows + 2;
                                int64_t cut[4] = {0, 5, w->rows - 21 > 5 ? w->rows - 21 : 6, w->rows};
                                float *x = make_x(n, cols, ldx);
                                struct dse_xq xq, x1;
                                void *mem = aligned_alloc(64, dse__xq_bytes(n, cols)), *mem1 = aligned_alloc(64, dse__xq_bytes(1, cols));
                                dse__xq_init(&xq, mem, n, cols);
                                dse__xq_init(&x1, mem1, 1, cols);
                                struct dse_kernels k0;
                                ASSERT_OK(dse_kernels_resolve(DSE_CPU_SCALAR, &k0));
                                k0.quantize_xq(x, ldx, &xq);
                                float *y = malloc((size_t)(n * ldy) * sizeof(float)), *y1 = malloc((size_t)w->rows * sizeof(float));
                                for (size_t cfg = 0; cfg < sizeof cfgs / sizeof cfgs[0]; cfg++) {
                                        if ((int)cfgs[cfg][0] > (int)top || (cfgs[cfg][1] & ~top_feat))
                                                continue;
                                        struct dse_kernels k;
                                        ASSERT_OK(dse__kernels_resolve_with((enum dse_cpu_level)cfgs[cfg][0], cfgs[cfg][1], &k));
                                        for (int64_t i = 0; i < n * ldy; i++)
                                                y[i] = NAN;
                                        for (int c = 0; c < 3; c++)
                                                k.matmul_xq[w->dtype](w, &xq, y, ldy, cut[c], cut[c + 1]);
                                        for (int64_t t = 0; t < n; t++) {
                                                const int8_t *q = xq.q + t * xq.n_blocks * 32;
                                                const float *dq = xq.d + t * xq.n_blocks;
                                                if (cfgs[cfg][2]) { /* the token alone, all rows in one call */
                                                        memcpy(x1.q, q, (size_t)xq.n_blocks * 32);
                                                        memcpy(x1.d, dq, (size_t)xq.n_blocks * sizeof(float));
                                                        k.matmul_xq[w->dtype](w, &x1, y1, 0, 0, w->rows);
                                                }
                                                for (int64_t r = 0; r < w->rows; r++) {
                                                        double want = 0, mag = 0;
                                                        for (int64_t c = 0; c < cols; c++) {
                                                                double p = oracle_w(w, r, c) * dq[c / 32] * (double)q[c];
                                                                want += p;
                                                                mag += fabs(p);
                                                        }
                                                        double got = y[t * ldy + r];
                                                        if (!(fabs(got - want) <= REL_TOL * mag + ABS_TOL) ||
                                                            (cfgs[cfg][2] && memcmp(&y[t * ldy + r], &y1[r], sizeof y1[r]) != 0))
                                                                T_FAIL("matmul_xq %s level %s feat %u (%lldx%lld g%d) n %lld token %lld "
                                                                       "row %lld: got %.9g, oracle %.9g, the token alone %.9g NOT OK",
                                                                       mat_name(w),
                                                                       dse_cpu_level_to_string((enum dse_cpu_level)cfgs[cfg][0]),
                                                                       cfgs[cfg][1], (long long)w->rows, (long long)cols,
                                                                       cases[ci].group, (long long)n, (long long)t, (long long)r,
                                                                       got, want, cfgs[cfg][2] ? y1[r] : NAN);
                                                }
                                                ASSERT_TRUE(isnan(y[t * ldy + w->rows])); /* untouched */
                                        }
                                        n_checked++;
                                }
                                free(y1);
                                free(y);
                                free(mem1);
                                free(mem);
                                free(x);
                                mat_free(&m);
                        }
        fprintf(stderr, "  %d matmul_xq (format, shape, tokens, level) combinations with cut row ranges checked\n",
                n_checked);
}

/* The AVX2 Q8 matmul_xq equals its scalar twin bit for bit (its integer block sums are
 * exact and it rounds the scaling and the running sum as the reference does), on the
 * matmul shapes with 1..34 tokens (tiles of 32, and the 1 or 2 after them) over cut row
 * ranges (8-row blocks, the parts they are taken from, a short last block), and at the
 * integer extremes: rows of -128 and of 127
 * against blocks of +-127 (vpmaddubsw's pair sums at 2 * 128 * 127, just short of
 * saturating). Groups not a multiple of 32 go to the reference itself. */
TEST(matmul_xq_q8_avx2_equals_reference_bitwise) {
        static const int64_t toks[] = {1, 2, 3, 8, 15, 16, 17, 33, 34};
        if (detected_level() < DSE_CPU_AVX2)
                return;
        struct dse_kernels k;
        ASSERT_OK(dse__kernels_resolve_with(DSE_CPU_AVX2, 0, &k));
        int n_checked = 0;
        for (size_t ci = 0; ci < sizeof mm_cases / sizeof mm_cases[0]; ci++)
                for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
                        if (toks[ti] > 3 && mm_cases[ci].rows * mm_cases[ci].cols > MM_BIG_TOKENS_MAX_ELEMS)
                                continue;
                        rng_seed(9900 + 10 * ci + ti);
                        struct mat_buf m;
                        mat_make(&m, DSE_DTYPE_Q8, mm_cases[ci]);
                        const struct dse_qmat *w = &m.w;
                        int64_t n = toks[ti], cols = w->cols, ldx = cols + 5, ldy = w->rows + 3;
                        int8_t *wd = m.data;
                        for (int64_t c = 0; c < cols; c++) {
                                wd[c] = -128;
                                if (w->rows > 1)
                                        wd[cols + c] = 127;
                        }
                        float *x = make_x(n, cols, ldx);
                        for (int64_t c = 0; c < cols; c++) {
                                x[c] = 1.0f; /* token 0: q = 127 everywhere */
                                if (n > 2)
                                        x[2 * ldx + c] = c % 2 ? -3.0f : 3.0f;
                        }
                        struct dse_xq xq;
                        void *mem = aligned_alloc(64, dse__xq_bytes(n, cols));
                        dse__xq_init(&xq, mem, n, cols);
                        k.quantize_xq(x, ldx, &xq);
                        float *want = malloc((size_t)(n * ldy) * sizeof(float)), *got = malloc((size_t)(n * ldy) * sizeof(float));
                        for (int64_t i = 0; i < n * ldy; i++)
                                want[i] = got[i] = NAN;
                        dse__kernels_ref_matmul_xq(w, &xq, want, ldy, 0, w->rows);
                        int64_t cut[4] = {0, w->rows / 3, w->rows - w->rows / 5, w->rows};
                        for (int c = 0; c < 3; c++)
                                k.matmul_xq[DSE_DTYPE_Q8](w, &xq, got, ldy, cut[c], cut[c + 1]);
                        for (int64_t t = 0; t < n; t++)
                                for (int64_t r = 0; r <= w->rows; r++) /* the row past the end untouched */
                                        if (memcmp(&got[t * ldy + r], &want[t * ldy + r], sizeof(float)) != 0)
                                                T_FAIL("matmul_xq Q8 avx2 (%lldx%lld g%d) n %lld token %lld row %lld: "
                                                       "%.9g, the reference %.9g NOT OK",
                                                       (long long)w->rows, (long long)cols, mm_cases[ci].group,
                                                       (long long)n, (long long)t, (long long)r, got[t * ldy + r],
                                                       want[t * ldy + r]);
                        n_checked++;
                        free(got);
                        free(want);
                        free(mem);
                        free(x);
                        mat_free(&m);
                }
        fprintf(stderr, "  %d Q8 matmul_xq (shape, tokens) combinations bitwise against the reference\n", n_checked);
}

TEST(f32_to_bf16_rounds_to_nearest_even) {
        ASSERT_EQ(dse__kern_f32_to_bf16(1.0f), 0x3f80);
        ASSERT_EQ(dse__kern_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);     /* tie: to even */
        ASSERT_EQ(dse__kern_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82); /* tie: to even, up */
        ASSERT_EQ(dse__kern_f32_to_bf16(1.0f + ldexpf(1, -7) + ldexpf(1, -9)), 0x3f81);
        ASSERT_EQ(dse__kern_f32_to_bf16(-2.0f), 0xc000);
        ASSERT_TRUE(isnan(dse__kern_bf16_to_f32(dse__kern_f32_to_bf16(NAN))));
}

/* matmul_bf16act: its _ref twin against a float64 oracle on bf16-rounded activations,
 * and every level that fills it against the same oracle. */
/* The AMX tiles take 16 tokens or more, rows in 16s and 32-column multiples. */
static const struct mat_case bf16act_big[] = {{48, 2112, 32}, {33, 64, 32}, {16, 4096, 32}, {17, 96, 32}};
static const int64_t bf16act_big_tokens[] = {16, 17, 32};

TEST(matmul_bf16act_against_oracle) {
        struct dse_cpu_info cpu;
        int ok = dse_cpu_detect(&cpu, NULL) >= 0;
        int have = ok && cpu.detected >= DSE_CPU_AVX512 && cpu.avx512bf16;
        int amx = have && cpu.amx_tile && cpu.amx_bf16 && dse__kernels_amx_usable();
        struct dse_kernels k, ka;
        enum dse_cpu_level lvl = ok && cpu.detected >= DSE_CPU_AVX512 ? DSE_CPU_AVX512 : DSE_CPU_SCALAR;
        ASSERT_OK(dse__kernels_resolve_with(lvl, have ? DSE_KFEAT_BF16 : 0, &k));
        ASSERT_OK(dse__kernels_resolve_with(lvl, amx ? DSE_KFEAT_BF16 | DSE_KFEAT_VNNI | DSE_KFEAT_AMX : 0, &ka));
        ASSERT_TRUE(have ? k.matmul_bf16act != NULL : k.matmul_bf16act == NULL);
        dse_matmul_fn fns[3] = {dse__kernels_ref_matmul_bf16act, k.matmul_bf16act, amx ? ka.matmul_bf16act : NULL};
        static const char *const names[3] = {"ref", "avx512-bf16", "amx-bf16"};
        size_t n_small = sizeof mm_cases / sizeof mm_cases[0], n_big = sizeof bf16act_big / sizeof bf16act_big[0];
        size_t n_tok = sizeof mm_tokens / sizeof mm_tokens[0], n_btok = sizeof bf16act_big_tokens / sizeof bf16act_big_tokens[0];
        int n_checked = 0;
        for (size_t ci = 0; ci < n_small + n_big; ci++)
                for (size_t ti = 0; ti < (ci < n_small ? n_tok : n_btok); ti++) {
                        struct mat_case mc = ci < n_small ? mm_cases[ci] : bf16act_big[ci - n_small];
                        int64_t n = ci < n_small ? mm_tokens[ti] : bf16act_big_tokens[ti];
                        if (ci < n_small && n > 9 && mc.rows * mc.cols > MM_BIG_TOKENS_MAX_ELEMS)
                                continue;
                        rng_seed(12000 + 10 * ci + ti);
                        struct mat_buf m;
                        mat_make(&m, DSE_DTYPE_BF16, mc);
                        const struct dse_qmat *w = &m.w;
                        int64_t ldx = w->cols + 3, ldy = w->rows + 2;
                        float *x = make_x(n, w->cols, ldx);
                        float *y = malloc((size_t)(n * ldy) * sizeof(float));
                        for (int f = 0; f < 3; f++) {
                                if (!fns[f])
                                        continue;
                                for (int64_t i = 0; i < n * ldy; i++)
                                        y[i] = NAN;
                                int64_t mid = w->rows / 2;
                                fns[f](w, x, ldx, n, y, ldy, 0, mid);
                                fns[f](w, x, ldx, n, y, ldy, mid, w->rows);
                                for (int64_t t = 0; t < n; t++) {
                                        for (int64_t r = 0; r < w->rows; r++) {
                                                double want = 0, mag = 0;
                                                for (int64_t c = 0; c < w->cols; c++) {
                                                        double xb = dse__kern_bf16_to_f32(dse__kern_f32_to_bf16(x[t * ldx + c]));
                                                        double p = oracle_w(w, r, c) * xb;
                                                        want += p;
                                                        mag += fabs(p);
                                                }
                                                if (!(fabs(y[t * ldy + r] - want) <= REL_TOL * mag + ABS_TOL))
                                                        T_FAIL("matmul_bf16act %s case %zu (%lldx%lld) n %lld token %lld "
                                                               "row %lld: got %.9g oracle %.9g NOT OK",
                                                               names[f], ci, (long long)w->rows, (long long)w->cols,
                                                               (long long)n, (long long)t, (long long)r, y[t * ldy + r],
                                                               want);
                                        }
                                        for (int64_t r = w->rows; r < ldy; r++)
                                                ASSERT_TRUE(isnan(y[t * ldy + r])); /* untouched */
                                }
                                n_checked++;
                        }
                        free(x);
                        free(y);
                        mat_free(&m);
                }
        fprintf(stderr, "  %d matmul_bf16act (shape, tokens, ref/simd/amx) combinations checked\n", n_checked);
}

/* softmax_parts at every level: the max exactly, e^(x - max) and their sum against
 * double over spread-out logits (and equal ones), and the level's softmax is those
 * weights divided by the sum (the split attention divides in its merge instead). */
TEST(softmax_parts_all_levels) {
        enum dse_cpu_level top = detected_level();
        static const int64_t lens[] = {1, 2, 15, 16, 17, 100, 513, 1000};
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t li = 0; li < 2 * sizeof lens / sizeof lens[0]; li++) {
                        int64_t n = lens[li / 2];
                        int equal = li % 2;
                        rng_seed(4700 + (uint64_t)li);
                        float a[1000], out[1000], sm[1000], max = 0, sum = 0;
                        double mx = -1e300, se = 0;
                        for (int64_t i = 0; i < n; i++) {
                                a[i] = equal ? -3.5f : 60.0f * rng_unit();
                                mx = a[i] > mx ? a[i] : mx;
                        }
                        for (int64_t i = 0; i < n; i++)
                                se += exp((double)a[i] - mx);
                        memcpy(out, a, sizeof(float) * (size_t)n);
                        k.softmax_parts(out, n, &max, &sum);
                        ASSERT_TRUE((double)max == mx);
                        ASSERT_NEAR(sum, se, 1e-6 * se);
                        for (int64_t i = 0; i < n; i++) {
                                double want = exp((double)a[i] - mx);
                                ASSERT_NEAR(out[i], want, (1e-6 + 1.2e-7 * fabs(a[i] - mx)) * want + 1e-37);
                        }
                        memcpy(sm, a, sizeof(float) * (size_t)n);
                        k.softmax(sm, n);
                        for (int64_t i = 0; i < n; i++)
                                ASSERT_NEAR(sm[i], out[i] / sum, 2.5e-7 * (out[i] / sum) + 1e-38);
                }
        }
}

/* softmax and swiglu where their exponentials get large or tiny: logits spread over
 * +-60, gates over +-100 (past where e^-gate overflows), at every level, against double. */
TEST(softmax_swiglu_wide_range_all_levels) {
        enum dse_cpu_level top = detected_level();
        static const int64_t lens[] = {1, 5, 16, 17, 100, 1000};
        for (int lvl = DSE_CPU_SCALAR; lvl <= (int)top; lvl++) {
                struct dse_kernels k;
                ASSERT_OK(dse_kernels_resolve((enum dse_cpu_level)lvl, &k));
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                        int64_t n = lens[li];
                        rng_seed(4400 + (uint64_t)li);
                        float a[1000], b[1000], out[1000];
                        double mx = -1e300, se = 0;
                        for (int64_t i = 0; i < n; i++) {
                                a[i] = 60.0f * rng_unit();
                                b[i] = rng_unit();
                                mx = a[i] > mx ? a[i] : mx;
                        }
                        for (int64_t i = 0; i < n; i++)
                                se += exp((double)a[i] - mx);
                        memcpy(out, a, sizeof(float) * (size_t)n);
                        k.softmax(out, n);
                        for (int64_t i = 0; i < n; i++) {
                                /* a[i] - max rounds to float: relative 2^-24 * |a[i] - max| */
                                double want = exp((double)a[i] - mx) / se;
                                ASSERT_NEAR(out[i], want, (1e-6 + 1.2e-7 * fabs(a[i] - mx)) * want + 1e-37);
                        }
                        for (int64_t i = 0; i < n; i++)
                                out[i] = a[i] * (100.0f / 60.0f);
                        k.swiglu(out, b, n);
                        for (int64_t i = 0; i < n; i++) {
                                double g = (double)(a[i] * (100.0f / 60.0f)), want = g / (1 + exp(-g)) * b[i];
                                ASSERT_NEAR(out[i], want, 1e-6 * fabs(want) + 1e-30);
                        }
                }
        }
}
