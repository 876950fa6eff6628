/* The draft-model drafter (see draft_drafter.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft_drafter.h"

#define DRAFT_BLOCK_TOKENS 16

size_t spec_draft_kv_tokens(size_t target_tokens, int max_seqs, int k_max, int block_tokens) {
        return target_tokens + (size_t)max_seqs * (size_t)(k_max + block_tokens);
}

int spec_draft_tokenizer_check(const struct dse_model *target, const char *target_name, const struct dse_model *draft,
                               const char *draft_name, char *err, size_t err_size) {
        struct dse_diag diag = {{0}};
        int r = dse_model_tokenizers_match(target, draft, &diag);
        if (r == -EINVAL)
                snprintf(err, err_size, "--draft-model %s: its tokenizer differs from the served model %s's (the "
                         "served model's against the draft's: %s); a draft model must share the served model's "
                         "tokenizer",
                         draft_name, target_name, diag.msg);
        else if (r < 0)
                snprintf(err, err_size, "--draft-model %s: %s", draft_name, diag.msg);
        return r;
}

static int argmax(const float *x, int n) {
        int best = 0;
        for (int i = 1; i < n; i++)
                if (x[i] > x[best])
                        best = i;
        return best;
}

/* The draft sequence serving scheduler slot `slot`, opened (with the cache's prefix
 * blocks for tokens) when it has none; -EBUSY when every one is taken. */
static int draft_seq_for(struct spec_draft *d, int slot, const int32_t *tokens, int32_t n_tokens) {
        for (int i = 0; i < d->max_seqs; i++)
                if (d->slot_of[i] == slot)
                        return i;
        int seq = dse_kv_seq_open(d->kv);
        if (seq < 0)
                return seq;
        int r = dse_kv_seq_attach_prefix(d->kv, seq, tokens, (size_t)n_tokens);
        if (r < 0) {
                dse_kv_seq_close(d->kv, seq);
                return r;
        }
        d->slot_of[seq] = slot;
        return seq;
}

static void draft_release(void *self, int slot) {
        struct spec_draft *d = self;
        for (int i = 0; i < d->max_seqs; i++)
                if (d->slot_of[i] == slot) {
                        dse_kv_seq_close(d->kv, i);
                        d->slot_of[i] = -1;
                }
}

/* Brings the draft sequence to tokens (cutting back what the verification rejected,
 * evaluating what it accepted and the token after), then chains n_pick drafts, each
 * the argmax (pick NULL) or pick's draw, and each evaluated for the next but the last.
 * Out of draft blocks (or context): the drafts chained so far, and (out of blocks) the
 * sequence's rows go back so the others can draft. Returns how many were chained. */
static int draft_chain(struct spec_draft *d, int slot, const int32_t *tokens, int32_t n_tokens, int n_pick,
                       int32_t *draft, const struct spec_pick *pick) {
        if (n_tokens < 1 || n_pick < 1)
                return 0;
        int seq = draft_seq_for(d, slot, tokens, n_tokens);
        if (seq < 0)
                return seq == -EBUSY ? 0 : seq;
        int kept = dse_kv_seq_rewind(d->kv, seq, tokens, (size_t)n_tokens - 1);
        if (kept < 0)
                return kept;
        struct dse_batch_seq one = {seq, tokens + kept, n_tokens - kept, d->logits};
        int n = 0, r;
        while ((r = dse_batch_step(d->b, &one, 1, NULL)) == 0) {
                int tok = pick ? pick->pick(pick->ctx, n, d->logits, d->vocab) : argmax(d->logits, d->vocab);
                if (tok < 0)
                        return n;
                draft[n] = tok;
                if (++n == n_pick)
                        return n;
                one = (struct dse_batch_seq){seq, draft + n - 1, 1, d->logits};
        }
        if (r == -ENOSPC)
                draft_release(d, slot);
        return r == -ENOSPC || r == -E2BIG ? n : r;
}

static int draft_propose(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                         int32_t *draft) {
        return draft_chain(self, slot, tokens, n_tokens, max_draft, draft, NULL);
}

