/* Code point sets and the rules matching one of their code points (codepoint_rules.h).
 * A range of code points becomes UTF-8 byte-class sequences by splitting it until, in
 * each piece, every byte position runs over one contiguous range (the construction of
 * RE2's and Rust regex's UTF-8 compilers). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/codepoint_rules.h"
#include "utf8.h"

void dse__cp_set_done(struct cp_set *s) {
        free(s->r);
        memset(s, 0, sizeof *s);
}

int dse__cp_set_add(struct cp_set *s, uint32_t lo, uint32_t hi) {
        GRAMMAR_TRY(dse__grammar_grow((void **)&s->r, &s->cap, (uint64_t)s->n + 1, sizeof *s->r));
        s->r[s->n++] = (struct cp_range){lo, hi};
        return 0;
}

int dse__cp_set_add_set(struct cp_set *s, const struct cp_set *from) {
        for (uint32_t i = 0; i < from->n; i++)
                GRAMMAR_TRY(dse__cp_set_add(s, from->r[i].lo, from->r[i].hi));
        return 0;
}

static int range_cmp(const void *a, const void *b) {
        const struct cp_range *x = a, *y = b;
        return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int dse__cp_set_normalize(struct cp_set *s) {
        if (s->n == 0)
                return 0;
        qsort(s->r, s->n, sizeof *s->r, range_cmp);
        uint32_t out = 0;
        for (uint32_t i = 0; i < s->n; i++) {
                if (out > 0 && (uint64_t)s->r[i].lo <= (uint64_t)s->r[out - 1].hi + 1) {
                        if (s->r[i].hi > s->r[out - 1].hi)
                                s->r[out - 1].hi = s->r[i].hi;
                } else
                        s->r[out++] = s->r[i];
        }
        s->n = out;
        /* cut the surrogates out; after merging at most one range meets them */
        for (uint32_t i = 0; i < s->n; i++) {
                struct cp_range x = s->r[i];
                if (x.hi < 0xd800 || x.lo > 0xdfff)
                        continue;
                if (x.lo < 0xd800 && x.hi > 0xdfff) {
                        GRAMMAR_TRY(dse__grammar_grow((void **)&s->r, &s->cap, (uint64_t)s->n + 1, sizeof *s->r));
                        memmove(s->r + i + 1, s->r + i, (s->n - i) * sizeof *s->r);
                        s->n++;
                        s->r[i] = (struct cp_range){x.lo, 0xd7ff};
                        s->r[i + 1] = (struct cp_range){0xe000, x.hi};
                } else if (x.lo < 0xd800)
                        s->r[i].hi = 0xd7ff;
                else if (x.hi > 0xdfff)
                        s->r[i].lo = 0xe000;
                else {
                        memmove(s->r + i, s->r + i + 1, (s->n - i - 1) * sizeof *s->r);
                        s->n--;
                }
                return 0;
        }
        return 0;
}

int dse__cp_set_negate(struct cp_set *s) {
        GRAMMAR_TRY(dse__cp_set_normalize(s));
        struct cp_set out = {0};
        uint32_t next = 0;
        int r = 0;
        for (uint32_t i = 0; i < s->n && r == 0; i++) {
                if (s->r[i].lo > next)
                        r = dse__cp_set_add(&out, next, s->r[i].lo - 1);
                next = s->r[i].hi + 1;
        }
        if (r == 0 && next <= CP_MAX)
                r = dse__cp_set_add(&out, next, CP_MAX);
        if (r == 0)
                r = dse__cp_set_normalize(&out);
        if (r < 0) {
                dse__cp_set_done(&out);
                return r;
        }
        dse__cp_set_done(s);
        *s = out;
        return 0;
}

static int json_needs_escape(uint32_t cp) {
        return cp < 0x20 || cp == '"' || cp == '\\';
}

