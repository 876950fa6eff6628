/* A SentencePiece .model together with a Hugging Face tokenizer_config.json: the folder
 * layout transformers' LlamaTokenizer loads. The config adds what the .model lacks:
 * the chat template, which strings are special tokens, and whether encoding adds BOS/EOS.
 *
 * Encoding follows transformers' slow LlamaTokenizer (tokenization_llama.py with
 * PreTrainedTokenizer.tokenize, 4.36+), which LlamaTokenizerFast matches:
 *   1. The text is cut at the added tokens (bos/eos/unk/pad, additional_special_tokens,
 *      added_tokens_decoder): leftmost match first, the longest one at a position
 *      (transformers' Trie.split). A token flagged lstrip/rstrip eats the whitespace
 *      (str.isspace) before/after it. Each match becomes its id.
 *   2. legacy=true (the default when the key is absent or null, as transformers' own):
 *      every text segment is encoded by SentencePiece exactly as the .model says, so
 *      each segment gets the model's dummy-prefix U+2581: "<s>And" is [<s>, "▁And"],
 *      and "a</s>b" is [..."▁a", </s>, "▁b"...]. The fast tokenizer's legacy conversion
 *      (Prepend normalizer per segment) gives the same ids.
 *      legacy=false: the model's add_dummy_prefix is switched off; the text becomes
 *      "▁" + text with every U+2581 turned into a space (add_prefix_space, default
 *      true); a segment starting with a space or U+2581 is encoded as unk_token +
 *      segment with the unk_token's ids dropped (so the leading space is kept as
 *      "▁"); a leading lone "▁" before a special token is dropped. So "<s>And" is
 *      [<s>, "A", "nd"...] and the prefix space appears only at the start of the text.
 *   3. add_special: BOS when add_bos_token (default true), EOS when add_eos_token
 *      (default false).
 * Decoding and pieces are the SentencePiece model's. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "spm_model.h"
#include "tok_json.h"
#include "tokenizer.h"

static const char SPACE_SYMBOL[] = "\xe2\x96\x81"; /* U+2581 */

struct added_token {
        char *text; /* NUL-terminated, owned */
        size_t len;
        int32_t id;
        bool lstrip, rstrip;
        bool special; /* in transformers' all_special_tokens (the leading-"▁" rule) */
};

struct spm_hf {
        struct dse_tokenizer sp; /* the plain SentencePiece tokenizer */
        struct added_token *added;
        size_t n_added;
        bool first_byte[256]; /* some added token starts with this byte */
        bool legacy, add_prefix_space, add_bos, add_eos;
        const char *unk_text; /* legacy=false: the unk_token string (points into added) */
        size_t unk_text_len;
        int32_t unk_n_ids;    /* legacy=false: ids of unk_text encoded bare */
        int32_t space_id;     /* the piece "▁", -1 when none */
};

static void spm_hf_free(void *impl) {
        struct spm_hf *h = impl;
        if (!h)
                return;
        if (h->sp.ops)
                h->sp.ops->free_impl(h->sp.impl);
        for (size_t i = 0; i < h->n_added; i++)
                free(h->added[i].text);
        free(h->added);
        free(h);
}

/* The id of the piece spelled s, or -1 (pieces are unique in a .model). */
static int32_t piece_id(const struct dse_tokenizer *sp, const char *s) {
        for (int32_t i = 0; i < sp->n_vocab; i++)
                if (strcmp(sp->ops->piece(sp, i), s) == 0)
                        return i;
        return -1;
}

/* ---- tokenizer_config.json ------------------------------------------------------- */

/* A token value: a string, or an AddedToken object {"content", "lstrip", "rstrip",
 * "single_word", ...}. Sets *ret_content to NULL for null. */
static int token_value(const struct bj_doc *doc, const struct bj *v, const char *what, const char **ret_content,
                       bool *ret_lstrip, bool *ret_rstrip, struct dse_diag *reterr) {
        *ret_content = NULL;
        *ret_lstrip = *ret_rstrip = false;
        if (!v || v->type == BJ_NULL)
                return 0;
        if (v->type == BJ_STRING) {
                *ret_content = v->str;
                return 0;
        }
        const char *content = dse__bj_get_str(doc, v, "content");
        if (!content)
                return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: %s is neither a string nor {\"content\": ...}",
                                 what);
        if (dse__bj_get_bool(doc, v, "single_word", 0))
                return dse__fail(reterr, -EOPNOTSUPP, "tokenizer_config.json: %s '%.100s': single_word is not supported",
                                 what, content);
        *ret_content = content;
        *ret_lstrip = dse__bj_get_bool(doc, v, "lstrip", 0);
        *ret_rstrip = dse__bj_get_bool(doc, v, "rstrip", 0);
        return 0;
}

