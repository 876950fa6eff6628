/* gateway-internal.h — the gateway's pure parts, shared by its source files, the unit tests
 * and the fuzz target: OpenAI request parsing, response and error JSON, histograms,
 * API keys. Nothing here does I/O except dsv__gw_keys_load (one file read). */
#ifndef DSV_GATEWAY_INTERNAL_H
#define DSV_GATEWAY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
        const char *model;        /* the one model id accepted */
        size_t max_prompt_bytes;
        int32_t max_tokens_limit;
        int32_t default_max_tokens;
};

/* One parsed OpenAI request. */
struct dsv_gw_request {
        enum dsv_gw_api api;
        bool stream;
        bool include_usage;     /* stream_options.include_usage */
        bool logprobs;          /* chat: "logprobs": true; completions: "logprobs" present */
        int32_t top_logprobs;   /* alternatives to report per token (0..20) */
        struct dsv_ipc_msg ipc; /* type DSV_IPC_REQUEST, id 0: owns prompt/messages/stop */
};

/* Parses a request body (len bytes, need not be NUL-terminated) for api. Checks UTF-8,
 * JSON, field types and ranges, the model name and the limits. On failure returns
 * -EINVAL (or -ENOMEM) and fills err (status 400 or 404); ret is untouched. On success
 * *ret owns its strings: release with dsv__gw_request_done(). */
int dsv__gw_request_parse(const char *body, size_t len, enum dsv_gw_api api, const struct dsv_gw_limits *lim,
                          struct dsv_gw_request *ret, struct dsv_gw_error *err);
void dsv__gw_request_done(struct dsv_gw_request *r);

/* 1 when s[0..len) is valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
int dsv__gw_utf8_valid(const char *s, size_t len);

/* ---- histograms --------------------------------------------------------------------- */

#define DSV_GW_HIST_MAX_BUCKETS 24

struct dsv_gw_buckets {
        size_t n;
        double le[DSV_GW_HIST_MAX_BUCKETS]; /* ascending upper bounds, +Inf implied */
};

struct dsv_gw_hist {
        uint64_t counts[DSV_GW_HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last: > le[n-1] */
        uint64_t count;
        double sum;
};

void dsv__gw_hist_observe(struct dsv_gw_hist *h, const struct dsv_gw_buckets *b, double v);
/* Writes name_bucket{labels,le=...} (cumulative), name_sum and name_count. labels is a
 * ready label list without braces ('instance="0",numa_node="1"'), may be "". */
int dsv__gw_hist_write(FILE *out, const char *name, const char *labels, const struct dsv_gw_hist *h,
                       const struct dsv_gw_buckets *b);
/* Escapes a label value (\\, \" and \n) into buf. Returns its length or -ENOBUFS. */
int dsv__gw_label_escape(const char *s, char *buf, size_t size);

/* ---- API keys ------------------------------------------------------------------------ */

struct dsv_gw_keys {
        size_t n;
        char **keys;
};

/* Reads keys, one per line; blank lines and lines starting with '#' are skipped, spaces
 * around a key trimmed. -EINVAL when the file holds no key. */
int dsv__gw_keys_load(const char *path, struct dsv_gw_keys *ret);
void dsv__gw_keys_done(struct dsv_gw_keys *k);
/* 1 when the "Authorization" header value is "Bearer <one of the keys>", else 0. The time
 * taken depends on the keys' lengths only, not on where a guess differs. */
int dsv__gw_keys_check(const struct dsv_gw_keys *k, const char *authorization);

#endif
