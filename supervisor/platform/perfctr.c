/* perfctr.c — per-instance counters through perf_event_open(2).
 *
 * perf_event_open(2): a group is read in one read(2) with PERF_FORMAT_GROUP as
 * { nr, time_enabled, time_running, value[nr] }; when the PMU multiplexes a group,
 * time_running < time_enabled and perf(1) scales the counts by enabled/running, as
 * done here. PERF_FLAG_PID_CGROUP takes a cgroup directory fd as pid and needs cpu >= 0
 * (one event per CPU). Hardware events on a machine without a PMU fail with ENOENT
 * (checked on the CI VM); with perf_event_paranoid >= 2 an unprivileged caller must
 * exclude the kernel, so an EACCES is retried once with exclude_kernel/exclude_hv.
 * Context switches per kind: proc(5) voluntary_ctxt_switches/nonvoluntary_ctxt_switches
 * in /proc/<pid>/task/<tid>/status. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "cgroup-internal.h"

#define MAX_THREADS 4096
#define MAX_GROUP 4

const char *dsv_perf_event_to_string(enum dsv_perf_event ev) {
        static const char *const names[DSV_PERF_EVENT_COUNT] = {
                [DSV_PERF_TASK_CLOCK] = "task_clock",
                [DSV_PERF_CONTEXT_SWITCHES] = "context_switches",
                [DSV_PERF_CTXSW_VOLUNTARY] = "voluntary_context_switches",
                [DSV_PERF_CTXSW_INVOLUNTARY] = "involuntary_context_switches",
                [DSV_PERF_PAGE_FAULTS] = "page_faults",
                [DSV_PERF_CPU_MIGRATIONS] = "cpu_migrations",
                [DSV_PERF_CYCLES] = "cycles",
                [DSV_PERF_INSTRUCTIONS] = "instructions",
                [DSV_PERF_LLC_LOAD_MISSES] = "llc_load_misses",
                [DSV_PERF_DTLB_LOAD_MISSES] = "dtlb_load_misses",
        };
        return (unsigned)ev < DSV_PERF_EVENT_COUNT ? names[ev] : "invalid";
}

/* perf type and config of each perf-backed event; the procfs ones have none. */
static bool event_attr(enum dsv_perf_event ev, __u32 *type, __u64 *config) {
        const __u64 read_miss = (PERF_COUNT_HW_CACHE_OP_READ << 8) | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16);
        switch (ev) {
        case DSV_PERF_TASK_CLOCK:
                *type = PERF_TYPE_SOFTWARE, *config = PERF_COUNT_SW_TASK_CLOCK;
                return true;
        case DSV_PERF_CONTEXT_SWITCHES:
                *type = PERF_TYPE_SOFTWARE, *config = PERF_COUNT_SW_CONTEXT_SWITCHES;
                return true;
        case DSV_PERF_PAGE_FAULTS:
                *type = PERF_TYPE_SOFTWARE, *config = PERF_COUNT_SW_PAGE_FAULTS;
                return true;
        case DSV_PERF_CPU_MIGRATIONS:
                *type = PERF_TYPE_SOFTWARE, *config = PERF_COUNT_SW_CPU_MIGRATIONS;
                return true;
        case DSV_PERF_CYCLES:
                *type = PERF_TYPE_HARDWARE, *config = PERF_COUNT_HW_CPU_CYCLES;
                return true;
        case DSV_PERF_INSTRUCTIONS:
                *type = PERF_TYPE_HARDWARE, *config = PERF_COUNT_HW_INSTRUCTIONS;
                return true;
        case DSV_PERF_LLC_LOAD_MISSES:
                *type = PERF_TYPE_HW_CACHE, *config = PERF_COUNT_HW_CACHE_LL | read_miss;
                return true;
        case DSV_PERF_DTLB_LOAD_MISSES:
                *type = PERF_TYPE_HW_CACHE, *config = PERF_COUNT_HW_CACHE_DTLB | read_miss;
                return true;
        default:
                return false;
        }
}

/* The two groups every thread (or CPU) gets: software, then hardware. */
static const enum dsv_perf_event group_events[2][MAX_GROUP] = {
        {DSV_PERF_TASK_CLOCK, DSV_PERF_CONTEXT_SWITCHES, DSV_PERF_PAGE_FAULTS, DSV_PERF_CPU_MIGRATIONS},
        {DSV_PERF_CYCLES, DSV_PERF_INSTRUCTIONS, DSV_PERF_LLC_LOAD_MISSES, DSV_PERF_DTLB_LOAD_MISSES},
};