/* Adds (or, for a string already there, updates) an added token. */
static int add_token(struct spm_hf *h, const char *text, int32_t id, bool lstrip, bool rstrip, bool special) {
        size_t len = strlen(text);
        if (len == 0)
                return 0;
        for (size_t i = 0; i < h->n_added; i++)
                if (strcmp(h->added[i].text, text) == 0) {
                        h->added[i].special |= special;
                        h->added[i].lstrip |= lstrip;
                        h->added[i].rstrip |= rstrip;
                        return 0;
                }
        struct added_token *v = realloc(h->added, (h->n_added + 1) * sizeof *v);
        if (!v)
                return -ENOMEM;
        h->added = v;
        char *copy = strdup(text);
        if (!copy)
                return -ENOMEM;
        h->added[h->n_added++] = (struct added_token){copy, len, id, lstrip, rstrip, special};
        h->first_byte[(uint8_t)text[0]] = true;
        return 0;
}

/* A special-token key (bos_token, ...): adds it and sets *ret_id to its id (-1 for
 * null). An absent key takes LlamaTokenizer's default when the model has that piece,
 * else leaves *ret_id alone (the .model's own id). */
static int special_key(struct spm_hf *h, const struct bj_doc *doc, const char *key, const char *dflt,
                       int32_t *ret_id, struct dse_diag *reterr) {
        const struct bj *v = dse__bj_get(doc, dse__bj_root(doc), key);
        const char *content;
        bool lstrip, rstrip;
        int r = token_value(doc, v, key, &content, &lstrip, &rstrip, reterr);
        if (r < 0)
                return r;
        if (!v)
                content = dflt;
        else if (!content)
                *ret_id = -1;
        if (!content)
                return 0;
        int32_t id = piece_id(&h->sp, content);
        if (id < 0 && !v)
                return 0;
        if (id < 0)
                return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: %s '%.100s' is not a piece of tokenizer.model",
                                 key, content);
        *ret_id = id;
        return add_token(h, content, id, lstrip, rstrip, true);
}

static int bool_key(const struct bj_doc *doc, const char *key, bool dflt, bool *ret, struct dse_diag *reterr) {
        const struct bj *v = dse__bj_get(doc, dse__bj_root(doc), key);
        if (!v || v->type == BJ_NULL)
                *ret = dflt;
        else if (v->type == BJ_TRUE || v->type == BJ_FALSE)
                *ret = v->type == BJ_TRUE;
        else
                return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: \"%s\" is not a boolean", key);
        return 0;
}

/* chat_template: a string, or a list of {"name", "template"} (the "default" one, or
 * the only one). */
static int chat_template(const struct bj_doc *doc, char **ret, struct dse_diag *reterr) {
        const struct bj *ct = dse__bj_get(doc, dse__bj_root(doc), "chat_template");
        const struct bj *tmpl = ct && ct->type == BJ_STRING ? ct : NULL;
        if (ct && ct->type == BJ_ARRAY) {
                for (uint32_t i = 0; i < ct->n; i++) {
                        const struct bj *e = dse__bj_at(doc, ct, i);
                        const char *name = dse__bj_get_str(doc, e, "name");
                        if (ct->n == 1 || (name && strcmp(name, "default") == 0))
                                tmpl = dse__bj_get(doc, e, "template");
                }
                if (!tmpl || tmpl->type != BJ_STRING)
                        return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: chat_template list has no \"default\"");
        } else if (ct && !tmpl && ct->type != BJ_NULL) {
                return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: chat_template is not a string or a list");
        }
        if (tmpl && !(*ret = strdup(tmpl->str)))
                return -ENOMEM;
        return 0;
}

