/* A model written as GGUF in llama.cpp's converter layout (gguf_model.h). */
#include "gguf_model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"

enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q8_0 = 8 };

__attribute__((format(printf, 3, 4))) static int fail(struct dse_diag *reterr, int err, const char *fmt, ...) {
        if (reterr) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(reterr->msg, sizeof reterr->msg, fmt, ap);
                va_end(ap);
        }
        return err;
}

/* How one GGUF tensor is made from the source's Hugging Face tensors. */
enum fill_kind {
        FILL_PLAIN,   /* one HF tensor, rows permuted over perm_heads when > 0 */
        FILL_EXPERTS, /* hf holds "%d": n_experts HF tensors stacked */
        FILL_K_B,     /* kv_b_proj's nope rows per head, transposed */
        FILL_V_B,     /* kv_b_proj's v rows per head */
};

struct fill_ctx {
        const struct gguf_model_source *source;
        char hf[DSE_TENSOR_NAME_MAX];
        enum fill_kind kind;
        int64_t rows, cols; /* of one HF tensor */
        int32_t perm_heads, n_experts, heads, nope, v;
        uint32_t type; /* encoding: F32, F16, Q8_0, Q4_0 */
        int dequantized;
};

static size_t encoded_bytes(uint32_t type, size_t n) {
        return type == GGML_F32 ? n * 4 : type == GGML_F16 ? n * 2 : type == GGML_Q8_0 ? n / 32 * 34 : n / 32 * 18;
}

/* n values (a multiple of 32 for the block types) as `type`, or as the F32 of ggml's
 * dequantised blocks when dequantized. */
static void encode(const struct fill_ctx *c, float *x, size_t n, uint8_t *out) {
        if (c->type == GGML_F32) {
                memcpy(out, x, n * 4);
                return;
        }
        if (c->type == GGML_F16) {
                for (size_t i = 0; i < n; i++) {
                        uint16_t h = gguf_f32_to_f16(x[i]);
                        out[2 * i] = (uint8_t)h;
                        out[2 * i + 1] = (uint8_t)(h >> 8);
                }
                return;
        }
        size_t bb = c->type == GGML_Q8_0 ? 34 : 18;
        uint8_t *q = c->dequantized ? malloc(n / 32 * bb) : out;
        if (!q)
                abort();
        if (c->type == GGML_Q8_0)
                gguf_quantize_q8_0(x, q, (int64_t)n);
        else
                gguf_quantize_q4_0(x, q, (int64_t)n);
        if (c->dequantized) {
                for (size_t i = 0; i < n; i++)
                        x[i] = c->source->block_value(c->type, q + (i / 32) * bb, (int)(i % 32));
                memcpy(out, x, n * 4);
                free(q);
        }
}

/* llama.cpp's permute(): row (h, j, i) = h*hd + j*hd/2 + i goes to h*hd + 2i + j */
static void permute_rows(const float *w, float *out, int64_t rows, int64_t cols, int heads) {
        int64_t hd = rows / heads, half = hd / 2;
        for (int64_t r = 0; r < rows; r++) {
                int64_t h = r / hd, j = (r % hd) / half, i = r % half;
                memcpy(out + (h * hd + 2 * i + j) * cols, w + r * cols, (size_t)cols * sizeof *w);
        }
}

