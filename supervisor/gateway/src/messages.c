/* A chat request's conversation and tools: checked field by field (the error's param
 * names the exact field, "messages[2].tool_call_id"), then normalised into the JSON the
 * worker renders with the model's chat template. Nothing a client sends is dropped
 * silently: a field is either used, deliberately left out of the prompt (an assistant's
 * reasoning_content, as R1's template drops earlier thinking), or refused. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages.h"
#include "tool_constraint.h"

#define MAX_MESSAGES 4096
#define MAX_NAME_BYTES 256   /* a message's name */
#define MAX_TOOLS 128
#define MAX_FUNCTION_NAME 64 /* OpenAI's limit: [A-Za-z0-9_-]{1,64} */

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

static int fail(struct dsv_gw_error *e, const char *code, const char *param, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int fail(struct dsv_gw_error *e, const char *code, const char *param, const char *fmt, ...) {
        char msg[sizeof e->message];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        dsv__gw_error_set(e, 400, "invalid_request_error", code, param, "%s", msg);
        return -EINVAL;
}

static const cJSON *given(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return v && !cJSON_IsNull(v) ? v : NULL;
}

int dsv__gw_only_known(const cJSON *o, const char *const *known, size_t n_known, const char *where,
                       struct dsv_gw_error *e) {
        const cJSON *f;
        cJSON_ArrayForEach(f, o) {
                size_t k = 0;
                while (k < n_known && strcmp(f->string, known[k]) != 0)
                        k++;
                if (k == n_known && !cJSON_IsNull(f)) {
                        char param[192];
                        snprintf(param, sizeof param, "%.100s%s%.64s", where ? where : "", where ? "." : "", f->string);
                        return fail(e, "unsupported_parameter", param, "'%s' is not supported", param);
                }
        }
        return 0;
}

/* ---- messages ------------------------------------------------------------------------- */

/* Content: a string, an array of {"type":"text","text":…} parts (joined), or null (an
 * assistant turn only). *ret is a cJSON string or null. */
static int message_content(const cJSON *content, bool may_be_null, const char *where, cJSON **ret, size_t *bytes,
                           struct dsv_gw_error *e) {
        char param[192];
        snprintf(param, sizeof param, "%s.content", where);
        if (!content || cJSON_IsNull(content)) {
                if (!may_be_null)
                        return fail(e, "invalid_value", param, "every message but an assistant's needs a 'content'");
                return (*ret = cJSON_CreateNull()) ? 0 : -ENOMEM;
        }
        if (cJSON_IsString(content)) {
                *bytes += strlen(content->valuestring);
                return (*ret = cJSON_CreateString(content->valuestring)) ? 0 : -ENOMEM;
        }
        if (!cJSON_IsArray(content))
                return fail(e, "invalid_value", param, "message 'content' must be a string or an array of parts");
        size_t total = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
                        return fail(e, "unsupported_parameter", param, "a content part other than text is not supported");
                if (!cJSON_IsString(text))
                        return fail(e, "invalid_value", param, "a text part needs a string 'text'");
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
        *bytes += total;
        *ret = cJSON_CreateString(s);
        free(s);
        return *ret ? 0 : -ENOMEM;
}

/* An assistant's tool_calls, checked and shaped for the template into out. */
static int message_tool_calls(const cJSON *calls, bool args_as_object, const char *where, cJSON *out, size_t *bytes,
                              struct dsv_gw_error *e) {
        char param[192];
        snprintf(param, sizeof param, "%s.tool_calls", where);
        if (!cJSON_IsArray(calls))
                return fail(e, "invalid_value", param, "'tool_calls' must be an array");
        int i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
                snprintf(param, sizeof param, "%s.tool_calls[%d]", where, i++);
                static const char *const known[] = {"id", "type", "function", "index"};
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
                const cJSON *type = given(c, "type");
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                int r;
                if (!cJSON_IsObject(c))
                        return fail(e, "invalid_value", param, "a tool call must be an object");
                if ((r = dsv__gw_only_known(c, known, sizeof known / sizeof *known, param, e)) < 0)
                        return r;
                if (!cJSON_IsString(id) || !id->valuestring[0])
                        return fail(e, "invalid_value", param, "a tool call needs a string 'id'");
                if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0))
                        return fail(e, "invalid_value", param, "a tool call's 'type' must be \"function\"");
                if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0] || !cJSON_IsString(args))
                        return fail(e, "invalid_value", param,
                                    "a tool call needs 'function' with a string 'name' and 'arguments' (a JSON text)");
                cJSON *parsed = cJSON_Parse(args->valuestring);
                if (!parsed)
                        return fail(e, "invalid_value", param, "a tool call's 'arguments' is not JSON");
                *bytes += strlen(name->valuestring) + strlen(args->valuestring);
                cJSON *t = cJSON_CreateObject();
                cJSON *f = t ? cJSON_CreateObject() : NULL;
                if (!f || !cJSON_AddStringToObject(t, "id", id->valuestring) ||
                    !cJSON_AddStringToObject(t, "type", "function") || !cJSON_AddStringToObject(f, "name", name->valuestring)) {
                        cJSON_Delete(parsed);
                        cJSON_Delete(f);
                        cJSON_Delete(t);
                        return -ENOMEM;
                }
                cJSON_AddItemToObject(t, "function", f);
                cJSON_AddItemToArray(out, t);
                if (args_as_object && cJSON_IsObject(parsed)) {
                        cJSON_AddItemToObject(f, "arguments", parsed);
                } else {
                        cJSON_Delete(parsed);
                        if (!cJSON_AddStringToObject(f, "arguments", args->valuestring))
                                return -ENOMEM;
                }
        }
        return 0;
}

