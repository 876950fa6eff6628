/* dsvisor-bench grammar: the JSON Schema corpus through `dsvisor grammar --check
 * --bench --json`, one run per schema, pooled.
 *
 *     dsvisor-bench grammar --tokenizer FILE [--corpus DIR] [--dsvisor PATH] [--slowest N] [--json]
 *
 * DIR defaults to $DSV_FIXTURES/json-schema/schemas (fixtures/json-schema/README.md: one
 * file per schema with valid and invalid instances), PATH to the dsvisor beside this
 * program. Reports: schemas, compiled, passing (compiled and every instance judged
 * right) and its share of all schemas, instances, validation errors (a valid instance
 * rejected), invalidation errors (an invalid one accepted), compile time p50, and the
 * mask time per token p50/p99/max pooled over every token of every compiled schema.
 * --slowest N also lists the N schemas with the most masks over SLOW_MASK_NS (then by
 * their slowest mask), the ones to profile. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar_bench.h"

struct samples {
        uint64_t *v;
        size_t n, cap;
};

static int add(struct samples *s, uint64_t x) {
        if (s->n == s->cap) {
                size_t cap = s->cap ? 2 * s->cap : 4096;
                uint64_t *p = realloc(s->v, cap * sizeof *p);
                if (!p)
                        return -ENOMEM;
                s->v = p;
                s->cap = cap;
        }
        s->v[s->n++] = x;
        return 0;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static double quantile(struct samples *s, double q) {
        if (s->n == 0)
                return 0;
        size_t i = (size_t)(q * (double)s->n);
        return (double)s->v[i < s->n ? i : s->n - 1];
}

/* A mask slower than this counts against a schema in the --slowest list: the p99
 * target of the mask time. */
#define SLOW_MASK_NS 500000

struct schema_time {
        char *name;
        long slow;       /* masks over SLOW_MASK_NS */
        uint64_t max_ns; /* the slowest mask */
};

struct totals {
        long schemas, compiled, passing, instances, judged, validation_errors, invalidation_errors, failures;
        struct samples compile_ns, mask_ns;
        struct schema_time *times;
        size_t n_times;
};

static int write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        if (!f)
                return -errno;
        int ok = fputs(text, f) >= 0;
        return fclose(f) == 0 && ok ? 0 : -EIO;
}

