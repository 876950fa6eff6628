/* The KV cache's disk tier on fixtures: a prompt whose prefix blocks come back from the
 * tier gives bit for bit the logits of a cold prefill (every KV type, llama and
 * DeepSeek MLA, alone and batched with a cold neighbour, after a restart of the cache);
 * a tier of another KV type, a truncated file, a flipped byte in a slot, an injected
 * write error and a process killed between a slot write and the index publish each
 * serve nothing wrong and say so. Reads back run on the tier's reader thread: held
 * there, they leave another sequence stepping; a held writer drops spills instead of
 * holding a step; a disk full at start leaves the pool serving alone; blocks still in
 * RAM are written back on request for the next start. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dse.h"
#include "t.h"

#include "fixture-models.h"
#include "test-log-capture.h"

#define BT 16
#define N 40    /* prompt tokens: two full blocks and a partial one */
#define NDEC 3  /* greedy decode steps compared after the prompt */
#define NCTX 64
#define POOL_BLOCKS 6

static void ids_for(int32_t *ids, int n, int vocab, int salt) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i * 97 + 3 + salt * 31) % vocab);
}

static int32_t argmax(const float *x, int n) {
        int32_t best = 0;
        for (int i = 1; i < n; i++)
                if (x[i] > x[best])
                        best = i;
        return best;
}

struct tier_dir {
        char dir[1024], path[1100];
};

static void tier_dir_make(struct tier_dir *t) {
        snprintf(t->dir, sizeof t->dir, "%s/test-kv-disk.XXXXXX", getenv("DSV_BUILD_DIR") ? getenv("DSV_BUILD_DIR") : "/tmp");
        if (!mkdtemp(t->dir))
                t->dir[0] = 0;
        snprintf(t->path, sizeof t->path, "%s/worker.kvtier", t->dir);
}

static void tier_dir_remove(struct tier_dir *t) {
        char p[1200];
        unlink(t->path);
        snprintf(p, sizeof p, "%s.index", t->path);
        unlink(p);
        snprintf(p, sizeof p, "%s.index.tmp", t->path);
        unlink(p);
        rmdir(t->dir);
}

/* A cache of POOL_BLOCKS blocks in dtype, with the tier at path (NULL: none) of
 * tier_blocks slots (0: 64), a writer's queue of queue_blocks (0: the default) and
 * fault in force from the start. */
static struct dse_kv_cache *cache_new_with(struct dse_model *m, enum dse_kv_dtype dtype, const char *path,
                                           int tier_blocks, int queue_blocks, enum dse_kv_disk_fault fault) {
        struct dse_diag diag = {{0}};
        struct dse_kv_cache *probe = NULL, *kv = NULL;
        if (dse_kv_cache_new_typed(m, dtype, (size_t)1 << 26, BT, 1, NCTX, &probe, &diag) < 0)
                return NULL;
        size_t bb = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        if (dse_kv_cache_new_typed(m, dtype, POOL_BLOCKS * bb, BT, 4, NCTX, &kv, &diag) < 0)
                return NULL;
        if (path) {
                /* a slot is its head, ids and block rounded up to 512 bytes; the file's
                 * header takes 4 KiB */
                uint64_t slot = (bb + 24 + BT * 4 + 511) / 512 * 512;
                struct dse_kv_disk_config cfg = {path, 4096 + slot * (uint64_t)(tier_blocks ? tier_blocks : 64),
                                                 queue_blocks, fault};
                if (dse_kv_cache_attach_disk(kv, m, &cfg, &diag) < 0) {
                        fprintf(stderr, "  attach: %s\n", diag.msg);
                        dse_kv_cache_free(kv);
                        return NULL;
                }
        }
        return kv;
}

static struct dse_kv_cache *cache_new(struct dse_model *m, enum dse_kv_dtype dtype, const char *path, int tier_blocks) {
        return cache_new_with(m, dtype, path, tier_blocks, 0, DSE_KV_DISK_FAULT_NONE);
}

/* Evaluates the prompts of seqs (whose first cached[i] tokens are already held) in one
 * step, then NDEC greedy tokens each, all sequences in every step; logits[i] receives
 * (NDEC + 1) rows. */
