/* A small JSON reader for tokenizer.json: one pass, strings decoded into one arena,
 * nodes in one array (children of a container are contiguous). Strict RFC 8259. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "bpe_impl.h"

#define BJ_MAX_DEPTH 256

struct bj_parser {
        const char *s;
        size_t len, pos;
        char *strs;
        size_t strs_len;
        struct bj *stack; /* values whose container is still open */
        size_t stack_n, stack_cap;
        struct bj *nodes; /* finished children, contiguous per container */
        size_t nodes_n, nodes_cap;
        struct dse_diag *reterr;
};

static int bj_error(struct bj_parser *p, const char *what) {
        return dse__fail(p->reterr, -EBADMSG, "JSON: %s at byte %zu", what, p->pos);
}

static void bj_skip_ws(struct bj_parser *p) {
        while (p->pos < p->len) {
                char c = p->s[p->pos];
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
                        break;
                p->pos++;
        }
}

static int bj_push(struct bj_parser *p, struct bj **ret) {
        if (p->stack_n == p->stack_cap) {
                size_t cap = p->stack_cap ? p->stack_cap * 2 : 256;
                struct bj *n = realloc(p->stack, cap * sizeof *n);
                if (!n)
                        return -ENOMEM;
                p->stack = n;
                p->stack_cap = cap;
        }
        *ret = &p->stack[p->stack_n++];
        memset(*ret, 0, sizeof **ret);
        return 0;
}

static int hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int bj_hex4(struct bj_parser *p, size_t at, uint32_t *ret) {
        if (at + 4 > p->len)
                return -1;
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
                int h = hexval(p->s[at + i]);
                if (h < 0)
                        return -1;
                v = v << 4 | (uint32_t)h;
        }
        *ret = v;
        return 0;
}

