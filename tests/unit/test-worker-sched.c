/* The worker's scheduler on the llama3-rope-gqa fixture (no tokenizer: token-id
 * prompts): token budget per step, length grouping at admission, preemption of the
 * youngest sequence when blocks run out with unchanged output after recompute,
 * cancellation freeing blocks at once, deadlines, prefix hits, bad input codes, a
 * request's tokens being the same alone and in a batch of 8 (greedy and seeded), and
 * each penalty changing the tokens on its own. */
#include "t.h"
#include "worker-sched-rig.h"

/* Each of 8 requests alone, then all 8 together: identical tokens. */
static void batch_equals_alone(float temperature) {
        static const int lens[8] = {5, 17, 33, 9, 40, 3, 24, 12};
        int32_t alone[8][MAX_OUT];
        int n_alone[8];
        for (int i = 0; i < 8; i++) {
                struct rig g;
                ASSERT_OK(rig_init(&g, 8, 64, 64, 128));
                ASSERT_OK(add(&g, (uint64_t)i, lens[i], i, 12, temperature, 1000 + (uint64_t)i));
                ASSERT_TRUE(run(&g, 1000) > 0);
                ASSERT_STREQ(g.ev.reason[i], "length");
                n_alone[i] = g.ev.n_out[i];
                memcpy(alone[i], g.ev.out[i], sizeof alone[i]);
                rig_done(&g);
        }
        struct rig g;
        ASSERT_OK(rig_init(&g, 8, 64, 64, 128));
        for (int i = 0; i < 8; i++)
                ASSERT_OK(add(&g, (uint64_t)i, lens[i], i, 12, temperature, 1000 + (uint64_t)i));
        ASSERT_TRUE(run(&g, 1000) > 0);
        for (int i = 0; i < 8; i++) {
                ASSERT_EQ(g.ev.n_out[i], 12);
                ASSERT_EQ(n_alone[i], 12);
                for (int t = 0; t < 12; t++)
                        ASSERT_EQ(g.ev.out[i][t], alone[i][t]);
        }
        rig_done(&g);
}

TEST(batch_of_8_equals_alone_greedy) {
        batch_equals_alone(0.0f);
}

TEST(batch_of_8_equals_alone_seeded) {
        batch_equals_alone(1.0f);
}

/* Budget 16 with 3 prompts of 40 and one short one: no step exceeds 16 tokens, and once
 * the short one decodes it is in every step (its one token first). */
TEST(token_budget_respected) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 16, 64, 128));
        ASSERT_OK(add(&g, 0, 3, 0, 20, 0, 0));
        ASSERT_EQ(sched_step(g.s, now_ms()), 3); /* prefill of the short one */
        for (int i = 1; i <= 3; i++)
                ASSERT_OK(add(&g, (uint64_t)i, 40, i, 4, 0, 0));
        int steps = 0;
        while (sched_busy(g.s) && g.ev.reason[0][0] == 0) {
                int n0 = g.ev.n_out[0];
                int r = sched_step(g.s, now_ms());
                ASSERT_TRUE(r > 0 && r <= 16);
                ASSERT_EQ(g.ev.n_out[0], n0 + 1); /* the running stream advanced */
                steps++;
        }
        ASSERT_TRUE(steps >= 8); /* 120 prompt tokens at < 16 per step */
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_TRUE(st.steps > 0 && st.step_tokens <= st.steps * 16);
        ASSERT_TRUE(run(&g, 1000) >= 0);
        ASSERT_TRUE(!sched_busy(g.s));
        for (int i = 1; i <= 3; i++)
                ASSERT_STREQ(g.ev.reason[i], "length");
        rig_done(&g);
}

/* Waiting prompts of 40, 5, 41, 6 tokens with a budget of 81: the first step admits the
 * oldest (40) and the one of its length class (41), not the short ones in between. */
