/* compressed-tensors quantization_config in config.json: what is read from each key, the
 * library's matching rules for targets and ignore (class name "Linear", exact module
 * names, "re:" patterns anchored at the start only, as Python's re.match), and a clear
 * refusal naming the key for every scheme the importer cannot hold exactly. */
#include "model/format.h"
#include "t.h"

static struct dse_diag diag;
static struct dse_hparams hp;
static struct dse__hf_quant q;

/* A tiny llama config.json whose quantization_config is `qc`. */
static int parse(const char *qc) {
        char json[8192];
        snprintf(json, sizeof json,
                 "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_attention_heads\":4,"
                 "\"num_hidden_layers\":2,\"vocab_size\":100,\"quantization_config\":%s}",
                 qc);
        memset(&diag, 0, sizeof diag);
        return dse__hf_parse_config(json, strlen(json), NULL, 0, "config.json", &hp, &q, &diag);
}

#define W8A8                                                                                                          \
        "{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"quantization_status\":\"compressed\"," \
        "\"ignore\":[\"lm_head\",\"re:.*mlp\\\\.gate$\"],\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],"     \
        "\"weights\":{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"channel\",\"dynamic\":false},"   \
        "\"input_activations\":{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"token\","              \
        "\"dynamic\":true}}}}"

static const struct dse__ct_scheme *scheme_for(const char *module, int linear) {
        const struct dse__ct_scheme *s = NULL;
        if (dse__ct_scheme_for(&q, module, linear, &s, &diag) < 0)
                return (const struct dse__ct_scheme *)-1;
        return s;
}

TEST(w8a8_channel_with_dynamic_token_activations) {
        ASSERT_OK(parse(W8A8));
        ASSERT_EQ(q.method, DSE_HF_QUANT_CT);
        ASSERT_EQ(q.n_ct, 1);
        ASSERT_STREQ(q.ct[0].name, "group_0");
        ASSERT_EQ(q.ct[0].bits, 8);
        ASSERT_EQ(q.ct[0].group_size, 0);
        ASSERT_EQ(q.ct[0].tensor, 0);
        ASSERT_EQ(q.ct[0].sym, 1);
        ASSERT_EQ(q.ct[0].packed, 0);
        ASSERT_EQ(q.ct[0].act_int8, 1);
        ASSERT_EQ(q.n_ct_ignore, 2);
        ASSERT_TRUE(scheme_for("model.layers.0.self_attn.q_proj", 1) == &q.ct[0]);
        ASSERT_TRUE(scheme_for("lm_head", 1) == NULL);                     /* ignored by name */
        ASSERT_TRUE(scheme_for("model.layers.1.mlp.gate", 1) == NULL);     /* ignored by pattern */
        ASSERT_TRUE(scheme_for("model.layers.1.mlp.gate_proj", 1) == &q.ct[0]); /* "$" ends the pattern */
        ASSERT_TRUE(scheme_for("model.embed_tokens", 0) == NULL);          /* "Linear" names a class */
        dse__hf_quant_free(&q);
}

TEST(w4a16_packed_groups_zero_points_act_order) {
        ASSERT_OK(parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":"
                        "{\"g\":{\"targets\":[\"re:model\\\\.layers\\\\.\\\\d+\\\\.mlp\"],\"weights\":{\"num_bits\":4,"
                        "\"symmetric\":false,\"group_size\":128,\"actorder\":\"group\"}}}}"));
        ASSERT_EQ(q.ct[0].bits, 4);
        ASSERT_EQ(q.ct[0].group_size, 128);
        ASSERT_EQ(q.ct[0].sym, 0);
        ASSERT_EQ(q.ct[0].packed, 1);
        ASSERT_EQ(q.ct[0].g_idx, 1);
        ASSERT_EQ(q.ct[0].act_int8, 0);
        /* re.match: anchored at the start, not at the end */
        ASSERT_TRUE(scheme_for("model.layers.3.mlp.down_proj", 1) == &q.ct[0]);
        ASSERT_TRUE(scheme_for("model.layers.3.self_attn.o_proj", 1) == NULL);
        ASSERT_TRUE(scheme_for("x.model.layers.3.mlp.down_proj", 1) == NULL);
        dse__hf_quant_free(&q);
}

