/* t.h — the project's test harness: one executable per test file, run by ctest.
 *
 *     #include "t.h"
 *     TEST(pool_sums) { ASSERT_EQ(sum(3), 6); }
 *
 * Each TEST registers itself; main() (defined here, so include t.h from exactly one
 * file per test executable) runs them all, or those named on the command line, and
 * ends with the line "N passed, N failed". A failed ASSERT ends the current test. */
#ifndef DSV_T_H
#define DSV_T_H

#include <errno.h>
#include <math.h>
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

#define ASSERT_NEAR(a, b, tol)                                                        \
        do {                                                                          \
                double t_a_ = (a), t_b_ = (b);                                        \
                if (!(fabs(t_a_ - t_b_) <= (tol)))                                    \
                        T_FAIL("%s ~ %s: %g vs %g (tol %g)", #a, #b, t_a_, t_b_, (double)(tol)); \
        } while (0)

/* Path of a file under the shared fixtures folder (DSV_FIXTURES, set by ctest). */
static inline const char *t_fixture(const char *rel) {
        static char buf[4][4096];
        static int slot;
        const char *root = getenv("DSV_FIXTURES");
        char *out = buf[slot++ % 4];
        snprintf(out, sizeof buf[0], "%s/%s", root ? root : "../shared/fixtures", rel);
        return out;
}

int main(int argc, char **argv) {
        int passed = 0, failed = 0;
        for (int i = 0; i < t_n_cases; i++) {
                if (argc > 1) {
                        int wanted = 0;
                        for (int a = 1; a < argc; a++)
                                wanted |= strcmp(argv[a], t_cases[i].name) == 0;
                        if (!wanted)
                                continue;
                }
                t_failed_current = 0;
                t_cases[i].fn();
                fprintf(stderr, "%s %s\n", t_failed_current ? "FAIL" : "ok  ", t_cases[i].name);
                if (t_failed_current)
                        failed++;
                else
                        passed++;
        }
        printf("%d passed, %d failed\n", passed, failed);
        return failed || passed == 0 ? 1 : 0;
}

#endif
