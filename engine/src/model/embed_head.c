/* The token embedding and the LM head, the same in every architecture: a token's row of
 * model.embed_tokens in, the final norm and lm_head (the embedding when tied) out. */
#include <string.h>

#include "internal.h"
#include "model/forward.h"

int dse__embed_head_bind(struct dse__weights *w, struct dse__embed_head *ret, struct dse_diag *reterr) {
        const struct dse_hparams *hp = w->hp;
        int64_t D = hp->hidden_size, V = hp->vocab_size;
        int r;
        if ((r = dse__weights_matrix(w, "model.embed_tokens.weight", V, D, 0, &ret->embed, reterr)) < 0)
                return r;
        if (ret->embed.perm)
                return dse__fail(reterr, -EOPNOTSUPP, "model.embed_tokens.weight: permuted columns");
        if ((r = dse__weights_matrix(w, "lm_head.weight", V, D, hp->tie_word_embeddings, &ret->lm_head, reterr)) < 0)
                return r;
        if (!ret->lm_head.data) /* tie_word_embeddings */
                ret->lm_head = ret->embed;
        return dse__weights_vector(w, "model.norm.weight", D, 0, &ret->final_norm, reterr);
}

void dse__embed_tokens(const struct dse_session *s, const struct dse__embed_head *eh, const struct dse__tok *toks,
                       int n, float *x) {
        int64_t D = s->hp->hidden_size;
        for (int i = 0; i < n; i++)
                s->k.dequant_row(&eh->embed, toks[i].token, x + i * D);
}

void dse__lm_head(struct dse_session *s, const struct dse__embed_head *eh, const struct dse__tok *toks, int n,
                  const float *x, float *xb, float *logits) {
        const struct dse_hparams *hp = s->hp;
        int64_t D = hp->hidden_size, V = hp->vocab_size;
        int m = 0;
        for (int i = 0; i < n; i++)
                if (toks[i].logits)
                        s->k.rmsnorm(xb + (m++) * D, x + i * D, eh->final_norm, D, hp->rms_norm_eps);
        if (m == 0)
                return;
        dse__linear_n(s, &eh->lm_head, xb, D, m, logits, V, NULL);
        for (int i = 0, k = 0; i < n; i++)
                if (toks[i].logits)
                        memcpy(toks[i].logits, logits + (k++) * V, (size_t)V * sizeof(float));
}
