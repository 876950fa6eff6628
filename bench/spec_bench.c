/* dsvisor-bench spec: what speculative decoding costs and gains.
 *
 *     dsvisor-bench spec --preset P --format F [--layers N] [--threads T]
 *                   [--serve-model DIR] [--draft-model M] [--held-out FILE] [--passages N]
 *                   [--max-tokens N] [--repeat N] [--json]
 *
 * verify_cost: on the preset-shaped model, one sequence of 128 cached tokens; a pass
 * over [pending token, k drafts] (dse_batch_verify, the drafts then rolled back with
 * dse_kv_seq_accept) against a one-token pass, k = 1..4, passes of every k taking turns
 * so the host's drift hits each alike; the median pass of each k over the median
 * one-token pass. With c_k that ratio and an acceptance rate a per draft, a pass yields
 * (1 - a^(k+1)) / (1 - a) tokens, so the projected speed-up is that over c_k.
 *
 * acceptance and speedup: dsvisor-worker processes on the served model (by default the
 * bundled one), --speculative off, ngram, when the model has an MTP module mtp, and
 * with --draft-model M draft (M drafting for the served model), --threads T, requests one at a time (batch 1), taking turns between the workers
 * request by request (which one goes first rotates). Tasks: held_out
 * (each passage's first 8 words, greedy), held_out_sampled (the same, temperature 0.8,
 * seeded) and echo (the passage, then its first 3 words again: continuing means
 * rewriting the passage, greedy). A method's acceptance rate is its worker's
 * accepted / draft tokens over the task (its stats counters), the mean acceptance
 * length accepted drafts per verification; its speed-up is the decode tok/s (tokens
 * after the first over the seconds from the first token to the final) of its worker
 * over the plain one's, same prompts, same run; its CPU speed-up the plain worker
 * process's CPU seconds over the task (user + system, whole requests) over its own,
 * which a loaded host inflates less than wall time. The three tasks run --repeat rounds
 * (default 3), taking turns, since one round of the bundled model's tasks is a few
 * hundred milliseconds of decoding: the figures pool every round's tokens and seconds,
 * and each round's speed-up is printed too, with their median. Every request's tokens are compared
 * between the plain worker and each speculative one that promises them seed for seed
 * (all but the draft model on the sampled task: its drafts are draws from its own
 * distribution, the same output distribution by another coupling of the draws): the
 * bench fails if they differ. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_sort.h"
#include "spec_bench.h"
#include "worker-client.h"
#include "bench_clock.h"

#define SPEC_BENCH_KMAX 4
#define CONTEXT 128

static int verify_cost(const struct dse_model *m, struct dse_pool *pool, int reps, double *ratio) {
        struct dse_diag d = {{0}};
        int vocab = dse_model_vocab_size(m), r;
        int n_ctx = CONTEXT + reps * (SPEC_BENCH_KMAX + 1) + SPEC_BENCH_KMAX + 8;
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        if ((r = dse_kv_cache_new(m, 64u << 20, 16, 1, n_ctx, &kv, &d)) < 0)
                return fprintf(stderr, "dsvisor-bench spec: kv cache: %s\n", d.msg), r;
        size_t need = dse_kv_cache_block_bytes(kv) * (size_t)((n_ctx + 15) / 16 + 1);
        dse_kv_cache_free(kv);
        if ((r = dse_kv_cache_new(m, need, 16, 1, n_ctx, &kv, &d)) < 0 || (r = dse_batch_new(m, kv, pool, &b, &d)) < 0)
                return fprintf(stderr, "dsvisor-bench spec: %s\n", d.msg), r;
        int32_t *toks = malloc((size_t)n_ctx * sizeof(int32_t));
        float *logits = malloc((size_t)(SPEC_BENCH_KMAX + 1) * (size_t)vocab * sizeof(float));
        double *t = malloc((size_t)(SPEC_BENCH_KMAX + 1) * (size_t)reps * sizeof(double));
        if (!toks || !logits || !t)
                return -ENOMEM;
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (int i = 0; i < n_ctx; i++) {
                toks[i] = (int32_t)(bench_xorshift64(&x) % (uint64_t)vocab);
        }
        int seq = dse_kv_seq_open(kv);
        struct dse_batch_seq one = {seq, toks, CONTEXT, NULL};
        if ((r = dse_batch_step(b, &one, 1, &d)) < 0)
                return fprintf(stderr, "dsvisor-bench spec: prefill: %s\n", d.msg), r;
        /* one warm-up pass of each, then reps rounds; each pass keeps one token, so the
         * context grows alike for every k */
        for (int rep = -1; rep < reps; rep++)
                for (int k = 0; k <= SPEC_BENCH_KMAX; k++) {
                        int len = dse_kv_seq_len(kv, seq);
                        int32_t nd = k;
                        one = (struct dse_batch_seq){seq, toks + len, k + 1, logits};
                        double t0 = bench_now_s();
                        if ((r = dse_batch_verify(b, &one, &nd, 1, &d)) < 0)
                                return fprintf(stderr, "dsvisor-bench spec: verify: %s\n", d.msg), r;
                        double t1 = bench_now_s();
                        dse_kv_seq_accept(kv, seq, NULL, 0);
                        if (rep >= 0)
                                t[(size_t)k * reps + rep] = t1 - t0;
                }
        double med[SPEC_BENCH_KMAX + 1];
        for (int k = 0; k <= SPEC_BENCH_KMAX; k++) {
                qsort(t + (size_t)k * reps, (size_t)reps, sizeof *t, bench_cmp_double);
                med[k] = t[(size_t)k * reps + reps / 2];
        }
        for (int k = 0; k <= SPEC_BENCH_KMAX; k++)
                ratio[k] = med[k] / med[0];
        ratio[0] = med[0]; /* seconds of the one-token pass */
        free(toks);
        free(logits);
        free(t);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        return 0;
}

