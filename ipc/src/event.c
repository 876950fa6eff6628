/* The worker's per-token path: token, final and error events written as JSON straight
 * into a caller's buffer (no cJSON tree, no allocation), and batches of them that go out
 * as one nng message per scheduler step (PROTOCOL.md, "events").
 *
 * Every event is written as a complete message, {"v":1,"minor":1,"type":...}, so the
 * batch can also send an event on its own (a batch of one, or a peer that predates
 * "events") from the same bytes. The output parses with dsv_ipc_msg_decode exactly as
 * dsv_ipc_msg_encode's output of the same message does. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_ipc.h"
#include "proto_internal.h"

/* A bounded writer: every put checks the room left and sets overflow instead of
 * writing past the end. */
struct jw {
        char *p;
        size_t size, len;
        int overflow;
};

static void put(struct jw *w, const char *s, size_t n) {
        if (w->overflow || n > w->size - w->len) {
                w->overflow = 1;
                return;
        }
        memcpy(w->p + w->len, s, n);
        w->len += n;
}

static void put_lit(struct jw *w, const char *s) {
        put(w, s, strlen(s));
}

/* JSON string with the escapes cJSON's printer uses: the two-character forms for
 * " \ \b \f \n \r \t, \u00XX for the other control characters; every other byte, UTF-8
 * included, as it is. */
static void put_str(struct jw *w, const char *s) {
        static const char hex[] = "0123456789abcdef";
        put(w, "\"", 1);
        const unsigned char *u = (const unsigned char *)(s ? s : "");
        while (!w->overflow && *u) {
                /* Copy the longest run that needs no escape in one go. */
                const unsigned char *run = u;
                while (*u >= 0x20 && *u != '"' && *u != '\\')
                        u++;
                if (u > run)
                        put(w, (const char *)run, (size_t)(u - run));
                if (!*u)
                        break;
                char esc[6] = {'\\', 0};
                size_t n = 2;
                switch (*u) {
                case '"': esc[1] = '"'; break;
                case '\\': esc[1] = '\\'; break;
                case '\b': esc[1] = 'b'; break;
                case '\f': esc[1] = 'f'; break;
                case '\n': esc[1] = 'n'; break;
                case '\r': esc[1] = 'r'; break;
                case '\t': esc[1] = 't'; break;
                default:
                        esc[1] = 'u';
                        esc[2] = '0';
                        esc[3] = '0';
                        esc[4] = hex[*u >> 4];
                        esc[5] = hex[*u & 15];
                        n = 6;
                        break;
                }
                put(w, esc, n);
                u++;
        }
        put(w, "\"", 1);
}

static void put_u64(struct jw *w, uint64_t v) {
        char b[24];
        int i = (int)sizeof b;
        do
                b[--i] = (char)('0' + v % 10);
        while ((v /= 10) > 0);
        put(w, b + i, sizeof b - (size_t)i);
}

static void put_i64(struct jw *w, int64_t v) {
        if (v < 0) {
                put(w, "-", 1);
                put_u64(w, (uint64_t)0 - (uint64_t)v);
        } else {
                put_u64(w, (uint64_t)v);
        }
}

/* %.17g round-trips every double, %.9g every float; snprintf into a stack buffer. */
static void put_double(struct jw *w, double v, int digits) {
        char b[40];
        int n = snprintf(b, sizeof b, "%.*g", digits, v);
        if (n <= 0 || (size_t)n >= sizeof b) {
                w->overflow = 1;
                return;
        }
        put(w, b, (size_t)n);
}

static void put_key(struct jw *w, const char *key) {
        put(w, ",\"", 2);
        put_lit(w, key);
        put(w, "\":", 2);
}

