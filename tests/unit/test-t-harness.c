/* The harness's own checks: each assertion holds on right values and fails, with a
 * message naming both values, on wrong ones (run from t-harness-wrong-values, one
 * case per child process); the ulp distance; slurp(). */
#include <float.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

#ifndef T_WRONG_VALUES
#error "T_WRONG_VALUES must name the t-harness-wrong-values executable"
#endif

TEST(assertions_hold_on_right_values) {
        ASSERT_TRUE(1 + 1 == 2);
        ASSERT_OK(0);
        ASSERT_OK(3);
        ASSERT_ERR(-ENOENT, -ENOENT);
        ASSERT_EQ(-1, -1LL);
        ASSERT_STREQ("abc", "abc");
        ASSERT_FLOAT_EQ(5.9604644775390625e-8f, 0x1p-24f);
        ASSERT_FLOAT_EQ(0.0f, -0.0f);
        ASSERT_FLOAT_EQ(0.5f, 0.5);
        ASSERT_NEAR(1.0, 1.0009, 1e-3);
        ASSERT_ULPS(1.0f, nextafterf(nextafterf(1.0f, 2.0f), 2.0f), 2);
        ASSERT_ULPS(1.0, nextafter(1.0, 0.0), 1);
        ASSERT_ULPS(-FLT_TRUE_MIN, FLT_TRUE_MIN, 2);
        ASSERT_ULPS(INFINITY, INFINITY, 0);
}

TEST(ulp_distance_counts_representable_values) {
        ASSERT_EQ(t_ulps_float(1.0f, 1.0f), 0);
        ASSERT_EQ(t_ulps_float(0.0f, -0.0f), 0);
        ASSERT_EQ(t_ulps_float(1.0f, nextafterf(1.0f, 0.0f)), 1);
        ASSERT_EQ(t_ulps_float(-FLT_TRUE_MIN, FLT_TRUE_MIN), 2);
        ASSERT_EQ(t_ulps_float(FLT_MAX, INFINITY), 1);
        ASSERT_EQ(t_ulps_float(-FLT_MAX, FLT_MAX), 2 * 0x7f7fffffLL);
        ASSERT_TRUE(t_ulps_float(NAN, NAN) == UINT64_MAX);
        ASSERT_EQ(t_ulps_double(2.0, nextafter(2.0, 3.0)), 1);
        ASSERT_EQ(t_ulps_double(-DBL_TRUE_MIN, 0.0), 1);
        ASSERT_TRUE(t_ulps_double(-DBL_MAX, DBL_MAX) == 2 * 0x7fefffffffffffffULL);
        ASSERT_TRUE(t_ulps_double(1.0, NAN) == UINT64_MAX);
}

/* Runs one case of t-harness-wrong-values; its exit status, and its output in out. */
static int run_case(const char *name, char *out, size_t size) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", T_WRONG_VALUES, name);
        FILE *p = popen(cmd, "r");
        if (!p)
                return -errno;
        size_t n = fread(out, 1, size - 1, p);
        out[n] = '\0';
        int status = pclose(p);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(each_assertion_fails_on_a_wrong_value) {
        static const struct {
                const char *name, *message;
        } cases[] = {
                {"true_on_false", "expected true: 1 + 1 == 3"},
                {"ok_on_error", "-ENOENT failed: No such file or directory"},
                {"err_on_another_error", "returned -22 (Invalid argument), expected -ENOENT"},
                {"err_on_success", "returned 0 (success), expected -ENOENT"},
                {"eq_on_unequal", "2 == 3: 2 != 3"},
                {"streq_on_unequal", "\"abc\" != \"abd\""},
                {"streq_on_null", "\"(null)\" != \"abc\""},
                {"float_eq_on_neighbour", "1 (0x1p+0) != 1.0000001192092896 (0x1.000002p+0)"},
                {"float_eq_on_subnormal_vs_zero", "5.9604644775390625e-08 (0x1p-24) != 0 (0x0p+0)"},
                {"float_eq_on_fraction_vs_zero", "0.5 (0x1p-1) != 0 (0x0p+0)"},
                {"float_eq_on_nan", "nan (nan) != nan (nan)"},
                {"near_outside_tolerance", "1 vs 1.0011 (tol 0.001)"},
                {"near_on_nan", "nan vs 1 (tol 1e+09)"},
                {"ulps_float_one_over", "3 ulps apart (max 2)"},
                {"ulps_double_one_over", "2 ulps apart (max 1)"},
                {"ulps_mixed_counts_double_ulps", "ulps apart (max 1000)"},
                {"ulps_across_zero", "2 ulps apart (max 1)"},
                {"ulps_on_nan", "18446744073709551615 ulps apart"},
        };
        char out[4096], line[200];
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                int status = run_case(cases[i].name, out, sizeof out);
                if (status != 1 || !strstr(out, cases[i].message))
                        T_FAIL("%s: exit %d, expected 1 and \"%s\" in:\n%s", cases[i].name, status,
                               cases[i].message, out);
                snprintf(line, sizeof line, "FAIL %s\n", cases[i].name);
                ASSERT_TRUE(strstr(out, line) != NULL);
                ASSERT_TRUE(strstr(out, "0 passed, 1 failed, 0 skipped") != NULL);
        }
}

TEST(a_skip_exits_77_with_its_reason) {
        char out[4096];
        ASSERT_EQ(run_case("skip_says_why", out, sizeof out), 77);
        ASSERT_TRUE(strstr(out, "SKIP: needs a reason") != NULL);
        ASSERT_TRUE(strstr(out, "0 passed, 0 failed, 1 skipped") != NULL);
}

TEST(a_run_of_no_case_fails) {
        char out[4096];
        ASSERT_EQ(run_case("no_such_case", out, sizeof out), 1);
}

TEST(slurp_reads_whole_files) {
        char path[] = "/tmp/dsv-t-slurp-XXXXXX";
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        static char big[10000];
        for (size_t i = 0; i < sizeof big; i++)
                big[i] = (char)('a' + i % 26);
        ASSERT_EQ(write(fd, big, sizeof big), (ssize_t)sizeof big);
        close(fd);
        size_t len = 0;
        char *text = slurp(path, &len);
        unlink(path);
        ASSERT_TRUE(text != NULL);
        ASSERT_EQ(len, sizeof big);
        ASSERT_TRUE(memcmp(text, big, sizeof big) == 0);
        ASSERT_EQ(text[len], '\0');
        free(text);
        /* A /proc file reports size 0 but has content. */
        text = slurp("/proc/self/status", &len);
        ASSERT_TRUE(text != NULL && len > 0 && strstr(text, "Pid:") != NULL);
        ASSERT_EQ(strlen(text), len);
        free(text);
        errno = 0;
        ASSERT_TRUE(slurp("/nonexistent/dsv-t-slurp", NULL) == NULL);
        ASSERT_EQ(errno, ENOENT);
}
