/* The token mask of a state by walking the token tries (README.md, "Token mask"): a
 * node's state is the parent's state stepped by one byte, and a byte the grammar
 * refuses skips the node's whole subtree, so the cost follows the tokens the grammar
 * allows, not the vocabulary size.
 *
 * The states one walk meets are interned by shape with their byte transitions; a
 * transition is computed once by the matcher for every byte the state's stack tops
 * cannot tell apart (the same member of each top's class), and a byte no top takes is
 * dead without a step. Inside a JSON string the walk would still visit nearly every
 * node, since nearly every token is allowed; so before walking, the plain characters
 * (grammar.h) are run through the transitions one character at a time: while every
 * plain character leads to one same state with no popped stack, the plain tokens of
 * that many characters are allowed whole (a precomputed bitset), and once every plain
 * character dies, the longer ones are refused whole. Only the other tokens and the
 * plain parts that neither decides are walked (llguidance's "slicer", decided here by
 * the transitions themselves rather than by regex containment). Before that, a group
 * of the state's stacks that lets every plain text through on its own (a key that must
 * be none of the declared names, beside the stacks of each name) allows every plain
 * part at once, its answer kept per walk state. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/hash_index.h"

/* The UTF-8 byte sequences of the plain characters, as byte ranges per position (split
 * where the second byte's range depends on the first, as RE2 does). */
struct utf8_seq {
        uint8_t n, lo[4], hi[4];
};

static const struct utf8_seq plain_seqs[] = {
        {1, {0x20}, {0x21}},
        {1, {0x23}, {0x5B}},
        {1, {0x5D}, {0x7E}},
        {2, {0xC2, 0x80}, {0xDF, 0xBF}},
        {3, {0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}},
        {3, {0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}},
        {3, {0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}},
        {3, {0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}},
        {4, {0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}},
        {4, {0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}},
        {4, {0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}},
};
#define N_PLAIN_SEQS (sizeof plain_seqs / sizeof *plain_seqs)

uint32_t dse__grammar_plain_chars(const uint8_t *bytes, uint32_t len) {
        uint32_t chars = 0;
        for (uint32_t i = 0; i < len; chars++) {
                const struct utf8_seq *seq = NULL;
                for (size_t s = 0; s < N_PLAIN_SEQS && !seq; s++)
                        if (bytes[i] >= plain_seqs[s].lo[0] && bytes[i] <= plain_seqs[s].hi[0])
                                seq = &plain_seqs[s];
                if (!seq || len - i < seq->n)
                        return 0;
                for (uint32_t k = 1; k < seq->n; k++)
                        if (bytes[i + k] < seq->lo[k] || bytes[i + k] > seq->hi[k])
                                return 0;
                i += seq->n;
        }
        return chars;
}

#define WALK_UNKNOWN (-1)
#define WALK_DEAD (-2)
enum { WALK_HAS_POPPED = 1, WALK_HAS_OTHER = 2 };
enum { FREE_UNKNOWN, FREE_YES, FREE_NO };

struct grammar_walk_states {
        uint32_t *words; /* the shapes, one after the other */
        uint32_t n_words, cap_words;
        uint32_t *start, *len; /* each state's shape in words */
        uint8_t *flags;
        uint32_t n, cap_start, cap_len, cap_flags;
        int32_t *next; /* [state * 256 + byte] */
        uint32_t cap_next;
        struct grammar_hash_index table; /* over the states by shape_hash */
        uint32_t *scratch; /* a shape being made */
        uint32_t cap_scratch;
        uint32_t *taking; /* the stacks of a state whose top takes a byte (walk_step) */
        uint32_t cap_taking;
        /* per state: the plain-character pass that last met it (plain_parts) */
        uint32_t *mark;
        uint32_t cap_mark, pass;
        /* per state, strict then lax: what one plain character does from it (plain_of),
         * 1 + its index in plain_words, 0 until computed */
        uint32_t *plain_at;
        uint32_t cap_plain_at;
        /* per state: whether every plain text keeps it alive (plain_free), FREE_* */
        uint8_t *free_of;
        uint32_t cap_free_of;
        /* plain_free's queue of states and the entry each was reached from */
        uint32_t *queue, *queue_from;
        uint32_t cap_queue, cap_queue_from;
        /* a group of stacks being made (group_free) */
        uint32_t *group;
        uint32_t cap_group;
        uint32_t *stack_at; /* where each stack of a shape starts (group_free) */
        uint32_t cap_stack_at;
        uint32_t *tried; /* the groups group_free tried: a stack and how many frames end it */
        uint32_t cap_tried;
        uint32_t *plain_words;
        uint32_t n_plain_words, cap_plain_words;
        /* what the rest of a plain character does from a state inside it (plain_rest_of):
         * open addressing from (state, sequence, byte position) to 1 + its index in
         * plain_words, 0 empty */
        uint64_t *rest_keys;
        uint32_t *rest_at;
        uint32_t rest_size, n_rest;
};

