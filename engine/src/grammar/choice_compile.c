/* A choice list into a grammar: the output is exactly one of the strings, as raw
 * bytes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "grammar/grammar.h"

int dse_grammar_compile_choice(const char *const *choices, size_t n, struct dse_grammar **ret_grammar,
                               struct dse_diag *reterr) {
        if (!ret_grammar || (!choices && n))
                return -EINVAL;
        if (n == 0) {
                if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg, "choice: the list is empty");
                return -EINVAL;
        }
        struct grammar_builder b;
        dse__grammar_builder_init(&b);
        uint32_t root = GRAMMAR_NIL;
        int r = dse__grammar_rule_new(&b, &root);
        for (size_t i = 0; i < n && r == 0; i++) {
                if (!choices[i]) {
                        if (reterr)
                                snprintf(reterr->msg, sizeof reterr->msg, "choice %zu: NULL", i);
                        r = -EINVAL;
                        break;
                }
                r = dse__grammar_alt_begin(&b, root);
                if (r == 0)
                        r = dse__grammar_push_bytes(&b, root, choices[i], strlen(choices[i]));
        }
        if (r == -E2BIG && reterr)
                snprintf(reterr->msg, sizeof reterr->msg, "choice: the strings are too long together");
        return dse__grammar_builder_complete(&b, r, root, ret_grammar, reterr);
}
