/* Engine-internal grammar form shared by the schema compiler, the matcher and the token
 * mask (README.md in this folder explains the design).
 *
 * A grammar is a set of rules; a rule is a list of alternatives; an alternative is a
 * sequence of elements ending in GRAMMAR_END. An element matches one byte from a byte
 * class, or a whole rule (GRAMMAR_REF). All alternatives live in one flat element array
 * so a matcher position is one index into it. */
#ifndef DSE_GRAMMAR_H
#define DSE_GRAMMAR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "grammar/hash_index.h"

enum grammar_elem_kind {
        GRAMMAR_END,   /* end of an alternative */
        GRAMMAR_CLASS, /* one byte from classes[arg] */
        GRAMMAR_REF,   /* rule arg */
        GRAMMAR_ELEM_KIND_COUNT
};

struct grammar_elem {
        uint32_t kind : 2;
        uint32_t arg : 30;
};

/* 256 bits: byte b is in the class when bits[b >> 6] has bit (b & 63). */
struct grammar_class {
        uint64_t bits[4];
};

struct grammar_rule {
        uint32_t first_alt; /* index into alt_start */
        uint32_t n_alts;
};

struct grammar_mask_cache;

/* A token a composed grammar admits by its id, never by its bytes (grammar_compose.c):
 * a stack whose top waits on class cls, an empty class of its own, takes token id. */
struct grammar_special {
        uint32_t cls;
        int32_t id;
};

struct dse_grammar {
        struct grammar_elem *elems;
        uint32_t n_elems;
        uint32_t *alt_start; /* element index where each alternative begins */
        uint32_t n_alt_start;
        struct grammar_rule *rules;
        uint32_t n_rules;
        struct grammar_class *classes;
        uint32_t n_classes;
        uint32_t root; /* the rule a whole output must match */
        /* masks already computed, per vocabulary and state shape (mask_cache.c); the one
         * part of a grammar that changes after compiling, behind its own lock */
        struct grammar_mask_cache *cache;
        struct grammar_special *specials; /* none outside composed grammars */
        uint32_t n_specials;
};

/* Returns from the calling function when expr (0 or -errno) fails. */
#define GRAMMAR_TRY(expr)                      \
        do {                                   \
                int grammar_try_r_ = (expr);   \
                if (grammar_try_r_ < 0)        \
                        return grammar_try_r_; \
        } while (0)

static inline int grammar_class_has(const struct grammar_class *c, uint8_t b) {
        return (int)((c->bits[b >> 6] >> (b & 63)) & 1);
}

static inline void grammar_class_add_range(struct grammar_class *c, uint8_t lo, uint8_t hi) {
        for (unsigned b = lo; b <= hi; b++)
                c->bits[b >> 6] |= (uint64_t)1 << (b & 63);
}

/* ---- building (grammar_build.c) ---- */

/* A grammar under construction. rule_new reserves a rule id, so a rule may refer to
 * itself or to rules defined later (recursive $ref); alt_begin opens a new alternative
 * of a rule and the push_* calls append to that rule's newest alternative, so several
 * rules can be under construction at once. rule_new gives a rule with no alternative
 * (it matches nothing) until alt_begin is called on it. finish flattens everything into
 * a dse_grammar. All return 0 or -ENOMEM / -E2BIG (over GRAMMAR_MAX_ELEMS elements). */
#define GRAMMAR_MAX_ELEMS (1u << 22)

struct grammar_alt_build {
        struct grammar_elem *elems;
        uint32_t n, cap;
};

struct grammar_rule_build {
        struct grammar_alt_build *alts;
        uint32_t n_alts, cap_alts;
};

struct grammar_builder {
        struct grammar_rule_build *rules;
        uint32_t n_rules, cap_rules;
        struct grammar_class *classes;
        uint32_t n_classes, cap_classes;
        uint32_t n_elems_total;
};

/* Grows *items (room for *cap elements of size bytes) to room for need: -ENOMEM, or
 * -E2BIG past 2^31 elements. The one growth helper of this folder. */
int dse__grammar_grow(void **items, uint32_t *cap, uint64_t need, size_t size);

