/* Multi-sequence steps over the paged KV cache (see dse.h, "batched sessions").
 *
 * The batch owns a session without a private cache and feeds the architecture's
 * forward pass up to DSE__MAX_STEP_TOKENS tokens per call, gathered across the step's
 * sequences, each token carrying its sequence's KV view (block table). So the
 * single-sequence session and the batch share one forward pass and differ only in where
 * the KV rows live, and each pass over the weights serves every sequence of the call.
 * Every token's arithmetic is the same whatever its neighbours (the kernels' matmul
 * computes each token's row as matvec does), so a sequence's logits do not depend on
 * the step it runs in or on how its prompt was chunked, and a verification pass of
 * speculative drafts gives each draft position the logits a one-token decode would. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kv.h"
#include "model/forward.h"
#include "mtp.h"

struct dse_batch {
        struct dse_session *s; /* no private cache: views come with the tokens */
        struct dse_kv_cache *kv;
        int32_t vocab;
        struct dse__tok toks[DSE__MAX_STEP_TOKENS];
        struct dse__kv_view views[DSE__MAX_STEP_TOKENS]; /* the view of toks[i]'s sequence */
        struct dse__mtp *mtp;                            /* NULL: MTP not enabled */
        struct dse__mtp_tok mtp_info[DSE__MAX_STEP_TOKENS]; /* where toks[i] sits in its entry */
};

int dse_batch_new(const struct dse_model *model, struct dse_kv_cache *kv, struct dse_pool *pool,
                  struct dse_batch **ret_batch, struct dse_diag *reterr) {
        if (!model || !kv || !ret_batch)
                return dse__fail(reterr, -EINVAL, "dse_batch_new: bad arguments");
        if (!dse__kv_fits_model(kv, dse__model_hparams(model)))
                return dse__fail(reterr, -EINVAL, "dse_batch_new: the KV cache was made for another model");
        struct dse_batch *b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        int r = dse__session_new_paged(model, dse__kv_n_ctx(kv), pool, &b->s, reterr);
        if (r < 0) {
                free(b);
                return r;
        }
        b->kv = kv;
        b->vocab = dse__model_hparams(model)->vocab_size;
        *ret_batch = b;
        return 0;
}

void dse_batch_free(struct dse_batch *b) {
        if (!b)
                return;
        dse__mtp_free(b->mtp);
        dse_session_free(b->s);
        free(b);
}

int dse_batch_set_activations(struct dse_batch *b, enum dse_activations a) {
        return b ? dse_session_set_activations(b->s, a) : -EINVAL;
}

size_t dse_batch_arena_bytes(const struct dse_batch *b) {
        return b ? dse_session_arena_bytes(b->s) : 0;
}

static int check_seqs(const struct dse_batch *b, const struct dse_batch_seq *seqs, const int32_t *n_draft, size_t n,
                      struct dse_diag *reterr) {
        int32_t n_ctx = dse__kv_n_ctx(b->kv);
        int need = 0;
        for (size_t i = 0; i < n; i++) {
                const struct dse_batch_seq *q = &seqs[i];
                if (!dse__kv_seq_is_open(b->kv, q->seq) || q->n_tokens < 1 || !q->tokens)
                        return dse__fail(reterr, -EINVAL, "batch entry %zu: sequence %d not open or no tokens", i,
                                         q->seq);
                if (n_draft && (n_draft[i] < 0 || n_draft[i] >= q->n_tokens))
                        return dse__fail(reterr, -EINVAL, "sequence %d: n_draft %d outside [0, n_tokens %d)", q->seq,
                                         n_draft[i], q->n_tokens);
                if (n_draft && b->mtp && n_draft[i] > DSE_MTP_MAX_DRAFT)
                        return dse__fail(reterr, -EINVAL, "sequence %d: n_draft %d over %d with MTP enabled", q->seq,
                                         n_draft[i], DSE_MTP_MAX_DRAFT);
                for (size_t j = 0; j < i; j++)
                        if (seqs[j].seq == q->seq)
                                return dse__fail(reterr, -EINVAL, "sequence %d appears twice in one step", q->seq);
                for (int32_t t = 0; t < q->n_tokens; t++)
                        if (q->tokens[t] < 0 || q->tokens[t] >= b->vocab)
                                return dse__fail(reterr, -EINVAL, "sequence %d: token %d outside the vocabulary (%d)",
                                                 q->seq, q->tokens[t], b->vocab);
                int len = dse_kv_seq_len(b->kv, q->seq);
                if ((int64_t)len + q->n_tokens > n_ctx)
                        return dse__fail(reterr, -E2BIG, "sequence %d: %d tokens after %d do not fit in %d", q->seq,
                                         q->n_tokens, len, n_ctx);
                need += dse_kv_seq_blocks_needed(b->kv, q->seq, (size_t)q->n_tokens);
        }
        if (need > dse_kv_cache_n_available(b->kv))
                return dse__fail(reterr, -ENOSPC, "KV cache: the step needs %d blocks, %d are available", need,
                                 dse_kv_cache_n_available(b->kv));
        return 0;
}

