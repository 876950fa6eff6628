/* The grouped linear call (dse__linear_group): several weight products of one forward
 * step run in one parallel region of the session's pool, their rows laid end to end and
 * cut into pieces by a cost model (weight bytes streamed plus the tokens' multiply-adds),
 * with the int8 activations each distinct input needs quantized once. dse__linear and
 * dse__linear_n are its one-product forms, dse__swiglu_mlp the MLP built on it. */
#include <assert.h>
#include <stdatomic.h>

#include "model/forward.h"

/* Rows of one item a thread takes are rounded to this: the SIMD kernels block rows (4 to
 * 16 at a time), so a split inside a block would only cost a tail. */
#define ROW_ALIGN 16

/* Pieces of work per thread a grouped call is cut into. Threads claim pieces from a
 * shared counter (dse_pool_run_shared) rather than taking one static share each: on a
 * shared or oversubscribed machine a thread that loses its CPU leaves its pieces to the
 * others, and one that is not running when the call starts does not delay it at all.
 * A call of one token per item (batch-1 decode) is cut into one piece per thread
 * instead: it streams weights, and each piece restarts its streams (and the hardware
 * prefetchers' ramp), which costs more than the uneven halves the single share leaves
 * (stealing from the back of the other thread's share did not win that back). Batched
 * calls keep 8: they are compute-bound, and a core that loses time to its host then
 * gives pieces away. */
#define PIECES_PER_THREAD 8

struct group_job {
        struct dse_session *s;
        struct dse__mm *mm;
        int n_mm;
        int64_t total_cost;
        int n_pieces;
        _Atomic int next; /* the next piece to claim */
};

