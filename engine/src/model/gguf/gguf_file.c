/* The GGUF container: header, metadata key/values, tensor infos, data section bounds.
 * Every count, length and offset is checked against the bytes that remain before it is
 * used, so a malformed file gives an error naming the file and the entry, never a read
 * outside the buffer or an allocation the file cannot back. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "gguf.h"

struct cursor {
        const uint8_t *buf;
        size_t size, pos;
        const char *what;
        struct dse_diag *reterr;
};

static size_t scalar_size(enum dse__gguf_vtype t) {
        switch (t) {
        case DSE_GGUF_U8:
        case DSE_GGUF_I8:
        case DSE_GGUF_BOOL:
                return 1;
        case DSE_GGUF_U16:
        case DSE_GGUF_I16:
                return 2;
        case DSE_GGUF_U32:
        case DSE_GGUF_I32:
        case DSE_GGUF_F32:
                return 4;
        case DSE_GGUF_U64:
        case DSE_GGUF_I64:
        case DSE_GGUF_F64:
                return 8;
        default:
                return 0;
        }
}

static uint32_t rd32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) {
        return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int need(struct cursor *c, uint64_t n, const char *field) {
        if (n > c->size - c->pos)
                return dse__fail(c->reterr, -EBADMSG, "%s: truncated: %s at byte %zu needs %llu bytes, %zu remain",
                                 c->what, field, c->pos, (unsigned long long)n, c->size - c->pos);
        return 0;
}

static int get_u32(struct cursor *c, uint32_t *v, const char *field) {
        int r = need(c, 4, field);
        *v = 0;
        if (r == 0) {
                *v = rd32(c->buf + c->pos);
                c->pos += 4;
        }
        return r;
}

static int get_u64(struct cursor *c, uint64_t *v, const char *field) {
        int r = need(c, 8, field);
        *v = 0;
        if (r == 0) {
                *v = rd64(c->buf + c->pos);
                c->pos += 8;
        }
        return r;
}

static int get_string(struct cursor *c, const char **s, size_t *len, const char *field) {
        uint64_t n = 0;
        int r = get_u64(c, &n, field);
        if (r < 0)
                return r;
        if (n > c->size - c->pos)
                return dse__fail(c->reterr, -EBADMSG, "%s: %s at byte %zu: string length %llu runs past the end of the file",
                                 c->what, field, c->pos - 8, (unsigned long long)n);
        *s = (const char *)c->buf + c->pos;
        *len = (size_t)n;
        c->pos += (size_t)n;
        return 0;
}

static const char *vtype_name(uint32_t t) {
        static const char *const names[] = {"u8",   "i8",    "u16",   "i16", "u32", "i32", "f32",
                                            "bool", "string", "array", "u64", "i64", "f64"};
        return t < DSE_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

/* Reads a value of type t (not an array) and checks it; `key` names it in messages. */
static int skip_scalar(struct cursor *c, uint32_t t, const char *key, int key_len) {
        if (t == DSE_GGUF_STRING) {
                const char *s;
                size_t n;
                return get_string(c, &s, &n, "string value");
        }
        size_t es = scalar_size(t);
        if (!es)
                return dse__fail(c->reterr, -EBADMSG, "%s: key '%.*s': unknown value type %u", c->what, key_len, key, t);
        int r = need(c, es, "value");
        if (r < 0)
                return r;
        if (t == DSE_GGUF_BOOL && c->buf[c->pos] > 1)
                return dse__fail(c->reterr, -EBADMSG, "%s: key '%.*s': bool value %u is neither 0 nor 1", c->what,
                                 key_len, key, c->buf[c->pos]);
        c->pos += es;
        return 0;
}

