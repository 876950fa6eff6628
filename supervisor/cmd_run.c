/* dsvisor run: one-shot generation, streamed to stdout as it is produced (like
 * llama-cli), with the prompt and generation speed on stderr at the end.
 *
 *   dsvisor run --model M (--prompt TEXT | --chat TEXT) [-n N] [--temperature T]
 *               [--top-k K] [--top-p P] [--min-p P] [--seed S] [--chat-template FILE]
 *               [--system TEXT] [--stop TEXT]... [--threads N]
 *
 * --prompt feeds TEXT as is (with BOS where the model's tokenizer adds one); --chat wraps
 * it as one user message (after an optional system message) in the model's chat
 * template, or FILE's, and adds the generation prompt. M is a native model file or a
 * Hugging Face folder (converted once into the cache, see dse_model_resolve). Generation
 * stops at the tokenizer's EOS, at a --stop string (matched across tokens, never
 * printed) or after N tokens. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "dse.h"
#include "sup.h"

static void run_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor run --model M (--prompt TEXT | --chat TEXT) [options]\n"
                "  Generates up to N tokens after the prompt and streams the text to stdout;\n"
                "  prompt and generation speed go to stderr at the end.\n"
                "  --prompt TEXT          raw prompt (BOS added the way the model's tokenizer does)\n"
                "  --chat TEXT            one user message, rendered with the model's chat template\n"
                "  --system TEXT          with --chat: a system message before it\n"
                "  --chat-template FILE   with --chat: use this Jinja template instead\n"
                "  --stop TEXT            stop before TEXT (repeatable, up to 16); it is not printed\n"
                "  -n, --n-predict N      tokens to generate (default 128)\n"
                "  --temperature T        0 = greedy (default 0.8)\n"
                "  --top-k K              0 = off (default 40)\n"
                "  --top-p P              1 = off (default 0.95)\n"
                "  --min-p P              0 = off (default 0.05)\n"
                "  --seed S               sampling seed (default: from the clock)\n"
                "  -t, --threads N        compute threads (default: online CPUs, at most 8)\n"
                "  M: a native model file or a Hugging Face folder. Honours DSV_CPU.\n");
}

static double now_s(void) {
        return (double)dsv_clock_now_ns() * 1e-9;
}

/* [{"role":"system",...},{"role":"user","content":TEXT}] with JSON escaping. */
static char *chat_messages_json(const char *system, const char *user) {
        cJSON *arr = cJSON_CreateArray();
        const char *roles[2] = {"system", "user"}, *texts[2] = {system, user};
        for (int i = 0; arr && i < 2; i++) {
                if (!texts[i])
                        continue;
                cJSON *m = cJSON_CreateObject();
                if (!m || !cJSON_AddStringToObject(m, "role", roles[i]) || !cJSON_AddStringToObject(m, "content", texts[i])) {
                        cJSON_Delete(m);
                        cJSON_Delete(arr);
                        return NULL;
                }
                cJSON_AddItemToArray(arr, m);
        }
        char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
        cJSON_Delete(arr);
        return s;
}

/* The prompt as token ids: raw text with the tokenizer's special tokens, or the chat
 * template's rendering (which writes BOS itself). */
static int build_prompt(const struct dse_tokenizer *tok, const char *prompt, const char *chat, const char *system,
                        const char *template_path, int32_t **ret_ids) {
        char *text = NULL;
        int add_special = 1, r;
        if (chat) {
                const char *src = dse_tokenizer_chat_template(tok);
                if (!src && !template_path) {
                        fprintf(stderr, "dsvisor run: the model has no chat template; pass one with --chat-template FILE\n");
                        return -ENOENT;
                }
                struct dse_chat_template *t = NULL;
                struct dse_diag diag = {{0}};
                char *messages = chat_messages_json(system, chat);
                int bos = dse_tokenizer_bos(tok), eos = dse_tokenizer_eos(tok);
                r = !messages ? -ENOMEM : template_path ? dse_chat_template_load(template_path, &t, &diag)
                                                        : dse_chat_template_new(src, &t, &diag);
                if (r >= 0)
                        r = dse_chat_template_render(t, messages, NULL, 1, bos >= 0 ? dse_tokenizer_piece(tok, bos) : NULL,
                                                     eos >= 0 ? dse_tokenizer_piece(tok, eos) : NULL, &text, &diag);
                dse_chat_template_free(t);
                free(messages);
                if (r < 0) {
                        fprintf(stderr, "dsvisor run: chat template: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                        return r;
                }
                add_special = 0;
                prompt = text;
        }
        size_t len = strlen(prompt), cap = len + 8;
        int32_t *ids = malloc(cap * sizeof *ids);
        r = ids ? dse_tokenizer_encode(tok, prompt, len, add_special, ids, cap) : -ENOMEM;
        if (r > 0 && (size_t)r > cap) { /* more ids than bytes: a bigger buffer */
                int32_t *bigger = realloc(ids, (size_t)r * sizeof *ids);
                cap = (size_t)r;
                r = bigger ? dse_tokenizer_encode(tok, prompt, len, add_special, ids = bigger, cap) : -ENOMEM;
        }
        free(text);
        if (r <= 0) {
                free(ids);
                fprintf(stderr, "dsvisor run: %s\n", r == 0 ? "the prompt is empty" : r == -EILSEQ ? "the prompt is not valid UTF-8" : strerror(-r));
                return r == 0 ? -EINVAL : r;
        }
        *ret_ids = ids;
        return r;
}

static int parse_long(const char *s, long lo, long hi, long *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || *end || errno || v < lo || v > hi)
                return -EINVAL;
        *ret = v;
        return 0;
}

