/* The instance side of the gateway: one nng link per worker with a receiver thread that
 * hands each worker message to the call it belongs to (by request id), notices a worker
 * whose pipe dropped and fails its calls over, and (optionally) polls health and stats.
 * Routing and admission are dsv_policy's; this file feeds them the instances' load. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

#define RECV_SLICE_MS 50
#define HEALTH_STALE_INTERVALS 3

struct gw_link {
        struct dsv_gateway *gw;
        struct dsv_ipc_conn *conn;
        pthread_t thread;
        atomic_bool stop;
        /* gw->lock */
        int slot;                /* owning instance; -1 once detached */
        int refs;                /* sends in progress outside the lock (link_free waits) */
        struct gw_call *calls;   /* in flight on this link */
        uint64_t *orphans;       /* ids of failed calls whose cancel the receiver sends */
        size_t n_orphans;
        bool health_ready;
        int64_t last_health_ns;
        uint64_t last_boot_id; /* the worker's boot id at the last health reply; 0 = none yet */
};

int64_t dsv__gw_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- calls --------------------------------------------------------------------------- */

static void call_detach_locked(struct dsv_gateway *gw, struct gw_call *c) {
        struct gw_link *l = c->link;
        if (!l)
                return;
        if (c->link_prev)
                c->link_prev->link_next = c->link_next;
        else
                l->calls = c->link_next;
        if (c->link_next)
                c->link_next->link_prev = c->link_prev;
        c->link_prev = c->link_next = NULL;
        if (l->slot >= 0) {
                struct gw_instance *in = &gw->inst[l->slot];
                in->inflight--;
                in->inflight_prompt_tokens -= c->est_prompt_tokens;
        }
        c->link = NULL;
}

static void call_push(struct gw_call *c, struct gw_event *ev, bool lost) {
        pthread_mutex_lock(&c->lock);
        if (ev) {
                if (c->tail)
                        c->tail->next = ev;
                else
                        c->head = ev;
                c->tail = ev;
        }
        c->lost |= lost;
        pthread_cond_signal(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

/* Nothing is sent under gw->lock: a send may wait (PROTOCOL.md: up to 5 s) for a peer
 * that does not read, and must not stall every other request meanwhile. */
static void send_cancel(struct gw_link *l, uint64_t id) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_CANCEL, .u.cancel_id = id};
        (void)dsv_ipc_send(l->conn, &m); /* best effort: the worker may be gone */
}

static void link_put(struct dsv_gateway *gw, struct gw_link *l) {
        pthread_mutex_lock(&gw->lock);
        if (--l->refs == 0)
                pthread_cond_broadcast(&gw->link_cond);
        pthread_mutex_unlock(&gw->lock);
}

/* The link dropped or is going away: every call on it fails over. The receiver then
 * sends a cancel for each, which reaches a restarted worker at the same URL should the
 * request still sit in nng's send queue. */
static void link_fail_calls_locked(struct dsv_gateway *gw, struct gw_link *l) {
        while (l->calls) {
                struct gw_call *c = l->calls;
                if (l->slot >= 0)
                        gw->inst[l->slot].failures++;
                uint64_t *grown = realloc(l->orphans, (l->n_orphans + 1) * sizeof *grown);
                if (grown) {
                        l->orphans = grown;
                        l->orphans[l->n_orphans++] = c->id;
                }
                call_detach_locked(gw, c);
                call_push(c, NULL, true);
        }
}

static void link_send_orphan_cancels(struct dsv_gateway *gw, struct gw_link *l) {
        pthread_mutex_lock(&gw->lock);
        uint64_t *ids = l->orphans;
        size_t n = l->n_orphans;
        l->orphans = NULL;
        l->n_orphans = 0;
        pthread_mutex_unlock(&gw->lock);
        for (size_t i = 0; i < n; i++)
                send_cancel(l, ids[i]);
        free(ids);
}

void dsv__gw_event_free(struct gw_event *ev) {
        if (!ev)
                return;
        dsv_ipc_msg_done(&ev->msg);
        free(ev);
}

int dsv__gw_call_wait(struct gw_call *c, int timeout_ms, struct gw_event **ret) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
        }
        int r = 0;
        pthread_mutex_lock(&c->lock);
        while (!c->head && !c->lost && r == 0)
                r = pthread_cond_timedwait(&c->cond, &c->lock, &until);
        struct gw_event *ev = c->head;
        if (ev) {
                c->head = ev->next;
                if (!c->head)
                        c->tail = NULL;
                ev->next = NULL;
        }
        bool lost = c->lost;
        pthread_mutex_unlock(&c->lock);
        if (ev) {
                *ret = ev;
                return 0;
        }
        return lost ? -ECONNRESET : -ETIMEDOUT;
}