struct group {
        int fd[MAX_GROUP];                   /* fd[0] is the leader; -1 unused */
        enum dsv_perf_event ev[MAX_GROUP];
        int n;
};

struct thread {
        pid_t tid;
        uint64_t base[2]; /* voluntary, involuntary at first sight */
        uint64_t last[2]; /* last values read */
};

struct dsv_perfctr {
        pid_t pid;       /* thread mode; 0 in cgroup mode */
        int cgroup_fd;   /* cgroup mode: our dup of the group's directory; -1 otherwise */
        bool exclude_kernel;
        unsigned supported;
        int err[DSV_PERF_EVENT_COUNT]; /* why an event is unsupported (positive errno) */
        struct group *groups;
        size_t n_groups;
        struct thread *threads;        /* for the procfs switch counts */
        size_t n_threads;
        bool threads_full;
};

static int perf_open(struct dsv_perfctr *pc, enum dsv_perf_event ev, pid_t pid, int cpu, int group_fd,
                     unsigned long flags) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        event_attr(ev, &a.type, &a.config);
        a.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
        a.exclude_kernel = pc->exclude_kernel;
        a.exclude_hv = pc->exclude_kernel;
        int fd = (int)syscall(SYS_perf_event_open, &a, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC);
        if (fd < 0 && (errno == EACCES || errno == EPERM) && !pc->exclude_kernel) {
                pc->exclude_kernel = true; /* perf_event_paranoid >= 2: user space only */
                a.exclude_kernel = a.exclude_hv = 1;
                fd = (int)syscall(SYS_perf_event_open, &a, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC);
        }
        return fd < 0 ? -errno : fd;
}

static bool unsupported_errno(int e) {
        return e == ENOENT || e == EOPNOTSUPP || e == EINVAL || e == ENODEV;
}

static void group_close(struct group *g) {
        for (int i = g->n - 1; i >= 0; i--)
                if (g->fd[i] >= 0)
                        close(g->fd[i]);
        g->n = 0;
}

/* Opens one group kind (0 software, 1 hardware) on a thread or CPU. probe: the first
 * target, whose refusals decide what is supported. Returns 0 (possibly with n == 0 when
 * nothing of the kind is supported), -ESRCH when the thread is gone, else -errno. */
static int group_open(struct dsv_perfctr *pc, int kind, pid_t pid, int cpu, unsigned long flags, bool probe,
                      struct group *g) {
        g->n = 0;
        for (int i = 0; i < MAX_GROUP; i++) {
                enum dsv_perf_event ev = group_events[kind][i];
                if (!probe && !(pc->supported & (1u << ev)))
                        continue;
                int fd = perf_open(pc, ev, pid, cpu, g->n ? g->fd[0] : -1, flags);
                if (fd == -ESRCH) {
                        group_close(g);
                        return -ESRCH;
                }
                if (fd < 0 && probe && unsupported_errno(-fd)) {
                        pc->err[ev] = -fd;
                        continue;
                }
                if (fd < 0) {
                        group_close(g);
                        return fd;
                }
                if (probe)
                        pc->supported |= 1u << ev;
                g->fd[g->n] = fd;
                g->ev[g->n] = ev;
                g->n++;
        }
        return 0;
}

static int add_groups(struct dsv_perfctr *pc, pid_t pid, int cpu, unsigned long flags) {
        bool probe = pc->n_groups == 0;
        struct group g[2];
        int r = group_open(pc, 0, pid, cpu, flags, probe, &g[0]);
        if (r < 0)
                return r;
        r = group_open(pc, 1, pid, cpu, flags, probe, &g[1]);
        if (r < 0) {
                group_close(&g[0]);
                return r;
        }
        for (int kind = 0; kind < 2; kind++)
                if (g[kind].n > 0)
                        pc->groups[pc->n_groups++] = g[kind];
        return 0;
}

/* voluntary and involuntary switch counts from a status file. */
static int read_switches(const char *path, uint64_t out[2]) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        char line[256];
        int got = 0;
        while (fgets(line, sizeof line, f)) {
                unsigned long long v;
                if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1)
                        out[0] = v, got |= 1;
                else if (sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
                        out[1] = v, got |= 2;
        }
        fclose(f);
        return got == 3 ? 0 : -EBADMSG;
}

static int thread_switches(const struct dsv_perfctr *pc, pid_t tid, uint64_t out[2]) {
        char path[96];
        if (pc->pid > 0)
                snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pc->pid, (int)tid);
        else
                snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
        return read_switches(path, out);
}

/* Records tid for the procfs counts. at_open: its switches so far are the baseline;
 * a thread first seen later is counted from its start (it was born into the group). */