void dse__grammar_walk_states_free(struct grammar_walk_states *w) {
        if (!w)
                return;
        free(w->words);
        free(w->start);
        free(w->len);
        free(w->flags);
        free(w->next);
        dse__grammar_hash_index_done(&w->table);
        free(w->scratch);
        free(w->taking);
        free(w->mark);
        free(w->plain_at);
        free(w->free_of);
        free(w->queue);
        free(w->queue_from);
        free(w->group);
        free(w->stack_at);
        free(w->tried);
        free(w->plain_words);
        free(w->rest_keys);
        free(w->rest_at);
        free(w);
}

static uint32_t shape_hash(const uint32_t *shape, uint32_t n) {
        uint32_t h = 2166136261u;
        for (uint32_t i = 0; i < n; i++)
                h = (h ^ shape[i]) * 16777619u;
        return h;
}

static uint32_t state_hash(const void *states, uint32_t id) {
        const struct grammar_walk_states *w = states;
        return shape_hash(w->words + w->start[id], w->len[id]);
}

/* The id of the state of a shape, added (with flags) when new. */
static int walk_intern(struct grammar_walk_states *w, const uint32_t *shape, uint32_t n, uint8_t flags, int32_t *ret_id) {
        uint32_t hash = shape_hash(shape, n);
        if (w->table.size) {
                uint32_t mask = w->table.size - 1;
                for (uint32_t k = hash & mask; w->table.slots[k]; k = (k + 1) & mask) {
                        uint32_t id = w->table.slots[k] - 1;
                        if (w->len[id] == n && !memcmp(w->words + w->start[id], shape, n * sizeof *shape)) {
                                *ret_id = (int32_t)id;
                                return 0;
                        }
                }
        }
        uint32_t id = w->n;
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->words, &w->cap_words, (uint64_t)w->n_words + n, sizeof *w->words));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->start, &w->cap_start, (uint64_t)id + 1, sizeof *w->start));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->len, &w->cap_len, (uint64_t)id + 1, sizeof *w->len));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->flags, &w->cap_flags, (uint64_t)id + 1, sizeof *w->flags));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->mark, &w->cap_mark, (uint64_t)id + 1, sizeof *w->mark));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->plain_at, &w->cap_plain_at, 2 * ((uint64_t)id + 1),
                                      sizeof *w->plain_at));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->free_of, &w->cap_free_of, (uint64_t)id + 1, sizeof *w->free_of));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->next, &w->cap_next, 256 * ((uint64_t)id + 1), sizeof *w->next));
        GRAMMAR_TRY(dse__grammar_hash_index_reserve(&w->table, (uint64_t)id + 1, id, state_hash, w));
        memcpy(w->words + w->n_words, shape, n * sizeof *shape);
        w->start[id] = w->n_words;
        w->len[id] = n;
        w->flags[id] = flags;
        w->mark[id] = 0;
        w->plain_at[2 * id] = w->plain_at[2 * id + 1] = 0;
        w->free_of[id] = FREE_UNKNOWN;
        for (int b = 0; b < 256; b++)
                w->next[256 * id + (uint32_t)b] = WALK_UNKNOWN;
        w->n_words += n;
        w->n++;
        dse__grammar_hash_index_put(&w->table, hash, id);
        *ret_id = (int32_t)id;
        return 0;
}

/* Sets out to the bytes a state cannot tell from byte: in the class of each of its
 * stack tops exactly when byte is. They all lead where byte leads, as the matcher
 * consults nothing else. Returns 1 when some top takes byte. */
