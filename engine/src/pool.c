/* Fixed thread pool with static chunking and futex-based idling.
 *
 * Idle threads spin for a bounded number of pause instructions (a decode step's gap is
 * usually shorter than a futex round-trip) and then block in futex_wait: a pool that
 * spins unbounded would starve every normal thread on its CPU under SCHED_FIFO. A
 * sleeper count lets the caller skip the futex_wake syscall when nobody sleeps. */
#include <immintrin.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define SPIN_ITERS 20000  /* ~50-100 us of pause before blocking */

struct dse_pool;

struct pool_thread {
        struct dse_pool *pool;
        pthread_t handle;
        int ith;
        int cpu;     /* -1: not pinned */
        int tid;
        int slept; /* blocked in futex_wait before its current task */
        /* timing: this thread's time inside the task of call number task_call, and
         * when it entered it */
        uint32_t task_call;
        uint64_t task_cpu_ns, task_wall_ns, task_start_ns;
};

struct dse_pool {
        int n_threads;
        struct pool_thread *threads;

        dse_pool_task_fn task;
        void *task_ctx;
        int task_shared;             /* started by dse_pool_run_shared */
        _Atomic uint32_t generation; /* bumped to start a task */
        _Atomic uint32_t open_gen;   /* generation of the task threads may still enter, 0: closed */
        _Atomic uint32_t n_inside;   /* worker threads that entered (or are checking) the task */
        _Atomic uint32_t n_done;     /* worker threads (1..n-1) finished with the task */
        _Atomic uint32_t n_sleeping; /* threads blocked (or about to block) in futex_wait */
        _Atomic int stop;

        _Atomic uint32_t barrier_count;
        _Atomic uint32_t barrier_gen;

        /* call timing (dse_pool_timing_start): written by the caller between calls only */
        int timing;
        uint32_t timing_call; /* numbers the timed calls, from 1 */
        const char *label;
        int n_phases;
        struct dse_pool_phase_timing phases[DSE_POOL_TIMING_PHASES];
};

