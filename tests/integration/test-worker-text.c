/* dsvisor-worker with text on the bundled default model (models/default: DeepSeek-V3
 * MLA + MoE, SentencePiece, chat template): streamed UTF-8 deltas that add up to the
 * detokenized output, stop strings cut exactly, chat rendering (BOS from the template
 * becomes the BOS id), bad text input codes, and 8 concurrent seeded prompts equal to
 * each alone. */
#include "dse.h"
#include "t.h"
#include "worker-client.h"

static char url[512], model_dir[1024];
static pid_t worker_pid;
static struct wc client;
static struct wc_result res[WC_MAX_REQ];

static int setup(void) {
        if (worker_pid > 0)
                return 0;
        const char *dir = wc_tmpdir();
        if (!dir)
                return -EIO;
        snprintf(url, sizeof url, "ipc://%s/text.sock", dir);
        snprintf(model_dir, sizeof model_dir, "%s/models/default",
                 getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        char *args[] = {"--model", model_dir, "--listen", url, "--n-ctx", "256", "--max-batch", "8", NULL};
        worker_pid = wc_spawn(args);
        if (worker_pid < 0 || wc_open(&client, url) < 0)
                return -EIO;
        return wc_wait_state(&client, "ready", 300);
}

__attribute__((destructor)) static void teardown(void) {
        if (worker_pid > 0) {
                kill(worker_pid, SIGKILL);
                waitpid(worker_pid, NULL, 0);
                wc_close(&client);
        }
}

static struct dsv_ipc_msg prompt_request(uint64_t id, const char *text, int max_tokens, float temperature,
                                         uint64_t seed) {
        struct dsv_ipc_msg m = wc_tokens_request(id, NULL, 0, max_tokens, temperature, seed);
        m.u.request.input = DSV_IPC_INPUT_PROMPT;
        m.u.request.prompt = (char *)text;
        return m;
}

static int valid_utf8(const char *s) {
        const unsigned char *p = (const unsigned char *)s;
        while (*p) {
                int n = *p < 0x80 ? 0 : (*p >> 5) == 6 ? 1 : (*p >> 4) == 14 ? 2 : (*p >> 3) == 30 ? 3 : -1;
                if (n < 0)
                        return 0;
                p++;
                for (int i = 0; i < n; i++, p++)
                        if ((*p >> 6) != 2)
                                return 0;
        }
        return 1;
}

/* The streamed text equals the engine's own decode of the same ids (through a
 * detokenizer, which is what a client of the ids would use). */
TEST(prompt_streams_text) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        struct dsv_ipc_msg m = prompt_request(1, "In the beginning God created", 40, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 120), 1);
        ASSERT_TRUE(res[1].reason[0] != 0);
        ASSERT_TRUE(res[1].n_tokens > 0);
        ASSERT_TRUE(strlen(res[1].text) > 0);
        ASSERT_TRUE(valid_utf8(res[1].text));

        char native[4096];
        struct dse_model *model = NULL;
        struct dse_tokenizer *tok = NULL;
        struct dse_detok *d = NULL;
        ASSERT_OK(dse_model_resolve(model_dir, native, sizeof native, NULL));
        ASSERT_OK(dse_model_open(native, 0, &model, NULL));
        ASSERT_OK(dse_model_tokenizer(model, &tok, NULL));
        ASSERT_OK(dse_detok_new(tok, NULL, 0, &d, NULL));
        char want[8192] = "";
        for (int i = 0; i < res[1].n_tokens; i++) {
                const char *t;
                int stopped;
                int n = dse_detok_push(d, res[1].tokens[i], &t, &stopped);
                strncat(want, t, (size_t)n);
        }
        const char *t;
        int n = dse_detok_flush(d, &t);
        strncat(want, t, (size_t)n);
        fprintf(stderr, "  text: %s\n", res[1].text);
        ASSERT_STREQ(res[1].text, want);
        dse_detok_free(d);
        dse_tokenizer_free(tok);
        dse_model_free(model);
}

/* A stop string taken from the middle of the unconstrained output: the output ends
 * right before it, with finish_reason "stop". */
