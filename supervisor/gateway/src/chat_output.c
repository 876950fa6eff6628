/* A chat answer's output pipeline: each token's text through the think splitter (when
 * reasoning is split) and then the tool-call parser (when the request has tools), into
 * reasoning, content and calls; shaped as a whole message or as stream deltas in
 * OpenAI's form (a call's id and name first, then its arguments in pieces). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_output.h"
#include "openai.h"

void dsv__gw_chat_out_init(struct dsv_gw_chat_out *c, bool split_think, bool think_opened,
                           enum dsv_gateway_tool_format tools, bool parallel, const char *call_prefix) {
        *c = (struct dsv_gw_chat_out){.split_think = split_think, .parse_tools = tools != DSV_GATEWAY_TOOLS_NONE};
        dsv__gw_think_init(&c->think, think_opened);
        dsv__gw_tools_init(&c->tools, tools, parallel);
        snprintf(c->call_prefix, sizeof c->call_prefix, "%s", call_prefix);
}

void dsv__gw_chat_out_read_json_calls(struct dsv_gw_chat_out *c) {
        c->parse_tools = true;
        dsv__gw_tools_read_json_calls(&c->tools);
}

void dsv__gw_chat_out_free(struct dsv_gw_chat_out *c) {
        dsv__gw_think_free(&c->think);
        dsv__gw_tools_free(&c->tools);
        dsv__gw_text_free(&c->reasoning);
        dsv__gw_text_free(&c->content);
        dsv__gw_text_free(&c->pre_tools);
}

/* The think splitter's content goes on to the tool parser (or straight to content). */
static int route(struct dsv_gw_chat_out *c, bool at_end) {
        int r = 0;
        if (!c->parse_tools)
                r = dsv__gw_text_add(&c->content, c->pre_tools.s, c->pre_tools.len);
        else if (c->pre_tools.len)
                r = dsv__gw_tools_push(&c->tools, c->pre_tools.s, c->pre_tools.len, &c->content);
        c->pre_tools.len = 0;
        if (r == 0 && at_end && c->parse_tools)
                r = dsv__gw_tools_finish(&c->tools, &c->content);
        return r;
}

int dsv__gw_chat_out_push(struct dsv_gw_chat_out *c, const char *s, size_t n) {
        size_t before = c->reasoning.len;
        int r = c->split_think ? dsv__gw_think_push(&c->think, s, n, &c->reasoning, &c->pre_tools)
                               : dsv__gw_text_add(&c->pre_tools, s, n);
        if (c->reasoning.len > before)
                c->any_reasoning = true;
        return r < 0 ? r : route(c, false);
}

int dsv__gw_chat_out_finish(struct dsv_gw_chat_out *c) {
        size_t before = c->reasoning.len;
        int r = c->split_think ? dsv__gw_think_flush(&c->think, &c->reasoning, &c->pre_tools) : 0;
        if (c->reasoning.len > before)
                c->any_reasoning = true;
        return r < 0 ? r : route(c, true);
}

static cJSON *call_head(const struct dsv_gw_chat_out *c, size_t index) {
        char id[64];
        snprintf(id, sizeof id, "%s_%zu", c->call_prefix, index);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "index", (double)index);
        cJSON_AddStringToObject(t, "id", id);
        cJSON_AddStringToObject(t, "type", "function");
        return t;
}

static cJSON *string_n(const char *s, size_t n) {
        char *copy = strndup(s ? s : "", n);
        cJSON *v = copy ? cJSON_CreateString(copy) : NULL;
        free(copy);
        return v;
}

