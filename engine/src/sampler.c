/* Token sampler: greedy, temperature, top-k, top-p, min-p and a seeded draw (see dse.h).
 *
 * The filters follow transformers' logits warpers (TemperatureLogitsWarper,
 * TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper, in that order): top-k keeps every
 * token whose logit is at least the k-th largest (ties at the boundary stay), top-p
 * keeps the most likely tokens until their probability reaches top_p (at least one),
 * min-p keeps tokens with p >= min_p * p_max. The generator is xoshiro256** seeded
 * through splitmix64 (Blackman and Vigna), so a seed gives the same ids everywhere. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct cand {
        float z; /* logit / temperature */
        int32_t id;
};

struct dse_sampler {
        struct dse_sampler_params params;
        int n_vocab;
        uint64_t rng[4];
        struct cand *cands; /* (n_vocab) scratch */
        double *probs;      /* (n_vocab) scratch */
};

void dse_sampler_params_default(struct dse_sampler_params *params) {
        *params = (struct dse_sampler_params){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
}

static uint64_t splitmix64(uint64_t *x) {
        uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro256ss(uint64_t s[4]) {
        uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform(uint64_t s[4]) {
        return (double)(xoshiro256ss(s) >> 11) * 0x1.0p-53;
}

int dse_sampler_new(const struct dse_sampler_params *params, int n_vocab, struct dse_sampler **ret_sampler,
                    struct dse_diag *reterr) {
        if (!params || !ret_sampler)
                return -EINVAL;
        if (n_vocab < 1)
                return dse__fail(reterr, -EINVAL, "sampler: vocabulary size %d", n_vocab);
        if (isnan(params->temperature) || isinf(params->temperature))
                return dse__fail(reterr, -EINVAL, "sampler: temperature must be a finite number");
        if (!(params->top_p > 0.0f)) /* also rejects NaN; >= 1 means off */
                return dse__fail(reterr, -EINVAL, "sampler: top-p %g outside (0, 1]", (double)params->top_p);
        if (isnan(params->min_p) || params->min_p > 1.0f)
                return dse__fail(reterr, -EINVAL, "sampler: min-p %g outside [0, 1]", (double)params->min_p);
        struct dse_sampler *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->params = *params;
        s->n_vocab = n_vocab;
        s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
        s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
        if (!s->cands || !s->probs) {
                dse_sampler_free(s);
                return -ENOMEM;
        }
        uint64_t x = params->seed;
        for (int i = 0; i < 4; i++)
                s->rng[i] = splitmix64(&x);
        *ret_sampler = s;
        return 0;
}

void dse_sampler_free(struct dse_sampler *smp) {
        if (!smp)
                return;
        free(smp->cands);
        free(smp->probs);
        free(smp);
}

/* Descending by logit, ascending id on ties: a total order, so results never depend on
 * the sort's stability. */
static int cand_cmp(const void *x, const void *y) {
        const struct cand *a = x, *b = y;
        if (a->z != b->z)
                return a->z > b->z ? -1 : 1;
        return (a->id > b->id) - (a->id < b->id);
}

/* Heapsort by cand_cmp: in place, because glibc's qsort may malloc a merge buffer and
 * sampling must not allocate (the worker's per-token path). cand_cmp is a total order,
 * so the result is the one any correct sort gives. */
static void cand_sift(struct cand *c, int n, int i) {
        for (;;) {
                int l = 2 * i + 1, r = l + 1, m = i;
                if (l < n && cand_cmp(&c[l], &c[m]) > 0)
                        m = l;
                if (r < n && cand_cmp(&c[r], &c[m]) > 0)
                        m = r;
                if (m == i)
                        return;
                struct cand t = c[i];
                c[i] = c[m];
                c[m] = t;
                i = m;
        }
}

static void cand_sort(struct cand *c, int n) {
        for (int i = n / 2 - 1; i >= 0; i--)
                cand_sift(c, n, i);
        for (int end = n - 1; end > 0; end--) {
                struct cand t = c[0];
                c[0] = c[end];
                c[end] = t;
                cand_sift(c, end, 0);
        }
}

static int argmax(const float *logits, int n) {
        int best = -1;
        for (int i = 0; i < n; i++)
                if (!isnan(logits[i]) && logits[i] != -INFINITY && (best < 0 || logits[i] > logits[best]))
                        best = i;
        return best < 0 ? -EINVAL : best;
}

/* Sift-down in a min-heap of n doubles. */
static void heap_sift(double *h, int n, int i) {
        for (;;) {
                int l = 2 * i + 1, r = l + 1, m = i;
                if (l < n && h[l] < h[m])
                        m = l;
                if (r < n && h[r] < h[m])
                        m = r;
                if (m == i)
                        return;
                double t = h[i];
                h[i] = h[m];
                h[m] = t;
                i = m;
        }
}

/* The k-th largest z among n candidates (1 <= k <= n): a size-k min-heap, O(n log k). */
static double kth_largest(const struct cand *c, int n, int k, double *heap) {
        for (int i = 0; i < k; i++)
                heap[i] = c[i].z;
        for (int i = k / 2 - 1; i >= 0; i--)
                heap_sift(heap, k, i);
        for (int i = k; i < n; i++)
                if (c[i].z > heap[0]) {
                        heap[0] = c[i].z;
                        heap_sift(heap, k, 0);
                }
        return heap[0];
}

/* The filtered distribution of logits, for temperature > 0: its n tokens in
 * smp->cands with their unnormalised weights in smp->probs (the largest is 1), sorted by
 * cand_cmp when a filter needed the order; returns n (>= 1) with the weights' sum in
 * *ret_sum, or -EINVAL when every logit is NaN or -inf. Sampling draws from this, and
 * dse_sampler_probs spreads it over the vocabulary, so both see the same distribution. */
static int filter(struct dse_sampler *smp, const float *logits, double *ret_sum) {
        const struct dse_sampler_params *p = &smp->params;
        int n_vocab = smp->n_vocab;

        /* Temperature, dropping NaN and -inf. */
        struct cand *c = smp->cands;
        int n = 0;
        float inv_t = 1.0f / p->temperature;
        for (int i = 0; i < n_vocab; i++)
                if (!isnan(logits[i]) && logits[i] != -INFINITY)
                        c[n++] = (struct cand){logits[i] * inv_t, i};
        if (n == 0)
                return -EINVAL;

        int sorted = 0;
        if (p->top_k > 0 && p->top_k < n) {
                double kth = kth_largest(c, n, p->top_k, smp->probs);
                int m = 0;
                for (int i = 0; i < n; i++)
                        if (c[i].z >= kth) /* ties with the k-th value stay, as in transformers */
                                c[m++] = c[i];
                n = m;
                cand_sort(c, n);
                sorted = 1;
        }
        if (p->top_p < 1.0f && !sorted) {
                cand_sort(c, n);
                sorted = 1;
        }

        /* Softmax over what is left. */
        float zmax = c[0].z;
        if (!sorted)
                for (int i = 1; i < n; i++)
                        zmax = c[i].z > zmax ? c[i].z : zmax;
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
                smp->probs[i] = exp((double)c[i].z - (double)zmax);
                sum += smp->probs[i];
        }

        if (p->top_p < 1.0f) {
                double cum = 0.0, target = (double)p->top_p * sum;
                int keep = n;
                for (int i = 0; i < n; i++) {
                        cum += smp->probs[i];
                        if (cum >= target) {
                                keep = i + 1;
                                break;
                        }
                }
                n = keep;
                sum = 0.0;
                for (int i = 0; i < n; i++)
                        sum += smp->probs[i];
        }
        if (p->min_p > 0.0f) {
                /* p_max is exp(0) = 1 in these unnormalised weights. */
                double floor_w = (double)p->min_p;
                int m = 0;
                double kept = 0.0;
                for (int i = 0; i < n; i++)
                        if (smp->probs[i] >= floor_w) {
                                c[m] = c[i];
                                smp->probs[m++] = smp->probs[i];
                                kept += smp->probs[i];
                        }
                n = m;
                sum = kept;
        }
        *ret_sum = sum;
        return n;
}

int dse_sampler_sample(struct dse_sampler *smp, const float *logits) {
        if (!smp || !logits)
                return -EINVAL;
        if (smp->params.temperature <= 0.0f)
                return argmax(logits, smp->n_vocab);
        double sum = 0.0;
        int n = filter(smp, logits, &sum);
        if (n < 0)
                return n;
        const struct cand *c = smp->cands;
        double u = uniform(smp->rng) * sum, acc = 0.0;
        for (int i = 0; i < n; i++) {
                acc += smp->probs[i];
                if (u < acc)
                        return c[i].id;
        }
        return c[n - 1].id; /* u rounded up to the total */
}

int dse_sampler_probs(struct dse_sampler *smp, const float *logits, float *probs) {
        if (!smp || !logits || !probs)
                return -EINVAL;
        memset(probs, 0, (size_t)smp->n_vocab * sizeof *probs);
        if (smp->params.temperature <= 0.0f) {
                int best = argmax(logits, smp->n_vocab);
                if (best >= 0)
                        probs[best] = 1.0f;
                return best < 0 ? best : 1;
        }
        double sum = 0.0;
        int n = filter(smp, logits, &sum);
        for (int i = 0; i < n; i++)
                probs[smp->cands[i].id] = (float)(smp->probs[i] / sum);
        return n;
}

double dse_sampler_uniform_at(const struct dse_sampler *smp, uint64_t counter, uint32_t lane) {
        /* splitmix64's increment keeps (seed, counter, lane) triples apart; two rounds of
         * its finaliser mix them into an independent-looking 64-bit value */
        uint64_t x = smp->params.seed ^ (counter * 0xD1B342EC6F1BC23Full + (uint64_t)lane * 0x9FB21C651E98DF25ull);
        splitmix64(&x);
        return (double)(splitmix64(&x) >> 11) * 0x1.0p-53;
}
