/* OpenAI answers as one JSON object: a chat.completion or text_completion gathered token
 * by token, the model list, and the worker's errors in OpenAI's words. The pieces a
 * streamed chunk shares with a whole answer (the base object, logprob entries, usage)
 * live here too; sse.c frames them as events. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chat_output.h"
#include "openai.h"

void dsv__gw_answer_init(struct dsv_gw_answer *a, const struct dsv_gw_request *req, const char *model) {
        *a = (struct dsv_gw_answer){.req = req, .model = model, .created = time(NULL)};
}

void dsv__gw_answer_set_id(struct dsv_gw_answer *a, uint64_t request_id) {
        snprintf(a->id, sizeof a->id, "%s-%016llx", a->req->api == DSV_GW_API_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)request_id);
}

void dsv__gw_answer_reset(struct dsv_gw_answer *a) {
        a->text_len = 0;
        a->role_sent = false;
        a->out_len = a->out_pos = 0;
        cJSON_Delete(a->logprobs);
        a->logprobs = NULL;
        dsv__gw_answer_chat_free(a);
}

void dsv__gw_answer_done(struct dsv_gw_answer *a) {
        dsv__gw_answer_chat_free(a);
        cJSON_Delete(a->choices_done);
        cJSON_Delete(a->logprobs);
        free(a->text);
        free(a->out);
}

cJSON *dsv__gw_answer_base(const struct dsv_gw_answer *a) {
        bool chat = a->req->api == DSV_GW_API_CHAT;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", a->id);
        cJSON_AddStringToObject(o, "object", chat ? (a->req->stream ? "chat.completion.chunk" : "chat.completion")
                                                  : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)a->created);
        cJSON_AddStringToObject(o, "model", a->model);
        return o;
}

/* An alternative's text: its bytes, each byte of a broken UTF-8 sequence (a token
 * holding part of a character) as U+FFFD. Without bytes (a worker without a tokenizer)
 * "token_id:<n>" stands for it. A malloc'd string. */
static char *alternative_text(const struct dsv_ipc_token *t, size_t i) {
        if (!t->top_bytes) {
                char *name = malloc(32);
                if (name)
                        snprintf(name, 32, "token_id:%d", t->top[i].token);
                return name;
        }
        const struct dsv_ipc_bytes *b = &t->top_bytes[i];
        char *s = malloc(b->n * 3 + 1);
        if (!s)
                return NULL;
        size_t at = 0;
        for (size_t k = 0; k < b->n;) {
                size_t len = 1;
                unsigned c = b->bytes[k];
                if (c >= 0xc2 && c <= 0xdf)
                        len = 2;
                else if (c >= 0xe0 && c <= 0xef)
                        len = 3;
                else if (c >= 0xf0 && c <= 0xf4)
                        len = 4;
                if ((c < 0x80) || (len > 1 && k + len <= b->n && dsv__gw_utf8_valid((const char *)b->bytes + k, len))) {
                        memcpy(s + at, b->bytes + k, len);
                        at += len;
                        k += len;
                } else {
                        memcpy(s + at, "\xef\xbf\xbd", 3);
                        at += 3;
                        k++;
                }
        }
        s[at] = 0;
        return s;
}

static cJSON *bytes_array(const struct dsv_ipc_bytes *b) {
        cJSON *a = cJSON_CreateArray();
        for (size_t k = 0; a && k < b->n; k++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber(b->bytes[k]));
        return a;
}

cJSON *dsv__gw_chat_logprob(const struct dsv_ipc_token *t, int32_t top_n) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "token", t->text ? t->text : "");
        cJSON_AddNumberToObject(e, "logprob", t->logprob);
        cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
        for (const unsigned char *p = (const unsigned char *)(t->text ? t->text : ""); *p; p++)
                cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (size_t i = 0; i < t->n_top && i < (size_t)top_n; i++) {
                char *name = alternative_text(t, i);
                cJSON *alt = cJSON_CreateObject();
                cJSON_AddStringToObject(alt, "token", name ? name : "");
                free(name);
                cJSON_AddNumberToObject(alt, "logprob", t->top[i].logprob);
                if (t->top_bytes)
                        cJSON_AddItemToObject(alt, "bytes", bytes_array(&t->top_bytes[i]));
                else
                        cJSON_AddNullToObject(alt, "bytes");
                cJSON_AddItemToArray(top, alt);
        }
        return e;
}

