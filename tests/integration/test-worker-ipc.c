/* dsvisor-worker end to end over ipc:// on the llama3-rope-gqa fixture (no tokenizer:
 * token-id input): heartbeat, streaming, 8 concurrent requests equal to each alone
 * (greedy and seeded), cancel freeing the KV blocks, deadline, bad input codes with the
 * worker still serving, stats, SIGTERM drain, and death with the parent. */
#include <fcntl.h>
#include <sys/prctl.h>

#include "dse.h"
#include "t.h"
#include "worker-client.h"

static char url[512], fixture_dir[1024];
static pid_t worker_pid;
static struct wc client;

static int setup(void) {
        if (worker_pid > 0)
                return 0;
        const char *dir = wc_tmpdir();
        if (!dir)
                return -EIO;
        snprintf(url, sizeof url, "ipc://%s/w.sock", dir);
        snprintf(fixture_dir, sizeof fixture_dir, "%s/llama3-rope-gqa", t_fixture("models"));
        char *args[] = {"--model", fixture_dir, "--listen", url, "--n-ctx", "256", "--max-batch", "8",
                        "--token-budget", "64", "--kv-mem-mib", "4", "--instance", "t0", NULL};
        worker_pid = wc_spawn(args);
        if (worker_pid < 0 || wc_open(&client, url) < 0)
                return -EIO;
        return wc_wait_state(&client, "ready", 120);
}

__attribute__((destructor)) static void teardown(void) {
        if (worker_pid > 0) {
                kill(worker_pid, SIGKILL);
                waitpid(worker_pid, NULL, 0);
                wc_close(&client);
        }
}

static void prompt(int32_t *ids, int n, int salt) {
        for (int i = 0; i < n; i++)
                ids[i] = (int32_t)((i * 131 + 7 + salt * 57) % 512);
}

static struct wc_result res[WC_MAX_REQ];

TEST(heartbeat) {
        ASSERT_OK(setup());
        struct dsv_ipc_msg m = {.type = DSV_IPC_HEALTH};
        m.u.probe.seq = 4242;
        ASSERT_OK(wc_send(&client, &m));
        struct dsv_ipc_msg r;
        do /* skip late replies to wc_wait_state's probes */
                ASSERT_OK(wc_recv_type(&client, &r, DSV_IPC_HEALTH_REPLY, 5000));
        while (r.u.health.seq != 4242 && (dsv_ipc_msg_done(&r), 1));
        ASSERT_EQ(r.u.health.seq, 4242);
        ASSERT_STREQ(r.u.health.state, "ready");
        ASSERT_TRUE(r.u.health.uptime_s > 0);
        ASSERT_TRUE(r.u.health.boot_id > 0); /* how a gateway tells a restarted worker */
        dsv_ipc_msg_done(&r);
}

TEST(streaming_with_logprobs) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        int32_t ids[10];
        prompt(ids, 10, 0);
        struct dsv_ipc_msg m = wc_tokens_request(1, ids, 10, 20, 0, 0);
        m.u.request.logprobs = 3;
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 60), 1);
        ASSERT_STREQ(res[1].reason, "length");
        ASSERT_EQ(res[1].n_tokens, 20);
        ASSERT_EQ(res[1].n_logprobs, 3);
        ASSERT_TRUE(res[1].t_first < res[1].t_done);
}

