/* clock.c — the supervisor's one clock: CLOCK_MONOTONIC, in milliseconds for every
 * deadline, backoff and rate it keeps, in nanoseconds for timing a generation. */
#include <time.h>

#include "sup.h"

int64_t sup_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t sup_now_ms(void) {
        return sup_now_ns() / 1000000;
}
