/* OpenAI request bodies -> dsv_ipc_request. Every field is checked
 * for type and range before anything reaches a worker; the error names the field the way
 * OpenAI does ("param"). Fields we cannot honour (a completion's n > 1, echo, suffix,
 * functions) and fields we do not know are refused rather than ignored, so a client
 * never gets an answer to a question it did not ask. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages.h"
#include "openai.h"

#define MAX_STOP 16      /* PROTOCOL.md: up to 16 stop strings */
#define MAX_TOP_LOGPROBS 20
#define MAX_CHOICES 16   /* n of a chat request */
#define MAX_PROMPT_TOKENS (1u << 20)
#define MAX_NAME_BYTES 256 /* model, user, a message's name */
#define MAX_STOP_BYTES 1024 /* one stop string */
#define MAX_LOGIT_BIAS 4096 /* PROTOCOL.md */

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

/* s as a JSON string, quoted and escaped byte for byte as cJSON_PrintUnformatted writes
 * it (the short escapes, \u00xx for the other control characters, the rest as is), at
 * out, which has room for 2 + 6 * strlen(s) bytes. Returns the end. */
static char *json_string_put(char *out, const char *s) {
        static const char hex[] = "0123456789abcdef";
        *out++ = '"';
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                unsigned c = *p;
                char short_escape = c == '"' ? '"' : c == '\\' ? '\\' : c == '\b' ? 'b' : c == '\f' ? 'f'
                                  : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : 0;
                if (short_escape) {
                        *out++ = '\\';
                        *out++ = short_escape;
                } else if (c < 0x20) {
                        memcpy(out, "\\u00", 4);
                        out[4] = hex[c >> 4];
                        out[5] = hex[c & 15];
                        out += 6;
                } else {
                        *out++ = (char)c;
                }
        }
        *out++ = '"';
        return out;
}

/* Written straight, not through a cJSON tree: every refusal an overloaded gateway sends
 * goes through here. */
int dsv__gw_error_json(const struct dsv_gw_error *e, char **ret_json, size_t *ret_len) {
        const char *type = e->type ? e->type : "server_error";
        size_t room = 64 + 6 * (strlen(e->message) + strlen(type) + strlen(e->param) + (e->code ? strlen(e->code) : 0));
        char *buf = malloc(room), *at = buf;
        if (!buf)
                return -ENOMEM;
        at = stpcpy(at, "{\"error\":{\"message\":");
        at = json_string_put(at, e->message);
        at = stpcpy(at, ",\"type\":");
        at = json_string_put(at, type);
        at = stpcpy(at, ",\"param\":");
        at = e->param[0] ? json_string_put(at, e->param) : stpcpy(at, "null");
        at = stpcpy(at, ",\"code\":");
        at = e->code ? json_string_put(at, e->code) : stpcpy(at, "null");
        at = stpcpy(at, "}}");
        *ret_json = buf;
        *ret_len = (size_t)(at - buf);
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
        if (api == DSV_GW_API_COMPLETIONS && (r = get_int(o, "n", 1, 1, &v, &present, e)) < 0)
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
        const cJSON *functions = field(o, "functions");
        if (functions && (!cJSON_IsArray(functions) || functions->child))
                return unsupported(e, "functions", "function calling");
        const cJSON *user = field(o, "user");
        if (user && !cJSON_IsString(user))
                return invalid(e, "user", "'user' must be a string");
        return 0;
}

/* Every field a request may carry; anything else that asks for something (is not null)
 * is refused by name rather than ignored. */
static const char *const chat_fields[] = {
        "model", "messages", "temperature", "top_p", "min_p", "top_k", "presence_penalty", "frequency_penalty",
        "repetition_penalty", "seed", "max_tokens", "max_completion_tokens", "stop", "logprobs", "top_logprobs",
        "stream", "stream_options", "n", "user", "logit_bias", "response_format", "tools", "tool_choice",
        "parallel_tool_calls", "functions", "reasoning_format", "guided_json", "guided_regex", "guided_choice",
        "guided_grammar", "structured_outputs"};
static const char *const completion_fields[] = {
        "model", "prompt", "temperature", "top_p", "min_p", "top_k", "presence_penalty", "frequency_penalty",
        "repetition_penalty", "seed", "max_tokens", "stop", "logprobs", "stream", "stream_options", "n", "user",
        "logit_bias", "best_of", "echo", "suffix", "response_format", "guided_json", "guided_regex", "guided_choice",
        "guided_grammar", "structured_outputs"};