void dsv__gw_call_cancel(struct gw_call *c) {
        struct dsv_gateway *gw = c->gw;
        pthread_mutex_lock(&gw->lock);
        struct gw_link *l = c->link;
        uint64_t id = c->id;
        if (l) {
                l->refs++;
                call_detach_locked(gw, c);
        }
        pthread_mutex_unlock(&gw->lock);
        if (l) {
                send_cancel(l, id);
                link_put(gw, l);
        }
}

/* ---- routing and admission -------------------------------------------------------------- */

static bool instance_up_locked(const struct dsv_gateway *gw, const struct gw_instance *in, int64_t now) {
        if (!in->used || !in->admin_ready || !in->link || dsv_ipc_peers(in->link->conn) <= 0)
                return false;
        if (gw->cfg.health_interval_ms == 0)
                return true;
        return in->link->health_ready &&
               now - in->link->last_health_ns < (int64_t)HEALTH_STALE_INTERVALS * gw->cfg.health_interval_ms * 1000000;
}

static uint32_t max_u32(uint64_t a, uint64_t b) {
        uint64_t m = a > b ? a : b;
        return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

/* Our own count (in flight, the first max_running of them running) against the worker's
 * report, whichever says more. */
static struct dsv_policy_worker_load instance_load_locked(const struct dsv_gateway *gw, const struct gw_instance *in,
                                                          bool up) {
        uint32_t running = in->inflight < gw->cfg.max_running_per_instance ? in->inflight
                                                                            : gw->cfg.max_running_per_instance;
        uint32_t waiting = in->inflight - running;
        uint64_t waiting_tokens = in->inflight ? in->inflight_prompt_tokens * waiting / in->inflight : 0;
        struct dsv_policy_worker_load w = {
                .ready = up,
                .queued_requests = waiting,
                .queued_prompt_tokens = max_u32(waiting_tokens, 0),
                .running_seqs = running,
        };
        if (in->has_ext) {
                w.queued_requests = max_u32(w.queued_requests, in->ext.queued_requests);
                w.queued_prompt_tokens = max_u32(w.queued_prompt_tokens, in->ext.queued_prompt_tokens);
                w.running_seqs = max_u32(w.running_seqs, in->ext.running_seqs);
        }
        return w;
}

/* Requests finished per second over the last GW_RATE_WINDOW_S seconds: the drain rate
 * behind a 429's Retry-After. */
static double recent_rps_locked(const struct dsv_gateway *gw, int64_t now_s) {
        uint64_t n = 0;
        for (int i = 0; i < GW_RATE_WINDOW_S; i++)
                if (gw->rate_secs[i] > now_s - GW_RATE_WINDOW_S && gw->rate_secs[i] <= now_s)
                        n += gw->rate_counts[i];
        return (double)n / GW_RATE_WINDOW_S;
}

static void count_finished_locked(struct dsv_gateway *gw, int64_t now_s) {
        int i = (int)(now_s % GW_RATE_WINDOW_S);
        if (gw->rate_secs[i] != now_s) {
                gw->rate_secs[i] = now_s;
                gw->rate_counts[i] = 0;
        }
        gw->rate_counts[i]++;
}

static void set_unavailable(struct dsv_gw_error *err, uint32_t retry_after_s, const char *msg) {
        dsv__gw_error_set(err, 503, "server_error", "service_unavailable", NULL, "%s", msg);
        err->retry_after_s = retry_after_s;
}

int dsv__gw_call_start(struct gw_call *c, int exclude_slot, struct dsv_gw_error *err) {
        struct dsv_gateway *gw = c->gw;
        struct dsv_policy_worker_load loads[DSV_GATEWAY_MAX_INSTANCES];
        int map[DSV_GATEWAY_MAX_INSTANCES];
        size_t n = 0;
        int64_t now = dsv__gw_now_ns();
        const struct dsv_ipc_request *q = &c->req.ipc.u.request;
        const char *key = q->input == DSV_IPC_INPUT_CHAT ? q->messages_json : q->prompt;
        size_t key_len = key ? strlen(key) : 0;
        uint32_t retry_unavailable = gw->cfg.admit.retry_after_unavailable_s ? gw->cfg.admit.retry_after_unavailable_s : 5;

        /* A new attempt starts clean: no events or loss left from the previous one. */
        pthread_mutex_lock(&c->lock);
        while (c->head) {
                struct gw_event *ev = c->head;
                c->head = ev->next;
                dsv__gw_event_free(ev);
        }
        c->tail = NULL;
        c->lost = false;
        pthread_mutex_unlock(&c->lock);

        pthread_mutex_lock(&gw->lock);
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                struct gw_instance *in = &gw->inst[s];
                if (!in->used)
                        continue;
                map[n] = s;
                loads[n++] = instance_load_locked(gw, in, s != exclude_slot && instance_up_locked(gw, in, now));
        }
        if (n == 0) {
                pthread_mutex_unlock(&gw->lock);
                set_unavailable(err, retry_unavailable, "No model instance is ready to serve requests");
                return -EAGAIN;
        }
        int pick = dsv_policy_route_pick(&gw->router, loads, n, key, key_len);
        struct dsv_policy_admission adm;
        int r = dsv_policy_admit(&gw->cfg.admit, loads, n, pick, recent_rps_locked(gw, now / 1000000000), &adm);
        if (r < 0 || adm.verdict == DSV_POLICY_VERDICT_UNAVAILABLE) {
                pthread_mutex_unlock(&gw->lock);
                set_unavailable(err, r < 0 ? retry_unavailable : adm.retry_after_s,
                                "No model instance is ready to serve requests");
                return -EAGAIN;
        }
        if (adm.verdict == DSV_POLICY_VERDICT_BUSY) {
                pthread_mutex_unlock(&gw->lock);
                dsv__gw_error_set(err, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                                  "The server's request queues are full; retry after %u s", adm.retry_after_s);
                err->retry_after_s = adm.retry_after_s;
                return -EAGAIN;
        }
        int slot = map[pick];
        struct gw_instance *in = &gw->inst[slot];
        struct gw_link *l = in->link;
        c->id = atomic_fetch_add(&gw->next_id, 1);
        c->req.ipc.u.request.id = c->id;
        c->slot = slot;
        c->inst_gen = in->gen;
        c->est_prompt_tokens = (uint32_t)(key_len / 4 + q->n_tokens + 1);
        /* Registered before the send: the worker's first answer needs to find the call. */
        c->link = l;
        c->link_prev = NULL;
        c->link_next = l->calls;
        if (l->calls)
                l->calls->link_prev = c;
        l->calls = c;
        in->inflight++;
        in->inflight_prompt_tokens += c->est_prompt_tokens;
        l->refs++;
        pthread_mutex_unlock(&gw->lock);
        r = dsv_ipc_send(l->conn, &c->req.ipc);
        if (r < 0) {
                pthread_mutex_lock(&gw->lock);
                if (c->link == l)
                        call_detach_locked(gw, c);
                pthread_mutex_unlock(&gw->lock);
        }
        link_put(gw, l);
        if (r < 0) {
                set_unavailable(err, retry_unavailable, "The model instance could not take the request");
                return -ECONNRESET;
        }
        c->t_first_ns = c->t_last_ns = 0;
        c->n_tokens = 0;
        c->attempts++;
        return 0;
}