void dse__grammar_builder_init(struct grammar_builder *b);
void dse__grammar_builder_done(struct grammar_builder *b);
int dse__grammar_rule_new(struct grammar_builder *b, uint32_t *ret_rule);
int dse__grammar_alt_begin(struct grammar_builder *b, uint32_t rule);
int dse__grammar_push_class(struct grammar_builder *b, uint32_t rule, const struct grammar_class *c);
int dse__grammar_push_byte(struct grammar_builder *b, uint32_t rule, uint8_t byte);
int dse__grammar_push_bytes(struct grammar_builder *b, uint32_t rule, const char *s, size_t n);
int dse__grammar_push_ref(struct grammar_builder *b, uint32_t rule, uint32_t ref);
/* Pushes a class element of a class no other element shares (push_class shares equal
 * ones), its index in *ret_class: how a special token gets a position of its own. */
int dse__grammar_push_class_unshared(struct grammar_builder *b, uint32_t rule, const struct grammar_class *c,
                                     uint32_t *ret_class);
/* A new rule matching min to max (UINT32_MAX: no limit) matches of rule item, one after
 * the other. -E2BIG when a bound over GRAMMAR_MAX_REPEAT would be unrolled. An item
 * that can match the empty string repeated without limit is left recursion, which
 * dse__grammar_check refuses. */
#define GRAMMAR_MAX_REPEAT 65536
int dse__grammar_rule_repeat(struct grammar_builder *b, uint32_t item, uint32_t min, uint32_t max, uint32_t *ret_rule);
/* Moves the built rules into a new grammar whose whole-output rule is root. */
int dse__grammar_builder_finish(struct grammar_builder *b, uint32_t root, struct dse_grammar **ret_g);

/* Ends a compilation: when r is 0, flattens the builder's rules into *ret_g (root the
 * whole-output rule) and checks them (dse__grammar_check); frees the builder either
 * way. Returns r, or the error of finishing or checking. */
int dse__grammar_builder_complete(struct grammar_builder *b, int r, uint32_t root, struct dse_grammar **ret_g,
                                  struct dse_diag *reterr);
/* Writes prefix and then the message fmt/ap to reterr (when not NULL); returns err. */
int dse__grammar_vfail(struct dse_diag *reterr, int err, const char *prefix, const char *fmt, va_list ap);
/* Refuses a grammar the matcher could loop on: a rule that can reach itself without
 * consuming a byte (left recursion): -ELOOP naming the rule in reterr. */
int dse__grammar_check(const struct dse_grammar *g, struct dse_diag *reterr);

/* ---- matching (matcher.c) ---- */

/* The matcher is a pushdown automaton run on all parses at once (README.md): its state
 * is a set of stacks. A stack is a chain of frames in the node arena; a frame is the
 * element position to continue at when the frame above it finishes. A stack's top
 * frame always sits on a GRAMMAR_CLASS element; the empty stack (GRAMMAR_NIL) means the
 * output is complete. A state is a range [begin, end) of the tops array. */
#define GRAMMAR_NIL UINT32_MAX
/* A stack top in a state computed with a boundary frame (struct dse_grammar_matcher):
 * the stack has finished everything above the boundary, so what follows depends on the
 * frames below it. Such a stack takes no byte. */
#define GRAMMAR_POPPED (UINT32_MAX - 1)

struct grammar_frame {
        uint32_t pos;    /* index into elems */
        uint32_t parent; /* frame below, GRAMMAR_NIL at the bottom */
        uint32_t hash;   /* of pos and every pos below: stacks that differ mostly differ here */
        /* the expansion round that last continued from this frame: frames never change,
         * so continuing from one again in the same round adds nothing new */
        uint32_t resumed_round;
};

/* A stack the matcher's expansion has yet to follow: its top's pos above parent. */
struct grammar_pending {
        uint32_t pos, parent;
};

