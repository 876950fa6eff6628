/* Hugging Face tokenizer.json tokenizers (BPE models): loading and the encode/decode
 * driver. The pipeline follows tokenizers' TokenizerImpl::encode_single_sequence:
 *   1. added tokens with normalized=false are cut out of the raw text (leftmost-longest);
 *   2. every other segment is normalized, and normalized=true added tokens are cut out
 *      of the normalized text;
 *   3. the remaining pieces are pre-tokenized and each pre-token goes through the BPE
 *      model;
 *   4. with add_special, the post-processor's (or tokenizer_config.json's) BOS/EOS ids
 *      are added around the sequence.
 * See bpe_impl.h for the file map. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "bpe_impl.h"
#include "tokenizer.h"

#define BPE_MAX_ID (1 << 24)

/* ---- loading helpers ----------------------------------------------------------------- */

struct loader {
        struct bpe *bpe;
        const struct bj_doc *doc;
        struct dse_diag *reterr;
};

static int get_id(const struct bj *v, int32_t *ret) {
        /* in range first, so the cast is defined; an integer cast back is floor() without
         * the libm call (128k ids) */
        double num = v && v->type == BJ_NUMBER ? dse__bj_num(v) : -1;
        if (!(num >= 0) || num >= BPE_MAX_ID || (double)(int32_t)num != num)
                return -EBADMSG;
        *ret = (int32_t)num;
        return 0;
}

static char *dup_mem(const char *s, size_t n) {
        char *d = malloc(n + 1);
        if (d) {
                memcpy(d, s, n);
                d[n] = '\0';
        }
        return d;
}

static int strs_add(struct bpe *bpe, const char *s, size_t n, uint32_t *ret_off) {
        if (bpe->strs_len + n + 1 > bpe->strs_cap || bpe->strs_len + n + 1 > UINT32_MAX)
                return -ENOMEM; /* sized up front; cannot happen */
        memcpy(bpe->strs + bpe->strs_len, s, n);
        bpe->strs[bpe->strs_len + n] = '\0';
        *ret_off = (uint32_t)bpe->strs_len;
        bpe->strs_len += n + 1;
        return 0;
}

static uint32_t pow2_at_least(uint64_t n) {
        uint32_t p = 16;
        while (p < n)
                p *= 2;
        return p;
}

/* A "type" member, required to be a string. */
static const char *type_of(struct loader *L, const struct bj *v, const char *what, int *ret) {
        const char *t = dse__bj_get_str(L->doc, v, "type");
        *ret = t ? 0 : dse__fail(L->reterr, -EBADMSG, "tokenizer.json: %s without a \"type\"", what);
        return t;
}

/* {"String": s} or {"Regex": r} (Split, Replace). Literal strings are kept for memmem
 * when lit != NULL; otherwise both forms compile into re. */
static int parse_pattern(struct loader *L, const struct bj *pat, struct bpe_regex *re, char **lit, size_t *lit_len) {
        const struct bj *s = dse__bj_get(L->doc, pat, "String"), *rx = dse__bj_get(L->doc, pat, "Regex");
        if (s && s->type == BJ_STRING) {
                if (lit) {
                        if (!s->n)
                                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: empty String pattern");
                        if (!(*lit = dup_mem(s->str, s->n)))
                                return -ENOMEM;
                        *lit_len = s->n;
                        return 0;
                }
                return dse__bpe_regex_compile_literal(re, s->str, s->n, L->reterr);
        }
        if (rx && rx->type == BJ_STRING)
                return dse__bpe_regex_compile(re, rx->str, rx->n, L->reterr);
        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

static int get_string_member(struct loader *L, const struct bj *v, const char *key, const char *what,
                             const struct bj **ret) {
        const struct bj *m = dse__bj_get(L->doc, v, key);
        if (!m || m->type != BJ_STRING)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: %s needs a string \"%s\"", what, key);
        *ret = m;
        return 0;
}

static int single_char(struct loader *L, const struct bj *s, const char *what, int32_t *ret_cp) {
        int32_t cp;
        if (!s->n || (size_t)dse__utf8_next(s->str, s->n, &cp) != s->n)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: %s must be one character", what);
        *ret_cp = cp;
        return 0;
}

static int parse_prepend_scheme(struct loader *L, const struct bj *v, enum bpe_prepend_scheme *ret) {
        const char *scheme = dse__bj_get_str(L->doc, v, "prepend_scheme");
        if (!scheme) { /* older files: add_prefix_space */
                *ret = dse__bj_get_bool(L->doc, v, "add_prefix_space", 1) ? BPE_PREPEND_ALWAYS : BPE_PREPEND_NEVER;
                return 0;
        }
        if (strcmp(scheme, "always") == 0)
                *ret = BPE_PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
                *ret = BPE_PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0)
                *ret = BPE_PREPEND_NEVER;
        else
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: unknown prepend_scheme '%s'", scheme);
        return 0;
}

/* items (n elements of size bytes) with a zeroed element appended at index n: the block
 * that replaces items, or NULL when out of memory (items then unchanged). The pipeline's
 * stages are a handful each, so the arrays grow one at a time. */
static void *append_zeroed(void *items, int n, size_t size) {
        char *p = realloc(items, (size_t)(n + 1) * size);
        if (p)
                memset(p + (size_t)n * size, 0, size);
        return p;
}

/* ---- normalizers --------------------------------------------------------------------- */

static int add_norm(struct loader *L, struct bpe_norm **ret) {
        struct bpe *bpe = L->bpe;
        struct bpe_norm *n = append_zeroed(bpe->norms, bpe->n_norms, sizeof *n);
        if (!n)
                return -ENOMEM;
        bpe->norms = n;
        *ret = &n[bpe->n_norms++];
        return 0;
}

static int parse_normalizer(struct loader *L, const struct bj *v, int depth) {
        if (!v || v->type == BJ_NULL)
                return 0;
        if (v->type != BJ_OBJECT || depth > 8)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: bad normalizer");
        int r;
        const char *t = type_of(L, v, "normalizer", &r);
        if (!t)
                return r;
        if (strcmp(t, "Sequence") == 0) {
                const struct bj *list = dse__bj_get(L->doc, v, "normalizers");
                if (!list || list->type != BJ_ARRAY)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: Sequence normalizer without a list");
                for (uint32_t i = 0; i < list->n; i++)
                        if ((r = parse_normalizer(L, dse__bj_at(L->doc, list, i), depth + 1)) < 0)
                                return r;
                return 0;
        }
        static const struct {
                const char *name;
                enum bpe_norm_type type;
        } simple[] = {
                {"NFC", BPE_NORM_NFC},           {"NFD", BPE_NORM_NFD},
                {"NFKC", BPE_NORM_NFKC},         {"NFKD", BPE_NORM_NFKD},
                {"Lowercase", BPE_NORM_LOWERCASE}, {"StripAccents", BPE_NORM_STRIP_ACCENTS},
        };
        struct bpe_norm *n;
        for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
                if (strcmp(t, simple[i].name) == 0) {
                        if ((r = add_norm(L, &n)) < 0)
                                return r;
                        n->type = simple[i].type;
                        return 0;
                }
        if (strcmp(t, "Prepend") == 0) {
                const struct bj *p = NULL;
                if ((r = get_string_member(L, v, "prepend", "Prepend", &p)) < 0 || (r = add_norm(L, &n)) < 0)
                        return r;
                n->type = BPE_NORM_PREPEND;
                if (!(n->a = dup_mem(p->str, p->n)))
                        return -ENOMEM;
                n->a_len = p->n;
                return 0;
        }
        if (strcmp(t, "Replace") == 0) {
                const struct bj *c = NULL;
                if ((r = get_string_member(L, v, "content", "Replace", &c)) < 0 || (r = add_norm(L, &n)) < 0)
                        return r;
                n->type = BPE_NORM_REPLACE;
                if (!(n->b = dup_mem(c->str, c->n)))
                        return -ENOMEM;
                n->b_len = c->n;
                return parse_pattern(L, dse__bj_get(L->doc, v, "pattern"), &n->re, &n->a, &n->a_len);
        }
        if (strcmp(t, "Strip") == 0) {
                if ((r = add_norm(L, &n)) < 0)
                        return r;
                n->type = BPE_NORM_STRIP;
                n->left = dse__bj_get_bool(L->doc, v, "strip_left", 0);
                n->right = dse__bj_get_bool(L->doc, v, "strip_right", 0);
                return 0;
        }
        return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: normalizer type '%s' is not supported", t);
}

