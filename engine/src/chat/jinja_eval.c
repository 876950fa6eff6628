/* Evaluator of the chat-template interpreter: walks the AST with Jinja2's semantics
 * (default Undefined, Python truthiness and operators, for-loop scopes and `loop`,
 * namespace(), macros) and writes the output. Bounded: a render stops with -E2BIG after
 * too many steps, too deep a macro recursion or too much output. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "internal.h"
#include "jinja.h"

#define EVAL_MAX_STEPS 5000000
#define EVAL_MAX_DEPTH 100
#define EVAL_MAX_RANGE 100000

enum jfunc {
        /* globals */
        FN_RAISE_EXCEPTION, FN_NAMESPACE, FN_RANGE, FN_DICT, FN_STRFTIME_NOW,
        /* str methods */
        FN_STARTSWITH, FN_ENDSWITH, FN_STRIP, FN_LSTRIP, FN_RSTRIP, FN_SPLIT, FN_UPPER, FN_LOWER,
        FN_REPLACE, FN_TITLE, FN_CAPITALIZE, FN_FIND, FN_JOIN,
        /* dict methods */
        FN_GET, FN_ITEMS, FN_KEYS, FN_VALUES,
        FN_COUNT_,
};

static const char *const fn_names[FN_COUNT_] = {
        "raise_exception", "namespace", "range", "dict", "strftime_now",
        "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "upper", "lower",
        "replace", "title", "capitalize", "find", "join",
        "get", "items", "keys", "values",
};

struct jframe {
        struct jframe *parent;
        struct jv *vars; /* JT_DICT */
};

struct jctx {
        struct jarena *a;
        struct jbuf *out;
        struct dse_diag *reterr;
        int err;
        long steps;
        int depth;
        struct jframe *root;
};

enum { EX_OK = 0, EX_BREAK = 1, EX_CONTINUE = 2 };

/* Arguments of a call, evaluated. */
struct jargs {
        struct jv **pos;
        size_t n_pos;
        const char **names;
        struct jv **kw;
        size_t n_kw;
};

__attribute__((format(printf, 4, 5))) static struct jv *fail(struct jctx *c, const struct jnode *n, int err,
                                                             const char *fmt, ...) {
        if (!c->err) {
                char msg[400];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(msg, sizeof msg, fmt, ap);
                va_end(ap);
                c->err = dse__fail(c->reterr, err, "chat template line %d: %s%s", n ? n->line : 0, msg,
                                   err == -EOPNOTSUPP ? JINJA_WAY_OUT : "");
        }
        return NULL;
}

static struct jv *oom(struct jctx *c) {
        if (!c->err && c->a->over_limit)
                c->err = dse__fail(c->reterr, -E2BIG, "chat template: the render exceeded its memory bound (%zu MiB)",
                                   c->a->limit_bytes >> 20);
        else if (!c->err)
                c->err = dse__fail(c->reterr, -ENOMEM, "chat template: out of memory");
        return NULL;
}

/* An error a value helper returned (its message already in reterr); NULL. */
static struct jv *failed(struct jctx *c, int r) {
        if (r == -ENOMEM)
                return oom(c);
        if (!c->err)
                c->err = r;
        return NULL;
}

static const char *type_name(const struct jv *v) {
        static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list",
                                            "tuple", "dict", "Namespace", "macro", "function"};
        return names[v->t];
}

/* ---- small constructors -------------------------------------------------------------- */

static struct jv *mk_list(struct jctx *c, enum jtype t, size_t n) {
        struct jv *v = dse__jv_new(c->a, t);
        if (!v)
                return oom(c);
        v->u.list.items = dse__jalloc(c->a, (n ? n : 1) * sizeof *v->u.list.items);
        if (!v->u.list.items)
                return oom(c);
        v->u.list.n = n;
        return v;
}

static struct jv *mk_str(struct jctx *c, const char *s, size_t n) {
        struct jv *v = dse__jv_str(c->a, s, n);
        return v ? v : oom(c);
}

static struct jv *mk_bool(struct jctx *c, int b) {
        struct jv *v = dse__jv_bool(c->a, b);
        return v ? v : oom(c);
}

static struct jv *mk_int(struct jctx *c, int64_t i) {
        struct jv *v = dse__jv_int(c->a, i);
        return v ? v : oom(c);
}

static struct jv *mk_undef(struct jctx *c, const char *name) {
        struct jv *v = dse__jv_undef(c->a, name);
        return v ? v : oom(c);
}

static struct jv *mk_fn(struct jctx *c, int id, struct jv *self) {
        struct jv *v = dse__jv_new(c->a, JT_FUNC);
        if (!v)
                return oom(c);
        v->u.fn.id = id;
        v->u.fn.self = self;
        return v;
}

static struct jv *key_str(struct jctx *c, const char *s) {
        return mk_str(c, s, strlen(s));
}

/* str(v) as a new string value (Undefined: ""). */
static struct jv *to_str(struct jctx *c, const struct jnode *n, struct jv *v) {
        if (v->t == JT_STR)
                return v;
        struct jbuf b;
        dse__jbuf_init(&b, c->a);
        int r = dse__jv_str_into(&b, v, c->reterr);
        if (r < 0)
                return failed(c, r);
        return mk_str(c, b.p, b.n);
}

/* ---- scopes -------------------------------------------------------------------------- */

static struct jframe *frame_new(struct jctx *c, struct jframe *parent) {
        struct jframe *f = dse__jalloc(c->a, sizeof *f);
        if (!f || !(f->vars = dse__jv_new(c->a, JT_DICT)))
                return oom(c), NULL;
        f->parent = parent;
        return f;
}

static int frame_set(struct jctx *c, struct jframe *f, const char *name, struct jv *val) {
        struct jv *k = key_str(c, name);
        if (!k || dse__jv_dict_set(c->a, f->vars, k, val) < 0)
                return oom(c), c->err;
        return 0;
}

static struct jv *lookup(struct jctx *c, struct jframe *f, const char *name, size_t len) {
        for (; f; f = f->parent) {
                struct jv *v = dse__jv_dict_get(f->vars, name, len);
                if (v)
                        return v;
        }
        for (int i = FN_RAISE_EXCEPTION; i <= FN_STRFTIME_NOW; i++)
                if (strlen(fn_names[i]) == len && memcmp(fn_names[i], name, len) == 0)
                        return mk_fn(c, i, NULL);
        return mk_undef(c, name);
}

/* ---- attribute and item access ------------------------------------------------------- */

static int method_id(const struct jv *obj, const char *name, size_t len) {
        int lo, hi;
        if (obj->t == JT_STR)
                lo = FN_STARTSWITH, hi = FN_JOIN;
        else if (obj->t == JT_DICT)
                lo = FN_GET, hi = FN_VALUES;
        else
                return -1;
        for (int i = lo; i <= hi; i++)
                if (strlen(fn_names[i]) == len && memcmp(fn_names[i], name, len) == 0)
                        return i;
        return -1;
}

static struct jv *undefined_error(struct jctx *c, const struct jnode *n, const struct jv *u, const char *what) {
        if (u->u.undef.name)
                return fail(c, n, -EINVAL, "'%s' is undefined (%s)", u->u.undef.name, what);
        return fail(c, n, -EINVAL, "undefined value (%s)", what);
}

/* Python methods of str, dict and list that the interpreter lacks: Jinja would find them
 * (attributes come before items), so they must not quietly become Undefined. */
static int python_method(const struct jv *obj, const char *name, size_t len) {
        static const char str_methods[] =
                " casefold center count encode expandtabs format format_map index isalnum isalpha isascii"
                " isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper ljust"
                " maketrans partition removeprefix removesuffix rfind rindex rjust rpartition rsplit splitlines"
                " swapcase translate zfill ";
        static const char dict_methods[] = " clear copy fromkeys pop popitem setdefault update ";
        static const char list_methods[] = " append clear copy count extend index insert pop remove reverse sort ";
        const char *set = obj->t == JT_STR ? str_methods : obj->t == JT_DICT ? dict_methods
                        : obj->t == JT_LIST ? list_methods : NULL;
        if (!set || len == 0 || len > 32)
                return 0;
        char key[36];
        snprintf(key, sizeof key, " %.*s ", (int)len, name);
        return strstr(set, key) != NULL;
}

static struct jv *get_attr(struct jctx *c, const struct jnode *n, struct jv *obj, const char *name, size_t len) {
        if (obj->t == JT_UNDEF)
                return undefined_error(c, n, obj, "attribute access");
        int m = method_id(obj, name, len);
        if (m >= 0)
                return mk_fn(c, m, obj);
        if (python_method(obj, name, len))
                return fail(c, n, -EOPNOTSUPP, "%s.%.*s() is not supported", type_name(obj), (int)len, name);
        if (obj->t == JT_DICT || obj->t == JT_NAMESPACE) {
                struct jv *v = dse__jv_dict_get(obj, name, len);
                if (v)
                        return v;
        }
        return mk_undef(c, NULL);
}

static int as_index(const struct jv *v, int64_t *ret) {
        if (v->t == JT_INT) {
                *ret = v->u.i;
                return 1;
        }
        if (v->t == JT_BOOL) {
                *ret = v->u.b;
                return 1;
        }
        return 0;
}

/* Byte offset of code point number cp_index in s (cp_index <= count). */
static size_t cp_offset(const char *s, size_t n, size_t cp_index) {
        size_t i = 0, k = 0;
        while (i < n && k < cp_index) {
                i++;
                while (i < n && dse__utf8_is_cont((unsigned char)s[i]))
                        i++;
                k++;
        }
        return i;
}

