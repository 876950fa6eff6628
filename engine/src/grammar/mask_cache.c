/* Token masks through a per-grammar cache (README.md, "Token masks"). A mask depends
 * on the whole matcher state, but most of it only on the frames near the stack tops:
 * inside a JSON string every stack sits on the string's rules above one common frame
 * (what follows the string), and almost every token is a run of string characters
 * that never gets back to that frame. So the state is cut at the highest frame all its
 * stacks share (the boundary): the part above it, as element positions, is the cache
 * key. For a key the trie walk runs once, on the stacks above a stand-in boundary; a
 * parse that finishes into the boundary stops there (GRAMMAR_POPPED). Tokens some
 * other parse survives are allowed whatever lies below (the entry's bitset); tokens
 * that reach the boundary after k of their bytes are context-dependent: at mask time
 * their remaining bytes are walked from the boundary frame's own expansion, sorted so
 * that shared prefixes are stepped once. A state holding the empty stack has no
 * boundary: its key is every stack whole and nothing depends on context. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/hash_index.h"

/* Past this much memory a grammar's cache stops growing; masks are then computed
 * without keeping them. */
#define MASK_CACHE_MAX_BYTES ((size_t)64 << 20)
/* Past this many context-dependent tokens, resolving them on every use of an entry
 * costs about what a walk does: such a state's mask is cached whole instead. */
#define MASK_CACHE_MAX_DEPS 4096

struct mask_entry {
        uint64_t hash, vocab_uid;
        uint32_t *key;
        uint32_t key_len;
        uint64_t *bits; /* the context-free allowed tokens as a bitset, or NULL: */
        int32_t *ids;   /* as a list */
        uint32_t n_allowed;
        /* context-dependent tokens: dep_ids[i]'s bytes from dep_k[i] on, sorted by those
         * bytes, must be taken by the boundary frame's expansion */
        int32_t *dep_ids;
        uint32_t *dep_k;
        uint32_t n_dep;
        /* the cut leaves too many tokens context-dependent: the entry holds nothing, and
         * the mask is cached under the whole state instead */
        int whole_state;
        size_t bytes;
};

struct grammar_mask_cache {
        pthread_mutex_t lock;
        struct mask_entry **entries;
        uint32_t n, cap;
        struct grammar_hash_index index; /* over entries by hash */
        size_t bytes;
        /* the trie walks' states, for walks on a stand-in boundary ([1]) or on none ([0]);
         * a walk takes one out and puts it back (NULL while it is out) */
        struct grammar_walk_states *walk_states[2];
};

