#include "dsv_ipc.h"
#include "t.h"

static int roundtrip(const struct dsv_ipc_msg *in, struct dsv_ipc_msg *out) {
        char *buf;
        size_t len;
        int r = dsv_ipc_msg_encode(in, &buf, &len);
        if (r < 0)
                return r;
        char err[256] = "";
        r = dsv_ipc_msg_decode(buf, len, out, err, sizeof err);
        if (r < 0)
                fprintf(stderr, "decode: %s\n  %s\n", err, buf);
        free(buf);
        return r;
}

TEST(request_roundtrip_all_inputs) {
        char *stops[] = {"\n\n", "END"};
        int32_t toks[] = {0, 5, 70000};
        const char *chat = "[{\"role\":\"user\",\"content\":\"hi \\u00e9\"}]";
        for (int kind = 0; kind < DSV_IPC_INPUT_COUNT; kind++) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
                struct dsv_ipc_request *q = &m.u.request;
                q->id = 999999999999999ull; /* the largest id the protocol carries */
                q->input = (enum dsv_ipc_input)kind;
                q->prompt = "Hello, 世界";
                q->messages_json = (char *)chat;
                q->tokens = toks;
                q->n_tokens = 3;
                dsv_ipc_sampling_init(&q->sampling);
                q->sampling.temperature = 0.7f;
                q->sampling.top_k = 40;
                q->sampling.top_p = 0.9f;
                q->sampling.seed = 12345;
                q->sampling.has_seed = 1;
                q->max_tokens = 128;
                q->stop = stops;
                q->n_stop = 2;
                q->logprobs = 5;
                q->deadline_unix_ms = 1790000000000;
                struct dsv_ipc_msg out;
                ASSERT_OK(roundtrip(&m, &out));
                struct dsv_ipc_request *o = &out.u.request;
                ASSERT_EQ(out.type, DSV_IPC_REQUEST);
                ASSERT_EQ(o->id, q->id);
                ASSERT_EQ(o->input, kind);
                if (kind == DSV_IPC_INPUT_PROMPT)
                        ASSERT_STREQ(o->prompt, q->prompt);
                if (kind == DSV_IPC_INPUT_CHAT)
                        ASSERT_TRUE(strstr(o->messages_json, "\"role\":\"user\"") != NULL);
                if (kind == DSV_IPC_INPUT_TOKENS) {
                        ASSERT_EQ(o->n_tokens, 3);
                        ASSERT_EQ(o->tokens[2], 70000);
                }
                ASSERT_NEAR(o->sampling.temperature, 0.7, 1e-6);
                ASSERT_EQ(o->sampling.top_k, 40);
                ASSERT_EQ(o->sampling.seed, 12345);
                ASSERT_EQ(o->sampling.has_seed, 1);
                ASSERT_EQ(o->max_tokens, 128);
                ASSERT_EQ(o->n_stop, 2);
                ASSERT_STREQ(o->stop[1], "END");
                ASSERT_EQ(o->logprobs, 5);
                ASSERT_EQ(o->deadline_unix_ms, 1790000000000);
                dsv_ipc_msg_done(&out);
        }
}

