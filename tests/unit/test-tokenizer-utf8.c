/* UTF-8 validation of the tokenizer.json reader and encoder: the AVX2 validator
 * (dse__utf8_valid_avx2) must agree with the byte-by-byte reference
 * (dse__utf8_valid_prefix_ref) on every input, and the dispatching dse__utf8_valid_prefix
 * must return the reference's prefix length. Exhaustive over every 2-byte pattern and
 * every lead/second-byte pair of the long sequences, placed at every offset around a
 * 32-byte block boundary, plus random near-UTF-8 buffers. */
#include <stdint.h>

#include "t.h"
#include "utf8.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) { return (uint32_t)(t_xorshift64(&rng) >> 16); }

/* One buffer through all three: 1 when they agree. */
static int agree(const char *s, size_t len) {
        size_t ref = dse__utf8_valid_prefix_ref(s, len);
        size_t got = dse__utf8_valid_prefix(s, len);
        int ok = got == ref;
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx2"))
                ok &= dse__utf8_valid_avx2(s, len) == (ref == len);
#endif
        if (!ok) {
                fprintf(stderr, "  disagree (ref prefix %zu of %zu, dispatch %zu):", ref, len, got);
                for (size_t i = 0; i < len; i++)
                        if ((unsigned char)s[i] >= 0x80)
                                fprintf(stderr, " [%zu]=%02x", i, (unsigned char)s[i]);
                fprintf(stderr, "\n");
        }
        return ok;
}

TEST(every_two_byte_pattern_at_every_offset) {
        char buf[96];
        for (int a = 0x80; a < 0x100; a++)
                for (int b = 0; b < 0x100; b += (b < 0x7E ? 0x3F : 1))
                        for (size_t off = 0; off + 2 <= sizeof buf; off += (off >= 26 && off <= 36) || off >= 90 ? 1 : 7) {
                                memset(buf, 'a', sizeof buf);
                                buf[off] = (char)a;
                                buf[off + 1] = (char)b;
                                ASSERT_TRUE(agree(buf, sizeof buf));
                                ASSERT_TRUE(agree(buf, off + 2)); /* ending right after the pair */
                                ASSERT_TRUE(agree(buf, off + 1)); /* cut after the first byte */
                        }
}

TEST(every_long_sequence_edge_at_the_block_boundary) {
        static const uint8_t leads[] = {0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFF};
        static const uint8_t conts[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0};
        char buf[80];
        for (size_t l = 0; l < sizeof leads; l++)
                for (size_t b = 0; b < sizeof conts; b++)
                        for (size_t c = 0; c < sizeof conts; c++)
                                for (size_t d = 0; d < sizeof conts; d++)
                                        for (size_t off = 26; off <= 36; off++) {
                                                memset(buf, ' ', sizeof buf);
                                                buf[off] = (char)leads[l];
                                                buf[off + 1] = (char)conts[b];
                                                buf[off + 2] = (char)conts[c];
                                                buf[off + 3] = (char)conts[d];
                                                ASSERT_TRUE(agree(buf, sizeof buf));
                                                ASSERT_TRUE(agree(buf, off + 3)); /* cut inside */
                                                ASSERT_TRUE(agree(buf, 64 + (off & 3)));
                                        }
}

/* Valid text of random code points (all lengths), then single-byte damage. */
TEST(random_text_and_damaged_text) {
        char buf[512];
        for (int iter = 0; iter < 20000; iter++) {
                size_t n = 0, want = 64 + next_u32() % 400;
                while (n + 4 <= want) {
                        uint32_t k = next_u32() % 5, cp;
                        if (k == 0)
                                cp = next_u32() % 0x80;
                        else if (k == 1)
                                cp = 0x80 + next_u32() % (0x800 - 0x80);
                        else if (k == 2)
                                cp = 0x800 + next_u32() % (0x10000 - 0x800);
                        else if (k == 3)
                                cp = 0x10000 + next_u32() % (0x110000 - 0x10000);
                        else
                                cp = 0x100 + next_u32() % 0x44; /* ByteLevel's alphabet */
                        if (cp >= 0xD800 && cp <= 0xDFFF)
                                cp = 0xFFFD;
                        n += (size_t)dse__utf8_encode((int32_t)cp, buf + n);
                }
                ASSERT_EQ(dse__utf8_valid_prefix_ref(buf, n), n);
                ASSERT_TRUE(agree(buf, n));
                size_t at = next_u32() % n;
                buf[at] = (char)next_u32();
                ASSERT_TRUE(agree(buf, n));
                ASSERT_TRUE(agree(buf, at + 1));
        }
}

TEST(random_bytes) {
        char buf[300];
        for (int iter = 0; iter < 20000; iter++) {
                size_t n = 64 + next_u32() % 236;
                for (size_t i = 0; i < n; i++) /* mostly ASCII, some high bytes */
                        buf[i] = (char)(next_u32() % 8 ? next_u32() % 0x80 : 0x80 + next_u32() % 0x80);
                ASSERT_TRUE(agree(buf, n));
        }
}
