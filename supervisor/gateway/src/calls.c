/* Calls to the workers: one nng link per instance with a receiver thread that hands each
 * worker message to the call it belongs to (by request id), notices a worker whose pipe
 * dropped and fails its calls over, and (optionally) polls health and stats. Routing and
 * admission are dsv_policy's; this file feeds them the instances' load, and retries a
 * failed first attempt elsewhere. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calls.h"

#define RECV_SLICE_MS 50
#define HEALTH_STALE_INTERVALS 3

struct gw_link {
        struct gw_calls *cs;
        struct dsv_ipc_conn *conn;
        pthread_t thread;
        atomic_bool stop;
        /* calls->lock */
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

static void call_detach_locked(struct gw_calls *cs, struct gw_call *c) {
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
                struct gw_instance *in = &cs->inst[l->slot];
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

/* Nothing is sent under cs->lock: a send may wait (PROTOCOL.md: up to 5 s) for a peer
 * that does not read, and must not stall every other request meanwhile. */
static void send_cancel(struct gw_link *l, uint64_t id) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_CANCEL, .u.cancel_id = id};
        (void)dsv_ipc_send(l->conn, &m); /* best effort: the worker may be gone */
}

static void link_put(struct gw_calls *cs, struct gw_link *l) {
        pthread_mutex_lock(&cs->lock);
        if (--l->refs == 0)
                pthread_cond_broadcast(&cs->link_cond);
        pthread_mutex_unlock(&cs->lock);
}

/* The link dropped or is going away: every call on it fails over. The receiver then
 * sends a cancel for each, which reaches a restarted worker at the same URL should the
 * request still sit in nng's send queue. */
static void link_fail_calls_locked(struct gw_calls *cs, struct gw_link *l) {
        while (l->calls) {
                struct gw_call *c = l->calls;
                if (l->slot >= 0)
                        dsv__gw_metrics_failure(cs->metrics, l->slot, cs->inst[l->slot].gen);
                uint64_t *grown = realloc(l->orphans, (l->n_orphans + 1) * sizeof *grown);
                if (grown) {
                        l->orphans = grown;
                        l->orphans[l->n_orphans++] = c->id;
                }
                call_detach_locked(cs, c);
                call_push(c, NULL, true);
        }
}

