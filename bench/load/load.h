/* load.h — what dsvisor-bench-load's two drivers share: the options, the counters and
 * histograms of a run, the open-loop schedule and the request bodies' lengths.
 *
 * Drivers: main.c (HTTP, libcurl multi) and worker.c (straight to one dsvisor-worker over
 * ipc/, for --url ipc://...). Each fills a struct load_stats; every request it sends ends
 * in exactly one of load_stats_completed / _error / _lost. Single-threaded. */
#ifndef DSV_LOAD_H
#define DSV_LOAD_H

#include <stdint.h>

#include "gen.h"
#include "hist.h"

#define LOAD_MAX_KINDS 24
#define LOAD_MAX_PROMPT_BYTES (256u << 10)
#define LOAD_NS 1000000000LL

struct load_opts {
        const char *url, *model, *api, *api_key;
        double qps, duration_s, timeout_s, drain_s;
        unsigned concurrency, max_inflight;
        unsigned long requests;
        struct load_dist prompt_len, output_len;
        uint64_t seed;
        int stream, json, progress, allow_remote;
};

struct load_kind_count {
        char name[96];
        unsigned long n;
};

struct load_stats {
        unsigned long sent, completed, errors, lost, errors_after_first_token, output_tokens;
        /* Among the errors: refusals (HTTP 429 and 503), and those without Retry-After. */
        unsigned long rejected_429, rejected_503, rejected_without_retry_after;
        struct load_kind_count errs[LOAD_MAX_KINDS], losts[LOAD_MAX_KINDS];
        struct load_hist latency, ttft, itl; /* nanoseconds */
};

void load_stats_init(struct load_stats *st);
/* A whole answer, latency from the scheduled arrival to its end. */
void load_stats_completed(struct load_stats *st, int64_t latency_ns, unsigned long output_tokens);
/* An explicit error; began: the answer had already started streaming tokens. */
void load_stats_error(struct load_stats *st, int began, const char *kind);
/* Neither an answer nor an explicit error. */
void load_stats_lost(struct load_stats *st, const char *kind);

int64_t load_now_ns(void);
/* One progress line on stderr ("\r"-refreshed on a terminal); final ends it. */
void load_progress(const struct load_stats *st, unsigned inflight, double t_s, int final);

/* The open-loop arrival offsets (ns from the start) for --qps, --duration and --requests,
 * from the seed alone; NULL when out of memory. The caller frees. */
int64_t *load_schedule_new(const struct load_opts *o, size_t *ret_n);

/* Seeds the request-length stream (apart from the arrivals, so open and closed loop with
 * one seed send the same requests). */
void load_len_rng_init(const struct load_opts *o, struct load_rng *rng);
/* The next request's prompt (into prompt, LOAD_MAX_PROMPT_BYTES) and max_tokens, drawn
 * from the length distributions with rng. */
unsigned load_request_draw(const struct load_opts *o, struct load_rng *rng, char *prompt);

/* Runs the load straight against the worker listening at o->url (ipc:// or inproc://).
 * Returns 0 with the run's start and end times, or a negative errno when it cannot
 * start. */
int load_run_worker(const struct load_opts *o, struct load_stats *st, int64_t *ret_t0, int64_t *ret_t1);

#endif
