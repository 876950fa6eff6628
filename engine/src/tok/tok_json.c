/* The engine's JSON reader (tok_json.h): strict RFC 8259. */
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

static int bj_fail(struct bj_parser *p, int err, const char *what) {
        return dse__fail(p->reterr, err, "JSON: %s at byte %zu", what, p->pos);
}

static int bj_error(struct bj_parser *p, const char *what) {
        return bj_fail(p, -EBADMSG, what);
}

/* tokenizer.json is pretty-printed: almost half of a 7.8 MB file is indentation, so
 * runs of spaces are skipped a word at a time. Returns the end of the whitespace at pos. */
static size_t skip_ws_run(const char *s, size_t pos, size_t len) {
        for (;;) {
                while (pos + 8 <= len) {
                        uint64_t w;
                        memcpy(&w, s + pos, 8);
                        w ^= 0x2020202020202020ull; /* zero bytes: spaces */
                        if (w) {
                                pos += (size_t)__builtin_ctzll(w) >> 3;
                                break;
                        }
                        pos += 8;
                }
                if (pos >= len)
                        return pos;
                char c = s[pos];
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
                        return pos;
                pos++;
        }
}

/* Most calls find no whitespace at all (after a key, a value, a '['): one byte decides. */
static inline void bj_skip_ws(struct bj_parser *p) {
        if (p->pos < p->len && (unsigned char)p->s[p->pos] > ' ')
                return;
        p->pos = skip_ws_run(p->s, p->pos, p->len);
}

static int bj_push(struct bj_parser *p, struct bj **ret) {
        *ret = NULL;
        if (p->stack_n == p->stack_cap) /* cannot happen: sized for the most values len allows */
                return bj_error(p, "too many values");
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

/* High bit set in each byte of w that ends a plain run inside a string: '"', '\\' or a
 * control character (< 0x20); UTF-8 was checked for the whole input up front, so other
 * bytes >= 0x80 are plain. False flags only occur above a true one (borrows travel
 * upwards), so the lowest flag is exact. */
static inline uint64_t str_stop_mask(uint64_t w) {
        const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        return (((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w)) & high;
}

/* Decodes the string at p->pos (on the opening quote) into the arena. The arena has 8
 * bytes of slack past the decoded text of the whole input (a decoded string plus its NUL
 * never outgrows its quoted form), so plain runs are copied a whole word at a time. */
static int bj_string(struct bj_parser *p, const char **ret_str, uint32_t *ret_len) {
        p->pos++; /* opening quote */
        const char *s = p->s;
        size_t pos = p->pos, len = p->len;
        char *out = p->strs + p->strs_len, *o = out;
        for (;;) {
                /* a run of plain bytes, 8 at a time, then byte by byte at the end */
                for (;;) {
                        if (pos + 8 <= len) {
                                uint64_t w;
                                memcpy(&w, s + pos, 8);
                                memcpy(o, &w, 8);
                                uint64_t m = str_stop_mask(w);
                                if (!m) {
                                        pos += 8;
                                        o += 8;
                                        continue;
                                }
                                size_t k = (size_t)__builtin_ctzll(m) >> 3;
                                pos += k;
                                o += k;
                                break;
                        }
                        if (pos >= len)
                                break;
                        unsigned char c = (unsigned char)s[pos];
                        if (c == '"' || c == '\\' || c < 0x20)
                                break;
                        *o++ = (char)c;
                        pos++;
                }
                p->pos = pos;
                if (pos >= len)
                        return bj_error(p, "unterminated string");
                unsigned char c = (unsigned char)s[pos];
                if (c == '"') {
                        p->pos = ++pos;
                        break;
                }
                if (c != '\\')
                        return bj_error(p, "control character in string");
                if (pos + 1 >= len)
                        return bj_error(p, "unterminated string");
                char e = s[pos + 1];
                p->pos = pos += 2;
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
                                        return bj_fail(p, -EILSEQ, "unpaired surrogate in \\u escape");
                                p->pos += 6;
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                                return bj_fail(p, -EILSEQ, "unpaired surrogate in \\u escape");
                        }
                        o += dse__utf8_encode((int32_t)cp, o);
                        pos = p->pos;
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

static int bj_number(struct bj_parser *p, struct bj *ret) {
        size_t start = p->pos, i = p->pos;
        int neg = 0;
        if (i < p->len && p->s[i] == '-') {
                neg = 1;
                i++;
        }
        if (i >= p->len)
                return bj_error(p, "bad number");
        /* the integer part in an integer register: every vocabulary id is one, and a
         * chain of double multiply-adds per digit is four times slower */
        uint64_t mag = 0;
        size_t digits_at = i;
        if (p->s[i] == '0') {
                i++;
        } else if (p->s[i] >= '1' && p->s[i] <= '9') {
                while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') {
                        mag = mag * 10 + (uint64_t)(p->s[i] - '0'); /* wraps past 19 digits; unused then */
                        i++;
                }
        } else {
                return bj_error(p, "bad number");
        }
        int integral = 1;
        if (i < p->len && p->s[i] == '.') {
                integral = 0;
                i++;
                if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
                        return bj_error(p, "bad number");
                while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
                        i++;
        }
        if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
                integral = 0;
                i++;
                if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
                        i++;
                if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
                        return bj_error(p, "bad number");
                while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
                        i++;
        }
        size_t n = i - start;
        p->pos = i;
        if (integral && i - digits_at <= 18) { /* below 10^18: fits without strtoll */
                ret->num_kind = BJ_INT;
                ret->i = neg ? -(int64_t)mag : (int64_t)mag;
                return 0;
        }
        char small[64], *tmp = small;
        if (n >= sizeof small && !(tmp = malloc(n + 1)))
                return -ENOMEM;
        memcpy(tmp, p->s + start, n);
        tmp[n] = '\0';
        errno = 0;
        long long ll = integral ? strtoll(tmp, NULL, 10) : 0;
        if (integral && errno != ERANGE) {
                ret->num_kind = BJ_INT;
                ret->i = ll;
        } else {
                ret->num_kind = integral ? BJ_BIG_INT : BJ_FLOAT;
                ret->num = strtod(tmp, NULL);
        }
        if (tmp != small)
                free(tmp);
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
        if (p->nodes_n + n > p->nodes_cap) /* cannot happen, as in bj_push */
                return bj_error(p, "too many values");
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
                struct bj num = {.type = BJ_NUMBER};
                if ((r = bj_number(p, &num)) < 0)
                        return r;
                v = &p->stack[self];
                v->type = BJ_NUMBER;
                v->num_kind = num.num_kind;
                if (num.num_kind == BJ_INT)
                        v->i = num.i;
                else
                        v->num = num.num;
                return 0;
        }
        return bj_error(p, "unexpected character");
}

