/* GBNF grammar text (llama.cpp's grammar format, grammars/README.md there) into grammar
 * rules: `name ::= alternatives` per rule, a rule ending at the end of its line unless
 * inside parentheses or after `|`; literals "..." and classes [...] ([^...] negated)
 * with the escapes \x.. \u.... \U........ \t \r \n \\ \" \[ \] \-; `.` any character;
 * groups; ? * + {m} {m,} {m,n} on the element before; # comments. Characters are code
 * points written as UTF-8. The whole output must match the rule `root`. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/codepoint_rules.h"
#include "utf8.h"

#define GBNF_MAX_DEPTH 500

struct gbnf_name {
        const unsigned char *name;
        size_t len;
        uint32_t rule;
        size_t first_use; /* offset of the first reference, for the error */
        int defined;
};

struct gbnf_parser {
        struct grammar_builder *b;
        const unsigned char *s;
        size_t len, pos;
        struct dse_diag *reterr;
        struct gbnf_name *names;
        uint32_t n_names, cap_names;
        int depth;
};

/* An element: literal bytes, a set of code points or a rule. */
struct gbnf_piece {
        uint8_t *bytes;
        uint32_t n_bytes, cap_bytes;
        struct cp_set set;
        enum { PIECE_BYTES, PIECE_SET, PIECE_RULE } kind;
        uint32_t rule;
};

__attribute__((format(printf, 4, 5))) static int fail_at(struct gbnf_parser *p, size_t at, int err, const char *fmt,
                                                          ...) {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < at && i < p->len; i++) {
                col++;
                if (p->s[i] == '\n')
                        line++, col = 1;
        }
        char prefix[80];
        snprintf(prefix, sizeof prefix, "GBNF line %zu column %zu: ", line, col);
        va_list ap;
        va_start(ap, fmt);
        dse__grammar_vfail(p->reterr, err, prefix, fmt, ap);
        va_end(ap);
        return err;
}

#define fail(p, err, ...) fail_at(p, (p)->pos, err, __VA_ARGS__)

static int peek(const struct gbnf_parser *p) {
        return p->pos < p->len ? p->s[p->pos] : -1;
}

static int is_name_char(int c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments, and line ends when newline_ok. */
static void skip_space(struct gbnf_parser *p, int newline_ok) {
        while (p->pos < p->len) {
                int c = p->s[p->pos];
                if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok))
                        p->pos++;
                else if (c == '#')
                        while (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
                                p->pos++;
                else
                        break;
        }
}

static int name_rule(struct gbnf_parser *p, const unsigned char *name, size_t len, int define, uint32_t *ret_rule) {
        for (uint32_t i = 0; i < p->n_names; i++)
                if (p->names[i].len == len && !memcmp(p->names[i].name, name, len)) {
                        if (define && p->names[i].defined)
                                return fail_at(p, (size_t)(name - p->s), -EINVAL, "rule '%.*s' is defined twice",
                                               (int)len, (const char *)name);
                        p->names[i].defined |= define;
                        *ret_rule = p->names[i].rule;
                        return 0;
                }
        GRAMMAR_TRY(dse__grammar_grow((void **)&p->names, &p->cap_names, (uint64_t)p->n_names + 1, sizeof *p->names));
        uint32_t rule;
        GRAMMAR_TRY(dse__grammar_rule_new(p->b, &rule));
        p->names[p->n_names++] = (struct gbnf_name){name, len, rule, (size_t)(name - p->s), define};
        *ret_rule = rule;
        return 0;
}

