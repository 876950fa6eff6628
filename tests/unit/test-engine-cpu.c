#include <stdlib.h>

#include "dse.h"
#include "t.h"

TEST(detect_is_consistent) {
        unsetenv("DSV_CPU");
        struct dse_cpu_info info;
        ASSERT_OK(dse_cpu_detect(&info, NULL));
        ASSERT_EQ(info.level, info.detected);
        /* Level implications: a level is only reported when its features are present. */
        if (info.detected >= DSE_CPU_AVX2)
                ASSERT_TRUE(info.avx2 && info.fma && info.f16c);
        if (info.detected >= DSE_CPU_AVX512)
                ASSERT_TRUE(info.avx512f && info.avx512bw && info.avx512vl);
        /* This machine's /proc/cpuinfo agrees with cpuid on avx2. */
        FILE *f = fopen("/proc/cpuinfo", "r");
        ASSERT_TRUE(f != NULL);
        char line[8192];
        int has_avx2 = 0;
        while (fgets(line, sizeof line, f))
                if (strncmp(line, "flags", 5) == 0) {
                        has_avx2 = strstr(line, " avx2") != NULL;
                        break;
                }
        fclose(f);
        ASSERT_EQ(info.avx2, has_avx2);
}

TEST(force_every_supported_level) {
        struct dse_cpu_info info;
        unsetenv("DSV_CPU");
        ASSERT_OK(dse_cpu_detect(&info, NULL));
        for (int l = 0; l <= (int)info.detected; l++) {
                setenv("DSV_CPU", dse_cpu_level_to_string((enum dse_cpu_level)l), 1);
                struct dse_cpu_info forced;
                ASSERT_OK(dse_cpu_detect(&forced, NULL));
                ASSERT_EQ(forced.level, l);
        }
        unsetenv("DSV_CPU");
}

TEST(unknown_or_unsupported_level_is_an_error) {
        struct dse_cpu_info info;
        struct dse_diag diag = {{0}};
        setenv("DSV_CPU", "sse9", 1);
        ASSERT_ERR(dse_cpu_detect(&info, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "sse9") != NULL);
        unsetenv("DSV_CPU");
        ASSERT_OK(dse_cpu_detect(&info, NULL));
        if (info.detected < DSE_CPU_AVX512) {
                setenv("DSV_CPU", "avx512", 1);
                ASSERT_ERR(dse_cpu_detect(&info, &diag), -EOPNOTSUPP);
                unsetenv("DSV_CPU");
        }
}

TEST(format_names_levels) {
        struct dse_cpu_info info;
        unsetenv("DSV_CPU");
        ASSERT_OK(dse_cpu_detect(&info, NULL));
        char buf[512];
        ASSERT_TRUE(dse_cpu_info_format(&info, buf, sizeof buf) > 0);
        ASSERT_TRUE(strstr(buf, dse_cpu_level_to_string(info.level)) != NULL);
}
