/* libFuzzer target: the tokenizer.json loader on arbitrary bytes. An input that loads
 * must also encode and decode a fixed text without faults. The first line of the input,
 * when it starts with '{', and a NUL byte split it into tokenizer.json and
 * tokenizer_config.json. Seeds: fuzz-tokenizer-load.seeds/. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *json = (const char *)data, *cfg = NULL;
        size_t json_len = size, cfg_len = 0;
        const uint8_t *nul = memchr(data, 0, size);
        if (nul) { /* tokenizer.json NUL tokenizer_config.json */
                json_len = (size_t)(nul - data);
                cfg = (const char *)nul + 1;
                cfg_len = size - json_len - 1;
        }
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag;
        if (dse_tokenizer_load_hf(json, json_len, cfg, cfg_len, &tok, &diag) < 0)
                return 0;
        static const char text[] = "Hello, world! 12345 <s> \xe4\xbd\xa0\xe5\xa5\xbd  \n\tx\xc3\xa9";
        int32_t ids[256];
        char out[1024];
        for (int special = 0; special < 2; special++) {
                int n = dse_tokenizer_encode(tok, text, sizeof text - 1, special, ids, 256);
                if (n > 0)
                        dse_tokenizer_decode(tok, ids, (size_t)(n < 256 ? n : 256), out, sizeof out);
        }
        for (int32_t id = 0; id < dse_tokenizer_n_vocab(tok) && id < 64; id++)
                dse_tokenizer_piece(tok, id);
        dse_tokenizer_free(tok);
        return 0;
}
