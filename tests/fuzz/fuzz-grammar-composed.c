/* libFuzzer target fuzz-grammar-composed: a composed grammar's JSON description [NUL
 * token ids] to dse_grammar_compile_composed with the Qwen2.5 fixture tokenizer (whose
 * added tokens "<tool_call>" and "</tool_call>" are single tokens), then the ids (3 bytes
 * each, little-endian, modulo the vocabulary) through the matcher, a mask at the end. A
 * refusal must say why; the matcher must take or refuse any token. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

static struct dse_tokenizer *tok;
static struct dse_grammar_vocab *vocab;
static uint64_t *mask;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        (void)argc;
        (void)argv;
        const char *root = getenv("DSV_FIXTURES");
        char path[4096];
        struct dse_diag diag = {{0}};
        snprintf(path, sizeof path, "%s/tokenizers/models/qwen2_5/tokenizer.json", root ? root : DSV_FIXTURES_DIR);
        if (dse_tokenizer_load_file(path, &tok, &diag) < 0 || dse_grammar_vocab_new(tok, &vocab, &diag) < 0 ||
            !(mask = calloc(dse_grammar_vocab_mask_words(vocab), sizeof *mask))) {
                fprintf(stderr, "fuzz-grammar-composed: %s\n", diag.msg);
                abort();
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t source_len = nul ? (size_t)(nul - data) : size;
        struct dse_grammar *g = NULL;
        struct dse_diag diag = {{0}};
        int r = dse_grammar_compile_composed((const char *)data, source_len, tok, &g, &diag);
        if (r < 0) {
                if (r != -ENOMEM && !diag.msg[0])
                        abort();
                return 0;
        }
        struct dse_grammar_matcher *m;
        if (dse_grammar_matcher_new(g, &m, &diag) == 0) {
                int n_vocab = dse_tokenizer_n_vocab(tok);
                for (size_t i = source_len + 1; nul && i + 3 <= size; i += 3) {
                        int32_t id = (int32_t)((data[i] | data[i + 1] << 8 | (uint32_t)data[i + 2] << 16) % (uint32_t)n_vocab);
                        if (dse_grammar_matcher_accept_token(m, vocab, id) < 0)
                                break;
                }
                (void)dse_grammar_matcher_fill_mask(m, vocab, mask);
                (void)dse_grammar_matcher_is_accepting(m);
                dse_grammar_matcher_free(m);
        }
        dse_grammar_free(g);
        return 0;
}