static void link_send_orphan_cancels(struct gw_calls *cs, struct gw_link *l) {
        pthread_mutex_lock(&cs->lock);
        uint64_t *ids = l->orphans;
        size_t n = l->n_orphans;
        l->orphans = NULL;
        l->n_orphans = 0;
        pthread_mutex_unlock(&cs->lock);
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

int dsv__gw_call_init(struct gw_call *c, struct gw_calls *cs, int fd) {
        *c = (struct gw_call){.calls = cs, .fd = fd, .slot = -1, .prefer_slot = -1};
        c->t_arrival_ns = dsv__gw_now_ns();
        c->deadline_ns = cs->cfg->request_timeout_ms ? c->t_arrival_ns + (int64_t)cs->cfg->request_timeout_ms * 1000000
                                                     : INT64_MAX;
        pthread_condattr_t ca;
        int r = -pthread_condattr_init(&ca);
        if (r < 0)
                return r;
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        r = -pthread_cond_init(&c->cond, &ca);
        pthread_condattr_destroy(&ca);
        if (r == 0 && (r = -pthread_mutex_init(&c->lock, NULL)) < 0)
                pthread_cond_destroy(&c->cond);
        return r;
}

void dsv__gw_call_done(struct gw_call *c) {
        dsv__gw_call_cancel(c);
        struct gw_event *ev;
        while (dsv__gw_call_wait(c, 0, &ev) == 0)
                dsv__gw_event_free(ev);
        dsv__gw_request_done(&c->req);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
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
        struct gw_calls *cs = c->calls;
        pthread_mutex_lock(&cs->lock);
        struct gw_link *l = c->link;
        uint64_t id = c->id;
        if (l) {
                l->refs++;
                call_detach_locked(cs, c);
        }
        pthread_mutex_unlock(&cs->lock);
        if (l) {
                send_cancel(l, id);
                link_put(cs, l);
        }
}

/* ---- routing and admission -------------------------------------------------------------- */

static bool instance_up_locked(const struct gw_calls *cs, const struct gw_instance *in, int64_t now) {
        if (!in->used || !in->admin_ready || !in->link || dsv_ipc_peers(in->link->conn) <= 0)
                return false;
        if (cs->cfg->health_interval_ms == 0)
                return true;
        return in->link->health_ready &&
               now - in->link->last_health_ns < (int64_t)HEALTH_STALE_INTERVALS * cs->cfg->health_interval_ms * 1000000;
}

static uint32_t max_u32(uint64_t a, uint64_t b) {
        uint64_t m = a > b ? a : b;
        return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

/* The worker's last report less the requests it ended since: each ending frees a running
 * slot that a waiting request takes, so the waiting count falls first. The report is up to
 * a poll interval old; taken as it stands it kept a queue that was full at the poll full
 * until the next poll, refusing everything while the worker drained and then idled. */
static struct dsv_policy_worker_load ext_now_locked(const struct gw_instance *in) {
        struct dsv_policy_worker_load w = in->ext;
        uint32_t ended = in->ext_ended;
        uint32_t from_waiting = ended < w.queued_requests ? ended : w.queued_requests;
        if (w.queued_requests)
                w.queued_prompt_tokens = (uint32_t)((uint64_t)w.queued_prompt_tokens *
                                                    (w.queued_requests - from_waiting) / w.queued_requests);
        w.queued_requests -= from_waiting;
        ended -= from_waiting;
        w.running_seqs -= ended < w.running_seqs ? ended : w.running_seqs;
        return w;
}

/* Our own count (in flight, the first max_batch of them running) against the worker's
 * report (less what it ended since), whichever says more. The batch's capacity is the
 * worker's own once it reported one, max_running_per_instance until then. */
static struct dsv_policy_worker_load instance_load_locked(const struct gw_calls *cs, const struct gw_instance *in,
                                                          bool up) {
        uint32_t max_batch = in->has_ext && in->ext.max_batch ? in->ext.max_batch : cs->cfg->max_running_per_instance;
        uint32_t running = in->inflight < max_batch ? in->inflight : max_batch;
        uint32_t waiting = in->inflight - running;
        uint64_t waiting_tokens = in->inflight ? in->inflight_prompt_tokens * waiting / in->inflight : 0;
        struct dsv_policy_worker_load w = {
                .ready = up,
                .queued_requests = waiting,
                .queued_prompt_tokens = max_u32(waiting_tokens, 0),
                .running_seqs = running,
                .max_batch = max_batch,
        };
        if (in->has_ext) {
                struct dsv_policy_worker_load ext = ext_now_locked(in);
                w.queued_requests = max_u32(w.queued_requests, ext.queued_requests);
                w.queued_prompt_tokens = max_u32(w.queued_prompt_tokens, ext.queued_prompt_tokens);
                w.running_seqs = max_u32(w.running_seqs, ext.running_seqs);
        }
        return w;
}

/* Requests finished per second over the last GW_RATE_WINDOW_S seconds: the drain rate
 * behind a 429's Retry-After. */
static double recent_rps_locked(const struct gw_calls *cs, int64_t now_s) {
        uint64_t n = 0;
        for (int i = 0; i < GW_RATE_WINDOW_S; i++)
                if (cs->rate_secs[i] > now_s - GW_RATE_WINDOW_S && cs->rate_secs[i] <= now_s)
                        n += cs->rate_counts[i];
        return (double)n / GW_RATE_WINDOW_S;
}

static void count_finished_locked(struct gw_calls *cs, int64_t now_s) {
        int i = (int)(now_s % GW_RATE_WINDOW_S);
        if (cs->rate_secs[i] != now_s) {
                cs->rate_secs[i] = now_s;
                cs->rate_counts[i] = 0;
        }
        cs->rate_counts[i]++;
}

/* The expected wait in seconds (rounded up, ≥ 1) when the target's queue, drained at its
 * share of the recent rate, would outlast the time left before the deadline; 0 when the
 * request can make it or the rate is not known yet. */
static uint32_t queue_outlasts_deadline_s(const struct dsv_policy_worker_load *loads, size_t n, int target,
                                          double recent_rps, int64_t left_ns) {
        uint32_t ready = 0;
        for (size_t i = 0; i < n; i++)
                ready += loads[i].ready;
        if (recent_rps <= 0 || ready == 0 || loads[target].queued_requests == 0)
                return 0;
        double wait_s = (double)loads[target].queued_requests / (recent_rps / ready);
        if (wait_s * 1e9 < (double)left_ns)
                return 0;
        return wait_s >= UINT32_MAX ? UINT32_MAX : (uint32_t)wait_s + 1;
}

static void set_unavailable(struct dsv_gw_error *err, uint32_t retry_after_s, const char *msg) {
        dsv__gw_error_set(err, 503, "server_error", "service_unavailable", NULL, "%s", msg);
        err->retry_after_s = retry_after_s;
}

/* Every instance in use into loads (and its slot into map), ready when up and not
 * exclude_slot; returns how many. */
static size_t loads_locked(const struct gw_calls *cs, int exclude_slot, int64_t now,
                           struct dsv_policy_worker_load *loads, int *map) {
        size_t n = 0;
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                const struct gw_instance *in = &cs->inst[s];
                if (!in->used)
                        continue;
                map[n] = s;
                loads[n++] = instance_load_locked(cs, in, s != exclude_slot && instance_up_locked(cs, in, now));
        }
        return n;
}

static int refuse_queue_full(struct gw_calls *cs, uint32_t retry_after_s, struct dsv_gw_error *err) {
        dsv__gw_metrics_reject(cs->metrics, DSV_GATEWAY_REJECT_QUEUE_FULL);
        dsv__gw_error_set(err, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                          "The server's request queues are full; retry after %u s", retry_after_s);
        err->retry_after_s = retry_after_s;
        return -EAGAIN;
}

int dsv__gw_calls_queue_full(struct gw_calls *cs, struct dsv_gw_error *err) {
        struct dsv_policy_worker_load loads[DSV_GATEWAY_MAX_INSTANCES];
        int map[DSV_GATEWAY_MAX_INSTANCES];
        int64_t now = dsv__gw_now_ns();
        int shortest = -1;
        pthread_mutex_lock(&cs->lock);
        size_t n = loads_locked(cs, -1, now, loads, map);
        for (size_t i = 0; i < n; i++)
                if (loads[i].ready && (shortest < 0 || loads[i].queued_requests < loads[shortest].queued_requests))
                        shortest = (int)i;
        struct dsv_policy_admission adm = {DSV_POLICY_VERDICT_ADMIT, 0, 0};
        int r = shortest < 0 ? 0
                             : dsv_policy_admit(&cs->cfg->admit, loads, n, shortest,
                                                recent_rps_locked(cs, now / 1000000000), &adm);
        pthread_mutex_unlock(&cs->lock);
        if (r < 0 || adm.verdict != DSV_POLICY_VERDICT_BUSY)
                return 0;
        return refuse_queue_full(cs, adm.retry_after_s, err);
}

int dsv__gw_call_start(struct gw_call *c, int exclude_slot, struct dsv_gw_error *err) {
        struct gw_calls *cs = c->calls;
        struct dsv_policy_worker_load loads[DSV_GATEWAY_MAX_INSTANCES];
        int map[DSV_GATEWAY_MAX_INSTANCES];
        size_t n = 0;
        int64_t now = dsv__gw_now_ns();
        const struct dsv_ipc_request *q = &c->req.ipc.u.request;
        const char *key = q->input == DSV_IPC_INPUT_CHAT ? q->messages_json : q->prompt;
        size_t key_len = key ? strlen(key) : 0;
        uint32_t retry_unavailable = cs->cfg->admit.retry_after_unavailable_s ? cs->cfg->admit.retry_after_unavailable_s : 5;

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

        pthread_mutex_lock(&cs->lock);
        n = loads_locked(cs, exclude_slot, now, loads, map);
        if (n == 0) {
                pthread_mutex_unlock(&cs->lock);
                dsv__gw_metrics_reject(cs->metrics, DSV_GATEWAY_REJECT_NO_INSTANCE);
                set_unavailable(err, retry_unavailable, "No model instance is ready to serve requests");
                return -EAGAIN;
        }
        int pick = dsv_policy_route_pick(&cs->router, loads, n, key, key_len);
        for (size_t i = 0; i < n && c->prefer_slot >= 0; i++)
                if (map[i] == c->prefer_slot && loads[i].ready)
                        pick = (int)i;
        double rps = recent_rps_locked(cs, now / 1000000000);
        struct dsv_policy_admission adm;
        int r = dsv_policy_admit(&cs->cfg->admit, loads, n, pick, rps, &adm);
        if (r < 0 || adm.verdict == DSV_POLICY_VERDICT_UNAVAILABLE) {
                pthread_mutex_unlock(&cs->lock);
                dsv__gw_metrics_reject(cs->metrics, DSV_GATEWAY_REJECT_NO_INSTANCE);
                set_unavailable(err, r < 0 ? retry_unavailable : adm.retry_after_s,
                                "No model instance is ready to serve requests");
                return -EAGAIN;
        }
        if (adm.verdict == DSV_POLICY_VERDICT_BUSY) {
                pthread_mutex_unlock(&cs->lock);
                return refuse_queue_full(cs, adm.retry_after_s, err);
        }
        uint32_t wait_s = queue_outlasts_deadline_s(loads, n, pick, rps, c->deadline_ns - now);
        if (wait_s) {
                pthread_mutex_unlock(&cs->lock);
                dsv__gw_metrics_reject(cs->metrics, DSV_GATEWAY_REJECT_DEADLINE);
                dsv__gw_error_set(err, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                                  "The queue ahead would outlast the request's time limit; retry after %u s", wait_s);
                err->retry_after_s = wait_s;
                return -EAGAIN;
        }
        int slot = map[pick];
        struct gw_instance *in = &cs->inst[slot];
        struct gw_link *l = in->link;
        c->id = atomic_fetch_add(&cs->next_id, 1);
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
        pthread_mutex_unlock(&cs->lock);
        r = dsv_ipc_send(l->conn, &c->req.ipc);
        if (r < 0) {
                pthread_mutex_lock(&cs->lock);
                if (c->link == l)
                        call_detach_locked(cs, c);
                pthread_mutex_unlock(&cs->lock);
        }
        link_put(cs, l);
        if (r < 0) {
                dsv__gw_metrics_reject(cs->metrics, DSV_GATEWAY_REJECT_NO_INSTANCE);
                set_unavailable(err, retry_unavailable, "The model instance could not take the request");
                return -ECONNRESET;
        }
        c->t_first_ns = c->t_last_ns = 0;
        c->n_tokens = 0;
        c->attempts++;
        return 0;
}

int dsv__gw_call_retry(struct gw_call *c, struct dsv_gw_error *err) {
        if (c->attempts >= 2)
                return -EALREADY;
        dsv__gw_metrics_retry(c->calls->metrics);
        return dsv__gw_call_start(c, c->slot, err);
}

/* What routing sees of the instance, and what the worker last said of itself. */
static struct dsv_gateway_instance_stats instance_stats_locked(const struct gw_calls *cs, const struct gw_instance *in,
                                                               int64_t now) {
        bool up = instance_up_locked(cs, in, now);
        struct dsv_policy_worker_load w = instance_load_locked(cs, in, up);
        struct dsv_gateway_instance_stats st = {
                .up = up,
                .running = w.running_seqs,
                .waiting = w.queued_requests,
                .worker_reported = in->has_ext,
                .kv_blocks_used = in->kv_blocks_used,
                .kv_blocks_total = in->kv_blocks_total,
                .preemptions = in->preemptions,
                .prefix_hit_rate = in->prefix_hit_rate,
                .spec_verifications = in->spec_verifications,
                .spec_draft_tokens = in->spec_draft_tokens,
                .spec_accepted_tokens = in->spec_accepted_tokens,
                .kv_bytes_per_token = in->kv_bytes_per_token,
                .prefix_query_tokens = in->prefix_query_tokens,
                .prefix_hit_tokens = in->prefix_hit_tokens,
                .steps = in->steps,
                .step_tokens = in->step_tokens,
                .confidence_requests = in->confidence_requests,
                .kv_disk_bytes_used = in->kv_disk_bytes_used,
                .kv_disk_bytes_capacity = in->kv_disk_bytes_capacity,
                .kv_disk_blocks_written = in->kv_disk_blocks_written,
                .kv_disk_blocks_read = in->kv_disk_blocks_read,
                .kv_disk_blocks_dropped = in->kv_disk_blocks_dropped,
                .kv_disk_blocks_corrupt = in->kv_disk_blocks_corrupt,
                .prefix_disk_hit_tokens = in->prefix_disk_hit_tokens,
                .kv_disk_failed = in->kv_disk_failed,
        };
        memcpy(st.spec_accepted_hist, in->spec_accepted_hist, sizeof st.spec_accepted_hist);
        memcpy(st.step_tokens_buckets, in->step_tokens_buckets, sizeof st.step_tokens_buckets);
        memcpy(st.token_prob_hist, in->token_prob_hist, sizeof st.token_prob_hist);
        memcpy(st.entropy_hist, in->entropy_hist, sizeof st.entropy_hist);
        return st;
}

int dsv__gw_instances_up(struct gw_calls *cs) {
        int n = 0;
        int64_t now = dsv__gw_now_ns();
        pthread_mutex_lock(&cs->lock);
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++)
                n += instance_up_locked(cs, &cs->inst[s], now);
        pthread_mutex_unlock(&cs->lock);
        return n;
}

