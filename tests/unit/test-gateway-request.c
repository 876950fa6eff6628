/* The gateway's pure parts: OpenAI request parsing (types, ranges, refusals), the error
 * JSON shape, UTF-8 checking, histogram text and API keys. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <unistd.h>

#include "keys.h"
#include "metrics.h"
#include "openai.h"
#include "t.h"

static const struct dsv_gw_limits lim = {
        .model = "m", .max_prompt_bytes = 64, .max_tokens_limit = 1000, .default_max_tokens = 7};

static int parse(const char *body, enum dsv_gw_api api, struct dsv_gw_request *req, struct dsv_gw_error *e) {
        return dsv__gw_request_parse(body, strlen(body), api, &lim, req, e);
}

/* Parses a body that must fail; returns the status, with the param in *param. */
static int refused(const char *body, enum dsv_gw_api api, char *param) {
        struct dsv_gw_request req;
        struct dsv_gw_error e;
        memset(&e, 0, sizeof e);
        if (parse(body, api, &req, &e) == 0) {
                dsv__gw_request_done(&req);
                return 0;
        }
        if (param)
                strcpy(param, e.param);
        return e.status;
}

TEST(chat_maps_every_field) {
        struct dsv_gw_request r;
        struct dsv_gw_error e;
        ASSERT_OK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi \"},{\"type\":\"text\",\"text\":\"there\"}]}],"
                        "\"temperature\":0.5,\"top_p\":0.9,\"max_tokens\":12,\"stop\":[\"x\",\"y\"],\"seed\":42,"
                        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"top_k\":40,\"min_p\":0.1,"
                        "\"repetition_penalty\":1.1,\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,"
                        "\"stream_options\":{\"include_usage\":true},\"user\":\"u\",\"unknown_field\":null}",
                        DSV_GW_API_CHAT, &r, &e));
        const struct dsv_ipc_request *q = &r.ipc.u.request;
        ASSERT_EQ(q->input, DSV_IPC_INPUT_CHAT);
        ASSERT_STREQ(q->messages_json, "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi there\"}]");
        ASSERT_NEAR(q->sampling.temperature, 0.5, 1e-6);
        ASSERT_NEAR(q->sampling.top_p, 0.9, 1e-6);
        ASSERT_NEAR(q->sampling.min_p, 0.1, 1e-6);
        ASSERT_NEAR(q->sampling.repetition_penalty, 1.1, 1e-6);
        ASSERT_NEAR(q->sampling.presence_penalty, 0.5, 1e-6);
        ASSERT_NEAR(q->sampling.frequency_penalty, -0.5, 1e-6);
        ASSERT_EQ(q->sampling.top_k, 40);
        ASSERT_EQ(q->sampling.has_seed, 1);
        ASSERT_EQ(q->sampling.seed, 42);
        ASSERT_EQ(q->max_tokens, 12);
        ASSERT_EQ(q->n_stop, 2);
        ASSERT_STREQ(q->stop[1], "y");
        ASSERT_EQ(q->logprobs, 3);
        ASSERT_TRUE(r.logprobs && r.top_logprobs == 3 && r.stream && r.include_usage);
        dsv__gw_request_done(&r);
}

