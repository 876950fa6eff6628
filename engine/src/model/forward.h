/* The seam between sessions (session.c) and the architectures' forward passes
 * (arch_llama.c: llama + qwen2, arch_deepseek.c: deepseek_v2 + v3). A session owns the
 * kernel table, the thread pool reference, an arena for activations and scratch (sized
 * at setup, never grown) and the per-architecture state. The forward pass reads and
 * writes KV rows through the session's view (kv.h): a private contiguous cache for
 * dse_session_*, a sequence's block table in the paged cache for dse_batch_step
 * (batch.c), one forward pass for both. */
#ifndef DSE_FORWARD_H
#define DSE_FORWARD_H

#include "kernels/kernels.h"
#include "kv.h"
#include "model/model.h"

struct dse_session;

/* Most tokens one forward call carries (the activations are sized for it). Prefill runs
 * in calls of this many tokens, and the AMX matmul_xq decodes a Q4 weight block into int8
 * once per call for all its 16-token blocks: at 32 tokens that decode was a third of
 * prefill's kernel time. */
#define DSE__MAX_STEP_TOKENS 128

/* Distinct float inputs one dse__linear_group call may quantize. */
#define DSE__LINEAR_SLOTS 4

/* One token of a forward call. */
struct dse__tok {
        int32_t token;
        int32_t pos;                   /* 0 <= pos < n_ctx */
        const struct dse__kv_view *kv; /* its sequence's KV rows */
        float *logits;                 /* (vocab) wanted logits, or NULL */
};

struct dse__arch_ops {
        /* Looks up and checks the weights, allocates state and scratch for s->n_ctx
         * positions from the session arena; stores its state in s->arch. */
        int (*init)(struct dse_session *s, struct dse_diag *reterr);
        /* n tokens (1 <= n <= DSE__MAX_STEP_TOKENS), of one or several sequences, a
         * sequence's tokens in position order. Every weight matrix is read once for all
         * n (the kernels' matmul); each token writes its KV row at pos through its view
         * and attends to its sequence's positions 0..pos, so its results do not depend
         * on the other tokens of the call. Writes logits where requested. */
        void (*forward)(struct dse_session *s, const struct dse__tok *toks, int n);
        /* Bytes of KV cache one token occupies across all layers. */
        size_t (*kv_bytes_per_token)(const struct dse_session *s);
};

extern const struct dse__arch_ops dse__arch_llama;    /* llama, qwen2 */
extern const struct dse__arch_ops dse__arch_deepseek; /* deepseek_v2, deepseek_v3 */

struct dse__arena_chunk;

struct dse_session {
        const struct dse_model *model;
        const struct dse_hparams *hp;
        struct dse_pool *pool; /* may be NULL: single-threaded */
        struct dse_kernels k;
        int32_t n_ctx;
        int32_t n_past;
        const struct dse__arch_ops *ops;
        void *arch;
        int64_t max_cols;     /* widest weight seen by dse__session_weight */
        float *xperm;         /* (DSE__MAX_STEP_TOKENS, max_cols) gather buffer for permuted weights */
        int mla_naive;        /* DeepSeek: decompress K/V per head instead of absorbing */
        struct dse__kv_view kv; /* where the current sequence's KV rows live */
        int32_t kv_own_block; /* block table of the private cache: one block, index 0 */
        enum dse_activations act; /* what Q8/Q4 weights multiply (dse.h) */
        int n_threads;        /* of the pool, 1 without one */
        /* DSE__LINEAR_SLOTS int8 copies of (DSE__MAX_STEP_TOKENS, max_cols) activations:
         * the distinct inputs of one grouped linear call */
        void *xq_mem[DSE__LINEAR_SLOTS];
        struct dse__arena_chunk *arena;
        size_t arena_bytes;
};

/* A session without a private KV cache, for dse_batch_step: the caller points s->kv at a
 * sequence's blocks before each forward call. */
int dse__session_new_paged(const struct dse_model *model, int n_ctx, struct dse_pool *pool,
                           struct dse_session **ret_session, struct dse_diag *reterr);

/* Zeroed, 64-byte aligned memory that lives as long as the session; NULL on ENOMEM. */
void *dse__session_alloc(struct dse_session *s, size_t bytes);

/* Looks up weight `name`, checks its logical shape is [rows, cols] and its auxiliary
 * tensors ("<name>.scale", ".zero", ".perm") against its dtype, and fills *ret.
 * optional: a missing tensor leaves ret->data NULL and returns 0. */
int dse__session_weight(struct dse_session *s, const char *name, int64_t rows, int64_t cols, int optional,
                        struct dse_qmat *ret, struct dse_diag *reterr);

