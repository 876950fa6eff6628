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
 * Markdown table row per level.
 *
 * It talks to the worker as the supervisor does, through the ipc/ connection API
 * (dsv_ipc_dial), so the figures include the same transport and event batching. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsv_ipc.h"

#define MAX_REQ 64
#define MAX_OUT 512

/* What came back for one request. */
struct result {
        int32_t tokens[MAX_OUT];
        int n_tokens;
        int error;         /* error code + 1, 0: none */
        char message[256]; /* the error's message */
        double t_sent, t_first, t_last;
        double itl[MAX_OUT]; /* gaps between token events */
        int n_itl;
};

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts $DSV_BUILD_DIR/bin/dsvisor-worker with args (NULL-terminated, after argv[0]). */
static pid_t spawn_worker(char *const *args) {
        char path[4400];
        snprintf(path, sizeof path, "%s/bin/dsvisor-worker", getenv("DSV_BUILD_DIR"));
        char *argv[64] = {path};
        int n = 1;
        for (; args[n - 1] && n < 63; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        pid_t pid = fork();
        if (pid == 0) {
                execv(path, argv);
                _exit(127);
        }
        return pid;
}

/* Waits up to timeout_s for pid to exit; 0, or -ETIMEDOUT while it still runs. */
static int wait_exit(pid_t pid, double timeout_s) {
        double end = now_s() + timeout_s;
        int st;
        while (now_s() < end) {
                pid_t r = waitpid(pid, &st, WNOHANG);
                if (r == pid)
                        return 0;
                if (r < 0)
                        return -errno;
                usleep(10000);
        }
        return -ETIMEDOUT;
}

/* Sends health probes until a reply says "ready"; 0 or -ETIMEDOUT. */
static int wait_ready(struct dsv_ipc_conn *c, double timeout_s) {
        double end = now_s() + timeout_s;
        uint64_t seq = 1;
        while (now_s() < end) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_HEALTH};
                m.u.probe.seq = seq++;
                dsv_ipc_send(c, &m);
                struct dsv_ipc_msg r;
                if (dsv_ipc_recv(c, &r, 200, NULL, 0) == 0) {
                        int ok = r.type == DSV_IPC_HEALTH_REPLY && !strcmp(r.u.health.state, "ready");
                        dsv_ipc_msg_done(&r);
                        if (ok)
                                return 0;
                }
        }
        return -ETIMEDOUT;
}

/* Receives events into res[id] until n_expected requests are done or timeout_s passes;
 * the number done. */
static int collect(struct dsv_ipc_conn *c, struct result *res, int n_expected, double timeout_s) {
        int n_done = 0;
        double end = now_s() + timeout_s;
        while (n_done < n_expected && now_s() < end) {
                struct dsv_ipc_msg m;
                if (dsv_ipc_recv(c, &m, 200, NULL, 0) < 0)
                        continue;
                double t = now_s();
                uint64_t id = m.type == DSV_IPC_TOKEN ? m.u.token.id
                              : m.type == DSV_IPC_FINAL ? m.u.final.id
                              : m.type == DSV_IPC_ERROR ? m.u.error.id
                                                        : MAX_REQ;
                if (id < MAX_REQ) {
                        struct result *r = &res[id];
                        if (m.type == DSV_IPC_TOKEN) {
                                if (r->n_tokens < MAX_OUT)
                                        r->tokens[r->n_tokens] = m.u.token.token;
                                if (r->n_tokens == 0)
                                        r->t_first = t;
                                else if (r->n_itl < MAX_OUT)
                                        r->itl[r->n_itl++] = t - r->t_last;
                                r->t_last = t;
                                r->n_tokens++;
                        } else {
                                if (m.type == DSV_IPC_ERROR) {
                                        r->error = (int)m.u.error.code + 1;
                                        snprintf(r->message, sizeof r->message, "%s",
                                                 m.u.error.message ? m.u.error.message : "");
                                }
                                n_done++;
                        }
                }
                dsv_ipc_msg_done(&m);
        }
        return n_done;
}