void dsv__gw_completion_logprob_add(cJSON *lp, const struct dsv_ipc_token *t, size_t offset, int32_t top_n) {
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_CreateString(t->text ? t->text : ""));
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(t->logprob));
        cJSON *top = cJSON_CreateObject();
        for (size_t i = 0; i < t->n_top && i < (size_t)top_n; i++) {
                char *name = alternative_text(t, i);
                cJSON_AddNumberToObject(top, name ? name : "", t->top[i].logprob);
                free(name);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), top);
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)offset));
}

cJSON *dsv__gw_completion_logprobs_new(void) {
        cJSON *lp = cJSON_CreateObject();
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
        return lp;
}

cJSON *dsv__gw_usage_object(const struct dsv_gw_answer *a) {
        cJSON *u = cJSON_CreateObject();
        cJSON_AddNumberToObject(u, "prompt_tokens", a->prompt_tokens);
        int32_t completion = a->completion_tokens_done + a->completion_tokens;
        cJSON_AddNumberToObject(u, "completion_tokens", completion);
        cJSON_AddNumberToObject(u, "total_tokens", (double)a->prompt_tokens + completion);
        /* OpenAI's prompt caching field; left out when nothing was cached, as vLLM does
         * without prefix caching */
        if (a->cached_tokens > 0)
                cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
                                        a->cached_tokens);
        if (a->req->split_think)
                cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "completion_tokens_details"), "reasoning_tokens",
                                        a->reasoning_tokens_done + (a->chat ? a->chat->think.reasoning_tokens : 0));
        return u;
}

/* The whole answer's logprobs object, made on first use: chat {"content":[]},
 * completions {"tokens":[],"token_logprobs":[],...}. */
static cJSON *answer_logprobs(struct dsv_gw_answer *a) {
        if (!a->logprobs) {
                if (a->req->api == DSV_GW_API_CHAT) {
                        a->logprobs = cJSON_CreateObject();
                        cJSON_AddArrayToObject(a->logprobs, "content");
                } else {
                        a->logprobs = dsv__gw_completion_logprobs_new();
                }
        }
        return a->logprobs;
}

int dsv__gw_answer_token(struct dsv_gw_answer *a, const struct dsv_ipc_token *t) {
        const struct dsv_gw_request *q = a->req;
        const char *text = t->text ? t->text : "";
        if (q->logprobs) {
                cJSON *lp = answer_logprobs(a);
                if (q->api == DSV_GW_API_CHAT)
                        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "content"), dsv__gw_chat_logprob(t, q->top_logprobs));
                else
                        dsv__gw_completion_logprob_add(lp, t, a->text_len, q->top_logprobs);
        }
        struct dsv_gw_chat_out *chat;
        int r = dsv__gw_answer_chat(a, &chat);
        if (r < 0)
                return r;
        if (chat)
                return dsv__gw_chat_out_push(chat, text, strlen(text));
        return dsv__gw_buf_append(&a->text, &a->text_len, &a->text_cap, text, strlen(text));
}

/* The current choice of a whole answer. */
static cJSON *choice_object(struct dsv_gw_answer *a) {
        const struct dsv_gw_request *q = a->req;
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", a->choice);
        if (q->api == DSV_GW_API_CHAT) {
                cJSON *m = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                struct dsv_gw_chat_out *chat = NULL;
                if (dsv__gw_answer_chat(a, &chat) < 0 || (chat && (dsv__gw_chat_out_finish(chat) < 0 ||
                                                                    dsv__gw_chat_out_message(chat, m) < 0))) {
                        cJSON_Delete(c);
                        return NULL;
                }
                if (chat)
                        dsv__gw_chat_out_set_finish(chat, a->finish, sizeof a->finish);
                else
                        cJSON_AddStringToObject(m, "content", a->text ? a->text : "");
        } else {
                cJSON_AddStringToObject(c, "text", a->text ? a->text : "");
        }
        if (q->logprobs) {
                cJSON_AddItemToObject(c, "logprobs", answer_logprobs(a));
                a->logprobs = NULL;
        } else {
                cJSON_AddNullToObject(c, "logprobs");
        }
        cJSON_AddStringToObject(c, "finish_reason", a->finish);
        return c;
}

