/* GGUF writer for tests and benchmarks (gguf_writer.h). */
#include "gguf_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN 32u

static const uint8_t zeros[ALIGN]; /* padding */

struct buf {
        uint8_t *p;
        size_t n, cap;
};

struct wtensor {
        char *name;
        uint32_t type;
        int n_dims;
        int64_t ne[4];
        uint8_t *data; /* NULL: fill produces it */
        size_t bytes;
        gguf_fill_fn fill;
        void *fill_ctx;
};

struct gguf_writer {
        struct buf kv;
        uint64_t n_kv;
        struct wtensor *t;
        size_t n_t;
};

static void put(struct buf *b, const void *p, size_t n) {
        if (b->n + n > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->n + n)
                        cap *= 2;
                uint8_t *q = realloc(b->p, cap);
                if (!q)
                        abort();
                b->p = q;
                b->cap = cap;
        }
        if (n)
                memcpy(b->p + b->n, p, n);
        b->n += n;
}

static void put_u32(struct buf *b, uint32_t v) {
        uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
        put(b, x, 4);
}

static void put_u64(struct buf *b, uint64_t v) {
        put_u32(b, (uint32_t)v);
        put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(struct buf *b, const char *s, size_t n) {
        put_u64(b, n);
        put(b, s, n);
}

struct gguf_writer *gguf_writer_new(void) {
        return calloc(1, sizeof(struct gguf_writer));
}

void gguf_writer_free(struct gguf_writer *w) {
        if (!w)
                return;
        for (size_t i = 0; i < w->n_t; i++) {
                free(w->t[i].name);
                free(w->t[i].data);
                free(w->t[i].fill_ctx);
        }
        free(w->t);
        free(w->kv.p);
        free(w);
}

static void key(struct gguf_writer *w, const char *k, uint32_t type) {
        put_str(&w->kv, k, strlen(k));
        put_u32(&w->kv, type);
        w->n_kv++;
}

void gguf_kv_str(struct gguf_writer *w, const char *k, const char *v) {
        key(w, k, 8);
        put_str(&w->kv, v, strlen(v));
}

void gguf_kv_u32(struct gguf_writer *w, const char *k, uint32_t v) {
        key(w, k, 4);
        put_u32(&w->kv, v);
}

void gguf_kv_f32(struct gguf_writer *w, const char *k, float v) {
        uint32_t u;
        memcpy(&u, &v, 4);
        key(w, k, 6);
        put_u32(&w->kv, u);
}

void gguf_kv_bool(struct gguf_writer *w, const char *k, int v) {
        uint8_t b = v ? 1 : 0;
        key(w, k, 7);
        put(&w->kv, &b, 1);
}

void gguf_kv_arr_str(struct gguf_writer *w, const char *k, const char *const *v, const size_t *lens, size_t n) {
        key(w, k, 9);
        put_u32(&w->kv, 8);
        put_u64(&w->kv, n);
        for (size_t i = 0; i < n; i++)
                put_str(&w->kv, v[i], lens ? lens[i] : strlen(v[i]));
}

void gguf_kv_arr_f32(struct gguf_writer *w, const char *k, const float *v, size_t n) {
        key(w, k, 9);
        put_u32(&w->kv, 6);
        put_u64(&w->kv, n);
        for (size_t i = 0; i < n; i++) {
                uint32_t u;
                memcpy(&u, &v[i], 4);
                put_u32(&w->kv, u);
        }
}

void gguf_kv_arr_i32(struct gguf_writer *w, const char *k, const int32_t *v, size_t n) {
        key(w, k, 9);
        put_u32(&w->kv, 5);
        put_u64(&w->kv, n);
        for (size_t i = 0; i < n; i++)
                put_u32(&w->kv, (uint32_t)v[i]);
}

void gguf_kv_raw(struct gguf_writer *w, const void *bytes, size_t n, uint64_t n_entries) {
        put(&w->kv, bytes, n);
        w->n_kv += n_entries;
}

static struct wtensor *new_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                                  const int64_t *ne, size_t bytes) {
        struct wtensor *t = realloc(w->t, (w->n_t + 1) * sizeof *t);
        if (!t)
                abort();
        w->t = t;
        t = &w->t[w->n_t++];
        memset(t, 0, sizeof *t);
        t->name = strdup(name);
        if (!t->name)
                abort();
        t->type = type;
        t->n_dims = n_dims;
        for (int d = 0; d < n_dims; d++)
                t->ne[d] = ne[d];
        t->bytes = bytes;
        return t;
}

void gguf_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                 const void *data, size_t bytes) {
        struct wtensor *t = new_tensor(w, name, type, n_dims, ne, bytes);
        t->data = malloc(bytes ? bytes : 1);
        if (!t->data)
                abort();
        if (bytes)
                memcpy(t->data, data, bytes);
}

void gguf_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                      size_t bytes, gguf_fill_fn fill, const void *ctx, size_t ctx_size) {
        struct wtensor *t = new_tensor(w, name, type, n_dims, ne, bytes);
        t->fill = fill;
        t->fill_ctx = malloc(ctx_size ? ctx_size : 1);
        if (!t->fill_ctx)
                abort();
        if (ctx_size)
                memcpy(t->fill_ctx, ctx, ctx_size);
}

