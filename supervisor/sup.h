/* sup.h — `dsvisor start`, `status` and `stop` internals: the configuration (config.c),
 * the log line and clock (log.c, clock.c), the restart backoff (restart_backoff.c),
 * SCHED_FIFO for compute threads (rt_sched.c), the served model (served_model.c), the
 * weight images and systemd's fd store (weights.c), the worker instances and their
 * lifecycle (instance.c), the running supervisor that cmd_start.c sets up and drives
 * (struct sup), its reload (reload.c) and systemd notification (sup_notify.c), its status
 * JSON (status.c) and Prometheus families (sup_metrics.c), the control socket
 * (control.c), the malloc tunable (malloc_env.c). Shared by cmd_start.c
 * and cmd_status.c, and by main.c for the re-exec. Where a cgroup lives and what is in
 * effect in it is the platform's (dsv_platform.h), never decided here.
 *
 *     struct sup_config cfg;
 *     sup_config_init(&cfg);
 *     r = sup_config_parse(argc, argv, &cfg, err, sizeof err);  // --config FILE, then the CLI
 *
 * Ownership: every struct here is caller storage; strings are copied into fixed arrays.
 * Functions return 0 (or a count) or a negative errno. What the supervisor logs goes
 * through sup_log(); config.c, restart_backoff.c, rt_sched.c, control.c and
 * malloc_env.c never log (but malloc_env.c's warning when its re-exec fails: it runs
 * before any command). */
#ifndef DSV_SUP_H
#define DSV_SUP_H

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "dsv_platform.h"
#include "dsv_topology.h"
#include "dsv_log.h"
#include "dsv_policy.h"
#include "drift.h"

/* ---- placement (placement.c) --------------------------------------------------------- */

struct sup_place_request {
        enum dsv_topo_source source;   /* SYSTEM: this machine as given to dsvisor */
        const char *source_arg;        /* synthetic string or XML path; NULL for SYSTEM */
        int n_instances;               /* 0: one per NUMA node */
        int threads_per_instance;      /* 0: the instance's cores */
        bool no_housekeeping;          /* every core to instances */
        const char *cpus;              /* --cpus; NULL or "": not given */
        const char *housekeeping_cpus; /* --housekeeping-cpus; NULL or "": not given */
};

struct sup_placement {
        struct dsv_topology given;     /* the machine as given to dsvisor */
        struct dsv_given_set given_set;
        struct dsv_topology topo;      /* the instances' part of it: plan indexes into this */
        struct dsv_policy_placement plan;
        bool chosen;                   /* --cpus or --housekeeping-cpus chose the CPUs */
        int n_housekeeping;            /* the supervisor's and gateway's CPUs: the */
        int housekeeping[DSV_TOPOLOGY_MAX_PUS]; /* --housekeeping-cpus, else the given
                                                 * CPUs no instance uses; may be none */
};

/* Reads the topology (restricted to the given set for SYSTEM), applies the CPU lists
 * and places the instances. Returns 0, or a negative errno with a message naming the
 * cause (and the CPUs) in why. *ret is large: static storage. */
int sup_place(const struct sup_place_request *req, struct sup_placement *ret, char *why, size_t why_size);

/* ---- configuration (config.c) ------------------------------------------------------ */

#define SUP_PORT_DEFAULT 8080
#define SUP_GRACE_MS_DEFAULT 10000
#define SUP_MAX_QUEUE_DEFAULT 32
/* A queue with half a service time of wait (by Little's law, half the full batch) keeps
 * the batch full under overload; a longer one only adds wait. */
#define SUP_MAX_QUEUE_WAIT_PCT_DEFAULT 50
#define SUP_MAX_CONNECTIONS_DEFAULT 512
#define SUP_RT_PRIORITY_MAX 49 /* FIFO threads stay below the kernel's own (50) */

