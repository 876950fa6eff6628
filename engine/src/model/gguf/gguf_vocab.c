/* A GGUF file's tokenizer (`tokenizer.ggml.*`) as the Hugging Face files the engine's
 * tokenizers read, so the converter embeds them like a folder's:
 *
 *   model "gpt2"  -> tokenizer.json: byte-level BPE with the vocabulary and merges, the
 *                    pre-tokenizer `tokenizer.ggml.pre` names (the model's own split
 *                    patterns, the ones its tokenizer.json carries), control and
 *                    user-defined tokens as added tokens;
 *   model "llama" -> tokenizer.model: a SentencePiece BPE ModelProto with the pieces,
 *                    scores and types, byte fallback when the vocabulary has byte pieces,
 *                    the whitespace handling llama.cpp applies (a dummy prefix as
 *                    `add_space_prefix` says, spaces escaped, none collapsed, no other
 *                    normalisation);
 *
 * and a tokenizer_config.json with the special tokens, add_bos/add_eos and
 * `tokenizer.chat_template`. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "gguf.h"

enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6 };

struct vocab {
        const char *what;
        const struct dse__gguf *g;
        struct dse_diag *reterr;
        uint64_t n;
        const char **text; /* (n) views into the file */
        size_t *len;
        const struct dse__gguf_kv *scores, *types;
};

/* An array key of the given element type and (when want_n) length; NULL if absent. */
static int array_key(struct vocab *v, const char *key, enum dse__gguf_vtype et, int want_n,
                     const struct dse__gguf_kv **ret) {
        const struct dse__gguf_kv *kv = dse__gguf_find(v->g, key);
        *ret = kv;
        if (!kv)
                return 0;
        if (kv->type != DSE_GGUF_ARRAY || (kv->elem_type != et && !(et == DSE_GGUF_I32 && kv->elem_type == DSE_GGUF_U32)))
                return dse__fail(v->reterr, -EBADMSG, "%s: key '%s' is not an array of the expected type", v->what, key);
        if (want_n && kv->count != v->n)
                return dse__fail(v->reterr, -EBADMSG, "%s: key '%s' has %llu entries, tokenizer.ggml.tokens %llu", v->what,
                                 key, (unsigned long long)kv->count, (unsigned long long)v->n);
        return 0;
}

static int token_type(const struct vocab *v, uint64_t i) {
        return v->types ? (int)dse__gguf_arr_num(v->types, i) : TOKEN_NORMAL;
}

static int special_id(struct vocab *v, const char *key, int64_t *ret) {
        *ret = -1;
        int r = dse__gguf_get_i64(v->g, v->what, key, ret, v->reterr);
        if (r == -ENOENT) {
                *ret = -1;
                return 0;
        }
        if (r < 0)
                return r;
        if (*ret < 0 || (uint64_t)*ret >= v->n)
                return dse__fail(v->reterr, -EBADMSG, "%s: key '%s': id %lld is outside the %llu tokens", v->what, key,
                                 (long long)*ret, (unsigned long long)v->n);
        return 0;
}

static int bool_key(struct vocab *v, const char *key, int dflt, int *ret) {
        const struct dse__gguf_kv *kv = dse__gguf_find(v->g, key);
        *ret = dflt;
        if (!kv)
                return 0;
        if (kv->type != DSE_GGUF_BOOL)
                return dse__fail(v->reterr, -EBADMSG, "%s: key '%s' is not a bool", v->what, key);
        *ret = kv->value[0];
        return 0;
}

static cJSON *str_n(const char *s, size_t n) {
        char *c = malloc(n + 1);
        if (!c)
                return NULL;
        memcpy(c, s, n);
        c[n] = 0;
        cJSON *j = cJSON_CreateString(c);
        free(c);
        return j;
}

static int add_token_key(cJSON *o, const char *key, const struct vocab *v, int64_t id) {
        cJSON *j = id >= 0 ? str_n(v->text[id], v->len[id]) : cJSON_CreateNull();
        return j && cJSON_AddItemToObject(o, key, j) ? 0 : -ENOMEM;
}

