/* When dsvisor-bench-load's drivers send and stop (load.h, struct load_pace). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "load.h"

#define WAIT_MAX_NS (100 * 1000000LL)

int load_pace_start(struct load_pace *p, const struct load_opts *o, const struct load_stats *st) {
        *p = (struct load_pace){.o = o, .st = st, .show = o->progress || (isatty(2) && !o->json)};
        if (o->qps > 0 && !(p->sched = load_schedule_new(o, &p->n_sched)))
                return -ENOMEM;
        p->t0 = p->last_progress = load_now_ns();
        p->send_end = o->duration_s > 0 ? p->t0 + (int64_t)(o->duration_s * LOAD_NS) : INT64_MAX;
        p->hard_end = INT64_MAX;
        return 0;
}

/* More to send: the schedule is not through, or the closed loop's window and count are not. */
static int sending(const struct load_pace *p, int64_t now) {
        if (p->o->qps > 0)
                return p->next < p->n_sched;
        return now < p->send_end && (!p->o->requests || p->st->sent < p->o->requests);
}

int64_t load_pace_due(const struct load_pace *p, int64_t now, unsigned inflight) {
        if (p->o->qps > 0) {
                int64_t at = p->next < p->n_sched ? p->t0 + p->sched[p->next] : INT64_MAX;
                return at <= now && inflight < p->o->max_inflight ? at : -1;
        }
        return sending(p, now) && inflight < p->o->concurrency ? now : -1;
}

void load_pace_sent(struct load_pace *p) {
        if (p->o->qps > 0 && p->next < p->n_sched)
                p->next++;
}

enum load_pace_state load_pace_check(struct load_pace *p, int64_t now, unsigned inflight) {
        enum load_pace_state state = LOAD_PACE_SENDING;
        if (!sending(p, now)) {
                if (p->hard_end == INT64_MAX)
                        p->hard_end = now + (int64_t)(p->o->drain_s * LOAD_NS);
                state = inflight == 0 ? LOAD_PACE_DONE : now >= p->hard_end ? LOAD_PACE_DRAIN_TIMEOUT
                                                                             : LOAD_PACE_DRAINING;
        }
        if (p->show && now - p->last_progress >= LOAD_NS) {
                p->last_progress = now;
                load_progress(p->st, inflight, (double)(now - p->t0) / LOAD_NS, 0);
        }
        return state;
}

/* An arrival already due waits for --max-inflight: for I/O, like no arrival at all. */
int load_pace_wait_ms(const struct load_pace *p, int64_t now) {
        int64_t wake = now + WAIT_MAX_NS;
        if (p->o->qps > 0 && p->next < p->n_sched) {
                int64_t at = p->t0 + p->sched[p->next];
                if (at > now && at < wake)
                        wake = at;
        }
        return (int)((wake - now + 999999) / 1000000);
}

void load_pace_finish(struct load_pace *p, unsigned inflight, int64_t *ret_t0, int64_t *ret_t1) {
        *ret_t0 = p->t0;
        *ret_t1 = load_now_ns();
        if (p->show)
                load_progress(p->st, inflight, (double)(*ret_t1 - p->t0) / LOAD_NS, 1);
        free(p->sched);
        p->sched = NULL;
}