/* A tool message must answer a call of the last assistant turn with calls, with only
 * tool messages between them. */
static int check_tool_answer(const cJSON *m, const cJSON *calls_turn, const char *where, struct dsv_gw_error *e) {
        char param[192];
        snprintf(param, sizeof param, "%s.tool_call_id", where);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (!cJSON_IsString(id))
                return fail(e, "invalid_value", param, "a tool message needs a string 'tool_call_id'");
        const cJSON *c, *calls = cJSON_GetObjectItemCaseSensitive(calls_turn, "tool_calls");
        cJSON_ArrayForEach(c, calls) {
                const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
                if (cJSON_IsString(cid) && strcmp(cid->valuestring, id->valuestring) == 0)
                        return 0;
        }
        return fail(e, "invalid_value", param,
                    "a tool message must answer a call ('tool_call_id') of the assistant message with 'tool_calls' "
                    "right before it");
}

static int one_message(const cJSON *m, int index, const cJSON **calls_turn, const struct dsv_gw_limits *lim, cJSON *out,
                       size_t *bytes, struct dsv_gw_error *e) {
        char where[32];
        snprintf(where, sizeof where, "messages[%d]", index);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
                return fail(e, "invalid_value", "messages", "every message needs a string 'role'");
        size_t k = 0;
        while (k < sizeof roles / sizeof roles[0] && strcmp(role->valuestring, roles[k]) != 0)
                k++;
        if (k == sizeof roles / sizeof roles[0])
                return fail(e, "invalid_value", "messages", "unknown message role");
        bool assistant = strcmp(role->valuestring, "assistant") == 0, tool = strcmp(role->valuestring, "tool") == 0;
        static const char *const common[] = {"role", "content", "name"};
        static const char *const of_assistant[] = {"role", "content", "name", "tool_calls", "reasoning_content",
                                                   "reasoning", "refusal"};
        static const char *const of_tool[] = {"role", "content", "name", "tool_call_id"};
        int r;
        if (assistant)
                r = dsv__gw_only_known(m, of_assistant, sizeof of_assistant / sizeof *of_assistant, where, e);
        else if (tool)
                r = dsv__gw_only_known(m, of_tool, sizeof of_tool / sizeof *of_tool, where, e);
        else
                r = dsv__gw_only_known(m, common, sizeof common / sizeof *common, where, e);
        if (r < 0)
                return r;
        const cJSON *name = given(m, "name");
        if (name && !cJSON_IsString(name))
                return fail(e, "invalid_value", "messages", "message 'name' must be a string");
        size_t cap = MAX_NAME_BYTES < lim->max_prompt_bytes ? MAX_NAME_BYTES : lim->max_prompt_bytes;
        if (name && strlen(name->valuestring) > cap)
                return fail(e, "invalid_value", "messages", "a message's 'name' is longer than %zu bytes", cap);
        const cJSON *refusal = given(m, "refusal");
        if (refusal && !cJSON_IsString(refusal))
                return fail(e, "invalid_value", "messages", "message 'refusal' must be a string");
        if (tool && (r = check_tool_answer(m, *calls_turn, where, e)) < 0)
                return r;
        const cJSON *calls = given(m, "tool_calls");
        if (assistant)
                *calls_turn = calls ? m : NULL;
        else if (!tool)
                *calls_turn = NULL;

        cJSON *nm = cJSON_CreateObject(), *content = NULL;
        if (!nm)
                return -ENOMEM;
        cJSON_AddItemToArray(out, nm);
        if (!cJSON_AddStringToObject(nm, "role", role->valuestring))
                return -ENOMEM;
        if ((r = message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), assistant, where, &content, bytes, e)) < 0)
                return r;
        cJSON_AddItemToObject(nm, "content", content);
        if (name && !cJSON_AddStringToObject(nm, "name", name->valuestring))
                return -ENOMEM;
        if (calls) {
                cJSON *tc = cJSON_AddArrayToObject(nm, "tool_calls");
                if (!tc)
                        return -ENOMEM;
                if ((r = message_tool_calls(calls, lim->tool_format != DSV_GATEWAY_TOOLS_DEEPSEEK_V3, where, tc, bytes,
                                            e)) < 0)
                        return r;
        }
        if (tool && !cJSON_AddStringToObject(nm, "tool_call_id",
                                             cJSON_GetObjectItemCaseSensitive(m, "tool_call_id")->valuestring))
                return -ENOMEM;
        return 0;
}