/* The header, metadata and tensor infos, padded to the alignment. */
static void put_head(const struct gguf_writer *w, struct buf *b) {
        put_u32(b, 0x46554747u);
        put_u32(b, 3);
        put_u64(b, w->n_t);
        put_u64(b, w->n_kv);
        put(b, w->kv.p, w->kv.n);
        uint64_t off = 0;
        for (size_t i = 0; i < w->n_t; i++) {
                const struct wtensor *t = &w->t[i];
                put_str(b, t->name, strlen(t->name));
                put_u32(b, (uint32_t)t->n_dims);
                for (int d = 0; d < t->n_dims; d++)
                        put_u64(b, (uint64_t)t->ne[d]);
                put_u32(b, t->type);
                put_u64(b, off);
                off += (t->bytes + ALIGN - 1) / ALIGN * ALIGN;
        }
        put(b, zeros, (ALIGN - b->n % ALIGN) % ALIGN);
}

/* Tensor t's data: its copy, or what its fill produces into *owned (freed by the caller). */
static int tensor_data(const struct wtensor *t, const uint8_t **ret, uint8_t **owned) {
        *owned = NULL;
        if (t->data) {
                *ret = t->data;
                return 0;
        }
        uint8_t *out = malloc(t->bytes ? t->bytes : 1);
        if (!out)
                return -ENOMEM;
        int r = t->fill(t->fill_ctx, out, t->bytes);
        if (r < 0) {
                free(out);
                return r;
        }
        *ret = *owned = out;
        return 0;
}

uint8_t *gguf_writer_bytes(struct gguf_writer *w, size_t *ret_size) {
        struct buf b = {0};
        put_head(w, &b);
        for (size_t i = 0; i < w->n_t; i++) {
                const uint8_t *data;
                uint8_t *owned;
                if (tensor_data(&w->t[i], &data, &owned) < 0) {
                        free(b.p);
                        return NULL;
                }
                put(&b, data, w->t[i].bytes);
                put(&b, zeros, (ALIGN - w->t[i].bytes % ALIGN) % ALIGN);
                free(owned);
        }
        *ret_size = b.n;
        return b.p;
}

/* Streams the file: the head, then one tensor's data at a time. */
int gguf_writer_write(struct gguf_writer *w, const char *path) {
        FILE *f = fopen(path, "wb");
        if (!f)
                return -errno;
        struct buf b = {0};
        put_head(w, &b);
        int r = fwrite(b.p, 1, b.n, f) == b.n ? 0 : -EIO;
        free(b.p);
        for (size_t i = 0; r == 0 && i < w->n_t; i++) {
                const uint8_t *data;
                uint8_t *owned;
                size_t pad = (ALIGN - w->t[i].bytes % ALIGN) % ALIGN;
                if ((r = tensor_data(&w->t[i], &data, &owned)) < 0)
                        break;
                if (fwrite(data, 1, w->t[i].bytes, f) != w->t[i].bytes || fwrite(zeros, 1, pad, f) != pad)
                        r = -EIO;
                free(owned);
        }
        if (fclose(f) != 0 && r == 0)
                r = -EIO;
        return r;
}

/* Round to nearest even, as F16C and ggml's portable fallback do. */
uint16_t gguf_f32_to_f16(float f) {
        uint32_t x;
        memcpy(&x, &f, 4);
        uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
        uint32_t a = x & 0x7fffffff;
        if (a > 0x7f800000)
                return sign | 0x7e00;
        if (a >= 0x477ff000) /* 65520 and above round to infinity */
                return sign | 0x7c00;
        if (a < 0x38800000) { /* below 2^-14: a multiple of 2^-24, exact scaling then rint */
                float v;
                memcpy(&v, &a, 4);
                return sign | (uint16_t)nearbyintf(v * 16777216.0f);
        }
        uint32_t h = ((a >> 23) - 127 + 15) << 10 | (a & 0x7fffff) >> 13, rem = a & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
                h++;
        return sign | (uint16_t)h;
}

static void put_f16(uint8_t *p, float v) {
        uint16_t h = gguf_f32_to_f16(v);
        p[0] = (uint8_t)h;
        p[1] = (uint8_t)(h >> 8);
}

void gguf_quantize_q8_0(const float *x, uint8_t *out, int64_t n) {
        for (int64_t i = 0; i < n / 32; i++, x += 32, out += 34) {
                float amax = 0.0f;
                for (int j = 0; j < 32; j++)
                        amax = fmaxf(amax, fabsf(x[j]));
                const float d = amax / 127;
                const float id = d ? 1.0f / d : 0.0f;
                put_f16(out, d);
                for (int j = 0; j < 32; j++)
                        out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
        }
}

void gguf_quantize_q4_0(const float *x, uint8_t *out, int64_t n) {
        for (int64_t i = 0; i < n / 32; i++, x += 32, out += 18) {
                float amax = 0.0f, max = 0.0f;
                for (int j = 0; j < 32; j++)
                        if (amax < fabsf(x[j])) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                const float d = max / -8;
                const float id = d ? 1.0f / d : 0.0f;
                put_f16(out, d);
                for (int j = 0; j < 16; j++) {
                        const float x0 = x[j] * id, x1 = x[16 + j] * id;
                        const int8_t a = (int8_t)(x0 + 8.5f), b = (int8_t)(x1 + 8.5f);
                        const uint8_t xi0 = (uint8_t)(a < 15 ? a : 15), xi1 = (uint8_t)(b < 15 ? b : 15);
                        out[2 + j] = (uint8_t)(xi0 | xi1 << 4);
                }
        }
}
