#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dse.h"
#include "t.h"

struct sum_ctx {
        const uint32_t *v;
        uint64_t partial[64];
};

static void sum_rows(void *arg, size_t begin, size_t end, int ith) {
        struct sum_ctx *c = arg;
        uint64_t s = 0;
        for (size_t i = begin; i < end; i++)
                s += c->v[i];
        c->partial[ith] += s;
}

TEST(parallel_for_matches_serial) {
        static uint32_t v[10007];
        uint64_t seed = 42;
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                v[i] = (uint32_t)(seed >> 40);
        }
        for (int nt = 1; nt <= 5; nt++) {
                struct dse_pool *pool;
                ASSERT_OK(dse_pool_new(nt, NULL, 0, &pool));
                size_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 10007};
                for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                        for (int rep = 0; rep < 20; rep++) {
                                struct sum_ctx c = {.v = v};
                                dse_pool_parallel_for(pool, sizes[s], sum_rows, &c);
                                uint64_t got = 0, want = 0;
                                for (int t = 0; t < nt; t++)
                                        got += c.partial[t];
                                for (size_t i = 0; i < sizes[s]; i++)
                                        want += v[i];
                                ASSERT_EQ(got, want);
                        }
                }
                dse_pool_free(pool);
        }
}

struct barrier_ctx {
        struct dse_pool *pool;
        _Atomic int phase1;
        int seen_incomplete;
};

static void barrier_task(void *arg, int ith, int nth) {
        struct barrier_ctx *c = arg;
        for (int round = 0; round < 50; round++) {
                atomic_fetch_add(&c->phase1, 1);
                dse_pool_barrier(c->pool);
                if (atomic_load(&c->phase1) < (round + 1) * nth)
                        c->seen_incomplete = 1;
                dse_pool_barrier(c->pool);
        }
}

TEST(barrier_orders_phases) {
        for (int nt = 1; nt <= 4; nt++) {
                struct barrier_ctx c = {0};
                ASSERT_OK(dse_pool_new(nt, NULL, 0, &c.pool));
                dse_pool_run(c.pool, barrier_task, &c);
                ASSERT_EQ(c.seen_incomplete, 0);
                ASSERT_EQ(atomic_load(&c.phase1), 50 * nt);
                dse_pool_free(c.pool);
        }
}

/* dse_pool_run_shared: pieces claimed from a counter are each done exactly once, the
 * call returns only when no thread is inside (no piece is done after it returns, or
 * the counts below would race), and shared runs interleave with ordinary runs and
 * barriers. 4 threads on this machine's 2 CPUs make late joiners common. */
#define PIECES 257

struct shared_ctx {
        _Atomic int next;
        _Atomic int done[PIECES];
        _Atomic int threads_seen[8];
};

static void shared_task(void *arg, int ith, int nth) {
        struct shared_ctx *c = arg;
        (void)nth;
        atomic_fetch_add(&c->threads_seen[ith], 1);
        int p;
        while ((p = atomic_fetch_add(&c->next, 1)) < PIECES)
                atomic_fetch_add(&c->done[p], 1);
}

TEST(run_shared_does_every_piece_once) {
        for (int nt = 1; nt <= 4; nt++) {
                struct dse_pool *pool;
                ASSERT_OK(dse_pool_new(nt, NULL, 0, &pool));
                static struct shared_ctx c;
                static struct barrier_ctx b;
                for (int round = 0; round < 500; round++) {
                        memset(&c, 0, sizeof c);
                        dse_pool_run_shared(pool, shared_task, &c);
                        for (int p = 0; p < PIECES; p++)
                                if (atomic_load(&c.done[p]) != 1)
                                        T_FAIL("threads %d round %d: piece %d done %d times", nt, round, p,
                                               atomic_load(&c.done[p]));
                        ASSERT_EQ(atomic_load(&c.threads_seen[0]), 1); /* the caller always runs it */
                        for (int t = 0; t < nt; t++)
                                ASSERT_TRUE(atomic_load(&c.threads_seen[t]) <= 1);
                        if (round % 100 == 0) { /* an ordinary run with barriers still sees every thread */
                                memset(&b, 0, sizeof b);
                                b.pool = pool;
                                dse_pool_run(pool, barrier_task, &b);
                                ASSERT_EQ(b.seen_incomplete, 0);
                                ASSERT_EQ(atomic_load(&b.phase1), 50 * nt);
                        }
                }
                dse_pool_free(pool);
        }
}

static double cpu_seconds(void) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void noop(void *ctx, size_t b, size_t e, int ith) {}

TEST(idle_pool_blocks) {
        struct dse_pool *pool;
        ASSERT_OK(dse_pool_new(4, NULL, 0, &pool));
        dse_pool_parallel_for(pool, 100, noop, NULL); /* wake everyone once */
        usleep(20 * 1000);                             /* let the bounded spin run out */
        double before = cpu_seconds();
        usleep(200 * 1000);
        double used = cpu_seconds() - before;
        dse_pool_free(pool);
        /* 3 spinning threads would burn ~0.6 s of CPU in 200 ms; blocked ones ~0. */
        if (used > 0.01)
                T_FAIL("idle pool used %.3f s CPU in 0.2 s", used);
}

