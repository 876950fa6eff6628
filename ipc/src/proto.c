/* JSON encoding of the worker protocol (PROTOCOL.md). Every message is one JSON object
 * {"v": <major>, "type": "<name>", ...}. Unknown fields are ignored, so a minor
 * addition does not break older peers; a field of the wrong type or out of range is
 * -EPROTO naming the field; another major version is -EPROTONOSUPPORT. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "dsv_ipc.h"
#include "proto_internal.h"

/* Largest id, seed or deadline carried: cJSON prints 15 significant digits (its exact-
 * print check tolerates one ulp), so larger integers would not survive a round trip. */
#define MAX_SAFE_INT 999999999999999.0
#define MAX_STOP_STRINGS DSV__IPC_MAX_STOP_STRINGS
#define MAX_TOP_LOGPROBS DSV__IPC_MAX_TOP_LOGPROBS
/* Events in one "events" batch: a step carries at most a few thousand. */
#define MAX_BATCH_EVENTS 65536

static const char *const type_names[DSV_IPC_MSG_TYPE_COUNT] = {
        [DSV_IPC_REQUEST] = "request",           [DSV_IPC_CANCEL] = "cancel",
        [DSV_IPC_TOKEN] = "token",               [DSV_IPC_FINAL] = "final",
        [DSV_IPC_ERROR] = "error",               [DSV_IPC_HEALTH] = "health",
        [DSV_IPC_HEALTH_REPLY] = "health_reply", [DSV_IPC_STATS] = "stats",
        [DSV_IPC_STATS_REPLY] = "stats_reply",
};

static const char *const input_names[DSV_IPC_INPUT_COUNT] = {
        [DSV_IPC_INPUT_PROMPT] = "prompt",
        [DSV_IPC_INPUT_CHAT] = "chat",
        [DSV_IPC_INPUT_TOKENS] = "tokens",
};

static const char *const constraint_names[DSV_IPC_CONSTRAINT_COUNT] = {
        [DSV_IPC_CONSTRAINT_NONE] = "none",
        [DSV_IPC_CONSTRAINT_JSON_SCHEMA] = "json_schema",
        [DSV_IPC_CONSTRAINT_JSON_OBJECT] = "json_object",
        [DSV_IPC_CONSTRAINT_REGEX] = "regex",
        [DSV_IPC_CONSTRAINT_CHOICE] = "choice",
        [DSV_IPC_CONSTRAINT_GRAMMAR] = "grammar",
        [DSV_IPC_CONSTRAINT_COMPOSED] = "composed",
};

/* The kinds whose constraint_text is required. */
static int constraint_has_text(enum dsv_ipc_constraint kind) {
        return kind == DSV_IPC_CONSTRAINT_JSON_SCHEMA || kind == DSV_IPC_CONSTRAINT_REGEX ||
               kind == DSV_IPC_CONSTRAINT_GRAMMAR || kind == DSV_IPC_CONSTRAINT_COMPOSED;
}

const char *dsv_ipc_constraint_to_string(enum dsv_ipc_constraint kind) {
        return kind < DSV_IPC_CONSTRAINT_COUNT ? constraint_names[kind] : "unknown";
}

static const char *const error_names[DSV_IPC_ERROR_CODE_COUNT] = {
        [DSV_IPC_ERR_INVALID_REQUEST] = "invalid_request", [DSV_IPC_ERR_PROMPT_TOO_LONG] = "prompt_too_long",
        [DSV_IPC_ERR_OVERLOADED] = "overloaded",           [DSV_IPC_ERR_DEADLINE] = "deadline_exceeded",
        [DSV_IPC_ERR_CANCELLED] = "cancelled",             [DSV_IPC_ERR_PROTOCOL] = "protocol_error",
        [DSV_IPC_ERR_INTERNAL] = "internal_error",         [DSV_IPC_ERR_SHUTTING_DOWN] = "shutting_down",
};

const char *dsv_ipc_msg_type_to_string(enum dsv_ipc_msg_type type) {
        return type < DSV_IPC_MSG_TYPE_COUNT ? type_names[type] : "unknown";
}

const char *dsv_ipc_error_code_to_string(enum dsv_ipc_error_code code) {
        return code < DSV_IPC_ERROR_CODE_COUNT ? error_names[code] : "unknown";
}

uint64_t dsv_ipc_new_boot_id(void) {
        uint64_t v;
        if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
                /* no entropy yet (early boot): the clock and the pid still differ per process */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                v = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec * 2654435761u ^ (uint64_t)getpid() << 32;
        }
        return 1 + v % ((uint64_t)MAX_SAFE_INT - 1);
}

void dsv_ipc_sampling_init(struct dsv_ipc_sampling *s) {
        *s = (struct dsv_ipc_sampling){
                .temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.0f,
        };
}

/* ---- encoding ------------------------------------------------------------------- */

const double dsv_ipc_step_token_bounds[DSV_IPC_STEP_TOKEN_BUCKETS] = {1,   8,    16,   32,   64,   128,  256,
                                                                        512, 1024, 2048, 4096, 8192, 16384};

static int add_num(cJSON *o, const char *key, double v) {
        return cJSON_AddNumberToObject(o, key, v) ? 0 : -ENOMEM;
}

static int add_counts(cJSON *o, const char *key, const int64_t *v, int n) {
        cJSON *a = cJSON_AddArrayToObject(o, key);
        int r = a ? 0 : -ENOMEM;
        for (int i = 0; a && i < n; i++)
                r |= cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i])) ? 0 : -ENOMEM;
        return r;
}

int dsv_ipc_token_prob_bin(double p) {
        int b = p > 0 ? (int)(p * DSV_IPC_CONFIDENCE_BINS) : 0;
        return b < DSV_IPC_CONFIDENCE_BINS ? b : DSV_IPC_CONFIDENCE_BINS - 1;
}

int dsv_ipc_entropy_bin(double nats) {
        int b = nats > 0 ? (int)fmin(nats / DSV_IPC_ENTROPY_BIN_NATS, DSV_IPC_CONFIDENCE_BINS) : 0;
        return b < DSV_IPC_CONFIDENCE_BINS ? b : DSV_IPC_CONFIDENCE_BINS - 1;
}

