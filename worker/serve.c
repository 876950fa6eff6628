/* The worker's IPC loop: the main thread alternates between the inbox (requests,
 * cancels) and one scheduler step, so new requests join between decode steps; a
 * receiver thread reads the socket, answers health and stats itself and queues the rest
 * (struct server). The model loads on the main thread while health says "loading". */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "draft_drafter.h"
#include "mtp_drafter.h"
#include "worker.h"

#define IDLE_POLL_MS 20
#define MAX_MSGS_PER_STEP 256
#define KV_BLOCK_TOKENS 16

static char instance_name[64] = "worker";
static enum dsv_log_format log_format = DSV_LOG_FORMAT_TEXT;

void wlog_set_instance(const char *name) {
        snprintf(instance_name, sizeof instance_name, "%s", name);
}

void wlog_set_format(enum dsv_log_format fmt) {
        log_format = fmt;
}

void wlog(int prio, const char *fmt, ...) {
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        dsv_log_line(stderr, log_format, prio, "dsvisor-worker", instance_name, NULL, buf, NULL);
}

/* ---- engine ---- */

/* The engine's own log lines (the KV disk tier's, a model's NaN weights) at our
 * prefixes; its debug level stays quiet. */
static void engine_log(enum dse_log_level level, const char *msg, void *user) {
        (void)user;
        if (level != DSE_LOG_DEBUG)
                wlog(level == DSE_LOG_ERROR ? 3 : level == DSE_LOG_WARN ? 4 : 6, "%s", msg);
}

/* Puts the disk tier under the pool: DIR/INSTANCE.kvtier. A directory that cannot be
 * used is a start-up error; a tier that cannot be made there (a full disk) is a
 * warning, and the worker serves from the pool alone. */
static int attach_kv_disk(const struct worker_config *cfg, struct worker_engine *e) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s.kvtier", cfg->kv_disk_dir, cfg->instance) >= (int)sizeof path) {
                wlog(3, "--kv-disk %s: path too long", cfg->kv_disk_dir);
                return -ENAMETOOLONG;
        }
        struct dse_diag diag = {{0}};
        struct dse_kv_disk_config dc = {path, (uint64_t)cfg->kv_disk_gib << 30, 0, DSE_KV_DISK_FAULT_NONE};
        const char *fault = getenv("DSV_TEST_KV_DISK_FAULT");
        if (fault && strcmp(fault, "prealloc-enospc") == 0) {
                wlog(4, "Test hook DSV_TEST_KV_DISK_FAULT: preallocating the KV disk tier fails with ENOSPC");
                dc.fault = DSE_KV_DISK_FAULT_PREALLOC_ENOSPC;
        } else if (fault && *fault) {
                wlog(3, "DSV_TEST_KV_DISK_FAULT (a test hook): expected prealloc-enospc");
                return -EINVAL;
        }
        int r = dse_kv_cache_attach_disk(e->kv, e->model, &dc, &diag);
        if (r == -ENOENT || r == -ENOTDIR || r == -EACCES || r == -EROFS || r == -EBUSY) {
                wlog(3, "--kv-disk: %s", diag.msg);
                return r;
        }
        if (r < 0)
                wlog(4, "%s; serving without the disk tier", diag.msg);
        return 0;
}

void worker_engine_done(struct worker_engine *e) {
        dse_batch_free(e->batch);
        dse_kv_cache_free(e->kv);
        dse_chat_template_free(e->chat);
        dse_tokenizer_free(e->tok);
        dse_pool_free(e->pool);
        dse_model_free(e->model);
        memset(e, 0, sizeof *e);
}