static int same_bytes(const struct dse_grammar *g, const uint32_t *shape, uint8_t byte, uint64_t out[4]) {
        out[0] = out[1] = out[2] = out[3] = ~(uint64_t)0;
        int taken = 0;
        uint32_t p = 1;
        for (uint32_t s = 0; s < shape[0]; s++) {
                uint32_t len = shape[p++];
                if (len >= GRAMMAR_POPPED || len == 0)
                        continue;
                const struct grammar_class *c = &g->classes[g->elems[shape[p]].arg];
                int in = grammar_class_has(c, byte);
                taken |= in;
                for (int k = 0; k < 4; k++)
                        out[k] &= in ? c->bits[k] : ~c->bits[k];
                p += len;
        }
        return taken;
}

/* Sets w->taking to the shape of the stacks of a state whose top takes byte, in their
 * order: the stacks a step by byte continues. The others end there, so stepping these
 * alone leads to the same state, without rebuilding the frames of all the others (a
 * state may hold dozens, of which a byte continues one or two). */
static int taking_stacks(const struct dse_grammar *g, struct grammar_walk_states *w, const uint32_t *shape, uint8_t byte) {
        uint32_t n = 1, p = 1, kept = 0;
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->taking, &w->cap_taking, 1, sizeof *w->taking));
        for (uint32_t s = 0; s < shape[0]; s++) {
                uint32_t len = shape[p];
                uint32_t words = len < GRAMMAR_POPPED ? 1 + len : 1;
                if (len < GRAMMAR_POPPED && len > 0 && grammar_class_has(&g->classes[g->elems[shape[p + 1]].arg], byte)) {
                        GRAMMAR_TRY(dse__grammar_grow((void **)&w->taking, &w->cap_taking, (uint64_t)n + words,
                                                      sizeof *w->taking));
                        memcpy(w->taking + n, shape + p, words * sizeof *shape);
                        n += words;
                        kept++;
                }
                p += words;
        }
        w->taking[0] = kept;
        return 0;
}

/* The state that byte leads to from state id (WALK_DEAD: none), computed by the
 * matcher on the stacks taking byte rebuilt on the frame below. */
static int walk_step(struct dse_grammar_matcher *m, struct grammar_walk_states *w, int32_t id, uint8_t byte, uint32_t below,
                     int32_t *ret_id) {
        GRAMMAR_TRY(taking_stacks(m->g, w, w->words + w->start[id], byte));
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops, begin = m->n_tops, end, used, n = 0;
        int r = dse__grammar_state_load(m, w->taking, below, &end, &used);
        int64_t next_end = 0;
        uint32_t next_begin = m->n_tops;
        if (r == 0) {
                next_end = dse__grammar_matcher_step(m, begin, end, byte);
                r = next_end < 0 ? (int)next_end : 0;
        }
        uint8_t flags = 0;
        if (r == 0 && (uint32_t)next_end > next_begin) {
                for (uint32_t i = next_begin; i < (uint32_t)next_end; i++)
                        flags |= m->tops[i] == GRAMMAR_POPPED ? WALK_HAS_POPPED : WALK_HAS_OTHER;
                r = dse__grammar_state_shape(m, next_begin, (uint32_t)next_end, below, &w->scratch, &w->cap_scratch, &n);
        }
        m->n_frames = mark_frames;
        m->n_tops = mark_tops;
        if (r < 0)
                return r;
        if (!flags) {
                *ret_id = WALK_DEAD;
                return 0;
        }
        return walk_intern(w, w->scratch, n, flags, ret_id);
}

/* The state byte leads to from state id, through the table; a transition computed
 * is recorded for every byte the state cannot tell from byte. */
static int walk_next(struct dse_grammar_matcher *m, struct grammar_walk_states *w, int32_t id, uint8_t byte, uint32_t below,
                     int32_t *ret_id) {
        int32_t to = w->next[256 * (uint32_t)id + byte];
        if (to != WALK_UNKNOWN) {
                *ret_id = to;
                return 0;
        }
        uint64_t same[4];
        to = WALK_DEAD;
        if (same_bytes(m->g, w->words + w->start[id], byte, same))
                GRAMMAR_TRY(walk_step(m, w, id, byte, below, &to));
        int32_t *next = w->next + 256 * (uint32_t)id; /* walk_step may have moved w->next */
        for (int k = 0; k < 4; k++)
                for (uint64_t x = same[k]; x; x &= x - 1)
                        next[64 * k + __builtin_ctzll(x)] = to;
        *ret_id = to;
        return 0;
}

