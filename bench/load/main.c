/* dsvisor-bench-load — open- and closed-loop load against dsvisor's OpenAI-compatible
 * HTTP API. One thread drives libcurl's multi interface.
 *
 *     dsvisor-bench-load --url http://127.0.0.1:8080 (--qps Q | --concurrency C)
 *         (--duration S | --requests N) [--stream] [--max-tokens N | --output-len DIST]
 *         [--prompt-len DIST] [--model M] [--api completions|chat] [--seed N]
 *         [--timeout S] [--drain S] [--max-inflight N] [--api-key K] [--json] [--progress]
 *         [--allow-remote]
 *
 * Open loop (--qps): arrivals follow a Poisson process from the seeded RNG, scheduled in
 * advance; a request's latency counts from its scheduled arrival, so a slow server cannot
 * hide its queueing by slowing the sender down ("coordinated omission"). Closed loop
 * (--concurrency): C requests always in flight. DIST is "N", "uniform:A:B" or
 * "exp:MEAN[:MAX]"; prompt lengths are in words, output lengths in tokens (max_tokens).
 *
 * Every request ends as exactly one of: completed (a whole answer; for a stream, data:
 * [DONE] without an error event), error (an explicit one: an HTTP error status, or an
 * error event in the stream) or lost (anything else: a transport failure, a timeout, a
 * stream cut before [DONE], an answer that does not parse, or still running when the
 * drain time ran out). So sent == completed + errors + lost. Refusals (429 and 503) are
 * errors, counted apart as well, with those that came without Retry-After.
 *
 * Latency, TTFT and inter-token latency (streams: time between successive chunks that
 * carry text) go into log-linear histograms (hist.h, relative error 0.39%); jitter is the
 * standard deviation of the request latency. --json also gives the latency histogram's
 * nonempty buckets (latency_buckets_ns: [lo, width, count]) with min_s and max_s, so the
 * runs of one configuration can be pooled (bench/overload.sh --slices). Exit status: 0
 * when the run was carried out (whatever the errors), 1 when it could not start, 2 on
 * bad usage. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "load.h"
#include "sse.h"

#define MAX_BODY_BYTES (4u << 20)
#define NS LOAD_NS

struct req {
        struct req *prev, *next; /* the driver's list of transfers in flight */
        CURL *easy;
        struct load_stats *st;
        char *body;
        int64_t sched_ns, first_ns, last_tok_ns, now_ns;
        long status;
        int stream, got_done, got_error, got_tokens, bad, got_retry_after;
        long usage_tokens, chunks_with_text;
        char err_code[64];
        struct load_sse sse;
        char *resp;
        size_t resp_len;
};

/* ---- answers ---- */

static int on_event(void *user, const char *data, size_t len) {
        struct req *q = user;
        struct load_answer a;
        if (load_answer_classify(data, len, &a) < 0) {
                q->bad = 1;
                return -EBADMSG;
        }
        if (q->got_done) /* nothing may follow [DONE] */
                q->bad = 1;
        switch (a.kind) {
        case LOAD_ANSWER_DONE:
                q->got_done = 1;
                break;
        case LOAD_ANSWER_ERROR:
                q->got_error = 1;
                snprintf(q->err_code, sizeof q->err_code, "%s", a.error_code);
                break;
        case LOAD_ANSWER_CHUNK:
                if (a.completion_tokens >= 0)
                        q->usage_tokens = a.completion_tokens;
                if (!a.has_text)
                        break;
                q->chunks_with_text++;
                if (!q->got_tokens) {
                        q->got_tokens = 1;
                        q->first_ns = q->now_ns;
                        load_hist_record(&q->st->ttft, (uint64_t)(q->now_ns - q->sched_ns));
                } else {
                        load_hist_record(&q->st->itl, (uint64_t)(q->now_ns - q->last_tok_ns));
                }
                q->last_tok_ns = q->now_ns;
                break;
        default:
                break;
        }
        return 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *user) {
        struct req *q = user;
        size_t n = size * nmemb;
        if (!q->status)
                curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &q->status);
        q->now_ns = load_now_ns();
        if (q->stream && q->status == 200) {
                if (!q->bad && load_sse_feed(&q->sse, ptr, n, on_event, q) < 0)
                        q->bad = 1;
                return n;
        }
        if (q->resp_len + n > MAX_BODY_BYTES) {
                q->bad = 1;
                return n;
        }
        char *b = realloc(q->resp, q->resp_len + n + 1);
        if (!b)
                return 0; /* curl fails the transfer: counted as lost */
        memcpy(b + q->resp_len, ptr, n);
        q->resp = b;
        q->resp_len += n;
        b[q->resp_len] = 0;
        return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *user) {
        struct req *q = user;
        size_t n = size * nmemb;
        static const char name[] = "retry-after:";
        if (n >= sizeof name - 1 && !strncasecmp(ptr, name, sizeof name - 1))
                q->got_retry_after = 1;
        return n;
}