static int parse_float(const char *s, float lo, float hi, float *ret) {
        char *end;
        errno = 0;
        float v = strtof(s, &end);
        if (end == s || *end || errno || isnan(v) || v < lo || v > hi)
                return -EINVAL;
        *ret = v;
        return 0;
}

struct run_opts {
        const char *model, *prompt, *chat, *system, *template_path;
        const char *stops[16];
        size_t n_stops;
        long n_predict, n_threads;
        struct dse_sampler_params sp;
        int have_seed;
};

static int parse_opts(int argc, char **argv, struct run_opts *o) {
        static const struct option opts[] = {
                {"model", required_argument, NULL, 'm'},        {"prompt", required_argument, NULL, 'p'},
                {"chat", required_argument, NULL, 'c'},         {"system", required_argument, NULL, 'S'},
                {"chat-template", required_argument, NULL, 'T'}, {"n-predict", required_argument, NULL, 'n'},
                {"temperature", required_argument, NULL, 'x'},  {"top-k", required_argument, NULL, 'k'},
                {"top-p", required_argument, NULL, 'P'},        {"min-p", required_argument, NULL, 'M'},
                {"seed", required_argument, NULL, 's'},         {"threads", required_argument, NULL, 't'},
                {"stop", required_argument, NULL, 'X'},
                {"help", no_argument, NULL, 'h'},               {NULL, 0, NULL, 0},
        };
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        *o = (struct run_opts){.n_predict = 128, .n_threads = online < 1 ? 1 : online > 8 ? 8 : online};
        dse_sampler_params_default(&o->sp);
        o->sp.temperature = 0.8f;
        o->sp.top_k = 40;
        o->sp.top_p = 0.95f;
        o->sp.min_p = 0.05f;
        int c;
        long v = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, "m:p:n:t:h", opts, NULL)) != -1) {
                int bad = 0;
                switch (c) {
                case 'm': o->model = optarg; break;
                case 'p': o->prompt = optarg; break;
                case 'c': o->chat = optarg; break;
                case 'S': o->system = optarg; break;
                case 'T': o->template_path = optarg; break;
                case 'X':
                        bad = o->n_stops == 16 || !optarg[0];
                        if (!bad)
                                o->stops[o->n_stops++] = optarg;
                        break;
                case 'n': bad = parse_long(optarg, 0, 1L << 24, &o->n_predict) < 0; break;
                case 't': bad = parse_long(optarg, 1, 1024, &o->n_threads) < 0; break;
                case 'x': bad = parse_float(optarg, 0.0f, 100.0f, &o->sp.temperature) < 0; break;
                case 'k':
                        bad = parse_long(optarg, 0, 1L << 30, &v) < 0;
                        o->sp.top_k = (int)v;
                        break;
                case 'P': bad = parse_float(optarg, 1e-6f, 1.0f, &o->sp.top_p) < 0; break;
                case 'M': bad = parse_float(optarg, 0.0f, 1.0f, &o->sp.min_p) < 0; break;
                case 's': {
                        char *end;
                        errno = 0;
                        o->sp.seed = strtoull(optarg, &end, 10);
                        bad = end == optarg || *end || errno || optarg[0] == '-';
                        o->have_seed = 1;
                        break;
                }
                case 'h': run_usage(stdout); return 1;
                default: run_usage(stderr); return -EINVAL;
                }
                if (bad) {
                        fprintf(stderr, "dsvisor run: bad value '%s' for --%s\n", optarg,
                                c == 'n' ? "n-predict" : c == 't' ? "threads" : c == 'x' ? "temperature" : c == 'k' ? "top-k"
                                : c == 'P' ? "top-p" : c == 'M' ? "min-p" : c == 'X' ? "stop (empty, or more than 16)" : "seed");
                        return -EINVAL;
                }
        }
        if (!o->model || !!o->prompt == !!o->chat || optind != argc) {
                run_usage(stderr);
                return -EINVAL;
        }
        if ((o->template_path || o->system) && !o->chat) {
                fprintf(stderr, "dsvisor run: --chat-template and --system go with --chat\n");
                return -EINVAL;
        }
        if (!o->have_seed)
                o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        return 0;
}

