/* The gateway's structured-output and logit_bias fields: what reaches the worker request,
 * what is refused with a 400 naming the field, and logprob alternatives with text and
 * bytes. */
#include <cjson/cJSON.h>

#include "openai.h"
#include "t.h"

static const struct dsv_gw_limits lim = {
        .model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 1000, .default_max_tokens = 7};

static int parse(const char *body, enum dsv_gw_api api, struct dsv_gw_request *req, struct dsv_gw_error *e) {
        memset(e, 0, sizeof *e);
        return dsv__gw_request_parse(body, strlen(body), api, &lim, req, e);
}

static int refused(const char *body, enum dsv_gw_api api, char *param) {
        struct dsv_gw_request req;
        struct dsv_gw_error e;
        if (parse(body, api, &req, &e) == 0) {
                dsv__gw_request_done(&req);
                return 0;
        }
        strcpy(param, e.param);
        return e.status;
}

#define CHAT(extra) "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," extra "}"
#define COMPLETION(extra) "{\"model\":\"m\",\"prompt\":\"x\"," extra "}"

TEST(response_format_json_schema) {
        struct dsv_gw_request r;
        struct dsv_gw_error e;
        ASSERT_OK(parse(CHAT("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person_1\","
                             "\"strict\":true,\"schema\":{ \"type\" : \"object\", \"properties\":{\"a\":{\"type\":\"integer\"}}}}}"),
                        DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_SCHEMA);
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
        dsv__gw_request_done(&r);
        /* completions too, and the schema may be a boolean */
        ASSERT_OK(parse(COMPLETION("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":true}}"),
                        DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "true");
        dsv__gw_request_done(&r);
}

TEST(response_format_other_forms) {
        struct dsv_gw_request r;
        struct dsv_gw_error e;
        /* stop strings go with a constraint: they cut the output as they do without one. */
        ASSERT_OK(parse(COMPLETION("\"stop\":\"}\",\"response_format\":{\"type\":\"json_object\"}"),
                        DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_OBJECT);
        ASSERT_EQ(r.ipc.u.request.n_stop, 1);
        ASSERT_STREQ(r.ipc.u.request.stop[0], "}");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"response_format\":{\"type\":\"json_object\"}"), DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_OBJECT);
        ASSERT_TRUE(r.ipc.u.request.constraint_text == NULL);
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"response_format\":{\"type\":\"text\"}"), DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_NONE);
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"response_format\":{\"type\":\"json_object\",\"schema\":{\"type\":\"array\"}}"),
                        DSV_GW_API_CHAT, &r, &e));
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "{\"type\":\"array\"}");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(COMPLETION("\"guided_json\":\"{\\\"type\\\": \\\"string\\\"}\""), DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "{\"type\":\"string\"}");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(COMPLETION("\"guided_json\":{\"enum\":[1,2]}"), DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "{\"enum\":[1,2]}");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"structured_outputs\":{\"json\":{\"type\":\"null\"}}"), DSV_GW_API_CHAT, &r, &e));
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "{\"type\":\"null\"}");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(COMPLETION("\"guided_regex\":\"[a-z]+\""), DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_REGEX);
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "[a-z]+");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"guided_choice\":[\"yes\",\"no\"]"), DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_CHOICE);
        ASSERT_EQ(r.ipc.u.request.n_choices, 2);
        ASSERT_STREQ(r.ipc.u.request.choices[1], "no");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"guided_grammar\":\"root ::= \\\"a\\\"\""), DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_GRAMMAR);
        ASSERT_STREQ(r.ipc.u.request.constraint_text, "root ::= \"a\"");
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(CHAT("\"structured_outputs\":{\"choice\":[\"a\"]}"), DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_CHOICE);
        dsv__gw_request_done(&r);
}

