/* Environment switches whose value is one of a few names: unset or empty gives the
 * default, a known name its index, an unknown one -EINVAL naming the variable, the value
 * and every allowed name (the default first); DSV_ACT and DSV_KV refuse an unknown value
 * where a session or a KV cache is made, and dse_kv_dtype_parse names the same choices. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "env_choice.h"
#include "t.h"

#include "fixture-models.h"

#define VAR "DSV_TEST_ENV_CHOICE"

static const char *const colours[] = {"red", "green", "blue", "cyan"};

TEST(unset_or_empty_gives_the_default) {
        int i = 99;
        unsetenv(VAR);
        ASSERT_OK(dse__env_choice(VAR, "a colour", colours, 4, 2, &i, NULL));
        ASSERT_EQ(i, 2);
        setenv(VAR, "", 1);
        i = 99;
        ASSERT_OK(dse__env_choice(VAR, "a colour", colours, 4, -1, &i, NULL));
        ASSERT_EQ(i, -1);
        unsetenv(VAR);
}

TEST(known_names_give_their_index) {
        for (int k = 0; k < 4; k++) {
                setenv(VAR, colours[k], 1);
                int i = 99;
                ASSERT_OK(dse__env_choice(VAR, "a colour", colours, 4, 0, &i, NULL));
                ASSERT_EQ(i, k);
        }
        setenv(VAR, "RED", 1); /* names are exact */
        int i = 99;
        ASSERT_ERR(dse__env_choice(VAR, "a colour", colours, 4, 0, &i, NULL), -EINVAL);
        unsetenv(VAR);
        ASSERT_EQ(dse__choice_index(colours, 4, "cyan"), 3);
        ASSERT_EQ(dse__choice_index(colours, 4, "magenta"), -1);
        ASSERT_EQ(dse__choice_index(colours, 4, NULL), -1);
}

TEST(unknown_value_names_the_variable_and_every_choice_default_first) {
        struct dse_diag diag = {{0}};
        int i = 99;
        setenv(VAR, "mauve", 1);
        ASSERT_ERR(dse__env_choice(VAR, "a colour", colours, 4, 2, &i, &diag), -EINVAL);
        ASSERT_EQ(i, 99);
        ASSERT_STREQ(diag.msg, VAR "='mauve' is not a colour; use blue, red, green or cyan");
        ASSERT_ERR(dse__env_choice(VAR, "a colour", colours, 4, 3, &i, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, VAR "='mauve' is not a colour; use cyan, red, green or blue");
        ASSERT_ERR(dse__env_choice(VAR, "a colour", colours, 4, -1, &i, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, VAR "='mauve' is not a colour; use red, green, blue or cyan");
        ASSERT_ERR(dse__env_choice(VAR, "a colour", colours, 2, 1, &i, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, VAR "='mauve' is not a colour; use green or red");
        unsetenv(VAR);
}

TEST(unknown_activations_or_kv_type_refused_by_name) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        struct dse_diag diag = {{0}};
        struct dse_session *s = NULL;
        struct dse_kv_cache *kv = NULL;
        setenv("DSV_ACT", "int4", 1);
        ASSERT_ERR(dse_session_new(m, 64, NULL, &s, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, "DSV_ACT='int4' is not an activation precision; use int8 or f32");
        unsetenv("DSV_ACT");
        setenv("DSV_KV", "fp16", 1);
        ASSERT_ERR(dse_session_new(m, 64, NULL, &s, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, "DSV_KV='fp16' is not a KV cache type; use f32, bf16, fp8 or int8");
        ASSERT_ERR(dse_kv_cache_new(m, (size_t)1 << 20, 16, 1, 64, &kv, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, "DSV_KV='fp16' is not a KV cache type; use f32, bf16, fp8 or int8");
        unsetenv("DSV_KV");
        enum dse_kv_dtype t = DSE_KV_F32;
        ASSERT_ERR(dse_kv_dtype_parse("fp16", &t, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, "'fp16' is not a KV cache type; use f32, bf16, fp8 or int8");
        ASSERT_EQ(t, DSE_KV_F32);
        ASSERT_OK(dse_kv_dtype_parse("int8", &t, &diag));
        ASSERT_EQ(t, DSE_KV_INT8);
        ASSERT_OK(dse_session_new(m, 64, NULL, &s, &diag));
        dse_session_free(s);
        dse_model_free(m);
}

TEST(unknown_cpu_level_lists_the_levels) {
        struct dse_cpu_info info;
        struct dse_diag diag = {{0}};
        setenv("DSV_CPU", "sse9", 1);
        ASSERT_ERR(dse_cpu_detect(&info, &diag), -EINVAL);
        ASSERT_STREQ(diag.msg, "DSV_CPU='sse9' is not a CPU level; use scalar, avx2 or avx512");
        unsetenv("DSV_CPU");
}
