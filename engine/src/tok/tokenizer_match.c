/* Whether two models tokenize alike (see dse.h, dse_model_tokenizers_match). */
#include <errno.h>
#include <string.h>

#include "internal.h"

static const char *piece_or_none(const struct dse_tokenizer *tok, int32_t id) {
        const char *p = dse_tokenizer_piece(tok, id);
        return p ? p : "(none)";
}

/* Both loaded: the same tokens, BOS and EOS. */
static int tokenizers_match(const struct dse_tokenizer *a, const struct dse_tokenizer *b, struct dse_diag *reterr) {
        if (dse_tokenizer_n_vocab(a) != dse_tokenizer_n_vocab(b))
                return dse__fail(reterr, -EINVAL, "%d tokens against %d", dse_tokenizer_n_vocab(a),
                                 dse_tokenizer_n_vocab(b));
        if (dse_tokenizer_bos(a) != dse_tokenizer_bos(b) || dse_tokenizer_eos(a) != dse_tokenizer_eos(b))
                return dse__fail(reterr, -EINVAL, "BOS/EOS %d/%d against %d/%d", dse_tokenizer_bos(a),
                                 dse_tokenizer_eos(a), dse_tokenizer_bos(b), dse_tokenizer_eos(b));
        for (int32_t id = 0; id < dse_tokenizer_n_vocab(a); id++)
                if (strcmp(piece_or_none(a, id), piece_or_none(b, id)) != 0)
                        return dse__fail(reterr, -EINVAL, "token %d is '%.100s' against '%.100s'", id,
                                         piece_or_none(a, id), piece_or_none(b, id));
        return 0;
}

int dse_model_tokenizers_match(const struct dse_model *a, const struct dse_model *b, struct dse_diag *reterr) {
        if (!a || !b)
                return dse__fail(reterr, -EINVAL, "dse_model_tokenizers_match: NULL model");
        struct dse_tokenizer *ta = NULL, *tb = NULL;
        int ra = dse_model_tokenizer(a, &ta, reterr), r;
        if (ra < 0 && ra != -ENOENT)
                return ra;
        int rb = dse_model_tokenizer(b, &tb, reterr);
        if (rb < 0 && rb != -ENOENT)
                r = rb;
        else if (!ta != !tb)
                r = dse__fail(reterr, -EINVAL, "%s has no tokenizer", ta ? "the second" : "the first");
        else if (ta)
                r = tokenizers_match(ta, tb, reterr);
        else if (dse_model_vocab_size(a) != dse_model_vocab_size(b))
                r = dse__fail(reterr, -EINVAL, "neither has a tokenizer, and their vocabularies are %d and %d ids",
                              dse_model_vocab_size(a), dse_model_vocab_size(b));
        else
                r = 0;
        dse_tokenizer_free(ta);
        dse_tokenizer_free(tb);
        return r;
}