static int fill(const void *ctx, void *out, size_t bytes) {
        const struct fill_ctx *c = ctx;
        size_t n = (size_t)(c->rows * c->cols);
        int rearranged = c->perm_heads > 0 || c->kind == FILL_K_B || c->kind == FILL_V_B;
        float *x = malloc(n * sizeof *x), *y = rearranged ? malloc(n * sizeof *y) : NULL;
        int r = x && (y || !rearranged) ? 0 : -ENOMEM;
        int n_parts = c->kind == FILL_EXPERTS ? c->n_experts : 1;
        for (int e = 0; r == 0 && e < n_parts; e++) {
                char name[DSE_TENSOR_NAME_MAX + 16];
                if (c->kind == FILL_EXPERTS) {
                        const char *at = strstr(c->hf, "%d");
                        snprintf(name, sizeof name, "%.*s%d%s", (int)(at - c->hf), c->hf, e, at + 2);
                } else {
                        snprintf(name, sizeof name, "%s", c->hf);
                }
                if ((r = c->source->read(c->source->ctx, name, c->rows, c->cols, x)) < 0)
                        break;
                float *src = x;
                size_t m = n;
                if (c->kind == FILL_PLAIN && c->perm_heads > 0) {
                        permute_rows(x, y, c->rows, c->cols, c->perm_heads);
                        src = y;
                } else if (c->kind == FILL_K_B || c->kind == FILL_V_B) {
                        /* kv_b_proj [heads * (nope + v), kv_lora]: k_b[h][col][j] = row h*(nope+v)+j,
                         * v_b[h][i][col] = row h*(nope+v)+nope+i */
                        int64_t per = c->nope + c->v, kvr = c->cols;
                        m = 0;
                        for (int64_t h = 0; h < c->heads; h++) {
                                if (c->kind == FILL_K_B)
                                        for (int64_t col = 0; col < kvr; col++)
                                                for (int64_t j = 0; j < c->nope; j++)
                                                        y[m++] = x[(h * per + j) * kvr + col];
                                else
                                        for (int64_t i = 0; i < c->v * kvr; i++)
                                                y[m++] = x[(h * per + c->nope) * kvr + i];
                        }
                        src = y;
                }
                size_t part = encoded_bytes(c->dequantized ? GGML_F32 : c->type, m);
                if ((size_t)(e + 1) * part > bytes) {
                        r = -EINVAL;
                        break;
                }
                encode(c, src, m, (uint8_t *)out + (size_t)e * part);
        }
        free(x);
        free(y);
        return r;
}

/* ---- names ------------------------------------------------------------------------- */

static const char *const llama_names[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},   {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},     {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},     {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},         {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},         {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.down_proj.weight", "ffn_down.weight"},
};

