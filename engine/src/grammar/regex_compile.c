/* ECMA-262 regular expressions (the subset in regex.h) into grammar rules, by
 * recursive descent: a disjunction is a rule with one alternative per branch, a
 * quantified atom a repetition rule (dse__grammar_rule_repeat), a character class a
 * code point set (codepoint_rules.h). Semantics are ECMA's without flags, read per
 * code point: \d [0-9], \w [A-Za-z0-9_], \s the ECMA white space and line terminators,
 * `.` anything but \n \r U+2028 U+2029. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/codepoint_rules.h"
#include "grammar/regex.h"
#include "utf8.h"

#define REGEX_MAX_DEPTH 500

struct regex_parser {
        struct grammar_builder *b;
        const unsigned char *s;
        size_t len, pos;
        unsigned flags;
        struct dse_diag *reterr;
        uint32_t any_star; /* (any code point)*, GRAMMAR_NIL until needed */
        int depth;
};

/* An atom: a set of code points (one character) or a rule. */
struct regex_piece {
        struct cp_set set;
        int is_set;
        uint32_t rule;
        struct regex_lengths len;
};

__attribute__((format(printf, 3, 4))) static int fail(struct regex_parser *p, int err, const char *fmt, ...) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "regex at offset %zu: ", p->pos);
        va_list ap;
        va_start(ap, fmt);
        dse__grammar_vfail(p->reterr, err, prefix, fmt, ap);
        va_end(ap);
        return err;
}

static int at_end(const struct regex_parser *p) {
        return p->pos >= p->len;
}

static int peek(const struct regex_parser *p) {
        return at_end(p) ? -1 : p->s[p->pos];
}

/* Decodes the UTF-8 code point at the cursor and moves past it. */
static int next_cp(struct regex_parser *p, uint32_t *ret_cp) {
        int n = dse__utf8_decode((const char *)p->s + p->pos, p->len - p->pos, ret_cp);
        if (n < 0)
                return fail(p, -EINVAL, "not UTF-8");
        p->pos += (size_t)n;
        return 0;
}

static int add_digits(struct cp_set *s) {
        return dse__cp_set_add(s, '0', '9');
}

static int add_word(struct cp_set *s) {
        GRAMMAR_TRY(dse__cp_set_add(s, '0', '9'));
        GRAMMAR_TRY(dse__cp_set_add(s, 'A', 'Z'));
        GRAMMAR_TRY(dse__cp_set_add(s, '_', '_'));
        return dse__cp_set_add(s, 'a', 'z');
}

/* ECMA-262 WhiteSpace and LineTerminator: \t \n \v \f \r, space, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF */
static int add_space(struct cp_set *s) {
        static const struct cp_range spaces[] = {{0x09, 0x0d}, {0x20, 0x20},     {0xa0, 0xa0},
                                                 {0x1680, 0x1680}, {0x2000, 0x200a}, {0x2028, 0x2029},
                                                 {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000},
                                                 {0xfeff, 0xfeff}};
        for (size_t i = 0; i < sizeof spaces / sizeof *spaces; i++)
                GRAMMAR_TRY(dse__cp_set_add(s, spaces[i].lo, spaces[i].hi));
        return 0;
}

/* One class escape (\d \w \s, negated when upper case) into s. */
static int add_class_escape(int c, struct cp_set *s) {
        struct cp_set t = {0};
        int r = c == 'd' || c == 'D' ? add_digits(&t) : c == 'w' || c == 'W' ? add_word(&t) : add_space(&t);
        if (r == 0 && (c == 'D' || c == 'W' || c == 'S'))
                r = dse__cp_set_negate(&t);
        if (r == 0)
                r = dse__cp_set_add_set(s, &t);
        dse__cp_set_done(&t);
        return r;
}

/* n hex digits at the cursor into *ret (moves past them), or -1 leaving the cursor. */
static int read_hex(struct regex_parser *p, int n, uint32_t *ret) {
        uint32_t v = 0;
        if (p->len - p->pos < (size_t)n)
                return -1;
        for (int i = 0; i < n; i++) {
                int h = dse__hex_value(p->s[p->pos + (size_t)i]);
                if (h < 0)
                        return -1;
                v = v << 4 | (uint32_t)h;
        }
        p->pos += (size_t)n;
        *ret = v;
        return 0;
}