static struct jv *get_item(struct jctx *c, const struct jnode *n, struct jv *obj, struct jv *key) {
        int64_t idx;
        if (obj->t == JT_UNDEF)
                return undefined_error(c, n, obj, "subscript");
        if ((obj->t == JT_LIST || obj->t == JT_TUPLE) && as_index(key, &idx)) {
                int64_t len = (int64_t)obj->u.list.n;
                if (idx < 0)
                        idx += len;
                if (idx < 0 || idx >= len)
                        return mk_undef(c, NULL);
                return obj->u.list.items[idx];
        }
        if (obj->t == JT_STR && as_index(key, &idx)) {
                int64_t len = (int64_t)dse__utf8_count(obj->u.str.s, obj->u.str.n);
                if (idx < 0)
                        idx += len;
                if (idx < 0 || idx >= len)
                        return mk_undef(c, NULL);
                size_t b = cp_offset(obj->u.str.s, obj->u.str.n, (size_t)idx);
                size_t e = cp_offset(obj->u.str.s, obj->u.str.n, (size_t)idx + 1);
                return mk_str(c, obj->u.str.s + b, e - b);
        }
        if (obj->t == JT_DICT || obj->t == JT_NAMESPACE) {
                for (size_t i = 0; i < obj->u.dict.n; i++)
                        if (dse__jv_equal(obj->u.dict.kv[i].key, key))
                                return obj->u.dict.kv[i].val;
        }
        if (key->t == JT_STR)
                return get_attr(c, n, obj, key->u.str.s, key->u.str.n);
        return mk_undef(c, NULL);
}

/* Python slice indices for a sequence of length len. */
static int slice_indices(struct jctx *c, const struct jnode *n, struct jv **parts, int64_t len, int64_t *start,
                         int64_t *stop, int64_t *step) {
        int64_t v[3];
        int has[3];
        for (int i = 0; i < 3; i++) {
                has[i] = parts[i] && parts[i]->t != JT_NONE;
                if (has[i] && !as_index(parts[i], &v[i]))
                        return fail(c, n, -EINVAL, "slice indices must be integers"), -EINVAL;
        }
        *step = has[2] ? v[2] : 1;
        if (*step == 0)
                return fail(c, n, -EINVAL, "slice step cannot be zero"), -EINVAL;
        if (*step == INT64_MIN)
                *step = -INT64_MAX;
        for (int i = 0; i < 2; i++) {
                int64_t *out = i == 0 ? start : stop;
                if (!has[i]) {
                        *out = *step > 0 ? (i == 0 ? 0 : len) : (i == 0 ? len - 1 : -1);
                        continue;
                }
                int64_t x = v[i];
                if (x < 0) {
                        x = x < -len ? (*step > 0 ? 0 : -1) : x + len;
                } else if (x >= len) {
                        x = *step > 0 ? len : len - 1;
                }
                *out = x;
        }
        return 0;
}

static struct jv *do_slice(struct jctx *c, const struct jnode *n, struct jv *obj, struct jv **parts) {
        int64_t start, stop, step;
        if (obj->t == JT_UNDEF)
                return undefined_error(c, n, obj, "slice");
        if (obj->t == JT_LIST || obj->t == JT_TUPLE) {
                if (slice_indices(c, n, parts, (int64_t)obj->u.list.n, &start, &stop, &step) < 0)
                        return NULL;
                struct jv *out = mk_list(c, obj->t, obj->u.list.n);
                if (!out)
                        return NULL;
                size_t k = 0;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                        out->u.list.items[k++] = obj->u.list.items[i];
                        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
                                break;
                }
                out->u.list.n = k;
                return out;
        }
        if (obj->t == JT_STR) {
                size_t n_cp = dse__utf8_count(obj->u.str.s, obj->u.str.n);
                if (slice_indices(c, n, parts, (int64_t)n_cp, &start, &stop, &step) < 0)
                        return NULL;
                size_t *offs = dse__jalloc(c->a, (n_cp + 1) * sizeof *offs);
                if (!offs)
                        return oom(c);
                for (size_t i = 0, k = 0; i <= obj->u.str.n && k <= n_cp; i++)
                        if (i == obj->u.str.n || !dse__utf8_is_cont((unsigned char)obj->u.str.s[i]))
                                offs[k++] = i;
                struct jbuf b;
                dse__jbuf_init(&b, c->a);
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                        dse__jbuf_put(&b, obj->u.str.s + offs[i], offs[i + 1] - offs[i]);
                        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
                                break;
                }
                if (b.oom)
                        return oom(c);
                return mk_str(c, b.p, b.n);
        }
        return fail(c, n, -EINVAL, "'%s' object cannot be sliced", type_name(obj));
}

/* ---- iteration ----------------------------------------------------------------------- */

/* The items a for loop or a filter walks: list/tuple items, dict keys, string characters.
 * Undefined iterates as empty. */
static struct jv *iter_items(struct jctx *c, const struct jnode *n, struct jv *v) {
        switch (v->t) {
        case JT_LIST:
        case JT_TUPLE:
                return v;
        case JT_UNDEF:
                return mk_list(c, JT_LIST, 0);
        case JT_DICT: {
                struct jv *out = mk_list(c, JT_LIST, v->u.dict.n);
                if (out)
                        for (size_t i = 0; i < v->u.dict.n; i++)
                                out->u.list.items[i] = v->u.dict.kv[i].key;
                return out;
        }
        case JT_STR: {
                size_t n_cp = dse__utf8_count(v->u.str.s, v->u.str.n), k = 0;
                struct jv *out = mk_list(c, JT_LIST, n_cp);
                for (size_t i = 0; out && i < v->u.str.n && k < n_cp;) {
                        size_t e = i + 1;
                        while (e < v->u.str.n && dse__utf8_is_cont((unsigned char)v->u.str.s[e]))
                                e++;
                        if (!(out->u.list.items[k++] = mk_str(c, v->u.str.s + i, e - i)))
                                return NULL;
                        i = e;
                }
                return out;
        }
        default:
                return fail(c, n, -EINVAL, "'%s' object is not iterable", type_name(v));
        }
}

/* ---- operators ----------------------------------------------------------------------- */

static int is_num(const struct jv *v) {
        return v->t == JT_INT || v->t == JT_FLOAT || v->t == JT_BOOL;
}

static double num_f(const struct jv *v) {
        return v->t == JT_FLOAT ? v->u.f : v->t == JT_INT ? (double)v->u.i : (double)v->u.b;
}

static int64_t num_i(const struct jv *v) {
        return v->t == JT_INT ? v->u.i : v->u.b;
}

static struct jv *concat_lists(struct jctx *c, struct jv *x, struct jv *y) {
        struct jv *out = mk_list(c, x->t, x->u.list.n + y->u.list.n);
        if (!out)
                return NULL;
        if (x->u.list.n)
                memcpy(out->u.list.items, x->u.list.items, x->u.list.n * sizeof *out->u.list.items);
        if (y->u.list.n)
                memcpy(out->u.list.items + x->u.list.n, y->u.list.items, y->u.list.n * sizeof *out->u.list.items);
        return out;
}

static struct jv *repeat_str(struct jctx *c, const struct jnode *n, struct jv *s, int64_t times) {
        if (times <= 0 || s->u.str.n == 0)
                return mk_str(c, "", 0);
        if ((uint64_t)times > (64u << 20) / s->u.str.n)
                return fail(c, n, -E2BIG, "string repetition too large");
        struct jbuf b;
        dse__jbuf_init(&b, c->a);
        for (int64_t i = 0; i < times; i++)
                dse__jbuf_put(&b, s->u.str.s, s->u.str.n);
        return b.oom ? oom(c) : mk_str(c, b.p, b.n);
}

static struct jv *binop(struct jctx *c, const struct jnode *n, int op, struct jv *x, struct jv *y) {
        if (op == '~') {
                struct jv *sx = to_str(c, n, x), *sy = sx ? to_str(c, n, y) : NULL;
                if (!sy)
                        return NULL;
                struct jbuf b;
                dse__jbuf_init(&b, c->a);
                dse__jbuf_put(&b, sx->u.str.s, sx->u.str.n);
                dse__jbuf_put(&b, sy->u.str.s, sy->u.str.n);
                return b.oom ? oom(c) : mk_str(c, b.p, b.n);
        }
        if (x->t == JT_UNDEF)
                return undefined_error(c, n, x, "operand");
        if (y->t == JT_UNDEF)
                return undefined_error(c, n, y, "operand");
        if (op == '+' && x->t == JT_STR && y->t == JT_STR) {
                struct jbuf b;
                dse__jbuf_init(&b, c->a);
                dse__jbuf_put(&b, x->u.str.s, x->u.str.n);
                dse__jbuf_put(&b, y->u.str.s, y->u.str.n);
                return b.oom ? oom(c) : mk_str(c, b.p, b.n);
        }
        if (op == '+' && (x->t == JT_LIST || x->t == JT_TUPLE) && x->t == y->t)
                return concat_lists(c, x, y);
        if (op == '*' && x->t == JT_STR && (y->t == JT_INT || y->t == JT_BOOL))
                return repeat_str(c, n, x, num_i(y));
        if (op == '*' && y->t == JT_STR && (x->t == JT_INT || x->t == JT_BOOL))
                return repeat_str(c, n, y, num_i(x));
        if (op == '%' && x->t == JT_STR)
                return fail(c, n, -EOPNOTSUPP, "printf-style string formatting ('...' %% x) is not supported");
        if (!is_num(x) || !is_num(y))
                return fail(c, n, -EINVAL, "unsupported operand types for '%c': '%s' and '%s'", op == 'F' ? '/' : op == 'P' ? '*' : op,
                            type_name(x), type_name(y));
        int ints = x->t != JT_FLOAT && y->t != JT_FLOAT;
        if (ints && op != '/' && op != 'P') {
                int64_t a = num_i(x), b = num_i(y), r = 0;
                int overflow = 0;
                switch (op) {
                case '+': overflow = __builtin_add_overflow(a, b, &r); break;
                case '-': overflow = __builtin_sub_overflow(a, b, &r); break;
                case '*': overflow = __builtin_mul_overflow(a, b, &r); break;
                case 'F':
                case '%':
                        if (b == 0)
                                return fail(c, n, -EINVAL, "integer division or modulo by zero");
                        if (a == INT64_MIN && b == -1) {
                                overflow = 1;
                                break;
                        }
                        r = op == 'F' ? a / b : a % b;
                        if (op == 'F' && (a % b != 0) && ((a < 0) != (b < 0)))
                                r--;
                        if (op == '%' && r != 0 && ((r < 0) != (b < 0)))
                                r += b;
                        break;
                }
                if (overflow)
                        return fail(c, n, -EOPNOTSUPP, "integer arithmetic overflows 64 bits");
                return mk_int(c, r);
        }
        double a = num_f(x), b = num_f(y), r;
        switch (op) {
        case '+': r = a + b; break;
        case '-': r = a - b; break;
        case '*': r = a * b; break;
        case '/':
                if (b == 0)
                        return fail(c, n, -EINVAL, "division by zero");
                r = a / b;
                break;
        case 'F':
        case '%':
                if (b == 0)
                        return fail(c, n, -EINVAL, "float division or modulo by zero");
                r = op == 'F' ? floor(a / b) : a - b * floor(a / b);
                break;
        default: /* 'P' */
                if (ints && num_i(y) >= 0) {
                        int64_t base = num_i(x), e = num_i(y), acc = 1;
                        for (int64_t i = 0; i < e; i++)
                                if (__builtin_mul_overflow(acc, base, &acc) || (base != 0 && base != 1 && base != -1 && i > 64))
                                        return fail(c, n, -EOPNOTSUPP, "integer power overflows 64 bits");
                                else if (base == 0 || base == 1 || (base == -1 && i > 1))
                                        break;
                        if (base == -1)
                                acc = (e % 2) ? -1 : 1;
                        if (base == 0)
                                acc = e == 0 ? 1 : 0;
                        return mk_int(c, acc);
                }
                r = pow(a, b);
        }
        struct jv *v = dse__jv_float(c->a, r);
        return v ? v : oom(c);
}