int dsv__gw_instances_up(struct dsv_gateway *gw) {
        int n = 0;
        int64_t now = dsv__gw_now_ns();
        pthread_mutex_lock(&gw->lock);
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++)
                n += instance_up_locked(gw, &gw->inst[s], now);
        pthread_mutex_unlock(&gw->lock);
        return n;
}

/* ---- metrics accounting ---------------------------------------------------------------- */

static const struct dsv_gw_buckets e2e_buckets = {
        19, {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}};
static const struct dsv_gw_buckets ttft_buckets = {
        22, {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}};
static const struct dsv_gw_buckets itl_buckets = {
        21, {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40}};
static const struct dsv_gw_buckets queue_buckets = {
        16, {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}};

static struct gw_instance *call_instance_locked(struct gw_call *c) {
        if (c->slot < 0)
                return NULL;
        struct gw_instance *in = &c->gw->inst[c->slot];
        return in->used && in->gen == c->inst_gen ? in : NULL;
}

void dsv__gw_call_observe_token(struct gw_call *c, int64_t now_ns) {
        pthread_mutex_lock(&c->gw->lock);
        struct gw_instance *in = call_instance_locked(c);
        if (in) {
                if (c->t_first_ns == 0)
                        dsv__gw_hist_observe(&in->ttft, &ttft_buckets, (double)(now_ns - c->t_arrival_ns) / 1e9);
                else
                        dsv__gw_hist_observe(&in->itl, &itl_buckets, (double)(now_ns - c->t_last_ns) / 1e9);
                in->generation_tokens++;
        }
        pthread_mutex_unlock(&c->gw->lock);
        if (c->t_first_ns == 0)
                c->t_first_ns = now_ns;
        c->t_last_ns = now_ns;
        c->n_tokens++;
}