/* ---- links ------------------------------------------------------------------------------ */

static void link_dispatch(struct gw_link *l, struct dsv_ipc_msg *m) {
        struct gw_calls *cs = l->cs;
        uint64_t id = m->type == DSV_IPC_TOKEN   ? m->u.token.id
                    : m->type == DSV_IPC_FINAL   ? m->u.final.id
                    : m->type == DSV_IPC_ERROR   ? m->u.error.id
                                                 : 0;
        pthread_mutex_lock(&cs->lock);
        if (m->type == DSV_IPC_HEALTH_REPLY) {
                l->health_ready = m->u.health.state && strcmp(m->u.health.state, "ready") == 0;
                l->last_health_ns = dsv__gw_now_ns();
                /* Another process than last time: the worker restarted between two pipe
                 * checks, and what was in flight died with its predecessor. */
                if (m->u.health.boot_id) {
                        if (l->last_boot_id && m->u.health.boot_id != l->last_boot_id)
                                link_fail_calls_locked(cs, l);
                        l->last_boot_id = m->u.health.boot_id;
                }
        } else if (m->type == DSV_IPC_STATS_REPLY && l->slot >= 0) {
                struct gw_instance *in = &cs->inst[l->slot];
                in->has_ext = true;
                in->ext_ended = 0;
                in->ext = (struct dsv_policy_worker_load){
                        .queued_requests = m->u.stats.waiting > 0 ? (uint32_t)m->u.stats.waiting : 0,
                        .queued_prompt_tokens = m->u.stats.queued_prompt_tokens > 0
                                                        ? max_u32((uint64_t)m->u.stats.queued_prompt_tokens, 0)
                                                        : 0,
                        .running_seqs = m->u.stats.running > 0 ? (uint32_t)m->u.stats.running : 0,
                        .max_batch = m->u.stats.max_batch > 0 ? (uint32_t)m->u.stats.max_batch : 0,
                };
                in->kv_blocks_used = m->u.stats.kv_blocks_used;
                in->kv_blocks_total = m->u.stats.kv_blocks_total;
                in->preemptions = m->u.stats.preemptions;
                in->prefix_hit_rate = m->u.stats.prefix_hit_rate;
                in->spec_verifications = m->u.stats.spec_verifications;
                in->spec_draft_tokens = m->u.stats.spec_draft_tokens;
                in->spec_accepted_tokens = m->u.stats.spec_accepted_tokens;
                for (int i = 0; i < DSV_GATEWAY_SPEC_HIST; i++)
                        in->spec_accepted_hist[i] = i < m->u.stats.n_spec_hist && i < DSV_IPC_SPEC_HIST
                                                            ? m->u.stats.spec_accepted_hist[i]
                                                            : 0;
                in->kv_bytes_per_token = m->u.stats.kv_bytes_per_token;
                in->prefix_query_tokens = m->u.stats.prefix_query_tokens;
                in->prefix_hit_tokens = m->u.stats.prefix_hit_tokens;
                in->steps = m->u.stats.steps;
                in->step_tokens = m->u.stats.step_tokens;
                in->kv_disk_bytes_used = m->u.stats.kv_disk_bytes_used;
                in->kv_disk_bytes_capacity = m->u.stats.kv_disk_bytes_capacity;
                in->kv_disk_blocks_written = m->u.stats.kv_disk_blocks_written;
                in->kv_disk_blocks_read = m->u.stats.kv_disk_blocks_read;
                in->kv_disk_blocks_dropped = m->u.stats.kv_disk_blocks_dropped;
                in->kv_disk_blocks_corrupt = m->u.stats.kv_disk_blocks_corrupt;
                in->prefix_disk_hit_tokens = m->u.stats.prefix_disk_hit_tokens;
                in->kv_disk_failed = m->u.stats.kv_disk_failed;
                memcpy(in->step_tokens_buckets, m->u.stats.step_tokens_buckets, sizeof in->step_tokens_buckets);
                memcpy(in->token_prob_hist, m->u.stats.token_prob_hist, sizeof in->token_prob_hist);
                memcpy(in->entropy_hist, m->u.stats.entropy_hist, sizeof in->entropy_hist);
                in->confidence_requests = m->u.stats.confidence_requests;
        } else if (id != 0) {
                /* Counted whether or not a call still waits for it: a cancelled call left
                 * its slot at once, but the worker's report counts it until it ends. */
                if (m->type != DSV_IPC_TOKEN && l->slot >= 0)
                        cs->inst[l->slot].ext_ended++;
                struct gw_call *c = l->calls;
                while (c && c->id != id)
                        c = c->link_next;
                struct gw_event *ev = c ? malloc(sizeof *ev) : NULL;
                if (ev) {
                        *ev = (struct gw_event){.msg = *m};
                        memset(m, 0, sizeof *m);
                        if (ev->msg.type != DSV_IPC_TOKEN)
                                call_detach_locked(cs, c); /* the worker is done with it */
                        call_push(c, ev, false);
                }
        }
        pthread_mutex_unlock(&cs->lock);
        dsv_ipc_msg_done(m);
}

