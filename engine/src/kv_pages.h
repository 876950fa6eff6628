/* The memory behind a KV cache (the paged pool's blocks, a session's private rows): an
 * anonymous private mapping, zero until written, faulted in as it is first touched.
 *
 * Decode attention at depth streams every cached row of every layer once per token: a
 * working set of hundreds of MiB walked in long runs. With 4 KiB pages each 4 KiB of it
 * costs a TLB entry (and a page walk when it has gone), so the mapping asks for 2 MiB
 * pages: its start is aligned to 2 MiB and marked MADV_HUGEPAGE, which transparent huge
 * pages honour in both the "always" and the "madvise" mode. Where the kernel has no
 * transparent huge pages, or they are off ("never"), or DSV_KV_PAGES=small asks for
 * it, the same mapping serves in 4 KiB pages; dse__kv_pages_map reports which one it
 * asked for (enum dse_kv_pages, dse.h). Hugetlbfs pages are left to the weights (the
 * supervisor reserves them per node for the weight image). */
#ifndef DSE_KV_PAGES_H
#define DSE_KV_PAGES_H

#include <stddef.h>

#include "dse.h"

struct dse__kv_pages {
        void *base;        /* (bytes) zero-filled, 2 MiB aligned when kind is HUGE */
        size_t bytes;      /* asked for */
        void *map;         /* the whole mapping behind base, for the unmap */
        size_t map_bytes;
        enum dse_kv_pages kind;
};

/* DSV_KV_PAGES=huge|small, else HUGE. -EINVAL (naming the choices) on another value. */
int dse__kv_pages_from_env(enum dse_kv_pages *ret, struct dse_diag *reterr);
/* Maps bytes (> 0) of zeroed memory, in 2 MiB pages when want is HUGE and the host's
 * transparent huge pages allow (thp_enabled_path: the sysfs file saying their mode;
 * NULL: /sys/kernel/mm/transparent_hugepage/enabled), else in 4 KiB pages; ret->kind
 * says which. -ENOMEM (with the size) when the mapping fails. */
int dse__kv_pages_map(size_t bytes, enum dse_kv_pages want, const char *thp_enabled_path,
                      struct dse__kv_pages *ret, struct dse_diag *reterr);
/* Unmaps p's memory (nothing when p->map is NULL) and clears p. */
void dse__kv_pages_unmap(struct dse__kv_pages *p);

#endif
