/* A GGUF model as a converter source: hyper-parameters from the metadata, and the GGUF
 * tensors presented under their Hugging Face names and shapes (dse__st_source), so the
 * converter plans, checks and streams them as it does a safetensors folder.
 *
 * Each Hugging Face tensor is read from one GGUF tensor: F32/F16/BF16 as stored, every
 * other type dequantised to F32 exactly as ggml's reference does (gguf_types.c), so no
 * value changes; Q8_0/Q5_0/Q4_0 matrices can also be read as their blocks, which the
 * converter keeps as native Q8/Q4. llama.cpp's converter
 * permutes the rows of llama's attn_q/attn_k from the Hugging Face rotate-half order to
 * interleaved pairs (ggml's NORM rope); reading undoes it row by row.
 *
 * deepseek2 (convert_hf_to_gguf.py DeepseekV2Model): the routed experts of a layer are
 * stacked into one 3-D tensor per projection (ffn_{gate,up,down}_exps, ne [cols, rows,
 * n_expert]); each expert is read as its slice of rows. kv_b_proj is either attn_kv_b as
 * is, or (newer converters) split per head into attn_k_b (the nope rows, transposed: ne
 * [nope, kv_lora, heads]) and attn_v_b (the v rows: ne [kv_lora, v, heads]); the split
 * form is kept as it is (hp->mla_kv_b_split), as k_b_proj [heads * kv_lora, nope] and
 * v_b_proj [heads * v, kv_lora], so its blocks stay as written. DeepSeek's rope pairs are
 * interleaved in the Hugging Face checkpoint already, so nothing is permuted. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../internal.h"
#include "gguf.h"

struct spec {
        char name[DSE_TENSOR_NAME_MAX]; /* Hugging Face name; specs are sorted by it */
        const struct dse__gguf_tensor *src;
        uint64_t first_row;  /* of the GGUF tensor's rows (ne[1] * ne[2] ...), for expert slices */
        int64_t rows, cols;  /* Hugging Face [rows, cols]; 1-D: rows 1 */
        int32_t perm_heads;  /* > 0: undo llama.cpp's q/k row permutation over this many heads */
        enum dse__st_dtype dtype;
};

struct gguf_source {
        char *path;
        int fd;
        const uint8_t *map;
        size_t map_size;
        struct dse__gguf *g;
        struct spec *specs;
        size_t n_specs;
        uint8_t *row_buf; /* one quantized row */
        size_t row_buf_size;
};

static void source_close(void *ctx) {
        struct gguf_source *s = ctx;
        if (!s)
                return;
        dse__gguf_free(s->g);
        if (s->map)
                munmap((void *)s->map, s->map_size);
        if (s->fd >= 0)
                close(s->fd);
        free(s->row_buf);
        free(s->specs);
        free(s->path);
        free(s);
}

static int cmp_spec(const void *a, const void *b) {
        return strcmp(((const struct spec *)a)->name, ((const struct spec *)b)->name);
}

static int pread_full(struct gguf_source *s, const char *tensor, void *buf, size_t n, uint64_t off,
                      struct dse_diag *reterr) {
        uint8_t *p = buf;
        while (n) {
                ssize_t k = pread(s->fd, p, n, (off_t)off);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return dse__fail(reterr, k < 0 ? -errno : -EBADMSG, "%s: tensor '%s': %s", s->path, tensor,
                                         k < 0 ? strerror(errno) : "file truncated");
                p += k;
                n -= (size_t)k;
                off += (uint64_t)k;
        }
        return 0;
}

/* The GGUF row holding Hugging Face row r of a permuted q/k weight: the converter wrote
 * HF row (head h, half j, pair i) = h*hd + j*hd/2 + i at h*hd + 2i + j. */
static uint64_t source_row(const struct spec *sp, int64_t r) {
        if (sp->perm_heads <= 0)
                return sp->first_row + (uint64_t)r;
        int64_t hd = sp->rows / sp->perm_heads, half = hd / 2;
        int64_t h = r / hd, j = (r % hd) / half, i = r % half;
        return sp->first_row + (uint64_t)(h * hd + 2 * i + j);
}

static const struct spec *find_spec(const struct gguf_source *s, const struct dse__st_tensor *t) {
        struct spec key;
        snprintf(key.name, sizeof key.name, "%s", t->name);
        return bsearch(&key, s->specs, s->n_specs, sizeof key, cmp_spec);
}

static uint32_t source_ggml_type(void *ctx, const struct dse__st_tensor *t) {
        const struct spec *sp = find_spec(ctx, t);
        return sp ? sp->src->type : DSE_GGML_F32;
}

static uint64_t row_bytes(const struct dse__gguf_tensor *g) {
        return (uint64_t)(g->ne[0] / dse__ggml_block_elems(g->type)) * dse__ggml_block_bytes(g->type);
}

