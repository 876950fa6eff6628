/* The worker's per-token path allocates nothing but nng's message.
 *
 * The real serve loop (worker_serve: receiver thread, inbox, scheduler steps, the
 * fixed-buffer event encoder and the per-step batch) runs on a thread of this process
 * over ipc:// (a private 0700 directory, as in production) on the llama3-rope-gqa
 * fixture, while a client in the test thread keeps four streams decoding. malloc,
 * calloc, realloc and the aligned allocators are interposed; while the window is open,
 * calls made on the worker's loop thread are counted, those inside nng_send (wrapped
 * with -Wl,--wrap=nng_send) apart from the rest. The loop thread opens the window
 * itself as the third engine step of all four streams decoding starts and closes it
 * WINDOW_STEPS steps later (dse_batch_step wrapped too), so the window holds exactly
 * WINDOW_STEPS whole loop iterations of pure decoding: inbox, scheduler, engine,
 * sampling, event encoding, the send. In them the rest must be zero, there must be exactly one nng
 * message per step, and what nng allocates per step must not exceed what one nng_send
 * of a 2 KiB message costs, measured in the same run. The other threads' counts (the
 * client decoding with cJSON, nng's I/O threads) are only printed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "t.h"
#include "worker.h"

/* ---- counting ----------------------------------------------------------------------- */

static _Thread_local int tl_loop;   /* this thread runs worker_serve */
static _Thread_local int tl_in_nng; /* inside nng_send */
static _Thread_local int tl_probe;  /* the reference nng_send of the test thread */
static _Thread_local int tl_client; /* the test thread, the worker's peer */
#define N_STREAMS 4
static atomic_int window;
static atomic_long n_other, n_nng, n_sends, n_client, n_io, n_probe;

static inline void count(void) {
        if (tl_probe)
                atomic_fetch_add_explicit(&n_probe, 1, memory_order_relaxed);
        if (!atomic_load_explicit(&window, memory_order_relaxed))
                return;
        if (tl_loop)
                atomic_fetch_add_explicit(tl_in_nng ? &n_nng : &n_other, 1, memory_order_relaxed);
        else
                atomic_fetch_add_explicit(tl_client ? &n_client : &n_io, 1, memory_order_relaxed);
}

#ifndef __SANITIZE_ADDRESS__ /* ASan brings its own allocator: nothing to interpose then */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

void *malloc(size_t n) {
        count();
        return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
        count();
        return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
        count();
        return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n) {
        count();
        return __libc_memalign(align, n);
}

int posix_memalign(void **ret, size_t align, size_t n) {
        count();
        void *p = __libc_memalign(align, n);
        if (!p)
                return ENOMEM;
        *ret = p;
        return 0;
}
#define COUNTING 1
#else
#define COUNTING 0
#endif

#define WINDOW_STEPS 60

/* Decode steps of all N_STREAMS so far, counted on the loop thread. The window opens as
 * the third such step starts (the requests have all been added: sched_add's per-request
 * buffers are not the per-token path) and closes WINDOW_STEPS steps later. */
static long n_decode_steps;

int __real_dse_batch_step(struct dse_batch *b, const struct dse_batch_seq *seqs, size_t n_seqs,
                          struct dse_diag *reterr);
int __wrap_dse_batch_step(struct dse_batch *b, const struct dse_batch_seq *seqs, size_t n_seqs,
                          struct dse_diag *reterr) {
        int decode = n_seqs == N_STREAMS;
        for (size_t i = 0; i < n_seqs; i++)
                decode &= seqs[i].n_tokens == 1;
        if (decode || n_decode_steps > 0)
                n_decode_steps++;
        if (n_decode_steps == 3)
                atomic_store(&window, 1);
        else if (n_decode_steps == 3 + WINDOW_STEPS)
                atomic_store(&window, 0);
        return __real_dse_batch_step(b, seqs, n_seqs, reterr);
}

int __real_nng_send(nng_socket s, void *data, size_t size, int flags);
int __wrap_nng_send(nng_socket s, void *data, size_t size, int flags) {
        if (tl_loop && atomic_load(&window))
                atomic_fetch_add(&n_sends, 1);
        int was = tl_in_nng;
        tl_in_nng = 1;
        int rv = __real_nng_send(s, data, size, flags);
        tl_in_nng = was;
        return rv;
}

/* ---- the worker on a thread ---------------------------------------------------------- */

static char url[320];

static struct worker_config cfg;
static atomic_int worker_status = -1; /* its exit status once worker_serve returned */

static void *worker_thread(void *arg) {
        (void)arg;
        tl_loop = 1;
        atomic_store(&worker_status, worker_serve(&cfg));
        return NULL;
}

/* What one nng_send of a len-byte message costs in allocations, on a fresh ipc pair. */
static long nng_send_cost(const char *ref_url, size_t len) {
        nng_socket a, b;
        if (nng_pair1_open(&a) || nng_pair1_open(&b) || nng_listen(a, ref_url, NULL, 0) || nng_dial(b, ref_url, NULL, 0))
                return -1;
        char *buf = calloc(1, len);
        long cost = -1;
        for (int i = 0; i < 3; i++) { /* the last of three: no first-use effects */
                atomic_store(&n_probe, 0);
                tl_probe = 1;
                int rv = __real_nng_send(b, buf, len, 0);
                tl_probe = 0;
                cost = rv == 0 ? atomic_load(&n_probe) : -1;
                char *m;
                size_t n;
                if (nng_recv(a, &m, &n, NNG_FLAG_ALLOC) == 0)
                        nng_free(m, n);
        }
        free(buf);
        nng_close(a);
        nng_close(b);
        return cost;
}

