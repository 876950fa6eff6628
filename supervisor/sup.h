/* sup.h — `dsvisor start`, `status` and `stop` internals (issue 7): the configuration
 * (config.c), the worker instances and their lifecycle (instance.c), the control socket
 * (control.c), the malloc tunable (malloc_env.c). Shared by cmd_start.c and cmd_status.c,
 * and by main.c for the re-exec.
 *
 *     struct sup_config cfg;
 *     sup_config_init(&cfg);
 *     r = sup_config_parse(argc, argv, &cfg, err, sizeof err);  // --config FILE, then the CLI
 *
 * Ownership: every struct here is caller storage; strings are copied into fixed arrays.
 * Functions return 0 (or a count) or a negative errno; only cmd_*.c print (and
 * malloc_env.c the warning when its re-exec fails: it runs before any command). */
#ifndef DSV_SUP_H
#define DSV_SUP_H

#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "dsv_platform.h"

/* ---- configuration (config.c) ------------------------------------------------------ */

#define SUP_PORT_DEFAULT 8080
#define SUP_GRACE_MS_DEFAULT 10000
#define SUP_MAX_QUEUE_DEFAULT 32
#define SUP_MAX_CONNECTIONS_DEFAULT 512
#define SUP_RT_PRIORITY_MAX 49 /* issue 7: FIFO threads stay below the kernel's own (50) */

struct sup_config {
        char model[PATH_MAX];        /* native file or HF folder; "": the bundled default */
        char model_id[128];          /* served model id (/v1/models); "": the model's file stem */
        char worker[PATH_MAX];       /* dsvisor-worker binary; "": beside dsvisor */
        int n_instances;             /* 0: one per NUMA node */
        int threads_per_instance;    /* 0: the instance's cores */
        char host[64];               /* gateway address, numeric */
        int port;                    /* gateway port, 0: ephemeral */
        int rt_priority;             /* SCHED_FIFO priority 1..49 for compute threads; 0: off */
        enum dsv_hugepages_mode hugepages;
        bool no_housekeeping;        /* give every core to instances */
        int grace_ms;                /* drain: in-flight requests may finish this long */
        int n_ctx;                   /* passed to the workers; 0: theirs */
        int max_batch;               /* 0: the worker's default */
        int kv_mem_mib;              /* 0: the worker's default */
        int max_queue;               /* admitted requests waiting per instance; beyond: 429 */
        int max_connections;         /* HTTP connections; beyond: 503 from the accept path */
        uint64_t memory_max_bytes;   /* per-instance memory.max; 0: none */
        int restart_limit;           /* crash loop: restarts within restart_window_ms */
        int restart_window_ms;
        int restart_backoff_min_ms;
        int restart_backoff_max_ms;
        char runtime_dir[PATH_MAX];  /* control socket, worker sockets; "": dsv_ipc_runtime_dir */
        char config_path[PATH_MAX];  /* --config FILE, kept for SIGHUP reloads */
        char cgroup_parent[256];     /* instance cgroups in <own>/<this>; "": <own> (relative,
                                      * checked by dsv_cgroup_parent_check) */
        char cli_set[32];            /* internal: which options the command line set */
};

void sup_config_init(struct sup_config *cfg);

/* Applies the JSON object in `text` (keys: the long option names, e.g. "instances",
 * "rt-priority" or "rt_priority", "hugepages"), skipping options the command line
 * already set.
 * -EINVAL with err naming the key for unknown keys, wrong types or bad values. */
int sup_config_apply_json(struct sup_config *cfg, const char *text, char *err, size_t err_size);

/* Parses `dsvisor start` options (argv[0] is "start"), then reads --config FILE when
 * given; the command line wins over the file. Returns 0, 1 for --help (usage printed
 * to stdout), or -EINVAL with err set. */
int sup_config_parse(int argc, char **argv, struct sup_config *cfg, char *err, size_t err_size);

/* Re-reads cfg->config_path into a copy of cfg, keeping the command line's options. */
int sup_config_reload(const struct sup_config *cfg, struct sup_config *ret, char *err, size_t err_size);

void sup_start_usage(FILE *out);

/* ---- restart policy (instance.c) --------------------------------------------------- */

/* Exponential backoff with a crash-loop limit, on a caller-supplied clock (ms). */
struct sup_backoff {
        int min_ms, max_ms;   /* first delay, cap */
        int limit;            /* more than `limit` exits within window_ms: give up */
        int window_ms;
        int healthy_reset_ms; /* this long up resets the delay to min_ms */
        int n_recent;         /* exits in the window */
        int64_t recent[64];   /* their times */
        int next_delay_ms;
};

void sup_backoff_init(struct sup_backoff *b, int min_ms, int max_ms, int limit, int window_ms);
/* The worker exited at now_ms after being up since up_since_ms (-1: never ready).
 * Returns the delay before the restart (≥ 0), or -ELOOP when the crash-loop limit is hit:
 * 0 for the first exit (and the first after healthy_reset_ms up), then min_ms doubling
 * up to max_ms. */
int sup_backoff_on_exit(struct sup_backoff *b, int64_t now_ms, int64_t up_since_ms);

/* ---- scheduling (instance.c) ------------------------------------------------------- */

