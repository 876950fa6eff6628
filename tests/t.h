/* t.h — the project's test harness: one executable per test file, run by ctest.
 *
 *     #include "t.h"
 *     TEST(pool_sums) { ASSERT_EQ(sum(3), 6); }
 *
 * Each TEST registers itself; main() (defined here, so include t.h from exactly one
 * file per test executable) runs them all, or those named on the command line, and
 * ends with the line "N passed, N failed, N skipped". A failed ASSERT ends the current
 * test; T_SKIP("reason") ends it as skipped, and a run with skips and no failures exits
 * 77, which ctest reports as a skip (tests/skips.allow lists the skips CI accepts).
 *
 * ASSERT_EQ compares integers (and pointers) and refuses floating arguments at compile
 * time; floating values go through ASSERT_FLOAT_EQ (exact), ASSERT_NEAR (absolute
 * tolerance) or ASSERT_ULPS (within n units in the last place of their type). */
#ifndef DSV_T_H
#define DSV_T_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*t_fn)(void);
struct t_case {
        const char *name;
        t_fn fn;
};

#define T_MAX_CASES 512
static struct t_case t_cases[T_MAX_CASES];
static int t_n_cases;
static int t_failed_current;
static int t_skipped_current;

static inline void t_register(const char *name, t_fn fn) {
        if (t_n_cases < T_MAX_CASES)
                t_cases[t_n_cases++] = (struct t_case){name, fn};
}

#define TEST(name)                                                                    \
        static void test_##name(void);                                                \
        __attribute__((constructor)) static void test_register_##name(void) {         \
                t_register(#name, test_##name);                                       \
        }                                                                             \
        static void test_##name(void)

#define T_FAIL(...)                                                                   \
        do {                                                                          \
                fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                     \
                fprintf(stderr, __VA_ARGS__);                                         \
                fprintf(stderr, "\n");                                                \
                t_failed_current = 1;                                                 \
                return;                                                               \
        } while (0)

/* Ends the current test as skipped, saying why: for a test that cannot run here (not
 * root, under ASan, a missing tool), which must not count as a pass. */
#define T_SKIP(...)                                                                   \
        do {                                                                          \
                fprintf(stderr, "  SKIP: ");                                          \
                fprintf(stderr, __VA_ARGS__);                                         \
                fprintf(stderr, "\n");                                                \
                t_skipped_current = 1;                                                \
                return;                                                               \
        } while (0)

#define T_IS_FLOATING(x) _Generic((x), float: 1, double: 1, long double: 1, default: 0)

