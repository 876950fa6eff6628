/* dsvisor-worker with --speculative ngram (and mtp) against --speculative off, over IPC:
 * on the bundled default model (text prompts, an echo-heavy one among them; n-gram and
 * MTP drafts) and on every model fixture (token prompts that repeat themselves; n-gram),
 * each of 8 requests gives the same tokens and text on the speculative worker alone, in
 * a batch of 8, and on the plain worker, greedy and seeded; so does a draft model (the
 * bundled model in int8) for the bundled model, greedy (seeded: the same alone and in a
 * batch; its drafts are draws from its own distribution, another coupling of the same
 * distribution as plain decoding, which test-worker-spec tests); a bad --speculative value or
 * --draft-model combination is refused, and so are mtp for a model without an MTP
 * module and a draft model with another tokenizer, naming them. */
#include <fcntl.h>

#include "dse.h"
#include "t.h"
#include "fixture-models.h"
#include "worker-client.h"

struct worker {
        pid_t pid;
        struct wc c;
};

/* draft: --draft-model's path, or NULL */
static int start(struct worker *w, const char *model, const char *name, const char *spec, const char *draft) {
        const char *dir = wc_tmpdir();
        if (!dir)
                return -EIO;
        char url[512];
        snprintf(url, sizeof url, "ipc://%s/%s.sock", dir, name);
        char *args[] = {"--model", (char *)model, "--listen", url, "--n-ctx", "512", "--max-batch", "8",
                        "--speculative", (char *)spec, "--spec-k-max", "4", draft ? "--draft-model" : NULL,
                        (char *)draft, NULL};
        w->pid = wc_spawn(args);
        if (w->pid < 0 || wc_open(&w->c, url) < 0)
                return -EIO;
        return wc_wait_state(&w->c, "ready", 300);
}

static void stop(struct worker *w) {
        if (w->pid > 0) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, NULL, 0);
                wc_close(&w->c);
        }
        w->pid = 0;
}

static struct wc_result res[WC_MAX_REQ];

struct reqs {
        struct dsv_ipc_msg m[8];
        int32_t ids[8][48];
};

/* Runs the 8 requests one at a time (batch 0) or all at once; copies results to out. */
static int run(struct worker *w, struct reqs *q, int batch, struct wc_result *out) {
        memset(res, 0, sizeof res);
        for (int i = 0; i < 8; i++) {
                if (wc_send(&w->c, &q->m[i]) < 0)
                        return -EIO;
                if (!batch && wc_collect(&w->c, res, 1, 120) != 1)
                        return -ETIMEDOUT;
        }
        if (batch && wc_collect(&w->c, res, 8, 240) != 8)
                return -ETIMEDOUT;
        for (int i = 0; i < 8; i++)
                out[i] = res[q->m[i].u.request.id];
        return 0;
}

/* draft: the draft model of method "draft", else NULL. A sampled request drafted by a
 * draft model keeps its seed's tokens alone and in a batch, not plain decoding's. */
static void same_outputs_with(const char *model, const char *draft, struct reqs *q, const char *method) {
        struct worker plain = {0}, spec = {0};
        static struct wc_result a[8], b[8], c[8];
        ASSERT_OK(start(&plain, model, "plain", "off", NULL));
        ASSERT_OK(start(&spec, model, "spec", method, draft));
        ASSERT_OK(run(&plain, q, 0, a));
        ASSERT_OK(run(&spec, q, 0, b));
        ASSERT_OK(run(&spec, q, 1, c));
        stop(&plain);
        stop(&spec);
        for (int i = 0; i < 8; i++) {
                if (draft && q->m[i].u.request.sampling.temperature > 0)
                        a[i] = b[i]; /* the reference: alone on the speculative worker */
                ASSERT_EQ(a[i].error, 0);
                ASSERT_TRUE(a[i].n_tokens > 0);
                ASSERT_EQ(b[i].n_tokens, a[i].n_tokens);
                ASSERT_EQ(c[i].n_tokens, a[i].n_tokens);
                for (int t = 0; t < a[i].n_tokens && t < WC_MAX_OUT; t++) {
                        ASSERT_EQ(b[i].tokens[t], a[i].tokens[t]);
                        ASSERT_EQ(c[i].tokens[t], a[i].tokens[t]);
                }
                ASSERT_STREQ(b[i].text, a[i].text);
                ASSERT_STREQ(c[i].text, a[i].text);
                ASSERT_STREQ(c[i].reason, a[i].reason);
        }
}

static void same_outputs(const char *model, struct reqs *q, const char *method) {
        same_outputs_with(model, NULL, q, method);
}