static int parse_kv(struct cursor *c, struct dse__gguf_kv *kv, uint64_t index) {
        int r = get_string(c, &kv->key, &kv->key_len, "metadata key");
        if (r < 0)
                return r;
        if (kv->key_len == 0 || kv->key_len > DSE_GGUF_KEY_MAX)
                return dse__fail(c->reterr, -EBADMSG, "%s: metadata entry %llu: key length %zu (must be 1..%d)", c->what,
                                 (unsigned long long)index, kv->key_len, DSE_GGUF_KEY_MAX);
        for (size_t i = 0; i < kv->key_len; i++)
                if ((unsigned char)kv->key[i] < 0x20 || (unsigned char)kv->key[i] > 0x7e)
                        return dse__fail(c->reterr, -EBADMSG, "%s: metadata entry %llu: key is not printable ASCII",
                                         c->what, (unsigned long long)index);
        const char *key = kv->key;
        int kl = (int)kv->key_len;
        uint32_t t;
        if ((r = get_u32(c, &t, "value type")) < 0)
                return r;
        if (t >= DSE_GGUF_VTYPE_COUNT)
                return dse__fail(c->reterr, -EBADMSG, "%s: key '%.*s': unknown value type %u", c->what, kl, key, t);
        kv->type = (enum dse__gguf_vtype)t;
        kv->count = 1;
        if (t != DSE_GGUF_ARRAY) {
                kv->value = c->buf + c->pos;
                size_t start = c->pos;
                r = skip_scalar(c, t, key, kl);
                kv->value_bytes = c->pos - start;
                return r;
        }
        uint32_t et;
        uint64_t n;
        if ((r = get_u32(c, &et, "array element type")) < 0 || (r = get_u64(c, &n, "array length")) < 0)
                return r;
        if (et == DSE_GGUF_ARRAY)
                return dse__fail(c->reterr, -EBADMSG, "%s: key '%.*s': arrays of arrays are not supported", c->what, kl,
                                 key);
        if (et >= DSE_GGUF_VTYPE_COUNT)
                return dse__fail(c->reterr, -EBADMSG, "%s: key '%.*s': unknown array element type %u", c->what, kl, key,
                                 et);
        kv->elem_type = (enum dse__gguf_vtype)et;
        kv->count = n;
        kv->value = c->buf + c->pos;
        size_t start = c->pos;
        if (et != DSE_GGUF_STRING) {
                size_t es = scalar_size(et);
                if (n > (c->size - c->pos) / es)
                        return dse__fail(c->reterr, -EBADMSG,
                                         "%s: key '%.*s': array of %llu %s runs past the end of the file", c->what, kl,
                                         key, (unsigned long long)n, vtype_name(et));
                for (uint64_t i = 0; et == DSE_GGUF_BOOL && i < n; i++)
                        if (c->buf[c->pos + i] > 1)
                                return dse__fail(c->reterr, -EBADMSG, "%s: key '%.*s': element %llu: bool %u", c->what,
                                                 kl, key, (unsigned long long)i, c->buf[c->pos + i]);
                c->pos += (size_t)n * es;
        } else {
                /* each string takes at least its 8-byte length */
                if (n > (c->size - c->pos) / 8)
                        return dse__fail(c->reterr, -EBADMSG,
                                         "%s: key '%.*s': array of %llu strings runs past the end of the file", c->what,
                                         kl, key, (unsigned long long)n);
                for (uint64_t i = 0; i < n; i++) {
                        const char *s;
                        size_t len;
                        if ((r = get_string(c, &s, &len, "array string")) < 0)
                                return dse__fail(c->reterr, r, "%s: key '%.*s': element %llu is cut off", c->what, kl,
                                                 key, (unsigned long long)i);
                }
        }
        kv->value_bytes = c->pos - start;
        return 0;
}