int dse__bj_parse(const char *text, size_t len, struct bj_doc *doc, struct dse_diag *reterr) {
        struct bj_parser p = {.s = text, .len = len, .reterr = reterr};
        memset(doc, 0, sizeof *doc);
        size_t valid = dse__utf8_valid_prefix(text, len);
        if (valid != len) {
                p.pos = valid;
                return bj_fail(&p, -EILSEQ, "invalid UTF-8");
        }
        /* Every value but the first follows a ',', ':' or '[' and takes a byte, so there
         * are at most len / 2 + 1 values: the stack and the node array never grow (and
         * only the pages used are ever touched). */
        size_t max_values = len / 2 + 2;
        p.stack_cap = p.nodes_cap = max_values;
        size_t strs_size = len + 1 + 8, nodes_size = max_values * sizeof(struct bj); /* +8: bj_string's words */
        p.strs = dse__bpe_map(strs_size);
        p.stack = dse__bpe_map(nodes_size);
        p.nodes = dse__bpe_map(nodes_size);
        if (!p.strs || !p.stack || !p.nodes) {
                dse__bpe_unmap(p.strs, strs_size);
                dse__bpe_unmap(p.stack, nodes_size);
                dse__bpe_unmap(p.nodes, nodes_size);
                return -ENOMEM;
        }
        int r = bj_value(&p, 0, NULL, 0);
        if (r == 0) {
                bj_skip_ws(&p);
                if (p.pos != p.len)
                        r = bj_error(&p, "trailing characters after the JSON value");
        }
        uint32_t root = 0;
        if (r == 0)
                r = bj_close(&p, 1, &root);
        dse__bpe_unmap(p.stack, nodes_size);
        if (r < 0) {
                dse__bpe_unmap(p.nodes, nodes_size);
                dse__bpe_unmap(p.strs, strs_size);
                return r;
        }
        doc->nodes = p.nodes;
        doc->strs = p.strs;
        doc->nodes_size = nodes_size;
        doc->strs_size = strs_size;
        doc->root = root;
        return 0;
}

void dse__bj_free(struct bj_doc *doc) {
        dse__bpe_unmap(doc->nodes, doc->nodes_size);
        dse__bpe_unmap(doc->strs, doc->strs_size);
        memset(doc, 0, sizeof *doc);
}

const struct bj *dse__bj_root(const struct bj_doc *doc) {
        return &doc->nodes[doc->root];
}

const struct bj *dse__bj_get(const struct bj_doc *doc, const struct bj *v, const char *key) {
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

const char *dse__bj_get_str(const struct bj_doc *doc, const struct bj *v, const char *key) {
        const struct bj *m = dse__bj_get(doc, v, key);
        return m && m->type == BJ_STRING ? m->str : NULL;
}

int dse__bj_get_bool(const struct bj_doc *doc, const struct bj *v, const char *key, int dflt) {
        const struct bj *m = dse__bj_get(doc, v, key);
        if (m && m->type == BJ_TRUE)
                return 1;
        if (m && m->type == BJ_FALSE)
                return 0;
        return dflt;
}
