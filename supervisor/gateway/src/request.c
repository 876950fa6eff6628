/* OpenAI request bodies -> dsv_ipc_request. Every field is checked
 * for type and range before anything reaches a worker; the error names the field the way
 * OpenAI does ("param"). Fields we cannot honour (n > 1, echo, tools, logit_bias, ...) are
 * refused rather than ignored, so a client never gets an answer to a question it did not
 * ask. Unknown fields are ignored, as OpenAI-compatible servers do. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"

#define MAX_MESSAGES 4096
#define MAX_STOP 16      /* PROTOCOL.md: up to 16 stop strings */
#define MAX_TOP_LOGPROBS 20
#define MAX_PROMPT_TOKENS (1u << 20)
#define MAX_NAME_BYTES 256 /* model, user, a message's name */
#define MAX_STOP_BYTES 1024 /* one stop string */

void dsv__gw_error_set(struct dsv_gw_error *e, int status, const char *type, const char *code, const char *param,
                       const char *fmt, ...) {
        va_list ap;
        e->status = status;
        e->retry_after_s = 0;
        e->type = type;
        e->code = code;
        snprintf(e->param, sizeof e->param, "%s", param ? param : "");
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof e->message, fmt, ap);
        va_end(ap);
}

int dsv__gw_error_json(const struct dsv_gw_error *e, char **ret_json, size_t *ret_len) {
        cJSON *root = cJSON_CreateObject();
        cJSON *err = root ? cJSON_AddObjectToObject(root, "error") : NULL;
        int ok = err && cJSON_AddStringToObject(err, "message", e->message) &&
                 cJSON_AddStringToObject(err, "type", e->type ? e->type : "server_error") &&
                 (e->param[0] ? cJSON_AddStringToObject(err, "param", e->param) != NULL
                              : cJSON_AddNullToObject(err, "param") != NULL) &&
                 (e->code ? cJSON_AddStringToObject(err, "code", e->code) != NULL
                          : cJSON_AddNullToObject(err, "code") != NULL);
        char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        if (!s)
                return -ENOMEM;
        *ret_json = s;
        *ret_len = strlen(s);
        return 0;
}

int dsv__gw_utf8_valid(const char *str, size_t len) {
        const unsigned char *s = (const unsigned char *)str;
        size_t i = 0;
        while (i < len) {
                unsigned c = s[i];
                size_t n;
                unsigned cp;
                if (c < 0x80) {
                        i++;
                        continue;
                } else if (c >= 0xc2 && c <= 0xdf) {
                        n = 1, cp = c & 0x1f;
                } else if (c >= 0xe0 && c <= 0xef) {
                        n = 2, cp = c & 0x0f;
                } else if (c >= 0xf0 && c <= 0xf4) {
                        n = 3, cp = c & 0x07;
                } else {
                        return 0;
                }
                if (len - i <= n)
                        return 0;
                for (size_t k = 1; k <= n; k++) {
                        if ((s[i + k] & 0xc0) != 0x80)
                                return 0;
                        cp = (cp << 6) | (s[i + k] & 0x3f);
                }
                if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
                        return 0;
                i += n + 1;
        }
        return 1;
}

/* ---- field readers: absent and null mean "not given" ------------------------------- */

static const cJSON *field(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return v && !cJSON_IsNull(v) ? v : NULL;
}