static int cmp_kv(const void *a, const void *b) {
        const struct dse__gguf_kv *x = *(const struct dse__gguf_kv *const *)a, *y = *(const struct dse__gguf_kv *const *)b;
        size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
        int d = memcmp(x->key, y->key, n);
        return d ? d : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

static int cmp_name(const void *a, const void *b) {
        const struct dse__gguf_tensor *x = *(const struct dse__gguf_tensor *const *)a,
                                      *y = *(const struct dse__gguf_tensor *const *)b;
        return strcmp(x->name, y->name);
}

static int cmp_offset(const void *a, const void *b) {
        const struct dse__gguf_tensor *x = *(const struct dse__gguf_tensor *const *)a,
                                      *y = *(const struct dse__gguf_tensor *const *)b;
        return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Duplicate keys and tensor names: sort pointers, compare neighbours. */
static int check_unique(struct cursor *c, struct dse__gguf *g) {
        size_t n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
        const void **p = malloc((n ? n : 1) * sizeof *p);
        if (!p)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < g->n_kv; i++)
                p[i] = &g->kv[i];
        qsort(p, g->n_kv, sizeof *p, cmp_kv);
        for (size_t i = 1; r == 0 && i < g->n_kv; i++)
                if (cmp_kv(&p[i - 1], &p[i]) == 0) {
                        const struct dse__gguf_kv *kv = p[i];
                        r = dse__fail(c->reterr, -EBADMSG, "%s: metadata key '%.*s' appears twice", c->what,
                                      (int)kv->key_len, kv->key);
                }
        for (size_t i = 0; i < g->n_tensors; i++)
                p[i] = &g->tensors[i];
        qsort(p, g->n_tensors, sizeof *p, cmp_name);
        for (size_t i = 1; r == 0 && i < g->n_tensors; i++)
                if (cmp_name(&p[i - 1], &p[i]) == 0)
                        r = dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s' appears twice", c->what,
                                      ((const struct dse__gguf_tensor *)p[i])->name);
        /* data ranges: sorted by offset, each must end before the next begins */
        qsort(p, g->n_tensors, sizeof *p, cmp_offset);
        for (size_t i = 1; r == 0 && i < g->n_tensors; i++) {
                const struct dse__gguf_tensor *a = p[i - 1], *b = p[i];
                if (a->offset + a->size > b->offset)
                        r = dse__fail(c->reterr, -EBADMSG, "%s: tensors '%s' and '%s' overlap in the data section", c->what,
                                      a->name, b->name);
        }
        free(p);
        return r;
}

static int parse_tensor_info(struct cursor *c, struct dse__gguf_tensor *t, uint64_t index) {
        const char *name;
        size_t len;
        int r = get_string(c, &name, &len, "tensor name");
        if (r < 0)
                return r;
        if (len == 0 || len >= DSE_GGUF_NAME_MAX || memchr(name, 0, len))
                return dse__fail(c->reterr, -EBADMSG, "%s: tensor %llu: name length %zu (must be 1..%d, no NUL)", c->what,
                                 (unsigned long long)index, len, DSE_GGUF_NAME_MAX - 1);
        memcpy(t->name, name, len);
        t->name[len] = 0;
        if ((r = get_u32(c, &t->n_dims, "tensor dims")) < 0)
                return r;
        if (t->n_dims < 1 || t->n_dims > 4)
                return dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s': %u dimensions (must be 1..4)", c->what, t->name,
                                 t->n_dims);
        uint64_t elems = 1;
        for (int d = 0; d < 4; d++) {
                uint64_t ne = 1;
                if ((uint32_t)d < t->n_dims && (r = get_u64(c, &ne, "tensor shape")) < 0)
                        return r;
                if (ne == 0 || ne > INT64_MAX)
                        return dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s': dimension %d is %llu (must be 1..2^63-1)",
                                         c->what, t->name, d, (unsigned long long)ne);
                if (__builtin_mul_overflow(elems, ne, &elems) || elems > INT64_MAX)
                        return dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s': element count overflows", c->what, t->name);
                t->ne[d] = (int64_t)ne;
        }
        if ((r = get_u32(c, &t->type, "tensor type")) < 0 || (r = get_u64(c, &t->offset, "tensor offset")) < 0)
                return r;
        int64_t be = dse__ggml_block_elems(t->type);
        if (!be)
                return dse__fail(c->reterr, -EOPNOTSUPP, "%s: tensor '%s': ggml type %u is not supported (supported: F32, "
                                 "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                                 c->what, t->name, t->type);
        if (t->ne[0] % be)
                return dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s': first dimension %lld is not a multiple of the %s "
                                 "block (%lld)",
                                 c->what, t->name, (long long)t->ne[0], dse__ggml_type_name(t->type), (long long)be);
        if (__builtin_mul_overflow(elems / (uint64_t)be, (uint64_t)dse__ggml_block_bytes(t->type), &t->size) ||
            t->size > INT64_MAX)
                return dse__fail(c->reterr, -EBADMSG, "%s: tensor '%s': byte size overflows", c->what, t->name);
        return 0;
}

static int parse_alignment(struct cursor *c, struct dse__gguf *g) {
        g->alignment = DSE_GGUF_DEFAULT_ALIGNMENT;
        const struct dse__gguf_kv *kv = dse__gguf_find(g, "general.alignment");
        if (!kv)
                return 0;
        if (kv->type != DSE_GGUF_U32)
                return dse__fail(c->reterr, -EBADMSG, "%s: general.alignment is a %s (must be u32)", c->what,
                                 vtype_name(kv->type));
        uint32_t a = rd32(kv->value);
        if (a == 0 || (a & (a - 1)))
                return dse__fail(c->reterr, -EBADMSG, "%s: general.alignment %u is not a power of two", c->what, a);
        g->alignment = a;
        return 0;
}