static int compare_order(struct jctx *c, const struct jnode *n, struct jv *x, struct jv *y, int *ret) {
        if (is_num(x) && is_num(y)) {
                if (x->t != JT_FLOAT && y->t != JT_FLOAT)
                        *ret = num_i(x) < num_i(y) ? -1 : num_i(x) > num_i(y);
                else
                        *ret = num_f(x) < num_f(y) ? -1 : num_f(x) > num_f(y) ? 1 : 0;
                return 0;
        }
        if (x->t == JT_STR && y->t == JT_STR) {
                size_t m = x->u.str.n < y->u.str.n ? x->u.str.n : y->u.str.n;
                int r = memcmp(x->u.str.s, y->u.str.s, m);
                *ret = r ? (r < 0 ? -1 : 1) : x->u.str.n < y->u.str.n ? -1 : x->u.str.n > y->u.str.n;
                return 0;
        }
        fail(c, n, -EINVAL, "'<' not supported between '%s' and '%s'", type_name(x), type_name(y));
        return c->err;
}

static int contains(struct jctx *c, const struct jnode *n, struct jv *item, struct jv *container, int *ret) {
        switch (container->t) {
        case JT_STR:
                if (item->t != JT_STR) {
                        fail(c, n, -EINVAL, "'in <string>' requires a string on the left, not '%s'", type_name(item));
                        return c->err;
                }
                *ret = item->u.str.n == 0 || memmem(container->u.str.s, container->u.str.n, item->u.str.s, item->u.str.n);
                return 0;
        case JT_LIST:
        case JT_TUPLE:
                *ret = 0;
                for (size_t i = 0; i < container->u.list.n && !*ret; i++)
                        *ret = dse__jv_equal(item, container->u.list.items[i]);
                return 0;
        case JT_DICT:
                *ret = 0;
                for (size_t i = 0; i < container->u.dict.n && !*ret; i++)
                        *ret = dse__jv_equal(item, container->u.dict.kv[i].key);
                return 0;
        case JT_UNDEF:
                *ret = 0;
                return 0;
        default:
                fail(c, n, -EINVAL, "argument of type '%s' is not iterable", type_name(container));
                return c->err;
        }
}

static int compare(struct jctx *c, const struct jnode *n, int op, struct jv *x, struct jv *y, int *ret) {
        int o = 0;
        switch (op) {
        case JC_EQ: *ret = dse__jv_equal(x, y); return 0;
        case JC_NE: *ret = !dse__jv_equal(x, y); return 0;
        case JC_IN: return contains(c, n, x, y, ret);
        case JC_NOTIN:
                if (contains(c, n, x, y, ret) < 0)
                        return c->err;
                *ret = !*ret;
                return 0;
        }
        if (compare_order(c, n, x, y, &o) < 0)
                return c->err;
        *ret = op == JC_LT ? o < 0 : op == JC_LE ? o <= 0 : op == JC_GT ? o > 0 : o >= 0;
        return 0;
}

/* ---- strings ------------------------------------------------------------------------- */

static int cp_in(uint32_t cp, const struct jv *chars) {
        for (size_t i = 0; i < chars->u.str.n;) {
                uint32_t x;
                int len = dse__utf8_decode(chars->u.str.s + i, chars->u.str.n - i, &x);
                if (x == cp)
                        return 1;
                i += len > 0 ? (size_t)len : 1;
        }
        return 0;
}

/* str.strip/lstrip/rstrip(chars): which: 1 left, 2 right, 3 both. */
static struct jv *strip(struct jctx *c, struct jv *s, const struct jv *chars, int which) {
        const char *p = s->u.str.s;
        size_t b = 0, e = s->u.str.n;
        while ((which & 1) && b < e) {
                uint32_t cp;
                int len = dse__utf8_decode(p + b, e - b, &cp);
                if (len < 0 || !(chars ? cp_in(cp, chars) : dse__py_isspace(cp)))
                        break;
                b += (size_t)len;
        }
        while ((which & 2) && e > b) {
                size_t k = dse__utf8_char_before(p, b, e);
                uint32_t cp;
                int len = dse__utf8_decode(p + k, e - k, &cp);
                if (len < 0 || !(chars ? cp_in(cp, chars) : dse__py_isspace(cp)))
                        break;
                e = k;
        }
        return mk_str(c, p + b, e - b);
}

/* The unconditional one-to-many mappings of Unicode's SpecialCasing.txt that Python's
 * str.upper()/lower()/title() apply and utf8proc's one-to-one mappings lack. */
static const struct {
        uint32_t cp;
        const char *upper, *title, *lower;
} special_casing[] = {
        {0x00DF, "SS", "Ss", NULL},                    /* ß */
        {0x0130, NULL, NULL, "i\xCC\x87"},             /* İ -> i + combining dot */
        {0x0149, "\xCA\xBCN", "\xCA\xBCN", NULL},      /* ŉ */
        {0x01F0, "J\xCC\x8C", "J\xCC\x8C", NULL},      /* ǰ */
        {0xFB00, "FF", "Ff", NULL},
        {0xFB01, "FI", "Fi", NULL},
        {0xFB02, "FL", "Fl", NULL},
        {0xFB03, "FFI", "Ffi", NULL},
        {0xFB04, "FFL", "Ffl", NULL},
        {0xFB05, "ST", "St", NULL},
        {0xFB06, "ST", "St", NULL},
};

/* Case mapping by code point (utf8proc plus special_casing). mode: 'u' str.upper, 'l'
 * str.lower, 't' str.title (titlecase after an uncased character), 'c' str.capitalize,
 * 'j' Jinja's title filter (upper after '-', whitespace or an opening bracket). */
static struct jv *case_map(struct jctx *c, struct jv *s, int mode) {
        struct jbuf b;
        dse__jbuf_init(&b, c->a);
        int prev_cased = 0, word_start = 1;
        for (size_t i = 0; i < s->u.str.n;) {
                uint32_t cp;
                int len = dse__utf8_decode(s->u.str.s + i, s->u.str.n - i, &cp);
                if (len < 0)
                        len = 1;
                char kind; /* 'u' upper, 't' title, 'l' lower */
                switch (mode) {
                case 'u': kind = 'u'; break;
                case 'l': kind = 'l'; break;
                case 't': kind = prev_cased ? 'l' : 't'; break;
                case 'c': kind = i == 0 ? 't' : 'l'; break;
                default: kind = word_start ? 'u' : 'l'; break;
                }
                const char *special = NULL;
                for (size_t k = 0; k < sizeof special_casing / sizeof special_casing[0]; k++)
                        if (special_casing[k].cp == cp)
                                special = kind == 'u' ? special_casing[k].upper : kind == 't' ? special_casing[k].title
                                                                                         : special_casing[k].lower;
                if (special) {
                        dse__jbuf_put(&b, special, strlen(special));
                } else {
                        utf8proc_int32_t x = (utf8proc_int32_t)cp;
                        uint32_t out = (uint32_t)(kind == 'u' ? utf8proc_toupper(x) : kind == 't' ? utf8proc_totitle(x)
                                                                                             : utf8proc_tolower(x));
                        char u[4];
                        dse__jbuf_put(&b, u, dse__utf8_encode(out, u));
                }
                const utf8proc_property_t *prop = utf8proc_get_property((utf8proc_int32_t)cp);
                prev_cased = prop->category == UTF8PROC_CATEGORY_LU || prop->category == UTF8PROC_CATEGORY_LL ||
                             prop->category == UTF8PROC_CATEGORY_LT;
                word_start = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || dse__py_isspace(cp);
                i += (size_t)len;
        }
        return b.oom ? oom(c) : mk_str(c, b.p ? b.p : "", b.n);
}

