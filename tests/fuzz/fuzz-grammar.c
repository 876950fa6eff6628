/* libFuzzer targets fuzz-grammar-schema, fuzz-grammar-gbnf and fuzz-grammar-regex (one
 * source, the compiler chosen by FUZZ_GRAMMAR_COMPILE): the source text [NUL output
 * bytes] to the compiler, then the output bytes through a matcher of the compiled
 * grammar. A refusal must say why (a message naming what), and a matcher must take or
 * refuse any bytes. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t source_len = nul ? (size_t)(nul - data) : size;
        struct dse_grammar *g = NULL;
        struct dse_diag diag = {{0}};
        int r = FUZZ_GRAMMAR_COMPILE((const char *)data, source_len, &g, &diag);
        if (r < 0) {
                if (r != -ENOMEM && !diag.msg[0])
                        abort();
                return 0;
        }
        struct dse_grammar_matcher *m;
        if (dse_grammar_matcher_new(g, &m, &diag) == 0) {
                if (nul)
                        for (size_t i = source_len + 1; i < size; i++)
                                if (dse_grammar_matcher_advance(m, data + i, 1) < 0)
                                        break;
                (void)dse_grammar_matcher_is_accepting(m);
                dse_grammar_matcher_free(m);
        }
        dse_grammar_free(g);
        return 0;
}
