/* Per-instance counters on this machine's kernel: a real thread that
 * spins, touches memory, sleeps and competes for a CPU; hardware events checked against
 * what the kernel itself accepts (this VM has no PMU: they must be reported as
 * unsupported, never faked); a real v2 cgroup when we may create one. */
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "t.h"

enum { CMD_IDLE, CMD_SPIN, CMD_TOUCH, CMD_SLEEP, CMD_EXIT };

struct worker {
        pthread_t th;
        atomic_int cmd;
        atomic_int done;
        atomic_int tid;
        int pin_cpu; /* -1: not pinned */
};

static double thread_cpu_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define SPIN_S 0.1
#define TOUCH_PAGES 4096

static void spin(double cpu_s) {
        double end = thread_cpu_s() + cpu_s;
        volatile unsigned x = 0;
        while (thread_cpu_s() < end)
                for (int i = 0; i < 10000; i++)
                        x += i;
}

static void *worker_main(void *arg) {
        struct worker *w = arg;
        if (w->pin_cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(w->pin_cpu, &set);
                sched_setaffinity(0, sizeof set, &set);
        }
        atomic_store(&w->tid, (int)syscall(SYS_gettid));
        for (;;) {
                int cmd = atomic_load(&w->cmd);
                if (cmd == CMD_EXIT)
                        return NULL;
                if (cmd == CMD_IDLE) {
                        usleep(500);
                        continue;
                }
                if (cmd == CMD_SPIN) {
                        spin(SPIN_S);
                } else if (cmd == CMD_TOUCH) {
                        size_t len = (size_t)TOUCH_PAGES * 4096;
                        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                        if (p != MAP_FAILED) {
                                madvise(p, len, MADV_NOHUGEPAGE); /* one fault per 4 KiB page */
                                for (size_t i = 0; i < len; i += 4096)
                                        p[i] = 1;
                                munmap(p, len);
                        }
                } else if (cmd == CMD_SLEEP) {
                        for (int i = 0; i < 20; i++)
                                usleep(1000);
                }
                atomic_store(&w->cmd, CMD_IDLE);
                atomic_fetch_add(&w->done, 1);
        }
}

static int worker_start(struct worker *w, int pin_cpu) {
        memset(w, 0, sizeof *w);
        w->pin_cpu = pin_cpu;
        if (pthread_create(&w->th, NULL, worker_main, w) != 0)
                return -EAGAIN;
        while (atomic_load(&w->tid) == 0)
                usleep(100);
        return 0;
}

static void worker_run(struct worker *w, int cmd) {
        int before = atomic_load(&w->done);
        atomic_store(&w->cmd, cmd);
        while (atomic_load(&w->done) == before)
                usleep(200);
}

static void worker_stop(struct worker *w) {
        atomic_store(&w->cmd, CMD_EXIT);
        pthread_join(w->th, NULL);
}

#define V(s, ev) ((long long)(s).value[ev])

TEST(task_clock_grows_while_the_thread_spins) {
        struct worker w;
        ASSERT_OK(worker_start(&w, -1));
        pid_t tid = atomic_load(&w.tid);
        struct dsv_perfctr *pc;
        int r = dsv_perfctr_open_threads(getpid(), &tid, 1, &pc);
        if (r < 0) {
                worker_stop(&w);
                T_FAIL("open: %s", strerror(-r));
        }
        struct dsv_perfctr_sample a, b;
        ASSERT_OK(dsv_perfctr_read(pc, &a));
        worker_run(&w, CMD_SPIN);
        ASSERT_OK(dsv_perfctr_read(pc, &b));
        worker_stop(&w);
        ASSERT_TRUE(b.valid & (1u << DSV_PERF_TASK_CLOCK));
        long long ns = V(b, DSV_PERF_TASK_CLOCK) - V(a, DSV_PERF_TASK_CLOCK);
        fprintf(stderr, "  task clock over a %.0f ms spin: %.1f ms\n", SPIN_S * 1e3, ns / 1e6);
        ASSERT_TRUE(ns >= (long long)(SPIN_S * 0.9e9));
        ASSERT_TRUE(ns < 5000000000ll);
        /* after the thread exited, totals stay readable and do not go backwards */
        struct dsv_perfctr_sample c;
        ASSERT_OK(dsv_perfctr_read(pc, &c));
        for (int ev = 0; ev < DSV_PERF_EVENT_COUNT; ev++)
                ASSERT_TRUE(c.value[ev] >= b.value[ev]);
        struct dsv_perfctr_rates rates;
        ASSERT_OK(dsv_perfctr_rates_compute(&a, &b, &rates));
        ASSERT_TRUE(rates.valid & (1u << DSV_PERF_TASK_CLOCK));
        /* one thread: at most one CPU-second per second; the rate is the delta over the interval */
        ASSERT_TRUE(rates.per_s[DSV_PERF_TASK_CLOCK] > 0 && rates.per_s[DSV_PERF_TASK_CLOCK] <= 1.01);
        ASSERT_NEAR(rates.per_s[DSV_PERF_TASK_CLOCK] * rates.interval_s, ns / 1e9, 1e-6);
        dsv_perfctr_free(pc);
}