/* The main model over the gathered tokens, then the MTP module over those it can take. */
static void forward(struct dse_batch *b, int n) {
        b->s->ops->forward(b->s, b->toks, n);
        if (b->mtp)
                dse__mtp_after_forward(b->mtp, b->toks, b->mtp_info, n);
}

int dse_batch_verify(struct dse_batch *b, const struct dse_batch_seq *seqs, const int32_t *n_draft, size_t n_seqs,
                     struct dse_diag *reterr) {
        if (!b || (!seqs && n_seqs))
                return dse__fail(reterr, -EINVAL, "dse_batch_step: bad arguments");
        int r = check_seqs(b, seqs, n_draft, n_seqs, reterr);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_seqs; i++)
                if ((r = dse__kv_seq_reserve(b->kv, seqs[i].seq, (size_t)seqs[i].n_tokens)) < 0)
                        return r; /* cannot happen: check_seqs counted the blocks */
        if (b->mtp)
                dse__mtp_catch_up_step(b->mtp, seqs, n_draft, n_seqs);
        int n = 0;
        for (size_t i = 0; i < n_seqs; i++) {
                const struct dse_batch_seq *q = &seqs[i];
                int32_t nd = n_draft ? n_draft[i] : 0;
                int32_t pos = dse_kv_seq_len(b->kv, q->seq), first_out = q->n_tokens - 1 - nd;
                for (int32_t t = 0; t < q->n_tokens; t++) {
                        float *out = q->logits && t >= first_out ? q->logits + (size_t)(t - first_out) * b->vocab
                                                                 : NULL;
                        dse__kv_seq_view(b->kv, q->seq, &b->views[n]);
                        b->toks[n] = (struct dse__tok){.token = q->tokens[t], .pos = pos + t, .kv = &b->views[n],
                                                       .logits = out,
                                                       .hidden = b->mtp ? dse__mtp_hidden(b->mtp, n) : NULL};
                        b->mtp_info[n] = (struct dse__mtp_tok){q->seq, t, q->n_tokens, nd, q->tokens};
                        if (++n == DSE__MAX_STEP_TOKENS) {
                                forward(b, n);
                                n = 0;
                        }
                }
        }
        if (n > 0)
                forward(b, n);
        for (size_t i = 0; i < n_seqs; i++) {
                int32_t nd = n_draft ? n_draft[i] : 0;
                dse__kv_seq_commit(b->kv, seqs[i].seq, seqs[i].tokens, (size_t)(seqs[i].n_tokens - nd), (size_t)nd);
        }
        return 0;
}

int dse_batch_step(struct dse_batch *b, const struct dse_batch_seq *seqs, size_t n_seqs, struct dse_diag *reterr) {
        return dse_batch_verify(b, seqs, NULL, n_seqs, reterr);
}

int dse_batch_enable_mtp(struct dse_batch *b, struct dse_diag *reterr) {
        if (!b)
                return dse__fail(reterr, -EINVAL, "dse_batch_enable_mtp: bad arguments");
        return b->mtp ? 0 : dse__mtp_new(b->s, b->kv, &b->mtp, reterr);
}

int dse_batch_mtp_draft(struct dse_batch *b, int seq, int32_t next_token, int max_draft, int32_t *draft,
                        struct dse_diag *reterr) {
        if (!b || !b->mtp || !dse__kv_seq_is_open(b->kv, seq) || max_draft < 0 || max_draft > DSE_MTP_MAX_DRAFT ||
            (!draft && max_draft) || next_token < 0 || next_token >= b->vocab)
                return dse__fail(reterr, -EINVAL, "dse_batch_mtp_draft: MTP not enabled, sequence %d not open, or bad "
                                 "arguments", seq);
        return dse__mtp_draft(b->mtp, seq, next_token, max_draft, draft);
}