/* \u escapes: \uHHHH (a surrogate pair of two of them is one code point) and \u{H...} */
static int unicode_escape(struct regex_parser *p, uint32_t *ret_cp) {
        uint32_t cp, low;
        if (peek(p) == '{') {
                size_t start = ++p->pos;
                cp = 0;
                while (!at_end(p) && dse__hex_value(peek(p)) >= 0 && cp <= CP_MAX)
                        cp = cp << 4 | (uint32_t)dse__hex_value(p->s[p->pos++]);
                if (p->pos == start || peek(p) != '}' || cp > CP_MAX)
                        return fail(p, -EINVAL, "malformed \\u{...} escape");
                p->pos++;
        } else if (read_hex(p, 4, &cp) < 0)
                return fail(p, -EINVAL, "malformed \\u escape (four hex digits expected)");
        if (cp >= 0xd800 && cp <= 0xdbff && p->len - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
                size_t save = p->pos;
                p->pos += 2;
                if (read_hex(p, 4, &low) == 0 && low >= 0xdc00 && low <= 0xdfff)
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
                else
                        p->pos = save;
        }
        if (cp >= 0xd800 && cp <= 0xdfff)
                return fail(p, -EOPNOTSUPP, "a lone surrogate \\u%04X matches no UTF-8 text", (unsigned)cp);
        *ret_cp = cp;
        return 0;
}

/* The escape after a backslash (the cursor is past it). A class escape adds its set
 * and sets *ret_is_set; any other sets *ret_cp. */
static int parse_escape(struct regex_parser *p, int in_class, struct cp_set *set, uint32_t *ret_cp, int *ret_is_set) {
        if (at_end(p))
                return fail(p, -EINVAL, "'\\' at the end of the pattern");
        size_t at = p->pos;
        int c = p->s[p->pos++];
        *ret_is_set = 0;
        switch (c) {
        case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
                *ret_is_set = 1;
                return add_class_escape(c, set);
        case 't': *ret_cp = '\t'; return 0;
        case 'n': *ret_cp = '\n'; return 0;
        case 'v': *ret_cp = '\v'; return 0;
        case 'f': *ret_cp = '\f'; return 0;
        case 'r': *ret_cp = '\r'; return 0;
        case 'x':
                if (read_hex(p, 2, ret_cp) < 0)
                        return fail(p, -EINVAL, "malformed \\x escape (two hex digits expected)");
                return 0;
        case 'u': return unicode_escape(p, ret_cp);
        case 'c':
                if (!at_end(p) && ((peek(p) >= 'a' && peek(p) <= 'z') || (peek(p) >= 'A' && peek(p) <= 'Z'))) {
                        *ret_cp = (uint32_t)(p->s[p->pos++] % 32);
                        return 0;
                }
                return fail(p, -EINVAL, "malformed \\c escape (a letter expected)");
        case '0':
                if (!at_end(p) && peek(p) >= '0' && peek(p) <= '9')
                        break;
                *ret_cp = 0;
                return 0;
        case 'b':
                if (in_class) {
                        *ret_cp = '\b';
                        return 0;
                }
                p->pos = at - 1;
                return fail(p, -EOPNOTSUPP, "the word-boundary assertion '\\b' is not supported");
        case 'B':
                p->pos = at - 1;
                return fail(p, -EOPNOTSUPP, "the assertion '\\B' is not supported");
        case 'k':
                p->pos = at - 1;
                return fail(p, -EOPNOTSUPP, "the named backreference '\\k' is not supported");
        case 'p': case 'P':
                p->pos = at - 1;
                return fail(p, -EOPNOTSUPP, "the Unicode property escape '\\%c' is not supported", c);
        default: break;
        }
        if (c >= '1' && c <= '9') {
                p->pos = at - 1;
                return fail(p, -EOPNOTSUPP, "the backreference '\\%c' is not supported", c);
        }
        if (c < 0x80 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
                p->pos = at - 1;
                return fail(p, -EINVAL, "unknown escape '\\%c'", c);
        }
        /* an identity escape: the character itself */
        p->pos = at;
        return next_cp(p, ret_cp);
}