struct sup_config {
        char model[PATH_MAX];        /* native file or HF folder; "": the bundled default */
        char model_id[128];          /* served model id (/v1/models); "": the model's file stem */
        char reasoning_format[16];   /* auto | deepseek | none; "": auto (chat_format.c) */
        char worker[PATH_MAX];       /* dsvisor-worker binary; "": beside dsvisor */
        int n_instances;             /* 0: one per NUMA node */
        int threads_per_instance;    /* 0: the instance's cores */
        char host[64];               /* gateway address, numeric */
        int port;                    /* gateway port, 0: ephemeral */
        int rt_priority;             /* SCHED_FIFO priority 1..49 for compute threads; 0: off */
        enum dsv_hugepages_mode hugepages;
        bool no_housekeeping;        /* give every core to instances */
        char cpus[1024];             /* CPUs instances may use (cpulist); "": every given CPU */
        char housekeeping_cpus[1024]; /* CPUs kept for supervisor, gateway, IRQs; "": default */
        int grace_ms;                /* drain: in-flight requests may finish this long */
        int n_ctx;                   /* passed to the workers; 0: theirs */
        int max_batch;               /* 0: the worker's default */
        int kv_mem_mib;              /* 0: the worker's default */
        char speculative[16];        /* --speculative for the workers; "": theirs (off) */
        int spec_k_min, spec_k_max;  /* 0: the worker's default */
        char draft_model[PATH_MAX];  /* --draft-model for the workers (absolute; speculative "draft"); "": none */
        char kv_dtype[8];            /* --kv-dtype for the workers; "": theirs (bf16) */
        char kv_disk[PATH_MAX];      /* --kv-disk: each worker's disk tier, DIR/INSTANCE.kvtier; "": none */
        int kv_disk_gib;             /* --kv-disk-gib: each tier file's size */
        int max_queue;               /* admitted requests waiting per instance; beyond: 429 */
        int max_queue_wait_pct;      /* expected queue wait, % of the recent service time; beyond: 429 */
        int max_connections;         /* HTTP connections; beyond: 503 from the accept path */
        uint64_t memory_max_bytes;   /* per-instance memory.max; 0: none */
        bool allow_unenforced;       /* start even when a limit asked for is not in effect */
        int restart_limit;           /* crash loop: restarts within restart_window_ms */
        int restart_window_ms;
        int restart_backoff_min_ms;
        int restart_backoff_max_ms;
        char runtime_dir[PATH_MAX];  /* control socket, worker sockets; "": dsv_ipc_runtime_dir */
        char config_path[PATH_MAX];  /* --config FILE, kept for SIGHUP reloads */
        char cgroup_parent[256];     /* instance cgroups in <own>/<this>; "": <own> (relative,
                                      * checked by dsv_cgroup_parent_check) */
        /* the HTTP surface (handed to the gateway by gateway_setup.c) */
        char served_model_names[1024]; /* names, each ending in '\n'; the first is the id */
        int default_max_tokens;      /* 0: the rest of the context */
        int max_prompt_tokens;       /* 0: the context */
        int max_prompt_bytes;        /* prompt or messages text */
        int request_timeout_ms;      /* arrival to last token; 0: none */
        char chat_template[PATH_MAX]; /* Jinja file the workers render chats with; "": the model's */
        char api_keys[4096];         /* keys, each ending in '\n' (never logged) */
        char api_key_file[PATH_MAX];
        bool protect_metrics;        /* /metrics, /health and unknown URLs need a key too */
        bool allow_unauthenticated;  /* a non-loopback host without a key */
        char cors_origins[1024];     /* "*" or a comma-separated list; "": no CORS */
        char tls_cert[PATH_MAX];     /* PEM chain and key: HTTPS */
        char tls_key[PATH_MAX];
        int max_connections_per_ip;  /* 0: no cap */
        int first_byte_timeout_s, header_timeout_s, body_timeout_s, idle_timeout_s;
        char metrics_compat[16];     /* "vllm": /metrics also under vLLM's names; "": dsvisor's only */
        char log_format[8];          /* "text" | "json"; "": text */
        bool log_requests;           /* one log line per finished request, with its prompt */
        char cli_set[64];            /* internal: which options the command line set */
};

/* The defaults of the HTTP limits above. */
#define SUP_MAX_PROMPT_BYTES_DEFAULT (256 << 10)
#define SUP_FIRST_BYTE_TIMEOUT_S_DEFAULT 10
#define SUP_HEADER_TIMEOUT_S_DEFAULT 30
#define SUP_BODY_TIMEOUT_S_DEFAULT 60
#define SUP_IDLE_TIMEOUT_S_DEFAULT 30

/* Splits a '\n'-terminated list (served_model_names, api_keys) into up to max pointers
 * into buf, which it modifies. Returns the count. */
int sup_config_list_split(char *buf, char **ret, int max);

/* 1 when host (numeric) is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x), else 0. */
int sup_host_is_loopback(const char *host);

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