/* ---- pre-tokenizers ------------------------------------------------------------------ */

/* tokenizers' GPT-2 split regex (pre_tokenizers/byte_level.rs) */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pretok(struct loader *L, struct bpe_pretok **ret) {
        struct bpe *bpe = L->bpe;
        if (bpe->n_pretoks >= BPE_MAX_LEVELS)
                return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: more than %d pre-tokenizers",
                                 BPE_MAX_LEVELS);
        struct bpe_pretok *p = append_zeroed(bpe->pretoks, bpe->n_pretoks, sizeof *p);
        if (!p)
                return -ENOMEM;
        bpe->pretoks = p;
        *ret = &p[bpe->n_pretoks++];
        return 0;
}

static int parse_behavior(struct loader *L, const char *b, enum bpe_split_behavior *ret) {
        static const struct {
                const char *name;
                enum bpe_split_behavior b;
        } names[] = {
                {"Removed", BPE_SPLIT_REMOVED},
                {"Isolated", BPE_SPLIT_ISOLATED},
                {"MergedWithPrevious", BPE_SPLIT_MERGED_WITH_PREVIOUS},
                {"MergedWithNext", BPE_SPLIT_MERGED_WITH_NEXT},
                {"Contiguous", BPE_SPLIT_CONTIGUOUS},
        };
        for (size_t i = 0; b && i < sizeof names / sizeof names[0]; i++)
                if (strcmp(b, names[i].name) == 0) {
                        *ret = names[i].b;
                        return 0;
                }
        return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: split behavior '%s' is not supported",
                         b ? b : "(missing)");
}

static int builtin_split(struct loader *L, const char *pattern, enum bpe_split_behavior b, int invert) {
        struct bpe_pretok *p = NULL;
        int r = add_pretok(L, &p);
        if (r < 0)
                return r;
        p->type = BPE_PRETOK_SPLIT;
        p->behavior = b;
        p->invert = invert;
        return dse__bpe_regex_compile(&p->re, pattern, strlen(pattern), L->reterr);
}

static int parse_pretokenizer(struct loader *L, const struct bj *v, int depth) {
        if (!v || v->type == BJ_NULL)
                return 0;
        if (v->type != BJ_OBJECT || depth > 8)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: bad pre_tokenizer");
        int r;
        const char *t = type_of(L, v, "pre_tokenizer", &r);
        if (!t)
                return r;
        struct bpe_pretok *p = NULL;
        if (strcmp(t, "Sequence") == 0) {
                const struct bj *list = dse__bj_get(L->doc, v, "pretokenizers");
                if (!list || list->type != BJ_ARRAY)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: Sequence pre_tokenizer without a list");
                for (uint32_t i = 0; i < list->n; i++)
                        if ((r = parse_pretokenizer(L, dse__bj_at(L->doc, list, i), depth + 1)) < 0)
                                return r;
                return 0;
        }
        if (strcmp(t, "Split") == 0) {
                if ((r = add_pretok(L, &p)) < 0)
                        return r;
                p->type = BPE_PRETOK_SPLIT;
                p->invert = dse__bj_get_bool(L->doc, v, "invert", 0);
                if ((r = parse_behavior(L, dse__bj_get_str(L->doc, v, "behavior"), &p->behavior)) < 0)
                        return r;
                return parse_pattern(L, dse__bj_get(L->doc, v, "pattern"), &p->re, NULL, NULL);
        }
        if (strcmp(t, "ByteLevel") == 0) {
                if ((r = add_pretok(L, &p)) < 0)
                        return r;
                p->type = BPE_PRETOK_BYTELEVEL;
                p->add_prefix_space = dse__bj_get_bool(L->doc, v, "add_prefix_space", 1);
                p->use_regex = dse__bj_get_bool(L->doc, v, "use_regex", 1);
                if (p->use_regex)
                        return dse__bpe_regex_compile(&p->re, GPT2_PATTERN, strlen(GPT2_PATTERN), L->reterr);
                return 0;
        }
        if (strcmp(t, "Metaspace") == 0) {
                const struct bj *rep = NULL;
                if ((r = get_string_member(L, v, "replacement", "Metaspace", &rep)) < 0 || (r = add_pretok(L, &p)) < 0)
                        return r;
                p->type = BPE_PRETOK_METASPACE;
                if ((r = single_char(L, rep, "Metaspace replacement", &p->replacement_cp)) < 0)
                        return r;
                memcpy(p->replacement, rep->str, rep->n);
                p->replacement_len = (int)rep->n;
                p->split = dse__bj_get_bool(L->doc, v, "split", 1);
                return parse_prepend_scheme(L, v, &p->prepend_scheme);
        }
        if (strcmp(t, "Whitespace") == 0) /* pre_tokenizers/whitespace.rs */
                return builtin_split(L, "\\w+|[^\\w\\s]+", BPE_SPLIT_REMOVED, 1);
        if (strcmp(t, "WhitespaceSplit") == 0)
                return builtin_split(L, "\\s+", BPE_SPLIT_REMOVED, 0);
        if (strcmp(t, "Digits") == 0)
                return builtin_split(L, "\\p{N}",
                                     dse__bj_get_bool(L->doc, v, "individual_digits", 0) ? BPE_SPLIT_ISOLATED
                                                                                    : BPE_SPLIT_CONTIGUOUS,
                                     0);
        return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: pre-tokenizer type '%s' is not supported", t);
}

/* ---- decoders ------------------------------------------------------------------------ */

static int add_dec(struct loader *L, struct bpe_dec **ret) {
        struct bpe *bpe = L->bpe;
        struct bpe_dec *d = append_zeroed(bpe->decs, bpe->n_decs, sizeof *d);
        if (!d)
                return -ENOMEM;
        bpe->decs = d;
        *ret = &d[bpe->n_decs++];
        return 0;
}