static void concurrent_equals_alone(float temperature) {
        ASSERT_OK(setup());
        static const int lens[8] = {5, 17, 33, 9, 40, 3, 24, 12};
        int32_t ids[8][40];
        int32_t alone[8][16];
        for (int i = 0; i < 8; i++) {
                memset(res, 0, sizeof res);
                prompt(ids[i], lens[i], i);
                struct dsv_ipc_msg m = wc_tokens_request((uint64_t)(10 + i), ids[i], (size_t)lens[i], 16,
                                                         temperature, 500 + (uint64_t)i);
                ASSERT_OK(wc_send(&client, &m));
                ASSERT_EQ(wc_collect(&client, res, 1, 60), 1);
                ASSERT_EQ(res[10 + i].n_tokens, 16);
                memcpy(alone[i], res[10 + i].tokens, sizeof alone[i]);
        }
        memset(res, 0, sizeof res);
        for (int i = 0; i < 8; i++) {
                struct dsv_ipc_msg m = wc_tokens_request((uint64_t)(10 + i), ids[i], (size_t)lens[i], 16,
                                                         temperature, 500 + (uint64_t)i);
                ASSERT_OK(wc_send(&client, &m));
        }
        ASSERT_EQ(wc_collect(&client, res, 8, 120), 8);
        for (int i = 0; i < 8; i++) {
                ASSERT_STREQ(res[10 + i].reason, "length");
                ASSERT_EQ(res[10 + i].n_tokens, 16);
                for (int t = 0; t < 16; t++)
                        ASSERT_EQ(res[10 + i].tokens[t], alone[i][t]);
        }
}

TEST(eight_concurrent_equal_alone_greedy) {
        concurrent_equals_alone(0.0f);
}

TEST(eight_concurrent_equal_alone_seeded) {
        concurrent_equals_alone(0.9f);
}

static int stats(struct dsv_ipc_stats *ret) {
        return wc_stats(&client, 99, ret);
}

TEST(cancel_frees_blocks) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        int32_t ids[40];
        prompt(ids, 40, 3);
        struct dsv_ipc_msg m = wc_tokens_request(20, ids, 40, 200, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        /* wait for the first token, then cancel */
        while (res[20].n_tokens == 0 && !res[20].done) {
                struct dsv_ipc_msg x;
                if (wc_recv(&client, &x, 5000) < 0)
                        break;
                if (x.type == DSV_IPC_TOKEN && x.u.token.id == 20)
                        res[20].n_tokens++;
                dsv_ipc_msg_done(&x);
        }
        ASSERT_TRUE(res[20].n_tokens > 0);
        struct dsv_ipc_msg c = {.type = DSV_IPC_CANCEL};
        c.u.cancel_id = 20;
        ASSERT_OK(wc_send(&client, &c));
        ASSERT_EQ(wc_collect(&client, res, 1, 30), 1);
        ASSERT_STREQ(res[20].reason, "cancelled");
        ASSERT_TRUE(res[20].n_tokens < 200);
        struct dsv_ipc_stats st;
        ASSERT_OK(stats(&st));
        ASSERT_EQ(st.kv_blocks_used, 0);
        ASSERT_EQ(st.running, 0);
        ASSERT_TRUE(st.kv_blocks_total > 0);
        ASSERT_EQ(st.max_batch, 8);
        ASSERT_EQ(st.token_budget, 64);
        /* config.json: 2 layers of [k | v] rows, 2 kv heads of head_dim 32 (128 elements);
         * FP8/INT8 add a float scale per head of K and of V (4) */
        const char *kv = getenv("DSV_KV");
        int64_t row = !kv || !*kv || strcmp(kv, "bf16") == 0 ? 128 * 2 : strcmp(kv, "f32") == 0 ? 128 * 4 : 128 + 4 * 4;
        ASSERT_EQ(st.kv_bytes_per_token, 2 * row);
}

TEST(deadline) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        int32_t ids[8];
        prompt(ids, 8, 4);
        struct dsv_ipc_msg m = wc_tokens_request(21, ids, 8, 240, 0, 0);
        m.u.request.deadline_unix_ms = wc_realtime_ms() + 3;
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 30), 1);
        /* 240 tokens take longer than 3 ms even on this model: the request ends with
         * final "deadline" part way, or with deadline_exceeded if it arrived late */
        if (res[21].error)
                ASSERT_EQ(res[21].error, DSV_IPC_ERR_DEADLINE + 1);
        else
                ASSERT_STREQ(res[21].reason, "deadline");
        ASSERT_TRUE(res[21].n_tokens < 240);
        struct dsv_ipc_stats st;
        ASSERT_OK(stats(&st));
        ASSERT_EQ(st.kv_blocks_used, 0);
}