static int invalid(struct dsv_gw_error *e, const char *param, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int invalid(struct dsv_gw_error *e, const char *param, const char *fmt, ...) {
        char msg[sizeof e->message];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        dsv__gw_error_set(e, 400, "invalid_request_error", param ? "invalid_value" : "invalid_request", param, "%s", msg);
        return -EINVAL;
}

/* A number in [lo, hi]; *present says whether it was given. */
static int get_number(const cJSON *o, const char *key, double lo, double hi, double *out, bool *present,
                      struct dsv_gw_error *e) {
        const cJSON *v = field(o, key);
        *present = v != NULL;
        if (!v)
                return 0;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
                return invalid(e, key, "'%s' must be a number", key);
        if (!(v->valuedouble >= lo && v->valuedouble <= hi))
                return invalid(e, key, "'%s' must be between %g and %g", key, lo, hi);
        *out = v->valuedouble;
        return 0;
}

static int get_float(const cJSON *o, const char *key, double lo, double hi, float *out, struct dsv_gw_error *e) {
        double d = 0;
        bool present;
        int r = get_number(o, key, lo, hi, &d, &present, e);
        if (r == 0 && present)
                *out = (float)d;
        return r;
}

/* An integer in [lo, hi] (a JSON number without a fraction). */
static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
                   struct dsv_gw_error *e) {
        const cJSON *v = field(o, key);
        *present = v != NULL;
        if (!v)
                return 0;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
                return invalid(e, key, "'%s' must be an integer", key);
        if (!(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
                return invalid(e, key, "'%s' must be between %lld and %lld", key, (long long)lo, (long long)hi);
        *out = (int64_t)v->valuedouble;
        return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out, struct dsv_gw_error *e) {
        const cJSON *v = field(o, key);
        if (!v)
                return 0;
        if (!cJSON_IsBool(v))
                return invalid(e, key, "'%s' must be a boolean", key);
        *out = cJSON_IsTrue(v);
        return 0;
}

/* A string field's length bound: its own cap, and never more than a prompt may hold.
 * what names the value in the message, param the field it is in. */
static int check_length(const cJSON *v, const char *param, const char *what, size_t cap,
                        const struct dsv_gw_limits *lim, struct dsv_gw_error *e) {
        size_t max = cap < lim->max_prompt_bytes ? cap : lim->max_prompt_bytes;
        if (cJSON_IsString(v) && strlen(v->valuestring) > max)
                return invalid(e, param, "%s is longer than %zu bytes", what, max);
        return 0;
}

static int unsupported(struct dsv_gw_error *e, const char *param, const char *what) {
        dsv__gw_error_set(e, 400, "invalid_request_error", "unsupported_parameter", param, "%s is not supported", what);
        return -EINVAL;
}

/* ---- the parts ------------------------------------------------------------------------ */

static int parse_stop(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                      struct dsv_gw_error *e) {
        const cJSON *v = field(o, "stop");
        if (!v)
                return 0;
        size_t n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 0;
        if (!cJSON_IsString(v) && !cJSON_IsArray(v))
                return invalid(e, "stop", "'stop' must be a string or an array of strings");
        if (n > MAX_STOP)
                return invalid(e, "stop", "'stop' may hold at most %d strings", MAX_STOP);
        if (n == 0)
                return 0;
        if (!(q->stop = calloc(n, sizeof *q->stop)))
                return -ENOMEM;
        const cJSON *it = cJSON_IsString(v) ? v : v->child;
        for (size_t i = 0; i < n; i++, it = it->next) {
                if (!cJSON_IsString(it) || !it->valuestring[0])
                        return invalid(e, "stop", "'stop' entries must be non-empty strings");
                int r = check_length(it, "stop", "a 'stop' string", MAX_STOP_BYTES, lim, e);
                if (r < 0)
                        return r;
                if (!(q->stop[i] = strdup(it->valuestring)))
                        return -ENOMEM;
                q->n_stop = i + 1;
        }
        return 0;
}

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

/* Content: a string, or an array of {"type":"text","text":...} parts (joined), or null
 * for an assistant turn. Returns a malloc'd string. */
static int message_text(const cJSON *content, bool may_be_null, char **ret, struct dsv_gw_error *e) {
        if (!content || cJSON_IsNull(content)) {
                if (!may_be_null)
                        return invalid(e, "messages", "every message needs a 'content'");
                return (*ret = strdup("")) ? 0 : -ENOMEM;
        }
        if (cJSON_IsString(content))
                return (*ret = strdup(content->valuestring)) ? 0 : -ENOMEM;
        if (!cJSON_IsArray(content))
                return invalid(e, "messages", "message 'content' must be a string or an array of parts");
        size_t total = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
                        return unsupported(e, "messages", "a content part other than text");
                if (!cJSON_IsString(text))
                        return invalid(e, "messages", "a text part needs a string 'text'");
                total += strlen(text->valuestring);
        }
        char *s = malloc(total + 1);
        if (!s)
                return -ENOMEM;
        size_t at = 0;
        cJSON_ArrayForEach(p, content) {
                const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
                size_t l = strlen(t);
                memcpy(s + at, t, l);
                at += l;
        }
        s[at] = 0;
        *ret = s;
        return 0;
}

/* messages -> a normalised array [{"role","content"[,"name"]}] kept as JSON text. */
static int parse_messages(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                          struct dsv_gw_error *e) {
        const cJSON *msgs = field(o, "messages");
        if (!msgs)
                return invalid(e, "messages", "'messages' is required");
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
                return invalid(e, "messages", "'messages' must be a non-empty array");
        if (cJSON_GetArraySize(msgs) > MAX_MESSAGES)
                return invalid(e, "messages", "at most %d messages are accepted", MAX_MESSAGES);
        cJSON *out = cJSON_CreateArray();
        if (!out)
                return -ENOMEM;
        size_t total = 0;
        int r = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, msgs) {
                const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
                const cJSON *name = field(m, "name");
                size_t k;
                if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
                        r = invalid(e, "messages", "every message needs a string 'role'");
                        break;
                }
                for (k = 0; k < sizeof roles / sizeof roles[0] && strcmp(role->valuestring, roles[k]) != 0; k++)
                        ;
                if (k == sizeof roles / sizeof roles[0]) {
                        r = invalid(e, "messages", "unknown message role");
                        break;
                }
                if (name && !cJSON_IsString(name)) {
                        r = invalid(e, "messages", "message 'name' must be a string");
                        break;
                }
                if ((r = check_length(name, "messages", "a message's 'name'", MAX_NAME_BYTES, lim, e)) < 0)
                        break;
                char *text = NULL;
                if ((r = message_text(cJSON_GetObjectItemCaseSensitive(m, "content"),
                                      strcmp(role->valuestring, "assistant") == 0, &text, e)) < 0)
                        break;
                total += strlen(text);
                cJSON *nm = cJSON_CreateObject();
                int ok = nm && cJSON_AddStringToObject(nm, "role", role->valuestring) &&
                         cJSON_AddStringToObject(nm, "content", text) &&
                         (!name || cJSON_AddStringToObject(nm, "name", name->valuestring));
                free(text);
                if (nm)
                        cJSON_AddItemToArray(out, nm);
                if (!ok) {
                        r = -ENOMEM;
                        break;
                }
        }
        if (r == 0 && total > lim->max_prompt_bytes) {
                dsv__gw_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                                  "the messages hold %zu bytes of text, more than the %zu accepted", total,
                                  lim->max_prompt_bytes);
                r = -EINVAL;
        }
        if (r == 0 && !(q->messages_json = cJSON_PrintUnformatted(out)))
                r = -ENOMEM;
        cJSON_Delete(out);
        if (r == 0)
                q->input = DSV_IPC_INPUT_CHAT;
        return r;
}

