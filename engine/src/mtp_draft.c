/* DeepSeek-V3 multi-token prediction (MTP) drafting (see mtp.h and dse.h).
 *
 * A draft is the module's greedy guess at the token after next: at position p it takes
 * the main model's hidden state at p and the token at p + 1 (DeepSeek-V3 section 2.2).
 * The first draft of a step comes from the last evaluated position and the token just
 * sampled; each further one feeds the module its own hidden state (after
 * shared_head.norm, as vLLM and SGLang recycle it) and the previous draft, one position
 * on. Those chained rows sit past the sequence's end: in its own last block where it has
 * room, else in a few blocks the drafter took from the pool, and the next step's rows
 * overwrite them. Only the first module drafts (DeepSeek-V3 ships one); a checkpoint's
 * further modules are loaded but not run.
 *
 * A sequence decoding plainly (one token, no drafts, per step) needs no module rows
 * until it drafts again, so its rows wait, with the main model's hidden states they are
 * made from, and are written in one pass over the module (the GEMM path) when it drafts,
 * takes a step of more tokens, has MTP_DEFER_MAX rows waiting, or the step would fill
 * the block holding the first waiting position: a full block enters the prefix table,
 * and another sequence attaching it reads its rows, so each block's rows are written
 * no later than the eager order writes them (its last row at the step after it fills).
 * A row's arithmetic does not depend on the rows computed beside it, so the rows are
 * the ones the eager order writes, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "mtp.h"

/* Positions whose rows may wait. A few are enough for one module pass to serve several
 * rows, and few enough that the pass barely sets apart the step that runs it: the
 * worker prices drafts by the time of its steps, and a sequence's first drafting step
 * after plain ones also runs the pass (written as they wait for longer, its rows made
 * those steps read dearer and the plain ones cheaper than they are). */
#define MTP_DEFER_MAX 4
/* Hidden states kept per sequence: the waiting positions, or the last non-draft
 * position of a step and its drafts. */
#define MTP_KEPT (MTP_DEFER_MAX > 1 + DSE_MTP_MAX_DRAFT ? MTP_DEFER_MAX : 1 + DSE_MTP_MAX_DRAFT)
#define T DSE__MAX_STEP_TOKENS

struct mtp_seq {
        uint32_t opened;  /* the opening of the KV slot this state belongs to */
        int32_t pend_pos; /* first position whose module row is not written yet */
        int32_t n_pend;   /* main-model hidden states kept from pend_pos on */
        float *hid;       /* (MTP_KEPT, hidden) */
};

struct dse__mtp {
        struct dse_session *s;
        struct dse_kv_cache *kv;
        int32_t D, V;
        struct mtp_seq *seqs;     /* (max_seqs) by KV sequence */
        float *hid_mem;           /* backing of every seqs[i].hid */
        float *hid_call;          /* (T, hidden) the main forward call's hidden states */
        float *h_in, *h_out;      /* (T, hidden) one module call's inputs and outputs */
        float *logits;            /* (vocab) */
        int n_items;              /* tokens gathered for the next module call */
        struct dse__tok toks[T];
        struct dse__kv_view views[T];
        struct dse__kv_view chain_view;
        int32_t *chain_table;     /* (max blocks of a sequence + scratch) the chain's block table */
        int32_t scratch[DSE_MTP_MAX_DRAFT + 2];
        int n_scratch;
};

void dse__mtp_free(struct dse__mtp *m) {
        if (!m)
                return;
        if (m->n_scratch)
                dse__kv_blocks_put(m->kv, m->n_scratch, m->scratch);
        free(m->seqs);
        free(m->hid_mem);
        free(m->hid_call);
        free(m->h_in);
        free(m->h_out);
        free(m->logits);
        free(m->chain_table);
        free(m);
}

int dse__mtp_new(struct dse_session *s, struct dse_kv_cache *kv, struct dse__mtp **ret, struct dse_diag *reterr) {
        if (s->hp->n_mtp_layers < 1 || !s->ops->mtp_forward)
                return dse__fail(reterr, -EOPNOTSUPP, "the model has no MTP module (num_nextn_predict_layers 0)");
        struct dse__mtp *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->s = s;
        m->kv = kv;
        m->D = s->hp->hidden_size;
        m->V = s->hp->vocab_size;
        size_t D = (size_t)m->D, n_seqs = (size_t)dse__kv_max_seqs(kv);
        int32_t bt = dse__kv_block_tokens(kv), max_blocks = (dse__kv_n_ctx(kv) + bt - 1) / bt;
        /* the chain's rows span DSE_MTP_MAX_DRAFT - 1 positions past the sequence's end */
        m->n_scratch = (DSE_MTP_MAX_DRAFT - 1 + bt - 1) / bt + 1;
        m->seqs = calloc(n_seqs, sizeof *m->seqs);
        m->hid_mem = malloc(n_seqs * MTP_KEPT * D * sizeof(float));
        m->hid_call = malloc(T * D * sizeof(float));
        m->h_in = malloc(T * D * sizeof(float));
        m->h_out = malloc(T * D * sizeof(float));
        m->logits = malloc((size_t)m->V * sizeof(float));
        m->chain_table = malloc((size_t)(max_blocks + m->n_scratch) * sizeof(int32_t));
        if (!m->seqs || !m->hid_mem || !m->hid_call || !m->h_in || !m->h_out || !m->logits || !m->chain_table) {
                m->n_scratch = 0;
                dse__mtp_free(m);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n_seqs; i++)
                m->seqs[i].hid = m->hid_mem + i * MTP_KEPT * D;
        if (dse__kv_blocks_take(kv, m->n_scratch, m->scratch) < 0) {
                int n = m->n_scratch;
                m->n_scratch = 0;
                dse__mtp_free(m);
                return dse__fail(reterr, -ENOSPC, "MTP drafting needs %d KV blocks of its own; the pool has fewer free", n);
        }
        *ret = m;
        return 0;
}