TEST(length_grouping) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 81, 64, 128));
        ASSERT_OK(add(&g, 0, 40, 0, 2, 0, 0));
        ASSERT_OK(add(&g, 1, 5, 1, 2, 0, 0));
        ASSERT_OK(add(&g, 2, 41, 2, 2, 0, 0));
        ASSERT_OK(add(&g, 3, 6, 3, 2, 0, 0));
        ASSERT_EQ(sched_step(g.s, now_ms()), 81);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_EQ(st.running, 2);
        ASSERT_EQ(st.waiting, 2);
        ASSERT_EQ(st.queued_prompt_tokens, 11);
        ASSERT_EQ(g.ev.n_out[0], 1);
        ASSERT_EQ(g.ev.n_out[2], 1);
        ASSERT_TRUE(run(&g, 1000) > 0);
        rig_done(&g);
}

/* A pool of 8 blocks (128 tokens) for 3 requests that grow to 30 + 40 tokens each (5
 * blocks): the youngest is preempted and recomputed; every output equals the output of
 * the same request alone. */
TEST(preempt_youngest_and_recompute) {
        int32_t alone[3][MAX_OUT];
        for (int i = 0; i < 3; i++) {
                struct rig g;
                ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
                ASSERT_OK(add(&g, (uint64_t)i, 30, i, 40, i == 2 ? 0.8f : 0.0f, 77));
                ASSERT_TRUE(run(&g, 1000) > 0);
                memcpy(alone[i], g.ev.out[i], sizeof alone[i]);
                rig_done(&g);
        }
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 8, 128));
        for (int i = 0; i < 3; i++)
                ASSERT_OK(add(&g, (uint64_t)i, 30, i, 40, i == 2 ? 0.8f : 0.0f, 77));
        ASSERT_TRUE(run(&g, 5000) > 0);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        fprintf(stderr, "  preemptions: %lld\n", (long long)st.preemptions);
        ASSERT_TRUE(st.preemptions > 0);
        for (int i = 0; i < 3; i++) {
                ASSERT_STREQ(g.ev.reason[i], "length");
                ASSERT_EQ(g.ev.n_out[i], 40);
                for (int t = 0; t < 40; t++)
                        ASSERT_EQ(g.ev.out[i][t], alone[i][t]);
        }
        ASSERT_EQ(st.kv_blocks_used, 0);
        rig_done(&g);
}

/* Cancelling a running request releases its blocks before the next step; the other
 * request goes on. */
TEST(cancel_frees_blocks_within_one_step) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
        ASSERT_OK(add(&g, 0, 40, 0, 30, 0, 0));
        ASSERT_OK(add(&g, 1, 40, 1, 30, 0, 0));
        ASSERT_TRUE(sched_step(g.s, now_ms()) > 0);
        ASSERT_TRUE(sched_step(g.s, now_ms()) > 0);
        struct sched_stats before, after;
        sched_get_stats(g.s, &before);
        ASSERT_EQ(before.kv_blocks_used, 6);
        ASSERT_OK(sched_cancel(g.s, 1, now_ms()));
        sched_get_stats(g.s, &after);
        ASSERT_EQ(after.kv_blocks_used, 3);
        ASSERT_EQ(after.running, 1);
        ASSERT_STREQ(g.ev.reason[1], "cancelled");
        ASSERT_ERR(sched_cancel(g.s, 1, now_ms()), -ENOENT);
        ASSERT_TRUE(run(&g, 1000) > 0);
        ASSERT_STREQ(g.ev.reason[0], "length");
        rig_done(&g);
}

TEST(deadline_ends_request) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
        int32_t ids[8];
        prompt_for(ids, 8, g.vocab, 0);
        struct dsv_ipc_request req = {.id = 3, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 100};
        dsv_ipc_sampling_init(&req.sampling);
        req.deadline_unix_ms = now_ms() + 30;
        ASSERT_OK(sched_add(g.s, &req, ids, 8, now_ms()));
        ASSERT_TRUE(sched_step(g.s, now_ms()) > 0);
        struct timespec ts = {0, 40 * 1000000};
        nanosleep(&ts, NULL);
        sched_step(g.s, now_ms());
        ASSERT_STREQ(g.ev.reason[3], "deadline");
        ASSERT_TRUE(!sched_busy(g.s));
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_EQ(st.kv_blocks_used, 0);
        /* a deadline already past is refused up front */
        req.id = 4;
        req.deadline_unix_ms = now_ms() - 1;
        ASSERT_ERR(sched_add(g.s, &req, ids, 8, now_ms()), -ETIMEDOUT);
        ASSERT_EQ(g.ev.error[4], DSV_IPC_ERR_DEADLINE + 1);
        rig_done(&g);
}