int dsv__gw_messages_parse(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                           struct dsv_gw_error *e) {
        const cJSON *msgs = given(o, "messages");
        if (!msgs)
                return fail(e, "invalid_value", "messages", "'messages' is required");
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
                return fail(e, "invalid_value", "messages", "'messages' must be a non-empty array");
        if (cJSON_GetArraySize(msgs) > MAX_MESSAGES)
                return fail(e, "invalid_value", "messages", "at most %d messages are accepted", MAX_MESSAGES);
        cJSON *out = cJSON_CreateArray();
        if (!out)
                return -ENOMEM;
        size_t total = 0;
        int r = 0, i = 0;
        const cJSON *m, *calls_turn = NULL;
        cJSON_ArrayForEach(m, msgs) {
                if ((r = one_message(m, i++, &calls_turn, lim, out, &total, e)) < 0)
                        break;
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

/* ---- tools ---------------------------------------------------------------------------- */

static bool function_name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > MAX_FUNCTION_NAME)
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
                      *s == '-'))
                        return false;
        return true;
}

/* The parts of a JSON Schema an object's parameters need to be usable: an object whose
 * "type" (if any) is "object", "properties" an object of schemas, "required" names. */
static int check_parameters(const cJSON *p, const char *param, struct dsv_gw_error *e) {
        if (!cJSON_IsObject(p))
                return fail(e, "invalid_value", param, "'parameters' must be a JSON Schema object");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(p, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(p, "required");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "object") != 0))
                return fail(e, "invalid_value", param, "'parameters' must have \"type\": \"object\"");
        if (props && !cJSON_IsObject(props))
                return fail(e, "invalid_value", param, "'parameters.properties' must be an object");
        const cJSON *s;
        cJSON_ArrayForEach(s, props) {
                if (!cJSON_IsObject(s) && !cJSON_IsBool(s))
                        return fail(e, "invalid_value", param, "'parameters.properties.%.40s' is not a schema", s->string);
        }
        if (req && !cJSON_IsArray(req))
                return fail(e, "invalid_value", param, "'parameters.required' must be an array of names");
        cJSON_ArrayForEach(s, req) {
                if (!cJSON_IsString(s))
                        return fail(e, "invalid_value", param, "'parameters.required' must be an array of names");
        }
        return 0;
}

/* *ret_strict: the index of the first tool whose function sets "strict": true, or -1. */
static int check_tools(const cJSON *tools, int *ret_strict, struct dsv_gw_error *e) {
        if (!cJSON_IsArray(tools))
                return fail(e, "invalid_value", "tools", "'tools' must be an array");
        if (cJSON_GetArraySize(tools) > MAX_TOOLS)
                return fail(e, "invalid_value", "tools", "at most %d tools are accepted", MAX_TOOLS);
        int i = 0;
        const cJSON *t;
        *ret_strict = -1;
        cJSON_ArrayForEach(t, tools) {
                char param[192];
                snprintf(param, sizeof param, "tools[%d]", i++);
                static const char *const known_tool[] = {"type", "function"};
                static const char *const known_fn[] = {"name", "description", "parameters", "strict"};
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
                int r;
                if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
                    !cJSON_IsObject(fn))
                        return fail(e, "invalid_value", param, "a tool must be {\"type\": \"function\", \"function\": {…}}");
                if ((r = dsv__gw_only_known(t, known_tool, sizeof known_tool / sizeof *known_tool, param, e)) < 0)
                        return r;
                snprintf(param, sizeof param, "tools[%d].function", i - 1);
                if ((r = dsv__gw_only_known(fn, known_fn, sizeof known_fn / sizeof *known_fn, param, e)) < 0)
                        return r;
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *desc = given(fn, "description");
                const cJSON *params = given(fn, "parameters");
                const cJSON *strict = given(fn, "strict");
                if (!cJSON_IsString(name) || !function_name_ok(name->valuestring))
                        return fail(e, "invalid_value", param,
                                    "a function needs a 'name' of 1 to 64 letters, digits, '_' or '-'");
                if (desc && !cJSON_IsString(desc))
                        return fail(e, "invalid_value", param, "a function's 'description' must be a string");
                if (strict && !cJSON_IsBool(strict))
                        return fail(e, "invalid_value", param, "a function's 'strict' must be a boolean");
                if (cJSON_IsTrue(strict) && *ret_strict < 0)
                        *ret_strict = i - 1;
                if (params) {
                        snprintf(param, sizeof param, "tools[%d].function.parameters", i - 1);
                        if ((r = check_parameters(params, param, e)) < 0)
                                return r;
                }
                const cJSON *u;
                int j = 0;
                cJSON_ArrayForEach(u, tools) {
                        if (u == t)
                                break;
                        const cJSON *other = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "function"), "name");
                        if (strcmp(other->valuestring, name->valuestring) == 0)
                                return fail(e, "invalid_value", "tools", "tools[%d] and tools[%d] are both named '%.64s'", j,
                                            i - 1, name->valuestring);
                        j++;
                }
        }
        return 0;
}

