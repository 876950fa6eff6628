/* clock.c — dsvisor's one clock: CLOCK_MONOTONIC, in milliseconds for every deadline,
 * backoff and rate the supervisor and this library keep, in nanoseconds for timing. */
#include <time.h>

#include "dsv_platform.h"

int64_t dsv_clock_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dsv_clock_now_ms(void) {
        return dsv_clock_now_ns() / 1000000;
}
