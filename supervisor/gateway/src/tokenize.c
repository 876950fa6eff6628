/* POST /tokenize and POST /detokenize in vLLM's shape (its TokenizeCompletionRequest,
 * TokenizeChatRequest and DetokenizeRequest): the body checked as strictly as a
 * completion's, every field known or refused, the work done by the embedder's tokenizer
 * (dsv_gateway_tokenizer). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define MAX_DETOKENIZE_IDS (1u << 20)

static enum MHD_Result refuse(struct MHD_Connection *conn, int status, const char *code, const char *param,
                              const char *msg) {
        struct dsv_gw_error e;
        dsv__gw_error_set(&e, status, status == 501 ? "server_error" : "invalid_request_error", code, param, "%s", msg);
        return dsv__gw_reply_error(conn, &e, NULL);
}

static bool only_fields(const cJSON *o, const char *const *allowed, const char **ret_unknown) {
        for (const cJSON *it = o->child; it; it = it->next) {
                bool known = false;
                for (const char *const *a = allowed; *a && !known; a++)
                        known = strcmp(it->string, *a) == 0;
                if (!known) {
                        *ret_unknown = it->string;
                        return false;
                }
        }
        return true;
}

/* A boolean field, or def when absent; -EINVAL when it is something else. */
static int get_bool(const cJSON *o, const char *key, bool def, bool *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!v) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsBool(v))
                return -EINVAL;
        *ret = cJSON_IsTrue(v);
        return 0;
}

static enum MHD_Result tokenize(const struct gw_tokenize *t, struct MHD_Connection *conn, const cJSON *o) {
        static const char *const allowed[] = {"model", "prompt", "messages", "add_special_tokens",
                                              "add_generation_prompt", "return_token_strs", NULL};
        const char *unknown, *bad = NULL;
        if (!only_fields(o, allowed, &unknown))
                return refuse(conn, 400, "unsupported_parameter", unknown, "This field is not supported here");
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        const cJSON *messages = cJSON_GetObjectItemCaseSensitive(o, "messages");
        if (!prompt == !messages)
                return refuse(conn, 400, "invalid_request", prompt ? "messages" : "prompt",
                              "Give exactly one of 'prompt' (a string) and 'messages' (an array)");
        if (prompt && !cJSON_IsString(prompt))
                return refuse(conn, 400, "invalid_value", "prompt", "'prompt' must be a string");
        if (messages && !cJSON_IsArray(messages))
                return refuse(conn, 400, "invalid_value", "messages", "'messages' must be an array");
        bool add_special, add_generation, token_strs;
        if (get_bool(o, "add_special_tokens", prompt != NULL, &add_special) < 0)
                bad = "add_special_tokens";
        else if (get_bool(o, "add_generation_prompt", true, &add_generation) < 0)
                bad = "add_generation_prompt";
        else if (get_bool(o, "return_token_strs", false, &token_strs) < 0)
                bad = "return_token_strs";
        if (bad)
                return refuse(conn, 400, "invalid_value", bad, "Expected true or false");
        if (token_strs)
                return refuse(conn, 400, "unsupported_parameter", "return_token_strs", "Token strings are not supported");
        char *messages_json = messages ? cJSON_PrintUnformatted(messages) : NULL;
        const char *text = prompt ? prompt->valuestring : NULL;
        if (messages && !messages_json)
                return MHD_NO;
        if (strlen(text ? text : messages_json) > t->max_prompt_bytes) {
                cJSON_free(messages_json);
                return refuse(conn, 400, "invalid_request", messages ? "messages" : "prompt",
                              "The prompt is longer than the server's limit");
        }
        char err[256] = "";
        size_t cap = 256;
        int32_t *ids = malloc(cap * sizeof *ids);
        int n = ids ? t->fn.encode(t->fn.userdata, text, messages_json, add_special, add_generation, ids, cap, err,
                                   sizeof err)
                    : -ENOMEM;
        if (n > (int)cap) {
                int32_t *bigger = realloc(ids, (size_t)n * sizeof *ids);
                cap = (size_t)n;
                n = bigger ? t->fn.encode(t->fn.userdata, text, messages_json, add_special, add_generation,
                                          ids = bigger, cap, err, sizeof err)
                           : -ENOMEM;
        }
        cJSON_free(messages_json);
        if (n < 0 || n > (int)cap) {
                free(ids);
                return n == -EINVAL || n == -EILSEQ
                               ? refuse(conn, 400, "invalid_value", messages ? "messages" : "prompt",
                                        err[0] ? err : "The text could not be tokenized")
                               : refuse(conn, 500, "internal_error", NULL, "The tokenizer failed");
        }
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "count", n);
        if (t->max_model_len > 0)
                cJSON_AddNumberToObject(a, "max_model_len", t->max_model_len);
        else
                cJSON_AddNullToObject(a, "max_model_len");
        cJSON_AddItemToObject(a, "tokens", cJSON_CreateIntArray(ids, n));
        cJSON_AddNullToObject(a, "token_strs");
        free(ids);
        return dsv__gw_reply_json(conn, 200, a);
}