/* The last pick is the bonus position's draw, not a draft. */
static int draft_propose_sampled(void *self, int slot, const int32_t *tokens, int32_t n_tokens, int max_draft,
                                 int32_t *draft, const struct spec_pick *pick) {
        int n = draft_chain(self, slot, tokens, n_tokens, max_draft + 1, draft, pick);
        return n > max_draft ? max_draft : n;
}

const struct spec_drafter_ops spec_draft_ops = {.name = "draft",
                                                .propose = draft_propose,
                                                .release = draft_release,
                                                .propose_sampled = draft_propose_sampled};

int spec_draft_init(struct spec_draft *d, struct dse_model *draft, const struct spec_draft_config *cfg, char *err,
                    size_t err_size) {
        memset(d, 0, sizeof *d);
        int r = spec_draft_tokenizer_check(cfg->target, cfg->target_name, draft, cfg->draft_name, err, err_size);
        if (r < 0)
                return r;
        struct dse_diag diag = {{0}};
        struct dse_kv_cache *probe;
        if ((r = dse_kv_cache_new_typed(draft, cfg->kv_dtype, 1u << 30, DRAFT_BLOCK_TOKENS, 1, 1, &probe, &diag)) < 0) {
                snprintf(err, err_size, "--draft-model %s: %s", cfg->draft_name, diag.msg);
                return r;
        }
        size_t block_bytes = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        size_t blocks = (cfg->kv_tokens + DRAFT_BLOCK_TOKENS - 1) / DRAFT_BLOCK_TOKENS;
        int vd = dse_model_vocab_size(draft), vt = dse_model_vocab_size(cfg->target);
        d->model = draft;
        d->max_seqs = cfg->max_seqs;
        d->vocab = vd < vt ? vd : vt;
        if (!(d->logits = malloc((size_t)vd * sizeof(float))) ||
            !(d->slot_of = malloc((size_t)cfg->max_seqs * sizeof(int32_t)))) {
                snprintf(err, err_size, "--draft-model %s: out of memory", cfg->draft_name);
                spec_draft_done(d);
                return -ENOMEM;
        }
        for (int i = 0; i < cfg->max_seqs; i++)
                d->slot_of[i] = -1;
        if ((r = dse_kv_cache_new_typed(draft, cfg->kv_dtype, blocks * block_bytes, DRAFT_BLOCK_TOKENS, cfg->max_seqs,
                                        cfg->n_ctx, &d->kv, &diag)) < 0 ||
            (r = dse_batch_new(draft, d->kv, cfg->pool, &d->b, &diag)) < 0) {
                snprintf(err, err_size, "--draft-model %s: %s", cfg->draft_name, diag.msg);
                spec_draft_done(d);
                return r;
        }
        return 0;
}

int spec_draft_open(struct spec_draft *d, const char *path, const struct spec_draft_config *cfg, char *err,
                    size_t err_size) {
        struct dse_diag diag = {{0}};
        char native[4096];
        struct dse_model *m = NULL;
        int r = dse_model_resolve(path, native, sizeof native, &diag);
        if (r >= 0)
                r = dse_model_open(native, DSE_MODEL_POPULATE, &m, &diag);
        if (r < 0) {
                snprintf(err, err_size, "--draft-model %s: %s", path, diag.msg[0] ? diag.msg : strerror(-r));
                return r;
        }
        if ((r = spec_draft_init(d, m, cfg, err, err_size)) < 0) {
                dse_model_free(m);
                return r;
        }
        d->owned = m;
        return 0;
}

int spec_draft_attach(struct spec_draft *d, struct sched *s, const struct spec_config *cfg, char *err,
                      size_t err_size) {
        d->s = s;
        struct spec_drafter drafter = {&spec_draft_ops, d};
        int r = sched_set_drafter(s, cfg, &drafter);
        if (r < 0)
                snprintf(err, err_size, "--speculative draft: the scheduler refused the drafter");
        return r;
}

int spec_draft_blocks_used(const struct spec_draft *d) {
        struct dse_kv_stats st;
        dse_kv_cache_stats(d->kv, &st);
        return st.n_used;
}

void spec_draft_done(struct spec_draft *d) {
        dse_batch_free(d->b);
        dse_kv_cache_free(d->kv);
        free(d->logits);
        free(d->slot_of);
        dse_model_free(d->owned);
        memset(d, 0, sizeof *d);
}
