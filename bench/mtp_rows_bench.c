/* The cost of keeping an MTP module's KV rows through plain decoding: 2 sequences of a
 * model with an MTP module take STEPS one-token steps (no drafts) after a 16-token
 * prompt, with MTP drafting enabled on the batch (its rows written in batched catch-up
 * passes, mtp_draft.c) or not. One process per mode, so callgrind counts each alone:
 *
 *     DSV_CPU=avx2 valgrind --tool=callgrind mtp_rows_bench models/default on 128
 *     DSV_CPU=avx2 valgrind --tool=callgrind --toggle-collect=dse__mtp_catch_up_step \
 *         mtp_rows_bench models/default on 128        # the catch-up passes alone
 *
 * or "ab": ROUNDS rounds alternating off and on in one process, each round's CPU time
 * (which other jobs on a shared host inflate less than wall time), and the median
 * same-run ratio on / off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_sort.h"
#include "bench_clock.h"
#include "dse.h"

enum { PROMPT = 16, MAX_ROUNDS = 101 };

/* One round: the two sequences' prompt, then steps plain steps; its CPU seconds. */
static double run_round(struct dse_batch *b, struct dse_kv_cache *kv, const int32_t *ids0, const int32_t *ids1,
                        int steps, struct dse_diag *diag) {
        double t0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        int s0 = dse_kv_seq_open(kv), s1 = dse_kv_seq_open(kv);
        if (s0 < 0 || s1 < 0) {
                snprintf(diag->msg, sizeof diag->msg, "no free KV sequence slot");
                return -1;
        }
        struct dse_batch_seq pre[2] = {{s0, ids0, PROMPT, NULL}, {s1, ids1, PROMPT, NULL}};
        int r = dse_batch_step(b, pre, 2, diag);
        for (int k = 0; k < steps && r >= 0; k++) {
                struct dse_batch_seq st[2] = {{s0, ids0 + PROMPT + k, 1, NULL}, {s1, ids1 + PROMPT + k, 1, NULL}};
                r = dse_batch_verify(b, st, NULL, 2, diag);
        }
        dse_kv_seq_close(kv, s0);
        dse_kv_seq_close(kv, s1);
        return r < 0 ? -1 : bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0;
}

int main(int argc, char **argv) {
        if (argc < 3 || (strcmp(argv[2], "off") && strcmp(argv[2], "on") && strcmp(argv[2], "ab"))) {
                fprintf(stderr, "usage: mtp_rows_bench MODEL off|on|ab [STEPS (128)] [ROUNDS for ab (9)]\n");
                return 2;
        }
        int steps = argc > 3 ? atoi(argv[3]) : 128, rounds = argc > 4 ? atoi(argv[4]) : 9;
        if (steps < 1 || steps > 200 || rounds < 1 || rounds > MAX_ROUNDS) {
                fprintf(stderr, "STEPS must be 1..200 and ROUNDS 1..%d\n", MAX_ROUNDS);
                return 2;
        }
        char path[4096];
        struct dse_diag diag = {{0}};
        struct dse_model *m;
        if (dse_model_resolve(argv[1], path, sizeof path, &diag) < 0 || dse_model_open(path, 0, &m, &diag) < 0) {
                fprintf(stderr, "%s: %s\n", argv[1], diag.msg);
                return 1;
        }
        int32_t V = dse_model_vocab_size(m), ids0[PROMPT + 200], ids1[PROMPT + 200];
        uint64_t rng = 0x5eed;
        for (int i = 0; i < PROMPT + 200; i++) {
                ids0[i] = (int32_t)(bench_xorshift64(&rng) % (uint64_t)V);
                ids1[i] = (int32_t)(bench_xorshift64(&rng) % (uint64_t)V);
        }
        /* two batches over two caches: off never enables MTP, on always has it */
        struct dse_kv_cache *kv[2] = {NULL, NULL};
        struct dse_batch *b[2] = {NULL, NULL};
        int mode = !strcmp(argv[2], "off") ? 0 : !strcmp(argv[2], "on") ? 1 : 2, rc = 1;
        for (int i = 0; i < 2; i++) {
                if (mode != 2 && mode != i)
                        continue;
                if (dse_kv_cache_new(m, 32u << 20, 16, 4, 256, &kv[i], &diag) < 0 ||
                    dse_batch_new(m, kv[i], NULL, &b[i], &diag) < 0 || (i == 1 && dse_batch_enable_mtp(b[i], &diag) < 0)) {
                        fprintf(stderr, "%s: %s\n", argv[1], diag.msg);
                        goto out;
                }
        }
        if (mode != 2) {
                double t = run_round(b[mode], kv[mode], ids0, ids1, steps, &diag);
                if (t < 0) {
                        fprintf(stderr, "step: %s\n", diag.msg);
                        goto out;
                }
                printf("mtp %s: 2 sequences x %d plain steps, %.3f ms CPU per step\n", argv[2], steps,
                       1e3 * t / steps);
                rc = 0;
                goto out;
        }
        double ratio[MAX_ROUNDS];
        for (int k = 0; k < rounds; k++) {
                double t_off = run_round(b[0], kv[0], ids0, ids1, steps, &diag);
                double t_on = t_off < 0 ? -1 : run_round(b[1], kv[1], ids0, ids1, steps, &diag);
                if (t_on < 0) {
                        fprintf(stderr, "step: %s\n", diag.msg);
                        goto out;
                }
                ratio[k] = t_on / t_off;
                printf("round %d: CPU per step off %.3f ms, on %.3f ms: on/off %.3f\n", k + 1, 1e3 * t_off / steps,
                       1e3 * t_on / steps, ratio[k]);
        }
        qsort(ratio, (size_t)rounds, sizeof ratio[0], bench_cmp_double);
        printf("MTP rows kept, 2 sequences x %d plain steps: CPU on/off median %.3f over %d rounds\n", steps,
               ratio[rounds / 2], rounds);
        rc = 0;
out:
        for (int i = 0; i < 2; i++) {
                dse_batch_free(b[i]);
                dse_kv_cache_free(kv[i]);
        }
        dse_model_free(m);
        return rc;
}