static int add_id(cJSON *o, const char *key, uint64_t v) {
        if ((double)v > MAX_SAFE_INT)
                return -EINVAL;
        return add_num(o, key, (double)v);
}

static int add_str(cJSON *o, const char *key, const char *s) {
        return cJSON_AddStringToObject(o, key, s ? s : "") ? 0 : -ENOMEM;
}

static int encode_request(cJSON *o, const struct dsv_ipc_request *q) {
        int r = 0;
        if (q->input >= DSV_IPC_INPUT_COUNT || q->n_stop > MAX_STOP_STRINGS || q->constraint >= DSV_IPC_CONSTRAINT_COUNT ||
            q->n_logit_bias > DSV__IPC_MAX_LOGIT_BIAS || (constraint_has_text(q->constraint) && !q->constraint_text) ||
            (q->constraint == DSV_IPC_CONSTRAINT_CHOICE && (q->n_choices == 0 || q->n_choices > DSV__IPC_MAX_CHOICES)))
                return -EINVAL;
        r |= add_id(o, "id", q->id);
        r |= add_str(o, "input", input_names[q->input]);
        switch (q->input) {
        case DSV_IPC_INPUT_PROMPT:
                r |= add_str(o, "prompt", q->prompt);
                break;
        case DSV_IPC_INPUT_CHAT: {
                cJSON *msgs = cJSON_Parse(q->messages_json ? q->messages_json : "");
                if (!cJSON_IsArray(msgs)) {
                        cJSON_Delete(msgs);
                        return -EINVAL;
                }
                cJSON_AddItemToObject(o, "messages", msgs);
                if (q->tools_json) {
                        cJSON *tools = cJSON_Parse(q->tools_json);
                        if (!cJSON_IsArray(tools)) {
                                cJSON_Delete(tools);
                                return -EINVAL;
                        }
                        cJSON_AddItemToObject(o, "tools", tools);
                }
                break;
        }
        case DSV_IPC_INPUT_TOKENS: {
                cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
                if (!arr)
                        return -ENOMEM;
                for (size_t i = 0; i < q->n_tokens; i++)
                        if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber(q->tokens[i])))
                                return -ENOMEM;
                break;
        }
        default:
                return -EINVAL;
        }
        cJSON *s = cJSON_AddObjectToObject(o, "sampling");
        if (!s)
                return -ENOMEM;
        r |= add_num(s, "temperature", q->sampling.temperature);
        r |= add_num(s, "top_p", q->sampling.top_p);
        r |= add_num(s, "min_p", q->sampling.min_p);
        r |= add_num(s, "top_k", q->sampling.top_k);
        r |= add_num(s, "repetition_penalty", q->sampling.repetition_penalty);
        r |= add_num(s, "presence_penalty", q->sampling.presence_penalty);
        r |= add_num(s, "frequency_penalty", q->sampling.frequency_penalty);
        if (q->sampling.has_seed)
                r |= add_id(s, "seed", q->sampling.seed);
        r |= add_num(o, "max_tokens", q->max_tokens);
        if (q->max_tokens_to_context && !cJSON_AddTrueToObject(o, "max_tokens_to_context"))
                return -ENOMEM;
        if (q->max_prompt_tokens)
                r |= add_num(o, "max_prompt_tokens", q->max_prompt_tokens);
        r |= add_num(o, "logprobs", q->logprobs);
        if (q->deadline_unix_ms)
                r |= add_num(o, "deadline_unix_ms", (double)q->deadline_unix_ms);
        cJSON *stop = cJSON_AddArrayToObject(o, "stop");
        if (!stop)
                return -ENOMEM;
        for (size_t i = 0; i < q->n_stop; i++)
                if (!cJSON_AddItemToArray(stop, cJSON_CreateString(q->stop[i])))
                        return -ENOMEM;
        if (q->constraint != DSV_IPC_CONSTRAINT_NONE) {
                cJSON *c = cJSON_AddObjectToObject(o, "constraint");
                if (!c)
                        return -ENOMEM;
                r |= add_str(c, "kind", constraint_names[q->constraint]);
                if (q->constraint_text)
                        r |= add_str(c, "text", q->constraint_text);
                if (q->constraint == DSV_IPC_CONSTRAINT_CHOICE) {
                        cJSON *choices = cJSON_AddArrayToObject(c, "choices");
                        if (!choices)
                                return -ENOMEM;
                        for (size_t i = 0; i < q->n_choices; i++)
                                if (!q->choices[i] || !cJSON_AddItemToArray(choices, cJSON_CreateString(q->choices[i])))
                                        return -ENOMEM;
                }
        }
        if (q->n_logit_bias > 0) {
                cJSON *bias = cJSON_AddArrayToObject(o, "logit_bias");
                if (!bias)
                        return -ENOMEM;
                for (size_t i = 0; i < q->n_logit_bias; i++) {
                        const struct dsv_ipc_logit_bias *b = &q->logit_bias[i];
                        if (b->token < 0 || !(b->bias >= -100 && b->bias <= 100))
                                return -EINVAL;
                        cJSON *pair = cJSON_CreateArray();
                        if (!pair || !cJSON_AddItemToArray(bias, pair) ||
                            !cJSON_AddItemToArray(pair, cJSON_CreateNumber(b->token)) ||
                            !cJSON_AddItemToArray(pair, cJSON_CreateNumber(b->bias)))
                                return -ENOMEM;
                }
        }
        return r ? -EINVAL : 0;
}

