/* The benches' qsort order for samples (timings, ratios): ascending doubles. */
#ifndef DSV_BENCH_SORT_H
#define DSV_BENCH_SORT_H

static inline int bench_cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

#endif
