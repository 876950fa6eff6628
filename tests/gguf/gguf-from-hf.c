/* HF folder -> GGUF as llama.cpp's converter writes it (gguf-from-hf.h). */
#include "gguf-from-hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-ref.h"
#include "gguf-writer.h"
#include "model/format.h"

static char *slurp_text(const char *path) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *s = malloc((size_t)n + 1);
        if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
                free(s);
                s = NULL;
        }
        if (s)
                s[n] = 0;
        fclose(f);
        return s;
}

static float *read_f32(const struct dse__st_set *st, const struct dse__st_tensor *t, size_t *ret_n) {
        size_t n = 1;
        for (int d = 0; d < t->n_dims; d++)
                n *= (size_t)t->shape[d];
        size_t es = dse__st_dtype_size(t->dtype);
        uint8_t *raw = malloc(n * es);
        float *f = malloc(n * sizeof *f);
        if (!raw || !f || dse__st_read(st, t, 0, raw, n * es, NULL) < 0) {
                free(raw);
                free(f);
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                uint16_t h = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
                f[i] = t->dtype == DSE_ST_F32 ? ((float *)raw)[i] : t->dtype == DSE_ST_F16 ? dse__f16_to_f32(h)
                                                                                         : dse__bf16_to_f32(h);
        }
        free(raw);
        *ret_n = n;
        return f;
}

/* llama.cpp's permute(): row (h, j, i) = h*hd + j*hd/2 + i goes to h*hd + 2i + j */
static void permute_rows(float *w, int64_t rows, int64_t cols, int heads) {
        float *tmp = malloc((size_t)(rows * cols) * sizeof *tmp);
        int64_t hd = rows / heads, half = hd / 2;
        for (int64_t r = 0; r < rows; r++) {
                int64_t h = r / hd, j = (r % hd) / half, i = r % half;
                memcpy(tmp + (h * hd + 2 * i + j) * cols, w + r * cols, (size_t)cols * sizeof *w);
        }
        memcpy(w, tmp, (size_t)(rows * cols) * sizeof *w);
        free(tmp);
}

static void add_tensor(struct gguf_writer *w, const char *name, float *x, int n_dims, const int64_t *ne, uint32_t type,
                       int dequantized) {
        size_t n = (size_t)ne[0] * (n_dims > 1 ? (size_t)ne[1] : 1);
        if (n_dims == 1 || ((type == 8 || type == 2) && ne[0] % 32)) {
                gguf_tensor(w, name, 0, n_dims, ne, x, n * 4);
                return;
        }
        if (type == 0) {
                gguf_tensor(w, name, 0, n_dims, ne, x, n * 4);
        } else if (type == 1) {
                uint16_t *h = malloc(n * 2);
                for (size_t i = 0; i < n; i++)
                        h[i] = gguf_f32_to_f16(x[i]);
                gguf_tensor(w, name, 1, n_dims, ne, h, n * 2);
                free(h);
        } else {
                size_t bb = type == 8 ? 34 : 18, nb = n / 32;
                uint8_t *q = malloc(nb * bb);
                if (type == 8)
                        gguf_quantize_q8_0(x, q, (int64_t)n);
                else
                        gguf_quantize_q4_0(x, q, (int64_t)n);
                if (dequantized) {
                        for (size_t i = 0; i < n; i++)
                                x[i] = gguf_ref_value(type, q + (i / 32) * bb, (int)(i % 32));
                        gguf_tensor(w, name, 0, n_dims, ne, x, n * 4);
                } else {
                        gguf_tensor(w, name, type, n_dims, ne, q, nb * bb);
                }
                free(q);
        }
}

static const char *const layer_map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},   {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},     {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},     {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},         {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},         {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.down_proj.weight", "ffn_down.weight"},
};

static int gguf_name(const char *hf, char *out, size_t size, int *perm) {
        *perm = 0;
        if (strcmp(hf, "model.embed_tokens.weight") == 0)
                return snprintf(out, size, "token_embd.weight"), 0;
        if (strcmp(hf, "model.norm.weight") == 0)
                return snprintf(out, size, "output_norm.weight"), 0;
        if (strcmp(hf, "lm_head.weight") == 0)
                return snprintf(out, size, "output.weight"), 0;
        int layer, n = 0;
        if (sscanf(hf, "model.layers.%d.%n", &layer, &n) == 1 && n > 0)
                for (size_t i = 0; i < sizeof layer_map / sizeof layer_map[0]; i++)
                        if (strcmp(hf + n, layer_map[i][0]) == 0) {
                                *perm = i == 2 ? 1 : i == 3 ? 2 : 0;
                                return snprintf(out, size, "blk.%d.%s", layer, layer_map[i][1]), 0;
                        }
        return -ENOENT;
}

