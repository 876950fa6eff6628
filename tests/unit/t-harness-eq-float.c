/* Must not compile: ASSERT_EQ on a float. The ctest test-t-harness-eq-refuses-float
 * compiles this file and expects the static assertion's message. */
#include "t.h"

TEST(eq_on_float) { ASSERT_EQ(0.5f, 0); }