TEST(stop_string_cuts_exactly) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        struct dsv_ipc_msg m = prompt_request(2, "And the LORD said unto Moses", 48, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 120), 1);
        char full[8192];
        snprintf(full, sizeof full, "%s", res[2].text);
        size_t len = strlen(full);
        ASSERT_TRUE(len >= 12);
        char stop[8];
        size_t at = len / 2;
        while (at < len && ((unsigned char)full[at] >> 6) == 2)
                at++;
        snprintf(stop, sizeof stop, "%.4s", full + at);
        ASSERT_TRUE(valid_utf8(stop) && strlen(stop) > 0);
        size_t first = (size_t)(strstr(full, stop) - full);

        memset(res, 0, sizeof res);
        m = prompt_request(3, "And the LORD said unto Moses", 48, 0, 0);
        char *stops[] = {stop};
        m.u.request.stop = stops;
        m.u.request.n_stop = 1;
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 120), 1);
        ASSERT_STREQ(res[3].reason, "stop");
        ASSERT_EQ(strlen(res[3].text), first);
        ASSERT_TRUE(strncmp(res[3].text, full, first) == 0);
}

/* The template writes "<s><|user|>" + content + "<|assistant|>": the prompt is BOS then
 * the pieces of the rest (the role markers are single user-defined pieces), the same ids
 * as the prompt path on that text, so the same greedy output. */
TEST(chat_renders_template) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        struct dsv_ipc_msg m = prompt_request(4, "<|user|>And God said<|assistant|>", 12, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        m = wc_tokens_request(5, NULL, 0, 12, 0, 0);
        m.u.request.input = DSV_IPC_INPUT_CHAT;
        m.u.request.messages_json = "[{\"role\":\"user\",\"content\":\"And God said\"}]";
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 2, 120), 2);
        ASSERT_TRUE(res[4].n_tokens > 0);
        if (res[5].error)
                T_FAIL("chat request failed: %s", res[5].message);
        ASSERT_EQ(res[5].n_tokens, res[4].n_tokens);
        for (int i = 0; i < res[4].n_tokens && i < WC_MAX_OUT; i++)
                ASSERT_EQ(res[5].tokens[i], res[4].tokens[i]);
        ASSERT_STREQ(res[5].text, res[4].text);
}

TEST(bad_text_input) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        struct dsv_ipc_msg m = prompt_request(6, "", 4, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        /* invalid UTF-8 inside a JSON string */
        ASSERT_OK(wc_send_raw(&client, "{\"v\":1,\"type\":\"request\",\"id\":7,\"input\":\"prompt\",\"prompt\":\"a\xff\xfe\"}"));
        static char longp[4096];
        for (int i = 0; i < 400; i++)
                memcpy(longp + i * 7, "Behold ", 7);
        m = prompt_request(8, longp, 4, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        m = prompt_request(9, "And", 4, 0, 0);
        m.u.request.sampling.min_p = 1.5f; /* out of range: refused by the decoder */
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 4, 60), 4);
        ASSERT_EQ(res[6].error, DSV_IPC_ERR_INVALID_REQUEST + 1);
        ASSERT_TRUE(res[7].error == DSV_IPC_ERR_INVALID_REQUEST + 1 || res[0].error == DSV_IPC_ERR_PROTOCOL + 1);
        ASSERT_EQ(res[8].error, DSV_IPC_ERR_PROMPT_TOO_LONG + 1);
        ASSERT_TRUE(res[9].error == DSV_IPC_ERR_INVALID_REQUEST + 1 || res[0].error == DSV_IPC_ERR_PROTOCOL + 1);
        memset(res, 0, sizeof res);
        m = prompt_request(10, "And", 4, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 60), 1);
        ASSERT_STREQ(res[10].reason, "length");
}

TEST(eight_concurrent_prompts_equal_alone) {
        ASSERT_OK(setup());
        static const char *prompts[8] = {"In the beginning", "And Jesus answered", "Blessed are the",
                                         "The LORD is my shepherd", "And it came to pass", "Thou shalt not",
                                         "For God so loved", "Let there be"};
        static struct wc_result alone[8];
        for (int i = 0; i < 8; i++) {
                memset(res, 0, sizeof res);
                struct dsv_ipc_msg m = prompt_request((uint64_t)(20 + i), prompts[i], 16, 0.8f, 77 + (uint64_t)i);
                ASSERT_OK(wc_send(&client, &m));
                ASSERT_EQ(wc_collect(&client, res, 1, 120), 1);
                alone[i] = res[20 + i];
        }
        memset(res, 0, sizeof res);
        for (int i = 0; i < 8; i++) {
                struct dsv_ipc_msg m = prompt_request((uint64_t)(20 + i), prompts[i], 16, 0.8f, 77 + (uint64_t)i);
                ASSERT_OK(wc_send(&client, &m));
        }
        ASSERT_EQ(wc_collect(&client, res, 8, 240), 8);
        for (int i = 0; i < 8; i++) {
                ASSERT_EQ(res[20 + i].n_tokens, alone[i].n_tokens);
                ASSERT_STREQ(res[20 + i].text, alone[i].text);
                ASSERT_STREQ(res[20 + i].reason, alone[i].reason);
        }
}
