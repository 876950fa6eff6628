/* Attention of queries over a sequence's cached rows, as the forward passes call it: the
 * short form (dse__attend: scores, softmax, weighted rows) and, for queries over more
 * than the session's split of positions, the split form (dse__attend_long): the positions
 * cut into chunks of `split`, each chunk's softmax partial (its maximum score m, the sum
 * l of exp(score - m), and o = the rows weighted by exp(score - m), not yet divided by l:
 * the softmax kernel's first two passes) computed on whichever thread claims it, then
 * the partials of a query merged in chunk order:
 *     out = sum_c e_c o_c / sum_c e_c l_c,  e_c = exp(m_c - M),  M = max_c m_c
 * (flash-decoding). The queries that read the same rows (a GQA KV head's query heads) go
 * together, a pair: a chunk of their rows is read from memory once for all of them, so a
 * decoded token reads each KV row once, and the work is cut by chunks, not heads, over
 * the threads. A query's chunks depend only on its own position count, and its merge
 * only on its own partials, so its result does not depend on the other queries of the
 * call, on how the calls were cut, nor on the thread count; the split and short forms
 * agree within float32 rounding. The rows are read in the cache's stored type. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "model/forward.h"

struct dse__attn_split {
        int32_t cap;         /* query partials of one wave */
        int32_t max_q;       /* queries of one pair at most (the model's n_heads) */
        int64_t v_max;       /* floats of one partial's o */
        float *o;            /* (cap, v_max) */
        float *ml;           /* (cap, 2) m, l */
        float *att;          /* (n_threads, max_q * DSE__ATTN_SPLIT) a chunk's scores */
        int32_t *item_pair;  /* (cap) the wave's pair of each chunk item ... */
        int32_t *item_chunk; /* ... its chunk ... */
        int32_t *item_slot;  /* ... and its queries' first partial */
        int32_t *pair_first; /* (cap + 1) a wave's pairs: their first item */
};

/* Over positions [t0, t1), a KV-block run at a time, for n_x queries: the scores y[g *
 * ldy + t - t0] = scale * x_g . row_t[off .. off + len) (accum 0; x_g = x + g * ldx), or
 * y[g * ldy ..] += sum_t x[g * ldx + t - t0] row_t[off .. off + len) (accum 1); the
 * elements lie in one plane of the rows (a head's K or V, an MLA row). */
static void rows_range(const struct dse_session *s, const struct dse__kv_view *kv, int l, int32_t t0, int32_t t1,
                       const float *x, int64_t ldx, int n_x, int64_t off, int64_t len, float scale, float *y,
                       int64_t ldy, int accum) {
        int64_t ldf = kv->plane_bytes / (int64_t)sizeof(float);
        struct dse_kv_rows rows = {.ld = kv->plane_bytes, .scale_off = kv->scale_off, .group = kv->group};
        int32_t plane = (int32_t)(off / kv->plane_floats), r;
        off %= kv->plane_floats; /* [off, off + len) lies in one plane */
        for (int32_t t = t0; t < t1; t += r) {
                r = dse__kv_run(kv, t, t1);
                rows.rows = dse__kv_plane_row(kv, l, t, plane);
                const float *f32 = (const float *)rows.rows + off;
                if (kv->dtype == DSE_KV_BF16) {
                        /* the scores on vdpbf16ps where the CPU has it: the queries then
                         * take the rounding the cache already put on the keys */
                        if (accum)
                                s->k.attn_accum_group_bf16(x + (t - t0), ldx, n_x, &rows, off, r, len, y, ldy);
                        else if (s->k.attn_scores_group_bf16act)
                                s->k.attn_scores_group_bf16act(x, ldx, n_x, &rows, off, r, len, scale, y + (t - t0), ldy);
                        else
                                s->k.attn_scores_group_bf16(x, ldx, n_x, &rows, off, r, len, scale, y + (t - t0), ldy);
                        continue;
                }
                for (int g = 0; g < n_x; g++) {
                        const float *xg = x + g * ldx;
                        float *yg = y + g * ldy;
                        if (accum && kv->dtype == DSE_KV_F32)
                                s->k.attn_accum(xg + (t - t0), f32, ldf, r, len, yg);
                        else if (accum)
                                s->k.attn_accum_kv[kv->dtype](xg + (t - t0), &rows, off, r, len, yg);
                        else if (kv->dtype == DSE_KV_F32)
                                s->k.attn_scores(xg, f32, ldf, r, len, scale, yg + (t - t0));
                        else
                                s->k.attn_scores_kv[kv->dtype](xg, &rows, off, r, len, scale, yg + (t - t0));
                }
        }
}

