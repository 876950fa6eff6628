/* admission_sim — the queue-wait bound (dsv_policy_admit) at 0.7× and 5× of capacity on a
 * simulated worker whose step cost grows with the tokens it carries.
 *
 * One worker runs up to --batch sequences per engine step. A step costs --step-ms plus
 * --token-ms for each token it carries: one per running sequence, and the whole prompt of
 * each sequence that joins the batch in it (its first output token comes from that step).
 * That is the cost model the step thread's CPU time fits in bench/overload.sh (its "step
 * CPU" and "tok CPU" columns). --prefill-per-step N bounds the prompt tokens of one step
 * (chunks, oldest first; a sequence samples its first token with its prompt's last chunk);
 * 0, the default, puts every joining prompt whole into the step, as the worker does with
 * its token budget (256) above the prompts here. --hide-max-batch gives admission a load
 * without max_batch, so the running count stands for the batch's capacity (the bound as
 * it was before workers' max_batch reached it). Each arrival is admitted or refused by dsv_policy_admit, the
 * code the gateway runs, against the worker's exact state: waiting requests, running ones,
 * max_batch. Per round (a seed) and per --max-queue-wait-pct value, as bench/overload.sh
 * does: capacity is the completed rate of a closed loop with the batch plus the queue the
 * bound keeps in flight; then Poisson arrivals at 0.7× and 5× of it for --duration
 * seconds each, every request drained. Printed: the median over the rounds of capacity,
 * the P99 latency of completed requests at 0.7× and 5×, their ratio, completed at 5× over
 * capacity, and the shares refused at 0.7× and 5×; then the ratios over the rounds.
 *
 * Not modelled: the host (another thread holding the worker's CPU), the stats poll's lag,
 * HTTP and IPC time, the gateway's own CPU for refusals, prefix-cache hits.
 *
 *     admission_sim [--pct "0 25 50 100"] [--batch 8] [--max-queue 8] [--prompt-tokens 26]
 *                   [--output-mean 23] [--max-tokens 64] [--step-ms 0.16] [--token-ms 0.13]
 *                   [--prefill-per-step 0] [--hide-max-batch] [--duration 60] [--rounds 5] [--seed 1] */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_sort.h"
#include "dsv_policy.h"

#define MAX_BATCH 256
#define MAX_PCTS 16

struct params {
        int batch, max_queue, prompt_tokens, max_tokens;
        int prefill_per_step; /* prompt tokens a step carries at most; 0: every waiting prompt whole */
        bool hide_max_batch;  /* admission is not told max_batch: the running batch stands for it */
        double output_mean, step_ms, token_ms, duration_s;
};

struct req {
        double arrival_s;
        int output_tokens, emitted;
        int prompt_left; /* prompt tokens not computed yet */
};

/* A FIFO of requests, grown as needed. */
struct fifo {
        struct req *r;
        size_t head, len, cap;
};

static int fifo_push(struct fifo *f, struct req q) {
        if (f->len == f->cap) {
                size_t cap = f->cap ? f->cap * 2 : 64;
                struct req *r = malloc(cap * sizeof *r);
                if (!r)
                        return -ENOMEM;
                for (size_t i = 0; i < f->len; i++)
                        r[i] = f->r[(f->head + i) % f->cap];
                free(f->r);
                f->r = r, f->head = 0, f->cap = cap;
        }
        f->r[(f->head + f->len++) % f->cap] = q;
        return 0;
}

static struct req fifo_pop(struct fifo *f) {
        struct req q = f->r[f->head];
        f->head = (f->head + 1) % f->cap;
        f->len--;
        return q;
}

/* xorshift64*: uniform in (0, 1) */
static double uniform(uint64_t *s) {
        *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
        return ((double)((*s * 0x2545F4914F6CDD1DULL) >> 11) + 0.5) / 9007199254740992.0;
}

/* Output length: geometric with the given mean (the model's end of sequence), at most
 * max_tokens, at least 1. */
static int output_tokens(const struct params *p, uint64_t *s) {
        double n = ceil(log(uniform(s)) / log(1.0 - 1.0 / p->output_mean));
        return n < 1 ? 1 : n > p->max_tokens ? p->max_tokens : (int)n;
}

