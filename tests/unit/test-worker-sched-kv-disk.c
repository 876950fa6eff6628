/* The scheduler with a KV disk tier on the llama3-rope-gqa fixture: a request whose
 * prefix blocks are only on the tier waits for them off the step, with the tier's
 * reader held, while another request keeps decoding a token per step; released, it
 * gives the tokens of its cold run. */
#include <unistd.h>

#include "t.h"
#include "worker-sched-rig.h"

TEST(loading_request_waits_while_another_decodes) {
        struct rig g;
        ASSERT_OK(rig_init(&g, 4, 256, 16, 256));
        char dir[] = "/tmp/test-sched-kv-disk.XXXXXX", path[64];
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/t.kvtier", dir);
        struct dse_kv_disk_config cfg = {path, 8u << 20, 0, DSE_KV_DISK_FAULT_NONE};
        ASSERT_OK(dse_kv_cache_attach_disk(g.kv, g.m, &cfg, NULL));
        ASSERT_OK(add(&g, 1, 100, 0, 8, 0, 1)); /* cold */
        ASSERT_TRUE(run(&g, 100) > 0);
        for (int i = 0; i < 5; i++) { /* 35 blocks through a pool of 16: request 1's go to the tier */
                ASSERT_OK(add(&g, 2 + (uint64_t)i, 100, 1 + i, 1, 0, 1));
                ASSERT_TRUE(run(&g, 100) > 0);
        }
        dse_kv_cache_disk_flush(g.kv);
        ASSERT_OK(add(&g, 8, 20, 9, 40, 0, 1));
        for (int i = 0; i < 3; i++)
                ASSERT_TRUE(sched_step(g.s, now_ms()) > 0);
        int before = g.ev.n_out[8];
        dse_kv_cache_disk_set_fault(g.kv, DSE_KV_DISK_FAULT_HOLD_READS);
        ASSERT_OK(add(&g, 9, 100, 0, 8, 0, 1)); /* request 1's prompt again */
        for (int i = 0; i < 5; i++)
                ASSERT_EQ(sched_step(g.s, now_ms()), 1); /* request 8's decode alone */
        ASSERT_EQ(g.ev.n_out[8], before + 5);
        ASSERT_EQ(g.ev.n_out[9], 0);
        struct sched_stats st;
        sched_get_stats(g.s, &st);
        ASSERT_EQ(st.loading, 1);
        ASSERT_EQ(st.kv.disk_blocks_read, 0);
        dse_kv_cache_disk_set_fault(g.kv, DSE_KV_DISK_FAULT_NONE);
        ASSERT_TRUE(run(&g, 1000) > 0);
        sched_get_stats(g.s, &st);
        ASSERT_EQ(st.kv.disk_hit_tokens, 96);
        ASSERT_EQ(g.ev.n_out[9], 8);
        ASSERT_EQ(g.ev.n_out[1], 8);
        for (int t = 0; t < 8; t++)
                ASSERT_EQ(g.ev.out[9][t], g.ev.out[1][t]);
        ASSERT_EQ(g.ev.n_out[8], 40);
        rig_done(&g);
        char p[80];
        unlink(path);
        snprintf(p, sizeof p, "%s.index", path);
        unlink(p);
        rmdir(dir);
}