static int source_read_blocks(void *ctx, const struct dse__st_tensor *t, int64_t row0, int64_t n_rows, void *buf,
                              struct dse_diag *reterr) {
        struct gguf_source *s = ctx;
        const struct spec *sp = find_spec(s, t);
        if (!sp || row0 < 0 || n_rows < 0 || row0 + n_rows > sp->rows)
                return -EINVAL;
        const struct dse__gguf_tensor *g = sp->src;
        uint64_t src_row = (uint64_t)(sp->cols / dse__ggml_block_elems(g->type)) * dse__ggml_block_bytes(g->type);
        uint64_t base = s->g->data_offset + g->offset;
        uint8_t *out = buf;
        for (int64_t r = 0; r < n_rows;) {
                int64_t run = sp->perm_heads > 0 ? 1 : n_rows - r;
                int e = pread_full(s, g->name, out + (uint64_t)r * src_row, (size_t)(src_row * (uint64_t)run),
                                   base + source_row(sp, row0 + r) * src_row, reterr);
                if (e < 0)
                        return e;
                r += run;
        }
        return 0;
}

static int source_read(void *ctx, const struct dse__st_tensor *t, uint64_t off, void *buf, size_t n,
                       struct dse_diag *reterr) {
        struct gguf_source *s = ctx;
        const struct spec *sp = find_spec(s, t);
        if (!sp)
                return -EINVAL;
        const struct dse__gguf_tensor *g = sp->src;
        size_t es = dse__st_dtype_size(sp->dtype);
        uint64_t out_row = (uint64_t)sp->cols * es;
        if (off % out_row || n % out_row)
                return dse__fail(reterr, -EINVAL, "%s: tensor '%s': read not in whole rows", s->path, t->name);
        uint64_t src_row = (uint64_t)(sp->cols / dse__ggml_block_elems(g->type)) * dse__ggml_block_bytes(g->type);
        uint64_t base = s->g->data_offset + g->offset;
        int64_t r0 = (int64_t)(off / out_row), nr = (int64_t)(n / out_row);
        uint8_t *out = buf;
        int same = sp->dtype != DSE_ST_F32 || g->type == DSE_GGML_F32; /* stored as read */
        for (int64_t r = 0; r < nr;) {
                /* runs of consecutive source rows are read at once when no conversion is needed */
                uint64_t sr = source_row(sp, r0 + r);
                int64_t run = 1;
                if (same && sp->perm_heads <= 0)
                        run = nr - r;
                uint8_t *dst = same ? out + (uint64_t)r * out_row : s->row_buf;
                int e = pread_full(s, g->name, dst, (size_t)(src_row * (uint64_t)run), base + sr * src_row, reterr);
                if (e < 0)
                        return e;
                if (!same)
                        dse__ggml_dequantize(g->type, s->row_buf, (float *)(out + (uint64_t)r * out_row), sp->cols);
                r += run;
        }
        return 0;
}

/* ---- names and metadata ------------------------------------------------------------ */

struct import {
        const char *what;
        struct dse__gguf *g;
        const char *arch; /* the GGUF architecture name */
        struct dse_hparams *hp;
        struct dse_diag *reterr;
};

static int get_int(struct import *im, const char *suffix, int required, int64_t dflt, int32_t *ret) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", im->arch, suffix);
        int64_t v = dflt;
        int r = dse__gguf_get_i64(im->g, im->what, key, &v, im->reterr);
        if (r == -ENOENT && required)
                return dse__fail(im->reterr, -EBADMSG, "%s: required key '%s' is missing", im->what, key);
        if (r < 0 && r != -ENOENT)
                return r;
        if (v < INT32_MIN || v > INT32_MAX)
                return dse__fail(im->reterr, -EBADMSG, "%s: key '%s': %lld is out of range", im->what, key, (long long)v);
        *ret = (int32_t)v;
        return 0;
}

static int get_float(struct import *im, const char *suffix, float dflt, float *ret) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", im->arch, suffix);
        double v = dflt;
        int r = dse__gguf_get_f64(im->g, im->what, key, &v, im->reterr);
        if (r < 0 && r != -ENOENT)
                return r;
        *ret = (float)v;
        return 0;
}

static int has_key(struct import *im, const char *suffix) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", im->arch, suffix);
        return dse__gguf_find(im->g, key) != NULL;
}

/* deepseek2's YaRN as llama.cpp runs it: the cos/sin amplitude is always 1 (its graph
 * divides out the amplitude ggml's YaRN rope applies) and the softmax scale grows by
 * (1 + yarn_log_multiplier * ln(factor))^2, the converter writing 0.1 * mscale_all_dim:
 * in DeepSeek's terms mscale = mscale_all_dim = yarn_log_multiplier / 0.1. */
