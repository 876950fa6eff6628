/* The incremental byte matcher: a pushdown automaton over the grammar, run on every
 * parse at once (a set of stacks, as llama.cpp's grammar sampler keeps them). Rules
 * reached without consuming a byte are expanded eagerly, so every stack's top waits on
 * a byte class; a rule reference in tail position replaces its frame instead of pushing
 * one, so repetitions written as right recursion keep the stacks flat. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

/* A state this big means a grammar so ambiguous that masks would be too slow anyway. */
#define GRAMMAR_MAX_STACKS 65536
/* Frames live until the next advance compacts them; nested repetitions of groups that
 * match nothing can ask for one per path through them. 64 MiB of frames is far beyond
 * any grammar a mask can be computed for in time. */
#define GRAMMAR_MAX_FRAMES (1u << 22)

/* The hash of a stack whose top frame is at pos above parent, from the parent's. */
static uint32_t stack_hash(const struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent) {
        uint32_t below = parent == GRAMMAR_NIL ? 0x9e3779b9u : m->frames[parent].hash;
        return (below ^ pos) * 0x01000193u + (below >> 15);
}

/* Appends the frame (pos, parent) whose stack hashes to hash. */
static int frame_append(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t hash, uint32_t *ret) {
        if (m->n_frames >= GRAMMAR_MAX_FRAMES)
                return -E2BIG;
        int r = dse__grammar_grow((void **)&m->frames, &m->cap_frames, (uint64_t)m->n_frames + 1, sizeof *m->frames);
        if (r < 0)
                return r;
        m->frames[m->n_frames] = (struct grammar_frame){pos, parent, hash, 0};
        *ret = m->n_frames++;
        return 0;
}

int dse__grammar_frame_new(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t *ret) {
        return frame_append(m, pos, parent, stack_hash(m, pos, parent), ret);
}

/* The frame (pos, parent) whose stack hashes to hash, GRAMMAR_NIL when the arena holds
 * none. A slot may name a frame dropped by a reset to a mark, or a later one in its
 * place: only a live frame with this pos and parent is the one. */
static uint32_t frame_find(const struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t hash) {
        const struct grammar_hash_index *ix = &m->frame_index;
        if (!ix->size)
                return GRAMMAR_NIL;
        uint32_t mask = ix->size - 1;
        for (uint32_t k = hash & mask; ix->slots[k]; k = (k + 1) & mask) {
                uint32_t f = ix->slots[k] - 1;
                if (f < m->n_frames && m->frames[f].pos == pos && m->frames[f].parent == parent)
                        return f;
        }
        return GRAMMAR_NIL;
}

/* Indexes every live frame afresh, with room for half as many again, dropping the
 * slots of frames gone. Stand-in frames (mask_cache.c) are indexed too; they sit at
 * pos 0, where no continuation does, so no lookup finds them. */
static int frame_index_rebuild(struct dse_grammar_matcher *m) {
        struct grammar_hash_index *ix = &m->frame_index;
        GRAMMAR_TRY(dse__grammar_hash_index_reserve(ix, (uint64_t)m->n_frames + m->n_frames / 2 + 1, 0, NULL, NULL));
        memset(ix->slots, 0, (size_t)ix->size * sizeof *ix->slots);
        for (uint32_t i = 0; i < m->n_frames; i++)
                dse__grammar_hash_index_put(ix, m->frames[i].hash, i);
        m->frame_index_count = m->n_frames;
        return 0;
}

/* The frame (pos, parent), reused when the arena holds it. Stacks built along different
 * paths through the grammar then share their frames wherever they are equal, so
 * comparing two takes one step and popping into one is done once per round, where
 * deep equal stacks of separate frames (a repeated group that may match nothing keeps
 * one parse per count still open) were compared frame by frame and followed each. */
static int frame_shared(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t *ret) {
        uint32_t hash = stack_hash(m, pos, parent);
        uint32_t f = frame_find(m, pos, parent, hash);
        if (f != GRAMMAR_NIL) {
                *ret = f;
                return 0;
        }
        GRAMMAR_TRY(frame_append(m, pos, parent, hash, ret));
        if (2 * ((uint64_t)m->frame_index_count + 1) > m->frame_index.size)
                return frame_index_rebuild(m);
        dse__grammar_hash_index_put(&m->frame_index, hash, *ret);
        m->frame_index_count++;
        return 0;
}