/* ---- through the worker ---- */

/* Workers: plain, n-gram, then MTP (a model with a module) and a draft model (given):
 * indices in the order started. */
enum { W_PLAIN, W_NGRAM, W_COUNT = 4 };

struct task_result {
        double tok_s[W_COUNT]; /* decode tokens per second */
        int64_t toks[W_COUNT]; /* decode tokens (after each request's first) */
        double secs[W_COUNT];  /* and the seconds they took */
        double cpu_s[W_COUNT]; /* CPU seconds the worker process spent on the task */
        int64_t drafts[W_COUNT], accepted[W_COUNT], verifications[W_COUNT];
        int mismatches;        /* requests whose tokens differ from the plain worker's where
                                  they must not */
};

/* draft: --draft-model for method "draft", else NULL */
static int start_worker(struct wc *c, pid_t *pid, const char *model, const char *method, const char *draft, int threads,
                        const char *dir) {
        char url[512], th[16];
        snprintf(url, sizeof url, "ipc://%s/spec-%s.sock", dir, method);
        snprintf(th, sizeof th, "%d", threads);
        char *args[] = {"--model", (char *)model, "--listen", url, "--threads", th, "--max-batch", "1",
                        "--speculative", (char *)method, "--spec-k-max", "4", draft ? "--draft-model" : NULL,
                        (char *)draft, NULL};
        *pid = wc_spawn(args);
        if (*pid < 0 || wc_open(c, url) < 0)
                return -EIO;
        return wc_wait_state(c, "ready", 600);
}

static int worker_spec_stats(struct wc *c, struct dsv_ipc_stats *ret) {
        static uint64_t seq = 100;
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS};
        m.u.probe.seq = ++seq;
        int r = wc_send(c, &m);
        if (r < 0)
                return r;
        struct dsv_ipc_msg reply;
        for (;;) {
                if ((r = wc_recv_type(c, &reply, DSV_IPC_STATS_REPLY, 5000)) < 0)
                        return r;
                uint64_t got = reply.u.stats.seq;
                *ret = reply.u.stats;
                dsv_ipc_msg_done(&reply);
                if (got == seq)
                        return 0;
        }
}

static struct wc_result res[WC_MAX_REQ];

/* User plus system CPU seconds of process pid so far (/proc/PID/stat), or -1. */
static double process_cpu_s(pid_t pid) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
                fclose(f);
        buf[len] = '\0';
        const char *p = strrchr(buf, ')'); /* the name may hold spaces; the fields follow it */
        unsigned long long utime, stime;
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
                return -1;
        return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The worker publishes stats after each step; the final event comes from the same
 * step, so a stats request after the final sees its counters. n_w workers, w[0] plain;
 * pid[s] is w[s]'s process. */
