/* Structured-output request fields -> the worker's constraint: OpenAI's response_format
 * (text, json_object, json_schema {name, description, schema, strict}), llama-server's
 * json_object with a "schema", and vLLM's guided_json, guided_regex, guided_choice and
 * guided_grammar (and their newer structured_outputs {json, regex, choice, grammar}
 * forms). A schema is passed on as compact JSON text; the worker compiles it (once per
 * worker for the same text) and answers a keyword it cannot enforce with an error naming
 * keyword and JSON pointer, which the client gets as a 400. At most one of them per
 * request. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"

#define MAX_SCHEMA_NAME 64
#define MAX_CHOICES 4096 /* PROTOCOL.md */

static const cJSON *field(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return v && !cJSON_IsNull(v) ? v : NULL;
}

static int invalid(struct dsv_gw_error *e, const char *param, const char *msg) {
        dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", param, "%s", msg);
        return -EINVAL;
}

static int unsupported(struct dsv_gw_error *e, const char *param, const char *what) {
        dsv__gw_error_set(e, 400, "invalid_request_error", "unsupported_parameter", param, "%s is not supported", what);
        return -EINVAL;
}

/* OpenAI: a name of [a-zA-Z0-9_-], at most 64 characters. */
static int name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > MAX_SCHEMA_NAME)
                return 0;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
                      *s == '-'))
                        return 0;
        return 1;
}

/* A schema value (an object or a boolean, or for guided_json also a string holding one)
 * as compact JSON text in q. */
static int take_schema(const cJSON *schema, bool may_be_text, const char *param, const struct dsv_gw_limits *lim,
                       struct dsv_ipc_request *q, struct dsv_gw_error *e) {
        cJSON *parsed = NULL;
        if (may_be_text && cJSON_IsString(schema)) {
                if (!(parsed = cJSON_Parse(schema->valuestring)))
                        return invalid(e, param, "the JSON schema text is not valid JSON");
                schema = parsed;
        }
        if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
                cJSON_Delete(parsed);
                return invalid(e, param, "the JSON schema must be an object");
        }
        char *text = cJSON_PrintUnformatted(schema);
        cJSON_Delete(parsed);
        if (!text)
                return -ENOMEM;
        if (strlen(text) > lim->max_prompt_bytes) {
                cJSON_free(text);
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", param,
                                  "the JSON schema is longer than %zu bytes", lim->max_prompt_bytes);
                return -EINVAL;
        }
        q->constraint_text = strdup(text);
        cJSON_free(text);
        if (!q->constraint_text)
                return -ENOMEM;
        q->constraint = DSV_IPC_CONSTRAINT_JSON_SCHEMA;
        return 0;
}

static int parse_response_format(const cJSON *fmt, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                                 struct dsv_gw_error *e) {
        if (!cJSON_IsObject(fmt))
                return invalid(e, "response_format", "'response_format' must be an object");
        const cJSON *type = field(fmt, "type");
        if (!cJSON_IsString(type))
                return invalid(e, "response_format", "'response_format' needs a string 'type'");
        if (strcmp(type->valuestring, "text") == 0)
                return 0;
        if (strcmp(type->valuestring, "json_object") == 0) {
                const cJSON *schema = field(fmt, "schema"); /* llama-server's form */
                if (schema)
                        return take_schema(schema, false, "response_format", lim, q, e);
                q->constraint = DSV_IPC_CONSTRAINT_JSON_OBJECT;
                return 0;
        }
        if (strcmp(type->valuestring, "json_schema") != 0)
                return invalid(e, "response_format",
                               "'response_format.type' must be one of text, json_object, json_schema");
        const cJSON *js = field(fmt, "json_schema");
        if (!cJSON_IsObject(js))
                return invalid(e, "response_format", "'response_format' of type json_schema needs a 'json_schema' object");
        const cJSON *name = field(js, "name"), *strict = field(js, "strict"), *desc = field(js, "description");
        if (name && (!cJSON_IsString(name) || !name_ok(name->valuestring)))
                return invalid(e, "response_format",
                               "'response_format.json_schema.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
        if (strict && !cJSON_IsBool(strict))
                return invalid(e, "response_format", "'response_format.json_schema.strict' must be a boolean");
        if (desc && !cJSON_IsString(desc))
                return invalid(e, "response_format", "'response_format.json_schema.description' must be a string");
        const cJSON *schema = field(js, "schema");
        if (!schema)
                return invalid(e, "response_format", "'response_format.json_schema.schema' is required");
        /* Strict or not, every keyword is enforced or refused: strict changes nothing here. */
        return take_schema(schema, false, "response_format", lim, q, e);
}

/* A regex or GBNF text. */
static int take_text(const cJSON *v, enum dsv_ipc_constraint kind, const char *param, const struct dsv_gw_limits *lim,
                     struct dsv_ipc_request *q, struct dsv_gw_error *e) {
        if (!cJSON_IsString(v) || !v->valuestring[0]) {
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", param, "'%s' must be a non-empty string",
                                  param);
                return -EINVAL;
        }
        if (strlen(v->valuestring) > lim->max_prompt_bytes)
                return invalid(e, param, "the constraint text is longer than a prompt may be");
        if (!(q->constraint_text = strdup(v->valuestring)))
                return -ENOMEM;
        q->constraint = kind;
        return 0;
}