static int parse_config(struct spm_hf *h, struct dse_tokenizer *tok, const struct bj_doc *doc,
                        struct dse_diag *reterr) {
        int r;
        const struct bj *root = dse__bj_root(doc);
        if (root->type != BJ_OBJECT)
                return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: not a JSON object");
        if ((r = bool_key(doc, "legacy", true, &h->legacy, reterr)) < 0 ||
            (r = bool_key(doc, "add_prefix_space", true, &h->add_prefix_space, reterr)) < 0 ||
            (r = bool_key(doc, "add_bos_token", true, &h->add_bos, reterr)) < 0 ||
            (r = bool_key(doc, "add_eos_token", false, &h->add_eos, reterr)) < 0)
                return r;
        int32_t unk = -1, pad = -1;
        if ((r = special_key(h, doc, "bos_token", "<s>", &tok->bos_id, reterr)) < 0 ||
            (r = special_key(h, doc, "eos_token", "</s>", &tok->eos_id, reterr)) < 0 ||
            (r = special_key(h, doc, "unk_token", "<unk>", &unk, reterr)) < 0 ||
            (r = special_key(h, doc, "pad_token", NULL, &pad, reterr)) < 0)
                return r;
        if (unk >= 0) {
                h->unk_text = h->sp.ops->piece(&h->sp, unk);
                h->unk_text_len = strlen(h->unk_text);
        }
        const struct bj *extra = dse__bj_get(doc, root, "additional_special_tokens");
        for (uint32_t i = 0; extra && extra->type == BJ_ARRAY && i < extra->n; i++) {
                const char *content;
                bool lstrip, rstrip;
                if ((r = token_value(doc, dse__bj_at(doc, extra, i), "additional_special_tokens", &content, &lstrip,
                                     &rstrip, reterr)) < 0)
                        return r;
                int32_t id = content ? piece_id(&h->sp, content) : -1;
                if (content && id < 0)
                        return dse__fail(reterr, -EBADMSG,
                                         "tokenizer_config.json: additional special token '%.100s' is not a piece of tokenizer.model",
                                         content);
                if (content && (r = add_token(h, content, id, lstrip, rstrip, true)) < 0)
                        return r;
        }
        const struct bj *dec = dse__bj_get(doc, root, "added_tokens_decoder");
        for (uint32_t i = 0; dec && dec->type == BJ_OBJECT && i < dec->n; i++) {
                const struct bj *e = dse__bj_at(doc, dec, i);
                char *end;
                long id = strtol(e->key, &end, 10);
                const char *content;
                bool lstrip, rstrip;
                if (*e->key == '\0' || *end != '\0' || id < 0 || id >= h->sp.n_vocab)
                        return dse__fail(reterr, -EBADMSG,
                                         "tokenizer_config.json: added_tokens_decoder id '%.32s' is outside the model's %d pieces",
                                         e->key, h->sp.n_vocab);
                if ((r = token_value(doc, e, "added_tokens_decoder entry", &content, &lstrip, &rstrip, reterr)) < 0)
                        return r;
                if (!content)
                        return dse__fail(reterr, -EBADMSG, "tokenizer_config.json: added_tokens_decoder %ld has no content", id);
                if ((r = add_token(h, content, (int32_t)id, lstrip, rstrip, false)) < 0)
                        return r;
        }
        return chat_template(doc, &tok->chat_template, reterr);
}

static const struct dse_tokenizer_ops spm_hf_ops;

int dse__tok_spm_hf_init(struct dse_tokenizer *tok, const void *model, size_t model_len, const char *config_json,
                         size_t config_len, struct dse_diag *reterr) {
        struct spm_hf *h = calloc(1, sizeof *h);
        if (!h)
                return -ENOMEM;
        struct bj_doc doc = {0};
        int r = dse__tok_spm_init(&h->sp, model, model_len, reterr);
        if (r < 0)
                goto fail;
        struct dse_diag sub = {{0}};
        if ((r = dse__bj_parse(config_json, config_len, &doc, &sub)) < 0) {
                r = dse__fail(reterr, r == -ENOMEM ? r : -EBADMSG, "tokenizer_config.json: %s", sub.msg);
                goto fail;
        }
        tok->bos_id = h->sp.bos_id;
        tok->eos_id = h->sp.eos_id;
        if ((r = parse_config(h, tok, &doc, reterr)) < 0)
                goto fail;
        if (!h->legacy) {
                h->space_id = piece_id(&h->sp, SPACE_SYMBOL);
                r = h->unk_text ? dse__tok_spm_encode_bare(&h->sp, h->unk_text, h->unk_text_len, NULL, 0) : 0;
                if (r < 0)
                        goto fail;
                h->unk_n_ids = r;
        }
        dse__bj_free(&doc);
        tok->ops = &spm_hf_ops;
        tok->impl = h;
        tok->n_vocab = h->sp.n_vocab;
        return 0;
fail:
        dse__bj_free(&doc);
        free(tok->chat_template);
        tok->chat_template = NULL;
        spm_hf_free(h);
        return r;
}

