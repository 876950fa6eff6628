/* The constraint tool_choice "required" or a named function puts on decoding: a call of
 * one of the allowed functions with arguments valid against that function's "parameters"
 * schema. A template with a tool-call syntax gets the call in that syntax, as a composed
 * grammar (markers as their single tokens, then the parser of tool_calls.c reads it as
 * any call the model writes); one without gets JSON, as vLLM constrains "required" (one
 * JSON Schema over the whole output, compiled by the worker like any response_format).
 * There each function's parameters go under "$defs" of the one schema, their own "#…"
 * references moved there. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_constraint.h"
#include "tool_markers.h"

/* Rewrites every "$ref": "#…" in s to "#/$defs/<def>…", so the schema means the same
 * below the root. */
static int move_refs(cJSON *s, const char *def) {
        cJSON *it;
        cJSON_ArrayForEach(it, s) {
                if (it->string && strcmp(it->string, "$ref") == 0 && cJSON_IsString(it) && it->valuestring[0] == '#') {
                        size_t n = strlen(def) + strlen(it->valuestring) + 16;
                        char *moved = malloc(n);
                        if (!moved)
                                return -ENOMEM;
                        snprintf(moved, n, "#/$defs/%s%s", def, it->valuestring + 1);
                        bool ok = cJSON_SetValuestring(it, moved) != NULL;
                        free(moved);
                        if (!ok)
                                return -ENOMEM;
                } else if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
                        int r = move_refs(it, def);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* {"type":"object","properties":{"name":{"const":NAME},"arguments":{"$ref":"#/$defs/DEF"}},
 *  "required":["name","arguments"],"additionalProperties":false} */
static cJSON *call_schema(const char *name, const char *def) {
        char ref[96];
        snprintf(ref, sizeof ref, "#/$defs/%s", def);
        cJSON *o = cJSON_CreateObject();
        cJSON *props = cJSON_AddObjectToObject(o, "properties");
        cJSON *req = cJSON_AddArrayToObject(o, "required");
        cJSON_AddStringToObject(o, "type", "object");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", name);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "arguments"), "$ref", ref);
        cJSON_AddItemToArray(req, cJSON_CreateString("name"));
        cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
        cJSON_AddFalseToObject(o, "additionalProperties");
        return o;
}

/* The function of tool t, its name in *ret_name; NULL when only names another one. */
static const cJSON *allowed_function(const cJSON *t, const char *only, const char **ret_name) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        *ret_name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        return only && strcmp(*ret_name, only) != 0 ? NULL : fn;
}

/* A function without "parameters" takes none: its arguments are {}. */
static cJSON *parameters_copy(const cJSON *fn) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (p && !cJSON_IsNull(p))
                return cJSON_Duplicate(p, true);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "object");
        cJSON_AddFalseToObject(o, "additionalProperties");
        return o;
}

char *dsv__gw_tool_constraint_schema(const cJSON *tools, const char *only, bool parallel) {
        cJSON *root = cJSON_CreateObject();
        cJSON *defs = cJSON_AddObjectToObject(root, "$defs");
        cJSON *calls = cJSON_CreateArray();
        char *text = NULL;
        int i = 0, r = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
                const char *name;
                const cJSON *fn = allowed_function(t, only, &name);
                if (!fn)
                        continue;
                char def[32];
                snprintf(def, sizeof def, "tool_%d", i++);
                cJSON *params = parameters_copy(fn);
                if (!params || (r = move_refs(params, def)) < 0) {
                        cJSON_Delete(params);
                        goto out;
                }
                cJSON_AddItemToObject(defs, def, params);
                cJSON_AddItemToArray(calls, call_schema(name, def));
        }
        /* One function: its call schema itself, no one-branch anyOf. */
        cJSON *call = cJSON_GetArraySize(calls) == 1 ? cJSON_DetachItemFromArray(calls, 0) : NULL;
        cJSON *one = cJSON_CreateObject();
        if (call)
                cJSON_Delete(one), one = call;
        else
                cJSON_AddItemToObject(one, "anyOf", calls), calls = NULL;
        if (parallel) {
                cJSON_AddStringToObject(root, "type", "array");
                cJSON_AddNumberToObject(root, "minItems", 1);
                cJSON_AddItemToObject(root, "items", one);
        } else {
                /* The call's keywords beside "$defs" at the root. */
                cJSON *k;
                while ((k = one ? one->child : NULL)) {
                        cJSON_DetachItemViaPointer(one, k);
                        cJSON_AddItemToObject(root, k->string, k);
                }
                cJSON_Delete(one);
        }
        text = cJSON_PrintUnformatted(root);