static void req_free(struct req *q) {
        if (!q)
                return;
        load_sse_done(&q->sse);
        free(q->body);
        free(q->resp);
        free(q);
}

/* Decides how a finished transfer ended (see the header comment) and records it. */
static void req_finish(struct req *q, CURLcode rc, int64_t end_ns) {
        struct load_stats *st = q->st;
        unsigned long tokens = 0;
        char kind[96];
        if (q->got_error) {
                snprintf(kind, sizeof kind, "stream_error:%s", q->err_code);
                load_stats_error(st, q->got_tokens, kind);
                return;
        }
        if (rc != CURLE_OK) {
                snprintf(kind, sizeof kind, rc == CURLE_OPERATION_TIMEDOUT ? "timeout" : "transport:%s",
                         curl_easy_strerror(rc));
                load_stats_lost(st, kind);
                return;
        }
        if (!q->status)
                curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &q->status);
        if (q->status != 200) {
                struct load_answer a;
                if (q->status >= 400 && q->resp &&
                    load_answer_classify(q->resp, q->resp_len, &a) == 0 && a.kind == LOAD_ANSWER_ERROR)
                        snprintf(kind, sizeof kind, "http_%ld:%s", q->status, a.error_code);
                else
                        snprintf(kind, sizeof kind, "http_%ld", q->status);
                if (q->status == 429 || q->status == 503) {
                        *(q->status == 429 ? &st->rejected_429 : &st->rejected_503) += 1;
                        st->rejected_without_retry_after += !q->got_retry_after;
                }
                if (q->status >= 400)
                        load_stats_error(st, q->got_tokens, kind);
                else
                        load_stats_lost(st, kind);
                return;
        }
        if (q->stream) {
                if (q->bad) {
                        load_stats_lost(st, "bad_stream");
                        return;
                }
                if (!q->got_done) {
                        load_stats_lost(st, "stream_cut");
                        return;
                }
                tokens = (unsigned long)(q->usage_tokens >= 0 ? q->usage_tokens : q->chunks_with_text);
        } else {
                struct load_answer a;
                if (q->bad || !q->resp || load_answer_classify(q->resp, q->resp_len, &a) < 0) {
                        load_stats_lost(st, "bad_body");
                        return;
                }
                if (a.kind == LOAD_ANSWER_ERROR) {
                        snprintf(kind, sizeof kind, "body_error:%s", a.error_code);
                        load_stats_error(st, q->got_tokens, kind);
                        return;
                }
                if (a.kind != LOAD_ANSWER_CHUNK || !a.finished) {
                        load_stats_lost(st, "unfinished_body");
                        return;
                }
                if (a.completion_tokens > 0)
                        tokens = (unsigned long)a.completion_tokens;
        }
        load_stats_completed(st, end_ns - q->sched_ns, tokens);
}

/* ---- requests ---- */

struct driver {
        const struct load_opts *o;
        CURLM *multi;
        struct curl_slist *headers;
        char endpoint[2048];
        CURLU *endpoint_url; /* endpoint, parsed once for every request */
        struct load_rng len_rng;
        struct load_stats *st;
        unsigned inflight;
        struct req *running; /* list head */
        char *prompt;
        char *model_json; /* o->model as a JSON string */
        /* Easy handles done with, for the next requests: a new handle per request costs
         * the sender more than the request itself when the server refuses it at once. */
        CURL **idle;
        size_t n_idle, idle_cap;
};

