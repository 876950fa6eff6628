/* The protocol's minor-2 fields: a request's constraint and logit_bias, and the bytes of
 * top_logprobs alternatives, through both encoders and the decoder. */
#include "dsv_ipc.h"
#include "t.h"

static int roundtrip(const struct dsv_ipc_msg *in, struct dsv_ipc_msg *out) {
        char *buf;
        size_t len;
        int r = dsv_ipc_msg_encode(in, &buf, &len);
        if (r < 0)
                return r;
        r = dsv_ipc_msg_decode(buf, len, out, NULL, 0);
        free(buf);
        return r;
}

static struct dsv_ipc_msg request(void) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
        m.u.request.id = 4;
        m.u.request.input = DSV_IPC_INPUT_PROMPT;
        m.u.request.prompt = "x";
        dsv_ipc_sampling_init(&m.u.request.sampling);
        return m;
}

TEST(constraint_and_bias_roundtrip) {
        struct dsv_ipc_logit_bias bias[] = {{0, -100}, {70000, 2.5f}};
        struct dsv_ipc_msg m = request();
        m.u.request.constraint = DSV_IPC_CONSTRAINT_JSON_SCHEMA;
        m.u.request.constraint_text = "{\"type\":\"object\",\"required\":[\"a\"]}";
        m.u.request.logit_bias = bias;
        m.u.request.n_logit_bias = 2;
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_SCHEMA);
        ASSERT_STREQ(out.u.request.constraint_text, m.u.request.constraint_text);
        ASSERT_EQ(out.u.request.n_logit_bias, 2);
        ASSERT_EQ(out.u.request.logit_bias[1].token, 70000);
        ASSERT_FLOAT_EQ(out.u.request.logit_bias[0].bias, -100.0f);
        ASSERT_FLOAT_EQ(out.u.request.logit_bias[1].bias, 2.5f);
        dsv_ipc_msg_done(&out);

        m.u.request.constraint = DSV_IPC_CONSTRAINT_JSON_OBJECT;
        m.u.request.constraint_text = NULL;
        m.u.request.n_logit_bias = 0;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_OBJECT);
        ASSERT_TRUE(out.u.request.constraint_text == NULL);
        ASSERT_EQ(out.u.request.n_logit_bias, 0);
        dsv_ipc_msg_done(&out);

        char *choices[] = {"yes", "no", ""};
        m.u.request.constraint = DSV_IPC_CONSTRAINT_CHOICE;
        m.u.request.choices = choices;
        m.u.request.n_choices = 3;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_CHOICE);
        ASSERT_EQ(out.u.request.n_choices, 3);
        ASSERT_STREQ(out.u.request.choices[1], "no");
        ASSERT_STREQ(out.u.request.choices[2], "");
        dsv_ipc_msg_done(&out);
        m.u.request.n_choices = 0;
        ASSERT_ERR(dsv_ipc_msg_encode(&m, &(char *){NULL}, &(size_t){0}), -EINVAL);
        m.u.request.choices = NULL;

        m.u.request.constraint = DSV_IPC_CONSTRAINT_REGEX;
        m.u.request.constraint_text = "[a-z]+";
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_REGEX);
        ASSERT_STREQ(out.u.request.constraint_text, "[a-z]+");
        dsv_ipc_msg_done(&out);
        m.u.request.constraint = DSV_IPC_CONSTRAINT_GRAMMAR;
        m.u.request.constraint_text = "root ::= \"a\"";
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_GRAMMAR);
        dsv_ipc_msg_done(&out);

        /* absent: none */
        m = request();
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_NONE);
        dsv_ipc_msg_done(&out);
}