int worker_engine_load(const struct worker_config *cfg, struct worker_engine *e) {
        struct dse_diag diag = {{0}};
        char path[4096];
        int r;
        memset(e, 0, sizeof *e);
        dse_log_set(engine_log, NULL);
        double t0 = worker_mono_s();
        if (cfg->model_fd >= 0) {
                r = dse_model_open_fd(cfg->model_fd, DSE_MODEL_POPULATE, &e->model, &diag);
        } else {
                r = dse_model_resolve(cfg->model_path, path, sizeof path, &diag);
                if (r >= 0)
                        r = dse_model_open(path, DSE_MODEL_POPULATE, &e->model, &diag);
        }
        if (r < 0) {
                wlog(3, "Failed to open model '%s': %s", cfg->model_fd >= 0 ? "(fd)" : cfg->model_path,
                     diag.msg[0] ? diag.msg : strerror(-r));
                return r;
        }
        uint64_t huge, total;
        if (dse_model_huge_bytes(e->model, &huge, &total) == 0 && total) {
                /* A MoE model's decode reads scattered experts, so 4 KiB pages cost it many
                 * TLB misses; a memfd image in 4 KiB pages also costs page tables in every
                 * worker. */
                double pct = 100.0 * (double)huge / (double)total;
                if (huge * 2 >= total)
                        wlog(6, "%.0f%% of the weights mapped in 2 MiB pages", pct);
                else if (cfg->model_fd >= 0)
                        wlog(4, "Only %.0f%% of the weights are mapped in 2 MiB pages: the --model-fd image is "
                             "neither in HugePages (from dsvisor start: see dsvisor status; --hugepages require "
                             "refuses to start without them) nor in shmem's 2 MiB pages (dsvisor doctor: "
                             "thp-shmem)", pct);
                else
                        wlog(4, "Only %.0f%% of the weights are mapped in 2 MiB pages: the page cache held the "
                             "model file in small pages before it was opened. Drop them (dd if=FILE "
                             "iflag=nocache count=0) and restart, or serve through dsvisor start", pct);
        }
        double t1 = worker_mono_s();
        r = dse_model_tokenizer(e->model, &e->tok, &diag);
        if (r == -ENOENT) {
                wlog(4, "Model has no tokenizer: only token-id requests are served");
        } else if (r < 0) {
                wlog(3, "Failed to load the model's tokenizer: %s", diag.msg);
                goto fail;
        } else {
                /* dse_model_tokenizer attaches tokenizer_config.json (template and
                 * special tokens) for tokenizer.json and SentencePiece models alike. */
                const char *src = dse_tokenizer_chat_template(e->tok);
                if (cfg->chat_template_path) { /* asked for: unusable is fatal */
                        if (dse_chat_template_load(cfg->chat_template_path, &e->chat, &diag) < 0) {
                                wlog(3, "%s", diag.msg);
                                r = -EINVAL;
                                goto fail;
                        }
                } else if (src && dse_chat_template_new(src, &e->chat, &diag) < 0)
                        wlog(4, "Chat template unusable (%s), chat requests will fail, ignoring", diag.msg);
                else if (!src)
                        wlog(4, "Model has no chat template: chat requests will fail");
        }
        double t2 = worker_mono_s();
        r = dse_pool_new(cfg->n_threads, cfg->n_cpus ? cfg->cpus : NULL, cfg->n_cpus, &e->pool);
        if (r < 0) {
                wlog(3, "Failed to start %d compute threads: %s", cfg->n_threads, strerror(-r));
                goto fail;
        }
        char desc[512];
        dse_model_describe(e->model, desc, sizeof desc);
        e->n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : 4096;

        /* Size the pool: the budget given, or max_batch full contexts. At least one full
         * context must fit, or a lone long request could never finish. */
        struct dse_kv_cache *probe;
        if ((r = dse_kv_cache_new_typed(e->model, cfg->kv_dtype, 1u << 30, KV_BLOCK_TOKENS, 1, 1, &probe, &diag)) < 0) {
                wlog(3, "KV cache: %s", diag.msg);
                goto fail;
        }
        size_t block_bytes = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        size_t blocks_per_ctx = ((size_t)e->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
        size_t mem = cfg->kv_mem_mib > 0 ? (size_t)cfg->kv_mem_mib << 20
                                         : blocks_per_ctx * block_bytes * (size_t)cfg->max_batch;
        if (mem / block_bytes < blocks_per_ctx) {
                wlog(3, "--kv-mem-mib %d holds %zu blocks of %zu bytes, less than one context of %d tokens (%zu blocks)",
                     cfg->kv_mem_mib, mem / block_bytes, block_bytes, e->n_ctx, blocks_per_ctx);
                r = -ENOSPC;
                goto fail;
        }
        if ((r = dse_kv_cache_new_typed(e->model, cfg->kv_dtype, mem, KV_BLOCK_TOKENS, cfg->max_batch, e->n_ctx, &e->kv,
                                        &diag)) < 0 ||
            (r = dse_batch_new(e->model, e->kv, e->pool, &e->batch, &diag)) < 0) {
                wlog(3, "Failed to set up the KV cache and batch: %s", diag.msg);
                goto fail;
        }
        if (cfg->kv_disk_dir && (r = attach_kv_disk(cfg, e)) < 0)
                goto fail;
        e->model_s = t1 - t0;
        e->tokenizer_s = t2 - t1;
        e->kv_s = worker_mono_s() - t2; /* with the compute threads */
        struct dse_kv_stats st;
        dse_kv_cache_stats(e->kv, &st);
        wlog(6, "%s; n_ctx %d, max batch %d, token budget %d, KV %s %zu bytes/token, %d blocks x %d tokens (%zu MiB, "
                "%s pages), %d threads", desc, e->n_ctx, cfg->max_batch, cfg->token_budget,
             dse_kv_dtype_to_string(cfg->kv_dtype), dse_kv_cache_bytes_per_token(e->kv), st.n_blocks, st.block_tokens,
             (size_t)st.n_blocks * block_bytes >> 20, dse_kv_pages_to_string(dse_kv_cache_pages(e->kv)), cfg->n_threads);
        return 0;
fail:
        worker_engine_done(e);
        return r;
}

/* ---- the loop ---- */

enum { ST_LOADING, ST_READY, ST_DRAINING };
static const char *const state_names[] = {"loading", "ready", "draining"};

#define INBOX_CAP 8192 /* as deep as the socket's own queue */

/* Two threads: the receiver answers health and stats at once (from the state and the
 * stats snapshot the loop publishes), so a long engine step or the model load never
 * delays a heartbeat; requests and cancels go through the inbox to the loop, which
 * takes them between steps. */
struct server {
        const struct worker_config *cfg;
        struct dsv_ipc_conn *conn;
        struct worker_engine *e;
        struct sched *sched;
        struct spec_mtp mtp; /* the drafter of --speculative mtp */
        struct spec_draft draft; /* the drafter of --draft-model */
        atomic_int state;
        atomic_int send_failures;
        atomic_int rx_stop;
        double started;
        uint64_t boot_id; /* dsv_ipc_new_boot_id(), in every health reply */
        int32_t *prompt; /* (n_ctx + 1) tokenizer output */
        pthread_t rx;
        pthread_t prefault; /* makes the KV pool resident once ready (kv_prefault) */
        pthread_mutex_t mu; /* guards the inbox and stats */
        pthread_cond_t has_msg, has_space;
        struct dsv_ipc_msg *inbox; /* (INBOX_CAP) ring */
        size_t head, n;
        struct dsv_ipc_stats stats; /* published by the loop after every step */
        struct dsv_ipc_batch out;   /* the loop's events, sent once per iteration */
};

static void send_msg(struct server *sv, const struct dsv_ipc_msg *m) {
        int r = dsv_ipc_send(sv->conn, m);
        if (r < 0 && atomic_fetch_add(&sv->send_failures, 1) == 0)
                wlog(4, "Failed to send a %s event: %s, ignoring", dsv_ipc_msg_type_to_string(m->type), strerror(-r));
}

/* Sends what the loop queued this iteration: one nng message for a whole step's
 * tokens, finals and errors (dsv_ipc_send_batch), the only allocation on the per-token
 * path (worker/README.md). */
static void flush_events(struct server *sv) {
        int n = dsv_ipc_batch_count(&sv->out);
        int r = dsv_ipc_send_batch(sv->conn, &sv->out);
        if (r < 0 && atomic_fetch_add(&sv->send_failures, 1) == 0)
                wlog(4, "Failed to send %d events: %s, ignoring", n, strerror(-r));
}

/* Queues an event of the loop's thread into the step's batch, written in place
 * without allocating. A full batch goes out first; an event too big for an empty batch
 * (never a token: a batch holds 64 KiB + 2 KiB per sequence) goes out alone. */
static void queue_msg(struct server *sv, const struct dsv_ipc_msg *m) {
        int r = dsv_ipc_batch_add(&sv->out, m);
        if (r == -ENOBUFS && dsv_ipc_batch_count(&sv->out) > 0) {
                flush_events(sv);
                r = dsv_ipc_batch_add(&sv->out, m);
        }
        if (r < 0)
                send_msg(sv, m);
}

static void publish_stats(struct server *sv);

static void emit_cb(void *user, const struct dsv_ipc_msg *m) {
        struct server *sv = user;
        /* A request's end shows in stats before its final or error can be seen. */
        if (sv->sched && (m->type == DSV_IPC_FINAL || m->type == DSV_IPC_ERROR))
                publish_stats(sv);
        queue_msg(sv, m);
}

static void fill_error(struct dsv_ipc_msg *m, uint64_t id, enum dsv_ipc_error_code code, const char *msg) {
        *m = (struct dsv_ipc_msg){.type = DSV_IPC_ERROR};
        m->u.error.id = id;
        m->u.error.code = code;
        m->u.error.message = (char *)msg;
}

/* From the receiver thread or after the loop: sent at once. */
static void send_error(struct server *sv, uint64_t id, enum dsv_ipc_error_code code, const char *msg) {
        struct dsv_ipc_msg m;
        fill_error(&m, id, code, msg);
        send_msg(sv, &m);
}

/* From the loop's thread: into the step's batch, behind the events queued before. */
static void queue_error(struct server *sv, uint64_t id, enum dsv_ipc_error_code code, const char *msg) {
        struct dsv_ipc_msg m;
        fill_error(&m, id, code, msg);
        queue_msg(sv, &m);
}

/* Turns the request's input into token ids in sv->prompt; the count, or -errno after
 * an error event. */
static int tokenize_request(struct server *sv, const struct dsv_ipc_request *req) {
        const struct worker_engine *e = sv->e;
        struct dse_diag diag = {{0}};
        char *owned = NULL;
        const char *text;
        int add_special = 1;
        switch (req->input) {
        case DSV_IPC_INPUT_TOKENS:
                if (req->n_tokens > (size_t)e->n_ctx) {
                        queue_error(sv, req->id, DSV_IPC_ERR_PROMPT_TOO_LONG, "prompt longer than the context");
                        return -E2BIG;
                }
                memcpy(sv->prompt, req->tokens, req->n_tokens * sizeof(int32_t));
                return (int)req->n_tokens;
        case DSV_IPC_INPUT_PROMPT:
                text = req->prompt ? req->prompt : "";
                break;
        case DSV_IPC_INPUT_CHAT: {
                if (!e->chat) {
                        queue_error(sv, req->id, DSV_IPC_ERR_INVALID_REQUEST, "the model has no usable chat template");
                        return -EINVAL;
                }
                int bos = dse_tokenizer_bos(e->tok), eos = dse_tokenizer_eos(e->tok);
                int r = dse_chat_template_render(e->chat, req->messages_json ? req->messages_json : "[]", req->tools_json, 1,
                                                 bos >= 0 ? dse_tokenizer_piece(e->tok, bos) : NULL,
                                                 eos >= 0 ? dse_tokenizer_piece(e->tok, eos) : NULL, &owned, &diag);
                if (r < 0) {
                        queue_error(sv, req->id, DSV_IPC_ERR_INVALID_REQUEST, diag.msg[0] ? diag.msg : strerror(-r));
                        return r;
                }
                text = owned;
                /* The template writes BOS itself; special-token text in it becomes its id
                 * inside dse_tokenizer_encode, as in transformers' apply_chat_template. */
                add_special = 0;
                break;
        }
        default:
                queue_error(sv, req->id, DSV_IPC_ERR_INVALID_REQUEST, "unknown input kind");
                return -EINVAL;
        }
        int r;
        if (!e->tok) {
                queue_error(sv, req->id, DSV_IPC_ERR_INVALID_REQUEST, "the model has no tokenizer: send input \"tokens\"");
                r = -EINVAL;
        } else if (!*text) {
                queue_error(sv, req->id, DSV_IPC_ERR_INVALID_REQUEST, "empty prompt");
                r = -EINVAL;
        } else {
                r = dse_tokenizer_encode(e->tok, text, strlen(text), add_special, sv->prompt, (size_t)e->n_ctx + 1);
                if (r == -EILSEQ)
                        queue_error(sv, req->id, DSV_IPC_ERR_INVALID_REQUEST, "prompt is not valid UTF-8");
                else if (r < 0)
                        queue_error(sv, req->id, DSV_IPC_ERR_INTERNAL, strerror(-r));
                else if (r > e->n_ctx) {
                        char msg[160];
                        snprintf(msg, sizeof msg, "prompt of %d tokens exceeds the context of %d", r, e->n_ctx);
                        queue_error(sv, req->id, DSV_IPC_ERR_PROMPT_TOO_LONG, msg);
                        r = -E2BIG;
                }
        }
        free(owned);
        return r;
}

static void handle_request(struct server *sv, const struct dsv_ipc_request *req) {
        if (atomic_load(&sv->state) == ST_DRAINING || !sv->sched) {
                queue_error(sv, req->id, DSV_IPC_ERR_SHUTTING_DOWN, "the worker is draining");
                return;
        }
        int n = tokenize_request(sv, req);
        if (n >= 0)
                sched_add(sv->sched, req, sv->prompt, (size_t)n, worker_realtime_ms());
}

/* Requests and cancels, on the loop's thread. */
static void handle(struct server *sv, const struct dsv_ipc_msg *m) {
        switch (m->type) {
        case DSV_IPC_REQUEST:
                handle_request(sv, &m->u.request);
                return;
        case DSV_IPC_CANCEL:
                /* An unknown id has already ended (its final is on the way): nothing to do. */
                if (sv->sched)
                        sched_cancel(sv->sched, m->u.cancel_id, worker_realtime_ms());
                return;
        default:
                queue_error(sv, 0, DSV_IPC_ERR_PROTOCOL, "unexpected message type for a worker");
                return;
        }
}

static void reply_probe(struct server *sv, const struct dsv_ipc_msg *m) {
        struct dsv_ipc_msg reply = {0};
        if (m->type == DSV_IPC_HEALTH) {
                reply.type = DSV_IPC_HEALTH_REPLY;
                reply.u.health.state = (char *)state_names[atomic_load(&sv->state)];
                reply.u.health.uptime_s = worker_mono_s() - sv->started;
                reply.u.health.boot_id = sv->boot_id;
                reply.u.health.seq = m->u.probe.seq;
        } else {
                reply.type = DSV_IPC_STATS_REPLY;
                pthread_mutex_lock(&sv->mu);
                reply.u.stats = sv->stats;
                pthread_mutex_unlock(&sv->mu);
                reply.u.stats.seq = m->u.probe.seq;
        }
        send_msg(sv, &reply);
}

static void *rx_thread(void *arg) {
        struct server *sv = arg;
        while (!atomic_load(&sv->rx_stop)) {
                struct dsv_ipc_msg m;
                char err[256] = "";
                int r = dsv_ipc_recv(sv->conn, &m, IDLE_POLL_MS * 5, err, sizeof err);
                if (r == -EPROTO || r == -EPROTONOSUPPORT) {
                        send_error(sv, 0, DSV_IPC_ERR_PROTOCOL, err[0] ? err : strerror(-r));
                        continue;
                }
                if (r == -ECANCELED)
                        break;
                if (r < 0)
                        continue;
                if (m.type == DSV_IPC_HEALTH || m.type == DSV_IPC_STATS) {
                        reply_probe(sv, &m);
                        dsv_ipc_msg_done(&m);
                        continue;
                }
                pthread_mutex_lock(&sv->mu);
                while (sv->n == INBOX_CAP && !atomic_load(&sv->rx_stop))
                        pthread_cond_wait(&sv->has_space, &sv->mu);
                if (sv->n < INBOX_CAP) {
                        sv->inbox[(sv->head + sv->n) % INBOX_CAP] = m;
                        sv->n++;
                        pthread_cond_signal(&sv->has_msg);
                } else {
                        dsv_ipc_msg_done(&m);
                }
                pthread_mutex_unlock(&sv->mu);
        }
        return NULL;
}

/* Handles what the receiver queued, waiting up to wait_ms for the first message. */
static void drain_inbox(struct server *sv, int wait_ms) {
        pthread_mutex_lock(&sv->mu);
        if (sv->n == 0 && wait_ms > 0) {
                struct timespec ts = worker_realtime_after_ms(wait_ms);
                pthread_cond_timedwait(&sv->has_msg, &sv->mu, &ts);
        }
        for (int i = 0; i < MAX_MSGS_PER_STEP && sv->n > 0; i++) {
                struct dsv_ipc_msg m = sv->inbox[sv->head];
                sv->head = (sv->head + 1) % INBOX_CAP;
                sv->n--;
                pthread_cond_signal(&sv->has_space);
                pthread_mutex_unlock(&sv->mu);
                handle(sv, &m);
                dsv_ipc_msg_done(&m);
                pthread_mutex_lock(&sv->mu);
        }
        pthread_mutex_unlock(&sv->mu);
}

static void publish_stats(struct server *sv) {
        struct sched_stats st;
        sched_get_stats(sv->sched, &st);
        pthread_mutex_lock(&sv->mu);
        sv->stats = (struct dsv_ipc_stats){
                .running = st.running + st.loading, /* a loading request holds its slot */
                .waiting = st.waiting,
                .queued_prompt_tokens = st.queued_prompt_tokens,
                .kv_blocks_used = st.kv_blocks_used,
                .kv_blocks_total = st.kv_blocks_total,
                .prefix_hit_rate = st.prefix_hit_rate,
                .preemptions = st.preemptions,
                .max_batch = sv->cfg->max_batch,
                .token_budget = sv->cfg->token_budget,
                .constrained_tokens = st.constrained_tokens,
                .forced_tokens = st.forced_tokens,
                .spec_verifications = st.spec.verifications,
                .spec_draft_tokens = st.spec.draft_tokens,
                .spec_accepted_tokens = st.spec.accepted_tokens,
                .n_spec_hist = SPEC_K_LIMIT + 1,
                .kv_bytes_per_token = (int64_t)dse_kv_cache_bytes_per_token(sv->e->kv),
                .prefix_query_tokens = st.prefix_query_tokens,
                .prefix_hit_tokens = st.prefix_hit_tokens,
                .kv_disk_bytes_used = st.kv.disk_bytes_used,
                .kv_disk_bytes_capacity = st.kv.disk_bytes_capacity,
                .kv_disk_blocks_written = st.kv.disk_blocks_written,
                .kv_disk_blocks_read = st.kv.disk_blocks_read,
                .kv_disk_blocks_dropped = st.kv.disk_blocks_dropped,
                .kv_disk_blocks_corrupt = st.kv.disk_blocks_corrupt,
                .prefix_disk_hit_tokens = st.kv.disk_hit_tokens,
                .kv_disk_failed = st.kv.disk_state == DSE_KV_DISK_FAILED,
                .steps = st.steps,
                .step_tokens = st.step_tokens,
        };
        _Static_assert(SPEC_K_LIMIT + 1 == DSV_IPC_SPEC_HIST, "stats_reply carries every acceptance length");
        memcpy(sv->stats.spec_accepted_hist, st.spec.accepted_hist, sizeof st.spec.accepted_hist);
        memcpy(sv->stats.step_tokens_buckets, st.step_tokens_buckets, sizeof sv->stats.step_tokens_buckets);
        memcpy(sv->stats.token_prob_hist, st.confidence.token_prob_hist, sizeof sv->stats.token_prob_hist);
        memcpy(sv->stats.entropy_hist, st.confidence.entropy_hist, sizeof sv->stats.entropy_hist);
        sv->stats.confidence_requests = st.confidence.requests;
        pthread_mutex_unlock(&sv->mu);
}

/* Runs the scheduler until a drain completes or the parent dies; the exit status. */
static int serve_loop(struct server *sv) {
        const struct worker_config *cfg = sv->cfg;
        double drain_deadline = 0;
        for (;;) {
                if (hygiene_orphaned()) {
                        wlog(3, "Parent process is gone, exiting");
                        return 1;
                }
                if (hygiene_drain_requested && drain_deadline == 0) {
                        atomic_store(&sv->state, ST_DRAINING);
                        drain_deadline = worker_mono_s() + cfg->grace_ms / 1000.0;
                        wlog(6, "Draining: finishing in-flight requests for up to %d ms", cfg->grace_ms);
                }
                drain_inbox(sv, sched_busy(sv->sched) ? 0 : IDLE_POLL_MS);
                if (drain_deadline > 0 && !sched_busy(sv->sched)) {
                        flush_events(sv);
                        return 0;
                }
                if (drain_deadline > 0 && worker_mono_s() >= drain_deadline) {
                        sched_abort_all(sv->sched, DSV_IPC_ERR_SHUTTING_DOWN, "grace period over", worker_realtime_ms());
                        flush_events(sv);
                        wlog(4, "Grace period over, in-flight requests failed with shutting_down");
                        return 0;
                }
                int r = sched_step(sv->sched, worker_realtime_ms());
                if (r < 0)
                        wlog(3, "Engine step failed: %s; the step's requests got internal_error", strerror(-r));
                /* The inbox's answers and the step's events, in the order they were made,
                 * in one message. */
                flush_events(sv);
                publish_stats(sv);
        }
}

/* A graceful stop keeps the prefix blocks still only in RAM: they go to the disk tier
 * (the most recent first, as many as it holds) so a restarted worker finds them. The
 * stop waits at most KV_WRITE_BACK_MS for room in the writer's queue, then for the
 * writer to write what is queued (one queue's worth); the supervisor allows 5 s past
 * the grace period before it kills. */
#define KV_WRITE_BACK_MS 2000
static void kv_write_back(struct server *sv) {
        double t0 = worker_mono_s();
        int n = dse_kv_cache_disk_write_back(sv->e->kv, KV_WRITE_BACK_MS);
        if (n > 0)
                wlog(6, "KV disk tier: %d prefix blocks kept for the next start (%.1f ms)", n,
                     (worker_mono_s() - t0) * 1e3);
}

/* The KV pool is sized up front but faulted in lazily, so start-up stays fast; this
 * makes it resident right after "ready", at the lowest CPU priority so requests come
 * first. Without it the prefix cache's kept blocks would fault the pool in over the
 * first minutes of serving: memory creeping up to the pool size (the soak's slope) and
 * page faults inside early requests. A pool the memory limit cannot hold shows here
 * rather than in the middle of a request. */
static void *kv_prefault(void *arg) {
        struct server *sv = arg;
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
        struct dse_diag diag = {{0}};
        double t0 = worker_mono_s();
        if (dse_kv_cache_prefault(sv->e->kv, &diag) < 0)
                wlog(4, "%s; the pool is faulted in as it is used", diag.msg);
        else {
                struct dse_kv_stats st;
                dse_kv_cache_stats(sv->e->kv, &st);
                wlog(6, "KV pool resident (%zu MiB) in %.1f ms",
                     dse_kv_cache_block_bytes(sv->e->kv) * (size_t)st.n_blocks >> 20, (worker_mono_s() - t0) * 1e3);
        }
        return NULL;
}

/* --draft-model: the draft model beside the served one, its cache as many positions as
 * the served pool's plus each sequence's drafts (spec_draft_kv_tokens), in the same KV
 * type, on the same compute threads. */
static int draft_model_attach(struct server *sv, char *err, size_t err_size) {
        const struct worker_config *cfg = sv->cfg;
        struct dse_kv_stats st;
        dse_kv_cache_stats(sv->e->kv, &st);
        struct spec_draft_config dc = {
                .target = sv->e->model,
                .target_name = cfg->model_path ? cfg->model_path : "(--model-fd)",
                .draft_name = cfg->draft_model_path,
                .kv_dtype = cfg->kv_dtype,
                .max_seqs = cfg->max_batch,
                .n_ctx = sv->e->n_ctx,
                .kv_tokens = spec_draft_kv_tokens((size_t)st.n_blocks * (size_t)st.block_tokens, cfg->max_batch,
                                                  cfg->spec.k_max, st.block_tokens),
                .pool = sv->e->pool,
        };
        double t0 = worker_mono_s();
        int r = spec_draft_open(&sv->draft, cfg->draft_model_path, &dc, err, err_size);
        if (r < 0)
                return r;
        char desc[512];
        dse_model_describe(sv->draft.model, desc, sizeof desc);
        wlog(6, "Draft model %s: %s; KV %zu bytes/token for %zu positions, loaded in %.1f ms", cfg->draft_model_path,
             desc, dse_kv_cache_bytes_per_token(sv->draft.kv), dc.kv_tokens, (worker_mono_s() - t0) * 1e3);
        return spec_draft_attach(&sv->draft, sv->sched, &cfg->spec, err, err_size);
}

int worker_serve(const struct worker_config *cfg) {
        struct worker_engine e = {0};
        struct server sv = {.cfg = cfg, .e = &e, .started = worker_mono_s(), .boot_id = dsv_ipc_new_boot_id()};
        atomic_init(&sv.state, ST_LOADING);
        pthread_mutex_init(&sv.mu, NULL);
        pthread_cond_init(&sv.has_msg, NULL);
        pthread_cond_init(&sv.has_space, NULL);
        int status = 1, rx_started = 0, prefault_started = 0;
        /* A speculating sequence emits up to k_max + 1 tokens per step, a fast-forwarding
         * one its forced run + 1. */
        int most = cfg->spec.method != SPEC_OFF ? cfg->spec.k_max : 0;
        int per_seq = 1 + (cfg->fast_forward > most ? cfg->fast_forward : most);
        size_t out_bytes = (size_t)cfg->max_batch * (size_t)per_seq * 2048 + (64u << 10);
        if (!(sv.inbox = calloc(INBOX_CAP, sizeof *sv.inbox)) ||
            dsv_ipc_batch_init(&sv.out, out_bytes < DSV_IPC_MAX_MSG_BYTES ? out_bytes : DSV_IPC_MAX_MSG_BYTES,
                               (1 + per_seq) * cfg->max_batch + 64) < 0)
                goto out;
        int r = dsv_ipc_listen(cfg->listen_url, &sv.conn);
        if (r < 0) {
                wlog(3, "Failed to listen on '%s': %s%s", cfg->listen_url, strerror(-r),
                     r == -EPERM ? " (an ipc:// socket's directory must be this user's, mode 0700)" : "");
                goto out;
        }
        if ((r = pthread_create(&sv.rx, NULL, rx_thread, &sv)) != 0) {
                wlog(3, "Failed to start the receiver thread: %s", strerror(r));
                goto out;
        }
        rx_started = 1;
        if (worker_engine_load(cfg, &e) < 0)
                goto out;
        struct sched_config sc = {cfg->max_batch, cfg->token_budget, e.n_ctx, cfg->max_queue};
        sv.prompt = malloc(((size_t)e.n_ctx + 1) * sizeof(int32_t));
        r = sv.prompt ? sched_new(&sc, e.model, e.tok, e.kv, e.batch, emit_cb, &sv, &sv.sched) : -ENOMEM;
        char err[512] = "";
        if (r >= 0 && cfg->spec.method == SPEC_DRAFT)
                r = draft_model_attach(&sv, err, sizeof err);
        else if (r >= 0)
                r = cfg->spec.method == SPEC_MTP
                            ? spec_mtp_attach(&sv.mtp, sv.sched, e.batch, e.kv, &cfg->spec, err, sizeof err)
                            : sched_set_speculation(sv.sched, &cfg->spec);
        if (r >= 0)
                r = sched_set_fast_forward(sv.sched, cfg->fast_forward);
        if (r < 0) {
                if (err[0]) /* says what failed: the speculation's drafter */
                        wlog(3, "%s", err);
                else
                        wlog(3, "Failed to create the scheduler: %s", strerror(-r));
                goto out;
        }
        sched_set_pool(sv.sched, e.pool);
        float logit_scale;
        if ((r = confidence_fault_scale(getenv("DSV_TEST_PERTURB_LOGITS"), cfg->instance, &logit_scale)) < 0) {
                wlog(3, "DSV_TEST_PERTURB_LOGITS (a test hook): expected INSTANCE:SCALE with SCALE in (0, 100]");
                goto out;
        }
        if (logit_scale != 1) {
                wlog(4, "Test hook DSV_TEST_PERTURB_LOGITS: every logit is multiplied by %g, the output drifts on purpose",
                     logit_scale);
                sched_set_logit_scale(sv.sched, logit_scale);
        }
        publish_stats(&sv);
        atomic_store(&sv.state, ST_READY);
        /* Said unasked (seq 0) so the supervisor routes to us now rather than at its
         * next health poll; PAIR1 holds it until the supervisor's pipe is up. */
        struct dsv_ipc_msg hello = {.type = DSV_IPC_HEALTH};
        reply_probe(&sv, &hello);
        /* Start-up phases, so a slow start shows where it went (bench/restart_bench.sh). */
        wlog(6, "Ready on %s in %.1f ms (model %.1f ms, tokenizer %.1f ms, threads + KV cache %.1f ms)",
             cfg->listen_url, (worker_mono_s() - sv.started) * 1e3, e.model_s * 1e3, e.tokenizer_s * 1e3, e.kv_s * 1e3);
        prefault_started = pthread_create(&sv.prefault, NULL, kv_prefault, &sv) == 0;
        status = serve_loop(&sv);
        if (status == 0)
                kv_write_back(&sv);
out:
        if (prefault_started)
                pthread_join(sv.prefault, NULL);
        if (rx_started) {
                atomic_store(&sv.rx_stop, 1);
                pthread_mutex_lock(&sv.mu);
                pthread_cond_broadcast(&sv.has_space);
                pthread_mutex_unlock(&sv.mu);
                pthread_join(sv.rx, NULL);
        }
        /* Whatever is still queued gets its one answer. */
        for (; sv.inbox && sv.n > 0; sv.n--, sv.head = (sv.head + 1) % INBOX_CAP) {
                struct dsv_ipc_msg *m = &sv.inbox[sv.head];
                if (m->type == DSV_IPC_REQUEST)
                        send_error(&sv, m->u.request.id, DSV_IPC_ERR_SHUTTING_DOWN, "the worker is exiting");
                dsv_ipc_msg_done(m);
        }
        sched_free(sv.sched);
        spec_draft_done(&sv.draft);
        dsv_ipc_batch_done(&sv.out);
        free(sv.prompt);
        worker_engine_done(&e);
        /* The last answers may still sit in nng's pipe queue; after a drain they must reach
         * the gateway (a crash path never gets here). */
        dsv_ipc_close_linger(sv.conn, status == 0 ? DSV_IPC_LINGER_MS : 0);
        free(sv.inbox);
        pthread_cond_destroy(&sv.has_msg);
        pthread_cond_destroy(&sv.has_space);
        pthread_mutex_destroy(&sv.mu);
        return status;
}