void dsv__gw_call_observe_end(struct gw_call *c, const struct dsv_ipc_final *final, int64_t now_ns) {
        pthread_mutex_lock(&c->gw->lock);
        struct gw_instance *in = call_instance_locked(c);
        if (in && final) {
                dsv__gw_hist_observe(&in->e2e, &e2e_buckets, (double)(now_ns - c->t_arrival_ns) / 1e9);
                dsv__gw_hist_observe(&in->queue, &queue_buckets, final->queue_s);
                if (final->prompt_tokens > 0)
                        in->prompt_tokens += (uint64_t)final->prompt_tokens;
        }
        count_finished_locked(c->gw, now_ns / 1000000000);
        pthread_mutex_unlock(&c->gw->lock);
}

void dsv__gw_count_status(struct dsv_gateway *gw, int status) {
        pthread_mutex_lock(&gw->lock);
        for (int i = 0; i < GW_MAX_STATUS; i++) {
                if (gw->status_codes[i] == status || gw->status_codes[i] == 0) {
                        gw->status_codes[i] = status;
                        gw->status_counts[i]++;
                        break;
                }
        }
        pthread_mutex_unlock(&gw->lock);
}

void dsv__gw_count_retry(struct dsv_gateway *gw) {
        pthread_mutex_lock(&gw->lock);
        gw->retries++;
        pthread_mutex_unlock(&gw->lock);
}

void dsv__gw_count_abort(struct dsv_gateway *gw, enum gw_abort why) {
        pthread_mutex_lock(&gw->lock);
        gw->stream_aborts[why]++;
        pthread_mutex_unlock(&gw->lock);
}

static const char *const abort_names[GW_ABORT_COUNT] = {
        [GW_ABORT_INSTANCE_LOST] = "instance_lost",
        [GW_ABORT_DEADLINE] = "deadline",
        [GW_ABORT_WORKER_ERROR] = "worker_error",
        [GW_ABORT_CLIENT_GONE] = "client_disconnect",
};