static void *link_main(void *arg) {
        struct gw_link *l = arg;
        struct gw_calls *cs = l->cs;
        bool connected, was_connected = false;
        int64_t next_poll = 0;
        uint64_t seq = 1;
        while (!atomic_load(&l->stop)) {
                struct dsv_ipc_msg m;
                int r = dsv_ipc_recv(l->conn, &m, RECV_SLICE_MS, NULL, 0);
                if (r == 0) {
                        link_dispatch(l, &m);
                        link_send_orphan_cancels(cs, l);
                } else if (r == -ECANCELED)
                        break;
                /* Calls are sent only while a peer is connected, so a call in flight with no
                 * peer now means the pipe it went out on dropped, even if it came and went
                 * between two checks: take what the worker said before dying, fail the rest. */
                connected = dsv_ipc_peers(l->conn) > 0;
                pthread_mutex_lock(&cs->lock);
                bool orphans = !connected && l->calls;
                if (!connected)
                        l->health_ready = false;
                pthread_mutex_unlock(&cs->lock);
                if (orphans) {
                        while (dsv_ipc_recv(l->conn, &m, 0, NULL, 0) == 0)
                                link_dispatch(l, &m);
                        pthread_mutex_lock(&cs->lock);
                        link_fail_calls_locked(cs, l);
                        pthread_mutex_unlock(&cs->lock);
                        link_send_orphan_cancels(cs, l);
                }
                int64_t now = dsv__gw_now_ns();
                /* A (re)connected worker is asked at once: a restarted worker that is
                 * already ready is routable now, not after the rest of the interval. */
                if (connected && !was_connected)
                        next_poll = now;
                was_connected = connected;
                if (cs->cfg->health_interval_ms && connected && now >= next_poll) {
                        struct dsv_ipc_msg probe = {.type = DSV_IPC_HEALTH, .u.probe.seq = seq};
                        (void)dsv_ipc_send(l->conn, &probe);
                        probe.type = DSV_IPC_STATS;
                        (void)dsv_ipc_send(l->conn, &probe);
                        seq++;
                        next_poll = now + (int64_t)cs->cfg->health_interval_ms * 1000000;
                }
        }
        return NULL;
}

