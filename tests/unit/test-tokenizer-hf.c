/* tokenizer.json tokenizers against the Hugging Face `tokenizers` reference ids
 * (fixtures/tokenizers/encodings/<name>.jsonl and <name>.special.jsonl): every line must
 * encode to exactly the reference ids, and decoding the ids must give the reference
 * text byte for byte. Run one tokenizer by naming it: test-tokenizer-hf llama3 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "dse.h"
#include "t.h"
#include "tokenizer-encodings.h"

static void check_tokenizer(const char *name) {
        char path[256], rel[256];
        snprintf(path, sizeof path, "tokenizers/models/%s/tokenizer.json", name);
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int r = dse_tokenizer_load_file(t_fixture(path), &tok, &diag);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (r < 0)
                T_FAIL("load %s: %s (%s)", name, strerror(-r), diag.msg);
        printf("%s: loaded in %.1f ms, n_vocab %d, bos %d, eos %d\n", name,
               (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6, dse_tokenizer_n_vocab(tok),
               dse_tokenizer_bos(tok), dse_tokenizer_eos(tok));
        int lines_plain = 0, lines_special = 0;
        snprintf(rel, sizeof rel, "tokenizers/encodings/%s.jsonl", name);
        int bad = check_file(tok, rel, 0, &lines_plain);
        snprintf(rel, sizeof rel, "tokenizers/encodings/%s.special.jsonl", name);
        bad += check_file(tok, rel, 1, &lines_special);
        /* chat renderings (ids of the rendered template, no special tokens added) */
        snprintf(rel, sizeof rel, "tokenizers/chat/%s.jsonl", name);
        int lines_chat = 0;
        char probe[4096];
        snprintf(probe, sizeof probe, "%s", t_fixture(rel));
        FILE *f = fopen(probe, "rb");
        if (f) {
                fclose(f);
                bad += check_file_key(tok, rel, "rendered", 0, &lines_chat);
        }
        dse_tokenizer_free(tok);
        ASSERT_TRUE(lines_plain > 0 && lines_special > 0);
        ASSERT_EQ(bad, 0);
}

TEST(deepseek_v3) { check_tokenizer("deepseek_v3"); }
TEST(qwen2_5) { check_tokenizer("qwen2_5"); }
TEST(llama3) { check_tokenizer("llama3"); }
TEST(mistral7b) { check_tokenizer("mistral7b"); }

/* The tokenizer is immutable after loading: threads encoding at once get the reference
 * ids (and ASan/UBSan builds see no races on shared scratch space). */
struct thread_job {
        const struct dse_tokenizer *tok;
        const char *rel;
        int bad, lines;
};

static void *encode_file_thread(void *arg) {
        struct thread_job *job = arg;
        job->bad = check_file(job->tok, job->rel, 0, &job->lines);
        return NULL;
}

TEST(threads) {
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_tokenizer_load_file(t_fixture("tokenizers/models/deepseek_v3/tokenizer.json"), &tok, &diag));
        struct thread_job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
                jobs[i] = (struct thread_job){tok, "tokenizers/encodings/deepseek_v3.jsonl", 0, 0};
                ASSERT_EQ(pthread_create(&th[i], NULL, encode_file_thread, &jobs[i]), 0);
        }
        int bad = 0;
        for (int i = 0; i < 4; i++) {
                pthread_join(th[i], NULL);
                bad += jobs[i].bad + (jobs[i].lines == 0);
        }
        dse_tokenizer_free(tok);
        ASSERT_EQ(bad, 0);
}