static struct dsv_ipc_msg tokens_request(uint64_t id, const int32_t *tokens, size_t n, int max_tokens) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
        m.u.request.id = id;
        m.u.request.input = DSV_IPC_INPUT_TOKENS;
        m.u.request.tokens = (int32_t *)tokens;
        m.u.request.n_tokens = n;
        m.u.request.max_tokens = max_tokens;
        dsv_ipc_sampling_init(&m.u.request.sampling);
        m.u.request.sampling.temperature = 0; /* greedy: outputs comparable across levels */
        m.u.request.sampling.seed = 0;
        m.u.request.sampling.has_seed = 1;
        return m;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
        if (n == 0)
                return NAN;
        qsort(v, (size_t)n, sizeof *v, cmp_double);
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
        if (!model || prompt_tokens < 1 || prompt_tokens > 4096 || gen_tokens < 1 || gen_tokens > MAX_OUT ||
            per_level < 1 || per_level > MAX_REQ - 1 || vocab < 1) {
                fprintf(stderr, "usage: worker_bench --model M [--concurrency 1,2,4] [--prompt-tokens P] "
                                "[--gen-tokens G<=%d] [--requests-per-level R<%d] [--threads T] [--vocab V]\n",
                        MAX_OUT, MAX_REQ);
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
        /* a private 0700 directory for the socket, as dsv_ipc_listen requires */
        char tmp[] = "/tmp/dsv-wbench-XXXXXX";
        if (!mkdtemp(tmp)) {
                fprintf(stderr, "worker_bench: cannot create a directory in /tmp: %s\n", strerror(errno));
                return 1;
        }
        if (!getenv("DSV_CACHE_DIR")) {
                char cache[4400];
                snprintf(cache, sizeof cache, "%s/model-cache", getenv("DSV_BUILD_DIR"));
                setenv("DSV_CACHE_DIR", cache, 1);
        }
        char url[512];
        snprintf(url, sizeof url, "ipc://%s/bench.sock", tmp);
        char *args[] = {"--model", (char *)model, "--listen", url, "--threads", (char *)threads, "--max-batch",
                        (char *)max_batch, "--token-budget", (char *)budget, "--n-ctx", (char *)n_ctx, NULL};
        pid_t pid = spawn_worker(args);
        struct dsv_ipc_conn *c = NULL;
        if (pid < 0 || dsv_ipc_dial(url, &c) < 0 || wait_ready(c, 600) < 0) {
                fprintf(stderr, "worker_bench: the worker did not become ready\n");
                if (pid > 0)
                        kill(pid, SIGKILL);
                if (c)
                        dsv_ipc_close(c);
                return 1;
        }
        static int32_t prompts[MAX_REQ][4096];
        for (int i = 0; i < MAX_REQ; i++)
                make_prompt(prompts[i], prompt_tokens, i, vocab);
        static int32_t reference[MAX_REQ][MAX_OUT];
        static int n_reference[MAX_REQ];
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
                static struct result res[MAX_REQ];
                memset(res, 0, sizeof res);
                int next = 1, in_flight = 0, finished = 0;
                double t0 = now_s();
                while (finished < per_level) {
                        while (in_flight < level && next <= per_level) {
                                struct dsv_ipc_msg m = tokens_request((uint64_t)next, prompts[next], (size_t)prompt_tokens, gen_tokens);
                                res[next].t_sent = now_s();
                                if (dsv_ipc_send(c, &m) < 0) {
                                        fprintf(stderr, "worker_bench: send failed\n");
                                        status = 1;
                                        goto out;
                                }
                                next++;
                                in_flight++;
                        }
                        int before = finished;
                        finished += collect(c, res, 1, 120);
                        if (finished == before) {
                                fprintf(stderr, "worker_bench: timed out at concurrency %d\n", level);
                                status = 1;
                                goto out;
                        }
                        in_flight -= finished - before;
                }
                double wall = now_s() - t0;
                static double ttft[MAX_REQ], itl[MAX_REQ * MAX_OUT];
                int n_itl = 0;
                long decoded = 0;
                for (int i = 1; i <= per_level; i++) {
                        struct result *r = &res[i];
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
        wait_exit(pid, 30);
        dsv_ipc_close(c);
        char sock[600];
        snprintf(sock, sizeof sock, "%s/bench.sock", tmp);
        unlink(sock);
        rmdir(tmp);
        return status;
}
