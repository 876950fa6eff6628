/* UTF-8 for the whole engine: the validator (a measured AVX2 path beside its byte-by-byte
 * reference), one checked decoder and the encoder (both utf8proc's), the unchecked
 * decoder for text already validated, and the two whitespace sets tokenizers and chat
 * templates need. */
#include "utf8.h"

#include <string.h>

#include <utf8proc.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The length of the sequence lead byte c starts (2 to 4) and the range its second byte
 * must fall in (no overlong forms, surrogates or values past U+10FFFF); 0 for a byte
 * that starts none. */
static size_t seq_bounds(unsigned c, unsigned *lo, unsigned *hi) {
        *lo = 0x80;
        *hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
                return 2;
        if (c >= 0xE0 && c <= 0xEF) {
                *lo = c == 0xE0 ? 0xA0 : 0x80;
                *hi = c == 0xED ? 0x9F : 0xBF;
                return 3;
        }
        if (c >= 0xF0 && c <= 0xF4) {
                *lo = c == 0xF0 ? 0x90 : 0x80;
                *hi = c == 0xF4 ? 0x8F : 0xBF;
                return 4;
        }
        return 0;
}

size_t dse__utf8_valid_prefix_ref(const char *str, size_t len) {
        const unsigned char *s = (const unsigned char *)str;
        size_t i = 0;
        while (i < len) {
                /* ASCII fast path, 8 bytes at a time */
                while (i + 8 <= len) {
                        uint64_t w;
                        memcpy(&w, s + i, 8);
                        if (w & 0x8080808080808080ull)
                                break;
                        i += 8;
                }
                if (i >= len)
                        break;
                unsigned c = s[i];
                if (c < 0x80) {
                        i++;
                        continue;
                }
                /* common cases first: two bytes (Latin, Cyrillic, the ByteLevel alphabet) */
                if (c >= 0xC2 && c <= 0xDF && i + 1 < len && dse__utf8_is_cont(s[i + 1])) {
                        i += 2;
                        continue;
                }
                unsigned lo, hi;
                size_t n = seq_bounds(c, &lo, &hi);
                if (n == 0 || i + n > len)
                        return i;
                if (s[i + 1] < lo || s[i + 1] > hi)
                        return i;
                for (size_t k = 2; k < n; k++)
                        if (!dse__utf8_is_cont(s[i + k]))
                                return i;
                i += n;
        }
        return len;
}

#if defined(__x86_64__)
/* UTF-8 validation 32 bytes at a time: the lookup algorithm of Keiser and Lemire,
 * "Validating UTF-8 In Less Than One Instruction Per Byte" (SPE 2021), as in simdjson.
 * Three 16-entry tables, indexed by the high and low nibble of the previous byte and the
 * high nibble of the current one, flag every invalid two-byte pattern; the third and
 * fourth bytes of long sequences are checked by their distance from a lead byte. The
 * byte-by-byte loop above is the reference; this answers only "all valid?". It pays on
 * tokenizer.json files: megabytes of two-byte ByteLevel characters, validated at load. */
#define U8_TOO_SHORT (1 << 0)
#define U8_TOO_LONG (1 << 1)
#define U8_OVERLONG_3 (1 << 2)
#define U8_TOO_LARGE (1 << 3)
#define U8_SURROGATE (1 << 4)
#define U8_OVERLONG_2 (1 << 5)
#define U8_TOO_LARGE_1000 (1 << 6)
#define U8_OVERLONG_4 (1 << 6)
#define U8_TWO_CONTS (1 << 7)
#define U8_CARRY (U8_TOO_SHORT | U8_TOO_LONG | U8_TWO_CONTS)