/* ---- encoding -------------------------------------------------------------------- */

struct id_buf {
        int32_t *v;
        size_t n, cap;
};

static int ids_reserve(struct id_buf *b, size_t more) {
        int32_t *v = dse__tok_reserve(b->v, &b->cap, b->n + more, sizeof *v);
        if (!v)
                return -ENOMEM;
        b->v = v;
        return 0;
}

static int ids_push(struct id_buf *b, int32_t id) {
        int r = ids_reserve(b, 1);
        if (r == 0)
                b->v[b->n++] = id;
        return r;
}

/* Appends the SentencePiece ids of text[0..len); bare: without the dummy prefix. */
static int ids_encode(struct id_buf *b, const struct dse_tokenizer *sp, const char *text, size_t len, bool bare) {
        int r = bare ? dse__tok_spm_encode_bare(sp, text, len, NULL, 0) : sp->ops->encode(sp, text, len, 0, NULL, 0);
        if (r <= 0 || (r = ids_reserve(b, (size_t)r)) < 0)
                return r;
        r = bare ? dse__tok_spm_encode_bare(sp, text, len, b->v + b->n, b->cap - b->n)
                 : sp->ops->encode(sp, text, len, 0, b->v + b->n, b->cap - b->n);
        if (r >= 0)
                b->n += (size_t)r;
        return r;
}

/* Python's str.isspace() for the character at s (valid UTF-8): its length, or 0. */
static size_t space_len(const char *s, size_t len) {
        int32_t cp;
        int n = dse__utf8_next(s, len, &cp);
        return dse__py_isspace((uint32_t)cp) ? (size_t)n : 0;
}

/* The leftmost added token at or after text[pos], longest at that position; NULL when
 * none. */
static const struct added_token *next_added(const struct spm_hf *h, const char *text, size_t len, size_t pos,
                                            size_t *ret_at) {
        for (; pos < len; pos++) {
                if (!h->first_byte[(uint8_t)text[pos]])
                        continue;
                const struct added_token *best = NULL;
                for (size_t i = 0; i < h->n_added; i++) {
                        const struct added_token *a = &h->added[i];
                        if (a->len <= len - pos && (!best || a->len > best->len) && memcmp(text + pos, a->text, a->len) == 0)
                                best = a;
                }
                if (best) {
                        *ret_at = pos;
                        return best;
                }
        }
        return NULL;
}

/* A text segment between added tokens (non-empty). */
static int encode_segment(const struct spm_hf *h, struct id_buf *b, const char *seg, size_t len, struct tok_buf *scratch) {
        if (h->legacy)
                return ids_encode(b, &h->sp, seg, len, false);
        bool lead_space = seg[0] == ' ' || (len >= 3 && memcmp(seg, SPACE_SYMBOL, 3) == 0);
        if (!lead_space || !h->unk_text)
                return ids_encode(b, &h->sp, seg, len, true);
        /* tokenization_llama.py _tokenize: encode unk_token + text, drop the unk ids. */
        scratch->len = 0;
        int r;
        if ((r = dse__tok_buf_put(scratch, h->unk_text, h->unk_text_len)) < 0 ||
            (r = dse__tok_buf_put(scratch, seg, len)) < 0)
                return r;
        size_t start = b->n;
        if ((r = ids_encode(b, &h->sp, scratch->p, scratch->len, true)) < 0)
                return r;
        size_t n = b->n - start;
        if (n >= (size_t)h->unk_n_ids) {
                memmove(b->v + start, b->v + start + h->unk_n_ids, (n - (size_t)h->unk_n_ids) * sizeof *b->v);
                b->n -= (size_t)h->unk_n_ids;
        }
        return 0;
}

