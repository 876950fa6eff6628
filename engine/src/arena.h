/* Zeroed, 64-byte aligned blocks that live as long as their owner (a session's
 * activations and scratch, a model's bound weights) and are freed together. */
#ifndef DSE_ARENA_H
#define DSE_ARENA_H

#include <stddef.h>

struct dse__arena_chunk;

struct dse__arena {
        struct dse__arena_chunk *chunks;
        size_t bytes; /* allocated so far, headers and padding included */
};

/* A zeroed block of `bytes`, 64-byte aligned; NULL on ENOMEM. */
void *dse__arena_alloc(struct dse__arena *a, size_t bytes);

/* Frees every block; the arena is empty again. */
void dse__arena_free(struct dse__arena *a);

#endif
