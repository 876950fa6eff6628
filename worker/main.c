/* dsvisor-worker: one serving instance — an engine, a paged KV cache and a
 * continuous-batching scheduler behind the nng IPC protocol (ipc/PROTOCOL.md). The
 * supervisor starts it; the command line is documented in worker/README.md. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"

static void usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor-worker (--model PATH | --model-fd FD) --listen URL [options]\n"
                "  --model PATH        native model file or Hugging Face folder (converted once into the cache)\n"
                "  --model-fd FD       an open native model file or memfd\n"
                "  --listen URL        ipc:///path or inproc://name\n"
                "  --threads T         compute threads (default 1)\n"
                "  --cpus LIST         pin compute threads, e.g. 0-3,8\n"
                "  --n-ctx N           longest sequence, prompt + output (default 4096)\n"
                "  --max-batch B       sequences per step (default 8)\n"
                "  --token-budget TOK  tokens per step, decode + prefill chunks (default 256)\n"
                "  --kv-mem-mib MIB    KV pool size (default: max-batch full contexts)\n"
                "  --kv-dtype T        KV cache element type: f32, bf16, fp8 (e4m3) or int8, the last two with\n"
                "                      a float scale per head or latent group (default: $DSV_KV, else bf16)\n"
                "  --kv-disk DIR       a second KV tier: prefix blocks evicted from the pool go to\n"
                "                      DIR/INSTANCE.kvtier and come back on a hit, across restarts\n"
                "  --kv-disk-gib N     the tier file's size (required with --kv-disk)\n"
                "  --grace-ms MS       SIGTERM drain time before in-flight requests fail (default 10000)\n"
                "  --max-queue N       waiting requests before 'overloaded' (default 256)\n"
                "  --instance NAME     name in log lines\n"
                "  --chat-template FILE  Jinja chat template instead of the model's (an unusable one\n"
                "                      stops the worker)\n"
                "  --log-format F      text (default: \"<prio>dsvisor-worker[NAME]: ...\") or json (one object a line)\n"
                "  --amx               allow AMX kernels (faster prefill; a request's logits then depend\n"
                "                      on its batch within float rounding, see worker/README.md)\n"
                "  --speculative M     speculative decoding: ngram | mtp (DeepSeek-V3 MTP module) | draft (--draft-model)\n"
                "                      | off (default off; draft when --draft-model is given)\n"
                "  --draft-model PATH  a smaller model with the same tokenizer drafts greedily, in this worker with\n"
                "                      its own KV cache (native file or Hugging Face folder)\n"
                "  --spec-k-min K      fewest drafts a sequence verifies in a step where it drafts; where\n"
                "                      drafts do not pay for their measured cost, it decodes plainly (default 1)\n"
                "  --spec-k-max K      most drafts a sequence verifies per step, <= 8 (default 4)\n"
                "  --spec-step-tokens N  a step sampling N positions is compute-bound: drafts never take\n"
                "                      it past N (default 8, 0: only the token budget limits)\n"
                "  --fast-forward N    a constrained output's next tokens that its grammar forces, up to N\n"
                "                      (<= 8), go in one forward pass; the output is the same (default 8, 0: off)\n");
}

static int parse_int(const char *s, int min, int max, int *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < min || v > max)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

/* "0-3,8,10-11" (no empty item, no trailing comma, no CPU twice) */
static int parse_cpus(const char *s, int *cpus, int max, int *ret_n) {
        int n = 0;
        while (*s) {
                char *end;
                long a = strtol(s, &end, 10), b;
                if (end == s || a < 0 || a > 65535)
                        return -EINVAL;
                b = a;
                s = end;
                if (*s == '-') {
                        b = strtol(s + 1, &end, 10);
                        if (end == s + 1 || b < a || b > 65535)
                                return -EINVAL;
                        s = end;
                }
                for (long c = a; c <= b; c++) {
                        if (n == max)
                                return -E2BIG;
                        for (int i = 0; i < n; i++)
                                if (cpus[i] == c) /* two threads would share it */
                                        return -EINVAL;
                        cpus[n++] = (int)c;
                }
                if (*s == ',' && s[1])
                        s++;
                else if (*s)
                        return -EINVAL;
        }
        if (n == 0)
                return -EINVAL;
        *ret_n = n;
        return 0;
}