/* Two requests with the same 48-token system prefix, one after the other: the second
 * hits 3 blocks and still produces its alone output. */
TEST(prefix_hits_reported) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
        ASSERT_OK(add(&g, 0, 60, 5, 4, 0, 0));
        ASSERT_TRUE(run(&g, 1000) > 0);
        ASSERT_OK(add(&g, 1, 60, 5, 4, 0, 0));
        ASSERT_TRUE(run(&g, 1000) > 0);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_NEAR(st.prefix_hit_rate, 48.0 / 120.0, 1e-9);
        ASSERT_EQ(st.prefix_query_tokens, 120);
        ASSERT_EQ(st.prefix_hit_tokens, 48);
        int64_t bucketed = 0;
        for (int b = 0; b <= DSV_IPC_STEP_TOKEN_BUCKETS; b++)
                bucketed += st.step_tokens_buckets[b];
        ASSERT_TRUE(st.steps > 0);
        ASSERT_EQ(bucketed, st.steps);
        for (int t = 0; t < 4; t++)
                ASSERT_EQ(g.ev.out[1][t], g.ev.out[0][t]);
        rig_done(&g);
}

TEST(bad_input_error_codes) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
        int32_t ids[200];
        prompt_for(ids, 200, g.vocab, 0);
        struct dsv_ipc_request req = {.id = 1, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 4};
        dsv_ipc_sampling_init(&req.sampling);
        ASSERT_ERR(sched_add(g.s, &req, ids, 0, now_ms()), -EINVAL);
        ASSERT_EQ(g.ev.error[1], DSV_IPC_ERR_INVALID_REQUEST + 1);
        req.id = 2;
        ASSERT_ERR(sched_add(g.s, &req, ids, 200, now_ms()), -E2BIG);
        ASSERT_EQ(g.ev.error[2], DSV_IPC_ERR_PROMPT_TOO_LONG + 1);
        req.id = 3;
        req.max_tokens = 120; /* 10 + 120 > 128 */
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -E2BIG);
        ASSERT_EQ(g.ev.error[3], DSV_IPC_ERR_PROMPT_TOO_LONG + 1);
        req.max_tokens = 4;
        req.id = 4;
        req.sampling.top_p = 0;
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -EINVAL);
        ASSERT_EQ(g.ev.error[4], DSV_IPC_ERR_INVALID_REQUEST + 1);
        req.sampling.top_p = 1;
        req.id = 5;
        req.logprobs = 21;
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -EINVAL);
        req.logprobs = 0;
        req.id = 6;
        ids[3] = g.vocab;
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -EINVAL);
        ASSERT_EQ(g.ev.error[6], DSV_IPC_ERR_INVALID_REQUEST + 1);
        ids[3] = 0;
        req.id = 7;
        char *stop[] = {"x"};
        req.stop = stop;
        req.n_stop = 1;
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -EINVAL); /* no tokenizer */
        req.stop = NULL;
        req.n_stop = 0;
        /* after all that, a good request is served */
        req.id = 8;
        ASSERT_OK(sched_add(g.s, &req, ids, 10, now_ms()));
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -EEXIST);
        ASSERT_TRUE(run(&g, 100) > 0);
        ASSERT_STREQ(g.ev.reason[8], "length");
        ASSERT_EQ(g.ev.n_out[8], 4);
        ASSERT_EQ(g.ev.n_final, 1);
        rig_done(&g);
}

/* max_tokens_to_context generates up to the context (128 here): a 120-token prompt gets 8
 * tokens; a prompt filling the context, or over max_prompt_tokens, is prompt_too_long. */