TEST(bad_input_keeps_serving) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        int32_t ids[300];
        prompt(ids, 300, 5);
        struct dsv_ipc_msg m = wc_tokens_request(30, ids, 0, 4, 0, 0); /* empty prompt */
        ASSERT_OK(wc_send(&client, &m));
        m = wc_tokens_request(31, ids, 300, 4, 0, 0); /* longer than n_ctx 256 */
        ASSERT_OK(wc_send(&client, &m));
        m = wc_tokens_request(32, ids, 10, 4, 0, 0);
        m.u.request.sampling.top_p = 0; /* decodes, but is not a valid top-p */
        ASSERT_OK(wc_send(&client, &m));
        m = wc_tokens_request(33, ids, 10, 4, 0, 0);
        m.u.request.input = DSV_IPC_INPUT_PROMPT; /* text on a model without a tokenizer */
        m.u.request.prompt = "hello";
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 4, 30), 4);
        ASSERT_EQ(res[30].error, DSV_IPC_ERR_INVALID_REQUEST + 1);
        ASSERT_EQ(res[31].error, DSV_IPC_ERR_PROMPT_TOO_LONG + 1);
        ASSERT_EQ(res[32].error, DSV_IPC_ERR_INVALID_REQUEST + 1);
        ASSERT_EQ(res[33].error, DSV_IPC_ERR_INVALID_REQUEST + 1);
        /* a known field of the wrong type, and garbage: protocol_error about the message */
        ASSERT_OK(wc_send_raw(&client, "{\"v\":1,\"type\":\"request\",\"id\":34,\"input\":\"tokens\",\"tokens\":[1,2],"
                                       "\"max_tokens\":\"many\"}"));
        ASSERT_EQ(wc_collect(&client, res, 1, 30), 1);
        ASSERT_EQ(res[0].error, DSV_IPC_ERR_PROTOCOL + 1);
        memset(&res[0], 0, sizeof res[0]);
        ASSERT_OK(wc_send_raw(&client, "\x01not json"));
        ASSERT_EQ(wc_collect(&client, res, 1, 30), 1);
        ASSERT_EQ(res[0].error, DSV_IPC_ERR_PROTOCOL + 1);
        /* unknown fields are ignored */
        ASSERT_OK(wc_send_raw(&client, "{\"v\":1,\"type\":\"request\",\"id\":35,\"input\":\"tokens\",\"tokens\":[1,2,3],"
                                       "\"max_tokens\":3,\"future_field\":{\"x\":[1]}}"));
        ASSERT_EQ(wc_collect(&client, res, 1, 30), 1);
        ASSERT_STREQ(res[35].reason, "length");
        ASSERT_EQ(res[35].n_tokens, 3);
}

/* SIGTERM with a request in flight: it completes, a new request is refused with
 * shutting_down, health says draining, and the worker exits 0. */
TEST(sigterm_drains) {
        const char *dir = wc_tmpdir();
        char u[512], fx[1024];
        snprintf(u, sizeof u, "ipc://%s/drain.sock", dir);
        snprintf(fx, sizeof fx, "%s/llama3-rope-gqa", t_fixture("models"));
        char *args[] = {"--model", fx, "--listen", u, "--n-ctx", "4096", "--grace-ms", "30000", NULL};
        pid_t pid = wc_spawn(args);
        struct wc c;
        ASSERT_OK(wc_open(&c, u));
        ASSERT_OK(wc_wait_state(&c, "ready", 120));
        struct wc_result *rr = calloc(WC_MAX_REQ, sizeof *rr);
        int32_t ids[8];
        prompt(ids, 8, 6);
        struct dsv_ipc_msg m = wc_tokens_request(1, ids, 8, 4000, 0, 0);
        ASSERT_OK(wc_send(&c, &m));
        ASSERT_OK(wc_recv_type(&c, &m, DSV_IPC_TOKEN, 10000));
        dsv_ipc_msg_done(&m);
        rr[1].n_tokens = 1;
        ASSERT_OK(kill(pid, SIGTERM));
        usleep(100 * 1000);
        m = wc_tokens_request(2, ids, 8, 4, 0, 0);
        ASSERT_OK(wc_send(&c, &m));
        ASSERT_EQ(wc_collect(&c, rr, 2, 60), 2);
        ASSERT_STREQ(rr[1].reason, "length");
        ASSERT_EQ(rr[1].n_tokens, 4000);
        ASSERT_EQ(rr[2].error, DSV_IPC_ERR_SHUTTING_DOWN + 1);
        ASSERT_TRUE(rr[2].t_done < rr[1].t_done); /* refused while request 1 was still running */
        int st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        free(rr);
        wc_close(&c);
}

