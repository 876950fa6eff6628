/* policy_sim — routing policies against workers of unequal speed.
 *
 * A discrete-event simulation: seeded Poisson arrivals at a fixed fraction of the
 * workers' total capacity; each request has a prompt (prefill work) and an output
 * (decode work). A worker runs up to --batch sequences at once and shares its speed
 * among them (processor sharing); the rest wait in its FIFO queue. At each arrival the
 * router (libdsv_policy, the code the gateway runs) sees every worker's exact queue:
 * queued prompt tokens and running sequences. The same request stream is replayed for
 * every policy, and the end-to-end latency percentiles are printed.
 *
 * Not modelled: batching gains (a batch is not faster than its sequences one by one),
 * prefix-cache hits (prefix-affinity gets no reward for locality here), stale stats.
 *
 *     policy_sim [--requests N] [--seed S] [--load RHO] [--batch B] [--speeds 1,1,0.6,0.3]
 *
 * Exits 1 when least-outstanding's P99 does not beat round-robin's. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_sort.h"
#include "dsv_policy.h"

#define MAX_WORKERS 64
#define MAX_BATCH 64
#define N_SESSIONS 64 /* distinct prompt prefixes (system prompts, chat sessions) */

/* Work units: seconds on a speed-1.0 worker. Prefill 2000 tok/s, decode 40 tok/s. */
#define PREFILL_TOK_S 2000.0
#define DECODE_TOK_S 40.0

struct request {
        double arrival_s;
        uint32_t prompt_tokens;
        uint32_t output_tokens;
        int session;
        double work;  /* seconds at speed 1.0 */
        double done_s;
};

struct worker {
        double speed;
        int running[MAX_BATCH]; /* request indexes */
        double remaining[MAX_BATCH];
        int n_running;
        int *queue; /* FIFO of request indexes: ring of n_requests entries */
        int q_head, q_len, q_cap;
        uint32_t queued_prompt_tokens;
};

struct sim {
        int n_workers;
        int batch;
        struct worker w[MAX_WORKERS];
        struct request *req;
        int n_requests;
};

static uint64_t rng_state;

