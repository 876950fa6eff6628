/* dsvisor grammar: compile a JSON Schema, a regex, GBNF text or a composed grammar into a
 * grammar and check outputs against its token masks, the way a constrained sampler would
 * see them.
 *
 *   dsvisor grammar (--schema FILE | --regex RE | --gbnf FILE | --composed FILE)
 *                   (--tokenizer FILE | --model M) [--check] [--json]
 *
 * Without --check it compiles the grammar and says so. With --check it reads one output
 * per stdin line: for a schema a JSON value, serialised compactly
 * (cJSON_PrintUnformatted: the canonical form the grammar describes); for a regex, GBNF
 * or a composed grammar a JSON string whose content is the output text (so a line can
 * hold any text; a composed grammar's special tokens are their text there, which the
 * tokenizer turns into their ids).
 * It tokenizes that with the tokenizer and walks the tokens through the masks: each
 * token must be allowed by the mask computed after the tokens before it, and EOS must
 * be allowed at the end. It prints {"accept": true|false} per line ("tokens" and
 * "rejected_at" too with --json). A grammar that does not compile prints
 * {"error": "..."} and exits 2. --bench walks the same lines and prints the compile
 * time and the time of each mask (dse_grammar_matcher_fill_mask) as percentiles over
 * all the tokens, both as the thread's CPU time; with --json one object, with every mask's nanoseconds too
 * ("mask_ns", for dsvisor-bench grammar to pool over many grammars). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "dse.h"

static void grammar_usage(FILE *out) {
        fprintf(out,
                "usage: dsvisor grammar (--schema FILE | --regex RE | --gbnf FILE | --composed FILE)\n"
                "                       (--tokenizer FILE | --model M) [--check] [--bench] [--json]\n"
                "  --schema FILE  a JSON Schema (draft 4 to 2020-12): the output is compact JSON\n"
                "  --regex RE     an ECMA-262 regex the whole output text must match\n"
                "  --gbnf FILE    a GBNF grammar (llama.cpp's format) whose rule root the output matches\n"
                "  --composed FILE  a composed grammar's JSON description (text, special tokens, JSON Schema\n"
                "                 parts, sequences, alternatives, repetition; engine/src/grammar/README.md)\n"
                "  --check        judge one output per stdin line: {\"accept\": true|false}; a JSON value\n"
                "                 for --schema, a JSON string holding the text for the others\n"
                "  --bench        walk the same lines and print the compile time and the mask time per\n"
                "                 token (p50/p90/p99/max, thread CPU time); with --check, after the answers\n"
                "  --json         machine-readable output (with --check: tokens, rejected_at)\n");
}

static void print_error(const char *msg) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", msg);
        char *text = cJSON_PrintUnformatted(o);
        if (text)
                puts(text);
        free(text);
        cJSON_Delete(o);
}

static int read_file(const char *path, char **ret_text, size_t *ret_len) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        char *text = NULL;
        size_t len = 0, cap = 0, n;
        int r = 0;
        do {
                if (cap - len < 65536) {
                        char *p = realloc(text, cap + 65536);
                        if (!p) {
                                r = -ENOMEM;
                                break;
                        }
                        text = p;
                        cap += 65536;
                }
                n = fread(text + len, 1, cap - len, f);
                len += n;
        } while (n > 0);
        if (r == 0 && ferror(f))
                r = -EIO;
        fclose(f);
        if (r < 0) {
                free(text);
                return r;
        }
        *ret_text = text;
        *ret_len = len;
        return 0;
}

/* The duration of every mask computed, for --bench. */
struct mask_times {
        uint64_t *ns;
        size_t n, cap;
};

/* The calling thread's CPU time: on a shared host wall time would mostly measure the
 * other processes. */
static uint64_t now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int add_time(struct mask_times *t, uint64_t ns) {
        if (t->n == t->cap) {
                size_t cap = t->cap ? 2 * t->cap : 1024;
                uint64_t *p = realloc(t->ns, cap * sizeof *p);
                if (!p)
                        return -ENOMEM;
                t->ns = p;
                t->cap = cap;
        }
        t->ns[t->n++] = ns;
        return 0;
}