static int run(struct dse_model *m, struct dse_kv_cache *kv, int n, const int *seq, int32_t (*prompt)[N],
               const int *cached, float **logits) {
        int V = dse_model_vocab_size(m);
        struct dse_diag diag = {{0}};
        struct dse_batch *b = NULL;
        int r = dse_batch_new(m, kv, NULL, &b, &diag);
        if (r < 0)
                return r;
        struct dse_batch_seq bs[4];
        int32_t next[4];
        for (int i = 0; i < n; i++)
                bs[i] = (struct dse_batch_seq){seq[i], prompt[i] + cached[i], N - cached[i], logits[i]};
        r = dse_batch_step(b, bs, (size_t)n, &diag);
        for (int d = 1; r == 0 && d <= NDEC; d++) {
                for (int i = 0; i < n; i++) {
                        next[i] = argmax(logits[i] + (size_t)(d - 1) * V, V);
                        bs[i] = (struct dse_batch_seq){seq[i], &next[i], 1, logits[i] + (size_t)d * V};
                }
                r = dse_batch_step(b, bs, (size_t)n, &diag);
        }
        if (r < 0)
                fprintf(stderr, "  step: %s\n", diag.msg);
        dse_batch_free(b);
        return r;
}

/* Logits of a prompt alone, cold, in a cache without a tier. */
static float *cold_logits(struct dse_model *m, enum dse_kv_dtype dtype, int32_t *prompt) {
        int V = dse_model_vocab_size(m);
        struct dse_kv_cache *kv = cache_new(m, dtype, NULL, 0);
        float *out = malloc((size_t)(NDEC + 1) * V * sizeof(float));
        int seq = kv ? dse_kv_seq_open(kv) : -1, zero = 0;
        if (!kv || seq < 0 || run(m, kv, 1, &seq, (int32_t (*)[N])prompt, &zero, &out) < 0) {
                free(out);
                out = NULL;
        }
        dse_kv_cache_free(kv);
        return out;
}

/* Runs prompt p to completion, then two other prompts together, which evicts p's full
 * blocks from the pool to the tier; waits for the writer. */
static int push_to_disk(struct dse_model *m, struct dse_kv_cache *kv, int32_t *p, int salt) {
        int V = dse_model_vocab_size(m);
        int32_t q[2][N];
        float *l[2] = {malloc((size_t)(NDEC + 1) * V * sizeof(float)), malloc((size_t)(NDEC + 1) * V * sizeof(float))};
        int seq[2] = {dse_kv_seq_open(kv), -1}, zero[2] = {0, 0};
        int r = run(m, kv, 1, seq, (int32_t (*)[N])p, zero, l);
        dse_kv_seq_close(kv, seq[0]);
        ids_for(q[0], N, V, salt + 1);
        ids_for(q[1], N, V, salt + 2);
        seq[0] = dse_kv_seq_open(kv);
        seq[1] = dse_kv_seq_open(kv);
        if (r == 0)
                r = run(m, kv, 2, seq, q, zero, l);
        dse_kv_seq_close(kv, seq[0]);
        dse_kv_seq_close(kv, seq[1]);
        dse_kv_cache_disk_flush(kv);
        free(l[0]);
        free(l[1]);
        return r;
}

