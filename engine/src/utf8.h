/* utf8.h — UTF-8 and Unicode whitespace for the tokenizers and the chat templates
 * (engine-internal). Valid means RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF. */
#ifndef DSE_UTF8_H
#define DSE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 prefix of s (== len when all valid). The _ref twin is the
 * byte-by-byte definition; dse__utf8_valid_avx2 (x86-64 CPUs with AVX2 only) answers
 * whether all of s is valid, 32 bytes at a time. */
size_t dse__utf8_valid_prefix(const char *s, size_t len);
size_t dse__utf8_valid_prefix_ref(const char *s, size_t len);
#if defined(__x86_64__)
int dse__utf8_valid_avx2(const char *s, size_t len);
#endif
/* Nonzero when all of s is valid. */
int dse__utf8_valid(const char *s, size_t len);

/* Decodes one code point at s (len > 0 bytes left); returns its length in bytes, or -1
 * for an invalid or truncated sequence (*ret_cp = U+FFFD). */
int dse__utf8_decode(const char *s, size_t len, uint32_t *ret_cp);
/* Decodes one code point of text already validated, without checks (the pre-tokenizer's
 * inner loop); returns its byte length. */
int dse__utf8_next(const char *s, size_t len, int32_t *ret_cp);
/* Writes cp (<= U+10FFFF) as UTF-8; returns the byte count. */
int dse__utf8_encode(uint32_t cp, char out[4]);

/* A continuation byte (10xxxxxx): not the start of a character. */
static inline int dse__utf8_is_cont(unsigned char c) {
        return (c & 0xC0) == 0x80;
}
/* Where the character that ends at s[end] starts (end > from; no further back than
 * from): the first byte before end that is not a continuation byte. */
static inline size_t dse__utf8_char_before(const char *s, size_t from, size_t end) {
        size_t k = end - 1;
        while (k > from && dse__utf8_is_cont((unsigned char)s[k]))
                k--;
        return k;
}
/* Code points in valid UTF-8 (continuation bytes are not counted). */
size_t dse__utf8_count(const char *s, size_t len);
/* At an invalid sequence s (len > 0): the bytes one U+FFFD replaces in
 * String::from_utf8_lossy, the maximal prefix of a valid sequence (at least 1). */
size_t dse__utf8_invalid_len(const char *s, size_t len);

/* Unicode White_Space (Rust's char::is_whitespace). */
int dse__unicode_white_space(uint32_t cp);
/* Python's str.isspace(): White_Space and the four separators U+001C..U+001F. */
int dse__py_isspace(uint32_t cp);

#endif
