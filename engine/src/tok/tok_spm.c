/* SentencePiece .model tokenizers: BPE (merging by piece score, with byte fallback, as
 * Llama-2 uses it), Unigram (Viterbi over piece scores), and the simple WORD and CHAR
 * models, behind the ops table of tokenizer.h. Semantics follow google/sentencepiece
 * 0.1.97 (checked against its spm_encode/spm_decode by test-tokenizer-spm-train):
 *   encode = normalize (spm_norm.c) -> model (bpe_model.cc / unigram_model.cc
 *            EncodeOptimized / word_model.cc / char_model.cc) -> pieces (sentencepiece_processor.cc
 *            PopulateSentencePieceText: unknown pieces become <0xXX> bytes with byte
 *            fallback, else a run of them becomes one <unk>);
 *   decode = sentencepiece_processor.cc Decode: control pieces vanish, <unk> becomes
 *            unk_surface (" \u2047 "), byte pieces fuse into UTF-8 (U+FFFD per bad byte),
 *            U+2581 becomes a space and the first piece loses its leading one. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "../utf8.h"
#include "spm_model.h"
#include "tokenizer.h"

static const char SPACE_SYMBOL[] = "\xe2\x96\x81"; /* U+2581 */
/* Unigram: an unknown character costs this much below the worst piece
 * (unigram_model.h kUnkPenalty). */
static const float UNK_PENALTY = 10.0f;

struct spm_tok {
        char *model;            /* copy of the .model bytes; charsmaps point into it */
        struct spm_proto proto; /* pieces point into model */
        char *arena;            /* piece strings, each NUL-terminated */
        uint32_t *piece_off;    /* (n) offset of piece i in arena */
        uint32_t *piece_len;    /* (n) */
        float *score;           /* (n) */
        uint8_t *type;          /* (n) enum spm_piece_type */
        int32_t n;
        int model_type;
        bool byte_fallback;
        int32_t unk_id;
        int32_t byte_id[256];   /* id of <0xXX>, unk_id when the model lacks it */
        struct spm_trie normal;   /* NORMAL, USER_DEFINED, UNUSED pieces (model_interface pieces_) */
        struct spm_trie reserved; /* CONTROL, UNKNOWN, BYTE pieces (reserved_id_map_) */
        struct spm_trie user;     /* USER_DEFINED pieces: matched verbatim */
        bool has_user;
        struct spm_normalizer norm;
        struct spm_normalizer norm_bare; /* norm without the dummy prefix (dse__tok_spm_encode_bare) */
        struct spm_normalizer denorm;
        bool has_denorm;
        bool dec_strip_bos_ws;    /* add_dummy_prefix || remove_extra_whitespaces */
        bool dec_remove_extra_ws;
        float min_score, max_score; /* over NORMAL pieces, from FLT_MAX / FLT_MIN as unigram_model.cc */
        struct spm_str unk_surface;
};

static void spm_tok_free(void *impl) {
        struct spm_tok *s = impl;
        if (!s)
                return;
        dse__spm_trie_done(&s->normal);
        dse__spm_trie_done(&s->reserved);
        dse__spm_trie_done(&s->user);
        dse__spm_proto_done(&s->proto);
        free(s->arena);
        free(s->piece_off);
        free(s->piece_len);
        free(s->score);
        free(s->type);
        free(s->model);
        free(s);
}

static const char *piece_str(const struct spm_tok *s, int32_t id) {
        return s->arena + s->piece_off[id];
}

/* "<0xXX>" (upper-case hex, as ByteToPiece writes it) -> 0..255, else -1. */
static int piece_to_byte(const char *p, size_t len) {
        static const char hex[] = "0123456789ABCDEF";
        if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
                return -1;
        const char *hi = memchr(hex, p[3], 16), *lo = memchr(hex, p[4], 16);
        if (!hi || !lo)
                return -1;
        return (int)((hi - hex) * 16 + (lo - hex));
}