TEST(structured_output_refusals_name_the_field) {
        char p[64];
        ASSERT_EQ(refused(CHAT("\"response_format\":{\"type\":\"xml\"}"), DSV_GW_API_CHAT, p), 400);
        ASSERT_STREQ(p, "response_format");
        ASSERT_EQ(refused(CHAT("\"response_format\":\"json\""), DSV_GW_API_CHAT, p), 400);
        ASSERT_STREQ(p, "response_format");
        ASSERT_EQ(refused(CHAT("\"response_format\":{\"type\":\"json_schema\"}"), DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused(CHAT("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}"),
                          DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused(CHAT("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a b\","
                               "\"schema\":{}}}"), DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused(CHAT("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":1,"
                               "\"schema\":{}}}"), DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused(CHAT("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[1]}}"),
                          DSV_GW_API_CHAT, p), 400);
        ASSERT_EQ(refused(COMPLETION("\"guided_json\":\"{not json\""), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_json");
        ASSERT_EQ(refused(COMPLETION("\"guided_json\":{},\"response_format\":{\"type\":\"json_object\"}"),
                          DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_json");
        ASSERT_EQ(refused(COMPLETION("\"guided_regex\":\"\""), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_regex");
        ASSERT_EQ(refused(COMPLETION("\"guided_choice\":[]"), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_choice");
        ASSERT_EQ(refused(COMPLETION("\"guided_choice\":[\"a\",1]"), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_choice");
        ASSERT_EQ(refused(COMPLETION("\"guided_grammar\":5"), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_grammar");
        ASSERT_EQ(refused(COMPLETION("\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]"), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "guided_choice");
        ASSERT_EQ(refused(COMPLETION("\"structured_outputs\":{\"structural_tag\":\"a\"}"), DSV_GW_API_COMPLETIONS, p), 400);
        ASSERT_STREQ(p, "structured_outputs");
}

TEST(logit_bias_validated) {
        struct dsv_gw_request r;
        struct dsv_gw_error e;
        ASSERT_OK(parse(CHAT("\"logit_bias\":{\"50256\":-100,\"0\":2.5}"), DSV_GW_API_CHAT, &r, &e));
        ASSERT_EQ(r.ipc.u.request.n_logit_bias, 2);
        ASSERT_EQ(r.ipc.u.request.logit_bias[0].token, 50256);
        ASSERT_FLOAT_EQ(r.ipc.u.request.logit_bias[0].bias, -100.0f);
        ASSERT_EQ(r.ipc.u.request.logit_bias[1].token, 0);
        dsv__gw_request_done(&r);
        ASSERT_OK(parse(COMPLETION("\"logit_bias\":{}"), DSV_GW_API_COMPLETIONS, &r, &e));
        ASSERT_EQ(r.ipc.u.request.n_logit_bias, 0);
        dsv__gw_request_done(&r);
        char p[64];
        const char *bad[] = {COMPLETION("\"logit_bias\":{\"-1\":1}"), COMPLETION("\"logit_bias\":{\"x\":1}"),
                             COMPLETION("\"logit_bias\":{\"01\":1}"), COMPLETION("\"logit_bias\":{\"1\":100.5}"),
                             COMPLETION("\"logit_bias\":{\"1\":\"5\"}"), COMPLETION("\"logit_bias\":[1]"),
                             COMPLETION("\"logit_bias\":{\"4294967296\":1}")};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                ASSERT_EQ(refused(bad[i], DSV_GW_API_COMPLETIONS, p), 400);
                ASSERT_STREQ(p, "logit_bias");
        }
}

/* Alternatives carry their text and bytes; a partial character's bytes show as U+FFFD
 * in the text and exactly in bytes. */
TEST(logprob_alternatives_text_and_bytes) {
        uint8_t a[] = {' ', 'G', 'o', 'd'}, b[] = {0xe2, 0x80};
        struct dsv_ipc_logprob top[2] = {{5, -0.1f}, {9, -2.5f}};
        struct dsv_ipc_bytes tb[2] = {{a, 4}, {b, 2}};
        struct dsv_ipc_token t = {.id = 1, .token = 5, .text = " God", .logprob = -0.1f, .top = top, .n_top = 2,
                                  .top_bytes = tb};
        cJSON *e = dsv__gw_chat_logprob(&t, 2);
        const cJSON *alts = cJSON_GetObjectItem(e, "top_logprobs");
        ASSERT_EQ(cJSON_GetArraySize(alts), 2);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 0), "token")->valuestring, " God");
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 0), "bytes")), 4);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 1), "token")->valuestring, "\xef\xbf\xbd\xef\xbf\xbd");
        const cJSON *bytes1 = cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 1), "bytes");
        ASSERT_EQ(cJSON_GetArraySize(bytes1), 2);
        ASSERT_EQ((int)cJSON_GetArrayItem(bytes1, 0)->valuedouble, 0xe2);
        cJSON_Delete(e);

        cJSON *lp = dsv__gw_completion_logprobs_new();
        dsv__gw_completion_logprob_add(lp, &t, 0, 2);
        const cJSON *top0 = cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "top_logprobs"), 0);
        ASSERT_TRUE(cJSON_GetObjectItem(top0, " God") != NULL);
        cJSON_Delete(lp);

        /* a worker without a tokenizer: ids stand in */
        t.top_bytes = NULL;
        e = dsv__gw_chat_logprob(&t, 1);
        alts = cJSON_GetObjectItem(e, "top_logprobs");
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 0), "token")->valuestring, "token_id:5");
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 0), "bytes")));
        cJSON_Delete(e);
}
