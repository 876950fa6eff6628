/* libFuzzer target: encoding arbitrary bytes with real tokenizer.json files (DeepSeek-V3,
 * byte-level with three split regexes; Mistral-7B, Prepend/Replace normalizers with byte
 * fallback). The first input byte picks the tokenizer and add_special; the rest is the
 * text. Invalid UTF-8 must give -EILSEQ; valid text must encode, and for DeepSeek-V3
 * (byte-level, no normalizer) decoding the ids must give the text back exactly. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

static struct dse_tokenizer *toks[2];

static int valid_utf8(const uint8_t *s, size_t n) {
        size_t i = 0;
        while (i < n) {
                uint8_t c = s[i];
                size_t k;
                uint8_t lo = 0x80, hi = 0xBF;
                if (c < 0x80) {
                        i++;
                        continue;
                } else if (c >= 0xC2 && c <= 0xDF) {
                        k = 2;
                } else if (c >= 0xE0 && c <= 0xEF) {
                        k = 3;
                        lo = c == 0xE0 ? 0xA0 : 0x80;
                        hi = c == 0xED ? 0x9F : 0xBF;
                } else if (c >= 0xF0 && c <= 0xF4) {
                        k = 4;
                        lo = c == 0xF0 ? 0x90 : 0x80;
                        hi = c == 0xF4 ? 0x8F : 0xBF;
                } else {
                        return 0;
                }
                if (i + k > n || s[i + 1] < lo || s[i + 1] > hi)
                        return 0;
                for (size_t j = 2; j < k; j++)
                        if ((s[i + j] & 0xC0) != 0x80)
                                return 0;
                i += k;
        }
        return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        static const char *names[2] = {"deepseek_v3", "mistral7b"};
        const char *root = getenv("DSV_FIXTURES");
        for (int i = 0; i < 2; i++) {
                char path[4096];
                struct dse_diag diag;
                snprintf(path, sizeof path, "%s/tokenizers/models/%s/tokenizer.json", root ? root : DSV_FIXTURES_DIR,
                         names[i]);
                if (dse_tokenizer_load_file(path, &toks[i], &diag) < 0) {
                        fprintf(stderr, "fuzz-tokenizer-encode: %s\n", diag.msg);
                        abort();
                }
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        const struct dse_tokenizer *tok = toks[data[0] & 1];
        int special = (data[0] >> 1) & 1;
        const char *text = (const char *)data + 1;
        size_t len = size - 1;
        size_t cap = len * 4 + 8;
        int32_t *ids = malloc(cap * sizeof *ids);
        int n = dse_tokenizer_encode(tok, text, len, special, ids, cap);
        if (!valid_utf8(data + 1, len)) {
                if (n != -EILSEQ)
                        abort();
        } else if (n < 0 || (size_t)n > cap) {
                abort();
        } else {
                char *out = malloc(len * 4 + 64);
                int m = dse_tokenizer_decode(tok, ids, (size_t)n, out, len * 4 + 64);
                if (m < 0)
                        abort();
                if (tok == toks[0] && !special && ((size_t)m != len || memcmp(out, text, len) != 0))
                        abort(); /* byte-level without a normalizer always round-trips */
                free(out);
        }
        free(ids);
        return 0;
}
