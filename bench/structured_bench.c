/* structured_bench: decode throughput of JSON-Schema-constrained requests against
 * unconstrained ones on the same dsvisor-worker, at batch 1 and 8, the share of
 * constrained tokens the mask alone decided (forced, not sampled), and what
 * fast-forward (forced runs in one forward pass) gains.
 *
 *   structured_bench --model M [--batches 1,8] [--rounds R] [--threads T] [--gen-tokens G]
 *
 * Starts two dsvisor-workers (from $DSV_BUILD_DIR/bin, else beside this program): one
 * as configured by default (fast-forward on), one with --fast-forward 0. Each round
 * sends B unconstrained requests at once to the first and waits for them, then B
 * constrained ones (response_format json_schema, the schema below) to each worker in
 * turn, rotating which mode goes first, so every mode sees the same host load;
 * tokens/s per mode is every generated token over the wall time of its rounds. The
 * ratios are the figures to read: the absolute rates depend on the host. Forced tokens
 * and forward passes come from the first worker's stats. */
#include <getopt.h>
#include <libgen.h>

#include "worker-client.h"

static const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},"
        "\"age\":{\"type\":\"integer\"},\"role\":{\"enum\":[\"king\",\"prophet\",\"priest\",\"scribe\"]},"
        "\"tribes\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":10},\"minItems\":1,\"maxItems\":3}},"
        "\"required\":[\"name\",\"age\",\"role\",\"tribes\"],\"additionalProperties\":false}";

static int stats(struct wc *c, uint64_t seq, struct dsv_ipc_stats *ret) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS};
        m.u.probe.seq = seq;
        if (wc_send(c, &m) < 0 || wc_recv_type(c, &m, DSV_IPC_STATS_REPLY, 10000) < 0)
                return -EIO;
        *ret = m.u.stats;
        dsv_ipc_msg_done(&m);
        return 0;
}

/* One round of b requests in one mode; the tokens generated, and the seconds in *secs. */
static long round_once(struct wc *c, int b, int constrained, int gen, uint64_t *next_id, double *secs) {
        static struct wc_result res[WC_MAX_REQ];
        memset(res, 0, sizeof res);
        double t0 = bench_now_s();
        for (int i = 0; i < b; i++) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
                struct dsv_ipc_request *q = &m.u.request;
                q->id = *next_id + (uint64_t)i;
                q->input = DSV_IPC_INPUT_PROMPT;
                q->prompt = "And God said";
                q->max_tokens = gen;
                dsv_ipc_sampling_init(&q->sampling);
                q->sampling.temperature = 0.8f;
                q->sampling.seed = q->id;
                q->sampling.has_seed = 1;
                if (constrained) {
                        q->constraint = DSV_IPC_CONSTRAINT_JSON_SCHEMA;
                        q->constraint_text = (char *)schema;
                }
                if (wc_send(c, &m) < 0)
                        return -EIO;
        }
        /* ids cycle through 1..WC_MAX_REQ-1 so results land in res[] */
        if (wc_collect(c, res, b, 300) < b)
                return -ETIMEDOUT;
        *secs += bench_now_s() - t0;
        long tokens = 0;
        for (int i = 0; i < b; i++) {
                const struct wc_result *r = &res[*next_id + (uint64_t)i];
                if (r->error) {
                        fprintf(stderr, "structured_bench: request failed: %s\n", r->message);
                        return -EIO;
                }
                tokens += r->n_tokens;
        }
        *next_id = *next_id + (uint64_t)b + (uint64_t)b >= WC_MAX_REQ ? 1 : *next_id + (uint64_t)b;
        return tokens;
}