static uint64_t clock_ns(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs the task on thread t, timing it when the pool times its calls. */
static void run_task(struct dse_pool *pool, struct pool_thread *t, dse_pool_task_fn fn, void *ctx) {
        if (!pool->timing) {
                fn(ctx, t->ith, pool->n_threads);
                return;
        }
        uint64_t w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        fn(ctx, t->ith, pool->n_threads);
        t->task_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        t->task_wall_ns = clock_ns(CLOCK_MONOTONIC) - w0;
        t->task_start_ns = w0;
        t->task_call = pool->timing_call;
}

/* The caller's clocks at the start of a call. */
struct call_clock {
        uint64_t wall0, cpu0;
};

static void call_begin(struct dse_pool *pool, struct call_clock *c) {
        if (!pool->timing)
                return;
        pool->timing_call++;
        c->wall0 = clock_ns(CLOCK_MONOTONIC);
        c->cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* Adds a finished call to its label's sums; every thread that ran the task has stamped
 * its slot before the caller saw it finish. */
static void call_end(struct dse_pool *pool, const struct call_clock *c) {
        if (!pool->timing)
                return;
        uint64_t wall = clock_ns(CLOCK_MONOTONIC) - c->wall0, cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c->cpu0;
        const char *label = pool->label ? pool->label : "other";
        int i = 0;
        while (i < pool->n_phases && strcmp(pool->phases[i].label, label) != 0)
                i++;
        if (i == pool->n_phases) {
                if (i == DSE_POOL_TIMING_PHASES)
                        i--;
                else
                        pool->phases[pool->n_phases++] = (struct dse_pool_phase_timing){.label = label};
        }
        struct dse_pool_phase_timing *ph = &pool->phases[i];
        ph->calls++;
        ph->wall_ns += wall;
        ph->caller_cpu_ns += cpu;
        uint64_t max = 0;
        for (int t = 0; t < pool->n_threads; t++) {
                const struct pool_thread *th = &pool->threads[t];
                if (th->task_call != pool->timing_call) {
                        ph->threads_absent++;
                        continue;
                }
                ph->task_cpu_ns += th->task_cpu_ns;
                ph->task_wall_ns += th->task_wall_ns;
                if (t > 0) {
                        ph->start_delay_ns += th->task_start_ns - c->wall0;
                        ph->threads_woken += (uint64_t)th->slept;
                }
                max = th->task_cpu_ns > max ? th->task_cpu_ns : max;
        }
        ph->task_cpu_max_ns += max;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
        syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
        syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until *addr != old: bounded spin, then block (*ret_slept set, if given).
 * Returns the new value. */
static uint32_t wait_change(struct dse_pool *pool, _Atomic uint32_t *addr, uint32_t old, int *ret_slept) {
        uint32_t v;
        for (int i = 0; i < SPIN_ITERS; i++) {
                v = atomic_load_explicit(addr, memory_order_acquire);
                if (v != old)
                        return v;
                _mm_pause();
        }
        if (ret_slept)
                *ret_slept = 1;
        while ((v = atomic_load(addr)) == old) {
                atomic_fetch_add(&pool->n_sleeping, 1);
                futex_wait(addr, old);
                atomic_fetch_sub(&pool->n_sleeping, 1);
        }
        return v;
}

static void wake_sleepers(struct dse_pool *pool, _Atomic uint32_t *addr) {
        if (atomic_load(&pool->n_sleeping) > 0)
                futex_wake_all(addr);
}

static int pin_self(int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *thread_main(void *arg) {
        struct pool_thread *t = arg;
        struct dse_pool *pool = t->pool;
        uint32_t seen = 0;
        for (;;) {
                /* set only once the new task is published: the previous call's caller
                 * has read it by then */
                int slept = 0;
                seen = wait_change(pool, &pool->generation, seen, &slept);
                t->slept = slept;
                if (atomic_load(&pool->stop))
                        return NULL;
                /* Announce, then check the task is still open (both seq_cst): either the
                 * caller's close sees us inside and waits, or we see it closed and stay
                 * out. A shared task's caller may have finished it without us. */
                atomic_fetch_add(&pool->n_inside, 1);
                if (atomic_load(&pool->open_gen) == seen) {
                        int shared = pool->task_shared;
                        run_task(pool, t, pool->task, pool->task_ctx);
                        if (!shared) {
                                uint32_t done = atomic_fetch_add(&pool->n_done, 1) + 1;
                                if (done == (uint32_t)pool->n_threads - 1)
                                        wake_sleepers(pool, &pool->n_done);
                        }
                }
                if (atomic_fetch_sub(&pool->n_inside, 1) == 1)
                        wake_sleepers(pool, &pool->n_inside);
        }
}

/* Publishes fn as the next task and wakes the threads. */
static void start_task(struct dse_pool *pool, dse_pool_task_fn fn, void *ctx, int shared) {
        pool->task = fn;
        pool->task_ctx = ctx;
        pool->task_shared = shared;
        atomic_store(&pool->n_done, 0);
        uint32_t gen = atomic_load(&pool->generation) + 1;
        if (gen == 0) /* 0 means closed */
                gen = 1;
        atomic_store(&pool->open_gen, gen);
        atomic_store(&pool->generation, gen);
        wake_sleepers(pool, &pool->generation);
}

void dse_pool_run_shared(struct dse_pool *pool, dse_pool_task_fn fn, void *ctx) {
        struct call_clock c;
        call_begin(pool, &c);
        if (pool->n_threads == 1) {
                run_task(pool, &pool->threads[0], fn, ctx);
                call_end(pool, &c);
                return;
        }
        start_task(pool, fn, ctx, 1);
        run_task(pool, &pool->threads[0], fn, ctx);
        /* close: threads that have not entered yet never will; wait for those inside */
        atomic_store(&pool->open_gen, 0);
        uint32_t v;
        while ((v = atomic_load(&pool->n_inside)) != 0)
                wait_change(pool, &pool->n_inside, v, NULL);
        call_end(pool, &c);
}

void dse_pool_run(struct dse_pool *pool, dse_pool_task_fn fn, void *ctx) {
        struct call_clock c;
        call_begin(pool, &c);
        start_task(pool, fn, ctx, 0);

        run_task(pool, &pool->threads[0], fn, ctx);

        uint32_t want = (uint32_t)pool->n_threads - 1, done;
        while ((done = atomic_load(&pool->n_done)) != want)
                wait_change(pool, &pool->n_done, done, NULL);
        call_end(pool, &c);
}

void dse_pool_barrier(struct dse_pool *pool) {
        if (pool->n_threads == 1)
                return;
        uint32_t gen = atomic_load(&pool->barrier_gen);
        if (atomic_fetch_add(&pool->barrier_count, 1) + 1 == (uint32_t)pool->n_threads) {
                atomic_store(&pool->barrier_count, 0);
                atomic_fetch_add(&pool->barrier_gen, 1);
                wake_sleepers(pool, &pool->barrier_gen);
                return;
        }
        wait_change(pool, &pool->barrier_gen, gen, NULL);
}

struct range_task {
        size_t n;
        dse_pool_range_fn fn;
        void *ctx;
};

static void range_task_run(void *arg, int ith, int nth) {
        struct range_task *rt = arg;
        size_t chunk = (rt->n + (size_t)nth - 1) / (size_t)nth;
        size_t begin = chunk * (size_t)ith;
        size_t end = begin + chunk < rt->n ? begin + chunk : rt->n;
        if (begin < end)
                rt->fn(rt->ctx, begin, end, ith);
}

/* The whole range on the caller: a 1-thread pool, or a range of one. */
static void range_task_whole(void *arg, int ith, int nth) {
        struct range_task *rt = arg;
        (void)ith;
        (void)nth;
        rt->fn(rt->ctx, 0, rt->n, 0);
}

void dse_pool_parallel_for(struct dse_pool *pool, size_t n, dse_pool_range_fn fn, void *ctx) {
        if (n == 0)
                return;
        struct range_task rt = {n, fn, ctx};
        if (pool->n_threads == 1 || n == 1) {
                struct call_clock c;
                call_begin(pool, &c);
                run_task(pool, &pool->threads[0], range_task_whole, &rt);
                call_end(pool, &c);
                return;
        }
        dse_pool_run(pool, range_task_run, &rt);
}

static void record_tid(void *ctx, int ith, int nth) {
        struct dse_pool *pool = ctx;
        pool->threads[ith].tid = (int)syscall(SYS_gettid);
}

int dse_pool_new(int n_threads, const int *cpus, int n_cpus, struct dse_pool **ret_pool) {
        if (!ret_pool || n_threads < 1 || n_threads > 1024 || (cpus && n_cpus < 1))
                return -EINVAL;
        struct dse_pool *pool = calloc(1, sizeof *pool);
        if (!pool)
                return -ENOMEM;
        pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
        if (!pool->threads) {
                free(pool);
                return -ENOMEM;
        }
        pool->n_threads = n_threads;
        for (int i = 0; i < n_threads; i++) {
                pool->threads[i] = (struct pool_thread){.pool = pool, .ith = i,
                                                        .cpu = cpus ? cpus[i % n_cpus] : -1};
        }
        int r = 0;
        if (cpus && (r = pin_self(pool->threads[0].cpu)) != 0) {
                dse_pool_free(pool);
                return -r;
        }
        for (int i = 1; i < n_threads; i++) {
                pthread_attr_t attr;
                pthread_attr_init(&attr);
                if (cpus) {
                        cpu_set_t set;
                        CPU_ZERO(&set);
                        CPU_SET(pool->threads[i].cpu, &set);
                        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
                }
                r = pthread_create(&pool->threads[i].handle, &attr, thread_main, &pool->threads[i]);
                pthread_attr_destroy(&attr);
                if (r != 0) {
                        pool->n_threads = i; /* only threads 1..i-1 exist */
                        dse_pool_free(pool);
                        return -r;
                }
        }
        dse_pool_run(pool, record_tid, pool);
        *ret_pool = pool;
        return 0;
}

void dse_pool_free(struct dse_pool *pool) {
        if (!pool)
                return;
        atomic_store(&pool->stop, 1);
        atomic_fetch_add(&pool->generation, 1);
        futex_wake_all(&pool->generation);
        for (int i = 1; i < pool->n_threads; i++)
                pthread_join(pool->threads[i].handle, NULL);
        free(pool->threads);
        free(pool);
}

int dse_pool_n_threads(const struct dse_pool *pool) {
        return pool->n_threads;
}

int dse_pool_tids(const struct dse_pool *pool, int *tids, int max_tids) {
        int n = pool->n_threads < max_tids ? pool->n_threads : max_tids;
        for (int i = 0; i < n; i++)
                tids[i] = pool->threads[i].tid;
        return n;
}

void dse_pool_timing_start(struct dse_pool *pool) {
        pool->n_phases = 0;
        memset(pool->phases, 0, sizeof pool->phases);
        pool->timing = 1;
}

void dse_pool_timing_stop(struct dse_pool *pool) {
        pool->timing = 0;
}

int dse_pool_timing_read(const struct dse_pool *pool, struct dse_pool_phase_timing *ret, int max) {
        for (int i = 0; i < pool->n_phases && i < max; i++)
                ret[i] = pool->phases[i];
        return pool->n_phases;
}

void dse_pool_label(struct dse_pool *pool, const char *label) {
        pool->label = label;
}
