/* The mask tables' open-addressing index (hash_index.h). */
#include <errno.h>
#include <stdlib.h>

#include "grammar/hash_index.h"

#define HASH_INDEX_FIRST_SIZE 64u

int dse__grammar_hash_index_reserve(struct grammar_hash_index *ix, uint64_t n_items, uint32_t n_indexed,
                                    uint32_t (*hash_of)(const void *ctx, uint32_t item), const void *ctx) {
        if (2 * n_items <= ix->size)
                return 0;
        uint64_t size = ix->size ? 2 * (uint64_t)ix->size : HASH_INDEX_FIRST_SIZE;
        while (2 * n_items > size)
                size *= 2;
        if (size > (uint64_t)1 << 31)
                return -E2BIG;
        uint32_t *slots = calloc(size, sizeof *slots);
        if (!slots)
                return -ENOMEM;
        free(ix->slots);
        ix->slots = slots;
        ix->size = (uint32_t)size;
        for (uint32_t i = 0; i < n_indexed; i++)
                dse__grammar_hash_index_put(ix, hash_of(ctx, i), i);
        return 0;
}

void dse__grammar_hash_index_put(struct grammar_hash_index *ix, uint32_t hash, uint32_t item) {
        uint32_t mask = ix->size - 1, k = hash & mask;
        while (ix->slots[k])
                k = (k + 1) & mask;
        ix->slots[k] = item + 1;
}

void dse__grammar_hash_index_done(struct grammar_hash_index *ix) {
        free(ix->slots);
        ix->slots = NULL;
        ix->size = 0;
}