/* One corpus file: its schema and instances through dsvisor grammar. */
static int run_one(const char *dsvisor, const char *tokenizer, const char *path, const char *name, struct totals *t) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *text = malloc((size_t)size + 1);
        size_t got = text ? fread(text, 1, (size_t)size, f) : 0;
        fclose(f);
        if (!text)
                return -ENOMEM;
        text[got] = 0;
        cJSON *doc = cJSON_Parse(text);
        free(text);
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(doc, "schema");
        const cJSON *tests = cJSON_GetObjectItemCaseSensitive(doc, "tests"), *one;
        if (!schema || !cJSON_IsArray(tests)) {
                cJSON_Delete(doc);
                fprintf(stderr, "dsvisor-bench grammar: %s: no schema or tests\n", path);
                return -EINVAL;
        }
        char schema_path[] = "/tmp/dsv-grammar-bench-XXXXXX", lines_path[] = "/tmp/dsv-grammar-bench-XXXXXX";
        int fd1 = mkstemp(schema_path), fd2 = mkstemp(lines_path);
        if (fd1 >= 0)
                close(fd1);
        if (fd2 >= 0)
                close(fd2);
        char *schema_text = cJSON_PrintUnformatted(schema);
        size_t cap = 1, len = 0;
        char *lines = calloc(1, 1);
        cJSON_ArrayForEach(one, tests) {
                char *d = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(one, "data"));
                size_t n = d ? strlen(d) : 0;
                char *p = lines ? realloc(lines, cap + n + 1) : NULL;
                if (!d || !p) {
                        free(d);
                        free(p ? p : lines);
                        lines = NULL;
                        break;
                }
                lines = p;
                memcpy(lines + len, d, n);
                lines[len + n] = '\n';
                len += n + 1;
                lines[len] = 0;
                cap += n + 1;
                free(d);
        }
        int r = fd1 < 0 || fd2 < 0 || !schema_text || !lines ? -ENOMEM : 0;
        if (r == 0)
                r = write_text(schema_path, schema_text);
        if (r == 0)
                r = write_text(lines_path, lines);
        free(schema_text);
        free(lines);
        char cmd[4 * PATH_MAX + 128];
        snprintf(cmd, sizeof cmd, "'%s' grammar --schema '%s' --tokenizer '%s' --check --bench --json < '%s'", dsvisor,
                 schema_path, tokenizer, lines_path);
        FILE *p = r == 0 ? popen(cmd, "r") : NULL;
        char *line = NULL;
        size_t line_cap = 0;
        const cJSON *test = tests->child;
        long right = 0, n_tests = cJSON_GetArraySize(tests), answered = 0;
        int refused = 0;
        struct schema_time time = {.name = NULL};
        t->schemas++;
        t->instances += n_tests;
        while (p && getline(&line, &line_cap, p) > 0) {
                cJSON *o = cJSON_Parse(line);
                const cJSON *accept = cJSON_GetObjectItemCaseSensitive(o, "accept");
                const cJSON *bench = cJSON_GetObjectItemCaseSensitive(o, "bench");
                if (cJSON_GetObjectItemCaseSensitive(o, "error"))
                        refused = 1;
                else if (accept && test) {
                        int valid = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(test, "valid"));
                        if (cJSON_IsTrue(accept) == valid)
                                right++;
                        else if (valid)
                                t->validation_errors++;
                        else
                                t->invalidation_errors++;
                        answered++;
                        test = test->next;
                } else if (bench) {
                        const cJSON *ns;
                        add(&t->compile_ns,
                            (uint64_t)(cJSON_GetObjectItemCaseSensitive(bench, "compile_us")->valuedouble * 1000.0));
                        cJSON_ArrayForEach(ns, cJSON_GetObjectItemCaseSensitive(bench, "mask_ns")) {
                                uint64_t x = (uint64_t)ns->valuedouble;
                                add(&t->mask_ns, x);
                                time.slow += x > SLOW_MASK_NS;
                                time.max_ns = x > time.max_ns ? x : time.max_ns;
                        }
                }
                cJSON_Delete(o);
        }
        int status = p ? pclose(p) : -1;
        free(line);
        unlink(schema_path);
        unlink(lines_path);
        cJSON_Delete(doc);
        if (!refused && (status != 0 || answered != n_tests)) {
                fprintf(stderr, "dsvisor-bench grammar: %s: dsvisor grammar failed (status %d)\n", path, status);
                t->failures++;
                return 0;
        }
        struct schema_time *times = refused ? NULL : realloc(t->times, (t->n_times + 1) * sizeof *times);
        if (times) {
                t->times = times;
                time.name = strdup(name);
                if (time.name)
                        times[t->n_times++] = time;
        }
        if (!refused) {
                t->compiled++;
                t->judged += answered;
                t->passing += right == n_tests;
        }
        return r;
}

