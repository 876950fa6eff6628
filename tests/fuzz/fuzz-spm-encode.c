/* libFuzzer target: arbitrary bytes encoded with the fixture SentencePiece models
 * (sp_bpe: BPE + byte fallback, identity normalizer; sp_unigram: nmt_nfkc charsmap,
 * user-defined symbols). Invalid UTF-8 must give -EILSEQ and nothing else; valid text
 * must give ids in range that decode. sp_bpe is lossless, so decode(encode(x)) must be
 * x with U+2581 read as a space (README of the fixtures, "Round-trip").
 *
 *     DSV_FIXTURES=../shared/fixtures fuzz-spm-encode -max_total_time=60 corpus/ */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

static struct dse_tokenizer *models[2];

static struct dse_tokenizer *load(const char *name) {
        const char *root = getenv("DSV_FIXTURES");
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizers/models/%s/%s.model", root ? root : DSV_FIXTURES_DIR, name, name);
        struct dse_diag diag = {{0}};
        struct dse_tokenizer *tok = NULL;
        if (dse_tokenizer_load_file(path, &tok, &diag) < 0) {
                fprintf(stderr, "fuzz-spm-encode: cannot load '%s': %s\n", path, diag.msg);
                exit(1);
        }
        return tok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        models[0] = load("sp_bpe");
        models[1] = load("sp_unigram");
        return 0;
}

/* x with every U+2581 replaced by a space. */
static size_t unescape(const uint8_t *x, size_t n, char *out) {
        size_t o = 0;
        for (size_t i = 0; i < n;) {
                if (n - i >= 3 && memcmp(x + i, "\xe2\x96\x81", 3) == 0) {
                        out[o++] = ' ';
                        i += 3;
                } else {
                        out[o++] = (char)x[i++];
                }
        }
        return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > 4096)
                return 0;
        static int32_t ids[3 * 4096 + 8];
        static char out[8 * 4096 + 64], want[4096];
        for (int m = 0; m < 2; m++) {
                struct dse_tokenizer *tok = models[m];
                int add_special = size > 0 && (data[0] & 1);
                int n = dse_tokenizer_encode(tok, (const char *)data, size, add_special, ids,
                                             sizeof ids / sizeof ids[0]);
                if (n == -EILSEQ)
                        continue;
                if (n < 0 || (size_t)n > sizeof ids / sizeof ids[0])
                        abort();
                for (int i = 0; i < n; i++)
                        if (ids[i] < 0 || ids[i] >= dse_tokenizer_n_vocab(tok))
                                abort();
                int d = dse_tokenizer_decode(tok, ids, (size_t)n, out, sizeof out);
                if (d < 0 || (size_t)d > sizeof out)
                        abort();
                if (m == 0) {
                        size_t w = unescape(data, size, want);
                        if ((size_t)d != w || memcmp(out, want, w) != 0)
                                abort();
                }
        }
        return 0;
}