int dse__gguf_parse(const uint8_t *buf, size_t size, const char *what, struct dse__gguf **ret,
                    struct dse_diag *reterr) {
        struct cursor c = {.buf = buf, .size = size, .what = what, .reterr = reterr};
        uint32_t magic, version;
        uint64_t n_tensors, n_kv;
        int r;
        *ret = NULL;
        if ((r = get_u32(&c, &magic, "magic")) < 0)
                return r;
        if (magic != DSE_GGUF_MAGIC)
                return dse__fail(reterr, -EBADMSG, "%s: not a GGUF file (magic %02x %02x %02x %02x)", what, buf[0], buf[1],
                                 buf[2], buf[3]);
        if ((r = get_u32(&c, &version, "version")) < 0)
                return r;
        if (version != 2 && version != 3)
                return dse__fail(reterr, -EOPNOTSUPP,
                                 version == 1 ? "%s: GGUF version %u is not supported (v1 used 32-bit counts; convert "
                                                "the model again with a current llama.cpp)"
                                              : "%s: GGUF version %u is not supported (2 and 3 are read)",
                                 what, version);
        if ((r = get_u64(&c, &n_tensors, "tensor count")) < 0 || (r = get_u64(&c, &n_kv, "metadata count")) < 0)
                return r;
        /* a key/value takes at least 8 + 1 + 4 + 1 bytes, a tensor info 8 + 1 + 4 + 8 + 4 + 8 */
        if (n_kv > (size - c.pos) / 14)
                return dse__fail(reterr, -EBADMSG, "%s: metadata count %llu cannot fit in the file", what,
                                 (unsigned long long)n_kv);
        if (n_tensors > (size - c.pos) / 33)
                return dse__fail(reterr, -EBADMSG, "%s: tensor count %llu cannot fit in the file", what,
                                 (unsigned long long)n_tensors);
        struct dse__gguf *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->version = version;
        g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
        g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
        if (!g->kv || !g->tensors) {
                r = -ENOMEM;
                goto fail;
        }
        for (uint64_t i = 0; i < n_kv; i++, g->n_kv++)
                if ((r = parse_kv(&c, &g->kv[i], i)) < 0)
                        goto fail;
        if ((r = parse_alignment(&c, g)) < 0)
                goto fail;
        for (uint64_t i = 0; i < n_tensors; i++, g->n_tensors++)
                if ((r = parse_tensor_info(&c, &g->tensors[i], i)) < 0)
                        goto fail;
        uint64_t data = ((uint64_t)c.pos + g->alignment - 1) / g->alignment * g->alignment;
        g->data_offset = data;
        for (size_t i = 0; i < g->n_tensors; i++) {
                const struct dse__gguf_tensor *t = &g->tensors[i];
                if (t->offset % g->alignment) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u",
                                      what, t->name, (unsigned long long)t->offset, g->alignment);
                        goto fail;
                }
                if (data > size || t->offset > size - data || t->size > size - data - t->offset) {
                        r = dse__fail(reterr, -EBADMSG,
                                      "%s: tensor '%s': data [%llu, +%llu) runs past the end of the file (%zu bytes): "
                                      "truncated?",
                                      what, t->name, (unsigned long long)t->offset, (unsigned long long)t->size, size);
                        goto fail;
                }
        }
        if ((r = check_unique(&c, g)) < 0)
                goto fail;
        *ret = g;
        return 0;
fail:
        dse__gguf_free(g);
        return r;
}

void dse__gguf_free(struct dse__gguf *g) {
        if (!g)
                return;
        free(g->kv);
        free(g->tensors);
        free(g);
}

const struct dse__gguf_kv *dse__gguf_find(const struct dse__gguf *g, const char *key) {
        size_t n = strlen(key);
        for (size_t i = 0; i < g->n_kv; i++)
                if (g->kv[i].key_len == n && memcmp(g->kv[i].key, key, n) == 0)
                        return &g->kv[i];
        return NULL;
}

