/* The token trie of a vocabulary and the token mask computed by walking it against a
 * matcher state (README.md): a node's state is the parent's state stepped by one byte,
 * and a byte the grammar refuses skips the node's whole subtree, so the cost follows the
 * tokens the grammar allows, not the vocabulary size.
 *
 * A token's bytes are what it adds to decoded text in the middle of an output: the
 * decode of (context token, token) minus the decode of the context token alone, so a
 * SentencePiece "▁" becomes the space it is mid-text. Decoders that turn an incomplete
 * UTF-8 character into U+FFFD (Hugging Face's) hide the bytes of byte-fallback pieces
 * ("<0xE4>") and of byte-level pieces ending mid-character; those come from the piece
 * itself. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdatomic.h>

#include "grammar/grammar.h"
#include "tok/bpe_impl.h"
#include "utf8.h"

/* A byte-fallback piece "<0xHH>": returns the byte, or -1. */
static int byte_piece(const char *p) {
        unsigned v;
        char tail;
        if (!p || strlen(p) != 6 || strncmp(p, "<0x", 3) || p[5] != '>' || sscanf(p + 3, "%2x%c", &v, &tail) != 2)
                return -1;
        return (int)v;
}

/* The bytes of a ByteLevel piece (each code point one byte of the GPT-2 alphabet), or
 * -1 when the piece is not one. */
static int byte_level_bytes(const char *p, uint8_t *out, size_t cap) {
        size_t len = strlen(p), n = 0;
        for (size_t i = 0; i < len;) {
                uint32_t cp;
                int l = dse__utf8_decode(p + i, len - i, &cp);
                int b = l < 0 ? -1 : dse__bpe_cp_to_byte((int32_t)cp);
                if (b < 0 || n >= cap)
                        return -1;
                out[n++] = (uint8_t)b;
                i += (size_t)l;
        }
        return (int)n;
}

static int has_replacement_char(const char *s, size_t n) {
        for (size_t i = 0; i + 2 < n; i++)
                if ((uint8_t)s[i] == 0xEF && (uint8_t)s[i + 1] == 0xBF && (uint8_t)s[i + 2] == 0xBD)
                        return 1;
        return 0;
}

#define TOKEN_MAX_BYTES 1024

/* Sets *ret_len to token id's bytes in out (0: the token adds no text). */
static int token_bytes(const struct dse_tokenizer *tok, int32_t ctx, const char *ctx_text, size_t ctx_len,
                       int32_t id, uint8_t *out, uint32_t *ret_len) {
        const char *piece = dse_tokenizer_piece(tok, id);
        int b = byte_piece(piece);
        if (b >= 0) {
                out[0] = (uint8_t)b;
                *ret_len = 1;
                return 0;
        }
        char text[TOKEN_MAX_BYTES + 256];
        int32_t ids[2] = {ctx, id};
        int n = dse_tokenizer_decode(tok, ids, 2, text, sizeof text);
        if (n < 0)
                return n;
        if ((size_t)n > sizeof text || (size_t)n < ctx_len || memcmp(text, ctx_text, ctx_len)) {
                *ret_len = 0; /* decodes into its context: no bytes of its own to match */
                return 0;
        }
        size_t len = (size_t)n - ctx_len;
        if (has_replacement_char(text + ctx_len, len) && piece) {
                int bl = byte_level_bytes(piece, out, TOKEN_MAX_BYTES);
                if (bl >= 0) {
                        *ret_len = (uint32_t)bl;
                        return 0;
                }
        }
        memcpy(out, text + ctx_len, len);
        *ret_len = (uint32_t)len;
        return 0;
}

struct sorted_token {
        const uint8_t *bytes;
        uint32_t len;
        int32_t id;
};