static void family(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void write_metrics_locked(struct dsv_gateway *gw, FILE *f) {
        int64_t now = dsv__gw_now_ns();
        static const struct {
                const char *name, *help;
                size_t off;
                const struct dsv_gw_buckets *b;
        } hists[] = {
                {"dsvisor_e2e_request_latency_seconds", "Time from a request's arrival to its last token.",
                 offsetof(struct gw_instance, e2e), &e2e_buckets},
                {"dsvisor_time_to_first_token_seconds", "Time from a request's arrival to its first token.",
                 offsetof(struct gw_instance, ttft), &ttft_buckets},
                {"dsvisor_inter_token_latency_seconds", "Time between consecutive tokens of a request.",
                 offsetof(struct gw_instance, itl), &itl_buckets},
                {"dsvisor_request_queue_time_seconds", "Time a request waited in its worker's queue.",
                 offsetof(struct gw_instance, queue), &queue_buckets},
        };
        for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
                family(f, hists[h].name, "histogram", hists[h].help);
                for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++)
                        if (gw->inst[s].used)
                                dsv__gw_hist_write(f, hists[h].name, gw->inst[s].labels,
                                                   (const struct dsv_gw_hist *)((const char *)&gw->inst[s] + hists[h].off),
                                                   hists[h].b);
        }
        family(f, "dsvisor_requests_total", "counter", "HTTP requests to the completion endpoints by status code.");
        for (int i = 0; i < GW_MAX_STATUS && gw->status_codes[i]; i++)
                fprintf(f, "dsvisor_requests_total{code=\"%d\"} %llu\n", gw->status_codes[i],
                        (unsigned long long)gw->status_counts[i]);
        family(f, "dsvisor_request_retries_total", "counter",
               "Requests retried on another instance after theirs failed before answering.");
        fprintf(f, "dsvisor_request_retries_total %llu\n", (unsigned long long)gw->retries);
        family(f, "dsvisor_stream_aborts_total", "counter", "Streamed answers that ended with an error event, by reason.");
        for (int i = 0; i < GW_ABORT_COUNT; i++)
                fprintf(f, "dsvisor_stream_aborts_total{reason=\"%s\"} %llu\n", abort_names[i],
                        (unsigned long long)gw->stream_aborts[i]);
        static const struct {
                const char *name, *type, *help;
        } per[] = {
                {"dsvisor_prompt_tokens_total", "counter", "Prompt tokens processed."},
                {"dsvisor_generation_tokens_total", "counter", "Tokens generated and received by the gateway."},
                {"dsvisor_instance_failures_total", "counter", "Requests in flight when the instance's link dropped."},
                {"dsvisor_num_requests_running", "gauge", "Requests running on the instance."},
                {"dsvisor_num_requests_waiting", "gauge", "Requests waiting in the instance's queue."},
                {"dsvisor_instance_up", "gauge", "1 when the instance is ready, connected and healthy."},
        };
        for (size_t p = 0; p < sizeof per / sizeof per[0]; p++) {
                family(f, per[p].name, per[p].type, per[p].help);
                for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                        struct gw_instance *in = &gw->inst[s];
                        if (!in->used)
                                continue;
                        bool up = instance_up_locked(gw, in, now);
                        struct dsv_policy_worker_load w = instance_load_locked(gw, in, up);
                        uint64_t v = p == 0 ? in->prompt_tokens
                                   : p == 1 ? in->generation_tokens
                                   : p == 2 ? in->failures
                                   : p == 3 ? w.running_seqs
                                   : p == 4 ? w.queued_requests
                                            : (uint64_t)up;
                        fprintf(f, "%s{%s} %llu\n", per[p].name, in->labels, (unsigned long long)v);
                }
        }
        /* What the workers report about themselves (stats replies; only instances that
         * have answered one). */
        static const struct {
                const char *name, *type, *help;
        } worker[] = {
                {"dsvisor_kv_blocks_used", "gauge", "KV cache blocks in use on the instance."},
                {"dsvisor_kv_blocks_capacity", "gauge", "KV cache blocks in the instance's pool."},
                {"dsvisor_preemptions_total", "counter", "Sequences preempted for lack of KV blocks and recomputed later."},
                {"dsvisor_prefix_cache_hit_ratio", "gauge", "Share of prompt tokens served from shared prefix blocks (0..1)."},
        };
        for (size_t p = 0; p < sizeof worker / sizeof worker[0]; p++) {
                family(f, worker[p].name, worker[p].type, worker[p].help);
                for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                        const struct gw_instance *in = &gw->inst[s];
                        if (!in->used || !in->has_ext)
                                continue;
                        if (p == 3)
                                fprintf(f, "%s{%s} %.6g\n", worker[p].name, in->labels, in->prefix_hit_rate);
                        else
                                fprintf(f, "%s{%s} %lld\n", worker[p].name, in->labels,
                                        (long long)(p == 0 ? in->kv_blocks_used
                                                    : p == 1 ? in->kv_blocks_total
                                                             : in->preemptions));
                }
        }
}

int dsv_gateway_metrics_render(struct dsv_gateway *gw, char **ret_text, size_t *ret_len) {
        if (!gw || !ret_text || !ret_len)
                return -EINVAL;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return -errno;
        pthread_mutex_lock(&gw->lock);
        write_metrics_locked(gw, f);
        pthread_mutex_unlock(&gw->lock);
        int r = ferror(f) ? -EIO : 0;
        if (fclose(f) != 0 && r == 0)
                r = -EIO;
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret_text = buf;
        *ret_len = len;
        return 0;
}

void dsv_gateway_set_metrics_hook(struct dsv_gateway *gw, dsv_gateway_metrics_fn fn, void *userdata) {
        if (!gw)
                return;
        pthread_mutex_lock(&gw->lock);
        gw->hook = fn;
        gw->hook_userdata = userdata;
        pthread_mutex_unlock(&gw->lock);
}

/* ---- links ------------------------------------------------------------------------------ */