TEST(max_tokens_to_context_and_prompt_limit) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 256, 64, 128));
        int32_t ids[128];
        prompt_for(ids, 128, g.vocab, 0);
        struct dsv_ipc_request req = {.id = 1, .input = DSV_IPC_INPUT_TOKENS, .max_tokens_to_context = true};
        dsv_ipc_sampling_init(&req.sampling);
        ASSERT_OK(sched_add(g.s, &req, ids, 120, now_ms()));
        ASSERT_TRUE(run(&g, 1000) > 0);
        ASSERT_STREQ(g.ev.reason[1], "length");
        ASSERT_EQ(g.ev.n_out[1], 8);
        req.id = 2;
        ASSERT_ERR(sched_add(g.s, &req, ids, 128, now_ms()), -E2BIG);
        ASSERT_EQ(g.ev.error[2], DSV_IPC_ERR_PROMPT_TOO_LONG + 1);
        req.id = 3;
        req.max_tokens_to_context = false;
        req.max_tokens = 2;
        req.max_prompt_tokens = 9;
        ASSERT_ERR(sched_add(g.s, &req, ids, 10, now_ms()), -E2BIG);
        ASSERT_EQ(g.ev.error[3], DSV_IPC_ERR_PROMPT_TOO_LONG + 1);
        req.id = 4;
        ASSERT_OK(sched_add(g.s, &req, ids, 9, now_ms()));
        ASSERT_TRUE(run(&g, 100) > 0);
        ASSERT_EQ(g.ev.n_out[4], 2);
        rig_done(&g);
}

/* Penalties change the choice: with a huge repetition penalty a greedy stream never
 * repeats a prompt or output token it would otherwise repeat. */
TEST(repetition_penalty_applies) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
        int32_t ids[8];
        prompt_for(ids, 8, g.vocab, 0);
        struct dsv_ipc_request req = {.id = 0, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 24};
        dsv_ipc_sampling_init(&req.sampling);
        req.sampling.repetition_penalty = 100.0f;
        req.sampling.frequency_penalty = 2.0f;
        req.sampling.presence_penalty = 2.0f;
        ASSERT_OK(sched_add(g.s, &req, ids, 8, now_ms()));
        ASSERT_TRUE(run(&g, 1000) > 0);
        ASSERT_EQ(g.ev.n_out[0], 24);
        for (int i = 0; i < 24; i++) {
                for (int j = 0; j < i; j++)
                        ASSERT_TRUE(g.ev.out[0][i] != g.ev.out[0][j]);
                for (int j = 0; j < 8; j++)
                        ASSERT_TRUE(g.ev.out[0][i] != ids[j]);
        }
        rig_done(&g);
}

/* A greedy stream of n tokens after an 8-token prompt, with repetition penalty 1 (off)
 * and the given presence and frequency penalties. */
static int greedy_stream(float presence, float frequency, int32_t *out, int n) {
        struct rig g;
        int r = rig_init(&g, 1, 64, 64, 128);
        if (r < 0)
                return r;
        int32_t ids[8];
        prompt_for(ids, 8, g.vocab, 0);
        struct dsv_ipc_request req = {.id = 0, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = n};
        dsv_ipc_sampling_init(&req.sampling);
        req.sampling.repetition_penalty = 1.0f;
        req.sampling.presence_penalty = presence;
        req.sampling.frequency_penalty = frequency;
        if ((r = sched_add(g.s, &req, ids, 8, now_ms())) == 0 && (r = run(&g, 1000)) >= 0)
                r = g.ev.n_out[0] == n ? 0 : -EIO;
        memcpy(out, g.ev.out[0], (size_t)n * sizeof *out);
        rig_done(&g);
        return r;
}

/* The first index at which a stream picks a token it has already output, or n. */
static int first_repeat(const int32_t *out, int n) {
        for (int i = 0; i < n; i++)
                for (int j = 0; j < i; j++)
                        if (out[i] == out[j])
                                return i;
        return n;
}

/* With repetition penalty off, a presence or a frequency penalty alone changes a greedy
 * stream: the unpenalised stream falls into repeating a token; the penalised one matches
 * it up to that point (a penalty only lowers tokens already output, which cannot change
 * an argmax that is not one of them) and then picks something else. */