void dse__attend(const struct dse_session *s, const struct dse__kv_view *kv, int l, int32_t T, const float *q,
                 int64_t ldq, int n_q, int64_t k_off, int64_t k_len, float scale, int64_t v_off, int64_t v_len,
                 float *att, float *out, int64_t ldo) {
        rows_range(s, kv, l, 0, T, q, ldq, n_q, k_off, k_len, scale, att, T, 0);
        for (int g = 0; g < n_q; g++) {
                s->k.softmax(att + (size_t)g * T, T);
                memset(out + g * ldo, 0, (size_t)v_len * sizeof(float));
        }
        rows_range(s, kv, l, 0, T, att, T, n_q, v_off, v_len, 0.0f, out, ldo, 1);
}

int dse__attn_split_init(struct dse_session *s) {
        s->attn_split = DSE__ATTN_SPLIT;
        struct dse__attn_split *sp = dse__session_alloc(s, sizeof *sp);
        if (!sp)
                return -ENOMEM;
        /* at least one pair's chunks over the whole context */
        sp->max_q = (int32_t)(s->hp->n_heads > 1 ? s->hp->n_heads : 1);
        int32_t parts = (s->n_ctx + DSE__ATTN_SPLIT - 1) / DSE__ATTN_SPLIT * sp->max_q;
        sp->cap = parts > DSE__ATTN_SPLIT_PARTS ? parts : DSE__ATTN_SPLIT_PARTS;
        sp->v_max = s->kv.row_floats;
        size_t cap = (size_t)sp->cap;
        if (!(sp->o = dse__session_alloc(s, cap * (size_t)sp->v_max * sizeof(float))) ||
            !(sp->ml = dse__session_alloc(s, 2 * cap * sizeof(float))) ||
            !(sp->att = dse__session_alloc(s, (size_t)s->n_threads * (size_t)sp->max_q * DSE__ATTN_SPLIT * sizeof(float))) ||
            !(sp->item_pair = dse__session_alloc(s, cap * sizeof(int32_t))) ||
            !(sp->item_chunk = dse__session_alloc(s, cap * sizeof(int32_t))) ||
            !(sp->item_slot = dse__session_alloc(s, cap * sizeof(int32_t))) ||
            !(sp->pair_first = dse__session_alloc(s, (cap + 1) * sizeof(int32_t))))
                return -ENOMEM;
        s->split = sp;
        return 0;
}

int dse__session_set_attn_split(struct dse_session *s, int positions) {
        if (!s || (positions != 0 && (positions < DSE__ATTN_SPLIT_MIN || positions > DSE__ATTN_SPLIT)) ||
            (positions && (s->n_ctx + positions - 1) / positions * s->split->max_q > s->split->cap))
                return -EINVAL;
        s->attn_split = positions;
        return 0;
}

struct wave {
        struct dse_session *s;
        int l;
        dse__attn_pair_fn pair;
        const void *ctx;
        int64_t k_len, v_len;
        float scale;
        int32_t p0; /* the wave's first pair */
};

/* One chunk of one pair: its rows read once for the pair's queries, each query's softmax
 * partial into its own slot. */
