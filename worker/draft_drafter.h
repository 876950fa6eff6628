/* The draft-model drafter (speculate.h's ops table over a second, smaller model with the
 * same tokenizer, run in the same worker): a sequence's drafts are the draft model's
 * chain after the sequence's tokens: greedy (propose; point masses, so spec_verify keeps
 * the target's tokens exactly), or for a sampled request each a draw from the draft
 * model's own distribution through the scheduler's pick, one draw past the drafts
 * (propose_sampled; the scheduler weighs them by the standard rule,
 * spec_accept_or_resample). The draft model has its own paged KV cache;
 * each sequence that drafts holds one of its sequences, cut back to what it has in
 * common with the request's tokens before every chain (dse_kv_seq_rewind: rejected
 * drafts drop out there), opened with the cache's prefix blocks, and closed when the
 * request ends or is preempted. */
#ifndef DSV_WORKER_DRAFT_DRAFTER_H
#define DSV_WORKER_DRAFT_DRAFTER_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "scheduler.h"
#include "speculate.h"

struct spec_draft_config {
        const struct dse_model *target; /* the served model */
        const char *target_name, *draft_name; /* for messages */
        enum dse_kv_dtype kv_dtype;
        int max_seqs;     /* sequences drafting at once: the target cache's */
        int n_ctx;        /* the target's */
        size_t kv_tokens; /* positions the draft cache holds (spec_draft_kv_tokens) */
        struct dse_pool *pool; /* compute threads, or NULL */
};

struct spec_draft {
        struct sched *s;
        struct dse_model *model;   /* the draft model */
        struct dse_model *owned;   /* model, when spec_draft_open opened it */
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        float *logits;             /* (draft vocab) */
        int vocab;                 /* drafts are chosen among the target's ids */
        int max_seqs;
        int32_t *slot_of;          /* (max_seqs) scheduler slot of each draft sequence, -1: closed */
};

extern const struct spec_drafter_ops spec_draft_ops;

/* Positions of a draft cache for a target cache of target_tokens positions serving
 * max_seqs sequences with up to k_max drafts each, in blocks of block_tokens: as many as
 * the target's, so whatever the target holds the draft model can too, plus each
 * sequence's drafts and a partial block of its own. */
size_t spec_draft_kv_tokens(size_t target_tokens, int max_seqs, int k_max, int block_tokens);

/* -EINVAL with a message naming both models unless the two tokenize alike
 * (dse_model_tokenizers_match). */
int spec_draft_tokenizer_check(const struct dse_model *target, const char *target_name, const struct dse_model *draft,
                               const char *draft_name, char *err, size_t err_size);

/* Checks the tokenizers and builds the draft cache and batch over draft (not taken:
 * it must outlive d). -EINVAL (tokenizers), or the engine's error, with a message. */
int spec_draft_init(struct spec_draft *d, struct dse_model *draft, const struct spec_draft_config *cfg, char *err,
                    size_t err_size);
/* spec_draft_init on the model at path (native file or HF folder, dse_model_resolve),
 * which d then owns. */
int spec_draft_open(struct spec_draft *d, const char *path, const struct spec_draft_config *cfg, char *err,
                    size_t err_size);
/* Makes d the drafter of s with bounds cfg (method SPEC_DRAFT); d must outlive s. */
int spec_draft_attach(struct spec_draft *d, struct sched *s, const struct spec_config *cfg, char *err,
                      size_t err_size);
/* Blocks of the draft cache in use (0 once every request ended). */
int spec_draft_blocks_used(const struct spec_draft *d);
void spec_draft_done(struct spec_draft *d);

#endif