static bool has_tool(const cJSON *tools, const char *name) {
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
                if (strcmp(n->valuestring, name) == 0)
                        return true;
        }
        return false;
}

int dsv__gw_tools_parse(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_gw_request *req,
                        struct dsv_gw_error *e) {
        const cJSON *tools = given(o, "tools"), *choice = given(o, "tool_choice"), *parallel = given(o, "parallel_tool_calls");
        int r, strict = -1;
        if (cJSON_IsArray(tools) && !tools->child)
                tools = NULL; /* [] is no tools */
        if (tools && (r = check_tools(tools, &strict, e)) < 0)
                return r;
        if (parallel && !cJSON_IsBool(parallel))
                return fail(e, "invalid_value", "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        req->parallel_tool_calls = !parallel || cJSON_IsTrue(parallel);
        bool use = tools != NULL, constrain = false;
        const char *only = NULL; /* the function tool_choice names */
        if (choice) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
                if (cJSON_IsString(choice) && strcmp(choice->valuestring, "none") == 0) {
                        use = false;
                } else if (cJSON_IsString(choice) && strcmp(choice->valuestring, "auto") == 0) {
                        /* the default with tools */
                } else if (cJSON_IsString(choice) && strcmp(choice->valuestring, "required") == 0) {
                        if (!tools)
                                return fail(e, "invalid_value", "tool_choice", "'tool_choice' \"required\" needs 'tools'");
                        constrain = true;
                } else if (cJSON_IsObject(choice) && cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0 &&
                           cJSON_IsString(name)) {
                        if (!tools || !has_tool(tools, name->valuestring))
                                return fail(e, "invalid_value", "tool_choice",
                                            "'tool_choice' names the function '%.64s', which is not in 'tools'",
                                            name->valuestring);
                        constrain = true;
                        only = name->valuestring;
                } else {
                        return fail(e, "invalid_value", "tool_choice",
                                    "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                    "{\"type\": \"function\", \"function\": {\"name\": …}}");
                }
        }
        /* strict promises arguments valid against the schema whenever the model calls the
         * function; under "auto" the model may also answer in text, and the output is not
         * constrained, so that promise is only kept when a call is forced. */
        if (use && strict >= 0 && !constrain) {
                char param[64];
                snprintf(param, sizeof param, "tools[%d].function.strict", strict);
                return fail(e, "unsupported_parameter", param,
                            "'strict': true is kept only with 'tool_choice' \"required\" or a named function, "
                            "where decoding is constrained to the schema; under \"auto\" the arguments are not "
                            "constrained");
        }
        if (!use)
                return 0;
        if (constrain) {
                /* The output is a constrained call (tool_constraint.c): in the template's
                 * own syntax, read by its parser, or JSON when it has none. */
                struct dsv_ipc_request *q = &req->ipc.u.request;
                bool own = lim->tool_format != DSV_GATEWAY_TOOLS_NONE;
                char *text = own ? dsv__gw_tool_constraint_composed(tools, only, req->parallel_tool_calls,
                                                                    lim->tool_format)
                                 : dsv__gw_tool_constraint_schema(tools, only, req->parallel_tool_calls);
                if (!text)
                        return -ENOMEM;
                q->constraint_text = strdup(text);
                cJSON_free(text);
                if (!q->constraint_text)
                        return -ENOMEM;
                q->constraint = own ? DSV_IPC_CONSTRAINT_COMPOSED : DSV_IPC_CONSTRAINT_JSON_SCHEMA;
                req->tool_forced = true;
                req->tool_json = !own;
                if (!own)
                        return 0; /* the template cannot show the tools */
        } else if (lim->tool_format == DSV_GATEWAY_TOOLS_NONE) {
                return fail(e, "unsupported_parameter", "tools",
                            "the served model's chat template has no tool-call format, so its calls cannot be read; "
                            "'tool_choice' \"required\" or a named function constrains the output to a call instead");
        }
        if (!(req->ipc.u.request.tools_json = cJSON_PrintUnformatted(tools)))
                return -ENOMEM;
        req->tool_parse = lim->tool_format;
        return 0;
}