static int cmp_sorted(const void *a, const void *b) {
        const struct sorted_token *x = a, *y = b;
        uint32_t n = x->len < y->len ? x->len : y->len;
        int c = memcmp(x->bytes, y->bytes, n);
        if (c)
                return c;
        if (x->len != y->len)
                return x->len < y->len ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

static int build_trie(struct dse_grammar_vocab *v) {
        struct sorted_token *s = malloc(((size_t)v->n_vocab + 1) * sizeof *s);
        size_t total = 1;
        uint32_t n = 0;
        if (!s)
                return -ENOMEM;
        for (int32_t id = 0; id < v->n_vocab; id++) {
                if (!v->token_len[id] || id == v->eos)
                        continue;
                s[n++] = (struct sorted_token){v->token_bytes[id], v->token_len[id], id};
                total += v->token_len[id];
        }
        qsort(s, n, sizeof *s, cmp_sorted);
        v->nodes = malloc(total * sizeof *v->nodes);
        if (!v->nodes) {
                free(s);
                return -ENOMEM;
        }
        /* path[d]: the node at depth d on the path to the previous token */
        uint32_t path[TOKEN_MAX_BYTES + 1];
        uint32_t depth = 0, n_nodes = 1;
        v->nodes[0] = (struct grammar_trie_node){.end = 0, .first_token = -1, .depth = 0, .byte = 0};
        path[0] = 0;
        const struct sorted_token *prev = NULL;
        int32_t *last_same = NULL;
        for (uint32_t i = 0; i < n; i++) {
                const struct sorted_token *t = &s[i];
                uint32_t common = 0;
                if (prev)
                        while (common < prev->len && common < t->len && prev->bytes[common] == t->bytes[common])
                                common++;
                while (depth > common)
                        v->nodes[path[depth--]].end = n_nodes;
                for (; depth < t->len; depth++) {
                        v->nodes[n_nodes] = (struct grammar_trie_node){
                                .end = 0, .first_token = -1, .depth = (uint16_t)(depth + 1), .byte = t->bytes[depth]};
                        path[depth + 1] = n_nodes++;
                }
                struct grammar_trie_node *node = &v->nodes[path[depth]];
                if (node->first_token < 0) {
                        node->first_token = t->id;
                } else {
                        *last_same = t->id;
                }
                last_same = &v->next_token[t->id];
                if (t->len > v->max_depth)
                        v->max_depth = (uint16_t)t->len;
                prev = t;
        }
        while (depth > 0)
                v->nodes[path[depth--]].end = n_nodes;
        v->nodes[0].end = n_nodes;
        v->n_nodes = n_nodes;
        free(s);
        return 0;
}

int dse_grammar_vocab_new(const struct dse_tokenizer *tok, struct dse_grammar_vocab **ret_vocab,
                          struct dse_diag *reterr) {
        if (!tok || !ret_vocab)
                return -EINVAL;
        int n_vocab = dse_tokenizer_n_vocab(tok);
        struct dse_grammar_vocab *v = calloc(1, sizeof *v);
        uint8_t *buf = malloc(TOKEN_MAX_BYTES);
        int r = -ENOMEM;
        if (!v || !buf || n_vocab <= 0)
                goto out_err;
        static atomic_uint_fast64_t next_uid = 1;
        v->n_vocab = n_vocab;
        v->eos = dse_tokenizer_eos(tok);
        v->uid = atomic_fetch_add(&next_uid, 1);
        v->next_token = malloc((size_t)n_vocab * sizeof *v->next_token);
        v->token_bytes = calloc((size_t)n_vocab, sizeof *v->token_bytes);
        v->token_len = calloc((size_t)n_vocab, sizeof *v->token_len);
        if (!v->next_token || !v->token_bytes || !v->token_len)
                goto out_err;
        memset(v->next_token, 0xff, (size_t)n_vocab * sizeof *v->next_token);
        /* the context: a plain letter, whose decode stays a prefix of what follows */
        int32_t ctx;
        char ctx_text[64];
        r = dse_tokenizer_encode(tok, "a", 1, 0, &ctx, 1);
        if (r != 1) {
                r = r < 0 ? r : -EINVAL;
                if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg, "token trie: the tokenizer does not encode \"a\" "
                                                                  "as one token");
                goto out_err;
        }
        r = dse_tokenizer_decode(tok, &ctx, 1, ctx_text, sizeof ctx_text);
        if (r < 0 || (size_t)r >= sizeof ctx_text) {
                r = -EINVAL;
                goto out_err;
        }
        size_t ctx_len = (size_t)r;
        for (int32_t id = 0; id < n_vocab; id++) {
                uint32_t len;
                r = token_bytes(tok, ctx, ctx_text, ctx_len, id, buf, &len);
                if (r < 0) {
                        if (reterr)
                                snprintf(reterr->msg, sizeof reterr->msg, "token trie: cannot decode token %d: %s", id,
                                         strerror(-r));
                        goto out_err;
                }
                if (!len)
                        continue;
                v->token_bytes[id] = malloc(len);
                if (!v->token_bytes[id]) {
                        r = -ENOMEM;
                        goto out_err;
                }
                memcpy(v->token_bytes[id], buf, len);
                v->token_len[id] = len;
        }
        r = build_trie(v);
        if (r < 0)
                goto out_err;
        free(buf);
        *ret_vocab = v;
        return 0;
out_err:
        if (r == -ENOMEM && reterr)
                snprintf(reterr->msg, sizeof reterr->msg, "token trie: out of memory");
        free(buf);
        dse_grammar_vocab_free(v);
        return r;
}

void dse_grammar_vocab_free(struct dse_grammar_vocab *vocab) {
        if (!vocab)
                return;
        if (vocab->token_bytes)
                for (int32_t id = 0; id < vocab->n_vocab; id++)
                        free(vocab->token_bytes[id]);
        free(vocab->token_bytes);
        free(vocab->token_len);
        free(vocab->next_token);
        free(vocab->nodes);
        free(vocab);
}