static int add_synthetic_vocab(struct gguf_writer *w, int n) {
        char (*text)[16] = calloc((size_t)n, sizeof *text);
        const char **toks = calloc((size_t)n, sizeof *toks);
        float *scores = calloc((size_t)n, sizeof *scores);
        int32_t *types = calloc((size_t)n, sizeof *types);
        int r = text && toks && scores && types ? 0 : -ENOMEM;
        for (int i = 0; r == 0 && i < n; i++) {
                if (i < 3)
                        snprintf(text[i], sizeof text[i], "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
                else
                        snprintf(text[i], sizeof text[i], "\xe2\x96\x81t%d", i);
                toks[i] = text[i];
                types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
                scores[i] = -(float)i;
        }
        if (r == 0) {
                gguf_kv_str(w, "tokenizer.ggml.model", "llama");
                gguf_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (size_t)n);
                gguf_kv_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)n);
                gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n);
                gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
                gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
        }
        free(text);
        free(toks);
        free(scores);
        free(types);
        return r;
}

int gguf_from_hf(const char *dir, const char *out_path, uint32_t type, int dequantized, int synthetic_vocab,
                 struct dse_diag *reterr) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *cfg = slurp_text(path);
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        char *gen = slurp_text(path);
        struct dse_hparams hp;
        struct dse__hf_quant q;
        struct dse__st_set *st = NULL;
        int r = cfg ? dse__hf_parse_config(cfg, strlen(cfg), gen, gen ? strlen(gen) : 0, dir, &hp, &q, reterr) : -ENOENT;
        if (r == 0 && hp.arch != DSE_ARCH_LLAMA && hp.arch != DSE_ARCH_QWEN2)
                r = -EOPNOTSUPP;
        if (r == 0)
                r = dse__st_open_dir(dir, &st, reterr);
        free(cfg);
        free(gen);
        if (r < 0)
                return r;
        const char *arch = hp.arch == DSE_ARCH_LLAMA ? "llama" : "qwen2";
        struct gguf_writer *w = gguf_writer_new();
        char key[128];
        gguf_kv_str(w, "general.architecture", arch);
        gguf_kv_str(w, "general.name", "fixture");
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
        gguf_kv_u32(w, KEY("context_length"), (uint32_t)hp.max_position_embeddings);
        gguf_kv_u32(w, KEY("embedding_length"), (uint32_t)hp.hidden_size);
        gguf_kv_u32(w, KEY("block_count"), (uint32_t)hp.n_layers);
        gguf_kv_u32(w, KEY("feed_forward_length"), (uint32_t)hp.intermediate_size);
        gguf_kv_u32(w, KEY("attention.head_count"), (uint32_t)hp.n_heads);
        gguf_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)hp.n_kv_heads);
        gguf_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), hp.rms_norm_eps);
        gguf_kv_f32(w, KEY("rope.freq_base"), hp.rope_theta);
        gguf_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)hp.head_dim);
        if (hp.head_dim != hp.hidden_size / hp.n_heads) {
                gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)hp.head_dim);
                gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)hp.head_dim);
        }
        if (hp.rope_type == DSE_ROPE_LINEAR) {
                gguf_kv_str(w, KEY("rope.scaling.type"), "linear");
                gguf_kv_f32(w, KEY("rope.scaling.factor"), hp.rope_factor);
        } else if (hp.rope_type != DSE_ROPE_DEFAULT) {
                r = -EOPNOTSUPP; /* llama3 rope needs rope_freqs, which the importer refuses */
        }
        gguf_kv_u32(w, KEY("vocab_size"), (uint32_t)hp.vocab_size);
        gguf_kv_u32(w, "general.file_type", type == 0 ? 0 : type == 1 ? 1 : type == 8 ? 7 : 2);
        gguf_kv_u32(w, "general.quantization_version", 2);
        if (hp.bos_token_id >= 0)
                gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)hp.bos_token_id);
        if (hp.eos_token_id >= 0)
                gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)hp.eos_token_id);
        if (synthetic_vocab)
                r = add_synthetic_vocab(w, hp.vocab_size);
#undef KEY
        for (size_t i = 0; r == 0 && i < dse__st_n_tensors(st); i++) {
                const struct dse__st_tensor *t = dse__st_tensor_at(st, i);
                char name[128];
                int perm;
                if (gguf_name(t->name, name, sizeof name, &perm) < 0) {
                        r = -EINVAL;
                        break;
                }
                size_t n;
                float *x = read_f32(st, t, &n);
                if (!x) {
                        r = -EIO;
                        break;
                }
                int64_t ne[2] = {t->n_dims == 2 ? t->shape[1] : t->shape[0], t->n_dims == 2 ? t->shape[0] : 1};
                if (perm && hp.arch == DSE_ARCH_LLAMA)
                        permute_rows(x, ne[1], ne[0], perm == 1 ? hp.n_heads : hp.n_kv_heads);
                add_tensor(w, name, x, t->n_dims, ne, type, dequantized);
                free(x);
        }
        if (r == 0)
                r = gguf_writer_write(w, out_path);
        gguf_writer_free(w);
        dse__st_close(st);
        return r;
}