static int run_task(struct wc *w, const pid_t *pid, const char *const *methods, int n_w, char **prompts, int n,
                    float temperature, int max_tokens, struct task_result *out) {
        memset(out, 0, sizeof *out);
        double cpu0[W_COUNT];
        for (int s = 0; s < n_w; s++)
                cpu0[s] = process_cpu_s(pid[s]);
        struct dsv_ipc_stats s0[W_COUNT], s1;
        int r;
        for (int s = 1; s < n_w; s++)
                if ((r = worker_spec_stats(&w[s], &s0[s])) < 0)
                        return r;
        double secs[W_COUNT] = {0};
        int64_t toks[W_COUNT] = {0};
        for (int i = 0; i < n; i++) {
                int32_t got[W_COUNT][WC_MAX_OUT];
                int n_got[W_COUNT];
                for (int j = 0; j < n_w; j++) {
                        /* rotate which worker goes first */
                        int s = (i + j) % n_w;
                        struct dsv_ipc_msg m = wc_tokens_request((uint64_t)(1 + i % (WC_MAX_REQ - 1)), NULL, 0,
                                                                 max_tokens, temperature, 1000 + (uint64_t)i);
                        m.u.request.input = DSV_IPC_INPUT_PROMPT;
                        m.u.request.prompt = prompts[i];
                        memset(res, 0, sizeof res);
                        if ((r = wc_send(&w[s], &m)) < 0 || wc_collect(&w[s], res, 1, 600) != 1)
                                return r < 0 ? r : -ETIMEDOUT;
                        const struct wc_result *q = &res[1 + i % (WC_MAX_REQ - 1)];
                        if (q->error)
                                return fprintf(stderr, "dsvisor-bench spec: request failed: %s\n", q->message), -EIO;
                        if (q->n_tokens > 1) {
                                toks[s] += q->n_tokens - 1;
                                secs[s] += q->t_done - q->t_first;
                        }
                        n_got[s] = q->n_tokens < WC_MAX_OUT ? q->n_tokens : WC_MAX_OUT;
                        memcpy(got[s], q->tokens, (size_t)n_got[s] * sizeof(int32_t));
                }
                for (int s = 1; s < n_w; s++)
                        if ((temperature <= 0 || strcmp(methods[s], "draft")) &&
                            (n_got[0] != n_got[s] || memcmp(got[0], got[s], (size_t)n_got[0] * sizeof(int32_t)) != 0))
                                out->mismatches++;
        }
        for (int s = 0; s < n_w; s++) {
                out->toks[s] = toks[s];
                out->secs[s] = secs[s];
                out->tok_s[s] = secs[s] > 0 ? (double)toks[s] / secs[s] : 0;
                out->cpu_s[s] = process_cpu_s(pid[s]) - cpu0[s];
        }
        for (int s = 1; s < n_w; s++) {
                if ((r = worker_spec_stats(&w[s], &s1)) < 0)
                        return r;
                out->drafts[s] = s1.spec_draft_tokens - s0[s].spec_draft_tokens;
                out->accepted[s] = s1.spec_accepted_tokens - s0[s].spec_accepted_tokens;
                out->verifications[s] = s1.spec_verifications - s0[s].spec_verifications;
        }
        return 0;
}

/* The first `words` words of s (at most size - 1 bytes). */
static void first_words(const char *s, int words, char *out, size_t size) {
        size_t i = 0;
        int w = 0;
        while (s[i] && i + 1 < size) {
                if (s[i] == ' ' && ++w == words)
                        break;
                i++;
        }
        memcpy(out, s, i);
        out[i] = '\0';
}

static int read_passages(const char *path, char ***ret, int max) {
        FILE *f = fopen(path, "r");
        if (!f)
                return -errno;
        char **v = calloc((size_t)max, sizeof *v), line[8192];
        int n = 0;
        while (v && n < max && fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = '\0';
                if (strlen(line) >= 40)
                        v[n++] = strdup(line);
        }
        fclose(f);
        *ret = v;
        return v ? n : -ENOMEM;
}

static const char *const task_names[] = {"held_out", "held_out_sampled", "echo"};

