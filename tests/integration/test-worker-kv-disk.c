/* dsvisor-worker with --kv-disk over ipc:// on the llama3-rope-gqa fixture: a prompt
 * pushed out of a small RAM pool by other prompts, then served by a restarted worker
 * from the disk tier, gives the tokens and logprobs of its cold run and reports its
 * cached prompt tokens in final; stats carry the tier's counters; bad tier options stop
 * the worker with a message. */
#include "dse.h"
#include "t.h"
#include "worker-client.h"

#define N_PROMPT 100 /* six full blocks of 16 and 4 tokens */
#define N_OUT 8

static char fixture_dir[1024];
static struct wc_result res[WC_MAX_REQ];

static void prompt(int32_t *ids, int n, int salt) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i * 131 + 7 + salt * 57) % 512);
}

struct worker {
        pid_t pid;
        struct wc c;
        char url[512];
};

/* A worker with a 1 MiB pool (128 blocks of this fixture) and a 1 GiB tier in dir. */
static int worker_start(struct worker *w, const char *dir, const char *sock) {
        snprintf(fixture_dir, sizeof fixture_dir, "%s/llama3-rope-gqa", t_fixture("models"));
        snprintf(w->url, sizeof w->url, "ipc://%s/%s", wc_tmpdir(), sock);
        char *args[] = {"--model", fixture_dir, "--listen", w->url, "--n-ctx", "256", "--kv-mem-mib", "1",
                        "--kv-disk", (char *)dir, "--kv-disk-gib", "1", "--instance", "t0", NULL};
        w->pid = wc_spawn(args);
        if (w->pid < 0 || wc_open(&w->c, w->url) < 0)
                return -EIO;
        return wc_wait_state(&w->c, "ready", 120);
}

static int worker_stop(struct worker *w) {
        kill(w->pid, SIGTERM);
        int st = wc_wait_exit(w->pid, 60);
        wc_close(&w->c);
        return st;
}

static int run_one(struct worker *w, uint64_t id, const int32_t *ids, int n, int max_tokens) {
        struct dsv_ipc_msg m = wc_tokens_request(id, ids, (size_t)n, max_tokens, 0, 1);
        m.u.request.logprobs = 2;
        memset(&res[id], 0, sizeof res[id]);
        if (wc_send(&w->c, &m) < 0)
                return -EIO;
        return wc_collect(&w->c, res, 1, 60) == 1 && res[id].reason[0] ? 0 : -ETIMEDOUT;
}

TEST(restarted_worker_serves_prefix_from_disk_as_cold) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/tier", wc_tmpdir());
        ASSERT_OK(mkdir(dir, 0700));
        struct worker w;
        ASSERT_OK(worker_start(&w, dir, "a.sock"));
        int32_t p[N_PROMPT], other[250];
        prompt(p, N_PROMPT, 0);
        ASSERT_OK(run_one(&w, 1, p, N_PROMPT, N_OUT));
        ASSERT_EQ(res[1].n_tokens, N_OUT);
        ASSERT_EQ(res[1].cached_tokens, 0);
        struct wc_result cold = res[1];
        /* the same prompt again: its blocks are in the pool */
        ASSERT_OK(run_one(&w, 2, p, N_PROMPT, N_OUT));
        ASSERT_EQ(res[2].cached_tokens, 96);
        /* ten prompts of 250 tokens (15 full blocks each) push it out of the 128 blocks */
        for (int i = 0; i < 10; i++) {
                prompt(other, 250, 1 + i);
                ASSERT_OK(run_one(&w, 3, other, 250, 1));
        }
        struct dsv_ipc_stats st;
        ASSERT_OK(wc_stats(&w.c, 77, &st));
        ASSERT_TRUE(st.kv_disk_bytes_capacity > 0);
        ASSERT_TRUE(st.kv_disk_blocks_written >= 6);
        ASSERT_TRUE(st.kv_disk_bytes_used > 0);
        ASSERT_TRUE(!st.kv_disk_failed);
        int status = worker_stop(&w);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        ASSERT_OK(worker_start(&w, dir, "b.sock"));
        ASSERT_OK(run_one(&w, 4, p, N_PROMPT, N_OUT));
        ASSERT_EQ(res[4].cached_tokens, 96);
        ASSERT_EQ(res[4].n_tokens, N_OUT);
        for (int t = 0; t < N_OUT; t++) {
                ASSERT_EQ(res[4].tokens[t], cold.tokens[t]);
                ASSERT_TRUE(res[4].logprob[t] == cold.logprob[t]);
        }
        ASSERT_OK(wc_stats(&w.c, 77, &st));
        ASSERT_EQ(st.prefix_disk_hit_tokens, 96);
        ASSERT_EQ(st.kv_disk_blocks_read, 6);
        ASSERT_EQ(st.prefix_hit_tokens, 96);
        status = worker_stop(&w);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        char path[400];
        snprintf(path, sizeof path, "%s/t0.kvtier", dir);
        ASSERT_OK(unlink(path));
        snprintf(path, sizeof path, "%s/t0.kvtier.index", dir);
        ASSERT_OK(unlink(path));
        ASSERT_OK(rmdir(dir));
}