static int too_long(struct dsv_gw_error *e, size_t n, size_t max) {
        dsv__gw_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                          "the prompt holds %zu bytes, more than the %zu accepted", n, max);
        return -EINVAL;
}

/* prompt: a string, an array of one string, or an array of token ids. */
static int parse_prompt(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                        struct dsv_gw_error *e) {
        const cJSON *p = field(o, "prompt");
        if (!p)
                return invalid(e, "prompt", "'prompt' is required");
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child))
                p = p->child;
        if (cJSON_IsString(p)) {
                size_t n = strlen(p->valuestring);
                if (n == 0)
                        return invalid(e, "prompt", "'prompt' must not be empty");
                if (n > lim->max_prompt_bytes)
                        return too_long(e, n, lim->max_prompt_bytes);
                q->input = DSV_IPC_INPUT_PROMPT;
                return (q->prompt = strdup(p->valuestring)) ? 0 : -ENOMEM;
        }
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
                return invalid(e, "prompt", "'prompt' must be a string or an array of token ids");
        if (!cJSON_IsNumber(p->child))
                return unsupported(e, "prompt", "more than one prompt per request");
        size_t n = (size_t)cJSON_GetArraySize(p);
        if (n > MAX_PROMPT_TOKENS || n * 4 > lim->max_prompt_bytes)
                return too_long(e, n * 4, lim->max_prompt_bytes);
        if (!(q->tokens = calloc(n, sizeof *q->tokens)))
                return -ENOMEM;
        const cJSON *t;
        size_t i = 0;
        cJSON_ArrayForEach(t, p) {
                if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || !(t->valuedouble >= 0) ||
                    !(t->valuedouble <= INT32_MAX))
                        return invalid(e, "prompt", "token ids must be integers between 0 and %d", INT32_MAX);
                q->tokens[i++] = (int32_t)t->valuedouble;
        }
        q->n_tokens = n;
        q->input = DSV_IPC_INPUT_TOKENS;
        return 0;
}

