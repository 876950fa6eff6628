/* Output drift between instances: windows of confidence counts and the two-sample
 * Kolmogorov–Smirnov test over them (drift.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "drift.h"

static const char *const signal_names[SUP_DRIFT_SIGNAL_COUNT] = {
        [SUP_DRIFT_TOKEN_PROB] = "token_prob",
        [SUP_DRIFT_ENTROPY] = "entropy",
};

const char *sup_drift_signal_to_string(enum sup_drift_signal s) {
        return s >= 0 && s < SUP_DRIFT_SIGNAL_COUNT ? signal_names[s] : NULL;
}

double sup_ks_kolmogorov_sf(double lambda) {
        if (!(lambda > 0))
                return 1;
        if (lambda < 1.18) {
                /* The alternating series converges slowly here; the Jacobi theta form of the
                 * CDF, √(2π)/λ Σ_{k≥1} e^(−(2k−1)²π²/(8λ²)), quickly. */
                double y = -M_PI * M_PI / (8 * lambda * lambda), cdf = 0;
                for (int k = 1; k <= 20; k++)
                        cdf += exp((2 * k - 1) * (2 * k - 1) * y);
                cdf *= sqrt(2 * M_PI) / lambda;
                return cdf >= 1 ? 0 : 1 - cdf;
        }
        double q = 0, sign = 1;
        for (int k = 1; k <= 100; k++, sign = -sign) {
                double term = exp(-2.0 * k * k * lambda * lambda);
                q += sign * term;
                if (term < 1e-17)
                        break;
        }
        q *= 2;
        return q < 0 ? 0 : q > 1 ? 1 : q;
}

int sup_ks_binned(const int64_t *a, const int64_t *b, int bins, int64_t n, int64_t m, double *ret_d,
                  double *ret_pvalue) {
        int64_t na = 0, nb = 0;
        for (int i = 0; i < bins; i++) {
                na += a[i];
                nb += b[i];
        }
        if (na <= 0 || nb <= 0)
                return -EINVAL;
        int64_t ca = 0, cb = 0;
        double d = 0;
        for (int i = 0; i < bins; i++) {
                ca += a[i];
                cb += b[i];
                double gap = fabs((double)ca / (double)na - (double)cb / (double)nb);
                if (gap > d)
                        d = gap;
        }
        if (n <= 0)
                n = na;
        if (m <= 0)
                m = nb;
        double en = (double)n * (double)m / (double)(n + m);
        *ret_d = d;
        *ret_pvalue = sup_ks_kolmogorov_sf(sqrt(en) * d);
        return 0;
}

static int64_t counts_sum(const struct sup_drift_counts *c, enum sup_drift_signal s) {
        int64_t t = 0;
        for (int i = 0; i < DSV_IPC_CONFIDENCE_BINS; i++)
                t += c->c[s][i];
        return t;
}

void sup_drift_window_update(struct sup_drift_window *w, int64_t now_ms, const struct sup_drift_counts *total) {
        const struct sup_drift_counts *newest =
                w->n ? &w->snap[(w->next + SUP_DRIFT_SNAPSHOTS - 1) % SUP_DRIFT_SNAPSHOTS] : NULL;
        bool fell = false;
        for (int s = 0; newest && s < SUP_DRIFT_SIGNAL_COUNT; s++)
                for (int i = 0; i < DSV_IPC_CONFIDENCE_BINS; i++)
                        fell |= total->c[s][i] < newest->c[s][i];
        fell |= newest && total->requests < newest->requests;
        if (fell) /* another worker: its counts started again from 0 */
                w->n = w->next = 0;
        /* The baseline: the newest snapshot a window old, else the oldest kept. */
        const struct sup_drift_counts *base = NULL;
        for (int k = 0; k < w->n; k++) {
                int at = (w->next + SUP_DRIFT_SNAPSHOTS - w->n + k) % SUP_DRIFT_SNAPSHOTS;
                if (!base || now_ms - w->t_ms[at] >= (int64_t)SUP_DRIFT_WINDOW_S * 1000)
                        base = &w->snap[at];
        }
        for (int s = 0; s < SUP_DRIFT_SIGNAL_COUNT; s++)
                for (int i = 0; i < DSV_IPC_CONFIDENCE_BINS; i++)
                        w->recent.c[s][i] = total->c[s][i] - (base ? base->c[s][i] : 0);
        w->recent.requests = total->requests - (base ? base->requests : 0);
        int last = (w->next + SUP_DRIFT_SNAPSHOTS - 1) % SUP_DRIFT_SNAPSHOTS;
        if (w->n == 0 || now_ms - w->t_ms[last] >= (int64_t)SUP_DRIFT_STEP_S * 1000) {
                w->t_ms[w->next] = now_ms;
                w->snap[w->next] = *total;
                w->next = (w->next + 1) % SUP_DRIFT_SNAPSHOTS;
                if (w->n < SUP_DRIFT_SNAPSHOTS)
                        w->n++;
        }
}