static CURL *easy_take(struct driver *d) {
        return d->n_idle ? d->idle[--d->n_idle] : curl_easy_init();
}

/* Keeps e for a later request (every option is set again then), or frees it. */
static void easy_park(struct driver *d, CURL *e) {
        if (!e)
                return;
        if (d->n_idle == d->idle_cap) {
                size_t cap = d->idle_cap ? 2 * d->idle_cap : 64;
                CURL **v = realloc(d->idle, cap * sizeof *v);
                if (!v) {
                        curl_easy_cleanup(e);
                        return;
                }
                d->idle = v;
                d->idle_cap = cap;
        }
        d->idle[d->n_idle++] = e;
}

/* Frees q, keeping its easy handle (out of the multi handle) for the next request. */
static void req_done(struct driver *d, struct req *q) {
        easy_park(d, q->easy);
        req_free(q);
}

static void list_add(struct driver *d, struct req *q) {
        q->next = d->running;
        if (q->next)
                q->next->prev = q;
        d->running = q;
        d->inflight++;
}

static void list_del(struct driver *d, struct req *q) {
        if (q->prev)
                q->prev->next = q->next;
        else
                d->running = q->next;
        if (q->next)
                q->next->prev = q->prev;
        d->inflight--;
}

/* The request body, laid out as cJSON_PrintUnformatted lays out the same object, written
 * with one snprintf: the model name comes quoted and escaped from d->model_json (made once
 * per run), and the prompt needs no escaping (load_prompt_fill writes lowercase words and
 * spaces only). A malloc'd string, NULL when out of memory. */
static char *body_new(struct driver *d) {
        unsigned max_tokens = load_request_draw(d->o, &d->len_rng, d->prompt);
        const char *stream = d->o->stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "";
        size_t size = strlen(d->model_json) + strlen(d->prompt) + strlen(stream) + 96;
        char *s = malloc(size);
        if (!s)
                return NULL;
        if (!strcmp(d->o->api, "chat"))
                snprintf(s, size, "{\"model\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%u%s}",
                         d->model_json, d->prompt, max_tokens, stream);
        else
                snprintf(s, size, "{\"model\":%s,\"prompt\":\"%s\",\"max_tokens\":%u%s}", d->model_json, d->prompt,
                         max_tokens, stream);
        return s;
}

static int req_start(struct driver *d, int64_t sched_ns) {
        struct req *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->st = d->st;
        q->sched_ns = sched_ns;
        q->stream = d->o->stream;
        q->usage_tokens = -1;
        load_sse_init(&q->sse);
        q->body = body_new(d);
        q->easy = easy_take(d);
        if (!q->body || !q->easy) {
                req_done(d, q);
                return -ENOMEM;
        }
        CURL *e = q->easy;
        curl_easy_setopt(e, CURLOPT_CURLU, d->endpoint_url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, d->headers);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(q->body));
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, q);
        curl_easy_setopt(e, CURLOPT_PRIVATE, q);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(d->o->timeout_s * 1000));
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(e, CURLOPT_PROXY, ""); /* loopback benchmarks never go through a proxy */
        if (curl_multi_add_handle(d->multi, e) != CURLM_OK) {
                req_done(d, q);
                return -ENOMEM;
        }
        d->st->sent++;
        list_add(d, q);
        return 0;
}

static void reap(struct driver *d) {
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(d->multi, &left))) {
                if (m->msg != CURLMSG_DONE)
                        continue;
                struct req *q;
                curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
                CURLcode rc = m->data.result;
                curl_multi_remove_handle(d->multi, m->easy_handle);
                req_finish(q, rc, load_now_ns());
                list_del(d, q);
                req_done(d, q);
        }
}

/* Ends every transfer still running: each counts as lost. */
static void abandon_all(struct driver *d) {
        while (d->running) {
                struct req *q = d->running;
                curl_multi_remove_handle(d->multi, q->easy);
                load_stats_lost(d->st, "drain_timeout");
                list_del(d, q);
                req_done(d, q);
        }
}