/* Runs the gathered tokens through the module (logits where they asked, hidden states
 * into h_out). */
static void flush(struct dse__mtp *m) {
        if (m->n_items > 0)
                m->s->ops->mtp_forward(m->s, 0, m->toks, m->h_in, m->n_items, m->h_out);
        m->n_items = 0;
}

static void add_item(struct dse__mtp *m, const struct dse__kv_view *kv, int32_t pos, int32_t token, const float *h,
                     float *logits) {
        if (m->n_items == T)
                flush(m);
        int i = m->n_items++;
        m->views[i] = *kv;
        m->toks[i] = (struct dse__tok){.token = token, .pos = pos, .kv = &m->views[i], .logits = logits};
        memcpy(m->h_in + (size_t)i * (size_t)m->D, h, (size_t)m->D * sizeof(float));
}

/* seq's state, reset when the slot was reopened since (its rows before the sequence's
 * length came with it: an attached prefix's blocks). */
static struct mtp_seq *seq_state(struct dse__mtp *m, int seq) {
        struct mtp_seq *q = &m->seqs[seq];
        int32_t len = dse_kv_seq_len(m->kv, seq);
        if (q->opened != dse__kv_seq_opened(m->kv, seq) || q->pend_pos > len) {
                q->opened = dse__kv_seq_opened(m->kv, seq);
                q->pend_pos = len;
                q->n_pend = 0;
        }
        return q;
}

/* Gathers the rows of seq's pending positions that survived verification (next_token
 * follows the last of them); logits, when not NULL, for the last. */
static void add_catch_up(struct dse__mtp *m, int seq, int32_t next_token, float *logits) {
        struct mtp_seq *q = seq_state(m, seq);
        int32_t len = dse_kv_seq_len(m->kv, seq), n = len - q->pend_pos;
        n = n < q->n_pend ? n : q->n_pend;
        const int32_t *ids = dse__kv_seq_tokens(m->kv, seq);
        struct dse__kv_view view;
        dse__kv_seq_view(m->kv, seq, &view);
        for (int32_t j = 0; j < n; j++) {
                int32_t p = q->pend_pos + j;
                add_item(m, &view, p, p + 1 < len ? ids[p + 1] : next_token, q->hid + (size_t)j * (size_t)m->D,
                         j == n - 1 ? logits : NULL);
        }
        q->pend_pos = len;
        q->n_pend = 0;
}

/* Whether seq's waiting rows may wait through a step of n_tokens tokens, n_draft of them
 * drafts (see the top of the file). */
static int may_wait(struct dse__mtp *m, int seq, int32_t n_tokens, int32_t n_draft) {
        const struct mtp_seq *q = seq_state(m, seq);
        int32_t len = dse_kv_seq_len(m->kv, seq), bt = dse__kv_block_tokens(m->kv);
        return n_tokens == 1 && n_draft == 0 && q->n_pend >= len - q->pend_pos && len - q->pend_pos < MTP_DEFER_MAX &&
               len + 1 < (q->pend_pos / bt + 1) * bt;
}

void dse__mtp_catch_up_step(struct dse__mtp *m, const struct dse_batch_seq *seqs, const int32_t *n_draft,
                            size_t n_seqs) {
        for (size_t i = 0; i < n_seqs; i++) {
                if (!may_wait(m, seqs[i].seq, seqs[i].n_tokens, n_draft ? n_draft[i] : 0))
                        add_catch_up(m, seqs[i].seq, seqs[i].tokens[0], NULL);
        }
        flush(m);
}

float *dse__mtp_hidden(struct dse__mtp *m, int i) {
        return m->hid_call + (size_t)i * (size_t)m->D;
}

void dse__mtp_after_forward(struct dse__mtp *m, const struct dse__tok *toks, const struct dse__mtp_tok *info, int n) {
        size_t D = (size_t)m->D;
        for (int i = 0; i < n; i++) {
                const struct dse__mtp_tok *f = &info[i];
                int32_t last = f->n_tokens - 1 - f->n_draft; /* the last non-draft token */
                if (f->t < last) {
                        add_item(m, toks[i].kv, toks[i].pos, f->tokens[f->t + 1], m->hid_call + (size_t)i * D, NULL);
                        continue;
                }
                /* kept after the waiting ones (dse__mtp_catch_up_step left them only
                 * before a one-token step), else from the step's last non-draft token on */
                struct mtp_seq *q = &m->seqs[f->seq];
                if (q->n_pend == 0)
                        q->pend_pos = toks[i].pos;
                int32_t j = toks[i].pos - q->pend_pos;
                memcpy(q->hid + (size_t)j * D, m->hid_call + (size_t)i * D, D * sizeof(float));
                q->n_pend = j + 1;
        }
        flush(m);
}