/* Whether a window holds enough for a verdict of its own. */
static bool judgeable(const struct sup_drift_counts *c) {
        return counts_sum(c, SUP_DRIFT_TOKEN_PROB) >= SUP_DRIFT_MIN_TOKENS && c->requests >= SUP_DRIFT_MIN_REQUESTS;
}

/* Instance i against the pooled windows of the others not excluded. An instance too new
 * to be judged is no reference either: while it cannot leave the pool as a drifting one
 * would, its few tokens could make its peers look drifted. */
static struct sup_drift_verdict verdict(const struct sup_drift_window *const *w, int n, int i, const bool *excluded) {
        struct sup_drift_counts peers = {0};
        for (int j = 0; j < n; j++) {
                if (j == i || excluded[j] || !judgeable(&w[j]->recent))
                        continue;
                peers.requests += w[j]->recent.requests;
                for (int s = 0; s < SUP_DRIFT_SIGNAL_COUNT; s++)
                        for (int b = 0; b < DSV_IPC_CONFIDENCE_BINS; b++)
                                peers.c[s][b] += w[j]->recent.c[s][b];
        }
        struct sup_drift_verdict v = {.n = counts_sum(&w[i]->recent, SUP_DRIFT_TOKEN_PROB),
                                      .m = counts_sum(&peers, SUP_DRIFT_TOKEN_PROB),
                                      .n_requests = w[i]->recent.requests,
                                      .m_requests = peers.requests};
        v.valid = judgeable(&w[i]->recent) && judgeable(&peers);
        for (int s = 0; v.valid && s < SUP_DRIFT_SIGNAL_COUNT; s++)
                v.valid = sup_ks_binned(w[i]->recent.c[s], peers.c[s], DSV_IPC_CONFIDENCE_BINS, v.n_requests,
                                        v.m_requests, &v.ks[s], &v.pvalue[s]) == 0;
        return v;
}

static double verdict_max(const struct sup_drift_verdict *v, bool pvalue_min) {
        double x = pvalue_min ? v->pvalue[0] : v->ks[0];
        for (int s = 1; s < SUP_DRIFT_SIGNAL_COUNT; s++)
                x = pvalue_min ? fmin(x, v->pvalue[s]) : fmax(x, v->ks[s]);
        return x;
}

void sup_drift_compare(const struct sup_drift_window *const *w, int n, struct sup_drift_verdict *ret) {
        bool excluded[SUP_DRIFT_MAX_INSTANCES] = {0};
        int left = n;
        for (;;) {
                int worst = -1;
                for (int i = 0; i < n; i++) {
                        if (excluded[i])
                                continue;
                        ret[i] = verdict(w, n, i, excluded);
                        if (ret[i].valid && verdict_max(&ret[i], true) < SUP_DRIFT_ALPHA &&
                            (worst < 0 || verdict_max(&ret[i], false) > verdict_max(&ret[worst], false)))
                                worst = i;
                }
                /* Leaving two or more to compare among themselves, the most deviant keeps its
                 * verdict and leaves the others' pool. */
                if (worst < 0 || left - 1 < 2)
                        return;
                excluded[worst] = true;
                left--;
        }
}