static void thread_track(struct dsv_perfctr *pc, pid_t tid, bool at_open) {
        for (size_t i = 0; i < pc->n_threads; i++)
                if (pc->threads[i].tid == tid)
                        return;
        if (pc->n_threads == MAX_THREADS) {
                pc->threads_full = true;
                return;
        }
        uint64_t now[2];
        if (thread_switches(pc, tid, now) < 0)
                return;
        struct thread *t = &pc->threads[pc->n_threads++];
        t->tid = tid;
        t->base[0] = at_open ? now[0] : 0;
        t->base[1] = at_open ? now[1] : 0;
        t->last[0] = now[0];
        t->last[1] = now[1];
}

/* The threads of the cgroup now: cgroup.threads (v2), else tasks (v1). */
static int cgroup_scan(struct dsv_perfctr *pc, bool at_open) {
        pid_t tids[MAX_THREADS];
        int n = dsv__cgfs_read_ids(pc->cgroup_fd, "cgroup.threads", tids, MAX_THREADS);
        if (n == -ENOENT)
                n = dsv__cgfs_read_ids(pc->cgroup_fd, "tasks", tids, MAX_THREADS);
        if (n < 0)
                return n;
        for (int i = 0; i < n; i++)
                thread_track(pc, tids[i], at_open);
        return 0;
}

static struct dsv_perfctr *perfctr_alloc(size_t max_groups) {
        struct dsv_perfctr *pc = calloc(1, sizeof *pc);
        if (!pc)
                return NULL;
        pc->cgroup_fd = -1;
        pc->groups = calloc(max_groups, sizeof *pc->groups);
        pc->threads = calloc(MAX_THREADS, sizeof *pc->threads);
        if (!pc->groups || !pc->threads) {
                dsv_perfctr_free(pc);
                return NULL;
        }
        return pc;
}

/* The perf-backed events become "supported" only by a successful probe; the procfs
 * ones are supported when the first thread's status could be read. */
static void procfs_support(struct dsv_perfctr *pc) {
        if (pc->n_threads > 0)
                pc->supported |= 1u << DSV_PERF_CTXSW_VOLUNTARY | 1u << DSV_PERF_CTXSW_INVOLUNTARY;
        else
                pc->err[DSV_PERF_CTXSW_VOLUNTARY] = pc->err[DSV_PERF_CTXSW_INVOLUNTARY] = ENOENT;
}

int dsv_perfctr_open_threads(pid_t pid, const pid_t *tids, size_t n, struct dsv_perfctr **ret) {
        if (pid <= 0 || !ret || (tids && (n == 0 || n > MAX_THREADS)))
                return -EINVAL;
        pid_t *listed = NULL;
        if (!tids) {
                listed = malloc(MAX_THREADS * sizeof *listed);
                if (!listed)
                        return -ENOMEM;
                char path[64];
                snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
                DIR *d = opendir(path);
                if (!d) {
                        int e = errno;
                        free(listed);
                        return e == ENOENT ? -ESRCH : -e;
                }
                struct dirent *de;
                n = 0;
                while ((de = readdir(d)) && n < MAX_THREADS) {
                        long t = strtol(de->d_name, NULL, 10);
                        if (t > 0)
                                listed[n++] = (pid_t)t;
                }
                closedir(d);
                tids = listed;
        }
        struct dsv_perfctr *pc = perfctr_alloc(2 * n);
        if (!pc) {
                free(listed);
                return -ENOMEM;
        }
        pc->pid = pid;
        int r = 0;
        for (size_t i = 0; i < n; i++) {
                if (tids[i] <= 0) {
                        r = -EINVAL;
                        break;
                }
                r = add_groups(pc, tids[i], -1, 0);
                if (r == -ESRCH) { /* exited since it was listed */
                        r = 0;
                        continue;
                }
                if (r < 0)
                        break;
                thread_track(pc, tids[i], true);
        }
        free(listed);
        if (r == 0 && pc->n_groups == 0 && pc->n_threads == 0)
                r = -ESRCH;
        if (r < 0) {
                dsv_perfctr_free(pc);
                return r;
        }
        procfs_support(pc);
        *ret = pc;
        return 0;
}