static const char *const deepseek2_names[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
        {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
        {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
        {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
        {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
        {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
        {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.experts.0.gate_proj.weight", "ffn_gate_exps.weight"},
        {"mlp.experts.0.up_proj.weight", "ffn_up_exps.weight"},
        {"mlp.experts.0.down_proj.weight", "ffn_down_exps.weight"},
};

static int is_deepseek(const struct dse_hparams *hp) {
        return hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3;
}

/* The GGUF name of HF tensor hf (0), -ENOENT for a name the layout has none for, 1 for
 * a routed expert other than expert 0 (written stacked with expert 0). */
static int gguf_name(const struct dse_hparams *hp, const char *hf, char *out, size_t size) {
        if (strcmp(hf, "model.embed_tokens.weight") == 0)
                return snprintf(out, size, "token_embd.weight"), 0;
        if (strcmp(hf, "model.norm.weight") == 0)
                return snprintf(out, size, "output_norm.weight"), 0;
        if (strcmp(hf, "lm_head.weight") == 0)
                return snprintf(out, size, "output.weight"), 0;
        int layer, n = 0, e, k = 0;
        if (sscanf(hf, "model.layers.%d.%n", &layer, &n) != 1 || n == 0)
                return -ENOENT;
        const char *rest = hf + n;
        if (sscanf(rest, "mlp.experts.%d.%n", &e, &k) == 1 && k > 0 && e > 0)
                return 1;
        const char *const(*names)[2] = is_deepseek(hp) ? deepseek2_names : llama_names;
        size_t n_names = is_deepseek(hp) ? sizeof deepseek2_names / sizeof deepseek2_names[0]
                                         : sizeof llama_names / sizeof llama_names[0];
        for (size_t i = 0; i < n_names; i++)
                if (strcmp(rest, names[i][0]) == 0)
                        return snprintf(out, size, "blk.%d.%s", layer, names[i][1]), 0;
        return -ENOENT;
}

/* ---- metadata ---------------------------------------------------------------------- */

static int add_synthetic_vocab(struct gguf_writer *w, int n) {
        char(*text)[16] = calloc((size_t)n, sizeof *text);
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

#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)

static int add_deepseek2_keys(struct gguf_writer *w, const struct dse_hparams *hp, unsigned flags,
                              struct dse_diag *reterr) {
        const char *arch = "deepseek2";
        char key[128];
        if (hp->moe_layer_freq != 1 && hp->n_routed_experts > 0)
                return fail(reterr, -EOPNOTSUPP, "deepseek2 GGUF: moe_layer_freq %d (llama.cpp has MoE on every layer "
                            "after the leading dense ones)", hp->moe_layer_freq);
        if (hp->arch == DSE_ARCH_DEEPSEEK_V2 && hp->norm_topk_prob && hp->routed_scaling_factor != 1.0f)
                return fail(reterr, -EOPNOTSUPP, "deepseek2 GGUF: DeepSeek-V2 routing with norm_topk_prob and "
                            "routed_scaling_factor %g (llama.cpp scales after normalising, as V3 does)",
                            (double)hp->routed_scaling_factor);
        int kv_heads_one = (flags & GGUF_MODEL_KV_B_SPLIT) != 0;
        int32_t qk = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
        gguf_kv_u32(w, KEY("attention.head_count_kv"), kv_heads_one ? 1u : (uint32_t)hp->n_heads);
        gguf_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)hp->qk_rope_head_dim);
        gguf_kv_u32(w, KEY("leading_dense_block_count"), (uint32_t)hp->first_k_dense_replace);
        if (hp->q_lora_rank > 0)
                gguf_kv_u32(w, KEY("attention.q_lora_rank"), (uint32_t)hp->q_lora_rank);
        gguf_kv_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)hp->kv_lora_rank);
        if (kv_heads_one) {
                gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)(hp->kv_lora_rank + hp->qk_rope_head_dim));
                gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)hp->kv_lora_rank);
                gguf_kv_u32(w, KEY("attention.key_length_mla"), (uint32_t)qk);
                gguf_kv_u32(w, KEY("attention.value_length_mla"), (uint32_t)hp->v_head_dim);
        } else {
                gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)qk);
                gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)hp->v_head_dim);
        }
        gguf_kv_u32(w, KEY("expert_feed_forward_length"), (uint32_t)hp->moe_intermediate_size);
        if (hp->n_routed_experts > 0) {
                gguf_kv_u32(w, KEY("expert_count"), (uint32_t)hp->n_routed_experts);
                gguf_kv_u32(w, KEY("expert_used_count"), (uint32_t)hp->n_experts_per_tok);
        }
        gguf_kv_u32(w, KEY("expert_shared_count"), (uint32_t)hp->n_shared_experts);
        gguf_kv_f32(w, KEY("expert_weights_scale"), hp->routed_scaling_factor);
        if (hp->norm_topk_prob)
                gguf_kv_bool(w, KEY("expert_weights_norm"), 1);
        gguf_kv_u32(w, KEY("expert_gating_func"), hp->scoring_func == DSE_MOE_SIGMOID ? 2u : 1u);
        if (hp->n_group > 1) {
                gguf_kv_u32(w, KEY("expert_group_count"), (uint32_t)hp->n_group);
                gguf_kv_u32(w, KEY("expert_group_used_count"), (uint32_t)hp->topk_group);
        }
        if (hp->rope_type == DSE_ROPE_YARN) {
                if (hp->rope_mscale != hp->rope_mscale_all_dim)
                        return fail(reterr, -EOPNOTSUPP, "deepseek2 GGUF: YaRN mscale %g != mscale_all_dim %g (llama.cpp "
                                    "keeps the cos/sin amplitude at 1)",
                                    (double)hp->rope_mscale, (double)hp->rope_mscale_all_dim);
                gguf_kv_str(w, KEY("rope.scaling.type"), "yarn");
                gguf_kv_f32(w, KEY("rope.scaling.factor"), hp->rope_factor);
                gguf_kv_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)hp->rope_original_max_pos);
                gguf_kv_f32(w, KEY("rope.scaling.yarn_log_multiplier"), (float)(0.1 * (double)hp->rope_mscale_all_dim));
                if (hp->rope_beta_fast != 32.0f)
                        gguf_kv_f32(w, KEY("rope.scaling.yarn_beta_fast"), hp->rope_beta_fast);
                if (hp->rope_beta_slow != 1.0f)
                        gguf_kv_f32(w, KEY("rope.scaling.yarn_beta_slow"), hp->rope_beta_slow);
        } else if (hp->rope_type != DSE_ROPE_DEFAULT) {
                return fail(reterr, -EOPNOTSUPP, "deepseek2 GGUF: rope scaling other than YaRN");
        }
        if (hp->n_group > 1 && hp->topk_method != DSE_MOE_NOAUX_TC)
                return fail(reterr, -EOPNOTSUPP, "deepseek2 GGUF: group_limited_greedy routing over %d groups (llama.cpp "
                            "ranks a group by the sum of its two best expert scores, DeepSeek-V3's noaux_tc rule, "
                            "not by its best score)", hp->n_group);
        return 0;
}

