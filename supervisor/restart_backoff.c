/* restart_backoff.c — when a worker that exited starts again: exponential backoff with
 * a crash-loop limit, on a caller-supplied clock. */
#include <errno.h>
#include <string.h>

#include "sup.h"

void sup_backoff_init(struct sup_backoff *b, int min_ms, int max_ms, int limit, int window_ms) {
        memset(b, 0, sizeof *b);
        b->min_ms = min_ms;
        b->max_ms = max_ms;
        b->limit = limit < 64 ? limit : 63;
        b->window_ms = window_ms;
        b->healthy_reset_ms = 60000; /* supervisord/s6 practice: a minute up means it recovered */
        b->next_delay_ms = 0;
}

int sup_backoff_on_exit(struct sup_backoff *b, int64_t now_ms, int64_t up_since_ms) {
        /* Forget exits that left the window. */
        int k = 0;
        for (int i = 0; i < b->n_recent; i++)
                if (now_ms - b->recent[i] < b->window_ms)
                        b->recent[k++] = b->recent[i];
        b->n_recent = k;
        if (b->n_recent < (int)(sizeof b->recent / sizeof b->recent[0]))
                b->recent[b->n_recent++] = now_ms;
        if (b->n_recent > b->limit)
                return -ELOOP;
        /* The first exit restarts at once: a one-off crash should cost a restart, not a
         * restart plus a delay (the weights stay in the memfd, so a restart is cheap).
         * Only exits that follow it wait, from min_ms doubling up to max_ms. */
        if (up_since_ms >= 0 && now_ms - up_since_ms >= b->healthy_reset_ms)
                b->next_delay_ms = 0;
        int delay = b->next_delay_ms;
        b->next_delay_ms = delay == 0 ? b->min_ms : delay > b->max_ms / 2 ? b->max_ms : delay * 2;
        return delay < b->max_ms ? delay : b->max_ms;
}