int dsv_perfctr_open_cgroup(int cgroup_fd, const int *cpus, size_t n_cpus, struct dsv_perfctr **ret) {
        if (cgroup_fd < 0 || !cpus || n_cpus == 0 || n_cpus > 4096 || !ret)
                return -EINVAL;
        struct dsv_perfctr *pc = perfctr_alloc(2 * n_cpus);
        if (!pc)
                return -ENOMEM;
        int r = 0;
        pc->cgroup_fd = fcntl(cgroup_fd, F_DUPFD_CLOEXEC, 3);
        if (pc->cgroup_fd < 0)
                r = -errno;
        for (size_t i = 0; r == 0 && i < n_cpus; i++)
                r = cpus[i] < 0 ? -EINVAL : add_groups(pc, cgroup_fd, cpus[i], PERF_FLAG_PID_CGROUP);
        if (r == 0)
                r = cgroup_scan(pc, true);
        if (r < 0) {
                dsv_perfctr_free(pc);
                return r;
        }
        /* an empty group is fine: threads that join later count from their start */
        pc->supported |= 1u << DSV_PERF_CTXSW_VOLUNTARY | 1u << DSV_PERF_CTXSW_INVOLUNTARY;
        *ret = pc;
        return 0;
}

unsigned dsv_perfctr_supported(const struct dsv_perfctr *pc) {
        return pc ? pc->supported : 0;
}

int dsv_perfctr_unsupported_format(const struct dsv_perfctr *pc, char *buf, size_t size) {
        if (!pc || (!buf && size))
                return -EINVAL;
        size_t len = 0;
        for (int ev = 0; ev < DSV_PERF_EVENT_COUNT; ev++) {
                if (pc->supported & (1u << ev))
                        continue;
                int m = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, "%s%s (%s)",
                                 len ? ", " : "", dsv_perf_event_to_string(ev), strerror(pc->err[ev] ? pc->err[ev] : ENOENT));
                if (m < 0)
                        return -EIO;
                len += (size_t)m;
        }
        if (size && len == 0)
                buf[0] = '\0';
        return (int)len;
}

int dsv_perfctr_read(struct dsv_perfctr *pc, struct dsv_perfctr_sample *ret) {
        if (!pc || !ret)
                return -EINVAL;
        struct dsv_perfctr_sample s;
        memset(&s, 0, sizeof s);
        unsigned counted = 0;
        for (size_t i = 0; i < pc->n_groups; i++) {
                const struct group *g = &pc->groups[i];
                uint64_t buf[3 + MAX_GROUP];
                ssize_t n = read(g->fd[0], buf, sizeof buf);
                if (n < 0)
                        return -errno;
                if ((size_t)n < 3 * sizeof(uint64_t) || buf[0] != (uint64_t)g->n ||
                    (size_t)n < (3 + (size_t)g->n) * sizeof(uint64_t))
                        return -EIO;
                uint64_t enabled = buf[1], running = buf[2];
                for (int k = 0; k < g->n; k++) {
                        uint64_t v = buf[3 + k];
                        if (enabled == 0) { /* never scheduled in: zero is exact */
                                counted |= 1u << g->ev[k];
                                continue;
                        }
                        if (running == 0) /* multiplexed out the whole time: no estimate */
                                continue;
                        if (running < enabled)
                                v = (uint64_t)((unsigned __int128)v * enabled / running);
                        s.value[g->ev[k]] += v;
                        counted |= 1u << g->ev[k];
                }
        }
        /* A group that could not be read into a value leaves its events out. */
        s.valid = pc->supported & (counted | 1u << DSV_PERF_CTXSW_VOLUNTARY | 1u << DSV_PERF_CTXSW_INVOLUNTARY);

        if (pc->cgroup_fd >= 0) {
                int r = cgroup_scan(pc, false);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < pc->n_threads; i++) {
                struct thread *t = &pc->threads[i];
                uint64_t now[2];
                if (thread_switches(pc, t->tid, now) == 0 && now[0] >= t->last[0] && now[1] >= t->last[1]) {
                        t->last[0] = now[0];
                        t->last[1] = now[1];
                } /* else exited (or the tid was reused): keep its last counts */
                s.value[DSV_PERF_CTXSW_VOLUNTARY] += t->last[0] - t->base[0];
                s.value[DSV_PERF_CTXSW_INVOLUNTARY] += t->last[1] - t->base[1];
        }
        s.time_ns = (uint64_t)dsv_clock_now_ns();
        *ret = s;
        return 0;
}

void dsv_perfctr_free(struct dsv_perfctr *pc) {
        if (!pc)
                return;
        for (size_t i = 0; pc->groups && i < pc->n_groups; i++)
                group_close(&pc->groups[i]);
        if (pc->cgroup_fd >= 0)
                close(pc->cgroup_fd);
        free(pc->groups);
        free(pc->threads);
        free(pc);
}

