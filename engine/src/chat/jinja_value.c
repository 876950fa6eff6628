/* Values of the chat-template interpreter: the arena, JSON in (json.loads) and out
 * (json.dumps with ensure_ascii=False), Python str()/repr(). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "internal.h"
#include "../tok/tok_json.h"
#include "jinja.h"

/* ---- arena --------------------------------------------------------------------------- */

struct jchunk {
        struct jchunk *next;
        size_t cap, used;
        _Alignas(16) unsigned char data[];
};

void dse__jarena_init(struct jarena *a, size_t limit_bytes) {
        a->head = NULL;
        a->used_bytes = 0;
        a->limit_bytes = limit_bytes;
        a->over_limit = 0;
}

void dse__jarena_done(struct jarena *a) {
        struct jchunk *c = a->head;
        while (c) {
                struct jchunk *next = c->next;
                free(c);
                c = next;
        }
        a->head = NULL;
        a->used_bytes = 0;
}

void *dse__jalloc(struct jarena *a, size_t size) {
        size = (size + 15) & ~(size_t)15;
        if (size == 0)
                size = 16;
        if (a->limit_bytes && (size > a->limit_bytes || a->used_bytes > a->limit_bytes - size)) {
                a->over_limit = 1;
                return NULL;
        }
        struct jchunk *c = a->head;
        if (!c || c->cap - c->used < size) {
                size_t cap = size > 65536 ? size : 65536;
                c = malloc(sizeof *c + cap);
                if (!c)
                        return NULL;
                c->cap = cap;
                c->used = 0;
                c->next = a->head;
                a->head = c;
        }
        void *p = c->data + c->used;
        c->used += size;
        a->used_bytes += size;
        memset(p, 0, size);
        return p;
}

char *dse__jstrdup(struct jarena *a, const char *s, size_t len) {
        char *p = dse__jalloc(a, len + 1);
        if (!p)
                return NULL;
        memcpy(p, s, len);
        p[len] = '\0';
        return p;
}

/* ---- values -------------------------------------------------------------------------- */

struct jv *dse__jv_new(struct jarena *a, enum jtype t) {
        struct jv *v = dse__jalloc(a, sizeof *v);
        if (v)
                v->t = t;
        return v;
}

struct jv *dse__jv_str(struct jarena *a, const char *s, size_t n) {
        struct jv *v = dse__jv_new(a, JT_STR);
        if (!v)
                return NULL;
        char *p = dse__jstrdup(a, s ? s : "", s ? n : 0);
        if (!p)
                return NULL;
        v->u.str.s = p;
        v->u.str.n = s ? n : 0;
        return v;
}

struct jv *dse__jv_int(struct jarena *a, int64_t i) {
        struct jv *v = dse__jv_new(a, JT_INT);
        if (v)
                v->u.i = i;
        return v;
}

struct jv *dse__jv_float(struct jarena *a, double f) {
        struct jv *v = dse__jv_new(a, JT_FLOAT);
        if (v)
                v->u.f = f;
        return v;
}

struct jv *dse__jv_bool(struct jarena *a, int b) {
        struct jv *v = dse__jv_new(a, JT_BOOL);
        if (v)
                v->u.b = !!b;
        return v;
}

struct jv *dse__jv_undef(struct jarena *a, const char *name) {
        struct jv *v = dse__jv_new(a, JT_UNDEF);
        if (v)
                v->u.undef.name = name;
        return v;
}

int dse__jv_dict_set(struct jarena *a, struct jv *dict, struct jv *key, struct jv *val) {
        for (size_t i = 0; i < dict->u.dict.n; i++)
                if (dse__jv_equal(dict->u.dict.kv[i].key, key)) {
                        dict->u.dict.kv[i].val = val;
                        return 0;
                }
        if (dict->u.dict.n == dict->u.dict.cap) {
                size_t cap = dict->u.dict.cap ? dict->u.dict.cap * 2 : 8;
                struct jkv *kv = dse__jalloc(a, cap * sizeof *kv);
                if (!kv)
                        return -ENOMEM;
                if (dict->u.dict.n)
                        memcpy(kv, dict->u.dict.kv, dict->u.dict.n * sizeof *kv);
                dict->u.dict.kv = kv;
                dict->u.dict.cap = cap;
        }
        dict->u.dict.kv[dict->u.dict.n++] = (struct jkv){key, val};
        return 0;
}

