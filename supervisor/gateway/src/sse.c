/* Server-sent events for streamed answers: each event is "data: {json}\n\n" and a stream
 * ends with "data: [DONE]\n\n". Chat streams open with an assistant-role delta; with
 * stream_options.include_usage every chunk carries "usage": null and one last chunk,
 * without choices, the usage. Bytes gather in the answer's out buffer until the HTTP
 * server reads them. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chat_output.h"
#include "openai.h"

static int out_add(struct dsv_gw_answer *a, const char *s, size_t n) {
        return dsv__gw_buf_append(&a->out, &a->out_len, &a->out_cap, s, n);
}

/* One event "data: <json>\n\n" (frees o). */
static int out_event(struct dsv_gw_answer *a, cJSON *o) {
        char *s = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!s)
                return -ENOMEM;
        int r = out_add(a, "data: ", 6);
        if (r == 0)
                r = out_add(a, s, strlen(s));
        if (r == 0)
                r = out_add(a, "\n\n", 2);
        cJSON_free(s);
        return r;
}

/* A chunk with one choice: chat {"delta":{...}} (delta, when given, is it), completions
 * {"text":...}. */
static int out_choice(struct dsv_gw_answer *a, const char *role, const char *text, cJSON *delta, const char *finish,
                      cJSON *logprobs) {
        cJSON *o = dsv__gw_answer_base(a);
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", a->choice);
        if (delta) {
                cJSON_AddItemToObject(c, "delta", delta);
        } else if (a->req->api == DSV_GW_API_CHAT) {
                cJSON *d = cJSON_AddObjectToObject(c, "delta");
                if (role)
                        cJSON_AddStringToObject(d, "role", role);
                if (text)
                        cJSON_AddStringToObject(d, "content", text);
        } else {
                cJSON_AddStringToObject(c, "text", text ? text : "");
        }
        if (logprobs)
                cJSON_AddItemToObject(c, "logprobs", logprobs);
        else
                cJSON_AddNullToObject(c, "logprobs");
        if (finish)
                cJSON_AddStringToObject(c, "finish_reason", finish);
        else
                cJSON_AddNullToObject(c, "finish_reason");
        if (a->req->include_usage)
                cJSON_AddNullToObject(o, "usage");
        return out_event(a, o);
}

static int open_chat(struct dsv_gw_answer *a) {
        if (a->req->api != DSV_GW_API_CHAT || a->role_sent)
                return 0;
        a->role_sent = true;
        return out_choice(a, "assistant", "", NULL, NULL, NULL);
}

/* A chat token through the answer's pipeline: one chunk with what it made (reasoning,
 * content, tool-call pieces), none when it made nothing and no logprobs are due. */
static int stream_chat(struct dsv_gw_answer *a, struct dsv_gw_chat_out *chat, const struct dsv_ipc_token *t,
                       const char *text) {
        int r = dsv__gw_chat_out_push(chat, text, strlen(text));
        if (r < 0)
                return r;
        cJSON *delta = dsv__gw_chat_out_delta(chat);
        if (!delta && !a->req->logprobs)
                return 0;
        if (!delta && !(delta = cJSON_CreateObject()))
                return -ENOMEM;
        if (!delta->child)
                cJSON_AddStringToObject(delta, "content", "");
        cJSON *lp = NULL;
        if (a->req->logprobs) {
                lp = cJSON_CreateObject();
                cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "content"), dsv__gw_chat_logprob(t, a->req->top_logprobs));
        }
        return out_choice(a, NULL, NULL, delta, NULL, lp);
}

int dsv__gw_sse_token(struct dsv_gw_answer *a, const struct dsv_ipc_token *t) {
        const struct dsv_gw_request *q = a->req;
        const char *text = t->text ? t->text : "";
        struct dsv_gw_chat_out *chat;
        int r = open_chat(a);
        if (r == 0)
                r = dsv__gw_answer_chat(a, &chat);
        if (r == 0 && chat)
                return stream_chat(a, chat, t, text);
        if (r < 0 || (!text[0] && !q->logprobs))
                return r; /* an empty delta (a stop string still possible) is not sent */
        cJSON *lp = NULL;
        if (q->logprobs) {
                if (q->api == DSV_GW_API_CHAT) {
                        lp = cJSON_CreateObject();
                        cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "content"),
                                             dsv__gw_chat_logprob(t, q->top_logprobs));
                } else {
                        lp = dsv__gw_completion_logprobs_new();
                        dsv__gw_completion_logprob_add(lp, t, a->text_len, q->top_logprobs);
                }
        }
        a->text_len += strlen(text); /* the offset of the next completion token */
        return out_choice(a, NULL, text, NULL, NULL, lp);
}

int dsv__gw_sse_choice_end(struct dsv_gw_answer *a) {
        struct dsv_gw_chat_out *chat = NULL;
        int r = open_chat(a);
        if (r == 0)
                r = dsv__gw_answer_chat(a, &chat);
        if (r == 0 && chat && (r = dsv__gw_chat_out_finish(chat)) == 0) {
                cJSON *delta = dsv__gw_chat_out_delta(chat);
                if (delta)
                        r = out_choice(a, NULL, NULL, delta, NULL, NULL);
                dsv__gw_chat_out_set_finish(chat, a->finish, sizeof a->finish);
        }
        if (r == 0)
                r = out_choice(a, NULL, NULL, NULL, a->finish, NULL);
        return r;
}

int dsv__gw_sse_finish(struct dsv_gw_answer *a) {
        int r = dsv__gw_sse_choice_end(a);
        if (r == 0 && a->req->include_usage) {
                cJSON *o = dsv__gw_answer_base(a);
                cJSON_AddArrayToObject(o, "choices");
                cJSON_AddItemToObject(o, "usage", dsv__gw_usage_object(a));
                r = out_event(a, o);
        }
        if (r == 0)
                r = out_add(a, "data: [DONE]\n\n", 14);
        a->done = true;
        return r;
}

int dsv__gw_sse_abort(struct dsv_gw_answer *a, const struct dsv_gw_error *e) {
        char *s;
        size_t len;
        int r = dsv__gw_error_json(e, &s, &len);
        if (r == 0) {
                r = out_add(a, "data: ", 6);
                if (r == 0)
                        r = out_add(a, s, len);
                free(s);
        }
        if (r == 0)
                r = out_add(a, "\n\ndata: [DONE]\n\n", 16);
        a->done = true;
        return r;
}

size_t dsv__gw_sse_read(struct dsv_gw_answer *a, char *buf, size_t max) {
        size_t n = a->out_len - a->out_pos < max ? a->out_len - a->out_pos : max;
        if (n == 0)
                return 0;
        memcpy(buf, a->out + a->out_pos, n);
        a->out_pos += n;
        if (a->out_pos == a->out_len)
                a->out_len = a->out_pos = 0;
        return n;
}
