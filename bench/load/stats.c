/* stats.c — counters, schedule and request lengths shared by the load drivers. */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t load_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * LOAD_NS + ts.tv_nsec;
}

void load_stats_init(struct load_stats *st) {
        memset(st, 0, sizeof *st);
        load_hist_init(&st->latency);
        load_hist_init(&st->ttft);
        load_hist_init(&st->itl);
}

static void kind_add(struct load_kind_count *kinds, const char *name) {
        int i;
        for (i = 0; i < LOAD_MAX_KINDS && kinds[i].n; i++)
                if (!strcmp(kinds[i].name, name)) {
                        kinds[i].n++;
                        return;
                }
        if (i == LOAD_MAX_KINDS) { /* table full: the last slot collects the rest */
                i = LOAD_MAX_KINDS - 1;
                snprintf(kinds[i].name, sizeof kinds[i].name, "other");
        } else {
                snprintf(kinds[i].name, sizeof kinds[i].name, "%s", name);
        }
        kinds[i].n++;
}

void load_stats_completed(struct load_stats *st, int64_t latency_ns, unsigned long output_tokens) {
        st->completed++;
        st->output_tokens += output_tokens;
        load_hist_record(&st->latency, latency_ns > 0 ? (uint64_t)latency_ns : 0);
}

void load_stats_error(struct load_stats *st, int began, const char *kind) {
        st->errors++;
        if (began)
                st->errors_after_first_token++;
        kind_add(st->errs, kind);
}

void load_stats_lost(struct load_stats *st, const char *kind) {
        st->lost++;
        kind_add(st->losts, kind);
}

int64_t *load_schedule_new(const struct load_opts *o, size_t *ret_n) {
        struct load_rng rng;
        load_rng_seed(&rng, o->seed);
        size_t cap = 1024, n = 0;
        int64_t *t = malloc(cap * sizeof *t);
        double at = 0;
        while (t) {
                at += load_next_interarrival_s(&rng, o->qps);
                if ((o->duration_s > 0 && at >= o->duration_s) || (o->requests && n >= o->requests))
                        break;
                if (n == cap) {
                        int64_t *b = realloc(t, (cap *= 2) * sizeof *t);
                        if (!b) {
                                free(t);
                                return NULL;
                        }
                        t = b;
                }
                t[n++] = (int64_t)(at * LOAD_NS);
        }
        *ret_n = n;
        return t;
}

unsigned load_request_draw(const struct load_opts *o, struct load_rng *rng, char *prompt) {
        unsigned words = load_dist_sample(&o->prompt_len, rng);
        unsigned max_tokens = load_dist_sample(&o->output_len, rng);
        load_prompt_fill(prompt, LOAD_MAX_PROMPT_BYTES, words, rng);
        return max_tokens;
}

void load_len_rng_init(const struct load_opts *o, struct load_rng *rng) {
        load_rng_seed(rng, o->seed ^ 0x6c656e67746873ull); /* a stream apart from the arrivals' */
}

void load_progress(const struct load_stats *st, unsigned inflight, double t_s, int final) {
        int tty = isatty(2);
        fprintf(stderr, "%s[%6.1f s] sent %lu  done %lu  errors %lu  lost %lu  in flight %u  %.1f QPS  p99 %.3f s%s",
                tty ? "\r" : "", t_s, st->sent, st->completed, st->errors, st->lost, inflight,
                t_s > 0 ? (double)st->completed / t_s : 0, (double)load_hist_quantile(&st->latency, 0.99) / LOAD_NS,
                tty && !final ? "" : "\n");
}