static int bit_equal(const float *a, const float *b, int n) {
        return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void disk_hit_equals_cold(const char *fixture, enum dse_kv_dtype dtype) {
        struct dse_model *m = fixture_model_open(fixture);
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m), L = (NDEC + 1) * V;
        int32_t pr[2][N];
        ids_for(pr[0], N, V, 0);
        ids_for(pr[1], N, V, 7);
        float *ref[2] = {cold_logits(m, dtype, pr[0]), cold_logits(m, dtype, pr[1])};
        ASSERT_TRUE(ref[0] && ref[1]);
        struct tier_dir t;
        tier_dir_make(&t);
        ASSERT_TRUE(t.dir[0]);
        struct dse_kv_cache *kv = cache_new(m, dtype, t.path, 0);
        ASSERT_TRUE(kv);
        ASSERT_OK(push_to_disk(m, kv, pr[0], 1));
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_state, DSE_KV_DISK_ON);
        ASSERT_TRUE(st.disk_blocks_written >= 2);
        float *got[2] = {malloc((size_t)L * sizeof(float)), malloc((size_t)L * sizeof(float))};
        /* alone, in the same cache: both full blocks come back from the tier */
        int seq[2] = {dse_kv_seq_open(kv), -1}, cached[2] = {0, 0};
        cached[0] = dse_kv_seq_attach_prefix(kv, seq[0], pr[0], N);
        ASSERT_EQ(cached[0], 2 * BT);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_hit_tokens, 2 * BT);
        ASSERT_EQ(st.disk_blocks_read, 2);
        ASSERT_OK(run(m, kv, 1, seq, pr, cached, got));
        ASSERT_TRUE(bit_equal(got[0], ref[0], L));
        dse_kv_seq_close(kv, seq[0]);
        /* batched with a cold neighbour, after a restart: the blocks go to the tier
         * again and a new cache of the same identity reads them from the file */
        ASSERT_OK(push_to_disk(m, kv, pr[0], 3));
        dse_kv_cache_free(kv);
        kv = cache_new(m, dtype, t.path, 0);
        ASSERT_TRUE(kv);
        dse_kv_cache_stats(kv, &st);
        ASSERT_TRUE(st.disk_bytes_used > 0);
        seq[0] = dse_kv_seq_open(kv);
        seq[1] = dse_kv_seq_open(kv);
        cached[0] = dse_kv_seq_attach_prefix(kv, seq[0], pr[0], N);
        cached[1] = dse_kv_seq_attach_prefix(kv, seq[1], pr[1], N);
        ASSERT_EQ(cached[0], 2 * BT);
        ASSERT_EQ(cached[1], 0);
        ASSERT_OK(run(m, kv, 2, seq, pr, cached, got));
        ASSERT_TRUE(bit_equal(got[0], ref[0], L));
        ASSERT_TRUE(bit_equal(got[1], ref[1], L));
        dse_kv_cache_free(kv);
        tier_dir_remove(&t);
        free(got[0]);
        free(got[1]);
        free(ref[0]);
        free(ref[1]);
        dse_model_free(m);
}

TEST(disk_hit_equals_cold_llama_every_kv_type) {
        for (int d = 0; d < DSE_KV_DTYPE_COUNT; d++)
                disk_hit_equals_cold("llama3-rope-gqa", (enum dse_kv_dtype)d);
}

TEST(disk_hit_equals_cold_mla_every_kv_type) {
        for (int d = 0; d < DSE_KV_DTYPE_COUNT; d++)
                disk_hit_equals_cold("deepseek-v2-mla-qlora-yarn", (enum dse_kv_dtype)d);
}

/* A tier holding prompt 0's two blocks, in a fresh directory; the cache is freed (the
 * index published). */
static struct dse_model *tier_with_prompt(struct tier_dir *t, int32_t *p, enum dse_kv_dtype dtype, int tier_blocks) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        if (!m)
                return NULL;
        ids_for(p, N, dse_model_vocab_size(m), 0);
        tier_dir_make(t);
        struct dse_kv_cache *kv = cache_new(m, dtype, t->path, tier_blocks);
        if (!kv || push_to_disk(m, kv, p, 1) < 0) {
                dse_kv_cache_free(kv);
                dse_model_free(m);
                return NULL;
        }
        dse_kv_cache_free(kv);
        return m;
}

/* Attaches p in a new cache on the tier and checks the logits against the cold ones;
 * returns the tokens the tier supplied. */
static int reopen_and_check(struct dse_model *m, const char *path, enum dse_kv_dtype dtype, int tier_blocks,
                            int32_t *p, struct dse_kv_stats *st) {
        int V = dse_model_vocab_size(m), L = (NDEC + 1) * V;
        float *ref = cold_logits(m, dtype, p), *got = malloc((size_t)L * sizeof(float));
        struct dse_kv_cache *kv = cache_new(m, dtype, path, tier_blocks);
        int r = -1;
        if (ref && kv) {
                dse_kv_cache_stats(kv, st);
                int seq = dse_kv_seq_open(kv);
                int cached = dse_kv_seq_attach_prefix(kv, seq, p, N);
                if (cached >= 0 && run(m, kv, 1, &seq, (int32_t (*)[N])p, &cached, &got) == 0 &&
                    bit_equal(got, ref, L))
                        r = cached;
                int64_t used = st->disk_bytes_used;
                dse_kv_cache_stats(kv, st);
                st->disk_bytes_used = used; /* as found at open */
        }
        dse_kv_cache_free(kv);
        free(ref);
        free(got);
        return r;
}