size_t dse_grammar_vocab_mask_words(const struct dse_grammar_vocab *vocab) {
        return vocab ? ((size_t)vocab->n_vocab + 63) / 64 : 0;
}

const uint8_t *dse_grammar_vocab_token_bytes(const struct dse_grammar_vocab *vocab, int32_t id, size_t *ret_len) {
        static const uint8_t none[1];
        if (!vocab || !ret_len || id < 0 || id >= vocab->n_vocab)
                return NULL;
        *ret_len = vocab->token_len[id];
        return vocab->token_bytes[id] ? vocab->token_bytes[id] : none;
}

static int set_eos(const struct dse_grammar_matcher *m, const struct dse_grammar_vocab *v, uint64_t *mask) {
        if (v->eos < 0 || !dse_grammar_matcher_is_accepting(m))
                return 0;
        mask[v->eos / 64] |= (uint64_t)1 << (v->eos % 64);
        return 1;
}

/* Checks a mask call's arguments and clears the mask: 1 to go on, 0 when the output has
 * ended (nothing is allowed), -EINVAL. */
static int mask_begin(const struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, uint64_t *mask) {
        if (!m || !vocab || !mask)
                return -EINVAL;
        memset(mask, 0, dse_grammar_vocab_mask_words(vocab) * sizeof *mask);
        return !m->ended;
}

/* The states one trie walk meets, interned by shape, with their byte transitions:
 * inside a JSON string nearly every node leads back to one of a few states, so a
 * node costs a table lookup and the matcher runs once per distinct transition. */
#define WALK_UNKNOWN (-1)
#define WALK_DEAD (-2)
enum { WALK_HAS_POPPED = 1, WALK_HAS_OTHER = 2 };

struct walk_states {
        uint32_t *words; /* the shapes, one after the other */
        uint32_t n_words, cap_words;
        uint32_t *start, *len; /* each state's shape in words */
        uint8_t *flags;
        uint32_t n, cap_start, cap_len, cap_flags;
        int32_t *next; /* [state * 256 + byte] */
        uint32_t cap_next;
        uint32_t *table; /* open addressing: state + 1, 0 empty */
        uint32_t table_size;
        uint32_t *scratch; /* a shape being made */
        uint32_t cap_scratch;
};

static void walk_states_done(struct walk_states *w) {
        free(w->words);
        free(w->start);
        free(w->len);
        free(w->flags);
        free(w->next);
        free(w->table);
        free(w->scratch);
}

static uint32_t shape_hash(const uint32_t *shape, uint32_t n) {
        uint32_t h = 2166136261u;
        for (uint32_t i = 0; i < n; i++)
                h = (h ^ shape[i]) * 16777619u;
        return h;
}

static int table_put(struct walk_states *w, uint32_t id) {
        uint32_t mask = w->table_size - 1;
        for (uint32_t k = shape_hash(w->words + w->start[id], w->len[id]) & mask;; k = (k + 1) & mask)
                if (!w->table[k]) {
                        w->table[k] = id + 1;
                        return 0;
                }
}