/* Row r of an item (0 <= r <= rows) rounded up to ROW_ALIGN, capped at rows. */
static int64_t align_row(int64_t r, int64_t rows) {
        r = (r + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
        return r < rows ? r : rows;
}

/* The first row of item m whose start cost is >= c (0..rows). */
static int64_t row_at_cost(const struct dse__mm *m, int64_t c) {
        if (c <= m->cost0)
                return 0;
        int64_t r = (c - m->cost0 + m->row_cost - 1) / m->row_cost;
        return align_row(r, m->w->rows);
}

static void mm_rows(const struct dse_session *s, const struct dse__mm *m, int64_t r0, int64_t r1) {
        if (m->xq)
                s->k.matmul_xq[m->w->dtype](m->w, m->xq, m->y, m->ldy, r0, r1);
        else
                s->k.matmul[m->w->dtype](m->w, m->x, m->ldx, m->n, m->y, m->ldy, r0, r1);
        if (m->w_up) { /* SwiGLU pair: r0 is a multiple of ROW_ALIGN, so a SIMD swiglu
                        * splits its vectors where a whole-row call would */
                if (m->xq)
                        s->k.matmul_xq[m->w_up->dtype](m->w_up, m->xq, m->y_up, m->ldy, r0, r1);
                else
                        s->k.matmul[m->w_up->dtype](m->w_up, m->x, m->ldx, m->n, m->y_up, m->ldy, r0, r1);
                for (int64_t t = 0; t < m->n; t++)
                        s->k.swiglu(m->y + t * m->ldy + r0, m->y_up + t * m->ldy + r0, r1 - r0);
                return;
        }
        if (m->bias)
                for (int64_t t = 0; t < m->n; t++) {
                        float *y = m->y + t * m->ldy;
                        for (int64_t r = r0; r < r1; r++)
                                y[r] += m->bias[r];
                }
}

/* Piece p of np: the cost range [total*p/np, total*(p+1)/np) of the items laid end to
 * end. Neighbouring pieces compute the same boundary, so the rows are covered exactly
 * once. */
static void group_piece(const struct group_job *j, int p, int np) {
        int64_t lo = j->total_cost * p / np, hi = j->total_cost * (p + 1) / np;
        for (int i = 0; i < j->n_mm; i++) {
                const struct dse__mm *m = &j->mm[i];
                if (m->row_cost == 0)
                        continue; /* ran on its own */
                int64_t end = m->cost0 + m->row_cost * m->w->rows;
                if (end <= lo || m->cost0 >= hi)
                        continue;
                int64_t r0 = row_at_cost(m, lo), r1 = p + 1 == np ? m->w->rows : row_at_cost(m, hi);
                if (r0 < r1)
                        mm_rows(j->s, m, r0, r1);
        }
}

static void group_task(void *ctx, int ith, int nth) {
        struct group_job *j = ctx;
        (void)ith;
        (void)nth;
        int p;
        while ((p = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_pieces)
                group_piece(j, p, j->n_pieces);
}

/* Estimated cost of one row of w for n tokens: the weight bytes streamed once, plus the
 * multiply-adds of every token (int8 or float), in the same rough unit. */
static int64_t row_cost(const struct dse__mm *m) {
        int64_t c = m->w->cols, bytes;
        switch (m->w->dtype) {
        case DSE_DTYPE_Q4: bytes = c / 2; break;
        case DSE_DTYPE_Q8:
        case DSE_DTYPE_F8_E4M3: bytes = c; break;
        case DSE_DTYPE_F16:
        case DSE_DTYPE_BF16: bytes = 2 * c; break;
        default: bytes = 4 * c; break;
        }
        return (4 * bytes + m->n * c / (m->xq ? 4 : 1) + 1) * (m->w_up ? 2 : 1);
}

void dse__linear_group(struct dse_session *s, struct dse__mm *mm, int n_mm) {
        struct dse_xq xq[DSE__LINEAR_SLOTS];
        int n_xq = 0;
        int64_t total = 0;
        for (int i = 0; i < n_mm; i++) {
                struct dse__mm *m = &mm[i];
                m->row_cost = 0;
                if (m->w->perm || (m->w_up && m->w_up->perm)) { /* act-order: its own gathered x and region */
                        assert(m->x);
                        dse__linear_n(s, m->w, m->x, m->ldx, m->n, m->y, m->ldy, m->bias);
                        if (m->w_up) {
                                dse__linear_n(s, m->w_up, m->x, m->ldx, m->n, m->y_up, m->ldy, NULL);
                                for (int64_t t = 0; t < m->n; t++)
                                        s->k.swiglu(m->y + t * m->ldy, m->y_up + t * m->ldy, m->w->rows);
                        }
                        continue;
                }
                assert(!m->w_up || (m->w_up->dtype == m->w->dtype && m->w_up->rows == m->w->rows &&
                                    m->w_up->cols == m->w->cols && !m->bias));
                if (!dse__use_xq(s, m->w)) {
                        assert(m->x); /* float activations for weights without an int8 path */
                        m->xq = NULL;
                } else if (!m->xq) { /* quantize, unless an earlier item had the same input */
                        int slot = -1;
                        for (int p = 0; p < i && slot < 0; p++)
                                if (mm[p].xq >= xq && mm[p].xq < xq + n_xq && mm[p].x == m->x && mm[p].ldx == m->ldx &&
                                    mm[p].n == m->n && mm[p].w->cols == m->w->cols)
                                        slot = (int)(mm[p].xq - xq);
                        if (slot < 0) {
                                assert(n_xq < DSE__LINEAR_SLOTS && m->n <= DSE__MAX_STEP_TOKENS &&
                                       m->w->cols <= s->w->max_cols);
                                slot = n_xq++;
                                dse__xq_init(&xq[slot], s->xq_mem[slot], m->n, m->w->cols);
                                s->k.quantize_xq(m->x, m->ldx, &xq[slot]);
                        }
                        m->xq = &xq[slot];
                }
                m->cost0 = total;
                m->row_cost = row_cost(m);
                total += m->row_cost * m->w->rows;
        }
        if (total == 0)
                return;
        if (!s->pool) {
                struct group_job job = {.s = s, .mm = mm, .n_mm = n_mm, .total_cost = total};
                group_piece(&job, 0, 1);
                return;
        }
        int one_token = 1;
        for (int i = 0; i < n_mm; i++)
                one_token &= mm[i].row_cost == 0 || mm[i].n == 1;
        /* a 1-thread pool runs the call inline, in one piece (through the pool, which
         * counts its time when asked) */
        struct group_job job = {.s = s, .mm = mm, .n_mm = n_mm, .total_cost = total,
                                .n_pieces = s->n_threads == 1 ? 1
                                                              : s->n_threads * (one_token ? 1 : PIECES_PER_THREAD)};
        atomic_init(&job.next, 0);
        dse_pool_run_shared(s->pool, group_task, &job);
}

void dse__linear_n(struct dse_session *s, const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                   int64_t ldy, const float *bias) {
        struct dse_qmat wg;
        if (w->perm) { /* act-order: stored column j multiplies x[perm[j]]; gathered, W is plain */
                for (int64_t t = 0; t < n; t++)
                        for (int64_t j = 0; j < w->cols; j++)
                                s->xperm[t * w->cols + j] = x[t * ldx + w->perm[j]];
                x = s->xperm;
                ldx = w->cols;
                wg = *w;
                wg.perm = NULL;
                w = &wg;
        }
        struct dse__mm m = {.w = w, .x = x, .ldx = ldx, .n = n, .y = y, .ldy = ldy, .bias = bias};
        dse__linear_group(s, &m, 1);
}

void dse__linear(struct dse_session *s, const struct dse_qmat *w, const float *x, float *y, const float *bias) {
        dse__linear_n(s, w, x, 0, 1, y, 0, bias);
}

void dse__swiglu_mlp(struct dse_session *s, const struct dse__mlp *m, const float *x, int64_t n, float *hb,
                     float *hb2, int64_t ldh, float *out) {
        int64_t D = s->hp->hidden_size;
        struct dse__mm gu = {.w = &m->gate, .w_up = &m->up, .x = x, .ldx = D, .n = n, .y = hb, .y_up = hb2, .ldy = ldh};
        dse__linear_group(s, &gu, 1); /* hb = silu(gate) * up */
        dse__linear_n(s, &m->down, hb, ldh, n, out, D, NULL);
}