static void link_dispatch(struct gw_link *l, struct dsv_ipc_msg *m) {
        struct dsv_gateway *gw = l->gw;
        uint64_t id = m->type == DSV_IPC_TOKEN   ? m->u.token.id
                    : m->type == DSV_IPC_FINAL   ? m->u.final.id
                    : m->type == DSV_IPC_ERROR   ? m->u.error.id
                                                 : 0;
        pthread_mutex_lock(&gw->lock);
        if (m->type == DSV_IPC_HEALTH_REPLY) {
                l->health_ready = m->u.health.state && strcmp(m->u.health.state, "ready") == 0;
                l->last_health_ns = dsv__gw_now_ns();
                /* Another process than last time: the worker restarted between two pipe
                 * checks, and what was in flight died with its predecessor. */
                if (m->u.health.boot_id) {
                        if (l->last_boot_id && m->u.health.boot_id != l->last_boot_id)
                                link_fail_calls_locked(gw, l);
                        l->last_boot_id = m->u.health.boot_id;
                }
        } else if (m->type == DSV_IPC_STATS_REPLY && l->slot >= 0) {
                struct gw_instance *in = &gw->inst[l->slot];
                in->has_ext = true;
                in->ext = (struct dsv_policy_worker_load){
                        .queued_requests = m->u.stats.waiting > 0 ? (uint32_t)m->u.stats.waiting : 0,
                        .queued_prompt_tokens = m->u.stats.queued_prompt_tokens > 0
                                                        ? max_u32((uint64_t)m->u.stats.queued_prompt_tokens, 0)
                                                        : 0,
                        .running_seqs = m->u.stats.running > 0 ? (uint32_t)m->u.stats.running : 0,
                };
                in->kv_blocks_used = m->u.stats.kv_blocks_used;
                in->kv_blocks_total = m->u.stats.kv_blocks_total;
                in->preemptions = m->u.stats.preemptions;
                in->prefix_hit_rate = m->u.stats.prefix_hit_rate;
        } else if (id != 0) {
                struct gw_call *c = l->calls;
                while (c && c->id != id)
                        c = c->link_next;
                struct gw_event *ev = c ? malloc(sizeof *ev) : NULL;
                if (ev) {
                        *ev = (struct gw_event){.msg = *m};
                        memset(m, 0, sizeof *m);
                        if (ev->msg.type != DSV_IPC_TOKEN)
                                call_detach_locked(gw, c); /* the worker is done with it */
                        call_push(c, ev, false);
                }
        }
        pthread_mutex_unlock(&gw->lock);
        dsv_ipc_msg_done(m);
}

static void *link_main(void *arg) {
        struct gw_link *l = arg;
        struct dsv_gateway *gw = l->gw;
        bool connected, was_connected = false;
        int64_t next_poll = 0;
        uint64_t seq = 1;
        while (!atomic_load(&l->stop)) {
                struct dsv_ipc_msg m;
                int r = dsv_ipc_recv(l->conn, &m, RECV_SLICE_MS, NULL, 0);
                if (r == 0) {
                        link_dispatch(l, &m);
                        link_send_orphan_cancels(gw, l);
                } else if (r == -ECANCELED)
                        break;
                /* Calls are sent only while a peer is connected, so a call in flight with no
                 * peer now means the pipe it went out on dropped, even if it came and went
                 * between two checks: take what the worker said before dying, fail the rest. */
                connected = dsv_ipc_peers(l->conn) > 0;
                pthread_mutex_lock(&gw->lock);
                bool orphans = !connected && l->calls;
                if (!connected)
                        l->health_ready = false;
                pthread_mutex_unlock(&gw->lock);
                if (orphans) {
                        while (dsv_ipc_recv(l->conn, &m, 0, NULL, 0) == 0)
                                link_dispatch(l, &m);
                        pthread_mutex_lock(&gw->lock);
                        link_fail_calls_locked(gw, l);
                        pthread_mutex_unlock(&gw->lock);
                        link_send_orphan_cancels(gw, l);
                }
                int64_t now = dsv__gw_now_ns();
                /* A (re)connected worker is asked at once: a restarted worker that is
                 * already ready is routable now, not after the rest of the interval. */
                if (connected && !was_connected)
                        next_poll = now;
                was_connected = connected;
                if (gw->cfg.health_interval_ms && connected && now >= next_poll) {
                        struct dsv_ipc_msg probe = {.type = DSV_IPC_HEALTH, .u.probe.seq = seq};
                        (void)dsv_ipc_send(l->conn, &probe);
                        probe.type = DSV_IPC_STATS;
                        (void)dsv_ipc_send(l->conn, &probe);
                        seq++;
                        next_poll = now + (int64_t)gw->cfg.health_interval_ms * 1000000;
                }
        }
        return NULL;
}

