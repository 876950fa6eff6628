/* libFuzzer target: the GGUF reader (dse__gguf_parse) on a whole file's bytes, then
 * every metadata value through the typed getters and string-array walk, and the first
 * block of every tensor through the dequantiser (the parser vouched for its bounds). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct dse__gguf *g = NULL;
        struct dse_diag diag;
        if (dse__gguf_parse(data, size, "fuzz", &g, &diag) < 0)
                return 0;
        for (size_t i = 0; i < g->n_kv; i++) {
                const struct dse__gguf_kv *kv = &g->kv[i];
                char key[256];
                size_t n = kv->key_len < sizeof key - 1 ? kv->key_len : sizeof key - 1;
                memcpy(key, kv->key, n);
                key[n] = 0;
                int64_t iv;
                double dv;
                const char *s;
                size_t len;
                (void)dse__gguf_get_i64(g, "fuzz", key, &iv, &diag);
                (void)dse__gguf_get_f64(g, "fuzz", key, &dv, &diag);
                (void)dse__gguf_get_str(g, "fuzz", key, &s, &len, &diag);
                if (kv->type != DSE_GGUF_ARRAY)
                        continue;
                const uint8_t *pos = kv->value;
                for (uint64_t e = 0; e < kv->count; e++) {
                        if (kv->elem_type == DSE_GGUF_STRING)
                                dse__gguf_str_next(&pos, &s, &len);
                        else
                                (void)dse__gguf_arr_num(kv, e);
                }
        }
        float out[256];
        for (size_t i = 0; i < g->n_tensors; i++) {
                const struct dse__gguf_tensor *t = &g->tensors[i];
                int64_t be = dse__ggml_block_elems(t->type);
                dse__ggml_dequantize(t->type, data + g->data_offset + t->offset, out, be);
        }
        dse__gguf_free(g);
        return 0;
}