/* Cuts text at the added tokens and encodes the pieces between them into b. */
static int encode_split(const struct spm_hf *h, const char *text, size_t len, struct id_buf *b, bool *ret_lead_special) {
        struct tok_buf scratch = {0};
        bool eat_left_space = false; /* the previous token has rstrip */
        int r = 0;
        *ret_lead_special = false;
        for (size_t pos = 0; pos <= len && r >= 0;) {
                size_t at = len;
                const struct added_token *a = next_added(h, text, len, pos, &at);
                size_t end = at;
                if (eat_left_space)
                        for (size_t c; pos < end && (c = space_len(text + pos, end - pos)) > 0;)
                                pos += c;
                if (a && a->lstrip) { /* drop the segment's trailing whitespace */
                        size_t keep = pos;
                        for (size_t i = pos, c; i < end; i += c) {
                                size_t sp = space_len(text + i, end - i);
                                c = sp ? sp : spm_one_char_len(text + i);
                                if (!sp)
                                        keep = i + c;
                        }
                        end = keep;
                }
                if (end > pos)
                        r = encode_segment(h, b, text + pos, end - pos, &scratch);
                if (!a || r < 0)
                        break;
                /* legacy=false: a lone "▁" before a special token is dropped (by the caller). */
                if (b->n == 1 && pos == 0 && a->special)
                        *ret_lead_special = true;
                r = ids_push(b, a->id);
                pos = at + a->len;
                eat_left_space = a->rstrip;
        }
        free(scratch.p);
        return r;
}

/* legacy=false (tokenization_llama.py tokenize): "▁" + text with each U+2581 written
 * as a space. */
static int prefix_text(const struct spm_hf *h, const char *text, size_t len, struct tok_buf *out) {
        int r = h->add_prefix_space ? dse__tok_buf_put(out, SPACE_SYMBOL, 3) : 0;
        size_t run = 0;
        for (size_t i = 0; r >= 0 && i + 3 <= len;) {
                if (memcmp(text + i, SPACE_SYMBOL, 3) != 0) {
                        i++;
                        continue;
                }
                if ((r = dse__tok_buf_put(out, text + run, i - run)) >= 0)
                        r = dse__tok_buf_put(out, " ", 1);
                i += 3;
                run = i;
        }
        return r < 0 ? r : dse__tok_buf_put(out, text + run, len - run);
}

static int spm_hf_encode(const struct dse_tokenizer *tok, const char *text, size_t len, int add_special, int32_t *ids,
                         size_t max_ids) {
        const struct spm_hf *h = tok->impl;
        if (!dse__utf8_valid(text, len))
                return -EILSEQ;
        struct id_buf b = {0};
        struct tok_buf prefixed = {0};
        bool lead_special = false;
        int r = 0;
        if (len > 0 && h->legacy) {
                r = encode_split(h, text, len, &b, &lead_special);
        } else if (len > 0) {
                if ((r = prefix_text(h, text, len, &prefixed)) >= 0)
                        r = encode_split(h, prefixed.p, prefixed.len, &b, &lead_special);
                if (r >= 0 && lead_special && b.n > 1 && b.v[0] == h->space_id) {
                        memmove(b.v, b.v + 1, (b.n - 1) * sizeof *b.v);
                        b.n--;
                }
        }
        size_t n = b.n + (add_special && h->add_bos && tok->bos_id >= 0) + (add_special && h->add_eos && tok->eos_id >= 0);
        if (r >= 0 && n > INT_MAX)
                r = -E2BIG;
        if (r >= 0) {
                size_t count = 0;
                if (add_special && h->add_bos && tok->bos_id >= 0 && count++ < max_ids)
                        ids[0] = tok->bos_id;
                for (size_t i = 0; i < b.n; i++, count++)
                        if (count < max_ids)
                                ids[count] = b.v[i];
                if (add_special && h->add_eos && tok->eos_id >= 0 && count < max_ids)
                        ids[count] = tok->eos_id;
                r = (int)n;
        }
        free(b.v);
        free(prefixed.p);
        return r;
}

static int spm_hf_decode(const struct dse_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out, size_t max_len) {
        const struct spm_hf *h = tok->impl;
        return h->sp.ops->decode(&h->sp, ids, n_ids, out, max_len);
}

static const char *spm_hf_piece(const struct dse_tokenizer *tok, int32_t id) {
        const struct spm_hf *h = tok->impl;
        return h->sp.ops->piece(&h->sp, id);
}

static const struct dse_tokenizer_ops spm_hf_ops = {
        .encode = spm_hf_encode,
        .decode = spm_hf_decode,
        .piece = spm_hf_piece,
        .free_impl = spm_hf_free,
};
