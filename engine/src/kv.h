/* The paged KV cache's engine-internal side: how a forward pass finds a position's KV
 * row through a sequence's block table (kv.c owns the pool; batch.c and session.c hand
 * a view to the architectures' forward passes). */
#ifndef DSE_KV_H
#define DSE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "model/model.h"

/* Where one sequence's KV rows live: position p of layer l is row p % block_tokens of
 * block blocks[p / block_tokens]; a block holds every layer, layer-major. A row holds
 * row_floats elements of dtype (llama [k | v], MLA [c | k_pe]), cut into planes of
 * plane_floats elements: one head's K or V (llama, qwen2), the whole row (MLA, whose
 * every head reads all of it). Within a block's layer the planes come one after the
 * other, each holding its part of every position of the block, plane_bytes apart, so a
 * KV head's rows are one contiguous stream the attention reads front to back (position-
 * major rows would leave it a short run out of every row, which the hardware prefetchers
 * follow badly). A session's private cache is the special case of one block of n_ctx
 * positions. FP8 and INT8 planes keep a float32 scale per group of `group` elements at
 * scale_off from the start of each position's part (struct dse_kv_rows). */
struct dse__kv_view {
        uint8_t *base;         /* (n_blocks, n_layers, n_planes, block_tokens, plane_bytes) */
        const int32_t *blocks; /* (ceil(n_ctx / block_tokens)) block table */
        int32_t block_tokens;
        int32_t n_layers;
        int32_t row_floats;    /* elements of one position of one layer */
        int32_t row_bytes;     /* bytes of one position of one layer: n_planes * plane_bytes */
        int32_t plane_floats;  /* elements of one position of one plane (divides row_floats) */
        int32_t plane_bytes;
        int32_t group, scale_off;
        enum dse_kv_dtype dtype;
};

/* The part of plane `plane` of layer l at position pos (plane_bytes); the positions of
 * its run (dse__kv_run) follow plane_bytes apart. */
static inline uint8_t *dse__kv_plane_row(const struct dse__kv_view *v, int l, int32_t pos, int32_t plane) {
        size_t b = (size_t)v->blocks[pos / v->block_tokens], bt = (size_t)v->block_tokens;
        return v->base + (b * (size_t)v->n_layers + (size_t)l) * bt * (size_t)v->row_bytes +
               ((size_t)plane * bt + (size_t)(pos % v->block_tokens)) * (size_t)v->plane_bytes;
}

/* Positions from pos on (before end) whose parts of a plane of a layer lie back to back,
 * plane_bytes apart: up to the end of pos's block. */
static inline int32_t dse__kv_run(const struct dse__kv_view *v, int32_t pos, int32_t end) {
        int32_t left = v->block_tokens - pos % v->block_tokens;
        return end - pos < left ? end - pos : left;
}

/* Elements of KV one position of one layer needs for the model's architecture: llama
 * and qwen2 2 * n_kv_heads * head_dim, DeepSeek MLA kv_lora_rank + qk_rope_head_dim; 0
 * for an architecture without a forward pass. */
int32_t dse__kv_row_floats(const struct dse_hparams *hp);
/* The row layout of hp's KV in dtype: every field of the view but base and blocks. */
void dse__kv_layout(const struct dse_hparams *hp, enum dse_kv_dtype dtype, struct dse__kv_view *ret_view);
/* DSV_KV=f32|bf16|fp8|int8, else F32. */
int dse__kv_dtype_from_env(enum dse_kv_dtype *ret, struct dse_diag *reterr);
/* Stores x (n) as elements [off, off + n) of layer l's row at pos, converted to the
 * view's type (off and n whole groups for FP8 and INT8); they may span planes. */
void dse__kv_store(const struct dse__kv_view *v, int l, int32_t pos, int32_t off, const float *x, int32_t n);
/* Elements [off, off + n) of layer l's row at pos as floats (one row: the naive MLA form
 * reads its latent through this). */
void dse__kv_load(const struct dse__kv_view *v, int l, int32_t pos, int32_t off, int32_t n, float *out);

/* For dse_batch_step (batch.c). */
/* Nonzero when the cache's rows have the layout hp's forward pass writes. */
int dse__kv_fits_model(const struct dse_kv_cache *kv, const struct dse_hparams *hp);
int32_t dse__kv_n_ctx(const struct dse_kv_cache *kv);
int dse__kv_seq_is_open(const struct dse_kv_cache *kv, int seq);
/* Takes the blocks seq needs for n_tokens more positions; -ENOSPC (nothing taken). */
int dse__kv_seq_reserve(struct dse_kv_cache *kv, int seq, size_t n_tokens);
void dse__kv_seq_view(const struct dse_kv_cache *kv, int seq, struct dse__kv_view *ret_view);
/* For the MTP drafter (mtp_draft.c). */
/* Times slot seq was opened: a sequence's state keyed by it is stale once it changes. */
uint32_t dse__kv_seq_opened(const struct dse_kv_cache *kv, int seq);
/* The ids at positions 0..len-1 of an open sequence. */
const int32_t *dse__kv_seq_tokens(const struct dse_kv_cache *kv, int seq);
/* Entries of its block table in use. */
int32_t dse__kv_seq_n_blocks(const struct dse_kv_cache *kv, int seq);
int32_t dse__kv_block_tokens(const struct dse_kv_cache *kv);
int32_t dse__kv_max_seqs(const struct dse_kv_cache *kv);
/* Takes n blocks out of the pool for a caller's own rows (-ENOSPC: none taken);
 * dse__kv_blocks_put gives them back. Until then dse_kv_cache_stats leaves them out
 * (n_blocks counts the pool without them). */
int dse__kv_blocks_take(struct dse_kv_cache *kv, int n, int32_t *ret);
void dse__kv_blocks_put(struct dse_kv_cache *kv, int n, const int32_t *blocks);
/* Records n_tokens evaluated tokens at the sequence's end and registers every block they
 * filled in the prefix table; n_ahead more positions past them hold draft rows awaiting
 * dse_kv_seq_accept (never registered). */
void dse__kv_seq_commit(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens, size_t n_ahead);

#endif