/* RT preflight (issue 7 item 4): FIFO needs RT throttling on (sched_rt_runtime_us not -1,
 * read from proc_root/sys/kernel/sched_rt_runtime_us), a priority in 1..49, and at least
 * one CPU outside every instance (n_free_cpus > 0) for the supervisor and gateway.
 * Returns 0 or -EPERM/-EINVAL with the reason in why. */
int sup_rt_preflight(const char *proc_root, int priority, int n_free_cpus, char *why, size_t why_size);

/* Sets SCHED_FIFO priority with SCHED_RESET_ON_FORK on thread tid (sched_setattr).
 * Returns 0 or -errno (-EPERM under RT group scheduling without cpu.rt_runtime_us). */
int sup_thread_set_fifo(pid_t tid, int priority);
/* "SCHED_OTHER", "SCHED_FIFO/10", ... of thread tid into buf. */
int sup_thread_policy_format(pid_t tid, char *buf, size_t size);

/* ---- instances (instance.c) -------------------------------------------------------- */

enum sup_state {
        SUP_STATE_STARTING, /* spawned, not ready yet */
        SUP_STATE_READY,
        SUP_STATE_DRAINING, /* SIGTERM sent (stop or rolling restart) */
        SUP_STATE_BACKOFF,  /* exited, waiting to restart */
        SUP_STATE_FAILED,   /* crash loop: given up */
        SUP_STATE_STOPPED,
        SUP_STATE_COUNT
};
const char *sup_state_to_string(enum sup_state s);

struct sup_instance {
        int index;
        char name[32];             /* "0", "1", ... (gateway label, worker --instance) */
        int node_os;               /* NUMA node */
        char cpus[256];            /* cpulist */
        cpu_set_t cpu_set;         /* the same, for sched_setaffinity */
        int n_threads;
        char url[PATH_MAX + 8];    /* ipc:///<runtime>/worker-<i>.sock */
        struct dsv_cgroup_instance *cg;
        struct dsv_cgroup_report cg_report;
        char cg_path[2048];        /* every hierarchy's group: "v2 /sys/..., v1 cpu /sys/..." */
        pid_t pid;                 /* 0 when not running */
        int pidfd;                 /* -1 when not running */
        enum sup_state state;
        int64_t started_ms, ready_ms; /* monotonic; ready_ms -1 until ready */
        int64_t restart_at_ms;     /* BACKOFF: when to spawn again */
        int64_t exited_ms;         /* when the previous worker's exit was seen, -1: none */
        int64_t term_at_ms;        /* DRAINING: when SIGTERM was sent */
        int restarts;
        int gw_id;                 /* gateway instance id, -1 none */
        struct sup_backoff backoff;
        char sched[32];            /* scheduling policy in effect for compute threads */
        bool rt_applied;
        int rt_fallbacks;          /* FIFO refused -> SCHED_OTHER */
        int weights_fd;            /* borrowed: the node's memfd image */
        uint64_t weights_huge_bytes;
        struct dsv_perfctr *perf;
        struct dsv_perfctr_sample perf_prev;
        bool perf_prev_valid;
        double ctxsw_invol_per_s, migrations_per_s;
        int last_exit_status;      /* si_status of the last exit; -1 none */
        int last_exit_code;        /* CLD_EXITED, CLD_KILLED... */
};

/* ---- control socket (control.c) ---------------------------------------------------- */

/* A UNIX stream socket at <runtime_dir>/control.sock, 0600 in the 0700 runtime dir; one
 * JSON request line ({"cmd":"status"} or {"cmd":"stop"}) and one JSON reply per
 * connection. */
int sup_control_path(const char *runtime_dir, char *buf, size_t size);
/* Binds and listens (non-blocking, CLOEXEC); a stale socket of a dead supervisor is
 * replaced, a live one is -EADDRINUSE. Returns the fd. */
int sup_control_listen(const char *path);
/* Client: sends cmd and returns the malloc'd reply text in *ret (caller frees). */
int sup_control_call(const char *path, const char *cmd, int timeout_ms, char **ret);
/* Server: reads one request line from an accepted connection (≤ timeout_ms), returns
 * the command name in buf. */
int sup_control_read_cmd(int fd, int timeout_ms, char *buf, size_t size);
/* Writes all of text and a newline. */
int sup_control_write(int fd, const char *text);

/* ---- the supervisor's malloc thread cache (malloc_env.c) --------------------------- */

/* glibc.malloc.tcache_count for the `dsvisor start` process (not its children). */
#define SUP_TCACHE_COUNT "0"

/* True when the colon-separated GLIBC_TUNABLES string sets `name` ("glibc.malloc.x"). */
bool sup_tunables_has(const char *tunables, const char *name);
/* buf = item + ":" + tunables, or item alone when tunables is NULL or empty; -E2BIG. */
int sup_tunables_prepend(const char *item, const char *tunables, char *buf, size_t size);
/* Called first thing by `dsvisor start` with main()'s argv: unless GLIBC_TUNABLES already
 * sets glibc.malloc.tcache_count, re-executes /proc/self/exe with it added (does not
 * return on success). In the re-executed process it restores GLIBC_TUNABLES as it was,
 * so children get the original environment, and returns 1. Returns 0 when the user's
 * tunable is kept, or a negative errno when the re-exec failed (logged; the caller goes
 * on with the cache on). */
int sup_malloc_tcache_cap(char **argv);

/* ---- systemd notify (platform/notify.c, declared in dsv_platform.h) ---------------- */

#endif
