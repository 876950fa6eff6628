/* config.json (+ generation_config.json) -> struct dse_hparams, with the defaults of the
 * Hugging Face config classes (LlamaConfig, Qwen2Config, DeepseekV2Config,
 * DeepseekV3Config) for keys a checkpoint leaves out. A JSON null means "none" (0) for
 * the optional DeepSeek dimensions (q_lora_rank null: a single q_proj). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../internal.h"
#include "../format.h"

struct cfg {
        const cJSON *root;
        const char *what;
        struct dse_diag *reterr;
};

/* obj[key], NULL when it is absent or null (where the default applies). */
static const cJSON *given(const cJSON *obj, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        return cJSON_IsNull(v) ? NULL : v;
}

/* Integer key: absent -> def; null -> null_value; otherwise an integral number in int32. */
static int get_int_n(const struct cfg *c, const cJSON *obj, const char *key, int32_t def, int32_t null_value,
                     int32_t *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!v) {
                *ret = def;
                return 0;
        }
        if (cJSON_IsNull(v)) {
                *ret = null_value;
                return 0;
        }
        if (cJSON_IsBool(v)) {
                *ret = cJSON_IsTrue(v);
                return 0;
        }
        double d = v->valuedouble;
        if (!cJSON_IsNumber(v) || d != floor(d) || d < INT32_MIN || d > INT32_MAX)
                return dse__fail(c->reterr, -EBADMSG, "%s: '%s' must be an integer", c->what, key);
        *ret = (int32_t)d;
        return 0;
}

static int get_int(const struct cfg *c, const cJSON *obj, const char *key, int32_t def, int32_t *ret) {
        return get_int_n(c, obj, key, def, def, ret);
}

static int get_required_int(const struct cfg *c, const char *key, int32_t *ret) {
        if (!cJSON_GetObjectItemCaseSensitive(c->root, key))
                return dse__fail(c->reterr, -EBADMSG, "%s: required key '%s' is missing", c->what, key);
        int r = get_int_n(c, c->root, key, 0, -1, ret);
        if (r < 0)
                return r;
        if (*ret <= 0)
                return dse__fail(c->reterr, -EBADMSG, "%s: '%s' must be a positive integer", c->what, key);
        return 0;
}

static int get_float(const struct cfg *c, const cJSON *obj, const char *key, float def, float *ret) {
        const cJSON *v = given(obj, key);
        if (!v) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
                return dse__fail(c->reterr, -EBADMSG, "%s: '%s' must be a number", c->what, key);
        *ret = (float)v->valuedouble;
        return 0;
}

static int get_bool(const struct cfg *c, const cJSON *obj, const char *key, int def, int32_t *ret) {
        const cJSON *v = given(obj, key);
        if (!v) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsBool(v))
                return dse__fail(c->reterr, -EBADMSG, "%s: '%s' must be true or false", c->what, key);
        *ret = cJSON_IsTrue(v);
        return 0;
}

/* String key: absent or null -> def. */
static int get_string(const struct cfg *c, const cJSON *obj, const char *key, const char *def, const char **ret) {
        const cJSON *v = given(obj, key);
        if (!v) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsString(v))
                return dse__fail(c->reterr, -EBADMSG, "%s: '%s' must be a string", c->what, key);
        *ret = v->valuestring;
        return 0;
}

/* A token id: an integer, or a list whose first element is used (eos_token_id lists). */
static int get_token_id(const struct cfg *c, const cJSON *obj, const char *key, int32_t *ret) {
        const cJSON *v = given(obj, key);
        if (!v)
                return 0; /* leave as is */
        if (cJSON_IsArray(v))
                v = cJSON_GetArrayItem(v, 0);
        if (!v || !cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble > INT32_MAX)
                return dse__fail(c->reterr, -EBADMSG, "%s: '%s' must be a token id", c->what, key);
        *ret = (int32_t)v->valuedouble;
        return 0;
}

