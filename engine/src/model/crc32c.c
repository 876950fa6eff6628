/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the per-tensor checksum of the
 * native format (FORMAT.md). Two implementations with one contract: a slicing-by-8 table
 * version (the reference, dse__crc32c_ref) and the SSE4.2 crc32 instruction, chosen at run
 * time. Check value: crc32c("123456789") = 0xE3069283 (RFC 3720, appendix B.4). */
#include <stdint.h>
#include <string.h>

#include "format.h"

static uint32_t crc_table[8][256];

static void crc_table_init(void) {
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++)
                        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
                crc_table[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
                for (int t = 1; t < 8; t++)
                        crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static uint32_t crc32c_table(uint32_t crc, const uint8_t *p, size_t len) {
        crc = ~crc;
        while (len && ((uintptr_t)p & 7)) {
                crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
                len--;
        }
        while (len >= 8) {
                uint64_t v;
                memcpy(&v, p, 8); /* little-endian host (x86-64) */
                v ^= crc;
                crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^ crc_table[5][(v >> 16) & 0xff] ^
                      crc_table[4][(v >> 24) & 0xff] ^ crc_table[3][(v >> 32) & 0xff] ^
                      crc_table[2][(v >> 40) & 0xff] ^ crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
                p += 8;
                len -= 8;
        }
        while (len--)
                crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
        return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p, size_t len) {
        uint64_t c = ~crc;
        while (len && ((uintptr_t)p & 7)) {
                c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
                len--;
        }
        while (len >= 8) {
                uint64_t v;
                memcpy(&v, p, 8);
                c = __builtin_ia32_crc32di(c, v);
                p += 8;
                len -= 8;
        }
        while (len--)
                c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        return ~(uint32_t)c;
}
#endif

static uint32_t (*crc_impl)(uint32_t, const uint8_t *, size_t);

__attribute__((constructor)) static void crc_init(void) {
        crc_table_init();
        crc_impl = crc32c_table;
#if defined(__x86_64__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2"))
                crc_impl = crc32c_sse42;
#endif
}

uint32_t dse__crc32c_ref(uint32_t crc, const void *buf, size_t len) {
        return crc32c_table(crc, buf, len);
}

uint32_t dse__crc32c(uint32_t crc, const void *buf, size_t len) {
        return crc_impl(crc, buf, len);
}