static const uint8_t u8_t1[16] = {
        /* previous byte's high nibble: 0___ ASCII, 10__ continuation, 1100, 1101, 1110, 1111 leads */
        U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG,
        U8_TWO_CONTS, U8_TWO_CONTS, U8_TWO_CONTS, U8_TWO_CONTS, U8_TOO_SHORT | U8_OVERLONG_2, U8_TOO_SHORT,
        U8_TOO_SHORT | U8_OVERLONG_3 | U8_SURROGATE, U8_TOO_SHORT | U8_TOO_LARGE | U8_TOO_LARGE_1000 | U8_OVERLONG_4,
};
static const uint8_t u8_t2[16] = {
        /* previous byte's low nibble */
        U8_CARRY | U8_OVERLONG_3 | U8_OVERLONG_2 | U8_OVERLONG_4, U8_CARRY | U8_OVERLONG_2, U8_CARRY, U8_CARRY,
        U8_CARRY | U8_TOO_LARGE, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000 | U8_SURROGATE,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
};
static const uint8_t u8_t3[16] = {
        /* this byte's high nibble: 0___ ASCII, 1000, 1001, 101_ continuations, 11__ leads */
        U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT,
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_OVERLONG_3 | U8_TOO_LARGE_1000 | U8_OVERLONG_4,
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_OVERLONG_3 | U8_TOO_LARGE,
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_SURROGATE | U8_TOO_LARGE,
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_SURROGATE | U8_TOO_LARGE, U8_TOO_SHORT, U8_TOO_SHORT,
        U8_TOO_SHORT, U8_TOO_SHORT,
};

__attribute__((target("avx2"))) static inline __m256i u8_prev(__m256i cur, __m256i prev, int n) {
        /* bytes of cur shifted up by n, with the last n bytes of prev shifted in */
        __m256i x = _mm256_permute2x128_si256(prev, cur, 0x21);
        switch (n) {
        case 1: return _mm256_alignr_epi8(cur, x, 15);
        case 2: return _mm256_alignr_epi8(cur, x, 14);
        default: return _mm256_alignr_epi8(cur, x, 13);
        }
}

__attribute__((target("avx2"))) static __m256i u8_block_errors(__m256i in, __m256i prev_in) {
        const __m256i nib = _mm256_set1_epi8(0x0F);
        const __m256i t1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)u8_t1));
        const __m256i t2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)u8_t2));
        const __m256i t3 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)u8_t3));
        __m256i prev1 = u8_prev(in, prev_in, 1);
        __m256i b1h = _mm256_shuffle_epi8(t1, _mm256_and_si256(_mm256_srli_epi16(prev1, 4), nib));
        __m256i b1l = _mm256_shuffle_epi8(t2, _mm256_and_si256(prev1, nib));
        __m256i b2h = _mm256_shuffle_epi8(t3, _mm256_and_si256(_mm256_srli_epi16(in, 4), nib));
        __m256i special = _mm256_and_si256(_mm256_and_si256(b1h, b1l), b2h);
        /* a third byte (2 after a lead >= 0xE0) or fourth (3 after >= 0xF0) must be a
         * continuation, which the pair tables flag as TWO_CONTS: the two must agree */
        __m256i prev2 = u8_prev(in, prev_in, 2), prev3 = u8_prev(in, prev_in, 3);
        __m256i is3 = _mm256_subs_epu8(prev2, _mm256_set1_epi8((char)(0xE0 - 0x80)));
        __m256i is4 = _mm256_subs_epu8(prev3, _mm256_set1_epi8((char)(0xF0 - 0x80)));
        __m256i must23_80 = _mm256_and_si256(_mm256_or_si256(is3, is4), _mm256_set1_epi8((char)0x80));
        return _mm256_xor_si256(must23_80, special);
}

