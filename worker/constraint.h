/* Structured output in the worker: compiled grammars cached by (kind, text), the
 * vocabulary's token trie built once per model, and one sequence's matcher and mask.
 *
 *     struct grammar_cache *gc;
 *     r = grammar_cache_new(tok, n_slots, &gc);
 *     struct constraint c;
 *     r = constraint_init(&c, gc, req, &diag);  // per request: req->constraint and its text
 *     n = constraint_fill_mask(&c, gc);   // per step, between the forward pass and sampling
 *     r = constraint_accept(&c, gc, id);  // the sampled id
 *     constraint_done(&c, gc);
 *
 * A grammar stays compiled while a sequence uses it and, after that, among the
 * GRAMMAR_CACHE_IDLE most recently used ones; the cache never holds more than
 * n_slots + GRAMMAR_CACHE_IDLE grammars. Everything allocates at init and acquire only
 * (the matcher's own state grows amortised). One thread, except constraint_fill_mask,
 * which may run for distinct constraints on distinct threads at once. */
#ifndef DSV_WORKER_CONSTRAINT_H
#define DSV_WORKER_CONSTRAINT_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "dsv_ipc.h"

#define GRAMMAR_CACHE_IDLE 16

struct grammar_cache;

struct grammar_cache_stats {
        int64_t hits, compiles; /* acquisitions served from the cache / compiled */
        int32_t cached;         /* grammars held now */
};

/* n_users: the most constraints alive at once (the scheduler's request slots). */
int grammar_cache_new(const struct dse_tokenizer *tok, int n_users, struct grammar_cache **ret_cache);
void grammar_cache_free(struct grammar_cache *gc);
/* The token trie, built on first use (once per model). NULL with diag on failure. */
const struct dse_grammar_vocab *grammar_cache_vocab(struct grammar_cache *gc, struct dse_diag *diag);
void grammar_cache_get_stats(const struct grammar_cache *gc, struct grammar_cache_stats *ret);

struct constraint {
        struct dse_grammar_matcher *m; /* NULL: unconstrained */
        uint64_t *mask;                /* (mask words) */
        int entry;                     /* the cache entry held + 1; 0: none (a zeroed constraint) */
        int n_allowed;                 /* of the last fill: tokens allowed, or -errno */
        int mask_current;              /* mask and n_allowed are of the matcher's state */
        /* looking ahead for forced runs (constraint_forced_run): a copy of the matcher, and
         * its mask */
        struct dse_grammar_matcher *ahead;
        uint64_t *ahead_mask;
};

/* Compiles (or finds) the grammar for the request's constraint (kind and text, or
 * choices) and starts a matcher on it; c stays unconstrained for kind NONE. -EINVAL,
 * -EOPNOTSUPP, ... with the compiler's message (keyword and JSON pointer, construct and
 * offset) in diag. */
int constraint_init(struct constraint *c, struct grammar_cache *gc, const struct dsv_ipc_request *req,
                    struct dse_diag *diag);
void constraint_done(struct constraint *c, struct grammar_cache *gc);
/* Fills c->mask for the matcher's state; c->n_allowed = tokens allowed (or -errno).
 * Computed once per state: a second call before constraint_accept returns the same. */
int constraint_fill_mask(struct constraint *c, const struct grammar_cache *gc);
/* The run of forced tokens from the matcher's state on: run[0] is the only token the
 * mask allows now, run[1] the only one after it, ... up to max tokens, stopping before
 * EOS and at the first mask that allows more than one (n_vocab: the model's vocabulary,
 * the ids a mask may hold). Fills c->mask for the state as constraint_fill_mask does;
 * the state is unchanged. Returns the run's length (0: the next token is not forced),
 * or -errno. */
int constraint_forced_run(struct constraint *c, const struct grammar_cache *gc, int32_t n_vocab, int32_t eos,
                          int max, int32_t *run);
/* Advances the matcher by token id (which the last mask allowed). */
int constraint_accept(struct constraint *c, const struct grammar_cache *gc, int32_t id);
/* 1 when the output so far is complete for the grammar. */
int constraint_accepting(const struct constraint *c);

#endif
