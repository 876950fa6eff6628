/* sup_notify.c — what the running supervisor tells systemd (sd_notify, Type=notify):
 * READY=1 with the first STATUS= once every instance is ready, STATUS= when it changes,
 * WATCHDOG=1 while the loop runs, STOPPING=1 on stop. Without $NOTIFY_SOCKET each is a
 * no-op. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sup.h"

/* The watchdog timeout while the main thread loads weights at a reload: a large model
 * takes minutes to convert and read, and no WATCHDOG=1 can come meanwhile. */
#define LONG_STEP_WATCHDOG_USEC (3600ull * 1000000)

void sup_notify_setup(struct sup *s) {
        uint64_t wd;
        if (dsv_notify_watchdog_usec(&wd) > 0)
                s->watchdog_usec = wd;
}

void sup_notify_stopping(void) {
        dsv_notify("STOPPING=1\nSTATUS=stopping: draining workers");
}

void sup_notify_tick(struct sup *s, int64_t now, int ready, int failed, int tick_ms) {
        char status[256];
        snprintf(status, sizeof status, "STATUS=%s%d/%d instances ready, %" PRIu64 " restarts%s, http://%s:%d",
                 s->stopping ? "stopping: " : "", ready, s->n, sup_instances_restarts(s->inst, s->n),
                 failed ? ", some failed" : "", s->cfg.host, s->gw_port);
        if (!s->ready_sent && !s->stopping && ready == s->n) {
                char msg[300];
                s->ready_sent = true;
                sup_log(6, "All %d instances ready in %" PRId64 " ms; HTTP on %s:%d", s->n, now - s->started_ms,
                        s->cfg.host, s->gw_port);
                snprintf(msg, sizeof msg, "READY=1\n%s", status);
                dsv_notify(msg);
                snprintf(s->last_status, sizeof s->last_status, "%s", status);
        } else if (strcmp(status, s->last_status) != 0) {
                snprintf(s->last_status, sizeof s->last_status, "%s", status);
                dsv_notify(status);
        }
        /* Pinged one tick early so the gap stays within WATCHDOG_USEC/2. */
        int64_t wd_ms = (int64_t)(s->watchdog_usec / 2000) - tick_ms;
        if (s->watchdog_usec && failed < s->n && now - s->last_watchdog_ms >= (wd_ms > tick_ms ? wd_ms : tick_ms)) {
                dsv_notify("WATCHDOG=1");
                s->last_watchdog_ms = now;
        }
}

void sup_notify_long_step(struct sup *s, const char *what) {
        char msg[384];
        if (what) {
                snprintf(s->last_status, sizeof s->last_status, "STATUS=%s", what);
                if (s->watchdog_usec)
                        snprintf(msg, sizeof msg, "WATCHDOG=1\nWATCHDOG_USEC=%llu\n%s", LONG_STEP_WATCHDOG_USEC,
                                 s->last_status);
                else
                        snprintf(msg, sizeof msg, "%s", s->last_status);
        } else if (s->watchdog_usec) {
                snprintf(msg, sizeof msg, "WATCHDOG=1\nWATCHDOG_USEC=%" PRIu64, s->watchdog_usec);
        } else {
                return;
        }
        dsv_notify(msg);
        s->last_watchdog_ms = dsv_clock_now_ms();
}