struct dse_grammar_matcher {
        const struct dse_grammar *g;
        struct grammar_frame *frames;
        uint32_t n_frames, cap_frames;
        uint32_t round; /* the current expansion round (matcher.c), 0 before the first */
        uint32_t *tops;
        uint32_t n_tops, cap_tops;
        uint32_t cur_begin, cur_end; /* the state after the bytes accepted so far */
        int ended;                   /* EOS accepted: nothing more may follow */
        /* dse_grammar_matcher_fill_mask's per-depth states, grown as tokens demand */
        uint32_t *walk;
        uint32_t cap_walk;
        /* a frame where expansion stops with a GRAMMAR_POPPED top instead of continuing
         * into it (mask_cache.c); GRAMMAR_NIL when none */
        uint32_t boundary;
        /* the mask cache's key of the current state, grown as needed */
        uint32_t *key;
        uint32_t cap_key;
        /* the stacks of the state being built from tops[seen_begin], once it holds many:
         * seen_count of them are indexed (matcher.c) */
        struct grammar_hash_index seen;
        uint32_t seen_begin, seen_count;
        /* the arena's frames by (pos, parent), so that expansion reuses a frame instead of
         * building an equal one (matcher.c); frame_index_count slots are taken, some by
         * frames dropped since, which a lookup tells by their pos and parent */
        struct grammar_hash_index frame_index;
        uint32_t frame_index_count;
        /* the stacks expansion has yet to follow (matcher.c), grown as grammars demand */
        struct grammar_pending *pending;
        uint32_t n_pending, cap_pending;
};

/* Appends to m->tops the state reached from tops [begin, end) by one byte, and returns
 * its end (the new state starts at the old n_tops; equal ends: the byte is refused), or
 * -ENOMEM / -E2BIG. Frames and tops appended after a mark may be dropped by resetting
 * n_frames and n_tops to the mark. */
int64_t dse__grammar_matcher_step(struct dse_grammar_matcher *m, uint32_t begin, uint32_t end, uint8_t byte);
/* Appends a frame (pos, parent) to the arena: 0, -ENOMEM or -E2BIG. */
int dse__grammar_frame_new(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t *ret);
/* Appends to m->tops the state of the stack (pos, parent) expanded until every top
 * waits on a byte class, and returns its end (it starts at the old n_tops). */
int64_t dse__grammar_matcher_expand(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent);
/* 1 when the state [begin, end) holds the empty stack. */
int dse__grammar_state_accepting(const struct dse_grammar_matcher *m, uint32_t begin, uint32_t end);

/* ---- token trie (token_trie.c) ---- */

/* One trie node per distinct token-byte prefix of a part of the vocabulary, stored flat
 * in depth-first order: a node's subtree is [index, end). A part's root is the empty
 * prefix. */
struct grammar_trie_node {
        uint32_t end;       /* one past the last node of this subtree */
        int32_t first_token; /* a token whose bytes end here, -1 when none */
        uint16_t depth;      /* bytes from the root */
        uint8_t byte;        /* the byte leading here from the parent */
};

/* Plain text: complete UTF-8 characters none of which is a control (below U+0020), DEL,
 * '"' or backslash. Nearly every token is plain, and inside a JSON string every plain
 * character usually leads to one same state, so the trie walk takes the plain tokens of
 * up to GRAMMAR_PLAIN_MAX characters as whole sets when it can (trie_walk.c). */
#define GRAMMAR_PLAIN_MAX 16

/* The number of characters of bytes when they are plain text, else 0. */
uint32_t dse__grammar_plain_chars(const uint8_t *bytes, uint32_t len);

struct dse_grammar_vocab {
        /* one trie per part, one after the other: part c (1 to GRAMMAR_PLAIN_MAX) holds the
         * plain tokens of c characters, part 0 all the others; part_root[c] is the root
         * node of part c (its subtree is the whole part) */
        struct grammar_trie_node *nodes;
        uint32_t n_nodes;
        uint32_t part_root[GRAMMAR_PLAIN_MAX + 1];
        /* plain_upto + (c - 1) * mask words: the tokens of parts 1 to c as a bitset, and
         * plain_upto_count[c - 1] how many they are */
        uint64_t *plain_upto;
        uint32_t plain_upto_count[GRAMMAR_PLAIN_MAX];
        int32_t *next_token; /* [n_vocab]: the next token with the same bytes, -1 at the end */
        uint8_t **token_bytes; /* [n_vocab]: each token's bytes (NULL: never allowed) */
        uint32_t *token_len;
        int32_t n_vocab;
        int32_t eos;         /* -1 when none */
        uint16_t max_depth;
        uint64_t uid;        /* unique among the vocabularies of the process: a cache key */
};