static int run(struct driver *d, int64_t *ret_t0, int64_t *ret_t1) {
        struct load_pace p;
        if (load_pace_start(&p, d->o, d->st) < 0)
                return -ENOMEM;
        for (;;) {
                int64_t at;
                while ((at = load_pace_due(&p, load_now_ns(), d->inflight)) >= 0 && req_start(d, at) == 0)
                        load_pace_sent(&p);
                int running;
                curl_multi_perform(d->multi, &running);
                reap(d);
                int64_t now = load_now_ns();
                enum load_pace_state state = load_pace_check(&p, now, d->inflight);
                if (state == LOAD_PACE_DRAIN_TIMEOUT)
                        abandon_all(d);
                if (state == LOAD_PACE_DONE || state == LOAD_PACE_DRAIN_TIMEOUT)
                        break;
                curl_multi_poll(d->multi, NULL, 0, load_pace_wait_ms(&p, now), NULL);
        }
        load_pace_finish(&p, d->inflight, ret_t0, ret_t1);
        return 0;
}

/* ---- report ---- */

static void add_quantile(cJSON *o, const char *key, const struct load_hist *h, double q) {
        if (h->count)
                cJSON_AddNumberToObject(o, key, (double)load_hist_quantile(h, q) / NS);
        else
                cJSON_AddNullToObject(o, key);
}

/* The histogram's nonempty buckets as [lo, width, count] (nanoseconds), so runs can be
 * pooled: with min_s and max_s, a merged quantile is load_hist_quantile's over the merge. */
static void add_buckets(cJSON *o, const char *key, const struct load_hist *h) {
        cJSON *a = cJSON_AddArrayToObject(o, key);
        for (unsigned i = 0; a && i < LOAD_HIST_BUCKETS; i++) {
                if (!h->buckets[i])
                        continue;
                const double b[3] = {(double)load_hist_bucket_lo(i), (double)load_hist_bucket_width(i),
                                     (double)h->buckets[i]};
                cJSON_AddItemToArray(a, cJSON_CreateDoubleArray(b, 3));
        }
}

static void add_kinds(cJSON *o, const char *key, const struct load_kind_count *k) {
        cJSON *m = cJSON_AddObjectToObject(o, key);
        for (int i = 0; i < LOAD_MAX_KINDS && k[i].n; i++)
                cJSON_AddNumberToObject(m, k[i].name, (double)k[i].n);
}

