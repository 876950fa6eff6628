/* The worker's continuous-batching scheduler: requests, their KV sequences, and one
 * engine step at a time (iteration-level scheduling, as Orca and vLLM do).
 *
 *     struct sched *s;
 *     r = sched_new(&cfg, model, tok, kv, batch, emit_fn, user, &s);
 *     r = sched_add(s, &req, now_ms);     // validated request; events go to emit_fn
 *     while (sched_busy(s))
 *             sched_step(s, now_ms);      // one engine call; token/final/error events
 *     sched_free(s);
 *
 * A step first drops cancelled and expired requests, then fills a batch: every running
 * sequence that decodes (one token each, oldest first, at most max_batch sequences),
 * then prompt chunks of partly prefilled sequences, then new prompts from the queue
 * (the oldest first, then those of the same length class, so a step's prefill rows are
 * of similar length), all within token_budget tokens. A newcomer whose prefix blocks
 * are on the KV disk tier waits for them off the step (their reads run on the tier's
 * reader thread) while the others keep stepping, then goes on from there. When the KV pool runs short the
 * youngest running sequence is preempted: its blocks are released and it is recomputed
 * (prompt plus the tokens it already generated) when it is admitted again; its output is
 * unchanged. Every request ends with exactly one final or error event. The scheduler
 * allocates only in sched_add (per-request buffers); steps do not allocate (sending an
 * event through emit is the caller's business). One thread.
 *
 * Structured output (worker/README.md): a request with a constraint gets a matcher on a
 * grammar compiled once per (kind, text) and cached (constraint.h). Each step, after the
 * forward pass, the masks of the step's constrained sequences are computed together on
 * the pool; then each sequence's logits get its logit_bias, its mask, its penalties, and
 * go to its sampler. A mask that allows one token forces it without sampling; EOS is
 * allowed only where the grammar accepts, and a sequence whose grammar accepts with
 * nothing allowed but EOS ends there ("stop"). Constrained and unconstrained sequences
 * share the batch. With fast-forward (sched_set_fast_forward), the tokens a grammar forces
 * next ride in one step as certain drafts.
 *
 * With speculation (sched_set_speculation), a decoding sequence may also carry draft tokens in its
 * step, verified in the same forward pass (speculate.h): drafts only fill what the
 * step leaves of the token budget and of spec.step_tokens, never displace a decode or
 * a prefill chunk, and never preempt anything; a request's tokens stay exactly those
 * of plain decoding. */
#ifndef DSV_WORKER_SCHED_H
#define DSV_WORKER_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "confidence.h"
#include "dsv_ipc.h"
#include "speculate.h"

struct sched_config {
        int max_batch;   /* sequences per step (>= 1) */
        int token_budget; /* tokens per step (>= 1) */
        int n_ctx;       /* longest sequence: prompt + generated */
        int max_queue;   /* waiting requests before "overloaded" */
};

struct sched_stats {
        int32_t running, waiting;
        int32_t loading; /* admitted, their prefix blocks being read back from the disk tier */
        int64_t queued_prompt_tokens; /* prompt tokens not yet computed */
        int32_t kv_blocks_used, kv_blocks_total;
        double prefix_hit_rate;
        int64_t prefix_query_tokens, prefix_hit_tokens; /* since start: looked up, found */
        struct dse_kv_stats kv; /* the cache's own, with its disk tier's */
        int64_t preemptions;
        int64_t steps, step_tokens; /* engine steps and tokens they carried */
        int64_t step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS + 1]; /* steps by tokens (dsv_ipc_step_token_bounds) */
        int32_t last_step_seqs, last_step_tokens;
        int64_t constrained_tokens; /* tokens chosen under a grammar's mask */
        int64_t forced_tokens;      /* of those, the ones the mask left alone (not sampled) */
        int64_t fast_forward_tokens; /* of those, the ones carried as a forced run (no step of their own) */
        int64_t grammar_compiles, grammar_cache_hits;
        struct spec_stats spec;
        struct confidence confidence; /* sampled tokens by probability and entropy */
};

/* Receives every event the scheduler produces; msg is only valid during the call. */
typedef void (*sched_emit_fn)(void *user, const struct dsv_ipc_msg *msg);

struct sched;

/* tok may be NULL (requests must then come as token ids and carry no stop strings).
 * The model, tokenizer, cache and batch must outlive the scheduler. */
int sched_new(const struct sched_config *cfg, const struct dse_model *model, const struct dse_tokenizer *tok,
              struct dse_kv_cache *kv, struct dse_batch *batch, sched_emit_fn emit, void *user,
              struct sched **ret_sched);
void sched_free(struct sched *s);
/* The pool that computes a step's grammar masks (NULL, the default: the calling thread).
 * It must be a pool the thread calling sched_step created. */
void sched_set_pool(struct sched *s, struct dse_pool *pool);
/* The drift test hook (confidence.h): every logit the model gives is multiplied by scale
 * before sampling and counting; 1 (the default) leaves them alone. */
void sched_set_logit_scale(struct sched *s, float scale);
/* Turns speculative decoding on (or off: spec->method SPEC_OFF) before the first
 * request; -EINVAL for bounds outside speculate.h's, -EBUSY once requests came,
 * -ENOMEM. */
int sched_set_speculation(struct sched *s, const struct spec_config *spec);
/* The same with the drafter given (an MTP head, a draft model, a test's), used when
 * spec->method is not SPEC_OFF; the drafter's state must outlive the scheduler.
 * (sched_set_speculation makes the n-gram drafter; mtp_drafter.h the MTP one.) */
int sched_set_drafter(struct sched *s, const struct spec_config *spec, const struct spec_drafter *drafter);
/* Fast-forward (0, the default: off): a constrained sequence whose next tokens its
 * grammar forces carries up to max_run of them (<= SPEC_K_LIMIT) in its step, so a run
 * of forced tokens costs one forward pass instead of one each; the output is the same.
 * Before the first request; -EINVAL, -EBUSY once requests came, -ENOMEM. */
int sched_set_fast_forward(struct sched *s, int max_run);

/* The KV sequence of the request in slot (a drafter's propose argument), -1 while it
 * waits or when the slot is free. */
int sched_slot_seq(const struct sched *s, int slot);

/* Queues a request whose prompt is already token ids (tokens: n_prompt ids, copied).
 * Bad parameters, an empty or too long prompt, a duplicate id or a full queue are
 * answered with an error event (and -EINVAL, -E2BIG, -EEXIST, -EBUSY); nothing is queued
 * then. */
int sched_add(struct sched *s, const struct dsv_ipc_request *req, const int32_t *tokens, size_t n_prompt,
              int64_t now_ms);
/* Ends request id with final "cancelled" and releases its KV blocks now. -ENOENT when
 * the id is not known (already finished). */
int sched_cancel(struct sched *s, uint64_t id, int64_t now_ms);
/* Ends every request with an error event of code (e.g. shutting down). */
void sched_abort_all(struct sched *s, enum dsv_ipc_error_code code, const char *why, int64_t now_ms);
/* Nonzero while a request is waiting or running. */
int sched_busy(const struct sched *s);
/* One iteration: expiry, batch formation, one dse_batch_step, sampling, events.
 * now_ms: CLOCK_REALTIME milliseconds (deadlines are wall-clock). Returns the number of
 * tokens evaluated (0 when idle) or -errno on an engine failure (the requests in the
 * step then end with internal_error). */
int sched_step(struct sched *s, int64_t now_ms);
void sched_get_stats(const struct sched *s, struct sched_stats *ret);

#endif