static int encode_body(cJSON *o, const struct dsv_ipc_msg *m) {
        int r = 0;
        switch (m->type) {
        case DSV_IPC_REQUEST:
                return encode_request(o, &m->u.request);
        case DSV_IPC_CANCEL:
                return add_id(o, "id", m->u.cancel_id);
        case DSV_IPC_TOKEN: {
                const struct dsv_ipc_token *t = &m->u.token;
                r |= add_id(o, "id", t->id);
                r |= add_num(o, "token", t->token);
                r |= add_str(o, "text", t->text);
                if (t->n_top > 0) {
                        r |= add_num(o, "logprob", dsv__ipc_logprob_clamp(t->logprob));
                        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
                        if (!top)
                                return -ENOMEM;
                        for (size_t i = 0; i < t->n_top; i++) {
                                cJSON *e = cJSON_CreateObject();
                                if (!e || !cJSON_AddItemToArray(top, e))
                                        return -ENOMEM;
                                r |= add_num(e, "token", t->top[i].token);
                                r |= add_num(e, "logprob", dsv__ipc_logprob_clamp(t->top[i].logprob));
                                if (t->top_bytes && (t->top_bytes[i].n > DSV__IPC_MAX_TOKEN_BYTES ||
                                                     (t->top_bytes[i].n && !t->top_bytes[i].bytes)))
                                        return -EINVAL;
                                if (t->top_bytes) {
                                        cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
                                        if (!bytes)
                                                return -ENOMEM;
                                        for (size_t k = 0; k < t->top_bytes[i].n; k++)
                                                if (!cJSON_AddItemToArray(bytes, cJSON_CreateNumber(t->top_bytes[i].bytes[k])))
                                                        return -ENOMEM;
                                }
                        }
                }
                return r ? -EINVAL : 0;
        }
        case DSV_IPC_FINAL: {
                const struct dsv_ipc_final *f = &m->u.final;
                r |= add_id(o, "id", f->id);
                r |= add_str(o, "finish_reason", f->finish_reason);
                r |= add_num(o, "prompt_tokens", f->prompt_tokens);
                r |= add_num(o, "completion_tokens", f->completion_tokens);
                if (f->cached_tokens > 0)
                        r |= add_num(o, "cached_tokens", f->cached_tokens);
                r |= add_num(o, "queue_s", f->queue_s);
                r |= add_num(o, "prefill_s", f->prefill_s);
                r |= add_num(o, "decode_s", f->decode_s);
                r |= add_num(o, "ttft_s", f->ttft_s);
                return r ? -EINVAL : 0;
        }
        case DSV_IPC_ERROR: {
                const struct dsv_ipc_error *e = &m->u.error;
                if (e->code >= DSV_IPC_ERROR_CODE_COUNT)
                        return -EINVAL;
                r |= add_id(o, "id", e->id);
                r |= add_str(o, "code", error_names[e->code]);
                r |= add_str(o, "message", e->message);
                return r ? -EINVAL : 0;
        }
        case DSV_IPC_HEALTH:
        case DSV_IPC_STATS:
                return add_id(o, "seq", m->u.probe.seq);
        case DSV_IPC_HEALTH_REPLY:
                r |= add_id(o, "seq", m->u.health.seq);
                r |= add_str(o, "state", m->u.health.state);
                r |= add_num(o, "uptime_s", m->u.health.uptime_s);
                if (m->u.health.boot_id)
                        r |= add_id(o, "boot_id", m->u.health.boot_id);
                return r ? -EINVAL : 0;
        case DSV_IPC_STATS_REPLY: {
                const struct dsv_ipc_stats *s = &m->u.stats;
                r |= add_id(o, "seq", s->seq);
                r |= add_num(o, "running", s->running);
                r |= add_num(o, "waiting", s->waiting);
                r |= add_num(o, "queued_prompt_tokens", (double)s->queued_prompt_tokens);
                r |= add_num(o, "kv_blocks_used", s->kv_blocks_used);
                r |= add_num(o, "kv_blocks_total", s->kv_blocks_total);
                r |= add_num(o, "prefix_hit_rate", s->prefix_hit_rate);
                r |= add_num(o, "preemptions", (double)s->preemptions);
                r |= add_num(o, "max_batch", s->max_batch);
                r |= add_num(o, "token_budget", s->token_budget);
                r |= add_num(o, "constrained_tokens", (double)s->constrained_tokens);
                r |= add_num(o, "forced_tokens", (double)s->forced_tokens);
                if (s->spec_verifications > 0) {
                        r |= add_num(o, "spec_verifications", (double)s->spec_verifications);
                        r |= add_num(o, "spec_draft_tokens", (double)s->spec_draft_tokens);
                        r |= add_num(o, "spec_accepted_tokens", (double)s->spec_accepted_tokens);
                        cJSON *h = cJSON_AddArrayToObject(o, "spec_accepted_hist");
                        if (!h)
                                return -ENOMEM;
                        for (int32_t i = 0; i < s->n_spec_hist && i < DSV_IPC_SPEC_HIST; i++) {
                                cJSON *e = cJSON_CreateNumber((double)s->spec_accepted_hist[i]);
                                if (!e || !cJSON_AddItemToArray(h, e))
                                        return -ENOMEM;
                        }
                }
                r |= add_num(o, "kv_bytes_per_token", (double)s->kv_bytes_per_token);
                r |= add_num(o, "prefix_query_tokens", (double)s->prefix_query_tokens);
                r |= add_num(o, "prefix_hit_tokens", (double)s->prefix_hit_tokens);
                r |= add_num(o, "steps", (double)s->steps);
                r |= add_num(o, "step_tokens", (double)s->step_tokens);
                r |= add_counts(o, "step_tokens_buckets", s->step_tokens_buckets, DSV_IPC_STEP_TOKEN_BUCKETS + 1);
                r |= add_counts(o, "token_prob_hist", s->token_prob_hist, DSV_IPC_CONFIDENCE_BINS);
                r |= add_counts(o, "entropy_hist", s->entropy_hist, DSV_IPC_CONFIDENCE_BINS);
                r |= add_num(o, "confidence_requests", (double)s->confidence_requests);
                if (s->kv_disk_bytes_capacity > 0) {
                        r |= add_num(o, "kv_disk_bytes_used", (double)s->kv_disk_bytes_used);
                        r |= add_num(o, "kv_disk_bytes_capacity", (double)s->kv_disk_bytes_capacity);
                        r |= add_num(o, "kv_disk_blocks_written", (double)s->kv_disk_blocks_written);
                        r |= add_num(o, "kv_disk_blocks_read", (double)s->kv_disk_blocks_read);
                        r |= add_num(o, "kv_disk_blocks_dropped", (double)s->kv_disk_blocks_dropped);
                        r |= add_num(o, "kv_disk_blocks_corrupt", (double)s->kv_disk_blocks_corrupt);
                        r |= add_num(o, "prefix_disk_hit_tokens", (double)s->prefix_disk_hit_tokens);
                        r |= cJSON_AddBoolToObject(o, "kv_disk_failed", s->kv_disk_failed) ? 0 : -ENOMEM;
                }
                return r ? -EINVAL : 0;
        }
        default:
                return -EINVAL;
        }
}