int worker_parse_args(int argc, char **argv, struct worker_config *cfg) {
        enum { O_MODEL = 256, O_MODEL_FD, O_LISTEN, O_THREADS, O_CPUS, O_NCTX, O_BATCH, O_BUDGET, O_KVMEM, O_GRACE,
               O_QUEUE, O_INSTANCE, O_AMX, O_HELP, O_SPEC, O_SPEC_KMIN, O_SPEC_KMAX, O_SPEC_STEP, O_CHAT_TEMPLATE, O_KVDTYPE, O_LOG_FORMAT,
               O_FAST_FORWARD, O_KVDISK, O_KVDISK_GIB, O_DRAFT_MODEL };
        static const struct option opts[] = {
                {"model", required_argument, NULL, O_MODEL},       {"model-fd", required_argument, NULL, O_MODEL_FD},
                {"listen", required_argument, NULL, O_LISTEN},     {"threads", required_argument, NULL, O_THREADS},
                {"cpus", required_argument, NULL, O_CPUS},         {"n-ctx", required_argument, NULL, O_NCTX},
                {"max-batch", required_argument, NULL, O_BATCH},   {"token-budget", required_argument, NULL, O_BUDGET},
                {"kv-mem-mib", required_argument, NULL, O_KVMEM},  {"grace-ms", required_argument, NULL, O_GRACE},
                {"max-queue", required_argument, NULL, O_QUEUE},   {"instance", required_argument, NULL, O_INSTANCE},
                {"amx", no_argument, NULL, O_AMX},                 {"help", no_argument, NULL, O_HELP},
                {"speculative", required_argument, NULL, O_SPEC},  {"spec-k-min", required_argument, NULL, O_SPEC_KMIN},
                {"spec-k-max", required_argument, NULL, O_SPEC_KMAX},
                {"spec-step-tokens", required_argument, NULL, O_SPEC_STEP},
                {"chat-template", required_argument, NULL, O_CHAT_TEMPLATE},
                {"kv-dtype", required_argument, NULL, O_KVDTYPE},
                {"log-format", required_argument, NULL, O_LOG_FORMAT},
                {"fast-forward", required_argument, NULL, O_FAST_FORWARD},
                {"kv-disk", required_argument, NULL, O_KVDISK},
                {"kv-disk-gib", required_argument, NULL, O_KVDISK_GIB},
                {"draft-model", required_argument, NULL, O_DRAFT_MODEL},
                {0},
        };
        *cfg = (struct worker_config){.model_fd = -1, .n_threads = 1, .max_batch = 8, .token_budget = 256,
                                      .grace_ms = 10000, .max_queue = 256, .instance = "worker",
                                      .spec = {.method = SPEC_OFF, .k_min = 1, .k_max = 4, .step_tokens = 8,
                                               .by_cost = 1},
                                      .kv_dtype = DSE_KV_BF16, .fast_forward = SPEC_K_LIMIT};
        int c, r = 0, spec_given = 0;
        struct dse_diag diag = {0};
        const char *env_kv = getenv("DSV_KV");
        if (env_kv && *env_kv && dse_kv_dtype_parse(env_kv, &cfg->kv_dtype, &diag) < 0) {
                fprintf(stderr, "dsvisor-worker: DSV_KV: %s\n", diag.msg);
                return -EINVAL;
        }
        optind = 1;
        while (r == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case O_MODEL: cfg->model_path = optarg; break;
                case O_MODEL_FD: r = parse_int(optarg, 0, INT_MAX, &cfg->model_fd); break;
                case O_LISTEN: cfg->listen_url = optarg; break;
                case O_THREADS: r = parse_int(optarg, 1, 1024, &cfg->n_threads); break;
                case O_CPUS: r = parse_cpus(optarg, cfg->cpus, 1024, &cfg->n_cpus); break;
                case O_NCTX: r = parse_int(optarg, 2, 1 << 22, &cfg->n_ctx); break;
                case O_BATCH: r = parse_int(optarg, 1, 1024, &cfg->max_batch); break;
                case O_BUDGET: r = parse_int(optarg, 1, 1 << 20, &cfg->token_budget); break;
                case O_KVMEM: r = parse_int(optarg, 1, 1 << 24, &cfg->kv_mem_mib); break;
                case O_GRACE: r = parse_int(optarg, 0, 3600 * 1000, &cfg->grace_ms); break;
                case O_QUEUE: r = parse_int(optarg, 0, 1 << 20, &cfg->max_queue); break;
                case O_INSTANCE: cfg->instance = optarg; break;
                case O_AMX: cfg->allow_amx = 1; break;
                case O_SPEC: r = spec_method_parse(optarg, &cfg->spec.method); spec_given = 1; break;
                case O_DRAFT_MODEL: cfg->draft_model_path = optarg; r = *optarg ? 0 : -EINVAL; break;
                case O_SPEC_KMIN: r = parse_int(optarg, 1, SPEC_K_LIMIT, &cfg->spec.k_min); break;
                case O_SPEC_KMAX: r = parse_int(optarg, 1, SPEC_K_LIMIT, &cfg->spec.k_max); break;
                case O_SPEC_STEP: r = parse_int(optarg, 0, 1 << 20, &cfg->spec.step_tokens); break;
                case O_FAST_FORWARD: r = parse_int(optarg, 0, SPEC_K_LIMIT, &cfg->fast_forward); break;
                case O_CHAT_TEMPLATE: cfg->chat_template_path = optarg; break;
                case O_KVDTYPE: r = dse_kv_dtype_parse(optarg, &cfg->kv_dtype, &diag); break;
                case O_LOG_FORMAT: r = dsv_log_format_parse(optarg, &cfg->log_format); break;
                case O_KVDISK: cfg->kv_disk_dir = optarg; r = *optarg ? 0 : -EINVAL; break;
                case O_KVDISK_GIB: r = parse_int(optarg, 1, 1 << 20, &cfg->kv_disk_gib); break;
                case O_HELP: usage(stdout); exit(0);
                default: r = -EINVAL; break;
                }
                if (r < 0 && c == O_KVDTYPE)
                        fprintf(stderr, "dsvisor-worker: --kv-dtype: %s\n", diag.msg);
                else if (r < 0 && c != '?')
                        fprintf(stderr, "dsvisor-worker: bad value '%s' for --%s\n", optarg, opts[c - O_MODEL].name);
        }
        if (r == 0 && optind < argc) {
                fprintf(stderr, "dsvisor-worker: unexpected argument '%s'\n", argv[optind]);
                r = -EINVAL;
        }
        if (r == 0 && (!cfg->model_path) == (cfg->model_fd < 0)) {
                fprintf(stderr, "dsvisor-worker: give exactly one of --model and --model-fd\n");
                r = -EINVAL;
        }
        if (r == 0 && !cfg->listen_url) {
                fprintf(stderr, "dsvisor-worker: --listen is required\n");
                r = -EINVAL;
        }
        if (r == 0 && cfg->token_budget < cfg->max_batch) {
                fprintf(stderr, "dsvisor-worker: --token-budget %d is below --max-batch %d: decodes would starve\n",
                        cfg->token_budget, cfg->max_batch);
                r = -EINVAL;
        }
        if (r == 0 && cfg->spec.k_min > cfg->spec.k_max) {
                fprintf(stderr, "dsvisor-worker: --spec-k-min %d is above --spec-k-max %d\n", cfg->spec.k_min,
                        cfg->spec.k_max);
                r = -EINVAL;
        }
        if (r == 0 && cfg->draft_model_path && !spec_given)
                cfg->spec.method = SPEC_DRAFT;
        if (r == 0 && (cfg->spec.method == SPEC_DRAFT) != (cfg->draft_model_path != NULL)) {
                fprintf(stderr, "dsvisor-worker: %s\n", cfg->draft_model_path
                                                                  ? "--draft-model goes with --speculative draft (or no --speculative)"
                                                                  : "--speculative draft needs --draft-model");
                r = -EINVAL;
        }
        if (r == 0 && !cfg->kv_disk_dir != !cfg->kv_disk_gib) {
                fprintf(stderr, "dsvisor-worker: --kv-disk and --kv-disk-gib go together\n");
                r = -EINVAL;
        }
        if (r == 0 && cfg->kv_disk_dir && strchr(cfg->instance, '/')) {
                fprintf(stderr, "dsvisor-worker: --instance '%s' names the --kv-disk file and must not hold '/'\n",
                        cfg->instance);
                r = -EINVAL;
        }
        if (r < 0)
                usage(stderr);
        return r;
}

