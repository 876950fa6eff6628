/* The text stages of a tokenizer.json pipeline, after tokenizers' normalizers/,
 * pre_tokenizers/ and decoders/: each stage here reproduces the Rust behaviour on the
 * strings (offsets are not tracked; the engine never needs them). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "bpe_impl.h"

void dse__bpe_ws_init(struct bpe_ws *ws, const struct bpe *bpe) {
        memset(ws, 0, sizeof *ws);
        ws->bpe = bpe;
}

void dse__bpe_ws_done(struct bpe_ws *ws) {
        pcre2_match_data_free(ws->md);
        dse__tok_buf_done(&ws->norm);
        dse__tok_buf_done(&ws->tmp);
        for (int i = 0; i < BPE_MAX_LEVELS; i++) {
                dse__tok_buf_done(&ws->pre[i]);
                dse__tok_buf_done(&ws->map[i]);
                dse__tok_buf_done(&ws->spans[i]);
        }
        dse__tok_buf_done(&ws->word);
        dse__tok_buf_done(&ws->heap);
        dse__tok_buf_done(&ws->cache_keys);
        dse__tok_buf_done(&ws->cache_ids);
        free(ws->cache);
        memset(ws, 0, sizeof *ws);
}

static int ws_md(struct bpe_ws *ws) {
        if (!ws->md && !(ws->md = pcre2_match_data_create(1, NULL)))
                return -ENOMEM;
        return 0;
}

static int is_ascii(const char *s, size_t len) {
        for (size_t i = 0; i < len; i++)
                if ((unsigned char)s[i] >= 0x80)
                        return 0;
        return 1;
}

/* Finds the next match of a literal (lit != NULL) or a regex, onig find_iter style. */
static int find_next(const struct bpe_regex *re, pcre2_match_data *md, const char *lit, size_t lit_len, const char *s,
                     size_t len, size_t pos, size_t *ms, size_t *me) {
        if (lit) {
                if (pos > len || !lit_len)
                        return 0;
                const char *p = memmem(s + pos, len - pos, lit, lit_len);
                if (!p)
                        return 0;
                *ms = (size_t)(p - s);
                *me = *ms + lit_len;
                return 1;
        }
        return dse__bpe_regex_find(re, md, s, len, pos, ms, me);
}

static size_t char_len_at(const char *s, size_t len, size_t pos) {
        int32_t cp;
        return pos < len ? (size_t)dse__utf8_next(s + pos, len - pos, &cp) : 1;
}

/* The matches over s that replace and split act on: an empty match where the previous
 * match ended is skipped, and the search goes on one character past an empty match. */
struct match_iter {
        const struct bpe_regex *re;
        pcre2_match_data *md;
        const char *lit;
        size_t lit_len;
        const char *s;
        size_t len, pos, last_end;
};

static int match_iter_init(struct match_iter *it, struct bpe_ws *ws, const struct bpe_regex *re, const char *lit,
                           size_t lit_len, const char *s, size_t len) {
        int r;
        if (!lit && (r = ws_md(ws)) < 0)
                return r;
        *it = (struct match_iter){re, ws->md, lit, lit_len, s, len, 0, SIZE_MAX};
        return 0;
}

/* 1 with the next match in [*ms, *me), 0 after the last one, or -errno. */
static int match_next(struct match_iter *it, size_t *ms, size_t *me) {
        while (it->pos <= it->len) {
                int r = find_next(it->re, it->md, it->lit, it->lit_len, it->s, it->len, it->pos, ms, me);
                if (r <= 0)
                        return r;
                if (*ms == *me && it->last_end == *me) {
                        it->pos = *me + char_len_at(it->s, it->len, *me);
                        continue;
                }
                it->last_end = *me;
                it->pos = *ms == *me ? *me + char_len_at(it->s, it->len, *me) : *me;
                return 1;
        }
        return 0;
}