TEST(completions_prompt_forms) {
        struct dsv_gw_request r;
        struct dsv_gw_error e;
        ASSERT_OK(parse("{\"model\":\"m\",\"prompt\":\"hello\",\"stop\":\"\\n\",\"logprobs\":0}", DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_EQ(r.ipc.u.request.input, DSV_IPC_INPUT_PROMPT);
        ASSERT_STREQ(r.ipc.u.request.prompt, "hello");
        ASSERT_EQ(r.ipc.u.request.max_tokens, 7); /* the default */
        ASSERT_EQ(r.ipc.u.request.n_stop, 1);
        ASSERT_TRUE(r.logprobs);
        ASSERT_EQ(r.ipc.u.request.logprobs, 1); /* the chosen token's logprob needs one alternative */
        ASSERT_TRUE(!r.stream);
        dsv__gw_request_done(&r);
        ASSERT_OK(parse("{\"model\":\"m\",\"prompt\":[\"one\"]}", DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_STREQ(r.ipc.u.request.prompt, "one");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse("{\"model\":\"m\",\"prompt\":[1,2,3],\"top_k\":-1}", DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_EQ(r.ipc.u.request.input, DSV_IPC_INPUT_TOKENS);
        ASSERT_EQ(r.ipc.u.request.n_tokens, 3);
        ASSERT_EQ(r.ipc.u.request.tokens[2], 3);
        ASSERT_EQ(r.ipc.u.request.sampling.top_k, 0);
        dsv__gw_request_done(&r);
}

TEST(bad_values_are_400_with_param) {
        char p[64];
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":-1}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "max_tokens");
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1001}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1e300}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":2.5}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":\"5\"}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":0}",
                          DSV_GW_API_CHAT, p), 400);
        ASSERT_STREQ(p, "max_completion_tokens");
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":\"hot\"}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "temperature");
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":3}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":-0.1}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"seed\":-4}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"seed\":1e16}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"stream\":1}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "stream");
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"\"]}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[1]}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\","
                          "\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"\"}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":[1,-2]}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"n\":2}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "n");
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":{\"1\":500}}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "logit_bias");
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}",
                          DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
                          DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[]}", DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
                          DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"messages\":\"hi\"}", DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\"}", DSV_GW_API_CHAT, p), 400);
        ASSERT_STREQ(p, "messages");
}