TEST(per_token_path_allocates_only_nng_messages) {
        char cache[] = "/tmp/test-worker-alloc.XXXXXX", model[1024], ref_url[320];
        ASSERT_TRUE(mkdtemp(cache) != NULL); /* 0700: the socket directory too */
        setenv("DSV_CACHE_DIR", cache, 1);
        snprintf(url, sizeof url, "ipc://%s/w.sock", cache);
        snprintf(ref_url, sizeof ref_url, "ipc://%s/ref.sock", cache);
        tl_client = 1;
        snprintf(model, sizeof model, "%s", t_fixture("models/llama3-rope-gqa"));
        cfg = (struct worker_config){.model_path = model, .model_fd = -1, .listen_url = url, .n_threads = 1,
                                     .n_ctx = 256, .max_batch = N_STREAMS, .token_budget = 64, .kv_mem_mib = 4,
                                     .grace_ms = 10000, .max_queue = 16, .instance = "alloc"};
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, worker_thread, NULL), 0);
        struct dsv_ipc_conn *c;
        ASSERT_OK(dsv_ipc_dial(url, &c));
        /* The worker says "ready" on its own (health_reply seq 0); ask too. */
        int ready = 0;
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (t = t0; !ready && atomic_load(&worker_status) < 0 && t.tv_sec - t0.tv_sec < 120;
             clock_gettime(CLOCK_MONOTONIC, &t)) {
                struct dsv_ipc_msg probe = {.type = DSV_IPC_HEALTH, .u.probe.seq = 1}, r;
                dsv_ipc_send(c, &probe);
                if (dsv_ipc_recv(c, &r, 100, NULL, 0) == 0) {
                        ready = r.type == DSV_IPC_HEALTH_REPLY && !strcmp(r.u.health.state, "ready");
                        dsv_ipc_msg_done(&r);
                }
        }
        ASSERT_TRUE(ready);

        /* Four streams with every sampling feature and logprobs on one: greedy,
         * temperature, top-k + top-p + min-p, penalties. */
        int32_t prompt[24];
        for (int i = 0; i < 24; i++)
                prompt[i] = (int32_t)((i * 131 + 7) % 512);
        for (int s = 0; s < N_STREAMS; s++) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
                struct dsv_ipc_request *q = &m.u.request;
                q->id = (uint64_t)s + 1;
                q->input = DSV_IPC_INPUT_TOKENS;
                q->tokens = prompt;
                q->n_tokens = (size_t)(12 + 3 * s);
                q->max_tokens = 200;
                dsv_ipc_sampling_init(&q->sampling);
                q->sampling.temperature = s == 0 ? 0.0f : 0.8f;
                q->sampling.seed = 42;
                q->sampling.has_seed = 1;
                q->sampling.top_k = s == 2 ? 40 : 0;
                q->sampling.top_p = s == 2 ? 0.9f : 1.0f;
                q->sampling.min_p = s == 2 ? 0.05f : 0.0f;
                q->sampling.repetition_penalty = s == 3 ? 1.3f : 1.0f;
                q->sampling.frequency_penalty = s == 3 ? 0.5f : 0.0f;
                q->logprobs = s == 3 ? 5 : 0;
                ASSERT_OK(dsv_ipc_send(c, &m));
        }

        /* Receive until every stream has ended; the loop thread opens and closes the
         * window on its own. */
        int tokens[N_STREAMS + 1] = {0}, ended = 0;
        while (ended < N_STREAMS) {
                struct dsv_ipc_msg m;
                ASSERT_OK(dsv_ipc_recv(c, &m, 10000, NULL, 0));
                if (m.type == DSV_IPC_TOKEN && m.u.token.id >= 1 && m.u.token.id <= N_STREAMS)
                        tokens[m.u.token.id]++;
                else if (m.type == DSV_IPC_FINAL || m.type == DSV_IPC_ERROR) {
                        ASSERT_TRUE(m.type == DSV_IPC_FINAL); /* no request may fail */
                        ended++;
                }
                dsv_ipc_msg_done(&m);
        }
        for (int s = 1; s <= N_STREAMS; s++)
                ASSERT_EQ(tokens[s], 200); /* still decoding through the whole window */
        long sends = atomic_load(&n_sends), nng = atomic_load(&n_nng), other = atomic_load(&n_other);
        long cost = nng_send_cost(ref_url, 2048);
        fprintf(stderr,
                "  window: %d decode steps of %d streams; loop thread: %ld allocations outside nng, "
                "%ld nng messages, %ld allocations inside nng_send (%.2f per message; one nng_send of 2 KiB "
                "costs %ld here); the client's decoding %ld, nng's I/O threads %ld\n",
                WINDOW_STEPS, N_STREAMS, other, sends, nng, sends ? (double)nng / (double)sends : 0.0,
                cost, atomic_load(&n_client), atomic_load(&n_io));
        ASSERT_EQ(sends, WINDOW_STEPS); /* one message per step */
        if (COUNTING) {
                ASSERT_EQ(other, 0);                  /* encoding and batching allocate nothing */
                ASSERT_TRUE(cost >= 1);
                ASSERT_TRUE(nng >= sends);            /* nng allocates its message ... */
                ASSERT_TRUE(nng <= sends * cost);     /* ... and nothing beyond what a send costs */
        }

        hygiene_drain_requested = 1; /* the loop drains (nothing in flight) and returns */
        pthread_join(th, NULL);
        ASSERT_EQ(atomic_load(&worker_status), 0);
        dsv_ipc_close(c);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
        ASSERT_EQ(system(cmd), 0);
        if (!COUNTING)
                T_SKIP("ASan brings its own allocator: the loop ran, its allocations were not counted");
}