static int32_t argmax(const float *x, int32_t n) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
                if (x[i] > x[best] || isnan(x[best]))
                        best = i;
        return best;
}

int dse__mtp_draft(struct dse__mtp *m, int seq, int32_t next_token, int max_draft, int32_t *draft) {
        struct mtp_seq *q = seq_state(m, seq);
        int32_t len = dse_kv_seq_len(m->kv, seq), room = dse__kv_n_ctx(m->kv) - len;
        max_draft = max_draft < room ? max_draft : room;
        /* the first draft needs the main model's hidden state at the last position */
        if (max_draft < 1 || q->n_pend == 0 || q->pend_pos + q->n_pend < len)
                return 0;
        add_catch_up(m, seq, next_token, m->logits);
        int last = m->n_items - 1; /* add_item flushes a full call: the last row's place in the last */
        flush(m);
        const float *h = m->h_out + (size_t)last * (size_t)m->D;
        draft[0] = argmax(m->logits, m->V);
        if (max_draft == 1)
                return 1;
        /* the chain's block table: the sequence's blocks, then the scratch blocks */
        dse__kv_seq_view(m->kv, seq, &m->chain_view);
        int32_t nb = dse__kv_seq_n_blocks(m->kv, seq);
        memcpy(m->chain_table, m->chain_view.blocks, (size_t)nb * sizeof(int32_t));
        memcpy(m->chain_table + nb, m->scratch, (size_t)m->n_scratch * sizeof(int32_t));
        m->chain_view.blocks = m->chain_table;
        for (int j = 1; j < max_draft; j++) {
                add_item(m, &m->chain_view, len + j - 1, draft[j - 1], h, m->logits);
                flush(m);
                h = m->h_out;
                draft[j] = argmax(m->logits, m->V);
        }
        return max_draft;
}

int dse_session_eval_mtp(struct dse_session *s, const int32_t *tokens, size_t n_tokens, float *mtp_logits,
                         struct dse_diag *reterr) {
        if (!s || !tokens || n_tokens < 2 || !mtp_logits)
                return dse__fail(reterr, -EINVAL, "dse_session_eval_mtp: bad arguments");
        if (s->hp->n_mtp_layers < 1 || !s->ops->mtp_forward)
                return dse__fail(reterr, -EOPNOTSUPP, "the model has no MTP module (num_nextn_predict_layers 0)");
        if (n_tokens > (size_t)(s->n_ctx - s->n_past))
                return dse__fail(reterr, -E2BIG, "%zu tokens after %d do not fit in a context of %d", n_tokens,
                                 s->n_past, s->n_ctx);
        int32_t V = s->hp->vocab_size;
        size_t D = (size_t)s->hp->hidden_size;
        for (size_t i = 0; i < n_tokens; i++)
                if (tokens[i] < 0 || tokens[i] >= V)
                        return dse__fail(reterr, -EINVAL, "token %d at index %zu is outside the vocabulary (%d)",
                                         tokens[i], i, V);
        float *hid = malloc(n_tokens * D * sizeof(float)), *hin = malloc(T * D * sizeof(float));
        if (!hid || !hin || dse__session_kv_with_mtp(s) < 0) {
                free(hid);
                free(hin);
                return -ENOMEM;
        }
        struct dse__tok toks[T];
        int32_t p0 = s->n_past;
        for (size_t i0 = 0; i0 < n_tokens; i0 += T) {
                int n = n_tokens - i0 < T ? (int)(n_tokens - i0) : T;
                for (int k = 0; k < n; k++)
                        toks[k] = (struct dse__tok){.token = tokens[i0 + k], .pos = p0 + (int32_t)(i0 + k), .kv = &s->kv,
                                                    .hidden = hid + (i0 + k) * D};
                s->ops->forward(s, toks, n);
        }
        /* row i: the hidden state at p0 + i and the token after it */
        for (size_t i0 = 0; i0 + 1 < n_tokens; i0 += T) {
                int n = n_tokens - 1 - i0 < T ? (int)(n_tokens - 1 - i0) : T;
                for (int k = 0; k < n; k++)
                        toks[k] = (struct dse__tok){.token = tokens[i0 + k + 1], .pos = p0 + (int32_t)(i0 + k),
                                                    .kv = &s->kv, .logits = mtp_logits + (i0 + k) * (size_t)V};
                memcpy(hin, hid + i0 * D, (size_t)n * D * sizeof(float));
                s->ops->mtp_forward(s, 0, toks, hin, n, NULL);
        }
        s->n_past += (int)n_tokens;
        free(hid);
        free(hin);
        return 0;
}