static uint64_t rng_u64(void) {
        uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static double rng_uniform(void) { /* (0, 1] */
        return ((rng_u64() >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static uint32_t rng_range(uint32_t lo, uint32_t hi) {
        return lo + (uint32_t)(rng_u64() % (hi - lo + 1));
}

static double request_work(uint32_t prompt, uint32_t output) {
        return prompt / PREFILL_TOK_S + output / DECODE_TOK_S;
}

/* The request stream: prompts 64..1024 tokens, outputs 16..256, Poisson arrivals at
 * `load` × capacity. Capacity = total speed / mean work per request. */
static void make_requests(struct sim *s, uint64_t seed, double load, double total_speed) {
        rng_state = seed;
        double mean_work = request_work((64 + 1024) / 2, (16 + 256) / 2);
        double rate = load * total_speed / mean_work;
        double t = 0;
        for (int i = 0; i < s->n_requests; i++) {
                struct request *r = &s->req[i];
                t += -log(rng_uniform()) / rate;
                r->arrival_s = t;
                r->prompt_tokens = rng_range(64, 1024);
                r->output_tokens = rng_range(16, 256);
                r->session = (int)rng_range(0, N_SESSIONS - 1);
                r->work = request_work(r->prompt_tokens, r->output_tokens);
        }
}

static void start_waiting(struct sim *s, struct worker *w) {
        while (w->n_running < s->batch && w->q_len > 0) {
                int id = w->queue[w->q_head];
                w->q_head = (w->q_head + 1) % w->q_cap;
                w->q_len--;
                w->queued_prompt_tokens -= s->req[id].prompt_tokens;
                w->running[w->n_running] = id;
                w->remaining[w->n_running] = s->req[id].work;
                w->n_running++;
        }
}

/* Time until the worker's next completion (INFINITY when idle). */
static double next_completion(const struct worker *w) {
        if (w->n_running == 0)
                return INFINITY;
        double min = w->remaining[0];
        for (int k = 1; k < w->n_running; k++)
                if (w->remaining[k] < min)
                        min = w->remaining[k];
        return min * w->n_running / w->speed;
}

/* Advances every running sequence by dt seconds; finished ones complete at `now`. */
static void advance(struct sim *s, double dt, double now) {
        for (int i = 0; i < s->n_workers; i++) {
                struct worker *w = &s->w[i];
                if (w->n_running == 0)
                        continue;
                double done = dt * w->speed / w->n_running;
                for (int k = 0; k < w->n_running;) {
                        w->remaining[k] -= done;
                        if (w->remaining[k] <= 1e-9) {
                                s->req[w->running[k]].done_s = now;
                                w->n_running--;
                                w->running[k] = w->running[w->n_running];
                                w->remaining[k] = w->remaining[w->n_running];
                                continue;
                        }
                        k++;
                }
                start_waiting(s, w);
        }
}

static int run_policy(struct sim *s, enum dsv_policy_route route, uint64_t seed) {
        struct dsv_policy_router router;
        int r = dsv_policy_router_init(&router, route, seed);
        if (r < 0)
                return r;
        for (int i = 0; i < s->n_workers; i++) {
                struct worker *w = &s->w[i];
                w->n_running = 0;
                w->q_head = w->q_len = 0;
                w->queued_prompt_tokens = 0;
        }
        double now = 0;
        int next_arrival = 0, n_done = 0;
        while (n_done < s->n_requests) {
                double t_arrival = next_arrival < s->n_requests ? s->req[next_arrival].arrival_s : INFINITY;
                double t_done = INFINITY;
                for (int i = 0; i < s->n_workers; i++) {
                        double t = now + next_completion(&s->w[i]);
                        if (t < t_done)
                                t_done = t;
                }
                double t = t_arrival < t_done ? t_arrival : t_done;
                int before = 0;
                for (int i = 0; i < s->n_workers; i++)
                        before += s->w[i].n_running + s->w[i].q_len;
                advance(s, t - now, t);
                now = t;
                int after = 0;
                for (int i = 0; i < s->n_workers; i++)
                        after += s->w[i].n_running + s->w[i].q_len;
                n_done += before - after;
                if (t_arrival > t_done)
                        continue;

                struct dsv_policy_worker_load loads[MAX_WORKERS];
                for (int i = 0; i < s->n_workers; i++)
                        loads[i] = (struct dsv_policy_worker_load){
                                .ready = true,
                                .queued_requests = (uint32_t)s->w[i].q_len,
                                .queued_prompt_tokens = s->w[i].queued_prompt_tokens,
                                .running_seqs = (uint32_t)s->w[i].n_running,
                        };
                struct request *q = &s->req[next_arrival];
                char prompt[64];
                int len = snprintf(prompt, sizeof prompt, "system prompt of session %d: you are", q->session);
                int pick = dsv_policy_route_pick(&router, loads, (size_t)s->n_workers, prompt, (size_t)len);
                if (pick < 0)
                        return pick;
                struct worker *w = &s->w[pick];
                w->queue[(w->q_head + w->q_len) % w->q_cap] = next_arrival;
                w->q_len++;
                w->queued_prompt_tokens += q->prompt_tokens;
                start_waiting(s, w);
                next_arrival++;
        }
        return 0;
}

struct stats {
        double p50, p99, mean;
};

static struct stats latency_stats(const struct sim *s, double *scratch) {
        double sum = 0;
        for (int i = 0; i < s->n_requests; i++) {
                scratch[i] = s->req[i].done_s - s->req[i].arrival_s;
                sum += scratch[i];
        }
        qsort(scratch, (size_t)s->n_requests, sizeof *scratch, bench_cmp_double);
        int n = s->n_requests;
        return (struct stats){scratch[(int)(0.50 * (n - 1))], scratch[(int)(0.99 * (n - 1))], sum / n};
}

static int parse_speeds(const char *arg, struct sim *s) {
        char buf[512];
        if (strlen(arg) >= sizeof buf)
                return -EINVAL;
        strcpy(buf, arg);
        s->n_workers = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                char *end;
                double v = strtod(tok, &end);
                if (*end || !(v > 0) || s->n_workers == MAX_WORKERS)
                        return -EINVAL;
                s->w[s->n_workers++].speed = v;
        }
        return s->n_workers > 0 ? 0 : -EINVAL;
}

int main(int argc, char **argv) {
        static struct sim s;
        int n_requests = 20000;
        uint64_t seed = 1;
        double load = 0.8;
        const char *speeds = "1,1,0.6,0.3";
        s.batch = 4;

        static const struct option options[] = {
                {"requests", required_argument, NULL, 'n'}, {"seed", required_argument, NULL, 's'},
                {"load", required_argument, NULL, 'l'},     {"batch", required_argument, NULL, 'b'},
                {"speeds", required_argument, NULL, 'w'},   {"help", no_argument, NULL, 'h'},
                {0},
        };
        int opt;
        while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
                switch (opt) {
                case 'n':
                        n_requests = atoi(optarg);
                        break;
                case 's':
                        seed = strtoull(optarg, NULL, 10);
                        break;
                case 'l':
                        load = atof(optarg);
                        break;
                case 'b':
                        s.batch = atoi(optarg);
                        break;
                case 'w':
                        speeds = optarg;
                        break;
                default:
                        fprintf(opt == 'h' ? stdout : stderr,
                                "usage: policy_sim [--requests N] [--seed S] [--load RHO] [--batch B] [--speeds a,b,...]\n");
                        return opt == 'h' ? 0 : 2;
                }
        }
        if (n_requests < 100 || !(load > 0 && load < 1) || s.batch < 1 || s.batch > MAX_BATCH ||
            parse_speeds(speeds, &s) < 0) {
                fprintf(stderr, "policy_sim: need --requests >= 100, 0 < --load < 1, 1 <= --batch <= %d, "
                                "positive --speeds\n", MAX_BATCH);
                return 2;
        }

        s.n_requests = n_requests;
        s.req = calloc((size_t)n_requests, sizeof *s.req);
        double *scratch = calloc((size_t)n_requests, sizeof *scratch);
        int ok = s.req && scratch;
        for (int i = 0; ok && i < s.n_workers; i++) {
                s.w[i].q_cap = n_requests;
                s.w[i].queue = malloc((size_t)n_requests * sizeof *s.w[i].queue);
                ok = s.w[i].queue != NULL;
        }
        if (!ok) {
                fprintf(stderr, "policy_sim: out of memory\n");
                return 1;
        }

        double total_speed = 0;
        printf("policy_sim: %d workers, speeds", s.n_workers);
        for (int i = 0; i < s.n_workers; i++) {
                printf(" %.2f", s.w[i].speed);
                total_speed += s.w[i].speed;
        }
        printf(", batch %d, load %.2f, %d requests, seed %llu\n", s.batch, load, n_requests,
               (unsigned long long)seed);
        make_requests(&s, seed, load, total_speed);

        struct stats st[DSV_POLICY_ROUTE_COUNT];
        printf("%-18s %9s %9s %9s\n", "policy", "p50_s", "p99_s", "mean_s");
        for (int p = 0; p < DSV_POLICY_ROUTE_COUNT; p++) {
                int r = run_policy(&s, p, seed);
                if (r < 0) {
                        fprintf(stderr, "policy_sim: %s failed: %s\n", dsv_policy_route_to_string(p), strerror(-r));
                        return 1;
                }
                st[p] = latency_stats(&s, scratch);
                printf("%-18s %9.2f %9.2f %9.2f\n", dsv_policy_route_to_string(p), st[p].p50, st[p].p99, st[p].mean);
        }
        double lo = st[DSV_POLICY_ROUTE_LEAST_OUTSTANDING].p99, rr = st[DSV_POLICY_ROUTE_ROUND_ROBIN].p99;
        printf("p99 round-robin / least-outstanding = %.2fx\n", rr / lo);

        for (int i = 0; i < s.n_workers; i++)
                free(s.w[i].queue);
        free(scratch);
        free(s.req);
        if (!(lo < rr)) {
                fprintf(stderr, "policy_sim: least-outstanding did not beat round-robin at P99\n");
                return 1;
        }
        return 0;
}