static enum MHD_Result detokenize(const struct gw_tokenize *t, struct MHD_Connection *conn, const cJSON *o) {
        static const char *const allowed[] = {"model", "tokens", NULL};
        const char *unknown;
        if (!only_fields(o, allowed, &unknown))
                return refuse(conn, 400, "unsupported_parameter", unknown, "This field is not supported here");
        const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        int n = cJSON_IsArray(tokens) ? cJSON_GetArraySize(tokens) : -1;
        if (n < 0 || (size_t)n > MAX_DETOKENIZE_IDS)
                return refuse(conn, 400, "invalid_value", "tokens", "'tokens' must be an array of token ids");
        int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
        if (!ids)
                return MHD_NO;
        size_t i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, tokens) {
                if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX ||
                    e->valuedouble != (double)(int32_t)e->valuedouble) {
                        free(ids);
                        return refuse(conn, 400, "invalid_value", "tokens", "'tokens' must be an array of token ids");
                }
                ids[i++] = (int32_t)e->valuedouble;
        }
        char err[256] = "", *text = NULL;
        int r = t->fn.decode(t->fn.userdata, ids, i, &text, err, sizeof err);
        free(ids);
        if (r < 0)
                return r == -EINVAL || r == -EILSEQ
                               ? refuse(conn, 400, "invalid_value", "tokens", err[0] ? err : "A token id is out of range")
                               : refuse(conn, 500, "internal_error", NULL, "The tokenizer failed");
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "prompt", text);
        free(text);
        return dsv__gw_reply_json(conn, 200, a);
}

enum MHD_Result dsv__gw_tokenize(const struct gw_tokenize *t, struct MHD_Connection *conn, const char *body,
                                 size_t len, bool detok) {
        if (!t->fn.encode || !t->fn.decode)
                return refuse(conn, 501, "not_implemented", NULL, "This server has no tokenizer for this endpoint");
        struct dsv_gw_error e;
        if (dsv__gw_json_strict(body, len, &e) < 0)
                return dsv__gw_reply_error(conn, &e, NULL);
        cJSON *o = cJSON_ParseWithLength(body, len);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return refuse(conn, 400, "invalid_request", NULL, "The request body must be a JSON object");
        }
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
        enum MHD_Result r;
        if (model && !cJSON_IsNull(model) && (!cJSON_IsString(model) || !dsv__gw_model_served(&t->lim, model->valuestring)))
                r = refuse(conn, 404, "model_not_found", "model",
                           "The model does not exist or is not served here (see GET /v1/models)");
        else
                r = detok ? detokenize(t, conn, o) : tokenize(t, conn, o);
        cJSON_Delete(o);
        return r;
}