static int refuse_unknown(const cJSON *o, enum dsv_gw_api api, struct dsv_gw_error *e) {
        return api == DSV_GW_API_CHAT
                       ? dsv__gw_only_known(o, chat_fields, sizeof chat_fields / sizeof *chat_fields, NULL, e)
                       : dsv__gw_only_known(o, completion_fields, sizeof completion_fields / sizeof *completion_fields,
                                            NULL, e);
}

/* n: a chat's choices, each the same request again on the instance whose prefix cache
 * holds the prompt's KV blocks. */
static int parse_choices(const cJSON *o, struct dsv_gw_request *req, struct dsv_gw_error *e) {
        int64_t v = 1;
        bool present;
        int r = get_int(o, "n", 1, MAX_CHOICES, &v, &present, e);
        req->n = (int32_t)v;
        return r;
}

/* reasoning_format (llama-server's per-request name): "deepseek" splits a think block
 * into reasoning_content, "none" leaves it in content; the default is the server's. */
static int parse_reasoning(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_gw_request *req,
                           struct dsv_gw_error *e) {
        const cJSON *v = field(o, "reasoning_format");
        enum dsv_gateway_reasoning_format f = lim->reasoning_format;
        if (v && cJSON_IsString(v) && strcmp(v->valuestring, "deepseek") == 0)
                f = DSV_GATEWAY_REASONING_DEEPSEEK;
        else if (v && cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0)
                f = DSV_GATEWAY_REASONING_NONE;
        else if (v)
                return invalid(e, "reasoning_format", "'reasoning_format' must be \"deepseek\" or \"none\"");
        req->split_think = f == DSV_GATEWAY_REASONING_DEEPSEEK;
        req->think_opened = lim->think_opened;
        return 0;
}

/* logit_bias: {"<token id>": bias in [-100, 100]}; the worker checks the ids against
 * its vocabulary. */
static int parse_logit_bias(const cJSON *o, struct dsv_ipc_request *q, struct dsv_gw_error *e) {
        const cJSON *bias = field(o, "logit_bias");
        if (!bias)
                return 0;
        if (!cJSON_IsObject(bias))
                return invalid(e, "logit_bias", "'logit_bias' must be an object of token ids to biases");
        size_t n = (size_t)cJSON_GetArraySize(bias);
        if (n > MAX_LOGIT_BIAS)
                return invalid(e, "logit_bias", "'logit_bias' may hold at most %d tokens", MAX_LOGIT_BIAS);
        if (n == 0)
                return 0;
        if (!(q->logit_bias = calloc(n, sizeof *q->logit_bias)))
                return -ENOMEM;
        const cJSON *it;
        cJSON_ArrayForEach(it, bias) {
                const char *k = it->string;
                char *end = NULL;
                long id = strtol(k, &end, 10);
                if (!k[0] || *end || k[0] == '-' || k[0] == '+' || (k[0] == '0' && k[1]) || id < 0 || id > INT32_MAX)
                        return invalid(e, "logit_bias", "'logit_bias' keys must be token ids (\"%.32s\" is not)", k);
                if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100))
                        return invalid(e, "logit_bias", "'logit_bias' values must be numbers between -100 and 100");
                q->logit_bias[q->n_logit_bias++] = (struct dsv_ipc_logit_bias){(int32_t)id, (float)it->valuedouble};
        }
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
        if ((r = refuse_unknown(o, api, e)) < 0)
                return r;
        if ((r = api == DSV_GW_API_CHAT ? dsv__gw_messages_parse(o, lim, q, e) : parse_prompt(o, lim, q, e)) < 0)
                return r;
        if (api == DSV_GW_API_CHAT &&
            ((r = dsv__gw_tools_parse(o, lim, req, e)) < 0 || (r = parse_reasoning(o, lim, req, e)) < 0 ||
             (r = parse_choices(o, req, e)) < 0))
                return r;
        if ((r = parse_sampling(o, &q->sampling, e)) < 0 || (r = parse_max_tokens(o, lim, q, e)) < 0 ||
            (r = parse_stop(o, lim, q, e)) < 0 || (r = dsv__gw_parse_constraint(o, lim, q, e)) < 0 ||
            (r = parse_logit_bias(o, q, e)) < 0 || (r = parse_logprobs(o, api, req, e)) < 0 ||
            (r = parse_stream(o, req, e)) < 0)
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
        struct dsv_gw_request req = {.api = api, .n = 1};
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
