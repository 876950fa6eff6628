/* Routing: least-outstanding, power-of-two, round-robin, prefix-affinity. */
#include "dsv_policy.h"
#include "t.h"

#define W(ready, tokens, running) {(ready), 0, (tokens), (running), 0}

static int pick(struct dsv_policy_router *r, const struct dsv_policy_worker_load *w, size_t n) {
        return dsv_policy_route_pick(r, w, n, NULL, 0);
}

TEST(names_round_trip) {
        for (int i = 0; i < DSV_POLICY_ROUTE_COUNT; i++)
                ASSERT_EQ(dsv_policy_route_from_string(dsv_policy_route_to_string(i)), i);
        ASSERT_ERR(dsv_policy_route_from_string("random"), -EINVAL);
        ASSERT_TRUE(dsv_policy_route_to_string(DSV_POLICY_ROUTE_COUNT) == NULL);
        struct dsv_policy_router r;
        ASSERT_ERR(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_COUNT, 1), -EINVAL);
}

TEST(outstanding_is_queued_tokens_plus_running) {
        struct dsv_policy_worker_load w = W(true, 300, 4);
        ASSERT_EQ(dsv_policy_worker_outstanding(&w), 304);
        struct dsv_policy_worker_load big = W(true, UINT32_MAX, UINT32_MAX);
        ASSERT_EQ(dsv_policy_worker_outstanding(&big), 2ull * UINT32_MAX);
}

TEST(least_outstanding_picks_least_loaded_ready) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_LEAST_OUTSTANDING, 1));
        struct dsv_policy_worker_load w[4] = {W(true, 500, 2), W(true, 100, 1), W(false, 0, 0), W(true, 90, 12)};
        ASSERT_EQ(pick(&r, w, 4), 1); /* 101 < 102 < 502; worker 2 idle but not ready */
        w[1].queued_prompt_tokens = 200;
        ASSERT_EQ(pick(&r, w, 4), 3);
}

TEST(least_outstanding_ties_rotate) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_LEAST_OUTSTANDING, 1));
        struct dsv_policy_worker_load w[3] = {W(true, 0, 0), W(true, 0, 0), W(true, 0, 0)};
        int seen[3] = {0};
        for (int i = 0; i < 9; i++)
                seen[pick(&r, w, 3)]++;
        ASSERT_EQ(seen[0], 3);
        ASSERT_EQ(seen[1], 3);
        ASSERT_EQ(seen[2], 3);
}

TEST(round_robin_skips_unready) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_ROUND_ROBIN, 1));
        struct dsv_policy_worker_load w[4] = {W(true, 9, 9), W(false, 0, 0), W(true, 0, 0), W(true, 1000, 0)};
        int want[] = {0, 2, 3, 0, 2, 3};
        for (int i = 0; i < 6; i++)
                ASSERT_EQ(pick(&r, w, 4), want[i]);
}

TEST(power_of_two_never_picks_the_most_loaded_of_three) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_POWER_OF_TWO, 42));
        struct dsv_policy_worker_load w[4] = {W(true, 10, 0), W(true, 20, 0), W(true, 30, 0), W(false, 0, 0)};
        int seen[4] = {0};
        for (int i = 0; i < 3000; i++)
                seen[pick(&r, w, 4)]++;
        ASSERT_EQ(seen[2], 0); /* the heaviest wins no pair */
        ASSERT_EQ(seen[3], 0); /* not ready */
        /* Pairs {0,1},{0,2} go to 0 and {1,2} to 1: 2/3 and 1/3. */
        ASSERT_NEAR(seen[0] / 3000.0, 2.0 / 3, 0.05);
        ASSERT_NEAR(seen[1] / 3000.0, 1.0 / 3, 0.05);
}

TEST(power_of_two_is_reproducible_from_seed) {
        struct dsv_policy_router a, b, c;
        ASSERT_OK(dsv_policy_router_init(&a, DSV_POLICY_ROUTE_POWER_OF_TWO, 7));
        ASSERT_OK(dsv_policy_router_init(&b, DSV_POLICY_ROUTE_POWER_OF_TWO, 7));
        ASSERT_OK(dsv_policy_router_init(&c, DSV_POLICY_ROUTE_POWER_OF_TWO, 8));
        struct dsv_policy_worker_load w[8];
        for (int i = 0; i < 8; i++)
                w[i] = (struct dsv_policy_worker_load)W(true, (uint32_t)(i % 3), 0);
        int same = 1, differs = 0;
        for (int i = 0; i < 200; i++) {
                int pa = pick(&a, w, 8), pb = pick(&b, w, 8), pc = pick(&c, w, 8);
                same &= pa == pb;
                differs |= pa != pc;
        }
        ASSERT_TRUE(same);
        ASSERT_TRUE(differs);
}