size_t dse__bpe_growth_limit(size_t len) {
        return len > (SIZE_MAX - 4096) / 64 ? SIZE_MAX : len * 64 + 4096;
}

/* Replaces every match with content, appending to out (NormalizedString::replace and the
 * Replace decoder); -E2BIG once out would pass limit bytes. */
static int replace_all(struct bpe_ws *ws, const struct bpe_regex *re, const char *lit, size_t lit_len,
                       const char *content, size_t content_len, const char *s, size_t len, struct tok_buf *out,
                       size_t limit) {
        struct match_iter it;
        size_t prev = 0, ms, me;
        int r = match_iter_init(&it, ws, re, lit, lit_len, s, len);
        if (r < 0)
                return r;
        while ((r = match_next(&it, &ms, &me)) > 0) {
                if (out->len + (ms - prev) + content_len > limit)
                        return -E2BIG;
                if ((r = dse__tok_buf_put(out, s + prev, ms - prev)) < 0 ||
                    (r = dse__tok_buf_put(out, content, content_len)) < 0)
                        return r;
                prev = me;
        }
        if (r < 0)
                return r;
        return dse__tok_buf_put(out, s + prev, len - prev);
}

/* ---- normalizers --------------------------------------------------------------------- */

static int unicode_normalize(int type, const char *s, size_t len, struct tok_buf *out) {
        if (is_ascii(s, len))
                return dse__tok_buf_put(out, s, len);
        int opts = UTF8PROC_STABLE;
        switch (type) {
        case BPE_NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
        case BPE_NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
        case BPE_NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                          (utf8proc_option_t)opts);
        if (n < 0)
                return n == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EILSEQ;
        int r = dse__tok_buf_put(out, dst, (size_t)n);
        free(dst);
        return r;
}

static int lowercase(const char *s, size_t len, struct tok_buf *out) {
        int r = dse__tok_buf_reserve(out, len * 2 + 4);
        for (size_t i = 0; i < len && r == 0;) {
                int32_t cp;
                i += (size_t)dse__utf8_next(s + i, len - i, &cp);
                char tmp[8];
                int n;
                if (cp == 0x130) { /* Rust: 'İ'.to_lowercase() == "i\u{307}" */
                        memcpy(tmp, "i\xCC\x87", 3);
                        n = 3;
                } else {
                        n = dse__utf8_encode(utf8proc_tolower(cp), tmp);
                }
                r = dse__tok_buf_put(out, tmp, (size_t)n);
        }
        return r;
}

static int strip_ws(const char *s, size_t len, int left, int right, struct tok_buf *out) {
        size_t a = 0, b = len;
        while (left && a < b) {
                int32_t cp;
                int n = dse__utf8_next(s + a, b - a, &cp);
                if (!dse__unicode_white_space(cp))
                        break;
                a += (size_t)n;
        }
        while (right && b > a) {
                size_t k = dse__utf8_char_before(s, a, b);
                int32_t cp;
                dse__utf8_next(s + k, b - k, &cp);
                if (!dse__unicode_white_space(cp))
                        break;
                b = k;
        }
        return dse__tok_buf_put(out, s + a, b - a);
}

static int strip_accents(const char *s, size_t len, struct tok_buf *out) {
        for (size_t i = 0; i < len;) {
                int32_t cp;
                int n = dse__utf8_next(s + i, len - i, &cp);
                utf8proc_category_t c = utf8proc_category(cp);
                if (c != UTF8PROC_CATEGORY_MN && c != UTF8PROC_CATEGORY_MC && c != UTF8PROC_CATEGORY_ME) {
                        int r = dse__tok_buf_put(out, s + i, (size_t)n);
                        if (r < 0)
                                return r;
                }
                i += (size_t)n;
        }
        return 0;
}

