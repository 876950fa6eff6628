/* What dsvisor start reads from a chat template: the reference templates of
 * fixtures/tokenizers (DeepSeek-V3, Qwen2.5, Llama 3) and R1's variant of DeepSeek-V3's,
 * whose generation prompt opens the think block; --reasoning-format over the default. */
#include <string.h>

#include "dse.h"
#include "dsv_gateway.h"
#include "sup.h"
#include "t.h"

static struct dse_tokenizer *load(const char *name) {
        char path[4096];
        const char *fix = getenv("DSV_FIXTURES");
        snprintf(path, sizeof path, "%s/tokenizers/models/%s/tokenizer.json", fix ? fix : "../shared/fixtures", name);
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        if (dse_tokenizer_load_file(path, &tok, &diag) < 0)
                fprintf(stderr, "  %s: %s\n", path, diag.msg);
        return tok;
}

TEST(reference_templates) {
        static const struct {
                const char *name;
                int tools;
        } cases[] = {{"deepseek_v3", DSV_GATEWAY_TOOLS_DEEPSEEK_V3}, {"qwen2_5", DSV_GATEWAY_TOOLS_HERMES},
                     {"llama3", DSV_GATEWAY_TOOLS_NONE}};
        for (size_t i = 0; i < 3; i++) {
                struct dse_tokenizer *tok = load(cases[i].name);
                ASSERT_TRUE(tok != NULL);
                struct sup_chat_format f;
                char why[160];
                ASSERT_OK(sup_chat_format_of(tok, dse_tokenizer_chat_template(tok), "", &f, why, sizeof why));
                ASSERT_EQ(f.tools, cases[i].tools);
                ASSERT_EQ(f.reasoning, DSV_GATEWAY_REASONING_NONE);
                ASSERT_TRUE(!f.think_opened);
                ASSERT_OK(sup_chat_format_of(tok, dse_tokenizer_chat_template(tok), "deepseek", &f, why, sizeof why));
                ASSERT_EQ(f.reasoning, DSV_GATEWAY_REASONING_DEEPSEEK);
                dse_tokenizer_free(tok);
        }
}

TEST(r1_template_opens_the_think_block) {
        struct dse_tokenizer *tok = load("deepseek_v3");
        ASSERT_TRUE(tok != NULL);
        const char *v3 = dse_tokenizer_chat_template(tok);
        const char *gen = "{{'<｜Assistant｜>'}}{% endif %}";
        size_t n = strlen(v3);
        ASSERT_TRUE(n > strlen(gen) && strcmp(v3 + n - strlen(gen), gen) == 0);
        char *r1 = malloc(n + 64);
        snprintf(r1, n + 64, "%.*s{{'<｜Assistant｜><think>\\n'}}{%% endif %%}", (int)(n - strlen(gen)), v3);
        struct sup_chat_format f;
        char why[160];
        ASSERT_OK(sup_chat_format_of(tok, r1, "auto", &f, why, sizeof why));
        ASSERT_TRUE(f.think_opened);
        ASSERT_EQ(f.reasoning, DSV_GATEWAY_REASONING_DEEPSEEK);
        ASSERT_EQ(f.tools, DSV_GATEWAY_TOOLS_DEEPSEEK_V3);
        ASSERT_OK(sup_chat_format_of(tok, r1, "none", &f, why, sizeof why));
        ASSERT_EQ(f.reasoning, DSV_GATEWAY_REASONING_NONE);
        ASSERT_EQ(sup_chat_format_of(tok, r1, "think", &f, why, sizeof why), -EINVAL);
        ASSERT_TRUE(strstr(why, "reasoning-format") != NULL);
        /* No template: nothing to split or parse. */
        ASSERT_OK(sup_chat_format_of(tok, NULL, "", &f, why, sizeof why));
        ASSERT_TRUE(f.tools == DSV_GATEWAY_TOOLS_NONE && f.reasoning == DSV_GATEWAY_REASONING_NONE && !f.think_opened);
        free(r1);
        dse_tokenizer_free(tok);
}
