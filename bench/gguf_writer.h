/* A GGUF writer for tests and benchmarks: metadata and tensors in memory, written in
 * one go (GGUF v3, ggml's layout: tensor data in info order, each padded to the
 * alignment). A tensor's data can also be produced while the file is written (a fill
 * callback), so a multi-gigabyte model never sits in memory whole. Also ggml's reference quantizers for Q8_0 and Q4_0 (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref) and the f32 -> f16 rounding they use. */
#ifndef DSV_BENCH_GGUF_WRITER_H
#define DSV_BENCH_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);

/* Metadata: value types as the GGUF spec numbers them (u32 4, i32 5, f32 6, bool 7,
 * string 8). */
void gguf_kv_str(struct gguf_writer *w, const char *key, const char *value);
void gguf_kv_u32(struct gguf_writer *w, const char *key, uint32_t value);
void gguf_kv_f32(struct gguf_writer *w, const char *key, float value);
void gguf_kv_bool(struct gguf_writer *w, const char *key, int value);
void gguf_kv_arr_str(struct gguf_writer *w, const char *key, const char *const *values, const size_t *lens, size_t n);
void gguf_kv_arr_f32(struct gguf_writer *w, const char *key, const float *values, size_t n);
void gguf_kv_arr_i32(struct gguf_writer *w, const char *key, const int32_t *values, size_t n);
/* Raw bytes appended to the metadata section, counted as `n_entries` entries (for
 * broken-file tests). */
void gguf_kv_raw(struct gguf_writer *w, const void *bytes, size_t n, uint64_t n_entries);

/* A tensor: ne in ggml order (ne[0] contiguous), ggml type id, its data (copied). */
void gguf_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                 const void *data, size_t bytes);

/* A tensor of `bytes` bytes whose data fill(ctx, out, bytes) writes when the file is
 * written; ctx_size bytes at ctx are copied. fill returns 0 or a negative errno. */
typedef int (*gguf_fill_fn)(const void *ctx, void *out, size_t bytes);
void gguf_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                      size_t bytes, gguf_fill_fn fill, const void *ctx, size_t ctx_size);

/* Writes the file; returns 0 or a negative errno (a fill's error). */
int gguf_writer_write(struct gguf_writer *w, const char *path);
/* The whole file in memory (malloc'ed; NULL when a fill fails). */
uint8_t *gguf_writer_bytes(struct gguf_writer *w, size_t *ret_size);

/* ggml's reference quantizers, n a multiple of 32; out holds n/32 blocks. */
void gguf_quantize_q8_0(const float *x, uint8_t *out, int64_t n);
void gguf_quantize_q4_0(const float *x, uint8_t *out, int64_t n);
uint16_t gguf_f32_to_f16(float f);

#endif