/* model_interface.cc PieceToId: reserved pieces first, then normal ones, else <unk>. */
static int32_t piece_to_id(const struct spm_tok *s, const char *p, size_t len) {
        int32_t id = dse__spm_trie_get(&s->reserved, p, len);
        if (id < 0)
                id = dse__spm_trie_get(&s->normal, p, len);
        return id < 0 ? s->unk_id : id;
}

/* ---- loading ------------------------------------------------------------------ */

/* Pieces sentencepiece loads but that cannot work as meant: one that is not UTF-8
 * never matches (the normalized text is UTF-8), a NaN score makes every comparison
 * with it false, and byte_fallback without a byte's <0xXX> piece encodes it as <unk>. */
static void warn_pieces(const struct spm_tok *s, int n_bad_utf8, int first_bad_utf8, int n_nan, int first_nan) {
        if (n_bad_utf8)
                dse__log(DSE_LOG_WARN, "SentencePiece model: %d pieces are not valid UTF-8 (the first: piece %d); no "
                         "text can match them", n_bad_utf8, first_bad_utf8);
        if (n_nan)
                dse__log(DSE_LOG_WARN, "SentencePiece model: %d pieces have a NaN score (the first: piece %d '%.*s'); "
                         "segmentation around them is arbitrary", n_nan, first_nan,
                         (int)(s->piece_len[first_nan] > 64 ? 64 : s->piece_len[first_nan]),
                         s->arena + s->piece_off[first_nan]);
        if (!s->byte_fallback)
                return;
        int n_missing = 0, first_missing = -1;
        for (int b = 255; b >= 0; b--)
                if (s->byte_id[b] == s->unk_id) {
                        n_missing++;
                        first_missing = b;
                }
        if (n_missing)
                dse__log(DSE_LOG_WARN, "SentencePiece model: byte_fallback is set but %d of the 256 <0xXX> pieces are "
                         "missing (the first: <0x%02X>); such bytes encode to <unk>", n_missing, first_missing);
}

