/* Sessions: one sequence's activations, scratch and KV cache over a borrowed model whose
 * weights were bound when it was opened (weights.h), and the parallel-pieces helper the
 * architectures' forward passes share (attention over cached rows: attend.c). Everything is
 * allocated in dse_session_new; eval never allocates. The private KV cache is the paged
 * layout's special case of one block of n_ctx positions. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "env_choice.h"
#include "internal.h"
#include "model/forward.h"

void *dse__session_alloc(struct dse_session *s, size_t bytes) {
        return dse__arena_alloc(&s->arena, bytes);
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
        if (!s->pool || n <= 1) {
                if (n)
                        fn(ctx, 0, n, 0);
                return;
        }
        /* a 1-thread pool runs [0, n) inline in one piece */
        size_t piece = s->n_threads == 1 ? n : n / ((size_t)s->n_threads * 4);
        struct claim_job j = {.n = n, .piece = piece ? piece : 1, .fn = fn, .ctx = ctx};
        atomic_init(&j.next, 0);
        dse_pool_run_shared(s->pool, claim_task, &j);
}

void dse__label_calls(struct dse_session *s, const char *label) {
        if (s->pool)
                dse_pool_label(s->pool, label);
}

void dse__session_set_mla_naive(struct dse_session *s, int on) {
        s->mla_naive = on;
}

int dse_model_vocab_size(const struct dse_model *model) {
        return model ? dse__model_hparams(model)->vocab_size : -EINVAL;
}

int dse_model_n_mtp_layers(const struct dse_model *model) {
        return model ? dse__model_hparams(model)->n_mtp_layers : -EINVAL;
}

void dse_session_free(struct dse_session *s) {
        if (!s)
                return;
        dse__arena_free(&s->arena);
        dse__kv_pages_unmap(&s->kv_pages);
        free(s->kv_mtp_mem);
        free(s);
}

int dse__session_kv_with_mtp(struct dse_session *s) {
        int32_t layers = s->hp->n_layers + s->hp->n_mtp_layers;
        if (s->kv.n_layers >= layers)
                return 0;
        /* layer-major in one block: the main layers' rows are the start of the larger
         * cache */
        size_t old = (size_t)s->kv.n_layers * (size_t)s->n_ctx * (size_t)s->kv.row_bytes;
        size_t bytes = (size_t)layers * (size_t)s->n_ctx * (size_t)s->kv.row_bytes;
        uint8_t *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!mem)
                return -ENOMEM;
        memcpy(mem, s->kv.base, old);
        memset(mem + old, 0, (size_t)(layers - s->kv.n_layers) * (size_t)s->n_ctx * (size_t)s->kv.row_bytes);
        s->kv.base = mem;
        s->kv.n_layers = layers;
        s->kv_mtp_mem = mem;
        return 0;
}

static const char *const activations_names[DSE_ACTIVATIONS_COUNT] = {
        [DSE_ACTIVATIONS_INT8] = "int8",
        [DSE_ACTIVATIONS_F32] = "f32",
};

const char *dse_activations_to_string(enum dse_activations a) {
        return (unsigned)a < DSE_ACTIVATIONS_COUNT ? activations_names[a] : "unknown";
}

/* DSV_ACT=int8|f32, else the default (int8). */
static int activations_from_env(enum dse_activations *ret, struct dse_diag *reterr) {
        int a, r = dse__env_choice("DSV_ACT", "an activation precision", activations_names, DSE_ACTIVATIONS_COUNT,
                                   DSE_ACTIVATIONS_INT8, &a, reterr);
        if (r >= 0)
                *ret = (enum dse_activations)a;
        return r;
}

int dse_session_set_activations(struct dse_session *s, enum dse_activations a) {
        if (!s || (unsigned)a >= DSE_ACTIVATIONS_COUNT)
                return -EINVAL;
        s->act = a;
        return 0;
}

size_t dse_session_arena_bytes(const struct dse_session *s) {
        return s ? s->arena.bytes + s->kv_pages.bytes : 0;
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
        s->w = dse__model_weights(model);
        if (s->w->err < 0) {
                if (reterr)
                        *reterr = s->w->diag;
                r = s->w->err;
                goto fail;
        }
        s->ops = s->w->ops;
        if ((r = s->ops->init(s)) < 0)
                goto fail;
        int64_t max_cols = s->w->max_cols > 0 ? s->w->max_cols : 1;
        if (!(s->xperm = dse__session_alloc(s, (size_t)DSE__MAX_STEP_TOKENS * (size_t)max_cols * sizeof(float)))) {
                r = -ENOMEM;
                goto fail;
        }
        for (int i = 0; i < DSE__LINEAR_SLOTS; i++)
                if (!(s->xq_mem[i] = dse__session_alloc(s, dse__xq_bytes(DSE__MAX_STEP_TOKENS, max_cols)))) {
                        r = -ENOMEM;
                        goto fail;
                }
        enum dse_kv_dtype kv_dtype;
        if ((r = dse__kv_dtype_from_env(&kv_dtype, reterr)) < 0)
                goto fail;
        dse__kv_layout(s->hp, kv_dtype, &s->kv);
        s->kv.n_layers = s->hp->n_layers; /* MTP rows only once asked for (dse__session_kv_with_mtp) */
        s->kv.blocks = &s->kv_own_block;
        s->kv.block_tokens = n_ctx;
        if (own_kv) {
                enum dse_kv_pages pages;
                if ((r = dse__kv_pages_from_env(&pages, reterr)) < 0 ||
                    (r = dse__kv_pages_map((size_t)s->kv.n_layers * (size_t)n_ctx * (size_t)s->kv.row_bytes, pages,
                                           NULL, &s->kv_pages, reterr)) < 0)
                        goto fail;
                s->kv.base = s->kv_pages.base;
        }
        if (dse__attn_split_init(s) < 0) {
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
                        toks[k] = (struct dse__tok){.token = tokens[i], .pos = s->n_past + k, .kv = &s->kv, .logits = out};
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

enum dse_kv_pages dse_session_kv_pages(const struct dse_session *s) {
        return s ? s->kv_pages.kind : DSE_KV_PAGES_SMALL;
}

size_t dse_session_kv_bytes_per_token(const struct dse_session *s) {
        return s ? (size_t)s->kv.n_layers * (size_t)s->kv.row_bytes : 0;
}