/* How a running supervisor applies a changed option on SIGHUP. */
enum sup_reload_how {
        SUP_RELOAD_FULL_RESTART, /* only a new `dsvisor start` can: why says what holds the old value */
        SUP_RELOAD_AT_ONCE,      /* the supervisor uses the new value from now on */
        SUP_RELOAD_NEW_WORKERS,  /* each instance's next worker gets it: a rolling restart */
};
struct sup_config_change {
        const char *option; /* the long option name */
        enum sup_reload_how how;
        const char *why;    /* SUP_RELOAD_FULL_RESTART: the reason; static text */
};
/* The options whose values differ between cfg and next, in the option table's order,
 * into ret[0..max): every option of the table is compared, so none is missed; how each
 * is applied comes from config.c's reload rules (one without a rule needs a full
 * restart). Returns the count. */
int sup_config_changes(const struct sup_config *cfg, const struct sup_config *next, struct sup_config_change *ret,
                       int max);
/* The options the command line set whose value in cfg->config_path differs: the file's
 * value does not apply (the command line wins), into ret[0..max). Returns the count. */
int sup_config_cli_overrides(const struct sup_config *cfg, const char **ret, int max);
/* Copies option `option`'s value from next into cfg; -ENOENT for an unknown name. */
int sup_config_take(struct sup_config *cfg, const struct sup_config *next, const char *option);

/* A limit option the user set (memory-max-mib; 0 is none) must be in effect in rep, an
 * instance's cgroup report (NULL: no cgroups at all, no_cgroups says why), unless
 * cfg->allow_unenforced. -EPERM with err naming the option and the reason. */
int sup_config_check_enforced(const struct sup_config *cfg, const struct dsv_cgroup_report *rep,
                              const char *no_cgroups, char *err, size_t err_size);

struct dsv_gateway;

/* ---- log line (log.c) ----------------------------------------------------------------- */

/* One line on stderr, "<prio>dsvisor: ...": prio is an sd-daemon level (3 error,
 * 4 warning, 6 info), so journald keeps it; with the JSON format one object (dsv_log.h). */
void sup_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One structured line: event with fields (not owned); instance NULL for none. */
struct cJSON;
void sup_log_event(int prio, const char *instance, const char *event, const struct cJSON *fields);
/* The format of every line from here on (default text); the workers are told the same. */
void sup_log_set_format(enum dsv_log_format fmt);
enum dsv_log_format sup_log_format(void);
/* --log-requests (request_log.c): a "request" line per finished request, with its
 * prompt; off: the gateway records none. */
void sup_request_log_setup(struct dsv_gateway *gw, bool enabled);

/* ---- restart policy (restart_backoff.c) -------------------------------------------- */

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

/* ---- real-time scheduling (rt_sched.c) --------------------------------------------- */

#define SUP_RTTIME_LIMIT_US 10000000 /* RLIMIT_RTTIME: a FIFO thread that never blocks for 10 s dies */

/* RT preflight: FIFO needs RT throttling on (sched_rt_runtime_us not -1,
 * read from proc_root/sys/kernel/sched_rt_runtime_us), a priority in 1..49, and at least
 * one CPU outside every instance (n_free_cpus > 0) for the supervisor and gateway.
 * Returns 0 or -EPERM/-EINVAL with the reason in why. */
int sup_rt_preflight(const char *proc_root, int priority, int n_free_cpus, char *why, size_t why_size);

/* Sets SCHED_FIFO priority with SCHED_RESET_ON_FORK on thread tid (sched_setattr).
 * Returns 0 or -errno (-EPERM under RT group scheduling without cpu.rt_runtime_us). */
int sup_thread_set_fifo(pid_t tid, int priority);
/* "SCHED_OTHER", "SCHED_FIFO/10", ... of thread tid into buf. */
int sup_thread_policy_format(pid_t tid, char *buf, size_t size);

struct sup_rt_result {
        int n_fifo;        /* threads now SCHED_FIFO */
        pid_t sample_tid;  /* one of them, 0 none */
        int first_err;     /* first refusal: -EPERM, -EDOM (may run outside cpus), ...; 0 none */
        int rttime_err;    /* setting RLIMIT_RTTIME failed: -errno; 0 ok */
};
/* Sets RLIMIT_RTTIME SUP_RTTIME_LIMIT_US on worker pid and SCHED_FIFO priority on its
 * compute threads: every thread but nng's ("nng:*": I/O, timers, resolver) whose
 * affinity lies inside cpus. -errno when its threads cannot be listed. */