int dsv_ipc_event_encode(const struct dsv_ipc_msg *m, char *buf, size_t size) {
        if (!m || !buf)
                return -EINVAL;
        struct jw w = {buf, size, 0, 0};
        put_lit(&w, "{\"v\":" DSV__IPC_STR(DSV_IPC_PROTOCOL_VERSION) ",\"minor\":" DSV__IPC_STR(DSV_IPC_PROTOCOL_MINOR)
                    ",\"type\":");
        switch (m->type) {
        case DSV_IPC_TOKEN: {
                const struct dsv_ipc_token *t = &m->u.token;
                if (t->id > DSV_IPC_MAX_ID || t->token < 0 || t->n_top > DSV__IPC_MAX_TOP_LOGPROBS ||
                    (t->n_top && !t->top))
                        return -EINVAL;
                put_lit(&w, "\"token\"");
                put_key(&w, "id");
                put_u64(&w, t->id);
                put_key(&w, "token");
                put_i64(&w, t->token);
                put_key(&w, "text");
                put_str(&w, t->text);
                if (t->n_top > 0) {
                        put_key(&w, "logprob");
                        put_double(&w, dsv__ipc_logprob_clamp(t->logprob), 9);
                        put_key(&w, "top_logprobs");
                        put(&w, "[", 1);
                        for (size_t i = 0; i < t->n_top; i++) {
                                if (t->top[i].token < 0)
                                        return -EINVAL;
                                put_lit(&w, i ? ",{\"token\":" : "{\"token\":");
                                put_i64(&w, t->top[i].token);
                                put_key(&w, "logprob");
                                put_double(&w, dsv__ipc_logprob_clamp(t->top[i].logprob), 9);
                                if (t->top_bytes && (t->top_bytes[i].n > DSV__IPC_MAX_TOKEN_BYTES ||
                                                     (t->top_bytes[i].n && !t->top_bytes[i].bytes)))
                                        return -EINVAL;
                                if (t->top_bytes) {
                                        put_key(&w, "bytes");
                                        put(&w, "[", 1);
                                        for (size_t k = 0; k < t->top_bytes[i].n; k++) {
                                                if (k)
                                                        put(&w, ",", 1);
                                                put_i64(&w, t->top_bytes[i].bytes[k]);
                                        }
                                        put(&w, "]", 1);
                                }
                                put(&w, "}", 1);
                        }
                        put(&w, "]", 1);
                }
                break;
        }
        case DSV_IPC_FINAL: {
                const struct dsv_ipc_final *f = &m->u.final;
                if (f->id > DSV_IPC_MAX_ID || f->prompt_tokens < 0 || f->completion_tokens < 0 || f->cached_tokens < 0 ||
                    f->cached_tokens > f->prompt_tokens ||
                    !isfinite(f->queue_s) || !isfinite(f->prefill_s) || !isfinite(f->decode_s) || !isfinite(f->ttft_s))
                        return -EINVAL;
                put_lit(&w, "\"final\"");
                put_key(&w, "id");
                put_u64(&w, f->id);
                put_key(&w, "finish_reason");
                put_str(&w, f->finish_reason);
                put_key(&w, "prompt_tokens");
                put_i64(&w, f->prompt_tokens);
                put_key(&w, "completion_tokens");
                put_i64(&w, f->completion_tokens);
                if (f->cached_tokens > 0) {
                        put_key(&w, "cached_tokens");
                        put_i64(&w, f->cached_tokens);
                }
                put_key(&w, "queue_s");
                put_double(&w, f->queue_s, 17);
                put_key(&w, "prefill_s");
                put_double(&w, f->prefill_s, 17);
                put_key(&w, "decode_s");
                put_double(&w, f->decode_s, 17);
                put_key(&w, "ttft_s");
                put_double(&w, f->ttft_s, 17);
                break;
        }
        case DSV_IPC_ERROR: {
                const struct dsv_ipc_error *e = &m->u.error;
                if (e->id > DSV_IPC_MAX_ID || e->code >= DSV_IPC_ERROR_CODE_COUNT)
                        return -EINVAL;
                put_lit(&w, "\"error\"");
                put_key(&w, "id");
                put_u64(&w, e->id);
                put_key(&w, "code");
                put_str(&w, dsv_ipc_error_code_to_string(e->code));
                put_key(&w, "message");
                put_str(&w, e->message);
                break;
        }
        default:
                return -EINVAL; /* only the worker's stream events take this path */
        }
        put(&w, "}", 1);
        if (w.overflow)
                return -ENOBUFS;
        return (int)w.len;
}