TEST(tier_of_another_kv_type_is_cleared) {
        struct tier_dir t;
        int32_t p[N];
        struct dse_model *m = tier_with_prompt(&t, p, DSE_KV_F32, 0);
        ASSERT_TRUE(m);
        struct dse_kv_stats st;
        t_log_start(DSE_LOG_INFO);
        ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_BF16, 0, p, &st), 0);
        t_log_stop();
        T_LOG_HAS("made for another KV type; clearing it");
        ASSERT_EQ(st.disk_bytes_used, 0);
        tier_dir_remove(&t);
        dse_model_free(m);
}

TEST(tier_of_another_model_is_cleared) {
        struct tier_dir t;
        int32_t p[N];
        struct dse_model *m = tier_with_prompt(&t, p, DSE_KV_F32, 0);
        ASSERT_TRUE(m);
        dse_model_free(m);
        m = fixture_model_open("qwen2-bf16-tied");
        ASSERT_TRUE(m);
        ids_for(p, N, dse_model_vocab_size(m), 0);
        struct dse_kv_stats st;
        t_log_start(DSE_LOG_INFO);
        ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_F32, 0, p, &st), 0);
        t_log_stop();
        T_LOG_HAS("made for another model; clearing it");
        ASSERT_EQ(st.disk_bytes_used, 0);
        tier_dir_remove(&t);
        dse_model_free(m);
}

TEST(restart_of_same_identity_reuses_tier) {
        struct tier_dir t;
        int32_t p[N];
        struct dse_model *m = tier_with_prompt(&t, p, DSE_KV_INT8, 0);
        ASSERT_TRUE(m);
        struct dse_kv_stats st;
        ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_INT8, 0, p, &st), 2 * BT);
        ASSERT_TRUE(st.disk_bytes_used > 0);
        ASSERT_EQ(st.disk_blocks_read, 2);
        tier_dir_remove(&t);
        dse_model_free(m);
}

TEST(truncated_file_is_cleared) {
        struct tier_dir t;
        int32_t p[N];
        struct dse_model *m = tier_with_prompt(&t, p, DSE_KV_F32, 0);
        ASSERT_TRUE(m);
        struct stat sb;
        ASSERT_OK(stat(t.path, &sb));
        ASSERT_OK(truncate(t.path, sb.st_size - 4096));
        struct dse_kv_stats st;
        t_log_start(DSE_LOG_INFO);
        ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_F32, 0, p, &st), 0);
        t_log_stop();
        T_LOG_HAS("truncated or extended; clearing it");
        ASSERT_EQ(st.disk_bytes_used, 0);
        ASSERT_OK(stat(t.path, &sb));
        ASSERT_TRUE(sb.st_size > 4096 && (sb.st_size - 4096) % 512 == 0);
        tier_dir_remove(&t);
        dse_model_free(m);
}

TEST(flipped_byte_in_a_slot_is_never_served) {
        struct tier_dir t;
        int32_t p[N];
        struct dse_model *m = tier_with_prompt(&t, p, DSE_KV_BF16, 0);
        ASSERT_TRUE(m);
        /* one byte in the rows of every slot in use (the first two) */
        struct stat sb;
        ASSERT_OK(stat(t.path, &sb));
        int fd = open(t.path, O_RDWR);
        ASSERT_TRUE(fd >= 0);
        off_t slot = (sb.st_size - 4096) / 64;
        for (int s = 0; s < 2; s++) {
                uint8_t c;
                off_t at = 4096 + s * slot + 300;
                ASSERT_EQ(pread(fd, &c, 1, at), 1);
                c ^= 0x10;
                ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
        }
        close(fd);
        struct dse_kv_stats st;
        t_log_start(DSE_LOG_WARN);
        ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_BF16, 0, p, &st), 0);
        t_log_stop();
        T_LOG_HAS("fails its checksum; dropped");
        ASSERT_EQ(st.disk_blocks_corrupt, 1);
        ASSERT_EQ(st.disk_blocks_read, 0);
        tier_dir_remove(&t);
        dse_model_free(m);
}