/* What one plain character does from a set of states: whether some leads to a dead end
 * or to a state holding a popped stack (on the way or at its end), and the set of
 * states the characters that stay alive end in. */
#define PLAIN_MAX_STATES 64

struct plain_outcome {
        int32_t ends[PLAIN_MAX_STATES];
        uint32_t n_ends;
        int dead, popped, overflow;
};

/* Adds end state to o's ends unless there already (overflow past PLAIN_MAX_STATES). */
static void plain_add_end(struct plain_outcome *o, int32_t to) {
        uint32_t k = 0;
        while (k < o->n_ends && o->ends[k] != to)
                k++;
        if (k < o->n_ends)
                return;
        if (o->n_ends == PLAIN_MAX_STATES)
                o->overflow = 1;
        else
                o->ends[o->n_ends++] = to;
}

/* Adds one's outcome (a header word and end states, as plain_words keeps them) to o. */
static void plain_merge(struct plain_outcome *o, const uint32_t *one) {
        o->dead |= (int)(one[0] & 1);
        o->popped |= (int)(one[0] >> 1 & 1);
        for (uint32_t j = 0; j < one[0] >> 2 && !o->popped && !o->overflow; j++)
                plain_add_end(o, (int32_t)one[1 + j]);
}

/* Keeps o in plain_words: its index there (header word, then end states). */
static int plain_keep(struct grammar_walk_states *w, const struct plain_outcome *o, uint32_t *ret_at) {
        uint32_t at = w->n_plain_words;
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->plain_words, &w->cap_plain_words, (uint64_t)at + 1 + o->n_ends,
                                      sizeof *w->plain_words));
        w->plain_words[at] = o->n_ends << 2 | (uint32_t)o->dead | (uint32_t)(o->popped || o->overflow) << 1;
        for (uint32_t k = 0; k < o->n_ends; k++)
                w->plain_words[at + 1 + k] = (uint32_t)o->ends[k];
        w->n_plain_words = at + 1 + o->n_ends;
        *ret_at = at;
        return 0;
}

static int plain_rest_of(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below, int lax,
                         uint32_t q, uint32_t i, int32_t from, uint32_t *ret_at);

/* Runs bytes i.. of the plain characters of sequence q from state from, adding what
 * they do to o. Lax: a state holding a popped stack beside others is no popped
 * outcome, and one holding only popped stacks is a dead end (plain_free, which asks
 * only whether some parse that never pops survives). */
static int plain_explore(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below, int lax,
                         uint32_t q, uint32_t i, int32_t from, struct plain_outcome *o) {
        const struct utf8_seq *seq = &plain_seqs[q];
        int32_t seen[8];
        uint32_t n_seen = 0;
        for (unsigned b = seq->lo[i]; b <= seq->hi[i] && !o->popped && !o->overflow; b++) {
                int32_t to;
                GRAMMAR_TRY(walk_next(m, w, from, (uint8_t)b, below, &to));
                if (to == WALK_DEAD || (lax && !(w->flags[to] & WALK_HAS_OTHER))) {
                        o->dead = 1;
                        continue;
                }
                if (!lax && w->flags[to] != WALK_HAS_OTHER) {
                        o->popped = 1;
                        continue;
                }
                uint32_t k = 0;
                while (k < n_seen && seen[k] != to)
                        k++;
                if (k < n_seen)
                        continue;
                if (n_seen < sizeof seen / sizeof *seen)
                        seen[n_seen++] = to;
                if (i + 1 < seq->n) {
                        uint32_t at;
                        GRAMMAR_TRY(plain_rest_of(m, w, below, lax, q, i + 1, to, &at));
                        plain_merge(o, w->plain_words + at);
                        continue;
                }
                plain_add_end(o, to);
        }
        return 0;
}

/* What bytes i.. of the plain characters of sequence q do from state from, inside such
 * a character: computed once per (state, q, i) and kept, since the states inside a
 * character are shared by many states before it; *ret_at is its index in plain_words. */