static struct jv *str_replace(struct jctx *c, struct jv *s, struct jv *old, struct jv *new, int64_t count) {
        struct jbuf b;
        dse__jbuf_init(&b, c->a);
        size_t i = 0;
        int64_t done = 0;
        if (old->u.str.n == 0) { /* Python inserts new between every character */
                for (; i <= s->u.str.n; done++) {
                        if (count >= 0 && done >= count) {
                                dse__jbuf_put(&b, s->u.str.s + i, s->u.str.n - i);
                                break;
                        }
                        dse__jbuf_put(&b, new->u.str.s, new->u.str.n);
                        if (i == s->u.str.n)
                                break;
                        size_t e = i + 1;
                        while (e < s->u.str.n && dse__utf8_is_cont((unsigned char)s->u.str.s[e]))
                                e++;
                        dse__jbuf_put(&b, s->u.str.s + i, e - i);
                        i = e;
                }
                return b.oom ? oom(c) : mk_str(c, b.p, b.n);
        }
        while (i < s->u.str.n) {
                const char *hit = (count < 0 || done < count)
                                          ? memmem(s->u.str.s + i, s->u.str.n - i, old->u.str.s, old->u.str.n)
                                          : NULL;
                if (!hit) {
                        dse__jbuf_put(&b, s->u.str.s + i, s->u.str.n - i);
                        break;
                }
                dse__jbuf_put(&b, s->u.str.s + i, (size_t)(hit - (s->u.str.s + i)));
                dse__jbuf_put(&b, new->u.str.s, new->u.str.n);
                i = (size_t)(hit - s->u.str.s) + old->u.str.n;
                done++;
        }
        return b.oom ? oom(c) : mk_str(c, b.p ? b.p : "", b.n);
}

static int push_item(struct jctx *c, struct jv *list, size_t *cap, struct jv *item) {
        if (list->u.list.n == *cap) {
                size_t ncap = *cap ? *cap * 2 : 8;
                struct jv **grown = dse__jalloc(c->a, ncap * sizeof *grown);
                if (!grown)
                        return oom(c), c->err;
                if (list->u.list.n)
                        memcpy(grown, list->u.list.items, list->u.list.n * sizeof *grown);
                list->u.list.items = grown;
                *cap = ncap;
        }
        list->u.list.items[list->u.list.n++] = item;
        return 0;
}

static struct jv *str_split(struct jctx *c, const struct jnode *n, struct jv *s, struct jv *sep, int64_t maxsplit) {
        struct jv *out = mk_list(c, JT_LIST, 0);
        size_t cap = 1;
        if (!out)
                return NULL;
        const char *p = s->u.str.s;
        size_t len = s->u.str.n, i = 0;
        if (!sep || sep->t == JT_NONE) {
                for (;;) {
                        while (i < len) { /* skip whitespace */
                                uint32_t cp;
                                int l = dse__utf8_decode(p + i, len - i, &cp);
                                if (l < 0 || !dse__py_isspace(cp))
                                        break;
                                i += (size_t)l;
                        }
                        if (i >= len)
                                break;
                        size_t start = i;
                        if (maxsplit >= 0 && (int64_t)out->u.list.n >= maxsplit) {
                                size_t end = len; /* the rest, without trailing whitespace */
                                struct jv *tmp = mk_str(c, p + start, end - start), *rest = tmp ? strip(c, tmp, NULL, 2) : NULL;
                                if (!rest || push_item(c, out, &cap, rest) < 0)
                                        return NULL;
                                break;
                        }
                        while (i < len) {
                                uint32_t cp;
                                int l = dse__utf8_decode(p + i, len - i, &cp);
                                if (l > 0 && dse__py_isspace(cp))
                                        break;
                                i += l > 0 ? (size_t)l : 1;
                        }
                        struct jv *piece = mk_str(c, p + start, i - start);
                        if (!piece || push_item(c, out, &cap, piece) < 0)
                                return NULL;
                }
                return out;
        }
        if (sep->t != JT_STR)
                return fail(c, n, -EINVAL, "split() separator must be a string");
        if (sep->u.str.n == 0)
                return fail(c, n, -EINVAL, "split(): empty separator");
        for (;;) {
                const char *hit = (maxsplit < 0 || (int64_t)out->u.list.n < maxsplit)
                                          ? memmem(p + i, len - i, sep->u.str.s, sep->u.str.n)
                                          : NULL;
                size_t end = hit ? (size_t)(hit - p) : len;
                struct jv *piece = mk_str(c, p + i, end - i);
                if (!piece || push_item(c, out, &cap, piece) < 0)
                        return NULL;
                if (!hit)
                        break;
                i = end + sep->u.str.n;
        }
        return out;
}

/* ---- calls --------------------------------------------------------------------------- */

static struct jv *arg(const struct jargs *a, size_t pos, const char *name) {
        if (pos < a->n_pos)
                return a->pos[pos];
        for (size_t i = 0; i < a->n_kw; i++)
                if (strcmp(a->names[i], name) == 0)
                        return a->kw[i];
        return NULL;
}

static struct jv *need_str(struct jctx *c, const struct jnode *n, struct jv *v, const char *what) {
        if (!v || v->t != JT_STR)
                return fail(c, n, -EINVAL, "%s must be a string, not '%s'", what, v ? type_name(v) : "missing");
        return v;
}

static int opt_int(struct jctx *c, const struct jnode *n, struct jv *v, int64_t dflt, int64_t *ret) {
        if (!v || v->t == JT_NONE) {
                *ret = dflt;
                return 0;
        }
        if (!as_index(v, ret)) {
                fail(c, n, -EINVAL, "expected an integer argument, not '%s'", type_name(v));
                return c->err;
        }
        return 0;
}

static struct jv *items_of(struct jctx *c, struct jv *dict) {
        struct jv *out = mk_list(c, JT_LIST, dict->u.dict.n);
        for (size_t i = 0; out && i < dict->u.dict.n; i++) {
                struct jv *pair = mk_list(c, JT_TUPLE, 2);
                if (!pair)
                        return NULL;
                pair->u.list.items[0] = dict->u.dict.kv[i].key;
                pair->u.list.items[1] = dict->u.dict.kv[i].val;
                out->u.list.items[i] = pair;
        }
        return out;
}

static struct jv *kwargs_dict(struct jctx *c, const struct jargs *a, enum jtype t) {
        struct jv *d = dse__jv_new(c->a, t);
        if (!d)
                return oom(c);
        for (size_t i = 0; i < a->n_pos; i++) { /* namespace(d) / dict(d): start from a mapping */
                if (a->pos[i]->t != JT_DICT)
                        return fail(c, NULL, -EINVAL, "namespace()/dict() takes a mapping or keyword arguments");
                for (size_t k = 0; k < a->pos[i]->u.dict.n; k++)
                        if (dse__jv_dict_set(c->a, d, a->pos[i]->u.dict.kv[k].key, a->pos[i]->u.dict.kv[k].val) < 0)
                                return oom(c);
        }
        for (size_t i = 0; i < a->n_kw; i++) {
                struct jv *k = key_str(c, a->names[i]);
                if (!k || dse__jv_dict_set(c->a, d, k, a->kw[i]) < 0)
                        return oom(c);
        }
        return d;
}