static int stacks_equal(const struct dse_grammar_matcher *m, uint32_t a, uint32_t b) {
        while (a != b) {
                if (a == GRAMMAR_NIL || b == GRAMMAR_NIL || m->frames[a].pos != m->frames[b].pos)
                        return 0;
                a = m->frames[a].parent;
                b = m->frames[b].parent;
        }
        return 1;
}

/* The hash of a top: a frame's, or the marker itself for the empty and popped stacks. */
static uint32_t top_hash(const struct dse_grammar_matcher *m, uint32_t t) {
        return t >= GRAMMAR_POPPED ? t : m->frames[t].hash;
}

static int top_is(const struct dse_grammar_matcher *m, uint32_t t, uint32_t pos, uint32_t parent, uint32_t hash) {
        if (pos >= GRAMMAR_POPPED || t >= GRAMMAR_POPPED)
                return pos == t;
        return m->frames[t].hash == hash && m->frames[t].pos == pos && stacks_equal(m, m->frames[t].parent, parent);
}

static uint32_t seen_hash_of(const void *ctx, uint32_t item) {
        const struct dse_grammar_matcher *m = ctx;
        return top_hash(m, m->tops[m->seen_begin + item]);
}

/* A state up to this many stacks is searched one by one; a bigger one (a grammar that
 * keeps many parses alive adds the same deep stacks again and again) through m->seen. */
#define GRAMMAR_SCANNED_STACKS 32

/* Adds the stack (pos, parent) to the state being built from `begin`, unless it is
 * there already. pos == GRAMMAR_NIL adds the empty stack, GRAMMAR_POPPED the popped
 * marker. */
static int add_stack(struct dse_grammar_matcher *m, uint32_t begin, uint32_t pos, uint32_t parent) {
        uint32_t hash = pos < GRAMMAR_POPPED ? stack_hash(m, pos, parent) : pos;
        uint32_t count = m->n_tops - begin;
        if (count == 0)
                m->seen_count = 0; /* a new state: whatever m->seen indexes is gone */
        if (count < GRAMMAR_SCANNED_STACKS) {
                for (uint32_t i = begin; i < m->n_tops; i++)
                        if (top_is(m, m->tops[i], pos, parent, hash))
                                return 0;
        } else {
                if (m->seen_begin != begin || m->seen_count != count) {
                        m->seen_begin = begin;
                        m->seen_count = 0;
                        if (m->seen.size)
                                memset(m->seen.slots, 0, (size_t)m->seen.size * sizeof *m->seen.slots);
                        for (uint32_t i = 0; i < count; i++) {
                                GRAMMAR_TRY(dse__grammar_hash_index_reserve(&m->seen, (uint64_t)i + 1, i, seen_hash_of, m));
                                dse__grammar_hash_index_put(&m->seen, seen_hash_of(m, i), i);
                        }
                        m->seen_count = count;
                }
                uint32_t mask = m->seen.size - 1;
                for (uint32_t k = hash & mask; m->seen.slots[k]; k = (k + 1) & mask)
                        if (top_is(m, m->tops[begin + m->seen.slots[k] - 1], pos, parent, hash))
                                return 0;
        }
        if (count >= GRAMMAR_MAX_STACKS)
                return -E2BIG;
        int r = dse__grammar_grow((void **)&m->tops, &m->cap_tops, (uint64_t)m->n_tops + 1, sizeof *m->tops);
        if (r < 0)
                return r;
        uint32_t top = pos;
        if (pos < GRAMMAR_POPPED) {
                r = frame_append(m, pos, parent, hash, &top);
                if (r < 0)
                        return r;
        }
        if (count >= GRAMMAR_SCANNED_STACKS) {
                GRAMMAR_TRY(dse__grammar_hash_index_reserve(&m->seen, (uint64_t)count + 1, count, seen_hash_of, m));
                dse__grammar_hash_index_put(&m->seen, hash, count);
                m->seen_count = count + 1;
        }
        m->tops[m->n_tops++] = top;
        return 0;
}

