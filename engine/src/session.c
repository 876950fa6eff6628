/* Sessions: one sequence's activations, scratch and KV cache over a borrowed model, and
 * the helpers the architectures' forward passes share (weight views, row-parallel
 * matvec). Everything is allocated in dse_session_new; eval never allocates. The private
 * KV cache is the paged layout's special case of one block of n_ctx positions. */
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/forward.h"

struct dse__arena_chunk {
        struct dse__arena_chunk *next;
        char pad[56]; /* keeps the payload 64-byte aligned */
};

void *dse__session_alloc(struct dse_session *s, size_t bytes) {
        size_t total = sizeof(struct dse__arena_chunk) + ((bytes + 63) & ~(size_t)63);
        struct dse__arena_chunk *c = aligned_alloc(64, total);
        if (!c)
                return NULL;
        memset(c, 0, total);
        c->next = s->arena;
        s->arena = c;
        s->arena_bytes += total;
        return c + 1;
}

static size_t dtype_elem_bytes(enum dse_dtype dt) {
        switch (dt) {
        case DSE_DTYPE_F32:
        case DSE_DTYPE_I32: return 4;
        case DSE_DTYPE_F16:
        case DSE_DTYPE_BF16: return 2;
        default: return 1;
        }
}

/* The auxiliary tensor `<name><suffix>`: must exist with dtype dt and shape [d0, d1]
 * (d1 < 0: 1-D [d0]). */
static int aux_tensor(struct dse_session *s, const char *name, const char *suffix, enum dse_dtype dt, int64_t d0,
                      int64_t d1, const void **ret, struct dse_diag *reterr) {
        char full[DSE_TENSOR_NAME_MAX + 16];
        snprintf(full, sizeof full, "%s%s", name, suffix);
        const struct dse_tensor *t = dse__model_tensor(s->model, full);
        if (!t)
                return dse__fail(reterr, -EBADMSG, "tensor '%s' missing", full);
        int ok = t->dtype == dt && (d1 < 0 ? t->n_dims == 1 && t->shape[0] == d0
                                           : t->n_dims == 2 && t->shape[0] == d0 && t->shape[1] == d1);
        uint64_t need = (uint64_t)d0 * (uint64_t)(d1 < 0 ? 1 : d1) * dtype_elem_bytes(dt);
        if (!ok || t->size_bytes < need)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': expected %s [%lld, %lld]", full,
                                 dt == DSE_DTYPE_F32 ? "F32" : dt == DSE_DTYPE_U8 ? "U8" : "I32", (long long)d0,
                                 (long long)d1);
        *ret = t->data;
        return 0;
}

int dse__session_weight(struct dse_session *s, const char *name, int64_t rows, int64_t cols, int optional,
                        struct dse_qmat *ret, struct dse_diag *reterr) {
        memset(ret, 0, sizeof *ret);
        const struct dse_tensor *t = dse__model_tensor(s->model, name);
        if (!t)
                return optional ? 0 : dse__fail(reterr, -EBADMSG, "tensor '%s' missing", name);
        if (t->dtype > DSE_DTYPE_Q4 || !s->k.matvec[t->dtype])
                return dse__fail(reterr, -EOPNOTSUPP, "tensor '%s': dtype %d cannot be a weight", name, (int)t->dtype);
        if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': expected shape [%lld, %lld]", name, (long long)rows,
                                 (long long)cols);
        uint64_t need = t->dtype == DSE_DTYPE_Q4 ? dse__q4_bytes(rows, cols)
                                                 : (uint64_t)rows * (uint64_t)cols * dtype_elem_bytes(t->dtype);
        if (t->size_bytes < need)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': %llu bytes, expected %llu", name,
                                 (unsigned long long)t->size_bytes, (unsigned long long)need);
        struct dse_qmat w = {.dtype = t->dtype, .rows = rows, .cols = cols, .data = t->data};
        int r = 0;
        const void *p;
        switch (t->dtype) {
        case DSE_DTYPE_F8_E4M3:
                w.n_groups = (cols + DSE_F8_BLOCK - 1) / DSE_F8_BLOCK;
                r = aux_tensor(s, name, ".scale", DSE_DTYPE_F32, (rows + DSE_F8_BLOCK - 1) / DSE_F8_BLOCK, w.n_groups,
                               &p, reterr);
                w.scale = p;
                break;
        case DSE_DTYPE_Q8:
        case DSE_DTYPE_Q4:
                if (t->group_size <= 0)
                        return dse__fail(reterr, -EBADMSG, "tensor '%s': group size %d", name, t->group_size);
                w.group_size = t->group_size;
                w.n_groups = (cols + w.group_size - 1) / w.group_size;
                int64_t srows = dse__scale_rows(t->dtype, rows);
                if ((r = aux_tensor(s, name, ".scale", DSE_DTYPE_F32, srows, w.n_groups, &p, reterr)) < 0)
                        return r;
                w.scale = p;
                if (t->dtype == DSE_DTYPE_Q4) {
                        if ((r = aux_tensor(s, name, ".zero", DSE_DTYPE_U8, srows, w.n_groups, &p, reterr)) < 0)
                                return r;
                        w.zero = p;
                        char perm_name[DSE_TENSOR_NAME_MAX + 8];
                        snprintf(perm_name, sizeof perm_name, "%s.perm", name);
                        if (dse__model_tensor(s->model, perm_name)) {
                                if ((r = aux_tensor(s, name, ".perm", DSE_DTYPE_I32, cols, -1, &p, reterr)) < 0)
                                        return r;
                                w.perm = p;
                                for (int64_t j = 0; j < cols; j++)
                                        if (w.perm[j] < 0 || w.perm[j] >= cols)
                                                return dse__fail(reterr, -EBADMSG, "tensor '%s': index %d out of range",
                                                                 perm_name, w.perm[j]);
                        }
                }
                break;
        default:
                break;
        }
        if (r < 0)
                return r;
        if (cols > s->max_cols)
                s->max_cols = cols;
        *ret = w;
        return 0;
}