static struct jv *call_fn(struct jctx *c, const struct jnode *n, struct jv *fn, const struct jargs *a) {
        struct jv *self = fn->u.fn.self, *x, *y;
        int64_t i1 = -1;
        switch (fn->u.fn.id) {
        case FN_RAISE_EXCEPTION: {
                x = arg(a, 0, "message");
                struct jv *msg = x ? to_str(c, n, x) : NULL;
                return fail(c, n, -EINVAL, "template error: %.*s", msg ? (int)msg->u.str.n : 0, msg ? msg->u.str.s : "");
        }
        case FN_NAMESPACE:
                return kwargs_dict(c, a, JT_NAMESPACE);
        case FN_DICT:
                return kwargs_dict(c, a, JT_DICT);
        case FN_RANGE: {
                int64_t start = 0, stop = 0, step = 1;
                if (a->n_pos == 1) {
                        if (opt_int(c, n, a->pos[0], 0, &stop) < 0)
                                return NULL;
                } else if (a->n_pos == 2 || a->n_pos == 3) {
                        if (opt_int(c, n, a->pos[0], 0, &start) < 0 || opt_int(c, n, a->pos[1], 0, &stop) < 0 ||
                            (a->n_pos == 3 && opt_int(c, n, a->pos[2], 1, &step) < 0))
                                return NULL;
                } else {
                        return fail(c, n, -EINVAL, "range() takes 1 to 3 arguments");
                }
                if (step == 0)
                        return fail(c, n, -EINVAL, "range() step must not be zero");
                double count = ceil(((double)stop - (double)start) / (double)step);
                if (count > EVAL_MAX_RANGE)
                        return fail(c, n, -E2BIG, "range() of more than %d items", EVAL_MAX_RANGE);
                size_t len = count > 0 ? (size_t)count : 0;
                struct jv *out = mk_list(c, JT_LIST, len);
                for (size_t i = 0; out && i < len; i++)
                        if (!(out->u.list.items[i] = mk_int(c, start + (int64_t)i * step)))
                                return NULL;
                return out;
        }
        case FN_STRFTIME_NOW: {
                x = need_str(c, n, arg(a, 0, "format"), "strftime_now() format");
                if (!x)
                        return NULL;
                char fmt[256], out[512];
                snprintf(fmt, sizeof fmt, "%.*s", (int)x->u.str.n, x->u.str.s);
                time_t now = time(NULL);
                struct tm tm;
                localtime_r(&now, &tm);
                size_t len = strftime(out, sizeof out, fmt, &tm);
                return mk_str(c, out, len);
        }
        case FN_STARTSWITH:
        case FN_ENDSWITH: {
                x = arg(a, 0, "prefix");
                if (!x)
                        return fail(c, n, -EINVAL, "%s() takes one argument", fn_names[fn->u.fn.id]);
                struct jv **cands = &x;
                size_t n_cands = 1;
                if (x->t == JT_TUPLE || x->t == JT_LIST) {
                        cands = x->u.list.items;
                        n_cands = x->u.list.n;
                }
                for (size_t i = 0; i < n_cands; i++) {
                        struct jv *s = need_str(c, n, cands[i], "startswith()/endswith() argument");
                        if (!s)
                                return NULL;
                        if (s->u.str.n > self->u.str.n)
                                continue;
                        const char *at = fn->u.fn.id == FN_STARTSWITH ? self->u.str.s : self->u.str.s + self->u.str.n - s->u.str.n;
                        if (memcmp(at, s->u.str.s, s->u.str.n) == 0)
                                return mk_bool(c, 1);
                }
                return mk_bool(c, 0);
        }
        case FN_STRIP:
        case FN_LSTRIP:
        case FN_RSTRIP:
                x = arg(a, 0, "chars");
                if (x && x->t != JT_NONE && !need_str(c, n, x, "strip() chars"))
                        return NULL;
                return strip(c, self, x && x->t == JT_STR ? x : NULL,
                             fn->u.fn.id == FN_STRIP ? 3 : fn->u.fn.id == FN_LSTRIP ? 1 : 2);
        case FN_SPLIT:
                if (opt_int(c, n, arg(a, 1, "maxsplit"), -1, &i1) < 0)
                        return NULL;
                return str_split(c, n, self, arg(a, 0, "sep"), i1);
        case FN_UPPER: return case_map(c, self, 'u');
        case FN_LOWER: return case_map(c, self, 'l');
        case FN_TITLE: return case_map(c, self, 't');
        case FN_CAPITALIZE: return case_map(c, self, 'c');
        case FN_REPLACE:
                x = need_str(c, n, arg(a, 0, "old"), "replace() old");
                y = x ? need_str(c, n, arg(a, 1, "new"), "replace() new") : NULL;
                if (!y || opt_int(c, n, arg(a, 2, "count"), -1, &i1) < 0)
                        return NULL;
                return str_replace(c, self, x, y, i1);
        case FN_FIND: {
                x = need_str(c, n, arg(a, 0, "sub"), "find() argument");
                if (!x)
                        return NULL;
                const char *hit = x->u.str.n ? memmem(self->u.str.s, self->u.str.n, x->u.str.s, x->u.str.n) : self->u.str.s;
                return mk_int(c, hit ? (int64_t)dse__utf8_count(self->u.str.s, (size_t)(hit - self->u.str.s)) : -1);
        }
        case FN_JOIN: {
                x = arg(a, 0, "iterable");
                struct jv *items = x ? iter_items(c, n, x) : NULL;
                if (!items)
                        return x ? NULL : fail(c, n, -EINVAL, "join() takes one argument");
                struct jbuf b;
                dse__jbuf_init(&b, c->a);
                for (size_t i = 0; i < items->u.list.n; i++) {
                        if (!need_str(c, n, items->u.list.items[i], "join() item"))
                                return NULL;
                        if (i)
                                dse__jbuf_put(&b, self->u.str.s, self->u.str.n);
                        dse__jbuf_put(&b, items->u.list.items[i]->u.str.s, items->u.list.items[i]->u.str.n);
                }
                return b.oom ? oom(c) : mk_str(c, b.p ? b.p : "", b.n);
        }
        case FN_GET:
                x = arg(a, 0, "key");
                if (!x)
                        return fail(c, n, -EINVAL, "get() takes a key");
                for (size_t i = 0; i < self->u.dict.n; i++)
                        if (dse__jv_equal(self->u.dict.kv[i].key, x))
                                return self->u.dict.kv[i].val;
                y = arg(a, 1, "default");
                if (y)
                        return y;
                y = dse__jv_new(c->a, JT_NONE);
                return y ? y : oom(c);
        case FN_ITEMS:
                return items_of(c, self);
        case FN_KEYS:
        case FN_VALUES: {
                struct jv *out = mk_list(c, JT_LIST, self->u.dict.n);
                for (size_t i = 0; out && i < self->u.dict.n; i++)
                        out->u.list.items[i] = fn->u.fn.id == FN_KEYS ? self->u.dict.kv[i].key : self->u.dict.kv[i].val;
                return out;
        }
        }
        return fail(c, n, -EOPNOTSUPP, "function is not supported");
}

/* ---- evaluation ---------------------------------------------------------------------- */

static struct jv *eval(struct jctx *c, struct jframe *f, const struct jnode *n);
static int exec_body(struct jctx *c, struct jframe *f, const struct jnode *body);
static struct jv *apply_test(struct jctx *c, struct jframe *f, const struct jnode *n, int id, struct jv *v,
                             const struct jargs *a);
static struct jv *apply_filter(struct jctx *c, struct jframe *f, const struct jnode *n, int id, struct jv *v,
                               const struct jargs *a);

static int eval_args(struct jctx *c, struct jframe *f, const struct jnode *n, struct jargs *a) {
        a->n_pos = n->n_kids;
        a->n_kw = n->n_kids2;
        a->names = n->names;
        a->pos = dse__jalloc(c->a, (n->n_kids + 1) * sizeof *a->pos);
        a->kw = dse__jalloc(c->a, (n->n_kids2 + 1) * sizeof *a->kw);
        if (!a->pos || !a->kw)
                return oom(c), c->err;
        for (size_t i = 0; i < n->n_kids; i++)
                if (!(a->pos[i] = eval(c, f, n->kids[i])))
                        return c->err;
        for (size_t i = 0; i < n->n_kids2; i++)
                if (!(a->kw[i] = eval(c, f, n->kids2[i])))
                        return c->err;
        return 0;
}

/* Renders body into a fresh buffer and returns it as a string value. */
static struct jv *capture(struct jctx *c, struct jframe *f, const struct jnode *body) {
        struct jbuf buf, *saved = c->out;
        dse__jbuf_init(&buf, c->a);
        c->out = &buf;
        int r = exec_body(c, f, body);
        c->out = saved;
        if (r < 0)
                return NULL;
        if (buf.oom)
                return oom(c);
        return mk_str(c, buf.p ? buf.p : "", buf.n);
}

static struct jv *call_macro(struct jctx *c, const struct jnode *n, struct jv *m, const struct jargs *a) {
        const struct jnode *def = m->u.macro.def;
        if (c->depth >= EVAL_MAX_DEPTH)
                return fail(c, n, -E2BIG, "macro recursion deeper than %d", EVAL_MAX_DEPTH);
        if (a->n_pos > def->n_names)
                return fail(c, n, -EINVAL, "macro '%s' takes %zu arguments, %zu given", def->str, def->n_names, a->n_pos);
        struct jframe *frame = frame_new(c, m->u.macro.closure);
        if (!frame)
                return NULL;
        for (size_t k = 0; k < a->n_kw; k++) {
                size_t i;
                for (i = 0; i < def->n_names; i++)
                        if (strcmp(def->names[i], a->names[k]) == 0)
                                break;
                if (i == def->n_names)
                        return fail(c, n, -EINVAL, "macro '%s' has no parameter '%s'", def->str, a->names[k]);
        }
        for (size_t i = 0; i < def->n_names; i++) {
                struct jv *v = arg(a, i, def->names[i]);
                if (!v && def->kids[i] && !(v = eval(c, frame, def->kids[i])))
                        return NULL;
                if (!v && !(v = mk_undef(c, def->names[i])))
                        return NULL;
                if (frame_set(c, frame, def->names[i], v) < 0)
                        return NULL;
        }
        c->depth++;
        struct jv *out = capture(c, frame, def->c);
        c->depth--;
        return out;
}