int dsv_cmd_run(int argc, char **argv) {
        struct run_opts o;
        int r = parse_opts(argc, argv, &o);
        if (r != 0)
                return r > 0 ? 0 : 2;

        int ret = 1;
        struct dse_diag diag = {{0}};
        char path[4096];
        struct dse_model *model = NULL;
        struct dse_tokenizer *tok = NULL;
        struct dse_pool *pool = NULL;
        struct dse_session *s = NULL;
        struct dse_sampler *smp = NULL;
        struct dse_detok *detok = NULL;
        int32_t *prompt = NULL;
        float *logits = NULL;
        if ((r = dse_model_resolve(o.model, path, sizeof path, &diag)) < 0 ||
            (r = dse_model_open(path, 0, &model, &diag)) < 0) {
                fprintf(stderr, "dsvisor run: model '%s': %s\n", o.model, diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        if ((r = dse_model_tokenizer(model, &tok, &diag)) < 0) {
                fprintf(stderr, "dsvisor run: model '%s' tokenizer: %s\n", o.model, diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        int n_prompt = build_prompt(tok, o.prompt, o.chat, o.system, o.template_path, &prompt);
        if (n_prompt < 0)
                goto out;
        int vocab = dse_model_vocab_size(model);
        if ((r = dse_pool_new((int)o.n_threads, NULL, 0, &pool)) < 0) {
                fprintf(stderr, "dsvisor run: thread pool: %s\n", strerror(-r));
                goto out;
        }
        if ((long)n_prompt + o.n_predict > (1L << 30) ||
            (r = dse_session_new(model, n_prompt + (int)o.n_predict, pool, &s, &diag)) < 0) {
                fprintf(stderr, "dsvisor run: %s\n", diag.msg[0] ? diag.msg : "prompt plus -n is too long");
                goto out;
        }
        if ((r = dse_sampler_new(&o.sp, vocab, &smp, &diag)) < 0 || (r = dse_detok_new(tok, o.stops, o.n_stops, &detok, &diag)) < 0) {
                fprintf(stderr, "dsvisor run: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        if (!(logits = malloc((size_t)vocab * sizeof *logits))) {
                fprintf(stderr, "dsvisor run: out of memory\n");
                goto out;
        }

        double t0 = now_s();
        if ((r = dse_session_eval(s, prompt, (size_t)n_prompt, NULL, logits, &diag)) < 0) {
                fprintf(stderr, "dsvisor run: prompt: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        double t1 = now_s(), t_gen = 0;
        int n_gen = 0, eos = dse_tokenizer_eos(tok), n_tok_vocab = dse_tokenizer_n_vocab(tok);
        const char *text;
        while (n_gen < o.n_predict) {
                int32_t id = dse_sampler_sample(smp, logits);
                if (id < 0) {
                        fprintf(stderr, "\ndsvisor run: the logits hold no finite value\n");
                        goto out;
                }
                n_gen++;
                if (id == eos)
                        break;
                if (id >= n_tok_vocab) {
                        fprintf(stderr, "\ndsvisor run: sampled id %d is outside the tokenizer's %d ids\n", id, n_tok_vocab);
                        goto out;
                }
                int stopped = 0, len = dse_detok_push(detok, id, &text, &stopped);
                if (len < 0) {
                        fprintf(stderr, "\ndsvisor run: detokenizing id %d: %s\n", id, strerror(-len));
                        goto out;
                }
                if (len > 0) {
                        fwrite(text, 1, (size_t)len, stdout);
                        fflush(stdout);
                }
                if (stopped || n_gen == o.n_predict)
                        break;
                double ts = now_s();
                if ((r = dse_session_eval(s, &id, 1, NULL, logits, &diag)) < 0) {
                        fprintf(stderr, "\ndsvisor run: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                        goto out;
                }
                t_gen += now_s() - ts;
        }
        int len = dse_detok_flush(detok, &text);
        if (len > 0)
                fwrite(text, 1, (size_t)len, stdout);
        printf("\n");
        fflush(stdout);
        /* Generation speed: the decode steps (one eval per token after the first, which
         * came from the prompt's logits). */
        int n_steps = n_gen > 1 ? n_gen - 1 : 0;
        fprintf(stderr, "prompt: %d tokens, %.2f tok/s; generation: %d tokens, %.2f tok/s\n", n_prompt,
                t1 > t0 ? n_prompt / (t1 - t0) : 0.0, n_gen, t_gen > 0 ? n_steps / t_gen : 0.0);
        if (o.sp.temperature > 0 && !o.have_seed)
                fprintf(stderr, "seed: %llu\n", (unsigned long long)o.sp.seed);
        ret = 0;
out:
        free(logits);
        free(prompt);
        dse_detok_free(detok);
        dse_sampler_free(smp);
        dse_session_free(s);
        dse_pool_free(pool);
        dse_tokenizer_free(tok);
        dse_model_free(model);
        return ret;
}