static int parse_yarn(struct import *im) {
        struct dse_hparams *hp = im->hp;
        static const char *const unsupported[] = {"rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"};
        for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
                if (has_key(im, unsupported[i]))
                        return dse__fail(im->reterr, -EOPNOTSUPP, "%s: key '%s.%s' is not supported for GGUF", im->what,
                                         im->arch, unsupported[i]);
        float log_mul = 0;
        int r;
        hp->rope_type = DSE_ROPE_YARN;
        if ((r = get_float(im, "rope.scaling.factor", 1.0f, &hp->rope_factor)) < 0 ||
            (r = get_int(im, "rope.scaling.original_context_length", 1, 0, &hp->rope_original_max_pos)) < 0 ||
            (r = get_float(im, "rope.scaling.yarn_beta_fast", 32.0f, &hp->rope_beta_fast)) < 0 ||
            (r = get_float(im, "rope.scaling.yarn_beta_slow", 1.0f, &hp->rope_beta_slow)) < 0 ||
            (r = get_float(im, "rope.scaling.yarn_log_multiplier", 0.0f, &log_mul)) < 0)
                return r;
        if (!(hp->rope_factor > 0))
                return dse__fail(im->reterr, -EBADMSG, "%s: %s.rope.scaling.factor must be positive", im->what, im->arch);
        if (!(log_mul >= 0 && log_mul < 100))
                return dse__fail(im->reterr, -EBADMSG, "%s: %s.rope.scaling.yarn_log_multiplier %g is out of range",
                                 im->what, im->arch, (double)log_mul);
        hp->rope_mscale = hp->rope_mscale_all_dim = (float)((double)log_mul / 0.1);
        return 0;
}

static int parse_rope_scaling(struct import *im) {
        struct dse_hparams *hp = im->hp;
        char key[128];
        const char *type = NULL;
        size_t len = 0;
        snprintf(key, sizeof key, "%s.rope.scaling.type", im->arch);
        float legacy = 0;
        int r = get_float(im, "rope.scale_linear", 0, &legacy);
        if (r < 0)
                return r;
        r = dse__gguf_get_str(im->g, im->what, key, &type, &len, im->reterr);
        if (r < 0 && r != -ENOENT)
                return r;
        dse__hparams_rope_defaults(hp);
        if (r == -ENOENT && legacy > 0) {
                hp->rope_type = legacy == 1.0f ? DSE_ROPE_DEFAULT : DSE_ROPE_LINEAR;
                hp->rope_factor = legacy;
                return 0;
        }
        if (r == -ENOENT || (len == 4 && memcmp(type, "none", 4) == 0))
                return 0;
        if (len == 6 && memcmp(type, "linear", 6) == 0) {
                hp->rope_type = DSE_ROPE_LINEAR;
                if ((r = get_float(im, "rope.scaling.factor", 1.0f, &hp->rope_factor)) < 0)
                        return r;
                if (!(hp->rope_factor > 0))
                        return dse__fail(im->reterr, -EBADMSG, "%s: %s.rope.scaling.factor must be positive", im->what,
                                         im->arch);
                return 0;
        }
        int deepseek = hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3;
        if (deepseek && len == 4 && memcmp(type, "yarn", 4) == 0)
                return parse_yarn(im);
        return dse__fail(im->reterr, -EOPNOTSUPP, "%s: rope scaling type '%.*s' is not supported for GGUF %s (%s)",
                         im->what, (int)(len > 64 ? 64 : len), type, im->arch,
                         deepseek ? "none, linear, yarn" : "none, linear");
}

static int parse_attention(struct import *im) {
        struct dse_hparams *hp = im->hp;
        int r;
        if ((r = get_int(im, "attention.key_length", 0, hp->hidden_size / hp->n_heads, &hp->head_dim)) < 0)
                return r;
        int32_t vlen = hp->head_dim;
        if ((r = get_int(im, "attention.value_length", 0, hp->head_dim, &vlen)) < 0)
                return r;
        if (vlen != hp->head_dim)
                return dse__fail(im->reterr, -EOPNOTSUPP, "%s: key_length %d != value_length %d is not supported",
                                 im->what, hp->head_dim, vlen);
        int32_t rope_dims = hp->head_dim;
        if ((r = get_int(im, "rope.dimension_count", 0, hp->head_dim, &rope_dims)) < 0)
                return r;
        if (rope_dims != hp->head_dim)
                return dse__fail(im->reterr, -EOPNOTSUPP,
                                 "%s: %s.rope.dimension_count %d: partial rotary (head_dim %d) is not supported", im->what,
                                 im->arch, rope_dims, hp->head_dim);
        return 0;
}

/* deepseek2: MLA and MoE. Newer converters describe MLA as MQA over the latent
 * (head_count_kv 1, key_length kv_lora + rope, value_length kv_lora) and put the per-head
 * sizes in key_length_mla / value_length_mla; older ones write the per-head sizes as
 * key_length / value_length. Routing: gating func 1 softmax (groups > 1: DeepSeek-V2's
 * group_limited_greedy), 2 sigmoid with exp_probs_b (V3's noaux_tc). llama.cpp scales
 * the routed weights after normalising them, which is the V3 arithmetic, so a file that
 * both normalises and scales is read as V3. */