TEST(body_level_errors) {
        char p[64];
        ASSERT_EQ(refused("{\"model\":\"other\",\"prompt\":\"x\"}", DSV_GW_API_COMPLETIONS, p), 404);
        ASSERT_STREQ(p, "model");
        ASSERT_EQ(refused("{\"prompt\":\"x\"}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":7,\"prompt\":\"x\"}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"x\"", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("[1,2]", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"caf\xc3\"}", DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"\\ud800\"}", DSV_GW_API_COMPLETIONS, p), 400);
        /* over max_prompt_bytes (64) */
        ASSERT_EQ(refused("{\"model\":\"m\",\"prompt\":\"0123456789012345678901234567890123456789012345678901234567890123456789\"}",
                          DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "prompt");
}

TEST(error_json_shape) {
        struct dsv_gw_error e;
        dsv__gw_error_set(&e, 400, "invalid_request_error", "invalid_value", "max_tokens", "bad %d", 5);
        char *s;
        size_t len;
        ASSERT_OK(dsv__gw_error_json(&e, &s, &len));
        ASSERT_STREQ(s, "{\"error\":{\"message\":\"bad 5\",\"type\":\"invalid_request_error\",\"param\":\"max_tokens\","
                        "\"code\":\"invalid_value\"}}");
        free(s);
        dsv__gw_error_set(&e, 503, "server_error", NULL, NULL, "x");
        ASSERT_OK(dsv__gw_error_json(&e, &s, &len));
        ASSERT_STREQ(s, "{\"error\":{\"message\":\"x\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        free(s);
}

/* The error body is written without cJSON; it must come out as cJSON writes the same
 * object, for every byte a message, type, param or code can hold. */
static char *error_json_by_cjson(const struct dsv_gw_error *e) {
        cJSON *root = cJSON_CreateObject();
        cJSON *err = cJSON_AddObjectToObject(root, "error");
        cJSON_AddStringToObject(err, "message", e->message);
        cJSON_AddStringToObject(err, "type", e->type ? e->type : "server_error");
        if (e->param[0])
                cJSON_AddStringToObject(err, "param", e->param);
        else
                cJSON_AddNullToObject(err, "param");
        if (e->code)
                cJSON_AddStringToObject(err, "code", e->code);
        else
                cJSON_AddNullToObject(err, "code");
        char *s = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        return s;
}

TEST(error_json_as_cjson_writes_it) {
        char all[256], code[64];
        for (int c = 1; c < 256; c++)
                all[c - 1] = (char)c;
        all[255] = 0;
        const char *types[] = {"rate_limit_error", NULL, "t\"y\\p\x01e"};
        for (int round = 0; round < 6; round++) {
                struct dsv_gw_error e;
                snprintf(code, sizeof code, "c\x7f\x1f\xc3\xa9%d", round);
                dsv__gw_error_set(&e, 429, types[round % 3], round & 1 ? code : NULL, round & 2 ? "p\n\"x" : NULL,
                                  "%.*s", 199, all + round * 40);
                e.retry_after_s = 1;
                char *s;
                size_t len;
                ASSERT_OK(dsv__gw_error_json(&e, &s, &len));
                char *want = error_json_by_cjson(&e);
                ASSERT_TRUE(want != NULL);
                ASSERT_STREQ(s, want);
                ASSERT_EQ(len, strlen(want));
                cJSON_free(want);
                free(s);
        }
}

TEST(utf8) {
        ASSERT_EQ(dsv__gw_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 16), 1);
        ASSERT_EQ(dsv__gw_utf8_valid("\xc0\xaf", 2), 0);         /* overlong '/' */
        ASSERT_EQ(dsv__gw_utf8_valid("\xed\xa0\x80", 3), 0);     /* surrogate */
        ASSERT_EQ(dsv__gw_utf8_valid("\xf4\x90\x80\x80", 4), 0); /* > U+10FFFF */
        ASSERT_EQ(dsv__gw_utf8_valid("\xe2\x82", 2), 0);         /* truncated */
        ASSERT_EQ(dsv__gw_utf8_valid("\x80", 1), 0);
}

TEST(histogram_text) {
        struct dsv_gw_buckets b = {3, {0.1, 1, 10}};
        struct dsv_gw_hist h;
        memset(&h, 0, sizeof h);
        dsv__gw_hist_observe(&h, &b, 0.1);
        dsv__gw_hist_observe(&h, &b, 0.5);
        dsv__gw_hist_observe(&h, &b, 100);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ASSERT_OK(dsv__gw_hist_write(f, "x_seconds", "instance=\"a\"", &h, &b));
        fclose(f);
        ASSERT_STREQ(buf, "x_seconds_bucket{instance=\"a\",le=\"0.10000000000000001\"} 1\n"
                          "x_seconds_bucket{instance=\"a\",le=\"1\"} 2\n"
                          "x_seconds_bucket{instance=\"a\",le=\"10\"} 2\n"
                          "x_seconds_bucket{instance=\"a\",le=\"+Inf\"} 3\n"
                          "x_seconds_sum{instance=\"a\"} 100.59999999999999\n"
                          "x_seconds_count{instance=\"a\"} 3\n");
        free(buf);
        char esc[16];
        ASSERT_EQ(dsv__gw_label_escape("a\"b\\c\nd", esc, sizeof esc), 10);
        ASSERT_STREQ(esc, "a\\\"b\\\\c\\nd");
        ASSERT_EQ(dsv__gw_label_escape("0123456789abcdef", esc, sizeof esc), -ENOBUFS);
}

TEST(api_keys) {
        char path[] = "/tmp/test-gateway-keys-XXXXXX";
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        const char text[] = "# keys\n\n  sk-one  \nsk-two\r\n";
        ASSERT_EQ(write(fd, text, sizeof text - 1), (long)sizeof text - 1);
        close(fd);
        struct dsv_gw_keys k;
        ASSERT_OK(dsv__gw_keys_load(path, &k));
        ASSERT_EQ(k.n, 2);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer sk-one"), 1);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer sk-two"), 1);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer sk-on"), 0);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer sk-one2"), 0);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Basic sk-one"), 0);
        ASSERT_EQ(dsv__gw_keys_check(&k, "Bearer "), 0);
        ASSERT_EQ(dsv__gw_keys_check(&k, NULL), 0);
        dsv__gw_keys_done(&k);
        fd = open(path, O_WRONLY | O_TRUNC);
        ASSERT_EQ(write(fd, "# none\n", 7), 7);
        close(fd);
        ASSERT_ERR(dsv__gw_keys_load(path, &k), -EINVAL);
        unlink(path);
        ASSERT_ERR(dsv__gw_keys_load(path, &k), -ENOENT);
}