static int plain_rest_of(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below, int lax,
                         uint32_t q, uint32_t i, int32_t from, uint32_t *ret_at) {
        uint64_t key = (uint64_t)(uint32_t)from << 16 | q << 8 | (uint32_t)lax << 4 | i; /* never 0: i >= 1 */
        uint32_t mask = w->rest_size - 1;
        if (w->rest_size)
                for (uint32_t k = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & mask; w->rest_keys[k]; k = (k + 1) & mask)
                        if (w->rest_keys[k] == key) {
                                *ret_at = w->rest_at[k] - 1;
                                return 0;
                        }
        struct plain_outcome o = {.n_ends = 0};
        GRAMMAR_TRY(plain_explore(m, w, below, lax, q, i, from, &o));
        uint32_t at;
        GRAMMAR_TRY(plain_keep(w, &o, &at));
        if (2 * (w->n_rest + 1) > w->rest_size) {
                uint32_t size = w->rest_size ? 2 * w->rest_size : 256;
                uint64_t *keys = calloc(size, sizeof *keys);
                uint32_t *ats = calloc(size, sizeof *ats);
                if (!keys || !ats) {
                        free(keys);
                        free(ats);
                        return -ENOMEM;
                }
                for (uint32_t j = 0; j < w->rest_size; j++)
                        if (w->rest_keys[j]) {
                                uint32_t k = (uint32_t)(w->rest_keys[j] * 0x9e3779b97f4a7c15ull >> 32) & (size - 1);
                                while (keys[k])
                                        k = (k + 1) & (size - 1);
                                keys[k] = w->rest_keys[j];
                                ats[k] = w->rest_at[j];
                        }
                free(w->rest_keys);
                free(w->rest_at);
                w->rest_keys = keys;
                w->rest_at = ats;
                w->rest_size = size;
        }
        mask = w->rest_size - 1; /* the table may have grown in the calls above */
        uint32_t k = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & mask;
        while (w->rest_keys[k])
                k = (k + 1) & mask;
        w->rest_keys[k] = key;
        w->rest_at[k] = at + 1;
        w->n_rest++;
        *ret_at = at;
        return 0;
}

/* What one plain character does from state id (lax as plain_explore), computed once
 * per state: *ret points at a header word (the count of end states << 2, | 1 when some
 * character dies, | 2 when some meets a popped stack or the ends overflow) followed by
 * the end states; valid until the next call that may add states. */
static int plain_of(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below, int lax, int32_t id,
                    const uint32_t **ret) {
        uint32_t *plain_at = &w->plain_at[2 * (uint32_t)id + (uint32_t)lax];
        if (!*plain_at) {
                struct plain_outcome o = {.n_ends = 0};
                for (uint32_t q = 0; q < N_PLAIN_SEQS && !o.popped && !o.overflow && !(lax && o.dead); q++)
                        GRAMMAR_TRY(plain_explore(m, w, below, lax, q, 0, id, &o));
                uint32_t at;
                GRAMMAR_TRY(plain_keep(w, &o, &at));
                plain_at = &w->plain_at[2 * (uint32_t)id + (uint32_t)lax]; /* plain_explore may have moved it */
                *plain_at = at + 1;
        }
        *ret = w->plain_words + w->plain_at[2 * (uint32_t)id + (uint32_t)lax] - 1;
        return 0;
}

/* Past this many states reached, plain_free gives up and answers no. */
#define FREE_MAX_STATES 2048

/* Whether every plain text, whatever its length, keeps a parse of state start alive
 * that never pops: from no state the plain characters reach (lax plain_of) does a plain
 * character leave only popped stacks or none. The states reached are explored
 * breadth first, and the answer kept per state: yes for every state explored when it
 * is yes; when it is no, no for the state that fails and those on the way to it. */