static int parse_rope_scaling(const struct cfg *c, struct dse_hparams *hp) {
        int r;
        dse__hparams_rope_defaults(hp);

        const cJSON *rs = given(c->root, "rope_scaling");
        if (!rs)
                return 0;
        if (!cJSON_IsObject(rs))
                return dse__fail(c->reterr, -EBADMSG, "%s: 'rope_scaling' must be an object or null", c->what);
        const char *type = NULL;
        if ((r = get_string(c, rs, "rope_type", NULL, &type)) < 0)
                return r;
        if (!type && (r = get_string(c, rs, "type", NULL, &type)) < 0)
                return r;
        if (!type || strcmp(type, "default") == 0)
                hp->rope_type = DSE_ROPE_DEFAULT;
        else if (strcmp(type, "linear") == 0)
                hp->rope_type = DSE_ROPE_LINEAR;
        else if (strcmp(type, "yarn") == 0)
                hp->rope_type = DSE_ROPE_YARN;
        else if (strcmp(type, "llama3") == 0)
                hp->rope_type = DSE_ROPE_LLAMA3;
        else
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: rope_scaling type '%s' is not supported (default, linear, yarn, llama3)", c->what,
                                 type);
        if ((r = get_float(c, rs, "factor", 1.0f, &hp->rope_factor)) < 0 ||
            (r = get_int(c, rs, "original_max_position_embeddings", hp->max_position_embeddings,
                         &hp->rope_original_max_pos)) < 0 ||
            (r = get_float(c, rs, "low_freq_factor", 1.0f, &hp->rope_low_freq_factor)) < 0 ||
            (r = get_float(c, rs, "high_freq_factor", 4.0f, &hp->rope_high_freq_factor)) < 0 ||
            (r = get_float(c, rs, "beta_fast", 32.0f, &hp->rope_beta_fast)) < 0 ||
            (r = get_float(c, rs, "beta_slow", 1.0f, &hp->rope_beta_slow)) < 0 ||
            (r = get_float(c, rs, "mscale", 1.0f, &hp->rope_mscale)) < 0 ||
            (r = get_float(c, rs, "mscale_all_dim", 0.0f, &hp->rope_mscale_all_dim)) < 0)
                return r;
        if (!(hp->rope_factor > 0))
                return dse__fail(c->reterr, -EBADMSG, "%s: rope_scaling factor must be positive", c->what);
        return 0;
}

