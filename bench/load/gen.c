/* gen.c — seeded arrivals, lengths and prompts for the load generator. */
#include "gen.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
        uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

void load_rng_seed(struct load_rng *rng, uint64_t seed) {
        for (int i = 0; i < 4; i++)
                rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna, prng.di.unimi.it) */
uint64_t load_rng_next(struct load_rng *rng) {
        uint64_t *s = rng->s;
        uint64_t result = rotl(s[1] * 5, 7) * 9;
        uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return result;
}

double load_rng_uniform(struct load_rng *rng) {
        return (double)(load_rng_next(rng) >> 11) * 0x1.0p-53;
}

double load_next_interarrival_s(struct load_rng *rng, double rate_per_s) {
        /* 1 - u is in (0, 1]: log never sees 0 */
        return -log(1.0 - load_rng_uniform(rng)) / rate_per_s;
}

static int parse_uint(const char *s, const char **end, unsigned *ret) {
        char *e;
        errno = 0;
        unsigned long v = strtoul(s, &e, 10);
        if (e == s || errno || v == 0 || v > 1000000 || *s == '-' || *s == '+')
                return -EINVAL;
        *end = e;
        *ret = (unsigned)v;
        return 0;
}

int load_dist_parse(const char *spec, struct load_dist *ret_dist) {
        struct load_dist d = {0};
        const char *p;
        if (!spec)
                return -EINVAL;
        if (!strncmp(spec, "uniform:", 8)) {
                d.kind = LOAD_DIST_UNIFORM;
                if (parse_uint(spec + 8, &p, &d.a) < 0 || *p != ':' || parse_uint(p + 1, &p, &d.b) < 0 ||
                    *p || d.b < d.a)
                        return -EINVAL;
        } else if (!strncmp(spec, "exp:", 4)) {
                d.kind = LOAD_DIST_EXP;
                if (parse_uint(spec + 4, &p, &d.a) < 0)
                        return -EINVAL;
                d.b = d.a * 8;
                if (*p == ':' && (parse_uint(p + 1, &p, &d.b) < 0 || d.b < d.a))
                        return -EINVAL;
                if (*p)
                        return -EINVAL;
        } else {
                d.kind = LOAD_DIST_FIXED;
                if (parse_uint(spec, &p, &d.a) < 0 || *p)
                        return -EINVAL;
                d.b = d.a;
        }
        *ret_dist = d;
        return 0;
}

unsigned load_dist_sample(const struct load_dist *d, struct load_rng *rng) {
        switch (d->kind) {
        case LOAD_DIST_UNIFORM:
                return d->a + (unsigned)(load_rng_uniform(rng) * (double)(d->b - d->a + 1));
        case LOAD_DIST_EXP: {
                double x = 1.0 + load_next_interarrival_s(rng, 1.0) * (double)(d->a - 1);
                return x >= (double)d->b ? d->b : (unsigned)(x + 0.5);
        }
        default:
                return d->a;
        }
}

const char *load_dist_to_string(const struct load_dist *d, char *buf, size_t size) {
        switch (d->kind) {
        case LOAD_DIST_UNIFORM:
                snprintf(buf, size, "uniform:%u:%u", d->a, d->b);
                break;
        case LOAD_DIST_EXP:
                snprintf(buf, size, "exp:%u:%u", d->a, d->b);
                break;
        default:
                snprintf(buf, size, "%u", d->a);
        }
        return buf;
}

static const char *const words[] = {
        "the",   "model", "serves", "tokens", "on",    "many",  "cores", "while", "a",     "steady",
        "tail",  "keeps", "every",  "user",   "happy", "under", "load",  "and",   "noise", "from",
        "other", "jobs",  "cannot", "reach",  "its",   "cache", "lines", "or",    "pages", "again",
        "river", "stone", "light",  "quiet",  "north", "green", "paper", "seven", "table", "orbit",
};

size_t load_prompt_fill(char *buf, size_t size, unsigned n_words, struct load_rng *rng) {
        size_t len = 0;
        if (size == 0)
                return 0;
        buf[0] = 0;
        for (unsigned i = 0; i < n_words; i++) {
                const char *w = words[load_rng_next(rng) % (sizeof words / sizeof words[0])];
                size_t wl = strlen(w) + (i > 0);
                if (len + wl + 1 > size)
                        break;
                if (i > 0)
                        buf[len++] = ' ';
                memcpy(buf + len, w, wl - (i > 0));
                len += wl - (i > 0);
                buf[len] = 0;
        }
        return len;
}