static struct jv *eval(struct jctx *c, struct jframe *f, const struct jnode *n) {
        struct jv *x, *y;
        struct jargs args;
        if (++c->steps > EVAL_MAX_STEPS)
                return fail(c, n, -E2BIG, "render took more than %d steps", EVAL_MAX_STEPS);
        switch (n->kind) {
        case JN_LITERAL:
                return n->val;
        case JN_NAME:
                return lookup(c, f, n->str, n->len);
        case JN_GETATTR:
                return (x = eval(c, f, n->a)) ? get_attr(c, n, x, n->str, n->len) : NULL;
        case JN_GETITEM:
                if (!(x = eval(c, f, n->a)) || !(y = eval(c, f, n->b)))
                        return NULL;
                return get_item(c, n, x, y);
        case JN_SLICE: {
                struct jv *parts[3] = {NULL, NULL, NULL};
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                for (int i = 0; i < 3; i++)
                        if (n->kids[i] && !(parts[i] = eval(c, f, n->kids[i])))
                                return NULL;
                return do_slice(c, n, x, parts);
        }
        case JN_CALL:
                if (!(x = eval(c, f, n->a)) || eval_args(c, f, n, &args) < 0)
                        return NULL;
                if (x->t == JT_MACRO)
                        return call_macro(c, n, x, &args);
                if (x->t == JT_FUNC)
                        return call_fn(c, n, x, &args);
                if (x->t == JT_UNDEF)
                        return fail(c, n, -EOPNOTSUPP, "call of an undefined function%s%s%s",
                                    x->u.undef.name ? " '" : "", x->u.undef.name ? x->u.undef.name : "",
                                    x->u.undef.name ? "'" : "");
                return fail(c, n, -EINVAL, "'%s' object is not callable", type_name(x));
        case JN_FILTER:
                if (!(x = eval(c, f, n->a)) || eval_args(c, f, n, &args) < 0)
                        return NULL;
                return apply_filter(c, f, n, n->op, x, &args);
        case JN_TEST:
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                if (eval_args(c, f, n, &args) < 0 || !(y = apply_test(c, f, n, n->op, x, &args)))
                        return NULL;
                return n->neg ? mk_bool(c, !y->u.b) : y;
        case JN_NEG:
        case JN_POS:
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                if (!is_num(x))
                        return fail(c, n, -EINVAL, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', type_name(x));
                if (n->kind == JN_POS)
                        return x->t == JT_BOOL ? mk_int(c, x->u.b) : x;
                if (x->t == JT_FLOAT) {
                        y = dse__jv_float(c->a, -x->u.f);
                        return y ? y : oom(c);
                }
                if (num_i(x) == INT64_MIN)
                        return fail(c, n, -EOPNOTSUPP, "integer negation overflows 64 bits");
                return mk_int(c, -num_i(x));
        case JN_NOT:
                return (x = eval(c, f, n->a)) ? mk_bool(c, !dse__jv_truthy(x)) : NULL;
        case JN_AND:
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                return dse__jv_truthy(x) ? eval(c, f, n->b) : x;
        case JN_OR:
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                return dse__jv_truthy(x) ? x : eval(c, f, n->b);
        case JN_BINOP:
                if (!(x = eval(c, f, n->a)) || !(y = eval(c, f, n->b)))
                        return NULL;
                return binop(c, n, n->op, x, y);
        case JN_COMPARE: {
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                for (size_t i = 0; i < n->n_kids; i++) {
                        int r;
                        if (!(y = eval(c, f, n->kids[i])) || compare(c, n, n->ops[i], x, y, &r) < 0)
                                return NULL;
                        if (!r)
                                return mk_bool(c, 0);
                        x = y;
                }
                return mk_bool(c, 1);
        }
        case JN_COND:
                if (!(x = eval(c, f, n->a)))
                        return NULL;
                if (dse__jv_truthy(x))
                        return eval(c, f, n->b);
                return n->c ? eval(c, f, n->c) : mk_undef(c, NULL);
        case JN_LIST:
        case JN_TUPLE: {
                struct jv *out = mk_list(c, n->kind == JN_LIST ? JT_LIST : JT_TUPLE, n->n_kids);
                for (size_t i = 0; out && i < n->n_kids; i++)
                        if (!(out->u.list.items[i] = eval(c, f, n->kids[i])))
                                return NULL;
                return out;
        }
        case JN_DICT: {
                struct jv *out = dse__jv_new(c->a, JT_DICT);
                if (!out)
                        return oom(c);
                for (size_t i = 0; i < n->n_kids; i++) {
                        if (!(x = eval(c, f, n->kids[i])) || !(y = eval(c, f, n->kids2[i])))
                                return NULL;
                        if (x->t != JT_STR && x->t != JT_INT && x->t != JT_BOOL && x->t != JT_NONE && x->t != JT_FLOAT)
                                return fail(c, n, -EINVAL, "unhashable dict key of type '%s'", type_name(x));
                        if (dse__jv_dict_set(c->a, out, x, y) < 0)
                                return oom(c);
                }
                return out;
        }
        default:
                return fail(c, n, -EINVAL, "statement used as an expression");
        }
}

/* ---- filters ------------------------------------------------------------------------- */

static struct jv *seq_len(struct jctx *c, const struct jnode *n, struct jv *v) {
        switch (v->t) {
        case JT_STR: return mk_int(c, (int64_t)dse__utf8_count(v->u.str.s, v->u.str.n));
        case JT_LIST:
        case JT_TUPLE: return mk_int(c, (int64_t)v->u.list.n);
        case JT_DICT: return mk_int(c, (int64_t)v->u.dict.n);
        case JT_UNDEF: return mk_int(c, 0);
        default: return fail(c, n, -EINVAL, "object of type '%s' has no len()", type_name(v));
        }
}

/* An item's attribute by a dotted path ("function.name"), as Jinja's attrgetter does. */
static struct jv *attr_path(struct jctx *c, const struct jnode *n, struct jv *item, struct jv *path) {
        const char *p = path->u.str.s, *end = p + path->u.str.n;
        while (item) {
                const char *dot = memchr(p, '.', (size_t)(end - p));
                size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
                struct jv *key = NULL;
                char *stop;
                long long idx = len ? strtoll(p, &stop, 10) : 0;
                if (len && stop == p + len) /* numeric parts index lists, as in Jinja */
                        key = mk_int(c, idx);
                else
                        key = mk_str(c, p, len);
                if (!key)
                        return NULL;
                item = get_item(c, n, item, key);
                if (!dot)
                        break;
                p = dot + 1;
        }
        return item;
}

/* select/reject (by_attr 0: test the items) and selectattr/rejectattr (by_attr 1: test
 * an attribute of each): keep items that pass the test (truthiness when none is named). */
static struct jv *select_items(struct jctx *c, struct jframe *f, const struct jnode *n, struct jv *v,
                               const struct jargs *a, int reject, int by_attr) {
        struct jv *items = iter_items(c, n, v), *attr = by_attr && a->n_pos > 0 ? a->pos[0] : NULL;
        if (!items)
                return NULL;
        if (by_attr && !need_str(c, n, attr, "selectattr()/rejectattr() attribute"))
                return NULL;
        size_t t = by_attr ? 1 : 0;
        int test = -1;
        if (a->n_pos > t) {
                if (!need_str(c, n, a->pos[t], "select()/reject() test name"))
                        return NULL;
                test = dse__jinja_test_lookup(a->pos[t]->u.str.s, a->pos[t]->u.str.n);
                if (test < 0)
                        return fail(c, n, -EOPNOTSUPP, "test '%s' is not supported", a->pos[t]->u.str.s);
        }
        struct jargs targs = {.pos = a->n_pos > t + 1 ? a->pos + t + 1 : NULL,
                              .n_pos = a->n_pos > t + 1 ? a->n_pos - t - 1 : 0};
        struct jv *out = mk_list(c, JT_LIST, 0);
        size_t cap = 1;
        for (size_t i = 0; out && i < items->u.list.n; i++) {
                struct jv *item = items->u.list.items[i], *val = attr ? attr_path(c, n, item, attr) : item, *ok;
                if (!val)
                        return NULL;
                if (test >= 0) {
                        if (!(ok = apply_test(c, f, n, test, val, &targs)))
                                return NULL;
                } else if (!(ok = mk_bool(c, dse__jv_truthy(val)))) {
                        return NULL;
                }
                if (ok->u.b != reject && push_item(c, out, &cap, item) < 0)
                        return NULL;
        }
        return out;
}

/* sort(reverse=false, case_sensitive=false, attribute=none): a stable merge sort, as
 * Python's sorted(); strings compare lowercased unless case_sensitive. */
static int sort_cmp(struct jctx *c, const struct jnode *n, struct jv *x, struct jv *y, int *ret) {
        if (++c->steps > EVAL_MAX_STEPS)
                return fail(c, n, -E2BIG, "render took more than %d steps", EVAL_MAX_STEPS), c->err;
        return compare_order(c, n, x, y, ret);
}

static struct jv *sort_items(struct jctx *c, const struct jnode *n, struct jv *v, const struct jargs *a) {
        struct jv *reverse = arg(a, 0, "reverse"), *case_sensitive = arg(a, 1, "case_sensitive"),
                  *attr = arg(a, 2, "attribute"), *items = iter_items(c, n, v);
        if (!items)
                return NULL;
        if (attr && attr->t != JT_NONE && !need_str(c, n, attr, "sort() attribute"))
                return NULL;
        size_t len = items->u.list.n;
        struct jv **keys = dse__jalloc(c->a, (len + 1) * sizeof *keys), **tmp_keys = dse__jalloc(c->a, (len + 1) * sizeof *keys);
        struct jv *out = mk_list(c, JT_LIST, len), *tmp = mk_list(c, JT_LIST, len);
        if (!keys || !tmp_keys || !out || !tmp)
                return oom(c);
        for (size_t i = 0; i < len; i++) {
                struct jv *k = items->u.list.items[i];
                if (attr && attr->t == JT_STR && !(k = attr_path(c, n, k, attr)))
                        return NULL;
                if (k->t == JT_STR && !(case_sensitive && dse__jv_truthy(case_sensitive)) && !(k = case_map(c, k, 'l')))
                        return NULL;
                keys[i] = k;
                out->u.list.items[i] = items->u.list.items[i];
        }
        int desc = reverse && dse__jv_truthy(reverse);
        for (size_t width = 1; width < len; width *= 2) {
                for (size_t lo = 0; lo < len; lo += 2 * width) {
                        size_t mid = lo + width < len ? lo + width : len, hi = lo + 2 * width < len ? lo + 2 * width : len;
                        size_t i = lo, j = mid, k = lo;
                        while (i < mid || j < hi) {
                                int take_right = 0, o;
                                if (i < mid && j < hi) {
                                        if (sort_cmp(c, n, keys[j], keys[i], &o) < 0)
                                                return NULL;
                                        take_right = desc ? o > 0 : o < 0; /* stable: ties keep the left one */
                                } else {
                                        take_right = i >= mid;
                                }
                                size_t from = take_right ? j++ : i++;
                                tmp_keys[k] = keys[from];
                                tmp->u.list.items[k++] = out->u.list.items[from];
                        }
                }
                struct jv **swap_keys = keys;
                keys = tmp_keys;
                tmp_keys = swap_keys;
                struct jv *swap = out;
                out = tmp;
                tmp = swap;
        }
        return out;
}

static struct jv *apply_filter(struct jctx *c, struct jframe *f, const struct jnode *n, int id, struct jv *v,
                               const struct jargs *a) {
        struct jv *x, *items;
        int64_t i1 = -1;
        switch (id) {
        case JF_ABS:
                if (v->t == JT_FLOAT) {
                        x = dse__jv_float(c->a, fabs(v->u.f));
                        return x ? x : oom(c);
                }
                if (v->t == JT_INT || v->t == JT_BOOL) {
                        if (num_i(v) == INT64_MIN)
                                return fail(c, n, -EOPNOTSUPP, "abs() overflows 64 bits");
                        return mk_int(c, num_i(v) < 0 ? -num_i(v) : num_i(v));
                }
                return fail(c, n, -EINVAL, "bad operand type for abs(): '%s'", type_name(v));
        case JF_CAPITALIZE:
                return (x = to_str(c, n, v)) ? case_map(c, x, 'c') : NULL;
        case JF_COUNT:
        case JF_LENGTH:
                return seq_len(c, n, v);
        case JF_DEFAULT: {
                struct jv *dflt = arg(a, 0, "default_value"), *boolean = arg(a, 1, "boolean");
                int use = v->t == JT_UNDEF || (boolean && dse__jv_truthy(boolean) && !dse__jv_truthy(v));
                if (!use)
                        return v;
                return dflt ? dflt : mk_str(c, "", 0);
        }
        case JF_FIRST:
        case JF_LAST:
                if (!(items = iter_items(c, n, v)))
                        return NULL;
                if (!items->u.list.n)
                        return mk_undef(c, NULL);
                return items->u.list.items[id == JF_FIRST ? 0 : items->u.list.n - 1];
        case JF_FLOAT:
        case JF_INT: {
                double d = 0;
                int ok = 1;
                if (is_num(v)) {
                        d = num_f(v);
                        if (id == JF_INT && v->t != JT_FLOAT)
                                return mk_int(c, num_i(v));
                } else if (v->t == JT_STR) {
                        char tmp[64], *end;
                        snprintf(tmp, sizeof tmp, "%.*s", (int)(v->u.str.n < 63 ? v->u.str.n : 63), v->u.str.s);
                        if (id == JF_INT) {
                                errno = 0;
                                long long ll = strtoll(tmp, &end, 10);
                                while (*end == ' ' || *end == '\t' || *end == '\n')
                                        end++;
                                if (end != tmp && *end == '\0' && errno == 0)
                                        return mk_int(c, ll);
                        }
                        d = strtod(tmp, &end);
                        while (*end == ' ' || *end == '\t' || *end == '\n')
                                end++;
                        ok = end != tmp && *end == '\0';
                } else {
                        ok = 0;
                }
                x = arg(a, 0, "default");
                if (!ok)
                        return x ? x : id == JF_INT ? mk_int(c, 0) : (x = dse__jv_float(c->a, 0)) ? x : oom(c);
                if (id == JF_INT) {
                        if (!(d > -9.2e18 && d < 9.2e18))
                                return x ? x : mk_int(c, 0);
                        return mk_int(c, (int64_t)d);
                }
                x = dse__jv_float(c->a, d);
                return x ? x : oom(c);
        }
        case JF_ITEMS:
                if (v->t == JT_UNDEF)
                        return mk_list(c, JT_LIST, 0);
                if (v->t != JT_DICT)
                        return fail(c, n, -EINVAL, "items filter needs a mapping, not '%s'", type_name(v));
                return items_of(c, v);
        case JF_JOIN: {
                struct jv *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
                if (sep && !need_str(c, n, sep, "join() separator"))
                        return NULL;
                if (!(items = iter_items(c, n, v)))
                        return NULL;
                struct jbuf b;
                dse__jbuf_init(&b, c->a);
                for (size_t i = 0; i < items->u.list.n; i++) {
                        struct jv *item = items->u.list.items[i];
                        if (attr && !(item = attr->t == JT_STR ? attr_path(c, n, item, attr) : get_item(c, n, item, attr)))
                                return NULL;
                        if (!(item = to_str(c, n, item)))
                                return NULL;
                        if (i && sep)
                                dse__jbuf_put(&b, sep->u.str.s, sep->u.str.n);
                        dse__jbuf_put(&b, item->u.str.s, item->u.str.n);
                }
                return b.oom ? oom(c) : mk_str(c, b.p ? b.p : "", b.n);
        }
        case JF_LIST:
                if (!(items = iter_items(c, n, v)))
                        return NULL;
                if (items->t == JT_LIST && items != v)
                        return items;
                if (!(x = mk_list(c, JT_LIST, items->u.list.n)))
                        return NULL;
                if (items->u.list.n)
                        memcpy(x->u.list.items, items->u.list.items, items->u.list.n * sizeof *x->u.list.items);
                return x;
        case JF_LOWER:
        case JF_UPPER:
        case JF_TITLE:
                if (!(x = to_str(c, n, v)))
                        return NULL;
                return case_map(c, x, id == JF_LOWER ? 'l' : id == JF_UPPER ? 'u' : 'j');
        case JF_MAP: {
                struct jv *attr = arg(a, 99, "attribute");
                if (!(items = iter_items(c, n, v)) || !(x = mk_list(c, JT_LIST, items->u.list.n)))
                        return NULL;
                if (attr) {
                        struct jv *dflt = arg(a, 99, "default");
                        for (size_t i = 0; i < items->u.list.n; i++) {
                                struct jv *val = attr->t == JT_STR ? attr_path(c, n, items->u.list.items[i], attr)
                                                                   : get_item(c, n, items->u.list.items[i], attr);
                                if (!val)
                                        return NULL;
                                x->u.list.items[i] = val->t == JT_UNDEF && dflt ? dflt : val;
                        }
                        return x;
                }
                if (a->n_pos < 1 || !need_str(c, n, a->pos[0], "map() filter name"))
                        return fail(c, n, -EINVAL, "map() needs a filter name or attribute=");
                int fid = dse__jinja_filter_lookup(a->pos[0]->u.str.s, a->pos[0]->u.str.n);
                if (fid < 0)
                        return fail(c, n, -EOPNOTSUPP, "filter '%s' is not supported", a->pos[0]->u.str.s);
                struct jargs rest = {.pos = a->pos + 1, .n_pos = a->n_pos - 1, .names = a->names, .kw = a->kw, .n_kw = a->n_kw};
                for (size_t i = 0; i < items->u.list.n; i++)
                        if (!(x->u.list.items[i] = apply_filter(c, f, n, fid, items->u.list.items[i], &rest)))
                                return NULL;
                return x;
        }
        case JF_REJECT:
        case JF_SELECT:
                return select_items(c, f, n, v, a, id == JF_REJECT, 0);
        case JF_REJECTATTR:
        case JF_SELECTATTR:
                return select_items(c, f, n, v, a, id == JF_REJECTATTR, 1);
        case JF_SORT:
                return sort_items(c, n, v, a);
        case JF_REPLACE: {
                struct jv *s = to_str(c, n, v), *old = need_str(c, n, arg(a, 0, "old"), "replace() old"),
                          *new = old ? need_str(c, n, arg(a, 1, "new"), "replace() new") : NULL;
                if (!s || !new || opt_int(c, n, arg(a, 2, "count"), -1, &i1) < 0)
                        return NULL;
                return str_replace(c, s, old, new, i1);
        }
        case JF_REVERSE:
                if (v->t == JT_STR) {
                        struct jv *step = mk_int(c, -1), *parts[3] = {NULL, NULL, step};
                        return step ? do_slice(c, n, v, parts) : NULL;
                }
                if (!(items = iter_items(c, n, v)) || !(x = mk_list(c, JT_LIST, items->u.list.n)))
                        return NULL;
                for (size_t i = 0; i < items->u.list.n; i++)
                        x->u.list.items[i] = items->u.list.items[items->u.list.n - 1 - i];
                return x;
        case JF_SAFE:
                return v;
        case JF_STRING:
                return to_str(c, n, v);
        case JF_TOJSON: {
                struct jv *ensure = arg(a, 0, "ensure_ascii"), *indent = arg(a, 1, "indent"),
                          *seps = arg(a, 2, "separators"), *sort = arg(a, 3, "sort_keys");
                int64_t ind = -1;
                if (ensure && dse__jv_truthy(ensure))
                        return fail(c, n, -EOPNOTSUPP, "tojson(ensure_ascii=true) is not supported");
                if (seps && seps->t != JT_NONE)
                        return fail(c, n, -EOPNOTSUPP, "tojson(separators=...) is not supported");
                if (indent && indent->t != JT_NONE && (!as_index(indent, &ind) || ind < 0 || ind > 64))
                        return fail(c, n, -EOPNOTSUPP, "tojson indent must be an integer from 0 to 64");
                struct jbuf b;
                dse__jbuf_init(&b, c->a);
                int r = dse__json_dump(&b, v, (int)ind, sort && dse__jv_truthy(sort), c->reterr);
                if (r < 0)
                        return failed(c, r);
                return mk_str(c, b.p ? b.p : "", b.n);
        }
        case JF_TRIM: {
                struct jv *chars = arg(a, 0, "chars");
                if (chars && chars->t != JT_NONE && !need_str(c, n, chars, "trim() chars"))
                        return NULL;
                if (!(x = to_str(c, n, v)))
                        return NULL;
                return strip(c, x, chars && chars->t == JT_STR ? chars : NULL, 3);
        }
        }
        return fail(c, n, -EOPNOTSUPP, "filter is not supported");
}

/* ---- tests --------------------------------------------------------------------------- */

static struct jv *apply_test(struct jctx *c, struct jframe *f, const struct jnode *n, int id, struct jv *v,
                             const struct jargs *a) {
        struct jv *x = a->n_pos > 0 ? a->pos[0] : NULL;
        int r;
        switch (id) {
        case JS_BOOLEAN: r = v->t == JT_BOOL; break;
        case JS_CALLABLE: r = v->t == JT_MACRO || v->t == JT_FUNC; break;
        case JS_DEFINED: r = v->t != JT_UNDEF; break;
        case JS_UNDEFINED: r = v->t == JT_UNDEF; break;
        case JS_NONE: r = v->t == JT_NONE; break;
        case JS_FALSE: r = v->t == JT_BOOL && !v->u.b; break;
        case JS_TRUE: r = v->t == JT_BOOL && v->u.b; break;
        case JS_FLOAT: r = v->t == JT_FLOAT; break;
        case JS_INTEGER: r = v->t == JT_INT; break;
        case JS_NUMBER: r = is_num(v); break;
        case JS_STRING: r = v->t == JT_STR; break;
        case JS_MAPPING: r = v->t == JT_DICT; break;
        case JS_ITERABLE: r = v->t == JT_STR || v->t == JT_LIST || v->t == JT_TUPLE || v->t == JT_DICT || v->t == JT_UNDEF; break;
        case JS_SEQUENCE: r = v->t == JT_STR || v->t == JT_LIST || v->t == JT_TUPLE || v->t == JT_DICT; break;
        case JS_LOWER:
        case JS_UPPER: {
                if (v->t != JT_STR) {
                        r = 0;
                        break;
                }
                struct jv *m = case_map(c, v, id == JS_LOWER ? 'l' : 'u');
                if (!m)
                        return NULL;
                r = dse__jv_equal(m, v);
                break;
        }
        case JS_ODD:
        case JS_EVEN:
        case JS_DIVISIBLEBY: {
                int64_t d = 2;
                if (v->t != JT_INT && v->t != JT_BOOL)
                        return fail(c, n, -EINVAL, "test '%s' needs an integer", n->str);
                if (id == JS_DIVISIBLEBY && (!x || !as_index(x, &d)))
                        return fail(c, n, -EINVAL, "divisibleby needs an integer argument");
                if (d == 0)
                        return fail(c, n, -EINVAL, "divisibleby(0)");
                int64_t m = d == -1 ? 0 : num_i(v) % d;
                r = id == JS_ODD ? m != 0 : m == 0;
                break;
        }
        case JS_SAMEAS:
                if (!x)
                        return fail(c, n, -EINVAL, "sameas needs an argument");
                r = v == x || (v->t == x->t && (v->t == JT_NONE || (v->t == JT_BOOL && v->u.b == x->u.b)));
                break;
        case JS_EQ:
        case JS_NE:
        case JS_LT:
        case JS_LE:
        case JS_GT:
        case JS_GE:
        case JS_IN: {
                static const int cmp_of[JS_COUNT_] = {[JS_EQ] = JC_EQ, [JS_NE] = JC_NE, [JS_LT] = JC_LT, [JS_LE] = JC_LE,
                                                      [JS_GT] = JC_GT, [JS_GE] = JC_GE, [JS_IN] = JC_IN};
                if (!x)
                        return fail(c, n, -EINVAL, "test '%s' needs an argument", n->str ? n->str : "");
                if (compare(c, n, cmp_of[id], v, x, &r) < 0)
                        return NULL;
                break;
        }
        default:
                return fail(c, n, -EOPNOTSUPP, "test is not supported");
        }
        (void)f;
        return mk_bool(c, r);
}

/* ---- statements ---------------------------------------------------------------------- */

static int emit(struct jctx *c, const struct jnode *n, const char *s, size_t len) {
        dse__jbuf_put(c->out, s, len);
        if (c->out->oom)
                return oom(c), c->err;
        return 0;
}

static int bind_targets(struct jctx *c, struct jframe *f, const struct jnode *n, struct jv *item) {
        if (n->n_names == 1)
                return frame_set(c, f, n->names[0], item);
        if ((item->t != JT_LIST && item->t != JT_TUPLE) || item->u.list.n != n->n_names)
                return fail(c, n, -EINVAL, "cannot unpack '%s' into %zu names", type_name(item), n->n_names), c->err;
        for (size_t i = 0; i < n->n_names; i++)
                if (frame_set(c, f, n->names[i], item->u.list.items[i]) < 0)
                        return c->err;
        return 0;
}

static struct jv *loop_object(struct jctx *c, struct jv *items, size_t i) {
        size_t len = items->u.list.n;
        struct jv *loop = dse__jv_new(c->a, JT_DICT);
        if (!loop)
                return oom(c);
        struct {
                const char *name;
                struct jv *v;
        } fields[] = {
                {"index", mk_int(c, (int64_t)i + 1)},
                {"index0", mk_int(c, (int64_t)i)},
                {"revindex", mk_int(c, (int64_t)(len - i))},
                {"revindex0", mk_int(c, (int64_t)(len - i - 1))},
                {"first", mk_bool(c, i == 0)},
                {"last", mk_bool(c, i + 1 == len)},
                {"length", mk_int(c, (int64_t)len)},
                {"depth", mk_int(c, 1)},
                {"depth0", mk_int(c, 0)},
                {"previtem", i > 0 ? items->u.list.items[i - 1] : mk_undef(c, "loop.previtem")},
                {"nextitem", i + 1 < len ? items->u.list.items[i + 1] : mk_undef(c, "loop.nextitem")},
        };
        for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
                struct jv *key = key_str(c, fields[k].name);
                if (!key || !fields[k].v || dse__jv_dict_set(c->a, loop, key, fields[k].v) < 0)
                        return oom(c);
        }
        return loop;
}

