/* Every metric the gateway exports, in the Prometheus text format 0.0.4: histograms with
 * cumulative buckets (le="+Inf" equals _count, as the format requires), escaped label
 * values, the request counters and the per-instance families. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"

void dsv__gw_hist_observe(struct dsv_gw_hist *h, const struct dsv_gw_buckets *b, double v) {
        if (!(v >= 0))
                v = 0; /* clocks are monotonic; a NaN or negative reading is a bug upstream */
        size_t i = 0;
        while (i < b->n && v > b->le[i])
                i++;
        h->counts[i]++;
        h->count++;
        h->sum += v;
}

int dsv__gw_hist_write(FILE *out, const char *name, const char *labels, const struct dsv_gw_hist *h,
                       const struct dsv_gw_buckets *b) {
        const char *sep = labels[0] ? "," : "";
        uint64_t cum = 0;
        for (size_t i = 0; i < b->n; i++) {
                cum += h->counts[i];
                fprintf(out, "%s_bucket{%s%sle=\"%.17g\"} %llu\n", name, labels, sep, b->le[i], (unsigned long long)cum);
        }
        fprintf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)h->count);
        fprintf(out, "%s_sum{%s} %.17g\n", name, labels, h->sum);
        fprintf(out, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
        return ferror(out) ? -EIO : 0;
}

double dsv__gw_hist_quantile(const struct dsv_gw_hist *h, const struct dsv_gw_buckets *b, double q) {
        if (h->count == 0 || b->n == 0)
                return NAN;
        double rank = q * (double)h->count;
        uint64_t below = 0;
        for (size_t i = 0; i < b->n; i++) {
                if ((double)(below + h->counts[i]) >= rank && h->counts[i] > 0) {
                        double lo = i == 0 ? 0 : b->le[i - 1];
                        return lo + (b->le[i] - lo) * (rank - (double)below) / (double)h->counts[i];
                }
                below += h->counts[i];
        }
        return b->le[b->n - 1];
}

int dsv__gw_label_escape(const char *s, char *buf, size_t size) {
        size_t n = 0;
        for (; *s; s++) {
                const char *rep = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
                size_t l = rep ? 2 : 1;
                if (n + l >= size)
                        return -ENOBUFS;
                if (rep) {
                        buf[n] = rep[0];
                        buf[n + 1] = rep[1];
                } else {
                        buf[n] = *s;
                }
                n += l;
        }
        if (n >= size)
                return -ENOBUFS;
        buf[n] = 0;
        return (int)n;
}

/* ---- the gateway's metrics ---------------------------------------------------------- */

/* Seconds: vLLM's buckets for each, so its dashboards' quantiles read alike. */
static const struct dsv_gw_buckets e2e_buckets = {
        19, {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}};
static const struct dsv_gw_buckets ttft_buckets = {
        22, {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}};
static const struct dsv_gw_buckets itl_buckets = {
        21, {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40}};
static const struct dsv_gw_buckets queue_buckets = {
        16, {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}};
static const struct dsv_gw_buckets phase_buckets = {
        20, {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960}};
/* Tokens: 1-2-5 steps. */
static const struct dsv_gw_buckets length_buckets = {
        18, {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000}};

static const char *const finish_names[GW_FINISH_COUNT] = {
        [GW_FINISH_STOP] = "stop",
        [GW_FINISH_LENGTH] = "length",
        [GW_FINISH_CANCELLED] = "cancelled",
        [GW_FINISH_DEADLINE] = "deadline",
};

int dsv__gw_metrics_init(struct gw_metrics *m, const char *model, bool vllm_compat) {
        memset(m, 0, sizeof *m);
        if (!model || dsv__gw_label_escape(model, m->model, sizeof m->model) < 0)
                return -EINVAL;
        m->vllm_compat = vllm_compat;
        return -pthread_mutex_init(&m->lock, NULL);
}

void dsv__gw_metrics_done(struct gw_metrics *m) {
        pthread_mutex_destroy(&m->lock);
}