int main(int argc, char **argv) {
        const char *model = NULL, *batches = "1,8", *threads = "2";
        int rounds = 6, gen = 96;
        static const struct option opts[] = {
                {"model", required_argument, NULL, 'm'},   {"batches", required_argument, NULL, 'b'},
                {"rounds", required_argument, NULL, 'r'},  {"threads", required_argument, NULL, 't'},
                {"gen-tokens", required_argument, NULL, 'g'}, {0},
        };
        for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
                switch (o) {
                case 'm': model = optarg; break;
                case 'b': batches = optarg; break;
                case 'r': rounds = atoi(optarg); break;
                case 't': threads = optarg; break;
                case 'g': gen = atoi(optarg); break;
                default: return 2;
                }
        }
        if (!model || rounds < 1 || gen < 1 || gen > WC_MAX_OUT) {
                fprintf(stderr, "usage: structured_bench --model M [--batches 1,8] [--rounds R] [--threads T] "
                                "[--gen-tokens G<=%d]\n", WC_MAX_OUT);
                return 2;
        }
        if (!getenv("DSV_BUILD_DIR")) {
                static char dir[4096], build[4200];
                snprintf(dir, sizeof dir, "%s", argv[0]);
                snprintf(build, sizeof build, "%s/..", dirname(dir));
                setenv("DSV_BUILD_DIR", build, 1);
        }
        const char *tmp = wc_tmpdir();
        char url[2][512];
        pid_t pid[2] = {-1, -1};
        struct wc conn[2];
        for (int w = 0; w < 2; w++) {
                snprintf(url[w], sizeof url[w], "ipc://%s/structured-%d.sock", tmp, w);
                char *args[] = {"--model", (char *)model, "--listen", url[w], "--threads", (char *)threads,
                                "--max-batch", "16", "--n-ctx", "1024", w ? "--fast-forward" : NULL, "0", NULL};
                pid[w] = wc_spawn(args);
                if (pid[w] < 0 || wc_open(&conn[w], url[w]) < 0 || wc_wait_state(&conn[w], "ready", 600) < 0) {
                        fprintf(stderr, "structured_bench: the worker did not become ready\n");
                        for (int k = 0; k <= w; k++)
                                if (pid[k] > 0)
                                        kill(pid[k], SIGKILL);
                        return 1;
                }
        }
        int status = 0;
        uint64_t next_id[2] = {1, 1}, seq = 1;
        printf("| batch | unconstrained tok/s | constrained tok/s | ratio | constrained, no fast-forward tok/s | "
               "fast-forward speed-up | forced / constrained tokens | forward passes per constrained token, "
               "fast-forward / none |\n");
        printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (const char *p = batches; *p;) {
                int b = atoi(p);
                while (*p && *p != ',')
                        p++;
                if (*p == ',')
                        p++;
                if (b < 1 || b > 16)
                        continue;
                /* modes: 0 unconstrained, 1 constrained, 2 constrained without fast-forward */
                double secs[3] = {0, 0, 0};
                long tokens[3] = {0, 0, 0}, steps[3] = {0, 0, 0}, con[3] = {0, 0, 0}, forced = 0;
                for (int r = 0; r < rounds && !status; r++)
                        for (int k = 0; k < 3 && !status; k++) {
                                int mode = (r + k) % 3, w = mode == 2;
                                struct dsv_ipc_stats before, after;
                                long n = stats(&conn[w], seq++, &before) < 0 ? -EIO
                                         : round_once(&conn[w], b, mode > 0, gen, &next_id[w], &secs[mode]);
                                if (n >= 0 && stats(&conn[w], seq++, &after) < 0)
                                        n = -EIO;
                                if (n < 0) {
                                        fprintf(stderr, "structured_bench: round failed (%ld)\n", n);
                                        status = 1;
                                        break;
                                }
                                tokens[mode] += n;
                                steps[mode] += (long)(after.steps - before.steps);
                                con[mode] += (long)(after.constrained_tokens - before.constrained_tokens);
                                if (mode == 1)
                                        forced += (long)(after.forced_tokens - before.forced_tokens);
                        }
                if (status)
                        break;
                double rate[3];
                for (int k = 0; k < 3; k++)
                        rate[k] = (double)tokens[k] / secs[k];
                printf("| %d | %.1f | %.1f | %.3f | %.1f | %.3f | %ld / %ld (%.0f %%) | %.3f / %.3f |\n", b, rate[0],
                       rate[1], rate[1] / rate[0], rate[2], rate[1] / rate[2], forced, con[1],
                       con[1] > 0 ? 100.0 * (double)forced / (double)con[1] : 0.0,
                       con[1] > 0 ? (double)steps[1] / (double)con[1] : 0.0,
                       con[2] > 0 ? (double)steps[2] / (double)con[2] : 0.0);
                fflush(stdout);
        }
        for (int w = 0; w < 2; w++) {
                kill(pid[w], SIGTERM);
                wc_wait_exit(pid[w], 10);
                wc_close(&conn[w]);
        }
        return status;
}
