/* What the kernel tests share: seeded random data, the e4m3 decoder the oracles use
 * (written from the format, independent of ref.c) and the highest level to test. */
#ifndef DSV_TESTS_KERNEL_TEST_DATA_H
#define DSV_TESTS_KERNEL_TEST_DATA_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "t.h"

static uint64_t rng_state;
static inline void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }
static inline uint32_t rng_u32(void) { return (uint32_t)(t_xorshift64(&rng_state) >> 11); }
static inline float rng_unit(void) { return (float)(rng_u32() % 2000001) / 1000000.0f - 1.0f; }

static inline double bf16_value(uint16_t h) {
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
}

static inline double f8_value(uint8_t b) {
        int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
        double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
        return s ? -v : v;
}

static inline enum dse_cpu_level detected_level(void) {
        struct dse_cpu_info cpu;
        unsetenv("DSV_CPU");
        return dse_cpu_detect(&cpu, NULL) < 0 ? DSE_CPU_SCALAR : cpu.detected;
}

#endif
