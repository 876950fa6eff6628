/* Streaming detokenization with stop strings (see dse.h).
 *
 * Text comes only from dse_tokenizer_decode over a small window of ids, the way
 * incremental detokenizers in serving stacks do it (TGI's decode_token): decoding the
 * window with the previous token as context keeps what a tokenizer does at a sequence
 * start (SentencePiece drops the leading space there) out of the middle of the stream.
 * Of the window's text, the part already passed on is skipped and the tail that is not
 * yet a complete character is held: an incomplete UTF-8 sequence (decoders that emit raw
 * bytes) or trailing U+FFFD (decoders that are lossy, as Hugging Face's is, turn the
 * first bytes of a character into U+FFFD until the rest arrives). Once the window's text
 * is complete, the window restarts from its last token.
 *
 * Released text then passes the stop-string filter: the longest suffix that is still a
 * prefix of some stop string waits in `pend` until the next token decides it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "jinja.h"

/* A character is at most 4 bytes; a window longer than this that still has no complete
 * text is given up on (its bytes become U+FFFD) so decoding stays bounded. */
#define DETOK_MAX_WINDOW 32

struct dse_detok {
        const struct dse_tokenizer *tok;
        char **stops;
        size_t *stop_len;
        size_t n_stop;
        int32_t win[DETOK_MAX_WINDOW + 1]; /* ids whose text is being decoded */
        size_t n_win;
        size_t emitted; /* bytes of decode(win) already passed on */
        char *shown;    /* those bytes, to notice when a new id changes how they decode */
        size_t cap_shown;
        size_t n_done;  /* leading ids of win whose text is all passed on (the context) */
        char *dec;      /* decode(win) */
        size_t dec_cap;
        char *pend; /* released text held back by the stop-string filter */
        size_t n_pend, cap_pend;
        char *out; /* text returned to the caller */
        size_t n_out, cap_out;
        int stopped;
};

static int grow(char **buf, size_t *cap, size_t need) {
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap : 256;
        while (n < need)
                n *= 2;
        char *p = realloc(*buf, n);
        if (!p)
                return -ENOMEM;
        *buf = p;
        *cap = n;
        return 0;
}

int dse_detok_new(const struct dse_tokenizer *tok, const char *const *stop_strings, size_t n_stop,
                  struct dse_detok **ret_detok, struct dse_diag *reterr) {
        if (!tok || !ret_detok || (n_stop && !stop_strings))
                return -EINVAL;
        struct dse_detok *d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->tok = tok;
        /* Every buffer exists from the start: no NULL pointer meets memcpy/memcmp. */
        if (grow(&d->dec, &d->dec_cap, 256) < 0 || grow(&d->shown, &d->cap_shown, 64) < 0 ||
            grow(&d->pend, &d->cap_pend, 64) < 0 || grow(&d->out, &d->cap_out, 256) < 0) {
                dse_detok_free(d);
                return -ENOMEM;
        }
        if (n_stop) {
                d->stops = calloc(n_stop, sizeof *d->stops);
                d->stop_len = calloc(n_stop, sizeof *d->stop_len);
                if (!d->stops || !d->stop_len) {
                        dse_detok_free(d);
                        return -ENOMEM;
                }
        }
        for (size_t i = 0; i < n_stop; i++) {
                if (!stop_strings[i] || !stop_strings[i][0]) {
                        dse_detok_free(d);
                        return dse__fail(reterr, -EINVAL, "stop string %zu is empty", i);
                }
                d->stop_len[i] = strlen(stop_strings[i]);
                if (!dse__utf8_valid(stop_strings[i], d->stop_len[i])) {
                        dse_detok_free(d);
                        return dse__fail(reterr, -EILSEQ, "stop string %zu is not valid UTF-8", i);
                }
                if (!(d->stops[i] = strdup(stop_strings[i]))) {
                        dse_detok_free(d);
                        return -ENOMEM;
                }
                d->n_stop = i + 1;
        }
        *ret_detok = d;
        return 0;
}

void dse_detok_free(struct dse_detok *d) {
        if (!d)
                return;
        for (size_t i = 0; i < d->n_stop; i++)
                free(d->stops[i]);
        free(d->stops);
        free(d->stop_len);
        free(d->dec);
        free(d->shown);
        free(d->pend);
        free(d->out);
        free(d);
}