TEST(write_error_turns_tier_off_and_serving_goes_on) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m), L = (NDEC + 1) * V;
        int32_t p[N];
        ids_for(p, N, V, 0);
        float *ref = cold_logits(m, DSE_KV_F32, p), *got = malloc((size_t)L * sizeof(float));
        ASSERT_TRUE(ref);
        struct tier_dir t;
        tier_dir_make(&t);
        struct dse_kv_cache *kv = cache_new(m, DSE_KV_F32, t.path, 0);
        ASSERT_TRUE(kv);
        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_WRITE_EIO);
        t_log_start(DSE_LOG_WARN);
        ASSERT_OK(push_to_disk(m, kv, p, 1));
        t_log_stop();
        T_LOG_HAS("writing a slot failed");
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_state, DSE_KV_DISK_FAILED);
        ASSERT_EQ(st.disk_blocks_written, 0);
        int seq = dse_kv_seq_open(kv);
        int cached = dse_kv_seq_attach_prefix(kv, seq, p, N);
        ASSERT_EQ(cached, 0);
        ASSERT_OK(run(m, kv, 1, &seq, (int32_t (*)[N])p, &cached, &got));
        ASSERT_TRUE(bit_equal(got, ref, L));
        dse_kv_cache_free(kv);
        tier_dir_remove(&t);
        free(ref);
        free(got);
        dse_model_free(m);
}

/* A process killed after writing a slot over one the published index names, before
 * publishing: the restarted cache serves the block the slot still holds and drops the
 * overwritten one (its key no longer matches). */
TEST(kill_between_slot_write_and_index_publish) {
        struct tier_dir t;
        int32_t p[N];
        /* two slots: prompt 0's blocks fill them, the next spill overwrites the older */
        struct dse_model *m = tier_with_prompt(&t, p, DSE_KV_F32, 2);
        ASSERT_TRUE(m);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct dse_kv_cache *kv = cache_new(m, DSE_KV_F32, t.path, 2);
                int32_t q[N];
                ids_for(q, N, dse_model_vocab_size(m), 40);
                if (kv) {
                        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_EXIT_BEFORE_INDEX);
                        push_to_disk(m, kv, q, 41);
                }
                _exit(3); /* the fault did not fire */
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        struct dse_kv_stats st;
        ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_F32, 2, p, &st), BT);
        ASSERT_EQ(st.disk_blocks_read, 1);
        ASSERT_EQ(st.disk_blocks_corrupt, 0);
        tier_dir_remove(&t);
        dse_model_free(m);
}

/* A directory that does not exist, a size without room for a slot, no config. */
TEST(bad_arguments_are_rejected) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        struct dse_kv_cache *kv = cache_new(m, DSE_KV_F32, NULL, 0);
        ASSERT_TRUE(kv);
        struct dse_diag diag = {{0}};
        struct dse_kv_disk_config cfg = {"/nonexistent-dir/x.kvtier", (uint64_t)1 << 30, 0, DSE_KV_DISK_FAULT_NONE};
        ASSERT_TRUE(dse_kv_cache_attach_disk(kv, m, &cfg, &diag) < 0);
        ASSERT_TRUE(strstr(diag.msg, "/nonexistent-dir/x.kvtier") != NULL);
        cfg = (struct dse_kv_disk_config){"/tmp/x.kvtier", 4096, 0, DSE_KV_DISK_FAULT_NONE};
        ASSERT_ERR(dse_kv_cache_attach_disk(kv, m, &cfg, &diag), -ENOSPC);
        ASSERT_ERR(dse_kv_cache_attach_disk(kv, m, NULL, &diag), -EINVAL);
        dse_kv_cache_free(kv);
        dse_model_free(m);
}

/* Waits for seq's reads back to finish: the tokens it holds. */
static int load_finish(struct dse_kv_cache *kv, int seq) {
        int r;
        while ((r = dse_kv_seq_load_poll(kv, seq)) == -EINPROGRESS)
                dse_kv_cache_load_wait(kv, 1000);
        return r;
}

/* With the reader held, a sequence whose prefix is on the tier waits while another
 * one prefills and decodes; once released it goes on from its blocks, and both give
 * their cold logits. Closing a sequence whose read is held cancels it. */