int dsv__gw_answer_next_choice(struct dsv_gw_answer *a) {
        if (!a->req->stream) {
                cJSON *c = choice_object(a);
                if (!c || (!a->choices_done && !(a->choices_done = cJSON_CreateArray()))) {
                        cJSON_Delete(c);
                        return -ENOMEM;
                }
                cJSON_AddItemToArray(a->choices_done, c);
        }
        a->completion_tokens_done += a->completion_tokens;
        a->reasoning_tokens_done += a->chat ? a->chat->think.reasoning_tokens : 0;
        a->completion_tokens = 0;
        a->choice++;
        a->text_len = 0;
        a->role_sent = false;
        a->finish[0] = 0;
        cJSON_Delete(a->logprobs);
        a->logprobs = NULL;
        dsv__gw_answer_chat_free(a);
        return 0;
}

cJSON *dsv__gw_answer_object(struct dsv_gw_answer *a) {
        cJSON *o = dsv__gw_answer_base(a);
        cJSON *c = o ? choice_object(a) : NULL;
        cJSON *choices = a->choices_done ? a->choices_done : cJSON_CreateArray();
        a->choices_done = NULL;
        if (!c || !choices) {
                cJSON_Delete(o);
                cJSON_Delete(c);
                cJSON_Delete(choices);
                return NULL;
        }
        cJSON_AddItemToArray(choices, c);
        cJSON_AddItemToObject(o, "choices", choices);
        cJSON_AddItemToObject(o, "usage", dsv__gw_usage_object(a));
        return o;
}

/* One card per served name, as vLLM lists its --served-model-name values; root is the
 * first name (the model itself). */
static cJSON *model_card(const char *id, const char *root, int32_t max_model_len) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "dsvisor");
        cJSON_AddStringToObject(m, "root", root);
        if (max_model_len > 0)
                cJSON_AddNumberToObject(m, "max_model_len", max_model_len);
        return m;
}

cJSON *dsv__gw_models_object(const char *model, const char *const *aliases, size_t n_aliases,
                             int32_t max_model_len) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *data = cJSON_AddArrayToObject(o, "data");
        cJSON_AddItemToArray(data, model_card(model, model, max_model_len));
        for (size_t i = 0; i < n_aliases; i++)
                cJSON_AddItemToArray(data, model_card(aliases[i], model, max_model_len));
        return o;
}

void dsv__gw_worker_error(const struct dsv_ipc_error *we, struct dsv_gw_error *e) {
        switch (we->code) {
        case DSV_IPC_ERR_INVALID_REQUEST:
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", NULL, "%s",
                                  we->message && we->message[0] ? we->message : "The request was refused");
                break;
        case DSV_IPC_ERR_PROMPT_TOO_LONG:
                dsv__gw_error_set(e, 400, "invalid_request_error", "context_length_exceeded", NULL,
                                  "The prompt plus max_tokens exceeds the model's context length");
                break;
        case DSV_IPC_ERR_OVERLOADED:
                dsv__gw_error_set(e, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                                  "The model instance is overloaded; retry later");
                e->retry_after_s = 1;
                break;
        case DSV_IPC_ERR_DEADLINE:
                dsv__gw_error_set(e, 504, "timeout_error", "deadline_exceeded", NULL, "The request timed out");
                break;
        case DSV_IPC_ERR_SHUTTING_DOWN:
                dsv__gw_error_set(e, 503, "server_error", "service_unavailable", NULL,
                                  "The model instance is shutting down; retry later");
                e->retry_after_s = 1;
                break;
        default:
                dsv__gw_error_set(e, 500, "server_error", "internal_error", NULL,
                                  "The model instance failed to process the request");
                break;
        }
}
