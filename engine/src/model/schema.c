/* The tensors each architecture expects, with their logical shapes: the shape check of
 * the loader and the converter's plan. Names and shapes follow the Hugging Face modeling
 * code (LlamaForCausalLM, Qwen2ForCausalLM, DeepseekV2/V3ForCausalLM):
 *   llama/qwen2 attention: q_proj [n_heads*head_dim, hidden], k/v_proj [n_kv*head_dim,
 *     hidden], o_proj [hidden, n_heads*head_dim]; qwen2 adds q/k/v biases.
 *   DeepSeek MLA: q_proj [n_heads*(nope+rope), hidden] or q_a_proj [q_lora, hidden] +
 *     q_a_layernorm [q_lora] + q_b_proj [n_heads*(nope+rope), q_lora];
 *     kv_a_proj_with_mqa [kv_lora+rope, hidden], kv_a_layernorm [kv_lora],
 *     kv_b_proj [n_heads*(nope+v), kv_lora], o_proj [hidden, n_heads*v]; or, split as
 *     llama.cpp's GGUF converter writes it (mla_kv_b_split), k_b_proj [n_heads*kv_lora,
 *     nope] (per head W_uk transposed) and v_b_proj [n_heads*v, kv_lora].
 *   DeepSeek MoE on layers >= first_k_dense_replace with layer % moe_layer_freq == 0. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

struct schema_list {
        struct dse_schema_entry *v;
        size_t n, cap, max; /* max: the most entries kept */
        int err;
        int cut; /* an entry past max was left out */
};

__attribute__((format(printf, 5, 6))) static void add(struct schema_list *l, enum dse_schema_kind kind,
                                                      int64_t d0, int64_t d1, const char *fmt, ...) {
        if (l->err)
                return;
        if (l->n == l->max) {
                l->cut = 1;
                return;
        }
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 256;
                struct dse_schema_entry *v = realloc(l->v, cap * sizeof *v);
                if (!v) {
                        l->err = -ENOMEM;
                        return;
                }
                l->v = v;
                l->cap = cap;
        }
        struct dse_schema_entry *e = &l->v[l->n++];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->name, sizeof e->name, fmt, ap);
        va_end(ap);
        e->kind = kind;
        e->n_dims = d1 ? 2 : 1;
        e->shape[0] = d0;
        e->shape[1] = d1;
}

static void add_mlp(struct schema_list *l, int layer, const char *part, int64_t hidden, int64_t inter) {
        add(l, DSE_SCHEMA_LINEAR, inter, hidden, "model.layers.%d.mlp.%sgate_proj.weight", layer, part);
        add(l, DSE_SCHEMA_LINEAR, inter, hidden, "model.layers.%d.mlp.%sup_proj.weight", layer, part);
        add(l, DSE_SCHEMA_LINEAR, hidden, inter, "model.layers.%d.mlp.%sdown_proj.weight", layer, part);
}

static void add_llama_attn(struct schema_list *l, const struct dse_hparams *hp, int i) {
        int64_t hidden = hp->hidden_size;
        int64_t q = (int64_t)hp->n_heads * hp->head_dim, kv = (int64_t)hp->n_kv_heads * hp->head_dim;
        add(l, DSE_SCHEMA_LINEAR, q, hidden, "model.layers.%d.self_attn.q_proj.weight", i);
        add(l, DSE_SCHEMA_LINEAR, kv, hidden, "model.layers.%d.self_attn.k_proj.weight", i);
        add(l, DSE_SCHEMA_LINEAR, kv, hidden, "model.layers.%d.self_attn.v_proj.weight", i);
        if (hp->attention_bias) {
                add(l, DSE_SCHEMA_BIAS, q, 0, "model.layers.%d.self_attn.q_proj.bias", i);
                add(l, DSE_SCHEMA_BIAS, kv, 0, "model.layers.%d.self_attn.k_proj.bias", i);
                add(l, DSE_SCHEMA_BIAS, kv, 0, "model.layers.%d.self_attn.v_proj.bias", i);
        }
        add(l, DSE_SCHEMA_LINEAR, hidden, q, "model.layers.%d.self_attn.o_proj.weight", i);
}