static int plain_free(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below, int32_t start,
                      int *ret_free) {
        if (w->free_of[start] != FREE_UNKNOWN) {
                *ret_free = w->free_of[start] == FREE_YES;
                return 0;
        }
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->queue, &w->cap_queue, 1, sizeof *w->queue));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->queue_from, &w->cap_queue_from, 1, sizeof *w->queue_from));
        uint32_t n = 1, failed = UINT32_MAX, q;
        w->pass++;
        w->queue[0] = (uint32_t)start;
        w->queue_from[0] = UINT32_MAX;
        w->mark[start] = w->pass;
        for (q = 0; q < n; q++) {
                int32_t s = (int32_t)w->queue[q];
                if (w->free_of[s] == FREE_YES)
                        continue;
                if (w->free_of[s] == FREE_NO || q == FREE_MAX_STATES) {
                        failed = q;
                        break;
                }
                const uint32_t *one;
                GRAMMAR_TRY(plain_of(m, w, below, 1, s, &one));
                if (one[0] & 3) {
                        failed = q;
                        break;
                }
                uint32_t n_ends = one[0] >> 2;
                GRAMMAR_TRY(dse__grammar_grow((void **)&w->queue, &w->cap_queue, (uint64_t)n + n_ends, sizeof *w->queue));
                GRAMMAR_TRY(dse__grammar_grow((void **)&w->queue_from, &w->cap_queue_from, (uint64_t)n + n_ends,
                                              sizeof *w->queue_from));
                for (uint32_t j = 0; j < n_ends; j++) {
                        uint32_t e = one[1 + j];
                        if (w->mark[e] == w->pass)
                                continue;
                        w->mark[e] = w->pass;
                        w->queue[n] = e;
                        w->queue_from[n++] = q;
                }
        }
        if (failed == UINT32_MAX)
                for (q = 0; q < n; q++)
                        w->free_of[w->queue[q]] = FREE_YES;
        else if (failed == FREE_MAX_STATES)
                w->free_of[start] = FREE_NO;
        else
                for (q = failed; q != UINT32_MAX; q = w->queue_from[q])
                        w->free_of[w->queue[q]] = FREE_NO;
        *ret_free = failed == UINT32_MAX;
        return 0;
}

/* The lead bytes of the plain characters. */
static void plain_leads(struct grammar_class *c) {
        memset(c, 0, sizeof *c);
        for (size_t q = 0; q < N_PLAIN_SEQS; q++)
                grammar_class_add_range(c, plain_seqs[q].lo[0], plain_seqs[q].hi[0]);
}

/* Past this many stacks in a state, group_free does not look for a group. */
#define GROUP_MAX_STACKS 1024
/* group_free tries groups keeping up to this many frames of the stack they start from. */
#define GROUP_MAX_FRAMES 3

/* 1 when the stack at shape offset b has more than l frames and ends in the last l
 * frames of the stack at offset a. */
static int ends_alike(const uint32_t *shape, uint32_t a, uint32_t b, uint32_t l) {
        return shape[b] > l && !memcmp(shape + a + 1 + shape[a] - l, shape + b + 1 + shape[b] - l, l * sizeof *shape);
}

/* Whether some group of the stacks of a shape keeps every plain text alive on its own
 * (plain_free): then every plain token is allowed from the whole state, whatever its
 * other stacks do. A group is the stacks that end in the same frames, as the state of
 * their frames above those alone on the frame `below`, where finishing them is a
 * popped stack: a parse that never finishes them does not depend on what lies below,
 * and one that does is never counted. Such a group's state is the same in every state
 * holding the group, so what it reaches is explored once per walk table: the key that
 * must be none of an object's declared names, beside the stacks of each name still
 * allowed, at every key of the object. Groups keeping fewer frames are tried first. */
