/* balance.c — which ready worker takes the next request.
 *
 * Least-outstanding follows HAProxy leastconn (ties go round-robin), power-of-two follows
 * Envoy least_request with choice_count 2, and prefix-affinity sends a shared prompt
 * prefix to the worker likely to hold its KV cache, unless that worker is overloaded
 * (platform-facts.md §7). Load is the worker-reported queue: prompt tokens waiting plus
 * sequences running. */
#include <errno.h>
#include <string.h>

#include "dsv_policy.h"

static const char *const route_names[DSV_POLICY_ROUTE_COUNT] = {
        [DSV_POLICY_ROUTE_LEAST_OUTSTANDING] = "least-outstanding",
        [DSV_POLICY_ROUTE_POWER_OF_TWO] = "power-of-two",
        [DSV_POLICY_ROUTE_ROUND_ROBIN] = "round-robin",
        [DSV_POLICY_ROUTE_PREFIX_AFFINITY] = "prefix-affinity",
};

const char *dsv_policy_route_to_string(enum dsv_policy_route route) {
        return route >= 0 && route < DSV_POLICY_ROUTE_COUNT ? route_names[route] : NULL;
}

int dsv_policy_route_from_string(const char *s) {
        if (!s)
                return -EINVAL;
        for (int i = 0; i < DSV_POLICY_ROUTE_COUNT; i++)
                if (strcmp(s, route_names[i]) == 0)
                        return i;
        return -EINVAL;
}

uint64_t dsv_policy_worker_outstanding(const struct dsv_policy_worker_load *w) {
        return (uint64_t)w->queued_prompt_tokens + w->running_seqs;
}

/* splitmix64 (Steele et al. 2014): spreads any seed, 0 included, into a good state. */
static uint64_t splitmix64(uint64_t x) {
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
}

/* xorshift64* (Vigna 2016). */
static uint64_t rng_next(uint64_t *state) {
        uint64_t x = *state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, bound) by rejection, so small bounds are not skewed. */
static uint32_t rng_below(uint64_t *state, uint32_t bound) {
        uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
        uint64_t x;
        do
                x = rng_next(state);
        while (x >= limit);
        return (uint32_t)(x % bound);
}

int dsv_policy_router_init(struct dsv_policy_router *router, enum dsv_policy_route route, uint64_t seed) {
        if (!router || route < 0 || route >= DSV_POLICY_ROUTE_COUNT)
                return -EINVAL;
        uint64_t state = splitmix64(seed);
        *router = (struct dsv_policy_router){
                .route = route,
                .rng_state = state ? state : 0x9e3779b97f4a7c15ull,
                .next = 0,
                .prefix_bytes = DSV_POLICY_PREFIX_BYTES_DEFAULT,
                .affinity_max_load = DSV_POLICY_AFFINITY_MAX_LOAD_DEFAULT,
        };
        return 0;
}

/* The ready worker with the least outstanding work, scanning from `start` so that ties
 * rotate instead of always landing on worker 0. */
static int least_outstanding(const struct dsv_policy_worker_load *w, size_t n, size_t start) {
        int best = -EAGAIN;
        uint64_t best_load = 0;
        for (size_t k = 0; k < n; k++) {
                size_t i = (start + k) % n;
                if (!w[i].ready)
                        continue;
                uint64_t load = dsv_policy_worker_outstanding(&w[i]);
                if (best < 0 || load < best_load) {
                        best = (int)i;
                        best_load = load;
                }
        }
        return best;
}

static int round_robin(const struct dsv_policy_worker_load *w, size_t n, size_t start) {
        for (size_t k = 0; k < n; k++)
                if (w[(start + k) % n].ready)
                        return (int)((start + k) % n);
        return -EAGAIN;
}

/* The idx-th ready worker. */
static int nth_ready(const struct dsv_policy_worker_load *w, size_t n, uint32_t idx) {
        for (size_t i = 0; i < n; i++)
                if (w[i].ready && idx-- == 0)
                        return (int)i;
        return -EAGAIN;
}

static int power_of_two(uint64_t *rng, const struct dsv_policy_worker_load *w, size_t n) {
        uint32_t n_ready = 0;
        for (size_t i = 0; i < n; i++)
                n_ready += w[i].ready;
        if (n_ready == 0)
                return -EAGAIN;
        if (n_ready == 1)
                return nth_ready(w, n, 0);
        uint32_t a = rng_below(rng, n_ready);
        uint32_t b = rng_below(rng, n_ready - 1);
        b += b >= a; /* two distinct choices */
        int wa = nth_ready(w, n, a), wb = nth_ready(w, n, b);
        return dsv_policy_worker_outstanding(&w[wb]) < dsv_policy_worker_outstanding(&w[wa]) ? wb : wa;
}

/* FNV-1a over the prefix, then the splitmix64 finalizer so every bit feeds the modulo. */
static uint64_t prefix_hash(const unsigned char *p, size_t len) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < len; i++)
                h = (h ^ p[i]) * 0x100000001b3ull;
        return splitmix64(h);
}

int dsv_policy_route_pick(struct dsv_policy_router *router, const struct dsv_policy_worker_load *workers,
                          size_t n, const void *prompt, size_t prompt_len) {
        if (!router || (!workers && n > 0) || (!prompt && prompt_len > 0) || n > INT32_MAX)
                return -EINVAL;
        if (n == 0)
                return -EAGAIN;
        size_t start = router->next % n;
        int pick;
        switch (router->route) {
        case DSV_POLICY_ROUTE_LEAST_OUTSTANDING:
                pick = least_outstanding(workers, n, start);
                break;
        case DSV_POLICY_ROUTE_POWER_OF_TWO:
                pick = power_of_two(&router->rng_state, workers, n);
                break;
        case DSV_POLICY_ROUTE_ROUND_ROBIN:
                pick = round_robin(workers, n, start);
                break;
        case DSV_POLICY_ROUTE_PREFIX_AFFINITY: {
                size_t len = prompt_len < router->prefix_bytes ? prompt_len : router->prefix_bytes;
                size_t home = (size_t)(prefix_hash(prompt, len) % n);
                if (workers[home].ready && dsv_policy_worker_outstanding(&workers[home]) <= router->affinity_max_load)
                        pick = (int)home;
                else
                        pick = least_outstanding(workers, n, start);
                break;
        }
        default:
                return -EINVAL;
        }
        if (pick >= 0)
                router->next = (uint32_t)((size_t)pick + 1) % (uint32_t)n;
        return pick;
}