static int add_keys(struct gguf_writer *w, const struct dse_hparams *hp, uint32_t type, unsigned flags,
                    struct dse_diag *reterr) {
        const char *arch = hp->arch == DSE_ARCH_LLAMA ? "llama" : hp->arch == DSE_ARCH_QWEN2 ? "qwen2" : "deepseek2";
        char key[128];
        gguf_kv_str(w, "general.architecture", arch);
        gguf_kv_str(w, "general.name", "dsvisor");
        gguf_kv_u32(w, KEY("context_length"), (uint32_t)hp->max_position_embeddings);
        gguf_kv_u32(w, KEY("embedding_length"), (uint32_t)hp->hidden_size);
        gguf_kv_u32(w, KEY("block_count"), (uint32_t)hp->n_layers);
        gguf_kv_u32(w, KEY("feed_forward_length"), (uint32_t)hp->intermediate_size);
        gguf_kv_u32(w, KEY("attention.head_count"), (uint32_t)hp->n_heads);
        gguf_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), hp->rms_norm_eps);
        gguf_kv_f32(w, KEY("rope.freq_base"), hp->rope_theta);
        gguf_kv_u32(w, KEY("vocab_size"), (uint32_t)hp->vocab_size);
        int r = 0;
        if (is_deepseek(hp)) {
                r = add_deepseek2_keys(w, hp, flags, reterr);
        } else {
                gguf_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)hp->n_kv_heads);
                gguf_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)hp->head_dim);
                if (hp->head_dim != hp->hidden_size / hp->n_heads) {
                        gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)hp->head_dim);
                        gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)hp->head_dim);
                }
                if (hp->rope_type == DSE_ROPE_LINEAR) {
                        gguf_kv_str(w, KEY("rope.scaling.type"), "linear");
                        gguf_kv_f32(w, KEY("rope.scaling.factor"), hp->rope_factor);
                } else if (hp->rope_type != DSE_ROPE_DEFAULT) {
                        r = fail(reterr, -EOPNOTSUPP, "%s GGUF: rope scaling other than linear (llama3 rope needs "
                                 "rope_freqs, which the importer refuses)", arch);
                }
        }
        gguf_kv_u32(w, "general.file_type", type == GGML_F32 ? 0 : type == GGML_F16 ? 1 : type == GGML_Q8_0 ? 7 : 2);
        gguf_kv_u32(w, "general.quantization_version", 2);
        if (hp->bos_token_id >= 0)
                gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)hp->bos_token_id);
        if (hp->eos_token_id >= 0)
                gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)hp->eos_token_id);
        if (r == 0 && (flags & GGUF_MODEL_SYNTHETIC_VOCAB))
                r = add_synthetic_vocab(w, hp->vocab_size);
        return r;
}

#undef KEY

/* ---- tensors ----------------------------------------------------------------------- */

static void add(struct gguf_writer *w, const char *name, int n_dims, const int64_t *ne, struct fill_ctx *c,
                int router) {
        size_t n = 1;
        for (int d = 0; d < n_dims; d++)
                n *= (size_t)ne[d];
        uint32_t want = c->type;
        if (n_dims == 1 || router || ((want == GGML_Q8_0 || want == GGML_Q4_0) && ne[0] % 32))
                c->type = GGML_F32;
        if (c->type != GGML_Q8_0 && c->type != GGML_Q4_0)
                c->dequantized = 0;
        uint32_t stored = c->dequantized ? GGML_F32 : c->type;
        gguf_tensor_fill(w, name, stored, n_dims, ne, encoded_bytes(stored, n), fill, c, sizeof *c);
}