struct jv *dse__jv_dict_get(const struct jv *dict, const char *key, size_t key_len) {
        for (size_t i = 0; i < dict->u.dict.n; i++) {
                const struct jv *k = dict->u.dict.kv[i].key;
                if (k->t == JT_STR && k->u.str.n == key_len && memcmp(k->u.str.s, key, key_len) == 0)
                        return dict->u.dict.kv[i].val;
        }
        return NULL;
}

static int is_number(const struct jv *v) {
        return v->t == JT_INT || v->t == JT_FLOAT || v->t == JT_BOOL;
}

static double as_double(const struct jv *v) {
        return v->t == JT_FLOAT ? v->u.f : v->t == JT_INT ? (double)v->u.i : (double)v->u.b;
}

/* Python ==: numbers compare by value (True == 1), containers element-wise. */
int dse__jv_equal(const struct jv *x, const struct jv *y) {
        if (x == y)
                return 1;
        if (is_number(x) && is_number(y)) {
                if (x->t != JT_FLOAT && y->t != JT_FLOAT) {
                        int64_t a = x->t == JT_INT ? x->u.i : x->u.b, b = y->t == JT_INT ? y->u.i : y->u.b;
                        return a == b;
                }
                return as_double(x) == as_double(y);
        }
        int xl = x->t == JT_LIST || x->t == JT_TUPLE, yl = y->t == JT_LIST || y->t == JT_TUPLE;
        if (xl || yl) {
                if (x->t != y->t || x->u.list.n != y->u.list.n)
                        return 0;
                for (size_t i = 0; i < x->u.list.n; i++)
                        if (!dse__jv_equal(x->u.list.items[i], y->u.list.items[i]))
                                return 0;
                return 1;
        }
        if (x->t != y->t)
                return 0;
        switch (x->t) {
        case JT_UNDEF:
        case JT_NONE:
                return 1;
        case JT_STR:
                return x->u.str.n == y->u.str.n && memcmp(x->u.str.s, y->u.str.s, x->u.str.n) == 0;
        case JT_DICT:
                if (x->u.dict.n != y->u.dict.n)
                        return 0;
                for (size_t i = 0; i < x->u.dict.n; i++) {
                        const struct jv *k = x->u.dict.kv[i].key, *other = NULL;
                        for (size_t j = 0; j < y->u.dict.n && !other; j++)
                                if (dse__jv_equal(k, y->u.dict.kv[j].key))
                                        other = y->u.dict.kv[j].val;
                        if (!other || !dse__jv_equal(x->u.dict.kv[i].val, other))
                                return 0;
                }
                return 1;
        case JT_MACRO:
                return x->u.macro.def == y->u.macro.def;
        case JT_FUNC:
                return x->u.fn.id == y->u.fn.id && x->u.fn.self == y->u.fn.self;
        default:
                return 0; /* namespaces compare by identity, handled above */
        }
}

int dse__jv_truthy(const struct jv *v) {
        switch (v->t) {
        case JT_UNDEF:
        case JT_NONE:
                return 0;
        case JT_BOOL:
                return v->u.b;
        case JT_INT:
                return v->u.i != 0;
        case JT_FLOAT:
                return v->u.f != 0.0;
        case JT_STR:
                return v->u.str.n != 0;
        case JT_LIST:
        case JT_TUPLE:
                return v->u.list.n != 0;
        case JT_DICT:
                return v->u.dict.n != 0;
        default:
                return 1;
        }
}

/* ---- byte buffer --------------------------------------------------------------------- */

void dse__jbuf_init(struct jbuf *b, struct jarena *a) {
        *b = (struct jbuf){.a = a};
}

static int jbuf_reserve(struct jbuf *b, size_t extra) {
        if (b->oom)
                return -ENOMEM;
        if (b->n + extra + 1 <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + extra + 1) {
                if (cap > SIZE_MAX / 2) {
                        b->oom = 1;
                        return -ENOMEM;
                }
                cap *= 2;
        }
        char *p = dse__jalloc(b->a, cap);
        if (!p) {
                b->oom = 1;
                return -ENOMEM;
        }
        if (b->n)
                memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
        return 0;
}

