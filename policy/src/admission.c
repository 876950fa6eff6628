/* admission.c — admit, or refuse early with 429/503 and Retry-After.
 *
 * Refusing at the gateway while the queue is full (by its length, or by the wait it
 * promises) keeps the admitted requests' latency bounded; clients and routers (SGLang/vLLM
 * routers retry 429 and 503 with backoff, platform-facts.md §7) come back after
 * Retry-After instead of timing out in a queue. */
#include <errno.h>

#include "dsv_policy.h"

#define RETRY_AFTER_MAX_DEFAULT_S 60
#define RETRY_AFTER_UNAVAILABLE_DEFAULT_S 5

static const char *const verdict_names[DSV_POLICY_VERDICT_COUNT] = {
        [DSV_POLICY_VERDICT_ADMIT] = "admit",
        [DSV_POLICY_VERDICT_BUSY] = "busy",
        [DSV_POLICY_VERDICT_UNAVAILABLE] = "unavailable",
};

const char *dsv_policy_verdict_to_string(enum dsv_policy_verdict v) {
        return v >= 0 && v < DSV_POLICY_VERDICT_COUNT ? verdict_names[v] : NULL;
}

/* ceil(queued / rps) seconds, clamped to [1, max_s]; max_s when the rate is unknown. */
static uint32_t drain_seconds(uint64_t queued, double rps, uint32_t max_s) {
        if (rps <= 0)
                return max_s;
        double s = (double)queued / rps;
        if (s >= (double)max_s)
                return max_s;
        uint32_t whole = (uint32_t)s;
        whole += (double)whole < s;
        return whole < 1 ? 1 : whole;
}

int dsv_policy_admit(const struct dsv_policy_admit_limits *limits, const struct dsv_policy_worker_load *workers,
                     size_t n, int target, double recent_rps, struct dsv_policy_admission *ret) {
        if (!limits || (!workers && n > 0) || !ret || !(recent_rps >= 0) || recent_rps > 1e12)
                return -EINVAL;
        if (target != -EAGAIN && (target < 0 || (size_t)target >= n))
                return -EINVAL;
        uint32_t max_s = limits->retry_after_max_s ? limits->retry_after_max_s : RETRY_AFTER_MAX_DEFAULT_S;
        uint32_t unavailable_s = limits->retry_after_unavailable_s ? limits->retry_after_unavailable_s
                                                                   : RETRY_AFTER_UNAVAILABLE_DEFAULT_S;

        uint64_t total_queued = 0;
        uint32_t n_ready = 0;
        for (size_t i = 0; i < n; i++) {
                total_queued += workers[i].queued_requests;
                n_ready += workers[i].ready;
        }
        if (n_ready == 0) {
                *ret = (struct dsv_policy_admission){DSV_POLICY_VERDICT_UNAVAILABLE, 503, unavailable_s};
                return 0;
        }
        if (target == -EAGAIN || !workers[target].ready)
                return -EINVAL; /* the router never picks an unready worker while one is ready */

        if (limits->max_queue_total && total_queued >= limits->max_queue_total) {
                *ret = (struct dsv_policy_admission){DSV_POLICY_VERDICT_BUSY, 429,
                                                     drain_seconds(total_queued, recent_rps, max_s)};
                return 0;
        }
        const struct dsv_policy_worker_load *w = &workers[target];
        if (limits->max_queue_per_instance && w->queued_requests >= limits->max_queue_per_instance) {
                *ret = (struct dsv_policy_admission){DSV_POLICY_VERDICT_BUSY, 429,
                                                     drain_seconds(w->queued_requests, recent_rps / n_ready, max_s)};
                return 0;
        }
        /* The queue's wait, queued × service time / batch (Little's law at the full
         * batch), against max_queue_wait_pct % of the service time: the service time
         * cancels, and the rule is a queue of that share of the batch. Only a full batch
         * makes a new request wait for a slot; while it fills (after a start or restart)
         * the running count is small and a short queue is requests about to run, which
         * refusing would turn away with slots free. The drain rate over the last seconds
         * would lag a rise in load and refuse a queue the batch needs; the batch is the
         * rate now. */
        uint32_t batch = w->max_batch ? w->max_batch : w->running_seqs;
        if (limits->max_queue_wait_pct && batch > 0 && w->running_seqs >= batch &&
            (uint64_t)w->queued_requests * 100 > (uint64_t)batch * limits->max_queue_wait_pct) {
                *ret = (struct dsv_policy_admission){
                        DSV_POLICY_VERDICT_BUSY, 429,
                        recent_rps > 0 ? drain_seconds(w->queued_requests, recent_rps / n_ready, max_s) : 1};
                return 0;
        }
        *ret = (struct dsv_policy_admission){DSV_POLICY_VERDICT_ADMIT, 0, 0};
        return 0;
}