const struct dse__gguf_tensor *dse__gguf_find_tensor(const struct dse__gguf *g, const char *name) {
        for (size_t i = 0; i < g->n_tensors; i++)
                if (strcmp(g->tensors[i].name, name) == 0)
                        return &g->tensors[i];
        return NULL;
}

/* A number at p of scalar type t, as double; *is_int says whether t is an integer type. */
static double num_at(enum dse__gguf_vtype t, const uint8_t *p, int *is_int) {
        *is_int = 1;
        switch (t) {
        case DSE_GGUF_U8:
        case DSE_GGUF_BOOL: return p[0];
        case DSE_GGUF_I8: return (int8_t)p[0];
        case DSE_GGUF_U16: return (uint16_t)(p[0] | p[1] << 8);
        case DSE_GGUF_I16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
        case DSE_GGUF_U32: return rd32(p);
        case DSE_GGUF_I32: return (int32_t)rd32(p);
        case DSE_GGUF_U64: return (double)rd64(p);
        case DSE_GGUF_I64: return (double)(int64_t)rd64(p);
        case DSE_GGUF_F32: {
                uint32_t u = rd32(p);
                float f;
                memcpy(&f, &u, 4);
                *is_int = 0;
                return f;
        }
        case DSE_GGUF_F64: {
                uint64_t u = rd64(p);
                double d;
                memcpy(&d, &u, 8);
                *is_int = 0;
                return d;
        }
        default: *is_int = -1; return 0;
        }
}

int dse__gguf_get_i64(const struct dse__gguf *g, const char *what, const char *key, int64_t *ret,
                      struct dse_diag *reterr) {
        const struct dse__gguf_kv *kv = dse__gguf_find(g, key);
        if (!kv)
                return -ENOENT;
        int is_int;
        if (kv->type == DSE_GGUF_U64 || kv->type == DSE_GGUF_I64) {
                uint64_t u = rd64(kv->value);
                if (kv->type == DSE_GGUF_U64 && u > INT64_MAX)
                        return dse__fail(reterr, -EBADMSG, "%s: key '%s': value %llu is out of range", what, key,
                                         (unsigned long long)u);
                *ret = (int64_t)u;
                return 0;
        }
        double v = num_at(kv->type, kv->value, &is_int);
        if (is_int != 1 || kv->type == DSE_GGUF_BOOL)
                return dse__fail(reterr, -EBADMSG, "%s: key '%s' is a %s (an integer is expected)", what, key,
                                 vtype_name(kv->type));
        *ret = (int64_t)v;
        return 0;
}

int dse__gguf_get_f64(const struct dse__gguf *g, const char *what, const char *key, double *ret,
                      struct dse_diag *reterr) {
        const struct dse__gguf_kv *kv = dse__gguf_find(g, key);
        if (!kv)
                return -ENOENT;
        int is_int;
        double v = num_at(kv->type, kv->value, &is_int);
        if (is_int < 0 || kv->type == DSE_GGUF_BOOL)
                return dse__fail(reterr, -EBADMSG, "%s: key '%s' is a %s (a number is expected)", what, key,
                                 vtype_name(kv->type));
        if (!isfinite(v))
                return dse__fail(reterr, -EBADMSG, "%s: key '%s' is not finite", what, key);
        *ret = v;
        return 0;
}

int dse__gguf_get_str(const struct dse__gguf *g, const char *what, const char *key, const char **ret,
                      size_t *ret_len, struct dse_diag *reterr) {
        const struct dse__gguf_kv *kv = dse__gguf_find(g, key);
        if (!kv)
                return -ENOENT;
        if (kv->type != DSE_GGUF_STRING)
                return dse__fail(reterr, -EBADMSG, "%s: key '%s' is a %s (a string is expected)", what, key,
                                 vtype_name(kv->type));
        *ret_len = (size_t)rd64(kv->value);
        *ret = (const char *)kv->value + 8;
        return 0;
}

double dse__gguf_arr_num(const struct dse__gguf_kv *kv, uint64_t i) {
        int is_int;
        return num_at(kv->elem_type, kv->value + i * scalar_size(kv->elem_type), &is_int);
}

void dse__gguf_str_next(const uint8_t **pos, const char **ret, size_t *ret_len) {
        *ret_len = (size_t)rd64(*pos);
        *ret = (const char *)*pos + 8;
        *pos += 8 + *ret_len;
}