void dse__jbuf_put(struct jbuf *b, const char *s, size_t n) {
        if (jbuf_reserve(b, n) < 0)
                return;
        if (n)
                memcpy(b->p + b->n, s, n);
        b->n += n;
        b->p[b->n] = '\0';
}

void dse__jbuf_putc(struct jbuf *b, char c) {
        dse__jbuf_put(b, &c, 1);
}

void dse__jbuf_printf(struct jbuf *b, const char *fmt, ...) {
        char tmp[128];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        if ((size_t)n < sizeof tmp) {
                dse__jbuf_put(b, tmp, (size_t)n);
                return;
        }
        if (jbuf_reserve(b, (size_t)n) < 0)
                return;
        va_start(ap, fmt);
        vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
        va_end(ap);
        b->n += (size_t)n;
}

/* ---- JSON in ------------------------------------------------------------------------- */

/* The value of v, a node of doc, built in a. NULL when out of memory or for an integer
 * past 64 bits (*ret_big set). */
static struct jv *from_json(struct jarena *a, const struct bj_doc *doc, const struct bj *v, int *ret_big) {
        switch (v->type) {
        case BJ_NULL:
                return dse__jv_new(a, JT_NONE);
        case BJ_FALSE:
        case BJ_TRUE:
                return dse__jv_bool(a, v->type == BJ_TRUE);
        case BJ_NUMBER:
                if (v->num_kind == BJ_BIG_INT) {
                        *ret_big = 1;
                        return NULL;
                }
                return v->num_kind == BJ_INT ? dse__jv_int(a, v->i) : dse__jv_float(a, v->num);
        case BJ_STRING:
                return dse__jv_str(a, v->str, v->n);
        case BJ_ARRAY: {
                struct jv *list = dse__jv_new(a, JT_LIST);
                struct jv **items = v->n ? dse__jalloc(a, v->n * sizeof *items) : NULL;
                if (!list || (v->n && !items))
                        return NULL;
                for (uint32_t i = 0; i < v->n; i++)
                        if (!(items[i] = from_json(a, doc, dse__bj_at(doc, v, i), ret_big)))
                                return NULL;
                list->u.list.items = items;
                list->u.list.n = v->n;
                return list;
        }
        default: {
                struct jv *dict = dse__jv_new(a, JT_DICT);
                if (!dict)
                        return NULL;
                for (uint32_t i = 0; i < v->n; i++) {
                        const struct bj *m = dse__bj_at(doc, v, i);
                        struct jv *key = dse__jv_str(a, m->key, m->key_len), *val = from_json(a, doc, m, ret_big);
                        if (!key || !val || dse__jv_dict_set(a, dict, key, val) < 0)
                                return NULL;
                }
                return dict;
        }
        }
}

int dse__json_parse(struct jarena *a, const char *text, struct jv **ret, struct dse_diag *reterr) {
        struct bj_doc doc;
        int r = dse__bj_parse(text, strlen(text), &doc, reterr);
        if (r < 0)
                return r;
        int big = 0;
        struct jv *v = from_json(a, &doc, dse__bj_root(&doc), &big);
        dse__bj_free(&doc);
        if (big)
                return dse__fail(reterr, -EOPNOTSUPP, "JSON: integer outside 64 bits");
        if (!v)
                return dse__fail(reterr, -ENOMEM, "JSON: out of memory");
        *ret = v;
        return 0;
}

/* ---- Python float repr --------------------------------------------------------------- */