static void report_json(const struct load_opts *o, const struct load_stats *st, double elapsed_s) {
        char buf[64];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "mode", o->qps > 0 ? "open" : "closed");
        cJSON_AddNumberToObject(j, "target_qps", o->qps);
        cJSON_AddNumberToObject(j, "concurrency", o->concurrency);
        cJSON_AddBoolToObject(j, "stream", o->stream);
        cJSON_AddStringToObject(j, "prompt_len", load_dist_to_string(&o->prompt_len, buf, sizeof buf));
        cJSON_AddStringToObject(j, "output_len", load_dist_to_string(&o->output_len, buf, sizeof buf));
        cJSON_AddNumberToObject(j, "seed", (double)o->seed);
        cJSON_AddNumberToObject(j, "elapsed_s", elapsed_s);
        cJSON_AddNumberToObject(j, "sent", (double)st->sent);
        cJSON_AddNumberToObject(j, "completed", (double)st->completed);
        cJSON_AddNumberToObject(j, "errors", (double)st->errors);
        cJSON_AddNumberToObject(j, "lost", (double)st->lost);
        cJSON_AddNumberToObject(j, "errors_after_first_token", (double)st->errors_after_first_token);
        cJSON_AddNumberToObject(j, "rejected_429", (double)st->rejected_429);
        cJSON_AddNumberToObject(j, "rejected_503", (double)st->rejected_503);
        cJSON_AddNumberToObject(j, "rejected_without_retry_after", (double)st->rejected_without_retry_after);
        cJSON_AddNumberToObject(j, "qps", elapsed_s > 0 ? (double)st->completed / elapsed_s : 0);
        cJSON_AddNumberToObject(j, "output_tokens", (double)st->output_tokens);
        cJSON_AddNumberToObject(j, "tokens_per_s", elapsed_s > 0 ? (double)st->output_tokens / elapsed_s : 0);
        if (st->latency.count)
                cJSON_AddNumberToObject(j, "mean_s", load_hist_mean(&st->latency) / NS);
        else
                cJSON_AddNullToObject(j, "mean_s");
        add_quantile(j, "p50_s", &st->latency, 0.5);
        add_quantile(j, "p90_s", &st->latency, 0.9);
        add_quantile(j, "p99_s", &st->latency, 0.99);
        add_quantile(j, "p999_s", &st->latency, 0.999);
        add_quantile(j, "max_s", &st->latency, 1);
        cJSON_AddNumberToObject(j, "jitter_s", load_hist_stddev(&st->latency) / NS);
        add_quantile(j, "min_s", &st->latency, 0);
        add_buckets(j, "latency_buckets_ns", &st->latency);
        add_quantile(j, "ttft_p50_s", &st->ttft, 0.5);
        add_quantile(j, "ttft_p90_s", &st->ttft, 0.9);
        add_quantile(j, "ttft_p99_s", &st->ttft, 0.99);
        add_quantile(j, "ttft_p999_s", &st->ttft, 0.999);
        add_quantile(j, "itl_p50_s", &st->itl, 0.5);
        add_quantile(j, "itl_p90_s", &st->itl, 0.9);
        add_quantile(j, "itl_p99_s", &st->itl, 0.99);
        add_quantile(j, "itl_p999_s", &st->itl, 0.999);
        cJSON_AddNumberToObject(j, "itl_jitter_s", load_hist_stddev(&st->itl) / NS);
        cJSON_AddNumberToObject(j, "itl_samples", (double)st->itl.count);
        add_kinds(j, "errors_by_kind", st->errs);
        add_kinds(j, "lost_by_kind", st->losts);
        char *s = cJSON_Print(j);
        if (s)
                puts(s);
        free(s);
        cJSON_Delete(j);
}

static void table_row(const char *name, const struct load_hist *h) {
        if (!h->count) {
                printf("%-12s %10s\n", name, "-");
                return;
        }
        printf("%-12s %10.4f %10.4f %10.4f %10.4f %10.4f %10.4f %10.4f %9llu\n", name,
               load_hist_mean(h) / NS, (double)load_hist_quantile(h, 0.5) / NS,
               (double)load_hist_quantile(h, 0.9) / NS, (double)load_hist_quantile(h, 0.99) / NS,
               (double)load_hist_quantile(h, 0.999) / NS, (double)h->max / NS, load_hist_stddev(h) / NS,
               (unsigned long long)h->count);
}

static void report_table(const struct load_opts *o, const struct load_stats *st, const char *endpoint,
                         double elapsed_s) {
        char p[64], q[64];
        if (o->qps > 0)
                printf("open loop, Poisson arrivals at %.2f QPS", o->qps);
        else
                printf("closed loop, %u in flight", o->concurrency);
        printf(", %s, prompt %s words, output %s tokens, seed %llu\n", o->stream ? "streamed" : "not streamed",
               load_dist_to_string(&o->prompt_len, p, sizeof p), load_dist_to_string(&o->output_len, q, sizeof q),
               (unsigned long long)o->seed);
        printf("%s  model %s  elapsed %.2f s\n\n", endpoint, o->model, elapsed_s);
        printf("sent %lu  completed %lu  errors %lu (%lu after the first token)  lost %lu\n", st->sent,
               st->completed, st->errors, st->errors_after_first_token, st->lost);
        if (st->rejected_429 || st->rejected_503)
                printf("rejected: 429 %lu  503 %lu  (%lu without Retry-After)\n", st->rejected_429, st->rejected_503,
                       st->rejected_without_retry_after);
        printf("achieved %.2f QPS, %lu output tokens (%.1f tok/s)\n\n", elapsed_s > 0 ? st->completed / elapsed_s : 0,
               st->output_tokens, elapsed_s > 0 ? st->output_tokens / elapsed_s : 0);
        printf("%-12s %10s %10s %10s %10s %10s %10s %10s %9s\n", "seconds", "mean", "p50", "p90", "p99", "p99.9",
               "max", "stddev", "samples");
        table_row("latency", &st->latency);
        table_row("ttft", &st->ttft);
        table_row("itl", &st->itl);
        for (int pass = 0; pass < 2; pass++) {
                const struct load_kind_count *k = pass ? st->losts : st->errs;
                if (!k[0].n)
                        continue;
                printf("\n%s by kind:\n", pass ? "lost" : "errors");
                for (int i = 0; i < LOAD_MAX_KINDS && k[i].n; i++)
                        printf("  %-40s %lu\n", k[i].name, k[i].n);
        }
}

