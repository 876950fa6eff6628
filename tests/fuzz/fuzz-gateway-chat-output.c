/* libFuzzer target: arbitrary bytes as a model's output through the chat output pipeline
 * (think splitter, tool-call parsers). Byte 0 picks the tool format, whether reasoning is
 * split and opened, whether calls are parallel and whether the output is tool_choice's
 * constrained JSON calls; byte 1 seeds the cut points. The output
 * fed in pieces, with every delta gathered, must give the same reasoning, content and
 * complete calls as the output fed whole; DeepSeek's call markers never reach content. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "chat_output.h"

static void gather(cJSON *d, struct dsv_gw_text *re, struct dsv_gw_text *co, struct dsv_gw_text *args) {
        cJSON *r = cJSON_GetObjectItem(d, "reasoning_content"), *c = cJSON_GetObjectItem(d, "content"), *t;
        if (r)
                dsv__gw_text_add(re, r->valuestring, strlen(r->valuestring));
        if (c)
                dsv__gw_text_add(co, c->valuestring, strlen(c->valuestring));
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(d, "tool_calls")) {
                int i = cJSON_GetObjectItem(t, "index")->valueint;
                const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(t, "function"), "arguments"));
                if (i < 0 || i >= DSV_GW_MAX_TOOL_CALLS || !a)
                        abort();
                dsv__gw_text_add(&args[i], a, strlen(a));
        }
}

static bool same(const struct dsv_gw_text *a, const struct dsv_gw_text *b) {
        return a->len == b->len && (a->len == 0 || memcmp(a->s, b->s, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 2)
                return 0;
        enum dsv_gateway_tool_format f = (enum dsv_gateway_tool_format)(data[0] % DSV_GATEWAY_TOOLS_FORMAT_COUNT);
        bool split = data[0] & 4, opened = data[0] & 8, parallel = data[0] & 16, json_calls = data[0] & 32;
        unsigned seed = data[1];
        const char *out = (const char *)data + 2;
        size_t n = strnlen(out, size - 2); /* token texts are C strings */

        struct dsv_gw_chat_out whole, streamed;
        dsv__gw_chat_out_init(&whole, split, opened, f, parallel, "call-0");
        dsv__gw_chat_out_init(&streamed, split, opened, f, parallel, "call-0");
        if (json_calls) {
                dsv__gw_chat_out_read_json_calls(&whole);
                dsv__gw_chat_out_read_json_calls(&streamed);
        }
        dsv__gw_chat_out_push(&whole, out, n);
        dsv__gw_chat_out_finish(&whole);

        struct dsv_gw_text re = {0}, co = {0}, args[DSV_GW_MAX_TOOL_CALLS] = {{0}};
        for (size_t at = 0; at <= n;) {
                size_t piece = 1 + (seed = seed * 1103515245u + 12345u) % 7;
                if (at < n) {
                        piece = piece < n - at ? piece : n - at;
                        dsv__gw_chat_out_push(&streamed, out + at, piece);
                } else {
                        dsv__gw_chat_out_finish(&streamed);
                        piece = 1;
                }
                at += piece;
                cJSON *d = dsv__gw_chat_out_delta(&streamed);
                if (d)
                        gather(d, &re, &co, args);
                cJSON_Delete(d);
        }
        if (!same(&re, &whole.reasoning) || !same(&co, &whole.content) || whole.tools.n_calls != streamed.tools.n_calls)
                abort();
        for (size_t i = 0; i < whole.tools.n_calls; i++)
                if (whole.tools.calls[i].complete && !same(&args[i], &whole.tools.calls[i].args))
                        abort();
        if (f == DSV_GATEWAY_TOOLS_DEEPSEEK_V3 && whole.content.len &&
            (memmem(whole.content.s, whole.content.len, "<｜tool▁call▁begin｜>", strlen("<｜tool▁call▁begin｜>")) ||
             memmem(whole.content.s, whole.content.len, "<｜tool▁calls▁begin｜>", strlen("<｜tool▁calls▁begin｜>"))))
                abort();
        cJSON *m = cJSON_CreateObject();
        if (dsv__gw_chat_out_message(&whole, m) != 0)
                abort();
        cJSON_Delete(m);
        dsv__gw_chat_out_free(&whole);
        dsv__gw_chat_out_free(&streamed);
        dsv__gw_text_free(&re);
        dsv__gw_text_free(&co);
        for (size_t i = 0; i < DSV_GW_MAX_TOOL_CALLS; i++)
                dsv__gw_text_free(&args[i]);
        return 0;
}
