/* drift_watch.c — output drift between the running instances: their workers' confidence
 * counts, as the gateway's stats polling last saw them, through drift.h's windows and
 * peer comparison. */
#include <string.h>

#include "dsv_gateway.h"
#include "sup.h"

_Static_assert(SUP_MAX_INSTANCES <= SUP_DRIFT_MAX_INSTANCES, "every instance is compared");

void sup_drift_refresh(struct sup *s, int64_t now_ms) {
        const struct sup_drift_window *w[SUP_MAX_INSTANCES];
        for (int i = 0; i < s->n; i++) {
                struct dsv_gateway_instance_stats gs;
                if (s->env.gw && dsv_gateway_instance_stats(s->env.gw, s->inst[i].gw_id, &gs) == 0 &&
                    gs.worker_reported) {
                        struct sup_drift_counts total;
                        memcpy(total.c[SUP_DRIFT_TOKEN_PROB], gs.token_prob_hist, sizeof gs.token_prob_hist);
                        memcpy(total.c[SUP_DRIFT_ENTROPY], gs.entropy_hist, sizeof gs.entropy_hist);
                        total.requests = gs.confidence_requests;
                        sup_drift_window_update(&s->drift[i], now_ms, &total);
                }
                w[i] = &s->drift[i];
        }
        sup_drift_compare(w, s->n, s->drift_verdict);
}