static int link_new(struct gw_calls *cs, const char *url, struct gw_link **ret) {
        struct gw_link *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->cs = cs;
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
        struct gw_calls *cs = l->cs;
        pthread_mutex_lock(&cs->lock);
        while (l->refs > 0)
                pthread_cond_wait(&cs->link_cond, &cs->lock);
        pthread_mutex_unlock(&cs->lock);
        atomic_store(&l->stop, true);
        pthread_join(l->thread, NULL);
        dsv_ipc_close(l->conn);
        free(l->orphans);
        free(l);
}

static struct gw_link *instance_detach_link_locked(struct gw_calls *cs, struct gw_instance *in) {
        struct gw_link *l = in->link;
        if (l) {
                link_fail_calls_locked(cs, l);
                l->slot = -1;
        }
        in->link = NULL;
        return l;
}

/* ---- the instance table ---------------------------------------------------------------- */

int dsv__gw_calls_init(struct gw_calls *cs, const struct dsv_gateway_config *cfg, struct gw_metrics *metrics) {
        memset(cs, 0, sizeof *cs);
        cs->cfg = cfg;
        cs->metrics = metrics;
        atomic_store(&cs->next_id, 1);
        int r = dsv_policy_router_init(&cs->router, cfg->route, cfg->route_seed ? cfg->route_seed : 0x9e3779b97f4a7c15ull);
        if (r == 0)
                r = -pthread_mutex_init(&cs->lock, NULL);
        if (r == 0 && (r = -pthread_cond_init(&cs->link_cond, NULL)) < 0)
                pthread_mutex_destroy(&cs->lock);
        return r;
}

