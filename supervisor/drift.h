/* drift.h — output drift between the instances of one model: each instance's recent
 * confidence counts (stats_reply's token_prob_hist and entropy_hist, ipc/PROTOCOL.md
 * minor 5) against the pooled counts of the other instances, by a two-sample
 * Kolmogorov–Smirnov test on the binned distributions, with the asymptotic Kolmogorov
 * p-value. The tokens of one request are not independent draws (they share its prompt
 * and its context, and a long answer would weigh as much as many short ones), so the
 * p-value takes the requests the tokens came from as the sample sizes: a conservative
 * test, which a healthy fleet under steady load does not trip, and which still finds a
 * drift within a minute of a few hundred requests. `dsvisor start` serves one model, so every instance of a supervisor is a peer
 * of every other. Pure: no I/O, no clock (the caller passes the time). */
#ifndef DSV_SUPERVISOR_DRIFT_H
#define DSV_SUPERVISOR_DRIFT_H

#include <stdbool.h>
#include <stdint.h>

#include "dsv_ipc.h"

/* The recent window: counts since a snapshot SUP_DRIFT_WINDOW_S old (while the window has
 * been watched for less: since its oldest snapshot, or at the first update since the
 * worker started), snapshots one a SUP_DRIFT_STEP_S at most. */
#define SUP_DRIFT_WINDOW_S 60
#define SUP_DRIFT_STEP_S 5
#define SUP_DRIFT_SNAPSHOTS (SUP_DRIFT_WINDOW_S / SUP_DRIFT_STEP_S + 1)
/* Fewer sampled tokens or requests than these on either side: no verdict. */
#define SUP_DRIFT_MIN_TOKENS 200
#define SUP_DRIFT_MIN_REQUESTS 20
/* A p-value below it is a drift (the alert's threshold too, deploy/dsvisor-rules.yml). */
#define SUP_DRIFT_ALPHA 0.01
#define SUP_DRIFT_MAX_INSTANCES 256

enum sup_drift_signal {
        SUP_DRIFT_TOKEN_PROB, /* the sampled token's probability */
        SUP_DRIFT_ENTROPY,    /* the entropy of the distribution it was sampled from */
        SUP_DRIFT_SIGNAL_COUNT
};

/* "token_prob", "entropy"; NULL out of range. */
const char *sup_drift_signal_to_string(enum sup_drift_signal s);

struct sup_drift_counts {
        int64_t c[SUP_DRIFT_SIGNAL_COUNT][DSV_IPC_CONFIDENCE_BINS];
        int64_t requests; /* the requests the tokens came from */
};

/* One instance's window (zeroed: empty). */
struct sup_drift_window {
        int n, next; /* snapshots kept, where the next one goes */
        int64_t t_ms[SUP_DRIFT_SNAPSHOTS];
        struct sup_drift_counts snap[SUP_DRIFT_SNAPSHOTS];
        struct sup_drift_counts recent; /* the window's counts after the last update */
};

struct sup_drift_verdict {
        bool valid;   /* both sides had SUP_DRIFT_MIN_TOKENS and SUP_DRIFT_MIN_REQUESTS */
        int64_t n, m; /* tokens in the instance's window, in its peers' */
        int64_t n_requests, m_requests; /* the requests they came from */
        double ks[SUP_DRIFT_SIGNAL_COUNT], pvalue[SUP_DRIFT_SIGNAL_COUNT];
};

/* The Kolmogorov distribution's survival function Q(λ) = 2 Σ_{k≥1} (−1)^(k−1) e^(−2k²λ²),
 * the limit of P(√(nm/(n+m)) D > λ) (scipy.special.kolmogorov). */
double sup_ks_kolmogorov_sf(double lambda);

/* Two-sample KS between counts a and b over the same ordered bins: D, the largest gap
 * between their cumulative shares at a bin's end, and its asymptotic p-value
 * Q(√(nm/(n+m)) D) for sample sizes n and m (≤ 0: the counts' totals). -EINVAL when
 * either side is empty. */
int sup_ks_binned(const int64_t *a, const int64_t *b, int bins, int64_t n, int64_t m, double *ret_d,
                  double *ret_pvalue);

/* Feeds the instance's counts since its worker started (total), read at now_ms; counts
 * that went down (a new worker) restart the window. */
void sup_drift_window_update(struct sup_drift_window *w, int64_t now_ms, const struct sup_drift_counts *total);

/* Each of the n (≤ SUP_DRIFT_MAX_INSTANCES) windows against the pooled others, into
 * ret[n]. A drifting instance would also pull its peers' pools away from them, so the
 * most deviant instance whose p-value (the smaller of its signals') is below
 * SUP_DRIFT_ALPHA keeps its verdict and leaves the pool, and the others are compared
 * again, as long as two or more remain: with three instances or more a drift is pinned
 * on the instances that drift; with two it cannot be, and both carry it. */
void sup_drift_compare(const struct sup_drift_window *const *w, int n, struct sup_drift_verdict *ret);

#endif