static int parse_deepseek(const struct cfg *c, struct dse_hparams *hp) {
        const cJSON *o = c->root;
        int v3 = hp->arch == DSE_ARCH_DEEPSEEK_V3;
        int r;
        /* DeepseekV2Config / DeepseekV3Config defaults */
        if ((r = get_int_n(c, o, "q_lora_rank", 1536, 0, &hp->q_lora_rank)) < 0 ||
            (r = get_int(c, o, "kv_lora_rank", 512, &hp->kv_lora_rank)) < 0 ||
            (r = get_int(c, o, "qk_nope_head_dim", 128, &hp->qk_nope_head_dim)) < 0 ||
            (r = get_int(c, o, "qk_rope_head_dim", 64, &hp->qk_rope_head_dim)) < 0 ||
            (r = get_int(c, o, "v_head_dim", 128, &hp->v_head_dim)) < 0 ||
            (r = get_int_n(c, o, "n_routed_experts", v3 ? 256 : 0, 0, &hp->n_routed_experts)) < 0 ||
            (r = get_int_n(c, o, "n_shared_experts", v3 ? 1 : 0, 0, &hp->n_shared_experts)) < 0 ||
            (r = get_int_n(c, o, "num_experts_per_tok", v3 ? 8 : 0, 0, &hp->n_experts_per_tok)) < 0 ||
            (r = get_int(c, o, "moe_intermediate_size", v3 ? 2048 : 1407, &hp->moe_intermediate_size)) < 0 ||
            (r = get_int(c, o, "first_k_dense_replace", v3 ? 3 : 0, &hp->first_k_dense_replace)) < 0 ||
            (r = get_int(c, o, "moe_layer_freq", 1, &hp->moe_layer_freq)) < 0 ||
            (r = get_int_n(c, o, "n_group", v3 ? 8 : 1, 1, &hp->n_group)) < 0 ||
            (r = get_int_n(c, o, "topk_group", v3 ? 4 : 1, 1, &hp->topk_group)) < 0 ||
            (r = get_bool(c, o, "norm_topk_prob", v3, &hp->norm_topk_prob)) < 0 ||
            (r = get_float(c, o, "routed_scaling_factor", v3 ? 2.5f : 1.0f, &hp->routed_scaling_factor)) < 0 ||
            (v3 && (r = get_int(c, o, "num_nextn_predict_layers", 0, &hp->n_mtp_layers)) < 0))
                return r;
        const char *topk = NULL, *scoring = NULL;
        if ((r = get_string(c, o, "topk_method", v3 ? "noaux_tc" : "greedy", &topk)) < 0 ||
            (r = get_string(c, o, "scoring_func", v3 ? "sigmoid" : "softmax", &scoring)) < 0)
                return r;
        if (strcmp(topk, "greedy") == 0)
                hp->topk_method = DSE_MOE_GREEDY;
        else if (strcmp(topk, "group_limited_greedy") == 0)
                hp->topk_method = DSE_MOE_GROUP_LIMITED_GREEDY;
        else if (strcmp(topk, "noaux_tc") == 0)
                hp->topk_method = DSE_MOE_NOAUX_TC;
        else
                return dse__fail(c->reterr, -EOPNOTSUPP, "%s: topk_method '%s' is not supported", c->what, topk);
        if (strcmp(scoring, "softmax") == 0)
                hp->scoring_func = DSE_MOE_SOFTMAX;
        else if (strcmp(scoring, "sigmoid") == 0)
                hp->scoring_func = DSE_MOE_SIGMOID;
        else
                return dse__fail(c->reterr, -EOPNOTSUPP, "%s: scoring_func '%s' is not supported", c->what, scoring);
        hp->head_dim = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
        return 0;
}

/* A JSON array of strings, copied; absent or null: none. */
static int get_strings(const struct cfg *c, const cJSON *obj, const char *key, const char *where, char ***ret,
                       size_t *ret_n) {
        const cJSON *v = given(obj, key);
        *ret = NULL;
        *ret_n = 0;
        if (!v)
                return 0;
        if (!cJSON_IsArray(v))
                return dse__fail(c->reterr, -EBADMSG, "%s: %s%s must be a list of strings", c->what, where, key);
        int n = cJSON_GetArraySize(v);
        char **list = calloc((size_t)n + 1, sizeof *list);
        if (!list)
                return -ENOMEM;
        *ret = list;
        for (int i = 0; i < n; i++) {
                const cJSON *e = cJSON_GetArrayItem(v, i);
                if (!cJSON_IsString(e))
                        return dse__fail(c->reterr, -EBADMSG, "%s: %s%s[%d] must be a string", c->what, where, key, i);
                if (!(list[i] = strdup(e->valuestring)))
                        return -ENOMEM;
                *ret_n = (size_t)i + 1;
        }
        return 0;
}