void dsv__gw_calls_shutdown(struct gw_calls *cs) {
        atomic_store(&cs->stopping, true);
}

void dsv__gw_calls_done(struct gw_calls *cs) {
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++)
                if (cs->inst[s].used)
                        dsv__gw_instance_remove(cs, s);
        pthread_cond_destroy(&cs->link_cond);
        pthread_mutex_destroy(&cs->lock);
}

static struct gw_instance *instance_get_locked(struct gw_calls *cs, int id) {
        if (id < 0 || id >= DSV_GATEWAY_MAX_INSTANCES || !cs->inst[id].used)
                return NULL;
        return &cs->inst[id];
}

int dsv__gw_instance_add(struct gw_calls *cs, const struct dsv_gateway_instance_config *ic) {
        if (!ic || !ic->name || !ic->url || !ic->name[0] || strlen(ic->name) >= DSV_GATEWAY_NAME_MAX)
                return -EINVAL;
        struct gw_link *l;
        int r = link_new(cs, ic->url, &l);
        if (r < 0)
                return r;
        pthread_mutex_lock(&cs->lock);
        int slot = -1;
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                if (cs->inst[s].used && strcmp(cs->inst[s].name, ic->name) == 0) {
                        r = -EEXIST;
                        break;
                }
                if (!cs->inst[s].used && slot < 0)
                        slot = s;
        }
        if (r == 0 && slot < 0)
                r = -ENOSPC;
        uint64_t gen = ++cs->next_gen;
        if (r == 0)
                r = dsv__gw_metrics_instance_reset(cs->metrics, slot, gen, ic->name, ic->numa_node);
        if (r == 0) {
                struct gw_instance *in = &cs->inst[slot];
                *in = (struct gw_instance){.used = true, .gen = gen, .admin_ready = ic->ready, .link = l};
                snprintf(in->name, sizeof in->name, "%s", ic->name);
                l->slot = slot;
        }
        pthread_mutex_unlock(&cs->lock);
        if (r < 0) {
                link_free(l);
                return r;
        }
        return slot;
}

