/* jinja.h — the engine's Jinja interpreter for chat templates (internal).
 *
 * A template is lexed and parsed once (jinja_parse.c) into an AST of struct jnode, then
 * evaluated per request (jinja_eval.c) over values of struct jv (jinja_value.c). It
 * follows Jinja2 as transformers' apply_chat_template configures it: trim_blocks,
 * lstrip_blocks, loop controls, default Undefined, `tojson` as json.dumps with
 * ensure_ascii=False. Constructs outside the supported subset fail with -EOPNOTSUPP.
 *
 * Memory: every node and value lives in an arena (struct jarena) owned by the template
 * (AST, literals) or by one render call (everything computed); nothing is freed
 * individually, the arena goes away at once. Values are immutable except dicts made by
 * namespace(), which `{% set ns.attr = ... %}` updates in place. */
#ifndef DSE_CHAT_JINJA_H
#define DSE_CHAT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "../utf8.h"

/* ---- arena --------------------------------------------------------------------------- */

struct jchunk;
struct jarena {
        struct jchunk *head;
        size_t used_bytes;  /* total handed out, checked against limit_bytes */
        size_t limit_bytes; /* 0: unlimited */
        int over_limit;     /* an allocation failed because of limit_bytes */
};

void dse__jarena_init(struct jarena *a, size_t limit_bytes);
void dse__jarena_done(struct jarena *a);
/* Zeroed memory, 16-byte aligned; NULL when out of memory or over the limit. */
void *dse__jalloc(struct jarena *a, size_t size);
char *dse__jstrdup(struct jarena *a, const char *s, size_t len); /* NUL-terminated copy */

/* ---- values -------------------------------------------------------------------------- */

enum jtype {
        JT_UNDEF,     /* Jinja Undefined: prints as "", falsy, iterates as empty */
        JT_NONE,
        JT_BOOL,
        JT_INT,
        JT_FLOAT,
        JT_STR,       /* UTF-8, length in bytes */
        JT_LIST,
        JT_TUPLE,     /* a list that prints with parentheses (dict.items() pairs) */
        JT_DICT,      /* insertion-ordered */
        JT_NAMESPACE, /* namespace(): a dict with attribute assignment */
        JT_MACRO,
        JT_FUNC,      /* global function or bound method, see enum jfunc */
};

struct jv;
struct jnode;
struct jframe;

struct jkv {
        struct jv *key; /* a JT_STR (JSON objects, namespace) or any hashable value */
        struct jv *val;
};

struct jv {
        enum jtype t;
        union {
                int b;
                int64_t i;
                double f;
                struct {
                        const char *s;
                        size_t n;
                } str;
                struct {
                        struct jv **items;
                        size_t n;
                } list;
                struct {
                        struct jkv *kv;
                        size_t n, cap;
                } dict;
                struct {
                        const struct jnode *def;
                        struct jframe *closure;
                } macro;
                struct {
                        int id;          /* enum jfunc */
                        struct jv *self; /* bound object for methods, NULL for globals */
                } fn;
                struct {
                        const char *name; /* what was undefined, for messages (may be NULL) */
                } undef;
        } u;
};

struct jv *dse__jv_new(struct jarena *a, enum jtype t);
struct jv *dse__jv_str(struct jarena *a, const char *s, size_t n); /* copies */
struct jv *dse__jv_int(struct jarena *a, int64_t i);
struct jv *dse__jv_float(struct jarena *a, double f);
struct jv *dse__jv_bool(struct jarena *a, int b);
struct jv *dse__jv_undef(struct jarena *a, const char *name);
/* Appends to a dict (no duplicate check) / sets a key (replacing in place). 0 or -ENOMEM. */
int dse__jv_dict_set(struct jarena *a, struct jv *dict, struct jv *key, struct jv *val);
struct jv *dse__jv_dict_get(const struct jv *dict, const char *key, size_t key_len);
int dse__jv_equal(const struct jv *x, const struct jv *y);
int dse__jv_truthy(const struct jv *v);

/* Parses JSON text into values with the engine's JSON reader (tok/tok_json.h); numbers
 * with '.', 'e' or 'E' become floats, others ints, as Python's json.loads does.
 * -EBADMSG with the offset in reterr, -EILSEQ for invalid UTF-8 or an unpaired surrogate
 * escape, -EOPNOTSUPP for an integer past 64 bits. */
int dse__json_parse(struct jarena *a, const char *text, struct jv **ret, struct dse_diag *reterr);

/* A growable byte buffer in the arena. */
struct jbuf {
        struct jarena *a;
        char *p;
        size_t n, cap;
        int oom;
};
void dse__jbuf_init(struct jbuf *b, struct jarena *a);
void dse__jbuf_put(struct jbuf *b, const char *s, size_t n);
void dse__jbuf_putc(struct jbuf *b, char c);
void dse__jbuf_printf(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Python json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys). 0 or -errno
 * (-EINVAL for a value JSON cannot hold, with the reason in reterr). */
