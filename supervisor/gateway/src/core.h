/* core.h — the gateway's shared state between its HTTP side (http.c) and its instance
 * side (instances.c). Locking: gw->lock guards the instance table, every link's list of
 * in-flight calls, each call's link fields and the metrics; call->lock guards the call's
 * event queue. Lock order: gw->lock, then call->lock. */
#ifndef DSV_GATEWAY_CORE_H
#define DSV_GATEWAY_CORE_H

#include <pthread.h>
#include <stdatomic.h>

#include "dsv_gateway.h"
#include "gateway-internal.h"

struct MHD_Daemon;
struct gw_link;

/* One worker message for a call: TOKEN, FINAL or ERROR. */
struct gw_event {
        struct gw_event *next;
        struct dsv_ipc_msg msg;
};

/* One generation request as the instance side sees it. Created and freed by http.c. */
struct gw_call {
        struct dsv_gateway *gw;
        struct dsv_gw_request req;
        int fd;                    /* client socket, watched for hang-up */
        int64_t t_arrival_ns;      /* CLOCK_MONOTONIC */
        int64_t deadline_ns;
        /* gw->lock */
        uint64_t id;               /* ipc id of the current attempt */
        struct gw_link *link;      /* non-NULL while in flight */
        struct gw_call *link_prev, *link_next;
        int slot;                  /* instance of the current attempt; -1 none */
        uint64_t inst_gen;
        uint32_t est_prompt_tokens;
        /* call->lock */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct gw_event *head, *tail;
        bool lost;                 /* the link dropped: worker died, link replaced or removed */
        /* HTTP thread only */
        int attempts;
        int64_t t_first_ns, t_last_ns; /* of the current attempt; 0: no token yet */
        int32_t n_tokens;
};

struct gw_instance {
        bool used;
        uint64_t gen; /* changes when the slot is reused */
        char name[DSV_GATEWAY_NAME_MAX];
        char labels[2 * DSV_GATEWAY_NAME_MAX + 48]; /* instance="…",numa_node="…" */
        int numa_node;
        bool admin_ready;
        struct gw_link *link;
        uint32_t inflight;
        uint64_t inflight_prompt_tokens;
        bool has_ext;
        struct dsv_policy_worker_load ext;
        /* The worker's own view from its last stats reply (valid when has_ext). */
        int32_t kv_blocks_used, kv_blocks_total;
        int64_t preemptions;
        double prefix_hit_rate;
        /* metrics */
        struct dsv_gw_hist e2e, ttft, itl, queue;
        uint64_t prompt_tokens, generation_tokens, failures;
};

#define GW_MAX_STATUS 16
#define GW_RATE_WINDOW_S 10

struct dsv_gateway {
        struct dsv_gateway_config cfg; /* strings below are our copies */
        char *listen_host, *model;
        struct dsv_gw_keys keys;
        bool auth;
        struct MHD_Daemon *mhd;
        atomic_bool stopping;
        atomic_uint_fast64_t next_id;
        dsv_gateway_metrics_fn hook;
        void *hook_userdata;

        pthread_mutex_t lock;
        pthread_cond_t link_cond; /* a link's refs dropped to 0 */
        struct gw_instance inst[DSV_GATEWAY_MAX_INSTANCES];
        uint64_t next_gen;
        struct dsv_policy_router router;
        /* metrics */
        int status_codes[GW_MAX_STATUS];
        uint64_t status_counts[GW_MAX_STATUS];
        uint64_t retries, stream_aborts[4];
        uint64_t rate_counts[GW_RATE_WINDOW_S];
        int64_t rate_secs[GW_RATE_WINDOW_S];
};

enum gw_abort {
        GW_ABORT_INSTANCE_LOST,
        GW_ABORT_DEADLINE,
        GW_ABORT_WORKER_ERROR,
        GW_ABORT_CLIENT_GONE,
        GW_ABORT_COUNT
};

int64_t dsv__gw_now_ns(void);

/* Routes and admits the call, registers it with the chosen instance's link and sends the
 * request. exclude_slot (≥ 0) is not considered (a retry). On refusal returns -EAGAIN
 * (429/503 in err, with Retry-After), -ECONNRESET when the send failed (err 503). */
int dsv__gw_call_start(struct gw_call *c, int exclude_slot, struct dsv_gw_error *err);
/* Waits up to timeout_ms for the next event; the caller owns it (dsv__gw_event_free).
 * -ECONNRESET once the queued events are consumed and the link was lost; -ETIMEDOUT
 * when nothing came. */
int dsv__gw_call_wait(struct gw_call *c, int timeout_ms, struct gw_event **ret);
void dsv__gw_event_free(struct gw_event *ev);
/* Sends `cancel` when the call is still in flight and forgets it. */
void dsv__gw_call_cancel(struct gw_call *c);
/* Metrics of the current attempt. */
void dsv__gw_call_observe_token(struct gw_call *c, int64_t now_ns);
void dsv__gw_call_observe_end(struct gw_call *c, const struct dsv_ipc_final *final, int64_t now_ns);
void dsv__gw_count_status(struct dsv_gateway *gw, int status);
void dsv__gw_count_retry(struct dsv_gateway *gw);
void dsv__gw_count_abort(struct dsv_gateway *gw, enum gw_abort why);
/* Instances up right now. */
int dsv__gw_instances_up(struct dsv_gateway *gw);

int dsv__gw_http_start(struct dsv_gateway *gw);
void dsv__gw_http_stop(struct dsv_gateway *gw);

#endif