TEST(events_roundtrip) {
        struct dsv_ipc_logprob top[2] = {{7, -0.5f}, {9, -1.25f}};
        struct dsv_ipc_msg tok = {.type = DSV_IPC_TOKEN,
                                  .u.token = {.id = 3, .token = 7, .text = "é", .logprob = -0.5f, .top = top, .n_top = 2}};
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&tok, &out));
        ASSERT_STREQ(out.u.token.text, "é");
        ASSERT_EQ(out.u.token.n_top, 2);
        ASSERT_NEAR(out.u.token.top[1].logprob, -1.25, 1e-6);
        dsv_ipc_msg_done(&out);

        struct dsv_ipc_msg fin = {.type = DSV_IPC_FINAL,
                                  .u.final = {.id = 3, .finish_reason = "length", .prompt_tokens = 10,
                                              .completion_tokens = 4, .ttft_s = 0.25}};
        ASSERT_OK(roundtrip(&fin, &out));
        ASSERT_STREQ(out.u.final.finish_reason, "length");
        ASSERT_EQ(out.u.final.completion_tokens, 4);
        ASSERT_NEAR(out.u.final.ttft_s, 0.25, 1e-12);
        dsv_ipc_msg_done(&out);

        for (int code = 0; code < DSV_IPC_ERROR_CODE_COUNT; code++) {
                struct dsv_ipc_msg e = {.type = DSV_IPC_ERROR,
                                        .u.error = {.id = 9, .code = (enum dsv_ipc_error_code)code, .message = "x"}};
                ASSERT_OK(roundtrip(&e, &out));
                ASSERT_EQ(out.u.error.code, code);
                dsv_ipc_msg_done(&out);
        }

        struct dsv_ipc_msg st = {.type = DSV_IPC_STATS_REPLY,
                                 .u.stats = {.seq = 2, .running = 3, .waiting = 4, .queued_prompt_tokens = 500,
                                             .kv_blocks_used = 10, .kv_blocks_total = 100, .prefix_hit_rate = 0.5}};
        ASSERT_OK(roundtrip(&st, &out));
        ASSERT_EQ(out.u.stats.queued_prompt_tokens, 500);
        ASSERT_NEAR(out.u.stats.prefix_hit_rate, 0.5, 0);
        dsv_ipc_msg_done(&out);

        struct dsv_ipc_msg h = {.type = DSV_IPC_HEALTH_REPLY, .u.health = {.seq = 1, .state = "ready", .uptime_s = 3}};
        ASSERT_OK(roundtrip(&h, &out));
        ASSERT_STREQ(out.u.health.state, "ready");
        dsv_ipc_msg_done(&out);

        struct dsv_ipc_msg c = {.type = DSV_IPC_CANCEL, .u.cancel_id = 77};
        ASSERT_OK(roundtrip(&c, &out));
        ASSERT_EQ(out.u.cancel_id, 77);
}

static int decode_str(const char *s, char *err, size_t n) {
        struct dsv_ipc_msg m;
        int r = dsv_ipc_msg_decode(s, strlen(s), &m, err, n);
        if (r == 0)
                dsv_ipc_msg_done(&m);
        return r;
}

TEST(bad_messages_are_eproto_with_the_field) {
        char err[256];
        ASSERT_ERR(decode_str("not json", err, sizeof err), -EPROTO);
        ASSERT_ERR(decode_str("[1,2]", err, sizeof err), -EPROTO);
        ASSERT_ERR(decode_str("{\"type\":\"cancel\",\"id\":1}", err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "'v'") != NULL);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"launch\"}", err, sizeof err), -EPROTO);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"cancel\",\"id\":\"7\"}", err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "'id'") != NULL);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"cancel\",\"id\":-1}", err, sizeof err), -EPROTO);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":5}", err, sizeof err),
                   -EPROTO);
        ASSERT_TRUE(strstr(err, "'prompt'") != NULL);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"a\","
                              "\"max_tokens\":1.5}", err, sizeof err), -EPROTO);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"a\","
                              "\"sampling\":{\"top_p\":2}}", err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "'top_p'") != NULL);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"tokens\",\"tokens\":[1,\"x\"]}", err,
                              sizeof err), -EPROTO);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"a\","
                              "\"stop\":[\"\"]}", err, sizeof err), -EPROTO);
        /* Unknown fields are ignored within a major version. */
        ASSERT_OK(decode_str("{\"v\":1,\"type\":\"cancel\",\"id\":1,\"future\":{}}", err, sizeof err));
}

TEST(version_mismatch_is_refused) {
        char err[256];
        ASSERT_ERR(decode_str("{\"v\":2,\"type\":\"cancel\",\"id\":1}", err, sizeof err), -EPROTONOSUPPORT);
        ASSERT_TRUE(strstr(err, "version 2") != NULL);
}

TEST(encode_rejects_unrepresentable_values) {
        struct dsv_ipc_msg c = {.type = DSV_IPC_CANCEL, .u.cancel_id = 1ull << 60};
        char *buf;
        size_t len;
        ASSERT_ERR(dsv_ipc_msg_encode(&c, &buf, &len), -EINVAL);
        struct dsv_ipc_msg q = {.type = DSV_IPC_REQUEST, .u.request = {.id = 1, .input = DSV_IPC_INPUT_CHAT,
                                                                        .messages_json = "{not an array"}};
        ASSERT_ERR(dsv_ipc_msg_encode(&q, &buf, &len), -EINVAL);
}
