/* libFuzzer target: arbitrary bytes as a request body for both endpoints. Whatever
 * parses must encode as a worker request; whatever fails must carry an error that
 * renders as JSON. */
#include <stdlib.h>
#include <string.h>

#include "openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const struct dsv_gw_limits lim = {
                .model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 4096, .default_max_tokens = 16};
        for (int api = 0; api < DSV_GW_API_COUNT; api++) {
                struct dsv_gw_request req;
                struct dsv_gw_error err;
                char *s;
                size_t len;
                if (dsv__gw_request_parse((const char *)data, size, (enum dsv_gw_api)api, &lim, &req, &err) == 0) {
                        req.ipc.u.request.id = 1;
                        if (dsv_ipc_msg_encode(&req.ipc, &s, &len) != 0)
                                abort(); /* a parsed request the worker protocol refuses */
                        free(s);
                        dsv__gw_request_done(&req);
                } else {
                        if (err.status < 400 || err.status > 599 || dsv__gw_error_json(&err, &s, &len) != 0)
                                abort();
                        free(s);
                }
        }
        return 0;
}