#define ASSERT_TRUE(c)                                                                \
        do {                                                                          \
                if (!(c))                                                             \
                        T_FAIL("expected true: %s", #c);                              \
        } while (0)

/* For calls returning 0/count or -errno. */
#define ASSERT_OK(expr)                                                               \
        do {                                                                          \
                long long t_r_ = (long long)(expr);                                   \
                if (t_r_ < 0)                                                         \
                        T_FAIL("%s failed: %s", #expr, strerror((int)-t_r_));         \
        } while (0)

#define ASSERT_ERR(expr, err)                                                         \
        do {                                                                          \
                long long t_r_ = (long long)(expr);                                   \
                if (t_r_ != (long long)(err))                                         \
                        T_FAIL("%s returned %lld (%s), expected %s", #expr, t_r_,     \
                               t_r_ < 0 ? strerror((int)-t_r_) : "success", #err);    \
        } while (0)

#define ASSERT_EQ(a, b)                                                               \
        do {                                                                          \
                _Static_assert(!T_IS_FLOATING(a) && !T_IS_FLOATING(b),                \
                               "ASSERT_EQ compares integers: use ASSERT_FLOAT_EQ, "   \
                               "ASSERT_NEAR or ASSERT_ULPS for floating values");     \
                long long t_a_ = (long long)(a), t_b_ = (long long)(b);               \
                if (t_a_ != t_b_)                                                     \
                        T_FAIL("%s == %s: %lld != %lld", #a, #b, t_a_, t_b_);         \
        } while (0)

#define ASSERT_STREQ(a, b)                                                            \
        do {                                                                          \
                const char *t_a_ = (a), *t_b_ = (b);                                  \
                if (!t_a_ || !t_b_ || strcmp(t_a_, t_b_) != 0)                        \
                        T_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, t_a_ ? t_a_ : "(null)", \
                               t_b_ ? t_b_ : "(null)");                               \
        } while (0)

/* Exactly equal as values (so -0 equals +0, and NaN equals nothing). Float arguments
 * widen to double exactly, so this is also the exact float comparison. */
#define ASSERT_FLOAT_EQ(a, b)                                                         \
        do {                                                                          \
                double t_a_ = (a), t_b_ = (b);                                        \
                if (!(t_a_ == t_b_))                                                  \
                        T_FAIL("%s == %s: %.17g (%a) != %.17g (%a)", #a, #b, t_a_, t_a_, \
                               t_b_, t_b_);                                           \
        } while (0)

/* |a - b| <= tol, an absolute tolerance. */
#define ASSERT_NEAR(a, b, tol)                                                        \
        do {                                                                          \
                double t_a_ = (a), t_b_ = (b);                                        \
                if (!(fabs(t_a_ - t_b_) <= (tol)))                                    \
                        T_FAIL("%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, t_a_, t_b_, (double)(tol)); \
        } while (0)

/* The distance in units in the last place between two values given by their bit
 * patterns (sign-magnitude), neg_zero being the pattern of -0: the number of
 * representable values between them, counted across zero. */
static inline uint64_t t_ulps_apart(int64_t ia, int64_t ib, int64_t neg_zero) {
        int64_t oa = ia < 0 ? neg_zero - ia : ia; /* to a count that orders like the values */
        int64_t ob = ib < 0 ? neg_zero - ib : ib;
        /* The distance can exceed INT64_MAX for doubles; unsigned subtraction still gets it. */
        return oa > ob ? (uint64_t)oa - (uint64_t)ob : (uint64_t)ob - (uint64_t)oa;
}

/* Float and double ulps apart; UINT64_MAX when either is NaN. */
static inline uint64_t t_ulps_float(float a, float b) {
        int32_t ia, ib;
        memcpy(&ia, &a, sizeof ia);
        memcpy(&ib, &b, sizeof ib);
        return isnan(a) || isnan(b) ? UINT64_MAX : t_ulps_apart(ia, ib, INT32_MIN);
}

static inline uint64_t t_ulps_double(double a, double b) {
        int64_t ia, ib;
        memcpy(&ia, &a, sizeof ia);
        memcpy(&ib, &b, sizeof ib);
        return isnan(a) || isnan(b) ? UINT64_MAX : t_ulps_apart(ia, ib, INT64_MIN);
}

/* a and b within max_ulps units in the last place of their common type (float when
 * both are float, else double). */
#define ASSERT_ULPS(a, b, max_ulps)                                                   \
        do {                                                                          \
                double t_a_ = (a), t_b_ = (b);                                        \
                uint64_t t_d_ = _Generic((a) + (b),                                   \
                                         float: t_ulps_float((float)t_a_, (float)t_b_), \
                                         default: t_ulps_double(t_a_, t_b_));         \
                if (t_d_ > (uint64_t)(max_ulps))                                      \
                        T_FAIL("%s ~ %s: %.17g vs %.17g, %llu ulps apart (max %llu)", #a, #b, \
                               t_a_, t_b_, (unsigned long long)t_d_,                  \
                               (unsigned long long)(max_ulps));                       \
        } while (0)

/* Marsaglia's xorshift64, for tests that draw seeded random inputs. */
static inline uint64_t t_xorshift64(uint64_t *state) {
        uint64_t x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *state = x;
}

/* Path of a file under the shared fixtures folder (DSV_FIXTURES, set by ctest). */
static inline const char *t_fixture(const char *rel) {
        static char buf[4][4096];
        static int slot;
        const char *root = getenv("DSV_FIXTURES");
        char *out = buf[slot++ % 4];
        snprintf(out, sizeof buf[0], "%s/%s", root ? root : "../shared/fixtures", rel);
        return out;
}

/* The whole of a file, NUL-terminated (caller frees), and its length in *ret_len when
 * ret_len is not NULL; NULL with errno set when it cannot be read. Reads until end of
 * file, so pipes and /proc files work too. void * because callers read text and binary
 * (float arrays, model bytes) alike. */
static inline void *slurp(const char *path, size_t *ret_len) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        size_t len = 0, cap = 4096;
        char *buf = malloc(cap);
        while (buf) {
                len += fread(buf + len, 1, cap - 1 - len, f);
                if (len < cap - 1)
                        break;
                char *grown = realloc(buf, cap *= 2);
                if (!grown)
                        free(buf);
                buf = grown;
        }
        int err = !buf ? ENOMEM : ferror(f) ? EIO : 0;
        fclose(f);
        if (err) {
                free(buf);
                errno = err;
                return NULL;
        }
        buf[len] = '\0';
        if (ret_len)
                *ret_len = len;
        return buf;
}

int main(int argc, char **argv) {
        int passed = 0, failed = 0, skipped = 0;
        for (int i = 0; i < t_n_cases; i++) {
                if (argc > 1) {
                        int wanted = 0;
                        for (int a = 1; a < argc; a++)
                                wanted |= strcmp(argv[a], t_cases[i].name) == 0;
                        if (!wanted)
                                continue;
                }
                t_failed_current = 0;
                t_skipped_current = 0;
                t_cases[i].fn();
                fprintf(stderr, "%s %s\n",
                        t_failed_current ? "FAIL" : t_skipped_current ? "skip" : "ok  ",
                        t_cases[i].name);
                if (t_failed_current)
                        failed++;
                else if (t_skipped_current)
                        skipped++;
                else
                        passed++;
        }
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
        if (failed || passed + skipped == 0)
                return 1;
        return skipped ? 77 : 0;
}

#endif