int dsv_ipc_msg_encode(const struct dsv_ipc_msg *msg, char **ret_buf, size_t *ret_len) {
        if (!msg || !ret_buf || msg->type >= DSV_IPC_MSG_TYPE_COUNT)
                return -EINVAL;
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return -ENOMEM;
        int r = add_num(o, "v", DSV_IPC_PROTOCOL_VERSION);
        if (r == 0)
                r = add_num(o, "minor", DSV_IPC_PROTOCOL_MINOR);
        if (r == 0)
                r = add_str(o, "type", type_names[msg->type]);
        if (r == 0)
                r = encode_body(o, msg);
        char *text = r == 0 ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (r < 0)
                return r;
        if (!text)
                return -ENOMEM;
        *ret_buf = text;
        if (ret_len)
                *ret_len = strlen(text);
        return 0;
}

/* ---- decoding ------------------------------------------------------------------- */

struct decoder {
        char *err;
        size_t err_size;
};

static int bad(struct decoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct decoder *d, const char *fmt, ...) {
        if (d->err && d->err_size) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(d->err, d->err_size, fmt, ap);
                va_end(ap);
        }
        return -EPROTO;
}

/* Reads a number field into *out when present; required fields must exist. The range
 * is inclusive; integral demands a whole number. */
static int get_num(struct decoder *d, const cJSON *o, const char *key, int required, double lo, double hi,
                   int integral, double *out) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!v)
                return required ? bad(d, "field '%s' is missing", key) : 0;
        if (!cJSON_IsNumber(v))
                return bad(d, "field '%s' must be a number", key);
        double x = v->valuedouble;
        if (!isfinite(x) || x < lo || x > hi)
                return bad(d, "field '%s' is out of range [%g, %g]", key, lo, hi);
        if (integral && x != floor(x))
                return bad(d, "field '%s' must be an integer", key);
        *out = x;
        return 0;
}

/* The index of name in names[0..n), -1 when it is none of them. */
static int name_index(const char *name, const char *const *names, int n) {
        for (int i = 0; i < n; i++)
                if (strcmp(name, names[i]) == 0)
                        return i;
        return -1;
}

static int get_u64(struct decoder *d, const cJSON *o, const char *key, int required, uint64_t *out) {
        double x = (double)*out;
        int r = get_num(d, o, key, required, 0, MAX_SAFE_INT, 1, &x);
        if (r == 0)
                *out = (uint64_t)x;
        return r;
}

static int get_i32(struct decoder *d, const cJSON *o, const char *key, int required, int32_t lo, int32_t hi,
                   int32_t *out) {
        double x = *out;
        int r = get_num(d, o, key, required, lo, hi, 1, &x);
        if (r == 0)
                *out = (int32_t)x;
        return r;
}

static int get_i64(struct decoder *d, const cJSON *o, const char *key, int required, int64_t *out) {
        double x = (double)*out;
        int r = get_num(d, o, key, required, 0, MAX_SAFE_INT, 1, &x);
        if (r == 0)
                *out = (int64_t)x;
        return r;
}

/* An optional boolean field (absent: *out unchanged). */
static int get_opt_bool(struct decoder *d, const cJSON *o, const char *key, bool *out) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!v)
                return 0;
        if (!cJSON_IsBool(v))
                return bad(d, "field '%s' must be true or false", key);
        *out = cJSON_IsTrue(v);
        return 0;
}

/* stats_reply's optional count arrays (step_tokens_buckets, the confidence histograms):
 * exactly one count per bucket. */
static int get_counts(struct decoder *d, const cJSON *o, const char *key, int n, int64_t *out) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!a)
                return 0;
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
                return bad(d, "%s: expected an array of %d counts", key, n);
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                double x = cJSON_IsNumber(e) ? e->valuedouble : -1;
                if (!(x >= 0 && x <= MAX_SAFE_INT) || x != (double)(int64_t)x)
                        return bad(d, "%s[%d]: expected a count 0..%.0f", key, i, MAX_SAFE_INT);
                out[i] = (int64_t)x;
        }
        return 0;
}

static int get_float(struct decoder *d, const cJSON *o, const char *key, float lo, float hi, float *out) {
        double x = *out;
        int r = get_num(d, o, key, 0, lo, hi, 0, &x);
        if (r == 0)
                *out = (float)x;
        return r;
}

static int get_double(struct decoder *d, const cJSON *o, const char *key, double *out) {
        return get_num(d, o, key, 0, -1e300, 1e300, 0, out);
}

static int get_str(struct decoder *d, const cJSON *o, const char *key, int required, char **out) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!v)
                return required ? bad(d, "field '%s' is missing", key) : 0;
        if (!cJSON_IsString(v))
                return bad(d, "field '%s' must be a string", key);
        char *s = strdup(v->valuestring);
        if (!s)
                return -ENOMEM;
        free(*out);
        *out = s;
        return 0;
}

static int decode_sampling(struct decoder *d, const cJSON *s, struct dsv_ipc_sampling *out) {
        int r;
        if (!cJSON_IsObject(s))
                return bad(d, "field 'sampling' must be an object");
        if ((r = get_float(d, s, "temperature", 0, 100, &out->temperature)) < 0 ||
            (r = get_float(d, s, "top_p", 0, 1, &out->top_p)) < 0 ||
            (r = get_float(d, s, "min_p", 0, 1, &out->min_p)) < 0 ||
            (r = get_i32(d, s, "top_k", 0, 0, 1 << 30, &out->top_k)) < 0 ||
            (r = get_float(d, s, "repetition_penalty", 0.01f, 100, &out->repetition_penalty)) < 0 ||
            (r = get_float(d, s, "presence_penalty", -2, 2, &out->presence_penalty)) < 0 ||
            (r = get_float(d, s, "frequency_penalty", -2, 2, &out->frequency_penalty)) < 0)
                return r;
        if (cJSON_GetObjectItemCaseSensitive(s, "seed")) {
                if ((r = get_u64(d, s, "seed", 1, &out->seed)) < 0)
                        return r;
                out->has_seed = 1;
        }
        return 0;
}