/* compressed-tensors' weights args of one config group. */
static int parse_ct_weights(const struct cfg *c, const cJSON *w, const char *format, struct dse__ct_scheme *s) {
        const char *g = s->name, *type = NULL, *strategy = NULL, *actorder = NULL;
        const cJSON *dyn = given(w, "dynamic"), *ao = given(w, "actorder");
        int r;
        if (!cJSON_IsObject(w))
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: quantization_config.config_groups.%s has no 'weights': only weight quantization "
                                 "is supported", c->what, g);
        if ((r = get_int(c, w, "num_bits", 8, &s->bits)) < 0 || (r = get_string(c, w, "type", "int", &type)) < 0 ||
            (r = get_bool(c, w, "symmetric", 1, &s->sym)) < 0 || (r = get_string(c, w, "strategy", NULL, &strategy)) < 0 ||
            (r = get_int_n(c, w, "group_size", -2, -2, &s->group_size)) < 0)
                return r;
        if (strcmp(type, "int") != 0)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: config_groups.%s.weights.type '%s' is not supported (int)", c->what, g, type);
        if (dyn && !(cJSON_IsBool(dyn) && !cJSON_IsTrue(dyn)))
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: config_groups.%s.weights.dynamic: dynamic weight scales are not supported", c->what, g);
        if (ao) {
                if (!cJSON_IsString(ao))
                        return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s.weights.actorder must be a string",
                                         c->what, g);
                actorder = ao->valuestring;
                if (strcmp(actorder, "group") == 0 || strcmp(actorder, "dynamic") == 0)
                        s->g_idx = 1;
                else if (strcmp(actorder, "weight") != 0 && strcmp(actorder, "static") != 0)
                        return dse__fail(c->reterr, -EOPNOTSUPP,
                                         "%s: config_groups.%s.weights.actorder '%s' is not supported (group, weight)",
                                         c->what, g, actorder);
        }
        if (!strategy) /* inferred as compressed-tensors does: no group_size: tensor, -1: channel */
                strategy = s->group_size == -2 ? "tensor" : s->group_size == -1 ? "channel" : "group";
        if (strcmp(strategy, "tensor") == 0) {
                s->tensor = 1;
                s->group_size = 0;
        } else if (strcmp(strategy, "channel") == 0) {
                s->group_size = 0;
        } else if (strcmp(strategy, "group") == 0) {
                if (s->group_size <= 0 || s->group_size > (1 << 20))
                        return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s.weights: strategy 'group' needs a "
                                         "positive group_size", c->what, g);
        } else {
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: config_groups.%s.weights.strategy '%s' is not supported (tensor, channel, group)",
                                 c->what, g, strategy);
        }
        if (s->g_idx && s->group_size <= 0)
                return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s.weights: actorder 'group' needs strategy "
                                 "'group'", c->what, g);
        if (strcmp(format, "pack-quantized") == 0) {
                s->packed = 1;
                if (s->bits != 4)
                        return dse__fail(c->reterr, -EOPNOTSUPP,
                                         "%s: config_groups.%s: pack-quantized with %d bits is not supported (4)", c->what,
                                         g, s->bits);
        } else if (strcmp(format, "int-quantized") == 0 || strcmp(format, "naive-quantized") == 0) {
                if (s->bits != 4 && s->bits != 8)
                        return dse__fail(c->reterr, -EOPNOTSUPP,
                                         "%s: config_groups.%s: %d-bit weights are not supported (4, 8)", c->what, g,
                                         s->bits);
        } else {
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: compressed-tensors format '%s' (config group %s) is not supported (int-quantized, "
                                 "naive-quantized, pack-quantized)", c->what, format, g);
        }
        return 0;
}

/* compressed-tensors' input_activations of one config group: none, or dynamic per-token
 * int8, which the engine's int8 kernels do by themselves. */
