/* Kernel table resolution: the _ref twins first, then the overrides of each level up to
 * the one asked for. The level comes from dse_cpu_detect(), which honours DSV_CPU. */
#include <errno.h>
#include <stdlib.h>

#include "kernels/kernels.h"

static size_t align64(size_t v) {
        return (v + 63) & ~(size_t)63;
}

size_t dse__xq_bytes(int64_t n, int64_t cols) {
        size_t nb = (size_t)((cols + DSE_XQ_BLOCK - 1) / DSE_XQ_BLOCK);
        return align64((size_t)n * nb * DSE_XQ_BLOCK) + align64((size_t)n * nb * sizeof(float));
}

void dse__xq_init(struct dse_xq *xq, void *mem, int64_t n, int64_t cols) {
        xq->n = n;
        xq->cols = cols;
        xq->n_blocks = (cols + DSE_XQ_BLOCK - 1) / DSE_XQ_BLOCK;
        xq->q = mem;
        xq->d = (float *)((char *)mem + align64((size_t)n * (size_t)xq->n_blocks * DSE_XQ_BLOCK));
}

int dse__kernels_resolve_with(enum dse_cpu_level level, unsigned feat, struct dse_kernels *ret_k) {
        if (!ret_k || (unsigned)level >= DSE_CPU_LEVEL_COUNT)
                return -EINVAL;
        struct dse_kernels k;
        dse__kernels_fill_ref(&k);
        if (level >= DSE_CPU_AVX2) {
                dse__kernels_fill_avx2(&k);
                dse__kernels_fill_avx2_kv(&k);
                dse__kernels_fill_avx2_q8_xq(&k);
        }
        if (level >= DSE_CPU_AVX512) {
                int amx = (feat & DSE_KFEAT_AMX) && dse__kernels_amx_usable();
                dse__kernels_fill_avx512(&k);
                dse__kernels_fill_avx512_kv(&k);
                if (feat & DSE_KFEAT_BF16) {
                        dse__kernels_fill_avx512_bf16(&k);
                        dse__kernels_fill_avx512_bf16_kv(&k);
                        if (amx)
                                dse__kernels_fill_amx_bf16(&k);
                }
                if (feat & DSE_KFEAT_VNNI) {
                        dse__kernels_fill_avx512_vnni(&k);
                        /* AMX leaves fewer tokens to the 8-token layout: with AMX the
                         * entries below it are always those */
                        if ((feat & DSE_KFEAT_T8) || amx)
                                dse__kernels_fill_avx512_t8(&k);
                        if (amx)
                                dse__kernels_fill_amx(&k);
                }
        }
        *ret_k = k;
        return 0;
}

/* The level says F+BW+VL; VNNI, BF16 and AMX are sub-features cpu.c reports beside it (a
 * DSV_CPU that names no level makes detection fail, and then neither is assumed).
 * DSV_NO_AMX=1 leaves out AMX and the 8- and 16-token VNNI layouts: every kernel whose float order
 * depends on the number of tokens per call, for batch invariance (the worker's default). */
int dse_kernels_resolve(enum dse_cpu_level level, struct dse_kernels *ret_k) {
        struct dse_cpu_info cpu;
        unsigned feat = 0;
        if (level >= DSE_CPU_AVX512 && dse_cpu_detect(&cpu, NULL) >= 0) {
                const char *no_amx = getenv("DSV_NO_AMX");
                feat |= cpu.avx512vnni ? DSE_KFEAT_VNNI : 0;
                feat |= cpu.avx512bf16 ? DSE_KFEAT_BF16 : 0;
                /* AMX-BF16 ships with AMX-INT8 on every CPU that has either */
                feat |= cpu.amx_tile && cpu.amx_int8 && cpu.amx_bf16 && !(no_amx && *no_amx == '1') ? DSE_KFEAT_AMX : 0;
                feat |= cpu.avx512vnni && !(no_amx && *no_amx == '1') ? DSE_KFEAT_T8 : 0;
        }
        return dse__kernels_resolve_with(level, feat, ret_k);
}