/* ---- setup ---- */

static size_t collect(char *ptr, size_t size, size_t nmemb, void *user) {
        char **buf = user;
        size_t old = *buf ? strlen(*buf) : 0, n = size * nmemb;
        if (old + n > MAX_BODY_BYTES)
                return 0;
        char *b = realloc(*buf, old + n + 1);
        if (!b)
                return 0;
        memcpy(b + old, ptr, n);
        b[old + n] = 0;
        *buf = b;
        return n;
}

/* The first model GET /v1/models lists, into buf. */
static int model_discover(const char *base, struct curl_slist *headers, char *buf, size_t size) {
        char url[2100], *body = NULL;
        snprintf(url, sizeof url, "%s/v1/models", base);
        CURL *e = curl_easy_init();
        if (!e)
                return -ENOMEM;
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        CURLcode rc = curl_easy_perform(e);
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(e);
        int r = rc != CURLE_OK ? -ECONNREFUSED : status != 200 ? -EPROTO : -EBADMSG;
        if (rc == CURLE_OK && status == 200 && body) {
                cJSON *j = cJSON_Parse(body);
                const char *id = cJSON_GetStringValue(
                        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0), "id"));
                if (id)
                        r = snprintf(buf, size, "%s", id) < (int)size ? 0 : -ENAMETOOLONG;
                cJSON_Delete(j);
        }
        free(body);
        return r;
}

/* Splits --url into the base (scheme://host:port) and the endpoint; a URL without a path
 * gets the API's standard one. Refuses hosts other than loopback unless allowed. */
static int url_resolve(const struct load_opts *o, char *base, size_t base_size, char *endpoint, size_t ep_size) {
        const char *u = o->url, *hs = strstr(u, "://");
        if (!hs || strncmp(u, "http", 4) != 0 || strlen(u) >= base_size)
                return -EINVAL;
        hs += 3;
        const char *path = strchr(hs, '/');
        size_t blen = path ? (size_t)(path - u) : strlen(u);
        memcpy(base, u, blen);
        base[blen] = 0;
        char host[256];
        size_t hl = path ? (size_t)(path - hs) : strlen(hs);
        if (hl >= sizeof host)
                return -EINVAL;
        memcpy(host, hs, hl);
        host[hl] = 0;
        char *at = strrchr(host, '@');
        char *h = at ? at + 1 : host;
        if (*h == '[') {
                char *rb = strchr(h, ']');
                if (rb)
                        rb[1] = 0;
        } else if (strchr(h, ':')) {
                *strchr(h, ':') = 0;
        }
        if (!o->allow_remote && strcmp(h, "127.0.0.1") && strcmp(h, "localhost") && strcmp(h, "[::1]"))
                return -EPERM;
        int n;
        if (!path || !strcmp(path, "/"))
                n = snprintf(endpoint, ep_size, "%s%s", base,
                             !strcmp(o->api, "chat") ? "/v1/chat/completions" : "/v1/completions");
        else
                n = snprintf(endpoint, ep_size, "%s", u);
        return n < 0 || (size_t)n >= ep_size ? -EINVAL : 0;
}

static void usage(FILE *f) {
        fputs("usage: dsvisor-bench-load --url http://127.0.0.1:PORT (--qps Q | --concurrency C)\n"
              "           (--duration S | --requests N) [--stream] [--max-tokens N | --output-len DIST]\n"
              "           [--prompt-len DIST] [--model M] [--api completions|chat] [--seed N]\n"
              "           [--timeout S] [--drain S] [--max-inflight N] [--api-key K] [--json] [--progress]\n"
              "           [--allow-remote]\n"
              "DIST: N | uniform:A:B | exp:MEAN[:MAX]  (prompt: words, default uniform:8:32;\n"
              "      output: tokens, default 16). Defaults: --timeout 60 --drain 30 --max-inflight 1024 --seed 1\n",
              f);
}

