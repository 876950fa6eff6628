/* Arena of zeroed, 64-byte aligned blocks (arena.h): one allocation per block, chained
 * for the free. */
#include <stdlib.h>
#include <string.h>

#include "arena.h"

struct dse__arena_chunk {
        struct dse__arena_chunk *next;
        char pad[56]; /* keeps the payload 64-byte aligned */
};

void *dse__arena_alloc(struct dse__arena *a, size_t bytes) {
        size_t total = sizeof(struct dse__arena_chunk) + ((bytes + 63) & ~(size_t)63);
        struct dse__arena_chunk *c = aligned_alloc(64, total);
        if (!c)
                return NULL;
        memset(c, 0, total);
        c->next = a->chunks;
        a->chunks = c;
        a->bytes += total;
        return c + 1;
}

void dse__arena_free(struct dse__arena *a) {
        while (a->chunks) {
                struct dse__arena_chunk *next = a->chunks->next;
                free(a->chunks);
                a->chunks = next;
        }
        a->bytes = 0;
}
