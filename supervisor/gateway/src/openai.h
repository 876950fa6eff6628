/* openai.h — the OpenAI shaping room: request bodies in (request.c), answers out as one
 * JSON object (response.c) or as server-sent events (sse.c), errors in OpenAI's shape.
 * Pure: no I/O, no locks, nothing of HTTP or of the workers' links. Shared with the unit
 * tests and the fuzz target. */
#ifndef DSV_GATEWAY_OPENAI_H
#define DSV_GATEWAY_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "dsv_gateway.h"
#include "dsv_ipc.h"

enum dsv_gw_api {
        DSV_GW_API_CHAT,        /* POST /v1/chat/completions */
        DSV_GW_API_COMPLETIONS, /* POST /v1/completions */
        DSV_GW_API_COUNT
};

/* An HTTP error in the OpenAI shape {"error":{"message","type","param","code"}}. Messages
 * never name files, addresses or internal functions. */
struct dsv_gw_error {
        int status;         /* 400, 401, 404, 413, 429, 500, 502, 503, 504 */
        const char *type;   /* "invalid_request_error", "server_error", ... */
        const char *code;   /* "invalid_value", "model_not_found", ...; NULL: null */
        char param[48];     /* the offending field; "": null */
        char message[200];
        uint32_t retry_after_s; /* > 0: send a Retry-After header (429, 503) */
};