static int build_vocab(struct spm_tok *s, struct dse_diag *reterr) {
        const struct spm_proto *m = &s->proto;
        size_t arena_len = 0;
        for (int32_t i = 0; i < m->n_pieces; i++)
                arena_len += m->pieces[i].piece.len + 1;
        if (arena_len > UINT32_MAX)
                return dse__fail(reterr, -EBADMSG, "pieces: %zu bytes of strings, too many", arena_len);
        s->n = m->n_pieces;
        s->arena = malloc(arena_len);
        s->piece_off = malloc((size_t)s->n * sizeof *s->piece_off);
        s->piece_len = malloc((size_t)s->n * sizeof *s->piece_len);
        s->score = malloc((size_t)s->n * sizeof *s->score);
        s->type = malloc((size_t)s->n * sizeof *s->type);
        if (!s->arena || !s->piece_off || !s->piece_len || !s->score || !s->type)
                return -ENOMEM;
        int ret;
        if ((ret = dse__spm_trie_init(&s->normal)) < 0 || (ret = dse__spm_trie_init(&s->reserved)) < 0 ||
            (ret = dse__spm_trie_init(&s->user)) < 0)
                return ret;

        int n_bad_utf8 = 0, n_nan = 0, first_bad_utf8 = -1, first_nan = -1;
        s->unk_id = -1;
        s->min_score = FLT_MAX;
        s->max_score = FLT_MIN;
        size_t off = 0;
        for (int32_t i = 0; i < s->n; i++) {
                const struct spm_proto_piece *p = &m->pieces[i];
                memcpy(s->arena + off, p->piece.ptr, p->piece.len);
                s->arena[off + p->piece.len] = '\0';
                s->piece_off[i] = (uint32_t)off;
                s->piece_len[i] = (uint32_t)p->piece.len;
                s->score[i] = p->score;
                s->type[i] = (uint8_t)p->type;
                off += p->piece.len + 1;

                bool normal = p->type == SPM_PIECE_NORMAL || p->type == SPM_PIECE_USER_DEFINED ||
                              p->type == SPM_PIECE_UNUSED;
                ret = dse__spm_trie_insert(normal ? &s->normal : &s->reserved, p->piece.ptr, p->piece.len, i);
                if (ret == -EEXIST)
                        return dse__fail(reterr, -EBADMSG, "piece %d '%.*s' is already defined", i,
                                         (int)(p->piece.len > 64 ? 64 : p->piece.len), p->piece.ptr);
                if (ret < 0)
                        return ret;
                if (p->type == SPM_PIECE_USER_DEFINED) {
                        if ((ret = dse__spm_trie_insert(&s->user, p->piece.ptr, p->piece.len, i)) < 0)
                                return ret;
                        s->has_user = true;
                }
                if (p->type == SPM_PIECE_UNKNOWN) {
                        if (s->unk_id >= 0)
                                return dse__fail(reterr, -EBADMSG, "pieces %d and %d are both UNKNOWN", s->unk_id,
                                                 i);
                        s->unk_id = i;
                }
                if (p->type == SPM_PIECE_BYTE && piece_to_byte(p->piece.ptr, p->piece.len) < 0)
                        return dse__fail(reterr, -EBADMSG, "piece %d: BYTE piece '%.*s' is not <0xXX>", i,
                                         (int)(p->piece.len > 64 ? 64 : p->piece.len), p->piece.ptr);
                if (!dse__utf8_valid(p->piece.ptr, p->piece.len) && !n_bad_utf8++)
                        first_bad_utf8 = i;
                if (isnan(p->score) && !n_nan++)
                        first_nan = i;
                if (p->type == SPM_PIECE_NORMAL) {
                        if (p->score < s->min_score)
                                s->min_score = p->score;
                        if (p->score > s->max_score)
                                s->max_score = p->score;
                }
        }
        if (s->unk_id < 0)
                return dse__fail(reterr, -EBADMSG, "no UNKNOWN (<unk>) piece");
        for (int b = 0; b < 256; b++) {
                char name[8];
                static const char hex[] = "0123456789ABCDEF";
                memcpy(name, "<0x", 3);
                name[3] = hex[b >> 4];
                name[4] = hex[b & 15];
                name[5] = '>';
                s->byte_id[b] = piece_to_id(s, name, 6);
        }
        warn_pieces(s, n_bad_utf8, first_bad_utf8, n_nan, first_nan);
        return 0;
}

static const struct dse_tokenizer_ops spm_ops;

int dse__tok_spm_init(struct dse_tokenizer *tok, const void *data, size_t len, struct dse_diag *reterr) {
        struct spm_tok *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        int ret;
        s->model = malloc(len ? len : 1);
        if (!s->model) {
                ret = -ENOMEM;
                goto fail;
        }
        if (len)
                memcpy(s->model, data, len);
        if ((ret = dse__spm_proto_parse(s->model, len, &s->proto, reterr)) < 0)
                goto fail;
        const struct spm_proto *m = &s->proto;
        if (m->model_type < SPM_MODEL_UNIGRAM || m->model_type > SPM_MODEL_CHAR) {
                ret = dse__fail(reterr, -EOPNOTSUPP,
                                "SentencePiece model_type %d is not supported (unigram, bpe, word and char are)",
                                m->model_type);
                goto fail;
        }
        s->model_type = m->model_type;
        s->byte_fallback = m->byte_fallback;
        if ((ret = build_vocab(s, reterr)) < 0)
                goto fail;
        if ((ret = dse__spm_normalizer_init(&s->norm, &m->normalizer, m->treat_whitespace_as_suffix,
                                            s->has_user ? &s->user : NULL, reterr)) < 0)
                goto fail;
        s->norm_bare = s->norm;
        s->norm_bare.add_dummy_prefix = false;
        /* sentencepiece_processor.cc: a denormalizer runs over decoded text only when its
         * spec carries rules. */
        if (m->denormalizer.present && m->denormalizer.precompiled_charsmap.len > 0) {
                if ((ret = dse__spm_normalizer_init(&s->denorm, &m->denormalizer, false, NULL, reterr)) < 0)
                        goto fail;
                s->has_denorm = true;
        }
        s->dec_strip_bos_ws = m->normalizer.add_dummy_prefix || m->normalizer.remove_extra_whitespaces;
        s->dec_remove_extra_ws = m->normalizer.remove_extra_whitespaces;
        s->unk_surface = m->unk_surface;

        tok->ops = &spm_ops;
        tok->impl = s;
        tok->n_vocab = s->n;
        tok->bos_id = m->bos_id >= 0 && m->bos_id < s->n ? m->bos_id : -1;
        tok->eos_id = m->eos_id >= 0 && m->eos_id < s->n ? m->eos_id : -1;
        return 0;
fail:
        spm_tok_free(s);
        return ret;
}