static int parse_ct_activations(const struct cfg *c, const cJSON *group, struct dse__ct_scheme *s) {
        const char *g = s->name;
        if (given(group, "output_activations"))
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: config_groups.%s.output_activations: output quantization is not supported", c->what, g);
        const cJSON *a = given(group, "input_activations");
        if (!a)
                return 0;
        const char *type = NULL, *strategy = NULL;
        int32_t bits = 0;
        int r;
        if (!cJSON_IsObject(a))
                return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s.input_activations must be an object", c->what, g);
        if ((r = get_int(c, a, "num_bits", 8, &bits)) < 0 || (r = get_string(c, a, "type", "int", &type)) < 0 ||
            (r = get_string(c, a, "strategy", "tensor", &strategy)) < 0)
                return r;
        const cJSON *dyn = given(a, "dynamic");
        int dynamic = dyn && (cJSON_IsTrue(dyn) || (cJSON_IsString(dyn) && strcmp(dyn->valuestring, "local") == 0));
        if (!dynamic)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: config_groups.%s.input_activations: static activation scales (input_scale) are not "
                                 "supported; dynamic per-token int8 is", c->what, g);
        if (bits != 8 || strcmp(type, "int") != 0 || strcmp(strategy, "token") != 0)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: config_groups.%s.input_activations: %d-bit %s per-%s activations are not supported "
                                 "(dynamic per-token int8)", c->what, g, bits, type, strategy);
        s->act_int8 = 1;
        return 0;
}

/* quant_method "compressed-tensors" (neuralmagic/compressed-tensors): config_groups,
 * their format, and the ignore list. */
static int parse_ct(const struct cfg *c, const cJSON *qc, struct dse__hf_quant *q) {
        const char *status = NULL, *format = NULL;
        int r;
        q->method = DSE_HF_QUANT_CT;
        if ((r = get_string(c, qc, "quantization_status", "compressed", &status)) < 0 ||
            (r = get_string(c, qc, "format", NULL, &format)) < 0)
                return r;
        if (strcmp(status, "compressed") != 0)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: quantization_status '%s': the weights are not stored compressed (compressed)",
                                 c->what, status);
        /* exports write {} (or a "dense" sparsity) where a feature is unused */
        const cJSON *sparsity = given(qc, "sparsity_config"), *kv = given(qc, "kv_cache_scheme");
        const char *sformat = NULL;
        if (sparsity && (r = get_string(c, sparsity, "format", "dense", &sformat)) < 0)
                return r;
        if (sparsity && sparsity->child && strcmp(sformat, "dense") != 0)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: compressed-tensors sparsity_config format '%s' is not supported (dense)", c->what,
                                 sformat);
        if (kv && kv->child)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: compressed-tensors kv_cache_scheme is not supported (the KV cache type is chosen "
                                 "with --kv-dtype)", c->what);
        if ((r = get_strings(c, qc, "ignore", "", &q->ct_ignore, &q->n_ct_ignore)) < 0)
                return r;
        const cJSON *groups = given(qc, "config_groups");
        if (!cJSON_IsObject(groups) || !groups->child)
                return dse__fail(c->reterr, -EBADMSG, "%s: compressed-tensors quantization_config needs 'config_groups'",
                                 c->what);
        int n = cJSON_GetArraySize(groups);
        if (!(q->ct = calloc((size_t)n, sizeof *q->ct)))
                return -ENOMEM;
        for (const cJSON *grp = groups->child; grp; grp = grp->next) {
                struct dse__ct_scheme *s = &q->ct[q->n_ct++];
                const char *gformat = NULL;
                snprintf(s->name, sizeof s->name, "%s", grp->string);
                if (!cJSON_IsObject(grp))
                        return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s must be an object", c->what, s->name);
                char where[96];
                snprintf(where, sizeof where, "config_groups.%s.", s->name);
                if ((r = get_strings(c, grp, "targets", where, &s->targets, &s->n_targets)) < 0 ||
                    (r = get_string(c, grp, "format", format, &gformat)) < 0)
                        return r;
                if (!s->n_targets)
                        return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s has no 'targets'", c->what, s->name);
                if (!gformat)
                        return dse__fail(c->reterr, -EBADMSG, "%s: config_groups.%s: no 'format' (here or in "
                                         "quantization_config)", c->what, s->name);
                if ((r = parse_ct_weights(c, given(grp, "weights"), gformat, s)) < 0 ||
                    (r = parse_ct_activations(c, grp, s)) < 0)
                        return r;
        }
        return 0;
}

