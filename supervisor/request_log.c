/* request_log.c — `--log-requests`: one log line per finished request (event "request"),
 * with its prompt text. Without the option the hook is not installed and no request,
 * let alone its prompt, reaches any log. */
#include <cjson/cJSON.h>

#include "dsv_gateway.h"
#include "sup.h"

static void log_request(const struct dsv_gateway_request_log *rec, void *userdata) {
        (void)userdata;
        cJSON *f = cJSON_CreateObject();
        if (!f)
                return;
        cJSON_AddStringToObject(f, "endpoint", rec->endpoint);
        cJSON_AddStringToObject(f, "finish_reason", rec->finish_reason);
        cJSON_AddNumberToObject(f, "prompt_tokens", rec->prompt_tokens);
        cJSON_AddNumberToObject(f, "completion_tokens", rec->completion_tokens);
        cJSON_AddNumberToObject(f, "e2e_s", rec->e2e_s);
        cJSON_AddNumberToObject(f, "ttft_s", rec->ttft_s);
        cJSON_AddNumberToObject(f, "queue_s", rec->queue_s);
        cJSON_AddNumberToObject(f, "prefill_s", rec->prefill_s);
        cJSON_AddNumberToObject(f, "decode_s", rec->decode_s);
        if (rec->prompt)
                cJSON_AddStringToObject(f, "prompt", rec->prompt);
        sup_log_event(6, rec->instance, "request", f);
        cJSON_Delete(f);
}

void sup_request_log_setup(struct dsv_gateway *gw, bool enabled) {
        dsv_gateway_set_request_log_hook(gw, enabled ? log_request : NULL, NULL);
}