static void add_mla(struct schema_list *l, const struct dse_hparams *hp, int i) {
        int64_t hidden = hp->hidden_size, heads = hp->n_heads;
        int64_t qk = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
        if (hp->q_lora_rank > 0) {
                add(l, DSE_SCHEMA_LINEAR, hp->q_lora_rank, hidden, "model.layers.%d.self_attn.q_a_proj.weight", i);
                add(l, DSE_SCHEMA_NORM, hp->q_lora_rank, 0, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
                add(l, DSE_SCHEMA_LINEAR, heads * qk, hp->q_lora_rank, "model.layers.%d.self_attn.q_b_proj.weight", i);
        } else {
                add(l, DSE_SCHEMA_LINEAR, heads * qk, hidden, "model.layers.%d.self_attn.q_proj.weight", i);
        }
        add(l, DSE_SCHEMA_LINEAR, (int64_t)hp->kv_lora_rank + hp->qk_rope_head_dim, hidden,
            "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
        add(l, DSE_SCHEMA_NORM, hp->kv_lora_rank, 0, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
        if (hp->mla_kv_b_split) {
                add(l, DSE_SCHEMA_LINEAR, heads * hp->kv_lora_rank, hp->qk_nope_head_dim,
                    "model.layers.%d.self_attn.k_b_proj.weight", i);
                add(l, DSE_SCHEMA_LINEAR, heads * hp->v_head_dim, hp->kv_lora_rank,
                    "model.layers.%d.self_attn.v_b_proj.weight", i);
        } else {
                add(l, DSE_SCHEMA_LINEAR, heads * (hp->qk_nope_head_dim + hp->v_head_dim), hp->kv_lora_rank,
                    "model.layers.%d.self_attn.kv_b_proj.weight", i);
        }
        add(l, DSE_SCHEMA_LINEAR, hidden, heads * hp->v_head_dim, "model.layers.%d.self_attn.o_proj.weight", i);
}

static int is_moe_layer(const struct dse_hparams *hp, int i) {
        return hp->n_routed_experts > 0 && i >= hp->first_k_dense_replace && hp->moe_layer_freq > 0 &&
               i % hp->moe_layer_freq == 0;
}

static void add_deepseek_mlp(struct schema_list *l, const struct dse_hparams *hp, int i) {
        int64_t hidden = hp->hidden_size;
        if (!is_moe_layer(hp, i)) {
                add_mlp(l, i, "", hidden, hp->intermediate_size);
                return;
        }
        add(l, DSE_SCHEMA_ROUTER, hp->n_routed_experts, hidden, "model.layers.%d.mlp.gate.weight", i);
        if (hp->topk_method == DSE_MOE_NOAUX_TC)
                add(l, DSE_SCHEMA_ROUTER_BIAS, hp->n_routed_experts, 0, "model.layers.%d.mlp.gate.e_score_correction_bias",
                    i);
        char part[48];
        for (int e = 0; e < hp->n_routed_experts && !l->err && !l->cut; e++) {
                snprintf(part, sizeof part, "experts.%d.", e);
                add_mlp(l, i, part, hidden, hp->moe_intermediate_size);
        }
        if (hp->n_shared_experts > 0)
                add_mlp(l, i, "shared_experts.", hidden, (int64_t)hp->moe_intermediate_size * hp->n_shared_experts);
}

int dse__model_schema_head(const struct dse_hparams *hp, size_t max_entries, struct dse_schema_entry **ret_entries,
                           size_t *ret_n, int *ret_whole) {
        if (!hp || !ret_entries || !ret_n || !ret_whole || hp->arch < 0 || hp->arch >= DSE_ARCH_COUNT || hp->n_layers <= 0)
                return -EINVAL;
        int deepseek = hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3;
        /* add() does nothing after an error or once max_entries are kept, and every loop
         * stops there too, so hyper-parameters that call for millions of entries cost no
         * more than max_entries of them */
        struct schema_list l = {.max = max_entries};
        int64_t hidden = hp->hidden_size;

        add(&l, DSE_SCHEMA_EMBED, hp->vocab_size, hidden, "model.embed_tokens.weight");
        for (int i = 0; i < hp->n_layers && !l.err && !l.cut; i++) {
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.input_layernorm.weight", i);
                if (deepseek)
                        add_mla(&l, hp, i);
                else
                        add_llama_attn(&l, hp, i);
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.post_attention_layernorm.weight", i);
                if (deepseek)
                        add_deepseek_mlp(&l, hp, i);
                else
                        add_mlp(&l, i, "", hidden, hp->intermediate_size);
        }
        /* DeepSeek-V3 MTP modules: a decoder layer with enorm, hnorm, eh_proj and
         * shared_head.norm; their embed_tokens and shared_head.head are the main model's
         * (the converter drops the checkpoint's copies) */
        for (int m = 0; m < hp->n_mtp_layers && !l.err && !l.cut; m++) {
                int i = hp->n_layers + m;
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.enorm.weight", i);
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.hnorm.weight", i);
                add(&l, DSE_SCHEMA_LINEAR, hidden, 2 * hidden, "model.layers.%d.eh_proj.weight", i);
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.input_layernorm.weight", i);
                add_mla(&l, hp, i);
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.post_attention_layernorm.weight", i);
                add_deepseek_mlp(&l, hp, i);
                add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.layers.%d.shared_head.norm.weight", i);
        }
        add(&l, DSE_SCHEMA_NORM, hidden, 0, "model.norm.weight");
        if (!hp->tie_word_embeddings)
                add(&l, DSE_SCHEMA_LM_HEAD, hp->vocab_size, hidden, "lm_head.weight");
        if (l.err) {
                free(l.v);
                return l.err;
        }
        *ret_entries = l.v;
        *ret_n = l.n;
        *ret_whole = !l.cut;
        return 0;
}

int dse__model_schema(const struct dse_hparams *hp, size_t max_entries, struct dse_schema_entry **ret_entries,
                      size_t *ret_n) {
        struct dse_schema_entry *v;
        size_t n;
        int whole;
        int r = dse__model_schema_head(hp, max_entries, &v, &n, &whole);
        if (r < 0)
                return r;
        if (!whole) {
                free(v);
                return -E2BIG;
        }
        *ret_entries = v;
        *ret_n = n;
        return 0;
}