/* ---- encoding -------------------------------------------------------------------- */

/* One piece of the model's segmentation: normalized[start, start+len) -> id. */
struct seg {
        uint32_t start, len;
        int32_t id;
};

struct segs {
        struct seg *v;
        size_t n, cap;
};

static int segs_push(struct segs *a, uint32_t start, uint32_t len, int32_t id) {
        struct seg *v = dse__tok_reserve(a->v, &a->cap, a->n + 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        a->v = v;
        a->v[a->n++] = (struct seg){start, len, id};
        return 0;
}

/* -- BPE (bpe_model.cc) -- */

struct bpe_sym {
        int32_t prev, next; /* -1 at the ends */
        uint32_t start, len;
        bool freeze;        /* a user-defined symbol: never merged */
};

struct bpe_pair {
        int32_t left, right;
        float score;
        uint32_t size;
};

/* The agenda is a max-heap: higher score first, then the leftmost pair. */
static bool pair_before(const struct bpe_pair *a, const struct bpe_pair *b) {
        return a->score > b->score || (a->score == b->score && a->left < b->left);
}

struct bpe_heap {
        struct bpe_pair *v;
        size_t n, cap;
};

static int heap_push(struct bpe_heap *h, struct bpe_pair p) {
        struct bpe_pair *v = dse__tok_reserve(h->v, &h->cap, h->n + 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        h->v = v;
        size_t i = h->n++;
        while (i > 0) {
                size_t parent = (i - 1) / 2;
                if (!pair_before(&p, &h->v[parent]))
                        break;
                h->v[i] = h->v[parent];
                i = parent;
        }
        h->v[i] = p;
        return 0;
}

static struct bpe_pair heap_pop(struct bpe_heap *h) {
        struct bpe_pair top = h->v[0], last = h->v[--h->n];
        size_t i = 0;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= h->n)
                        break;
                if (c + 1 < h->n && pair_before(&h->v[c + 1], &h->v[c]))
                        c++;
                if (!pair_before(&h->v[c], &last))
                        break;
                h->v[i] = h->v[c];
                i = c;
        }
        if (h->n > 0)
                h->v[i] = last;
        return top;
}

/* rev_merge of bpe_model.cc: for an UNUSED piece formed by a merge, the length of its
 * left part (the last recorded split wins, as with the reference's map). */
struct rev_merge {
        struct {
                int32_t id;
                uint32_t left_len;
        } *v;
        size_t n, cap;
};

static int rev_merge_set(struct rev_merge *r, int32_t id, uint32_t left_len) {
        for (size_t i = 0; i < r->n; i++)
                if (r->v[i].id == id) {
                        r->v[i].left_len = left_len;
                        return 0;
                }
        void *v = dse__tok_reserve(r->v, &r->cap, r->n + 1, sizeof *r->v);
        if (!v)
                return -ENOMEM;
        r->v = v;
        r->v[r->n].id = id;
        r->v[r->n].left_len = left_len;
        r->n++;
        return 0;
}