static int parse_deepseek2(struct import *im) {
        struct dse_hparams *hp = im->hp;
        int r;
        int32_t kv_heads = hp->n_kv_heads, klen = 0, vlen = 0, gating = 1;
        if ((r = get_int(im, "attention.kv_lora_rank", 1, 0, &hp->kv_lora_rank)) < 0 ||
            (r = get_int(im, "attention.q_lora_rank", 0, 0, &hp->q_lora_rank)) < 0 ||
            (r = get_int(im, "rope.dimension_count", 1, 0, &hp->qk_rope_head_dim)) < 0 ||
            (r = get_int(im, "attention.key_length", 1, 0, &klen)) < 0 ||
            (r = get_int(im, "attention.value_length", 1, 0, &vlen)) < 0 ||
            (r = get_int(im, "leading_dense_block_count", 0, 0, &hp->first_k_dense_replace)) < 0 ||
            (r = get_int(im, "expert_count", 0, 0, &hp->n_routed_experts)) < 0 ||
            (r = get_int(im, "expert_used_count", 0, 0, &hp->n_experts_per_tok)) < 0 ||
            (r = get_int(im, "expert_shared_count", 0, 0, &hp->n_shared_experts)) < 0 ||
            (r = get_int(im, "expert_feed_forward_length", 0, 0, &hp->moe_intermediate_size)) < 0 ||
            (r = get_int(im, "expert_group_count", 0, 1, &hp->n_group)) < 0 ||
            (r = get_int(im, "expert_group_used_count", 0, 1, &hp->topk_group)) < 0 ||
            (r = get_int(im, "expert_gating_func", 0, 1, &gating)) < 0 ||
            (r = get_float(im, "expert_weights_scale", 1.0f, &hp->routed_scaling_factor)) < 0)
                return r;
        char key[128];
        snprintf(key, sizeof key, "%s.expert_weights_norm", im->arch);
        const struct dse__gguf_kv *kv = dse__gguf_find(im->g, key);
        if (kv && (kv->type != DSE_GGUF_BOOL || kv->value_bytes != 1))
                return dse__fail(im->reterr, -EBADMSG, "%s: key '%s' must be a bool", im->what, key);
        hp->norm_topk_prob = kv && kv->value[0] != 0;
        if (has_key(im, "attention.key_length_mla")) {
                int32_t kmla = 0, vmla = 0;
                if ((r = get_int(im, "attention.key_length_mla", 1, 0, &kmla)) < 0 ||
                    (r = get_int(im, "attention.value_length_mla", 1, 0, &vmla)) < 0)
                        return r;
                if (kv_heads != 1 || (int64_t)klen != (int64_t)hp->kv_lora_rank + hp->qk_rope_head_dim ||
                    vlen != hp->kv_lora_rank)
                        return dse__fail(im->reterr, -EBADMSG,
                                         "%s: with key_length_mla, %s.attention.head_count_kv %d, key_length %d and "
                                         "value_length %d must be 1, kv_lora_rank + rope (%lld) and kv_lora_rank (%d)",
                                         im->what, im->arch, kv_heads, klen, vlen,
                                         (long long)hp->kv_lora_rank + hp->qk_rope_head_dim, hp->kv_lora_rank);
                klen = kmla;
                vlen = vmla;
        } else if (kv_heads != hp->n_heads && kv_heads != 1) {
                return dse__fail(im->reterr, -EBADMSG, "%s: %s.attention.head_count_kv %d must be 1 or head_count %d",
                                 im->what, im->arch, kv_heads, hp->n_heads);
        }
        if (klen <= hp->qk_rope_head_dim)
                return dse__fail(im->reterr, -EBADMSG, "%s: %s key length %d must exceed rope.dimension_count %d",
                                 im->what, im->arch, klen, hp->qk_rope_head_dim);
        hp->n_kv_heads = hp->n_heads; /* MLA: every head reads the shared latent */
        hp->qk_nope_head_dim = klen - hp->qk_rope_head_dim;
        hp->v_head_dim = vlen;
        hp->head_dim = klen;
        hp->moe_layer_freq = 1;
        if (gating == 1) {
                hp->scoring_func = DSE_MOE_SOFTMAX;
                hp->topk_method = hp->n_group > 1 ? DSE_MOE_GROUP_LIMITED_GREEDY : DSE_MOE_GREEDY;
        } else if (gating == 2) {
                hp->scoring_func = DSE_MOE_SIGMOID;
                hp->topk_method = DSE_MOE_NOAUX_TC;
        } else {
                return dse__fail(im->reterr, -EOPNOTSUPP,
                                 "%s: %s.expert_gating_func %d is not supported (1 softmax, 2 sigmoid)", im->what, im->arch,
                                 gating);
        }
        if (hp->scoring_func == DSE_MOE_SIGMOID || (hp->norm_topk_prob && hp->routed_scaling_factor != 1.0f))
                hp->arch = DSE_ARCH_DEEPSEEK_V3;
        /* layer 0 tells the form of kv_b_proj; every layer must keep it (check_kv_b_split) */
        hp->mla_kv_b_split = !dse__gguf_find_tensor(im->g, "blk.0.attn_kv_b.weight") &&
                             dse__gguf_find_tensor(im->g, "blk.0.attn_k_b.weight");
        return 0;
}