static int decode_constraint(struct decoder *d, const cJSON *o, struct dsv_ipc_request *q) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "constraint");
        char *kind = NULL;
        int r;
        if (!c)
                return 0;
        if (!cJSON_IsObject(c))
                return bad(d, "field 'constraint' must be an object");
        if ((r = get_str(d, c, "kind", 1, &kind)) < 0)
                return r;
        int k = name_index(kind, constraint_names, DSV_IPC_CONSTRAINT_COUNT);
        free(kind);
        if (k < 0)
                return bad(d, "field 'constraint.kind' must be one of none, json_schema, json_object, regex, choice, "
                              "grammar, composed");
        q->constraint = (enum dsv_ipc_constraint)k;
        if ((r = get_str(d, c, "text", constraint_has_text(q->constraint), &q->constraint_text)) < 0)
                return r;
        if (q->constraint != DSV_IPC_CONSTRAINT_CHOICE)
                return 0;
        const cJSON *choices = cJSON_GetObjectItemCaseSensitive(c, "choices");
        int n = cJSON_GetArraySize(choices);
        if (!cJSON_IsArray(choices) || n == 0 || n > DSV__IPC_MAX_CHOICES)
                return bad(d, "field 'constraint.choices' must be an array of 1 to %d strings", DSV__IPC_MAX_CHOICES);
        if (!(q->choices = calloc((size_t)n, sizeof *q->choices)))
                return -ENOMEM;
        const cJSON *e;
        cJSON_ArrayForEach(e, choices) {
                if (!cJSON_IsString(e))
                        return bad(d, "field 'constraint.choices[%zu]' must be a string", q->n_choices);
                if (!(q->choices[q->n_choices] = strdup(e->valuestring)))
                        return -ENOMEM;
                q->n_choices++;
        }
        return 0;
}

static int decode_logit_bias(struct decoder *d, const cJSON *o, struct dsv_ipc_request *q) {
        const cJSON *bias = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
        if (!bias)
                return 0;
        if (!cJSON_IsArray(bias) || cJSON_GetArraySize(bias) > DSV__IPC_MAX_LOGIT_BIAS)
                return bad(d, "field 'logit_bias' must be an array of at most %d [token, bias] pairs",
                           DSV__IPC_MAX_LOGIT_BIAS);
        q->logit_bias = calloc((size_t)cJSON_GetArraySize(bias) + 1, sizeof *q->logit_bias);
        if (!q->logit_bias)
                return -ENOMEM;
        const cJSON *e;
        cJSON_ArrayForEach(e, bias) {
                const cJSON *tok = cJSON_GetArrayItem(e, 0), *val = cJSON_GetArrayItem(e, 1);
                if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(tok) || !cJSON_IsNumber(val) ||
                    !(tok->valuedouble >= 0 && tok->valuedouble <= INT32_MAX) ||
                    tok->valuedouble != floor(tok->valuedouble) || !(val->valuedouble >= -100 && val->valuedouble <= 100))
                        return bad(d, "field 'logit_bias[%zu]' must be [token id, bias in -100..100]", q->n_logit_bias);
                q->logit_bias[q->n_logit_bias++] = (struct dsv_ipc_logit_bias){(int32_t)tok->valuedouble,
                                                                               (float)val->valuedouble};
        }
        return 0;
}

static int decode_request(struct decoder *d, const cJSON *o, struct dsv_ipc_request *q) {
        int r;
        char *input = NULL;
        dsv_ipc_sampling_init(&q->sampling);
        q->max_tokens = 16;
        if ((r = get_u64(d, o, "id", 1, &q->id)) < 0 || (r = get_str(d, o, "input", 1, &input)) < 0)
                return r;
        int kind = name_index(input, input_names, DSV_IPC_INPUT_COUNT);
        free(input);
        if (kind < 0)
                return bad(d, "field 'input' must be one of prompt, chat, tokens");
        q->input = (enum dsv_ipc_input)kind;
        if (q->input == DSV_IPC_INPUT_PROMPT && (r = get_str(d, o, "prompt", 1, &q->prompt)) < 0)
                return r;
        if (q->input == DSV_IPC_INPUT_CHAT) {
                const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
                if (!cJSON_IsArray(msgs))
                        return bad(d, "field 'messages' must be an array");
                if (!(q->messages_json = cJSON_PrintUnformatted(msgs)))
                        return -ENOMEM;
                const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
                if (tools && !cJSON_IsArray(tools))
                        return bad(d, "field 'tools' must be an array");
                if (tools && !(q->tools_json = cJSON_PrintUnformatted(tools)))
                        return -ENOMEM;
        }
        if (q->input == DSV_IPC_INPUT_TOKENS) {
                const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "tokens");
                if (!cJSON_IsArray(arr))
                        return bad(d, "field 'tokens' must be an array");
                int n = cJSON_GetArraySize(arr);
                q->tokens = calloc(n ? (size_t)n : 1, sizeof *q->tokens);
                if (!q->tokens)
                        return -ENOMEM;
                const cJSON *e;
                cJSON_ArrayForEach(e, arr) {
                        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX ||
                            e->valuedouble != floor(e->valuedouble))
                                return bad(d, "field 'tokens[%zu]' must be a token id", q->n_tokens);
                        q->tokens[q->n_tokens++] = (int32_t)e->valuedouble;
                }
        }
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "sampling");
        if (s && (r = decode_sampling(d, s, &q->sampling)) < 0)
                return r;
        if ((r = get_i32(d, o, "max_tokens", 0, 0, 1 << 30, &q->max_tokens)) < 0 ||
            (r = get_i32(d, o, "logprobs", 0, 0, MAX_TOP_LOGPROBS, &q->logprobs)) < 0 ||
            (r = get_i32(d, o, "max_prompt_tokens", 0, 0, 1 << 30, &q->max_prompt_tokens)) < 0 ||
            (r = get_i64(d, o, "deadline_unix_ms", 0, &q->deadline_unix_ms)) < 0)
                return r;
        const cJSON *to_context = cJSON_GetObjectItemCaseSensitive(o, "max_tokens_to_context");
        if (to_context && !cJSON_IsBool(to_context))
                return bad(d, "field 'max_tokens_to_context' must be true or false");
        q->max_tokens_to_context = cJSON_IsTrue(to_context);
        const cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (stop) {
                if (!cJSON_IsArray(stop))
                        return bad(d, "field 'stop' must be an array of strings");
                int n = cJSON_GetArraySize(stop);
                if (n > MAX_STOP_STRINGS)
                        return bad(d, "field 'stop' has %d strings; at most %d", n, MAX_STOP_STRINGS);
                q->stop = calloc(n ? (size_t)n : 1, sizeof *q->stop);
                if (!q->stop)
                        return -ENOMEM;
                const cJSON *e;
                cJSON_ArrayForEach(e, stop) {
                        if (!cJSON_IsString(e) || !e->valuestring[0])
                                return bad(d, "field 'stop[%zu]' must be a non-empty string", q->n_stop);
                        if (!(q->stop[q->n_stop] = strdup(e->valuestring)))
                                return -ENOMEM;
                        q->n_stop++;
                }
        }
        if ((r = decode_constraint(d, o, q)) < 0)
                return r;
        return decode_logit_bias(d, o, q);
}