/* A short grace period fails what is still running with shutting_down. */
TEST(sigterm_grace_expires) {
        const char *dir = wc_tmpdir();
        char u[512], fx[1024];
        snprintf(u, sizeof u, "ipc://%s/grace.sock", dir);
        snprintf(fx, sizeof fx, "%s/llama3-rope-gqa", t_fixture("models"));
        char *args[] = {"--model", fx, "--listen", u, "--n-ctx", "4096", "--grace-ms", "50", NULL};
        pid_t pid = wc_spawn(args);
        struct wc c;
        ASSERT_OK(wc_open(&c, u));
        ASSERT_OK(wc_wait_state(&c, "ready", 120));
        struct wc_result *rr = calloc(WC_MAX_REQ, sizeof *rr);
        int32_t ids[8];
        prompt(ids, 8, 7);
        struct dsv_ipc_msg m = wc_tokens_request(1, ids, 8, 4000, 0, 0);
        ASSERT_OK(wc_send(&c, &m));
        ASSERT_OK(wc_recv_type(&c, &m, DSV_IPC_TOKEN, 10000));
        dsv_ipc_msg_done(&m);
        ASSERT_OK(kill(pid, SIGTERM));
        ASSERT_EQ(wc_collect(&c, rr, 1, 30), 1);
        ASSERT_EQ(rr[1].error, DSV_IPC_ERR_SHUTTING_DOWN + 1);
        int st = wc_wait_exit(pid, 30);
        ASSERT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        free(rr);
        wc_close(&c);
}

/* An intermediate parent starts the worker and exits: the worker dies of SIGKILL (its
 * PDEATHSIG; leaving on its own would be exit status 1). We are the subreaper, so the
 * orphan is reparented to us and we can reap it. */
