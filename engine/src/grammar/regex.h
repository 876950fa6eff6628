/* The ECMA-262 regular expression subset of dse_grammar_compile_regex and of JSON
 * Schema's `pattern` (regex_compile.c), compiled into rules of a grammar under
 * construction. */
#ifndef DSE_GRAMMAR_REGEX_H
#define DSE_GRAMMAR_REGEX_H

#include "grammar/grammar.h"

enum {
        /* the regex judges the decoded content of a canonical JSON string: each code
         * point is matched in its canonical spelling (codepoint_rules.h) */
        REGEX_JSON_STRING = 1 << 0,
        /* a search, as `pattern` is: the match may start and end anywhere unless the
         * pattern is anchored with ^ / $; without it the whole text must match */
        REGEX_SEARCH = 1 << 1,
};

/* The shortest and longest match in code points (max REGEX_UNBOUNDED: no limit), and
 * for a REGEX_SEARCH whether every text holds a match (a top-level alternative that can
 * match nothing and is not anchored at both ends). */
#define REGEX_UNBOUNDED UINT64_MAX
struct regex_lengths {
        uint64_t min, max;
        int matches_all;
};

/* Sets *ret_rule to a new rule matching what the regex re (UTF-8, len bytes) matches,
 * and *ret_lengths (when not NULL) to the lengths of its matches.
 * -EINVAL for a malformed regex, -EOPNOTSUPP for a construct outside the subset
 * (backreferences, lookaround, word boundaries, \p{...}, anchors inside the pattern),
 * both naming the construct and its offset in reterr; -ENOMEM, -E2BIG. */
int dse__regex_rule(struct grammar_builder *b, const char *re, size_t len, unsigned flags, uint32_t *ret_rule,
                    struct regex_lengths *ret_lengths, struct dse_diag *reterr);

/* 1 when a search for the regex finds a match in text (raw UTF-8), 0 when not; the
 * errors of dse__regex_rule. */
int dse__regex_search(const char *re, size_t len, const char *text, size_t text_len, struct dse_diag *reterr);

#endif
