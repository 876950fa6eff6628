/* MTP drafting on a batch (mtp_draft.c): the engine-internal seam between batch.c, which
 * runs the main model's steps, and the MTP module's own bookkeeping.
 *
 * The module's KV rows are one more layer of the paged cache (kv.c lays out
 * n_layers + n_mtp_layers), so they share the sequence's blocks, its prefix sharing and
 * its rollback. Its row at position p is made from the main model's hidden state at p and
 * the token at p + 1, so it can be written only once that token is known: during a
 * step, for every evaluated position but the last non-draft one and the drafts (whose
 * hidden states the state keeps, "pending"); the pending positions that survive
 * verification are caught up by the next draft, or by the next step unless it is a
 * plain one-token step that lets them wait (mtp_draft.c says when). */
#ifndef DSE_MTP_H
#define DSE_MTP_H

#include "kv.h"
#include "model/forward.h"

struct dse__mtp;

/* For sessions of model with an MTP module over cache kv; -ENOSPC when the pool cannot
 * spare the few blocks the drafts' own rows use. */
int dse__mtp_new(struct dse_session *s, struct dse_kv_cache *kv, struct dse__mtp **ret, struct dse_diag *reterr);
void dse__mtp_free(struct dse__mtp *m);

/* Before a step over seqs (each checked by the caller; the last n_draft[i] tokens of
 * seqs[i] drafts, n_draft NULL: none): writes the module's rows of the positions still
 * pending, the token after the last being the step's first, for the sequences whose rows
 * may not wait longer. */
void dse__mtp_catch_up_step(struct dse__mtp *m, const struct dse_batch_seq *seqs, const int32_t *n_draft,
                            size_t n_seqs);

/* A main forward call's token: token t of its sequence's step entry (n_tokens tokens,
 * the last n_draft of them drafts). */
struct dse__mtp_tok {
        int32_t seq;
        int32_t t, n_tokens, n_draft;
        const int32_t *tokens;
};

/* The hidden-state buffer for the main forward call's token i (set as toks[i].hidden). */
float *dse__mtp_hidden(struct dse__mtp *m, int i);
/* After the main forward call of n tokens (toks, with their hidden states at
 * dse__mtp_hidden): runs the module over the tokens whose next token is known and final,
 * keeps the others' hidden states pending. */
void dse__mtp_after_forward(struct dse__mtp *m, const struct dse__tok *toks, const struct dse__mtp_tok *info, int n);

/* dse_batch_mtp_draft's work (the arguments checked). */
int dse__mtp_draft(struct dse__mtp *m, int seq, int32_t next_token, int max_draft, int32_t *draft);

#endif
