/* libFuzzer target: SentencePiece .model bytes -> dse_tokenizer_load_spm. A model that
 * loads is then used: a few texts are encoded (running its normalizer charsmap and
 * encoder) and every id is decoded, so a hostile file is exercised end to end.
 *
 *     fuzz-spm-load -max_total_time=60 corpus/ seeds/   (seeds: the fixture .model files) */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dse.h"

static const char *const TEXTS[] = {
        "Hello, world!",
        "  two  spaces\tand a tab\n",
        "\xef\xbc\xa8\xef\xbd\x85\xef\xbd\x8c\xef\xbd\x8c\xef\xbd\x8f caf\xc3\xa9 \xe2\x91\xa0 \xe6\x97\xa5\xe6\x9c\xac",
        "<s></s><unk><0x41>\xe2\x96\x81x",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct dse_tokenizer *tok = NULL;
        if (dse_tokenizer_load_spm(data, size, &tok, NULL) < 0)
                return 0;
        int n_vocab = dse_tokenizer_n_vocab(tok);
        int32_t ids[512];
        char out[4096];
        for (size_t t = 0; t < sizeof TEXTS / sizeof TEXTS[0]; t++) {
                const char *s = TEXTS[t];
                size_t len = 0;
                while (s[len])
                        len++;
                int n = dse_tokenizer_encode(tok, s, len, (int)(t & 1), ids, 512);
                if (n < 0)
                        continue;
                if (n > 512)
                        n = 512;
                for (int i = 0; i < n; i++)
                        if (ids[i] < 0 || ids[i] >= n_vocab)
                                abort();
                if (dse_tokenizer_decode(tok, ids, (size_t)n, out, sizeof out) < 0)
                        abort();
        }
        /* every piece decodes on its own, and all of them in a row */
        for (int32_t id = 0; id < n_vocab && id < 4096; id++) {
                if (!dse_tokenizer_piece(tok, id))
                        abort();
                if (dse_tokenizer_decode(tok, &id, 1, out, sizeof out) < 0)
                        abort();
        }
        dse_tokenizer_free(tok);
        return 0;
}