static int decode_token(struct decoder *d, const cJSON *o, struct dsv_ipc_token *t) {
        int r;
        if ((r = get_u64(d, o, "id", 1, &t->id)) < 0 || (r = get_i32(d, o, "token", 1, 0, INT32_MAX, &t->token)) < 0 ||
            (r = get_str(d, o, "text", 1, &t->text)) < 0 || (r = get_float(d, o, "logprob", -1e30f, 0, &t->logprob)) < 0)
                return r;
        const cJSON *top = cJSON_GetObjectItemCaseSensitive(o, "top_logprobs");
        if (!top)
                return 0;
        if (!cJSON_IsArray(top) || cJSON_GetArraySize(top) > MAX_TOP_LOGPROBS)
                return bad(d, "field 'top_logprobs' must be an array of at most %d entries", MAX_TOP_LOGPROBS);
        t->top = calloc((size_t)cJSON_GetArraySize(top) + 1, sizeof *t->top);
        if (!t->top)
                return -ENOMEM;
        const cJSON *e;
        cJSON_ArrayForEach(e, top) {
                struct dsv_ipc_logprob *lp = &t->top[t->n_top];
                if (!cJSON_IsObject(e))
                        return bad(d, "field 'top_logprobs[%zu]' must be an object", t->n_top);
                if ((r = get_i32(d, e, "token", 1, 0, INT32_MAX, &lp->token)) < 0 ||
                    (r = get_float(d, e, "logprob", -1e30f, 0, &lp->logprob)) < 0)
                        return r;
                t->n_top++;
                const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(e, "bytes");
                if (!bytes)
                        continue;
                size_t at = t->n_top - 1;
                if (!cJSON_IsArray(bytes) || cJSON_GetArraySize(bytes) > DSV__IPC_MAX_TOKEN_BYTES)
                        return bad(d, "field 'top_logprobs[%zu].bytes' must be an array of at most %d bytes", at,
                                   DSV__IPC_MAX_TOKEN_BYTES);
                if (!t->top_bytes && !(t->top_bytes = calloc((size_t)cJSON_GetArraySize(top), sizeof *t->top_bytes)))
                        return -ENOMEM;
                struct dsv_ipc_bytes *tb = &t->top_bytes[at];
                if (!(tb->bytes = malloc((size_t)cJSON_GetArraySize(bytes) + 1)))
                        return -ENOMEM;
                const cJSON *b;
                cJSON_ArrayForEach(b, bytes) {
                        if (!cJSON_IsNumber(b) || !(b->valuedouble >= 0 && b->valuedouble <= 255) ||
                            b->valuedouble != floor(b->valuedouble))
                                return bad(d, "field 'top_logprobs[%zu].bytes' must hold integers 0..255", at);
                        tb->bytes[tb->n++] = (uint8_t)b->valuedouble;
                }
        }
        return 0;
}