static int link_new(struct dsv_gateway *gw, const char *url, struct gw_link **ret) {
        struct gw_link *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->gw = gw;
        l->slot = -1;
        int r = dsv_ipc_dial(url, &l->conn);
        if (r < 0) {
                free(l);
                return r;
        }
        r = -pthread_create(&l->thread, NULL, link_main, l);
        if (r < 0) {
                dsv_ipc_close(l->conn);
                free(l);
                return r;
        }
        *ret = l;
        return 0;
}

/* The link must already be detached (slot -1, no calls). */
static void link_free(struct gw_link *l) {
        if (!l)
                return;
        struct dsv_gateway *gw = l->gw;
        pthread_mutex_lock(&gw->lock);
        while (l->refs > 0)
                pthread_cond_wait(&gw->link_cond, &gw->lock);
        pthread_mutex_unlock(&gw->lock);
        atomic_store(&l->stop, true);
        pthread_join(l->thread, NULL);
        dsv_ipc_close(l->conn);
        free(l->orphans);
        free(l);
}

static struct gw_link *instance_detach_link_locked(struct dsv_gateway *gw, struct gw_instance *in) {
        struct gw_link *l = in->link;
        if (l) {
                link_fail_calls_locked(gw, l);
                l->slot = -1;
        }
        in->link = NULL;
        return l;
}

/* ---- public API ------------------------------------------------------------------------- */

void dsv_gateway_config_init(struct dsv_gateway_config *cfg) {
        *cfg = (struct dsv_gateway_config){
                .listen_host = "127.0.0.1",
                .route = DSV_POLICY_ROUTE_LEAST_OUTSTANDING,
                .max_body_bytes = 1u << 20,
                .max_prompt_bytes = 256u << 10,
                .max_tokens_limit = 32768,
                .default_max_tokens = 256,
                .connection_timeout_s = 30,
                .max_connections = 256,
                .request_timeout_ms = 600000,
                .max_running_per_instance = 8,
        };
}

int dsv_gateway_new(const struct dsv_gateway_config *cfg, struct dsv_gateway **ret_gw) {
        if (!cfg || !ret_gw || !cfg->model || !cfg->model[0] || cfg->max_body_bytes == 0 || cfg->max_prompt_bytes == 0 ||
            cfg->max_tokens_limit <= 0 || cfg->default_max_tokens <= 0 || cfg->request_timeout_ms == 0 ||
            cfg->max_running_per_instance == 0 || cfg->max_connections == 0)
                return -EINVAL;
        struct dsv_gateway *gw = calloc(1, sizeof *gw);
        if (!gw)
                return -ENOMEM;
        gw->cfg = *cfg;
        gw->listen_host = strdup(cfg->listen_host ? cfg->listen_host : "127.0.0.1");
        gw->model = strdup(cfg->model);
        gw->cfg.listen_host = gw->listen_host;
        gw->cfg.model = gw->model;
        gw->cfg.api_keys_path = NULL;
        atomic_store(&gw->next_id, 1);
        int r = gw->listen_host && gw->model ? 0 : -ENOMEM;
        if (r == 0)
                r = dsv_policy_router_init(&gw->router, cfg->route, cfg->route_seed ? cfg->route_seed : 0x9e3779b97f4a7c15ull);
        if (r == 0 && cfg->api_keys_path) {
                r = dsv__gw_keys_load(cfg->api_keys_path, &gw->keys);
                gw->auth = r == 0;
        }
        if (r == 0)
                r = -pthread_mutex_init(&gw->lock, NULL);
        if (r == 0 && (r = -pthread_cond_init(&gw->link_cond, NULL)) < 0)
                pthread_mutex_destroy(&gw->lock);
        if (r < 0) {
                dsv__gw_keys_done(&gw->keys);
                free(gw->listen_host);
                free(gw->model);
                free(gw);
                return r;
        }
        *ret_gw = gw;
        return 0;
}

void dsv_gateway_free(struct dsv_gateway *gw) {
        if (!gw)
                return;
        atomic_store(&gw->stopping, true);
        dsv__gw_http_stop(gw);
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++)
                if (gw->inst[s].used)
                        dsv_gateway_instance_remove(gw, s);
        pthread_cond_destroy(&gw->link_cond);
        pthread_mutex_destroy(&gw->lock);
        dsv__gw_keys_done(&gw->keys);
        free(gw->listen_host);
        free(gw->model);
        free(gw);
}

static struct gw_instance *instance_get_locked(struct dsv_gateway *gw, int id) {
        if (id < 0 || id >= DSV_GATEWAY_MAX_INSTANCES || !gw->inst[id].used)
                return NULL;
        return &gw->inst[id];
}

