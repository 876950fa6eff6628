/* The clocks and the seeded generator every benchmark uses, so that two benches measure
 * and fill alike. Header-only: the benches are separate programs. */
#ifndef DSV_BENCH_CLOCK_H
#define DSV_BENCH_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Seconds on `clock` (CLOCK_MONOTONIC for wall time, CLOCK_PROCESS_CPUTIME_ID or
 * CLOCK_THREAD_CPUTIME_ID for CPU time, which a shared host's other jobs do not inflate). */
static inline double bench_clock_s(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double bench_now_s(void) { return bench_clock_s(CLOCK_MONOTONIC); }

/* Marsaglia's xorshift64: fixed seeds give every run the same inputs. */
static inline uint64_t bench_xorshift64(uint64_t *state) {
        uint64_t x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *state = x;
}

#endif