void dse__py_float_repr(double f, char *buf, size_t size) {
        if (isnan(f)) {
                snprintf(buf, size, "nan");
                return;
        }
        if (isinf(f)) {
                snprintf(buf, size, f < 0 ? "-inf" : "inf");
                return;
        }
        char e[40];
        int prec;
        for (prec = 1; prec <= 17; prec++) {
                snprintf(e, sizeof e, "%.*e", prec - 1, f);
                if (strtod(e, NULL) == f)
                        break;
        }
        /* e = [-]d[.ddd]e[+-]XX: split into sign, digits and decimal exponent. */
        const char *p = e;
        int neg = *p == '-';
        if (neg)
                p++;
        char digits[24];
        int nd = 0;
        for (; *p && *p != 'e'; p++)
                if (*p >= '0' && *p <= '9')
                        digits[nd++] = *p;
        int exp10 = atoi(p + 1);
        while (nd > 1 && digits[nd - 1] == '0')
                nd--;
        digits[nd] = '\0';
        char out[64];
        size_t o = 0;
        if (neg)
                out[o++] = '-';
        if (exp10 >= -4 && exp10 < 16) {
                if (exp10 < 0) {
                        out[o++] = '0';
                        out[o++] = '.';
                        for (int i = 0; i < -exp10 - 1; i++)
                                out[o++] = '0';
                        for (int i = 0; i < nd; i++)
                                out[o++] = digits[i];
                } else {
                        for (int i = 0; i <= exp10; i++)
                                out[o++] = i < nd ? digits[i] : '0';
                        out[o++] = '.';
                        if (nd > exp10 + 1)
                                for (int i = exp10 + 1; i < nd; i++)
                                        out[o++] = digits[i];
                        else
                                out[o++] = '0';
                }
                out[o] = '\0';
        } else {
                out[o++] = digits[0];
                if (nd > 1) {
                        out[o++] = '.';
                        for (int i = 1; i < nd; i++)
                                out[o++] = digits[i];
                }
                snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        }
        snprintf(buf, size, "%s", out);
}

/* ---- JSON out (json.dumps) ----------------------------------------------------------- */

#define DUMP_MAX_DEPTH 200

static void json_string(struct jbuf *b, const char *s, size_t n) {
        dse__jbuf_putc(b, '"');
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                switch (c) {
                case '"': dse__jbuf_put(b, "\\\"", 2); break;
                case '\\': dse__jbuf_put(b, "\\\\", 2); break;
                case '\n': dse__jbuf_put(b, "\\n", 2); break;
                case '\r': dse__jbuf_put(b, "\\r", 2); break;
                case '\t': dse__jbuf_put(b, "\\t", 2); break;
                case '\b': dse__jbuf_put(b, "\\b", 2); break;
                case '\f': dse__jbuf_put(b, "\\f", 2); break;
                default:
                        if (c < 0x20)
                                dse__jbuf_printf(b, "\\u%04x", c);
                        else
                                dse__jbuf_putc(b, (char)c);
                }
        }
        dse__jbuf_putc(b, '"');
}

static void json_newline(struct jbuf *b, int indent, int level) {
        dse__jbuf_putc(b, '\n');
        for (int i = 0; i < indent * level; i++)
                dse__jbuf_putc(b, ' ');
}

static int cmp_keys(const void *x, const void *y) {
        const struct jkv *a = x, *b = y;
        size_t n = a->key->u.str.n < b->key->u.str.n ? a->key->u.str.n : b->key->u.str.n;
        int c = memcmp(a->key->u.str.s, b->key->u.str.s, n);
        if (c)
                return c;
        return a->key->u.str.n < b->key->u.str.n ? -1 : a->key->u.str.n > b->key->u.str.n;
}