static int parse_decoder(struct loader *L, const struct bj *v, int depth) {
        if (!v || v->type == BJ_NULL)
                return 0;
        if (v->type != BJ_OBJECT || depth > 8)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: bad decoder");
        L->bpe->has_decoder = 1;
        int r;
        const char *t = type_of(L, v, "decoder", &r);
        if (!t)
                return r;
        struct bpe_dec *d;
        if (strcmp(t, "Sequence") == 0) {
                const struct bj *list = dse__bj_get(L->doc, v, "decoders");
                if (!list || list->type != BJ_ARRAY)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: Sequence decoder without a list");
                for (uint32_t i = 0; i < list->n; i++)
                        if ((r = parse_decoder(L, dse__bj_at(L->doc, list, i), depth + 1)) < 0)
                                return r;
                return 0;
        }
        if (strcmp(t, "ByteLevel") == 0 || strcmp(t, "ByteFallback") == 0 || strcmp(t, "Fuse") == 0) {
                if ((r = add_dec(L, &d)) < 0)
                        return r;
                d->type = t[0] == 'F' ? BPE_DEC_FUSE : t[4] == 'L' ? BPE_DEC_BYTELEVEL : BPE_DEC_BYTE_FALLBACK;
                return 0;
        }
        if (strcmp(t, "Replace") == 0) {
                const struct bj *c = NULL;
                if ((r = get_string_member(L, v, "content", "Replace decoder", &c)) < 0 || (r = add_dec(L, &d)) < 0)
                        return r;
                d->type = BPE_DEC_REPLACE;
                if (!(d->b = dup_mem(c->str, c->n)))
                        return -ENOMEM;
                d->b_len = c->n;
                return parse_pattern(L, dse__bj_get(L->doc, v, "pattern"), &d->re, &d->a, &d->a_len);
        }
        if (strcmp(t, "Strip") == 0) {
                const struct bj *c = NULL;
                if ((r = get_string_member(L, v, "content", "Strip decoder", &c)) < 0 || (r = add_dec(L, &d)) < 0)
                        return r;
                d->type = BPE_DEC_STRIP;
                const struct bj *start = dse__bj_get(L->doc, v, "start"), *stop = dse__bj_get(L->doc, v, "stop");
                int32_t a = 0, b = 0;
                if ((start && get_id(start, &a) < 0) || (stop && get_id(stop, &b) < 0))
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: bad Strip decoder start/stop");
                d->start = a;
                d->stop = b;
                return single_char(L, c, "Strip decoder content", &d->strip_cp);
        }
        if (strcmp(t, "Metaspace") == 0) {
                const struct bj *rep = NULL;
                if ((r = get_string_member(L, v, "replacement", "Metaspace decoder", &rep)) < 0 ||
                    (r = add_dec(L, &d)) < 0)
                        return r;
                d->type = BPE_DEC_METASPACE;
                if ((r = single_char(L, rep, "Metaspace replacement", &d->replacement_cp)) < 0)
                        return r;
                return parse_prepend_scheme(L, v, &d->prepend_scheme);
        }
        return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: decoder type '%s' is not supported", t);
}

/* ---- vocabulary, merges, added tokens -------------------------------------------------- */

static int token_id(const struct bpe *bpe, const char *s, size_t len) {
        for (int i = bpe->n_added - 1; i >= 0; i--)
                if (bpe->added[i].len == len && memcmp(bpe->added[i].content, s, len) == 0)
                        return bpe->added[i].id;
        return dse__bpe_vocab_find(bpe, s, len);
}

/* The model vocabulary (strings for the added tokens are reserved too; parse_added
 * stores them after the merges, whose id prediction reads the model's own pieces).
 * *ret_repeated: the vocabulary names a key more than once. */
static int parse_vocab(struct loader *L, const struct bj *model, const struct bj *added, int *ret_repeated) {
        struct bpe *bpe = L->bpe;
        const struct bj *vocab = dse__bj_get(L->doc, model, "vocab");
        if (!vocab || vocab->type != BJ_OBJECT)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: model.vocab must be an object");
        int32_t max_id = -1;
        size_t bytes = 1;
        /* The JSON reader decodes the keys one after another, each NUL-terminated: exactly
         * the layout of bpe->strs, so they are usually copied in one piece. */
        int contiguous = 1;
        const char *next_key = NULL;
        for (uint32_t i = 0; i < vocab->n; i++) {
                const struct bj *e = dse__bj_at(L->doc, vocab, i);
                int32_t id;
                if (get_id(e, &id) < 0)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: vocab entry '%.100s' has a bad id",
                                         e->key);
                max_id = id > max_id ? id : max_id;
                bytes += e->key_len + 1;
                contiguous &= i == 0 || e->key == next_key;
                next_key = e->key + e->key_len + 1;
        }
        for (uint32_t i = 0; added && i < added->n; i++) {
                const struct bj *a = dse__bj_at(L->doc, added, i);
                int32_t id;
                const struct bj *c = dse__bj_get(L->doc, a, "content");
                if (get_id(dse__bj_get(L->doc, a, "id"), &id) < 0 || !c || c->type != BJ_STRING)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: added_tokens[%u] needs an id and a content",
                                         i);
                max_id = id > max_id ? id : max_id;
                bytes += c->n + 1;
        }
        if (vocab->n == 0)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: model.vocab has no entries");
        if (max_id < 0)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: empty vocabulary");
        if (bytes > UINT32_MAX)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: vocabulary too large");
        bpe->n_vocab = max_id + 1;
        bpe->strs_cap = bytes;
        bpe->vocab_mask = pow2_at_least((uint64_t)vocab->n * 2 + 1) - 1;
        if (!(bpe->strs = malloc(bytes)) || !(bpe->piece_off = malloc((size_t)bpe->n_vocab * sizeof(uint32_t))) ||
            !(bpe->piece_len = calloc((size_t)bpe->n_vocab, sizeof(uint32_t))) ||
            !(bpe->vocab = dse__bpe_map(((size_t)bpe->vocab_mask + 1) * sizeof *bpe->vocab)))
                return -ENOMEM;
        memset(bpe->piece_off, 0xFF, (size_t)bpe->n_vocab * sizeof(uint32_t));
        uint32_t *offs = malloc(((size_t)vocab->n + 1) * sizeof *offs);
        uint32_t *lens = malloc(((size_t)vocab->n + 1) * sizeof *lens);
        int32_t *ids = malloc(((size_t)vocab->n + 1) * sizeof *ids);
        int r = offs && lens && ids ? 0 : -ENOMEM;
        const char *first_key = vocab->n ? dse__bj_at(L->doc, vocab, 0)->key : NULL;
        uint32_t base = (uint32_t)bpe->strs_len;
        if (r == 0 && contiguous && vocab->n) {
                size_t n = (size_t)(next_key - first_key);
                memcpy(bpe->strs + bpe->strs_len, first_key, n);
                bpe->strs_len += n;
        }
        size_t n_shared = 0;
        int32_t shared_id = -1;
        const char *shared_key = NULL;
        for (uint32_t i = 0; i < vocab->n && r == 0; i++) {
                const struct bj *e = dse__bj_at(L->doc, vocab, i);
                int32_t id = (int32_t)dse__bj_num(e);
                if (contiguous)
                        offs[i] = base + (uint32_t)(e->key - first_key);
                else
                        r = strs_add(bpe, e->key, e->key_len, &offs[i]);
                lens[i] = e->key_len;
                ids[i] = id;
                if (bpe->piece_off[id] != UINT32_MAX && !n_shared++) {
                        shared_id = id;
                        shared_key = e->key;
                }
                bpe->piece_off[id] = offs[i];
                bpe->piece_len[id] = e->key_len;
        }
        /* tokenizers builds its id -> token map from the same entries without a check:
         * the file loads there, so a warning here */
        if (r == 0 && n_shared)
                dse__log(DSE_LOG_WARN, "tokenizer.json: model.vocab gives %zu ids to more than one entry (the first: "
                         "id %d, again for '%.100s'); decoding such an id gives the entry listed last",
                         n_shared, shared_id, shared_key);
        if (r == 0)
                *ret_repeated = dse__bpe_vocab_insert_batch(bpe, offs, lens, ids, vocab->n) > 0;
        free(offs);
        free(lens);
        free(ids);
        return r;
}