int sup_rt_apply_compute_threads(pid_t pid, const cpu_set_t *cpus, int priority, struct sup_rt_result *ret);

/* ---- the served model (served_model.c) --------------------------------------------- */

struct sup_model {
        char path[PATH_MAX]; /* the native file */
        char id[128];        /* served model id */
        uint64_t bytes;
        char key[96];        /* size and mtime: names the fd-store entries */
};

/* cfg->model (an HF folder is converted once into the cache), or the bundled default
 * looked for beside exe_dir, in $DSV_DATA_DIR and in the source tree. Logs what it
 * found or why not. */
int sup_model_resolve(const struct sup_config *cfg, const char *exe_dir, struct sup_model *ret);
/* --speculative mtp needs a model with an MTP module, --draft-model a draft model that
 * opens and shares the served model's tokenizer: -EINVAL (logged, naming the models)
 * otherwise; 0 for any other method. */
int sup_model_check_speculative(const struct sup_config *cfg, const struct sup_model *m);

/* ---- the template's output conventions (chat_format.c) ------------------------------- */

struct sup_chat_format {
        int reasoning;     /* enum dsv_gateway_reasoning_format: the requests' default */
        bool think_opened; /* the generation prompt opens <think> */
        int tools;         /* enum dsv_gateway_tool_format: the tool-call syntax the model writes */
};

struct dse_tokenizer;
/* From template_src (NULL: none) rendered for one user turn with tok's BOS/EOS, and
 * --reasoning-format (auto|deepseek|none, "": auto). -EINVAL with why filled for a bad
 * option value. */
int sup_chat_format_of(const struct dse_tokenizer *tok, const char *template_src, const char *reasoning_opt,
                       struct sup_chat_format *ret, char *why, size_t why_size);
/* Opens m's tokenizer, renders the probe and decides; logs the result or the error. */
int sup_chat_format_detect(const struct sup_config *cfg, const struct sup_model *m, struct sup_chat_format *ret);

/* ---- weight images and the fd store (weights.c) ------------------------------------ */

struct sup_weights {
        int node_os;
        struct dsv_hugepages_image img;
        bool from_store; /* re-attached from systemd's fd store */
};

struct sup_weight_set {
        struct sup_weights w[DSV_TOPOLOGY_MAX_NODES];
        int n;
};

/* One sealed image of the model per NUMA node in nodes[0..n_nodes) (duplicates once):
 * re-attached from systemd's fd store when it holds this model's, else loaded (in
 * HugePages as `mode` says) and handed to the fd store. Logs what it did. `set` must
 * be zeroed; sup_weight_set_done() frees it, also after a failure. */
int sup_weight_set_load(struct sup_weight_set *set, const struct sup_model *m, const int *nodes, int n_nodes,
                        enum dsv_hugepages_mode mode);
struct sup_weights *sup_weight_set_find(struct sup_weight_set *set, int node_os);
/* Takes the set's images of model m out of systemd's fd store (FDSTOREREMOVE), or offers
 * them again: a reload that replaces them keeps the store to the images in use. */
void sup_weight_set_unstore(const struct sup_weight_set *set, const struct sup_model *m);
void sup_weight_set_store(const struct sup_weight_set *set, const struct sup_model *m);
void sup_weight_set_done(struct sup_weight_set *set);

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

/* What every instance borrows from the supervisor; it outlives them. */
struct sup_instance_env {
        const struct sup_config *cfg; /* the running configuration: a reload changes it */
        const char *worker_path;
        struct dsv_gateway *gw;       /* NULL until the gateway is up */
        struct dsv_cgroup_host *cg_host; /* NULL: no cgroups */
};

/* One worker process and its lifecycle: spawned into its cgroup, ready when the
 * gateway's health polling says so (then RT and perf counters), killed when it stops
 * answering, reaped through its pidfd, restarted after a backoff or given up on, drained
 * on stop and for a rolling restart. */