struct bpe_state {
        const struct spm_tok *s;
        const char *text;
        struct bpe_sym *sym;
        struct bpe_heap heap;
        struct rev_merge rev;
};

static int bpe_maybe_add_pair(struct bpe_state *st, int32_t left, int32_t right) {
        if (left < 0 || right < 0 || st->sym[left].freeze || st->sym[right].freeze)
                return 0;
        uint32_t size = st->sym[left].len + st->sym[right].len;
        int32_t id = dse__spm_trie_get(&st->s->normal, st->text + st->sym[left].start, size);
        if (id < 0)
                return 0;
        int ret = heap_push(&st->heap, (struct bpe_pair){left, right, st->s->score[id], size});
        if (ret < 0)
                return ret;
        if (st->s->type[id] == SPM_PIECE_UNUSED)
                return rev_merge_set(&st->rev, id, st->sym[left].len);
        return 0;
}

/* An UNUSED piece is split back into the pieces it was merged from. */
static int bpe_resegment(const struct bpe_state *st, uint32_t start, uint32_t len, struct segs *out) {
        int32_t id = piece_to_id(st->s, st->text + start, len);
        if (st->s->type[id] == SPM_PIECE_UNUSED) {
                for (size_t i = 0; i < st->rev.n; i++) {
                        if (st->rev.v[i].id != id)
                                continue;
                        uint32_t l = st->rev.v[i].left_len;
                        int ret = bpe_resegment(st, start, l, out);
                        return ret < 0 ? ret : bpe_resegment(st, start + l, len - l, out);
                }
        }
        return segs_push(out, start, len, id);
}

static int encode_bpe(const struct spm_tok *s, const char *text, size_t len, struct segs *out) {
        struct bpe_state st = {.s = s, .text = text};
        int ret = 0;
        if (len == 0)
                return 0;
        st.sym = malloc(len * sizeof *st.sym);
        if (!st.sym)
                return -ENOMEM;
        /* Split into characters; a user-defined symbol is one frozen symbol. */
        int32_t n_sym = 0;
        for (size_t pos = 0; pos < len;) {
                size_t m = s->has_user ? dse__spm_trie_longest_prefix(&s->user, text + pos, len - pos) : 0;
                bool freeze = m > 0;
                if (!freeze) {
                        m = spm_one_char_len(text + pos);
                        if (m > len - pos)
                                m = len - pos;
                }
                st.sym[n_sym] = (struct bpe_sym){
                        .prev = n_sym - 1, .next = pos + m < len ? n_sym + 1 : -1,
                        .start = (uint32_t)pos, .len = (uint32_t)m, .freeze = freeze};
                n_sym++;
                pos += m;
        }
        for (int32_t i = 1; i < n_sym; i++)
                if ((ret = bpe_maybe_add_pair(&st, i - 1, i)) < 0)
                        goto out;
        while (st.heap.n > 0) {
                struct bpe_pair top = heap_pop(&st.heap);
                struct bpe_sym *l = &st.sym[top.left], *r = &st.sym[top.right];
                /* Stale: one side was merged away or grew since the pair was queued. */
                if (l->len == 0 || r->len == 0 || l->len + r->len != top.size)
                        continue;
                l->len += r->len;
                l->next = r->next;
                if (r->next >= 0)
                        st.sym[r->next].prev = top.left;
                r->len = 0;
                if ((ret = bpe_maybe_add_pair(&st, l->prev, top.left)) < 0 ||
                    (ret = bpe_maybe_add_pair(&st, top.left, l->next)) < 0)
                        goto out;
        }
        for (int32_t i = 0; i != -1; i = st.sym[i].next)
                if ((ret = bpe_resegment(&st, st.sym[i].start, st.sym[i].len, out)) < 0)
                        goto out;
out:
        free(st.sym);
        free(st.heap.v);
        free(st.rev.v);
        return ret;
}