/* One character of a literal or class (escapes decoded) at the cursor. */
static int parse_char(struct gbnf_parser *p, uint32_t *ret_cp) {
        const unsigned char *s = p->s + p->pos;
        size_t left = p->len - p->pos;
        if (s[0] == '\\') {
                if (left < 2)
                        return fail(p, -EINVAL, "'\\' at the end of the text");
                int digits = s[1] == 'x' ? 2 : s[1] == 'u' ? 4 : s[1] == 'U' ? 8 : 0;
                if (digits) {
                        uint32_t v = 0;
                        if (left < (size_t)digits + 2)
                                return fail(p, -EINVAL, "malformed \\%c escape", s[1]);
                        for (int i = 0; i < digits; i++) {
                                int h = dse__hex_value(s[2 + i]);
                                if (h < 0)
                                        return fail(p, -EINVAL, "malformed \\%c escape", s[1]);
                                v = v << 4 | (uint32_t)h;
                        }
                        if (v > CP_MAX || (v >= 0xd800 && v <= 0xdfff))
                                return fail(p, -EINVAL, "escape \\%c%.*s is not a Unicode scalar value", s[1], digits,
                                            (const char *)s + 2);
                        p->pos += (size_t)digits + 2;
                        *ret_cp = v;
                        return 0;
                }
                static const char from[] = "trn\\\"[]-", to[] = "\t\r\n\\\"[]-";
                const char *k = memchr(from, s[1], sizeof from - 1);
                if (!k)
                        return fail(p, -EINVAL, "unknown escape '\\%c'", s[1]);
                p->pos += 2;
                *ret_cp = (uint8_t)to[k - from];
                return 0;
        }
        int n = dse__utf8_decode((const char *)s, left, ret_cp);
        if (n < 0)
                return fail(p, -EINVAL, "not UTF-8");
        p->pos += (size_t)n;
        return 0;
}

static int parse_literal(struct gbnf_parser *p, struct gbnf_piece *piece) {
        size_t open = p->pos++;
        piece->kind = PIECE_BYTES;
        for (;;) {
                if (p->pos >= p->len || p->s[p->pos] == '\n' || p->s[p->pos] == '\r')
                        return fail_at(p, open, -EINVAL, "unterminated literal '\"'");
                if (p->s[p->pos] == '"') {
                        p->pos++;
                        return 0;
                }
                uint32_t cp;
                GRAMMAR_TRY(parse_char(p, &cp));
                GRAMMAR_TRY(dse__grammar_grow((void **)&piece->bytes, &piece->cap_bytes, (uint64_t)piece->n_bytes + 4, 1));
                piece->n_bytes += (uint32_t)dse__utf8_encode(cp, (char *)piece->bytes + piece->n_bytes);
        }
}

static int parse_class(struct gbnf_parser *p, struct gbnf_piece *piece) {
        size_t open = p->pos++;
        int negated = peek(p) == '^';
        piece->kind = PIECE_SET;
        if (negated)
                p->pos++;
        for (;;) {
                if (p->pos >= p->len)
                        return fail_at(p, open, -EINVAL, "unterminated character class '['");
                if (p->s[p->pos] == ']') {
                        p->pos++;
                        break;
                }
                uint32_t lo, hi;
                GRAMMAR_TRY(parse_char(p, &lo));
                hi = lo;
                if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
                        p->pos++;
                        GRAMMAR_TRY(parse_char(p, &hi));
                        if (hi < lo)
                                return fail(p, -EINVAL, "class range out of order");
                }
                GRAMMAR_TRY(dse__cp_set_add(&piece->set, lo, hi));
        }
        return negated ? dse__cp_set_negate(&piece->set) : dse__cp_set_normalize(&piece->set);
}

static int parse_alternates(struct gbnf_parser *p, uint32_t rule, int nested);

static int parse_number(struct gbnf_parser *p, uint32_t *ret) {
        uint64_t v = 0;
        size_t start = p->pos;
        while (peek(p) >= '0' && peek(p) <= '9') {
                v = v * 10 + (uint64_t)(p->s[p->pos++] - '0');
                if (v > GRAMMAR_MAX_REPEAT)
                        return fail_at(p, start, -E2BIG, "repetition count over %d", GRAMMAR_MAX_REPEAT);
        }
        if (p->pos == start)
                return 0;
        *ret = (uint32_t)v;
        return 1;
}