TEST(constraint_and_bias_refused_when_malformed) {
        const char *bad[] = {
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":{\"kind\":\"xml\"}}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":{\"kind\":\"json_schema\"}}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":\"json\"}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":{\"kind\":\"choice\",\"choices\":[]}}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":{\"kind\":\"choice\",\"choices\":[1]}}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":{\"kind\":\"regex\"}}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"logit_bias\":[[1,101]]}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"logit_bias\":[[-1,1]]}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"logit_bias\":[[1.5,1]]}",
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"logit_bias\":{\"1\":1}}",
                "{\"v\":1,\"type\":\"token\",\"id\":1,\"token\":2,\"text\":\"\",\"logprob\":-1,"
                "\"top_logprobs\":[{\"token\":2,\"logprob\":-1,\"bytes\":[256]}]}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                struct dsv_ipc_msg out;
                char err[256] = "";
                ASSERT_ERR(dsv_ipc_msg_decode(bad[i], strlen(bad[i]), &out, err, sizeof err), -EPROTO);
                ASSERT_TRUE(err[0] != 0);
        }
        struct dsv_ipc_logit_bias over = {1, 100.5f};
        struct dsv_ipc_msg m = request();
        m.u.request.logit_bias = &over;
        m.u.request.n_logit_bias = 1;
        char *buf;
        size_t len;
        ASSERT_ERR(dsv_ipc_msg_encode(&m, &buf, &len), -EINVAL);
}

/* Alternatives' bytes: the fixed-buffer encoder writes what the cJSON encoder writes, and
 * both decode to the same bytes (a partial UTF-8 character included). */
TEST(top_bytes_both_encoders) {
        uint8_t a[] = {'H', 'i'}, b[] = {0xe2, 0x80};
        struct dsv_ipc_logprob top[3] = {{7, -0.5f}, {9, -1.25f}, {3, -2.0f}};
        struct dsv_ipc_bytes tb[3] = {{a, 2}, {b, 2}, {NULL, 0}};
        struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN,
                                .u.token = {.id = 3, .token = 7, .text = "Hi", .logprob = -0.5f, .top = top, .n_top = 3,
                                            .top_bytes = tb}};
        char *json;
        size_t len;
        ASSERT_OK(dsv_ipc_msg_encode(&m, &json, &len));
        char fixed[1024];
        int n = dsv_ipc_event_encode(&m, fixed, sizeof fixed);
        ASSERT_TRUE(n > 0);
        struct dsv_ipc_msg x, y;
        ASSERT_OK(dsv_ipc_msg_decode(json, len, &x, NULL, 0));
        ASSERT_OK(dsv_ipc_msg_decode(fixed, (size_t)n, &y, NULL, 0));
        free(json);
        for (int k = 0; k < 2; k++) {
                const struct dsv_ipc_token *t = k ? &y.u.token : &x.u.token;
                ASSERT_TRUE(t->top_bytes != NULL);
                ASSERT_EQ(t->n_top, 3);
                ASSERT_EQ(t->top_bytes[0].n, 2);
                ASSERT_EQ(t->top_bytes[0].bytes[1], 'i');
                ASSERT_EQ(t->top_bytes[1].n, 2);
                ASSERT_EQ(t->top_bytes[1].bytes[0], 0xe2);
                ASSERT_EQ(t->top_bytes[2].n, 0);
        }
        dsv_ipc_msg_done(&x);
        dsv_ipc_msg_done(&y);

        /* without bytes (a worker without a tokenizer): none decoded */
        m.u.token.top_bytes = NULL;
        ASSERT_OK(roundtrip(&m, &x));
        ASSERT_TRUE(x.u.token.top_bytes == NULL);
        dsv_ipc_msg_done(&x);
}


TEST(stats_carry_constrained_and_forced_counts) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS_REPLY};
        m.u.stats = (struct dsv_ipc_stats){.seq = 3, .constrained_tokens = 1000, .forced_tokens = 640};
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.stats.constrained_tokens, 1000);
        ASSERT_EQ(out.u.stats.forced_tokens, 640);
        const char *old = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,\"queued_prompt_tokens\":0}";
        ASSERT_OK(dsv_ipc_msg_decode(old, strlen(old), &out, NULL, 0));
        ASSERT_EQ(out.u.stats.forced_tokens, 0);
}