/* tokenizer_config.json: special tokens, BOS/EOS addition, the chat template. */
static int make_config(struct vocab *v, int dflt_add_bos, char **ret, size_t *ret_len) {
        int64_t bos, eos, unk;
        int add_bos, add_eos, r;
        if ((r = special_id(v, "tokenizer.ggml.bos_token_id", &bos)) < 0 ||
            (r = special_id(v, "tokenizer.ggml.eos_token_id", &eos)) < 0 ||
            (r = special_id(v, "tokenizer.ggml.unknown_token_id", &unk)) < 0 ||
            (r = bool_key(v, "tokenizer.ggml.add_bos_token", dflt_add_bos, &add_bos)) < 0 ||
            (r = bool_key(v, "tokenizer.ggml.add_eos_token", 0, &add_eos)) < 0)
                return r;
        if (add_bos && bos < 0)
                return dse__fail(v->reterr, -EBADMSG, "%s: tokenizer.ggml.add_bos_token is set but there is no bos_token_id",
                                 v->what);
        if (add_eos && eos < 0)
                return dse__fail(v->reterr, -EBADMSG, "%s: tokenizer.ggml.add_eos_token is set but there is no eos_token_id",
                                 v->what);
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return -ENOMEM;
        r = 0;
        if (add_token_key(o, "bos_token", v, bos) < 0 || add_token_key(o, "eos_token", v, eos) < 0 ||
            (unk >= 0 && add_token_key(o, "unk_token", v, unk) < 0) || !cJSON_AddBoolToObject(o, "add_bos_token", add_bos) ||
            !cJSON_AddBoolToObject(o, "add_eos_token", add_eos))
                r = -ENOMEM;
        const char *tmpl;
        size_t tl;
        int t = dse__gguf_get_str(v->g, v->what, "tokenizer.chat_template", &tmpl, &tl, v->reterr);
        if (r == 0 && t == 0) {
                cJSON *j = str_n(tmpl, tl);
                if (!j || !cJSON_AddItemToObject(o, "chat_template", j))
                        r = -ENOMEM;
        } else if (r == 0 && t != -ENOENT) {
                r = t;
        }
        char *s = r == 0 ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (r == 0 && !s)
                r = -ENOMEM;
        if (r < 0)
                return r;
        *ret = s;
        *ret_len = strlen(s);
        return 0;
}

/* ---- gpt2: tokenizer.json -------------------------------------------------------- */

struct pre_type {
        const char *names[3];
        const char *patterns[4];
        int nfc;           /* the model's tokenizer.json normalizes to NFC first */
        int ignore_merges; /* a whole pre-token in the vocabulary is one token */
};

/* The split patterns of each pre-tokenizer name as the models' tokenizer.json files
 * give them (llama.cpp's converter names them by a hash of the tokenizer's output). */