int dse__grammar_mask_cache_new(struct grammar_mask_cache **ret) {
        struct grammar_mask_cache *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        if (pthread_mutex_init(&c->lock, NULL) != 0) {
                free(c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

static void entry_free(struct mask_entry *e) {
        if (!e)
                return;
        free(e->key);
        free(e->bits);
        free(e->ids);
        free(e->dep_ids);
        free(e->dep_k);
        free(e);
}

void dse__grammar_mask_cache_free(struct grammar_mask_cache *c) {
        if (!c)
                return;
        for (uint32_t i = 0; i < c->n; i++)
                entry_free(c->entries[i]);
        free(c->entries);
        dse__grammar_hash_index_done(&c->index);
        dse__grammar_walk_states_free(c->walk_states[0]);
        dse__grammar_walk_states_free(c->walk_states[1]);
        pthread_mutex_destroy(&c->lock);
        free(c);
}

/* 1 when frame f is strictly below the top frame t */
static int is_below(const struct dse_grammar_matcher *m, uint32_t t, uint32_t f) {
        for (uint32_t x = m->frames[t].parent; x != GRAMMAR_NIL; x = m->frames[x].parent)
                if (x == f)
                        return 1;
        return 0;
}

/* The highest frame below every stack top of the current state, GRAMMAR_NIL when there
 * is none (or the state holds the empty stack). */
static uint32_t boundary_frame(const struct dse_grammar_matcher *m) {
        for (uint32_t i = m->cur_begin; i < m->cur_end; i++)
                if (m->tops[i] == GRAMMAR_NIL)
                        return GRAMMAR_NIL;
        uint32_t t0 = m->tops[m->cur_begin];
        for (uint32_t x = m->frames[t0].parent; x != GRAMMAR_NIL; x = m->frames[x].parent) {
                uint32_t i = m->cur_begin + 1;
                while (i < m->cur_end && is_below(m, m->tops[i], x))
                        i++;
                if (i == m->cur_end)
                        return x;
        }
        return GRAMMAR_NIL;
}

/* The key of the current state cut at boundary: whether there is one, then the shape
 * of the stacks above it (dse__grammar_state_shape). */
static int state_key(struct dse_grammar_matcher *m, uint32_t boundary, uint32_t *ret_len) {
        uint32_t n = 0;
        GRAMMAR_TRY(dse__grammar_grow((void **)&m->key, &m->cap_key, 1, sizeof *m->key));
        m->key[n++] = boundary != GRAMMAR_NIL;
        GRAMMAR_TRY(dse__grammar_state_shape(m, m->cur_begin, m->cur_end, boundary, &m->key, &m->cap_key, &n));
        *ret_len = n;
        return 0;
}

static uint64_t key_hash(const uint32_t *key, uint32_t n, uint64_t vocab_uid) {
        uint64_t h = 1469598103934665603ull ^ vocab_uid;
        for (uint32_t i = 0; i < n; i++) {
                h ^= key[i];
                h *= 1099511628211ull;
        }
        return h;
}

struct dep_pair {
        const uint8_t *suffix;
        uint32_t len, k;
        int32_t id;
};

static int cmp_dep(const void *a, const void *b) {
        const struct dep_pair *x = a, *y = b;
        uint32_t n = x->len < y->len ? x->len : y->len;
        int c = n ? memcmp(x->suffix, y->suffix, n) : 0;
        if (c)
                return c;
        if (x->len != y->len)
                return x->len < y->len ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

/* Lists the tokens of the trie nodes under each popped node that are not allowed
 * already, with the depth the node is at, sorted by their remaining bytes. */
static int collect_deps(const struct dse_grammar_vocab *v, const uint32_t *popped, uint32_t n_popped,
                        const uint64_t *bits, struct mask_entry *e) {
        struct dep_pair *pairs = NULL;
        uint32_t n = 0, cap = 0;
        int r = 0;
        for (uint32_t p = 0; p < n_popped && r == 0; p++) {
                const struct grammar_trie_node *top = &v->nodes[popped[p]];
                for (uint32_t j = popped[p]; j < top->end && r == 0; j++)
                        for (int32_t id = v->nodes[j].first_token; id >= 0 && r == 0; id = v->next_token[id]) {
                                if ((bits[id / 64] >> (id % 64)) & 1)
                                        continue;
                                r = dse__grammar_grow((void **)&pairs, &cap, (uint64_t)n + 1, sizeof *pairs);
                                if (r == 0)
                                        pairs[n++] = (struct dep_pair){v->token_bytes[id] + top->depth,
                                                                       v->token_len[id] - top->depth, top->depth, id};
                        }
        }
        if (r == 0 && n > 0) {
                qsort(pairs, n, sizeof *pairs, cmp_dep);
                e->dep_ids = malloc((size_t)n * sizeof *e->dep_ids);
                e->dep_k = malloc((size_t)n * sizeof *e->dep_k);
                if (!e->dep_ids || !e->dep_k)
                        r = -ENOMEM;
                for (uint32_t i = 0; i < n && r == 0; i++) {
                        e->dep_ids[i] = pairs[i].id;
                        e->dep_k[i] = pairs[i].k;
                }
                e->n_dep = n;
                e->bytes += (size_t)n * (sizeof *e->dep_ids + sizeof *e->dep_k);
        }
        free(pairs);
        return r;
}

/* Computes the entry for the key in m->key: the trie walk on the key's stacks above a
 * stand-in boundary frame. */
static int build_entry(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *v, uint32_t key_len,
                       struct mask_entry **ret) {
        size_t words = dse_grammar_vocab_mask_words(v);
        struct mask_entry *e = calloc(1, sizeof *e);
        uint64_t *bits = calloc(words, sizeof *bits);
        uint32_t *popped = NULL, n_popped = 0, cap_popped = 0;
        int r = e && bits ? 0 : -ENOMEM;
        if (r == 0) {
                e->key = malloc((size_t)key_len * sizeof *e->key);
                r = e->key ? 0 : -ENOMEM;
        }
        if (r < 0) {
                free(bits);
                entry_free(e);
                return r;
        }
        memcpy(e->key, m->key, (size_t)key_len * sizeof *e->key);
        e->key_len = key_len;
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops;
        uint32_t stand_in = GRAMMAR_NIL;
        int has_boundary = (int)e->key[0];
        if (has_boundary)
                r = dse__grammar_frame_new(m, 0, GRAMMAR_NIL, &stand_in);
        if (r == 0) {
                /* a walk on no boundary also takes the stand-in walks' table, where its
                 * groups of stacks are tried (dse__grammar_trie_walk) */
                struct grammar_mask_cache *c = m->g->cache;
                pthread_mutex_lock(&c->lock);
                struct grammar_walk_states *states = c->walk_states[has_boundary], *group_states = NULL;
                c->walk_states[has_boundary] = NULL;
                if (!has_boundary) {
                        group_states = c->walk_states[1];
                        c->walk_states[1] = NULL;
                }
                pthread_mutex_unlock(&c->lock);
                m->boundary = stand_in;
                int count = dse__grammar_trie_walk(m, v, e->key + 1, stand_in, &states, &group_states, bits,
                                                   has_boundary ? &popped : NULL, &n_popped, &cap_popped);
                m->boundary = GRAMMAR_NIL;
                pthread_mutex_lock(&c->lock);
                if (!c->walk_states[has_boundary]) {
                        c->walk_states[has_boundary] = states;
                        states = NULL;
                }
                if (group_states && !c->walk_states[1]) {
                        c->walk_states[1] = group_states;
                        group_states = NULL;
                }
                pthread_mutex_unlock(&c->lock);
                dse__grammar_walk_states_free(states);
                dse__grammar_walk_states_free(group_states);
                r = count < 0 ? count : 0;
                e->n_allowed = count < 0 ? 0 : (uint32_t)count;
        }
        m->n_frames = mark_frames;
        m->n_tops = mark_tops;
        if (r == 0)
                r = collect_deps(v, popped, n_popped, bits, e);
        free(popped);
        if (r == 0 && e->n_dep > MASK_CACHE_MAX_DEPS) {
                free(e->dep_ids);
                free(e->dep_k);
                e->dep_ids = NULL;
                e->dep_k = NULL;
                e->n_dep = 0;
                e->n_allowed = 0;
                e->whole_state = 1;
                memset(bits, 0, words * sizeof *bits);
                e->bytes = 0;
        }
        if (r == 0 && (size_t)e->n_allowed * sizeof *e->ids < words * sizeof *bits) {
                /* few tokens: a list is smaller than the bitset */
                e->ids = malloc(((size_t)e->n_allowed + 1) * sizeof *e->ids);
                if (!e->ids)
                        r = -ENOMEM;
                for (uint32_t w = 0, n = 0; r == 0 && w < words; w++)
                        for (uint64_t x = bits[w]; x; x &= x - 1)
                                e->ids[n++] = (int32_t)(w * 64 + (uint32_t)__builtin_ctzll(x));
                free(bits);
                e->bytes += (size_t)e->n_allowed * sizeof *e->ids;
        } else {
                e->bits = bits;
                e->bytes += words * sizeof *bits;
        }
        if (r < 0) {
                entry_free(e);
                return r;
        }
        e->bytes += sizeof *e + (size_t)key_len * sizeof *e->key;
        *ret = e;
        return 0;
}

static struct mask_entry *lookup(struct grammar_mask_cache *c, uint64_t hash, uint64_t uid, const uint32_t *key,
                                 uint32_t key_len) {
        if (!c->index.size)
                return NULL;
        uint32_t mask = c->index.size - 1;
        for (uint32_t k = (uint32_t)hash & mask; c->index.slots[k]; k = (k + 1) & mask) {
                struct mask_entry *e = c->entries[c->index.slots[k] - 1];
                if (e->hash == hash && e->vocab_uid == uid && e->key_len == key_len &&
                    !memcmp(e->key, key, (size_t)key_len * sizeof *key))
                        return e;
        }
        return NULL;
}

static uint32_t entry_hash(const void *cache, uint32_t i) {
        return (uint32_t)((const struct grammar_mask_cache *)cache)->entries[i]->hash;
}

/* Adds e to the cache and its index: 0, or -ENOMEM leaving the cache as it was. */
static int cache_add(struct grammar_mask_cache *c, struct mask_entry *e) {
        GRAMMAR_TRY(dse__grammar_grow((void **)&c->entries, &c->cap, (uint64_t)c->n + 1, sizeof *c->entries));
        GRAMMAR_TRY(dse__grammar_hash_index_reserve(&c->index, (uint64_t)c->n + 1, c->n, entry_hash, c));
        dse__grammar_hash_index_put(&c->index, (uint32_t)e->hash, c->n);
        c->entries[c->n++] = e;
        c->bytes += e->bytes;
        return 0;
}

/* Sets the bits of the context-dependent tokens whose remaining bytes the boundary
 * frame's expansion takes; returns how many bits it newly set. */
static int resolve_deps(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *v, const struct mask_entry *e,
                        uint32_t boundary, uint64_t *mask) {
        int r = dse__grammar_grow((void **)&m->walk, &m->cap_walk, 3u * ((uint64_t)v->max_depth + 1), sizeof *m->walk);
        if (r < 0)
                return r;
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops;
        uint32_t begin = m->n_tops;
        int64_t end = dse__grammar_matcher_expand(m, m->frames[boundary].pos, m->frames[boundary].parent);
        if (end < 0) {
                m->n_frames = mark_frames;
                m->n_tops = mark_tops;
                return (int)end;
        }
        uint32_t *walk = m->walk;
        walk[0] = begin;
        walk[1] = (uint32_t)end;
        walk[2] = m->n_frames;
        /* walk[3d..]: the state after d bytes of the previous suffix, for d <= valid */
        uint32_t valid = 0, prev_len = 0;
        const uint8_t *prev = NULL;
        int count = 0;
        for (uint32_t i = 0; i < e->n_dep; i++) {
                int32_t id = e->dep_ids[i];
                if ((mask[id / 64] >> (id % 64)) & 1)
                        continue;
                const uint8_t *s = v->token_bytes[id] + e->dep_k[i];
                uint32_t len = v->token_len[id] - e->dep_k[i], d = 0;
                while (d < len && d < prev_len && d < valid && s[d] == prev[d])
                        d++;
                int alive = walk[3 * d] < walk[3 * d + 1];
                for (; alive && d < len; d++) {
                        m->n_frames = walk[3 * d + 2];
                        m->n_tops = walk[3 * d + 1] > mark_tops ? walk[3 * d + 1] : mark_tops;
                        uint32_t b = m->n_tops;
                        int64_t x = dse__grammar_matcher_step(m, walk[3 * d], walk[3 * d + 1], s[d]);
                        if (x < 0) {
                                r = (int)x;
                                break;
                        }
                        walk[3 * (d + 1)] = b;
                        walk[3 * (d + 1) + 1] = (uint32_t)x;
                        walk[3 * (d + 1) + 2] = m->n_frames;
                        alive = (uint32_t)x > b;
                }
                if (r < 0)
                        break;
                valid = d;
                prev = s;
                prev_len = len;
                if (alive) {
                        mask[id / 64] |= (uint64_t)1 << (id % 64);
                        count++;
                }
        }
        m->n_frames = mark_frames;
        m->n_tops = mark_tops;
        return r < 0 ? r : count;
}

/* The entry for the current state cut at boundary (GRAMMAR_NIL: the whole state), built
 * and kept when new; *ret_built is set when it could not be kept (the caller frees it). */
static int find_entry(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, uint32_t boundary,
                      struct mask_entry **ret_e, struct mask_entry **ret_built) {
        struct grammar_mask_cache *c = m->g->cache;
        uint32_t key_len;
        GRAMMAR_TRY(state_key(m, boundary, &key_len));
        uint64_t hash = key_hash(m->key, key_len, vocab->uid);
        pthread_mutex_lock(&c->lock);
        struct mask_entry *e = lookup(c, hash, vocab->uid, m->key, key_len), *built = NULL;
        pthread_mutex_unlock(&c->lock);
        if (!e) {
                GRAMMAR_TRY(build_entry(m, vocab, key_len, &built));
                built->hash = hash;
                built->vocab_uid = vocab->uid;
                pthread_mutex_lock(&c->lock);
                e = lookup(c, hash, vocab->uid, m->key, key_len); /* another thread may have been first */
                if (!e && c->bytes + built->bytes <= MASK_CACHE_MAX_BYTES && cache_add(c, built) == 0) {
                        e = built;
                        built = NULL;
                }
                pthread_mutex_unlock(&c->lock);
                if (!e)
                        e = built; /* not kept: used once, freed by the caller */
        }
        *ret_e = e;
        *ret_built = built;
        return 0;
}

int dse__grammar_mask_cached(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, uint64_t *mask) {
        uint32_t boundary = boundary_frame(m);
        struct mask_entry *e, *built;
        GRAMMAR_TRY(find_entry(m, vocab, boundary, &e, &built));
        if (e->whole_state) {
                entry_free(built);
                boundary = GRAMMAR_NIL;
                GRAMMAR_TRY(find_entry(m, vocab, boundary, &e, &built));
        }
        int count = (int)e->n_allowed;
        if (e->bits)
                memcpy(mask, e->bits, dse_grammar_vocab_mask_words(vocab) * sizeof *mask);
        else
                for (uint32_t i = 0; i < e->n_allowed; i++)
                        mask[e->ids[i] / 64] |= (uint64_t)1 << (e->ids[i] % 64);
        int r = e->n_dep ? resolve_deps(m, vocab, e, boundary, mask) : 0;
        entry_free(built);
        return r < 0 ? r : count + r;
}
