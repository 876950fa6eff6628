/* Kernel table resolution: the _ref twins first, then the overrides of each level up to
 * the one asked for. The level comes from dse_cpu_detect(), which honours DSV_CPU. */
#include <errno.h>

#include "kernels/kernels.h"

int dse_kernels_resolve(enum dse_cpu_level level, struct dse_kernels *ret_k) {
        if (!ret_k || (unsigned)level >= DSE_CPU_LEVEL_COUNT)
                return -EINVAL;
        struct dse_kernels k;
        dse__kernels_fill_ref(&k);
        if (level >= DSE_CPU_AVX2)
                dse__kernels_fill_avx2(&k); /* AVX-512 reuses the AVX2 entries until avx512.c lands */
        *ret_k = k;
        return 0;
}
