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

static const struct dsv_gw_buckets e2e_buckets = {
        19, {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}};
static const struct dsv_gw_buckets ttft_buckets = {
        22, {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}};
static const struct dsv_gw_buckets itl_buckets = {
        21, {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40}};
static const struct dsv_gw_buckets queue_buckets = {
        16, {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}};

int dsv__gw_metrics_init(struct gw_metrics *m) {
        memset(m, 0, sizeof *m);
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
        snprintf(im->labels, sizeof im->labels, "instance=\"%s\",numa_node=\"%d\"", escaped, numa_node);
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

void dsv__gw_metrics_complete(struct gw_metrics *m, int slot, uint64_t gen, double e2e_s, double queue_s,
                              int32_t prompt_tokens) {
        pthread_mutex_lock(&m->lock);
        struct gw_instance_metrics *im = instance_locked(m, slot, gen);
        if (im) {
                dsv__gw_hist_observe(&im->e2e, &e2e_buckets, e2e_s);
                dsv__gw_hist_observe(&im->queue, &queue_buckets, queue_s);
                if (prompt_tokens > 0)
                        im->prompt_tokens += (uint64_t)prompt_tokens;
        }
        pthread_mutex_unlock(&m->lock);
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

struct family {
        const char *name, *type, *help;
};

static void family(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
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
 * that does not speculate reports zeros). The acceptance length is the number of drafts a
 * verification accepted: one bucket per length, _sum the accepted drafts, _count the
 * verifications. */
static void write_spec_locked(FILE *f, const struct gw_instance_sample *v,
                              const struct gw_instance_metrics *const *ims, size_t n) {
        static const struct dsv_gw_buckets len_buckets = {DSV_GATEWAY_SPEC_HIST, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
        _Static_assert(DSV_GATEWAY_SPEC_HIST == 9, "one bucket per acceptance length");
        static const struct family counters[] = {
                {"dsvisor_spec_decode_draft_tokens_total", "counter", "Draft tokens verified by speculative decoding."},
                {"dsvisor_spec_decode_accepted_tokens_total", "counter",
                 "Draft tokens accepted (emitted as verified) by speculative decoding."},
        };
        for (size_t p = 0; p < 2; p++) {
                family(f, counters[p].name, counters[p].type, counters[p].help);
                for (size_t i = 0; i < n; i++)
                        if (ims[i] && v[i].stats.worker_reported)
                                fprintf(f, "%s{%s} %lld\n", counters[p].name, ims[i]->labels,
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
                dsv__gw_hist_write(f, name, ims[i]->labels, &h, &len_buckets);
        }
}

static void write_locked(struct gw_metrics *m, FILE *f, const struct gw_instance_sample *v, size_t n) {
        const struct gw_instance_metrics *ims[DSV_GATEWAY_MAX_INSTANCES];
        for (size_t i = 0; i < n; i++)
                ims[i] = instance_locked(m, v[i].slot, v[i].gen);
        static const struct {
                const char *name, *help;
                size_t off;
                const struct dsv_gw_buckets *b;
        } hists[] = {
                {"dsvisor_e2e_request_latency_seconds", "Time from a request's arrival to its last token.",
                 offsetof(struct gw_instance_metrics, e2e), &e2e_buckets},
                {"dsvisor_time_to_first_token_seconds", "Time from a request's arrival to its first token.",
                 offsetof(struct gw_instance_metrics, ttft), &ttft_buckets},
                {"dsvisor_inter_token_latency_seconds", "Time between consecutive tokens of a request.",
                 offsetof(struct gw_instance_metrics, itl), &itl_buckets},
                {"dsvisor_request_queue_time_seconds", "Time a request waited in its worker's queue.",
                 offsetof(struct gw_instance_metrics, queue), &queue_buckets},
        };
        for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
                family(f, hists[h].name, "histogram", hists[h].help);
                for (size_t i = 0; i < n; i++)
                        if (ims[i])
                                dsv__gw_hist_write(f, hists[h].name, ims[i]->labels,
                                                   (const struct dsv_gw_hist *)((const char *)ims[i] + hists[h].off),
                                                   hists[h].b);
        }
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
        static const struct family per[] = {
                {"dsvisor_prompt_tokens_total", "counter", "Prompt tokens processed."},
                {"dsvisor_generation_tokens_total", "counter", "Tokens generated and received by the gateway."},
                {"dsvisor_instance_failures_total", "counter", "Requests in flight when the instance's link dropped."},
                {"dsvisor_num_requests_running", "gauge", "Requests running on the instance."},
                {"dsvisor_num_requests_waiting", "gauge", "Requests waiting in the instance's queue."},
                {"dsvisor_instance_up", "gauge", "1 when the instance is ready, connected and healthy."},
        };
        for (size_t p = 0; p < sizeof per / sizeof per[0]; p++) {
                family(f, per[p].name, per[p].type, per[p].help);
                for (size_t i = 0; i < n; i++) {
                        const struct gw_instance_metrics *im = ims[i];
                        const struct dsv_gateway_instance_stats *st = &v[i].stats;
                        if (!im)
                                continue;
                        uint64_t val = p == 0 ? im->prompt_tokens
                                     : p == 1 ? im->generation_tokens
                                     : p == 2 ? im->failures
                                     : p == 3 ? st->running
                                     : p == 4 ? st->waiting
                                              : (uint64_t)st->up;
                        fprintf(f, "%s{%s} %llu\n", per[p].name, im->labels, (unsigned long long)val);
                }
        }
        /* What the workers report about themselves (only instances whose own view is
         * known). */
        static const struct family worker[] = {
                {"dsvisor_kv_blocks_used", "gauge", "KV cache blocks in use on the instance."},
                {"dsvisor_kv_blocks_capacity", "gauge", "KV cache blocks in the instance's pool."},
                {"dsvisor_preemptions_total", "counter", "Sequences preempted for lack of KV blocks and recomputed later."},
                {"dsvisor_prefix_cache_hit_ratio", "gauge", "Share of prompt tokens served from shared prefix blocks (0..1)."},
                {"dsvisor_kv_bytes_per_token", "gauge", "KV cache bytes one position takes over all layers, in the instance's KV type."},
        };
        for (size_t p = 0; p < sizeof worker / sizeof worker[0]; p++) {
                family(f, worker[p].name, worker[p].type, worker[p].help);
                for (size_t i = 0; i < n; i++) {
                        const struct dsv_gateway_instance_stats *st = &v[i].stats;
                        if (!ims[i] || !st->worker_reported)
                                continue;
                        if (p == 3)
                                fprintf(f, "%s{%s} %.6g\n", worker[p].name, ims[i]->labels, st->prefix_hit_rate);
                        else
                                fprintf(f, "%s{%s} %lld\n", worker[p].name, ims[i]->labels,
                                        (long long)(p == 0 ? st->kv_blocks_used
                                                    : p == 1 ? st->kv_blocks_total
                                                    : p == 2 ? st->preemptions
                                                             : st->kv_bytes_per_token));
                }
        }
        write_spec_locked(f, v, ims, n);
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