/* A quantization_config object; default_method applies when it has no quant_method
 * (AutoGPTQ's quantize_config.json). */
static int parse_quant_object(const struct cfg *c, const cJSON *qc, const char *default_method,
                              struct dse__hf_quant *q) {
        const char *method = NULL, *s = NULL;
        int r;
        if ((r = get_string(c, qc, "quant_method", default_method, &method)) < 0)
                return r;
        if (!method)
                return dse__fail(c->reterr, -EBADMSG, "%s: quantization_config has no 'quant_method'", c->what);
        if (strcmp(method, "compressed-tensors") == 0)
                return parse_ct(c, qc, q);
        if (strcmp(method, "fp8") == 0) {
                q->method = DSE_HF_QUANT_FP8;
                if ((r = get_string(c, qc, "fmt", "e4m3", &s)) < 0)
                        return r;
                if (strcmp(s, "e4m3") != 0)
                        return dse__fail(c->reterr, -EOPNOTSUPP, "%s: fp8 format '%s' is not supported (e4m3)", c->what, s);
                q->block[0] = q->block[1] = 128;
                const cJSON *b = given(qc, "weight_block_size");
                if (b) {
                        if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2 ||
                            !cJSON_IsNumber(cJSON_GetArrayItem(b, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(b, 1)))
                                return dse__fail(c->reterr, -EBADMSG, "%s: 'weight_block_size' must be [out, in]",
                                                 c->what);
                        q->block[0] = cJSON_GetArrayItem(b, 0)->valueint;
                        q->block[1] = cJSON_GetArrayItem(b, 1)->valueint;
                        if (q->block[0] <= 0 || q->block[1] <= 0 || q->block[0] > (1 << 20) || q->block[1] > (1 << 20))
                                return dse__fail(c->reterr, -EBADMSG, "%s: bad 'weight_block_size'", c->what);
                }
                return 0;
        }
        if (strcmp(method, "awq") == 0 || strcmp(method, "gptq") == 0) {
                int awq = method[0] == 'a';
                q->method = awq ? DSE_HF_QUANT_AWQ : DSE_HF_QUANT_GPTQ;
                if ((r = get_int(c, qc, "bits", 4, &q->bits)) < 0 || (r = get_int(c, qc, "group_size", 128, &q->group_size)) < 0)
                        return r;
                if (q->bits != 4)
                        return dse__fail(c->reterr, -EOPNOTSUPP, "%s: %s with %d bits is not supported (4)", c->what,
                                         method, q->bits);
                if (q->group_size == 0 || q->group_size < -1 || q->group_size > (1 << 20))
                        return dse__fail(c->reterr, -EBADMSG, "%s: bad group_size %d", c->what, q->group_size);
                if (awq) {
                        int32_t zp = 0;
                        if ((r = get_string(c, qc, "version", "gemm", &s)) < 0 ||
                            (r = get_bool(c, qc, "zero_point", 1, &zp)) < 0)
                                return r;
                        if (strcasecmp(s, "gemm") != 0)
                                return dse__fail(c->reterr, -EOPNOTSUPP,
                                                 "%s: AWQ version '%s' is not supported (gemm)", c->what, s);
                        if (!zp)
                                return dse__fail(c->reterr, -EOPNOTSUPP,
                                                 "%s: AWQ without zero points is not supported", c->what);
                        if (q->group_size < 0)
                                return dse__fail(c->reterr, -EOPNOTSUPP, "%s: AWQ group_size -1 is not supported",
                                                 c->what);
                } else {
                        if ((r = get_bool(c, qc, "sym", 1, &q->sym)) < 0 ||
                            (r = get_bool(c, qc, "desc_act", 0, &q->desc_act)) < 0 ||
                            (r = get_string(c, qc, "checkpoint_format", "gptq", &s)) < 0)
                                return r;
                        if (strcmp(s, "gptq") != 0)
                                return dse__fail(c->reterr, -EOPNOTSUPP,
                                                 "%s: GPTQ checkpoint_format '%s' is not supported (gptq, v1)", c->what,
                                                 s);
                }
                return 0;
        }
        return dse__fail(c->reterr, -EOPNOTSUPP,
                         "%s: quant_method '%s' is not supported (fp8, awq, gptq, compressed-tensors)", c->what, method);
}

