/* libFuzzer target: the Hugging Face config.json parser (dse__hf_parse_config, with the
 * quantization_config of every method, compressed-tensors' matching rules included) and
 * quantize_config.json parser. Input: config.json bytes; a second document after a NUL
 * byte is fed as generation_config.json. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *json = (const char *)data;
        const uint8_t *nul = memchr(data, 0, size);
        size_t len = nul ? (size_t)(nul - data) : size;
        const char *gen = nul ? (const char *)nul + 1 : NULL;
        size_t gen_len = nul ? size - len - 1 : 0;
        struct dse_hparams hp;
        struct dse__hf_quant q;
        struct dse_diag diag;
        if (dse__hf_parse_config(json, len, gen, gen_len, "config.json", &hp, &q, &diag) == 0) {
                /* an accepted config must describe a schema the loader can enumerate */
                struct dse_schema_entry *s;
                size_t n;
                if (hp.n_layers <= 64 && hp.n_routed_experts <= 64 && dse__model_schema(&hp, SIZE_MAX, &s, &n) == 0)
                        free(s);
                /* which config group covers a module: names, classes and "re:" patterns */
                static const char *const modules[] = {"model.layers.0.self_attn.q_proj", "lm_head",
                                                      "model.layers.1.mlp.experts.3.down_proj"};
                const struct dse__ct_scheme *scheme;
                for (size_t i = 0; q.method == DSE_HF_QUANT_CT && i < 3; i++)
                        dse__ct_scheme_for(&q, modules[i], i != 1, &scheme, &diag);
                dse__hf_quant_free(&q);
        }
        if (dse__hf_parse_quantize_config(json, len, "quantize_config.json", &q, &diag) == 0)
                dse__hf_quant_free(&q);
        return 0;
}
