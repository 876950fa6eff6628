/* worker_bench: aggregate decode tokens/s, time to first token and inter-token latency
 * percentiles of dsvisor-worker versus concurrency.
 *
 *   worker_bench --model M [--concurrency 1,2,4,8,16] [--prompt-tokens P]
 *                [--gen-tokens G] [--requests-per-level R] [--threads T]
 *                [--max-batch B] [--token-budget TOK] [--n-ctx N]
 *
 * Starts dsvisor-worker (from $DSV_BUILD_DIR/bin, else beside this program) on M, then
 * for each concurrency level keeps that many greedy token-id requests in flight (closed
 * loop) until R requests have finished (each up to G tokens; EOS may end one early).
 * Every level's outputs are checked: the same prompt must give the same tokens at every
 * concurrency (batching must not change results), otherwise the run fails. Prints one
 * Markdown table row per level. */
#include <getopt.h>
#include <libgen.h>
#include <math.h>

#include "bench_sort.h"
#include "worker-client.h"

static double pct(double *v, int n, double p) {
        if (n == 0)
                return NAN;
        qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
        int i = (int)ceil(p / 100.0 * n) - 1;
        return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void make_prompt(int32_t *ids, int n, int salt, int vocab) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i * 131 + 7 + salt * 57) % vocab);
}

