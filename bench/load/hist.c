/* hist.c — log-linear latency histogram (see hist.h for the error bound). */
#include "hist.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void load_hist_init(struct load_hist *h) {
        memset(h, 0, sizeof *h);
        h->min = UINT64_MAX;
}

/* Octave 0 holds [0, 2*SUB) one integer per bucket; octave s >= 1 holds
 * [SUB << s, SUB << (s+1)) in SUB buckets of width 2^s. */
unsigned load_hist_bucket_of(uint64_t v) {
        if (v < 2 * (uint64_t)LOAD_HIST_SUB)
                return (unsigned)v;
        unsigned top = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS + 1 */
        unsigned shift = top - LOAD_HIST_SUB_BITS;
        return (shift + 1) * LOAD_HIST_SUB + (unsigned)((v >> shift) - LOAD_HIST_SUB);
}

uint64_t load_hist_bucket_width(unsigned idx) {
        assert(idx < LOAD_HIST_BUCKETS);
        if (idx < 2 * LOAD_HIST_SUB)
                return 1;
        return (uint64_t)1 << (idx / LOAD_HIST_SUB - 1);
}

uint64_t load_hist_bucket_lo(unsigned idx) {
        assert(idx < LOAD_HIST_BUCKETS);
        if (idx < 2 * LOAD_HIST_SUB)
                return idx;
        unsigned shift = idx / LOAD_HIST_SUB - 1;
        return ((uint64_t)LOAD_HIST_SUB + idx % LOAD_HIST_SUB) << shift;
}

void load_hist_record(struct load_hist *h, uint64_t value) {
        h->buckets[load_hist_bucket_of(value)]++;
        h->count++;
        if (value < h->min)
                h->min = value;
        if (value > h->max)
                h->max = value;
        h->sum += (double)value;
        h->sum_sq += (double)value * (double)value;
}

void load_hist_merge(struct load_hist *dst, const struct load_hist *src) {
        for (unsigned i = 0; i < LOAD_HIST_BUCKETS; i++)
                dst->buckets[i] += src->buckets[i];
        dst->count += src->count;
        if (src->min < dst->min)
                dst->min = src->min;
        if (src->max > dst->max)
                dst->max = src->max;
        dst->sum += src->sum;
        dst->sum_sq += src->sum_sq;
}

uint64_t load_hist_quantile(const struct load_hist *h, double q) {
        if (h->count == 0)
                return 0;
        if (q <= 0)
                return h->min;
        if (q >= 1)
                return h->max;
        uint64_t rank = (uint64_t)ceil(q * (double)h->count); /* 1-based */
        if (rank < 1)
                rank = 1;
        uint64_t seen = 0;
        for (unsigned i = 0; i < LOAD_HIST_BUCKETS; i++) {
                seen += h->buckets[i];
                if (seen >= rank) {
                        uint64_t mid = load_hist_bucket_lo(i) + load_hist_bucket_width(i) / 2;
                        /* the exact extremes are known: never answer outside them */
                        return mid < h->min ? h->min : mid > h->max ? h->max : mid;
                }
        }
        return h->max;
}

double load_hist_mean(const struct load_hist *h) {
        return h->count ? h->sum / (double)h->count : 0;
}

double load_hist_stddev(const struct load_hist *h) {
        if (h->count < 2)
                return 0;
        double mean = h->sum / (double)h->count;
        double var = h->sum_sq / (double)h->count - mean * mean;
        return var > 0 ? sqrt(var) : 0;
}