/* Starts an expansion round: the stacks added from then on go to one state, so a frame
 * continued from once in the round need not be continued from again. */
static void start_round(struct dse_grammar_matcher *m) {
        if (++m->round == 0) {
                for (uint32_t i = 0; i < m->n_frames; i++)
                        m->frames[i].resumed_round = 0;
                m->round = 1;
        }
}

/* Queues the stack (pos, parent) for expand to follow. */
static int push_pending(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent) {
        GRAMMAR_TRY(dse__grammar_grow((void **)&m->pending, &m->cap_pending, (uint64_t)m->n_pending + 1,
                                      sizeof *m->pending));
        m->pending[m->n_pending++] = (struct grammar_pending){pos, parent};
        return 0;
}

/* Follows the stack whose top is at pos until its top waits on a byte class (or it is
 * empty), adding the stack that results; a rule reference queues one stack per
 * alternative instead. */
static int follow(struct dse_grammar_matcher *m, uint32_t begin, uint32_t pos, uint32_t parent) {
        const struct dse_grammar *g = m->g;
        for (;;) {
                struct grammar_elem e = g->elems[pos];
                if (e.kind == GRAMMAR_CLASS)
                        return add_stack(m, begin, pos, parent);
                if (e.kind == GRAMMAR_END) {
                        if (parent == GRAMMAR_NIL)
                                return add_stack(m, begin, GRAMMAR_NIL, GRAMMAR_NIL);
                        if (parent == m->boundary)
                                return add_stack(m, begin, GRAMMAR_POPPED, GRAMMAR_NIL);
                        if (m->frames[parent].resumed_round == m->round)
                                return 0;
                        m->frames[parent].resumed_round = m->round;
                        pos = m->frames[parent].pos;
                        parent = m->frames[parent].parent;
                        continue;
                }
                /* a rule reference: continue after it once the rule is done */
                uint32_t cont = parent;
                if (g->elems[pos + 1].kind != GRAMMAR_END)
                        GRAMMAR_TRY(frame_shared(m, pos + 1, parent, &cont));
                /* queued last first, so the alternatives are followed in order */
                const struct grammar_rule *rule = &g->rules[e.arg];
                for (uint32_t a = rule->n_alts; a-- > 0;)
                        GRAMMAR_TRY(push_pending(m, g->alt_start[rule->first_alt + a], cont));
                return 0;
        }
}

/* Expands the stack whose top is at pos, adding every stack that results. The grammar
 * has no left recursion (dse__grammar_check), so this terminates. Paths through rules
 * that match nothing meet again where they pop back into the same frame; continuing
 * from each frame once per round keeps that polynomial where following every path (a
 * bounded repetition of a group with several empty alternatives) is exponential. The
 * stacks still to follow wait in m->pending rather than on the C stack: nested
 * repetitions of groups that match nothing reach rules tens of thousands deep. */
static int expand(struct dse_grammar_matcher *m, uint32_t begin, uint32_t pos, uint32_t parent) {
        m->n_pending = 0;
        GRAMMAR_TRY(push_pending(m, pos, parent));
        while (m->n_pending) {
                struct grammar_pending p = m->pending[--m->n_pending];
                GRAMMAR_TRY(follow(m, begin, p.pos, p.parent));
        }
        return 0;
}

int64_t dse__grammar_matcher_step(struct dse_grammar_matcher *m, uint32_t begin, uint32_t end, uint8_t byte) {
        uint32_t out = m->n_tops;
        start_round(m);
        for (uint32_t i = begin; i < end; i++) {
                uint32_t t = m->tops[i];
                if (t >= GRAMMAR_POPPED)
                        continue;
                struct grammar_frame f = m->frames[t];
                if (!grammar_class_has(&m->g->classes[m->g->elems[f.pos].arg], byte))
                        continue;
                int r = expand(m, out, f.pos + 1, f.parent);
                if (r < 0)
                        return r;
        }
        return m->n_tops;
}

int64_t dse__grammar_matcher_expand(struct dse_grammar_matcher *m, uint32_t pos, uint32_t parent) {
        start_round(m);
        int r = expand(m, m->n_tops, pos, parent);
        return r < 0 ? (int64_t)r : (int64_t)m->n_tops;
}