/* A quantifier at the cursor: 1 with its bounds, 0 when none. */
static int parse_quantifier(struct gbnf_parser *p, int nested, uint32_t *ret_min, uint32_t *ret_max) {
        int c = peek(p);
        if (c == '?' || c == '*' || c == '+') {
                p->pos++;
                *ret_min = c == '+';
                *ret_max = c == '?' ? 1 : UINT32_MAX;
                return 1;
        }
        if (c != '{')
                return 0;
        size_t open = p->pos++;
        skip_space(p, nested);
        int r = parse_number(p, ret_min);
        if (r <= 0)
                return r < 0 ? r : fail_at(p, open, -EINVAL, "malformed repetition '{' (a count expected)");
        skip_space(p, nested);
        *ret_max = *ret_min;
        if (peek(p) == ',') {
                p->pos++;
                skip_space(p, nested);
                r = parse_number(p, ret_max);
                if (r < 0)
                        return r;
                if (r == 0)
                        *ret_max = UINT32_MAX;
                skip_space(p, nested);
        }
        if (peek(p) != '}')
                return fail_at(p, open, -EINVAL, "malformed repetition '{' ('}' expected)");
        p->pos++;
        if (*ret_max < *ret_min)
                return fail_at(p, open, -EINVAL, "repetition range out of order");
        return 1;
}

static int piece_rule(struct gbnf_parser *p, struct gbnf_piece *piece, uint32_t *ret_rule) {
        if (piece->kind == PIECE_RULE) {
                *ret_rule = piece->rule;
                return 0;
        }
        if (piece->kind == PIECE_SET)
                return dse__grammar_rule_codepoints(p->b, &piece->set, 0, ret_rule);
        GRAMMAR_TRY(dse__grammar_rule_new(p->b, ret_rule));
        GRAMMAR_TRY(dse__grammar_alt_begin(p->b, *ret_rule));
        return dse__grammar_push_bytes(p->b, *ret_rule, (const char *)piece->bytes, piece->n_bytes);
}

/* One element at the cursor into piece; *ret_found 0 when the sequence ends here. */
static int parse_element(struct gbnf_parser *p, struct gbnf_piece *piece, int *ret_found) {
        int c = peek(p);
        *ret_found = 1;
        if (c == '"')
                return parse_literal(p, piece);
        if (c == '[')
                return parse_class(p, piece);
        if (c == '.') {
                p->pos++;
                piece->kind = PIECE_SET;
                return dse__cp_set_negate(&piece->set);
        }
        if (c == '(') {
                size_t open = p->pos++;
                piece->kind = PIECE_RULE;
                GRAMMAR_TRY(dse__grammar_rule_new(p->b, &piece->rule));
                skip_space(p, 1);
                GRAMMAR_TRY(parse_alternates(p, piece->rule, 1));
                if (peek(p) != ')')
                        return fail_at(p, open, -EINVAL, "unterminated group '('");
                p->pos++;
                return 0;
        }
        if (c == '<')
                return fail(p, -EOPNOTSUPP, "token references '<...>' are not supported");
        if (c >= 0 && is_name_char(c)) {
                size_t start = p->pos;
                while (is_name_char(peek(p)))
                        p->pos++;
                piece->kind = PIECE_RULE;
                return name_rule(p, p->s + start, p->pos - start, 0, &piece->rule);
        }
        *ret_found = 0;
        return 0;
}

