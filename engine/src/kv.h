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
 * block blocks[p / block_tokens]; a block holds every layer, layer-major, so one layer's
 * rows of a block are contiguous. A session's private cache is the special case of one
 * block of n_ctx positions. */
struct dse__kv_view {
        float *base;           /* (n_blocks, n_layers, block_tokens, row_floats) */
        const int32_t *blocks; /* (ceil(n_ctx / block_tokens)) block table */
        int32_t block_tokens;
        int32_t n_layers;
        int32_t row_floats;    /* one position of one layer: llama [k | v], MLA [c | k_pe] */
};

/* (row_floats) the KV row of layer l at position pos. */
static inline float *dse__kv_row(const struct dse__kv_view *v, int l, int32_t pos) {
        size_t b = (size_t)v->blocks[pos / v->block_tokens];
        return v->base + ((b * (size_t)v->n_layers + (size_t)l) * (size_t)v->block_tokens +
                          (size_t)(pos % v->block_tokens)) * (size_t)v->row_floats;
}

/* Positions from pos on (before end) whose rows of a layer lie back to back, row_floats
 * apart: up to the end of pos's block. */
static inline int32_t dse__kv_run(const struct dse__kv_view *v, int32_t pos, int32_t end) {
        int32_t left = v->block_tokens - pos % v->block_tokens;
        return end - pos < left ? end - pos : left;
}

/* Floats of KV one position of one layer needs for the model's architecture: llama and
 * qwen2 2 * n_kv_heads * head_dim, DeepSeek MLA kv_lora_rank + qk_rope_head_dim; 0 for
 * an architecture without a forward pass. */
int32_t dse__kv_row_floats(const struct dse_hparams *hp);

/* For dse_batch_step (batch.c). */
/* Nonzero when the cache's rows have the layout hp's forward pass writes. */
int dse__kv_fits_model(const struct dse_kv_cache *kv, const struct dse_hparams *hp);
int32_t dse__kv_n_ctx(const struct dse_kv_cache *kv);
int dse__kv_seq_is_open(const struct dse_kv_cache *kv, int seq);
/* Takes the blocks seq needs for n_tokens more positions; -ENOSPC (nothing taken). */
int dse__kv_seq_reserve(struct dse_kv_cache *kv, int seq, size_t n_tokens);
void dse__kv_seq_view(const struct dse_kv_cache *kv, int seq, struct dse__kv_view *ret_view);
/* Records n_tokens evaluated tokens at the sequence's end and registers every block they
 * filled in the prefix table; n_ahead more positions past them hold draft rows awaiting
 * dse_kv_seq_accept (never registered). */
void dse__kv_seq_commit(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens, size_t n_ahead);

#endif