TEST(page_faults_grow_after_touching_memory) {
        struct worker w;
        ASSERT_OK(worker_start(&w, -1));
        pid_t tid = atomic_load(&w.tid);
        struct dsv_perfctr *pc;
        int r = dsv_perfctr_open_threads(getpid(), &tid, 1, &pc);
        if (r < 0) {
                worker_stop(&w);
                T_FAIL("open: %s", strerror(-r));
        }
        struct dsv_perfctr_sample a, b;
        ASSERT_OK(dsv_perfctr_read(pc, &a));
        worker_run(&w, CMD_TOUCH);
        ASSERT_OK(dsv_perfctr_read(pc, &b));
        worker_stop(&w);
        dsv_perfctr_free(pc);
        long long faults = V(b, DSV_PERF_PAGE_FAULTS) - V(a, DSV_PERF_PAGE_FAULTS);
        fprintf(stderr, "  page faults for %d touched pages: %lld\n", TOUCH_PAGES, faults);
        ASSERT_TRUE(b.valid & (1u << DSV_PERF_PAGE_FAULTS));
        ASSERT_TRUE(faults >= TOUCH_PAGES);
        ASSERT_TRUE(faults < 4 * TOUCH_PAGES);
}

TEST(voluntary_switches_grow_when_the_thread_sleeps) {
        struct worker w;
        ASSERT_OK(worker_start(&w, -1));
        pid_t tid = atomic_load(&w.tid);
        struct dsv_perfctr *pc;
        int r = dsv_perfctr_open_threads(getpid(), &tid, 1, &pc);
        if (r < 0) {
                worker_stop(&w);
                T_FAIL("open: %s", strerror(-r));
        }
        struct dsv_perfctr_sample a, b;
        ASSERT_OK(dsv_perfctr_read(pc, &a));
        worker_run(&w, CMD_SLEEP);
        ASSERT_OK(dsv_perfctr_read(pc, &b));
        worker_stop(&w);
        dsv_perfctr_free(pc);
        long long vol = V(b, DSV_PERF_CTXSW_VOLUNTARY) - V(a, DSV_PERF_CTXSW_VOLUNTARY);
        long long all = V(b, DSV_PERF_CONTEXT_SWITCHES) - V(a, DSV_PERF_CONTEXT_SWITCHES);
        fprintf(stderr, "  20 sleeps: %lld voluntary switches (procfs), %lld switches (perf)\n", vol, all);
        ASSERT_TRUE(vol >= 20);
        ASSERT_TRUE(all >= 20);
}

