/* metrics.h — the metrics room: every metric the gateway exports, kept and rendered in
 * the Prometheus text format 0.0.4 (metrics.c). A leaf: the other rooms report into it,
 * it calls none of them. Its own lock guards everything in struct gw_metrics; callers
 * may hold their own locks while reporting (it is taken last). */
#ifndef DSV_GATEWAY_METRICS_H
#define DSV_GATEWAY_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsv_gateway.h"

/* ---- histograms --------------------------------------------------------------------- */

#define DSV_GW_HIST_MAX_BUCKETS 24

struct dsv_gw_buckets {
        size_t n;
        double le[DSV_GW_HIST_MAX_BUCKETS]; /* ascending upper bounds, +Inf implied */
};

struct dsv_gw_hist {
        uint64_t counts[DSV_GW_HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last: > le[n-1] */
        uint64_t count;
        double sum;
};

void dsv__gw_hist_observe(struct dsv_gw_hist *h, const struct dsv_gw_buckets *b, double v);
/* Writes name_bucket{labels,le=...} (cumulative), name_sum and name_count. labels is a
 * ready label list without braces ('instance="0",numa_node="1"'), may be "". */
int dsv__gw_hist_write(FILE *out, const char *name, const char *labels, const struct dsv_gw_hist *h,
                       const struct dsv_gw_buckets *b);
/* The q-quantile (0..1) of the observations, as Prometheus's histogram_quantile()
 * estimates it: linear within the bucket the rank falls in (the first bucket from 0),
 * the last finite bound when it falls above it. NAN when h holds no observation. */
double dsv__gw_hist_quantile(const struct dsv_gw_hist *h, const struct dsv_gw_buckets *b, double q);
/* Escapes a label value (\\, \" and \n) into buf. Returns its length or -ENOBUFS. */
int dsv__gw_label_escape(const char *s, char *buf, size_t size);

/* ---- the gateway's metrics ---------------------------------------------------------- */

/* Why a streamed answer ended with an error event (dsvisor_stream_aborts_total). */
enum gw_abort {
        GW_ABORT_INSTANCE_LOST,
        GW_ABORT_DEADLINE,
        GW_ABORT_WORKER_ERROR,
        GW_ABORT_CLIENT_GONE,
        GW_ABORT_COUNT
};

#define GW_MAX_STATUS 16

/* Which names the families go out under: dsvisor's own, and with --metrics-compat vllm
 * also vLLM's ("vllm:" names; labels model_name and engine), so dashboards written for
 * vLLM find the same series. */
enum gw_naming { GW_NAMING_DSVISOR, GW_NAMING_VLLM, GW_NAMING_COUNT };

/* How a request ended, as the worker's final message says (finished_reason label). */
enum gw_finish { GW_FINISH_STOP, GW_FINISH_LENGTH, GW_FINISH_CANCELLED, GW_FINISH_DEADLINE, GW_FINISH_COUNT };

#define GW_MODEL_LABEL_MAX 512

/* The live view (the status page): an instance's latency histograms and generated
 * tokens as they stood at times the view was read, one snapshot a step at most, enough
 * of them that one is always a window old once the view has been read that long. */
#define GW_LIVE_WINDOW_S 60
#define GW_LIVE_STEP_S 5
#define GW_LIVE_SNAPSHOTS (GW_LIVE_WINDOW_S / GW_LIVE_STEP_S + 1)

struct gw_live_snapshot {
        int64_t t_ns; /* CLOCK_MONOTONIC */
        struct dsv_gw_hist e2e, ttft, itl;
        uint64_t generation_tokens;
};

struct gw_live_ring {
        size_t n, next; /* snapshots kept, where the next one goes */
        struct gw_live_snapshot s[GW_LIVE_SNAPSHOTS];
};

/* One instance's series, by slot (the instance id). gen tells one occupant of a slot
 * from the next: a report for another gen than the slot's is dropped. */
struct gw_instance_metrics {
        uint64_t gen;
        /* instance="…",numa_node="…",model_name="…" and model_name="…",engine="…" */
        char labels[GW_NAMING_COUNT][2 * DSV_GATEWAY_NAME_MAX + GW_MODEL_LABEL_MAX + 64];
        struct dsv_gw_hist e2e, ttft, itl, queue, prefill, decode, inference, prompt_len, generation_len;
        uint64_t prompt_tokens, generation_tokens, failures, finished[GW_FINISH_COUNT];
        struct gw_live_ring live;
};

struct gw_metrics {
        pthread_mutex_t lock;
        char model[GW_MODEL_LABEL_MAX]; /* the served model id, escaped as a label value */
        bool vllm_compat;
        int status_codes[GW_MAX_STATUS];
        uint64_t status_counts[GW_MAX_STATUS];
        uint64_t retries, stream_aborts[GW_ABORT_COUNT];
        uint64_t rejected[DSV_GATEWAY_REJECT_COUNT], connections_refused;
        struct gw_instance_metrics inst[DSV_GATEWAY_MAX_INSTANCES];
};

/* A request's end as the worker's final message describes it, with the gateway's own
 * arrival-to-last-token time. */
struct gw_request_done {
        double e2e_s, queue_s, prefill_s, decode_s;
        int32_t prompt_tokens, generation_tokens;
        const char *finish_reason; /* "stop", "length", "cancelled", "deadline"; other: not counted */
};

/* An instance as it stands when the metrics are rendered (the calls room's view). */
struct gw_instance_sample {
        int slot;
        uint64_t gen;
        char name[DSV_GATEWAY_NAME_MAX];
        struct dsv_gateway_instance_stats stats;
};

/* The HTTP server as it stands when the metrics are rendered (the server room's view). */
struct gw_server_sample {
        uint32_t connections_open, max_connections;
        uint32_t connections_pending;     /* accepted, their first header still arriving */
        uint32_t max_connections_per_ip;  /* 0: no cap */
        uint32_t http_threads_max;        /* one per connection, the accept and MHD's threads */
        uint64_t refused_per_ip;
        uint64_t timeouts[3];             /* first byte, header, body */
};

/* model: the served model id (the model_name label); vllm_compat: also export vLLM's
 * names. -EINVAL when the id cannot be a label value. */
int dsv__gw_metrics_init(struct gw_metrics *m, const char *model, bool vllm_compat);
void dsv__gw_metrics_done(struct gw_metrics *m);
/* Starts the series of a new occupant of slot: zeroed, labelled with name and numa_node.
 * -EINVAL when the name cannot be a label value. */
int dsv__gw_metrics_instance_reset(struct gw_metrics *m, int slot, uint64_t gen, const char *name, int numa_node);
/* A token arrived: after seconds since arrival (first) or since the previous token. */
void dsv__gw_metrics_token(struct gw_metrics *m, int slot, uint64_t gen, bool first, double seconds);
/* A request completed. */
void dsv__gw_metrics_complete(struct gw_metrics *m, int slot, uint64_t gen, const struct gw_request_done *done);
/* A request was in flight when the instance's link dropped. */
void dsv__gw_metrics_failure(struct gw_metrics *m, int slot, uint64_t gen);
/* An answer to a completion endpoint went out with this HTTP status (499: client gone). */
void dsv__gw_metrics_status(struct gw_metrics *m, int status);
void dsv__gw_metrics_retry(struct gw_metrics *m);
void dsv__gw_metrics_abort(struct gw_metrics *m, enum gw_abort why);
/* A generation request was refused before it ran. */
void dsv__gw_metrics_reject(struct gw_metrics *m, enum dsv_gateway_reject why);
/* A connection beyond max_connections was answered 503 and closed. */
void dsv__gw_metrics_connection_refused(struct gw_metrics *m);
/* The refusal counters into ret's rejected and connections_refused. */
void dsv__gw_metrics_refusals(struct gw_metrics *m, struct dsv_gateway_stats *ret);
/* An instance's recent figures, from its histograms' change over the last
 * GW_LIVE_WINDOW_S seconds (over less while the view has been read for less: its first
 * read only starts the window). */
struct gw_live {
        double window_s;   /* the span covered; 0: nothing yet (the first read) */
        uint64_t requests; /* finished in it */
        double e2e_p50_s, e2e_p99_s, ttft_p50_s, ttft_p99_s, itl_p50_s, itl_p99_s; /* NAN: none in it */
        double tokens_per_s; /* generated */
};
/* Reads the live view of slot's occupant gen at now_ns (CLOCK_MONOTONIC). -ENOENT when
 * the slot belongs to another occupant. */
int dsv__gw_metrics_live(struct gw_metrics *m, int slot, uint64_t gen, int64_t now_ns, struct gw_live *ret);
/* Writes every family, the per-instance ones for the n instances sampled. 0 or -EIO. */
int dsv__gw_metrics_write(struct gw_metrics *m, FILE *f, const struct gw_instance_sample *v, size_t n,
                          const struct gw_server_sample *srv);

#endif