/* One class member: a character (*ret_is_set 0, *ret_cp) or a class escape added to set. */
static int class_atom(struct regex_parser *p, struct cp_set *set, uint32_t *ret_cp, int *ret_is_set) {
        if (peek(p) == '\\') {
                p->pos++;
                return parse_escape(p, 1, set, ret_cp, ret_is_set);
        }
        *ret_is_set = 0;
        return next_cp(p, ret_cp);
}

/* [...] after the '[', into set (normalized, negation applied). */
static int parse_class(struct regex_parser *p, struct cp_set *set) {
        size_t open = p->pos - 1;
        int negated = peek(p) == '^';
        if (negated)
                p->pos++;
        for (;;) {
                if (at_end(p)) {
                        p->pos = open;
                        return fail(p, -EINVAL, "unterminated character class '['");
                }
                if (peek(p) == ']') {
                        p->pos++;
                        break;
                }
                uint32_t lo, hi;
                int lo_set, hi_set;
                GRAMMAR_TRY(class_atom(p, set, &lo, &lo_set));
                if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
                        p->pos++;
                        GRAMMAR_TRY(class_atom(p, set, &hi, &hi_set));
                        if (lo_set || hi_set) {
                                /* [\d-z]: no range, the '-' is itself (Annex B) */
                                if (!lo_set)
                                        GRAMMAR_TRY(dse__cp_set_add(set, lo, lo));
                                if (!hi_set)
                                        GRAMMAR_TRY(dse__cp_set_add(set, hi, hi));
                                GRAMMAR_TRY(dse__cp_set_add(set, '-', '-'));
                                continue;
                        }
                        if (lo > hi)
                                return fail(p, -EINVAL, "class range out of order");
                        GRAMMAR_TRY(dse__cp_set_add(set, lo, hi));
                } else if (!lo_set)
                        GRAMMAR_TRY(dse__cp_set_add(set, lo, lo));
        }
        return negated ? dse__cp_set_negate(set) : dse__cp_set_normalize(set);
}

/* A quantifier at the cursor: 1 with its bounds (max UINT32_MAX: none), 0 when there is
 * none (a '{' that does not open {n}, {n,} or {n,m} is a literal, as in Annex B). */