static int parse_quant(const struct cfg *c, struct dse__hf_quant *q) {
        memset(q, 0, sizeof *q);
        q->method = DSE_HF_QUANT_NONE;
        const cJSON *qc = given(c->root, "quantization_config");
        if (!qc)
                return 0;
        if (!cJSON_IsObject(qc))
                return dse__fail(c->reterr, -EBADMSG, "%s: 'quantization_config' must be an object", c->what);
        return parse_quant_object(c, qc, NULL, q);
}

static int parse_root(const struct cfg *c, const cJSON *gen_root, struct dse_hparams *hp, struct dse__hf_quant *q) {
        const cJSON *o = c->root;
        int r;
        if (!cJSON_IsObject(o))
                return dse__fail(c->reterr, -EBADMSG, "%s: not a JSON object", c->what);
        const char *mt = NULL;
        if ((r = get_string(c, o, "model_type", NULL, &mt)) < 0)
                return r;
        if (!mt)
                return dse__fail(c->reterr, -EBADMSG, "%s: required key 'model_type' is missing", c->what);
        int found = 0;
        for (int a = 0; a < DSE_ARCH_COUNT; a++)
                if (strcmp(mt, dse_arch_to_string(a)) == 0) {
                        hp->arch = a;
                        found = 1;
                }
        if (!found)
                return dse__fail(c->reterr, -EOPNOTSUPP,
                                 "%s: model_type '%s' is not supported (llama, qwen2, deepseek_v2, deepseek_v3)", c->what,
                                 mt);
        int deepseek = hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3;
        if ((r = get_required_int(c, "vocab_size", &hp->vocab_size)) < 0 ||
            (r = get_required_int(c, "hidden_size", &hp->hidden_size)) < 0 ||
            (r = get_required_int(c, "num_hidden_layers", &hp->n_layers)) < 0 ||
            (r = get_required_int(c, "num_attention_heads", &hp->n_heads)) < 0 ||
            (r = get_required_int(c, "intermediate_size", &hp->intermediate_size)) < 0)
                return r;
        if ((r = get_int_n(c, o, "num_key_value_heads", hp->n_heads, hp->n_heads, &hp->n_kv_heads)) < 0 ||
            (r = get_int(c, o, "max_position_embeddings", hp->arch == DSE_ARCH_QWEN2 ? 32768 : 2048,
                         &hp->max_position_embeddings)) < 0 ||
            (r = get_float(c, o, "rms_norm_eps", 1e-6f, &hp->rms_norm_eps)) < 0 ||
            (r = get_float(c, o, "rope_theta", 10000.0f, &hp->rope_theta)) < 0 ||
            (r = get_bool(c, o, "tie_word_embeddings", 0, &hp->tie_word_embeddings)) < 0)
                return r;
        /* Qwen2 always has q/k/v biases; llama has them when attention_bias is set. */
        if (hp->arch == DSE_ARCH_QWEN2)
                hp->attention_bias = 1;
        else if (!deepseek) {
                /* LlamaConfig attention_bias adds q/k/v AND o_proj biases, mlp_bias adds MLP
                 * biases: neither occurs in the supported checkpoints, so refuse them rather
                 * than run without the biases */
                int32_t ab, mb;
                if ((r = get_bool(c, o, "attention_bias", 0, &ab)) < 0 || (r = get_bool(c, o, "mlp_bias", 0, &mb)) < 0)
                        return r;
                if (ab || mb)
                        return dse__fail(c->reterr, -EOPNOTSUPP, "%s: llama with %s true is not supported", c->what,
                                         ab ? "attention_bias" : "mlp_bias");
        }
        if (deepseek) {
                if ((r = parse_deepseek(c, hp)) < 0)
                        return r;
        } else {
                if (hp->hidden_size % hp->n_heads != 0 && !cJSON_GetObjectItemCaseSensitive(o, "head_dim"))
                        return dse__fail(c->reterr, -EBADMSG, "%s: hidden_size %d is not a multiple of %d heads",
                                         c->what, hp->hidden_size, hp->n_heads);
                if ((r = get_int_n(c, o, "head_dim", hp->hidden_size / hp->n_heads, hp->hidden_size / hp->n_heads,
                                   &hp->head_dim)) < 0)
                        return r;
                hp->moe_layer_freq = 1;
                hp->routed_scaling_factor = 1.0f;
        }
        if ((r = parse_rope_scaling(c, hp)) < 0)
                return r;
        hp->bos_token_id = hp->eos_token_id = -1;
        if (gen_root) {
                struct cfg g = {gen_root, "generation_config.json", c->reterr};
                if ((r = get_token_id(&g, gen_root, "bos_token_id", &hp->bos_token_id)) < 0 ||
                    (r = get_token_id(&g, gen_root, "eos_token_id", &hp->eos_token_id)) < 0)
                        return r;
        }
        /* config.json wins where both have the id */
        if ((r = get_token_id(c, o, "bos_token_id", &hp->bos_token_id)) < 0 ||
            (r = get_token_id(c, o, "eos_token_id", &hp->eos_token_id)) < 0)
                return r;
        return parse_quant(c, q);
}