/* -- Unigram (unigram_model.cc EncodeOptimized) -- */

struct best_path {
        int32_t id;
        int32_t starts_at; /* -1: not reached yet */
        float score;
};

static int encode_unigram(const struct spm_tok *s, const char *text, size_t len, struct segs *out) {
        if (len == 0)
                return 0;
        if (len >= INT32_MAX)
                return -E2BIG;
        struct best_path *best = malloc((len + 1) * sizeof *best);
        if (!best)
                return -ENOMEM;
        for (size_t i = 0; i <= len; i++)
                best[i] = (struct best_path){.id = -1, .starts_at = -1, .score = 0.0f};
        const float unk_score = s->min_score - UNK_PENALTY;

        for (size_t start = 0; start < len;) {
                const float till_here = best[start].score;
                size_t mblen = spm_one_char_len(text + start);
                if (mblen > len - start)
                        mblen = len - start;
                bool has_single_node = false;
                uint32_t node = 0;
                for (size_t pos = start; pos < len;) {
                        node = dse__spm_trie_step(&s->normal, node, (uint8_t)text[pos++]);
                        if (!node)
                                break;
                        int32_t id = s->normal.value[node];
                        if (id < 0 || s->type[id] == SPM_PIECE_UNUSED)
                                continue;
                        size_t length = pos - start;
                        /* The reference's `user ? length * max_score_ - 0.1 : score` is a
                         * double, so the candidate is a double sum compared against the
                         * stored float; the <unk> candidate below stays float. */
                        double score = s->type[id] == SPM_PIECE_USER_DEFINED ? (double)((float)length * s->max_score) - 0.1
                                                                             : (double)s->score[id];
                        double cand = score + (double)till_here;
                        struct best_path *t = &best[pos];
                        if (t->starts_at == -1 || cand > (double)t->score) {
                                t->score = (float)cand;
                                t->starts_at = (int32_t)start;
                                t->id = id;
                        }
                        if (length == mblen)
                                has_single_node = true;
                }
                if (!has_single_node) {
                        struct best_path *t = &best[start + mblen];
                        float cand = unk_score + till_here;
                        if (t->starts_at == -1 || cand > t->score) {
                                t->score = cand;
                                t->starts_at = (int32_t)start;
                                t->id = s->unk_id;
                        }
                }
                start += mblen;
        }

        /* Backtrack, then reverse into out. */
        size_t first = out->n;
        int ret = 0;
        for (size_t end = len; end > 0;) {
                const struct best_path *b = &best[end];
                if ((ret = segs_push(out, (uint32_t)b->starts_at, (uint32_t)(end - (size_t)b->starts_at), b->id)) < 0)
                        break;
                end = (size_t)b->starts_at;
        }
        for (size_t i = first, j = out->n; ret == 0 && i + 1 < j; i++, j--) {
                struct seg tmp = out->v[i];
                out->v[i] = out->v[j - 1];
                out->v[j - 1] = tmp;
        }
        free(best);
        return ret;
}

/* -- CHAR (char_model.cc): one piece per character, user-defined symbols whole -- */

static int encode_char(const struct spm_tok *s, const char *text, size_t len, struct segs *out) {
        for (size_t pos = 0; pos < len;) {
                size_t m = s->has_user ? dse__spm_trie_longest_prefix(&s->user, text + pos, len - pos) : 0;
                if (m == 0) {
                        m = spm_one_char_len(text + pos);
                        if (m > len - pos)
                                m = len - pos;
                }
                int ret = segs_push(out, (uint32_t)pos, (uint32_t)m, piece_to_id(s, text + pos, m));
                if (ret < 0)
                        return ret;
                pos += m;
        }
        return 0;
}

