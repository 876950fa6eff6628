/* dse_model_tokenizer: the embedded tokenizer files build the same tokenizer as the
 * files on disk. Depends on the tokenizer readers (engine/src/tok). */
#include "model/model.h"
#include "t.h"
#include "test-modelfile-helpers.h"

TEST(model_tokenizer_accessor) {
        char *hf = tmp_dir(), *dir = tmp_dir();
        char a[4096], b[4096];
        const char *files[][2] = {
                {"models/llama-bf16-linear-rope/config.json", "config.json"},
                {"models/llama-bf16-linear-rope/model.safetensors", "model.safetensors"},
                {"tokenizers/models/qwen2_5/tokenizer.json", "tokenizer.json"},
                {"tokenizers/models/qwen2_5/tokenizer_config.json", "tokenizer_config.json"},
        };
        for (size_t i = 0; i < 4; i++) {
                snprintf(a, sizeof a, "%s", t_fixture(files[i][0]));
                snprintf(b, sizeof b, "%s/%s", hf, files[i][1]);
                ASSERT_OK(copy_file(a, b));
        }
        struct dse_diag diag = {{0}};
        int r;
        const char *out = convert_fixture(hf, dir, NULL, &r, &diag);
        ASSERT_OK(r);
        struct dse_model *m;
        ASSERT_OK(dse_model_open(out, 0, &m, &diag));
        struct dse_tokenizer *tok = NULL, *ref = NULL;
        r = dse_model_tokenizer(m, &tok, &diag);
        if (r < 0)
                T_FAIL("dse_model_tokenizer: %s (%s)", strerror(-r), diag.msg);
        ASSERT_OK(dse_tokenizer_load_file(t_fixture("tokenizers/models/qwen2_5/tokenizer.json"), &ref, &diag));
        ASSERT_EQ(dse_tokenizer_n_vocab(tok), dse_tokenizer_n_vocab(ref));
        dse_tokenizer_free(tok);
        dse_tokenizer_free(ref);
        dse_model_free(m);
        /* a model without tokenizer files says so */
        char *dir2 = tmp_dir();
        out = convert_fixture(t_fixture("models/qwen2-bf16-tied"), dir2, NULL, &r, &diag);
        ASSERT_OK(r);
        ASSERT_OK(dse_model_open(out, 0, &m, &diag));
        ASSERT_ERR(dse_model_tokenizer(m, &tok, &diag), -ENOENT);
        dse_model_free(m);
        tmp_rm(dir2);
        tmp_rm(hf);
        tmp_rm(dir);
}