static int parse_hparams(struct import *im) {
        struct dse_hparams *hp = im->hp;
        const char *arch;
        size_t len;
        int r = dse__gguf_get_str(im->g, im->what, "general.architecture", &arch, &len, im->reterr);
        if (r == -ENOENT)
                return dse__fail(im->reterr, -EBADMSG, "%s: required key 'general.architecture' is missing", im->what);
        if (r < 0)
                return r;
        if (len == 5 && memcmp(arch, "llama", 5) == 0) {
                hp->arch = DSE_ARCH_LLAMA;
                im->arch = "llama";
        } else if (len == 5 && memcmp(arch, "qwen2", 5) == 0) {
                hp->arch = DSE_ARCH_QWEN2;
                im->arch = "qwen2";
                hp->attention_bias = 1;
        } else if (len == 9 && memcmp(arch, "deepseek2", 9) == 0) {
                hp->arch = DSE_ARCH_DEEPSEEK_V2; /* V3 when the routing says so (parse_deepseek2) */
                im->arch = "deepseek2";
        } else {
                return dse__fail(im->reterr, -EOPNOTSUPP,
                                 "%s: GGUF architecture '%.*s' is not supported (llama, qwen2, deepseek2)", im->what,
                                 (int)(len > 64 ? 64 : len), arch);
        }
        const struct dse__gguf_tensor *emb = dse__gguf_find_tensor(im->g, "token_embd.weight");
        if (!emb || emb->n_dims != 2)
                return dse__fail(im->reterr, -EBADMSG, "%s: tensor 'token_embd.weight' is missing or not 2-D", im->what);
        if ((r = get_int(im, "embedding_length", 1, 0, &hp->hidden_size)) < 0 ||
            (r = get_int(im, "block_count", 1, 0, &hp->n_layers)) < 0 ||
            (r = get_int(im, "feed_forward_length", 1, 0, &hp->intermediate_size)) < 0 ||
            (r = get_int(im, "attention.head_count", 1, 0, &hp->n_heads)) < 0 ||
            (r = get_int(im, "attention.head_count_kv", 0, hp->n_heads, &hp->n_kv_heads)) < 0 ||
            (r = get_int(im, "vocab_size", 0, emb->ne[1], &hp->vocab_size)) < 0 ||
            (r = get_int(im, "context_length", 0, hp->arch == DSE_ARCH_QWEN2 ? 32768 : 2048,
                         &hp->max_position_embeddings)) < 0 ||
            (r = get_float(im, "attention.layer_norm_rms_epsilon", 1e-6f, &hp->rms_norm_eps)) < 0 ||
            (r = get_float(im, "rope.freq_base", 10000.0f, &hp->rope_theta)) < 0)
                return r;
        if (hp->n_heads <= 0)
                return dse__fail(im->reterr, -EBADMSG, "%s: %s.attention.head_count must be positive", im->what, im->arch);
        if (hp->arch == DSE_ARCH_DEEPSEEK_V2) {
                if ((r = parse_deepseek2(im)) < 0)
                        return r;
        } else if ((r = parse_attention(im)) < 0) {
                return r;
        }
        hp->tie_word_embeddings = dse__gguf_find_tensor(im->g, "output.weight") == NULL;
        int64_t id;
        hp->bos_token_id = hp->eos_token_id = -1;
        if ((r = dse__gguf_get_i64(im->g, im->what, "tokenizer.ggml.bos_token_id", &id, im->reterr)) == 0)
                hp->bos_token_id = (int32_t)id;
        else if (r != -ENOENT)
                return r;
        if ((r = dse__gguf_get_i64(im->g, im->what, "tokenizer.ggml.eos_token_id", &id, im->reterr)) == 0)
                hp->eos_token_id = (int32_t)id;
        else if (r != -ENOENT)
                return r;
        if ((r = parse_rope_scaling(im)) < 0)
                return r;
        return dse__hparams_validate(hp, im->what, im->reterr);
}

/* GGUF tensor name -> Hugging Face name. */
enum map_kind {
        MAP_PLAIN,
        MAP_PERM_Q,  /* llama: rows permuted over the q heads */
        MAP_PERM_K,  /* llama: rows permuted over the kv heads */
        MAP_EXPERTS, /* deepseek2: stacked experts, hf holds "%d" for the expert */
        MAP_K_B,     /* deepseek2: kv_b_proj split per head (3-D), beside MAP_V_B */
        MAP_V_B,
};

struct name_map {
        const char *gguf, *hf;
        enum map_kind kind;
};

static const struct name_map llama_names[] = {
        {"attn_norm.weight", "input_layernorm.weight", MAP_PLAIN},
        {"ffn_norm.weight", "post_attention_layernorm.weight", MAP_PLAIN},
        {"attn_q.weight", "self_attn.q_proj.weight", MAP_PERM_Q},
        {"attn_k.weight", "self_attn.k_proj.weight", MAP_PERM_K},
        {"attn_v.weight", "self_attn.v_proj.weight", MAP_PLAIN},
        {"attn_output.weight", "self_attn.o_proj.weight", MAP_PLAIN},
        {"attn_q.bias", "self_attn.q_proj.bias", MAP_PLAIN},
        {"attn_k.bias", "self_attn.k_proj.bias", MAP_PLAIN},
        {"attn_v.bias", "self_attn.v_proj.bias", MAP_PLAIN},
        {"ffn_gate.weight", "mlp.gate_proj.weight", MAP_PLAIN},
        {"ffn_up.weight", "mlp.up_proj.weight", MAP_PLAIN},
        {"ffn_down.weight", "mlp.down_proj.weight", MAP_PLAIN},
};