static int parse_quantifier(struct regex_parser *p, uint32_t *ret_min, uint32_t *ret_max) {
        int c = peek(p);
        if (c == '?' || c == '*' || c == '+') {
                p->pos++;
                *ret_min = c == '+';
                *ret_max = c == '?' ? 1 : UINT32_MAX;
        } else if (c == '{') {
                size_t i = p->pos + 1;
                uint64_t lo = 0, hi;
                size_t digits = 0;
                for (; i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; i++, digits++)
                        lo = lo < UINT32_MAX ? lo * 10 + (p->s[i] - '0') : lo;
                if (!digits)
                        return 0;
                hi = lo;
                if (i < p->len && p->s[i] == ',') {
                        i++;
                        hi = UINT64_MAX;
                        if (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
                                for (hi = 0; i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; i++)
                                        hi = hi < UINT32_MAX ? hi * 10 + (p->s[i] - '0') : hi;
                }
                if (i >= p->len || p->s[i] != '}')
                        return 0;
                p->pos = i + 1;
                if (hi != UINT64_MAX && lo > hi)
                        return fail(p, -EINVAL, "quantifier range out of order");
                if (lo > GRAMMAR_MAX_REPEAT || (hi != UINT64_MAX && hi > GRAMMAR_MAX_REPEAT))
                        return fail(p, -E2BIG, "repetition count over %d", GRAMMAR_MAX_REPEAT);
                *ret_min = (uint32_t)lo;
                *ret_max = hi == UINT64_MAX ? UINT32_MAX : (uint32_t)hi;
        } else
                return 0;
        if (peek(p) == '?') /* lazy: the same language */
                p->pos++;
        return 1;
}

static int piece_rule(struct regex_parser *p, struct regex_piece *piece, uint32_t *ret_rule) {
        if (!piece->is_set) {
                *ret_rule = piece->rule;
                return 0;
        }
        return dse__grammar_rule_codepoints(p->b, &piece->set, p->flags & REGEX_JSON_STRING, ret_rule);
}

/* Appends the piece to the newest alternative of rule. */
static int push_piece(struct regex_parser *p, uint32_t rule, struct regex_piece *piece) {
        if (piece->is_set && piece->set.n == 1 && piece->set.r[0].lo == piece->set.r[0].hi) {
                uint8_t bytes[6];
                size_t n = p->flags & REGEX_JSON_STRING ? dse__json_escape_cp(piece->set.r[0].lo, bytes)
                                                        : (size_t)dse__utf8_encode(piece->set.r[0].lo, (char *)bytes);
                return dse__grammar_push_bytes(p->b, rule, (const char *)bytes, n);
        }
        uint32_t r;
        GRAMMAR_TRY(piece_rule(p, piece, &r));
        return dse__grammar_push_ref(p->b, rule, r);
}

static int parse_disjunction(struct regex_parser *p, int top, uint32_t *ret_rule, struct regex_lengths *ret_len);

/* A group after its '(' into piece. */
static int parse_group(struct regex_parser *p, struct regex_piece *piece) {
        size_t open = p->pos - 1;
        if (peek(p) == '?') {
                const char *rest = (const char *)p->s + p->pos + 1;
                size_t left = p->len - p->pos - 1;
                if (left >= 1 && rest[0] == ':')
                        p->pos += 2;
                else if (left >= 1 && (rest[0] == '=' || rest[0] == '!')) {
                        p->pos = open;
                        return fail(p, -EOPNOTSUPP, "the lookahead '(?%c' is not supported", rest[0]);
                } else if (left >= 2 && rest[0] == '<' && (rest[1] == '=' || rest[1] == '!')) {
                        p->pos = open;
                        return fail(p, -EOPNOTSUPP, "the lookbehind '(?<%c' is not supported", rest[1]);
                } else if (left >= 1 && rest[0] == '<') {
                        /* a named group: the name does not change what matches */
                        p->pos += 2;
                        while (!at_end(p) && peek(p) != '>')
                                p->pos++;
                        if (at_end(p)) {
                                p->pos = open;
                                return fail(p, -EINVAL, "unterminated group name");
                        }
                        p->pos++;
                } else {
                        p->pos = open;
                        return fail(p, -EINVAL, "unknown group '(?%c' (not ECMA-262)", left ? rest[0] : ' ');
                }
        }
        GRAMMAR_TRY(parse_disjunction(p, 0, &piece->rule, &piece->len));
        if (peek(p) != ')') {
                p->pos = open;
                return fail(p, -EINVAL, "unterminated group '('");
        }
        p->pos++;
        piece->is_set = 0;
        return 0;
}

/* One atom at the cursor into piece. */
static int parse_atom(struct regex_parser *p, struct regex_piece *piece) {
        int c = peek(p);
        uint32_t cp, min, max;
        piece->is_set = 1;
        piece->len = (struct regex_lengths){1, 1, 0};
        switch (c) {
        case '.':
                p->pos++;
                GRAMMAR_TRY(dse__cp_set_add(&piece->set, '\n', '\n'));
                GRAMMAR_TRY(dse__cp_set_add(&piece->set, '\r', '\r'));
                GRAMMAR_TRY(dse__cp_set_add(&piece->set, 0x2028, 0x2029));
                return dse__cp_set_negate(&piece->set);
        case '[':
                p->pos++;
                return parse_class(p, &piece->set);
        case '(':
                p->pos++;
                return parse_group(p, piece);
        case '*': case '+': case '?':
                return fail(p, -EINVAL, "nothing to repeat before '%c'", c);
        case '{': {
                size_t save = p->pos;
                int q = parse_quantifier(p, &min, &max);
                if (q != 0) {
                        p->pos = save;
                        return q < 0 ? q : fail(p, -EINVAL, "nothing to repeat before '{'");
                }
                break;
        }
        case '\\': {
                int is_set;
                p->pos++;
                GRAMMAR_TRY(parse_escape(p, 0, &piece->set, &cp, &is_set));
                if (is_set)
                        return dse__cp_set_normalize(&piece->set);
                return dse__cp_set_add(&piece->set, cp, cp);
        }
        default: break;
        }
        GRAMMAR_TRY(next_cp(p, &cp));
        return dse__cp_set_add(&piece->set, cp, cp);
}

static int any_star(struct regex_parser *p, uint32_t *ret_rule) {
        if (p->any_star == GRAMMAR_NIL) {
                struct cp_set all = {0};
                uint32_t any;
                int r = dse__cp_set_negate(&all);
                if (r == 0)
                        r = dse__grammar_rule_codepoints(p->b, &all, p->flags & REGEX_JSON_STRING, &any);
                dse__cp_set_done(&all);
                GRAMMAR_TRY(r);
                GRAMMAR_TRY(dse__grammar_rule_repeat(p->b, any, 0, UINT32_MAX, &p->any_star));
        }
        *ret_rule = p->any_star;
        return 0;
}

/* One branch into the newest alternative of rule, up to '|', ')' or the end. */
/* Sums and products that stick at UINT64_MAX (REGEX_UNBOUNDED) instead of wrapping. */
static uint64_t add_sat(uint64_t a, uint64_t b) {
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
        return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* lengths of a then b */
static struct regex_lengths lengths_concat(struct regex_lengths a, struct regex_lengths b) {
        return (struct regex_lengths){add_sat(a.min, b.min), add_sat(a.max, b.max), 0};
}

static int parse_alternative(struct regex_parser *p, int top, uint32_t rule, struct regex_lengths *ret_len) {
        int search = top && (p->flags & REGEX_SEARCH), anchored_start = 0, anchored_end = 0;
        uint32_t star;
        *ret_len = (struct regex_lengths){0, 0, 0};
        if (top && peek(p) == '^') {
                p->pos++;
                anchored_start = 1;
        } else if (search) {
                GRAMMAR_TRY(any_star(p, &star));
                GRAMMAR_TRY(dse__grammar_push_ref(p->b, rule, star));
                ret_len->max = REGEX_UNBOUNDED;
        }
        while (!at_end(p) && peek(p) != '|' && peek(p) != ')') {
                if (peek(p) == '^')
                        return fail(p, -EOPNOTSUPP,
                                    "the anchor '^' is only supported at the start of the pattern or of a top-level "
                                    "alternative");
                if (peek(p) == '$') {
                        size_t next = p->pos + 1;
                        if (top && (next == p->len || p->s[next] == '|')) {
                                p->pos++;
                                anchored_end = 1;
                                break;
                        }
                        return fail(p, -EOPNOTSUPP,
                                    "the anchor '$' is only supported at the end of the pattern or of a top-level "
                                    "alternative");
                }
                struct regex_piece piece = {.rule = GRAMMAR_NIL};
                uint32_t min, max;
                size_t at = p->pos;
                int r = parse_atom(p, &piece);
                int q = r == 0 ? parse_quantifier(p, &min, &max) : 0;
                if (r == 0 && q < 0)
                        r = q;
                if (r == 0 && q == 0) {
                        r = push_piece(p, rule, &piece);
                        *ret_len = lengths_concat(*ret_len, piece.len);
                } else if (r == 0) {
                        uint32_t item, rep;
                        if (piece.len.min == 0 && max == UINT32_MAX) {
                                p->pos = at;
                                r = fail(p, -EOPNOTSUPP,
                                         "an unbounded repetition of a group that can match the empty string is "
                                         "not supported");
                        }
                        if (r == 0)
                                r = piece_rule(p, &piece, &item);
                        if (r == 0)
                                r = dse__grammar_rule_repeat(p->b, item, min, max, &rep);
                        if (r == 0)
                                r = dse__grammar_push_ref(p->b, rule, rep);
                        struct regex_lengths rep_len = {mul_sat(piece.len.min, min),
                                                        max == UINT32_MAX ? (piece.len.max == 0 ? 0 : REGEX_UNBOUNDED)
                                                                          : mul_sat(piece.len.max, max),
                                                        0};
                        *ret_len = lengths_concat(*ret_len, rep_len);
                }
                dse__cp_set_done(&piece.set);
                GRAMMAR_TRY(r);
        }
        if (search && !anchored_end) {
                GRAMMAR_TRY(any_star(p, &star));
                GRAMMAR_TRY(dse__grammar_push_ref(p->b, rule, star));
                ret_len->max = REGEX_UNBOUNDED;
        }
        ret_len->matches_all = search && ret_len->min == 0 && !(anchored_start && anchored_end);
        return 0;
}

static int parse_disjunction(struct regex_parser *p, int top, uint32_t *ret_rule, struct regex_lengths *ret_len) {
        if (++p->depth > REGEX_MAX_DEPTH)
                return fail(p, -E2BIG, "groups nested deeper than %d", REGEX_MAX_DEPTH);
        uint32_t rule;
        GRAMMAR_TRY(dse__grammar_rule_new(p->b, &rule));
        for (int first = 1;; first = 0) {
                struct regex_lengths len;
                GRAMMAR_TRY(dse__grammar_alt_begin(p->b, rule));
                GRAMMAR_TRY(parse_alternative(p, top, rule, &len));
                if (first || len.min < ret_len->min)
                        ret_len->min = len.min;
                if (first || len.max > ret_len->max)
                        ret_len->max = len.max;
                ret_len->matches_all = (!first && ret_len->matches_all) || len.matches_all;
                if (peek(p) != '|')
                        break;
                p->pos++;
        }
        p->depth--;
        *ret_rule = rule;
        return 0;
}

int dse__regex_rule(struct grammar_builder *b, const char *re, size_t len, unsigned flags, uint32_t *ret_rule,
                    struct regex_lengths *ret_lengths, struct dse_diag *reterr) {
        struct regex_parser p = {.b = b, .s = (const unsigned char *)re, .len = len, .flags = flags,
                                 .reterr = reterr, .any_star = GRAMMAR_NIL};
        struct regex_lengths lengths;
        int r = parse_disjunction(&p, 1, ret_rule, &lengths);
        if (r == 0 && ret_lengths)
                *ret_lengths = lengths;
        if (r == 0 && !at_end(&p))
                r = fail(&p, -EINVAL, "unmatched ')'");
        if ((r == -ENOMEM || r == -E2BIG) && reterr && !reterr->msg[0])
                fail(&p, r, "%s", r == -ENOMEM ? "out of memory" : "the grammar grew past its size limit");
        return r;
}

int dse_grammar_compile_regex(const char *re, size_t len, struct dse_grammar **ret_grammar, struct dse_diag *reterr) {
        if (!re || !ret_grammar)
                return -EINVAL;
        if (reterr)
                reterr->msg[0] = '\0';
        struct grammar_builder b;
        uint32_t root = GRAMMAR_NIL;
        dse__grammar_builder_init(&b);
        int r = dse__regex_rule(&b, re, len, 0, &root, NULL, reterr);
        return dse__grammar_builder_complete(&b, r, root, ret_grammar, reterr);
}

int dse__regex_search(const char *re, size_t len, const char *text, size_t text_len, struct dse_diag *reterr) {
        struct grammar_builder b;
        struct dse_grammar *g = NULL;
        struct dse_grammar_matcher *m = NULL;
        uint32_t root = GRAMMAR_NIL;
        dse__grammar_builder_init(&b);
        int r = dse__regex_rule(&b, re, len, REGEX_SEARCH, &root, NULL, reterr);
        r = dse__grammar_builder_complete(&b, r, root, &g, reterr);
        if (r == 0)
                r = dse_grammar_matcher_new(g, &m, reterr);
        if (r == 0) {
                r = dse_grammar_matcher_advance(m, text, text_len);
                r = r == 0 ? dse_grammar_matcher_is_accepting(m) : r == -EINVAL ? 0 : r;
        }
        dse_grammar_matcher_free(m);
        dse_grammar_free(g);
        return r;
}