/* Elements into the newest alternative of rule, up to a '|', ')', line end or the end. */
static int parse_sequence(struct gbnf_parser *p, uint32_t rule, int nested) {
        for (;;) {
                struct gbnf_piece piece = {.rule = GRAMMAR_NIL};
                size_t at = p->pos;
                int more;
                int r = parse_element(p, &piece, &more);
                uint32_t min = 0, max = 0;
                int q = 0;
                if (r == 0 && more) {
                        skip_space(p, nested);
                        q = parse_quantifier(p, nested, &min, &max);
                        if (q < 0)
                                r = q;
                }
                if (more > 0 && r == 0 && q == 0) {
                        if (piece.kind == PIECE_BYTES)
                                r = dse__grammar_push_bytes(p->b, rule, (const char *)piece.bytes, piece.n_bytes);
                        else {
                                uint32_t item;
                                r = piece_rule(p, &piece, &item);
                                if (r == 0)
                                        r = dse__grammar_push_ref(p->b, rule, item);
                        }
                } else if (more > 0 && r == 0) {
                        uint32_t item, rep;
                        r = piece_rule(p, &piece, &item);
                        if (r == 0)
                                r = dse__grammar_rule_repeat(p->b, item, min, max, &rep);
                        if (r == 0)
                                r = dse__grammar_push_ref(p->b, rule, rep);
                        skip_space(p, nested);
                }
                free(piece.bytes);
                dse__cp_set_done(&piece.set);
                if (r < 0 && p->reterr && !p->reterr->msg[0])
                        fail_at(p, at, r, "%s", r == -ENOMEM ? "out of memory" : "the grammar grew past its size limit");
                GRAMMAR_TRY(r);
                if (more == 0)
                        return 0;
        }
}

static int parse_alternates(struct gbnf_parser *p, uint32_t rule, int nested) {
        if (++p->depth > GBNF_MAX_DEPTH)
                return fail(p, -E2BIG, "groups nested deeper than %d", GBNF_MAX_DEPTH);
        for (;;) {
                GRAMMAR_TRY(dse__grammar_alt_begin(p->b, rule));
                GRAMMAR_TRY(parse_sequence(p, rule, nested));
                if (peek(p) != '|')
                        break;
                p->pos++;
                skip_space(p, 1);
        }
        p->depth--;
        return 0;
}

static int parse_rule(struct gbnf_parser *p) {
        size_t start = p->pos;
        while (is_name_char(peek(p)))
                p->pos++;
        if (p->pos == start)
                return fail(p, -EINVAL, "a rule name expected");
        uint32_t rule;
        GRAMMAR_TRY(name_rule(p, p->s + start, p->pos - start, 1, &rule));
        skip_space(p, 0);
        if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3))
                return fail(p, -EINVAL, "'::=' expected after the rule name '%.*s'", (int)(p->pos - start),
                            (const char *)p->s + start);
        p->pos += 3;
        skip_space(p, 1);
        GRAMMAR_TRY(parse_alternates(p, rule, 0));
        if (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
                return fail(p, -EINVAL, "unexpected '%c' (a rule ends at the end of its line)", p->s[p->pos]);
        skip_space(p, 1);
        return 0;
}

static int parse_grammar(struct gbnf_parser *p, uint32_t *ret_root) {
        skip_space(p, 1);
        while (p->pos < p->len)
                GRAMMAR_TRY(parse_rule(p));
        for (uint32_t i = 0; i < p->n_names; i++)
                if (!p->names[i].defined)
                        return fail_at(p, p->names[i].first_use, -EINVAL, "rule '%.*s' is used but never defined",
                                       (int)p->names[i].len, (const char *)p->names[i].name);
        for (uint32_t i = 0; i < p->n_names; i++)
                if (p->names[i].len == 4 && !memcmp(p->names[i].name, "root", 4)) {
                        *ret_root = p->names[i].rule;
                        return 0;
                }
        return fail(p, -EINVAL, "no rule 'root' (the whole output must match it)");
}

int dse_grammar_compile_gbnf(const char *text, size_t len, struct dse_grammar **ret_grammar, struct dse_diag *reterr) {
        if (!text || !ret_grammar)
                return -EINVAL;
        if (reterr)
                reterr->msg[0] = '\0';
        struct grammar_builder b;
        dse__grammar_builder_init(&b);
        struct gbnf_parser p = {.b = &b, .s = (const unsigned char *)text, .len = len, .reterr = reterr};
        uint32_t root = GRAMMAR_NIL;
        int r = parse_grammar(&p, &root);
        free(p.names);
        return dse__grammar_builder_complete(&b, r, root, ret_grammar, reterr);
}