/* ---- batches ------------------------------------------------------------------------ */

static const char batch_head[] = "{\"v\":" DSV__IPC_STR(DSV_IPC_PROTOCOL_VERSION) ",\"minor\":" DSV__IPC_STR(
        DSV_IPC_PROTOCOL_MINOR) ",\"type\":\"events\",\"events\":[";
#define HEAD_LEN (sizeof batch_head - 1)
#define TAIL_LEN 2 /* "]}" */

int dsv_ipc_batch_init(struct dsv_ipc_batch *b, size_t cap_bytes, int cap_events) {
        if (!b || cap_events < 1 || cap_bytes < HEAD_LEN + TAIL_LEN + 64 || cap_bytes > DSV_IPC_MAX_MSG_BYTES)
                return -EINVAL;
        memset(b, 0, sizeof *b);
        b->buf = malloc(cap_bytes);
        b->ev_off = malloc((size_t)cap_events * sizeof *b->ev_off);
        b->ev_len = malloc((size_t)cap_events * sizeof *b->ev_len);
        if (!b->buf || !b->ev_off || !b->ev_len) {
                dsv_ipc_batch_done(b);
                return -ENOMEM;
        }
        b->cap = cap_bytes;
        b->cap_events = cap_events;
        memcpy(b->buf, batch_head, HEAD_LEN);
        b->len = HEAD_LEN;
        return 0;
}

void dsv_ipc_batch_done(struct dsv_ipc_batch *b) {
        if (!b)
                return;
        free(b->buf);
        free(b->ev_off);
        free(b->ev_len);
        memset(b, 0, sizeof *b);
}

void dsv_ipc_batch_clear(struct dsv_ipc_batch *b) {
        b->len = HEAD_LEN;
        b->n_events = 0;
}

int dsv_ipc_batch_add(struct dsv_ipc_batch *b, const struct dsv_ipc_msg *m) {
        if (!b || !b->buf || !m)
                return -EINVAL;
        if (b->n_events == b->cap_events)
                return -ENOBUFS;
        size_t sep = b->n_events > 0; /* the comma before every event but the first */
        if (b->len + sep + TAIL_LEN >= b->cap)
                return -ENOBUFS;
        size_t at = b->len + sep;
        int n = dsv_ipc_event_encode(m, b->buf + at, b->cap - at - TAIL_LEN);
        if (n < 0)
                return n; /* nothing was committed: len and n_events are unchanged */
        if (sep)
                b->buf[b->len] = ',';
        b->ev_off[b->n_events] = (uint32_t)at;
        b->ev_len[b->n_events] = (uint32_t)n;
        b->n_events++;
        b->len = at + (size_t)n;
        return 0;
}

int dsv_ipc_batch_count(const struct dsv_ipc_batch *b) {
        return b ? b->n_events : 0;
}

const char *dsv_ipc_batch_message(struct dsv_ipc_batch *b, size_t *ret_len) {
        if (!b || !b->buf || b->n_events == 0)
                return NULL;
        /* add() always leaves TAIL_LEN bytes free behind the last event. */
        memcpy(b->buf + b->len, "]}", TAIL_LEN);
        if (ret_len)
                *ret_len = b->len + TAIL_LEN;
        return b->buf;
}

const char *dsv_ipc_batch_event(const struct dsv_ipc_batch *b, int i, size_t *ret_len) {
        if (!b || i < 0 || i >= b->n_events)
                return NULL;
        if (ret_len)
                *ret_len = b->ev_len[i];
        return b->buf + b->ev_off[i];
}