int dsv_gateway_instance_add(struct dsv_gateway *gw, const struct dsv_gateway_instance_config *ic) {
        if (!gw || !ic || !ic->name || !ic->url || !ic->name[0] || strlen(ic->name) >= DSV_GATEWAY_NAME_MAX)
                return -EINVAL;
        char name[2 * DSV_GATEWAY_NAME_MAX];
        if (dsv__gw_label_escape(ic->name, name, sizeof name) < 0)
                return -EINVAL;
        struct gw_link *l;
        int r = link_new(gw, ic->url, &l);
        if (r < 0)
                return r;
        pthread_mutex_lock(&gw->lock);
        int slot = -1;
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                if (gw->inst[s].used && strcmp(gw->inst[s].name, ic->name) == 0) {
                        r = -EEXIST;
                        break;
                }
                if (!gw->inst[s].used && slot < 0)
                        slot = s;
        }
        if (r == 0 && slot < 0)
                r = -ENOSPC;
        if (r == 0) {
                struct gw_instance *in = &gw->inst[slot];
                *in = (struct gw_instance){.used = true, .gen = ++gw->next_gen, .numa_node = ic->numa_node,
                                           .admin_ready = ic->ready, .link = l};
                snprintf(in->name, sizeof in->name, "%s", ic->name);
                snprintf(in->labels, sizeof in->labels, "instance=\"%s\",numa_node=\"%d\"", name, ic->numa_node);
                l->slot = slot;
        }
        pthread_mutex_unlock(&gw->lock);
        if (r < 0) {
                link_free(l);
                return r;
        }
        return slot;
}

int dsv_gateway_instance_set_url(struct dsv_gateway *gw, int id, const char *url) {
        if (!gw || !url)
                return -EINVAL;
        struct gw_link *l;
        int r = link_new(gw, url, &l);
        if (r < 0)
                return r;
        struct gw_link *old = NULL;
        pthread_mutex_lock(&gw->lock);
        struct gw_instance *in = instance_get_locked(gw, id);
        if (in) {
                old = instance_detach_link_locked(gw, in);
                in->link = l;
                in->has_ext = false;
                l->slot = id;
        }
        pthread_mutex_unlock(&gw->lock);
        link_free(in ? old : l);
        return in ? 0 : -ENOENT;
}

int dsv_gateway_instance_remove(struct dsv_gateway *gw, int id) {
        if (!gw)
                return -EINVAL;
        pthread_mutex_lock(&gw->lock);
        struct gw_instance *in = instance_get_locked(gw, id);
        struct gw_link *old = NULL;
        if (in) {
                old = instance_detach_link_locked(gw, in);
                in->used = false;
        }
        pthread_mutex_unlock(&gw->lock);
        link_free(old);
        return in ? 0 : -ENOENT;
}

int dsv_gateway_instance_set_ready(struct dsv_gateway *gw, int id, bool ready) {
        if (!gw)
                return -EINVAL;
        pthread_mutex_lock(&gw->lock);
        struct gw_instance *in = instance_get_locked(gw, id);
        if (in) {
                /* Made ready again (a restarted worker): it must say "ready" itself. nng
                 * re-dials a restarted worker within milliseconds, possibly between two of
                 * the link thread's peer checks, and the predecessor's last "ready" would
                 * route requests to a worker that is still loading (429s in chaos-kill). */
                if (ready && !in->admin_ready && in->link)
                        in->link->health_ready = false;
                in->admin_ready = ready;
        }
        pthread_mutex_unlock(&gw->lock);
        return in ? 0 : -ENOENT;
}

int dsv_gateway_instance_set_load(struct dsv_gateway *gw, int id, const struct dsv_policy_worker_load *load) {
        if (!gw)
                return -EINVAL;
        pthread_mutex_lock(&gw->lock);
        struct gw_instance *in = instance_get_locked(gw, id);
        if (in) {
                in->has_ext = load != NULL;
                if (load)
                        in->ext = *load;
        }
        pthread_mutex_unlock(&gw->lock);
        return in ? 0 : -ENOENT;
}

int dsv_gateway_instance_is_up(struct dsv_gateway *gw, int id) {
        if (!gw)
                return -EINVAL;
        int64_t now = dsv__gw_now_ns();
        pthread_mutex_lock(&gw->lock);
        struct gw_instance *in = instance_get_locked(gw, id);
        int r = in ? instance_up_locked(gw, in, now) : -ENOENT;
        pthread_mutex_unlock(&gw->lock);
        return r;
}