/* Decodes the string at p->pos (on the opening quote) into the arena. */
static int bj_string(struct bj_parser *p, const char **ret_str, uint32_t *ret_len) {
        p->pos++; /* opening quote */
        char *out = p->strs + p->strs_len, *o = out;
        for (;;) {
                /* fast path: a run of plain bytes */
                size_t start = p->pos;
                while (p->pos < p->len) {
                        unsigned char c = (unsigned char)p->s[p->pos];
                        if (c == '"' || c == '\\' || c < 0x20)
                                break;
                        p->pos++;
                }
                size_t run = p->pos - start;
                if (run) { /* UTF-8 was checked for the whole input up front */
                        memcpy(o, p->s + start, run);
                        o += run;
                }
                if (p->pos >= p->len)
                        return bj_error(p, "unterminated string");
                char c = p->s[p->pos];
                if (c == '"') {
                        p->pos++;
                        break;
                }
                if (c != '\\')
                        return bj_error(p, "control character in string");
                if (p->pos + 1 >= p->len)
                        return bj_error(p, "unterminated string");
                char e = p->s[p->pos + 1];
                p->pos += 2;
                switch (e) {
                case '"': *o++ = '"'; break;
                case '\\': *o++ = '\\'; break;
                case '/': *o++ = '/'; break;
                case 'b': *o++ = '\b'; break;
                case 'f': *o++ = '\f'; break;
                case 'n': *o++ = '\n'; break;
                case 'r': *o++ = '\r'; break;
                case 't': *o++ = '\t'; break;
                case 'u': {
                        uint32_t cp;
                        if (bj_hex4(p, p->pos, &cp) < 0)
                                return bj_error(p, "bad \\u escape");
                        p->pos += 4;
                        if (cp >= 0xD800 && cp <= 0xDBFF) {
                                uint32_t lo;
                                if (p->pos + 6 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                                    bj_hex4(p, p->pos + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
                                        return bj_error(p, "unpaired surrogate in \\u escape");
                                p->pos += 6;
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                                return bj_error(p, "unpaired surrogate in \\u escape");
                        }
                        o += bpe_utf8_encode((int32_t)cp, o);
                        break;
                }
                default:
                        return bj_error(p, "bad escape");
                }
        }
        *o = '\0';
        *ret_str = out;
        *ret_len = (uint32_t)(o - out);
        p->strs_len += (size_t)(o - out) + 1;
        return 0;
}

static int bj_number(struct bj_parser *p, double *ret) {
        size_t start = p->pos, i = p->pos;
        if (i < p->len && p->s[i] == '-')
                i++;
        if (i >= p->len)
                return bj_error(p, "bad number");
        if (p->s[i] == '0') {
                i++;
        } else if (p->s[i] >= '1' && p->s[i] <= '9') {
                while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
                        i++;
        } else {
                return bj_error(p, "bad number");
        }
        if (i < p->len && p->s[i] == '.') {
                i++;
                if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
                        return bj_error(p, "bad number");
                while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
                        i++;
        }
        if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
                i++;
                if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
                        i++;
                if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
                        return bj_error(p, "bad number");
                while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
                        i++;
        }
        size_t n = i - start;
        int integral = 1;
        for (size_t k = start; k < i; k++)
                integral &= p->s[k] >= '0' && p->s[k] <= '9';
        if (integral && n <= 15) { /* ids: exact without strtod */
                double v = 0;
                for (size_t k = start; k < i; k++)
                        v = v * 10 + (p->s[k] - '0');
                *ret = v;
                p->pos = i;
                return 0;
        }
        char small[64], *tmp = small;
        if (n >= sizeof small && !(tmp = malloc(n + 1)))
                return -ENOMEM;
        memcpy(tmp, p->s + start, n);
        tmp[n] = '\0';
        *ret = strtod(tmp, NULL);
        if (tmp != small)
                free(tmp);
        p->pos = i;
        return 0;
}

static int bj_literal(struct bj_parser *p, const char *word) {
        size_t n = strlen(word);
        if (p->pos + n > p->len || memcmp(p->s + p->pos, word, n) != 0)
                return bj_error(p, "unexpected token");
        p->pos += n;
        return 0;
}

/* Moves the stack's top n values into the node array; returns the first index. */
static int bj_close(struct bj_parser *p, size_t n, uint32_t *ret_first) {
        if (p->nodes_n + n > p->nodes_cap) {
                size_t cap = p->nodes_cap ? p->nodes_cap : 1024;
                while (cap < p->nodes_n + n)
                        cap *= 2;
                struct bj *nn = realloc(p->nodes, cap * sizeof *nn);
                if (!nn)
                        return -ENOMEM;
                p->nodes = nn;
                p->nodes_cap = cap;
        }
        if (p->nodes_n + n > UINT32_MAX)
                return bj_error(p, "too many values");
        if (n)
                memcpy(p->nodes + p->nodes_n, p->stack + p->stack_n - n, n * sizeof *p->nodes);
        *ret_first = (uint32_t)p->nodes_n;
        p->nodes_n += n;
        p->stack_n -= n;
        return 0;
}

static int bj_value(struct bj_parser *p, int depth, const char *key, uint32_t key_len) {
        if (depth > BJ_MAX_DEPTH)
                return bj_error(p, "nesting too deep");
        bj_skip_ws(p);
        if (p->pos >= p->len)
                return bj_error(p, "unexpected end of input");
        struct bj *v;
        int r = bj_push(p, &v);
        if (r < 0)
                return r;
        size_t self = p->stack_n - 1;
        v->key = key;
        v->key_len = key_len;
        char c = p->s[p->pos];
        if (c == '"') {
                const char *str;
                uint32_t n;
                if ((r = bj_string(p, &str, &n)) < 0)
                        return r;
                v = &p->stack[self];
                v->type = BJ_STRING;
                v->str = str;
                v->n = n;
                return 0;
        }
        if (c == '{' || c == '[') {
                int is_obj = c == '{';
                char end = is_obj ? '}' : ']';
                size_t n = 0;
                p->pos++;
                bj_skip_ws(p);
                if (p->pos < p->len && p->s[p->pos] == end) {
                        p->pos++;
                } else {
                        for (;;) {
                                const char *k = NULL;
                                uint32_t klen = 0;
                                if (is_obj) {
                                        bj_skip_ws(p);
                                        if (p->pos >= p->len || p->s[p->pos] != '"')
                                                return bj_error(p, "expected a member name");
                                        if ((r = bj_string(p, &k, &klen)) < 0)
                                                return r;
                                        bj_skip_ws(p);
                                        if (p->pos >= p->len || p->s[p->pos] != ':')
                                                return bj_error(p, "expected ':'");
                                        p->pos++;
                                }
                                if ((r = bj_value(p, depth + 1, k, klen)) < 0)
                                        return r;
                                n++;
                                bj_skip_ws(p);
                                if (p->pos >= p->len)
                                        return bj_error(p, "unexpected end of input");
                                if (p->s[p->pos] == ',') {
                                        p->pos++;
                                        continue;
                                }
                                if (p->s[p->pos] == end) {
                                        p->pos++;
                                        break;
                                }
                                return bj_error(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
                        }
                }
                uint32_t first = 0;
                if ((r = bj_close(p, n, &first)) < 0)
                        return r;
                v = &p->stack[self];
                v->type = is_obj ? BJ_OBJECT : BJ_ARRAY;
                v->n = (uint32_t)n;
                v->first = first;
                return 0;
        }
        if (c == 't') {
                v->type = BJ_TRUE;
                return bj_literal(p, "true");
        }
        if (c == 'f') {
                v->type = BJ_FALSE;
                return bj_literal(p, "false");
        }
        if (c == 'n') {
                v->type = BJ_NULL;
                return bj_literal(p, "null");
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
                double d = 0;
                if ((r = bj_number(p, &d)) < 0)
                        return r;
                v = &p->stack[self];
                v->type = BJ_NUMBER;
                v->num = d;
                return 0;
        }
        return bj_error(p, "unexpected character");
}

int bj_parse(const char *text, size_t len, struct bj_doc *doc, struct dse_diag *reterr) {
        struct bj_parser p = {.s = text, .len = len, .reterr = reterr};
        memset(doc, 0, sizeof *doc);
        size_t valid = bpe_utf8_valid_prefix(text, len);
        if (valid != len) {
                p.pos = valid;
                return bj_error(&p, "invalid UTF-8");
        }
        p.strs = malloc(len + 1);
        if (!p.strs)
                return -ENOMEM;
        int r = bj_value(&p, 0, NULL, 0);
        if (r == 0) {
                bj_skip_ws(&p);
                if (p.pos != p.len)
                        r = bj_error(&p, "trailing characters after the JSON value");
        }
        uint32_t root = 0;
        if (r == 0)
                r = bj_close(&p, 1, &root);
        free(p.stack);
        if (r < 0) {
                free(p.nodes);
                free(p.strs);
                return r;
        }
        doc->nodes = p.nodes;
        doc->strs = p.strs;
        doc->root = root;
        return 0;
}

void bj_free(struct bj_doc *doc) {
        free(doc->nodes);
        free(doc->strs);
        memset(doc, 0, sizeof *doc);
}

const struct bj *bj_root(const struct bj_doc *doc) {
        return &doc->nodes[doc->root];
}

const struct bj *bj_at(const struct bj_doc *doc, const struct bj *v, uint32_t i) {
        if (!v || (v->type != BJ_ARRAY && v->type != BJ_OBJECT) || i >= v->n)
                return NULL;
        return &doc->nodes[v->first + i];
}

const struct bj *bj_get(const struct bj_doc *doc, const struct bj *v, const char *key) {
        if (!v || v->type != BJ_OBJECT)
                return NULL;
        size_t klen = strlen(key);
        for (uint32_t i = 0; i < v->n; i++) {
                const struct bj *m = &doc->nodes[v->first + i];
                if (m->key_len == klen && memcmp(m->key, key, klen) == 0)
                        return m;
        }
        return NULL;
}

const char *bj_get_str(const struct bj_doc *doc, const struct bj *v, const char *key) {
        const struct bj *m = bj_get(doc, v, key);
        return m && m->type == BJ_STRING ? m->str : NULL;
}

int bj_get_bool(const struct bj_doc *doc, const struct bj *v, const char *key, int dflt) {
        const struct bj *m = bj_get(doc, v, key);
        if (m && m->type == BJ_TRUE)
                return 1;
        if (m && m->type == BJ_FALSE)
                return 0;
        return dflt;
}