static int shape_push(uint32_t **buf, uint32_t *cap, uint32_t *len, uint32_t v) {
        GRAMMAR_TRY(dse__grammar_grow((void **)buf, cap, (uint64_t)*len + 1, sizeof **buf));
        (*buf)[(*len)++] = v;
        return 0;
}

int dse__grammar_state_shape(const struct dse_grammar_matcher *m, uint32_t begin, uint32_t end, uint32_t below,
                             uint32_t **buf, uint32_t *cap, uint32_t *len) {
        GRAMMAR_TRY(shape_push(buf, cap, len, end - begin));
        for (uint32_t i = begin; i < end; i++) {
                uint32_t t = m->tops[i];
                if (t >= GRAMMAR_POPPED) {
                        GRAMMAR_TRY(shape_push(buf, cap, len, t));
                        continue;
                }
                uint32_t at = *len, n = 0;
                GRAMMAR_TRY(shape_push(buf, cap, len, 0));
                for (uint32_t x = t; x != below && x != GRAMMAR_NIL; x = m->frames[x].parent, n++)
                        GRAMMAR_TRY(shape_push(buf, cap, len, m->frames[x].pos));
                (*buf)[at] = n;
        }
        return 0;
}

int dse__grammar_state_load(struct dse_grammar_matcher *m, const uint32_t *shape, uint32_t below, uint32_t *ret_end,
                            uint32_t *ret_used) {
        uint32_t p = 1;
        for (uint32_t s = 0; s < shape[0]; s++) {
                uint32_t len = shape[p++], top = len;
                if (len < GRAMMAR_POPPED) {
                        top = below;
                        for (uint32_t j = len; j-- > 0;)
                                GRAMMAR_TRY(dse__grammar_frame_new(m, shape[p + j], top, &top));
                        p += len;
                }
                GRAMMAR_TRY(dse__grammar_grow((void **)&m->tops, &m->cap_tops, (uint64_t)m->n_tops + 1, sizeof *m->tops));
                m->tops[m->n_tops++] = top;
        }
        *ret_end = m->n_tops;
        *ret_used = p;
        return 0;
}

int dse__grammar_state_accepting(const struct dse_grammar_matcher *m, uint32_t begin, uint32_t end) {
        for (uint32_t i = begin; i < end; i++)
                if (m->tops[i] == GRAMMAR_NIL)
                        return 1;
        return 0;
}

/* Copies frame old and the frames below it into frames (parents first), once each. */
static uint32_t copy_frame(const struct dse_grammar_matcher *m, uint32_t old, uint32_t *map,
                           struct grammar_frame *frames, uint32_t *n) {
        if (old == GRAMMAR_NIL)
                return GRAMMAR_NIL;
        if (map[old] == GRAMMAR_NIL) {
                uint32_t parent = copy_frame(m, m->frames[old].parent, map, frames, n);
                frames[*n] = (struct grammar_frame){m->frames[old].pos, parent, m->frames[old].hash, 0};
                map[old] = (*n)++;
        }
        return map[old];
}

/* Copies the current state's stacks to the front of fresh arrays, dropping the frames
 * of states left behind, so memory stays proportional to the live stacks. */
static int compact(struct dse_grammar_matcher *m) {
        uint32_t n_tops = m->cur_end - m->cur_begin;
        uint32_t *map = malloc(((size_t)m->n_frames + 1) * sizeof *map);
        struct grammar_frame *frames = malloc(((size_t)m->n_frames + 1) * sizeof *frames);
        uint32_t *tops = malloc(((size_t)n_tops + 1) * sizeof *tops);
        if (!map || !frames || !tops) {
                free(map);
                free(frames);
                free(tops);
                return -ENOMEM;
        }
        memset(map, 0xff, ((size_t)m->n_frames + 1) * sizeof *map);
        uint32_t n = 0;
        for (uint32_t i = 0; i < n_tops; i++)
                tops[i] = copy_frame(m, m->tops[m->cur_begin + i], map, frames, &n);
        free(map);
        free(m->frames);
        free(m->tops);
        m->frames = frames;
        m->cap_frames = m->n_frames + 1;
        m->n_frames = n;
        m->tops = tops;
        m->cap_tops = n_tops + 1;
        m->n_tops = n_tops;
        m->cur_begin = 0;
        m->cur_end = n_tops;
        return frame_index_rebuild(m);
}