/* ---- tools, messages with calls, reasoning ---------------------------------------------- */

static const struct dsv_gw_limits lim_ds = {.model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 1000,
                                            .default_max_tokens = 7, .tool_format = DSV_GATEWAY_TOOLS_DEEPSEEK_V3};
static const struct dsv_gw_limits lim_qwen = {.model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 1000,
                                              .default_max_tokens = 7, .tool_format = DSV_GATEWAY_TOOLS_HERMES,
                                              .reasoning_format = DSV_GATEWAY_REASONING_DEEPSEEK, .think_opened = true};

#define TOOL_W "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
               "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define CALL_TURN "{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null," \
                  "\"reasoning_content\":\"hidden\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\"," \
                  "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}," \
                  "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"18C\"}"

/* Parses body with lim l; 0, or the status with the param in param. */
static int parse_with(const struct dsv_gw_limits *l, const char *body, struct dsv_gw_request *req, char *param) {
        struct dsv_gw_error e;
        memset(&e, 0, sizeof e);
        if (dsv__gw_request_parse(body, strlen(body), DSV_GW_API_CHAT, l, req, &e) == 0)
                return 0;
        strcpy(param, e.param);
        return e.status;
}

static int refused_with(const struct dsv_gw_limits *l, const char *body, char *param) {
        struct dsv_gw_request r;
        int st = parse_with(l, body, &r, param);
        if (st == 0)
                dsv__gw_request_done(&r);
        return st;
}

TEST(tools_and_calls_reach_the_worker) {
        struct dsv_gw_request r;
        char p[64] = "";
        ASSERT_EQ(parse_with(&lim_ds, "{\"model\":\"m\",\"messages\":[" CALL_TURN "],\"tools\":[" TOOL_W "]}", &r, p), 0);
        ASSERT_STREQ(r.ipc.u.request.tools_json, "[" TOOL_W "]");
        ASSERT_EQ(r.tool_parse, DSV_GATEWAY_TOOLS_DEEPSEEK_V3);
        ASSERT_TRUE(r.parallel_tool_calls && !r.split_think);
        /* DeepSeek's template prints arguments as they are; reasoning_content stays out;
         * content null stays null. */
        ASSERT_STREQ(r.ipc.u.request.messages_json,
                     "[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
                     "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                     "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"content\":\"18C\",\"tool_call_id\":\"c1\"}]");
        dsv__gw_request_done(&r);
        /* Qwen's applies tojson: the arguments go as an object. */
        ASSERT_EQ(parse_with(&lim_qwen, "{\"model\":\"m\",\"messages\":[" CALL_TURN "],\"tools\":[" TOOL_W "],"
                                        "\"parallel_tool_calls\":false}", &r, p), 0);
        ASSERT_TRUE(strstr(r.ipc.u.request.messages_json, "\"arguments\":{\"city\":\"Paris\"}") != NULL);
        ASSERT_TRUE(!r.parallel_tool_calls && r.split_think && r.think_opened);
        dsv__gw_request_done(&r);
        /* tool_choice none: no tools in the prompt, no parsing. */
        ASSERT_EQ(parse_with(&lim_ds, "{\"model\":\"m\",\"messages\":[" CALL_TURN "],\"tools\":[" TOOL_W "],"
                                      "\"tool_choice\":\"none\"}", &r, p), 0);
        ASSERT_TRUE(r.ipc.u.request.tools_json == NULL && r.tool_parse == DSV_GATEWAY_TOOLS_NONE);
        dsv__gw_request_done(&r);
        /* reasoning_format per request. */
        ASSERT_EQ(parse_with(&lim_qwen, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                        "\"reasoning_format\":\"none\"}", &r, p), 0);
        ASSERT_TRUE(!r.split_think);
        dsv__gw_request_done(&r);
}

TEST(chat_n_choices) {
        struct dsv_gw_request r;
        char p[64] = "";
        ASSERT_EQ(parse_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3}",
                             &r, p), 0);
        ASSERT_EQ(r.n, 3);
        dsv__gw_request_done(&r);
        ASSERT_EQ(parse_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, p), 0);
        ASSERT_EQ(r.n, 1);
        dsv__gw_request_done(&r);
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", p),
                  400);
        ASSERT_STREQ(p, "n");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", p),
                  400);
}