struct cpu_ctx {
        int cpu_of[8];
};

static void where_am_i(void *arg, int ith, int nth) {
        struct cpu_ctx *c = arg;
        c->cpu_of[ith] = sched_getcpu();
}

TEST(pinning_puts_threads_on_requested_cpus) {
        cpu_set_t orig;
        ASSERT_OK(sched_getaffinity(0, sizeof orig, &orig));
        int n_cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
        int cpus[4];
        for (int i = 0; i < 4; i++)
                cpus[i] = (n_cpus - 1 - i % n_cpus + n_cpus) % n_cpus; /* last CPU first */
        struct dse_pool *pool;
        ASSERT_OK(dse_pool_new(4, cpus, 4, &pool));
        int tids[4];
        ASSERT_EQ(dse_pool_tids(pool, tids, 4), 4);
        for (int i = 0; i < 4; i++) {
                cpu_set_t set;
                ASSERT_OK(sched_getaffinity(tids[i], sizeof set, &set));
                ASSERT_EQ(CPU_COUNT(&set), 1);
                ASSERT_TRUE(CPU_ISSET(cpus[i], &set));
        }
        for (int rep = 0; rep < 5; rep++) {
                struct cpu_ctx c;
                dse_pool_run(pool, where_am_i, &c);
                for (int i = 0; i < 4; i++)
                        ASSERT_EQ(c.cpu_of[i], cpus[i]);
        }
        dse_pool_free(pool);
        sched_setaffinity(0, sizeof orig, &orig);
}

TEST(bad_arguments) {
        struct dse_pool *pool;
        ASSERT_ERR(dse_pool_new(0, NULL, 0, &pool), -EINVAL);
        int cpus[1] = {0};
        ASSERT_ERR(dse_pool_new(2, cpus, 0, &pool), -EINVAL);
        dse_pool_free(NULL);
}

/* Busy for about 2 ms of CPU on every thread that runs it. */
static void spin_2ms(void *arg, int ith, int nth) {
        (void)arg;
        (void)ith;
        (void)nth;
        struct timespec t0, t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        do
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000L);
}

static const struct dse_pool_phase_timing *phase_named(const struct dse_pool_phase_timing *ph, int n,
                                                      const char *label) {
        for (int i = 0; i < n; i++)
                if (strcmp(ph[i].label, label) == 0)
                        return &ph[i];
        return NULL;
}

/* The call accounting counts each call under the label set before it, the inline runs
 * of a 1-thread pool included, with every thread's task time of dse_pool_run; nothing
 * while stopped, and a restart clears the counts. */
TEST(timing_counts_calls_by_label) {
        for (int nt = 1; nt <= 3; nt += 2) {
                struct dse_pool *pool;
                ASSERT_OK(dse_pool_new(nt, NULL, 0, &pool));
                dse_pool_run(pool, spin_2ms, NULL); /* not counted: timing is off */
                dse_pool_timing_start(pool);
                dse_pool_label(pool, "spin");
                for (int i = 0; i < 3; i++)
                        dse_pool_run(pool, spin_2ms, NULL);
                dse_pool_label(pool, NULL);
                struct sum_ctx c = {.v = (const uint32_t[5]){1, 2, 3, 4, 5}};
                dse_pool_parallel_for(pool, 5, sum_rows, &c);
                dse_pool_timing_stop(pool);
                dse_pool_run(pool, spin_2ms, NULL); /* stopped: not counted */
                struct dse_pool_phase_timing ph[DSE_POOL_TIMING_PHASES];
                ASSERT_EQ(dse_pool_timing_read(pool, ph, DSE_POOL_TIMING_PHASES), 2);
                const struct dse_pool_phase_timing *spin = phase_named(ph, 2, "spin"),
                                                   *other = phase_named(ph, 2, "other");
                ASSERT_TRUE(spin && other);
                ASSERT_EQ(spin->calls, 3);
                ASSERT_EQ(other->calls, 1);
                ASSERT_EQ(spin->threads_absent, 0);
                ASSERT_TRUE(spin->task_cpu_ns >= (uint64_t)nt * 3 * 2000000u);
                ASSERT_TRUE(spin->task_cpu_max_ns >= 3 * 2000000u && spin->task_cpu_max_ns <= spin->task_cpu_ns);
                ASSERT_TRUE(spin->task_wall_ns >= spin->task_cpu_ns && spin->wall_ns >= 3 * 2000000u);
                ASSERT_TRUE(spin->caller_cpu_ns >= 3 * 2000000u);
                /* after a pause far longer than the spin, the helpers are woken from a futex */
                dse_pool_timing_start(pool);
                ASSERT_EQ(dse_pool_timing_read(pool, ph, DSE_POOL_TIMING_PHASES), 0);
                usleep(300000);
                dse_pool_label(pool, "after a pause");
                dse_pool_run(pool, spin_2ms, NULL);
                ASSERT_EQ(dse_pool_timing_read(pool, ph, DSE_POOL_TIMING_PHASES), 1);
                ASSERT_EQ(ph[0].threads_woken, (uint64_t)nt - 1);
                ASSERT_TRUE((ph[0].start_delay_ns > 0) == (nt > 1));
                dse_pool_free(pool);
        }
}