static int parse_sampling(const cJSON *o, struct dsv_ipc_sampling *s, struct dsv_gw_error *e) {
        int64_t v;
        bool present;
        int r;
        if ((r = get_float(o, "temperature", 0, 2, &s->temperature, e)) < 0 ||
            (r = get_float(o, "top_p", 0, 1, &s->top_p, e)) < 0 || (r = get_float(o, "min_p", 0, 1, &s->min_p, e)) < 0 ||
            (r = get_float(o, "presence_penalty", -2, 2, &s->presence_penalty, e)) < 0 ||
            (r = get_float(o, "frequency_penalty", -2, 2, &s->frequency_penalty, e)) < 0 ||
            (r = get_float(o, "repetition_penalty", 0.01, 100, &s->repetition_penalty, e)) < 0)
                return r;
        /* top_k: -1 is vLLM's "off", 0 ours. */
        if ((r = get_int(o, "top_k", -1, 1 << 20, &v, &present, e)) < 0)
                return r;
        if (present)
                s->top_k = v < 0 ? 0 : (int32_t)v;
        if ((r = get_int(o, "seed", 0, (int64_t)DSV_IPC_MAX_ID, &v, &present, e)) < 0)
                return r;
        if (present) {
                s->seed = (uint64_t)v;
                s->has_seed = 1;
        }
        return 0;
}

static int parse_max_tokens(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                            struct dsv_gw_error *e) {
        const char *key = field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        int64_t v;
        bool present;
        int r = get_int(o, key, 1, lim->max_tokens_limit, &v, &present, e);
        if (r < 0)
                return r;
        q->max_tokens = present ? (int32_t)v : lim->default_max_tokens;
        q->max_tokens_to_context = !present && lim->default_max_tokens == 0;
        return 0;
}

bool dsv__gw_model_served(const struct dsv_gw_limits *lim, const char *name) {
        if (lim->model && strcmp(name, lim->model) == 0)
                return true;
        for (size_t i = 0; i < lim->n_model_aliases; i++)
                if (strcmp(name, lim->model_aliases[i]) == 0)
                        return true;
        return false;
}

/* Parameters we do not implement are refused when they ask for something. */
static int refuse_unsupported(const cJSON *o, enum dsv_gw_api api, struct dsv_gw_error *e) {
        int64_t v;
        bool present, b = false;
        int r;
        if ((r = get_int(o, "n", 1, 1, &v, &present, e)) < 0)
                return field(o, "n") && cJSON_IsNumber(field(o, "n")) ? unsupported(e, "n", "n other than 1") : r;
        if (api == DSV_GW_API_COMPLETIONS) {
                if ((r = get_int(o, "best_of", 1, 1, &v, &present, e)) < 0)
                        return r;
                if ((r = get_bool(o, "echo", &b, e)) < 0)
                        return r;
                if (b)
                        return unsupported(e, "echo", "echo");
                const cJSON *suffix = field(o, "suffix");
                if (suffix && (!cJSON_IsString(suffix) || suffix->valuestring[0]))
                        return unsupported(e, "suffix", "suffix");
        }
        const cJSON *bias = field(o, "logit_bias");
        if (bias && (!cJSON_IsObject(bias) || bias->child))
                return unsupported(e, "logit_bias", "logit_bias");
        const cJSON *tools = field(o, "tools");
        if (tools && (!cJSON_IsArray(tools) || tools->child))
                return unsupported(e, "tools", "tool calling");
        const cJSON *functions = field(o, "functions");
        if (functions && (!cJSON_IsArray(functions) || functions->child))
                return unsupported(e, "functions", "function calling");
        const cJSON *fmt = field(o, "response_format");
        if (fmt) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
                if (!cJSON_IsObject(fmt) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
                        return unsupported(e, "response_format", "a response_format other than text");
        }
        const cJSON *user = field(o, "user");
        if (user && !cJSON_IsString(user))
                return invalid(e, "user", "'user' must be a string");
        return 0;
}