TEST(involuntary_switches_when_two_threads_share_a_cpu) {
        struct worker w[2];
        ASSERT_OK(worker_start(&w[0], 0));
        ASSERT_OK(worker_start(&w[1], 0));
        pid_t tids[2] = {atomic_load(&w[0].tid), atomic_load(&w[1].tid)};
        struct dsv_perfctr *pc;
        int r = dsv_perfctr_open_threads(getpid(), tids, 2, &pc);
        if (r < 0) {
                worker_stop(&w[0]);
                worker_stop(&w[1]);
                T_FAIL("open: %s", strerror(-r));
        }
        struct dsv_perfctr_sample a, b;
        ASSERT_OK(dsv_perfctr_read(pc, &a));
        int d0 = atomic_load(&w[0].done), d1 = atomic_load(&w[1].done);
        atomic_store(&w[0].cmd, CMD_SPIN);
        atomic_store(&w[1].cmd, CMD_SPIN);
        while (atomic_load(&w[0].done) == d0 || atomic_load(&w[1].done) == d1)
                usleep(500);
        ASSERT_OK(dsv_perfctr_read(pc, &b));
        worker_stop(&w[0]);
        worker_stop(&w[1]);
        dsv_perfctr_free(pc);
        long long inv = V(b, DSV_PERF_CTXSW_INVOLUNTARY) - V(a, DSV_PERF_CTXSW_INVOLUNTARY);
        long long cpu_ns = V(b, DSV_PERF_TASK_CLOCK) - V(a, DSV_PERF_TASK_CLOCK);
        fprintf(stderr, "  two spinners on CPU 0: %lld involuntary switches, %.1f ms CPU\n", inv, cpu_ns / 1e6);
        ASSERT_TRUE(b.valid & (1u << DSV_PERF_CTXSW_INVOLUNTARY));
        ASSERT_TRUE(inv >= 2); /* CFS slices of a few ms: each preempted the other */
        ASSERT_TRUE(cpu_ns >= (long long)(2 * SPIN_S * 0.9e9));
}

/* What the kernel accepts for a hardware event on this thread, asked directly. */
static bool kernel_has(uint32_t type, uint64_t config) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.type = type;
        a.config = config;
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd >= 0)
                close(fd);
        return fd >= 0;
}

TEST(hardware_events_reported_as_the_kernel_has_them) {
        const uint64_t rm = (PERF_COUNT_HW_CACHE_OP_READ << 8) | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16);
        struct {
                enum dsv_perf_event ev;
                bool has;
        } hw[] = {
                {DSV_PERF_CYCLES, kernel_has(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES)},
                {DSV_PERF_INSTRUCTIONS, kernel_has(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS)},
                {DSV_PERF_LLC_LOAD_MISSES, kernel_has(PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_LL | rm)},
                {DSV_PERF_DTLB_LOAD_MISSES, kernel_has(PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_DTLB | rm)},
        };
        struct worker w;
        ASSERT_OK(worker_start(&w, -1));
        struct dsv_perfctr *pc;
        int r = dsv_perfctr_open_threads(getpid(), NULL, 0, &pc); /* every thread of this process */
        if (r < 0) {
                worker_stop(&w);
                T_FAIL("open: %s", strerror(-r));
        }
        worker_run(&w, CMD_SPIN);
        struct dsv_perfctr_sample s;
        ASSERT_OK(dsv_perfctr_read(pc, &s));
        worker_stop(&w);
        char why[512], prom[8192];
        ASSERT_OK(dsv_perfctr_unsupported_format(pc, why, sizeof why));
        struct dsv_perfctr_series series = {"0", 0, &s};
        ASSERT_OK(dsv_perfctr_format_prometheus(&series, 1, prom, sizeof prom));
        unsigned sup = dsv_perfctr_supported(pc);
        fprintf(stderr, "  unsupported here: %s\n", why[0] ? why : "(none)");
        for (size_t i = 0; i < sizeof hw / sizeof hw[0]; i++) {
                const char *name = dsv_perf_event_to_string(hw[i].ev);
                char metric[96];
                snprintf(metric, sizeof metric, "dsvisor_perf_%s_total{", name);
                bool listed = strstr(why, name) != NULL, exported = strstr(prom, metric) != NULL;
                if (hw[i].has) {
                        ASSERT_TRUE(sup & (1u << hw[i].ev));
                        ASSERT_TRUE(!listed);
                        ASSERT_TRUE(exported);
                } else {
                        ASSERT_TRUE(!(sup & (1u << hw[i].ev)));
                        ASSERT_TRUE(!(s.valid & (1u << hw[i].ev)));
                        ASSERT_EQ(s.value[hw[i].ev], 0);
                        ASSERT_TRUE(listed);
                        ASSERT_TRUE(!exported);
                }
        }
        /* the software events exist on every kernel */
        unsigned soft = 1u << DSV_PERF_TASK_CLOCK | 1u << DSV_PERF_CONTEXT_SWITCHES | 1u << DSV_PERF_PAGE_FAULTS |
                        1u << DSV_PERF_CPU_MIGRATIONS | 1u << DSV_PERF_CTXSW_VOLUNTARY | 1u << DSV_PERF_CTXSW_INVOLUNTARY;
        ASSERT_EQ(sup & soft, soft);
        ASSERT_EQ(s.valid & soft, soft);
        ASSERT_TRUE(strstr(prom, "# TYPE dsvisor_perf_task_clock_seconds_total counter\n") != NULL);
        ASSERT_TRUE(strstr(prom, "dsvisor_perf_involuntary_context_switches_total{instance=\"0\",numa_node=\"0\"} ") != NULL);
        dsv_perfctr_free(pc);
}