static int take_choices(const cJSON *v, const char *param, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                        struct dsv_gw_error *e) {
        int n = cJSON_GetArraySize(v);
        if (!cJSON_IsArray(v) || n == 0 || n > MAX_CHOICES) {
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", param,
                                  "'%s' must be an array of 1 to %d strings", param, MAX_CHOICES);
                return -EINVAL;
        }
        if (!(q->choices = calloc((size_t)n, sizeof *q->choices)))
                return -ENOMEM;
        size_t total = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
                if (!cJSON_IsString(it))
                        return invalid(e, param, "every choice must be a string");
                total += strlen(it->valuestring);
                if (total > lim->max_prompt_bytes)
                        return invalid(e, param, "the choices are longer than a prompt may be");
                if (!(q->choices[q->n_choices] = strdup(it->valuestring)))
                        return -ENOMEM;
                q->n_choices++;
        }
        q->constraint = DSV_IPC_CONSTRAINT_CHOICE;
        return 0;
}

/* One vLLM-style field: json, regex, choice or grammar, under the request's name param. */
static int take_guided(const char *kind, const cJSON *v, const char *param, const struct dsv_gw_limits *lim,
                       struct dsv_ipc_request *q, struct dsv_gw_error *e) {
        if (strcmp(kind, "json") == 0)
                return take_schema(v, true, param, lim, q, e);
        if (strcmp(kind, "regex") == 0)
                return take_text(v, DSV_IPC_CONSTRAINT_REGEX, param, lim, q, e);
        if (strcmp(kind, "grammar") == 0)
                return take_text(v, DSV_IPC_CONSTRAINT_GRAMMAR, param, lim, q, e);
        return take_choices(v, param, lim, q, e);
}

static int parse_constraint(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                             struct dsv_gw_error *e) {
        static const char *const kinds[] = {"json", "regex", "choice", "grammar"};
        static const char *const guided[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar"};
        const char *given = NULL;
        int r;
        const cJSON *fmt = field(o, "response_format");
        if (fmt) {
                if ((r = parse_response_format(fmt, lim, q, e)) < 0)
                        return r;
                given = q->constraint != DSV_IPC_CONSTRAINT_NONE ? "response_format" : NULL;
        }
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
                const cJSON *v = field(o, guided[i]);
                if (!v)
                        continue;
                if (given)
                        return invalid(e, guided[i], "give one of response_format, guided_json, guided_regex, "
                                                     "guided_choice and guided_grammar");
                if ((r = take_guided(kinds[i], v, guided[i], lim, q, e)) < 0)
                        return r;
                given = guided[i];
        }
        const cJSON *so = field(o, "structured_outputs");
        if (so) {
                if (!cJSON_IsObject(so))
                        return invalid(e, "structured_outputs", "'structured_outputs' must be an object");
                const cJSON *it;
                cJSON_ArrayForEach(it, so) {
                        if (cJSON_IsNull(it))
                                continue;
                        size_t k = 0;
                        while (k < sizeof kinds / sizeof kinds[0] && strcmp(it->string, kinds[k]) != 0)
                                k++;
                        if (k == sizeof kinds / sizeof kinds[0])
                                return unsupported(e, "structured_outputs", "a structured_outputs other than json, "
                                                                            "regex, choice and grammar");
                        if (given)
                                return invalid(e, "structured_outputs", "give one structured-output constraint");
                        if ((r = take_guided(kinds[k], it, "structured_outputs", lim, q, e)) < 0)
                                return r;
                        given = "structured_outputs";
                }
        }
        return 0;
}

int dsv__gw_parse_constraint(const cJSON *o, const struct dsv_gw_limits *lim, struct dsv_ipc_request *q,
                             struct dsv_gw_error *e) {
        /* A constraint already there is tool_choice's forced call: another one would
         * contradict it. */
        enum dsv_ipc_constraint forced = q->constraint;
        char *forced_text = q->constraint_text;
        q->constraint = DSV_IPC_CONSTRAINT_NONE;
        q->constraint_text = NULL;
        int r = parse_constraint(o, lim, q, e);
        if (r == 0 && forced != DSV_IPC_CONSTRAINT_NONE && q->constraint != DSV_IPC_CONSTRAINT_NONE) {
                dsv__gw_error_set(e, 400, "invalid_request_error", "invalid_value", "tool_choice",
                                  "'tool_choice' \"required\" or a named function constrains the output to a "
                                  "call; it cannot be combined with a structured-output constraint");
                r = -EINVAL;
        }
        if (forced != DSV_IPC_CONSTRAINT_NONE) {
                free(q->constraint_text);
                q->constraint = forced;
                q->constraint_text = forced_text;
        }
        return r;
}
