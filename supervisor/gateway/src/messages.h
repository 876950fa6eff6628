/* messages.h — a chat request's conversation and tools, checked field by field and
 * normalised into the JSON the worker renders with the model's chat template
 * (messages.c). */
#ifndef DSV_GATEWAY_MESSAGES_H
#define DSV_GATEWAY_MESSAGES_H

#include "openai.h"

struct cJSON;

/* "messages" of body o -> q->messages_json: every message's role, content (text parts
 * joined; null stays null), name, an assistant's tool_calls (arguments as the template
 * wants them: the OpenAI string for DeepSeek's, a JSON object for the others) and a tool
 * message's tool_call_id, which must answer a call of the assistant turn before it. An
 * assistant's reasoning_content is accepted and left out of the prompt, as R1's template
 * leaves earlier thinking out; any other field asking for something is a 400 naming it. */
int dsv__gw_messages_parse(const struct cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                           struct dsv_gw_error *e);

/* A field of o not in known[] that asks for something (is not null) is refused, the
 * error's param naming it ("where.field", or "field" when where is NULL). */
int dsv__gw_only_known(const struct cJSON *o, const char *const *known, size_t n_known, const char *where,
                       struct dsv_gw_error *e);

/* "tools", "tool_choice" and "parallel_tool_calls" of body o: checked (names unique and
 * well-formed, parameters a JSON Schema object, the chosen function one of them, strict
 * only where a call is forced); with tools in use q->tools_json holds them for the
 * template (when it has a call format) and req->tool_parse says how the output is parsed.
 * "required" or a named function sets q's constraint to the forced call (tool_constraint.c:
 * in the template's call syntax, or as JSON with req->tool_json when it has none) and
 * req->tool_forced. */
int dsv__gw_tools_parse(const struct cJSON *o, const struct dsv_gw_limits *lim, struct dsv_gw_request *req,
                        struct dsv_gw_error *e);

#endif