TEST(bad_arguments) {
        struct dsv_perfctr *pc;
        pid_t tid = 1;
        ASSERT_ERR(dsv_perfctr_open_threads(0, NULL, 0, &pc), -EINVAL);
        ASSERT_ERR(dsv_perfctr_open_threads(getpid(), &tid, 0, &pc), -EINVAL);
        ASSERT_ERR(dsv_perfctr_open_cgroup(-1, (int[]){0}, 1, &pc), -EINVAL);
        /* a pid that does not exist: pid_max is at most 2^22 */
        ASSERT_ERR(dsv_perfctr_open_threads(4194305, NULL, 0, &pc), -ESRCH);
}

/* The v2 mount, if this host has one we can create a group in. */
static const char *v2_root(void) {
        static const char *const roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (size_t i = 0; i < 2; i++) {
                struct statfs st;
                if (statfs(roots[i], &st) == 0 && st.f_type == 0x63677270 /* CGROUP2_SUPER_MAGIC */)
                        return roots[i];
        }
        return NULL;
}

TEST(cgroup_mode_counts_a_child_in_the_group) {
        const char *root = v2_root();
        if (!root || geteuid() != 0)
                T_SKIP("needs root and a cgroup2 mount");
        char dir[256], procs[300];
        snprintf(dir, sizeof dir, "%s/dsv-test-perfctr-%d", root, (int)getpid());
        snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
        ASSERT_TRUE(mkdir(dir, 0755) == 0);
        int cg = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int cpus[64], n_cpus = 0;
        cpu_set_t set;
        sched_getaffinity(0, sizeof set, &set);
        for (int c = 0; c < 64; c++)
                if (CPU_ISSET(c, &set))
                        cpus[n_cpus++] = c;
        struct dsv_perfctr *pc = NULL;
        int r = cg < 0 ? -errno : dsv_perfctr_open_cgroup(cg, cpus, (size_t)n_cpus, &pc);
        int ready[2], go[2];
        pid_t child = -1;
        struct dsv_perfctr_sample a = {0}, b = {0};
        if (r == 0 && pipe(ready) == 0 && pipe(go) == 0) {
                r = dsv_perfctr_read(pc, &a);
                child = fork();
                if (child == 0) {
                        FILE *f = fopen(procs, "we");
                        if (!f || fprintf(f, "0\n") < 0 || fclose(f) != 0)
                                _exit(3);
                        spin(SPIN_S);
                        for (int i = 0; i < 20; i++)
                                usleep(1000);
                        char c = 1;
                        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
                                _exit(4);
                        _exit(0);
                }
                char c;
                if (child > 0 && read(ready[0], &c, 1) == 1)
                        r = dsv_perfctr_read(pc, &b);
                else
                        r = -ECHILD;
                if (child > 0) {
                        if (write(go[1], &c, 1) != 1)
                                kill(child, SIGKILL);
                        waitpid(child, NULL, 0);
                }
                close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
        }
        dsv_perfctr_free(pc);
        if (cg >= 0)
                close(cg);
        rmdir(dir);
        ASSERT_OK(r);
        long long ns = V(b, DSV_PERF_TASK_CLOCK) - V(a, DSV_PERF_TASK_CLOCK);
        long long vol = V(b, DSV_PERF_CTXSW_VOLUNTARY) - V(a, DSV_PERF_CTXSW_VOLUNTARY);
        fprintf(stderr, "  cgroup child: %.1f ms task clock, %lld voluntary switches\n", ns / 1e6, vol);
        ASSERT_TRUE(b.valid & (1u << DSV_PERF_TASK_CLOCK));
        ASSERT_TRUE(ns >= (long long)(SPIN_S * 0.9e9));
        ASSERT_TRUE(vol >= 20);
}