static void penalty_alone_changes_the_stream(float presence, float frequency) {
        int32_t plain[24], penalised[24];
        ASSERT_OK(greedy_stream(0.0f, 0.0f, plain, 24));
        ASSERT_OK(greedy_stream(presence, frequency, penalised, 24));
        int k = first_repeat(plain, 24);
        ASSERT_TRUE(k < 24); /* the fixture's greedy stream repeats within 24 tokens */
        for (int i = 0; i < k; i++)
                ASSERT_EQ(penalised[i], plain[i]);
        ASSERT_TRUE(penalised[k] != plain[k]);
        ASSERT_TRUE(first_repeat(penalised, 24) > k);
}

TEST(presence_penalty_alone_changes_the_stream) { penalty_alone_changes_the_stream(2.0f, 0.0f); }
TEST(frequency_penalty_alone_changes_the_stream) { penalty_alone_changes_the_stream(0.0f, 2.0f); }

/* A random workload on a small pool: 24 requests of random prompt and output lengths
 * arriving between steps, some cancelled part way. Every request ends exactly once,
 * the pool is empty at the end, and every request that ran to its end produced the
 * tokens it produces alone. */
TEST(random_workload_invariants) {
        enum { NR = 24 };
        uint64_t x = 12345;
        int plen[NR], gen[NR], cancel_at[NR];
        float temp[NR];
        for (int i = 0; i < NR; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                plen[i] = 1 + (int)((x >> 33) % 50);
                gen[i] = 1 + (int)((x >> 40) % 30);
                cancel_at[i] = (x >> 50) % 5 == 0 ? 1 + (int)((x >> 20) % 10) : -1;
                temp[i] = (x >> 45) % 2 ? 0.9f : 0.0f;
        }
        static int32_t alone[NR][MAX_OUT];
        for (int i = 0; i < NR; i++) {
                struct rig g;
                ASSERT_OK(rig_init(&g, 4, 24, 64, 128));
                ASSERT_OK(add(&g, (uint64_t)i % MAX_REQ, plen[i], i, gen[i], temp[i], 900 + (uint64_t)i));
                ASSERT_TRUE(run(&g, 1000) > 0);
                memcpy(alone[i], g.ev.out[i % MAX_REQ], sizeof alone[i]);
                rig_done(&g);
        }
        /* ids 0..15 only (the event arrays): run in two waves of 12 */
        for (int wave = 0; wave < 2; wave++) {
                struct rig g;
                ASSERT_OK(rig_init(&g, 4, 24, 6, 128)); /* a request needs up to 5 blocks */
                int next = 0, steps = 0;
                while ((next < 12 || sched_busy(g.s)) && steps < 5000) {
                        if (next < 12 && steps % 3 == 0) {
                                int i = wave * 12 + next;
                                ASSERT_OK(add(&g, (uint64_t)next, plen[i], i, gen[i], temp[i], 900 + (uint64_t)i));
                                next++;
                        }
                        for (int k = 0; k < next; k++) {
                                int i = wave * 12 + k;
                                if (cancel_at[i] > 0 && g.ev.n_out[k] == cancel_at[i] && !g.ev.reason[k][0])
                                        ASSERT_OK(sched_cancel(g.s, (uint64_t)k, now_ms()));
                        }
                        ASSERT_TRUE(sched_step(g.s, now_ms()) >= 0);
                        steps++;
                }
                ASSERT_EQ(g.ev.n_final + g.ev.n_error, 12);
                ASSERT_EQ(g.ev.n_error, 0);
                struct sched_stats st;
                sched_get_stats(g.s, &st);
                ASSERT_EQ(st.kv_blocks_used, 0);
                ASSERT_EQ(st.running + st.waiting, 0);
                for (int k = 0; k < 12; k++) {
                        int i = wave * 12 + k;
                        if (strcmp(g.ev.reason[k], "cancelled") == 0)
                                continue;
                        ASSERT_STREQ(g.ev.reason[k], "length");
                        ASSERT_EQ(g.ev.n_out[k], gen[i]);
                        for (int t = 0; t < gen[i]; t++)
                                ASSERT_EQ(g.ev.out[k][t], alone[i][t]);
                }
                fprintf(stderr, "  wave %d: %lld preemptions, %lld steps\n", wave, (long long)st.preemptions,
                        (long long)st.steps);
                rig_done(&g);
        }
}