TEST(dies_with_parent) {
        ASSERT_OK(prctl(PR_SET_CHILD_SUBREAPER, 1));
        const char *dir = wc_tmpdir();
        char u[512], fx[1024];
        snprintf(u, sizeof u, "ipc://%s/orphan.sock", dir);
        snprintf(fx, sizeof fx, "%s/llama3-rope-gqa", t_fixture("models"));
        int pfd[2];
        ASSERT_OK(pipe(pfd));
        pid_t mid = fork();
        if (mid == 0) {
                /* nng is not fork-safe: this child only forks, execs and waits for the
                 * worker's socket file (created when it listens, before the model loads) */
                char *args[] = {"--model", fx, "--listen", u, "--n-ctx", "64", NULL};
                pid_t w = wc_spawn(args);
                if (write(pfd[1], &w, sizeof w) != sizeof w)
                        _exit(1);
                struct stat sb;
                for (int i = 0; i < 2000 && stat(u + strlen("ipc://"), &sb) < 0; i++)
                        usleep(10000);
                usleep(200 * 1000);
                _exit(kill(w, 0) == 0 ? 0 : 1);
        }
        pid_t w = 0;
        ASSERT_EQ(read(pfd[0], &w, sizeof w), (long long)sizeof w);
        int st;
        ASSERT_EQ(waitpid(mid, &st, 0), mid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* the worker was alive and listening */
        st = wc_wait_exit(w, 20);
        ASSERT_TRUE(st >= 0);
        ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        close(pfd[0]);
        close(pfd[1]);
}

/* --model-fd: the supervisor hands over an open native file (or memfd); the worker
 * serves the same tokens as when it opens the path itself. */
TEST(model_fd) {
        ASSERT_OK(setup());
        memset(res, 0, sizeof res);
        int32_t ids[12];
        prompt(ids, 12, 9);
        struct dsv_ipc_msg m = wc_tokens_request(40, ids, 12, 10, 0, 0);
        ASSERT_OK(wc_send(&client, &m));
        ASSERT_EQ(wc_collect(&client, res, 1, 60), 1);
        ASSERT_EQ(res[40].n_tokens, 10);

        char native[4096];
        ASSERT_OK(dse_model_resolve(fixture_dir, native, sizeof native, NULL));
        int fd = open(native, O_RDONLY); /* inherited by the worker: no O_CLOEXEC */
        ASSERT_TRUE(fd >= 0);
        char fdarg[16], u[512];
        snprintf(fdarg, sizeof fdarg, "%d", fd);
        snprintf(u, sizeof u, "ipc://%s/fd.sock", wc_tmpdir());
        char *args[] = {"--model-fd", fdarg, "--listen", u, "--n-ctx", "64", NULL};
        pid_t pid = wc_spawn(args);
        close(fd);
        struct wc c;
        ASSERT_OK(wc_open(&c, u));
        ASSERT_OK(wc_wait_state(&c, "ready", 60));
        struct wc_result *rr = calloc(WC_MAX_REQ, sizeof *rr);
        ASSERT_OK(wc_send(&c, &m));
        ASSERT_EQ(wc_collect(&c, rr, 1, 60), 1);
        ASSERT_EQ(rr[40].n_tokens, 10);
        for (int i = 0; i < 10; i++)
                ASSERT_EQ(rr[40].tokens[i], res[40].tokens[i]);
        kill(pid, SIGTERM);
        ASSERT_TRUE(wc_wait_exit(pid, 30) >= 0);
        free(rr);
        wc_close(&c);
}

/* Heartbeats are answered while the engine is busy: a 4000-token prompt is one long
 * prefill step, and a health probe sent right after it is answered before the
 * request's first token. */
TEST(heartbeat_during_long_step) {
        char u[512], fx[1024];
        snprintf(u, sizeof u, "ipc://%s/busy.sock", wc_tmpdir());
        snprintf(fx, sizeof fx, "%s/llama3-rope-gqa", t_fixture("models"));
        char *args[] = {"--model", fx, "--listen", u, "--n-ctx", "4096", "--max-batch", "1", "--token-budget",
                        "4096", NULL};
        pid_t pid = wc_spawn(args);
        struct wc c;
        ASSERT_OK(wc_open(&c, u));
        ASSERT_OK(wc_wait_state(&c, "ready", 120));
        static int32_t ids[4000];
        prompt(ids, 4000, 11);
        struct dsv_ipc_msg m = wc_tokens_request(1, ids, 4000, 2, 0, 0);
        ASSERT_OK(wc_send(&c, &m));
        usleep(20 * 1000);
        struct dsv_ipc_msg h = {.type = DSV_IPC_HEALTH};
        h.u.probe.seq = 777;
        ASSERT_OK(wc_send(&c, &h));
        int got_health = 0, got_token = 0;
        double t0 = bench_now_s();
        while (!got_token && bench_now_s() - t0 < 120) {
                struct dsv_ipc_msg r;
                if (wc_recv(&c, &r, 200) < 0)
                        continue;
                if (r.type == DSV_IPC_HEALTH_REPLY && r.u.health.seq == 777) {
                        got_health = 1;
                        ASSERT_STREQ(r.u.health.state, "ready");
                }
                if (r.type == DSV_IPC_TOKEN)
                        got_token = 1 + got_health; /* 2: the health reply came first */
                dsv_ipc_msg_done(&r);
        }
        ASSERT_EQ(got_token, 2);
        kill(pid, SIGKILL);
        wc_wait_exit(pid, 10);
        wc_close(&c);
}
