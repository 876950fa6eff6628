/* An open-addressing index over numbered items by a 32-bit hash of each, for the
 * tables the mask keeps (the mask cache's entries, the trie walk's states). The items
 * and their keys live with the caller, who probes and compares: from hash & (size - 1)
 * on, one slot after another (wrapping), until an empty slot. A slot holds 1 + an
 * item's number, 0 when empty; the index is kept at most half full. */
#ifndef DSE_GRAMMAR_HASH_INDEX_H
#define DSE_GRAMMAR_HASH_INDEX_H

#include <stdint.h>

struct grammar_hash_index {
        uint32_t *slots;
        uint32_t size; /* 0 (nothing indexed yet) or a power of two */
};

/* Makes room for n_items items at most half full. When the slots must grow, they
 * double (from 64) until they do, and items 0..n_indexed-1 are put back, in order, by
 * hash_of(ctx, item). 0, or -ENOMEM (-E2BIG past 2^31 slots) leaving the index as it
 * was. */
int dse__grammar_hash_index_reserve(struct grammar_hash_index *ix, uint64_t n_items, uint32_t n_indexed,
                                    uint32_t (*hash_of)(const void *ctx, uint32_t item), const void *ctx);

/* Puts item under hash in the first empty slot of its probe; the caller has reserved
 * room for it. */
void dse__grammar_hash_index_put(struct grammar_hash_index *ix, uint32_t hash, uint32_t item);

void dse__grammar_hash_index_done(struct grammar_hash_index *ix);

#endif