static int exec_for(struct jctx *c, struct jframe *f, const struct jnode *n) {
        struct jv *seq = eval(c, f, n->a), *items;
        if (!seq || !(items = iter_items(c, n, seq)))
                return c->err;
        if (n->b) { /* `for x in xs if cond`: filter first, so loop.length counts what is kept */
                struct jv *kept = mk_list(c, JT_LIST, 0);
                size_t cap = 1;
                if (!kept)
                        return c->err;
                for (size_t i = 0; i < items->u.list.n; i++) {
                        struct jframe *tmp = frame_new(c, f);
                        struct jv *ok;
                        if (!tmp || bind_targets(c, tmp, n, items->u.list.items[i]) < 0 || !(ok = eval(c, tmp, n->b)))
                                return c->err;
                        if (dse__jv_truthy(ok) && push_item(c, kept, &cap, items->u.list.items[i]) < 0)
                                return c->err;
                }
                items = kept;
        }
        for (size_t i = 0; i < items->u.list.n; i++) {
                struct jframe *frame = frame_new(c, f);
                struct jv *loop;
                if (!frame || !(loop = loop_object(c, items, i)) || frame_set(c, frame, "loop", loop) < 0 ||
                    bind_targets(c, frame, n, items->u.list.items[i]) < 0)
                        return c->err;
                int r = exec_body(c, frame, n->c);
                if (r < 0)
                        return r;
                if (r == EX_BREAK)
                        break;
        }
        if (items->u.list.n == 0 && n->d)
                return exec_body(c, f, n->d) < 0 ? c->err : 0;
        return 0;
}