cJSON *dsv__gw_chat_out_delta(struct dsv_gw_chat_out *c) {
        cJSON *d = cJSON_CreateObject();
        if (!d)
                return NULL;
        if (c->reasoning.len)
                cJSON_AddItemToObject(d, "reasoning_content", string_n(c->reasoning.s, c->reasoning.len));
        if (c->content.len)
                cJSON_AddItemToObject(d, "content", string_n(c->content.s, c->content.len));
        c->reasoning.len = c->content.len = 0;
        cJSON *calls = NULL;
        for (size_t i = 0; i < c->tools.n_calls; i++) {
                struct dsv_gw_tool_call *tc = &c->tools.calls[i];
                if (tc->announced && tc->args.len == tc->args_sent)
                        continue;
                cJSON *t = tc->announced ? cJSON_CreateObject() : call_head(c, i);
                if (tc->announced)
                        cJSON_AddNumberToObject(t, "index", (double)i);
                cJSON *f = cJSON_AddObjectToObject(t, "function");
                if (!tc->announced)
                        cJSON_AddStringToObject(f, "name", tc->name);
                cJSON_AddItemToObject(f, "arguments", string_n(tc->args.s ? tc->args.s + tc->args_sent : "",
                                                               tc->args.len - tc->args_sent));
                tc->announced = true;
                tc->args_sent = tc->args.len;
                if (!calls)
                        calls = cJSON_AddArrayToObject(d, "tool_calls");
                cJSON_AddItemToArray(calls, t);
        }
        if (!d->child) {
                cJSON_Delete(d);
                return NULL;
        }
        return d;
}

int dsv__gw_chat_out_message(struct dsv_gw_chat_out *c, cJSON *m) {
        size_t complete = c->parse_tools ? dsv__gw_tools_complete(&c->tools) : 0;
        if (c->any_reasoning)
                cJSON_AddItemToObject(m, "reasoning_content", string_n(c->reasoning.s, c->reasoning.len));
        if (c->content.len == 0 && (c->any_reasoning || complete))
                cJSON_AddNullToObject(m, "content");
        else
                cJSON_AddItemToObject(m, "content", string_n(c->content.s, c->content.len));
        if (!complete)
                return 0;
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (size_t i = 0; i < c->tools.n_calls; i++) {
                const struct dsv_gw_tool_call *tc = &c->tools.calls[i];
                if (!tc->complete)
                        continue;
                cJSON *t = call_head(c, i);
                cJSON_DeleteItemFromObject(t, "index");
                cJSON *f = cJSON_AddObjectToObject(t, "function");
                cJSON_AddStringToObject(f, "name", tc->name);
                cJSON_AddItemToObject(f, "arguments", string_n(tc->args.s, tc->args.len));
                cJSON_AddItemToArray(calls, t);
        }
        return calls ? 0 : -ENOMEM;
}

const char *dsv__gw_chat_out_finish_reason(const struct dsv_gw_chat_out *c, const char *worker_reason) {
        if (c->parse_tools && strcmp(worker_reason, "stop") == 0 && dsv__gw_tools_complete(&c->tools) > 0)
                return "tool_calls";
        return worker_reason;
}

void dsv__gw_chat_out_set_finish(const struct dsv_gw_chat_out *c, char *finish, size_t size) {
        const char *why = dsv__gw_chat_out_finish_reason(c, finish);
        if (why != finish)
                snprintf(finish, size, "%s", why);
}

/* ---- an answer's pipeline -------------------------------------------------------------- */

int dsv__gw_answer_chat(struct dsv_gw_answer *a, struct dsv_gw_chat_out **ret) {
        const struct dsv_gw_request *q = a->req;
        *ret = NULL;
        if (q->api != DSV_GW_API_CHAT || (!q->split_think && q->tool_parse == DSV_GATEWAY_TOOLS_NONE && !q->tool_json))
                return 0;
        if (!a->chat) {
                char prefix[64];
                if (!(a->chat = malloc(sizeof *a->chat)))
                        return -ENOMEM;
                /* Call ids: the answer's id made a call's ("chatcmpl-…" -> "call-…"), and the
                 * choice's index after the first ("call-…-1"), so ids differ across choices. */
                const char *tail = strchr(a->id, '-') ? strchr(a->id, '-') : "";
                if (a->choice > 0)
                        snprintf(prefix, sizeof prefix, "call%s-%d", tail, (int)a->choice);
                else
                        snprintf(prefix, sizeof prefix, "call%s", tail);
                /* A forced call is constrained from the first token on: there is no think
                 * block to split off. */
                dsv__gw_chat_out_init(a->chat, q->split_think && !q->tool_forced, q->think_opened, q->tool_parse,
                                      q->parallel_tool_calls, prefix);
                if (q->tool_json)
                        dsv__gw_chat_out_read_json_calls(a->chat);
        }
        *ret = a->chat;
        return 0;
}

void dsv__gw_answer_chat_free(struct dsv_gw_answer *a) {
        if (a->chat)
                dsv__gw_chat_out_free(a->chat);
        free(a->chat);
        a->chat = NULL;
}
