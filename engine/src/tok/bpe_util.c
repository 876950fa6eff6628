/* The page-aligned tables of the tokenizer.json implementation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bpe_impl.h"

/* Loading a 128k-vocabulary tokenizer.json first-touches ~35 MB of fresh tables (the
 * JSON nodes and strings, the hash tables). On 4 KiB pages that is ~9,000 page faults,
 * a tenth of the load time; transparent huge pages (the "madvise" setting is the common
 * default) cut that to a few dozen, but only for 2 MiB extents that are 2 MiB-aligned,
 * which malloc's blocks are not. So big blocks are mapped here, aligned, and small ones
 * come from calloc (64-byte aligned, the raw pointer kept just before the block). */
#define BPE_MAP_MIN (4u << 20)
#define BPE_HUGE ((size_t)2 << 20)

static size_t map_len(size_t n) {
        return (n + BPE_HUGE - 1) & ~(BPE_HUGE - 1);
}

void *dse__bpe_map(size_t n) {
        if (n < BPE_MAP_MIN) {
                char *raw = calloc(1, n + 64);
                if (!raw)
                        return NULL;
                char *p = raw + (64 - (uintptr_t)raw % 64); /* >= raw + 16: calloc aligns to 16 */
                memcpy(p - sizeof raw, &raw, sizeof raw);
                return p;
        }
        if (n > SIZE_MAX - 2 * BPE_HUGE)
                return NULL;
        size_t len = map_len(n);
        char *m = mmap(NULL, len + BPE_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                       0);
        if (m == MAP_FAILED)
                return NULL;
        char *p = (char *)(((uintptr_t)m + BPE_HUGE - 1) & ~(uintptr_t)(BPE_HUGE - 1));
        if (p > m)
                munmap(m, (size_t)(p - m));
        if (m + len + BPE_HUGE > p + len)
                munmap(p + len, (size_t)(m + len + BPE_HUGE - (p + len)));
        (void)madvise(p, len, MADV_HUGEPAGE); /* failure only costs speed */
        return p;
}

void dse__bpe_unmap(void *p, size_t n) {
        if (!p)
                return;
        if (n < BPE_MAP_MIN) {
                char *raw;
                memcpy(&raw, (char *)p - sizeof raw, sizeof raw);
                free(raw);
                return;
        }
        munmap(p, map_len(n));
}