struct sup_instance {
        const struct sup_instance_env *env;
        int index;
        char name[32];             /* "0", "1", ... (gateway label, worker --instance) */
        int node_os;               /* NUMA node */
        char cpus[256];            /* cpulist */
        cpu_set_t cpu_set;         /* the same, for sched_setaffinity */
        int n_threads;
        char url[PATH_MAX + 8];    /* ipc:///<runtime>/worker-<i>.sock */
        const struct sup_weights *weights; /* borrowed: the node's memfd image */
        struct dsv_cgroup_instance *cg;
        struct dsv_cgroup_report cg_report;
        uint64_t rt_runtime_us;    /* its share of RT runtime (v1 cpu.rt_runtime_us), 0: none */
        bool renew_cgroup;         /* a reload changed its limits: a new group before its next worker */
        char cg_path[2048];        /* every hierarchy's group: "v2 /sys/..., v1 cpu /sys/..." */
        pid_t pid;                 /* 0 when not running */
        int pidfd;                 /* -1 when not running */
        enum sup_state state;
        int64_t started_ms, ready_ms; /* monotonic; ready_ms -1 until ready */
        int64_t restart_at_ms;     /* BACKOFF: when to spawn again */
        int64_t exited_ms;         /* when the previous worker's exit was seen, -1: none */
        int64_t term_at_ms;        /* DRAINING: when SIGTERM was sent; READY: last seen healthy */
        int restarts;
        int gw_id;                 /* gateway instance id, -1 none */
        struct sup_backoff backoff;
        char sched[32];            /* scheduling policy in effect for compute threads */
        bool rt_applied;
        int rt_fallbacks;          /* FIFO refused -> SCHED_OTHER */
        uint64_t weights_huge_bytes;
        struct dsv_perfctr *perf;
        struct dsv_perfctr_sample perf_prev;
        bool perf_prev_valid;
        double ctxsw_invol_per_s, migrations_per_s;
        int last_exit_status;      /* si_status of the last exit; -1 none */
        int last_exit_code;        /* CLD_EXITED, CLD_KILLED... */
};

/* The worker binary: cfg->worker, or dsvisor-worker in exe_dir, into buf; -errno (logged)
 * when it is not executable. */
int sup_worker_path(const struct sup_config *cfg, const char *exe_dir, char *buf, size_t size);
/* An instance that is not running yet: index, its CPUs (cpus[0..n_cpus)), NUMA node,
 * threads and worker socket in runtime_dir. */
int sup_instance_init(struct sup_instance *in, const struct sup_instance_env *env, int index, int node_os,
                      int n_threads, const int *cpus, int n_cpus, const char *runtime_dir);
/* Its cgroup below env->cg_host with the configured limits; rt_runtime_us is its share
 * of RT runtime (0: none). No-op without cgroups. With renew_cgroup set, the next restart
 * replaces the group (after its worker is gone) with one made the same way. */
int sup_instance_create_cgroup(struct sup_instance *in, uint64_t rt_runtime_us);
/* Starts the worker (in its cgroup, on its CPUs, with the weight memfd): STARTING. */
int sup_instance_spawn(struct sup_instance *in);
/* Reaps the worker when its pidfd says it exited. stopping: it stays STOPPED;
 * rolling: it drained on purpose and starts again at once; else the backoff decides.
 * Returns true when it had exited. */
bool sup_instance_reap(struct sup_instance *in, bool stopping, bool rolling);
/* One step at now: a due restart (counted unless rolling), readiness, the startup and
 * health timeouts. Returns true when it became ready. */
bool sup_instance_tick(struct sup_instance *in, int64_t now, bool rolling);
/* Leaves routing; a running worker gets SIGTERM and drains (DRAINING), one that is not
 * running is STOPPED. */
void sup_instance_drain(struct sup_instance *in);
/* SIGKILL to a running worker. */
void sup_instance_kill(struct sup_instance *in);
/* Reads the perf counters: the per-second rates since the previous call. */
void sup_instance_perf_refresh(struct sup_instance *in);
/* Kills and reaps the worker, removes its cgroup, frees the counters. */
void sup_instance_done(struct sup_instance *in);

#define SUP_MAX_INSTANCES 64 /* the gateway's DSV_GATEWAY_MAX_INSTANCES (checked in cmd_start.c) */

/* A rolling restart over the instances (a reload). */
struct sup_roll {
        bool pending[SUP_MAX_INSTANCES]; /* still to restart */
        int current;                     /* index being restarted, -1 none */
};
/* Every instance that has not failed is to restart. */
void sup_roll_begin(struct sup_roll *roll, const struct sup_instance *in, int n);
/* Drains the next pending instance once the one before is ready (or failed) again. */
void sup_roll_step(struct sup_roll *roll, struct sup_instance *in, int n);