/* -- WORD (word_model.cc): whole words, each starting at U+2581. SentencePiece 0.1.97's
 * word model splits this way (SplitIntoWords with its defaults) whatever
 * treat_whitespace_as_suffix and allow_whitespace_only_pieces say. -- */
static int encode_word(const struct spm_tok *s, const char *text, size_t len, struct segs *out) {
        size_t word = 0;
        for (size_t pos = 0; pos < len;) {
                size_t m = spm_one_char_len(text + pos);
                if (m > len - pos)
                        m = len - pos;
                if (pos > word && m == 3 && memcmp(text + pos, SPACE_SYMBOL, 3) == 0) {
                        int ret = segs_push(out, (uint32_t)word, (uint32_t)(pos - word),
                                            piece_to_id(s, text + word, pos - word));
                        if (ret < 0)
                                return ret;
                        word = pos;
                }
                pos += m;
        }
        if (len > word)
                return segs_push(out, (uint32_t)word, (uint32_t)(len - word), piece_to_id(s, text + word, len - word));
        return 0;
}

static void emit(int32_t *ids, size_t max_ids, size_t *count, int32_t id) {
        if (*count < max_ids)
                ids[*count] = id;
        (*count)++;
}

static int encode_with(const struct dse_tokenizer *tok, const struct spm_normalizer *normalizer, const char *text,
                       size_t len, int add_special, int32_t *ids, size_t max_ids) {
        const struct spm_tok *s = tok->impl;
        if (!dse__utf8_valid(text, len))
                return -EILSEQ;
        struct tok_buf norm = {0};
        struct segs segs = {0};
        int ret = dse__spm_normalize(normalizer, text, len, &norm);
        if (ret < 0)
                goto out;
        if (norm.len >= INT32_MAX) {
                ret = -E2BIG;
                goto out;
        }
        switch (s->model_type) {
        case SPM_MODEL_BPE: ret = encode_bpe(s, norm.p, norm.len, &segs); break;
        case SPM_MODEL_WORD: ret = encode_word(s, norm.p, norm.len, &segs); break;
        case SPM_MODEL_CHAR: ret = encode_char(s, norm.p, norm.len, &segs); break;
        default: ret = encode_unigram(s, norm.p, norm.len, &segs); break;
        }
        if (ret < 0)
                goto out;

        size_t count = 0;
        if (add_special && tok->bos_id >= 0)
                emit(ids, max_ids, &count, tok->bos_id);
        bool prev_unk = false;
        for (size_t i = 0; i < segs.n; i++) {
                const struct seg *g = &segs.v[i];
                bool is_unk = s->type[g->id] == SPM_PIECE_UNKNOWN;
                if (is_unk && s->byte_fallback) {
                        for (uint32_t k = 0; k < g->len; k++)
                                emit(ids, max_ids, &count, s->byte_id[(uint8_t)norm.p[g->start + k]]);
                } else if (!(is_unk && prev_unk)) {
                        emit(ids, max_ids, &count, g->id); /* a run of unknowns is one <unk> */
                }
                prev_unk = is_unk;
        }
        ret = count > INT_MAX ? -E2BIG : (int)count;
out:
        free(norm.p);
        free(segs.v);
        return ret;
}

static int spm_encode(const struct dse_tokenizer *tok, const char *text, size_t len, int add_special, int32_t *ids,
                      size_t max_ids) {
        const struct spm_tok *s = tok->impl;
        return encode_with(tok, &s->norm, text, len, add_special, ids, max_ids);
}

int dse__tok_spm_encode_bare(const struct dse_tokenizer *tok, const char *text, size_t len, int32_t *ids,
                             size_t max_ids) {
        const struct spm_tok *s = tok->impl;
        return encode_with(tok, &s->norm_bare, text, len, 0, ids, max_ids);
}

/* ---- decoding -------------------------------------------------------------------- */