__attribute__((target("avx2"))) int dse__utf8_valid_avx2(const char *s, size_t len) {
        /* a block's last three bytes may open a sequence the next block must finish */
        const __m256i max_tail = _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, (char)(0xF0 - 1),
                                                  (char)(0xE0 - 1), (char)(0xC0 - 1));
        __m256i err = _mm256_setzero_si256(), prev = _mm256_setzero_si256(), incomplete = _mm256_setzero_si256();
        size_t i = 0;
        for (; i + 32 <= len; i += 32) {
                __m256i in = _mm256_loadu_si256((const __m256i *)(s + i));
                if (_mm256_movemask_epi8(in) == 0) { /* ASCII: only an open sequence before it can fail */
                        err = _mm256_or_si256(err, incomplete);
                } else {
                        err = _mm256_or_si256(err, u8_block_errors(in, prev));
                        incomplete = _mm256_subs_epu8(in, max_tail);
                }
                prev = in;
        }
        if (i < len) { /* the tail, zero-padded: a sequence cut by the end meets ASCII */
                char tail[32] = {0};
                memcpy(tail, s + i, len - i);
                __m256i in = _mm256_loadu_si256((const __m256i *)tail);
                err = _mm256_or_si256(err, u8_block_errors(in, prev));
                incomplete = _mm256_subs_epu8(in, max_tail);
                prev = in;
        }
        /* a sequence still open at the very end; an all-zero block finishes the checks */
        err = _mm256_or_si256(err, u8_block_errors(_mm256_setzero_si256(), prev));
        return _mm256_testz_si256(err, err);
}

static int have_avx2;

__attribute__((constructor)) static void utf8_init(void) {
        __builtin_cpu_init();
        have_avx2 = __builtin_cpu_supports("avx2");
}
#endif

size_t dse__utf8_valid_prefix(const char *s, size_t len) {
#if defined(__x86_64__)
        /* valid: done; otherwise the reference finds where it stops */
        if (len >= 64 && have_avx2 && dse__utf8_valid_avx2(s, len))
                return len;
#endif
        return dse__utf8_valid_prefix_ref(s, len);
}

int dse__utf8_valid(const char *s, size_t len) {
        return dse__utf8_valid_prefix(s, len) == len;
}

int dse__utf8_decode(const char *s, size_t len, uint32_t *ret_cp) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &cp);
        if (n <= 0) {
                *ret_cp = 0xFFFD;
                return -1;
        }
        *ret_cp = (uint32_t)cp;
        return (int)n;
}

int dse__utf8_next(const char *str, size_t len, int32_t *ret_cp) {
        const unsigned char *s = (const unsigned char *)str;
        unsigned c = s[0];
        if (c < 0x80 || len < 2) {
                *ret_cp = (int32_t)c;
                return 1;
        }
        if (c < 0xE0) {
                *ret_cp = (int32_t)((c & 0x1F) << 6 | (s[1] & 0x3F));
                return 2;
        }
        if (c < 0xF0 || len < 4) {
                *ret_cp = (int32_t)((c & 0x0F) << 12 | (s[1] & 0x3F) << 6 | (s[2] & 0x3F));
                return 3;
        }
        *ret_cp = (int32_t)((c & 0x07) << 18 | (s[1] & 0x3F) << 12 | (s[2] & 0x3F) << 6 | (s[3] & 0x3F));
        return 4;
}

int dse__utf8_encode(uint32_t cp, char out[4]) {
        return (int)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

size_t dse__utf8_count(const char *s, size_t len) {
        size_t c = 0;
        for (size_t i = 0; i < len; i++)
                c += !dse__utf8_is_cont((unsigned char)s[i]);
        return c;
}

size_t dse__utf8_invalid_len(const char *str, size_t len) {
        const unsigned char *s = (const unsigned char *)str;
        unsigned lo, hi;
        size_t need = seq_bounds(s[0], &lo, &hi), k = 1;
        if (need && 1 < len && s[1] >= lo && s[1] <= hi) {
                k = 2;
                while (k < need && k < len && dse__utf8_is_cont(s[k]))
                        k++;
        }
        return k;
}

int dse__unicode_white_space(uint32_t c) {
        return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
               (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
               c == 0x3000;
}

int dse__py_isspace(uint32_t c) {
        return dse__unicode_white_space(c) || (c >= 0x1C && c <= 0x1F);
}
