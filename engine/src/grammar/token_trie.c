/* The token tries of a vocabulary (the walk is trie_walk.c), the mask entry point and
 * its per-token reference twin.
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

/* Appends the trie of the tokens of part (sorted) to v->nodes, its root first. */
static void build_part(struct dse_grammar_vocab *v, const struct sorted_token *s, uint32_t n, const uint8_t *part_of,
                      uint8_t part) {
        /* path[d]: the node at depth d on the path to the previous token */
        uint32_t path[TOKEN_MAX_BYTES + 1];
        uint32_t depth = 0, root = v->n_nodes, n_nodes = v->n_nodes + 1;
        v->part_root[part] = root;
        v->nodes[root] = (struct grammar_trie_node){.end = 0, .first_token = -1, .depth = 0, .byte = 0};
        path[0] = root;
        const struct sorted_token *prev = NULL;
        int32_t *last_same = NULL;
        for (uint32_t i = 0; i < n; i++) {
                const struct sorted_token *t = &s[i];
                if (part_of[t->id] != part)
                        continue;
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
        v->nodes[root].end = n_nodes;
        v->n_nodes = n_nodes;
}

/* The tries of the parts of the vocabulary (grammar.h), and the plain parts' bitsets. */
static int build_trie(struct dse_grammar_vocab *v) {
        size_t words = dse_grammar_vocab_mask_words(v);
        struct sorted_token *s = malloc(((size_t)v->n_vocab + 1) * sizeof *s);
        uint8_t *part_of = calloc((size_t)v->n_vocab + 1, 1);
        v->plain_upto = calloc(GRAMMAR_PLAIN_MAX * words, sizeof *v->plain_upto);
        size_t total = GRAMMAR_PLAIN_MAX + 1;
        uint32_t n = 0;
        if (!s || !part_of || !v->plain_upto) {
                free(s);
                free(part_of);
                return -ENOMEM;
        }
        for (int32_t id = 0; id < v->n_vocab; id++) {
                if (!v->token_len[id] || id == v->eos)
                        continue;
                s[n++] = (struct sorted_token){v->token_bytes[id], v->token_len[id], id};
                total += v->token_len[id];
                uint32_t chars = dse__grammar_plain_chars(v->token_bytes[id], v->token_len[id]);
                part_of[id] = (uint8_t)(chars <= GRAMMAR_PLAIN_MAX ? chars : 0);
                for (uint32_t c = part_of[id]; c && c <= GRAMMAR_PLAIN_MAX; c++) {
                        v->plain_upto[(c - 1) * words + (size_t)id / 64] |= (uint64_t)1 << (id % 64);
                        v->plain_upto_count[c - 1]++;
                }
        }
        qsort(s, n, sizeof *s, cmp_sorted);
        v->nodes = malloc(total * sizeof *v->nodes);
        if (!v->nodes) {
                free(s);
                free(part_of);
                return -ENOMEM;
        }
        v->n_nodes = 0;
        for (uint8_t part = 0; part <= GRAMMAR_PLAIN_MAX; part++)
                build_part(v, s, n, part_of, part);
        free(s);
        free(part_of);
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
        free(vocab->plain_upto);
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