static int group_free(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below,
                      const uint32_t *shape, int *ret_free) {
        *ret_free = 0;
        if (shape[0] > GROUP_MAX_STACKS)
                return 0;
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->stack_at, &w->cap_stack_at, (uint64_t)shape[0] + 1,
                                      sizeof *w->stack_at));
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->tried, &w->cap_tried,
                                      2 * (uint64_t)GROUP_MAX_FRAMES * shape[0] + 1, sizeof *w->tried));
        uint32_t n = 0, p = 1, n_tried = 0;
        for (uint32_t s = 0; s < shape[0]; s++) {
                uint32_t len = shape[p];
                if (len > 0 && len < GRAMMAR_POPPED)
                        w->stack_at[n++] = p;
                p += len < GRAMMAR_POPPED ? 1 + len : 1;
        }
        struct grammar_class leads;
        plain_leads(&leads);
        for (uint32_t t = 1; t <= GROUP_MAX_FRAMES; t++)
                for (uint32_t i = 0; i < n; i++) {
                        uint32_t a = w->stack_at[i];
                        if (shape[a] <= t)
                                continue;
                        uint32_t l = shape[a] - t, seen = 0;
                        for (uint32_t k = 0; k < n_tried && !seen; k++)
                                seen = w->tried[2 * k + 1] == l && ends_alike(shape, w->tried[2 * k], a, l);
                        if (seen)
                                continue;
                        w->tried[2 * n_tried] = a;
                        w->tried[2 * n_tried++ + 1] = l;
                        uint32_t words = 1, count = 0;
                        uint64_t covered[4] = {0, 0, 0, 0};
                        for (uint32_t j = 0; j < n; j++) {
                                uint32_t b = w->stack_at[j];
                                if (!ends_alike(shape, a, b, l))
                                        continue;
                                uint32_t keep = shape[b] - l;
                                GRAMMAR_TRY(dse__grammar_grow((void **)&w->group, &w->cap_group,
                                                              (uint64_t)words + 1 + keep, sizeof *w->group));
                                w->group[words++] = keep;
                                memcpy(w->group + words, shape + b + 1, keep * sizeof *shape);
                                words += keep;
                                count++;
                                const struct grammar_class *c = &m->g->classes[m->g->elems[shape[b + 1]].arg];
                                for (int k = 0; k < 4; k++)
                                        covered[k] |= c->bits[k];
                        }
                        int all_leads = 1;
                        for (int k = 0; k < 4; k++)
                                all_leads &= (covered[k] & leads.bits[k]) == leads.bits[k];
                        if (!all_leads)
                                continue;
                        w->group[0] = count;
                        int32_t id;
                        GRAMMAR_TRY(walk_intern(w, w->group, words, WALK_HAS_OTHER, &id));
                        GRAMMAR_TRY(plain_free(m, w, below, id, ret_free));
                        if (*ret_free)
                                return 0;
                }
        return 0;
}

/* How many plain parts are decided from state start: parts 1..*ret_taken are allowed
 * whole (every plain text of that many characters stays alive through states without
 * a popped stack), and when *ret_dead, every longer plain text dies through such
 * states, so the parts past *ret_taken are refused whole. The characters are run on
 * the set of states reached so far; once that set holds only states already run,
 * every plain text stays alive whatever its length. */
static int plain_parts(struct dse_grammar_matcher *m, struct grammar_walk_states *w, uint32_t below, int32_t start,
                       uint32_t *ret_taken, int *ret_dead) {
        int32_t set[PLAIN_MAX_STATES] = {start};
        uint32_t n_set = 1, taken = 0;
        *ret_dead = 0;
        w->pass++;
        while (taken < GRAMMAR_PLAIN_MAX) {
                int all_run = 1;
                for (uint32_t k = 0; k < n_set; k++)
                        all_run &= w->mark[set[k]] == w->pass;
                if (all_run && taken) {
                        taken = GRAMMAR_PLAIN_MAX;
                        break;
                }
                struct plain_outcome o = {.n_ends = 0};
                for (uint32_t k = 0; k < n_set && !o.popped && !o.overflow; k++) {
                        w->mark[set[k]] = w->pass;
                        const uint32_t *one;
                        GRAMMAR_TRY(plain_of(m, w, below, 0, set[k], &one));
                        plain_merge(&o, one);
                }
                if (o.popped || o.overflow || (o.dead && o.n_ends))
                        break;
                if (!o.n_ends) {
                        *ret_dead = 1;
                        break;
                }
                taken++;
                memcpy(set, o.ends, o.n_ends * sizeof *set);
                n_set = o.n_ends;
        }
        *ret_taken = taken;
        return 0;
}

/* Walks the trie of one part of the vocabulary from state start. */
static int walk_part(struct dse_grammar_matcher *m, struct grammar_walk_states *w, const struct dse_grammar_vocab *vocab,
                     uint32_t part, int32_t start, uint32_t below, uint64_t *allowed, uint32_t **popped,
                     uint32_t *n_popped, uint32_t *cap_popped) {
        /* walk[d]: the state after the first d bytes of the current node */
        uint32_t *walk = m->walk;
        walk[0] = (uint32_t)start;
        int count = 0, r = 0;
        const struct grammar_trie_node *nodes = vocab->nodes;
        uint32_t root = vocab->part_root[part];
        for (uint32_t i = root + 1; i < nodes[root].end;) {
                const struct grammar_trie_node *node = &nodes[i];
                uint32_t from = walk[node->depth - 1u];
                int32_t to = w->next[256 * from + node->byte];
                if (to == WALK_UNKNOWN) {
                        r = walk_next(m, w, (int32_t)from, node->byte, below, &to);
                        if (r < 0)
                                return r;
                }
                if (to == WALK_DEAD) {
                        i = node->end;
                        continue;
                }
                walk[node->depth] = (uint32_t)to;
                if (popped && (w->flags[to] & WALK_HAS_POPPED)) {
                        r = dse__grammar_grow((void **)popped, cap_popped, (uint64_t)*n_popped + 1, sizeof **popped);
                        if (r < 0)
                                return r;
                        (*popped)[(*n_popped)++] = i;
                }
                if (w->flags[to] & WALK_HAS_OTHER)
                        for (int32_t id = node->first_token; id >= 0; id = vocab->next_token[id]) {
                                allowed[id / 64] |= (uint64_t)1 << (id % 64);
                                count++;
                        }
                i++;
        }
        return count;
}

