/* dsvisor logits: runs token ids through a model and dumps what the engine computes, for
 * users who doubt the numerics.
 *
 *   dsvisor logits --model M --tokens 1,2,3 [--out FILE] [--greedy N] [--threads N]
 *
 * FILE receives the logits of every position as raw little-endian float32
 * [n_tokens, vocab]; stdout gets {"n_tokens":..,"vocab":..,"greedy":[..]} with the N-token
 * greedy continuation decoded through the KV cache. M is a native model file or a
 * Hugging Face folder (converted once into the cache, see dse_model_resolve). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dse.h"

static void logits_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor logits --model M --tokens ID,ID,... [--out FILE] [--greedy N] [--threads N]\n"
                "  Writes the logits of every position to FILE (raw little-endian float32\n"
                "  [n_tokens, vocab]) and prints the N-token greedy continuation as JSON.\n"
                "  M: a native model file or a Hugging Face folder. Honours DSV_CPU.\n");
}

/* "1,2,3" -> ids; returns the count or -EINVAL. */
static int parse_ids(const char *s, int32_t **ret_ids) {
        size_t cap = 16, n = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        if (!ids)
                return -ENOMEM;
        const char *p = s;
        while (*p) {
                char *end;
                errno = 0;
                long v = strtol(p, &end, 10);
                if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
                        free(ids);
                        return -EINVAL;
                }
                if (n == cap) {
                        int32_t *bigger = realloc(ids, (cap *= 2) * sizeof *ids);
                        if (!bigger) {
                                free(ids);
                                return -ENOMEM;
                        }
                        ids = bigger;
                }
                ids[n++] = (int32_t)v;
                p = *end ? end + 1 : end;
        }
        if (n == 0 || n > INT32_MAX) {
                free(ids);
                return -EINVAL;
        }
        *ret_ids = ids;
        return (int)n;
}

static int argmax(const float *v, int n) {
        int best = 0;
        for (int i = 1; i < n; i++)
                if (v[i] > v[best])
                        best = i;
        return best;
}

int dsv_cmd_logits(int argc, char **argv) {
        static const struct option opts[] = {
                {"model", required_argument, NULL, 'm'},  {"tokens", required_argument, NULL, 't'},
                {"out", required_argument, NULL, 'o'},    {"greedy", required_argument, NULL, 'g'},
                {"threads", required_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'},
                {NULL, 0, NULL, 0},
        };
        const char *model_arg = NULL, *tokens_arg = NULL, *out_path = NULL;
        long n_greedy = 0, n_threads = 1;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "m:t:o:g:j:h", opts, NULL)) != -1) {
                char *end;
                switch (c) {
                case 'm': model_arg = optarg; break;
                case 't': tokens_arg = optarg; break;
                case 'o': out_path = optarg; break;
                case 'g':
                        n_greedy = strtol(optarg, &end, 10);
                        if (*end || n_greedy < 0 || n_greedy > 1000000) {
                                fprintf(stderr, "dsvisor logits: --greedy '%s' is not a count\n", optarg);
                                return 2;
                        }
                        break;
                case 'j':
                        n_threads = strtol(optarg, &end, 10);
                        if (*end || n_threads < 1 || n_threads > 1024) {
                                fprintf(stderr, "dsvisor logits: --threads '%s' is not a thread count\n", optarg);
                                return 2;
                        }
                        break;
                case 'h': logits_usage(stdout); return 0;
                default: logits_usage(stderr); return 2;
                }
        }
        if (!model_arg || !tokens_arg || optind != argc) {
                logits_usage(stderr);
                return 2;
        }
        int32_t *ids = NULL;
        int n = parse_ids(tokens_arg, &ids);
        if (n < 0) {
                fprintf(stderr, "dsvisor logits: --tokens '%s' is not a list of token ids\n", tokens_arg);
                return 2;
        }

        int ret = 1, r;
        struct dse_diag diag = {{0}};
        char path[4096];
        struct dse_model *model = NULL;
        struct dse_pool *pool = NULL;
        struct dse_session *s = NULL;
        float *logits = NULL;
        if ((r = dse_model_resolve(model_arg, path, sizeof path, &diag)) < 0 ||
            (r = dse_model_open(path, 0, &model, &diag)) < 0) {
                fprintf(stderr, "dsvisor logits: model '%s': %s\n", model_arg, diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        int vocab = dse_model_vocab_size(model);
        if ((r = dse_pool_new((int)n_threads, NULL, 0, &pool)) < 0) {
                fprintf(stderr, "dsvisor logits: thread pool: %s\n", strerror(-r));
                goto out;
        }
        if ((r = dse_session_new(model, n + (int)n_greedy, pool, &s, &diag)) < 0) {
                fprintf(stderr, "dsvisor logits: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        logits = malloc((size_t)n * (size_t)vocab * sizeof(float));
        if (!logits) {
                fprintf(stderr, "dsvisor logits: out of memory for %d x %d logits\n", n, vocab);
                goto out;
        }
        if ((r = dse_session_eval(s, ids, (size_t)n, logits, NULL, &diag)) < 0) {
                fprintf(stderr, "dsvisor logits: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        if (out_path) {
                /* x86-64 is little-endian: the rows go out as they are in memory */
                FILE *f = fopen(out_path, "wbe");
                size_t count = (size_t)n * (size_t)vocab;
                int ok = f && fwrite(logits, sizeof(float), count, f) == count;
                if (f && fclose(f) != 0)
                        ok = 0;
                if (!ok) {
                        fprintf(stderr, "dsvisor logits: cannot write '%s': %m\n", out_path);
                        goto out;
                }
        }
        printf("{\"n_tokens\":%d,\"vocab\":%d,\"greedy\":[", n, vocab);
        float *last = logits + (size_t)(n - 1) * vocab;
        for (long j = 0; j < n_greedy; j++) {
                int32_t next = argmax(last, vocab);
                printf("%s%d", j ? "," : "", next);
                if (j + 1 < n_greedy && (r = dse_session_eval(s, &next, 1, NULL, last, &diag)) < 0) {
                        printf("]}\n");
                        fprintf(stderr, "dsvisor logits: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                        goto out;
                }
        }
        printf("]}\n");
        ret = 0;
out:
        free(logits);
        dse_session_free(s);
        dse_pool_free(pool);
        dse_model_free(model);
        free(ids);
        return ret;
}