int dse__session_vector(struct dse_session *s, const char *name, int64_t n, int optional, float **ret,
                        struct dse_diag *reterr) {
        *ret = NULL;
        const struct dse_tensor *t = dse__model_tensor(s->model, name);
        if (!t)
                return optional ? 0 : dse__fail(reterr, -EBADMSG, "tensor '%s' missing", name);
        if (t->n_dims != 1 || t->shape[0] != n)
                return dse__fail(reterr, -EBADMSG, "tensor '%s': expected shape [%lld]", name, (long long)n);
        if (t->dtype != DSE_DTYPE_F32 && t->dtype != DSE_DTYPE_F16 && t->dtype != DSE_DTYPE_BF16)
                return dse__fail(reterr, -EOPNOTSUPP, "tensor '%s': dtype %d, expected F32, F16 or BF16", name,
                                 (int)t->dtype);
        if (t->size_bytes < (uint64_t)n * dtype_elem_bytes(t->dtype))
                return dse__fail(reterr, -EBADMSG, "tensor '%s': truncated", name);
        float *v = dse__session_alloc(s, (size_t)n * sizeof(float));
        if (!v)
                return -ENOMEM;
        struct dse_qmat m = {.dtype = t->dtype, .rows = 1, .cols = n, .data = t->data};
        s->k.dequant_row(&m, 0, v);
        *ret = v;
        return 0;
}

struct claim_job {
        size_t n, piece;
        dse_pool_range_fn fn;
        void *ctx;
        _Atomic size_t next;
};

static void claim_task(void *arg, int ith, int nth) {
        struct claim_job *j = arg;
        (void)nth;
        size_t b;
        while ((b = atomic_fetch_add_explicit(&j->next, j->piece, memory_order_relaxed)) < j->n)
                j->fn(j->ctx, b, b + j->piece < j->n ? b + j->piece : j->n, ith);
}

/* Pieces claimed from a counter on whichever threads are running (dse_pool_run_shared),
 * about four per thread: fn's ith names the scratch of the thread that runs a piece. */
void dse__parallel(struct dse_session *s, size_t n, dse_pool_range_fn fn, void *ctx) {
        if (!s->pool || s->n_threads == 1 || n <= 1) {
                if (n)
                        fn(ctx, 0, n, 0);
                return;
        }
        size_t piece = n / ((size_t)s->n_threads * 4);
        struct claim_job j = {.n = n, .piece = piece ? piece : 1, .fn = fn, .ctx = ctx};
        atomic_init(&j.next, 0);
        dse_pool_run_shared(s->pool, claim_task, &j);
}

void dse__attend(const struct dse_session *s, const struct dse__kv_view *kv, int l, int32_t T, const float *q,
                 int64_t k_off, int64_t k_len, float scale, int64_t v_off, int64_t v_len, float *att, float *out) {
        int32_t r;
        for (int32_t t = 0; t < T; t += r) {
                r = dse__kv_run(kv, t, T);
                s->k.attn_scores(q, dse__kv_row(kv, l, t) + k_off, kv->row_floats, r, k_len, scale, att + t);
        }
        s->k.softmax(att, T);
        memset(out, 0, (size_t)v_len * sizeof(float));
        for (int32_t t = 0; t < T; t += r) {
                r = dse__kv_run(kv, t, T);
                s->k.attn_accum(att + t, dse__kv_row(kv, l, t) + v_off, kv->row_floats, r, v_len, out);
        }
}