/* added_tokens (checked by parse_vocab): their contents name their ids' pieces. */
static int parse_added(struct loader *L, const struct bj *added) {
        struct bpe *bpe = L->bpe;
        if (!added)
                return 0;
        if (!(bpe->added = calloc(added->n ? added->n : 1, sizeof *bpe->added)))
                return -ENOMEM;
        for (uint32_t i = 0; i < added->n; i++) {
                const struct bj *a = dse__bj_at(L->doc, added, i), *c = dse__bj_get(L->doc, a, "content");
                struct bpe_added *t = &bpe->added[bpe->n_added++];
                uint32_t off;
                int r = strs_add(bpe, c->str, c->n, &off);
                if (r < 0)
                        return r;
                get_id(dse__bj_get(L->doc, a, "id"), &t->id);
                t->content = bpe->strs + off;
                t->len = c->n;
                t->special = dse__bj_get_bool(L->doc, a, "special", 0);
                t->lstrip = dse__bj_get_bool(L->doc, a, "lstrip", 0);
                t->rstrip = dse__bj_get_bool(L->doc, a, "rstrip", 0);
                t->single_word = dse__bj_get_bool(L->doc, a, "single_word", 0);
                t->normalized = dse__bj_get_bool(L->doc, a, "normalized", !t->special);
                /* tokenizers lets an added token take over an id (its decoding wins) */
                uint32_t had = bpe->piece_off[t->id];
                if (had != UINT32_MAX && (bpe->piece_len[t->id] != c->n || memcmp(bpe->strs + had, c->str, c->n) != 0))
                        dse__log(DSE_LOG_WARN, "tokenizer.json: added_tokens[%u] '%.100s' has id %d, which is already "
                                 "'%.*s'; the added token wins", i, t->content, t->id,
                                 (int)(bpe->piece_len[t->id] > 100 ? 100 : bpe->piece_len[t->id]), bpe->strs + had);
                bpe->piece_off[t->id] = off;
                bpe->piece_len[t->id] = (uint32_t)c->n;
        }
        return 0;
}

#define MERGE_BATCH 256

/* One batch of merges: the ids of a and b (and of a+b when not predicted, see
 * parse_merges), batched so the hash-table misses overlap (this is most of the load
 * time). */
struct merge_batch {
        const char *key[3 * MERGE_BATCH]; /* key[3i + 2] == NULL: a+b already resolved */
        uint32_t len[3 * MERGE_BATCH];
        uint32_t cat_off[MERGE_BATCH];
        int32_t ids[3 * MERGE_BATCH];
        const char *q_key[3 * MERGE_BATCH]; /* the keys still to look up, packed */
        uint32_t q_len[3 * MERGE_BATCH];
        int32_t q_ids[3 * MERGE_BATCH];
        int32_t left[MERGE_BATCH], right[MERGE_BATCH], new_id[MERGE_BATCH];
        uint32_t rank[MERGE_BATCH];
        struct tok_buf cat;
};

static int merge_batch_flush(struct loader *L, struct merge_batch *mb, size_t n, uint32_t first_rank) {
        size_t q = 0;
        for (size_t i = 0; i < 3 * n; i++) {
                if (i % 3 == 2) {
                        if (!mb->key[i])
                                continue;
                        mb->key[i] = mb->cat.p ? mb->cat.p + mb->cat_off[i / 3] : ""; /* all parts empty: no buffer */
                }
                mb->q_key[q] = mb->key[i];
                mb->q_len[q++] = mb->len[i];
        }
        dse__bpe_vocab_find_batch(L->bpe, mb->q_key, mb->q_len, q, mb->q_ids);
        q = 0;
        for (size_t i = 0; i < 3 * n; i++) {
                if (i % 3 == 2 && !mb->key[i])
                        continue;
                mb->ids[i] = mb->q_ids[q++];
                if (mb->ids[i] < 0)
                        return dse__fail(L->reterr, -EBADMSG,
                                         "tokenizer.json: merges[%zu]: token '%.*s' is not in the vocabulary",
                                         first_rank + i / 3, (int)(mb->len[i] > 100 ? 100 : mb->len[i]), mb->key[i]);
        }
        for (size_t i = 0; i < n; i++) {
                mb->left[i] = mb->ids[3 * i];
                mb->right[i] = mb->ids[3 * i + 1];
                mb->new_id[i] = mb->ids[3 * i + 2];
                mb->rank[i] = first_rank + (uint32_t)i;
        }
        dse__bpe_merge_insert_batch(L->bpe, mb->left, mb->right, mb->rank, mb->new_id, n);
        mb->cat.len = 0;
        return 0;
}

/* Is piece `id` of the model vocabulary exactly a followed by b? */
static int piece_is(const struct bpe *bpe, int32_t id, const char *a, size_t an, const char *b, size_t bn) {
        if (id < 0 || id >= bpe->n_vocab || bpe->piece_off[id] == UINT32_MAX || bpe->piece_len[id] != an + bn)
                return 0;
        const char *p = bpe->strs + bpe->piece_off[id];
        return memcmp(p, a, an) == 0 && memcmp(p + an, b, bn) == 0;
}

