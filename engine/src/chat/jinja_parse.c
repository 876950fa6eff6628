/* Lexer and parser of the chat-template interpreter: template source -> AST.
 *
 * The lexer applies Jinja2's whitespace rules as transformers configures them: newlines
 * normalised and one trailing newline dropped (keep_trailing_newline=False), `{%-`/`-%}`
 * strip all whitespace, trim_blocks drops the newline after a block or comment tag,
 * lstrip_blocks drops the spaces between a line start and a block or comment tag. The
 * parser follows jinja2/parser.py's precedence: condexpr < or < and < not < compare <
 * + - < ~ < * / // % < ** < unary < postfix/filters/tests. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "jinja.h"

#define PARSE_MAX_DEPTH 200

enum ttype { T_EOF, T_DATA, T_BLOCK_BEGIN, T_BLOCK_END, T_VAR_BEGIN, T_VAR_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP };

struct token {
        enum ttype type;
        int line;
        const char *s; /* DATA, NAME, OP: text; STRING: unescaped value */
        size_t n;
        int64_t i;
        double f;
};

struct parser {
        struct jarena *a;
        struct dse_diag *reterr;
        int err;
        struct token *toks;
        size_t n_toks, cap_toks, pos;
        int depth;      /* recursion depth, bounded */
        int loop_depth; /* enclosing for loops (break/continue allowed inside) */
};

static int failv(struct parser *p, int err, int line, const char *fmt, va_list ap) {
        if (p->err)
                return p->err;
        char msg[400];
        vsnprintf(msg, sizeof msg, fmt, ap);
        p->err = dse__fail(p->reterr, err, "chat template line %d: %s%s", line, msg,
                           err == -EOPNOTSUPP ? JINJA_WAY_OUT : "");
        return p->err;
}

__attribute__((format(printf, 4, 5))) static int fail(struct parser *p, int err, int line, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = failv(p, err, line, fmt, ap);
        va_end(ap);
        return r;
}

/* ---- lexer --------------------------------------------------------------------------- */

static struct token *push_tok(struct parser *p, enum ttype type, int line) {
        if (p->n_toks == p->cap_toks) {
                size_t cap = p->cap_toks ? p->cap_toks * 2 : 256;
                struct token *t = dse__jalloc(p->a, cap * sizeof *t);
                if (!t) {
                        fail(p, -ENOMEM, line, "out of memory");
                        return NULL;
                }
                if (p->n_toks)
                        memcpy(t, p->toks, p->n_toks * sizeof *t);
                p->toks = t;
                p->cap_toks = cap;
        }
        struct token *t = &p->toks[p->n_toks++];
        *t = (struct token){.type = type, .line = line};
        return t;
}

static size_t ws_len_at(const char *s, size_t n) { /* length of a whitespace char at s, or 0 */
        uint32_t cp;
        int len = dse__utf8_decode(s, n, &cp);
        return len > 0 && dse__py_isspace(cp) ? (size_t)len : 0;
}

static size_t lstrip_ws(const char *s, size_t n) { /* bytes of leading whitespace */
        size_t i = 0, k;
        while (i < n && (k = ws_len_at(s + i, n - i)))
                i += k;
        return i;
}

static size_t rstrip_ws(const char *s, size_t n) { /* length left after stripping trailing whitespace */
        size_t end = n;
        while (end > 0) {
                size_t c = dse__utf8_char_before(s, 0, end);
                if (ws_len_at(s + c, end - c) != end - c)
                        break;
                end = c;
        }
        return end;
}

static int count_lines(const char *s, size_t n) {
        int c = 0;
        for (size_t i = 0; i < n; i++)
                c += s[i] == '\n';
        return c;
}

/* Python's unicode-escape decoding of a string literal body. */
static int unescape(struct parser *p, const char *s, size_t n, int line, struct token *t) {
        struct jbuf b;
        dse__jbuf_init(&b, p->a);
        for (size_t i = 0; i < n; i++) {
                if (s[i] != '\\' || i + 1 >= n) {
                        dse__jbuf_putc(&b, s[i]);
                        continue;
                }
                char e = s[++i];
                static const char escapes[] = "\\'\"abfnrtv", decoded[] = "\\'\"\a\b\f\n\r\t\v";
                if (e == '\n') /* backslash-newline is a line continuation */
                        continue;
                const char *simple = strchr(escapes, e);
                if (simple) {
                        dse__jbuf_putc(&b, decoded[simple - escapes]);
                        continue;
                }
                if (e >= '0' && e <= '7') {
                        unsigned v = 0;
                        int k = 0;
                        while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7')
                                v = v * 8 + (unsigned)(s[i++] - '0'), k++;
                        i--;
                        char u[4];
                        dse__jbuf_put(&b, u, dse__utf8_encode(v, u));
                        continue;
                }
                int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
                if (digits) {
                        uint32_t v = 0;
                        if (i + (size_t)digits >= n)
                                return fail(p, -EINVAL, line, "truncated \\%c escape in string literal", e);
                        for (int k = 1; k <= digits; k++) {
                                char c = s[i + (size_t)k];
                                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                                if (d < 0)
                                        return fail(p, -EINVAL, line, "bad \\%c escape in string literal", e);
                                v = v * 16 + (uint32_t)d;
                        }
                        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                                return fail(p, -EILSEQ, line, "escape \\%c names no Unicode scalar value", e);
                        i += (size_t)digits;
                        char u[4];
                        dse__jbuf_put(&b, u, dse__utf8_encode(v, u));
                        continue;
                }
                if (e == 'N')
                        return fail(p, -EOPNOTSUPP, line, "\\N{...} escapes are not supported");
                dse__jbuf_putc(&b, '\\'); /* unknown escapes stay as written, as in Python */
                dse__jbuf_putc(&b, e);
        }
        if (b.oom)
                return fail(p, -ENOMEM, line, "out of memory");
        t->s = b.p ? b.p : "";
        t->n = b.n;
        return 0;
}

static int is_name_start(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c) {
        return c >= '0' && c <= '9';
}

/* Lexes the inside of a {% %} or {{ }} tag starting at *pos, up to and including the end
 * delimiter. block: 1 for %}, 0 for }}. Sets *ret_strip_after (the '-' marker) and
 * *ret_plus ('+' marker). */