static int norm_one(struct bpe_ws *ws, const struct bpe_norm *nm, const char *s, size_t len, struct tok_buf *out,
                    size_t limit) {
        switch (nm->type) {
        case BPE_NORM_NFC:
        case BPE_NORM_NFD:
        case BPE_NORM_NFKC:
        case BPE_NORM_NFKD:
                return unicode_normalize(nm->type, s, len, out);
        case BPE_NORM_LOWERCASE:
                return lowercase(s, len, out);
        case BPE_NORM_PREPEND: {
                int r = 0;
                if (len) /* tokenizers: Prepend leaves an empty string empty */
                        r = dse__tok_buf_put(out, nm->a, nm->a_len);
                return r < 0 ? r : dse__tok_buf_put(out, s, len);
        }
        case BPE_NORM_REPLACE:
                return replace_all(ws, &nm->re, nm->a, nm->a_len, nm->b, nm->b_len, s, len, out, limit);
        case BPE_NORM_STRIP:
                return strip_ws(s, len, nm->left, nm->right, out);
        case BPE_NORM_STRIP_ACCENTS:
                return strip_accents(s, len, out);
        }
        return -EINVAL;
}

int dse__bpe_normalize(struct bpe_ws *ws, const char *s, size_t len, const char **ret_s, size_t *ret_len) {
        const struct bpe *bpe = ws->bpe;
        struct tok_buf *cur = &ws->norm, *other = &ws->tmp;
        size_t limit = dse__bpe_growth_limit(len);
        for (int i = 0; i < bpe->n_norms; i++) {
                struct tok_buf *dst = (s == cur->p) ? other : cur;
                dst->len = 0;
                /* a step other than Replace grows its input by a bounded factor, so the
                 * limit is checked after it */
                int r = norm_one(ws, &bpe->norms[i], s, len, dst, limit);
                if (r < 0)
                        return r;
                if (dst->len > limit)
                        return -E2BIG;
                s = dst->p ? dst->p : "";
                len = dst->len;
        }
        *ret_s = s;
        *ret_len = len;
        return 0;
}

int dse__bpe_normalize_string(const struct bpe *bpe, const char *s, size_t len, char **ret, size_t *ret_len) {
        struct bpe_ws ws;
        dse__bpe_ws_init(&ws, bpe);
        const char *o;
        size_t n;
        int r = dse__bpe_normalize(&ws, s, len, &o, &n);
        char *copy = NULL;
        if (r == 0 && !(copy = malloc(n + 1)))
                r = -ENOMEM;
        if (r == 0) {
                memcpy(copy, o, n);
                copy[n] = '\0';
                *ret = copy;
                *ret_len = n;
        }
        dse__bpe_ws_done(&ws);
        return r;
}

/* ---- pre-tokenizers ------------------------------------------------------------------ */

struct span {
        size_t start, end;
        int match;
};

