/* Placeholder until the spm tokenizer lands in this session; replaced wholesale. */
#include "../internal.h"
#include "tokenizer.h"

int dse__tok_spm_init(struct dse_tokenizer *tok, const void *data, size_t len, struct dse_diag *reterr) {
        return dse__fail(reterr, -EOPNOTSUPP, "SentencePiece support is not built yet");
}