void dsv__gw_error_set(struct dsv_gw_error *e, int status, const char *type, const char *code, const char *param,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error JSON as a malloc'd string. */
int dsv__gw_error_json(const struct dsv_gw_error *e, char **ret_json, size_t *ret_len);

struct dsv_gw_limits {
        const char *model;        /* the model id accepted, and its aliases */
        const char *const *model_aliases;
        size_t n_model_aliases;
        size_t max_prompt_bytes;
        int32_t max_tokens_limit;
        int32_t default_max_tokens; /* 0: up to the context (max_tokens_to_context) */
        enum dsv_gateway_reasoning_format reasoning_format; /* the default of requests */
        bool think_opened;                       /* the prompt ends inside a think block */
        enum dsv_gateway_tool_format tool_format; /* how the model writes calls */
};

/* One parsed OpenAI request. */
struct dsv_gw_request {
        enum dsv_gw_api api;
        bool stream;
        bool include_usage;     /* stream_options.include_usage */
        bool logprobs;          /* chat: "logprobs": true; completions: "logprobs" present */
        int32_t top_logprobs;   /* alternatives to report per token (0..20) */
        bool split_think;       /* chat: a think block goes to reasoning_content */
        bool think_opened;      /* chat: the prompt ends inside the think block */
        enum dsv_gateway_tool_format tool_parse; /* chat: how calls are read from the output
                                                  * (none: tools not in use) */
        bool parallel_tool_calls;
        bool tool_forced;       /* chat: tool_choice forced a call; the output is
                                 * constrained from its first token (tool_constraint.c) */
        bool tool_json;         /* chat: the forced call is JSON (the template has no call
                                 * syntax), not read by tool_parse's parser */
        int32_t n;              /* chat: choices, made one after another on one instance */
        struct dsv_ipc_msg ipc; /* type DSV_IPC_REQUEST, id 0: owns prompt/messages/stop */
};

/* Checks that body[0..len) is exactly one JSON value as RFC 8259 has it, with nothing but
 * whitespace after it, no raw control character or escaped NUL in a string, no key twice
 * in an object (param names it), keys up to 256 bytes and nesting up to 64 deep. 0, or
 * -EINVAL (-ENOMEM) with err filled (400; 500). UTF-8 is not checked here. */
int dsv__gw_json_strict(const char *body, size_t len, struct dsv_gw_error *err);

/* Parses a request body (len bytes, need not be NUL-terminated) for api. Checks UTF-8,
 * JSON, field types and ranges, the model name and the limits. On failure returns
 * -EINVAL (or -ENOMEM) and fills err (status 400 or 404); ret is untouched. On success
 * *ret owns its strings: release with dsv__gw_request_done(). */
int dsv__gw_request_parse(const char *body, size_t len, enum dsv_gw_api api, const struct dsv_gw_limits *lim,
                          struct dsv_gw_request *ret, struct dsv_gw_error *err);
void dsv__gw_request_done(struct dsv_gw_request *r);
/* Whether name is the served model id or one of its aliases. */
bool dsv__gw_model_served(const struct dsv_gw_limits *lim, const char *name);

struct cJSON;

/* The structured-output fields of request object o (response_format, guided_json,
 * guided_regex, guided_choice, guided_grammar, structured_outputs) into q->constraint. Call after
 * the stop strings are in q. 0, or -EINVAL (-ENOMEM) with e filled. */
int dsv__gw_parse_constraint(const struct cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                             struct dsv_gw_error *e);

/* 1 when s[0..len) is valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
int dsv__gw_utf8_valid(const char *s, size_t len);

/* ---- answers ------------------------------------------------------------------------ */

/* One completion's answer while it is shaped: the text and logprobs gathered for a whole
 * answer, or, streamed, the SSE bytes not yet handed to the HTTP server. */
struct dsv_gw_answer {
        const struct dsv_gw_request *req;
        const char *model;
        char id[48];            /* "chatcmpl-…" / "cmpl-…" */
        time_t created;
        bool role_sent;         /* chat stream: the assistant-role delta went out */
        bool done;              /* stream: nothing follows what is in out */
        char *text;             /* whole answer: the text so far */
        size_t text_len, text_cap; /* stream: text_len is the next completion token's offset */
        struct cJSON *logprobs; /* whole answer: chat {"content":[...]}; completions {"tokens":[...],...} */
        char finish[16];
        int32_t prompt_tokens, completion_tokens;
        int32_t cached_tokens;  /* of prompt_tokens, served from the KV cache (the first choice's) */
        struct dsv_gw_chat_out *chat; /* chat with reasoning or tools: the output pipeline */
        int32_t choice;         /* index of the choice being made (n > 1) */
        struct cJSON *choices_done; /* whole answer: the choices made before it */
        int32_t completion_tokens_done, reasoning_tokens_done; /* of those choices */
        char *out;              /* stream: bytes not yet read */
        size_t out_len, out_cap, out_pos;
};

/* Starts an answer to req (which must outlive it) for the model id served. */
void dsv__gw_answer_init(struct dsv_gw_answer *a, const struct dsv_gw_request *req, const char *model);
/* Names the answer after the worker request id it is served by. */
void dsv__gw_answer_set_id(struct dsv_gw_answer *a, uint64_t request_id);
/* Forgets everything gathered (a retry starts over). */
void dsv__gw_answer_reset(struct dsv_gw_answer *a);
void dsv__gw_answer_done(struct dsv_gw_answer *a);
/* Whole answer: adds one token's text (and logprobs when asked for). */
int dsv__gw_answer_token(struct dsv_gw_answer *a, const struct dsv_ipc_token *t);
/* One choice is made and another follows: a whole answer keeps the finished choice, a
 * stream (whose choice end went out with dsv__gw_sse_choice_end) starts the next one
 * with its own role delta. 0 or -ENOMEM. */
int dsv__gw_answer_next_choice(struct dsv_gw_answer *a);
/* Whole answer: the chat.completion / text_completion object with usage (owned by the
 * caller, cJSON_Delete), NULL without memory. */
struct cJSON *dsv__gw_answer_object(struct dsv_gw_answer *a);
/* The GET /v1/models list of the one model served. */
struct cJSON *dsv__gw_models_object(const char *model, const char *const *aliases, size_t n_aliases,
                                    int32_t max_model_len);
/* The worker's error as the client sees it: only the request's own faults are repeated,
 * anything else gets a fixed text, so no worker internals leak. */
void dsv__gw_worker_error(const struct dsv_ipc_error *we, struct dsv_gw_error *e);

/* Pieces response.c and sse.c share: a chunk or answer object without choices, one chat
 * logprob entry, the completions logprobs object and one token in it, usage. */
struct cJSON *dsv__gw_answer_base(const struct dsv_gw_answer *a);
struct cJSON *dsv__gw_chat_logprob(const struct dsv_ipc_token *t, int32_t top_n);
struct cJSON *dsv__gw_completion_logprobs_new(void);
void dsv__gw_completion_logprob_add(struct cJSON *lp, const struct dsv_ipc_token *t, size_t offset, int32_t top_n);
struct cJSON *dsv__gw_usage_object(const struct dsv_gw_answer *a);

/* ---- server-sent events ------------------------------------------------------------ */

/* Each event is "data: {json}\n\n"; a stream ends with "data: [DONE]\n\n". */

/* Streams one token (a chat stream opens with the assistant-role delta). */
int dsv__gw_sse_token(struct dsv_gw_answer *a, const struct dsv_ipc_token *t);
/* The end of the current choice: what its output pipeline still held, its finish chunk. */
int dsv__gw_sse_choice_end(struct dsv_gw_answer *a);
/* The streamed tail: the last choice's end, the usage chunk when asked for, [DONE]. */
int dsv__gw_sse_finish(struct dsv_gw_answer *a);
/* A stream that cannot finish: an error event, then [DONE]. */
int dsv__gw_sse_abort(struct dsv_gw_answer *a, const struct dsv_gw_error *e);
/* Copies up to max pending bytes into buf; returns how many (0: nothing pending). */
size_t dsv__gw_sse_read(struct dsv_gw_answer *a, char *buf, size_t max);

#endif