int spec_bench_run(const struct dse_model *m, struct dse_pool *pool, const char *preset, const char *format,
                   int threads, int json, const struct spec_bench_opts *o) {
        /* dsvisor-worker beside this binary (worker-client.h looks in $DSV_BUILD_DIR/bin) */
        char exe[4096];
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (!getenv("DSV_BUILD_DIR") && len > 0) {
                exe[len] = '\0';
                for (int cut = 0; cut < 2; cut++)
                        if (strrchr(exe, '/'))
                                *strrchr(exe, '/') = '\0';
                setenv("DSV_BUILD_DIR", exe, 1);
        }
        double ratio[SPEC_BENCH_KMAX + 1];
        int r = verify_cost(m, pool, 25, ratio);
        if (r < 0)
                return r;
        if (!json) {
                printf("spec: preset %s, format %s, %d threads, batch 1, %d cached tokens\n", preset, format, threads,
                       CONTEXT);
                printf("  one-token pass: %.3f ms\n", ratio[0] * 1e3);
                for (int k = 1; k <= SPEC_BENCH_KMAX; k++)
                        printf("  verify k=%d (%d tokens): %.3f x the one-token pass\n", k, k + 1, ratio[k]);
        }
        if (!o->held_out) {
                fprintf(stderr, "dsvisor-bench spec: give --held-out FILE, one passage per line "
                                "(bench/run_spec_bench.sh makes one from Revelation, which the bundled model never saw)\n");
                return -EINVAL;
        }
        char **passages = NULL;
        int n = read_passages(o->held_out, &passages, o->n_passages);
        if (n <= 0) {
                fprintf(stderr, "dsvisor-bench spec: --held-out %s: %s\n", o->held_out,
                        n < 0 ? strerror(-n) : "no passage of 40 characters or more");
                return n < 0 ? n : -EINVAL;
        }
        char **prompts[3];
        for (int t = 0; t < 3; t++)
                prompts[t] = calloc((size_t)n, sizeof(char *));
        for (int i = 0; i < n; i++) {
                char head[512];
                first_words(passages[i], 8, head, sizeof head);
                prompts[0][i] = prompts[1][i] = strdup(head);
                first_words(passages[i], 3, head, sizeof head);
                size_t len = strlen(passages[i]) + strlen(head) + 2;
                prompts[2][i] = malloc(len);
                snprintf(prompts[2][i], len, "%s %s", passages[i], head);
        }
        /* the served model's own verification cost, which bounds its speed-up */
        double served[SPEC_BENCH_KMAX + 1] = {0};
        int has_mtp = 0;
        {
                char native[4096];
                struct dse_diag d = {{0}};
                struct dse_model *sm = NULL;
                if ((r = dse_model_resolve(o->serve_model, native, sizeof native, &d)) < 0 ||
                    (r = dse_model_open(native, 0, &sm, &d)) < 0) {
                        fprintf(stderr, "dsvisor-bench spec: %s: %s\n", o->serve_model, d.msg);
                        goto out_passages;
                }
                has_mtp = dse_model_n_mtp_layers(sm) > 0;
                r = verify_cost(sm, pool, 200, served);
                dse_model_free(sm);
                if (r < 0)
                        goto out_passages;
        }
        const char *worker_methods[W_COUNT] = {"off", "ngram"};
        int n_w = 2;
        if (has_mtp)
                worker_methods[n_w++] = "mtp";
        if (o->draft_model)
                worker_methods[n_w++] = "draft";
        const char *dir = wc_tmpdir();
        struct wc w[W_COUNT];
        pid_t pid[W_COUNT] = {-1, -1, -1, -1};
        for (int s = 0; s < n_w; s++)
                if (!dir || (r = start_worker(&w[s], &pid[s], o->serve_model, worker_methods[s],
                                              strcmp(worker_methods[s], "draft") ? NULL : o->draft_model, threads,
                                              dir)) < 0) {
                        fprintf(stderr, "dsvisor-bench spec: cannot start dsvisor-worker --speculative %s on %s\n",
                                worker_methods[s], o->serve_model);
                        r = -EIO;
                        goto out;
                }
        /* tr: each task's figures summed over the rounds (tok/s over the pooled tokens
         * and seconds); ratio: each round's speed-up per task and method */
        struct task_result tr[3];
        double ratio_rounds[3][W_COUNT][SPEC_BENCH_MAX_REPEAT] = {{{0}}};
        memset(tr, 0, sizeof tr);
        static const float temps[3] = {0.0f, 0.8f, 0.0f};
        for (int round = 0; round < o->repeat; round++)
                for (int t = 0; t < 3; t++) {
                        struct task_result one;
                        if ((r = run_task(w, pid, worker_methods, n_w, prompts[t], n, temps[t], o->max_tokens, &one)) < 0) {
                                fprintf(stderr, "dsvisor-bench spec: task %s: %s\n", task_names[t], strerror(-r));
                                goto out;
                        }
                        tr[t].mismatches += one.mismatches;
                        for (int s = 0; s < n_w; s++) {
                                tr[t].toks[s] += one.toks[s];
                                tr[t].secs[s] += one.secs[s];
                                tr[t].cpu_s[s] += one.cpu_s[s];
                                tr[t].drafts[s] += one.drafts[s];
                                tr[t].accepted[s] += one.accepted[s];
                                tr[t].verifications[s] += one.verifications[s];
                                ratio_rounds[t][s][round] = one.tok_s[0] > 0 ? one.tok_s[s] / one.tok_s[0] : 0;
                        }
                }
        double ratio_median[3][W_COUNT];
        for (int t = 0; t < 3; t++)
                for (int s = 0; s < n_w; s++) {
                        tr[t].tok_s[s] = tr[t].secs[s] > 0 ? (double)tr[t].toks[s] / tr[t].secs[s] : 0;
                        double sorted[SPEC_BENCH_MAX_REPEAT];
                        memcpy(sorted, ratio_rounds[t][s], (size_t)o->repeat * sizeof(double));
                        qsort(sorted, (size_t)o->repeat, sizeof(double), bench_cmp_double);
                        ratio_median[t][s] = o->repeat % 2 ? sorted[o->repeat / 2]
                                                           : (sorted[o->repeat / 2 - 1] + sorted[o->repeat / 2]) / 2;
                }
        int mism = 0;
        int64_t drafts[W_COUNT] = {0}, acc[W_COUNT] = {0};
        for (int t = 0; t < 3; t++) {
                mism += tr[t].mismatches;
                for (int s = 1; s < n_w; s++)
                        drafts[s] += tr[t].drafts[s], acc[s] += tr[t].accepted[s];
        }
#define RATE(a, b) ((b) ? (double)(a) / (double)(b) : 0)
        if (json) {
                printf("{\"bench\":\"spec\",\"preset\":\"%s\",\"format\":\"%s\",\"threads\":%d,\"context\":%d,"
                       "\"one_token_pass_ms\":%.4f,\"verify_cost\":{",
                       preset, format, threads, CONTEXT, ratio[0] * 1e3);
                for (int k = 1; k <= SPEC_BENCH_KMAX; k++)
                        printf("%s\"%d\":%.4f", k > 1 ? "," : "", k, ratio[k]);
                printf("},\"serve_model\":\"%s\",\"serve_model_one_token_pass_ms\":%.4f,\"serve_model_verify_cost\":{",
                       o->serve_model, served[0] * 1e3);
                for (int k = 1; k <= SPEC_BENCH_KMAX; k++)
                        printf("%s\"%d\":%.4f", k > 1 ? "," : "", k, served[k]);
                printf("},\"passages\":%d,\"max_tokens\":%d,\"repeat\":%d,", n, o->max_tokens, o->repeat);
                /* acceptance over the three tasks, speed-up on held_out, by method */
                printf("\"acceptance\":{");
                for (int s = 1; s < n_w; s++)
                        printf("%s\"%s\":%.4f", s > 1 ? "," : "", worker_methods[s], RATE(acc[s], drafts[s]));
                printf("},\"speedup\":{");
                for (int s = 1; s < n_w; s++)
                        printf("%s\"%s\":%.4f", s > 1 ? "," : "", worker_methods[s], RATE(tr[0].tok_s[s], tr[0].tok_s[0]));
                printf("},\"speedup_median\":{");
                for (int s = 1; s < n_w; s++)
                        printf("%s\"%s\":%.4f", s > 1 ? "," : "", worker_methods[s], ratio_median[0][s]);
                printf("},\"tasks\":{");
                for (int t = 0; t < 3; t++) {
                        /* n-gram's figures at the task's top level, every method's under its name */
                        printf("%s\"%s\":{\"acceptance\":%.4f,\"mean_accepted\":%.3f,\"draft_tokens\":%lld,"
                               "\"plain_tok_s\":%.2f,\"ngram_tok_s\":%.2f,\"speedup\":%.4f",
                               t ? "," : "", task_names[t], RATE(tr[t].accepted[W_NGRAM], tr[t].drafts[W_NGRAM]),
                               RATE(tr[t].accepted[W_NGRAM], tr[t].verifications[W_NGRAM]),
                               (long long)tr[t].drafts[W_NGRAM], tr[t].tok_s[0], tr[t].tok_s[W_NGRAM],
                               RATE(tr[t].tok_s[W_NGRAM], tr[t].tok_s[0]));
                        for (int s = 1; s < n_w; s++) {
                                printf(",\"%s\":{\"acceptance\":%.4f,\"mean_accepted\":%.3f,\"draft_tokens\":%lld,"
                                       "\"tok_s\":%.2f,\"speedup\":%.4f,\"cpu_speedup\":%.4f,\"speedup_median\":%.4f,"
                                       "\"speedup_rounds\":[",
                                       worker_methods[s], RATE(tr[t].accepted[s], tr[t].drafts[s]),
                                       RATE(tr[t].accepted[s], tr[t].verifications[s]), (long long)tr[t].drafts[s],
                                       tr[t].tok_s[s], RATE(tr[t].tok_s[s], tr[t].tok_s[0]),
                                       RATE(tr[t].cpu_s[0], tr[t].cpu_s[s]), ratio_median[t][s]);
                                for (int round = 0; round < o->repeat; round++)
                                        printf("%s%.4f", round ? "," : "", ratio_rounds[t][s][round]);
                                printf("]}");
                        }
                        printf("}");
                }
                printf("},\"outputs_differ\":%d}\n", mism);
        } else {
                printf("%s: one-token pass %.3f ms; verify k=1..4: %.3f %.3f %.3f %.3f x\n", o->serve_model,
                       served[0] * 1e3, served[1], served[2], served[3], served[4]);
                for (int s = 1; s < n_w; s++) {
                        printf("%s drafting on %s, %d passages, %d tokens each, batch 1, %d threads, %d rounds:\n",
                               worker_methods[s], o->serve_model, n, o->max_tokens, threads, o->repeat);
                        for (int t = 0; t < 3; t++) {
                                printf("  %-17s acceptance %.3f (%lld drafts, %.2f accepted per verification), "
                                       "decode %.1f -> %.1f tok/s: %.3fx; CPU %.2f -> %.2f s: %.3fx\n",
                                       task_names[t], RATE(tr[t].accepted[s], tr[t].drafts[s]), (long long)tr[t].drafts[s],
                                       RATE(tr[t].accepted[s], tr[t].verifications[s]), tr[t].tok_s[0], tr[t].tok_s[s],
                                       RATE(tr[t].tok_s[s], tr[t].tok_s[0]), tr[t].cpu_s[0], tr[t].cpu_s[s],
                                       RATE(tr[t].cpu_s[0], tr[t].cpu_s[s]));
                                printf("  %-17s per round:", "");
                                for (int round = 0; round < o->repeat; round++)
                                        printf(" %.3f", ratio_rounds[t][s][round]);
                                printf(" (median %.3fx)\n", ratio_median[t][s]);
                        }
                }
                if (!has_mtp)
                        printf("  (no MTP module in %s: mtp not measured)\n", o->serve_model);
                if (!o->draft_model)
                        printf("  (no --draft-model: draft not measured)\n");
                printf("  outputs differing between the plain and a speculative worker: %d\n", mism);
        }
#undef RATE
        r = mism ? -EPROTO : 0;
        if (mism)
                fprintf(stderr, "dsvisor-bench spec: %d requests gave other tokens with speculation\n", mism);
out:
        for (int s = 0; s < n_w; s++)
                if (pid[s] > 0) {
                        kill(pid[s], SIGTERM);
                        wc_wait_exit(pid[s], 10);
                        wc_close(&w[s]);
                }
out_passages:
        for (int i = 0; i < n; i++) {
                free(passages[i]);
                free(prompts[0][i]);
                free(prompts[2][i]);
        }
        for (int t = 0; t < 3; t++)
                free(prompts[t]);
        free(passages);
        return r;
}
