/* KV cache memory in 2 MiB pages where the host allows, else 4 KiB (kv_pages.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "env_choice.h"
#include "internal.h"
#include "kv_pages.h"

#define HUGE_PAGE_BYTES ((size_t)2 << 20)
#define THP_ENABLED_PATH "/sys/kernel/mm/transparent_hugepage/enabled"

static const char *const kv_pages_names[DSE_KV_PAGES_COUNT] = {
        [DSE_KV_PAGES_SMALL] = "small",
        [DSE_KV_PAGES_HUGE] = "huge",
};

const char *dse_kv_pages_to_string(enum dse_kv_pages kind) {
        return (unsigned)kind < DSE_KV_PAGES_COUNT ? kv_pages_names[kind] : "unknown";
}

int dse__kv_pages_from_env(enum dse_kv_pages *ret, struct dse_diag *reterr) {
        int k, r = dse__env_choice("DSV_KV_PAGES", "a KV page size", kv_pages_names, DSE_KV_PAGES_COUNT,
                                   DSE_KV_PAGES_HUGE, &k, reterr);
        if (r >= 0)
                *ret = (enum dse_kv_pages)k;
        return r;
}

/* The file shows every mode with the current one in brackets ("always [madvise] never");
 * MADV_HUGEPAGE takes effect unless it is "[never]". A missing file is a kernel without
 * transparent huge pages. */
static int thp_honours_madvise(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        char line[128] = "";
        int ok = fgets(line, sizeof line, f) != NULL && strchr(line, '[') != NULL && strstr(line, "[never]") == NULL;
        fclose(f);
        return ok;
}

int dse__kv_pages_map(size_t bytes, enum dse_kv_pages want, const char *thp_enabled_path,
                      struct dse__kv_pages *ret, struct dse_diag *reterr) {
        if (!ret || bytes == 0 || (unsigned)want >= DSE_KV_PAGES_COUNT)
                return dse__fail(reterr, -EINVAL, "KV cache memory: bad arguments (%zu bytes, pages %d)", bytes,
                                 (int)want);
        struct dse__kv_pages p = {.bytes = bytes, .kind = DSE_KV_PAGES_SMALL};
        int huge = want == DSE_KV_PAGES_HUGE && thp_honours_madvise(thp_enabled_path ? thp_enabled_path
                                                                                      : THP_ENABLED_PATH);
        /* 2 MiB pages cover only 2 MiB-aligned ranges of the mapping: map a page more and
         * start at its first boundary, the slack on both sides given back */
        size_t len = huge ? ((bytes + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1)) : bytes;
        size_t map_bytes = huge ? len + HUGE_PAGE_BYTES : len;
        if (huge && (len < bytes || map_bytes < len))
                return dse__fail(reterr, -ENOMEM, "KV cache memory: %zu bytes is too large to map", bytes);
        uint8_t *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
                return dse__fail(reterr, -ENOMEM, "KV cache memory: cannot map %zu MiB: %s", map_bytes >> 20,
                                 strerror(errno));
        p.map = map;
        p.map_bytes = map_bytes;
        p.base = map;
        if (huge) {
                uint8_t *start = (uint8_t *)(((uintptr_t)map + HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1));
                size_t head = (size_t)(start - map), tail = map_bytes - head - len;
                if (head)
                        munmap(map, head);
                if (tail)
                        munmap(start + len, tail);
                p.map = p.base = start;
                p.map_bytes = len;
                /* refused (a kernel built without transparent huge pages): 4 KiB pages */
                if (madvise(start, len, MADV_HUGEPAGE) == 0)
                        p.kind = DSE_KV_PAGES_HUGE;
        }
        *ret = p;
        return 0;
}

void dse__kv_pages_unmap(struct dse__kv_pages *p) {
        if (p->map)
                munmap(p->map, p->map_bytes);
        memset(p, 0, sizeof *p);
}
