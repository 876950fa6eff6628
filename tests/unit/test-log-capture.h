/* Captures the engine's log lines during a test: t_log_start() installs a sink that
 * appends every message at `max_level` or more severe to t_log ("message\n" each),
 * t_log_stop() removes it. */
#ifndef TEST_LOG_CAPTURE_H
#define TEST_LOG_CAPTURE_H

#include <stdio.h>
#include <string.h>

#include "dse.h"

static char t_log[16384];

static inline void t_log_collect(enum dse_log_level level, const char *msg, void *user) {
        enum dse_log_level max_level = (enum dse_log_level)(size_t)user;
        size_t n = strlen(t_log);
        if (level <= max_level)
                snprintf(t_log + n, sizeof t_log - n, "%s\n", msg);
}

static inline void t_log_start(enum dse_log_level max_level) {
        t_log[0] = 0;
        dse_log_set(t_log_collect, (void *)(size_t)max_level);
}

static inline void t_log_stop(void) {
        dse_log_set(NULL, NULL);
}

/* Fails the test (t.h) unless the captured log holds `want`. */
#define T_LOG_HAS(want)                                                                                     \
        do {                                                                                                \
                if (!strstr(t_log, (want)))                                                                 \
                        T_FAIL("log \"%s\" lacks \"%s\"", t_log, (want));                                 \
        } while (0)

#endif
