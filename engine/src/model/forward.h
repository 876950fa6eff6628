/* The seam between sessions (session.c) and the architectures' forward passes
 * (arch_llama.c: llama + qwen2, arch_deepseek.c: deepseek_v2 + v3, with the pieces they
 * share: embed_head.c, linear_group.c, moe.c). The weights are bound once per model
 * (weights.h); a session owns the kernel table, the thread pool reference, an arena for
 * activations and scratch (sized at setup, never grown) and the per-architecture
 * sequence state. The forward pass reads and writes KV rows through the session's view
 * (kv.h): a private contiguous cache for dse_session_*, a sequence's block table in the
 * paged cache for dse_batch_step (batch.c), one forward pass for both. */
#ifndef DSE_FORWARD_H
#define DSE_FORWARD_H

#include "kernels/kernels.h"
#include "kv.h"
#include "kv_pages.h"
#include "model/model.h"
#include "model/weights.h"

struct dse_session;

/* Most tokens one forward call carries (the activations are sized for it). Prefill runs
 * in calls of this many tokens, and the AMX matmul_xq decodes a Q4 weight block into int8
 * once per call for all its 16-token blocks, so a smaller call pays that decode more
 * often. */
#define DSE__MAX_STEP_TOKENS 128

/* Distinct float inputs one dse__linear_group call may quantize. */
#define DSE__LINEAR_SLOTS 4

/* One token of a forward call. */
struct dse__tok {
        int32_t token;
        int32_t pos;                   /* 0 <= pos < n_ctx */
        const struct dse__kv_view *kv; /* its sequence's KV rows */
        float *logits;                 /* (vocab) wanted logits, or NULL */
        float *hidden;                 /* (hidden) DeepSeek: the last layer's output after the
                                        * final norm (what an MTP module takes), or NULL */
};

struct dse__arch_ops {
        /* Once per model, when it is opened: checks the hyper-parameters, looks up and
         * checks every weight and stores the bindings in w->arch (from w's arena). */
        int (*bind)(struct dse__weights *w, struct dse_diag *reterr);
        /* Allocates a session's state and scratch for s->n_ctx positions from the session
         * arena (-ENOMEM); stores it in s->arch. The bindings are s->w->arch, read-only. */
        int (*init)(struct dse_session *s);
        /* n tokens (1 <= n <= DSE__MAX_STEP_TOKENS), of one or several sequences, a
         * sequence's tokens in position order. Every weight matrix is read once for all
         * n (the kernels' matmul); each token writes its KV row at pos through its view
         * and attends to its sequence's positions 0..pos, so its results do not depend
         * on the other tokens of the call. Writes logits where requested. */
        void (*forward)(struct dse_session *s, const struct dse__tok *toks, int n);
        /* MTP module m (< hp->n_mtp_layers; NULL for an architecture without one) for n
         * tokens: toks[i].token is the token after position toks[i].pos, h (n, hidden)
         * the main model's (or the previous MTP step's) hidden state at that position.
         * Writes its KV row (layer n_layers + m) at pos, logits (the token after next)
         * where requested, and its own hidden state (after shared_head.norm) into
         * h_out (n, hidden) unless NULL. */
        void (*mtp_forward)(struct dse_session *s, int m, const struct dse__tok *toks, const float *h, int n,
                            float *h_out);
};

extern const struct dse__arch_ops dse__arch_llama;    /* llama, qwen2 */
extern const struct dse__arch_ops dse__arch_deepseek; /* deepseek_v2, deepseek_v3 */

struct dse_session {
        const struct dse_model *model;
        const struct dse_hparams *hp;
        const struct dse__weights *w; /* the model's, shared with its other sessions */
        struct dse_pool *pool; /* may be NULL: single-threaded */
        struct dse_kernels k;
        int32_t n_ctx;
        int32_t n_past;
        const struct dse__arch_ops *ops;
        void *arch;           /* the architecture's sequence state and scratch */
        float *xperm;         /* (DSE__MAX_STEP_TOKENS, w->max_cols) gather buffer for permuted weights */
        int mla_naive;        /* DeepSeek: decompress K/V per head instead of absorbing */
        int32_t attn_split;   /* queries over more positions take dse__attend_long (0: never) */
        struct dse__attn_split *split; /* its scratch (attend.c) */
        struct dse__kv_view kv; /* where the current sequence's KV rows live */
        int32_t kv_own_block; /* block table of the private cache: one block, index 0 */
        enum dse_activations act; /* what Q8/Q4 weights multiply (dse.h) */
        int n_threads;        /* of the pool, 1 without one */
        /* DSE__LINEAR_SLOTS int8 copies of (DSE__MAX_STEP_TOKENS, w->max_cols) activations:
         * the distinct inputs of one grouped linear call */
        void *xq_mem[DSE__LINEAR_SLOTS];
        void *kv_mtp_mem;     /* the private cache with the MTP modules' rows, or NULL */
        struct dse__kv_pages kv_pages; /* the private cache's memory (unmapped when paged) */
        struct dse__arena arena;
};