/* NormalizedString::split: the pieces between and at matches, arranged by behavior. */
static int split_spans(struct bpe_ws *ws, struct tok_buf *out, const struct bpe_regex *re, const char *lit,
                       size_t lit_len, enum bpe_split_behavior behavior, int invert, const char *s, size_t len,
                       size_t *ret_n) {
        struct match_iter it;
        size_t prev = 0, ms, me;
        out->len = 0;
        int r = match_iter_init(&it, ws, re, lit, lit_len, s, len);
        if (r < 0)
                return r;
        while ((r = match_next(&it, &ms, &me)) > 0) {
                if (prev != ms) {
                        struct span g = {prev, ms, 0};
                        if ((r = dse__tok_buf_put(out, &g, sizeof g)) < 0)
                                return r;
                }
                struct span m = {ms, me, 1};
                if ((r = dse__tok_buf_put(out, &m, sizeof m)) < 0)
                        return r;
                prev = me;
        }
        if (r < 0)
                return r;
        if (prev != len) {
                struct span g = {prev, len, 0};
                if ((r = dse__tok_buf_put(out, &g, sizeof g)) < 0)
                        return r;
        }
        struct span *sp = (struct span *)out->p;
        size_t n = out->len / sizeof *sp, w = 0;
        if (invert)
                for (size_t i = 0; i < n; i++)
                        sp[i].match = !sp[i].match;
        int prev_match = 0;
        switch (behavior) {
        case BPE_SPLIT_ISOLATED:
                w = n;
                break;
        case BPE_SPLIT_REMOVED:
                for (size_t i = 0; i < n; i++)
                        if (!sp[i].match)
                                sp[w++] = sp[i];
                break;
        case BPE_SPLIT_CONTIGUOUS:
                for (size_t i = 0; i < n; i++) {
                        if (sp[i].match == prev_match && w)
                                sp[w - 1].end = sp[i].end;
                        else
                                sp[w++] = sp[i];
                        prev_match = sp[i].match;
                }
                break;
        case BPE_SPLIT_MERGED_WITH_PREVIOUS:
                for (size_t i = 0; i < n; i++) {
                        if (sp[i].match && !prev_match && w)
                                sp[w - 1].end = sp[i].end;
                        else
                                sp[w++] = sp[i];
                        prev_match = sp[i].match;
                }
                break;
        case BPE_SPLIT_MERGED_WITH_NEXT: {
                /* folded from the back, as tokenizers does; results land at [k, n) */
                size_t k = n;
                for (size_t i = n; i-- > 0;) {
                        int m = sp[i].match;
                        if (m && !prev_match && k < n)
                                sp[k].start = sp[i].start;
                        else
                                sp[--k] = sp[i];
                        prev_match = m;
                }
                for (size_t i = k; i < n; i++)
                        sp[w++] = sp[i];
                break;
        }
        }
        size_t kept = 0;
        for (size_t i = 0; i < w; i++)
                if (sp[i].end > sp[i].start)
                        sp[kept++] = sp[i];
        *ret_n = kept;
        return 0;
}

static int run_level(struct bpe_ws *ws, int k, const char *s, size_t len, int at_start);

static int byte_level_piece(struct bpe_ws *ws, int k, const char *s, size_t len, int at_start) {
        const struct bpe *bpe = ws->bpe;
        if (k == bpe->n_pretoks - 1 && bpe->raw_bytes_model)
                return dse__bpe_model_encode(ws, s, len, 1);
        struct tok_buf *m = &ws->map[k];
        m->len = 0;
        int r = dse__tok_buf_reserve(m, len * 2);
        if (r < 0)
                return r;
        for (size_t i = 0; i < len; i++)
                m->len += (size_t)dse__utf8_encode(dse__bpe_byte_to_cp((uint8_t)s[i]), m->p + m->len);
        return run_level(ws, k + 1, m->p, m->len, at_start);
}