TEST(strategy_inferred_from_group_size) {
        static const struct {
                const char *weights;
                int32_t group, tensor;
        } cases[] = {
                {"{\"num_bits\":8}", 0, 1},                    /* no group_size: one scale per tensor */
                {"{\"num_bits\":8,\"group_size\":-1}", 0, 0},  /* per channel */
                {"{\"num_bits\":8,\"group_size\":64}", 64, 0}, /* per group */
                {"{\"num_bits\":8,\"strategy\":null,\"group_size\":32}", 32, 0},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                char qc[1024];
                snprintf(qc, sizeof qc,
                         "{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":"
                         "{\"g\":{\"targets\":[\"Linear\"],\"weights\":%s}}}",
                         cases[i].weights);
                ASSERT_OK(parse(qc));
                ASSERT_EQ(q.ct[0].group_size, cases[i].group);
                ASSERT_EQ(q.ct[0].tensor, cases[i].tensor);
                dse__hf_quant_free(&q);
        }
}

TEST(unused_sparsity_and_kv_entries_are_accepted) {
        ASSERT_OK(parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"sparsity_config\":{},"
                        "\"kv_cache_scheme\":null,\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":"
                        "{\"num_bits\":8}}}}"));
        dse__hf_quant_free(&q);
        ASSERT_OK(parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"sparsity_config\":"
                        "{\"format\":\"dense\",\"global_sparsity\":0.0},\"config_groups\":{\"g\":{\"targets\":"
                        "[\"Linear\"],\"weights\":{\"num_bits\":8}}}}"));
        dse__hf_quant_free(&q);
}

TEST(two_groups_first_match_wins_and_group_format_overrides) {
        ASSERT_OK(parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{"
                        "\"attn\":{\"targets\":[\"re:.*self_attn\"],\"weights\":{\"num_bits\":8,\"group_size\":-1}},"
                        "\"rest\":{\"targets\":[\"Linear\"],\"format\":\"pack-quantized\",\"weights\":{\"num_bits\":4,"
                        "\"group_size\":32}}}}"));
        ASSERT_EQ(q.n_ct, 2);
        ASSERT_TRUE(scheme_for("model.layers.0.self_attn.k_proj", 1) == &q.ct[0]);
        ASSERT_TRUE(scheme_for("model.layers.0.mlp.up_proj", 1) == &q.ct[1]);
        ASSERT_EQ(q.ct[1].packed, 1);
        ASSERT_EQ(q.ct[0].packed, 0);
        dse__hf_quant_free(&q);
}

TEST(bad_pattern_is_an_error_naming_it) {
        ASSERT_OK(parse("{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"ignore\":[\"re:(x\"],"
                        "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8}}}}"));
        ASSERT_TRUE(scheme_for("lm_head", 1) == (const struct dse__ct_scheme *)-1);
        ASSERT_TRUE(strstr(diag.msg, "'re:(x'") != NULL);
        dse__hf_quant_free(&q);
}

TEST(refusals_name_the_key) {
        static const struct {
                const char *qc, *want;
        } cases[] = {
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\"}", "needs 'config_groups'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"weights\":{\"num_bits\":8}}}}",
                 "config_groups.g has no 'targets'"},
                {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],"
                 "\"weights\":{\"num_bits\":8}}}}",
                 "no 'format'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"marlin-24\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4}}}}",
                 "format 'marlin-24'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"type\":\"float\"}}}}",
                 "type 'float'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"strategy\":\"block\"}}}}",
                 "strategy 'block'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"dynamic\":true}}}}",
                 "dynamic weight scales"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8}}}}",
                 "pack-quantized with 8 bits"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"group_size\":-1,\"actorder\":\"group\"}}}}",
                 "actorder 'group' needs strategy 'group'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8},\"output_activations\":{\"num_bits\":8}}}}",
                 "output quantization"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8},\"input_activations\":{\"num_bits\":8,"
                 "\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}}}}",
                 "8-bit float per-token activations"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"kv_cache_scheme\":{\"num_bits\":8},"
                 "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8}}}}",
                 "kv_cache_scheme"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"sparsity_config\":{\"format\":\"sparse-24-bitmask\"},"
                 "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8}}}}",
                 "sparsity_config format 'sparse-24-bitmask'"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"ignore\":\"lm_head\","
                 "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8}}}}",
                 "ignore must be a list of strings"},
                {"{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{\"g\":"
                 "{\"targets\":[\"Linear\",3],\"weights\":{\"num_bits\":8}}}}",
                 "config_groups.g.targets[1] must be a string"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                int r = parse(cases[i].qc);
                fprintf(stderr, "  %s\n", diag.msg);
                ASSERT_TRUE(r < 0);
                ASSERT_TRUE(strstr(diag.msg, cases[i].want) != NULL);
        }
}