/* Over in[0..n): how many are in state st; restarts and SCHED_FIFO refusals in all. */
int sup_instances_in_state(const struct sup_instance *in, int n, enum sup_state st);
uint64_t sup_instances_restarts(const struct sup_instance *in, int n);
uint64_t sup_instances_rt_fallbacks(const struct sup_instance *in, int n);

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

/* ---- the instances on their CPUs (placement.c) ------------------------------------ */

/* Places env->cfg's instances (sup_place on this machine as given) into inst[0..*ret_n)
 * (sup_instance_init), and keeps the calling thread on the *ret_n_free_cpus housekeeping
 * CPUs, SCHED_OTHER. Logs why not. */
int sup_place_instances(const struct sup_instance_env *env, const char *runtime_dir, struct sup_instance *inst,
                        int *ret_n, int *ret_n_free_cpus);

/* ---- the instances' cgroup host (cgroup_host.c) ------------------------------------ */

/* The platform's cgroup host below our own group and cfg->cgroup_parent, delegated,
 * with a killed supervisor's leftover groups removed. Without cgroups *ret is NULL and
 * note says why (an error only when --cgroup-parent asked for them). */
int sup_cgroup_host_setup(const struct sup_config *cfg, int n_instances, struct dsv_cgroup_host **ret, char *note,
                          size_t note_size);
/* Each instance's share of our own RT runtime (v1 cpu.rt_runtime_us, else 950000 us):
 * one part of n_instances + 1, the last kept for the supervisor's own group. */
uint64_t sup_cgroup_rt_share_us(const struct dsv_cgroup_host *h, int n_instances);
/* Undoes what setup changed in our own groups (after the instance groups are gone) and
 * frees h. NULL is a no-op. */
void sup_cgroup_host_done(struct dsv_cgroup_host *h);

/* ---- the running supervisor (cmd_start.c) ----------------------------------------- */

/* The supervisor's own metric families and its part of the status page's data, rendered
 * by the main thread and served from a copy by a gateway thread (sup_metrics.c). */
struct sup_metrics {
        pthread_mutex_t lock; /* guards text and status */
        char *text;
        char *status; /* sup_status_page_json() */
};

#define SUP_RELOAD_MAX_ITEMS 64

struct sup_reload_item {
        char option[32];
        char note[256]; /* applied: how ("at once", "rolling restart"); not applied: why */
};

/* What the last SIGHUP did: `dsvisor status` shows it. */
struct sup_reload_report {
        int64_t at_ms;   /* dsv_clock_now_ms() when it came; 0: no reload yet */
        int64_t at_unix; /* the same on the wall clock, seconds */
        char error[512]; /* the file was refused (the running configuration kept): why */
        int n_applied, n_not_applied;
        struct sup_reload_item applied[SUP_RELOAD_MAX_ITEMS], not_applied[SUP_RELOAD_MAX_ITEMS];
};

struct dse_tokenizer;
struct dse_chat_template;

/* The model's tokenizer and the served chat template, for the gateway's /tokenize and
 * /detokenize (render and encode as the workers do). Immutable once loaded: used from
 * HTTP threads at once. */
struct sup_tokenizer {
        struct dse_tokenizer *tok;
        struct dse_chat_template *chat; /* NULL: chats cannot be tokenized */
};

/* `dsvisor start`'s state: built by cmd_start.c's setup, changed by its poll loop only
 * (main thread); status.c and sup_metrics.c read it there. */

struct sup {
        struct sup_config cfg;
        char exe_dir[PATH_MAX];
        char worker_path[PATH_MAX];
        char runtime_dir[PATH_MAX];
        char control_path[PATH_MAX];
        int control_fd, sig_fd;
        struct sup_model model;
        struct sup_chat_format chat;
        int n_free_cpus;           /* CPUs outside every instance */
        char cg_note[256];         /* why there are no cgroups */
        struct sup_weight_set weights;
        struct sup_instance_env env;
        int gw_port;
        int n;
        struct sup_instance inst[SUP_MAX_INSTANCES];
        bool stopping;
        int64_t stop_kill_at_ms;
        bool ready_sent;
        uint64_t watchdog_usec;
        int64_t last_watchdog_ms, last_perf_ms, last_trim_ms;
        char last_status[256];
        struct sup_roll roll;
        struct sup_reload_report reload; /* what the last SIGHUP did */
        bool all_failed;           /* every instance hit its crash-loop limit */
        int64_t started_ms;
        struct sup_metrics metrics;
        struct sup_tokenizer tokenizer; /* serves /tokenize and /detokenize */
        /* output drift by instance index (drift_watch.c) */
        struct sup_drift_window drift[SUP_MAX_INSTANCES];
        struct sup_drift_verdict drift_verdict[SUP_MAX_INSTANCES];
};