int dse__json_dump(struct jbuf *b, const struct jv *v, int indent, int sort_keys, struct dse_diag *reterr);
/* Python str(v) (strings as is) and repr(v). */
int dse__jv_str_into(struct jbuf *b, const struct jv *v, struct dse_diag *reterr);
int dse__jv_repr_into(struct jbuf *b, const struct jv *v, struct dse_diag *reterr);
/* Python's float repr (shortest round-trip, "1.0", "1e+16"). */
void dse__py_float_repr(double f, char *buf, size_t size);

/* ---- AST ----------------------------------------------------------------------------- */

enum jkind {
        /* statements */
        JN_BODY,     /* kids: statements */
        JN_TEXT,     /* str */
        JN_OUTPUT,   /* a: expression */
        JN_IF,       /* kids: conditions, kids2: bodies (one more than conditions with else) */
        JN_FOR,      /* names: targets; a: iterable; b: filter (or NULL); c: body; d: else body */
        JN_SET,      /* names[0] (+ str: attribute for ns.attr) or names: tuple targets; a: value */
        JN_SET_BLOCK,/* names[0]; c: body */
        JN_MACRO,    /* str: name; names: params; kids: defaults (NULL entries: required); c: body */
        JN_BREAK,
        JN_CONTINUE,
        /* expressions */
        JN_LITERAL,  /* val */
        JN_NAME,     /* str */
        JN_GETATTR,  /* a . str */
        JN_GETITEM,  /* a [ b ] */
        JN_SLICE,    /* a [ kids[0] : kids[1] : kids[2] ] (NULL entries: omitted) */
        JN_CALL,     /* a ( kids, names=kids2 ) */
        JN_FILTER,   /* a | str ( kids, names=kids2 ); op: enum jfilter */
        JN_TEST,     /* a is [not] str ( kids ); op: enum jtest; neg */
        JN_NEG,      /* - a */
        JN_POS,      /* + a */
        JN_NOT,      /* not a */
        JN_AND,
        JN_OR,
        JN_BINOP,    /* a op b (op: '+', '-', '*', '/', 'F' floor div, '%', 'P' power, '~') */
        JN_COMPARE,  /* a, then kids[i] with ops[i] (chained comparisons) */
        JN_COND,     /* b if a else c (c may be NULL) */
        JN_LIST,     /* kids */
        JN_TUPLE,    /* kids */
        JN_DICT,     /* kids: keys, kids2: values */
};

enum jcmp { JC_EQ, JC_NE, JC_LT, JC_LE, JC_GT, JC_GE, JC_IN, JC_NOTIN };

struct jnode {
        enum jkind kind;
        int line;
        int op;
        int neg;
        const char *str;
        size_t len;
        struct jnode *a, *b, *c, *d;
        struct jnode **kids;
        size_t n_kids;
        struct jnode **kids2;
        size_t n_kids2;
        const char **names;
        size_t n_names;
        int *ops;
        struct jv *val;
};

/* Parses src (NUL-terminated UTF-8) into *ret_root (a JN_BODY) in arena a. -EINVAL for a
 * syntax error, -EOPNOTSUPP for a construct outside the subset, -EILSEQ for bad UTF-8;
 * the message names the line. */
int dse__jinja_parse(struct jarena *a, const char *src, struct jnode **ret_root, struct dse_diag *reterr);

/* Filters and tests are resolved by name at parse time so an unknown one is an error
 * before any rendering. Returns the enum value or -1. */
enum jfilter {
        JF_ABS, JF_CAPITALIZE, JF_COUNT, JF_DEFAULT, JF_FIRST, JF_FLOAT, JF_INT, JF_ITEMS,
        JF_JOIN, JF_LAST, JF_LENGTH, JF_LIST, JF_LOWER, JF_MAP, JF_REJECT, JF_REJECTATTR, JF_REPLACE,
        JF_REVERSE, JF_SAFE, JF_SELECT, JF_SELECTATTR, JF_SORT, JF_STRING, JF_TITLE, JF_TOJSON, JF_TRIM,
        JF_UPPER, JF_COUNT_,
};
enum jtest {
        JS_BOOLEAN, JS_CALLABLE, JS_DEFINED, JS_DIVISIBLEBY, JS_EQ, JS_EVEN, JS_FALSE, JS_FLOAT,
        JS_GE, JS_GT, JS_IN, JS_INTEGER, JS_ITERABLE, JS_LE, JS_LOWER, JS_LT, JS_MAPPING, JS_NE,
        JS_NONE, JS_NUMBER, JS_ODD, JS_SAMEAS, JS_SEQUENCE, JS_STRING, JS_TRUE, JS_UNDEFINED,
        JS_UPPER, JS_COUNT_,
};
int dse__jinja_filter_lookup(const char *name, size_t len);
int dse__jinja_test_lookup(const char *name, size_t len);

/* Variables given to a render. */
struct jinja_vars {
        struct jv *messages;
        struct jv *tools; /* JT_NONE when absent */
        int add_generation_prompt;
        const char *bos_token, *eos_token;
};

/* Renders root; *ret_text is allocated in arena a (NUL-terminated), its length returned. */
int dse__jinja_render(struct jarena *a, const struct jnode *root, const struct jinja_vars *vars,
                      char **ret_text, struct dse_diag *reterr);

/* The hint every "not supported" message carries. */
#define JINJA_WAY_OUT "; pass a simpler template with --chat-template FILE"

#endif