/* decode(ids) into d->dec; returns its length. */
static int decode(struct dse_detok *d, const int32_t *ids, size_t n) {
        int len = dse_tokenizer_decode(d->tok, ids, n, d->dec, d->dec_cap);
        if (len < 0 || (size_t)len <= d->dec_cap)
                return len;
        if (grow(&d->dec, &d->dec_cap, (size_t)len) < 0)
                return -ENOMEM;
        return dse_tokenizer_decode(d->tok, ids, n, d->dec, d->dec_cap);
}

/* Where the incomplete tail of s[from, len) begins: a truncated UTF-8 sequence at the
 * end, and any U+FFFD right before it. */
static size_t incomplete_tail(const char *s, size_t from, size_t len) {
        size_t end = len;
        for (size_t back = 1; back <= 3 && back <= end - from; back++) {
                unsigned char c = (unsigned char)s[end - back];
                if (dse__utf8_is_cont(c))
                        continue; /* continuation byte: its lead is further back */
                int need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
                if ((size_t)need > back)
                        end -= back; /* a lead byte still waiting for need - back bytes */
                break;
        }
        while (end - from >= 3 && memcmp(s + end - 3, "\xEF\xBF\xBD", 3) == 0)
                end -= 3;
        return end;
}

/* Appends s[0, n) to pend with invalid UTF-8 replaced by U+FFFD. */
static int pend_append(struct dse_detok *d, const char *s, size_t n) {
        if (grow(&d->pend, &d->cap_pend, d->n_pend + 3 * n + 1) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < n;) {
                uint32_t cp;
                int len = dse__utf8_decode(s + i, n - i, &cp);
                if (len < 0) {
                        memcpy(d->pend + d->n_pend, "\xEF\xBF\xBD", 3);
                        d->n_pend += 3;
                        i++;
                        while (i < n && dse__utf8_is_cont((unsigned char)s[i]))
                                i++;
                        continue;
                }
                memcpy(d->pend + d->n_pend, s + i, (size_t)len);
                d->n_pend += (size_t)len;
                i += (size_t)len;
        }
        return 0;
}

static int out_append(struct dse_detok *d, const char *s, size_t n) {
        if (grow(&d->out, &d->cap_out, d->n_out + n + 1) < 0)
                return -ENOMEM;
        memcpy(d->out + d->n_out, s, n);
        d->n_out += n;
        d->out[d->n_out] = '\0';
        return 0;
}

/* Moves what the stop strings allow from pend to out. final: no more text will come. */
static int release(struct dse_detok *d, int final) {
        size_t first = d->n_pend, hit = 0;
        for (size_t i = 0; i < d->n_stop; i++) {
                const char *at = memmem(d->pend, d->n_pend, d->stops[i], d->stop_len[i]);
                if (at && (size_t)(at - d->pend) < first) {
                        first = (size_t)(at - d->pend);
                        hit = 1;
                }
        }
        if (hit) {
                d->stopped = 1;
                int r = out_append(d, d->pend, first);
                d->n_pend = 0;
                return r;
        }
        size_t keep = 0; /* longest suffix of pend that begins some stop string */
        for (size_t i = 0; i < d->n_stop && !final; i++)
                for (size_t k = d->stop_len[i] - 1; k > keep; k--)
                        if (k <= d->n_pend && memcmp(d->pend + d->n_pend - k, d->stops[i], k) == 0) {
                                keep = k;
                                break;
                        }
        int r = out_append(d, d->pend, d->n_pend - keep);
        memmove(d->pend, d->pend + d->n_pend - keep, keep);
        d->n_pend = keep;
        return r;
}

/* Records dec[0, emitted) as the text passed on from this window. */
static int remember_shown(struct dse_detok *d) {
        if (grow(&d->shown, &d->cap_shown, d->emitted + 1) < 0)
                return -ENOMEM;
        memcpy(d->shown, d->dec, d->emitted);
        return 0;
}

/* A byte-fallback piece "<0xHH>": returns the byte, or -1 for any other token. */
static int byte_token(const struct dse_detok *d, int32_t id) {
        const char *p = dse_tokenizer_piece(d->tok, id);
        unsigned v;
        char end;
        if (!p || strlen(p) != 6 || strncmp(p, "<0x", 3) != 0 || sscanf(p + 3, "%2x%c", &v, &end) != 2 || end != '>')
                return -1;
        return (int)v;
}