/* ---- output drift between the instances (drift_watch.c) ---------------------------- */

/* Feeds each instance's confidence counts (its worker's last stats reply, through the
 * gateway) into its window and compares every instance with its peers (drift.h) into
 * s->drift_verdict (main thread, once a second). */
void sup_drift_refresh(struct sup *s, int64_t now_ms);

/* ---- the served tokenizer (tokenizer_hook.c) ----------------------------------------- */

/* Loads them from s->model and s->cfg.chat_template and installs them into s->env.gw. A
 * model without a tokenizer leaves the endpoints at 501 (logged); other failures are
 * logged and returned. */
int sup_tokenizer_setup(struct sup *s);
/* After the gateway is freed. */
void sup_tokenizer_done(struct sup_tokenizer *t);

/* ---- the gateway (gateway_setup.c) --------------------------------------------------- */

/* Creates s->env.gw from s->cfg with every placed instance (not ready yet) and the
 * supervisor's metrics hook, and starts HTTP; sets s->gw_port. Logs why not. */
int sup_gateway_setup(struct sup *s);

/* ---- systemd notification (sup_notify.c) ------------------------------------------ */

/* Reads WATCHDOG_USEC into s. */
void sup_notify_setup(struct sup *s);
/* Each loop tick (every tick_ms or sooner), with the instances ready and failed before
 * this tick's stop: READY=1 once every instance is ready (logged), STATUS= when it
 * changes, WATCHDOG=1 every WATCHDOG_USEC/2 while not every instance has failed. */
void sup_notify_tick(struct sup *s, int64_t now, int ready, int failed, int tick_ms);
/* STOPPING=1 with its STATUS=. */
void sup_notify_stopping(void);
/* Around a long step on the main thread (a reload's new weights): with what, STATUS=what
 * and, under a watchdog, WATCHDOG_USEC raised to an hour; with NULL after the step, the
 * watchdog timeout set back (the next tick's STATUS= replaces what). */
void sup_notify_long_step(struct sup *s, const char *what);

/* ---- reload (reload.c) ------------------------------------------------------------- */

/* SIGHUP: reads --config again and compares every option with the running one. A changed
 * option is applied at once (restart policy), or through a rolling restart that gives
 * each instance a new worker (worker options, the worker binary, the model and
 * hugepages: new weight images first; limits and rt-priority: a new cgroup per
 * instance), after the checks a new value needs (executable worker, resolvable model,
 * cgroups for a limit, the RT preflight). Every other changed option, and one that
 * failed its check, is named with the reason in a warning and in s->reload. A bad file
 * keeps the running configuration (logged, s->reload.error). */
void sup_reload(struct sup *s);

/* ---- status (status.c) ------------------------------------------------------------- */

/* The supervisor's state as one JSON object (what `dsvisor status --json` prints);
 * malloc'd text, NULL without memory. */
char *sup_status_json(const struct sup *s);
/* The instances as the gateway's status page shows them (GET /status's "host"): state,
 * node, CPUs, threads, cgroup limits in effect, scheduling, restarts, output drift; no
 * pid, path or file name. malloc'd text, NULL without memory. */
char *sup_status_page_json(const struct sup *s);

/* ---- the supervisor's Prometheus families (sup_metrics.c) -------------------------- */

void sup_metrics_init(struct sup_metrics *m);
void sup_metrics_done(struct sup_metrics *m);
/* Renders restarts, scheduling, cgroup limits and CPU throttling, weight pages and perf
 * counters of s into m, and the status page's part (main thread). */
void sup_metrics_refresh(struct sup_metrics *m, const struct sup *s);
/* The gateway's /metrics hook (any thread): writes the last rendering; userdata is m. */
int sup_metrics_hook(FILE *out, void *userdata);
/* The gateway's status hook (any thread): writes the last sup_status_page_json(). */
int sup_status_page_hook(FILE *out, void *userdata);

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

#endif
