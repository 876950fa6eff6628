/* calls.h — the calls room: each instance's link to its worker (nng, one receiver thread
 * per link, health and stats polling), the routing and admission decision for a call
 * (dsv_policy), and one call's life on a link: sent, its events handed over, retried once
 * elsewhere, cancelled. Takes the parsed request and the error shape from the OpenAI room
 * and reports into the metrics room; knows nothing of HTTP.
 *
 * Locking: calls->lock guards the instance table, every link's list of in-flight calls
 * and each call's link fields; call->lock guards the call's event queue. Lock order:
 * calls->lock, then call->lock; the metrics' own lock comes last. */
#ifndef DSV_GATEWAY_CALLS_H
#define DSV_GATEWAY_CALLS_H

#include <pthread.h>
#include <stdatomic.h>

#include "dsv_gateway.h"
#include "metrics.h"
#include "openai.h"

struct gw_link;
struct gw_calls;

/* One worker message for a call: TOKEN, FINAL or ERROR. */
struct gw_event {
        struct gw_event *next;
        struct dsv_ipc_msg msg;
};

/* One generation request on its way through the instances. */
struct gw_call {
        struct gw_calls *calls;
        struct dsv_gw_request req;
        int fd;                    /* client socket, watched for hang-up */
        int64_t t_arrival_ns;      /* CLOCK_MONOTONIC */
        int64_t deadline_ns;
        /* calls->lock */
        uint64_t id;               /* ipc id of the current attempt */
        struct gw_link *link;      /* non-NULL while in flight */
        struct gw_call *link_prev, *link_next;
        int slot;                  /* instance of the current attempt; -1 none */
        int prefer_slot;           /* route here when it is up (a choice after the first); -1 none */
        uint64_t inst_gen;
        uint32_t est_prompt_tokens;
        /* call->lock */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct gw_event *head, *tail;
        bool lost;                 /* the link dropped: worker died, link replaced or removed */
        /* the thread that owns the call only */
        int attempts;
        int64_t t_first_ns, t_last_ns; /* of the current attempt; 0: no token yet */
        int32_t n_tokens;
};

struct gw_instance {
        bool used;
        uint64_t gen; /* changes when the slot is reused */
        char name[DSV_GATEWAY_NAME_MAX];
        bool admin_ready;
        struct gw_link *link;
        uint32_t inflight;
        uint64_t inflight_prompt_tokens;
        bool has_ext;
        struct dsv_policy_worker_load ext;
        /* Requests the worker ended (final or error) since ext was reported: ext still
         * counts them, so routing takes them off (valid when has_ext). */
        uint32_t ext_ended;
        /* The worker's own view from its last stats reply (valid when has_ext). */
        int32_t kv_blocks_used, kv_blocks_total;
        int64_t preemptions;
        double prefix_hit_rate;
        int64_t spec_verifications, spec_draft_tokens, spec_accepted_tokens;
        int64_t spec_accepted_hist[DSV_GATEWAY_SPEC_HIST];
        int64_t kv_bytes_per_token;
        int64_t prefix_query_tokens, prefix_hit_tokens;
        int64_t steps, step_tokens, step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS + 1];
        int64_t token_prob_hist[DSV_IPC_CONFIDENCE_BINS], entropy_hist[DSV_IPC_CONFIDENCE_BINS];
        int64_t confidence_requests;
        int64_t kv_disk_bytes_used, kv_disk_bytes_capacity;
        int64_t kv_disk_blocks_written, kv_disk_blocks_read, kv_disk_blocks_dropped, kv_disk_blocks_corrupt;
        int64_t prefix_disk_hit_tokens;
        bool kv_disk_failed;
};

#define GW_RATE_WINDOW_S 10

struct gw_calls {
        const struct dsv_gateway_config *cfg; /* the gateway's; outlives the calls */
        struct gw_metrics *metrics;
        atomic_bool stopping;
        atomic_uint_fast64_t next_id;
        pthread_mutex_t lock;
        pthread_cond_t link_cond; /* a link's refs dropped to 0 */
        struct gw_instance inst[DSV_GATEWAY_MAX_INSTANCES];
        uint64_t next_gen;
        struct dsv_policy_router router;
        /* requests finished per second, the drain rate behind a 429's Retry-After */
        uint64_t rate_counts[GW_RATE_WINDOW_S];
        int64_t rate_secs[GW_RATE_WINDOW_S];
        /* the operator's request log (dsv_gateway_set_request_log_hook); NULL: none */
        dsv_gateway_request_log_fn request_log;
        void *request_log_userdata;
};

