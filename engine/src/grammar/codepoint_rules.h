/* Sets of Unicode scalar values and the rules that match one of them, shared by the
 * regex and GBNF compilers (regex_compile.c, gbnf_compile.c). A set becomes one rule
 * whose alternatives are byte-class sequences of well-formed UTF-8 (RFC 3629), or, for
 * the content of a canonical JSON string, the code point's canonical spelling: `"`, `\`
 * and control characters as their escapes (json_rules.h), everything else raw UTF-8. */
#ifndef DSE_GRAMMAR_CODEPOINT_RULES_H
#define DSE_GRAMMAR_CODEPOINT_RULES_H

#include "grammar/grammar.h"

#define CP_MAX 0x10ffffu

struct cp_range {
        uint32_t lo, hi;
};

/* A set of code points as ranges; sorted and disjoint after dse__cp_set_normalize. */
struct cp_set {
        struct cp_range *r;
        uint32_t n, cap;
};

void dse__cp_set_done(struct cp_set *s);
/* Adds [lo, hi] (lo <= hi <= CP_MAX). 0 or -ENOMEM. */
int dse__cp_set_add(struct cp_set *s, uint32_t lo, uint32_t hi);
int dse__cp_set_add_set(struct cp_set *s, const struct cp_set *from);
/* Sorts and merges the ranges and drops the surrogates (U+D800..U+DFFF), which are no
 * scalar values and have no UTF-8 encoding. 0 or -ENOMEM. */
int dse__cp_set_normalize(struct cp_set *s);
/* Replaces the set by every other scalar value. 0 or -ENOMEM. */
int dse__cp_set_negate(struct cp_set *s);

/* The value of a hex digit, -1 for another character. */
static inline int dse__hex_value(int c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The canonical JSON string spelling of cp in out; returns its length (1..6). */
size_t dse__json_escape_cp(uint32_t cp, uint8_t out[6]);

/* A new rule matching one code point of the normalized set s: as UTF-8, or in its
 * canonical JSON spelling when json_escaped. An empty set gives a rule matching
 * nothing. 0, -ENOMEM or -E2BIG. */
int dse__grammar_rule_codepoints(struct grammar_builder *b, const struct cp_set *s, int json_escaped,
                                 uint32_t *ret_rule);

#endif