int dse_grammar_matcher_new(const struct dse_grammar *grammar, struct dse_grammar_matcher **ret_matcher,
                            struct dse_diag *reterr) {
        if (!grammar || !ret_matcher)
                return -EINVAL;
        struct dse_grammar_matcher *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->g = grammar;
        m->boundary = GRAMMAR_NIL;
        const struct grammar_rule *root = &grammar->rules[grammar->root];
        int r = 0;
        start_round(m);
        for (uint32_t a = 0; a < root->n_alts && r == 0; a++)
                r = expand(m, 0, grammar->alt_start[root->first_alt + a], GRAMMAR_NIL);
        if (r < 0) {
                if (reterr && r == -E2BIG)
                        snprintf(reterr->msg, sizeof reterr->msg,
                                 "grammar too ambiguous: its first state needs over %u parses or %u stack frames "
                                 "(nested repetitions of groups that may match nothing?)",
                                 GRAMMAR_MAX_STACKS, GRAMMAR_MAX_FRAMES);
                else if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg, "grammar matcher: %s", strerror(-r));
                dse_grammar_matcher_free(m);
                return r;
        }
        m->cur_begin = 0;
        m->cur_end = m->n_tops;
        *ret_matcher = m;
        return 0;
}

void dse_grammar_matcher_free(struct dse_grammar_matcher *m) {
        if (!m)
                return;
        free(m->frames);
        free(m->tops);
        free(m->walk);
        free(m->key);
        free(m->pending);
        dse__grammar_hash_index_done(&m->seen);
        dse__grammar_hash_index_done(&m->frame_index);
        free(m);
}

int dse_grammar_matcher_advance(struct dse_grammar_matcher *m, const void *bytes, size_t n) {
        if (!m || (!bytes && n))
                return -EINVAL;
        if (m->ended)
                return n ? -EINVAL : 0;
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops;
        uint32_t begin = m->cur_begin, end = m->cur_end;
        for (size_t i = 0; i < n; i++) {
                uint32_t out = m->n_tops;
                int64_t r = dse__grammar_matcher_step(m, begin, end, ((const uint8_t *)bytes)[i]);
                if (r < 0 || (uint32_t)r == out) {
                        m->n_frames = mark_frames;
                        m->n_tops = mark_tops;
                        return r < 0 ? (int)r : -EINVAL;
                }
                begin = out;
                end = (uint32_t)r;
        }
        m->cur_begin = begin;
        m->cur_end = end;
        return n ? compact(m) : 0;
}

int dse_grammar_matcher_is_accepting(const struct dse_grammar_matcher *m) {
        return m && !m->ended && dse__grammar_state_accepting(m, m->cur_begin, m->cur_end);
}

int dse_grammar_matcher_copy(struct dse_grammar_matcher *dst, const struct dse_grammar_matcher *src) {
        if (!dst || !src)
                return -EINVAL;
        /* the arena is copied whole, so frame indices stay valid; after an advance it holds
         * only the current state */
        GRAMMAR_TRY(dse__grammar_grow((void **)&dst->frames, &dst->cap_frames, (uint64_t)src->n_frames + 1,
                                      sizeof *dst->frames));
        GRAMMAR_TRY(dse__grammar_grow((void **)&dst->tops, &dst->cap_tops, (uint64_t)src->n_tops + 1, sizeof *dst->tops));
        if (src->n_frames)
                memcpy(dst->frames, src->frames, (size_t)src->n_frames * sizeof *dst->frames);
        if (src->n_tops)
                memcpy(dst->tops, src->tops, (size_t)src->n_tops * sizeof *dst->tops);
        dst->g = src->g;
        dst->n_frames = src->n_frames;
        dst->n_tops = src->n_tops;
        dst->cur_begin = src->cur_begin;
        dst->cur_end = src->cur_end;
        dst->ended = src->ended;
        dst->boundary = GRAMMAR_NIL;
        /* the frames carry src's round marks: dst's rounds go on past them */
        if (dst->round < src->round)
                dst->round = src->round;
        return 0;
}