static const struct pre_type pre_types[] = {
        {{"qwen2", "deepseek-r1-qwen", NULL},
         {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
          "\\s+(?!\\S)|\\s+"},
         1, 0},
        {{"llama3", "llama-bpe", NULL},
         {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         0, 1},
        {{"deepseek-v3", NULL, NULL},
         {"\\p{N}{1,3}", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
          "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
         0, 0},
        {{"deepseek-coder", NULL, NULL},
         {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+"},
         0, 0},
        {{"default", "gpt2", NULL},
         {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
         0, 0},
};

static const struct pre_type *find_pre(const char *name, size_t len) {
        for (size_t i = 0; i < sizeof pre_types / sizeof pre_types[0]; i++)
                for (int k = 0; k < 3 && pre_types[i].names[k]; k++)
                        if (strlen(pre_types[i].names[k]) == len && memcmp(pre_types[i].names[k], name, len) == 0)
                                return &pre_types[i];
        return NULL;
}

static cJSON *byte_level(void) {
        cJSON *b = cJSON_CreateObject();
        if (!b || !cJSON_AddStringToObject(b, "type", "ByteLevel") || !cJSON_AddBoolToObject(b, "add_prefix_space", 0) ||
            !cJSON_AddBoolToObject(b, "trim_offsets", 1) || !cJSON_AddBoolToObject(b, "use_regex", 0)) {
                cJSON_Delete(b);
                return NULL;
        }
        return b;
}

static cJSON *pre_tokenizer(const struct pre_type *p) {
        cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray();
        int ok = seq && list && cJSON_AddStringToObject(seq, "type", "Sequence");
        for (int i = 0; ok && i < 4 && p->patterns[i]; i++) {
                cJSON *s = cJSON_CreateObject(), *pat = cJSON_CreateObject();
                ok = s && pat && cJSON_AddStringToObject(pat, "Regex", p->patterns[i]) &&
                     cJSON_AddStringToObject(s, "type", "Split") && cJSON_AddItemToObject(s, "pattern", pat) &&
                     cJSON_AddStringToObject(s, "behavior", "Isolated") && cJSON_AddBoolToObject(s, "invert", 0) &&
                     cJSON_AddItemToArray(list, s);
                if (!ok) {
                        cJSON_Delete(s);
                        cJSON_Delete(pat);
                }
        }
        cJSON *bl = ok ? byte_level() : NULL;
        ok = ok && bl && cJSON_AddItemToArray(list, bl) && cJSON_AddItemToObject(seq, "pretokenizers", list);
        if (!ok) {
                cJSON_Delete(seq);
                cJSON_Delete(list);
                return NULL;
        }
        return seq;
}

static int cmp_token(const void *a, const void *b, void *ctx) {
        const struct vocab *sort_vocab = ctx;
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        size_t n = sort_vocab->len[x] < sort_vocab->len[y] ? sort_vocab->len[x] : sort_vocab->len[y];
        int d = memcmp(sort_vocab->text[x], sort_vocab->text[y], n);
        if (d == 0)
                d = (sort_vocab->len[x] > sort_vocab->len[y]) - (sort_vocab->len[x] < sort_vocab->len[y]);
        return d ? d : (x > y) - (x < y);
}

/* Marks in dup[] every token whose text an earlier id already has. */
static int mark_duplicates(const struct vocab *v, uint8_t *dup) {
        uint32_t *order = malloc(v->n * sizeof *order);
        if (!order)
                return -ENOMEM;
        for (uint64_t i = 0; i < v->n; i++)
                order[i] = (uint32_t)i;
        qsort_r(order, v->n, sizeof *order, cmp_token, (void *)v);
        for (uint64_t i = 1; i < v->n; i++) {
                uint32_t a = order[i - 1], b = order[i];
                if (v->len[a] == v->len[b] && memcmp(v->text[a], v->text[b], v->len[a]) == 0) {
                        dup[b] = 1;
                        order[i] = a; /* the first id stays the one compared against */
                }
        }
        free(order);
        return 0;
}

static int make_bpe_json(struct vocab *v, char **ret, size_t *ret_len) {
        const char *pre_name = "default";
        size_t pre_len = 7;
        int r = dse__gguf_get_str(v->g, v->what, "tokenizer.ggml.pre", &pre_name, &pre_len, v->reterr);
        if (r < 0 && r != -ENOENT)
                return r;
        if (r == -ENOENT) {
                pre_name = "default";
                pre_len = 7;
        }
        const struct pre_type *pre = find_pre(pre_name, pre_len);
        if (!pre)
                return dse__fail(v->reterr, -EOPNOTSUPP,
                                 "%s: tokenizer.ggml.pre '%.*s' is not supported (qwen2, deepseek-r1-qwen, llama3, "
                                 "llama-bpe, deepseek-v3, deepseek-coder, default)",
                                 v->what, (int)(pre_len > 64 ? 64 : pre_len), pre_name);
        const struct dse__gguf_kv *merges;
        if ((r = array_key(v, "tokenizer.ggml.merges", DSE_GGUF_STRING, 0, &merges)) < 0)
                return r;
        if (!merges)
                return dse__fail(v->reterr, -EBADMSG, "%s: a gpt2 tokenizer needs tokenizer.ggml.merges", v->what);
        uint8_t *dup = calloc(v->n, 1);
        if (!dup || (r = mark_duplicates(v, dup)) < 0) {
                free(dup);
                return -ENOMEM;
        }
        cJSON *root = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject(),
              *mlist = cJSON_CreateArray(), *added = cJSON_CreateArray();
        int ok = root && model && vocab && mlist && added;
        for (uint64_t i = 0; ok && i < v->n; i++) {
                cJSON *id = cJSON_CreateNumber((double)i);
                char *key = malloc(v->len[i] + 1);
                ok = id && key;
                if (ok) {
                        memcpy(key, v->text[i], v->len[i]);
                        key[v->len[i]] = 0;
                        /* a repeated token keeps its first id, as llama.cpp's text-to-id map does */
                        if (!dup[i])
                                ok = cJSON_AddItemToObject(vocab, key, id) != 0;
                        else
                                cJSON_Delete(id);
                }
                free(key);
                int t = token_type(v, i);
                if (ok && (t == TOKEN_CONTROL || t == TOKEN_USER)) {
                        cJSON *a = cJSON_CreateObject(), *content = str_n(v->text[i], v->len[i]);
                        ok = a && content && cJSON_AddNumberToObject(a, "id", (double)i) &&
                             cJSON_AddItemToObject(a, "content", content) && cJSON_AddBoolToObject(a, "single_word", 0) &&
                             cJSON_AddBoolToObject(a, "lstrip", 0) && cJSON_AddBoolToObject(a, "rstrip", 0) &&
                             cJSON_AddBoolToObject(a, "normalized", t == TOKEN_USER) &&
                             cJSON_AddBoolToObject(a, "special", t == TOKEN_CONTROL) && cJSON_AddItemToArray(added, a);
                        if (!ok && a && !content)
                                cJSON_Delete(a);
                }
        }
        const uint8_t *pos = merges->value;
        for (uint64_t i = 0; ok && i < merges->count; i++) {
                const char *s;
                size_t len;
                dse__gguf_str_next(&pos, &s, &len);
                cJSON *m = str_n(s, len);
                ok = m && cJSON_AddItemToArray(mlist, m);
        }
        cJSON *pt = ok ? pre_tokenizer(pre) : NULL, *dec = ok ? byte_level() : NULL, *norm = NULL;
        ok = ok && pt && dec;
        if (ok && pre->nfc) {
                norm = cJSON_CreateObject();
                ok = norm && cJSON_AddStringToObject(norm, "type", "NFC");
        }
        ok = ok && cJSON_AddStringToObject(model, "type", "BPE") && cJSON_AddBoolToObject(model, "byte_fallback", 0) &&
             cJSON_AddBoolToObject(model, "ignore_merges", pre->ignore_merges) &&
             cJSON_AddItemToObject(model, "vocab", vocab) && cJSON_AddItemToObject(model, "merges", mlist);
        if (ok) {
                vocab = mlist = NULL;
                ok = cJSON_AddStringToObject(root, "version", "1.0") && cJSON_AddItemToObject(root, "added_tokens", added);
        }
        if (ok) {
                added = NULL;
                ok = cJSON_AddItemToObject(root, "normalizer", norm ? norm : cJSON_CreateNull());
        }
        if (ok) {
                norm = NULL;
                ok = cJSON_AddItemToObject(root, "pre_tokenizer", pt);
        }
        if (ok) {
                pt = NULL;
                ok = cJSON_AddItemToObject(root, "decoder", dec);
        }
        if (ok) {
                dec = NULL;
                ok = cJSON_AddItemToObject(root, "model", model);
        }
        if (ok)
                model = NULL;
        char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
        free(dup);
        cJSON_Delete(root);
        cJSON_Delete(model);
        cJSON_Delete(vocab);
        cJSON_Delete(mlist);
        cJSON_Delete(added);
        cJSON_Delete(pt);
        cJSON_Delete(dec);
        cJSON_Delete(norm);
        if (!s)
                return -ENOMEM;
        *ret = s;
        *ret_len = strlen(s);
        return 0;
}

/* ---- llama: a SentencePiece ModelProto ------------------------------------------- */

struct pb {
        uint8_t *p;
        size_t n, cap;
        int err;
};

static void pb_put(struct pb *b, const void *p, size_t n) {
        if (b->err)
                return;
        if (b->n + n > b->cap) {
                size_t cap = b->cap ? b->cap * 2 : 1 << 16;
                while (cap < b->n + n)
                        cap *= 2;
                uint8_t *q = realloc(b->p, cap);
                if (!q) {
                        b->err = -ENOMEM;
                        return;
                }
                b->p = q;
                b->cap = cap;
        }
        memcpy(b->p + b->n, p, n);
        b->n += n;
}

static void pb_varint(struct pb *b, uint64_t v) {
        uint8_t x[10];
        int n = 0;
        do {
                x[n] = (uint8_t)(v & 0x7f);
                v >>= 7;
                if (v)
                        x[n] |= 0x80;
                n++;
        } while (v);
        pb_put(b, x, (size_t)n);
}

static void pb_bytes(struct pb *b, int field, const void *p, size_t n) {
        pb_varint(b, (uint64_t)field << 3 | 2);
        pb_varint(b, n);
        pb_put(b, p, n);
}

static void pb_int(struct pb *b, int field, uint64_t v) {
        pb_varint(b, (uint64_t)field << 3);
        pb_varint(b, v);
}

static int make_spm_model(struct vocab *v, char **ret, size_t *ret_len) {
        int add_space;
        int r = bool_key(v, "tokenizer.ggml.add_space_prefix", 1, &add_space);
        if (r < 0)
                return r;
        if (!v->scores)
                return dse__fail(v->reterr, -EBADMSG, "%s: a llama tokenizer needs tokenizer.ggml.scores", v->what);
        struct pb out = {0}, piece = {0};
        int n_bytes = 0;
        for (uint64_t i = 0; i < v->n && !out.err && !piece.err; i++) {
                int t = token_type(v, i);
                if (t < TOKEN_NORMAL || t > TOKEN_BYTE) {
                        free(out.p);
                        free(piece.p);
                        return dse__fail(v->reterr, -EBADMSG, "%s: token %llu: token type %d is not 1..6", v->what,
                                         (unsigned long long)i, t);
                }
                float score = (float)dse__gguf_arr_num(v->scores, i);
                piece.n = 0;
                pb_bytes(&piece, 1, v->text[i], v->len[i]);
                uint32_t bits;
                memcpy(&bits, &score, 4);
                uint8_t f[5] = {2 << 3 | 5, (uint8_t)bits, (uint8_t)(bits >> 8), (uint8_t)(bits >> 16), (uint8_t)(bits >> 24)};
                pb_put(&piece, f, 5);
                pb_int(&piece, 3, (uint64_t)t);
                pb_bytes(&out, 1, piece.p, piece.n);
                n_bytes += t == TOKEN_BYTE;
        }
        /* TrainerSpec: BPE, byte fallback when the vocabulary has byte pieces, the
         * special ids (-1: none, a 10-byte varint as protobuf writes negative int32) */
        int64_t unk, bos, eos;
        if ((r = special_id(v, "tokenizer.ggml.unknown_token_id", &unk)) < 0 ||
            (r = special_id(v, "tokenizer.ggml.bos_token_id", &bos)) < 0 ||
            (r = special_id(v, "tokenizer.ggml.eos_token_id", &eos)) < 0) {
                free(out.p);
                free(piece.p);
                return r;
        }
        struct pb spec = {0}, norm = {0};
        pb_int(&spec, 3, 2);
        pb_int(&spec, 35, n_bytes > 0);
        pb_int(&spec, 40, (uint64_t)unk);
        pb_int(&spec, 41, (uint64_t)bos);
        pb_int(&spec, 42, (uint64_t)eos);
        pb_bytes(&out, 2, spec.p, spec.n);
        /* NormalizerSpec: no character map; llama.cpp escapes spaces, adds the dummy
         * prefix as add_space_prefix says, and never collapses whitespace */
        pb_bytes(&norm, 1, "identity", 8);
        pb_int(&norm, 3, (uint64_t)add_space);
        pb_int(&norm, 4, 0);
        pb_int(&norm, 5, 1);
        pb_bytes(&out, 3, norm.p, norm.n);
        r = out.err ? out.err : piece.err ? piece.err : spec.err ? spec.err : norm.err;
        free(piece.p);
        free(spec.p);
        free(norm.p);
        if (r < 0) {
                free(out.p);
                return r;
        }
        *ret = (char *)out.p;
        *ret_len = out.n;
        return 0;
}

int dse__gguf_tokenizer_files(const struct dse__gguf *g, const char *what, struct dse__gguf_tokenizer *ret,
                              struct dse_diag *reterr) {
        memset(ret, 0, sizeof *ret);
        const char *model;
        size_t ml;
        int r = dse__gguf_get_str(g, what, "tokenizer.ggml.model", &model, &ml, reterr);
        if (r == -ENOENT || (r == 0 && ((ml == 4 && memcmp(model, "none", 4) == 0) ||
                                        (ml == 8 && memcmp(model, "no_vocab", 8) == 0)))) {
                dse__log(DSE_LOG_INFO, "%s: no tokenizer (tokenizer.ggml.model absent or none): the model takes token ids",
                         what);
                return 0;
        }
        if (r < 0)
                return r;
        int gpt2 = ml == 4 && memcmp(model, "gpt2", 4) == 0, llama = ml == 5 && memcmp(model, "llama", 5) == 0;
        if (!gpt2 && !llama)
                return dse__fail(reterr, -EOPNOTSUPP, "%s: tokenizer.ggml.model '%.*s' is not supported (gpt2, llama)", what,
                                 (int)(ml > 64 ? 64 : ml), model);
        struct vocab v = {.what = what, .g = g, .reterr = reterr};
        const struct dse__gguf_kv *tokens;
        if ((r = array_key(&v, "tokenizer.ggml.tokens", DSE_GGUF_STRING, 0, &tokens)) < 0)
                return r;
        if (!tokens || tokens->count == 0)
                return dse__fail(reterr, -EBADMSG, "%s: tokenizer.ggml.tokens is missing or empty", what);
        if (tokens->count > INT32_MAX)
                return dse__fail(reterr, -EBADMSG, "%s: tokenizer.ggml.tokens has too many entries", what);
        v.n = tokens->count;
        if ((r = array_key(&v, "tokenizer.ggml.scores", DSE_GGUF_F32, 1, &v.scores)) < 0 ||
            (r = array_key(&v, "tokenizer.ggml.token_type", DSE_GGUF_I32, 1, &v.types)) < 0)
                return r;
        v.text = malloc(v.n * sizeof *v.text);
        v.len = malloc(v.n * sizeof *v.len);
        if (!v.text || !v.len) {
                r = -ENOMEM;
                goto out;
        }
        const uint8_t *pos = tokens->value;
        for (uint64_t i = 0; i < v.n; i++) {
                dse__gguf_str_next(&pos, &v.text[i], &v.len[i]);
                if (v.len[i] == 0) {
                        r = dse__fail(reterr, -EBADMSG, "%s: tokenizer.ggml.tokens entry %llu is empty", what,
                                      (unsigned long long)i);
                        goto out;
                }
                if (v.scores && isnan(dse__gguf_arr_num(v.scores, i)))
                        dse__log(DSE_LOG_WARN, "%s: tokenizer.ggml.scores entry %llu is NaN", what, (unsigned long long)i);
        }
        r = gpt2 ? make_bpe_json(&v, &ret->json, &ret->json_len) : make_spm_model(&v, &ret->spm, &ret->spm_len);
        if (r == 0)
                r = make_config(&v, llama, &ret->config, &ret->config_len);
out:
        free(v.text);
        free(v.len);
        if (r < 0)
                dse__gguf_tokenizer_free(ret);
        return r;
}

void dse__gguf_tokenizer_free(struct dse__gguf_tokenizer *t) {
        free(t->json);
        free(t->spm);
        free(t->config);
        memset(t, 0, sizeof *t);
}