static int parse_merges(struct loader *L, const struct bj *model, int predict) {
        struct bpe *bpe = L->bpe;
        const struct bj *merges = dse__bj_get(L->doc, model, "merges");
        if (!merges || merges->type != BJ_ARRAY)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: model.merges must be an array");
        bpe->merge_mask = pow2_at_least((uint64_t)merges->n * 2 + 1) - 1;
        if (!(bpe->merges = dse__bpe_map(((size_t)bpe->merge_mask + 1) * sizeof *bpe->merges)))
                return -ENOMEM;
        size_t pre_len = bpe->cont_prefix ? strlen(bpe->cont_prefix) : 0;
        struct merge_batch *mb = malloc(sizeof *mb);
        if (!mb)
                return -ENOMEM;
        memset(&mb->cat, 0, sizeof mb->cat);
        int r = 0;
        size_t n = 0;
        uint32_t first = 0;
        int32_t prev_new = -1;
        /* tokenizers reads the list as all "a b" or all ["a", "b"]: a mixed list fails there */
        int form = merges->n ? dse__bj_at(L->doc, merges, 0)->type : BJ_STRING;
        for (uint32_t i = 0; i < merges->n && r == 0; i++) {
                const struct bj *m = dse__bj_at(L->doc, merges, i);
                if ((m->type == BJ_STRING || m->type == BJ_ARRAY) && m->type != form) {
                        r = dse__fail(L->reterr, -EBADMSG,
                                      "tokenizer.json: merges[%u] is %s but merges[0] is %s: the list mixes the two forms",
                                      i, m->type == BJ_STRING ? "\"a b\"" : "[\"a\", \"b\"]",
                                      form == BJ_STRING ? "\"a b\"" : "[\"a\", \"b\"]");
                        break;
                }
                const char *a, *b;
                size_t an, bn;
                if (m->type == BJ_STRING) { /* "a b" */
                        const char *sp = memchr(m->str, ' ', m->n);
                        if (!sp || memchr(sp + 1, ' ', m->n - (size_t)(sp + 1 - m->str))) {
                                r = dse__fail(L->reterr, -EBADMSG, "tokenizer.json: merges[%u] is not \"a b\"", i);
                                break;
                        }
                        a = m->str;
                        an = (size_t)(sp - m->str);
                        b = sp + 1;
                        bn = m->n - an - 1;
                } else if (m->type == BJ_ARRAY && m->n == 2 && dse__bj_at(L->doc, m, 0)->type == BJ_STRING &&
                           dse__bj_at(L->doc, m, 1)->type == BJ_STRING) { /* ["a", "b"] */
                        a = dse__bj_at(L->doc, m, 0)->str;
                        an = dse__bj_at(L->doc, m, 0)->n;
                        b = dse__bj_at(L->doc, m, 1)->str;
                        bn = dse__bj_at(L->doc, m, 1)->n;
                } else {
                        r = dse__fail(L->reterr, -EBADMSG,
                                      "tokenizer.json: merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", i);
                        break;
                }
                /* the merged token drops b's continuing-subword prefix (model.rs) */
                size_t skip = pre_len && bn >= pre_len && memcmp(b, bpe->cont_prefix, pre_len) == 0 ? pre_len : 0;
                mb->key[3 * n] = a;
                mb->len[3 * n] = (uint32_t)an;
                mb->key[3 * n + 1] = b;
                mb->len[3 * n + 1] = (uint32_t)bn;
                mb->len[3 * n + 2] = (uint32_t)(an + bn - skip);
                /* BPE training appends each merge's result to the vocabulary, so in the
                 * files we meet merge i+1 makes the token after merge i's: checking that
                 * guess against the piece (sequential memory) replaces a third of the
                 * random hash lookups. Any other file takes the lookup. */
                if (predict && piece_is(bpe, prev_new + 1, a, an, b + skip, bn - skip)) {
                        mb->key[3 * n + 2] = NULL;
                        mb->ids[3 * n + 2] = ++prev_new;
                } else {
                        mb->cat_off[n] = (uint32_t)mb->cat.len;
                        if ((r = dse__tok_buf_put(&mb->cat, a, an)) < 0 ||
                            (r = dse__tok_buf_put(&mb->cat, b + skip, bn - skip)) < 0)
                                break;
                        const char *cat = mb->cat.p ? mb->cat.p + mb->cat_off[n] : ""; /* all parts empty */
                        prev_new = dse__bpe_vocab_find(bpe, cat, an + bn - skip);
                        mb->key[3 * n + 2] = prev_new >= 0 ? NULL : "";
                        mb->ids[3 * n + 2] = prev_new; /* not found: flush reports it in order */
                }
                if (++n == MERGE_BATCH) {
                        r = merge_batch_flush(L, mb, n, first);
                        first += (uint32_t)n;
                        n = 0;
                }
        }
        if (r == 0 && n)
                r = merge_batch_flush(L, mb, n, first);
        dse__tok_buf_done(&mb->cat);
        free(mb);
        return r;
}

static int parse_model(struct loader *L, const struct bj *model, const struct bj *added) {
        struct bpe *bpe = L->bpe;
        if (!model || model->type != BJ_OBJECT)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: missing \"model\"");
        const char *t = dse__bj_get_str(L->doc, model, "type");
        if (t && strcmp(t, "BPE") != 0)
                return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: model type '%s' is not supported", t);
        if (!t && !dse__bj_get(L->doc, model, "merges"))
                return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: model without type or merges is not BPE");
        const struct bj *dropout = dse__bj_get(L->doc, model, "dropout");
        if (dropout && dropout->type == BJ_NUMBER && dse__bj_num(dropout) > 0)
                return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: BPE dropout is not supported");
        bpe->ignore_merges = dse__bj_get_bool(L->doc, model, "ignore_merges", 0);
        bpe->byte_fallback = dse__bj_get_bool(L->doc, model, "byte_fallback", 0);
        bpe->fuse_unk = dse__bj_get_bool(L->doc, model, "fuse_unk", 0);
        const struct bj *pre = dse__bj_get(L->doc, model, "continuing_subword_prefix");
        const struct bj *suf = dse__bj_get(L->doc, model, "end_of_word_suffix");
        if (pre && pre->type == BJ_STRING && pre->n && !(bpe->cont_prefix = dup_mem(pre->str, pre->n)))
                return -ENOMEM;
        if (suf && suf->type == BJ_STRING && suf->n && !(bpe->end_suffix = dup_mem(suf->str, suf->n)))
                return -ENOMEM;
        int r;
        int repeated = 0;
        if ((r = parse_vocab(L, model, added, &repeated)) < 0 || (r = parse_merges(L, model, !repeated)) < 0 ||
            (r = parse_added(L, added)) < 0)
                return r;
        bpe->unk_id = -1;
        const char *unk = dse__bj_get_str(L->doc, model, "unk_token");
        if (unk && (bpe->unk_id = dse__bpe_vocab_find(bpe, unk, strlen(unk))) < 0)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: unk_token '%.100s' is not in the vocabulary", unk);
        for (int b = 0; b < 256; b++) {
                char name[8], ch[4];
                snprintf(name, sizeof name, "<0x%02X>", b);
                bpe->byte_fallback_id[b] = dse__bpe_vocab_find(bpe, name, 6);
                int n = dse__utf8_encode(dse__bpe_byte_to_cp((uint8_t)b), ch);
                bpe->byte_char_id[b] = dse__bpe_vocab_find(bpe, ch, (size_t)n);
        }
        return 0;
}

/* ---- added-token matching ------------------------------------------------------------ */

static int trie_insert(struct bpe_trie *t, const char *s, size_t n, int32_t token) {
        if (!t->nodes) {
                t->cap = 64;
                if (!(t->nodes = malloc(t->cap * sizeof *t->nodes)))
                        return -ENOMEM;
                t->nodes[0] = (struct bpe_trie_node){-1, -1, -1, 0};
                t->n_nodes = 1;
        }
        int32_t cur = 0;
        for (size_t i = 0; i < n; i++) {
                uint8_t b = (uint8_t)s[i];
                int32_t c = t->nodes[cur].first_child;
                while (c >= 0 && t->nodes[c].byte != b)
                        c = t->nodes[c].next_sibling;
                if (c < 0) {
                        if (t->n_nodes == t->cap) {
                                struct bpe_trie_node *nn = realloc(t->nodes, 2 * t->cap * sizeof *nn);
                                if (!nn)
                                        return -ENOMEM;
                                t->nodes = nn;
                                t->cap *= 2;
                        }
                        c = (int32_t)t->n_nodes++;
                        t->nodes[c] = (struct bpe_trie_node){-1, t->nodes[cur].first_child, -1, b};
                        t->nodes[cur].first_child = c;
                }
                cur = c;
        }
        t->nodes[cur].token = token; /* a repeated content: the later token wins */
        t->first_byte[(uint8_t)s[0]] = 1;
        return 0;
}