static int decode_body(struct decoder *d, const cJSON *o, struct dsv_ipc_msg *m) {
        int r;
        switch (m->type) {
        case DSV_IPC_REQUEST:
                return decode_request(d, o, &m->u.request);
        case DSV_IPC_CANCEL:
                return get_u64(d, o, "id", 1, &m->u.cancel_id);
        case DSV_IPC_TOKEN:
                return decode_token(d, o, &m->u.token);
        case DSV_IPC_FINAL: {
                struct dsv_ipc_final *f = &m->u.final;
                if ((r = get_u64(d, o, "id", 1, &f->id)) < 0 || (r = get_str(d, o, "finish_reason", 1, &f->finish_reason)) < 0 ||
                    (r = get_i32(d, o, "prompt_tokens", 1, 0, INT32_MAX, &f->prompt_tokens)) < 0 ||
                    (r = get_i32(d, o, "completion_tokens", 1, 0, INT32_MAX, &f->completion_tokens)) < 0 ||
                    (r = get_i32(d, o, "cached_tokens", 0, 0, f->prompt_tokens, &f->cached_tokens)) < 0 ||
                    (r = get_double(d, o, "queue_s", &f->queue_s)) < 0 || (r = get_double(d, o, "prefill_s", &f->prefill_s)) < 0 ||
                    (r = get_double(d, o, "decode_s", &f->decode_s)) < 0 || (r = get_double(d, o, "ttft_s", &f->ttft_s)) < 0)
                        return r;
                return 0;
        }
        case DSV_IPC_ERROR: {
                struct dsv_ipc_error *e = &m->u.error;
                char *code = NULL;
                if ((r = get_u64(d, o, "id", 1, &e->id)) < 0 || (r = get_str(d, o, "code", 1, &code)) < 0 ||
                    (r = get_str(d, o, "message", 1, &e->message)) < 0) {
                        free(code);
                        return r;
                }
                int found = name_index(code, error_names, DSV_IPC_ERROR_CODE_COUNT);
                free(code);
                if (found < 0)
                        return bad(d, "field 'code' is not a known error code");
                e->code = (enum dsv_ipc_error_code)found;
                return 0;
        }
        case DSV_IPC_HEALTH:
        case DSV_IPC_STATS:
                return get_u64(d, o, "seq", 1, &m->u.probe.seq);
        case DSV_IPC_HEALTH_REPLY:
                if ((r = get_u64(d, o, "seq", 1, &m->u.health.seq)) < 0 ||
                    (r = get_str(d, o, "state", 1, &m->u.health.state)) < 0 ||
                    (r = get_double(d, o, "uptime_s", &m->u.health.uptime_s)) < 0 ||
                    (r = get_u64(d, o, "boot_id", 0, &m->u.health.boot_id)) < 0)
                        return r;
                return 0;
        case DSV_IPC_STATS_REPLY: {
                struct dsv_ipc_stats *s = &m->u.stats;
                if ((r = get_u64(d, o, "seq", 1, &s->seq)) < 0 || (r = get_i32(d, o, "running", 1, 0, INT32_MAX, &s->running)) < 0 ||
                    (r = get_i32(d, o, "waiting", 1, 0, INT32_MAX, &s->waiting)) < 0 ||
                    (r = get_i64(d, o, "queued_prompt_tokens", 1, &s->queued_prompt_tokens)) < 0 ||
                    (r = get_i32(d, o, "kv_blocks_used", 0, 0, INT32_MAX, &s->kv_blocks_used)) < 0 ||
                    (r = get_i32(d, o, "kv_blocks_total", 0, 0, INT32_MAX, &s->kv_blocks_total)) < 0 ||
                    (r = get_double(d, o, "prefix_hit_rate", &s->prefix_hit_rate)) < 0 ||
                    (r = get_i64(d, o, "preemptions", 0, &s->preemptions)) < 0 ||
                    (r = get_i32(d, o, "max_batch", 0, 0, INT32_MAX, &s->max_batch)) < 0 ||
                    (r = get_i32(d, o, "token_budget", 0, 0, INT32_MAX, &s->token_budget)) < 0 ||
                    (r = get_i64(d, o, "constrained_tokens", 0, &s->constrained_tokens)) < 0 ||
                    (r = get_i64(d, o, "forced_tokens", 0, &s->forced_tokens)) < 0 ||
                    (r = get_i64(d, o, "spec_verifications", 0, &s->spec_verifications)) < 0 ||
                    (r = get_i64(d, o, "spec_draft_tokens", 0, &s->spec_draft_tokens)) < 0 ||
                    (r = get_i64(d, o, "spec_accepted_tokens", 0, &s->spec_accepted_tokens)) < 0 ||
                    (r = get_i64(d, o, "kv_bytes_per_token", 0, &s->kv_bytes_per_token)) < 0 ||
                    (r = get_i64(d, o, "prefix_query_tokens", 0, &s->prefix_query_tokens)) < 0 ||
                    (r = get_i64(d, o, "prefix_hit_tokens", 0, &s->prefix_hit_tokens)) < 0 ||
                    (r = get_i64(d, o, "steps", 0, &s->steps)) < 0 ||
                    (r = get_i64(d, o, "step_tokens", 0, &s->step_tokens)) < 0 ||
                    (r = get_counts(d, o, "step_tokens_buckets", DSV_IPC_STEP_TOKEN_BUCKETS + 1,
                                    s->step_tokens_buckets)) < 0 ||
                    (r = get_counts(d, o, "token_prob_hist", DSV_IPC_CONFIDENCE_BINS, s->token_prob_hist)) < 0 ||
                    (r = get_counts(d, o, "entropy_hist", DSV_IPC_CONFIDENCE_BINS, s->entropy_hist)) < 0 ||
                    (r = get_i64(d, o, "confidence_requests", 0, &s->confidence_requests)) < 0 ||
                    (r = get_i64(d, o, "kv_disk_bytes_used", 0, &s->kv_disk_bytes_used)) < 0 ||
                    (r = get_i64(d, o, "kv_disk_bytes_capacity", 0, &s->kv_disk_bytes_capacity)) < 0 ||
                    (r = get_i64(d, o, "kv_disk_blocks_written", 0, &s->kv_disk_blocks_written)) < 0 ||
                    (r = get_i64(d, o, "kv_disk_blocks_read", 0, &s->kv_disk_blocks_read)) < 0 ||
                    (r = get_i64(d, o, "kv_disk_blocks_dropped", 0, &s->kv_disk_blocks_dropped)) < 0 ||
                    (r = get_i64(d, o, "kv_disk_blocks_corrupt", 0, &s->kv_disk_blocks_corrupt)) < 0 ||
                    (r = get_i64(d, o, "prefix_disk_hit_tokens", 0, &s->prefix_disk_hit_tokens)) < 0 ||
                    (r = get_opt_bool(d, o, "kv_disk_failed", &s->kv_disk_failed)) < 0)
                        return r;
                const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "spec_accepted_hist");
                if (!h)
                        return 0;
                if (!cJSON_IsArray(h) || cJSON_GetArraySize(h) > DSV_IPC_SPEC_HIST)
                        return bad(d, "field 'spec_accepted_hist' must be an array of at most %d counts",
                                   DSV_IPC_SPEC_HIST);
                const cJSON *e;
                cJSON_ArrayForEach(e, h) {
                        double x = cJSON_IsNumber(e) ? e->valuedouble : -1;
                        if (!(x >= 0 && x <= MAX_SAFE_INT) || x != (double)(int64_t)x)
                                return bad(d, "field 'spec_accepted_hist[%d]' must be a count", s->n_spec_hist);
                        s->spec_accepted_hist[s->n_spec_hist++] = (int64_t)x;
                }
                return 0;
        }
        default:
                return bad(d, "unknown message type");
        }
}

/* Version, minor version and type of the object o. Sets *ret_events for an "events"
 * batch (allowed only when events_ok), else the message's type in m. */
static int decode_envelope(struct decoder *d, const cJSON *o, struct dsv_ipc_msg *m, int events_ok,
                           int *ret_events) {
        double version = 0, minor = 0;
        char *type = NULL;
        *ret_events = 0;
        int r = get_num(d, o, "v", 1, 0, 1e9, 1, &version);
        if (r == 0 && version != DSV_IPC_PROTOCOL_VERSION) {
                r = -EPROTONOSUPPORT;
                if (d->err && d->err_size)
                        snprintf(d->err, d->err_size, "peer speaks protocol version %.0f; this side speaks %d", version,
                                 DSV_IPC_PROTOCOL_VERSION);
        }
        if (r == 0)
                r = get_num(d, o, "minor", 0, 0, 1e9, 1, &minor);
        if (r == 0)
                r = get_str(d, o, "type", 1, &type);
        if (r == 0) {
                int found = name_index(type, type_names, DSV_IPC_MSG_TYPE_COUNT);
                if (found >= 0) {
                        m->type = (enum dsv_ipc_msg_type)found;
                        m->minor = (int32_t)minor;
                } else if (strcmp(type, "events") == 0 && events_ok) {
                        *ret_events = 1;
                } else if (strcmp(type, "events") == 0) {
                        r = bad(d, "an 'events' batch where one message was expected");
                } else {
                        r = bad(d, "unknown message type '%.64s'", type);
                }
        }
        free(type);
        return r;
}