static void wave_partials(void *arg, size_t i0, size_t i1, int ith) {
        const struct wave *w = arg;
        struct dse_session *s = w->s;
        struct dse__attn_split *sp = s->split;
        int32_t S = s->attn_split;
        float *att = sp->att + (size_t)ith * (size_t)sp->max_q * DSE__ATTN_SPLIT; /* (n_q, n) */
        for (size_t i = i0; i < i1; i++) {
                struct dse__attn_pair a;
                w->pair(w->ctx, w->p0 + sp->item_pair[i], &a);
                int32_t t0 = sp->item_chunk[i] * S, t1 = t0 + S < a.T ? t0 + S : a.T, n = t1 - t0;
                size_t slot = (size_t)sp->item_slot[i];
                float *o = sp->o + slot * (size_t)sp->v_max;
                rows_range(s, a.kv, w->l, t0, t1, a.q, a.ldq, a.n_q, a.k_off, w->k_len, w->scale, att, n, 0);
                for (int32_t g = 0; g < a.n_q; g++) {
                        float *ml = sp->ml + 2 * (slot + (size_t)g);
                        s->k.softmax_parts(att + (size_t)g * n, n, &ml[0], &ml[1]);
                        memset(o + (size_t)g * sp->v_max, 0, (size_t)w->v_len * sizeof(float));
                }
                rows_range(s, a.kv, w->l, t0, t1, att, n, a.n_q, a.v_off, w->v_len, 0.0f, o, sp->v_max, 1);
        }
}

static void wave_merge(void *arg, size_t j0, size_t j1, int ith) {
        const struct wave *w = arg;
        const struct dse__attn_split *sp = w->s->split;
        (void)ith;
        for (size_t j = j0; j < j1; j++) {
                struct dse__attn_pair a;
                w->pair(w->ctx, w->p0 + (int32_t)j, &a);
                int32_t c0 = sp->pair_first[j], c1 = sp->pair_first[j + 1];
                for (int32_t g = 0; g < a.n_q; g++) {
                        float *out = a.out + g * a.ldo;
                        float M = sp->ml[2 * (sp->item_slot[c0] + g)], W = 0.0f;
                        for (int32_t c = c0 + 1; c < c1; c++)
                                M = sp->ml[2 * (sp->item_slot[c] + g)] > M ? sp->ml[2 * (sp->item_slot[c] + g)] : M;
                        memset(out, 0, (size_t)w->v_len * sizeof(float));
                        for (int32_t c = c0; c < c1; c++) {
                                const float *ml = sp->ml + 2 * (sp->item_slot[c] + g);
                                float f = expf(ml[0] - M);
                                W += f * ml[1];
                                w->s->k.axpy(f, sp->o + (size_t)(sp->item_slot[c] + g) * sp->v_max, out, w->v_len);
                        }
                        float inv = 1.0f / W;
                        for (int64_t d = 0; d < w->v_len; d++)
                                out[d] *= inv;
                }
        }
}

void dse__attend_long(struct dse_session *s, int l, int n_pairs, dse__attn_pair_fn pair, const void *ctx,
                      int64_t k_len, int64_t v_len, float scale) {
        struct dse__attn_split *sp = s->split;
        struct wave w = {s, l, pair, ctx, k_len, v_len, scale, 0};
        /* waves of whole pairs, as many as fit in the partials' storage; a chunk item of
         * a pair takes one partial per query */
        while (w.p0 < n_pairs) {
                int32_t n_items = 0, n_slots = 0, n = 0;
                for (; w.p0 + n < n_pairs; n++) {
                        struct dse__attn_pair a;
                        pair(ctx, w.p0 + n, &a);
                        int32_t C = (a.T + s->attn_split - 1) / s->attn_split;
                        if (n_slots + C * a.n_q > sp->cap)
                                break;
                        sp->pair_first[n] = n_items;
                        for (int32_t c = 0; c < C; c++, n_items++, n_slots += a.n_q) {
                                sp->item_pair[n_items] = n;
                                sp->item_chunk[n_items] = c;
                                sp->item_slot[n_items] = n_slots;
                        }
                }
                sp->pair_first[n] = n_items;
                dse__parallel(s, (size_t)n_items, wave_partials, &w);
                dse__parallel(s, (size_t)n, wave_merge, &w);
                w.p0 += n;
        }
}