/* A session without a private KV cache, for dse_batch_step: the caller points s->kv at a
 * sequence's blocks before each forward call. */
int dse__session_new_paged(const struct dse_model *model, int n_ctx, struct dse_pool *pool,
                           struct dse_session **ret_session, struct dse_diag *reterr);

/* Moves the private cache (its rows kept) to one that also holds the MTP modules' rows,
 * zero until written; the cache starts without them. -ENOMEM. */
int dse__session_kv_with_mtp(struct dse_session *s);

/* Zeroed, 64-byte aligned memory that lives as long as the session; NULL on ENOMEM. */
void *dse__session_alloc(struct dse_session *s, size_t bytes);

/* ---- linear layers (linear_group.c) ---- */

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

/* A SwiGLU MLP for n tokens: out (n, hidden) = down(silu(gate x) * up x), x (n, hidden);
 * gate and up in one grouped call into hb (n, ldh), with hb2 (n, ldh) scratch. */
void dse__swiglu_mlp(struct dse_session *s, const struct dse__mlp *m, const float *x, int64_t n, float *hb,
                     float *hb2, int64_t ldh, float *out);

/* Whether w multiplies int8 activations in this session. */
static inline int dse__use_xq(const struct dse_session *s, const struct dse_qmat *w) {
        return s->act == DSE_ACTIVATIONS_INT8 && s->k.matmul_xq[w->dtype] != NULL;
}

/* Runs fn over [0, n) on the pool, or inline without one. */
void dse__parallel(struct dse_session *s, size_t n, dse_pool_range_fn fn, void *ctx);

/* Names the pool calls that follow for the pool's time accounting (dse_pool_label; NULL:
 * "other"): a string literal naming a step of the forward pass. */
void dse__label_calls(struct dse_session *s, const char *label);

/* n_q queries (q: (n_q, ldq)) that share the rows they read (the query heads of one GQA
 * KV head; 1 elsewhere) against a sequence's cached positions 0..T-1 of layer l: query
 * g's att[g * T + t] = scale * q_g . row_t[k_off .. k_off + k_len), softmax over t, then
 * out[g * ldo ..] = sum_t att[g * T + t] * row_t[v_off .. v_off + v_len) (overwritten).
 * att holds n_q * T floats. The rows are taken a KV-block run at a time (dse__kv_run), as
 * the kernels want them: a BF16 cache's rows read once for all n_q queries
 * (attn_*_group_bf16), the other types' once per query (attn_*_kv, or attn_scores and
 * attn_accum for F32). Query g's result does not depend on n_q. */
void dse__attend(const struct dse_session *s, const struct dse__kv_view *kv, int l, int32_t T, const float *q,
                 int64_t ldq, int n_q, int64_t k_off, int64_t k_len, float scale, int64_t v_off, int64_t v_len,
                 float *att, float *out, int64_t ldo);

/* Long contexts (attend.c): a query over more than s->attn_split positions (default
 * DSE__ATTN_SPLIT) is computed by dse__attend_long, split into chunks of that many
 * positions over the threads and merged; its result does not depend on the other
 * queries of the call nor on the threads. The forward passes attend short queries with
 * dse__attend in their per-head region, then hand every long query (with the queries
 * that share its rows: a pair) to dse__attend_long. */
#define DSE__ATTN_SPLIT 512
#define DSE__ATTN_SPLIT_MIN 16
#define DSE__ATTN_SPLIT_PARTS 2048 /* query-chunk partials held at once (waves of whole pairs) */
struct dse__attn_pair {
        const struct dse__kv_view *kv; /* the queries' sequence */
        int32_t T;                     /* positions they attend to */
        const float *q;                /* (n_q, ldq) */
        int64_t k_off, v_off;          /* in each row, as dse__attend takes them */
        float *out;                    /* (n_q, ldo) overwritten */
        int32_t n_q;                   /* 1 .. the model's n_heads */
        int64_t ldq, ldo;
};
/* Pair p of a dse__attend_long call, described into *ret. */
typedef void (*dse__attn_pair_fn)(const void *ctx, int p, struct dse__attn_pair *ret);
static inline int dse__attn_is_long(const struct dse_session *s, int32_t T) {
        return s->attn_split > 0 && T > s->attn_split;
}
void dse__attend_long(struct dse_session *s, int l, int n_pairs, dse__attn_pair_fn pair, const void *ctx,
                      int64_t k_len, int64_t v_len, float scale);