TEST(bad_tier_options_stop_the_worker) {
        char url[512], missing[300];
        snprintf(fixture_dir, sizeof fixture_dir, "%s/llama3-rope-gqa", t_fixture("models"));
        snprintf(url, sizeof url, "ipc://%s/c.sock", wc_tmpdir());
        snprintf(missing, sizeof missing, "%s/no-such-dir", wc_tmpdir());
        char *no_size[] = {"--model", fixture_dir, "--listen", url, "--kv-disk", missing, NULL};
        pid_t pid = wc_spawn(no_size);
        int st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        char *no_dir[] = {"--model", fixture_dir, "--listen", url, "--kv-disk", missing, "--kv-disk-gib", "1", NULL};
        pid = wc_spawn(no_dir);
        st = wc_wait_exit(pid, 60);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

/* A prompt served once stays in the pool only; a graceful stop writes its blocks to the
 * tier, so the restarted worker reads them back and answers as before. */
TEST(graceful_stop_writes_ram_blocks_to_the_tier) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/tier-wb", wc_tmpdir());
        ASSERT_OK(mkdir(dir, 0700));
        struct worker w;
        ASSERT_OK(worker_start(&w, dir, "d.sock"));
        int32_t p[N_PROMPT];
        prompt(p, N_PROMPT, 5);
        ASSERT_OK(run_one(&w, 1, p, N_PROMPT, N_OUT));
        struct wc_result cold = res[1];
        struct dsv_ipc_stats st;
        ASSERT_OK(wc_stats(&w.c, 77, &st));
        ASSERT_EQ(st.kv_disk_blocks_written, 0);
        int status = worker_stop(&w);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_OK(worker_start(&w, dir, "e.sock"));
        ASSERT_OK(run_one(&w, 2, p, N_PROMPT, N_OUT));
        ASSERT_EQ(res[2].cached_tokens, 96);
        for (int t = 0; t < N_OUT; t++) {
                ASSERT_EQ(res[2].tokens[t], cold.tokens[t]);
                ASSERT_TRUE(res[2].logprob[t] == cold.logprob[t]);
        }
        ASSERT_OK(wc_stats(&w.c, 77, &st));
        ASSERT_EQ(st.kv_disk_blocks_read, 6);
        status = worker_stop(&w);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        char path[400];
        snprintf(path, sizeof path, "%s/t0.kvtier", dir);
        ASSERT_OK(unlink(path));
        snprintf(path, sizeof path, "%s/t0.kvtier.index", dir);
        ASSERT_OK(unlink(path));
        ASSERT_OK(rmdir(dir));
}

/* A disk full when the tier is preallocated (injected ENOSPC): the worker starts
 * without the tier and serves. */
TEST(disk_full_at_start_serves_without_the_tier) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/tier-full", wc_tmpdir());
        ASSERT_OK(mkdir(dir, 0700));
        setenv("DSV_TEST_KV_DISK_FAULT", "prealloc-enospc", 1);
        struct worker w;
        int r = worker_start(&w, dir, "f.sock");
        unsetenv("DSV_TEST_KV_DISK_FAULT");
        ASSERT_OK(r);
        int32_t p[N_PROMPT];
        prompt(p, N_PROMPT, 6);
        ASSERT_OK(run_one(&w, 1, p, N_PROMPT, N_OUT));
        ASSERT_EQ(res[1].n_tokens, N_OUT);
        struct dsv_ipc_stats st;
        ASSERT_OK(wc_stats(&w.c, 77, &st));
        ASSERT_EQ(st.kv_disk_bytes_capacity, 0);
        int status = worker_stop(&w);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        char path[400];
        snprintf(path, sizeof path, "%s/t0.kvtier", dir);
        unlink(path);
        ASSERT_OK(rmdir(dir));
}