static int parse_logprobs(const cJSON *o, enum dsv_gw_api api, struct dsv_gw_request *req, struct dsv_gw_error *e) {
        int64_t v = 0;
        bool present;
        int r;
        if (api == DSV_GW_API_CHAT) {
                if ((r = get_bool(o, "logprobs", &req->logprobs, e)) < 0 ||
                    (r = get_int(o, "top_logprobs", 0, MAX_TOP_LOGPROBS, &v, &present, e)) < 0)
                        return r;
                if (present && !req->logprobs)
                        return invalid(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        } else {
                if ((r = get_int(o, "logprobs", 0, MAX_TOP_LOGPROBS, &v, &present, e)) < 0)
                        return r;
                req->logprobs = present;
        }
        req->top_logprobs = (int32_t)v;
        /* The worker reports the chosen token's logprob only along with alternatives. */
        req->ipc.u.request.logprobs = req->logprobs ? (v > 0 ? (int32_t)v : 1) : 0;
        return 0;
}

static int parse_stream(const cJSON *o, struct dsv_gw_request *req, struct dsv_gw_error *e) {
        int r = get_bool(o, "stream", &req->stream, e);
        if (r < 0)
                return r;
        const cJSON *so = field(o, "stream_options");
        if (!so)
                return 0;
        if (!cJSON_IsObject(so))
                return invalid(e, "stream_options", "'stream_options' must be an object");
        if ((r = get_bool(so, "include_usage", &req->include_usage, e)) < 0)
                snprintf(e->param, sizeof e->param, "stream_options.include_usage");
        return r;
}

static int parse_object(const cJSON *o, enum dsv_gw_api api, const struct dsv_gw_limits *lim, struct dsv_gw_request *req,
                        struct dsv_gw_error *e) {
        struct dsv_ipc_request *q = &req->ipc.u.request;
        const cJSON *model = field(o, "model");
        int r;
        if (!cJSON_IsObject(o))
                return invalid(e, NULL, "the request body must be a JSON object");
        if (!model)
                return invalid(e, "model", "'model' is required");
        if (!cJSON_IsString(model))
                return invalid(e, "model", "'model' must be a string");
        if ((r = check_length(model, "model", "'model'", MAX_NAME_BYTES, lim, e)) < 0 ||
            (r = check_length(field(o, "user"), "user", "'user'", MAX_NAME_BYTES, lim, e)) < 0)
                return r;
        if (!dsv__gw_model_served(lim, model->valuestring)) {
                dsv__gw_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                                  "The model does not exist or is not served here (see GET /v1/models)");
                return -EINVAL;
        }
        if ((r = refuse_unsupported(o, api, e)) < 0)
                return r;
        if ((r = api == DSV_GW_API_CHAT ? parse_messages(o, lim, q, e) : parse_prompt(o, lim, q, e)) < 0)
                return r;
        if ((r = parse_sampling(o, &q->sampling, e)) < 0 || (r = parse_max_tokens(o, lim, q, e)) < 0 ||
            (r = parse_stop(o, lim, q, e)) < 0 || (r = parse_logprobs(o, api, req, e)) < 0 || (r = parse_stream(o, req, e)) < 0)
                return r;
        return 0;
}

int dsv__gw_request_parse(const char *body, size_t len, enum dsv_gw_api api, const struct dsv_gw_limits *lim,
                          struct dsv_gw_request *ret, struct dsv_gw_error *err) {
        if ((!body && len) || api >= DSV_GW_API_COUNT || !lim || !ret || !err)
                return -EINVAL;
        if (!dsv__gw_utf8_valid(body, len))
                return invalid(err, NULL, "the request body is not valid UTF-8");
        int strict = dsv__gw_json_strict(body, len, err);
        if (strict < 0)
                return strict;
        cJSON *o = cJSON_ParseWithLength(body ? body : "", len);
        if (!o)
                return invalid(err, NULL, "the request body is not valid JSON");
        struct dsv_gw_request req = {.api = api};
        req.ipc.type = DSV_IPC_REQUEST;
        dsv_ipc_sampling_init(&req.ipc.u.request.sampling);
        int r = parse_object(o, api, lim, &req, err);
        cJSON_Delete(o);
        if (r == -ENOMEM)
                dsv__gw_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        if (r < 0) {
                dsv_ipc_msg_done(&req.ipc);
                return r;
        }
        *ret = req;
        return 0;
}

void dsv__gw_request_done(struct dsv_gw_request *r) {
        if (!r)
                return;
        dsv_ipc_msg_done(&r->ipc);
        memset(r, 0, sizeof *r);
}