/* The split's scratch, at session setup. */
int dse__attn_split_init(struct dse_session *s);

/* ---- token embedding and LM head (embed_head.c) ---- */

struct dse__embed_head {
        struct dse_qmat embed;   /* (vocab, hidden) model.embed_tokens */
        struct dse_qmat lm_head; /* (vocab, hidden); the embedding when tied */
        float *final_norm;       /* (hidden) model.norm */
};

/* Binds the embedding, LM head and final norm. */
int dse__embed_head_bind(struct dse__weights *w, struct dse__embed_head *ret, struct dse_diag *reterr);

/* x (n, hidden) = the embeddings of the call's tokens. */
void dse__embed_tokens(const struct dse_session *s, const struct dse__embed_head *eh, const struct dse__tok *toks,
                       int n, float *x);

/* Logits of the tokens that want them, in one pass over the LM head: final norm of
 * their rows of x (n, hidden) into xb, the LM head into logits (n, vocab) scratch, each
 * copied to its token's logits. */
void dse__lm_head(struct dse_session *s, const struct dse__embed_head *eh, const struct dse__tok *toks, int n,
                  const float *x, float *xb, float *logits);

/* ---- the DeepSeek MoE layer: routing, gather, expert dispatch, combine (moe.c) ---- */

#define DSE_MOE_MAX_EXPERTS 1024

/* Checks the routing hyper-parameters (expert counts, groups); -EBADMSG/-EOPNOTSUPP. */
int dse__moe_check(const struct dse_hparams *hp, struct dse_diag *reterr);

/* Routes one token: router logits (n_routed_experts, float32), bias the V3
 * e_score_correction_bias or NULL; writes the n_experts_per_tok chosen experts and their
 * combination weights. hp must have passed dse__moe_check. */
void dse__moe_route(const struct dse_hparams *hp, const float *logits, const float *bias, int32_t *ret_idx,
                    float *ret_w);

/* One MoE layer's weights. */
struct dse__moe_layer {
        struct dse_qmat router;  /* (n_experts, hidden) mlp.gate.weight */
        float *router_bias;      /* (n_experts) V3 e_score_correction_bias, else NULL */
        int has_shared;
        struct dse__mlp shared;  /* (moe_inter * n_shared) wide shared experts */
        struct dse__mlp *experts; /* (n_experts) each (moe_inter) wide */
};

/* A session's MoE scratch: the (token, k) pairs gathered expert by expert
 * (T = DSE__MAX_STEP_TOKENS, K = n_experts_per_tok). */
struct dse__moe_scratch {
        float *router_logits;    /* (T, n_experts) */
        int32_t *idx;            /* (T, K) chosen experts */
        float *weight;           /* (T, K) their weights */
        int32_t *pos;            /* (T, K) where pair (t, k) sits in the gathered order */
        int32_t *first;          /* (n_experts + 1) each expert's first gathered row */
        float *in;               /* (T*K, hidden) gathered inputs */
        float *hb, *hb2;         /* (T*K, moe_inter) gathered gate/up outputs */
        float *eo;               /* (T*K, hidden) gathered expert outputs */
        void *xq_x;              /* int8 copy of the layer's input x (T, hidden) */
        void *xq_in;             /* int8 copies of in ... */
        void *xq_hb;             /* ... and of hb */
        struct dse__mm *mm;      /* (2 * (n_experts + 1)) one grouped call's items */
        struct dse_xq *sub;      /* (n_experts) each expert's rows of the int8 copies */
        float *shared_hb, *shared_hb2; /* (T, shared_ld) the shared experts' gate/up outputs */
        int64_t shared_ld;
};

/* Binds layer l's router, shared and routed experts; *ret_width is the widest of them. */
int dse__moe_bind(struct dse__weights *w, int l, struct dse__moe_layer *ret, int64_t *ret_width,
                  struct dse_diag *reterr);

/* Allocates the scratch from the session arena; shared_hb, shared_hb2 and shared_ld are
 * the caller's to set (its MLP buffers serve). */
int dse__moe_scratch_init(struct dse_session *s, struct dse__moe_scratch *ret);

/* Routed plus shared experts of one MoE layer for n tokens: x, out (n, hidden). */
void dse__moe_forward(struct dse_session *s, const struct dse__moe_layer *L, struct dse__moe_scratch *ms,
                      const float *x, int n, float *out);

/* Enables the naive (decompressed) MLA attention; for the absorbed-vs-naive test. */
void dse__session_set_mla_naive(struct dse_session *s, int on);
/* dse__session_set_attn_split: dse_internal.h. */

#endif