static const struct name_map deepseek2_names[] = {
        {"attn_norm.weight", "input_layernorm.weight", MAP_PLAIN},
        {"ffn_norm.weight", "post_attention_layernorm.weight", MAP_PLAIN},
        {"attn_q.weight", "self_attn.q_proj.weight", MAP_PLAIN},
        {"attn_q_a.weight", "self_attn.q_a_proj.weight", MAP_PLAIN},
        {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", MAP_PLAIN},
        {"attn_q_b.weight", "self_attn.q_b_proj.weight", MAP_PLAIN},
        {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", MAP_PLAIN},
        {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", MAP_PLAIN},
        {"attn_kv_b.weight", "self_attn.kv_b_proj.weight", MAP_PLAIN},
        {"attn_k_b.weight", "self_attn.k_b_proj.weight", MAP_K_B},
        {"attn_v_b.weight", "self_attn.v_b_proj.weight", MAP_V_B},
        {"attn_output.weight", "self_attn.o_proj.weight", MAP_PLAIN},
        {"ffn_gate.weight", "mlp.gate_proj.weight", MAP_PLAIN},
        {"ffn_up.weight", "mlp.up_proj.weight", MAP_PLAIN},
        {"ffn_down.weight", "mlp.down_proj.weight", MAP_PLAIN},
        {"ffn_gate_inp.weight", "mlp.gate.weight", MAP_PLAIN},
        {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", MAP_PLAIN},
        {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", MAP_PLAIN},
        {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", MAP_PLAIN},
        {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", MAP_PLAIN},
        {"ffn_gate_exps.weight", "mlp.experts.%d.gate_proj.weight", MAP_EXPERTS},
        {"ffn_up_exps.weight", "mlp.experts.%d.up_proj.weight", MAP_EXPERTS},
        {"ffn_down_exps.weight", "mlp.experts.%d.down_proj.weight", MAP_EXPERTS},
};

static const struct name_map global_names[] = {
        {"token_embd.weight", "model.embed_tokens.weight", MAP_PLAIN},
        {"output_norm.weight", "model.norm.weight", MAP_PLAIN},
        {"output.weight", "lm_head.weight", MAP_PLAIN},
};

static const struct name_map *find_map(struct import *im, const char *name, int *ret_layer) {
        *ret_layer = -1;
        for (size_t i = 0; i < sizeof global_names / sizeof global_names[0]; i++)
                if (strcmp(name, global_names[i].gguf) == 0)
                        return &global_names[i];
        int deepseek = im->hp->arch == DSE_ARCH_DEEPSEEK_V2 || im->hp->arch == DSE_ARCH_DEEPSEEK_V3;
        const struct name_map *m = deepseek ? deepseek2_names : llama_names;
        size_t n = deepseek ? sizeof deepseek2_names / sizeof deepseek2_names[0] : sizeof llama_names / sizeof llama_names[0];
        int layer, k = 0;
        if (sscanf(name, "blk.%d.%n", &layer, &k) != 1 || k == 0 || layer < 0)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (strcmp(name + k, m[i].gguf) == 0) {
                        *ret_layer = layer;
                        return &m[i];
                }
        return NULL;
}

static const struct dse__gguf_tensor *layer_tensor(struct import *im, int layer, const char *suffix) {
        char name[DSE_GGUF_NAME_MAX];
        snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
        return dse__gguf_find_tensor(im->g, name);
}

static int check_dims(struct import *im, const struct dse__gguf_tensor *t, uint32_t n_dims) {
        if (t->n_dims == n_dims || (n_dims == 2 && t->n_dims == 1))
                return 0;
        return dse__fail(im->reterr, -EBADMSG, "%s: tensor '%s' has %u dimensions (%s expected)", im->what, t->name,
                         t->n_dims, n_dims == 3 ? "3" : "1 or 2");
}

static void set_dtype(struct spec *sp) {
        switch (sp->src->type) {
        case DSE_GGML_F32: sp->dtype = DSE_ST_F32; break;
        case DSE_GGML_F16: sp->dtype = DSE_ST_F16; break;
        case DSE_GGML_BF16: sp->dtype = DSE_ST_BF16; break;
        default: sp->dtype = DSE_ST_F32; break; /* dequantised exactly */
        }
}

/* attn_k_b or attn_v_b (t) of layer: its partner beside it, and the shapes [nope,
 * kv_lora_rank, heads] and [kv_lora_rank, v, heads]. */
static int check_kv_b_split(struct import *im, const struct dse__gguf_tensor *t, int layer) {
        const struct dse_hparams *hp = im->hp;
        int is_k = strstr(t->name, "attn_k_b.") != NULL;
        const struct dse__gguf_tensor *kb = is_k ? t : layer_tensor(im, layer, "attn_k_b.weight");
        const struct dse__gguf_tensor *vb = is_k ? layer_tensor(im, layer, "attn_v_b.weight") : t;
        if (!kb || !vb)
                return dse__fail(im->reterr, -EBADMSG, "%s: tensor '%s' has no 'blk.%d.%s' beside it", im->what, t->name,
                                 layer, is_k ? "attn_v_b.weight" : "attn_k_b.weight");
        if (!hp->mla_kv_b_split)
                return dse__fail(im->reterr, -EBADMSG,
                                 "%s: tensor '%s': layer %d splits kv_b_proj (attn_k_b, attn_v_b) where layer 0 "
                                 "keeps attn_kv_b",
                                 im->what, t->name, layer);
        if (kb->n_dims != 3 || vb->n_dims != 3 || kb->ne[0] != hp->qk_nope_head_dim || kb->ne[1] != hp->kv_lora_rank ||
            kb->ne[2] != hp->n_heads || vb->ne[0] != hp->kv_lora_rank || vb->ne[1] != hp->v_head_dim ||
            vb->ne[2] != hp->n_heads)
                return dse__fail(im->reterr, -EBADMSG,
                                 "%s: tensors '%s' [%lld, %lld, %lld] and '%s' [%lld, %lld, %lld] are not [nope %d, "
                                 "kv_lora_rank %d, heads %d] and [kv_lora_rank, v %d, heads]",
                                 im->what, kb->name, (long long)kb->ne[0], (long long)kb->ne[1], (long long)kb->ne[2],
                                 vb->name, (long long)vb->ne[0], (long long)vb->ne[1], (long long)vb->ne[2],
                                 hp->qk_nope_head_dim, hp->kv_lora_rank, hp->n_heads, hp->v_head_dim);
        return 0;
}

/* The specs GGUF tensor t gives: appended at specs[*n]. */
static int map_tensor(struct import *im, const struct dse__gguf_tensor *t, struct spec *specs, size_t *n) {
        int layer;
        const struct name_map *m = find_map(im, t->name, &layer);
        if (!m) {
                if (strcmp(t->name, "rope_freqs.weight") == 0)
                        return dse__fail(im->reterr, -EOPNOTSUPP,
                                         "%s: tensor 'rope_freqs.weight' (llama3 rope scaling) is not supported for GGUF",
                                         im->what);
                return dse__fail(im->reterr, -EBADMSG, "%s: unexpected tensor '%s' for architecture %s", im->what,
                                 t->name, im->arch);
        }
        int split = m->kind == MAP_K_B || m->kind == MAP_V_B;
        /* converters that also keep attn_kv_b write the split pair beside it */
        if (split && layer_tensor(im, layer, "attn_kv_b.weight"))
                return 0;
        int64_t n_out = m->kind == MAP_EXPERTS ? t->ne[2] : 1;
        int r = split ? check_kv_b_split(im, t, layer) : check_dims(im, t, m->kind == MAP_EXPERTS ? 3 : 2);
        if (r < 0)
                return r;
        if (m->kind == MAP_EXPERTS && n_out != im->hp->n_routed_experts)
                return dse__fail(im->reterr, -EBADMSG, "%s: tensor '%s' stacks %lld experts, %s.expert_count is %d",
                                 im->what, t->name, (long long)n_out, im->arch, im->hp->n_routed_experts);
        for (int64_t e = 0; e < n_out; e++) {
                struct spec *sp = &specs[(*n)++];
                memset(sp, 0, sizeof *sp);
                sp->src = t;
                char hf[64];
                if (m->kind == MAP_EXPERTS)
                        snprintf(hf, sizeof hf, "mlp.experts.%lld.%s", (long long)e,
                                 m->hf + strlen("mlp.experts.%d."));
                else
                        snprintf(hf, sizeof hf, "%s", m->hf);
                if (layer >= 0)
                        snprintf(sp->name, sizeof sp->name, "model.layers.%d.%s", layer, hf);
                else
                        snprintf(sp->name, sizeof sp->name, "%s", hf);
                sp->cols = t->ne[0];
                sp->rows = t->n_dims >= 2 ? t->ne[1] * (split ? t->ne[2] : 1) : 1;
                sp->first_row = (uint64_t)(e * sp->rows);
                set_dtype(sp);
        }
        if ((m->kind == MAP_PERM_Q || m->kind == MAP_PERM_K) && im->hp->arch == DSE_ARCH_LLAMA) {
                struct spec *sp = &specs[*n - 1];
                sp->perm_heads = m->kind == MAP_PERM_Q ? im->hp->n_heads : im->hp->n_kv_heads;
                if (sp->perm_heads <= 0 || sp->rows % sp->perm_heads || (sp->rows / sp->perm_heads) % 2)
                        return dse__fail(im->reterr, -EBADMSG, "%s: tensor '%s': %lld rows do not split into %d heads of "
                                         "even width",
                                         im->what, t->name, (long long)sp->rows, sp->perm_heads);
        }
        return 0;
}

static int build_specs(struct import *im, struct gguf_source *s) {
        size_t cap = 1;
        for (size_t i = 0; i < im->g->n_tensors; i++) {
                const struct dse__gguf_tensor *t = &im->g->tensors[i];
                cap += t->n_dims == 3 && t->ne[2] > 0 ? (size_t)t->ne[2] : 1;
        }
        s->specs = calloc(cap, sizeof *s->specs);
        if (!s->specs)
                return -ENOMEM;
        uint64_t counts[32] = {0};
        for (size_t i = 0; i < im->g->n_tensors; i++) {
                const struct dse__gguf_tensor *t = &im->g->tensors[i];
                int r = map_tensor(im, t, s->specs, &s->n_specs);
                if (r < 0)
                        return r;
                counts[t->type < 32 ? t->type : 0]++;
                uint64_t row = row_bytes(t);
                if (row > s->row_buf_size)
                        s->row_buf_size = row;
        }
        qsort(s->specs, s->n_specs, sizeof *s->specs, cmp_spec);
        for (size_t i = 1; i < s->n_specs; i++)
                if (strcmp(s->specs[i - 1].name, s->specs[i].name) == 0)
                        return dse__fail(im->reterr, -EBADMSG, "%s: tensors '%s' and '%s' both give '%s'", im->what,
                                         s->specs[i - 1].src->name, s->specs[i].src->name, s->specs[i].name);
        for (uint32_t ty = 0; ty < 32; ty++)
                if (counts[ty] && ty != DSE_GGML_F32 && ty != DSE_GGML_F16 && ty != DSE_GGML_BF16)
                        dse__log(DSE_LOG_INFO, "%s: %llu %s tensors: %s", im->what, (unsigned long long)counts[ty],
                                 dse__ggml_type_name(ty),
                                 dse__ggml_native_dtype(ty) == DSE_DTYPE_Q8
                                         ? "matrices as Q8 group 32 under --quant-format auto (exact), vectors as F32 (exact)"
                                 : dse__ggml_native_dtype(ty) == DSE_DTYPE_Q4
                                         ? "matrices as Q4 group 32 with the blocks' fp16 scales, zero point 8, under --quant-format "
                                           "auto (exact), "
                                           "vectors as F32 (exact)"
                                         : "as F32 (dequantised exactly)");
        if (im->hp->mla_kv_b_split)
                dse__log(DSE_LOG_INFO, "%s: kv_b_proj kept split as attn_k_b and attn_v_b are (k_b_proj, v_b_proj)",
                         im->what);
        s->row_buf = malloc(s->row_buf_size ? s->row_buf_size : 1);
        return s->row_buf ? 0 : -ENOMEM;
}

static const struct dse__st_source gguf_source_ops = {
        .read = source_read, .ggml_type = source_ggml_type, .read_blocks = source_read_blocks, .close = source_close};

int dse__gguf_import(const char *path, struct dse_hparams *ret_hp, struct dse__st_set **ret_set,
                     struct dse__gguf_tokenizer *ret_tok, struct dse_diag *reterr) {
        struct gguf_source *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->fd = -1;
        s->path = strdup(path);
        int r = s->path ? 0 : -ENOMEM;
        struct stat st;
        if (r == 0 && (s->fd = dse__open_input(path, reterr)) < 0)
                r = s->fd;
        if (r == 0 && fstat(s->fd, &st) < 0)
                r = dse__fail(reterr, -errno, "cannot stat '%s': %s", path, strerror(errno));
        if (r == 0 && st.st_size < 24)
                r = dse__fail(reterr, -EBADMSG, "%s: truncated: %lld bytes, a GGUF header needs 24", path,
                              (long long)st.st_size);
        if (r == 0) {
                s->map_size = (size_t)st.st_size;
                void *m = mmap(NULL, s->map_size, PROT_READ, MAP_PRIVATE, s->fd, 0);
                if (m == MAP_FAILED)
                        r = dse__fail(reterr, -errno, "cannot map '%s': %s", path, strerror(errno));
                else
                        s->map = m;
        }
        if (r == 0)
                r = dse__gguf_parse(s->map, s->map_size, path, &s->g, reterr);
        struct import im = {.what = path, .g = s->g, .hp = ret_hp, .reterr = reterr};
        if (r == 0) {
                memset(ret_hp, 0, sizeof *ret_hp);
                r = parse_hparams(&im);
        }
        if (r == 0)
                r = build_specs(&im, s);
        if (r == 0)
                r = dse__gguf_tokenizer_files(s->g, path, ret_tok, reterr);
        struct dse__st_tensor *ts = r == 0 ? calloc(s->n_specs ? s->n_specs : 1, sizeof *ts) : NULL;
        if (r == 0 && !ts)
                r = -ENOMEM;
        if (r < 0) {
                source_close(s);
                return r;
        }
        for (size_t i = 0; i < s->n_specs; i++) {
                const struct spec *sp = &s->specs[i];
                struct dse__st_tensor *t = &ts[i];
                snprintf(t->name, sizeof t->name, "%s", sp->name);
                t->dtype = sp->dtype;
                t->n_dims = sp->src->n_dims >= 2 ? 2 : 1;
                t->shape[0] = t->n_dims == 2 ? sp->rows : sp->cols;
                t->shape[1] = t->n_dims == 2 ? sp->cols : 0;
                t->begin = 0;
                t->end = (uint64_t)(sp->rows * sp->cols) * dse__st_dtype_size(sp->dtype);
        }
        return dse__st_set_from_source(path, ts, s->n_specs, &gguf_source_ops, s, ret_set, reterr);
}

int dse__gguf_is_gguf(const char *path) {
        uint8_t m[4];
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return 0;
        struct stat st;
        int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, m, 4, 0) == 4 &&
                 (uint32_t)(m[0] | m[1] << 8 | m[2] << 16 | (uint32_t)m[3] << 24) == DSE_GGUF_MAGIC;
        close(fd);
        return ok;
}