/* Past this many states a walk's table starts afresh. */
#define WALK_STATES_MAX 4096

/* Makes *states ready for a walk: new when NULL, afresh when past WALK_STATES_MAX. */
static int walk_states_ready(struct grammar_walk_states **states) {
        if (*states && (*states)->n > WALK_STATES_MAX) {
                dse__grammar_walk_states_free(*states);
                *states = NULL;
        }
        if (!*states && !(*states = calloc(1, sizeof **states)))
                return -ENOMEM;
        return 0;
}

/* group_free for a walk on no frame below: the groups are states on a stand-in frame,
 * kept in the table of walks on one, *group_states. */
static int group_free_on_stand_in(struct dse_grammar_matcher *m, struct grammar_walk_states **group_states,
                                  const uint32_t *shape, int *ret_free) {
        *ret_free = 0;
        GRAMMAR_TRY(walk_states_ready(group_states));
        uint32_t mark_frames = m->n_frames, stand_in;
        GRAMMAR_TRY(dse__grammar_frame_new(m, 0, GRAMMAR_NIL, &stand_in));
        m->boundary = stand_in;
        int r = group_free(m, *group_states, stand_in, shape, ret_free);
        m->boundary = GRAMMAR_NIL;
        m->n_frames = mark_frames;
        return r;
}

int dse__grammar_trie_walk(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, const uint32_t *shape,
                           uint32_t below, struct grammar_walk_states **states,
                           struct grammar_walk_states **group_states, uint64_t *allowed, uint32_t **popped,
                           uint32_t *n_popped, uint32_t *cap_popped) {
        int r = dse__grammar_grow((void **)&m->walk, &m->cap_walk, (uint64_t)vocab->max_depth + 1, sizeof *m->walk);
        if (r < 0)
                return r;
        GRAMMAR_TRY(walk_states_ready(states));
        struct grammar_walk_states *w = *states;
        uint32_t shape_len = 1;
        for (uint32_t s = 0; s < shape[0]; s++)
                shape_len += shape[shape_len] < GRAMMAR_POPPED ? shape[shape_len] + 1 : 1;
        int32_t start;
        uint32_t taken = 0;
        int dead = 0;
        r = walk_intern(w, shape, shape_len, WALK_HAS_OTHER, &start);
        int all_free = 0;
        if (r == 0 && below != GRAMMAR_NIL)
                r = group_free(m, w, below, shape, &all_free);
        else if (r == 0)
                r = group_free_on_stand_in(m, group_states, shape, &all_free);
        if (r == 0 && all_free)
                taken = GRAMMAR_PLAIN_MAX;
        else if (r == 0)
                r = plain_parts(m, w, below, start, &taken, &dead);
        int count = 0;
        if (r == 0 && taken) {
                size_t words = dse_grammar_vocab_mask_words(vocab);
                const uint64_t *set = vocab->plain_upto + (taken - 1) * words;
                for (size_t k = 0; k < words; k++)
                        allowed[k] |= set[k];
                count = (int)vocab->plain_upto_count[taken - 1];
        }
        for (uint32_t part = 0; r == 0 && part <= GRAMMAR_PLAIN_MAX; part++) {
                if (part && (part <= taken || dead))
                        continue;
                int n = walk_part(m, w, vocab, part, start, below, allowed, popped, n_popped, cap_popped);
                if (n < 0)
                        r = n;
                else
                        count += n;
        }
        return r < 0 ? r : count;
}