out:
        cJSON_Delete(calls);
        cJSON_Delete(root);
        return text;
}

/* ---- the call in the template's own syntax: a composed grammar -------------------------- */

static cJSON *part(const char *kind, const char *text) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, kind, text);
        return o;
}

/* {"sequence": [parts…]}, taking the parts (NULL ends the list). */
static cJSON *sequence(cJSON *first, ...) {
        cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "sequence");
        va_list ap;
        va_start(ap, first);
        for (cJSON *p = first; p; p = va_arg(ap, cJSON *))
                cJSON_AddItemToArray(list, p);
        va_end(ap);
        return o;
}

/* One call, or with parallel one or more, joined by separator. */
static cJSON *calls(cJSON *call, bool parallel, const char *separator) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "repeat", call);
        cJSON_AddNumberToObject(o, "min", 1);
        if (!parallel)
                cJSON_AddNumberToObject(o, "max", 1);
        cJSON_AddItemToObject(o, "separator", part("text", separator));
        return o;
}

/* What the format writes before a call's arguments: the name and what leads to them. */
static void head_text(enum dsv_gateway_tool_format format, const char *name, char *out, size_t size) {
        if (format == DSV_GATEWAY_TOOLS_DEEPSEEK_V3)
                snprintf(out, size, "%s\n" DSV_GW_DS_FENCE, name);
        else if (format == DSV_GATEWAY_TOOLS_HERMES)
                snprintf(out, size, "%s\", \"arguments\": ", name);
        else
                snprintf(out, size, "%s\", \"parameters\": ", name);
}

char *dsv__gw_tool_constraint_composed(const cJSON *tools, const char *only, bool parallel,
                                       enum dsv_gateway_tool_format format) {
        if (format == DSV_GATEWAY_TOOLS_NONE || format >= DSV_GATEWAY_TOOLS_FORMAT_COUNT)
                return NULL;
        /* one branch per function: its head, then its arguments */
        cJSON *choice = cJSON_CreateObject(), *branches = cJSON_AddArrayToObject(choice, "one_of");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
                const char *name;
                const cJSON *fn = allowed_function(t, only, &name);
                if (!fn)
                        continue;
                char head[160];
                head_text(format, name, head, sizeof head);
                cJSON *args = cJSON_CreateObject();
                cJSON_AddItemToObject(args, "json_schema", parameters_copy(fn));
                cJSON_AddItemToArray(branches, sequence(part("text", head), args, NULL));
        }
        cJSON *root;
        if (format == DSV_GATEWAY_TOOLS_DEEPSEEK_V3) {
                cJSON *call = sequence(part("special", DSV_GW_DS_CALL_BEGIN), part("text", "function"),
                                       part("special", DSV_GW_DS_SEP), choice, part("text", "\n```"),
                                       part("special", DSV_GW_DS_CALL_END), NULL);
                root = sequence(part("special", DSV_GW_DS_CALLS_BEGIN), calls(call, parallel, "\n"),
                                part("special", DSV_GW_DS_CALLS_END), NULL);
        } else if (format == DSV_GATEWAY_TOOLS_HERMES) {
                cJSON *call = sequence(part("special", DSV_GW_HERMES_BEGIN), part("text", "\n{\"name\": \""), choice,
                                       part("text", "}\n"), part("special", DSV_GW_HERMES_END), NULL);
                root = calls(call, parallel, "\n");
        } else {
                cJSON *call = sequence(part("text", "{\"name\": \""), choice, part("text", "}"), NULL);
                root = calls(call, parallel, "; ");
        }
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        return text;
}