int main(int argc, char **argv) {
        const char *model = NULL, *conc = "1,2,4,8,16", *threads = "1", *max_batch = "16", *budget = "256",
                   *n_ctx = "1024";
        int prompt_tokens = 64, gen_tokens = 32, per_level = 16, vocab = 256;
        static const struct option opts[] = {
                {"model", required_argument, NULL, 'm'},          {"concurrency", required_argument, NULL, 'c'},
                {"prompt-tokens", required_argument, NULL, 'p'},  {"gen-tokens", required_argument, NULL, 'g'},
                {"requests-per-level", required_argument, NULL, 'r'}, {"threads", required_argument, NULL, 't'},
                {"max-batch", required_argument, NULL, 'b'},      {"token-budget", required_argument, NULL, 'k'},
                {"n-ctx", required_argument, NULL, 'n'},          {"vocab", required_argument, NULL, 'v'},
                {0},
        };
        for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
                switch (c) {
                case 'm': model = optarg; break;
                case 'c': conc = optarg; break;
                case 'p': prompt_tokens = atoi(optarg); break;
                case 'g': gen_tokens = atoi(optarg); break;
                case 'r': per_level = atoi(optarg); break;
                case 't': threads = optarg; break;
                case 'b': max_batch = optarg; break;
                case 'k': budget = optarg; break;
                case 'n': n_ctx = optarg; break;
                case 'v': vocab = atoi(optarg); break;
                default: return 2;
                }
        }
        if (!model || prompt_tokens < 1 || prompt_tokens > 4096 || gen_tokens < 1 || gen_tokens > WC_MAX_OUT ||
            per_level < 1 || per_level > WC_MAX_REQ - 1 || vocab < 1) {
                fprintf(stderr, "usage: worker_bench --model M [--concurrency 1,2,4] [--prompt-tokens P] "
                                "[--gen-tokens G<=%d] [--requests-per-level R<%d] [--threads T] [--vocab V]\n",
                        WC_MAX_OUT, WC_MAX_REQ);
                return 2;
        }
        if (!getenv("DSV_BUILD_DIR")) {
                static char dir[4096];
                snprintf(dir, sizeof dir, "%s", argv[0]);
                char *d = dirname(dir);
                static char build[4200];
                snprintf(build, sizeof build, "%s/..", d);
                setenv("DSV_BUILD_DIR", build, 1);
        }
        const char *tmp = wc_tmpdir();
        char url[512];
        snprintf(url, sizeof url, "ipc://%s/bench.sock", tmp);
        char *args[] = {"--model", (char *)model, "--listen", url, "--threads", (char *)threads, "--max-batch",
                        (char *)max_batch, "--token-budget", (char *)budget, "--n-ctx", (char *)n_ctx, NULL};
        pid_t pid = wc_spawn(args);
        struct wc c;
        if (pid < 0 || wc_open(&c, url) < 0 || wc_wait_state(&c, "ready", 600) < 0) {
                fprintf(stderr, "worker_bench: the worker did not become ready\n");
                if (pid > 0)
                        kill(pid, SIGKILL);
                return 1;
        }
        static int32_t prompts[WC_MAX_REQ][4096];
        for (int i = 0; i < WC_MAX_REQ; i++)
                make_prompt(prompts[i], prompt_tokens, i, vocab);
        static int32_t reference[WC_MAX_REQ][WC_MAX_OUT];
        static int n_reference[WC_MAX_REQ];
        int have_reference = 0, status = 0;

        printf("| concurrency | requests | decode tok/s (aggregate) | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |\n");
        printf("| --- | --- | --- | --- | --- | --- | --- |\n");
        for (const char *p = conc; *p;) {
                int level = atoi(p);
                while (*p && *p != ',')
                        p++;
                if (*p == ',')
                        p++;
                if (level < 1)
                        continue;
                static struct wc_result res[WC_MAX_REQ];
                memset(res, 0, sizeof res);
                int next = 1, in_flight = 0, finished = 0;
                double t0 = bench_now_s();
                while (finished < per_level) {
                        while (in_flight < level && next <= per_level) {
                                struct dsv_ipc_msg m = wc_tokens_request((uint64_t)next, prompts[next],
                                                                         (size_t)prompt_tokens, gen_tokens, 0, 0);
                                res[next].t_sent = bench_now_s();
                                if (wc_send(&c, &m) < 0) {
                                        fprintf(stderr, "worker_bench: send failed\n");
                                        status = 1;
                                        goto out;
                                }
                                next++;
                                in_flight++;
                        }
                        int before = finished;
                        finished += wc_collect(&c, res, 1, 120);
                        if (finished == before) {
                                fprintf(stderr, "worker_bench: timed out at concurrency %d\n", level);
                                status = 1;
                                goto out;
                        }
                        in_flight -= finished - before;
                }
                double wall = bench_now_s() - t0;
                static double ttft[WC_MAX_REQ], itl[WC_MAX_REQ * WC_MAX_OUT];
                int n_itl = 0;
                long decoded = 0;
                for (int i = 1; i <= per_level; i++) {
                        struct wc_result *r = &res[i];
                        if (r->error || r->n_tokens < 1 || r->n_tokens > gen_tokens) {
                                fprintf(stderr, "worker_bench: request %d: error %d (%s), %d tokens\n", i, r->error - 1,
                                        r->message, r->n_tokens);
                                status = 1;
                                goto out;
                        }
                        /* check: batching must not change a request's tokens (EOS may end it early) */
                        if (have_reference && (n_reference[i] != r->n_tokens ||
                                               memcmp(reference[i], r->tokens, sizeof(int32_t) * (size_t)r->n_tokens))) {
                                fprintf(stderr, "worker_bench: request %d differs at concurrency %d\n", i, level);
                                status = 1;
                                goto out;
                        }
                        memcpy(reference[i], r->tokens, sizeof(int32_t) * (size_t)r->n_tokens);
                        n_reference[i] = r->n_tokens;
                        ttft[i - 1] = (r->t_first - r->t_sent) * 1000;
                        for (int k = 0; k < r->n_itl; k++)
                                itl[n_itl++] = r->itl[k] * 1000;
                        decoded += r->n_tokens;
                }
                have_reference = 1;
                printf("| %d | %d | %.1f | %.1f | %.1f | %.2f | %.2f |\n", level, per_level, (double)decoded / wall,
                       pct(ttft, per_level, 50), pct(ttft, per_level, 99), pct(itl, n_itl, 50), pct(itl, n_itl, 99));
                fflush(stdout);
        }
out:
        kill(pid, SIGTERM);
        wc_wait_exit(pid, 30);
        wc_close(&c);
        return status;
}
