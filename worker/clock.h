/* The worker's clocks: CLOCK_MONOTONIC for durations and uptime, CLOCK_REALTIME for
 * request deadlines (the wire carries them as Unix milliseconds) and for the serve
 * loop's condition variable (pthread's default clock), CLOCK_THREAD_CPUTIME_ID for
 * what a step costs the thread that runs it. */
#ifndef DSV_WORKER_CLOCK_H
#define DSV_WORKER_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic seconds since an arbitrary start. */
double worker_mono_s(void);
/* CPU seconds the calling thread has run: time the host gave to other processes
 * meanwhile is not in it. */
double worker_thread_cpu_s(void);
/* Unix time in milliseconds. */
int64_t worker_realtime_ms(void);
/* The CLOCK_REALTIME instant ms milliseconds from now, for pthread_cond_timedwait. */
struct timespec worker_realtime_after_ms(int ms);

#endif