int dsv_perfctr_rates_compute(const struct dsv_perfctr_sample *prev, const struct dsv_perfctr_sample *cur,
                              struct dsv_perfctr_rates *ret) {
        if (!prev || !cur || !ret || cur->time_ns <= prev->time_ns)
                return -EINVAL;
        struct dsv_perfctr_rates r;
        memset(&r, 0, sizeof r);
        r.interval_s = (double)(cur->time_ns - prev->time_ns) / 1e9;
        for (int ev = 0; ev < DSV_PERF_EVENT_COUNT; ev++) {
                unsigned bit = 1u << ev;
                if (!(prev->valid & cur->valid & bit) || cur->value[ev] < prev->value[ev])
                        continue;
                double delta = (double)(cur->value[ev] - prev->value[ev]);
                if (ev == DSV_PERF_TASK_CLOCK)
                        delta /= 1e9; /* ns of CPU time → CPU-seconds */
                r.per_s[ev] = delta / r.interval_s;
                r.valid |= bit;
        }
        *ret = r;
        return 0;
}

/* ---- Prometheus text format ------------------------------------------------------- */

struct out {
        char *buf;
        size_t size, len;
};

static void outf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(struct out *o, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(o->len < o->size ? o->buf + o->len : NULL, o->len < o->size ? o->size - o->len : 0, fmt, ap);
        va_end(ap);
        if (m > 0)
                o->len += (size_t)m;
}

/* A label value with \, " and newline escaped (exposition format). */
static void out_label(struct out *o, const char *v) {
        for (; *v; v++) {
                if (*v == '\\')
                        outf(o, "\\\\");
                else if (*v == '"')
                        outf(o, "\\\"");
                else if (*v == '\n')
                        outf(o, "\\n");
                else
                        outf(o, "%c", *v);
        }
}

static const char *const help[DSV_PERF_EVENT_COUNT] = {
        [DSV_PERF_TASK_CLOCK] = "CPU time the instance's threads ran (perf task-clock).",
        [DSV_PERF_CONTEXT_SWITCHES] = "Context switches of the instance's threads, both kinds (perf context-switches).",
        [DSV_PERF_CTXSW_VOLUNTARY] = "Context switches where an instance thread blocked or yielded.",
        [DSV_PERF_CTXSW_INVOLUNTARY] = "Context switches where a runnable instance thread was preempted: interference.",
        [DSV_PERF_PAGE_FAULTS] = "Page faults of the instance's threads (perf page-faults).",
        [DSV_PERF_CPU_MIGRATIONS] = "Moves of instance threads from one CPU to another (perf cpu-migrations).",
        [DSV_PERF_CYCLES] = "CPU cycles of the instance's threads (PMU).",
        [DSV_PERF_INSTRUCTIONS] = "Instructions retired by the instance's threads (PMU).",
        [DSV_PERF_LLC_LOAD_MISSES] = "Last-level cache load misses of the instance's threads (PMU).",
        [DSV_PERF_DTLB_LOAD_MISSES] = "Data TLB load misses of the instance's threads (PMU).",
};

int dsv_perfctr_format_prometheus(const struct dsv_perfctr_series *series, size_t n, char *buf, size_t size) {
        if ((n && !series) || (!buf && size))
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (!series[i].instance || !series[i].sample)
                        return -EINVAL;
        struct out o = {buf, size, 0};
        if (size)
                buf[0] = '\0';
        for (int ev = 0; ev < DSV_PERF_EVENT_COUNT; ev++) {
                unsigned bit = 1u << ev;
                bool any = false;
                for (size_t i = 0; i < n; i++)
                        any |= (series[i].sample->valid & bit) != 0;
                if (!any)
                        continue;
                const char *unit = ev == DSV_PERF_TASK_CLOCK ? "_seconds" : "";
                const char *name = dsv_perf_event_to_string(ev);
                outf(&o, "# HELP dsvisor_perf_%s%s_total %s\n", name, unit, help[ev]);
                outf(&o, "# TYPE dsvisor_perf_%s%s_total counter\n", name, unit);
                for (size_t i = 0; i < n; i++) {
                        const struct dsv_perfctr_sample *s = series[i].sample;
                        if (!(s->valid & bit))
                                continue;
                        outf(&o, "dsvisor_perf_%s%s_total{instance=\"", name, unit);
                        out_label(&o, series[i].instance);
                        outf(&o, "\",numa_node=\"%d\"} ", series[i].numa_node);
                        if (ev == DSV_PERF_TASK_CLOCK)
                                outf(&o, "%" PRIu64 ".%09" PRIu64 "\n", s->value[ev] / 1000000000u,
                                     s->value[ev] % 1000000000u);
                        else
                                outf(&o, "%" PRIu64 "\n", s->value[ev]);
                }
        }
        if (o.len > INT32_MAX)
                return -E2BIG;
        return (int)o.len;
}