/* ---- linear layers ------------------------------------------------------------------ */

/* Rows of one item a thread takes are rounded to this: the SIMD kernels block rows (4 to
 * 16 at a time), so a split inside a block would only cost a tail. */
#define ROW_ALIGN 16

/* Pieces of work per thread a grouped call is cut into. Threads claim pieces from a
 * shared counter (dse_pool_run_shared) rather than taking one static share each: on a
 * shared or oversubscribed machine a thread that loses its CPU leaves its pieces to the
 * others, and one that is not running when the call starts does not delay it at all.
 * A call of one token per item (batch-1 decode) is cut into one piece per thread
 * instead: it streams weights, and each piece restarts its streams (and the hardware
 * prefetchers' ramp). Median decode step at batch 1, 2 threads, alternated runs: Qwen
 * 1.5B int4 33.4 ms against 36.9 with 8 pieces, int8 72.6 against 76.5, V2-Lite int4
 * 20.7 against 21.5 (bench/RESULTS.md, "One piece per thread at batch 1"). The halves
 * then end up to ~10% apart, at random; evening them by stealing from the back of the
 * other's share bought nothing measurable, twice (RESULTS.md, "Work stealing for
 * one-token calls" and "Tail stealing inside the kernel"). Batched calls keep 8: they
 * are compute-bound, and a core that loses time to its host then gives pieces away. */
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
                                       m->w->cols <= s->max_cols);
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
        if (!s->pool || s->n_threads == 1) {
                struct group_job job = {.s = s, .mm = mm, .n_mm = n_mm, .total_cost = total};
                group_piece(&job, 0, 1);
                return;
        }
        int one_token = 1;
        for (int i = 0; i < n_mm; i++)
                one_token &= mm[i].row_cost == 0 || mm[i].n == 1;
        struct group_job job = {.s = s, .mm = mm, .n_mm = n_mm, .total_cost = total,
                                .n_pieces = s->n_threads * (one_token ? 1 : PIECES_PER_THREAD)};
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

void dse__session_set_mla_naive(struct dse_session *s, int on) {
        s->mla_naive = on;
}

int dse_model_vocab_size(const struct dse_model *model) {
        return model ? dse__model_hparams(model)->vocab_size : -EINVAL;
}

void dse_session_free(struct dse_session *s) {
        if (!s)
                return;
        while (s->arena) {
                struct dse__arena_chunk *next = s->arena->next;
                free(s->arena);
                s->arena = next;
        }
        free(s);
}

const char *dse_activations_to_string(enum dse_activations a) {
        switch (a) {
        case DSE_ACTIVATIONS_INT8: return "int8";
        case DSE_ACTIVATIONS_F32: return "f32";
        default: return "unknown";
        }
}

/* DSV_ACT=int8|f32, else the default (int8). */
static int activations_from_env(enum dse_activations *ret, struct dse_diag *reterr) {
        const char *v = getenv("DSV_ACT");
        *ret = DSE_ACTIVATIONS_INT8;
        if (!v || !*v)
                return 0;
        for (int a = 0; a < DSE_ACTIVATIONS_COUNT; a++)
                if (strcmp(v, dse_activations_to_string((enum dse_activations)a)) == 0) {
                        *ret = (enum dse_activations)a;
                        return 0;
                }
        return dse__fail(reterr, -EINVAL, "DSV_ACT='%s' is not an activation precision; use int8 or f32", v);
}

int dse_session_set_activations(struct dse_session *s, enum dse_activations a) {
        if (!s || (unsigned)a >= DSE_ACTIVATIONS_COUNT)
                return -EINVAL;
        s->act = a;
        return 0;
}

size_t dse_session_arena_bytes(const struct dse_session *s) {
        return s ? s->arena_bytes : 0;
}