int dse__hf_parse_quantize_config(const char *json, size_t len, const char *what, struct dse__hf_quant *ret_quant,
                                  struct dse_diag *reterr) {
        if (!json || !what || !ret_quant)
                return -EINVAL;
        cJSON *root = cJSON_ParseWithLength(json, len);
        if (!root)
                return dse__fail(reterr, -EBADMSG, "%s: malformed JSON", what);
        struct cfg c = {root, what, reterr};
        struct dse__hf_quant q;
        memset(&q, 0, sizeof q);
        int r = cJSON_IsObject(root) ? parse_quant_object(&c, root, "gptq", &q)
                                     : dse__fail(reterr, -EBADMSG, "%s: not a JSON object", what);
        cJSON_Delete(root);
        if (r == 0)
                *ret_quant = q;
        else
                dse__hf_quant_free(&q);
        return r;
}

int dse__hf_parse_config(const char *json, size_t len, const char *gen, size_t gen_len, const char *what,
                         struct dse_hparams *ret_hp, struct dse__hf_quant *ret_quant, struct dse_diag *reterr) {
        if (!json || !what || !ret_hp || !ret_quant)
                return -EINVAL;
        cJSON *root = cJSON_ParseWithLength(json, len);
        if (!root)
                return dse__fail(reterr, -EBADMSG, "%s: malformed JSON", what);
        cJSON *gen_root = NULL;
        if (gen) {
                gen_root = cJSON_ParseWithLength(gen, gen_len);
                if (!gen_root) {
                        cJSON_Delete(root);
                        return dse__fail(reterr, -EBADMSG, "generation_config.json: malformed JSON");
                }
        }
        struct dse_hparams hp;
        struct dse__hf_quant q;
        memset(&hp, 0, sizeof hp);
        memset(&q, 0, sizeof q);
        struct cfg c = {root, what, reterr};
        int r = parse_root(&c, gen_root, &hp, &q);
        cJSON_Delete(gen_root);
        cJSON_Delete(root);
        if (r == 0)
                r = dse__hparams_validate(&hp, what, reterr);
        if (r < 0) {
                dse__hf_quant_free(&q);
                return r;
        }
        *ret_hp = hp;
        *ret_quant = q;
        return 0;
}
