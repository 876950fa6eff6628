/* CPU feature detection with cpuid and xgetbv, and the resolved kernel level.
 *
 * A feature counts only when the CPU reports it *and* the OS saves its register state
 * (XCR0), which ggml's scorer does not check: a hypervisor may hide AVX-512 state even
 * when cpuid leaks the bits. */
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env_choice.h"
#include "internal.h"

#define XCR0_SSE      (1u << 1)
#define XCR0_AVX      (1u << 2)
#define XCR0_OPMASK   (1u << 5)
#define XCR0_ZMM_HI   (1u << 6)
#define XCR0_HI16_ZMM (1u << 7)
#define XCR0_TILECFG  (1u << 17)
#define XCR0_TILEDATA (1u << 18)

static const char *const level_names[DSE_CPU_LEVEL_COUNT] = {
        [DSE_CPU_SCALAR] = "scalar",
        [DSE_CPU_AVX2] = "avx2",
        [DSE_CPU_AVX512] = "avx512",
};

const char *dse_cpu_level_to_string(enum dse_cpu_level level) {
        return level < DSE_CPU_LEVEL_COUNT ? level_names[level] : "unknown";
}

static uint64_t read_xcr0(void) {
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        return ((uint64_t)hi << 32) | lo;
}

static void detect_features(struct dse_cpu_info *info) {
        unsigned a, b, c, d;
        memset(info, 0, sizeof *info);
        if (!__get_cpuid(0, &a, &b, &c, &d))
                return;
        unsigned max_leaf = a;
        memcpy(info->vendor + 0, &b, 4);
        memcpy(info->vendor + 4, &d, 4);
        memcpy(info->vendor + 8, &c, 4);

        __cpuid(1, a, b, c, d);
        int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
        int fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
        uint64_t xcr0 = osxsave ? read_xcr0() : 0;
        int os_ymm = (xcr0 & (XCR0_SSE | XCR0_AVX)) == (XCR0_SSE | XCR0_AVX);
        int os_zmm = os_ymm && (xcr0 & (XCR0_OPMASK | XCR0_ZMM_HI | XCR0_HI16_ZMM)) ==
                                       (XCR0_OPMASK | XCR0_ZMM_HI | XCR0_HI16_ZMM);
        int os_amx = (xcr0 & (XCR0_TILECFG | XCR0_TILEDATA)) == (XCR0_TILECFG | XCR0_TILEDATA);
        if (max_leaf < 7 || !avx || !os_ymm)
                return;

        unsigned b7, c7, d7, a71 = 0, b71, c71, d71;
        __cpuid_count(7, 0, a, b7, c7, d7);
        if (a >= 1)
                __cpuid_count(7, 1, a71, b71, c71, d71);
        info->avx2 = (b7 >> 5) & 1;
        info->fma = fma;
        info->f16c = f16c;
        if (os_zmm) {
                info->avx512f = (b7 >> 16) & 1;
                info->avx512bw = (b7 >> 30) & 1;
                info->avx512vl = (b7 >> 31) & 1;
                info->avx512vnni = (c7 >> 11) & 1;
                info->avx512bf16 = (a71 >> 5) & 1;
        }
        if (os_amx) {
                info->amx_bf16 = (d7 >> 22) & 1;
                info->amx_tile = (d7 >> 24) & 1;
                info->amx_int8 = (d7 >> 25) & 1;
        }
}

static enum dse_cpu_level best_level(const struct dse_cpu_info *info) {
        if (info->avx512f && info->avx512bw && info->avx512vl && info->avx2 && info->fma && info->f16c)
                return DSE_CPU_AVX512;
        if (info->avx2 && info->fma && info->f16c)
                return DSE_CPU_AVX2;
        return DSE_CPU_SCALAR;
}

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static struct dse_cpu_info detected_info;

static void detect_once_fn(void) {
        detect_features(&detected_info);
        detected_info.detected = best_level(&detected_info);
}

int dse_cpu_detect(struct dse_cpu_info *ret_info, struct dse_diag *reterr) {
        if (!ret_info)
                return -EINVAL;
        pthread_once(&detect_once, detect_once_fn);
        struct dse_cpu_info info = detected_info;
        info.level = info.detected;

        int want;
        int r = dse__env_choice("DSV_CPU", "a CPU level", level_names, DSE_CPU_LEVEL_COUNT, -1, &want, reterr);
        if (r < 0)
                return r;
        if (want > (int)info.detected)
                return dse__fail(reterr, -EOPNOTSUPP, "DSV_CPU=%s, but this CPU (with this OS) supports only '%s'",
                                 level_names[want], level_names[info.detected]);
        if (want >= 0)
                info.level = (enum dse_cpu_level)want;
        *ret_info = info;
        return 0;
}

int dse_cpu_info_format(const struct dse_cpu_info *info, char *buf, size_t size) {
        struct {
                unsigned on;
                const char *name;
        } feats[] = {
                {info->avx2, "avx2"},           {info->fma, "fma"},
                {info->f16c, "f16c"},           {info->avx512f, "avx512f"},
                {info->avx512bw, "avx512bw"},   {info->avx512vl, "avx512vl"},
                {info->avx512vnni, "avx512_vnni"}, {info->avx512bf16, "avx512_bf16"},
                {info->amx_tile, "amx_tile"},   {info->amx_int8, "amx_int8"},
                {info->amx_bf16, "amx_bf16"},
        };
        char list[256] = "";
        size_t n = 0;
        for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
                if (feats[i].on && n < sizeof list)
                        n += snprintf(list + n, sizeof list - n, "%s%s", n ? " " : "", feats[i].name);
        int len = snprintf(buf, size, "cpu: %s\nfeatures: %s\ndetected level: %s\nlevel in use: %s%s\n",
                           info->vendor[0] ? info->vendor : "unknown", n ? list : "(none)",
                           dse_cpu_level_to_string(info->detected), dse_cpu_level_to_string(info->level),
                           info->level != info->detected ? " (forced by DSV_CPU)" : "");
        if (len < 0)
                return -EINVAL;
        return (size_t)len < size ? len : (int)(size ? size - 1 : 0);
}
