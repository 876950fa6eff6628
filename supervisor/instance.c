/* Worker instance helpers for `dsvisor start` (issue 7 items 4 and 6): the restart
 * backoff with its crash-loop limit, the SCHED_FIFO preflight, and per-thread
 * scheduling through sched_setattr. The lifecycle itself (spawn, reap, restart) runs in
 * cmd_start.c's poll loop, which owns the instances. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sup.h"

const char *sup_state_to_string(enum sup_state s) {
        static const char *const names[SUP_STATE_COUNT] = {
                [SUP_STATE_STARTING] = "starting", [SUP_STATE_READY] = "ready",
                [SUP_STATE_DRAINING] = "draining", [SUP_STATE_BACKOFF] = "backoff",
                [SUP_STATE_FAILED] = "failed",     [SUP_STATE_STOPPED] = "stopped",
        };
        return (unsigned)s < SUP_STATE_COUNT ? names[s] : "invalid";
}

/* ---- restart backoff ---------------------------------------------------------------- */

void sup_backoff_init(struct sup_backoff *b, int min_ms, int max_ms, int limit, int window_ms) {
        memset(b, 0, sizeof *b);
        b->min_ms = min_ms;
        b->max_ms = max_ms;
        b->limit = limit < 64 ? limit : 63;
        b->window_ms = window_ms;
        b->healthy_reset_ms = 60000; /* supervisord/s6 practice: a minute up means it recovered */
        b->next_delay_ms = 0;
}

int sup_backoff_on_exit(struct sup_backoff *b, int64_t now_ms, int64_t up_since_ms) {
        /* Forget exits that left the window. */
        int k = 0;
        for (int i = 0; i < b->n_recent; i++)
                if (now_ms - b->recent[i] < b->window_ms)
                        b->recent[k++] = b->recent[i];
        b->n_recent = k;
        if (b->n_recent < (int)(sizeof b->recent / sizeof b->recent[0]))
                b->recent[b->n_recent++] = now_ms;
        if (b->n_recent > b->limit)
                return -ELOOP;
        /* The first exit restarts at once: a one-off crash should cost a restart, not a
         * restart plus a delay (the weights stay in the memfd, so a restart is cheap).
         * Only exits that follow it wait, from min_ms doubling up to max_ms. */
        if (up_since_ms >= 0 && now_ms - up_since_ms >= b->healthy_reset_ms)
                b->next_delay_ms = 0;
        int delay = b->next_delay_ms;
        b->next_delay_ms = delay == 0 ? b->min_ms : delay > b->max_ms / 2 ? b->max_ms : delay * 2;
        return delay < b->max_ms ? delay : b->max_ms;
}

/* ---- real-time scheduling ----------------------------------------------------------- */

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
                         "no CPU is left free of FIFO threads for the supervisor, gateway and kernel "
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
