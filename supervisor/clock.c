/* clock.c — the supervisor's one clock: CLOCK_MONOTONIC in milliseconds, for every
 * deadline, backoff and rate it keeps. */
#include <time.h>

#include "sup.h"

int64_t sup_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
