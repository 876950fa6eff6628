/* sse.h — reading OpenAI-style answers as they arrive: an incremental server-sent-events
 * splitter (WHATWG "event stream" rules: LF, CRLF or CR line ends, "data:" fields joined
 * by newlines, comments and other fields ignored, a blank line ends an event) and the
 * classification of one event's JSON, or of a whole non-streamed body.
 *
 *     struct load_sse sse;
 *     load_sse_init(&sse);
 *     load_sse_feed(&sse, chunk, n, on_event, user);  // on_event(user, data, len) per event
 *     load_sse_done(&sse);
 *
 *     struct load_answer a;
 *     load_answer_classify(data, len, &a);            // LOAD_ANSWER_CHUNK, _DONE, _ERROR
 *
 * The splitter owns its buffers (freed by load_sse_done); the data passed to on_event is
 * valid only during the call. Nothing here blocks, logs or keeps global state. */
#ifndef DSV_LOAD_SSE_H
#define DSV_LOAD_SSE_H

#include <stddef.h>

#define LOAD_SSE_MAX_EVENT (1u << 20) /* bytes of one line or one event's data */

struct load_sse {
        char *line;
        size_t line_len, line_cap;
        char *data;
        size_t data_len, data_cap;
        int after_cr; /* the last byte was CR: a following LF belongs to the same line end */
};

/* Called once per complete event with its data (newline-joined "data:" values, no
 * trailing newline; events without data are skipped). A negative return stops
 * load_sse_feed, which returns it. */
typedef int (*load_sse_event_fn)(void *user, const char *data, size_t len);

void load_sse_init(struct load_sse *p);
void load_sse_done(struct load_sse *p);
/* Consumes n bytes. Returns 0, the callback's negative return, -ENOMEM, or -E2BIG for a
 * line or event over LOAD_SSE_MAX_EVENT bytes. */
int load_sse_feed(struct load_sse *p, const char *bytes, size_t n, load_sse_event_fn fn, void *user);

enum load_answer_kind {
        LOAD_ANSWER_DONE,  /* the "[DONE]" sentinel */
        LOAD_ANSWER_CHUNK, /* a completion object: a streamed chunk or a whole answer */
        LOAD_ANSWER_ERROR, /* {"error": {...}}: an explicit error */
        LOAD_ANSWER_COUNT,
};

struct load_answer {
        enum load_answer_kind kind;
        int has_text;               /* a choice carried non-empty text or content */
        int finished;               /* a choice carried a finish_reason */
        long completion_tokens;     /* from "usage", or -1 */
        char error_code[64];        /* LOAD_ANSWER_ERROR: error.code, else error.type, else "error" */
};

/* Classifies one SSE event's data or one non-streamed JSON body: "[DONE]", an object with
 * "error", or one with "choices" (or only "usage"). The caller knows which it expects: a
 * whole answer is a CHUNK with finished set. Returns 0, or -EBADMSG for anything else. */
int load_answer_classify(const char *data, size_t len, struct load_answer *ret);
const char *load_answer_kind_to_string(enum load_answer_kind k);

#endif