TEST(load_in_flight_leaves_other_sequences_stepping) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m), L = (NDEC + 1) * V;
        int32_t pr[2][N];
        ids_for(pr[0], N, V, 0);
        ids_for(pr[1], N, V, 7);
        float *ref[2] = {cold_logits(m, DSE_KV_F32, pr[0]), cold_logits(m, DSE_KV_F32, pr[1])};
        float *got[2] = {malloc((size_t)L * sizeof(float)), malloc((size_t)L * sizeof(float))};
        ASSERT_TRUE(ref[0] && ref[1]);
        struct tier_dir t;
        tier_dir_make(&t);
        struct dse_kv_cache *kv = cache_new(m, DSE_KV_F32, t.path, 0);
        ASSERT_TRUE(kv);
        ASSERT_OK(push_to_disk(m, kv, pr[0], 1));
        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_HOLD_READS);
        int a = dse_kv_seq_open(kv), b = dse_kv_seq_open(kv), zero = 0;
        ASSERT_EQ(dse_kv_seq_attach_prefix_start(kv, a, pr[0], N, 8), 0);
        ASSERT_ERR(dse_kv_seq_load_poll(kv, a), -EINPROGRESS);
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.n_used, 2); /* the blocks being filled are held */
        /* a step of the loading sequence is refused; the other one prefills and decodes */
        struct dse_diag diag = {{0}};
        struct dse_batch *batch = NULL;
        ASSERT_OK(dse_batch_new(m, kv, NULL, &batch, &diag));
        struct dse_batch_seq one = {a, pr[0], 1, got[0]};
        ASSERT_ERR(dse_batch_step(batch, &one, 1, &diag), -EBUSY);
        dse_batch_free(batch);
        ASSERT_OK(run(m, kv, 1, &b, &pr[1], &zero, &got[1]));
        ASSERT_TRUE(bit_equal(got[1], ref[1], L));
        ASSERT_ERR(dse_kv_seq_load_poll(kv, a), -EINPROGRESS);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_blocks_read, 0);
        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_NONE);
        int cached = load_finish(kv, a);
        ASSERT_EQ(cached, 2 * BT);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_blocks_read, 2);
        ASSERT_EQ(st.disk_hit_tokens, 2 * BT);
        ASSERT_OK(run(m, kv, 1, &a, &pr[0], &cached, &got[0]));
        ASSERT_TRUE(bit_equal(got[0], ref[0], L));
        dse_kv_seq_close(kv, a);
        dse_kv_seq_close(kv, b);
        /* cancelled while held: the blocks come back to the pool */
        ASSERT_OK(push_to_disk(m, kv, pr[0], 3));
        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_HOLD_READS);
        a = dse_kv_seq_open(kv);
        ASSERT_EQ(dse_kv_seq_attach_prefix_start(kv, a, pr[0], N, 8), 0);
        ASSERT_ERR(dse_kv_seq_load_poll(kv, a), -EINPROGRESS);
        dse_kv_seq_close(kv, a);
        ASSERT_EQ(dse_kv_cache_n_available(kv), POOL_BLOCKS);
        dse_kv_cache_free(kv); /* with the reader still held */
        tier_dir_remove(&t);
        for (int i = 0; i < 2; i++) {
                free(got[i]);
                free(ref[i]);
        }
        dse_model_free(m);
}

/* With the writer held and a queue of two, evictions beyond two are dropped and
 * counted while every step completes; released, the writer writes the two. */
TEST(full_writer_queue_drops_spills_and_never_blocks_a_step) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        struct tier_dir t;
        tier_dir_make(&t);
        struct dse_kv_cache *kv = cache_new_with(m, DSE_KV_F32, t.path, 0, 2, DSE_KV_DISK_FAULT_NONE);
        ASSERT_TRUE(kv);
        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_HOLD_WRITES);
        int32_t q[2][N];
        float *l[2] = {malloc((size_t)(NDEC + 1) * V * sizeof(float)), malloc((size_t)(NDEC + 1) * V * sizeof(float))};
        int zero[2] = {0, 0};
        /* each round's two prompts fill the pool's six blocks: round 1 evicts round 0's
         * two full blocks (queued), rounds 2 and 3 evict four each (dropped) */
        for (int round = 0; round < 4; round++) {
                int seq[2] = {dse_kv_seq_open(kv), dse_kv_seq_open(kv)};
                ids_for(q[0], N, V, 100 + 2 * round);
                ids_for(q[1], N, V, 101 + 2 * round);
                ASSERT_OK(run(m, kv, round == 0 ? 1 : 2, seq, q, zero, l));
                dse_kv_seq_close(kv, seq[0]);
                dse_kv_seq_close(kv, seq[1]);
        }
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_blocks_written, 0);
        ASSERT_EQ(st.disk_blocks_dropped, 8);
        dse_kv_cache_disk_set_fault(kv, DSE_KV_DISK_FAULT_NONE);
        dse_kv_cache_disk_flush(kv);
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_blocks_written, 2);
        ASSERT_EQ(st.disk_state, DSE_KV_DISK_ON);
        dse_kv_cache_free(kv);
        tier_dir_remove(&t);
        free(l[0]);
        free(l[1]);
        dse_model_free(m);
}

