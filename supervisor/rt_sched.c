/* rt_sched.c — SCHED_FIFO for workers' compute threads: the preflight that refuses an
 * unsafe host, per-thread sched_setattr, and the walk over a worker's threads that
 * applies it to its compute threads only. */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sup.h"

int sup_rt_preflight(const char *proc_root, int priority, int n_free_cpus, char *why, size_t why_size) {
        if (priority < 1 || priority > SUP_RT_PRIORITY_MAX) {
                snprintf(why, why_size, "priority %d is outside 1..%d (the kernel's own threads run at 50)",
                         priority, SUP_RT_PRIORITY_MAX);
                return -EINVAL;
        }
        char path[512];
        snprintf(path, sizeof path, "%s/sys/kernel/sched_rt_runtime_us", proc_root ? proc_root : "/proc");
        FILE *f = fopen(path, "re");
        long long runtime = 0;
        if (!f || fscanf(f, "%lld", &runtime) != 1) {
                int r = f ? -EIO : -errno;
                if (f)
                        fclose(f);
                snprintf(why, why_size, "cannot read '%s': %s", path, strerror(-r));
                return r;
        }
        fclose(f);
        if (runtime < 0) {
                snprintf(why, why_size,
                         "RT throttling is disabled (kernel.sched_rt_runtime_us = -1): a spinning FIFO "
                         "thread could starve the CPU forever; set it to 950000");
                return -EPERM;
        }
        if (n_free_cpus <= 0) {
                snprintf(why, why_size,
                         "no CPU is left free of FIFO compute threads for the supervisor, gateway and kernel "
                         "housekeeping: use fewer instances or threads, or a machine with more than 2 cores");
                return -EPERM;
        }
        return 0;
}

/* glibc 2.36 has no wrapper for sched_setattr(2). */
struct sched_attr_v1 {
        uint32_t size;
        uint32_t sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime, sched_deadline, sched_period;
};
#ifndef SCHED_FLAG_RESET_ON_FORK
#define SCHED_FLAG_RESET_ON_FORK 0x01
#endif

int sup_thread_set_fifo(pid_t tid, int priority) {
        struct sched_attr_v1 a = {.size = sizeof a, .sched_policy = SCHED_FIFO,
                                  .sched_flags = SCHED_FLAG_RESET_ON_FORK, .sched_priority = (uint32_t)priority};
        if (tid <= 0 || priority < 1 || priority > SUP_RT_PRIORITY_MAX)
                return -EINVAL;
        return syscall(SYS_sched_setattr, tid, &a, 0) < 0 ? -errno : 0;
}

int sup_thread_policy_format(pid_t tid, char *buf, size_t size) {
        struct sched_attr_v1 a = {0};
        if (syscall(SYS_sched_getattr, tid, &a, sizeof a, 0) < 0)
                return -errno;
        const char *name = a.sched_policy == SCHED_FIFO    ? "SCHED_FIFO"
                           : a.sched_policy == SCHED_RR    ? "SCHED_RR"
                           : a.sched_policy == SCHED_BATCH ? "SCHED_BATCH"
                           : a.sched_policy == SCHED_IDLE  ? "SCHED_IDLE"
                           : a.sched_policy == SCHED_OTHER ? "SCHED_OTHER"
                                                           : "other";
        if (a.sched_policy == SCHED_FIFO || a.sched_policy == SCHED_RR)
                return snprintf(buf, size, "%s/%u", name, a.sched_priority);
        return snprintf(buf, size, "%s", name);
}

int sup_rt_apply_compute_threads(pid_t pid, const cpu_set_t *cpus, int priority, struct sup_rt_result *ret) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        struct sup_rt_result res = {0};
        struct rlimit rl = {SUP_RTTIME_LIMIT_US, SUP_RTTIME_LIMIT_US};
        res.rttime_err = prlimit(pid, RLIMIT_RTTIME, &rl, NULL) < 0 ? -errno : 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                pid_t tid = (pid_t)atoi(de->d_name);
                if (tid <= 0)
                        continue;
                char st[96], comm[32] = "";
                snprintf(st, sizeof st, "/proc/%d/task/%d/comm", (int)pid, (int)tid);
                FILE *f = fopen(st, "re");
                bool io_thread = f && fgets(comm, sizeof comm, f) && strncmp(comm, "nng:", 4) == 0;
                if (f)
                        fclose(f);
                if (io_thread)
                        continue; /* nng's I/O, timer and resolver threads are not compute */
                /* Never FIFO on a CPU outside the instance (the housekeeping CPUs): a
                 * thread that may run there (a cpuset that did not apply) is left alone. */
                cpu_set_t allowed, outside;
                if (sched_getaffinity(tid, sizeof allowed, &allowed) < 0)
                        continue;
                CPU_XOR(&outside, &allowed, cpus);
                CPU_AND(&outside, &outside, &allowed);
                if (CPU_COUNT(&outside) > 0) {
                        if (!res.first_err)
                                res.first_err = -EDOM;
                        continue;
                }
                int r = sup_thread_set_fifo(tid, priority);
                if (r < 0 && !res.first_err)
                        res.first_err = r;
                if (r == 0) {
                        res.n_fifo++;
                        res.sample_tid = tid;
                }
        }
        closedir(d);
        *ret = res;
        return 0;
}