int64_t dsv__gw_now_ns(void);
/* Installs the request log hook (fn NULL: none). */
void dsv__gw_calls_set_request_log(struct gw_calls *cs, dsv_gateway_request_log_fn fn, void *userdata);

int dsv__gw_calls_init(struct gw_calls *cs, const struct dsv_gateway_config *cfg, struct gw_metrics *metrics);
/* From now on every call gives up (its owner answers 503): the gateway is going away. */
void dsv__gw_calls_shutdown(struct gw_calls *cs);
/* Removes every instance (their calls fail over) and frees what init made. */
void dsv__gw_calls_done(struct gw_calls *cs);

/* The instance table behind dsv_gateway_instance_*() (same contracts). */
int dsv__gw_instance_add(struct gw_calls *cs, const struct dsv_gateway_instance_config *ic);
int dsv__gw_instance_set_url(struct gw_calls *cs, int id, const char *url);
int dsv__gw_instance_remove(struct gw_calls *cs, int id);
int dsv__gw_instance_set_ready(struct gw_calls *cs, int id, bool ready);
int dsv__gw_instance_set_load(struct gw_calls *cs, int id, const struct dsv_policy_worker_load *load);
int dsv__gw_instance_is_up(struct gw_calls *cs, int id);
int dsv__gw_instance_stats(struct gw_calls *cs, int id, struct dsv_gateway_instance_stats *ret);
/* Instances up right now. */
int dsv__gw_instances_up(struct gw_calls *cs);
/* Every instance in use, in id order, into v (DSV_GATEWAY_MAX_INSTANCES entries). */
size_t dsv__gw_instances_sample(struct gw_calls *cs, struct gw_instance_sample *v);

/* Whether the queues are full for any request: even the ready instance with the shortest
 * queue is at max_queue_per_instance, or all of them together at max_queue_total. Then
 * every request would be refused whatever it asks, so the caller refuses it before
 * parsing it (the work a refusal costs is what an overloaded gateway has least of).
 * -EAGAIN with the 429 and its Retry-After (the drain estimate call_start gives) in err,
 * counted as queue_full; 0 when a request could be admitted or no instance is ready (that
 * 503 waits for call_start, after the request was checked). */
int dsv__gw_calls_queue_full(struct gw_calls *cs, struct dsv_gw_error *err);

/* A new call arriving now for the client on fd; its deadline is request_timeout_ms
 * away. The caller parses the request into c->req. */
int dsv__gw_call_init(struct gw_call *c, struct gw_calls *cs, int fd);
/* Cancels the call when still in flight and frees it, request included. */
void dsv__gw_call_done(struct gw_call *c);
/* Routes and admits the call, registers it with the chosen instance's link and sends the
 * request. exclude_slot (≥ 0) is not considered (a retry). On refusal returns -EAGAIN
 * (429/503 in err, with Retry-After), -ECONNRESET when the send failed (err 503). */
int dsv__gw_call_start(struct gw_call *c, int exclude_slot, struct dsv_gw_error *err);
/* A failed first attempt is sent once more, to another instance than the one that
 * failed. 0 when it went out; -EALREADY after two attempts; else as call_start. */
int dsv__gw_call_retry(struct gw_call *c, struct dsv_gw_error *err);
/* Waits up to timeout_ms for the next event; the caller owns it (dsv__gw_event_free).
 * -ECONNRESET once the queued events are consumed and the link was lost; -ETIMEDOUT
 * when nothing came. */
int dsv__gw_call_wait(struct gw_call *c, int timeout_ms, struct gw_event **ret);
void dsv__gw_event_free(struct gw_event *ev);
/* Sends `cancel` when the call is still in flight and forgets it. */
void dsv__gw_call_cancel(struct gw_call *c);
/* Metrics of the current attempt: a token came, the call ended (final NULL: in error). */
void dsv__gw_call_observe_token(struct gw_call *c, int64_t now_ns);
void dsv__gw_call_observe_end(struct gw_call *c, const struct dsv_ipc_final *final, int64_t now_ns);

#endif
