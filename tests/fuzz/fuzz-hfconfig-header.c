/* libFuzzer target: the Hugging Face config.json parser (dse__hf_parse_config) and
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
                if (hp.n_layers <= 64 && hp.n_routed_experts <= 64 && dse__model_schema(&hp, &s, &n) == 0)
                        free(s);
        }
        dse__hf_parse_quantize_config(json, len, "quantize_config.json", &q, &diag);
        return 0;
}
