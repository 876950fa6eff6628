/* Decode steps of the worker's scheduler allocate nothing. malloc, calloc and realloc
 * are interposed and counted while four streams decode with every sampling feature
 * (greedy, temperature, top-k, top-p, min-p, penalties, logprobs). Under ASan, which
 * brings its own allocator, there is nothing to interpose: the test says so as a skip. */
#include "t.h"
#include "worker-sched-rig.h"

#ifdef __SANITIZE_ADDRESS__
TEST(decode_steps_do_not_allocate) {
        T_SKIP("ASan brings its own allocator: allocations cannot be counted under it");
}
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static int counting;
static long n_allocs;

void *malloc(size_t n) {
        n_allocs += counting;
        return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
        n_allocs += counting;
        return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
        n_allocs += counting;
        return __libc_realloc(p, n);
}

TEST(decode_steps_do_not_allocate) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 64, 64, 128));
        int32_t ids[16];
        prompt_for(ids, 16, g.vocab, 0);
        for (int i = 0; i < 4; i++) { /* greedy, temperature, top-k + top-p + min-p, penalties */
                struct dsv_ipc_request req = {.id = (uint64_t)i, .input = DSV_IPC_INPUT_TOKENS, .max_tokens = 60};
                dsv_ipc_sampling_init(&req.sampling);
                req.sampling.temperature = i == 0 ? 0.0f : 0.8f;
                req.sampling.top_k = i == 2 ? 40 : 0;
                req.sampling.top_p = i == 2 ? 0.9f : 1.0f;
                req.sampling.min_p = i == 2 ? 0.05f : 0.0f;
                req.sampling.repetition_penalty = i == 3 ? 1.3f : 1.0f;
                req.sampling.frequency_penalty = i == 3 ? 0.5f : 0.0f;
                req.logprobs = i == 3 ? 5 : 0;
                ASSERT_OK(sched_add(g.s, &req, ids, (size_t)(10 + i), now_ms()));
        }
        for (int i = 0; i < 3; i++)
                ASSERT_TRUE(sched_step(g.s, now_ms()) > 0);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_EQ(st.running, 4);
        ASSERT_EQ(st.queued_prompt_tokens, 0);
        n_allocs = 0;
        counting = 1;
        int ok = 1;
        for (int i = 0; i < 20; i++)
                ok &= sched_step(g.s, now_ms()) == 4;
        counting = 0;
        ASSERT_TRUE(ok);
        ASSERT_EQ(n_allocs, 0);
        ASSERT_TRUE(run(&g, 1000) > 0);
        rig_done(&g);
}
#endif