int dsv__gw_instance_set_url(struct gw_calls *cs, int id, const char *url) {
        if (!url)
                return -EINVAL;
        struct gw_link *l;
        int r = link_new(cs, url, &l);
        if (r < 0)
                return r;
        struct gw_link *old = NULL;
        pthread_mutex_lock(&cs->lock);
        struct gw_instance *in = instance_get_locked(cs, id);
        if (in) {
                old = instance_detach_link_locked(cs, in);
                in->link = l;
                in->has_ext = false;
                l->slot = id;
        }
        pthread_mutex_unlock(&cs->lock);
        link_free(in ? old : l);
        return in ? 0 : -ENOENT;
}

int dsv__gw_instance_remove(struct gw_calls *cs, int id) {
        pthread_mutex_lock(&cs->lock);
        struct gw_instance *in = instance_get_locked(cs, id);
        struct gw_link *old = NULL;
        if (in) {
                old = instance_detach_link_locked(cs, in);
                in->used = false;
        }
        pthread_mutex_unlock(&cs->lock);
        link_free(old);
        return in ? 0 : -ENOENT;
}

int dsv__gw_instance_set_ready(struct gw_calls *cs, int id, bool ready) {
        pthread_mutex_lock(&cs->lock);
        struct gw_instance *in = instance_get_locked(cs, id);
        if (in) {
                /* Made ready again (a restarted worker): it must say "ready" itself. nng
                 * re-dials a restarted worker within milliseconds, possibly between two of
                 * the link thread's peer checks, and the predecessor's last "ready" would
                 * route requests to a worker that is still loading, to be refused there. */
                if (ready && !in->admin_ready && in->link)
                        in->link->health_ready = false;
                in->admin_ready = ready;
        }
        pthread_mutex_unlock(&cs->lock);
        return in ? 0 : -ENOENT;
}

int dsv__gw_instance_set_load(struct gw_calls *cs, int id, const struct dsv_policy_worker_load *load) {
        pthread_mutex_lock(&cs->lock);
        struct gw_instance *in = instance_get_locked(cs, id);
        if (in) {
                in->has_ext = load != NULL;
                in->ext_ended = 0;
                if (load)
                        in->ext = *load;
        }
        pthread_mutex_unlock(&cs->lock);
        return in ? 0 : -ENOENT;
}