/* A state as element positions, the shape the mask cache and the trie walk key on:
 * appends to *buf (growing *cap, *len the used length) the stack count, then per stack
 * of the state [begin, end) its length and its frames' positions from the top down to
 * (not including) the frame `below` (GRAMMAR_NIL: the bottom). The empty stack and
 * the popped marker are the lengths GRAMMAR_NIL and GRAMMAR_POPPED. */
int dse__grammar_state_shape(const struct dse_grammar_matcher *m, uint32_t begin, uint32_t end, uint32_t below,
                             uint32_t **buf, uint32_t *cap, uint32_t *len);
/* Appends to m->tops the stacks of a shape, rebuilt as frames on the frame `below`;
 * *ret_end is the end of the state (it starts at the old n_tops), *ret_used the words
 * of the shape read. */
int dse__grammar_state_load(struct dse_grammar_matcher *m, const uint32_t *shape, uint32_t below, uint32_t *ret_end,
                            uint32_t *ret_used);

/* The states trie walks met and their transitions, which depend on the grammar only:
 * kept from walk to walk (*states of dse__grammar_trie_walk, NULL to start one), for
 * walks of the same grammar whose `below` frames are alike (a stand-in boundary, or
 * none). */
struct grammar_walk_states;
void dse__grammar_walk_states_free(struct grammar_walk_states *states);

/* Walks the token tries from the state of a shape (README.md), set on the frame
 * `below`, which is m->boundary during the walk when it is not GRAMMAR_NIL: sets in
 * allowed (cleared by the caller) the bit of each token some stack other than a popped
 * one survives, and, when popped is not NULL, appends to it (growing *cap_popped) every
 * trie node after whose bytes the state holds a popped stack. A part of plain tokens
 * whose every path is decided by the plain characters' common transitions is taken or
 * dropped whole, without a walk; no such path meets a popped stack. So are all plain
 * parts when a group of the state's stacks, those continuing into the same frames,
 * keeps every plain text alive on its own above a stand-in frame. Each node walked
 * costs a lookup in a table of the walk's states and their byte transitions, each
 * transition computed once by the matcher for all the bytes the state cannot tell
 * apart, and kept in *states; a walk on no frame below (GRAMMAR_NIL) keeps its groups'
 * states in *group_states, the table of walks on a stand-in frame (unused otherwise).
 * Returns the count of allowed tokens, or -ENOMEM / -E2BIG. The arena is as it was on
 * return. */
int dse__grammar_trie_walk(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, const uint32_t *shape,
                           uint32_t below, struct grammar_walk_states **states,
                           struct grammar_walk_states **group_states, uint64_t *allowed, uint32_t **popped,
                           uint32_t *n_popped, uint32_t *cap_popped);
/* The mask of the current state through the grammar's cache (mask_cache.c): same
 * contract as dse_grammar_matcher_fill_mask without EOS, on a cleared mask. */
int dse__grammar_mask_cached(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, uint64_t *mask);
int dse__grammar_mask_cache_new(struct grammar_mask_cache **ret);
void dse__grammar_mask_cache_free(struct grammar_mask_cache *cache);

/* ---- special tokens of composed grammars (grammar_compose.c) ---- */

/* Corrects a mask of the current state for the grammar's special tokens: clears each
 * one's id, then sets it where a stack waits on it. Returns the change of the count of
 * allowed tokens (0 for a grammar without special tokens). */
int dse__grammar_mask_specials(const struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                               uint64_t *mask);
/* Accepts token id when it is one of the grammar's special tokens: 0, -EINVAL when no
 * stack waits on it (state unchanged), -ENOMEM / -E2BIG; 1 when id is none of them. */
int dse__grammar_accept_special(struct dse_grammar_matcher *m, int32_t id);

/* The reference twin of dse_grammar_matcher_fill_mask: tries every token's bytes on its
 * own against the state. Same contract; for tests. */
int dse__grammar_matcher_fill_mask_scan(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                                        uint64_t *mask);

#endif