/* The id of the state of a shape, added (with flags) when new. */
static int walk_intern(struct walk_states *w, const uint32_t *shape, uint32_t n, uint8_t flags, int32_t *ret_id) {
        if (w->table_size) {
                uint32_t mask = w->table_size - 1;
                for (uint32_t k = shape_hash(shape, n) & mask; w->table[k]; k = (k + 1) & mask) {
                        uint32_t id = w->table[k] - 1;
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
        GRAMMAR_TRY(dse__grammar_grow((void **)&w->next, &w->cap_next, 256 * ((uint64_t)id + 1), sizeof *w->next));
        memcpy(w->words + w->n_words, shape, n * sizeof *shape);
        w->start[id] = w->n_words;
        w->len[id] = n;
        w->flags[id] = flags;
        for (int b = 0; b < 256; b++)
                w->next[256 * id + (uint32_t)b] = WALK_UNKNOWN;
        w->n_words += n;
        w->n++;
        if (2 * w->n > w->table_size) {
                uint32_t size = w->table_size ? 2 * w->table_size : 64;
                uint32_t *t = calloc(size, sizeof *t);
                if (!t)
                        return -ENOMEM;
                free(w->table);
                w->table = t;
                w->table_size = size;
                for (uint32_t i = 0; i < w->n; i++)
                        table_put(w, i);
        } else
                table_put(w, id);
        *ret_id = (int32_t)id;
        return 0;
}

/* The state that byte leads to from state id (WALK_DEAD: none), computed by the
 * matcher on the state rebuilt on the frame below. */
static int walk_step(struct dse_grammar_matcher *m, struct walk_states *w, int32_t id, uint8_t byte, uint32_t below,
                     int32_t *ret_id) {
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops, begin = m->n_tops, end, used, n = 0;
        int r = dse__grammar_state_load(m, w->words + w->start[id], below, &end, &used);
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

int dse__grammar_trie_walk(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab, const uint32_t *shape,
                           uint32_t below, uint64_t *allowed, uint32_t **popped, uint32_t *n_popped,
                           uint32_t *cap_popped) {
        /* walk[d]: the state after the first d bytes of the current node */
        int r = dse__grammar_grow((void **)&m->walk, &m->cap_walk, (uint64_t)vocab->max_depth + 1, sizeof *m->walk);
        if (r < 0)
                return r;
        struct walk_states w = {0};
        uint32_t shape_len = 1;
        for (uint32_t s = 0; s < shape[0]; s++)
                shape_len += shape[shape_len] < GRAMMAR_POPPED ? shape[shape_len] + 1 : 1;
        int32_t start;
        r = walk_intern(&w, shape, shape_len, WALK_HAS_OTHER, &start);
        uint32_t *walk = m->walk;
        walk[0] = (uint32_t)start;
        int count = 0;
        const struct grammar_trie_node *nodes = vocab->nodes;
        for (uint32_t i = 1; r == 0 && i < vocab->n_nodes;) {
                const struct grammar_trie_node *node = &nodes[i];
                uint32_t from = walk[node->depth - 1u];
                int32_t to = w.next[256 * from + node->byte];
                if (to == WALK_UNKNOWN) {
                        r = walk_step(m, &w, (int32_t)from, node->byte, below, &to);
                        if (r < 0)
                                break;
                        w.next[256 * from + node->byte] = to;
                }
                if (to == WALK_DEAD) {
                        i = node->end;
                        continue;
                }
                walk[node->depth] = (uint32_t)to;
                if (popped && (w.flags[to] & WALK_HAS_POPPED)) {
                        r = dse__grammar_grow((void **)popped, cap_popped, (uint64_t)*n_popped + 1, sizeof **popped);
                        if (r < 0)
                                break;
                        (*popped)[(*n_popped)++] = i;
                }
                if (w.flags[to] & WALK_HAS_OTHER)
                        for (int32_t id = node->first_token; id >= 0; id = vocab->next_token[id]) {
                                allowed[id / 64] |= (uint64_t)1 << (id % 64);
                                count++;
                        }
                i++;
        }
        walk_states_done(&w);
        return r < 0 ? r : count;
}

int dse_grammar_matcher_fill_mask(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                                  uint64_t *mask) {
        int go = mask_begin(m, vocab, mask);
        if (go <= 0)
                return go;
        int count = dse__grammar_mask_cached(m, vocab, mask);
        return count < 0 ? count : count + dse__grammar_mask_specials(m, vocab, mask) + set_eos(m, vocab, mask);
}

int dse__grammar_matcher_fill_mask_scan(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                                        uint64_t *mask) {
        int go = mask_begin(m, vocab, mask);
        if (go <= 0)
                return go;
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops;
        int count = 0;
        for (int32_t id = 0; id < vocab->n_vocab; id++) {
                if (id == vocab->eos || !vocab->token_len[id])
                        continue;
                uint32_t begin = m->cur_begin, end = m->cur_end;
                for (uint32_t k = 0; k < vocab->token_len[id] && begin < end; k++) {
                        uint32_t out = m->n_tops;
                        int64_t e = dse__grammar_matcher_step(m, begin, end, vocab->token_bytes[id][k]);
                        if (e < 0) {
                                m->n_frames = mark_frames;
                                m->n_tops = mark_tops;
                                return (int)e;
                        }
                        begin = out;
                        end = (uint32_t)e;
                }
                if (begin < end) {
                        mask[id / 64] |= (uint64_t)1 << (id % 64);
                        count++;
                }
                m->n_frames = mark_frames;
                m->n_tops = mark_tops;
        }
        return count + dse__grammar_mask_specials(m, vocab, mask) + set_eos(m, vocab, mask);
}

int dse_grammar_matcher_accept_token(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                                     int32_t id) {
        if (!m || !vocab || id < 0 || id >= vocab->n_vocab)
                return -EINVAL;
        if (id == vocab->eos) {
                if (!dse_grammar_matcher_is_accepting(m))
                        return -EINVAL;
                m->ended = 1;
                return 0;
        }
        int special = dse__grammar_accept_special(m, id);
        if (special <= 0)
                return special;
        if (!vocab->token_len[id])
                return -EINVAL;
        return dse_grammar_matcher_advance(m, vocab->token_bytes[id], vocab->token_len[id]);
}