static int exec_stmt(struct jctx *c, struct jframe *f, const struct jnode *n) {
        struct jv *v;
        if (++c->steps > EVAL_MAX_STEPS)
                return fail(c, n, -E2BIG, "render took more than %d steps", EVAL_MAX_STEPS), c->err;
        switch (n->kind) {
        case JN_TEXT:
                return emit(c, n, n->str, n->len);
        case JN_OUTPUT:
                if (!(v = eval(c, f, n->a)) || !(v = to_str(c, n, v)))
                        return c->err;
                return emit(c, n, v->u.str.s, v->u.str.n);
        case JN_IF:
                for (size_t i = 0; i < n->n_kids; i++) {
                        if (!(v = eval(c, f, n->kids[i])))
                                return c->err;
                        if (dse__jv_truthy(v))
                                return exec_body(c, f, n->kids2[i]);
                }
                return n->n_kids2 > n->n_kids ? exec_body(c, f, n->kids2[n->n_kids]) : 0;
        case JN_FOR:
                return exec_for(c, f, n);
        case JN_SET:
                if (!(v = eval(c, f, n->a)))
                        return c->err;
                if (n->str) { /* ns.attr = value */
                        struct jv *ns = lookup(c, f, n->names[0], strlen(n->names[0])), *key;
                        if (!ns)
                                return c->err;
                        if (ns->t != JT_NAMESPACE)
                                return fail(c, n, -EINVAL, "cannot assign attribute on non-namespace object '%s'",
                                            n->names[0]), c->err;
                        if (!(key = mk_str(c, n->str, n->len)) || dse__jv_dict_set(c->a, ns, key, v) < 0)
                                return oom(c), c->err;
                        return 0;
                }
                return bind_targets(c, f, n, v);
        case JN_SET_BLOCK:
                if (!(v = capture(c, f, n->c)))
                        return c->err;
                return frame_set(c, f, n->names[0], v);
        case JN_MACRO:
                if (!(v = dse__jv_new(c->a, JT_MACRO)))
                        return oom(c), c->err;
                v->u.macro.def = n;
                v->u.macro.closure = f;
                return frame_set(c, f, n->str, v);
        case JN_BREAK:
                return EX_BREAK;
        case JN_CONTINUE:
                return EX_CONTINUE;
        case JN_BODY:
                return exec_body(c, f, n);
        default:
                return fail(c, n, -EINVAL, "expression used as a statement"), c->err;
        }
}

static int exec_body(struct jctx *c, struct jframe *f, const struct jnode *body) {
        if (c->depth >= EVAL_MAX_DEPTH * 4)
                return fail(c, body, -E2BIG, "template nesting too deep"), c->err;
        c->depth++;
        int r = 0;
        for (size_t i = 0; i < body->n_kids && r == 0; i++)
                r = exec_stmt(c, f, body->kids[i]);
        c->depth--;
        return r;
}

int dse__jinja_render(struct jarena *a, const struct jnode *root, const struct jinja_vars *vars, char **ret_text,
                      struct dse_diag *reterr) {
        struct jbuf out;
        dse__jbuf_init(&out, a);
        struct jctx c = {.a = a, .out = &out, .reterr = reterr};
        struct jv *none = dse__jv_new(a, JT_NONE), *gen = dse__jv_bool(a, vars->add_generation_prompt);
        if (!(c.root = frame_new(&c, NULL)) || !none || !gen)
                return -ENOMEM;
        if (frame_set(&c, c.root, "messages", vars->messages) < 0 ||
            frame_set(&c, c.root, "tools", vars->tools ? vars->tools : none) < 0 ||
            frame_set(&c, c.root, "documents", none) < 0 ||
            frame_set(&c, c.root, "add_generation_prompt", gen) < 0)
                return c.err;
        const char *tokens[2][2] = {{"bos_token", vars->bos_token}, {"eos_token", vars->eos_token}};
        for (int i = 0; i < 2; i++) {
                struct jv *s;
                if (!tokens[i][1])
                        continue;
                if (!(s = mk_str(&c, tokens[i][1], strlen(tokens[i][1]))) || frame_set(&c, c.root, tokens[i][0], s) < 0)
                        return c.err;
        }
        int r = exec_body(&c, c.root, root);
        if (r < 0)
                return r;
        if (out.oom)
                return oom(&c), c.err;
        *ret_text = out.p ? out.p : dse__jstrdup(a, "", 0);
        if (!*ret_text)
                return -ENOMEM;
        return (int)(out.n > INT32_MAX ? INT32_MAX : out.n);
}