static int parse_double(const char *s, double *ret) {
        char *e;
        errno = 0;
        double v = strtod(s, &e);
        if (e == s || *e || errno || !(v >= 0) || isinf(v))
                return -EINVAL;
        *ret = v;
        return 0;
}

static int parse_opts(int argc, char **argv, struct load_opts *o) {
        *o = (struct load_opts){.api = "completions", .timeout_s = 60, .drain_s = 30, .max_inflight = 1024, .seed = 1};
        load_dist_parse("uniform:8:32", &o->prompt_len);
        load_dist_parse("16", &o->output_len);
        for (int i = 1; i < argc; i++) {
                const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                double x;
                int used = 1;
                if (!strcmp(k, "--stream"))
                        o->stream = 1, used = 0;
                else if (!strcmp(k, "--json"))
                        o->json = 1, used = 0;
                else if (!strcmp(k, "--progress"))
                        o->progress = 1, used = 0;
                else if (!strcmp(k, "--allow-remote"))
                        o->allow_remote = 1, used = 0;
                else if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
                        usage(stdout);
                        exit(0);
                } else if (!v)
                        return -EINVAL;
                else if (!strcmp(k, "--url"))
                        o->url = v;
                else if (!strcmp(k, "--model"))
                        o->model = v;
                else if (!strcmp(k, "--api-key"))
                        o->api_key = v;
                else if (!strcmp(k, "--api")) {
                        if (strcmp(v, "chat") && strcmp(v, "completions"))
                                return -EINVAL;
                        o->api = v;
                } else if (!strcmp(k, "--prompt-len")) {
                        if (load_dist_parse(v, &o->prompt_len) < 0)
                                return -EINVAL;
                } else if (!strcmp(k, "--output-len") || !strcmp(k, "--max-tokens")) {
                        if (load_dist_parse(v, &o->output_len) < 0 ||
                            (!strcmp(k, "--max-tokens") && o->output_len.kind != LOAD_DIST_FIXED))
                                return -EINVAL;
                } else if (parse_double(v, &x) < 0)
                        return -EINVAL;
                else if (!strcmp(k, "--qps"))
                        o->qps = x;
                else if (!strcmp(k, "--duration"))
                        o->duration_s = x;
                else if (!strcmp(k, "--timeout"))
                        o->timeout_s = x;
                else if (!strcmp(k, "--drain"))
                        o->drain_s = x;
                else if (!strcmp(k, "--concurrency") && x >= 1 && x <= 100000 && x == floor(x))
                        o->concurrency = (unsigned)x;
                else if (!strcmp(k, "--max-inflight") && x >= 1 && x <= 100000 && x == floor(x))
                        o->max_inflight = (unsigned)x;
                else if (!strcmp(k, "--requests") && x >= 1 && x == floor(x))
                        o->requests = (unsigned long)x;
                else if (!strcmp(k, "--seed") && x == floor(x) && x < 1.8e19)
                        o->seed = (uint64_t)x;
                else
                        return -EINVAL;
                i += used;
        }
        if (!o->url || (o->qps > 0) == (o->concurrency > 0) || (o->duration_s <= 0 && !o->requests) ||
            o->timeout_s <= 0)
                return -EINVAL;
        return 0;
}

/* The HTTP driver: resolves the URL and the model, then runs the load. Returns 0, 2 for a
 * bad --url, 1 when it cannot start; the endpoint used goes to endpoint, and a model read
 * from /v1/models to model (o->model then points there). */