int gguf_model_write(const struct dse_hparams *hp, const struct gguf_model_source *source, uint32_t type,
                     unsigned flags, const char *path, struct dse_diag *reterr) {
        if (type != GGML_F32 && type != GGML_F16 && type != GGML_Q8_0 && type != GGML_Q4_0)
                return fail(reterr, -EINVAL, "GGUF: ggml type %u is not one this writer makes (F32, F16, Q8_0, Q4_0)",
                            type);
        if ((flags & GGUF_MODEL_DEQUANTIZED) && !source->block_value)
                return -EINVAL;
        /* DeepSeek-V3's MTP modules are dropped, as llama.cpp's converter drops them for
         * deepseek2 */
        struct dse_hparams main_hp = *hp;
        main_hp.n_mtp_layers = 0;
        struct dse_schema_entry *entries = NULL;
        size_t n_entries = 0;
        int r = dse__model_schema(&main_hp, SIZE_MAX, &entries, &n_entries);
        if (r < 0)
                return fail(reterr, r, "GGUF: the hyper-parameters describe no model");
        struct gguf_writer *w = gguf_writer_new();
        if (!w) {
                free(entries);
                return -ENOMEM;
        }
        r = add_keys(w, hp, type, flags, reterr);
        for (size_t i = 0; r == 0 && i < n_entries; i++) {
                const struct dse_schema_entry *se = &entries[i];
                char name[DSE_TENSOR_NAME_MAX];
                int g = gguf_name(hp, se->name, name, sizeof name);
                if (g == 1)
                        continue;
                if (g < 0) {
                        r = fail(reterr, -EINVAL, "GGUF: no %s tensor name for '%s'", is_deepseek(hp) ? "deepseek2" : "llama",
                                 se->name);
                        break;
                }
                struct fill_ctx c = {.source = source, .kind = FILL_PLAIN, .type = type,
                                     .dequantized = (flags & GGUF_MODEL_DEQUANTIZED) != 0};
                snprintf(c.hf, sizeof c.hf, "%s", se->name);
                c.rows = se->n_dims == 2 ? se->shape[0] : 1;
                c.cols = se->n_dims == 2 ? se->shape[1] : se->shape[0];
                int64_t ne[3] = {c.cols, c.rows, 1};
                const char *ex = strstr(c.hf, "mlp.experts.0.");
                if (ex) {
                        /* "experts.0." -> "experts.%d." */
                        char tail[DSE_TENSOR_NAME_MAX];
                        snprintf(tail, sizeof tail, "%s", ex + strlen("mlp.experts.0"));
                        snprintf(c.hf + (ex - c.hf), sizeof c.hf - (size_t)(ex - c.hf), "mlp.experts.%%d%s", tail);
                        c.kind = FILL_EXPERTS;
                        c.n_experts = hp->n_routed_experts;
                        ne[2] = hp->n_routed_experts;
                        add(w, name, 3, ne, &c, 0);
                        continue;
                }
                if (is_deepseek(hp) && (flags & GGUF_MODEL_KV_B_SPLIT) && strstr(c.hf, "kv_b_proj")) {
                        c.heads = hp->n_heads;
                        c.nope = hp->qk_nope_head_dim;
                        c.v = hp->v_head_dim;
                        struct fill_ctx v = c;
                        char *suffix = strstr(name, "attn_kv_b");
                        snprintf(suffix, sizeof name - (size_t)(suffix - name), "attn_k_b.weight");
                        int64_t kne[3] = {hp->qk_nope_head_dim, hp->kv_lora_rank, hp->n_heads};
                        c.kind = FILL_K_B;
                        add(w, name, 3, kne, &c, 0);
                        snprintf(suffix, sizeof name - (size_t)(suffix - name), "attn_v_b.weight");
                        int64_t vne[3] = {hp->kv_lora_rank, hp->v_head_dim, hp->n_heads};
                        v.kind = FILL_V_B;
                        add(w, name, 3, vne, &v, 0);
                        continue;
                }
                if (hp->arch == DSE_ARCH_LLAMA && strstr(c.hf, "self_attn.q_proj.weight"))
                        c.perm_heads = hp->n_heads;
                if (hp->arch == DSE_ARCH_LLAMA && strstr(c.hf, "self_attn.k_proj.weight"))
                        c.perm_heads = hp->n_kv_heads;
                add(w, name, se->n_dims, ne, &c, se->kind == DSE_SCHEMA_ROUTER);
        }
        free(entries);
        if (r == 0 && (r = gguf_writer_write(w, path)) < 0 && reterr && !reterr->msg[0])
                fail(reterr, r, "%s: %s", path, strerror(-r));
        gguf_writer_free(w);
        return r;
}