/* 8 text requests on the bundled default model, greedy and seeded in turn. */
static void default_model_reqs(char *model, size_t size, struct reqs *q) {
        snprintf(model, size, "%s/models/default", getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        static const char *prompts[8] = {
                "In the beginning God created the heaven and the earth. And the earth was without form, and void. "
                "In the beginning God created the heaven",
                "And Jesus answered", "Blessed are the poor in spirit: for theirs is the kingdom of heaven. Blessed are",
                "The LORD is my shepherd; I shall not want. The LORD is my", "And it came to pass",
                "Thou shalt not", "For God so loved the world, that he gave his only begotten Son. For God so",
                "Let there be"};
        for (int i = 0; i < 8; i++) {
                q->m[i] = wc_tokens_request((uint64_t)(10 + i), NULL, 0, 40, i % 2 ? 0.7f : 0.0f, 31 + (uint64_t)i);
                q->m[i].u.request.input = DSV_IPC_INPUT_PROMPT;
                q->m[i].u.request.prompt = (char *)prompts[i];
        }
}

TEST(default_model_same_text_with_ngram_drafts) {
        char model[1024];
        struct reqs q;
        default_model_reqs(model, sizeof model, &q);
        same_outputs(model, &q, "ngram");
}

TEST(default_model_same_text_with_mtp_drafts) {
        char model[1024];
        struct reqs q;
        default_model_reqs(model, sizeof model, &q);
        same_outputs(model, &q, "mtp");
}

/* The bundled model converted to int8 into path (size bytes): a draft model sharing
 * its tokenizer. */
static int default_model_int8(char *path, size_t size) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/models/default", getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        snprintf(path, size, "%s/default-int8.dse", wc_tmpdir());
        struct dse_diag diag = {{0}};
        int r = dse_model_convert_hf(dir, path, "int8", &diag);
        if (r < 0)
                fprintf(stderr, "  %s: %s\n", dir, diag.msg);
        return r;
}

TEST(default_model_same_text_with_draft_model) {
        char model[1024], draft[1200];
        struct reqs q;
        default_model_reqs(model, sizeof model, &q);
        ASSERT_OK(default_model_int8(draft, sizeof draft));
        same_outputs_with(model, draft, &q, "draft");
        unlink(draft);
}

TEST(every_fixture_same_tokens_with_ngram_drafts) {
        for (size_t f = 0; f < N_FIXTURE_MODELS && !t_failed_current; f++) {
                char model[1024];
                snprintf(model, sizeof model, "%s/%s", t_fixture("models"), fixture_models[f]);
                static struct reqs q;
                for (int i = 0; i < 8; i++) {
                        int n = 10 + (i * 7) % 22;
                        for (int t = 0; t < n; t++)
                                q.ids[i][t] = (int32_t)((t % 5) * 41 + 3 + i * 17) % 256;
                        q.m[i] = wc_tokens_request((uint64_t)(10 + i), q.ids[i], (size_t)n, 32,
                                                   i % 2 ? 0.5f : 0.0f, 7 + (uint64_t)i);
                }
                fprintf(stderr, "  %s\n", fixture_models[f]);
                same_outputs(model, &q, "ngram");
        }
}

TEST(bad_speculative_option_refused) {
        char *args[] = {"--model", "x", "--listen", "inproc://x", "--speculative", "draft", NULL};
        pid_t pid = wc_spawn(args);
        ASSERT_TRUE(pid > 0);
        int st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
        char *args2[] = {"--model", "x", "--listen", "inproc://x", "--spec-k-min", "5", "--spec-k-max", "3", NULL};
        pid = wc_spawn(args2);
        st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
        char *args3[] = {"--model", "x", "--listen", "inproc://x", "--speculative", "ngram", "--draft-model", "y", NULL};
        pid = wc_spawn(args3);
        st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
        char *args4[] = {"--model", "x", "--listen", "inproc://x", "--draft-model", "", NULL};
        pid = wc_spawn(args4);
        st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

/* Starts dsvisor-worker with args (NULL-terminated, before --listen), which must make
 * it refuse to start: its log (stderr), or NULL when it started or could not be run. */
static char *refused_log(char **args, const char *name) {
        char log[1100], url[1100];
        snprintf(log, sizeof log, "%s/%s.log", wc_tmpdir(), name);
        snprintf(url, sizeof url, "ipc://%s/%s.sock", wc_tmpdir(), name);
        char *argv[16];
        int n = 0;
        while (args[n] && n < 13) {
                argv[n] = args[n];
                n++;
        }
        argv[n++] = "--listen";
        argv[n++] = url;
        argv[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(2);
        if (fd < 0 || saved < 0)
                return NULL;
        dup2(fd, 2);
        pid_t pid = wc_spawn(argv);
        dup2(saved, 2);
        close(saved);
        close(fd);
        int st = pid > 0 ? wc_wait_exit(pid, 120) : -1;
        return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0 ? slurp(log, NULL) : NULL;
}

/* --speculative mtp on a model without an MTP module: the worker does not start, and
 * its log says why. */
TEST(mtp_refused_without_module) {
        char model[1024];
        snprintf(model, sizeof model, "%s/llama-bf16-linear-rope", t_fixture("models"));
        char *args[] = {"--model", model, "--speculative", "mtp", NULL};
        char *text = refused_log(args, "mtp-refused");
        ASSERT_TRUE(text && strstr(text, "--speculative mtp") && strstr(text, "no MTP module"));
        free(text);
}

/* A draft model whose tokenizer is not the served model's (a fixture without one for
 * the bundled model): the worker does not start, and its log names both models. */
TEST(draft_model_tokenizer_mismatch_refused) {
        char model[1024], draft[1024];
        snprintf(model, sizeof model, "%s/models/default", getenv("DSV_SOURCE_DIR") ? getenv("DSV_SOURCE_DIR") : "..");
        snprintf(draft, sizeof draft, "%s/llama-bf16-linear-rope", t_fixture("models"));
        char *args[] = {"--model", model, "--draft-model", draft, NULL};
        char *text = refused_log(args, "draft-refused");
        ASSERT_TRUE(text && strstr(text, "--draft-model") && strstr(text, "llama-bf16-linear-rope") &&
                    strstr(text, "models/default") && strstr(text, "tokenizer"));
        free(text);
}