/* Restarts the window from the ids of its last character, the context for the next id:
 * the last id, or for a run of byte-fallback ids the ones from the character's lead
 * byte (a lone continuation byte would decode as U+FFFD next to the next run). */
static int restart_window(struct dse_detok *d) {
        size_t start = d->n_win - 1;
        while (start > 0 && d->n_win - start < 4) {
                int b = byte_token(d, d->win[start]);
                if (b < 0 || !dse__utf8_is_cont((unsigned char)b))
                        break; /* not a continuation byte: the character starts here */
                start--;
        }
        memmove(d->win, d->win + start, (d->n_win - start) * sizeof *d->win);
        d->n_win -= start;
        d->n_done = d->n_win;
        int len = decode(d, d->win, d->n_win);
        if (len < 0)
                return len;
        d->emitted = (size_t)len;
        return remember_shown(d);
}

/* Empties the text returned to the caller (an empty string, not NULL). */
static int out_reset(struct dse_detok *d) {
        d->n_out = 0;
        if (grow(&d->out, &d->cap_out, 1) < 0)
                return -ENOMEM;
        d->out[0] = '\0';
        return 0;
}

int dse_detok_push(struct dse_detok *d, int32_t id, const char **ret_text, int *ret_stopped) {
        if (!d || !ret_text)
                return -EINVAL;
        int r = out_reset(d);
        if (r < 0)
                return r;
        if (!d->stopped) {
                if (id < 0 || id >= dse_tokenizer_n_vocab(d->tok))
                        return -EINVAL;
                d->win[d->n_win++] = id;
                int len = decode(d, d->win, d->n_win);
                if (len < 0) {
                        d->n_win--;
                        return len;
                }
                size_t hold;
                if ((size_t)len < d->emitted || memcmp(d->dec, d->shown, d->emitted) != 0) {
                        /* The new id changed how the text already passed on decodes: Hugging
                         * Face's ByteFallback turns a whole run of <0xXX> ids into U+FFFDs while
                         * it is not valid UTF-8. A byte id may still complete the run: wait. */
                        if (byte_token(d, id) >= 0 && d->n_win <= DETOK_MAX_WINDOW)
                                goto out;
                        /* It cannot complete any more: what was passed on stays, the ids
                         * after it are decoded on their own. */
                        if ((len = decode(d, d->win + d->n_done, d->n_win - d->n_done)) < 0)
                                return len;
                        d->emitted = 0;
                        hold = (size_t)len;
                } else {
                        hold = incomplete_tail(d->dec, d->emitted, (size_t)len);
                        if (d->n_win > DETOK_MAX_WINDOW)
                                hold = (size_t)len; /* never completes: give the bytes up as U+FFFD */
                }
                if ((r = pend_append(d, d->dec + d->emitted, hold - d->emitted)) < 0)
                        return r;
                d->emitted = hold;
                if ((r = remember_shown(d)) < 0)
                        return r;
                if (hold == (size_t)len && (r = restart_window(d)) < 0)
                        return r;
                if ((r = release(d, 0)) < 0)
                        return r;
        }
out:
        if (ret_stopped)
                *ret_stopped = d->stopped;
        *ret_text = d->out;
        return (int)d->n_out;
}

int dse_detok_flush(struct dse_detok *d, const char **ret_text) {
        if (!d || !ret_text)
                return -EINVAL;
        int r = out_reset(d);
        if (r < 0)
                return r;
        if (!d->stopped && d->n_win > 0) {
                int len = decode(d, d->win, d->n_win);
                if (len >= 0 && ((size_t)len < d->emitted || memcmp(d->dec, d->shown, d->emitted) != 0)) {
                        /* an unfinished byte run changed the shown text: the rest on its own */
                        len = decode(d, d->win + d->n_done, d->n_win - d->n_done);
                        d->emitted = 0;
                }
                if (len < 0)
                        return len;
                if (d->emitted < (size_t)len && (r = pend_append(d, d->dec + d->emitted, (size_t)len - d->emitted)) < 0)
                        return r;
        }
        if (!d->stopped && (r = release(d, 1)) < 0)
                return r;
        d->n_win = 0;
        d->emitted = 0;
        d->n_done = 0;
        d->n_pend = 0;
        d->stopped = 0;
        *ret_text = d->out;
        return (int)d->n_out;
}