size_t dse__json_escape_cp(uint32_t cp, uint8_t out[6]) {
        static const char hex[] = "0123456789abcdef";
        const char *short_escape = NULL;
        switch (cp) {
        case '"': short_escape = "\\\""; break;
        case '\\': short_escape = "\\\\"; break;
        case '\b': short_escape = "\\b"; break;
        case '\f': short_escape = "\\f"; break;
        case '\n': short_escape = "\\n"; break;
        case '\r': short_escape = "\\r"; break;
        case '\t': short_escape = "\\t"; break;
        default: break;
        }
        if (short_escape) {
                memcpy(out, short_escape, 2);
                return 2;
        }
        if (cp < 0x20) {
                memcpy(out, "\\u00", 4);
                out[4] = (uint8_t)hex[cp >> 4];
                out[5] = (uint8_t)hex[cp & 15];
                return 6;
        }
        return (size_t)dse__utf8_encode(cp, (char *)out);
}

static int push_seq(struct grammar_builder *b, uint32_t rule, const uint8_t *lo, const uint8_t *hi, size_t n) {
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        for (size_t i = 0; i < n; i++) {
                struct grammar_class c = {{0}};
                grammar_class_add_range(&c, lo[i], hi[i]);
                GRAMMAR_TRY(dse__grammar_push_class(b, rule, &c));
        }
        return 0;
}

/* Adds alternatives for [lo, hi] (scalar values of one encoded length, 2..4 bytes). */
static int push_utf8_range(struct grammar_builder *b, uint32_t rule, uint32_t lo, uint32_t hi) {
        for (int i = 1; i < 4; i++) {
                uint32_t max = ((uint32_t)1 << (6 * i)) - 1;
                if ((lo & ~max) != (hi & ~max)) {
                        if ((lo & max) != 0) {
                                GRAMMAR_TRY(push_utf8_range(b, rule, lo, lo | max));
                                return push_utf8_range(b, rule, (lo | max) + 1, hi);
                        }
                        if ((hi & max) != max) {
                                GRAMMAR_TRY(push_utf8_range(b, rule, lo, (hi & ~max) - 1));
                                return push_utf8_range(b, rule, hi & ~max, hi);
                        }
                }
        }
        char a[4], z[4];
        int n = dse__utf8_encode(lo, a);
        dse__utf8_encode(hi, z);
        return push_seq(b, rule, (const uint8_t *)a, (const uint8_t *)z, (size_t)n);
}

int dse__grammar_rule_codepoints(struct grammar_builder *b, const struct cp_set *s, int json_escaped,
                                 uint32_t *ret_rule) {
        uint32_t rule;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &rule));
        /* every one-byte code point in one class: one alternative */
        struct grammar_class ascii = {{0}};
        int any_ascii = 0;
        static const uint32_t bounds[] = {0x7f, 0x7ff, 0xffff, CP_MAX};
        for (uint32_t i = 0; i < s->n; i++) {
                uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
                for (uint32_t cp = lo; cp <= hi && cp < 0x80; cp++) {
                        if (json_escaped && json_needs_escape(cp)) {
                                uint8_t e[6];
                                size_t n = dse__json_escape_cp(cp, e);
                                GRAMMAR_TRY(push_seq(b, rule, e, e, n));
                        } else {
                                grammar_class_add_range(&ascii, (uint8_t)cp, (uint8_t)cp);
                                any_ascii = 1;
                        }
                }
                if (lo < 0x80)
                        lo = 0x80;
                /* split at the encoded-length boundaries */
                for (size_t k = 1; k < sizeof bounds / sizeof *bounds && lo <= hi; k++) {
                        if (lo > bounds[k])
                                continue;
                        uint32_t top = hi < bounds[k] ? hi : bounds[k];
                        GRAMMAR_TRY(push_utf8_range(b, rule, lo, top));
                        lo = top + 1;
                }
        }
        if (any_ascii) {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
                GRAMMAR_TRY(dse__grammar_push_class(b, rule, &ascii));
        }
        *ret_rule = rule;
        return 0;
}