/* A tier that cannot be preallocated (ENOSPC) is refused with a message naming the file,
 * and the cache serves from the pool alone. */
TEST(disk_full_at_start_leaves_the_pool_serving) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m), L = (NDEC + 1) * V;
        int32_t p[N];
        ids_for(p, N, V, 0);
        float *ref = cold_logits(m, DSE_KV_F32, p), *got = malloc((size_t)L * sizeof(float));
        ASSERT_TRUE(ref);
        struct tier_dir t;
        tier_dir_make(&t);
        struct dse_kv_cache *kv = cache_new(m, DSE_KV_F32, NULL, 0);
        ASSERT_TRUE(kv);
        struct dse_diag diag = {{0}};
        struct dse_kv_disk_config cfg = {t.path, 1 << 20, 0, DSE_KV_DISK_FAULT_PREALLOC_ENOSPC};
        ASSERT_ERR(dse_kv_cache_attach_disk(kv, m, &cfg, &diag), -ENOSPC);
        ASSERT_TRUE(strstr(diag.msg, t.path) && strstr(diag.msg, "cannot preallocate"));
        struct dse_kv_stats st;
        dse_kv_cache_stats(kv, &st);
        ASSERT_EQ(st.disk_state, DSE_KV_DISK_NONE);
        for (int i = 0; i < 2; i++) { /* the second time from the pool's prefix cache */
                int seq = dse_kv_seq_open(kv);
                int cached = dse_kv_seq_attach_prefix(kv, seq, p, N);
                ASSERT_EQ(cached, i * 2 * BT);
                ASSERT_OK(run(m, kv, 1, &seq, (int32_t (*)[N])p, &cached, &got));
                ASSERT_TRUE(bit_equal(got, ref, L));
                dse_kv_seq_close(kv, seq);
        }
        dse_kv_cache_free(kv);
        tier_dir_remove(&t);
        free(ref);
        free(got);
        dse_model_free(m);
}

/* Blocks only in RAM are written back on request, at most as many as the tier holds,
 * and a new cache on the file serves them. */
TEST(write_back_keeps_ram_blocks_for_the_next_start) {
        struct dse_model *m = fixture_model_open("llama3-rope-gqa");
        ASSERT_TRUE(m);
        int V = dse_model_vocab_size(m);
        int32_t p[N];
        ids_for(p, N, V, 0);
        float *l = malloc((size_t)(NDEC + 1) * V * sizeof(float));
        struct tier_dir t;
        tier_dir_make(&t);
        for (int slots = 1; slots <= 64; slots += 63) {
                struct dse_kv_cache *kv = cache_new(m, DSE_KV_F32, t.path, slots);
                ASSERT_TRUE(kv);
                int seq = dse_kv_seq_open(kv), zero = 0;
                ASSERT_OK(run(m, kv, 1, &seq, (int32_t (*)[N])p, &zero, &l));
                dse_kv_seq_close(kv, seq);
                struct dse_kv_stats st;
                dse_kv_cache_stats(kv, &st);
                ASSERT_EQ(st.disk_blocks_written, 0);
                ASSERT_EQ(dse_kv_cache_disk_write_back(kv, 1000), (slots == 1 ? 1 : 2));
                dse_kv_cache_stats(kv, &st);
                ASSERT_EQ(st.disk_blocks_written, (slots == 1 ? 1 : 2));
                dse_kv_cache_free(kv);
                /* one slot keeps the most recently used block: the prefix's head (a closed
                 * sequence releases its tail first) */
                ASSERT_EQ(reopen_and_check(m, t.path, DSE_KV_F32, slots, p, &st), (slots == 1 ? BT : 2 * BT));
                tier_dir_remove(&t);
                tier_dir_make(&t);
        }
        tier_dir_remove(&t);
        free(l);
        dse_model_free(m);
}
