/* dsvisor-worker internals shared by main.c, serve.c and hygiene.c. */
#ifndef DSV_WORKER_H
#define DSV_WORKER_H

#include <signal.h>
#include <stdint.h>

#include "dse.h"
#include "dsv_ipc.h"
#include "dsv_log.h"
#include "scheduler.h"

/* The command line (worker/README.md). */
struct worker_config {
        const char *model_path; /* --model: native file or HF folder */
        int model_fd;           /* --model-fd, -1 when unset */
        const char *listen_url; /* --listen */
        int n_threads;          /* --threads */
        int cpus[1024];         /* --cpus */
        int n_cpus;
        int n_ctx;              /* --n-ctx, 0: min(max_position_embeddings, 4096) */
        int max_batch;          /* --max-batch */
        int token_budget;       /* --token-budget */
        int kv_mem_mib;         /* --kv-mem-mib, 0: enough for max_batch full contexts */
        enum dse_kv_dtype kv_dtype; /* --kv-dtype, else $DSV_KV, else bf16 */
        const char *kv_disk_dir; /* --kv-disk: the disk tier's directory, NULL: none */
        int kv_disk_gib;         /* --kv-disk-gib: its file's size */
        int grace_ms;           /* --grace-ms */
        int max_queue;          /* --max-queue */
        const char *instance;   /* --instance */
        const char *chat_template_path; /* --chat-template: instead of the model's */
        int allow_amx;          /* --amx: AMX kernels allowed (batch invariance within rounding) */
        struct spec_config spec; /* --speculative, --spec-k-min, --spec-k-max, --spec-step-tokens */
        const char *draft_model_path; /* --draft-model (spec.method SPEC_DRAFT), NULL: none */
        int fast_forward;        /* --fast-forward: the longest forced run a step carries, 0: off */
        enum dsv_log_format log_format; /* --log-format text|json (dsv_log.h) */
};

/* Parses argv into cfg (defaults first); -EINVAL with a message on stderr. */
int worker_parse_args(int argc, char **argv, struct worker_config *cfg);

/* ---- hygiene.c ---- */

/* Dies with the parent: PR_SET_PDEATHSIG(SIGKILL), then checks the parent is still the
 * one that started us (expected_ppid: $DSV_PARENT_PID if set, else getppid() before the
 * prctl) so a parent that died before the prctl is noticed. -ESRCH when orphaned. */
int hygiene_bind_to_parent(void);
/* Nonzero when the parent we started with is gone (re-parented). */
int hygiene_orphaned(void);
/* SIGTERM/SIGINT set the drain flag (no SA_RESTART: blocking calls return); SIGPIPE is
 * ignored. */
int hygiene_install_signals(void);
extern volatile sig_atomic_t hygiene_drain_requested;

/* ---- serve.c ---- */

/* The loaded engine state the serve loop runs on. */
struct worker_engine {
        struct dse_model *model;
        struct dse_tokenizer *tok;          /* NULL when the model has none */
        struct dse_chat_template *chat;     /* NULL when the tokenizer has none */
        struct dse_pool *pool;
        struct dse_kv_cache *kv;
        struct dse_batch *batch;
        int n_ctx;
        double model_s, tokenizer_s, kv_s; /* start-up phases, for the "Ready" log line */
};

/* Loads the model and builds tokenizer, chat template, pool, KV cache and batch. */
int worker_engine_load(const struct worker_config *cfg, struct worker_engine *e);
void worker_engine_done(struct worker_engine *e);

/* Listens, loads the engine (answering health "loading" meanwhile), then serves until a
 * drain completes or the parent dies. Returns the exit status. */
int worker_serve(const struct worker_config *cfg);

/* Logging at the program boundary: sd-daemon prefixes (<3> error, <4> warning, <6>
 * info) and the instance name. */
void wlog(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wlog_set_instance(const char *name);
void wlog_set_format(enum dsv_log_format fmt);

#endif