/* The size limit and the JSON object every message is. */
static int parse_object(struct decoder *d, const void *buf, size_t len, cJSON **ret) {
        if (len > DSV_IPC_MAX_MSG_BYTES)
                return bad(d, "message of %zu bytes exceeds the %u-byte limit", len, DSV_IPC_MAX_MSG_BYTES);
        cJSON *o = cJSON_ParseWithLength(buf, len);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return bad(d, "message is not a JSON object");
        }
        *ret = o;
        return 0;
}

/* The events of a batch: each a complete worker event (token, final or error) with
 * its own "v". */
static int decode_events(struct decoder *d, const cJSON *o, struct dsv_ipc_msg **ret_msgs, size_t *ret_n) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "events");
        if (!cJSON_IsArray(arr))
                return bad(d, "field 'events' must be an array");
        int n = cJSON_GetArraySize(arr);
        if (n < 1 || n > MAX_BATCH_EVENTS)
                return bad(d, "field 'events' must hold 1 to %d events", MAX_BATCH_EVENTS);
        struct dsv_ipc_msg *msgs = calloc((size_t)n, sizeof *msgs);
        if (!msgs)
                return -ENOMEM;
        size_t k = 0;
        int r = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
                int events;
                if (!cJSON_IsObject(e)) {
                        r = bad(d, "field 'events[%zu]' must be an object", k);
                        break;
                }
                struct dsv_ipc_msg *m = &msgs[k];
                if ((r = decode_envelope(d, e, m, 0, &events)) < 0)
                        break;
                if (m->type != DSV_IPC_TOKEN && m->type != DSV_IPC_FINAL && m->type != DSV_IPC_ERROR) {
                        r = bad(d, "field 'events[%zu]': a %s cannot be batched", k, type_names[m->type]);
                        m->type = DSV_IPC_CANCEL; /* owns nothing yet */
                        break;
                }
                k++;
                if ((r = decode_body(d, e, m)) < 0)
                        break;
        }
        if (r < 0) {
                for (size_t i = 0; i < k; i++)
                        dsv_ipc_msg_done(&msgs[i]);
                free(msgs);
                return r;
        }
        *ret_msgs = msgs;
        *ret_n = k;
        return 0;
}

/* Parses buf and decodes its one message into *ret (*ret_events = 0), or, when ret_msgs
 * is given, the events of an "events" batch into *ret_msgs and *ret_n (*ret_events = 1). */
static int decode(struct decoder *d, const void *buf, size_t len, struct dsv_ipc_msg *ret, int *ret_events,
                  struct dsv_ipc_msg **ret_msgs, size_t *ret_n) {
        cJSON *o = NULL;
        int r = parse_object(d, buf, len, &o);
        if (r < 0)
                return r;
        struct dsv_ipc_msg m = {0};
        int events = 0;
        r = decode_envelope(d, o, &m, ret_msgs != NULL, &events);
        if (r == 0 && events) {
                r = decode_events(d, o, ret_msgs, ret_n);
                cJSON_Delete(o);
                *ret_events = 1;
                return r;
        }
        if (r == 0)
                r = decode_body(d, o, &m);
        cJSON_Delete(o);
        if (r < 0) {
                dsv_ipc_msg_done(&m);
                return r;
        }
        *ret = m;
        *ret_events = 0;
        return 0;
}

int dsv_ipc_msg_decode(const void *buf, size_t len, struct dsv_ipc_msg *ret, char *err, size_t err_size) {
        struct decoder d = {err, err_size};
        if (!buf || !ret)
                return -EINVAL;
        int events;
        return decode(&d, buf, len, ret, &events, NULL, NULL);
}

int dsv_ipc_msgs_decode(const void *buf, size_t len, struct dsv_ipc_msg **ret_msgs, size_t *ret_n, char *err,
                        size_t err_size) {
        struct decoder d = {err, err_size};
        if (!buf || !ret_msgs || !ret_n)
                return -EINVAL;
        struct dsv_ipc_msg m;
        int events;
        int r = decode(&d, buf, len, &m, &events, ret_msgs, ret_n);
        if (r < 0 || events)
                return r;
        struct dsv_ipc_msg *one = malloc(sizeof *one);
        if (!one) {
                dsv_ipc_msg_done(&m);
                return -ENOMEM;
        }
        *one = m;
        *ret_msgs = one;
        *ret_n = 1;
        return 0;
}

void dsv_ipc_msg_done(struct dsv_ipc_msg *m) {
        if (!m)
                return;
        switch (m->type) {
        case DSV_IPC_REQUEST:
                free(m->u.request.prompt);
                cJSON_free(m->u.request.messages_json);
                cJSON_free(m->u.request.tools_json);
                free(m->u.request.tokens);
                for (size_t i = 0; i < m->u.request.n_stop; i++)
                        free(m->u.request.stop[i]);
                free(m->u.request.stop);
                free(m->u.request.constraint_text);
                for (size_t i = 0; i < m->u.request.n_choices; i++)
                        free(m->u.request.choices[i]);
                free(m->u.request.choices);
                free(m->u.request.logit_bias);
                break;
        case DSV_IPC_TOKEN:
                free(m->u.token.text);
                for (size_t i = 0; m->u.token.top_bytes && i < m->u.token.n_top; i++)
                        free(m->u.token.top_bytes[i].bytes);
                free(m->u.token.top_bytes);
                free(m->u.token.top);
                break;
        case DSV_IPC_FINAL:
                free(m->u.final.finish_reason);
                break;
        case DSV_IPC_ERROR:
                free(m->u.error.message);
                break;
        case DSV_IPC_HEALTH_REPLY:
                free(m->u.health.state);
                break;
        default:
                break;
        }
        memset(m, 0, sizeof *m);
}
