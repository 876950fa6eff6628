/* load.h — what dsvisor-bench-load's two drivers share: the options, the counters and
 * histograms of a run, the open-loop schedule, when to send and stop (struct load_pace)
 * and the request bodies' lengths.
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

/* When a driver sends and when it stops, for both drivers: the open-loop schedule (--qps)
 * or the closed loop (--concurrency, --requests) within --duration, then up to --drain
 * seconds for the requests in flight, and the progress line. A driver's loop:
 *
 *     load_pace_start(&p, o, stats)
 *     for (;;) {
 *             while ((at = load_pace_due(&p, now, inflight)) >= 0)  // send one arriving at
 *                     load_pace_sent(&p);                           // `at`, else break
 *             ... move the requests in flight on ...
 *             state = load_pace_check(&p, now, inflight)            // DONE, DRAIN_TIMEOUT: stop
 *             ... wait up to load_pace_wait_ms(&p, now) for I/O ...
 *     }
 *     load_pace_finish(&p, inflight, &t0, &t1)
 */
struct load_pace {
        const struct load_opts *o;
        const struct load_stats *st; /* its sent count ends a closed loop at --requests */
        int64_t *sched;              /* open loop: arrival offsets from t0 */
        size_t n_sched, next;
        int64_t t0, send_end, hard_end, last_progress;
        int show;
};
enum load_pace_state { LOAD_PACE_SENDING, LOAD_PACE_DRAINING, LOAD_PACE_DONE, LOAD_PACE_DRAIN_TIMEOUT };

/* Starts the run's clock now; -ENOMEM. */
int load_pace_start(struct load_pace *p, const struct load_opts *o, const struct load_stats *st);
/* The arrival time of the next request to send now with inflight in flight, or -1: the
 * schedule's next arrival when it is due (at most --max-inflight in flight), or now in a
 * closed loop below --concurrency. */
int64_t load_pace_due(const struct load_pace *p, int64_t now, unsigned inflight);
/* The request load_pace_due gave was sent (or failed for good): the next one is due. */
void load_pace_sent(struct load_pace *p);
/* Sending, draining (the drain deadline set when sending ended), done when nothing is in
 * flight after sending, or past the drain deadline; prints the progress line once a
 * second when shown. */
enum load_pace_state load_pace_check(struct load_pace *p, int64_t now, unsigned inflight);
/* How long to wait for I/O: until the next scheduled arrival, at most 100 ms (an arrival
 * already due waits for a request in flight to end). */
int load_pace_wait_ms(const struct load_pace *p, int64_t now);
/* Ends the run: its start and end times, the final progress line, the schedule freed. */
void load_pace_finish(struct load_pace *p, unsigned inflight, int64_t *ret_t0, int64_t *ret_t1);

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