static int run_spans(struct bpe_ws *ws, int k, const char *s, size_t n, int at_start, int byte_level) {
        /* ws->spans[k] holds n spans over s; the buffer is stable while deeper levels run */
        for (size_t i = 0; i < n; i++) {
                const struct span *sp = (const struct span *)ws->spans[k].p + i;
                int st = at_start && sp->start == 0;
                int r = byte_level ? byte_level_piece(ws, k, s + sp->start, sp->end - sp->start, st)
                                   : run_level(ws, k + 1, s + sp->start, sp->end - sp->start, st);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int run_level(struct bpe_ws *ws, int k, const char *s, size_t len, int at_start) {
        const struct bpe *bpe = ws->bpe;
        if (k == bpe->n_pretoks)
                return dse__bpe_model_encode(ws, s, len, 0);
        const struct bpe_pretok *pt = &bpe->pretoks[k];
        size_t n;
        int r;
        switch (pt->type) {
        case BPE_PRETOK_SPLIT:
                if ((r = split_spans(ws, &ws->spans[k], &pt->re, NULL, 0, pt->behavior, pt->invert, s, len, &n)) < 0)
                        return r;
                return run_spans(ws, k, s, n, at_start, 0);
        case BPE_PRETOK_BYTELEVEL:
                if (pt->add_prefix_space && s[0] != ' ') {
                        struct tok_buf *p = &ws->pre[k];
                        p->len = 0;
                        if ((r = dse__tok_buf_put(p, " ", 1)) < 0 || (r = dse__tok_buf_put(p, s, len)) < 0)
                                return r;
                        s = p->p;
                        len = p->len;
                }
                if (!pt->use_regex)
                        return byte_level_piece(ws, k, s, len, at_start);
                if ((r = split_spans(ws, &ws->spans[k], &pt->re, NULL, 0, BPE_SPLIT_ISOLATED, 0, s, len, &n)) < 0)
                        return r;
                return run_spans(ws, k, s, n, at_start, 1);
        case BPE_PRETOK_METASPACE: {
                /* spaces become the replacement, then the replacement is prepended
                 * (per the scheme) unless the text already starts with it; room for the
                 * prefix is reserved in front so it costs no copy */
                struct tok_buf *p = &ws->pre[k];
                size_t rl = (size_t)pt->replacement_len;
                p->len = 0;
                if ((r = dse__tok_buf_put(p, pt->replacement, rl)) < 0 ||
                    (r = replace_all(ws, NULL, " ", 1, pt->replacement, rl, s, len, p, SIZE_MAX)) < 0)
                        return r;
                s = p->p + rl;
                len = p->len - rl;
                int prepend = pt->prepend_scheme == BPE_PREPEND_ALWAYS ||
                              (pt->prepend_scheme == BPE_PREPEND_FIRST && at_start);
                if (prepend && !(len >= rl && memcmp(s, pt->replacement, rl) == 0)) {
                        s -= rl;
                        len += rl;
                }
                if (!pt->split)
                        return run_level(ws, k + 1, s, len, at_start);
                if ((r = split_spans(ws, &ws->spans[k], NULL, pt->replacement, (size_t)pt->replacement_len,
                                     BPE_SPLIT_MERGED_WITH_NEXT, 0, s, len, &n)) < 0)
                        return r;
                return run_spans(ws, k, s, n, at_start, 0);
        }
        }
        return -EINVAL;
}

int dse__bpe_pretokenize(struct bpe_ws *ws, const char *s, size_t len, int at_start) {
        if (!len)
                return 0;
        return run_level(ws, 0, s, len, at_start);
}

/* ---- decoders ------------------------------------------------------------------------ */

/* A list of token strings: text in one buffer, (offset, length) pairs in another. */
struct tlist {
        struct tok_buf text, spans;
        size_t n;
};

static int tl_add(struct tlist *l, const char *s, size_t len) {
        size_t pair[2] = {l->text.len, len};
        int r = dse__tok_buf_put(&l->text, s, len);
        if (r == 0)
                r = dse__tok_buf_put(&l->spans, pair, sizeof pair);
        if (r == 0)
                l->n++;
        return r;
}

static const char *tl_get(const struct tlist *l, size_t i, size_t *ret_len) {
        const size_t *pair = (const size_t *)l->spans.p + 2 * i;
        *ret_len = pair[1];
        return l->text.p ? l->text.p + pair[0] : ""; /* only empty tokens so far: no buffer yet */
}

static void tl_reset(struct tlist *l) {
        l->text.len = l->spans.len = 0;
        l->n = 0;
}

static void tl_done(struct tlist *l) {
        dse__tok_buf_done(&l->text);
        dse__tok_buf_done(&l->spans);
}

/* String::from_utf8_lossy: one U+FFFD per maximal invalid subsequence. */
static int utf8_lossy(const char *str, size_t len, struct tok_buf *out) {
        size_t i = 0;
        while (i < len) {
                size_t ok = dse__utf8_valid_prefix(str + i, len - i);
                int r = dse__tok_buf_put(out, str + i, ok);
                if (r < 0)
                        return r;
                i += ok;
                if (i >= len)
                        break;
                if ((r = dse__tok_buf_put(out, "\xEF\xBF\xBD", 3)) < 0)
                        return r;
                i += dse__utf8_invalid_len(str + i, len - i);
        }
        return 0;
}

static int dec_one(struct bpe_ws *ws, const struct bpe_dec *d, const struct tlist *in, struct tlist *out,
                   size_t limit) {
        int r = 0;
        size_t len = 0;
        const char *t = NULL;
        switch (d->type) {
        case BPE_DEC_BYTELEVEL: {
                /* per token: its alphabet bytes when every char is in the ByteLevel map,
                 * its own UTF-8 otherwise; then one lossy UTF-8 string */
                struct tok_buf raw = {0};
                for (size_t i = 0; i < in->n && r == 0; i++) {
                        t = tl_get(in, i, &len);
                        size_t mark = raw.len;
                        int all = 1;
                        for (size_t k = 0; k < len && r == 0;) {
                                int32_t cp;
                                k += (size_t)dse__utf8_next(t + k, len - k, &cp);
                                int b = dse__bpe_cp_to_byte(cp);
                                if (b < 0) {
                                        all = 0;
                                        break;
                                }
                                uint8_t byte = (uint8_t)b;
                                r = dse__tok_buf_put(&raw, &byte, 1);
                        }
                        if (r == 0 && !all) {
                                raw.len = mark;
                                r = dse__tok_buf_put(&raw, t, len);
                        }
                }
                struct tok_buf txt = {0};
                if (r == 0)
                        r = utf8_lossy(raw.p ? raw.p : "", raw.len, &txt);
                if (r == 0)
                        r = tl_add(out, txt.p ? txt.p : "", txt.len);
                dse__tok_buf_done(&raw);
                dse__tok_buf_done(&txt);
                return r;
        }
        case BPE_DEC_REPLACE:
                for (size_t i = 0; i < in->n && r == 0; i++) {
                        t = tl_get(in, i, &len);
                        size_t mark = out->text.len;
                        r = replace_all(ws, &d->re, d->a, d->a_len, d->b, d->b_len, t, len, &out->text, limit);
                        if (r == 0) {
                                size_t pair[2] = {mark, out->text.len - mark};
                                r = dse__tok_buf_put(&out->spans, pair, sizeof pair);
                                out->n++;
                        }
                }
                return r;
        case BPE_DEC_BYTE_FALLBACK: {
                struct tok_buf bytes = {0};
                for (size_t i = 0; i <= in->n && r == 0; i++) {
                        int byte = -1;
                        if (i < in->n) {
                                t = tl_get(in, i, &len);
                                if (len == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>') {
                                        int hi = t[3], lo = t[4];
                                        int hv = hi >= '0' && hi <= '9' ? hi - '0'
                                               : (hi | 32) >= 'a' && (hi | 32) <= 'f' ? (hi | 32) - 'a' + 10 : -1;
                                        int lv = lo >= '0' && lo <= '9' ? lo - '0'
                                               : (lo | 32) >= 'a' && (lo | 32) <= 'f' ? (lo | 32) - 'a' + 10 : -1;
                                        if (hv >= 0 && lv >= 0)
                                                byte = hv << 4 | lv;
                                }
                        }
                        if (byte >= 0) {
                                uint8_t b = (uint8_t)byte;
                                r = dse__tok_buf_put(&bytes, &b, 1);
                                continue;
                        }
                        if (bytes.len) {
                                /* a run of byte tokens: its text if valid UTF-8, else one
                                 * U+FFFD per byte */
                                if (dse__utf8_valid_prefix(bytes.p, bytes.len) == bytes.len)
                                        r = tl_add(out, bytes.p, bytes.len);
                                else
                                        for (size_t k = 0; k < bytes.len && r == 0; k++)
                                                r = tl_add(out, "\xEF\xBF\xBD", 3);
                                bytes.len = 0;
                        }
                        if (r == 0 && i < in->n)
                                r = tl_add(out, t, len);
                }
                dse__tok_buf_done(&bytes);
                return r;
        }
        case BPE_DEC_FUSE: {
                size_t mark = out->text.len;
                for (size_t i = 0; i < in->n && r == 0; i++) {
                        t = tl_get(in, i, &len);
                        r = dse__tok_buf_put(&out->text, t, len);
                }
                size_t pair[2] = {mark, out->text.len - mark};
                if (r == 0 && (r = dse__tok_buf_put(&out->spans, pair, sizeof pair)) == 0)
                        out->n++;
                return r;
        }
        case BPE_DEC_STRIP:
                for (size_t i = 0; i < in->n && r == 0; i++) {
                        t = tl_get(in, i, &len);
                        size_t a = 0, b = len;
                        for (int k = 0; k < d->start && a < b; k++) {
                                int32_t cp;
                                int n = dse__utf8_next(t + a, b - a, &cp);
                                if (cp != d->strip_cp)
                                        break;
                                a += (size_t)n;
                        }
                        for (int k = 0; k < d->stop && b > a; k++) {
                                size_t q = dse__utf8_char_before(t, a, b);
                                int32_t cp;
                                dse__utf8_next(t + q, b - q, &cp);
                                if (cp != d->strip_cp)
                                        break;
                                b = q;
                        }
                        r = tl_add(out, t + a, b - a);
                }
                return r;
        case BPE_DEC_METASPACE:
                for (size_t i = 0; i < in->n && r == 0; i++) {
                        t = tl_get(in, i, &len);
                        size_t mark = out->text.len;
                        for (size_t k = 0; k < len && r == 0;) {
                                int32_t cp;
                                int n = dse__utf8_next(t + k, len - k, &cp);
                                if (cp != d->replacement_cp)
                                        r = dse__tok_buf_put(&out->text, t + k, (size_t)n);
                                else if (!(i == 0 && d->prepend_scheme != BPE_PREPEND_NEVER))
                                        r = dse__tok_buf_put(&out->text, " ", 1);
                                k += (size_t)n;
                        }
                        size_t pair[2] = {mark, out->text.len - mark};
                        if (r == 0 && (r = dse__tok_buf_put(&out->spans, pair, sizeof pair)) == 0)
                                out->n++;
                }
                return r;
        }
        return -EINVAL;
}

int dse__bpe_decode(const struct bpe *bpe, const int32_t *ids, size_t n_ids, struct tok_buf *out) {
        struct tlist a = {0}, b = {0};
        struct tlist *cur = &a, *next = &b;
        struct bpe_ws ws;
        dse__bpe_ws_init(&ws, bpe);
        int r = 0;
        for (size_t i = 0; i < n_ids && r == 0; i++) {
                uint32_t off = bpe->piece_off[ids[i]];
                if (off != UINT32_MAX) /* ids that name no token are skipped, as tokenizers does */
                        r = tl_add(cur, bpe->strs + off, bpe->piece_len[ids[i]]);
        }
        size_t limit = dse__bpe_growth_limit(cur->text.len);
        for (int k = 0; k < bpe->n_decs && r == 0; k++) {
                tl_reset(next);
                r = dec_one(&ws, &bpe->decs[k], cur, next, limit);
                if (r == 0 && next->text.len > limit)
                        r = -E2BIG;
                struct tlist *t = cur;
                cur = next;
                next = t;
        }
        for (size_t i = 0; i < cur->n && r == 0; i++) {
                size_t len;
                const char *t = tl_get(cur, i, &len);
                if (!bpe->has_decoder && i > 0) /* no decoder: tokens joined by spaces */
                        r = dse__tok_buf_put(out, " ", 1);
                if (r == 0)
                        r = dse__tok_buf_put(out, t, len);
        }
        tl_done(&a);
        tl_done(&b);
        dse__bpe_ws_done(&ws);
        return r;
}