int main(int argc, char **argv) {
        struct worker_config cfg;
        if (worker_parse_args(argc, argv, &cfg) < 0)
                return 2;
        wlog_set_instance(cfg.instance);
        wlog_set_format(cfg.log_format);
        /* The AMX kernels and the VNNI 8-token layout sum int8 block products in another
         * float order than the 4-token VNNI blocks and take over from 5-16 tokens per call, so a request's logits would depend
         * on what it is batched with. Serving promises that they do not (alone or in a
         * batch of 8, the same tokens), so AMX is opt-in here. An operator's own
         * DSV_NO_AMX wins; the engine reads it when the kernel table is resolved. */
        if (!cfg.allow_amx && setenv("DSV_NO_AMX", "1", 0) < 0) {
                wlog(3, "Failed to set DSV_NO_AMX: %s", strerror(errno));
                return 1;
        }
        int r = hygiene_bind_to_parent();
        if (r == -ESRCH) {
                wlog(3, "Parent exited before we started, exiting");
                return 1;
        }
        if (r < 0)
                wlog(4, "Failed to set PR_SET_PDEATHSIG: %s, ignoring", strerror(-r));
        if ((r = hygiene_install_signals()) < 0) {
                wlog(3, "Failed to install signal handlers: %s", strerror(-r));
                return 1;
        }
        return worker_serve(&cfg);
}
