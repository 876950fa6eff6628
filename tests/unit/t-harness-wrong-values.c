/* Cases that must each fail (or skip): the harness self-test (test-t-harness) runs them
 * one at a time by name and checks the exit status and the message. Not a ctest of its
 * own, since every case here fails on purpose. */
#include <float.h>

#include "t.h"

TEST(true_on_false) { ASSERT_TRUE(1 + 1 == 3); }
TEST(ok_on_error) { ASSERT_OK(-ENOENT); }
TEST(err_on_another_error) { ASSERT_ERR(-EINVAL, -ENOENT); }
TEST(err_on_success) { ASSERT_ERR(0, -ENOENT); }
TEST(eq_on_unequal) { ASSERT_EQ(2, 3); }
TEST(streq_on_unequal) { ASSERT_STREQ("abc", "abd"); }
TEST(streq_on_null) { ASSERT_STREQ(NULL, "abc"); }

/* The neighbouring value, a subnormal against zero (what a cast to an integer let
 * through), and NaN, which equals nothing. */
TEST(float_eq_on_neighbour) { ASSERT_FLOAT_EQ(1.0f, nextafterf(1.0f, 2.0f)); }
TEST(float_eq_on_subnormal_vs_zero) { ASSERT_FLOAT_EQ(5.9604644775390625e-8f, 0.0f); }
TEST(float_eq_on_fraction_vs_zero) { ASSERT_FLOAT_EQ(0.5, 0.0); }
TEST(float_eq_on_nan) { ASSERT_FLOAT_EQ((double)NAN, (double)NAN); }
TEST(near_outside_tolerance) { ASSERT_NEAR(1.0, 1.0011, 1e-3); }
TEST(near_on_nan) { ASSERT_NEAR((double)NAN, 1.0, 1e9); }
TEST(ulps_float_one_over) {
        float three_up = nextafterf(nextafterf(nextafterf(1.0f, 2.0f), 2.0f), 2.0f);
        ASSERT_ULPS(1.0f, three_up, 2);
}
TEST(ulps_double_one_over) {
        double two_up = nextafter(nextafter(1.0, 2.0), 2.0);
        ASSERT_ULPS(1.0, two_up, 1);
}
/* A float against the double nearest it is compared in double ulps, not float ones. */
TEST(ulps_mixed_counts_double_ulps) { ASSERT_ULPS(0.1f, 0.1, 1000); }
TEST(ulps_across_zero) { ASSERT_ULPS(-FLT_TRUE_MIN, FLT_TRUE_MIN, 1); }
TEST(ulps_on_nan) { ASSERT_ULPS(NAN, 1.0f, 1000000); }
TEST(skip_says_why) { T_SKIP("needs %s", "a reason"); }