static int json_dump(struct jbuf *b, const struct jv *v, int indent, int sort_keys, int level,
                     struct dse_diag *reterr) {
        char num[64];
        if (level > DUMP_MAX_DEPTH)
                return dse__fail(reterr, -EINVAL, "tojson: value nested too deep (circular?)");
        switch (v->t) {
        case JT_NONE:
                dse__jbuf_put(b, "null", 4);
                return 0;
        case JT_BOOL:
                dse__jbuf_put(b, v->u.b ? "true" : "false", v->u.b ? 4 : 5);
                return 0;
        case JT_INT:
                dse__jbuf_printf(b, "%lld", (long long)v->u.i);
                return 0;
        case JT_FLOAT:
                if (isnan(v->u.f))
                        dse__jbuf_put(b, "NaN", 3);
                else if (isinf(v->u.f))
                        dse__jbuf_printf(b, "%s", v->u.f < 0 ? "-Infinity" : "Infinity");
                else {
                        dse__py_float_repr(v->u.f, num, sizeof num);
                        dse__jbuf_printf(b, "%s", num);
                }
                return 0;
        case JT_STR:
                json_string(b, v->u.str.s, v->u.str.n);
                return 0;
        case JT_LIST:
        case JT_TUPLE:
                if (v->u.list.n == 0) {
                        dse__jbuf_put(b, "[]", 2);
                        return 0;
                }
                dse__jbuf_putc(b, '[');
                for (size_t i = 0; i < v->u.list.n; i++) {
                        if (i)
                                dse__jbuf_put(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
                        if (indent >= 0)
                                json_newline(b, indent, level + 1);
                        int r = json_dump(b, v->u.list.items[i], indent, sort_keys, level + 1, reterr);
                        if (r < 0)
                                return r;
                }
                if (indent >= 0)
                        json_newline(b, indent, level);
                dse__jbuf_putc(b, ']');
                return 0;
        case JT_DICT: {
                if (v->u.dict.n == 0) {
                        dse__jbuf_put(b, "{}", 2);
                        return 0;
                }
                const struct jkv *kv = v->u.dict.kv;
                struct jkv *sorted = NULL;
                for (size_t i = 0; i < v->u.dict.n; i++)
                        if (kv[i].key->t != JT_STR)
                                return dse__fail(reterr, -EINVAL, "tojson: dict key is not a string");
                if (sort_keys) {
                        sorted = dse__jalloc(b->a, v->u.dict.n * sizeof *sorted);
                        if (!sorted)
                                return -ENOMEM;
                        memcpy(sorted, kv, v->u.dict.n * sizeof *sorted);
                        qsort(sorted, v->u.dict.n, sizeof *sorted, cmp_keys);
                        kv = sorted;
                }
                dse__jbuf_putc(b, '{');
                for (size_t i = 0; i < v->u.dict.n; i++) {
                        if (i)
                                dse__jbuf_put(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
                        if (indent >= 0)
                                json_newline(b, indent, level + 1);
                        json_string(b, kv[i].key->u.str.s, kv[i].key->u.str.n);
                        dse__jbuf_put(b, ": ", 2);
                        int r = json_dump(b, kv[i].val, indent, sort_keys, level + 1, reterr);
                        if (r < 0)
                                return r;
                }
                if (indent >= 0)
                        json_newline(b, indent, level);
                dse__jbuf_putc(b, '}');
                return 0;
        }
        case JT_UNDEF:
                return dse__fail(reterr, -EINVAL, "tojson: value is undefined");
        default:
                return dse__fail(reterr, -EINVAL, "tojson: value is not JSON serializable");
        }
}

int dse__json_dump(struct jbuf *b, const struct jv *v, int indent, int sort_keys, struct dse_diag *reterr) {
        int r = json_dump(b, v, indent, sort_keys, 0, reterr);
        if (r == 0 && b->oom)
                r = -ENOMEM;
        return r;
}

/* ---- Python str() and repr() --------------------------------------------------------- */

/* Python's str.isprintable() for one code point: not in categories Cc Cf Cs Co Cn Zl Zp Zs,
 * except the ASCII space. */
static int py_printable(uint32_t cp) {
        if (cp == ' ')
                return 1;
        switch (utf8proc_category((utf8proc_int32_t)cp)) {
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO:
        case UTF8PROC_CATEGORY_CN:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
        case UTF8PROC_CATEGORY_ZS:
                return 0;
        default:
                return 1;
        }
}

static void repr_string(struct jbuf *b, const char *s, size_t n) {
        char quote = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
        dse__jbuf_putc(b, quote);
        size_t i = 0;
        while (i < n) {
                uint32_t cp;
                int len = dse__utf8_decode(s + i, n - i, &cp);
                if (len < 0)
                        len = 1;
                if (cp == (uint32_t)quote || cp == '\\') {
                        dse__jbuf_putc(b, '\\');
                        dse__jbuf_putc(b, (char)cp);
                } else if (cp == '\n') {
                        dse__jbuf_put(b, "\\n", 2);
                } else if (cp == '\r') {
                        dse__jbuf_put(b, "\\r", 2);
                } else if (cp == '\t') {
                        dse__jbuf_put(b, "\\t", 2);
                } else if (!py_printable(cp)) {
                        if (cp < 0x100)
                                dse__jbuf_printf(b, "\\x%02x", cp);
                        else if (cp < 0x10000)
                                dse__jbuf_printf(b, "\\u%04x", cp);
                        else
                                dse__jbuf_printf(b, "\\U%08x", cp);
                } else {
                        dse__jbuf_put(b, s + i, (size_t)len);
                }
                i += (size_t)len;
        }
        dse__jbuf_putc(b, quote);
}

static int repr_into(struct jbuf *b, const struct jv *v, int level, struct dse_diag *reterr) {
        char num[64];
        if (level > DUMP_MAX_DEPTH)
                return dse__fail(reterr, -EINVAL, "value nested too deep to print (circular?)");
        switch (v->t) {
        case JT_UNDEF:
                return 0;
        case JT_NONE:
                dse__jbuf_put(b, "None", 4);
                return 0;
        case JT_BOOL:
                dse__jbuf_put(b, v->u.b ? "True" : "False", v->u.b ? 4 : 5);
                return 0;
        case JT_INT:
                dse__jbuf_printf(b, "%lld", (long long)v->u.i);
                return 0;
        case JT_FLOAT:
                dse__py_float_repr(v->u.f, num, sizeof num);
                dse__jbuf_printf(b, "%s", num);
                return 0;
        case JT_STR:
                repr_string(b, v->u.str.s, v->u.str.n);
                return 0;
        case JT_LIST:
        case JT_TUPLE:
                dse__jbuf_putc(b, v->t == JT_LIST ? '[' : '(');
                for (size_t i = 0; i < v->u.list.n; i++) {
                        if (i)
                                dse__jbuf_put(b, ", ", 2);
                        int r = repr_into(b, v->u.list.items[i], level + 1, reterr);
                        if (r < 0)
                                return r;
                }
                if (v->t == JT_TUPLE && v->u.list.n == 1)
                        dse__jbuf_putc(b, ',');
                dse__jbuf_putc(b, v->t == JT_LIST ? ']' : ')');
                return 0;
        case JT_DICT:
                dse__jbuf_putc(b, '{');
                for (size_t i = 0; i < v->u.dict.n; i++) {
                        if (i)
                                dse__jbuf_put(b, ", ", 2);
                        int r = repr_into(b, v->u.dict.kv[i].key, level + 1, reterr);
                        if (r < 0)
                                return r;
                        dse__jbuf_put(b, ": ", 2);
                        r = repr_into(b, v->u.dict.kv[i].val, level + 1, reterr);
                        if (r < 0)
                                return r;
                }
                dse__jbuf_putc(b, '}');
                return 0;
        case JT_NAMESPACE:
                dse__jbuf_put(b, "<Namespace ", 11);
                for (size_t i = 0; i < v->u.dict.n; i++) {
                        if (i)
                                dse__jbuf_put(b, ", ", 2);
                        dse__jbuf_put(b, v->u.dict.kv[i].key->u.str.s, v->u.dict.kv[i].key->u.str.n);
                        dse__jbuf_putc(b, '=');
                        int r = repr_into(b, v->u.dict.kv[i].val, level + 1, reterr);
                        if (r < 0)
                                return r;
                }
                dse__jbuf_putc(b, '>');
                return 0;
        default:
                return dse__fail(reterr, -EOPNOTSUPP, "cannot print a macro or function" JINJA_WAY_OUT);
        }
}

int dse__jv_repr_into(struct jbuf *b, const struct jv *v, struct dse_diag *reterr) {
        int r = repr_into(b, v, 0, reterr);
        return r == 0 && b->oom ? -ENOMEM : r;
}

int dse__jv_str_into(struct jbuf *b, const struct jv *v, struct dse_diag *reterr) {
        if (v->t == JT_STR) {
                dse__jbuf_put(b, v->u.str.s, v->u.str.n);
                return b->oom ? -ENOMEM : 0;
        }
        return dse__jv_repr_into(b, v, reterr);
}