int dsv__gw_instance_is_up(struct gw_calls *cs, int id) {
        int64_t now = dsv__gw_now_ns();
        pthread_mutex_lock(&cs->lock);
        struct gw_instance *in = instance_get_locked(cs, id);
        int r = in ? instance_up_locked(cs, in, now) : -ENOENT;
        pthread_mutex_unlock(&cs->lock);
        return r;
}

int dsv__gw_instance_stats(struct gw_calls *cs, int id, struct dsv_gateway_instance_stats *ret) {
        if (!ret)
                return -EINVAL;
        int64_t now = dsv__gw_now_ns();
        pthread_mutex_lock(&cs->lock);
        struct gw_instance *in = instance_get_locked(cs, id);
        if (in)
                *ret = instance_stats_locked(cs, in, now);
        pthread_mutex_unlock(&cs->lock);
        return in ? 0 : -ENOENT;
}

size_t dsv__gw_instances_sample(struct gw_calls *cs, struct gw_instance_sample *v) {
        size_t n = 0;
        int64_t now = dsv__gw_now_ns();
        pthread_mutex_lock(&cs->lock);
        for (int s = 0; s < DSV_GATEWAY_MAX_INSTANCES; s++) {
                const struct gw_instance *in = &cs->inst[s];
                if (!in->used)
                        continue;
                v[n] = (struct gw_instance_sample){.slot = s, .gen = in->gen, .stats = instance_stats_locked(cs, in, now)};
                memcpy(v[n++].name, in->name, sizeof in->name);
        }
        pthread_mutex_unlock(&cs->lock);
        return n;
}

/* ---- metrics of the current attempt ------------------------------------------------------ */

void dsv__gw_call_observe_token(struct gw_call *c, int64_t now_ns) {
        bool first = c->t_first_ns == 0;
        double seconds = (double)(now_ns - (first ? c->t_arrival_ns : c->t_last_ns)) / 1e9;
        dsv__gw_metrics_token(c->calls->metrics, c->slot, c->inst_gen, first, seconds);
        if (first)
                c->t_first_ns = now_ns;
        c->t_last_ns = now_ns;
        c->n_tokens++;
}

void dsv__gw_calls_set_request_log(struct gw_calls *cs, dsv_gateway_request_log_fn fn, void *userdata) {
        pthread_mutex_lock(&cs->lock);
        cs->request_log = fn;
        cs->request_log_userdata = userdata;
        pthread_mutex_unlock(&cs->lock);
}

void dsv__gw_call_observe_end(struct gw_call *c, const struct dsv_ipc_final *final, int64_t now_ns) {
        if (final) {
                struct gw_request_done done = {
                        .e2e_s = (double)(now_ns - c->t_arrival_ns) / 1e9,
                        .queue_s = final->queue_s,
                        .prefill_s = final->prefill_s,
                        .decode_s = final->decode_s,
                        .prompt_tokens = final->prompt_tokens,
                        .generation_tokens = final->completion_tokens,
                        .finish_reason = final->finish_reason,
                };
                dsv__gw_metrics_complete(c->calls->metrics, c->slot, c->inst_gen, &done);
        }
        struct gw_calls *cs = c->calls;
        char instance[DSV_GATEWAY_NAME_MAX] = "";
        pthread_mutex_lock(&cs->lock);
        count_finished_locked(cs, now_ns / 1000000000);
        dsv_gateway_request_log_fn log = final ? cs->request_log : NULL;
        void *log_userdata = cs->request_log_userdata;
        if (log && c->slot >= 0 && c->slot < DSV_GATEWAY_MAX_INSTANCES)
                snprintf(instance, sizeof instance, "%s", cs->inst[c->slot].name);
        pthread_mutex_unlock(&cs->lock);
        if (log) {
                const struct dsv_ipc_request *rq = &c->req.ipc.u.request;
                struct dsv_gateway_request_log rec = {
                        .instance = instance,
                        .endpoint = c->req.api == DSV_GW_API_CHAT ? "chat" : "completions",
                        .finish_reason = final->finish_reason ? final->finish_reason : "stop",
                        .prompt_tokens = final->prompt_tokens,
                        .completion_tokens = final->completion_tokens,
                        .e2e_s = (double)(now_ns - c->t_arrival_ns) / 1e9,
                        .queue_s = final->queue_s,
                        .prefill_s = final->prefill_s,
                        .decode_s = final->decode_s,
                        .ttft_s = final->ttft_s,
                        .prompt = rq->input == DSV_IPC_INPUT_CHAT ? rq->messages_json : rq->prompt,
                };
                log(&rec, log_userdata);
        }
}