int dsv__gw_metrics_instance_reset(struct gw_metrics *m, int slot, uint64_t gen, const char *name, int numa_node) {
        char escaped[2 * DSV_GATEWAY_NAME_MAX];
        if (slot < 0 || slot >= DSV_GATEWAY_MAX_INSTANCES || dsv__gw_label_escape(name, escaped, sizeof escaped) < 0)
                return -EINVAL;
        pthread_mutex_lock(&m->lock);
        struct gw_instance_metrics *im = &m->inst[slot];
        *im = (struct gw_instance_metrics){.gen = gen};
        snprintf(im->labels[GW_NAMING_DSVISOR], sizeof im->labels[0], "instance=\"%s\",numa_node=\"%d\",model_name=\"%s\"",
                 escaped, numa_node, m->model);
        snprintf(im->labels[GW_NAMING_VLLM], sizeof im->labels[0], "model_name=\"%s\",engine=\"%s\"", m->model, escaped);
        pthread_mutex_unlock(&m->lock);
        return 0;
}

/* The slot's series when it still belongs to gen; called with m->lock held. */
static struct gw_instance_metrics *instance_locked(struct gw_metrics *m, int slot, uint64_t gen) {
        if (slot < 0 || slot >= DSV_GATEWAY_MAX_INSTANCES || m->inst[slot].gen != gen)
                return NULL;
        return &m->inst[slot];
}