/* Latencies of completed requests, seconds. */
struct samples {
        double *v;
        size_t n, cap;
};

static int sample_add(struct samples *s, double v) {
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 1024;
                double *nv = realloc(s->v, cap * sizeof *nv);
                if (!nv)
                        return -ENOMEM;
                s->v = nv, s->cap = cap;
        }
        s->v[s->n++] = v;
        return 0;
}

static double percentile(struct samples *s, double q) {
        if (s->n == 0)
                return NAN;
        qsort(s->v, s->n, sizeof s->v[0], bench_cmp_double);
        size_t i = (size_t)ceil(q * (double)s->n) - 1;
        return s->v[i < s->n ? i : s->n - 1];
}

struct run_result {
        size_t completed, refused, offered;
        size_t completed_in_window; /* before the run's duration ended */
        double p99_s;
};

struct state {
        const struct params *p;
        const struct dsv_policy_admit_limits *lim;
        double qps, next_arrival;
        struct fifo queue;
        int n_running;
        uint64_t rng;
};

/* The arrivals up to `until` (and within the run's duration), each admitted against the
 * state it finds: the batch as this step runs it, the queue behind it. */
static int admit_arrivals(struct state *st, double until, struct run_result *ret) {
        while (st->next_arrival <= until && st->next_arrival < st->p->duration_s) {
                struct dsv_policy_worker_load w = {true, (uint32_t)st->queue.len, 0, (uint32_t)st->n_running,
                                                   st->p->hide_max_batch ? 0 : (uint32_t)st->p->batch};
                struct dsv_policy_admission adm;
                int e = dsv_policy_admit(st->lim, &w, 1, 0, 0, &adm);
                if (e < 0)
                        return e;
                ret->offered++;
                if (adm.verdict == DSV_POLICY_VERDICT_ADMIT) {
                        struct req q = {st->next_arrival, output_tokens(st->p, &st->rng), 0, st->p->prompt_tokens};
                if ((e = fifo_push(&st->queue, q)) < 0)
                                return e;
                } else {
                        ret->refused++;
                }
                st->next_arrival += -log(uniform(&st->rng)) / st->qps;
        }
        return 0;
}

/* One run: closed loop with `inflight` requests (qps 0) or Poisson arrivals at qps, for
 * duration_s, then drained. */
static int run(const struct params *p, const struct dsv_policy_admit_limits *lim, double qps, int inflight,
               uint64_t seed, struct run_result *ret) {
        struct state st = {p, lim, qps, INFINITY, {0}, 0, seed * 0x9E3779B97F4A7C15ULL + 1};
        struct req running[MAX_BATCH];
        struct samples lat = {0};
        int e = 0;
        double now = 0;
        *ret = (struct run_result){0};
        if (qps > 0)
                st.next_arrival = -log(uniform(&st.rng)) / qps;
        for (int i = 0; i < inflight && e == 0; i++, ret->offered++)
                e = fifo_push(&st.queue, (struct req){0, output_tokens(p, &st.rng), 0, p->prompt_tokens});
        while (e == 0) {
                if (st.n_running == 0 && st.queue.len == 0) {
                        if (st.next_arrival >= p->duration_s)
                                break;
                        now = st.next_arrival;
                        e = admit_arrivals(&st, now, ret);
                        continue;
                }
                /* one step: the waiting take free slots; each decoding sequence carries a
                 * token, and prompts their chunks, oldest first, within prefill_per_step */
                while (st.n_running < p->batch && st.queue.len > 0)
                        running[st.n_running++] = fifo_pop(&st.queue);
                int tokens = 0, room = p->prefill_per_step > 0 ? p->prefill_per_step : INT32_MAX;
                bool samples[MAX_BATCH];
                for (int i = 0; i < st.n_running; i++) {
                        struct req *r = &running[i];
                        int chunk = r->prompt_left < room ? r->prompt_left : room;
                        samples[i] = r->prompt_left == chunk; /* decoding, or the prompt's last chunk */
                        r->prompt_left -= chunk;
                        room -= chunk;
                        tokens += chunk + (r->prompt_left == 0 && chunk == 0);
                }
                double end = now + (p->step_ms + p->token_ms * tokens) / 1000;
                if ((e = admit_arrivals(&st, end, ret)) < 0)
                        break;
                now = end;
                for (int i = 0; i < st.n_running && e == 0;) {
                        struct req *r = &running[i];
                        if (!samples[i] || ++r->emitted < r->output_tokens) {
                                i++;
                                continue;
                        }
                        ret->completed++;
                        ret->completed_in_window += now <= p->duration_s;
                        e = sample_add(&lat, now - r->arrival_s);
                        samples[i] = samples[st.n_running - 1];
                        *r = running[--st.n_running];
                        if (inflight > 0 && now < p->duration_s && e == 0) {
                                e = fifo_push(&st.queue, (struct req){now, output_tokens(p, &st.rng), 0, p->prompt_tokens});
                                ret->offered++;
                        }
                }
        }
        ret->p99_s = percentile(&lat, 0.99);
        free(lat.v);
        free(st.queue.r);
        return e;
}