TEST(bad_tools_are_named) {
        char p[64];
        const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
        char body[1024];
#define BODY(extra) (snprintf(body, sizeof body, "{\"model\":\"m\",%s,%s}", msgs, extra), body)
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"d\"}}]"), p), 400);
        ASSERT_STREQ(p, "tools[0].function");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]"), p), 400);
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[" TOOL_W "," TOOL_W "]"), p), 400);
        ASSERT_STREQ(p, "tools");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                             "\"parameters\":{\"type\":\"string\"}}}]"), p), 400);
        ASSERT_STREQ(p, "tools[0].function.parameters");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                             "\"parameters\":{\"properties\":[1]}}}]"), p), 400);
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                             "\"parameters\":{\"required\":\"x\"}}}]"), p), 400);
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"x\":1}}]"), p), 400);
        ASSERT_STREQ(p, "tools[0].function.x");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[" TOOL_W "],\"tool_choice\":{\"type\":\"function\","
                                             "\"function\":{\"name\":\"nope\"}}"), p), 400);
        ASSERT_STREQ(p, "tool_choice");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[" TOOL_W "],\"tool_choice\":\"sometimes\""), p), 400);
        /* A forced call is a constraint of its own: no second one beside it. */
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[" TOOL_W "],\"tool_choice\":\"required\","
                                             "\"response_format\":{\"type\":\"json_object\"}"), p), 400);
        ASSERT_STREQ(p, "tool_choice");
        /* strict is kept only where the arguments are constrained. */
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[" TOOL_W ",{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                             "\"strict\":true}}]"), p), 400);
        ASSERT_STREQ(p, "tools[1].function.strict");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                             "\"strict\":1}}],\"tool_choice\":\"required\""), p), 400);
        ASSERT_STREQ(p, "tools[0].function");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"tools\":[" TOOL_W "],\"parallel_tool_calls\":1"), p), 400);
        ASSERT_STREQ(p, "parallel_tool_calls");
        ASSERT_EQ(refused_with(&lim_ds, BODY("\"reasoning_format\":\"auto\""), p), 400);
        ASSERT_STREQ(p, "reasoning_format");
        /* A model without a tool-call format cannot take tools. */
        ASSERT_EQ(refused_with(&lim, BODY("\"tools\":[" TOOL_W "]"), p), 400);
        ASSERT_STREQ(p, "tools");
#undef BODY
}

TEST(bad_messages_are_named) {
        char p[64];
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                                        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}]}", p), 400);
        ASSERT_STREQ(p, "messages[1].tool_call_id");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[" CALL_TURN ",{\"role\":\"tool\","
                                        "\"tool_call_id\":\"c9\",\"content\":\"r\"}]}", p), 400);
        ASSERT_STREQ(p, "messages[3].tool_call_id");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
                                        "\"audio\":{\"id\":\"a\"}}]}", p), 400);
        ASSERT_STREQ(p, "messages[0].audio");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
                                        "\"tool_calls\":[]}]}", p), 400);
        ASSERT_STREQ(p, "messages[0].tool_calls");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":null,"
                                        "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                                        "\"arguments\":\"{oops\"}}]}]}", p), 400);
        ASSERT_STREQ(p, "messages[0].tool_calls[0]");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":null}]}", p), 400);
        ASSERT_STREQ(p, "messages[0].content");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                        "\"function_call\":\"auto\"}", p), 400);
        ASSERT_STREQ(p, "function_call");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                        "\"unknown_field\":1}", p), 400);
        ASSERT_STREQ(p, "unknown_field");
        ASSERT_EQ(refused_with(&lim_ds, "{\"model\":\"m\",\"prompt\":\"x\",\"tools\":[]}", p), 400);
}