TEST(power_of_two_single_ready) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_POWER_OF_TWO, 0));
        struct dsv_policy_worker_load w[3] = {W(false, 0, 0), W(false, 0, 0), W(true, 99, 9)};
        for (int i = 0; i < 10; i++)
                ASSERT_EQ(pick(&r, w, 3), 2);
}

TEST(none_ready_is_eagain_for_every_route) {
        struct dsv_policy_worker_load w[2] = {W(false, 0, 0), W(false, 0, 0)};
        for (int route = 0; route < DSV_POLICY_ROUTE_COUNT; route++) {
                struct dsv_policy_router r;
                ASSERT_OK(dsv_policy_router_init(&r, route, 3));
                ASSERT_ERR(dsv_policy_route_pick(&r, w, 2, "hello", 5), -EAGAIN);
                ASSERT_ERR(dsv_policy_route_pick(&r, w, 0, "hello", 5), -EAGAIN);
        }
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_ROUND_ROBIN, 3));
        ASSERT_ERR(dsv_policy_route_pick(&r, NULL, 2, NULL, 0), -EINVAL);
        ASSERT_ERR(dsv_policy_route_pick(&r, w, 2, NULL, 3), -EINVAL);
}

TEST(unready_never_picked_randomised) {
        /* Every route, random loads and readiness: a pick is always a ready worker. */
        uint64_t s = 12345;
        for (int route = 0; route < DSV_POLICY_ROUTE_COUNT; route++) {
                struct dsv_policy_router r;
                ASSERT_OK(dsv_policy_router_init(&r, route, (uint64_t)route));
                for (int iter = 0; iter < 2000; iter++) {
                        struct dsv_policy_worker_load w[6];
                        int any = 0;
                        for (int i = 0; i < 6; i++) {
                                s = s * 6364136223846793005ull + 1442695040888963407ull;
                                w[i] = (struct dsv_policy_worker_load)W((s >> 60) % 3 != 0, (uint32_t)(s >> 40) % 5000,
                                                                        (uint32_t)(s >> 20) % 8);
                                any |= w[i].ready;
                        }
                        char prompt[16];
                        snprintf(prompt, sizeof prompt, "p%d", iter % 7);
                        int p = dsv_policy_route_pick(&r, w, 6, prompt, strlen(prompt));
                        if (!any) {
                                ASSERT_ERR(p, -EAGAIN);
                                continue;
                        }
                        ASSERT_TRUE(p >= 0 && p < 6);
                        ASSERT_TRUE(w[p].ready);
                }
        }
}

TEST(prefix_affinity_sticks_and_falls_back) {
        struct dsv_policy_router r;
        ASSERT_OK(dsv_policy_router_init(&r, DSV_POLICY_ROUTE_PREFIX_AFFINITY, 5));
        r.prefix_bytes = 16;
        r.affinity_max_load = 1000;
        struct dsv_policy_worker_load w[4] = {W(true, 10, 1), W(true, 10, 1), W(true, 10, 1), W(true, 10, 1)};
        const char *a = "You are a helpful assistant. Question one?";
        const char *b = "You are a helpful assistant. Question two, longer";
        int home = dsv_policy_route_pick(&r, w, 4, a, strlen(a));
        ASSERT_TRUE(home >= 0);
        for (int i = 0; i < 20; i++) /* same 16-byte prefix, same worker */
                ASSERT_EQ(dsv_policy_route_pick(&r, w, 4, b, strlen(b)), home);

        /* Different prefixes spread over workers. */
        int seen[4] = {0};
        for (int i = 0; i < 400; i++) {
                char p[32];
                snprintf(p, sizeof p, "session-%d: hi", i);
                seen[dsv_policy_route_pick(&r, w, 4, p, strlen(p))]++;
        }
        for (int i = 0; i < 4; i++)
                ASSERT_TRUE(seen[i] > 50);

        /* Overloaded home: least-outstanding instead. */
        w[home].queued_prompt_tokens = 5000;
        int other = (home + 2) % 4;
        w[other].queued_prompt_tokens = 0;
        ASSERT_EQ(dsv_policy_route_pick(&r, w, 4, a, strlen(a)), other);
        /* Not ready home: the same. */
        w[home].queued_prompt_tokens = 0;
        w[home].ready = false;
        ASSERT_EQ(dsv_policy_route_pick(&r, w, 4, a, strlen(a)), other);
        /* Back to normal: back home. */
        w[home].ready = true;
        ASSERT_EQ(dsv_policy_route_pick(&r, w, 4, a, strlen(a)), home);
}