/* A 1-D tensor (norm weight, bias, router bias) of n elements in F32/F16/BF16, converted
 * to float32 into the arena. optional: a missing tensor gives *ret = NULL. */
int dse__session_vector(struct dse_session *s, const char *name, int64_t n, int optional, float **ret,
                        struct dse_diag *reterr);

/* y = W x (+ bias when non-NULL), rows split over the pool. x (cols), y (rows); x is
 * gathered through W's perm first when it has one. */
void dse__linear(struct dse_session *s, const struct dse_qmat *w, const float *x, float *y, const float *bias);
/* The same for n tokens (n <= DSE__MAX_STEP_TOKENS) in one pass over W: X (n, ldx),
 * Y (n, ldy). Each token's row equals dse__linear's. */
void dse__linear_n(struct dse_session *s, const struct dse_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                   int64_t ldy, const float *bias);

/* One product of a grouped linear call: Y (n, ldy) = X (n, ldx) W^T (+ bias). */
struct dse__mm {
        const struct dse_qmat *w;
        const float *x;          /* (n, ldx) float32 activations; NULL if xq is given */
        int64_t ldx, n;
        float *y;                /* (n, ldy), indexed by absolute row */
        int64_t ldy;
        const float *bias;       /* (rows) or NULL */
        const struct dse_xq *xq; /* x already quantized (n rows), or NULL */
        /* A SwiGLU pair when set: w is the gate, w_up the up projection (same shape, same
         * dtype), y_up (n, ldy) scratch for up's rows; each piece multiplies both over the
         * same rows and leaves y = silu(gate x) * (up x) for them, so the gate needs no
         * separate pass over y. */
        const struct dse_qmat *w_up;
        float *y_up;
        /* filled by dse__linear_group */
        int64_t cost0, row_cost; /* where the item starts in the work split, per row */
};

/* Runs every product of mm in ONE parallel region (one wake-up and one join of the pool
 * instead of one per matrix): the items' rows are laid end to end and split over the
 * threads by an estimate of their cost (weight bytes, plus the tokens' compute), at
 * multiples of 16 rows. Items multiply int8 activations when dse__use_xq says so: float
 * inputs are quantized once per distinct (x, ldx, n, cols) on the calling thread, at most
 * DSE__LINEAR_SLOTS of them; items that bring xq use it. Items whose weight has a
 * column permutation run on their own (dse__linear_n). Each output row is computed by
 * one thread with the same arithmetic whatever the split, so results do not depend on
 * the thread count or on the other items. */
void dse__linear_group(struct dse_session *s, struct dse__mm *mm, int n_mm);

/* Whether w multiplies int8 activations in this session. */
static inline int dse__use_xq(const struct dse_session *s, const struct dse_qmat *w) {
        return s->act == DSE_ACTIVATIONS_INT8 && s->k.matmul_xq[w->dtype] != NULL;
}

/* Runs fn over [0, n) on the pool, or inline without one. */
void dse__parallel(struct dse_session *s, size_t n, dse_pool_range_fn fn, void *ctx);

/* One query against a sequence's cached positions 0..T-1 of layer l: att[t] = scale *
 * q . row_t[k_off .. k_off + k_len), softmax over t, then out = sum_t att[t] *
 * row_t[v_off .. v_off + v_len) (out is overwritten). att holds T floats. The rows are
 * taken a KV-block run at a time (dse__kv_run), as attn_scores and attn_accum want them. */
void dse__attend(const struct dse_session *s, const struct dse__kv_view *kv, int l, int32_t T, const float *q,
                 int64_t k_off, int64_t k_len, float scale, int64_t v_off, int64_t v_len, float *att, float *out);

/* ---- DeepSeek MoE routing (moe.c) ---- */

#define DSE_MOE_MAX_EXPERTS 1024

/* Checks the routing hyper-parameters (expert counts, groups); -EBADMSG/-EOPNOTSUPP. */
int dse__moe_check(const struct dse_hparams *hp, struct dse_diag *reterr);

/* Routes one token: router logits (n_routed_experts, float32), bias the V3
 * e_score_correction_bias or NULL; writes the n_experts_per_tok chosen experts and their
 * combination weights. hp must have passed dse__moe_check. */
void dse__moe_route(const struct dse_hparams *hp, const float *logits, const float *bias, int32_t *ret_idx,
                    float *ret_w);

/* Enables the naive (decompressed) MLA attention; for the absorbed-vs-naive test. */
void dse__session_set_mla_naive(struct dse_session *s, int on);

#endif