/* Byte pieces fuse into UTF-8; each byte that starts no valid character is U+FFFD. */
static int flush_bytes(struct tok_buf *bytes, struct tok_buf *text) {
        int ret = 0;
        for (size_t off = 0; off < bytes->len && ret == 0;) {
                uint32_t cp;
                int c = dse__utf8_decode(bytes->p + off, bytes->len - off, &cp);
                if (c < 0) {
                        ret = dse__tok_buf_put(text, "\xef\xbf\xbd", 3);
                        off++;
                } else {
                        ret = dse__tok_buf_put(text, bytes->p + off, (size_t)c);
                        off += (size_t)c;
                }
        }
        bytes->len = 0;
        return ret;
}

/* Appends piece with U+2581 turned into spaces. */
static int append_unescaped(struct tok_buf *text, const char *p, size_t len) {
        size_t run = 0;
        int ret = 0;
        for (size_t i = 0; i < len && ret == 0;) {
                if (len - i >= 3 && memcmp(p + i, SPACE_SYMBOL, 3) == 0) {
                        if ((ret = dse__tok_buf_put(text, p + run, i - run)) == 0)
                                ret = dse__tok_buf_put(text, " ", 1);
                        i += 3;
                        run = i;
                } else {
                        i++;
                }
        }
        return ret < 0 ? ret : dse__tok_buf_put(text, p + run, len - run);
}

static int spm_decode(const struct dse_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out, size_t max_len) {
        const struct spm_tok *s = tok->impl;
        struct tok_buf text = {0}, bytes = {0}, denorm = {0};
        bool is_bos_ws = true;   /* a leading U+2581 may still be consumed */
        bool bos_ws_seen = false; /* the previous piece consumed it */
        int ret = 0;
        for (size_t i = 0; i < n_ids && ret == 0; i++) {
                int32_t id = ids[i];
                int type = s->type[id];
                if (type == SPM_PIECE_BYTE) {
                        uint8_t b = (uint8_t)piece_to_byte(piece_str(s, id), s->piece_len[id]);
                        ret = dse__tok_buf_put(&bytes, &b, 1);
                        continue;
                }
                if ((ret = flush_bytes(&bytes, &text)) < 0)
                        break;
                if (bos_ws_seen || text.len > 0)
                        is_bos_ws = false;
                bos_ws_seen = false;
                if (type == SPM_PIECE_CONTROL)
                        continue;
                if (type == SPM_PIECE_UNKNOWN) {
                        ret = dse__tok_buf_put(&text, s->unk_surface.ptr, s->unk_surface.len);
                        continue;
                }
                const char *p = piece_str(s, id);
                size_t len = s->piece_len[id];
                if (is_bos_ws && s->dec_strip_bos_ws && len >= 3 && memcmp(p, SPACE_SYMBOL, 3) == 0) {
                        p += 3;
                        len -= 3;
                        /* With remove_extra_whitespaces every leading space goes. */
                        bos_ws_seen = !s->dec_remove_extra_ws;
                }
                ret = append_unescaped(&text, p, len);
        }
        if (ret == 0)
                ret = flush_bytes(&bytes, &text);
        const struct tok_buf *result = &text;
        if (ret == 0 && s->has_denorm) {
                ret = dse__spm_normalize(&s->denorm, text.p, text.len, &denorm);
                result = &denorm;
        }
        if (ret == 0) {
                if (result->len > INT_MAX) {
                        ret = -E2BIG;
                } else {
                        if (max_len && result->len)
                                memcpy(out, result->p, result->len < max_len ? result->len : max_len);
                        ret = (int)result->len;
                }
        }
        free(text.p);
        free(bytes.p);
        free(denorm.p);
        return ret;
}

static const char *spm_piece(const struct dse_tokenizer *tok, int32_t id) {
        const struct spm_tok *s = tok->impl;
        return piece_str(s, id);
}

static const struct dse_tokenizer_ops spm_ops = {
        .encode = spm_encode,
        .decode = spm_decode,
        .piece = spm_piece,
        .free_impl = spm_tok_free,
};