static int cmp_name(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_slow(const void *a, const void *b) {
        const struct schema_time *x = a, *y = b;
        if (x->slow != y->slow)
                return x->slow > y->slow ? -1 : 1;
        return x->max_ns > y->max_ns ? -1 : x->max_ns < y->max_ns;
}

static void usage(void) {
        fprintf(stderr, "usage: dsvisor-bench grammar --tokenizer FILE [--corpus DIR] [--dsvisor PATH] [--slowest N] "
                        "[--json]\n");
        exit(2);
}

int dsv_bench_grammar(int argc, char **argv) {
        const char *tokenizer = NULL, *corpus = NULL, *dsvisor = NULL;
        int json = 0;
        long slowest = 0;
        for (int i = 2; i < argc; i++) {
                if (!strcmp(argv[i], "--json")) {
                        json = 1;
                        continue;
                }
                if (i + 1 >= argc)
                        usage();
                if (!strcmp(argv[i], "--tokenizer"))
                        tokenizer = argv[++i];
                else if (!strcmp(argv[i], "--corpus"))
                        corpus = argv[++i];
                else if (!strcmp(argv[i], "--dsvisor"))
                        dsvisor = argv[++i];
                else if (!strcmp(argv[i], "--slowest"))
                        slowest = strtol(argv[++i], NULL, 10);
                else
                        usage();
        }
        if (!tokenizer)
                usage();
        char corpus_buf[PATH_MAX], dsvisor_buf[PATH_MAX];
        if (!corpus) {
                const char *fix = getenv("DSV_FIXTURES");
                snprintf(corpus_buf, sizeof corpus_buf, "%s/json-schema/schemas", fix ? fix : "../shared/fixtures");
                corpus = corpus_buf;
        }
        if (!dsvisor) {
                /* the dsvisor beside this program */
                ssize_t n = readlink("/proc/self/exe", dsvisor_buf, sizeof dsvisor_buf - 16);
                char *slash = n > 0 ? (dsvisor_buf[n] = 0, strrchr(dsvisor_buf, '/')) : NULL;
                if (!slash)
                        usage();
                strcpy(slash + 1, "dsvisor");
                dsvisor = dsvisor_buf;
        }
        DIR *d = opendir(corpus);
        if (!d) {
                fprintf(stderr, "dsvisor-bench grammar: cannot open %s: %s\n", corpus, strerror(errno));
                return 1;
        }
        char **names = NULL;
        size_t n_names = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                size_t l = strlen(de->d_name);
                if (l < 6 || strcmp(de->d_name + l - 5, ".json"))
                        continue;
                char **p = realloc(names, (n_names + 1) * sizeof *names);
                if (!p)
                        break;
                names = p;
                names[n_names++] = strdup(de->d_name);
        }
        closedir(d);
        qsort(names, n_names, sizeof *names, cmp_name);
        struct totals t = {0};
        int status = 0;
        for (size_t i = 0; i < n_names; i++) {
                char path[2 * PATH_MAX + 2];
                snprintf(path, sizeof path, "%s/%s", corpus, names[i]);
                if (names[i] && run_one(dsvisor, tokenizer, path, names[i], &t) < 0)
                        status = 1;
                free(names[i]);
        }
        free(names);
        qsort(t.compile_ns.v, t.compile_ns.n, sizeof *t.compile_ns.v, cmp_u64);
        qsort(t.mask_ns.v, t.mask_ns.n, sizeof *t.mask_ns.v, cmp_u64);
        double pass_pct = t.schemas ? 100.0 * (double)t.passing / (double)t.schemas : 0;
        double c50 = quantile(&t.compile_ns, 0.5) / 1e6, m50 = quantile(&t.mask_ns, 0.5) / 1e3;
        double m99 = quantile(&t.mask_ns, 0.99) / 1e3, mmax = t.mask_ns.n ? (double)t.mask_ns.v[t.mask_ns.n - 1] / 1e3 : 0;
        qsort(t.times, t.n_times, sizeof *t.times, cmp_slow);
        size_t n_slowest = slowest > 0 ? (size_t)slowest < t.n_times ? (size_t)slowest : t.n_times : 0;
        if (json) {
                printf("{\"schemas\":%ld,\"compiled\":%ld,\"passing\":%ld,\"passing_pct\":%.1f,\"instances\":%ld,"
                       "\"judged\":%ld,\"validation_errors\":%ld,\"invalidation_errors\":%ld,\"failures\":%ld,"
                       "\"compile_ms_p50\":%.3f,\"masks\":%zu,\"mask_us_p50\":%.2f,\"mask_us_p99\":%.2f,"
                       "\"mask_us_max\":%.2f",
                       t.schemas, t.compiled, t.passing, pass_pct, t.instances, t.judged, t.validation_errors,
                       t.invalidation_errors, t.failures, c50, t.mask_ns.n, m50, m99, mmax);
                if (slowest > 0) {
                        printf(",\"slowest\":[");
                        for (size_t i = 0; i < n_slowest; i++)
                                printf("%s{\"schema\":\"%s\",\"masks_over_500us\":%ld,\"mask_us_max\":%.2f}", i ? "," : "",
                                       t.times[i].name, t.times[i].slow, (double)t.times[i].max_ns / 1e3);
                        printf("]");
                }
                printf("}\n");
        } else {
                printf("schemas %ld, compiled %ld, passing %ld (%.1f %%); instances %ld, judged %ld: validation errors "
                       "%ld, invalidation errors %ld; failures %ld\ncompile p50 %.3f ms; %zu masks: p50 %.2f us, p99 "
                       "%.2f us, max %.2f us\n",
                       t.schemas, t.compiled, t.passing, pass_pct, t.instances, t.judged, t.validation_errors,
                       t.invalidation_errors, t.failures, c50, t.mask_ns.n, m50, m99, mmax);
                for (size_t i = 0; i < n_slowest; i++)
                        printf("slowest %s: %ld masks over 500 us, max %.2f us\n", t.times[i].name, t.times[i].slow,
                               (double)t.times[i].max_ns / 1e3);
        }
        for (size_t i = 0; i < t.n_times; i++)
                free(t.times[i].name);
        free(t.times);
        free(t.compile_ns.v);
        free(t.mask_ns.v);
        return status || t.failures ? 1 : 0;
}
