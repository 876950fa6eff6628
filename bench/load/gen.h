/* gen.h — what the load generator sends and when: a seeded RNG, Poisson arrival times,
 * prompt and output length distributions, and prompt text.
 *
 *     struct load_rng rng;
 *     load_rng_seed(&rng, 42);
 *     double t = 0;
 *     t += load_next_interarrival_s(&rng, 20.0);      // Poisson process at 20 QPS
 *     struct load_dist d;
 *     load_dist_parse("uniform:16:64", &d);           // or "32", "exp:40", "exp:40:200"
 *     unsigned n = load_dist_sample(&d, &rng);
 *
 * Everything is a pure function of the seed, so two runs with the same seed send the same
 * requests on the same schedule (the steadiness experiment pairs configurations this way). */
#ifndef DSV_LOAD_GEN_H
#define DSV_LOAD_GEN_H

#include <stddef.h>
#include <stdint.h>

struct load_rng {
        uint64_t s[4]; /* xoshiro256** state */
};

void load_rng_seed(struct load_rng *rng, uint64_t seed);
uint64_t load_rng_next(struct load_rng *rng);
/* Uniform in [0, 1). */
double load_rng_uniform(struct load_rng *rng);
/* Exponential gap of a Poisson process with the given rate (> 0), in seconds. */
double load_next_interarrival_s(struct load_rng *rng, double rate_per_s);

enum load_dist_kind {
        LOAD_DIST_FIXED,   /* always a */
        LOAD_DIST_UNIFORM, /* integers in [a, b] */
        LOAD_DIST_EXP,     /* 1 + exponential of mean a - 1, capped at b */
        LOAD_DIST_COUNT,
};

struct load_dist {
        enum load_dist_kind kind;
        unsigned a, b;
};

/* "N", "uniform:A:B" (1 <= A <= B) or "exp:MEAN[:MAX]" (MAX defaults to 8*MEAN);
 * -EINVAL for anything else or a zero length. */
int load_dist_parse(const char *spec, struct load_dist *ret_dist);
unsigned load_dist_sample(const struct load_dist *d, struct load_rng *rng);
/* Formats a distribution as it would be parsed, into buf. */
const char *load_dist_to_string(const struct load_dist *d, char *buf, size_t size);

/* Writes a prompt of n_words space-separated words drawn from a fixed word list into buf
 * (NUL-terminated, cut at size), and returns its length. The words are plain ASCII
 * letters, so the prompt needs no JSON escaping. */
size_t load_prompt_fill(char *buf, size_t size, unsigned n_words, struct load_rng *rng);

#endif
