/* libFuzzer target for chat-template parsing and rendering. Input: template source, then
 * optionally a NUL byte and a messages JSON array (otherwise a fixed conversation with a
 * system prompt, tool calls and a tool reply). Any result is fine except a crash, a
 * sanitizer report, a leak or a hang: renders are bounded by steps and memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

static const char default_messages[] =
        "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
        " {\"role\": \"user\", \"content\": \"What's the weather in Paris? \\u00e9\\u4f60\"},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\":"
        " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2.5, true, null]}}}]},"
        " {\"role\": \"tool\", \"content\": \"{\\\"temp_c\\\": 18}\"},"
        " {\"role\": \"assistant\", \"content\": \"It is 18\\u00b0C.\"}]";
static const char tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *buf = malloc(size + 1);
        if (!buf)
                return 0;
        memcpy(buf, data, size);
        buf[size] = '\0';
        size_t src_len = strlen(buf);
        const char *messages = src_len < size ? buf + src_len + 1 : default_messages;
        struct dse_chat_template *t = NULL;
        struct dse_diag diag;
        if (dse_chat_template_new(buf, &t, &diag) == 0) {
                char *out = NULL;
                if (dse_chat_template_render(t, messages, tools, 1, "<s>", "</s>", &out, &diag) >= 0)
                        free(out);
                dse_chat_template_free(t);
        }
        free(buf);
        return 0;
}