static int session_create(const struct dse_model *model, int n_ctx, struct dse_pool *pool, int own_kv,
                          struct dse_session **ret_session, struct dse_diag *reterr) {
        if (!model || n_ctx <= 0 || !ret_session)
                return dse__fail(reterr, -EINVAL, "dse_session_new: bad arguments (n_ctx %d)", n_ctx);
        struct dse_cpu_info cpu;
        int r = dse_cpu_detect(&cpu, reterr);
        if (r < 0)
                return r;
        struct dse_session *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->model = model;
        s->hp = dse__model_hparams(model);
        s->pool = pool;
        s->n_threads = pool ? dse_pool_n_threads(pool) : 1;
        s->n_ctx = n_ctx;
        dse_kernels_resolve(cpu.level, &s->k);
        if ((r = activations_from_env(&s->act, reterr)) < 0)
                goto fail;
        switch (s->hp->arch) {
        case DSE_ARCH_LLAMA:
        case DSE_ARCH_QWEN2:
                s->ops = &dse__arch_llama;
                break;
        case DSE_ARCH_DEEPSEEK_V2:
        case DSE_ARCH_DEEPSEEK_V3:
                s->ops = &dse__arch_deepseek;
                break;
        default:
                r = dse__fail(reterr, -EOPNOTSUPP, "architecture %d has no forward pass", (int)s->hp->arch);
                goto fail;
        }
        if ((r = s->ops->init(s, reterr)) < 0)
                goto fail;
        if (!(s->xperm = dse__session_alloc(s, (size_t)DSE__MAX_STEP_TOKENS * (size_t)(s->max_cols > 0 ? s->max_cols : 1) *
                                                       sizeof(float)))) {
                r = -ENOMEM;
                goto fail;
        }
        for (int i = 0; i < DSE__LINEAR_SLOTS; i++)
                if (!(s->xq_mem[i] = dse__session_alloc(s, dse__xq_bytes(DSE__MAX_STEP_TOKENS,
                                                                          s->max_cols > 0 ? s->max_cols : 1)))) {
                        r = -ENOMEM;
                        goto fail;
                }
        s->kv = (struct dse__kv_view){.blocks = &s->kv_own_block, .block_tokens = n_ctx,
                                      .n_layers = s->hp->n_layers, .row_floats = dse__kv_row_floats(s->hp)};
        if (own_kv && !(s->kv.base = dse__session_alloc(s, (size_t)s->hp->n_layers * (size_t)n_ctx *
                                                                    (size_t)s->kv.row_floats * sizeof(float)))) {
                r = -ENOMEM;
                goto fail;
        }
        *ret_session = s;
        return 0;
fail:
        dse_session_free(s);
        return r;
}

int dse_session_new(const struct dse_model *model, int n_ctx, struct dse_pool *pool,
                    struct dse_session **ret_session, struct dse_diag *reterr) {
        return session_create(model, n_ctx, pool, 1, ret_session, reterr);
}

int dse__session_new_paged(const struct dse_model *model, int n_ctx, struct dse_pool *pool,
                           struct dse_session **ret_session, struct dse_diag *reterr) {
        return session_create(model, n_ctx, pool, 0, ret_session, reterr);
}

int dse_session_eval(struct dse_session *s, const int32_t *tokens, size_t n_tokens, float *logits,
                     float *last_logits, struct dse_diag *reterr) {
        if (!s || (!tokens && n_tokens))
                return dse__fail(reterr, -EINVAL, "dse_session_eval: bad arguments");
        if (n_tokens > (size_t)(s->n_ctx - s->n_past))
                return dse__fail(reterr, -E2BIG, "%zu tokens after %d do not fit in a context of %d", n_tokens,
                                 s->n_past, s->n_ctx);
        int32_t vocab = s->hp->vocab_size;
        for (size_t i = 0; i < n_tokens; i++)
                if (tokens[i] < 0 || tokens[i] >= vocab)
                        return dse__fail(reterr, -EINVAL, "token %d at index %zu is outside the vocabulary (%d)",
                                         tokens[i], i, vocab);
        struct dse__tok toks[DSE__MAX_STEP_TOKENS];
        for (size_t i0 = 0; i0 < n_tokens; i0 += DSE__MAX_STEP_TOKENS) {
                int n = n_tokens - i0 < DSE__MAX_STEP_TOKENS ? (int)(n_tokens - i0) : DSE__MAX_STEP_TOKENS;
                for (int k = 0; k < n; k++) {
                        size_t i = i0 + (size_t)k;
                        float *out = logits ? logits + i * (size_t)vocab : i + 1 == n_tokens ? last_logits : NULL;
                        toks[k] = (struct dse__tok){tokens[i], s->n_past + k, &s->kv, out};
                }
                s->ops->forward(s, toks, n);
                s->n_past += n;
        }
        if (logits && last_logits && n_tokens)
                memcpy(last_logits, logits + (n_tokens - 1) * (size_t)vocab, (size_t)vocab * sizeof(float));
        return 0;
}

void dse_session_reset(struct dse_session *s) {
        if (s)
                s->n_past = 0;
}

int dse_session_n_past(const struct dse_session *s) {
        return s ? s->n_past : -EINVAL;
}

int dse_session_n_ctx(const struct dse_session *s) {
        return s ? s->n_ctx : -EINVAL;
}

size_t dse_session_kv_bytes_per_token(const struct dse_session *s) {
        return s ? s->ops->kv_bytes_per_token(s) : 0;
}