static int lex_tag(struct parser *p, const char *src, size_t len, size_t *pos, int *line, int block,
                   int *ret_strip_after, int *ret_plus) {
        size_t i = *pos;
        int balance = 0;
        const char end_ch = block ? '%' : '}';
        for (;;) {
                while (i < len && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r')) {
                        if (src[i] == '\n')
                                (*line)++;
                        i++;
                }
                if (i >= len)
                        return fail(p, -EINVAL, *line, "unclosed tag ('%s' expected)", block ? "%}" : "}}");
                if (balance == 0) {
                        int marker = src[i] == '-' || (block && src[i] == '+');
                        size_t j = i + (size_t)marker;
                        if (j + 1 < len && src[j] == end_ch && src[j + 1] == '}') {
                                if (!push_tok(p, block ? T_BLOCK_END : T_VAR_END, *line))
                                        return p->err;
                                *ret_strip_after = marker && src[i] == '-';
                                *ret_plus = marker && src[i] == '+';
                                *pos = j + 2;
                                return 0;
                        }
                }
                char c = src[i];
                struct token *t;
                if (is_name_start(c)) {
                        size_t j = i;
                        while (j < len && (is_name_start(src[j]) || is_digit(src[j])))
                                j++;
                        if (!(t = push_tok(p, T_NAME, *line)))
                                return p->err;
                        t->s = src + i;
                        t->n = j - i;
                        i = j;
                } else if (is_digit(c)) {
                        size_t j = i;
                        int is_float = 0;
                        while (j < len && (is_digit(src[j]) || src[j] == '_'))
                                j++;
                        if (j + 1 < len && src[j] == '.' && is_digit(src[j + 1])) {
                                is_float = 1;
                                j++;
                                while (j < len && (is_digit(src[j]) || src[j] == '_'))
                                        j++;
                        }
                        if (j < len && (src[j] == 'e' || src[j] == 'E')) {
                                size_t k = j + 1;
                                if (k < len && (src[k] == '+' || src[k] == '-'))
                                        k++;
                                if (k < len && is_digit(src[k])) {
                                        is_float = 1;
                                        j = k;
                                        while (j < len && is_digit(src[j]))
                                                j++;
                                }
                        }
                        char tmp[64];
                        size_t n = 0;
                        for (size_t k = i; k < j && n + 1 < sizeof tmp; k++)
                                if (src[k] != '_')
                                        tmp[n++] = src[k];
                        tmp[n] = '\0';
                        if (j - i >= sizeof tmp - 1)
                                return fail(p, -EOPNOTSUPP, *line, "number literal too long");
                        if (!(t = push_tok(p, is_float ? T_FLOAT : T_INT, *line)))
                                return p->err;
                        if (is_float) {
                                t->f = strtod(tmp, NULL);
                        } else {
                                errno = 0;
                                t->i = strtoll(tmp, NULL, 10);
                                if (errno == ERANGE)
                                        return fail(p, -EOPNOTSUPP, *line, "integer literal outside 64 bits");
                        }
                        i = j;
                } else if (c == '\'' || c == '"') {
                        size_t j = i + 1;
                        while (j < len && src[j] != c) {
                                if (src[j] == '\\' && j + 1 < len)
                                        j++;
                                j++;
                        }
                        if (j >= len)
                                return fail(p, -EINVAL, *line, "unterminated string literal");
                        int start_line = *line;
                        *line += count_lines(src + i, j - i);
                        if (!(t = push_tok(p, T_STRING, start_line)))
                                return p->err;
                        int r = unescape(p, src + i + 1, j - i - 1, start_line, t);
                        if (r < 0)
                                return r;
                        i = j + 1;
                } else {
                        static const char *const two[] = {"//", "**", "==", "!=", "<=", ">="};
                        size_t n = 0;
                        for (size_t k = 0; k < sizeof two / sizeof two[0] && !n; k++)
                                if (i + 1 < len && src[i] == two[k][0] && src[i + 1] == two[k][1])
                                        n = 2;
                        if (!n && strchr("+-*/%~<>=()[]{},.:|", c) && c != '\0')
                                n = 1;
                        if (!n)
                                return fail(p, -EINVAL, *line, "unexpected character '%c' in tag", c);
                        if (c == '(' || c == '[' || c == '{')
                                balance++;
                        else if ((c == ')' || c == ']' || c == '}') && balance > 0)
                                balance--;
                        if (!(t = push_tok(p, T_OP, *line)))
                                return p->err;
                        t->s = src + i;
                        t->n = n;
                        i += n;
                }
        }
}