/* Walks ids through the masks; returns the index of the first token the mask refuses,
 * n_ids when EOS is refused at the end, or -1 when the whole sequence is accepted.
 * With times, each mask's duration is added to it. */
static long walk_tokens(const struct dse_grammar *g, const struct dse_grammar_vocab *v, int32_t eos,
                        const int32_t *ids, size_t n_ids, uint64_t *mask, struct mask_times *times, int *ret_err) {
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        int r = dse_grammar_matcher_new(g, &m, &diag);
        long rejected = -1;
        for (size_t i = 0; r == 0 && i <= n_ids; i++) {
                uint64_t t0 = times ? now_ns() : 0;
                r = dse_grammar_matcher_fill_mask(m, v, mask);
                if (r < 0)
                        break;
                r = times ? add_time(times, now_ns() - t0) : 0;
                if (r < 0)
                        break;
                if (i == n_ids) {
                        int ok = eos >= 0 ? (int)((mask[eos / 64] >> (eos % 64)) & 1)
                                          : dse_grammar_matcher_is_accepting(m);
                        if (!ok)
                                rejected = (long)n_ids;
                        break;
                }
                if (!((mask[ids[i] / 64] >> (ids[i] % 64)) & 1)) {
                        rejected = (long)i;
                        break;
                }
                r = dse_grammar_matcher_accept_token(m, v, ids[i]);
        }
        dse_grammar_matcher_free(m);
        *ret_err = r;
        return rejected;
}

static int encode_all(const struct dse_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *cap) {
        int count = dse_tokenizer_encode(tok, text, len, 0, *ids, *cap);
        if (count > (int)*cap) {
                int32_t *p = realloc(*ids, (size_t)count * sizeof *p);
                if (!p)
                        return -ENOMEM;
                *ids = p;
                *cap = (size_t)count;
                count = dse_tokenizer_encode(tok, text, len, 0, *ids, *cap);
        }
        return count;
}

/* 1 when the tokens' mid-text bytes are exactly text */
static int spells(const struct dse_grammar_vocab *v, const int32_t *ids, size_t n, const char *text, size_t len) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
                size_t k;
                const uint8_t *b = dse_grammar_vocab_token_bytes(v, ids[i], &k);
                if (!b || k > len - at || memcmp(b, text + at, k))
                        return 0;
                at += k;
        }
        return at == len;
}

/* Tokenizes text as the model would write it after earlier output: sets *ret_first and
 * returns the count of the ids from there. A tokenizer that puts a space before the
 * start of a text (SentencePiece's dummy prefix) is given the text after a newline,
 * and the ids that spell the text after it are used. -EILSEQ when none do. */
static int tokenize_output(const struct dse_tokenizer *tok, const struct dse_grammar_vocab *v, const char *text,
                           int32_t **ids, size_t *cap, size_t *ret_first) {
        size_t len = strlen(text);
        int count = encode_all(tok, text, len, ids, cap);
        if (count < 0 || spells(v, *ids, (size_t)count, text, len)) {
                *ret_first = 0;
                return count;
        }
        char *after_newline = malloc(len + 2);
        if (!after_newline)
                return -ENOMEM;
        after_newline[0] = '\n';
        memcpy(after_newline + 1, text, len + 1);
        count = encode_all(tok, after_newline, len + 1, ids, cap);
        free(after_newline);
        if (count < 0)
                return count;
        for (size_t k = 1; k <= (size_t)count; k++)
                if (spells(v, *ids + k, (size_t)count - k, text, len)) {
                        *ret_first = k;
                        return count - (int)k;
                }
        return -EILSEQ;
}

/* The output a --check line stands for: the compact serialization of a JSON value, or
 * with text_lines the content of a JSON string. NULL when the line is neither. */
