/* The constraint tool_choice "required" or a named function puts on decoding: the output
 * is JSON naming one of the allowed functions with arguments valid against that
 * function's "parameters" schema, as vLLM constrains "required" (one JSON Schema over the
 * whole output, compiled by the worker like any response_format). Each function's
 * parameters go under "$defs" of the one schema, their own "#…" references moved there. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_constraint.h"

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
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
                const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
                if (only && strcmp(name, only) != 0)
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
