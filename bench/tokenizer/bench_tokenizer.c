/* bench_tokenizer: libdse's tokenizer.json encoder on the text of bench/tokenizer/run.sh,
 * one thread. Checks the ids against Hugging Face's (written by hf_bench.js) before
 * timing anything, then reports the load time and the encode throughput.
 *
 *   bench_tokenizer TOKENIZER.json TEXT HF_IDS.bin [ROUNDS]
 *   bench_tokenizer --load-once TOKENIZER.json
 *
 * --load-once does nothing but one dse_tokenizer_load_file in this fresh process and prints
 * "load_ms L load_cpu_ms C": the first load is the one a user waits for (cold page faults,
 * cold caches), so run.sh starts it as N separate processes and reports median and worst.
 *
 * TEXT holds documents separated by NUL bytes; each is encoded with one call (no special
 * tokens), as hf_bench.js does. Prints "dse load_ms L best_s S load_cpu_ms C" (wall
 * times, best of 3 loads and of ROUNDS encodes; C is the load's CPU time) and a summary. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dse.h"
#include "bench_clock.h"

static char *slurp(const char *path, size_t *ret_len) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        char *buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
        }
        fclose(f);
        if (buf) {
                buf[n] = '\0';
                *ret_len = (size_t)n;
        }
        return buf;
}

/* Encodes every document; returns the total id count or -errno. */
static long encode_all(const struct dse_tokenizer *tok, const char *text, size_t len, int32_t *ids, size_t cap) {
        size_t n = 0;
        for (size_t a = 0; a <= len;) {
                const char *z = memchr(text + a, '\0', len - a);
                size_t b = z ? (size_t)(z - text) : len;
                int r = dse_tokenizer_encode(tok, text + a, b - a, 0, ids + n, cap - n);
                if (r < 0)
                        return r;
                if ((size_t)r > cap - n)
                        return -ENOBUFS;
                n += (size_t)r;
                a = b + 1;
        }
        return (long)n;
}

static int load_once(const char *path) {
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        double t0 = bench_now_s(), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        int r = dse_tokenizer_load_file(path, &tok, &diag);
        double dt = bench_now_s() - t0, dc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (r < 0) {
                fprintf(stderr, "bench_tokenizer: %s\n", diag.msg);
                return 1;
        }
        printf("load_ms %.2f load_cpu_ms %.2f\n", dt * 1e3, dc * 1e3);
        dse_tokenizer_free(tok);
        return 0;
}

int main(int argc, char **argv) {
        if (argc == 3 && strcmp(argv[1], "--load-once") == 0)
                return load_once(argv[2]);
        if (argc < 4) {
                fprintf(stderr, "usage: bench_tokenizer TOKENIZER.json TEXT HF_IDS.bin [ROUNDS]\n"
                                "       bench_tokenizer --load-once TOKENIZER.json\n");
                return 2;
        }
        int rounds = argc > 4 ? atoi(argv[4]) : 5;
        size_t text_len = 0, hf_bytes = 0;
        char *text = slurp(argv[2], &text_len);
        int32_t *hf = (int32_t *)slurp(argv[3], &hf_bytes);
        if (!text || !hf) {
                fprintf(stderr, "bench_tokenizer: cannot read '%s' or '%s'\n", argv[2], argv[3]);
                return 1;
        }
        size_t n_hf = hf_bytes / sizeof(int32_t);

        struct dse_tokenizer *tok = NULL;
        double load_best = 1e9, load_cpu_best = 1e9;
        for (int i = 0; i < 3; i++) {
                struct dse_diag diag = {{0}};
                dse_tokenizer_free(tok);
                tok = NULL;
                double t0 = bench_now_s(), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
                int r = dse_tokenizer_load_file(argv[1], &tok, &diag);
                double dt = bench_now_s() - t0, dc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
                load_cpu_best = dc < load_cpu_best ? dc : load_cpu_best;
                if (r < 0) {
                        fprintf(stderr, "bench_tokenizer: %s\n", diag.msg);
                        return 1;
                }
                load_best = dt < load_best ? dt : load_best;
        }

        size_t cap = text_len + 16;
        int32_t *ids = malloc(cap * sizeof *ids);
        long n = encode_all(tok, text, text_len, ids, cap);
        if (n < 0) {
                fprintf(stderr, "bench_tokenizer: encode failed: %s\n", strerror((int)-n));
                return 1;
        }
        /* the check before the timing: exactly Hugging Face's ids */
        for (size_t i = 0; i < (size_t)n || i < n_hf; i++)
                if (i >= (size_t)n || i >= n_hf || ids[i] != hf[i]) {
                        fprintf(stderr, "bench_tokenizer: ids differ from Hugging Face's at %zu (%ld vs %zu ids)\n", i,
                                n, n_hf);
                        return 1;
                }
        double best = 1e9;
        for (int r = 0; r < rounds; r++) {
                double t0 = bench_now_s();
                encode_all(tok, text, text_len, ids, cap);
                double dt = bench_now_s() - t0;
                best = dt < best ? dt : best;
        }
        printf("dse load_ms %.1f best_s %.6f load_cpu_ms %.1f\n", load_best * 1e3, best, load_cpu_best * 1e3);
        fprintf(stderr, "dse: %ld ids identical to Hugging Face's; load %.1f ms; encode %.2f MB/s (best of %d)\n", n,
                load_best * 1e3, (double)text_len / best / 1e6, rounds);
        dse_tokenizer_free(tok);
        free(ids);
        free(text);
        free(hf);
        return 0;
}