static char *line_output(const char *line, size_t n, int text_lines) {
        cJSON *value = cJSON_ParseWithLength(line, n);
        char *text = NULL;
        if (value && !text_lines)
                text = cJSON_PrintUnformatted(value);
        else if (cJSON_IsString(value))
                text = strdup(value->valuestring);
        cJSON_Delete(value);
        return text;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* The q-quantile of the n sorted values (nearest rank). */
static double quantile_us(const uint64_t *sorted, size_t n, double q) {
        if (n == 0)
                return 0;
        size_t i = (size_t)(q * (double)n);
        return (double)sorted[i < n ? i : n - 1] / 1000.0;
}

static void print_bench(double compile_us, size_t instances, struct mask_times *t, int json) {
        qsort(t->ns, t->n, sizeof *t->ns, cmp_u64);
        double p50 = quantile_us(t->ns, t->n, 0.5), p90 = quantile_us(t->ns, t->n, 0.9);
        double p99 = quantile_us(t->ns, t->n, 0.99), max = t->n ? (double)t->ns[t->n - 1] / 1000.0 : 0;
        if (!json) {
                printf("compile %.1f us; %zu instances, %zu masks: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n",
                       compile_us, instances, t->n, p50, p90, p99, max);
                return;
        }
        printf("{\"bench\":{\"compile_us\":%.1f,\"instances\":%zu,\"masks\":%zu,\"mask_us\":{\"p50\":%.2f,"
               "\"p90\":%.2f,\"p99\":%.2f,\"max\":%.2f},\"mask_ns\":[",
               compile_us, instances, t->n, p50, p90, p99, max);
        for (size_t i = 0; i < t->n; i++)
                printf(i ? ",%llu" : "%llu", (unsigned long long)t->ns[i]);
        printf("]}}\n");
}

/* --check (print_accepts) and --bench (times not NULL) over the stdin lines. */
static int check_lines(const struct dse_grammar *g, const struct dse_tokenizer *tok, const struct dse_grammar_vocab *v,
                       int text_lines, int print_accepts, struct mask_times *times, size_t *ret_lines, int json) {
        uint64_t *mask = calloc(dse_grammar_vocab_mask_words(v), sizeof *mask);
        char *line = NULL;
        size_t line_cap = 0, ids_cap = 0;
        int32_t *ids = NULL;
        ssize_t n;
        long line_no = 0;
        int status = mask ? 0 : 1;
        while (status == 0 && (n = getline(&line, &line_cap, stdin)) >= 0) {
                line_no++;
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = '\0';
                if (n == 0)
                        continue;
                char *text = line_output(line, (size_t)n, text_lines);
                if (!text) {
                        char msg[64];
                        snprintf(msg, sizeof msg, "line %ld: not a JSON %s", line_no, text_lines ? "string" : "value");
                        print_error(msg);
                        status = 1;
                        break;
                }
                size_t first;
                int count = tokenize_output(tok, v, text, &ids, &ids_cap, &first);
                free(text);
                if (count < 0) {
                        fprintf(stderr, "dsvisor grammar: line %ld: cannot tokenize: %s\n", line_no,
                                count == -EILSEQ ? "the tokenizer does not reproduce the text" : strerror(-count));
                        status = 1;
                        break;
                }
                int err;
                long rejected = walk_tokens(g, v, dse_tokenizer_eos(tok), ids + first, (size_t)count, mask, times, &err);
                if (err < 0) {
                        fprintf(stderr, "dsvisor grammar: line %ld: matcher failed: %s\n", line_no, strerror(-err));
                        status = 1;
                        break;
                }
                (*ret_lines)++;
                if (!print_accepts)
                        continue;
                if (json && rejected >= 0)
                        printf("{\"accept\":false,\"tokens\":%d,\"rejected_at\":%ld}\n", count, rejected);
                else if (json)
                        printf("{\"accept\":true,\"tokens\":%d}\n", count);
                else
                        printf("{\"accept\": %s}\n", rejected >= 0 ? "false" : "true");
        }
        free(line);
        free(ids);
        free(mask);
        return status;
}

int dsv_cmd_grammar(int argc, char **argv) {
        static const struct option opts[] = {
                {"schema", required_argument, NULL, 's'}, {"model", required_argument, NULL, 'm'},
                {"regex", required_argument, NULL, 'r'},  {"gbnf", required_argument, NULL, 'g'},
                {"tokenizer", required_argument, NULL, 't'}, {"check", no_argument, NULL, 'c'},
                {"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
                {"bench", no_argument, NULL, 'b'},        {"composed", required_argument, NULL, 'C'},
                {NULL, 0, NULL, 0},
        };
        const char *schema_path = NULL, *regex = NULL, *gbnf_path = NULL, *composed_path = NULL, *model_arg = NULL,
                   *tok_path = NULL;
        int check = 0, bench = 0, json = 0, c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case 's': schema_path = optarg; break;
                case 'r': regex = optarg; break;
                case 'g': gbnf_path = optarg; break;
                case 'C': composed_path = optarg; break;
                case 'm': model_arg = optarg; break;
                case 't': tok_path = optarg; break;
                case 'c': check = 1; break;
                case 'b': bench = 1; break;
                case 'j': json = 1; break;
                case 'h': grammar_usage(stdout); return 0;
                default: grammar_usage(stderr); return 2;
                }
        }
        if (optind != argc || !!schema_path + !!regex + !!gbnf_path + !!composed_path != 1 || !model_arg == !tok_path) {
                fprintf(stderr, "dsvisor grammar: give one of --schema, --regex, --gbnf and --composed, and exactly one of "
                                "--model and --tokenizer\n");
                grammar_usage(stderr);
                return 2;
        }
        const char *what = schema_path ? schema_path : gbnf_path ? gbnf_path : composed_path ? composed_path : regex;
        char *text = NULL;
        size_t text_len = 0;
        int r = 0;
        if (!regex && (r = read_file(what, &text, &text_len)) < 0) {
                fprintf(stderr, "dsvisor grammar: cannot read '%s': %s\n", what, strerror(-r));
                return 1;
        }
        struct dse_diag diag = {{0}};
        struct dse_grammar *g = NULL;
        struct dse_tokenizer *tok = NULL;
        /* a composed grammar's special tokens are the tokenizer's */
        if (composed_path && dsv_tokenizer_load_arg(model_arg, tok_path, &tok) < 0) {
                free(text);
                return 1;
        }
        uint64_t t0 = now_ns();
        if (composed_path)
                r = dse_grammar_compile_composed(text, text_len, tok, &g, &diag);
        else if (schema_path)
                r = dse_grammar_compile_json_schema(text, text_len, &g, &diag);
        else if (gbnf_path)
                r = dse_grammar_compile_gbnf(text, text_len, &g, &diag);
        else
                r = dse_grammar_compile_regex(regex, strlen(regex), &g, &diag);
        double compile_us = (double)(now_ns() - t0) / 1000.0;
        free(text);
        if (r < 0) {
                print_error(diag.msg[0] ? diag.msg : strerror(-r));
                dse_tokenizer_free(tok);
                return 2;
        }
        struct dse_grammar_vocab *v = NULL;
        int status = 1;
        if (!tok && dsv_tokenizer_load_arg(model_arg, tok_path, &tok) < 0)
                goto out;
        r = dse_grammar_vocab_new(tok, &v, &diag);
        if (r < 0) {
                fprintf(stderr, "dsvisor grammar: cannot build the token trie: %s\n", diag.msg[0] ? diag.msg : strerror(-r));
                goto out;
        }
        if (isatty(STDOUT_FILENO))
                setvbuf(stdout, NULL, _IOLBF, 0);
        if (check || bench) {
                struct mask_times times = {0};
                size_t lines = 0;
                status = check_lines(g, tok, v, !schema_path, check, bench ? &times : NULL, &lines, json);
                if (status == 0 && bench)
                        print_bench(compile_us, lines, &times, json);
                free(times.ns);
        } else {
                printf(json ? "{\"compiled\":true}\n" : "dsvisor grammar: '%s' compiles\n", what);
                status = 0;
        }
        if (fflush(stdout) != 0)
                status = 1;
out:
        dse_grammar_vocab_free(v);
        dse_tokenizer_free(tok);
        dse_grammar_free(g);
        return status;
}
