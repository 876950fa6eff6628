/* UTF-8 helpers and the growable buffer used across the tokenizer.json implementation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bpe_impl.h"

/* Loading a 128k-vocabulary tokenizer.json first-touches ~35 MB of fresh tables (the
 * JSON nodes and strings, the hash tables). On 4 KiB pages that is ~9,000 page faults,
 * a tenth of the load time; transparent huge pages (the "madvise" setting is the common
 * default) cut that to a few dozen. Only whole 2 MiB extents inside a block can become
 * huge pages, so small blocks are left alone. Failure only costs speed. */
static void *advise_huge(void *p, size_t n) {
        if (p && n >= (4u << 20)) {
                uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
                uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), z = ((uintptr_t)p + n) & ~(page - 1);
                if (z > a)
                        (void)madvise((void *)a, z - a, MADV_HUGEPAGE);
        }
        return p;
}

void *bpe_big_malloc(size_t n) {
        return advise_huge(malloc(n), n);
}

void *bpe_big_realloc(void *p, size_t n) {
        return advise_huge(realloc(p, n), n);
}

void *bpe_big_aligned_alloc(size_t align, size_t n) {
        return advise_huge(aligned_alloc(align, n), n);
}

size_t bpe_utf8_valid_prefix(const char *str, size_t len) {
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