static int lex(struct parser *p, const char *src, size_t len) {
        size_t pos = 0;
        int line = 1, strip_next = 0;
        for (;;) {
                /* Next tag start. */
                size_t q = pos;
                while (q + 1 < len && !(src[q] == '{' && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#')))
                        q++;
                if (q + 1 >= len)
                        q = len;
                const char *data = src + pos;
                size_t n = q - pos;
                int data_line = line;
                if (strip_next) {
                        size_t k = lstrip_ws(data, n);
                        data_line += count_lines(data, k);
                        data += k;
                        n -= k;
                }
                line = data_line + count_lines(data, n);
                if (q < len) {
                        char kind = src[q + 1];
                        char marker = q + 2 < len ? src[q + 2] : '\0';
                        if (marker == '-') {
                                n = rstrip_ws(data, n);
                        } else if (kind != '{' && marker != '+') {
                                /* lstrip_blocks: drop spaces between the line start and the tag. */
                                size_t l_pos = n;
                                while (l_pos > 0 && data[l_pos - 1] != '\n')
                                        l_pos--;
                                int line_start = l_pos > 0 || data == src || data[-1] == '\n';
                                if (line_start && l_pos < n && lstrip_ws(data + l_pos, n - l_pos) == n - l_pos)
                                        n = l_pos;
                        }
                }
                if (n) {
                        struct token *t = push_tok(p, T_DATA, data_line);
                        if (!t)
                                return p->err;
                        t->s = data;
                        t->n = n;
                }
                if (q >= len)
                        break;
                char kind = src[q + 1];
                pos = q + 2;
                if (pos < len && (src[pos] == '-' || (src[pos] == '+' && kind != '{')))
                        pos++;
                int strip_after = 0, plus = 0;
                if (kind == '#') {
                        size_t e = pos;
                        while (e + 1 < len && !(src[e] == '#' && src[e + 1] == '}'))
                                e++;
                        if (e + 1 >= len)
                                return fail(p, -EINVAL, line, "unclosed comment");
                        line += count_lines(src + pos, e - pos);
                        strip_after = e > pos && src[e - 1] == '-';
                        pos = e + 2;
                } else {
                        if (!push_tok(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, line))
                                return p->err;
                        int r = lex_tag(p, src, len, &pos, &line, kind == '%', &strip_after, &plus);
                        if (r < 0)
                                return r;
                }
                strip_next = strip_after;
                if (!strip_after && !plus && kind != '{' && pos < len && src[pos] == '\n') {
                        pos++; /* trim_blocks */
                        line++;
                }
        }
        return push_tok(p, T_EOF, line) ? 0 : p->err;
}

/* ---- parser helpers ------------------------------------------------------------------ */

struct nvec {
        struct jnode **p;
        size_t n, cap;
};

static int nvec_push(struct parser *p, struct nvec *v, struct jnode *node) {
        if (v->n == v->cap) {
                size_t cap = v->cap ? v->cap * 2 : 4;
                struct jnode **grown = dse__jalloc(p->a, cap * sizeof *grown);
                if (!grown)
                        return fail(p, -ENOMEM, 0, "out of memory");
                if (v->n)
                        memcpy(grown, v->p, v->n * sizeof *grown);
                v->p = grown;
                v->cap = cap;
        }
        v->p[v->n++] = node;
        return 0;
}

static struct token *cur(struct parser *p) {
        return &p->toks[p->pos];
}

static struct token *next(struct parser *p) {
        struct token *t = &p->toks[p->pos];
        if (t->type != T_EOF)
                p->pos++;
        return t;
}

static int is_op(const struct token *t, const char *op) {
        return t->type == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

static int is_name(const struct token *t, const char *name) {
        return t->type == T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static const char *tok_desc(const struct token *t) {
        switch (t->type) {
        case T_EOF: return "end of template";
        case T_DATA: return "text";
        case T_BLOCK_BEGIN: return "'{%'";
        case T_BLOCK_END: return "'%}'";
        case T_VAR_BEGIN: return "'{{'";
        case T_VAR_END: return "'}}'";
        case T_NAME: return "a name";
        case T_STRING: return "a string";
        case T_INT:
        case T_FLOAT: return "a number";
        default: return "an operator";
        }
}

static int expect_op(struct parser *p, const char *op) {
        struct token *t = cur(p);
        if (!is_op(t, op))
                return fail(p, -EINVAL, t->line, "expected '%s', got %s%s%.*s%s", op, tok_desc(t),
                            t->type == T_OP || t->type == T_NAME ? " '" : "", t->type == T_OP || t->type == T_NAME ? (int)t->n : 0,
                            t->s ? t->s : "", t->type == T_OP || t->type == T_NAME ? "'" : "");
        next(p);
        return 0;
}

static int expect(struct parser *p, enum ttype type, const char *what) {
        struct token *t = cur(p);
        if (t->type != type)
                return fail(p, -EINVAL, t->line, "expected %s, got %s", what, tok_desc(t));
        next(p);
        return 0;
}

static struct jnode *mk(struct parser *p, enum jkind kind, int line) {
        struct jnode *n = dse__jalloc(p->a, sizeof *n);
        if (!n) {
                fail(p, -ENOMEM, line, "out of memory");
                return NULL;
        }
        n->kind = kind;
        n->line = line;
        return n;
}

static const char *name_dup(struct parser *p, const struct token *t) {
        const char *s = dse__jstrdup(p->a, t->s, t->n);
        if (!s)
                fail(p, -ENOMEM, t->line, "out of memory");
        return s;
}

/* ---- expressions --------------------------------------------------------------------- */

static struct jnode *parse_expression(struct parser *p, int with_condexpr);
static struct jnode *parse_unary(struct parser *p, int with_filter);

static int enter(struct parser *p) {
        if (++p->depth > PARSE_MAX_DEPTH)
                return fail(p, -EINVAL, cur(p)->line, "expression or block nesting too deep");
        return 0;
}

/* Call arguments after '(' up to ')': positional into kids, name=value into names/kids2. */
static int parse_call_args(struct parser *p, struct jnode *n) {
        struct nvec args = {0}, kwvals = {0};
        const char **names = NULL;
        size_t n_names = 0;
        while (!is_op(cur(p), ")")) {
                if (args.n || kwvals.n)
                        if (expect_op(p, ",") < 0)
                                return p->err;
                if (is_op(cur(p), ")"))
                        break;
                if (is_op(cur(p), "*") || is_op(cur(p), "**"))
                        return fail(p, -EOPNOTSUPP, cur(p)->line, "*args and **kwargs in calls are not supported");
                if (cur(p)->type == T_NAME && is_op(&p->toks[p->pos + 1], "=")) {
                        const char *name = name_dup(p, cur(p));
                        p->pos += 2;
                        struct jnode *v = parse_expression(p, 1);
                        if (!v || !name)
                                return p->err;
                        const char **grown = dse__jalloc(p->a, (n_names + 1) * sizeof *grown);
                        if (!grown)
                                return fail(p, -ENOMEM, 0, "out of memory");
                        if (n_names)
                                memcpy(grown, names, n_names * sizeof *grown);
                        grown[n_names++] = name;
                        names = grown;
                        if (nvec_push(p, &kwvals, v) < 0)
                                return p->err;
                } else {
                        if (kwvals.n)
                                return fail(p, -EINVAL, cur(p)->line, "positional argument after keyword argument");
                        struct jnode *v = parse_expression(p, 1);
                        if (!v || nvec_push(p, &args, v) < 0)
                                return p->err;
                }
        }
        next(p); /* ')' */
        n->kids = args.p;
        n->n_kids = args.n;
        n->kids2 = kwvals.p;
        n->n_kids2 = kwvals.n;
        n->names = names;
        n->n_names = n_names;
        return 0;
}

static struct jnode *parse_primary(struct parser *p) {
        struct token *t = cur(p);
        struct jnode *n;
        if (t->type == T_NAME) {
                next(p);
                if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
                        if (!(n = mk(p, JN_LITERAL, t->line)) || !(n->val = dse__jv_bool(p->a, t->s[0] == 't' || t->s[0] == 'T')))
                                return fail(p, -ENOMEM, t->line, "out of memory"), NULL;
                        return n;
                }
                if (is_name(t, "none") || is_name(t, "None")) {
                        if (!(n = mk(p, JN_LITERAL, t->line)) || !(n->val = dse__jv_new(p->a, JT_NONE)))
                                return fail(p, -ENOMEM, t->line, "out of memory"), NULL;
                        return n;
                }
                if (!(n = mk(p, JN_NAME, t->line)) || !(n->str = name_dup(p, t)))
                        return NULL;
                n->len = t->n;
                return n;
        }
        if (t->type == T_STRING) {
                struct jbuf b;
                dse__jbuf_init(&b, p->a);
                while (cur(p)->type == T_STRING) {
                        dse__jbuf_put(&b, cur(p)->s, cur(p)->n);
                        next(p);
                }
                if (b.oom || !(n = mk(p, JN_LITERAL, t->line)) || !(n->val = dse__jv_str(p->a, b.p, b.n)))
                        return fail(p, -ENOMEM, t->line, "out of memory"), NULL;
                return n;
        }
        if (t->type == T_INT || t->type == T_FLOAT) {
                next(p);
                if (!(n = mk(p, JN_LITERAL, t->line)) ||
                    !(n->val = t->type == T_INT ? dse__jv_int(p->a, t->i) : dse__jv_float(p->a, t->f)))
                        return fail(p, -ENOMEM, t->line, "out of memory"), NULL;
                return n;
        }
        if (is_op(t, "(")) {
                next(p);
                struct nvec items = {0};
                int tuple = 0;
                while (!is_op(cur(p), ")")) {
                        if (items.n) {
                                if (expect_op(p, ",") < 0)
                                        return NULL;
                                tuple = 1;
                                if (is_op(cur(p), ")"))
                                        break;
                        }
                        struct jnode *e = parse_expression(p, 1);
                        if (!e || nvec_push(p, &items, e) < 0)
                                return NULL;
                }
                next(p);
                if (items.n == 1 && !tuple)
                        return items.p[0];
                if (!(n = mk(p, JN_TUPLE, t->line)))
                        return NULL;
                n->kids = items.p;
                n->n_kids = items.n;
                return n;
        }
        if (is_op(t, "[")) {
                next(p);
                struct nvec items = {0};
                while (!is_op(cur(p), "]")) {
                        if (items.n) {
                                if (expect_op(p, ",") < 0)
                                        return NULL;
                                if (is_op(cur(p), "]"))
                                        break;
                        }
                        struct jnode *e = parse_expression(p, 1);
                        if (!e || nvec_push(p, &items, e) < 0)
                                return NULL;
                }
                next(p);
                if (!(n = mk(p, JN_LIST, t->line)))
                        return NULL;
                n->kids = items.p;
                n->n_kids = items.n;
                return n;
        }
        if (is_op(t, "{")) {
                next(p);
                struct nvec keys = {0}, vals = {0};
                while (!is_op(cur(p), "}")) {
                        if (keys.n) {
                                if (expect_op(p, ",") < 0)
                                        return NULL;
                                if (is_op(cur(p), "}"))
                                        break;
                        }
                        struct jnode *k = parse_expression(p, 1);
                        if (!k || expect_op(p, ":") < 0)
                                return NULL;
                        struct jnode *v = parse_expression(p, 1);
                        if (!v || nvec_push(p, &keys, k) < 0 || nvec_push(p, &vals, v) < 0)
                                return NULL;
                }
                next(p);
                if (!(n = mk(p, JN_DICT, t->line)))
                        return NULL;
                n->kids = keys.p;
                n->n_kids = keys.n;
                n->kids2 = vals.p;
                n->n_kids2 = vals.n;
                return n;
        }
        fail(p, -EINVAL, t->line, "unexpected %s in expression", tok_desc(t));
        return NULL;
}

static struct jnode *parse_subscript(struct parser *p, struct jnode *obj, int line) {
        /* after '[' */
        struct jnode *parts[3] = {NULL, NULL, NULL};
        int n_colons = 0;
        for (;;) {
                if (is_op(cur(p), "]"))
                        break;
                if (is_op(cur(p), ":")) {
                        if (++n_colons > 2)
                                return fail(p, -EINVAL, line, "too many ':' in slice"), NULL;
                        next(p);
                        continue;
                }
                if (parts[n_colons])
                        return fail(p, -EINVAL, line, "expected ':' or ']' in subscript"), NULL;
                if (!(parts[n_colons] = parse_expression(p, 1)))
                        return NULL;
                if (is_op(cur(p), ","))
                        return fail(p, -EOPNOTSUPP, line, "tuple subscripts are not supported"), NULL;
        }
        next(p);
        struct jnode *n;
        if (n_colons == 0) {
                if (!parts[0])
                        return fail(p, -EINVAL, line, "empty subscript"), NULL;
                if (!(n = mk(p, JN_GETITEM, line)))
                        return NULL;
                n->a = obj;
                n->b = parts[0];
                return n;
        }
        if (!(n = mk(p, JN_SLICE, line)))
                return NULL;
        n->a = obj;
        n->kids = dse__jalloc(p->a, 3 * sizeof *n->kids);
        if (!n->kids)
                return fail(p, -ENOMEM, line, "out of memory"), NULL;
        memcpy(n->kids, parts, sizeof parts);
        n->n_kids = 3;
        return n;
}

/* A call of callee, its '(' already consumed. */
static struct jnode *parse_call(struct parser *p, struct jnode *callee, int line) {
        struct jnode *n = mk(p, JN_CALL, line);
        if (!n)
                return NULL;
        n->a = callee;
        return parse_call_args(p, n) < 0 ? NULL : n;
}

static struct jnode *parse_postfix(struct parser *p, struct jnode *node) {
        for (;;) {
                struct token *t = cur(p);
                if (is_op(t, ".")) {
                        next(p);
                        struct token *name = cur(p);
                        struct jnode *n;
                        if (name->type == T_NAME) {
                                next(p);
                                if (!(n = mk(p, JN_GETATTR, t->line)) || !(n->str = name_dup(p, name)))
                                        return NULL;
                                n->len = name->n;
                                n->a = node;
                        } else if (name->type == T_INT) {
                                next(p);
                                struct jnode *idx = mk(p, JN_LITERAL, t->line);
                                if (!idx || !(idx->val = dse__jv_int(p->a, name->i)) || !(n = mk(p, JN_GETITEM, t->line)))
                                        return fail(p, -ENOMEM, t->line, "out of memory"), NULL;
                                n->a = node;
                                n->b = idx;
                        } else {
                                return fail(p, -EINVAL, t->line, "expected a name after '.'"), NULL;
                        }
                        node = n;
                } else if (is_op(t, "[")) {
                        next(p);
                        if (!(node = parse_subscript(p, node, t->line)))
                                return NULL;
                } else if (is_op(t, "(")) {
                        next(p);
                        if (!(node = parse_call(p, node, t->line)))
                                return NULL;
                } else {
                        return node;
                }
        }
}

/* The filter or test named at the current token (after `after` on line `line`): a node
 * of kind over operand, its op the id lookup finds for the name. */
static struct jnode *named_op(struct parser *p, int line, const char *what, const char *after, enum jkind kind,
                              int (*lookup)(const char *name, size_t len), struct jnode *operand) {
        struct token *name = cur(p);
        if (name->type != T_NAME)
                return fail(p, -EINVAL, line, "expected a %s name after %s", what, after), NULL;
        next(p);
        int id = lookup(name->s, name->n);
        if (id < 0)
                return fail(p, -EOPNOTSUPP, name->line, "%s '%.*s' is not supported", what, (int)name->n, name->s), NULL;
        struct jnode *n = mk(p, kind, name->line);
        if (!n || !(n->str = name_dup(p, name)))
                return NULL;
        n->op = id;
        n->a = operand;
        return n;
}

static struct jnode *parse_filter_expr(struct parser *p, struct jnode *node) {
        for (;;) {
                struct token *t = cur(p);
                if (is_op(t, "|")) {
                        next(p);
                        struct jnode *n = named_op(p, t->line, "filter", "'|'", JN_FILTER, dse__jinja_filter_lookup, node);
                        if (!n)
                                return NULL;
                        if (is_op(cur(p), "(")) {
                                next(p);
                                if (parse_call_args(p, n) < 0)
                                        return NULL;
                        }
                        node = n;
                } else if (is_name(t, "is")) {
                        next(p);
                        int neg = 0;
                        if (is_name(cur(p), "not")) {
                                next(p);
                                neg = 1;
                        }
                        struct jnode *n = named_op(p, t->line, "test", "'is'", JN_TEST, dse__jinja_test_lookup, node);
                        if (!n)
                                return NULL;
                        n->neg = neg;
                        struct token *c = cur(p);
                        if (is_op(c, "(")) {
                                next(p);
                                if (parse_call_args(p, n) < 0)
                                        return NULL;
                        } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
                                    is_op(c, "[") || is_op(c, "{")) &&
                                   !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                                if (is_name(c, "is"))
                                        return fail(p, -EINVAL, c->line, "tests cannot be chained with 'is'"), NULL;
                                struct jnode *arg = parse_primary(p);
                                if (!arg || !(arg = parse_postfix(p, arg)))
                                        return NULL;
                                n->kids = dse__jalloc(p->a, sizeof *n->kids);
                                if (!n->kids)
                                        return fail(p, -ENOMEM, c->line, "out of memory"), NULL;
                                n->kids[0] = arg;
                                n->n_kids = 1;
                        }
                        node = n;
                } else if (is_op(t, "(")) {
                        next(p);
                        if (!(node = parse_call(p, node, t->line)))
                                return NULL;
                } else {
                        return node;
                }
        }
}

static struct jnode *parse_unary(struct parser *p, int with_filter) {
        if (enter(p) < 0)
                return NULL;
        struct token *t = cur(p);
        struct jnode *node;
        if (is_op(t, "-") || is_op(t, "+")) {
                next(p);
                struct jnode *x = parse_unary(p, 0);
                if (!x || !(node = mk(p, t->s[0] == '-' ? JN_NEG : JN_POS, t->line)))
                        return NULL;
                node->a = x;
        } else if (!(node = parse_primary(p))) {
                return NULL;
        }
        if ((node = parse_postfix(p, node)) && with_filter)
                node = parse_filter_expr(p, node);
        p->depth--;
        return node;
}

static struct jnode *binop(struct parser *p, int op, struct jnode *a, struct jnode *b, int line) {
        struct jnode *n = mk(p, JN_BINOP, line);
        if (n) {
                n->op = op;
                n->a = a;
                n->b = b;
        }
        return n;
}

static struct jnode *parse_pow(struct parser *p) {
        struct jnode *left = parse_unary(p, 1);
        while (left && is_op(cur(p), "**")) {
                int line = next(p)->line;
                struct jnode *right = parse_unary(p, 1);
                left = right ? binop(p, 'P', left, right, line) : NULL;
        }
        return left;
}

static struct jnode *parse_math2(struct parser *p) {
        struct jnode *left = parse_pow(p);
        for (;;) {
                struct token *t = cur(p);
                int op = is_op(t, "*") ? '*' : is_op(t, "/") ? '/' : is_op(t, "//") ? 'F' : is_op(t, "%") ? '%' : 0;
                if (!left || !op)
                        return left;
                next(p);
                struct jnode *right = parse_pow(p);
                left = right ? binop(p, op, left, right, t->line) : NULL;
        }
}

static struct jnode *parse_concat(struct parser *p) {
        struct jnode *left = parse_math2(p);
        while (left && is_op(cur(p), "~")) {
                int line = next(p)->line;
                struct jnode *right = parse_math2(p);
                left = right ? binop(p, '~', left, right, line) : NULL;
        }
        return left;
}

static struct jnode *parse_math1(struct parser *p) {
        struct jnode *left = parse_concat(p);
        for (;;) {
                struct token *t = cur(p);
                int op = is_op(t, "+") ? '+' : is_op(t, "-") ? '-' : 0;
                if (!left || !op)
                        return left;
                next(p);
                struct jnode *right = parse_concat(p);
                left = right ? binop(p, op, left, right, t->line) : NULL;
        }
}

static struct jnode *parse_compare(struct parser *p) {
        struct jnode *first = parse_math1(p);
        if (!first)
                return NULL;
        struct nvec rest = {0};
        int ops[64], n_ops = 0;
        for (;;) {
                struct token *t = cur(p);
                int op;
                if (is_op(t, "=="))
                        op = JC_EQ;
                else if (is_op(t, "!="))
                        op = JC_NE;
                else if (is_op(t, "<"))
                        op = JC_LT;
                else if (is_op(t, "<="))
                        op = JC_LE;
                else if (is_op(t, ">"))
                        op = JC_GT;
                else if (is_op(t, ">="))
                        op = JC_GE;
                else if (is_name(t, "in"))
                        op = JC_IN;
                else if (is_name(t, "not") && is_name(&p->toks[p->pos + 1], "in"))
                        op = JC_NOTIN;
                else
                        break;
                next(p);
                if (op == JC_NOTIN)
                        next(p);
                if (n_ops == 64)
                        return fail(p, -EINVAL, t->line, "comparison chain too long"), NULL;
                struct jnode *e = parse_math1(p);
                if (!e || nvec_push(p, &rest, e) < 0)
                        return NULL;
                ops[n_ops++] = op;
        }
        if (!n_ops)
                return first;
        struct jnode *n = mk(p, JN_COMPARE, first->line);
        if (!n || !(n->ops = dse__jalloc(p->a, (size_t)n_ops * sizeof *n->ops)))
                return fail(p, -ENOMEM, first->line, "out of memory"), NULL;
        memcpy(n->ops, ops, (size_t)n_ops * sizeof *ops);
        n->a = first;
        n->kids = rest.p;
        n->n_kids = rest.n;
        return n;
}

static struct jnode *parse_not(struct parser *p) {
        if (is_name(cur(p), "not")) {
                int line = next(p)->line;
                if (enter(p) < 0)
                        return NULL;
                struct jnode *x = parse_not(p);
                p->depth--;
                struct jnode *n = x ? mk(p, JN_NOT, line) : NULL;
                if (n)
                        n->a = x;
                return n;
        }
        return parse_compare(p);
}

/* operand (word operand)*, left-associative: the chains of `and` and of `or`. */
static struct jnode *parse_bool_chain(struct parser *p, const char *word, enum jkind kind,
                                      struct jnode *(*operand)(struct parser *)) {
        struct jnode *left = operand(p);
        while (left && is_name(cur(p), word)) {
                int line = next(p)->line;
                struct jnode *right = operand(p), *n = right ? mk(p, kind, line) : NULL;
                if (!n)
                        return NULL;
                n->a = left;
                n->b = right;
                left = n;
        }
        return left;
}

static struct jnode *parse_and(struct parser *p) {
        return parse_bool_chain(p, "and", JN_AND, parse_not);
}

static struct jnode *parse_or(struct parser *p) {
        return parse_bool_chain(p, "or", JN_OR, parse_and);
}

static struct jnode *parse_condexpr(struct parser *p) {
        struct jnode *expr = parse_or(p);
        while (expr && is_name(cur(p), "if")) {
                int line = next(p)->line;
                struct jnode *cond = parse_or(p), *other = NULL;
                if (!cond)
                        return NULL;
                if (is_name(cur(p), "else")) {
                        next(p);
                        if (enter(p) < 0 || !(other = parse_condexpr(p)))
                                return NULL;
                        p->depth--;
                }
                struct jnode *n = mk(p, JN_COND, line);
                if (!n)
                        return NULL;
                n->a = cond;
                n->b = expr;
                n->c = other;
                expr = n;
        }
        return expr;
}

static struct jnode *parse_expression(struct parser *p, int with_condexpr) {
        if (enter(p) < 0)
                return NULL;
        struct jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
        p->depth--;
        return n;
}

/* An expression, or a tuple of them when commas follow ({{ a, b }}, set x = 1, 2). */
static struct jnode *parse_tuple(struct parser *p, int with_condexpr) {
        struct jnode *first = parse_expression(p, with_condexpr);
        if (!first || !is_op(cur(p), ","))
                return first;
        struct nvec items = {0};
        if (nvec_push(p, &items, first) < 0)
                return NULL;
        while (is_op(cur(p), ",")) {
                next(p);
                if (cur(p)->type == T_BLOCK_END || cur(p)->type == T_VAR_END)
                        break;
                struct jnode *e = parse_expression(p, with_condexpr);
                if (!e || nvec_push(p, &items, e) < 0)
                        return NULL;
        }
        struct jnode *n = mk(p, JN_TUPLE, first->line);
        if (n) {
                n->kids = items.p;
                n->n_kids = items.n;
        }
        return n;
}

/* ---- statements ---------------------------------------------------------------------- */

static struct jnode *parse_body(struct parser *p, const char *const *stops, int line);

static int tag_in(const struct token *t, const char *const *stops) {
        for (; stops && *stops; stops++)
                if (is_name(t, *stops))
                        return 1;
        return 0;
}

/* Names separated by commas (for targets, set targets): at most 16. */
static int parse_targets(struct parser *p, struct jnode *n) {
        const char *names[16];
        size_t k = 0;
        do {
                if (k && !is_op(cur(p), ","))
                        break;
                if (k)
                        next(p);
                struct token *t = cur(p);
                if (t->type != T_NAME)
                        return fail(p, -EINVAL, t->line, "expected a variable name");
                if (k == 16)
                        return fail(p, -EOPNOTSUPP, t->line, "more than 16 unpacking targets");
                if (!(names[k++] = name_dup(p, t)))
                        return p->err;
                next(p);
        } while (is_op(cur(p), ","));
        n->names = dse__jalloc(p->a, k * sizeof *n->names);
        if (!n->names)
                return fail(p, -ENOMEM, 0, "out of memory");
        memcpy(n->names, names, k * sizeof *names);
        n->n_names = k;
        return 0;
}

static struct jnode *parse_if(struct parser *p, int line) {
        static const char *const stops[] = {"elif", "else", "endif", NULL};
        static const char *const end_stops[] = {"endif", NULL};
        struct nvec conds = {0}, bodies = {0};
        struct jnode *n = mk(p, JN_IF, line);
        if (!n)
                return NULL;
        for (;;) {
                struct jnode *cond = parse_tuple(p, 1);
                if (!cond || expect(p, T_BLOCK_END, "'%}'") < 0)
                        return NULL;
                struct jnode *body = parse_body(p, stops, line);
                if (!body || nvec_push(p, &conds, cond) < 0 || nvec_push(p, &bodies, body) < 0)
                        return NULL;
                struct token *tag = next(p);
                if (is_name(tag, "elif"))
                        continue;
                if (is_name(tag, "else")) {
                        if (expect(p, T_BLOCK_END, "'%}'") < 0 || !(body = parse_body(p, end_stops, line)) ||
                            nvec_push(p, &bodies, body) < 0)
                                return NULL;
                        next(p);
                }
                break;
        }
        n->kids = conds.p;
        n->n_kids = conds.n;
        n->kids2 = bodies.p;
        n->n_kids2 = bodies.n;
        return n;
}

static struct jnode *parse_for(struct parser *p, int line) {
        static const char *const stops[] = {"else", "endfor", NULL};
        static const char *const end_stops[] = {"endfor", NULL};
        struct jnode *n = mk(p, JN_FOR, line);
        if (!n)
                return NULL;
        int paren = is_op(cur(p), "(");
        if (paren)
                next(p);
        if (parse_targets(p, n) < 0 || (paren && expect_op(p, ")") < 0))
                return NULL;
        if (!is_name(cur(p), "in"))
                return fail(p, -EINVAL, cur(p)->line, "expected 'in' in for loop"), NULL;
        next(p);
        if (!(n->a = parse_tuple(p, 0)))
                return NULL;
        if (is_name(cur(p), "if")) {
                next(p);
                if (!(n->b = parse_expression(p, 1)))
                        return NULL;
        }
        if (is_name(cur(p), "recursive"))
                return fail(p, -EOPNOTSUPP, cur(p)->line, "recursive for loops are not supported"), NULL;
        if (expect(p, T_BLOCK_END, "'%}'") < 0)
                return NULL;
        p->loop_depth++;
        n->c = parse_body(p, stops, line);
        p->loop_depth--;
        if (!n->c)
                return NULL;
        if (is_name(next(p), "else")) {
                if (expect(p, T_BLOCK_END, "'%}'") < 0 || !(n->d = parse_body(p, end_stops, line)))
                        return NULL;
                next(p);
        }
        return n;
}

static struct jnode *parse_set(struct parser *p, int line) {
        static const char *const stops[] = {"endset", NULL};
        struct token *t = cur(p);
        if (t->type != T_NAME)
                return fail(p, -EINVAL, t->line, "expected a variable name after 'set'"), NULL;
        if (is_op(&p->toks[p->pos + 1], ".")) { /* ns.attr = value */
                struct jnode *n = mk(p, JN_SET, line);
                struct token *attr = &p->toks[p->pos + 2];
                if (!n)
                        return NULL;
                if (attr->type != T_NAME)
                        return fail(p, -EINVAL, t->line, "expected an attribute name after '.'"), NULL;
                n->names = dse__jalloc(p->a, sizeof *n->names);
                if (!n->names || !(n->names[0] = name_dup(p, t)) || !(n->str = name_dup(p, attr)))
                        return fail(p, -ENOMEM, line, "out of memory"), NULL;
                n->n_names = 1;
                n->len = attr->n;
                p->pos += 3;
                if (expect_op(p, "=") < 0 || !(n->a = parse_tuple(p, 1)))
                        return NULL;
                return n;
        }
        struct jnode *n = mk(p, JN_SET, line);
        if (!n || parse_targets(p, n) < 0)
                return NULL;
        if (is_op(cur(p), "=")) {
                next(p);
                n->a = parse_tuple(p, 1);
                return n->a ? n : NULL;
        }
        if (n->n_names != 1 || cur(p)->type != T_BLOCK_END)
                return fail(p, -EOPNOTSUPP, cur(p)->line, "this form of 'set' is not supported"), NULL;
        next(p);
        n->kind = JN_SET_BLOCK;
        if (!(n->c = parse_body(p, stops, line)))
                return NULL;
        next(p);
        return n;
}

static struct jnode *parse_macro(struct parser *p, int line) {
        static const char *const stops[] = {"endmacro", NULL};
        struct token *t = cur(p);
        if (t->type != T_NAME)
                return fail(p, -EINVAL, t->line, "expected a macro name"), NULL;
        struct jnode *n = mk(p, JN_MACRO, line);
        if (!n || !(n->str = name_dup(p, t)))
                return NULL;
        n->len = t->n;
        next(p);
        if (expect_op(p, "(") < 0)
                return NULL;
        const char *names[32];
        struct jnode *defaults[32];
        size_t k = 0;
        while (!is_op(cur(p), ")")) {
                if (k && expect_op(p, ",") < 0)
                        return NULL;
                if (is_op(cur(p), ")"))
                        break;
                struct token *param = cur(p);
                if (param->type != T_NAME)
                        return fail(p, -EINVAL, param->line, "expected a parameter name"), NULL;
                if (k == 32)
                        return fail(p, -EOPNOTSUPP, param->line, "more than 32 macro parameters"), NULL;
                if (!(names[k] = name_dup(p, param)))
                        return NULL;
                next(p);
                defaults[k] = NULL;
                if (is_op(cur(p), "=")) {
                        next(p);
                        if (!(defaults[k] = parse_expression(p, 1)))
                                return NULL;
                }
                k++;
        }
        next(p);
        if (expect(p, T_BLOCK_END, "'%}'") < 0)
                return NULL;
        n->names = dse__jalloc(p->a, (k ? k : 1) * sizeof *n->names);
        n->kids = dse__jalloc(p->a, (k ? k : 1) * sizeof *n->kids);
        if (!n->names || !n->kids)
                return fail(p, -ENOMEM, line, "out of memory"), NULL;
        memcpy(n->names, names, k * sizeof *names);
        memcpy(n->kids, defaults, k * sizeof *defaults);
        n->n_names = n->n_kids = k;
        int saved_loop_depth = p->loop_depth;
        p->loop_depth = 0;
        n->c = parse_body(p, stops, line);
        p->loop_depth = saved_loop_depth;
        if (!n->c)
                return NULL;
        next(p);
        return n;
}

/* After '{%' NAME: one statement, up to and including its closing tag. */
static struct jnode *parse_statement(struct parser *p) {
        struct token *tag = next(p);
        int line = tag->line;
        struct jnode *n = NULL;
        if (tag->type != T_NAME)
                return fail(p, -EINVAL, line, "expected a tag name after '{%%'"), NULL;
        if (enter(p) < 0)
                return NULL;
        if (is_name(tag, "if")) {
                n = parse_if(p, line);
        } else if (is_name(tag, "for")) {
                n = parse_for(p, line);
        } else if (is_name(tag, "set")) {
                n = parse_set(p, line);
                if (n && n->kind == JN_SET && expect(p, T_BLOCK_END, "'%}'") < 0)
                        n = NULL;
                if (n && n->kind == JN_SET_BLOCK && expect(p, T_BLOCK_END, "'%}'") < 0)
                        n = NULL;
                p->depth--;
                return n;
        } else if (is_name(tag, "macro")) {
                n = parse_macro(p, line);
        } else if (is_name(tag, "break") || is_name(tag, "continue")) {
                if (!p->loop_depth)
                        return fail(p, -EINVAL, line, "'%.*s' outside a for loop", (int)tag->n, tag->s), NULL;
                n = mk(p, tag->s[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
                p->depth--;
                return n && expect(p, T_BLOCK_END, "'%}'") == 0 ? n : NULL;
        } else if (is_name(tag, "generation")) {
                /* transformers' AssistantTracker block: renders its body unchanged. */
                static const char *const stops[] = {"endgeneration", NULL};
                if (expect(p, T_BLOCK_END, "'%}'") < 0 || !(n = parse_body(p, stops, line)))
                        return NULL;
                next(p);
        } else {
                static const char *const known[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration", NULL};
                if (tag_in(tag, known))
                        return fail(p, -EINVAL, line, "unexpected '%.*s'", (int)tag->n, tag->s), NULL;
                return fail(p, -EOPNOTSUPP, line, "tag '%.*s' is not supported", (int)tag->n, tag->s), NULL;
        }
        p->depth--;
        if (!n)
                return NULL;
        /* the closing tag name was consumed by the statement parser */
        if (expect(p, T_BLOCK_END, "'%}'") < 0)
                return NULL;
        return n;
}

/* Statements until a '{%' tag named in stops (left current: the tag name), or the end. */
static struct jnode *parse_body(struct parser *p, const char *const *stops, int line) {
        struct nvec kids = {0};
        for (;;) {
                struct token *t = cur(p);
                struct jnode *n = NULL;
                if (t->type == T_EOF) {
                        if (stops) {
                                while (stops[1])
                                        stops++; /* the end tag is the last one */
                                return fail(p, -EINVAL, line, "missing '%s' for the block opened here", stops[0]), NULL;
                        }
                        break;
                }
                if (t->type == T_DATA) {
                        next(p);
                        if (!(n = mk(p, JN_TEXT, t->line)))
                                return NULL;
                        n->str = t->s;
                        n->len = t->n;
                } else if (t->type == T_VAR_BEGIN) {
                        next(p);
                        if (!(n = mk(p, JN_OUTPUT, t->line)) || !(n->a = parse_tuple(p, 1)) ||
                            expect(p, T_VAR_END, "'}}'") < 0)
                                return NULL;
                } else if (t->type == T_BLOCK_BEGIN) {
                        if (tag_in(&p->toks[p->pos + 1], stops)) {
                                next(p);
                                break;
                        }
                        next(p);
                        if (!(n = parse_statement(p)))
                                return NULL;
                } else {
                        return fail(p, -EINVAL, t->line, "unexpected %s", tok_desc(t)), NULL;
                }
                if (nvec_push(p, &kids, n) < 0)
                        return NULL;
        }
        struct jnode *body = mk(p, JN_BODY, line);
        if (body) {
                body->kids = kids.p;
                body->n_kids = kids.n;
        }
        return body;
}

/* Newlines normalised to \n, one trailing newline dropped, as jinja2's lexer does. */
static char *normalize(struct jarena *a, const char *src, size_t *ret_len) {
        size_t n = strlen(src), o = 0;
        char *out = dse__jalloc(a, n + 1);
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                if (src[i] == '\r') {
                        out[o++] = '\n';
                        if (i + 1 < n && src[i + 1] == '\n')
                                i++;
                } else {
                        out[o++] = src[i];
                }
        }
        if (o > 0 && out[o - 1] == '\n')
                o--;
        out[o] = '\0';
        *ret_len = o;
        return out;
}

int dse__jinja_parse(struct jarena *a, const char *src, struct jnode **ret_root, struct dse_diag *reterr) {
        struct parser p = {.a = a, .reterr = reterr};
        if (!dse__utf8_valid(src, strlen(src)))
                return dse__fail(reterr, -EILSEQ, "chat template is not valid UTF-8");
        size_t len;
        char *norm = normalize(a, src, &len);
        if (!norm)
                return -ENOMEM;
        int r = lex(&p, norm, len);
        if (r < 0)
                return r;
        struct jnode *root = parse_body(&p, NULL, 1);
        if (!root)
                return p.err ? p.err : -ENOMEM;
        *ret_root = root;
        return 0;
}

/* ---- filter and test names ----------------------------------------------------------- */

static int lookup(const char *const *names, int count, const char *name, size_t len) {
        for (int i = 0; i < count; i++)
                if (names[i] && strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
                        return i;
        return -1;
}

int dse__jinja_filter_lookup(const char *name, size_t len) {
        static const char *const names[JF_COUNT_] = {
                [JF_ABS] = "abs", [JF_CAPITALIZE] = "capitalize", [JF_COUNT] = "count", [JF_DEFAULT] = "default",
                [JF_FIRST] = "first", [JF_FLOAT] = "float", [JF_INT] = "int", [JF_ITEMS] = "items",
                [JF_JOIN] = "join", [JF_LAST] = "last", [JF_LENGTH] = "length", [JF_LIST] = "list",
                [JF_LOWER] = "lower", [JF_MAP] = "map", [JF_REJECT] = "reject", [JF_REJECTATTR] = "rejectattr",
                [JF_REPLACE] = "replace", [JF_REVERSE] = "reverse", [JF_SAFE] = "safe", [JF_SELECT] = "select",
                [JF_SELECTATTR] = "selectattr", [JF_SORT] = "sort", [JF_STRING] = "string",
                [JF_TITLE] = "title", [JF_TOJSON] = "tojson", [JF_TRIM] = "trim", [JF_UPPER] = "upper",
        };
        if (len == 1 && name[0] == 'd')
                return JF_DEFAULT;
        return lookup(names, JF_COUNT_, name, len);
}

int dse__jinja_test_lookup(const char *name, size_t len) {
        static const char *const names[JS_COUNT_] = {
                [JS_BOOLEAN] = "boolean", [JS_CALLABLE] = "callable", [JS_DEFINED] = "defined",
                [JS_DIVISIBLEBY] = "divisibleby", [JS_EQ] = "eq", [JS_EVEN] = "even", [JS_FALSE] = "false",
                [JS_FLOAT] = "float", [JS_GE] = "ge", [JS_GT] = "gt", [JS_IN] = "in", [JS_INTEGER] = "integer",
                [JS_ITERABLE] = "iterable", [JS_LE] = "le", [JS_LOWER] = "lower", [JS_LT] = "lt",
                [JS_MAPPING] = "mapping", [JS_NE] = "ne", [JS_NONE] = "none", [JS_NUMBER] = "number",
                [JS_ODD] = "odd", [JS_SAMEAS] = "sameas", [JS_SEQUENCE] = "sequence", [JS_STRING] = "string",
                [JS_TRUE] = "true", [JS_UNDEFINED] = "undefined", [JS_UPPER] = "upper",
        };
        static const struct {
                const char *alias;
                int id;
        } aliases[] = {{"equalto", JS_EQ}, {"==", JS_EQ}, {"!=", JS_NE}, {"<", JS_LT}, {"<=", JS_LE},
                       {">", JS_GT}, {">=", JS_GE}, {"greaterthan", JS_GT}, {"lessthan", JS_LT}};
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
                if (strlen(aliases[i].alias) == len && memcmp(aliases[i].alias, name, len) == 0)
                        return aliases[i].id;
        return lookup(names, JS_COUNT_, name, len);
}
