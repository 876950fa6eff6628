/* UTF-8 helpers and the growable buffer used across the tokenizer.json implementation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bpe_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Loading a 128k-vocabulary tokenizer.json first-touches ~35 MB of fresh tables (the
 * JSON nodes and strings, the hash tables). On 4 KiB pages that is ~9,000 page faults,
 * a tenth of the load time; transparent huge pages (the "madvise" setting is the common
 * default) cut that to a few dozen, but only for 2 MiB extents that are 2 MiB-aligned,
 * which malloc's blocks are not. So big blocks are mapped here, aligned, and small ones
 * come from calloc (64-byte aligned, the raw pointer kept just before the block). */
#define BPE_MAP_MIN (4u << 20)
#define BPE_HUGE ((size_t)2 << 20)

static size_t map_len(size_t n) {
        return (n + BPE_HUGE - 1) & ~(BPE_HUGE - 1);
}

void *bpe_map(size_t n) {
        if (n < BPE_MAP_MIN) {
                char *raw = calloc(1, n + 64);
                if (!raw)
                        return NULL;
                char *p = raw + (64 - (uintptr_t)raw % 64); /* >= raw + 16: calloc aligns to 16 */
                memcpy(p - sizeof raw, &raw, sizeof raw);
                return p;
        }
        if (n > SIZE_MAX - 2 * BPE_HUGE)
                return NULL;
        size_t len = map_len(n);
        char *m = mmap(NULL, len + BPE_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                       0);
        if (m == MAP_FAILED)
                return NULL;
        char *p = (char *)(((uintptr_t)m + BPE_HUGE - 1) & ~(uintptr_t)(BPE_HUGE - 1));
        if (p > m)
                munmap(m, (size_t)(p - m));
        if (m + len + BPE_HUGE > p + len)
                munmap(p + len, (size_t)(m + len + BPE_HUGE - (p + len)));
        (void)madvise(p, len, MADV_HUGEPAGE); /* failure only costs speed */
        return p;
}

void bpe_unmap(void *p, size_t n) {
        if (!p)
                return;
        if (n < BPE_MAP_MIN) {
                char *raw;
                memcpy(&raw, (char *)p - sizeof raw, sizeof raw);
                free(raw);
                return;
        }
        munmap(p, map_len(n));
}

size_t bpe_utf8_valid_prefix_ref(const char *str, size_t len) {
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
                if (c >= 0xC2 && c <= 0xDF && i + 1 < len && (s[i + 1] & 0xC0) == 0x80) {
                        i += 2;
                        continue;
                }
                size_t n;
                unsigned lo = 0x80, hi = 0xBF;
                if (c >= 0xC2 && c <= 0xDF) {
                        n = 2;
                } else if (c >= 0xE0 && c <= 0xEF) {
                        n = 3;
                        if (c == 0xE0)
                                lo = 0xA0;
                        else if (c == 0xED)
                                hi = 0x9F;
                } else if (c >= 0xF0 && c <= 0xF4) {
                        n = 4;
                        if (c == 0xF0)
                                lo = 0x90;
                        else if (c == 0xF4)
                                hi = 0x8F;
                } else {
                        return i;
                }
                if (i + n > len)
                        return i;
                if (s[i + 1] < lo || s[i + 1] > hi)
                        return i;
                for (size_t k = 2; k < n; k++)
                        if ((s[i + k] & 0xC0) != 0x80)
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
 * byte-by-byte loop above is the reference; this answers only "all valid?". A 7.8 MB
 * tokenizer.json full of two-byte ByteLevel characters goes from ~14 ms to under 1. */
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

__attribute__((target("avx2"))) int bpe_utf8_valid_avx2(const char *s, size_t len) {
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

size_t bpe_utf8_valid_prefix(const char *s, size_t len) {
#if defined(__x86_64__)
        /* valid: done; otherwise the reference finds where it stops */
        if (len >= 64 && have_avx2 && bpe_utf8_valid_avx2(s, len))
                return len;
#endif
        return bpe_utf8_valid_prefix_ref(s, len);
}

int bpe_utf8_next(const char *str, size_t len, int32_t *ret_cp) {
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

int bpe_utf8_encode(int32_t cp, char out[4]) {
        uint32_t c = (uint32_t)cp;
        if (c < 0x80) {
                out[0] = (char)c;
                return 1;
        }
        if (c < 0x800) {
                out[0] = (char)(0xC0 | c >> 6);
                out[1] = (char)(0x80 | (c & 0x3F));
                return 2;
        }
        if (c < 0x10000) {
                out[0] = (char)(0xE0 | c >> 12);
                out[1] = (char)(0x80 | (c >> 6 & 0x3F));
                out[2] = (char)(0x80 | (c & 0x3F));
                return 3;
        }
        out[0] = (char)(0xF0 | c >> 18);
        out[1] = (char)(0x80 | (c >> 12 & 0x3F));
        out[2] = (char)(0x80 | (c >> 6 & 0x3F));
        out[3] = (char)(0x80 | (c & 0x3F));
        return 4;
}

int bpe_is_whitespace(int32_t c) {
        return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
               (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
               c == 0x3000;
}

int bpe_buf_reserve(struct bpe_buf *b, size_t extra) {
        if (b->len + extra <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + extra)
                cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
                return -ENOMEM;
        b->p = p;
        b->cap = cap;
        return 0;
}

int bpe_buf_put(struct bpe_buf *b, const void *data, size_t n) {
        int r = bpe_buf_reserve(b, n);
        if (r < 0)
                return r;
        if (n)
                memcpy(b->p + b->len, data, n);
        b->len += n;
        return 0;
}

void bpe_buf_done(struct bpe_buf *b) {
        free(b->p);
        memset(b, 0, sizeof *b);
}