/* Leftmost-longest match at or after pos; 1 with the span and token index, 0 none. */
static int trie_find(const struct bpe_trie *t, const char *s, size_t len, size_t pos, size_t *ms, size_t *me,
                     int32_t *ret_token) {
        if (!t->nodes)
                return 0;
        for (size_t i = pos; i < len; i++) {
                if (!t->first_byte[(uint8_t)s[i]])
                        continue;
                int32_t cur = 0, best = -1;
                size_t best_end = 0;
                for (size_t k = i; k < len; k++) {
                        int32_t c = t->nodes[cur].first_child;
                        while (c >= 0 && t->nodes[c].byte != (uint8_t)s[k])
                                c = t->nodes[c].next_sibling;
                        if (c < 0)
                                break;
                        cur = c;
                        if (t->nodes[c].token >= 0) {
                                best = t->nodes[c].token;
                                best_end = k + 1;
                        }
                }
                if (best >= 0) {
                        *ms = i;
                        *me = best_end;
                        *ret_token = best;
                        return 1;
                }
        }
        return 0;
}

static int build_tries(struct loader *L) {
        struct bpe *bpe = L->bpe;
        for (int i = 0; i < bpe->n_added; i++) {
                const struct bpe_added *a = &bpe->added[i];
                if (!a->len)
                        continue;
                int r;
                if (!a->normalized || !bpe->n_norms) {
                        r = trie_insert(a->normalized ? &bpe->trie_norm : &bpe->trie_raw, a->content, a->len, i);
                } else {
                        /* normalized tokens are matched in normalized text, by their
                         * normalized content (AddedVocabulary::refresh_added_tokens) */
                        char *norm;
                        size_t n;
                        if ((r = dse__bpe_normalize_string(bpe, a->content, a->len, &norm, &n)) == -E2BIG)
                                return dse__fail(L->reterr, r,
                                                 "tokenizer.json: normalizer: the sequence makes added token "
                                                 "'%.100s' (%zu bytes) longer than %zu bytes; its Replace steps "
                                                 "multiply the text they are given",
                                                 a->content, a->len, dse__bpe_growth_limit(a->len));
                        if (r < 0)
                                return dse__fail(L->reterr, r, "tokenizer.json: cannot normalize added token '%.100s'",
                                                 a->content);
                        r = n ? trie_insert(&bpe->trie_norm, norm, n, i) : 0;
                        free(norm);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- post-processing and tokenizer_config.json ----------------------------------------- */

static int push_ids(int32_t **list, int *n, int32_t id) {
        int32_t *l = realloc(*list, (size_t)(*n + 1) * sizeof *l);
        if (!l)
                return -ENOMEM;
        l[(*n)++] = id;
        *list = l;
        return 0;
}

static int parse_template(struct loader *L, const struct bj *v) {
        struct bpe *bpe = L->bpe;
        const struct bj *single = dse__bj_get(L->doc, v, "single"), *specials = dse__bj_get(L->doc, v, "special_tokens");
        if (!single || single->type != BJ_ARRAY)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: TemplateProcessing without \"single\"");
        int seen_seq = 0, r;
        /* a later TemplateProcessing in a Sequence replaces an earlier one */
        bpe->n_prefix = bpe->n_suffix = 0;
        for (uint32_t i = 0; i < single->n; i++) {
                const struct bj *piece = dse__bj_at(L->doc, single, i);
                if (dse__bj_get(L->doc, piece, "Sequence")) {
                        seen_seq = 1;
                        continue;
                }
                const struct bj *st = dse__bj_get(L->doc, piece, "SpecialToken");
                const char *name = dse__bj_get_str(L->doc, st, "id");
                const struct bj *entry = NULL;
                for (uint32_t k = 0; name && specials && k < specials->n; k++) {
                        const struct bj *e = dse__bj_at(L->doc, specials, k);
                        if (specials->type == BJ_OBJECT && strcmp(e->key, name) == 0)
                                entry = e;
                }
                const struct bj *ids = dse__bj_get(L->doc, entry, "ids");
                if (!ids || ids->type != BJ_ARRAY)
                        return dse__fail(L->reterr, -EBADMSG,
                                         "tokenizer.json: TemplateProcessing special token '%.100s' has no ids",
                                         name ? name : "(missing)");
                for (uint32_t k = 0; k < ids->n; k++) {
                        int32_t id;
                        if (get_id(dse__bj_at(L->doc, ids, k), &id) < 0 || id >= bpe->n_vocab)
                                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: TemplateProcessing id out of range");
                        if ((r = seen_seq ? push_ids(&bpe->suffix_ids, &bpe->n_suffix, id)
                                          : push_ids(&bpe->prefix_ids, &bpe->n_prefix, id)) < 0)
                                return r;
                }
        }
        return 0;
}

static int parse_post_processor(struct loader *L, const struct bj *v, int depth) {
        if (!v || v->type == BJ_NULL)
                return 0;
        if (v->type != BJ_OBJECT || depth > 8)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: bad post_processor");
        int r;
        const char *t = type_of(L, v, "post_processor", &r);
        if (!t)
                return r;
        if (strcmp(t, "ByteLevel") == 0) /* only adjusts offsets */
                return 0;
        if (strcmp(t, "TemplateProcessing") == 0)
                return parse_template(L, v);
        if (strcmp(t, "Sequence") == 0) {
                const struct bj *list = dse__bj_get(L->doc, v, "processors");
                if (!list || list->type != BJ_ARRAY)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: Sequence post_processor without a list");
                for (uint32_t i = 0; i < list->n; i++)
                        if ((r = parse_post_processor(L, dse__bj_at(L->doc, list, i), depth + 1)) < 0)
                                return r;
                return 0;
        }
        if (strcmp(t, "RobertaProcessing") == 0 || strcmp(t, "BertProcessing") == 0) {
                const struct bj *cls = dse__bj_get(L->doc, v, "cls"), *sep = dse__bj_get(L->doc, v, "sep");
                int32_t c, s;
                if (!cls || !sep || get_id(dse__bj_at(L->doc, cls, 1), &c) < 0 ||
                    get_id(dse__bj_at(L->doc, sep, 1), &s) < 0 || c >= L->bpe->n_vocab || s >= L->bpe->n_vocab)
                        return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: %s needs cls and sep", t);
                L->bpe->n_prefix = L->bpe->n_suffix = 0;
                if ((r = push_ids(&L->bpe->prefix_ids, &L->bpe->n_prefix, c)) < 0)
                        return r;
                return push_ids(&L->bpe->suffix_ids, &L->bpe->n_suffix, s);
        }
        return dse__fail(L->reterr, -EOPNOTSUPP, "tokenizer.json: post-processor type '%s' is not supported", t);
}

/* bos_token / eos_token: a string or an AddedToken object {"content": ...}. -1 if absent. */
static int config_token(struct loader *L, const struct bj_doc *cfg, const char *key, int32_t *ret_id) {
        const struct bj *v = dse__bj_get(cfg, dse__bj_root(cfg), key);
        const struct bj *s = v && v->type == BJ_OBJECT ? dse__bj_get(cfg, v, "content") : v;
        *ret_id = -1;
        if (!s || s->type == BJ_NULL)
                return 0;
        if (s->type != BJ_STRING)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer_config.json: bad \"%s\"", key);
        *ret_id = token_id(L->bpe, s->str, s->n);
        if (*ret_id < 0)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer_config.json: %s '%.100s' is not a token", key, s->str);
        return 0;
}

static int parse_config(struct loader *L, struct dse_tokenizer *tok, const char *json, size_t len) {
        struct bpe *bpe = L->bpe;
        struct bj_doc cfg;
        struct dse_diag sub = {{0}};
        int r = dse__bj_parse(json, len, &cfg, &sub);
        if (r < 0)
                return dse__fail(L->reterr, r == -ENOMEM ? r : -EBADMSG, "tokenizer_config.json: %s", sub.msg);
        const struct bj *root = dse__bj_root(&cfg);
        int32_t bos = -1, eos = -1;
        if (root->type != BJ_OBJECT) {
                r = dse__fail(L->reterr, -EBADMSG, "tokenizer_config.json: not an object");
                goto out;
        }
        if ((r = config_token(L, &cfg, "bos_token", &bos)) < 0 || (r = config_token(L, &cfg, "eos_token", &eos)) < 0)
                goto out;
        if (bos >= 0)
                tok->bos_id = bos;
        if (eos >= 0)
                tok->eos_id = eos;
        /* add_bos_token / add_eos_token decide when present: transformers' Llama fast
         * tokenizers rebuild the post-processor from them (DeepSeek-V3's BOS comes
         * from here; its tokenizer.json post-processor adds nothing). */
        const struct bj *ab = dse__bj_get(&cfg, root, "add_bos_token"), *ae = dse__bj_get(&cfg, root, "add_eos_token");
        int has_ab = ab && (ab->type == BJ_TRUE || ab->type == BJ_FALSE);
        int has_ae = ae && (ae->type == BJ_TRUE || ae->type == BJ_FALSE);
        if (has_ab || has_ae) {
                int add_bos = has_ab ? ab->type == BJ_TRUE : 0, add_eos = has_ae ? ae->type == BJ_TRUE : 0;
                if ((add_bos && bos < 0) || (add_eos && eos < 0)) {
                        r = dse__fail(L->reterr, -EBADMSG, "tokenizer_config.json: add_%s_token is set but %s_token is not",
                                      add_bos && bos < 0 ? "bos" : "eos", add_bos && bos < 0 ? "bos" : "eos");
                        goto out;
                }
                bpe->n_prefix = bpe->n_suffix = 0;
                if ((add_bos && (r = push_ids(&bpe->prefix_ids, &bpe->n_prefix, bos)) < 0) ||
                    (add_eos && (r = push_ids(&bpe->suffix_ids, &bpe->n_suffix, eos)) < 0))
                        goto out;
        }
        const struct bj *ct = dse__bj_get(&cfg, root, "chat_template");
        const struct bj *tmpl = NULL;
        if (ct && ct->type == BJ_STRING)
                tmpl = ct;
        for (uint32_t i = 0; ct && ct->type == BJ_ARRAY && i < ct->n; i++) { /* [{name, template}] */
                const struct bj *e = dse__bj_at(&cfg, ct, i);
                const char *name = dse__bj_get_str(&cfg, e, "name");
                if (name && strcmp(name, "default") == 0)
                        tmpl = dse__bj_get(&cfg, e, "template");
        }
        if (tmpl && tmpl->type == BJ_STRING && !(tok->chat_template = dup_mem(tmpl->str, tmpl->n)))
                r = -ENOMEM;
out:
        dse__bj_free(&cfg);
        return r;
}

/* ---- the tokenizer ------------------------------------------------------------------- */

static void bpe_free(void *impl) {
        struct bpe *bpe = impl;
        if (!bpe)
                return;
        free(bpe->strs);
        free(bpe->piece_off);
        free(bpe->piece_len);
        if (bpe->vocab)
                dse__bpe_unmap(bpe->vocab, ((size_t)bpe->vocab_mask + 1) * sizeof *bpe->vocab);
        if (bpe->merges)
                dse__bpe_unmap(bpe->merges, ((size_t)bpe->merge_mask + 1) * sizeof *bpe->merges);
        free(bpe->cont_prefix);
        free(bpe->end_suffix);
        for (int i = 0; i < bpe->n_norms; i++) {
                free(bpe->norms[i].a);
                free(bpe->norms[i].b);
                dse__bpe_regex_done(&bpe->norms[i].re);
        }
        free(bpe->norms);
        for (int i = 0; i < bpe->n_pretoks; i++)
                dse__bpe_regex_done(&bpe->pretoks[i].re);
        free(bpe->pretoks);
        for (int i = 0; i < bpe->n_decs; i++) {
                free(bpe->decs[i].a);
                free(bpe->decs[i].b);
                dse__bpe_regex_done(&bpe->decs[i].re);
        }
        free(bpe->decs);
        free(bpe->added);
        free(bpe->trie_raw.nodes);
        free(bpe->trie_norm.nodes);
        free(bpe->prefix_ids);
        free(bpe->suffix_ids);
        free(bpe);
}

/* Segments between added tokens: AddedVocabulary::find_matches (lstrip, rstrip and
 * single_word as tokenizers applies them). gap(ws, s, len, at_start) handles text. */
typedef int (*gap_fn)(struct bpe_ws *ws, const char *s, size_t len, int at_start);

static int word_char_before(const char *s, size_t end) {
        if (!end)
                return 0;
        size_t k = dse__utf8_char_before(s, 0, end);
        int32_t cp;
        dse__utf8_next(s + k, end - k, &cp);
        return cp == '_' || (cp < 128 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z') || (cp >= '0' && cp <= '9') : 1);
}

static int word_char_at(const char *s, size_t len, size_t pos) {
        if (pos >= len)
                return 0;
        int32_t cp;
        dse__utf8_next(s + pos, len - pos, &cp);
        return cp == '_' || (cp < 128 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z') || (cp >= '0' && cp <= '9') : 1);
}

static int split_added(struct bpe_ws *ws, const struct bpe_trie *trie, const char *s, size_t len, int at_start,
                       gap_fn gap) {
        const struct bpe *bpe = ws->bpe;
        size_t start_offset = 0, pos = 0, ms, me;
        int32_t idx;
        int r;
        while (trie_find(trie, s, len, pos, &ms, &me, &idx) > 0) {
                pos = me;
                const struct bpe_added *a = &bpe->added[idx];
                size_t start = ms, stop = me;
                if (a->single_word && (word_char_before(s, start) || word_char_at(s, len, stop)))
                        continue;
                if (a->lstrip) {
                        size_t k = start;
                        while (k > 0) {
                                size_t q = dse__utf8_char_before(s, 0, k);
                                int32_t cp;
                                dse__utf8_next(s + q, k - q, &cp);
                                if (!dse__unicode_white_space(cp))
                                        break;
                                k = q;
                        }
                        start = k > start_offset ? k : start_offset;
                }
                if (a->rstrip) {
                        while (stop < len) {
                                int32_t cp;
                                int n = dse__utf8_next(s + stop, len - stop, &cp);
                                if (!dse__unicode_white_space(cp))
                                        break;
                                stop += (size_t)n;
                        }
                }
                if (start_offset < start && (r = gap(ws, s + start_offset, start - start_offset,
                                                     at_start && start_offset == 0)) < 0)
                        return r;
                if ((r = bpe_out_push(ws->out, a->id)) < 0)
                        return r;
                start_offset = stop;
        }
        if (start_offset < len)
                return gap(ws, s + start_offset, len - start_offset, at_start && start_offset == 0);
        return 0;
}

static int normalized_gap(struct bpe_ws *ws, const char *s, size_t len, int at_start) {
        const char *n;
        size_t nlen;
        int r = dse__bpe_normalize(ws, s, len, &n, &nlen);
        if (r < 0)
                return r;
        if (!ws->bpe->trie_norm.nodes)
                return dse__bpe_pretokenize(ws, n, nlen, at_start);
        return split_added(ws, &ws->bpe->trie_norm, n, nlen, at_start, dse__bpe_pretokenize);
}

static int bpe_encode(const struct dse_tokenizer *tok, const char *text, size_t len, int add_special, int32_t *ids,
                      size_t max_ids) {
        const struct bpe *bpe = tok->impl;
        if (dse__utf8_valid_prefix(text, len) != len)
                return -EILSEQ;
        struct bpe_out out = {ids, max_ids, 0};
        struct bpe_ws ws;
        dse__bpe_ws_init(&ws, bpe);
        ws.out = &out;
        int r = 0;
        for (int i = 0; add_special && i < bpe->n_prefix && r == 0; i++)
                r = bpe_out_push(&out, bpe->prefix_ids[i]);
        if (r == 0)
                r = split_added(&ws, &bpe->trie_raw, text, len, 1, normalized_gap);
        for (int i = 0; add_special && i < bpe->n_suffix && r == 0; i++)
                r = bpe_out_push(&out, bpe->suffix_ids[i]);
        dse__bpe_ws_done(&ws);
        if (r < 0)
                return r;
        return out.n > INT_MAX ? -E2BIG : (int)out.n;
}

static int bpe_decode_ids(const struct dse_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out,
                          size_t max_len) {
        struct tok_buf b = {0};
        int r = dse__bpe_decode(tok->impl, ids, n_ids, &b);
        if (r == 0 && b.len > INT_MAX)
                r = -E2BIG;
        if (r == 0) {
                if (b.len && max_len)
                        memcpy(out, b.p, b.len < max_len ? b.len : max_len);
                r = (int)b.len;
        }
        dse__tok_buf_done(&b);
        return r;
}

static const char *bpe_piece(const struct dse_tokenizer *tok, int32_t id) {
        const struct bpe *bpe = tok->impl;
        return bpe->piece_off[id] == UINT32_MAX ? NULL : bpe->strs + bpe->piece_off[id];
}

static const struct dse_tokenizer_ops bpe_ops = {
        .encode = bpe_encode,
        .decode = bpe_decode_ids,
        .piece = bpe_piece,
        .free_impl = bpe_free,
};

/* A byte-level vocabulary must hold the character of each of the 256 bytes, and
 * byte_fallback needs the 256 <0xXX> pieces: tokenizers loads files lacking some, and
 * then drops those bytes or turns them into unk_token, so these are warnings. */
static void warn_byte_coverage(const struct bpe *bpe) {
        int byte_level = 0;
        for (int i = 0; i < bpe->n_pretoks; i++)
                byte_level |= bpe->pretoks[i].type == BPE_PRETOK_BYTELEVEL;
        int n_char = 0, n_fallback = 0, first_char = -1, first_fallback = -1;
        for (int b = 255; b >= 0; b--) {
                if (bpe->byte_char_id[b] < 0) {
                        n_char++;
                        first_char = b;
                }
                if (bpe->byte_fallback_id[b] < 0) {
                        n_fallback++;
                        first_fallback = b;
                }
        }
        if (byte_level && n_char) {
                char ch[4];
                int n = dse__utf8_encode(dse__bpe_byte_to_cp((uint8_t)first_char), ch);
                dse__log(DSE_LOG_WARN, "tokenizer.json: ByteLevel vocabulary lacks the tokens of %d of the 256 bytes "
                         "(the first: byte 0x%02X, '%.*s'); text holding them encodes to unk_token or loses them",
                         n_char, first_char, n, ch);
        }
        if (bpe->byte_fallback && n_fallback)
                dse__log(DSE_LOG_WARN, "tokenizer.json: byte_fallback is set but %d of the 256 <0xXX> pieces are "
                         "missing (the first: <0x%02X>); such bytes encode to unk_token", n_fallback, first_fallback);
}

static int load(struct loader *L, struct dse_tokenizer *tok, const char *config_json, size_t config_len) {
        struct bpe *bpe = L->bpe;
        const struct bj_doc *doc = L->doc;
        const struct bj *root = dse__bj_root(doc);
        int r;
        if (root->type != BJ_OBJECT)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: not a JSON object");
        const struct bj *added = dse__bj_get(doc, root, "added_tokens");
        if (added && added->type != BJ_ARRAY && added->type != BJ_NULL)
                return dse__fail(L->reterr, -EBADMSG, "tokenizer.json: added_tokens must be an array");
        if ((r = parse_model(L, dse__bj_get(doc, root, "model"), added && added->type == BJ_ARRAY ? added : NULL)) < 0 ||
            (r = parse_normalizer(L, dse__bj_get(doc, root, "normalizer"), 0)) < 0 ||
            (r = parse_pretokenizer(L, dse__bj_get(doc, root, "pre_tokenizer"), 0)) < 0 ||
            (r = parse_decoder(L, dse__bj_get(doc, root, "decoder"), 0)) < 0 ||
            (r = parse_post_processor(L, dse__bj_get(doc, root, "post_processor"), 0)) < 0 || (r = build_tries(L)) < 0)
                return r;
        /* The model can take raw bytes when the last stage is ByteLevel's byte mapping
         * and every byte's character is a vocabulary entry (no prefix/suffix rules). */
        bpe->raw_bytes_model = bpe->n_pretoks > 0 && bpe->pretoks[bpe->n_pretoks - 1].type == BPE_PRETOK_BYTELEVEL &&
                               !bpe->cont_prefix && !bpe->end_suffix;
        for (int b = 0; b < 256; b++)
                bpe->raw_bytes_model &= bpe->byte_char_id[b] >= 0;
        warn_byte_coverage(bpe);
        if (bpe->n_prefix)
                tok->bos_id = bpe->prefix_ids[0];
        if (bpe->n_suffix)
                tok->eos_id = bpe->suffix_ids[bpe->n_suffix - 1];
        if (config_json && (r = parse_config(L, tok, config_json, config_len)) < 0)
                return r;
        tok->n_vocab = bpe->n_vocab;
        return 0;
}

int dse__tok_bpe_init(struct dse_tokenizer *tok, const char *json, size_t json_len, const char *config_json,
                      size_t config_len, struct dse_diag *reterr) {
        struct bj_doc doc;
        struct dse_diag sub = {{0}};
        int r = dse__bj_parse(json, json_len, &doc, &sub);
        if (r < 0)
                return dse__fail(reterr, r == -ENOMEM ? r : -EBADMSG, "tokenizer.json: %s", sub.msg);
        struct bpe *bpe = calloc(1, sizeof *bpe);
        if (!bpe) {
                dse__bj_free(&doc);
                return -ENOMEM;
        }
        struct loader L = {bpe, &doc, reterr};
        r = load(&L, tok, config_json, config_len);
        dse__bj_free(&doc);
        if (r < 0) {
                bpe_free(bpe);
                return r == -ENOMEM ? dse__fail(reterr, r, "tokenizer.json: out of memory") : r;
        }
        tok->ops = &bpe_ops;
        tok->impl = bpe;
        return 0;
}
