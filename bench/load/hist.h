/* hist.h — a latency histogram with bounded relative error, after HdrHistogram.
 *
 *     struct load_hist h;
 *     load_hist_init(&h);
 *     load_hist_record(&h, 1234567);                  // nanoseconds (any uint64 unit)
 *     uint64_t p99 = load_hist_quantile(&h, 0.99);
 *
 * Values are counted in log-linear buckets: below 2*LOAD_HIST_SUB every integer has its
 * own bucket; above, each power of two [2^k, 2^(k+1)) is split into LOAD_HIST_SUB equal
 * buckets. A bucket's width is at most 1/LOAD_HIST_SUB of its lower bound, and a quantile
 * is answered with the bucket's midpoint, so it is within LOAD_HIST_REL_ERR (relative) of
 * the exact order statistic: the sample of rank ceil(q*count). Memory is fixed
 * (LOAD_HIST_BUCKETS counters, 58 KiB) whatever the number of samples, and min, max, mean
 * and standard deviation are exact. The struct is plain caller-owned storage; no locking. */
#ifndef DSV_LOAD_HIST_H
#define DSV_LOAD_HIST_H

#include <stdint.h>

#define LOAD_HIST_SUB_BITS 7
#define LOAD_HIST_SUB (1u << LOAD_HIST_SUB_BITS)                  /* 128 buckets per octave */
#define LOAD_HIST_BUCKETS ((65 - LOAD_HIST_SUB_BITS) * LOAD_HIST_SUB) /* covers all of uint64 */
#define LOAD_HIST_REL_ERR (1.0 / (2.0 * LOAD_HIST_SUB))          /* 0.39% */

struct load_hist {
        uint64_t count;
        uint64_t min, max;
        double sum, sum_sq;  /* for the exact mean and standard deviation */
        uint64_t buckets[LOAD_HIST_BUCKETS];
};

void load_hist_init(struct load_hist *h);
void load_hist_record(struct load_hist *h, uint64_t value);
/* Adds every sample of src to dst. */
void load_hist_merge(struct load_hist *dst, const struct load_hist *src);
/* The value at quantile q in [0, 1] (q = 0.5: median), within LOAD_HIST_REL_ERR; 0 when
 * empty. q <= 0 gives the exact min and q >= 1 the exact max. */
uint64_t load_hist_quantile(const struct load_hist *h, double q);
double load_hist_mean(const struct load_hist *h);
/* Population standard deviation; 0 with fewer than two samples. */
double load_hist_stddev(const struct load_hist *h);

/* Bucket arithmetic, exposed for the tests: the bucket holding v, and a bucket's bounds
 * [lo, lo + width). */
unsigned load_hist_bucket_of(uint64_t v);
uint64_t load_hist_bucket_lo(unsigned idx);
uint64_t load_hist_bucket_width(unsigned idx);

#endif