void dsv__gw_metrics_token(struct gw_metrics *m, int slot, uint64_t gen, bool first, double seconds) {
        pthread_mutex_lock(&m->lock);
        struct gw_instance_metrics *im = instance_locked(m, slot, gen);
        if (im) {
                if (first)
                        dsv__gw_hist_observe(&im->ttft, &ttft_buckets, seconds);
                else
                        dsv__gw_hist_observe(&im->itl, &itl_buckets, seconds);
                im->generation_tokens++;
        }
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_complete(struct gw_metrics *m, int slot, uint64_t gen, const struct gw_request_done *done) {
        pthread_mutex_lock(&m->lock);
        struct gw_instance_metrics *im = instance_locked(m, slot, gen);
        if (im) {
                dsv__gw_hist_observe(&im->e2e, &e2e_buckets, done->e2e_s);
                dsv__gw_hist_observe(&im->queue, &queue_buckets, done->queue_s);
                dsv__gw_hist_observe(&im->prefill, &phase_buckets, done->prefill_s);
                dsv__gw_hist_observe(&im->decode, &phase_buckets, done->decode_s);
                dsv__gw_hist_observe(&im->inference, &phase_buckets, done->prefill_s + done->decode_s);
                dsv__gw_hist_observe(&im->prompt_len, &length_buckets, done->prompt_tokens);
                dsv__gw_hist_observe(&im->generation_len, &length_buckets, done->generation_tokens);
                if (done->prompt_tokens > 0)
                        im->prompt_tokens += (uint64_t)done->prompt_tokens;
                for (int k = 0; k < GW_FINISH_COUNT; k++)
                        if (done->finish_reason && strcmp(done->finish_reason, finish_names[k]) == 0)
                                im->finished[k]++;
        }
        pthread_mutex_unlock(&m->lock);
}

/* ---- the live view ------------------------------------------------------------------ */

static void hist_minus(struct dsv_gw_hist *ret, const struct dsv_gw_hist *now, const struct dsv_gw_hist *then) {
        for (size_t i = 0; i <= DSV_GW_HIST_MAX_BUCKETS; i++)
                ret->counts[i] = now->counts[i] - then->counts[i];
        ret->count = now->count - then->count;
        ret->sum = now->sum - then->sum;
}

int dsv__gw_metrics_live(struct gw_metrics *m, int slot, uint64_t gen, int64_t now_ns, struct gw_live *ret) {
        pthread_mutex_lock(&m->lock);
        struct gw_instance_metrics *im = instance_locked(m, slot, gen);
        if (!im) {
                pthread_mutex_unlock(&m->lock);
                return -ENOENT;
        }
        struct gw_live_ring *ring = &im->live;
        /* The baseline: the newest snapshot a window old, else the oldest kept. */
        const struct gw_live_snapshot *base = NULL;
        for (size_t k = 0; k < ring->n; k++) {
                const struct gw_live_snapshot *s =
                        &ring->s[(ring->next + GW_LIVE_SNAPSHOTS - ring->n + k) % GW_LIVE_SNAPSHOTS];
                if (!base || now_ns - s->t_ns >= (int64_t)GW_LIVE_WINDOW_S * 1000000000)
                        base = s;
        }
        struct gw_live live = {.e2e_p50_s = NAN, .e2e_p99_s = NAN, .ttft_p50_s = NAN, .ttft_p99_s = NAN,
                               .itl_p50_s = NAN, .itl_p99_s = NAN};
        if (base && now_ns > base->t_ns) {
                struct dsv_gw_hist e2e, ttft, itl;
                hist_minus(&e2e, &im->e2e, &base->e2e);
                hist_minus(&ttft, &im->ttft, &base->ttft);
                hist_minus(&itl, &im->itl, &base->itl);
                live.window_s = (double)(now_ns - base->t_ns) / 1e9;
                live.requests = e2e.count;
                live.e2e_p50_s = dsv__gw_hist_quantile(&e2e, &e2e_buckets, 0.5);
                live.e2e_p99_s = dsv__gw_hist_quantile(&e2e, &e2e_buckets, 0.99);
                live.ttft_p50_s = dsv__gw_hist_quantile(&ttft, &ttft_buckets, 0.5);
                live.ttft_p99_s = dsv__gw_hist_quantile(&ttft, &ttft_buckets, 0.99);
                live.itl_p50_s = dsv__gw_hist_quantile(&itl, &itl_buckets, 0.5);
                live.itl_p99_s = dsv__gw_hist_quantile(&itl, &itl_buckets, 0.99);
                live.tokens_per_s = (double)(im->generation_tokens - base->generation_tokens) / live.window_s;
        }
        const struct gw_live_snapshot *newest = ring->n ? &ring->s[(ring->next + GW_LIVE_SNAPSHOTS - 1) % GW_LIVE_SNAPSHOTS] : NULL;
        if (!newest || now_ns - newest->t_ns >= (int64_t)GW_LIVE_STEP_S * 1000000000) {
                ring->s[ring->next] = (struct gw_live_snapshot){.t_ns = now_ns, .e2e = im->e2e, .ttft = im->ttft,
                                                                .itl = im->itl,
                                                                .generation_tokens = im->generation_tokens};
                ring->next = (ring->next + 1) % GW_LIVE_SNAPSHOTS;
                if (ring->n < GW_LIVE_SNAPSHOTS)
                        ring->n++;
        }
        pthread_mutex_unlock(&m->lock);
        *ret = live;
        return 0;
}

void dsv__gw_metrics_failure(struct gw_metrics *m, int slot, uint64_t gen) {
        pthread_mutex_lock(&m->lock);
        struct gw_instance_metrics *im = instance_locked(m, slot, gen);
        if (im)
                im->failures++;
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_status(struct gw_metrics *m, int status) {
        pthread_mutex_lock(&m->lock);
        for (int i = 0; i < GW_MAX_STATUS; i++) {
                if (m->status_codes[i] == status || m->status_codes[i] == 0) {
                        m->status_codes[i] = status;
                        m->status_counts[i]++;
                        break;
                }
        }
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_retry(struct gw_metrics *m) {
        pthread_mutex_lock(&m->lock);
        m->retries++;
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_abort(struct gw_metrics *m, enum gw_abort why) {
        pthread_mutex_lock(&m->lock);
        m->stream_aborts[why]++;
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_reject(struct gw_metrics *m, enum dsv_gateway_reject why) {
        pthread_mutex_lock(&m->lock);
        m->rejected[why]++;
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_connection_refused(struct gw_metrics *m) {
        pthread_mutex_lock(&m->lock);
        m->connections_refused++;
        pthread_mutex_unlock(&m->lock);
}

void dsv__gw_metrics_refusals(struct gw_metrics *m, struct dsv_gateway_stats *ret) {
        pthread_mutex_lock(&m->lock);
        memcpy(ret->rejected, m->rejected, sizeof ret->rejected);
        ret->connections_refused = m->connections_refused;
        pthread_mutex_unlock(&m->lock);
}

static const char *const reject_names[DSV_GATEWAY_REJECT_COUNT] = {
        [DSV_GATEWAY_REJECT_QUEUE_FULL] = "queue_full",
        [DSV_GATEWAY_REJECT_DEADLINE] = "deadline",
        [DSV_GATEWAY_REJECT_NO_INSTANCE] = "no_instance",
        [DSV_GATEWAY_REJECT_WORKER_OVERLOADED] = "worker_overloaded",
        [DSV_GATEWAY_REJECT_SHUTTING_DOWN] = "shutting_down",
};

const char *dsv_gateway_reject_to_string(enum dsv_gateway_reject r) {
        return r >= 0 && r < DSV_GATEWAY_REJECT_COUNT ? reject_names[r] : NULL;
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

/* A sample value: whole numbers exactly, fractions to 9 digits. */
static void value(FILE *f, double v) {
        if (v == (double)(int64_t)v)
                fprintf(f, " %lld\n", (long long)(int64_t)v);
        else
                fprintf(f, " %.9g\n", v);
}

/* Refusals, connections and the admission queue: the gateway under load. */
static void write_overload_locked(struct gw_metrics *m, FILE *f, const struct gw_instance_sample *v, size_t n,
                                  const struct gw_server_sample *srv) {
        family(f, "dsvisor_requests_rejected_total", "counter",
               "Completion requests refused before they ran (429 or 503 with Retry-After), by reason.");
        for (int i = 0; i < DSV_GATEWAY_REJECT_COUNT; i++)
                fprintf(f, "dsvisor_requests_rejected_total{reason=\"%s\"} %llu\n", reject_names[i],
                        (unsigned long long)m->rejected[i]);
        family(f, "dsvisor_connections_refused_total", "counter",
               "HTTP connections beyond the connection limit, answered 503 by the accept path and closed.");
        fprintf(f, "dsvisor_connections_refused_total %llu\n", (unsigned long long)m->connections_refused);
        family(f, "dsvisor_http_connections", "gauge", "HTTP connections open.");
        fprintf(f, "dsvisor_http_connections %u\n", srv->connections_open);
        family(f, "dsvisor_http_connections_max", "gauge", "HTTP connections allowed before the accept path refuses.");
        fprintf(f, "dsvisor_http_connections_max %u\n", srv->max_connections);
        family(f, "dsvisor_http_connections_pending", "gauge",
               "Connections accepted whose first request header is still arriving (held by the accept path).");
        fprintf(f, "dsvisor_http_connections_pending %u\n", srv->connections_pending);
        family(f, "dsvisor_http_connections_per_ip_max", "gauge",
               "HTTP connections allowed from one client address (0: no cap).");
        fprintf(f, "dsvisor_http_connections_per_ip_max %u\n", srv->max_connections_per_ip);
        family(f, "dsvisor_http_threads_max", "gauge",
               "HTTP threads at most: one per connection, the accept thread and libmicrohttpd's polling thread.");
        fprintf(f, "dsvisor_http_threads_max %u\n", srv->http_threads_max);
        family(f, "dsvisor_connections_refused_per_ip_total", "counter",
               "HTTP connections beyond the per-address cap, answered 429 by the accept path and closed.");
        fprintf(f, "dsvisor_connections_refused_per_ip_total %llu\n", (unsigned long long)srv->refused_per_ip);
        static const char *const phases[] = {"first_byte", "header", "body"};
        family(f, "dsvisor_http_client_timeouts_total", "counter",
               "Connections closed because the client was too slow, by phase (first byte, header block, body).");
        for (int i = 0; i < 3; i++)
                fprintf(f, "dsvisor_http_client_timeouts_total{phase=\"%s\"} %llu\n", phases[i],
                        (unsigned long long)srv->timeouts[i]);
        uint64_t waiting = 0;
        for (size_t i = 0; i < n; i++)
                waiting += v[i].stats.waiting;
        family(f, "dsvisor_admission_queue_length", "gauge",
               "Admitted requests waiting to run, over all instances (their wait: dsvisor_request_queue_time_seconds).");
        fprintf(f, "dsvisor_admission_queue_length %llu\n", (unsigned long long)waiting);
}

/* Speculative decoding as the workers count it, for instances that reported (a worker
 * that does not speculate reports zeros), under dsvisor's names only. The acceptance
 * length is the number of drafts a verification accepted: one bucket per length, _sum the
 * accepted drafts, _count the verifications. */
static void write_spec_locked(FILE *f, const struct gw_instance_sample *v,
                              const struct gw_instance_metrics *const *ims, size_t n) {
        static const struct dsv_gw_buckets len_buckets = {DSV_GATEWAY_SPEC_HIST, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
        _Static_assert(DSV_GATEWAY_SPEC_HIST == 9, "one bucket per acceptance length");
        static const struct {
                const char *name, *help;
        } counters[] = {
                {"dsvisor_spec_decode_draft_tokens_total", "Draft tokens verified by speculative decoding."},
                {"dsvisor_spec_decode_accepted_tokens_total",
                 "Draft tokens accepted (emitted as verified) by speculative decoding."},
        };
        for (size_t p = 0; p < 2; p++) {
                family(f, counters[p].name, "counter", counters[p].help);
                for (size_t i = 0; i < n; i++)
                        if (ims[i] && v[i].stats.worker_reported)
                                fprintf(f, "%s{%s} %lld\n", counters[p].name, ims[i]->labels[GW_NAMING_DSVISOR],
                                        (long long)(p == 0 ? v[i].stats.spec_draft_tokens
                                                           : v[i].stats.spec_accepted_tokens));
        }
        const char *name = "dsvisor_spec_decode_acceptance_length";
        family(f, name, "histogram", "Drafts accepted per speculative verification of a sequence.");
        for (size_t i = 0; i < n; i++) {
                const struct dsv_gateway_instance_stats *st = &v[i].stats;
                if (!ims[i] || !st->worker_reported)
                        continue;
                struct dsv_gw_hist h = {.count = (uint64_t)st->spec_verifications,
                                        .sum = (double)st->spec_accepted_tokens};
                for (int b = 0; b < DSV_GATEWAY_SPEC_HIST; b++)
                        h.counts[b] = (uint64_t)st->spec_accepted_hist[b];
                dsv__gw_hist_write(f, name, ims[i]->labels[GW_NAMING_DSVISOR], &h, &len_buckets);
        }
}

/* Per-instance histograms; a name NULL: not exported under that naming. */
static const struct {
        const char *name[GW_NAMING_COUNT], *help;
        size_t off;
        const struct dsv_gw_buckets *b;
} hists[] = {
        {{"dsvisor_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
         "Time from a request's arrival to its last token.", offsetof(struct gw_instance_metrics, e2e), &e2e_buckets},
        {{"dsvisor_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
         "Time from a request's arrival to its first token.", offsetof(struct gw_instance_metrics, ttft), &ttft_buckets},
        {{"dsvisor_inter_token_latency_seconds", "vllm:inter_token_latency_seconds"},
         "Time between consecutive tokens of a request.", offsetof(struct gw_instance_metrics, itl), &itl_buckets},
        /* vLLM's older name of the same, which its published dashboard still queries. */
        {{NULL, "vllm:time_per_output_token_seconds"},
         "Time between consecutive tokens of a request.", offsetof(struct gw_instance_metrics, itl), &itl_buckets},
        {{"dsvisor_request_queue_time_seconds", "vllm:request_queue_time_seconds"},
         "Time a request waited in its worker's queue.", offsetof(struct gw_instance_metrics, queue), &queue_buckets},
        {{"dsvisor_request_prefill_time_seconds", "vllm:request_prefill_time_seconds"},
         "Time the worker spent on a request's prompt (its first step to its first token).",
         offsetof(struct gw_instance_metrics, prefill), &phase_buckets},
        {{"dsvisor_request_decode_time_seconds", "vllm:request_decode_time_seconds"},
         "Time the worker spent generating a request's tokens after the first.",
         offsetof(struct gw_instance_metrics, decode), &phase_buckets},
        {{"dsvisor_request_inference_time_seconds", "vllm:request_inference_time_seconds"},
         "Time a request ran on its worker: prefill plus decode.", offsetof(struct gw_instance_metrics, inference),
         &phase_buckets},
        {{"dsvisor_request_prompt_tokens", "vllm:request_prompt_tokens"}, "Prompt tokens of each finished request.",
         offsetof(struct gw_instance_metrics, prompt_len), &length_buckets},
        {{"dsvisor_request_generation_tokens", "vllm:request_generation_tokens"},
         "Tokens generated for each finished request.", offsetof(struct gw_instance_metrics, generation_len),
         &length_buckets},
};

/* Per-instance single-valued series. */
enum scalar {
        S_PROMPT_TOKENS,
        S_GENERATION_TOKENS,
        S_FAILURES,
        S_RUNNING,
        S_WAITING,
        S_UP,
        /* the worker's own view: only for instances whose stats reply came */
        S_KV_USED,
        S_KV_CAPACITY,
        S_KV_USAGE,
        S_PREEMPTIONS,
        S_PREFIX_HIT_RATIO,
        S_PREFIX_QUERIES,
        S_PREFIX_HITS,
        S_KV_BYTES_PER_TOKEN,
        S_CACHE_CONFIG,
        /* the KV disk tier: only for instances that have one */
        S_PREFIX_RAM_HITS,
        S_PREFIX_DISK_HITS,
        S_KV_DISK_BYTES_USED,
        S_KV_DISK_BYTES_CAPACITY,
        S_KV_DISK_WRITTEN,
        S_KV_DISK_READ,
        S_KV_DISK_DROPPED,
        S_KV_DISK_CORRUPT,
        S_KV_DISK_UP,
        S_COUNT
};
#define S_FIRST_WORKER S_KV_USED
#define S_FIRST_KV_DISK S_PREFIX_RAM_HITS

static const struct {
        const char *name[GW_NAMING_COUNT], *type, *help;
} scalars[S_COUNT] = {
        [S_PROMPT_TOKENS] = {{"dsvisor_prompt_tokens_total", "vllm:prompt_tokens_total"}, "counter", "Prompt tokens processed."},
        [S_GENERATION_TOKENS] = {{"dsvisor_generation_tokens_total", "vllm:generation_tokens_total"}, "counter",
                                 "Tokens generated and received by the gateway."},
        [S_FAILURES] = {{"dsvisor_instance_failures_total", NULL}, "counter",
                        "Requests in flight when the instance's link dropped."},
        [S_RUNNING] = {{"dsvisor_num_requests_running", "vllm:num_requests_running"}, "gauge",
                       "Requests running on the instance."},
        [S_WAITING] = {{"dsvisor_num_requests_waiting", "vllm:num_requests_waiting"}, "gauge",
                       "Requests waiting in the instance's queue."},
        [S_UP] = {{"dsvisor_instance_up", NULL}, "gauge", "1 when the instance is ready, connected and healthy."},
        [S_KV_USED] = {{"dsvisor_kv_blocks_used", NULL}, "gauge", "KV cache blocks in use on the instance."},
        [S_KV_CAPACITY] = {{"dsvisor_kv_blocks_capacity", NULL}, "gauge", "KV cache blocks in the instance's pool."},
        [S_KV_USAGE] = {{"dsvisor_kv_cache_usage_perc", "vllm:kv_cache_usage_perc"}, "gauge",
                        "Share of the instance's KV cache blocks in use (0..1)."},
        [S_PREEMPTIONS] = {{"dsvisor_preemptions_total", "vllm:num_preemptions_total"}, "counter",
                           "Sequences preempted for lack of KV blocks and recomputed later."},
        [S_PREFIX_HIT_RATIO] = {{"dsvisor_prefix_cache_hit_ratio", NULL}, "gauge",
                                "Share of prompt tokens served from shared prefix blocks since the worker started (0..1); "
                                "dashboards: rate of dsvisor_prefix_cache_hits_total over _queries_total."},
        [S_PREFIX_QUERIES] = {{"dsvisor_prefix_cache_queries_total", "vllm:prefix_cache_queries_total"}, "counter",
                              "Prompt tokens looked up in the prefix cache."},
        [S_PREFIX_HITS] = {{"dsvisor_prefix_cache_hits_total", "vllm:prefix_cache_hits_total"}, "counter",
                           "Prompt tokens found in the prefix cache."},
        [S_KV_BYTES_PER_TOKEN] = {{"dsvisor_kv_bytes_per_token", NULL}, "gauge",
                                  "KV cache bytes one position takes over all layers, in the instance's KV type."},
        [S_CACHE_CONFIG] = {{"dsvisor_cache_config_info", "vllm:cache_config_info"}, "gauge",
                            "The instance's KV cache configuration in its labels; the value is 1."},
        [S_PREFIX_RAM_HITS] = {{"dsvisor_prefix_cache_ram_hits_total", NULL}, "counter",
                               "Prompt tokens found in the instance's RAM KV pool."},
        [S_PREFIX_DISK_HITS] = {{"dsvisor_prefix_cache_disk_hits_total", NULL}, "counter",
                                "Prompt tokens read back from the instance's KV disk tier."},
        [S_KV_DISK_BYTES_USED] = {{"dsvisor_kv_disk_bytes_used", NULL}, "gauge",
                                  "Bytes of the instance's KV disk tier file holding blocks."},
        [S_KV_DISK_BYTES_CAPACITY] = {{"dsvisor_kv_disk_bytes_capacity", NULL}, "gauge",
                                      "Bytes of block slots in the instance's KV disk tier file."},
        [S_KV_DISK_WRITTEN] = {{"dsvisor_kv_disk_blocks_written_total", NULL}, "counter",
                               "KV blocks evicted from RAM and written to the disk tier."},
        [S_KV_DISK_READ] = {{"dsvisor_kv_disk_blocks_read_total", NULL}, "counter",
                            "KV blocks read back from the disk tier into the RAM pool."},
        [S_KV_DISK_DROPPED] = {{"dsvisor_kv_disk_blocks_dropped_total", NULL}, "counter",
                               "KV blocks not spilled to the disk tier because its writer's queue was full."},
        [S_KV_DISK_CORRUPT] = {{"dsvisor_kv_disk_blocks_corrupt_total", NULL}, "counter",
                               "Disk tier slots that failed their checksum (dropped, never served)."},
        [S_KV_DISK_UP] = {{"dsvisor_kv_disk_up", NULL}, "gauge",
                          "1 while the instance's KV disk tier works, 0 once an I/O error turned it off."},
};

static double scalar_value(enum scalar k, const struct gw_instance_metrics *im, const struct dsv_gateway_instance_stats *st) {
        switch (k) {
        case S_PROMPT_TOKENS: return (double)im->prompt_tokens;
        case S_GENERATION_TOKENS: return (double)im->generation_tokens;
        case S_FAILURES: return (double)im->failures;
        case S_RUNNING: return st->running;
        case S_WAITING: return st->waiting;
        case S_UP: return st->up;
        case S_KV_USED: return st->kv_blocks_used;
        case S_KV_CAPACITY: return st->kv_blocks_total;
        case S_KV_USAGE: return st->kv_blocks_total > 0 ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;
        case S_PREEMPTIONS: return (double)st->preemptions;
        case S_PREFIX_HIT_RATIO: return st->prefix_hit_rate;
        case S_PREFIX_QUERIES: return (double)st->prefix_query_tokens;
        case S_PREFIX_HITS: return (double)st->prefix_hit_tokens;
        case S_KV_BYTES_PER_TOKEN: return (double)st->kv_bytes_per_token;
        case S_PREFIX_RAM_HITS: return (double)(st->prefix_hit_tokens - st->prefix_disk_hit_tokens);
        case S_PREFIX_DISK_HITS: return (double)st->prefix_disk_hit_tokens;
        case S_KV_DISK_BYTES_USED: return (double)st->kv_disk_bytes_used;
        case S_KV_DISK_BYTES_CAPACITY: return (double)st->kv_disk_bytes_capacity;
        case S_KV_DISK_WRITTEN: return (double)st->kv_disk_blocks_written;
        case S_KV_DISK_READ: return (double)st->kv_disk_blocks_read;
        case S_KV_DISK_DROPPED: return (double)st->kv_disk_blocks_dropped;
        case S_KV_DISK_CORRUPT: return (double)st->kv_disk_blocks_corrupt;
        case S_KV_DISK_UP: return st->kv_disk_failed ? 0 : 1;
        case S_CACHE_CONFIG:
        case S_COUNT: break;
        }
        return 1;
}

/* The per-instance families under one naming. */
static void write_instances_locked(FILE *f, enum gw_naming nm, const struct gw_instance_metrics *const *ims,
                                   const struct gw_instance_sample *v, size_t n) {
        for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
                const char *name = hists[h].name[nm];
                if (!name)
                        continue;
                family(f, name, "histogram", hists[h].help);
                for (size_t i = 0; i < n; i++)
                        if (ims[i])
                                dsv__gw_hist_write(f, name, ims[i]->labels[nm],
                                                   (const struct dsv_gw_hist *)((const char *)ims[i] + hists[h].off),
                                                   hists[h].b);
        }
        /* The worker's steps by tokens carried (vLLM's name keeps its _total). */
        const char *iter = nm == GW_NAMING_VLLM ? "vllm:iteration_tokens_total" : "dsvisor_iteration_tokens";
        family(f, iter, "histogram", "Tokens each engine step of the instance carried (prefill and decode).");
        struct dsv_gw_buckets step_buckets = {.n = DSV_IPC_STEP_TOKEN_BUCKETS};
        memcpy(step_buckets.le, dsv_ipc_step_token_bounds, sizeof dsv_ipc_step_token_bounds);
        for (size_t i = 0; i < n; i++) {
                const struct dsv_gateway_instance_stats *st = &v[i].stats;
                if (!ims[i] || !st->worker_reported)
                        continue;
                struct dsv_gw_hist h = {.count = (uint64_t)st->steps, .sum = (double)st->step_tokens};
                for (int b = 0; b <= DSV_IPC_STEP_TOKEN_BUCKETS; b++)
                        h.counts[b] = (uint64_t)st->step_tokens_buckets[b];
                dsv__gw_hist_write(f, iter, ims[i]->labels[nm], &h, &step_buckets);
        }
        /* vLLM's finished_reason values: stop, length, abort. */
        const char *success = nm == GW_NAMING_VLLM ? "vllm:request_success_total" : "dsvisor_request_success_total";
        family(f, success, "counter", "Requests finished, by the reason they ended.");
        for (size_t i = 0; i < n; i++) {
                if (!ims[i])
                        continue;
                const uint64_t *fin = ims[i]->finished;
                for (int k = 0; k < GW_FINISH_COUNT; k++) {
                        if (nm == GW_NAMING_VLLM && k == GW_FINISH_DEADLINE)
                                continue;
                        uint64_t c = nm == GW_NAMING_VLLM && k == GW_FINISH_CANCELLED
                                             ? fin[GW_FINISH_CANCELLED] + fin[GW_FINISH_DEADLINE]
                                             : fin[k];
                        const char *reason = nm == GW_NAMING_VLLM && k == GW_FINISH_CANCELLED ? "abort" : finish_names[k];
                        fprintf(f, "%s{%s,finished_reason=\"%s\"} %llu\n", success, ims[i]->labels[nm], reason,
                                (unsigned long long)c);
                }
        }
        for (int k = 0; k < S_COUNT; k++) {
                const char *name = scalars[k].name[nm];
                if (!name)
                        continue;
                family(f, name, scalars[k].type, scalars[k].help);
                for (size_t i = 0; i < n; i++) {
                        const struct dsv_gateway_instance_stats *st = &v[i].stats;
                        if (!ims[i] || (k >= S_FIRST_WORKER && !st->worker_reported) ||
                            (k >= S_FIRST_KV_DISK && st->kv_disk_bytes_capacity == 0))
                                continue;
                        if (k == S_CACHE_CONFIG)
                                fprintf(f, "%s{%s,%s=\"%d\"}", name, ims[i]->labels[nm],
                                        nm == GW_NAMING_VLLM ? "num_gpu_blocks" : "num_blocks", st->kv_blocks_total);
                        else
                                fprintf(f, "%s{%s}", name, ims[i]->labels[nm]);
                        value(f, scalar_value(k, ims[i], st));
                }
        }
}

static void write_locked(struct gw_metrics *m, FILE *f, const struct gw_instance_sample *v, size_t n) {
        const struct gw_instance_metrics *ims[DSV_GATEWAY_MAX_INSTANCES];
        for (size_t i = 0; i < n; i++)
                ims[i] = instance_locked(m, v[i].slot, v[i].gen);
        write_instances_locked(f, GW_NAMING_DSVISOR, ims, v, n);
        write_spec_locked(f, v, ims, n);
        if (m->vllm_compat)
                write_instances_locked(f, GW_NAMING_VLLM, ims, v, n);
        family(f, "dsvisor_requests_total", "counter", "HTTP requests to the completion endpoints by status code.");
        for (int i = 0; i < GW_MAX_STATUS && m->status_codes[i]; i++)
                fprintf(f, "dsvisor_requests_total{code=\"%d\"} %llu\n", m->status_codes[i],
                        (unsigned long long)m->status_counts[i]);
        family(f, "dsvisor_request_retries_total", "counter",
               "Requests retried on another instance after theirs failed before answering.");
        fprintf(f, "dsvisor_request_retries_total %llu\n", (unsigned long long)m->retries);
        family(f, "dsvisor_stream_aborts_total", "counter", "Streamed answers that ended with an error event, by reason.");
        for (int i = 0; i < GW_ABORT_COUNT; i++)
                fprintf(f, "dsvisor_stream_aborts_total{reason=\"%s\"} %llu\n", abort_names[i],
                        (unsigned long long)m->stream_aborts[i]);
}

int dsv__gw_metrics_write(struct gw_metrics *m, FILE *f, const struct gw_instance_sample *v, size_t n,
                          const struct gw_server_sample *srv) {
        if (n > DSV_GATEWAY_MAX_INSTANCES)
                return -EINVAL;
        pthread_mutex_lock(&m->lock);
        write_locked(m, f, v, n);
        write_overload_locked(m, f, v, n, srv);
        pthread_mutex_unlock(&m->lock);
        return ferror(f) ? -EIO : 0;
}