static double median(double *v, int n) {
        qsort(v, (size_t)n, sizeof v[0], bench_cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_num(const char *name, const char *s, double lo, double hi, double *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || *end || !(v >= lo && v <= hi)) {
                fprintf(stderr, "admission_sim: --%s must be a number in [%g, %g], not '%s'\n", name, lo, hi, s);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

int main(int argc, char **argv) {
        struct params p = {.batch = 8, .max_queue = 8, .prompt_tokens = 26, .max_tokens = 64, .output_mean = 23,
                           .step_ms = 0.16, .token_ms = 0.13, .duration_s = 60};
        double rounds = 5, seed = 1, v;
        const char *pct_list = "0 25 50 100";
        static const struct option opts[] = {
                {"pct", required_argument, NULL, 'p'},          {"batch", required_argument, NULL, 'b'},
                {"max-queue", required_argument, NULL, 'q'},    {"prompt-tokens", required_argument, NULL, 't'},
                {"output-mean", required_argument, NULL, 'o'},  {"max-tokens", required_argument, NULL, 'm'},
                {"step-ms", required_argument, NULL, 'f'},      {"token-ms", required_argument, NULL, 'k'},
                {"duration", required_argument, NULL, 'd'},     {"rounds", required_argument, NULL, 'r'},
                {"seed", required_argument, NULL, 's'},         {"prefill-per-step", required_argument, NULL, 'c'},
                {"hide-max-batch", no_argument, NULL, 'h'},     {NULL, 0, NULL, 0},
        };
        int c;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                int r = 0;
                switch (c) {
                case 'p': pct_list = optarg; break;
                case 'b': r = parse_num("batch", optarg, 1, MAX_BATCH, &v), p.batch = (int)v; break;
                case 'q': r = parse_num("max-queue", optarg, 1, 100000, &v), p.max_queue = (int)v; break;
                case 't': r = parse_num("prompt-tokens", optarg, 0, 1 << 20, &v), p.prompt_tokens = (int)v; break;
                case 'o': r = parse_num("output-mean", optarg, 1, 1 << 20, &p.output_mean); break;
                case 'm': r = parse_num("max-tokens", optarg, 1, 1 << 20, &v), p.max_tokens = (int)v; break;
                case 'f': r = parse_num("step-ms", optarg, 0, 1e6, &p.step_ms); break;
                case 'k': r = parse_num("token-ms", optarg, 1e-6, 1e6, &p.token_ms); break;
                case 'd': r = parse_num("duration", optarg, 1, 1e6, &p.duration_s); break;
                case 'r': r = parse_num("rounds", optarg, 1, 1000, &rounds); break;
                case 's': r = parse_num("seed", optarg, 0, 1e15, &seed); break;
                case 'h': p.hide_max_batch = true; break;
                case 'c': r = parse_num("prefill-per-step", optarg, 0, 1 << 20, &v), p.prefill_per_step = (int)v; break;
                default: return 2;
                }
                if (r < 0)
                        return 2;
        }
        int pcts[MAX_PCTS], n_pcts = 0;
        for (const char *s = pct_list; *s;) {
                char *end;
                long x = strtol(s, &end, 10);
                if (end == s || x < 0 || x > 100000 || n_pcts == MAX_PCTS || (*end && *end != ' ')) {
                        fprintf(stderr, "admission_sim: --pct takes up to %d whole numbers 0..100000 separated by "
                                        "spaces, not '%s'\n", MAX_PCTS, pct_list);
                        return 2;
                }
                pcts[n_pcts++] = (int)x;
                s = *end ? end + 1 : end;
        }
        if (n_pcts == 0) {
                fprintf(stderr, "admission_sim: --pct is empty\n");
                return 2;
        }
        printf("admission_sim: batch %d, max-queue %d, prompt %d tokens, output mean %g (at most %d), step %g ms + "
               "%g ms/token, prefill per step %d (0: whole prompts), %s, %g s per run, %d rounds from seed %.0f\n",
               p.batch, p.max_queue, p.prompt_tokens, p.output_mean, p.max_tokens, p.step_ms, p.token_ms,
               p.prefill_per_step, p.hide_max_batch ? "max_batch hidden from admission" : "admission knows max_batch",
               p.duration_s, (int)rounds, seed);
        printf("%6s %9s %10s %10s %11s %11s %12s %10s   %s\n", "pct", "cap QPS", "P99 0.7x", "P99 5x", "P99 ratio",
               "QPS ratio", "refused 0.7x", "refused 5x", "ratios over the rounds (P99; QPS)");
        for (int i = 0; i < n_pcts; i++) {
                struct dsv_policy_admit_limits lim = {.max_queue_per_instance = (uint32_t)p.max_queue,
                                                      .max_queue_wait_pct = (uint32_t)pcts[i]};
                int kept = (p.batch * pcts[i] + 99) / 100;
                if (pcts[i] == 0 || kept > p.max_queue)
                        kept = p.max_queue;
                double cap[1000], p99a[1000], p99b[1000], pr[1000], qr[1000], ref_a[1000], ref[1000];
                int n = (int)rounds;
                for (int k = 0; k < n; k++) {
                        uint64_t s = (uint64_t)seed + (uint64_t)k * 3;
                        struct run_result rc, ra, rb;
                        if (run(&p, &lim, 0, p.batch + kept, s, &rc) < 0)
                                return 1;
                        cap[k] = (double)rc.completed_in_window / p.duration_s;
                        if (run(&p, &lim, 0.7 * cap[k], 0, s + 1, &ra) < 0 || run(&p, &lim, 5 * cap[k], 0, s + 2, &rb) < 0)
                                return 1;
                        p99a[k] = ra.p99_s, p99b[k] = rb.p99_s;
                        pr[k] = rb.p99_s / ra.p99_s;
                        qr[k] = (double)rb.completed / p.duration_s / cap[k];
                        ref_a[k] = ra.offered ? (double)ra.refused / (double)ra.offered : 0;
                        ref[k] = rb.offered ? (double)rb.refused / (double)rb.offered : 0;
                }
                char spread[512];
                int o = 0;
                for (int k = 0; k < n && o < (int)sizeof spread - 16; k++)
                        o += snprintf(spread + o, sizeof spread - (size_t)o, "%s%.2f", k ? " " : "", pr[k]);
                o += snprintf(spread + o, sizeof spread - (size_t)o, ";");
                for (int k = 0; k < n && o < (int)sizeof spread - 16; k++)
                        o += snprintf(spread + o, sizeof spread - (size_t)o, " %.2f", qr[k]);
                double pm = median(pr, n), qm = median(qr, n);
                printf("%6d %9.1f %10.0f %10.0f %11.2f %11.2f %11.1f%% %9.0f%%   %s\n", pcts[i], median(cap, n),
                       median(p99a, n) * 1000, median(p99b, n) * 1000, pm, qm, median(ref_a, n) * 100,
                       median(ref, n) * 100, spread);
        }
        return 0;
}