static int run_http(struct load_opts *o, struct load_stats *st, char *endpoint, size_t ep_size, char *model,
                    size_t model_size, int64_t *ret_t0, int64_t *ret_t1) {
        char base[2048], auth[600];
        struct driver d = {.o = o, .st = st};
        int r = url_resolve(o, base, sizeof base, d.endpoint, sizeof d.endpoint);
        if (r == -EPERM) {
                fprintf(stderr, "<3>refusing to load a non-loopback host '%s' without --allow-remote\n", o->url);
                return 2;
        }
        if (r < 0) {
                fprintf(stderr, "<3>bad --url '%s': expected http://HOST:PORT[/PATH] or ipc://PATH\n", o->url);
                return 2;
        }
        snprintf(endpoint, ep_size, "%s", d.endpoint);
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "<3>curl_global_init failed\n");
                return 1;
        }
        d.headers = curl_slist_append(NULL, "Content-Type: application/json");
        d.headers = curl_slist_append(d.headers, "Expect:"); /* no 100-continue round trip */
        if (o->api_key) {
                snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
                d.headers = curl_slist_append(d.headers, auth);
        }
        d.multi = curl_multi_init();
        d.prompt = malloc(LOAD_MAX_PROMPT_BYTES);
        if (!d.multi || !d.prompt || !d.headers) {
                fprintf(stderr, "<3>out of memory\n");
                r = 1;
                goto out;
        }
        if (!o->model) {
                r = model_discover(base, d.headers, model, model_size);
                if (r < 0) {
                        fprintf(stderr, "<3>cannot read the model from '%s/v1/models': %s\n", base, strerror(-r));
                        r = 1;
                        goto out;
                }
                o->model = model;
        }
        cJSON *model_str = cJSON_CreateString(o->model);
        d.model_json = model_str ? cJSON_PrintUnformatted(model_str) : NULL;
        cJSON_Delete(model_str);
        if (!d.model_json) {
                fprintf(stderr, "<3>out of memory\n");
                r = 1;
                goto out;
        }
        d.endpoint_url = curl_url();
        CURLUcode uc = d.endpoint_url ? curl_url_set(d.endpoint_url, CURLUPART_URL, d.endpoint, 0) : CURLUE_OUT_OF_MEMORY;
        if (uc != CURLUE_OK) {
                fprintf(stderr, "<3>bad --url '%s': %s\n", o->url, curl_url_strerror(uc));
                r = uc == CURLUE_OUT_OF_MEMORY ? 1 : 2;
                goto out;
        }
        curl_multi_setopt(d.multi, CURLMOPT_MAXCONNECTS, (long)o->max_inflight);
        load_len_rng_init(o, &d.len_rng);
        r = run(&d, ret_t0, ret_t1);
        if (r < 0) {
                fprintf(stderr, "<3>load run failed: %s\n", strerror(-r));
                r = 1;
        }
out:
        while (d.n_idle)
                curl_easy_cleanup(d.idle[--d.n_idle]);
        free(d.idle);
        if (d.multi)
                curl_multi_cleanup(d.multi);
        curl_slist_free_all(d.headers);
        curl_global_cleanup();
        free(d.prompt);
        cJSON_free(d.model_json);
        curl_url_cleanup(d.endpoint_url);
        return r;
}

int main(int argc, char **argv) {
        struct load_opts o;
        if (parse_opts(argc, argv, &o) < 0) {
                usage(stderr);
                return 2;
        }
        struct load_stats *st = malloc(sizeof *st);
        if (!st) {
                fprintf(stderr, "<3>out of memory\n");
                return 1;
        }
        load_stats_init(st);
        char endpoint[2048], model[256];
        int64_t t0, t1;
        int r;
        if (!strncmp(o.url, "ipc://", 6) || !strncmp(o.url, "inproc://", 9)) {
                snprintf(endpoint, sizeof endpoint, "%s", o.url);
                if (!o.model)
                        o.model = "(the worker's)";
                r = load_run_worker(&o, st, &t0, &t1);
                if (r < 0) {
                        fprintf(stderr, "<3>cannot load the worker at '%s': %s\n", o.url, strerror(-r));
                        r = 1;
                }
        } else {
                r = run_http(&o, st, endpoint, sizeof endpoint, model, sizeof model, &t0, &t1);
        }
        if (r != 0) {
                free(st);
                return r;
        }
        double elapsed_s = (double)(t1 - t0) / NS;
        if (o.json)
                report_json(&o, st, elapsed_s);
        else
                report_table(&o, st, endpoint, elapsed_s);
        free(st);
        return 0;
}
