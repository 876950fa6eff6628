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
                                             .kv_blocks_used = 10, .kv_blocks_total = 100, .prefix_hit_rate = 0.5,
                                             .kv_bytes_per_token = 18432}};
        ASSERT_OK(roundtrip(&st, &out));
        ASSERT_EQ(out.u.stats.queued_prompt_tokens, 500);
        ASSERT_EQ(out.u.stats.kv_bytes_per_token, 18432);
        ASSERT_NEAR(out.u.stats.prefix_hit_rate, 0.5, 0);
        dsv_ipc_msg_done(&out);

        struct dsv_ipc_msg h = {.type = DSV_IPC_HEALTH_REPLY, .u.health = {.seq = 1, .state = "ready", .uptime_s = 3}};
        ASSERT_OK(roundtrip(&h, &out));
        ASSERT_STREQ(out.u.health.state, "ready");
        ASSERT_EQ(out.u.health.boot_id, 0); /* not sent: unknown */
        dsv_ipc_msg_done(&out);
        h.u.health.boot_id = 999999999999999ull - 1; /* the largest a boot id can be */
        ASSERT_OK(roundtrip(&h, &out));
        ASSERT_EQ(out.u.health.boot_id, 999999999999999ull - 1);
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

/* Minor 2: max_tokens_to_context and max_prompt_tokens go through; absent, they are
 * false and 0; a wrong type names the field. */
TEST(request_context_fields_roundtrip) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
        struct dsv_ipc_request *q = &m.u.request;
        q->id = 1;
        q->input = DSV_IPC_INPUT_PROMPT;
        q->prompt = "a";
        dsv_ipc_sampling_init(&q->sampling);
        q->max_tokens_to_context = true;
        q->max_prompt_tokens = 300;
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_TRUE(out.u.request.max_tokens_to_context);
        ASSERT_EQ(out.u.request.max_prompt_tokens, 300);
        dsv_ipc_msg_done(&out);
        q->max_tokens_to_context = false;
        q->max_prompt_tokens = 0;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_TRUE(!out.u.request.max_tokens_to_context);
        ASSERT_EQ(out.u.request.max_prompt_tokens, 0);
        dsv_ipc_msg_done(&out);
        char err[256];
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"a\","
                              "\"max_tokens_to_context\":1}", err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "'max_tokens_to_context'") != NULL);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"a\","
                              "\"max_prompt_tokens\":-1}", err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "'max_prompt_tokens'") != NULL);
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

/* ---- the fixed-buffer event encoder and "events" batches (PROTOCOL.md) ---------------- */

/* Strings the escaper must get right: quotes, backslashes, every control character,
 * DEL, multi-byte UTF-8, a lone "\u" that must not turn into an escape, empty. */
static const char *const tricky[] = {
        "plain",         "",      "say \"hi\"", "back\\slash", "line\nfeed\r\ttab\b\f",
        "\x01\x02\x1f\x7f", "é世界🙂", "\\u0041",     "</script>",  "end\\",
};

static void fill_ctrl(char *s) { /* every control character 1..31 */
        for (int i = 1; i < 32; i++)
                s[i - 1] = (char)i;
        s[31] = 0;
}

static int same_token(const struct dsv_ipc_token *a, const struct dsv_ipc_token *b) {
        if (a->id != b->id || a->token != b->token || strcmp(a->text, b->text) || a->n_top != b->n_top)
                return 0;
        if (a->n_top && a->logprob != b->logprob)
                return 0;
        for (size_t i = 0; i < a->n_top; i++)
                if (a->top[i].token != b->top[i].token || a->top[i].logprob != b->top[i].logprob)
                        return 0;
        return 1;
}

/* Encodes m both ways and checks both decode to the same message. */
static int both_ways(const struct dsv_ipc_msg *m, struct dsv_ipc_msg *fixed, struct dsv_ipc_msg *cj) {
        char buf[4096], err[256] = "";
        int n = dsv_ipc_event_encode(m, buf, sizeof buf);
        if (n < 0)
                return n;
        int r = dsv_ipc_msg_decode(buf, (size_t)n, fixed, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "decode: %s\n  %.*s\n", err, n, buf);
                return r;
        }
        return roundtrip(m, cj);
}

TEST(event_encoder_token_matches_cjson) {
        char ctrl[32];
        fill_ctrl(ctrl);
        struct dsv_ipc_logprob top[20];
        for (int i = 0; i < 20; i++)
                top[i] = (struct dsv_ipc_logprob){i * 1000 + 7, -0.1f * (float)i - 1e-7f};
        for (size_t k = 0; k <= sizeof tricky / sizeof tricky[0]; k++) {
                for (size_t n_top = 0; n_top <= 20; n_top += 5) {
                        struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
                        m.u.token = (struct dsv_ipc_token){
                                .id = k == 0 ? DSV_IPC_MAX_ID : k, .token = 123456789, .logprob = -0.333333343f,
                                .text = (char *)(k < sizeof tricky / sizeof tricky[0] ? tricky[k] : ctrl),
                                .top = top, .n_top = n_top};
                        struct dsv_ipc_msg f, c;
                        ASSERT_OK(both_ways(&m, &f, &c));
                        ASSERT_EQ(f.type, DSV_IPC_TOKEN);
                        ASSERT_EQ(f.minor, DSV_IPC_PROTOCOL_MINOR);
                        ASSERT_EQ(c.minor, DSV_IPC_PROTOCOL_MINOR);
                        ASSERT_TRUE(same_token(&f.u.token, &c.u.token));
                        ASSERT_STREQ(f.u.token.text, m.u.token.text); /* exact bytes back */
                        ASSERT_EQ(f.u.token.id, m.u.token.id);
                        if (n_top) /* floats come back bit for bit (%.9g) */
                                ASSERT_TRUE(f.u.token.top[n_top - 1].logprob == top[n_top - 1].logprob);
                        dsv_ipc_msg_done(&f);
                        dsv_ipc_msg_done(&c);
                }
        }
}

TEST(event_encoder_final_and_error_match_cjson) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_FINAL};
        m.u.final = (struct dsv_ipc_final){.id = 77, .finish_reason = "length", .prompt_tokens = 2147483647,
                                           .completion_tokens = 0, .queue_s = 1.0 / 3.0, .prefill_s = 1e-300,
                                           .decode_s = 12345.678901234567, .ttft_s = 0};
        struct dsv_ipc_msg f, c;
        ASSERT_OK(both_ways(&m, &f, &c));
        ASSERT_EQ(f.type, DSV_IPC_FINAL);
        ASSERT_STREQ(f.u.final.finish_reason, "length");
        ASSERT_EQ(f.u.final.prompt_tokens, 2147483647);
        ASSERT_TRUE(f.u.final.queue_s == m.u.final.queue_s); /* %.17g: exact */
        ASSERT_TRUE(f.u.final.prefill_s == m.u.final.prefill_s);
        ASSERT_TRUE(f.u.final.decode_s == m.u.final.decode_s);
        ASSERT_TRUE(c.u.final.decode_s == f.u.final.decode_s);
        dsv_ipc_msg_done(&f);
        dsv_ipc_msg_done(&c);
        for (size_t k = 0; k < sizeof tricky / sizeof tricky[0]; k++)
                for (int code = 0; code < DSV_IPC_ERROR_CODE_COUNT; code++) {
                        struct dsv_ipc_msg e = {.type = DSV_IPC_ERROR};
                        e.u.error = (struct dsv_ipc_error){.id = k, .code = (enum dsv_ipc_error_code)code,
                                                           .message = (char *)tricky[k]};
                        ASSERT_OK(both_ways(&e, &f, &c));
                        ASSERT_EQ(f.u.error.code, code);
                        ASSERT_EQ(f.u.error.id, k);
                        ASSERT_STREQ(f.u.error.message, tricky[k]);
                        ASSERT_STREQ(c.u.error.message, tricky[k]);
                        dsv_ipc_msg_done(&f);
                        dsv_ipc_msg_done(&c);
                }
}

/* Every buffer too small by any amount is refused, and nothing is written past it. */
TEST(event_encoder_never_writes_past_the_buffer) {
        struct dsv_ipc_logprob top[3] = {{1, -0.5f}, {2, -1.5f}, {3, -2.5f}};
        struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
        m.u.token = (struct dsv_ipc_token){.id = 5, .token = 9, .text = "a\"b\\c\n\x01é", .logprob = -0.25f,
                                           .top = top, .n_top = 3};
        char full[512];
        int n = dsv_ipc_event_encode(&m, full, sizeof full);
        ASSERT_TRUE(n > 0);
        ASSERT_ERR(dsv_ipc_event_encode(&m, full, (size_t)n), n); /* exactly enough */
        for (int size = 0; size < n; size++) {
                char buf[512];
                memset(buf, 'Z', sizeof buf);
                ASSERT_ERR(dsv_ipc_event_encode(&m, buf, (size_t)size), -ENOBUFS);
                for (size_t i = (size_t)size; i < sizeof buf; i++)
                        ASSERT_TRUE(buf[i] == 'Z');
        }
}

TEST(event_encoder_refuses_what_cannot_go) {
        char buf[256];
        struct dsv_ipc_msg m = {.type = DSV_IPC_HEALTH};
        ASSERT_ERR(dsv_ipc_event_encode(&m, buf, sizeof buf), -EINVAL); /* not a stream event */
        m = (struct dsv_ipc_msg){.type = DSV_IPC_TOKEN, .u.token = {.id = DSV_IPC_MAX_ID + 1, .text = ""}};
        ASSERT_ERR(dsv_ipc_event_encode(&m, buf, sizeof buf), -EINVAL);
        m = (struct dsv_ipc_msg){.type = DSV_IPC_ERROR, .u.error = {.id = 1, .code = DSV_IPC_ERROR_CODE_COUNT}};
        ASSERT_ERR(dsv_ipc_event_encode(&m, buf, sizeof buf), -EINVAL);
        m = (struct dsv_ipc_msg){.type = DSV_IPC_FINAL, .u.final = {.id = 1, .finish_reason = "stop", .decode_s = NAN}};
        ASSERT_ERR(dsv_ipc_event_encode(&m, buf, sizeof buf), -EINVAL);
}

/* Rounding can give a logprob of +1e-8, and a ruled-out token has -inf: both go out in
 * the range the decoder accepts, by either encoder. */
TEST(logprobs_are_clamped_into_range) {
        struct dsv_ipc_logprob top[2] = {{1, -INFINITY}, {2, 1e-8f}};
        struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
        m.u.token = (struct dsv_ipc_token){.id = 1, .token = 2, .text = "", .logprob = 1e-8f, .top = top, .n_top = 2};
        struct dsv_ipc_msg f, c;
        ASSERT_OK(both_ways(&m, &f, &c));
        ASSERT_FLOAT_EQ(f.u.token.logprob, 0.0f);
        ASSERT_FLOAT_EQ(f.u.token.top[0].logprob, -1e30f);
        ASSERT_TRUE(same_token(&f.u.token, &c.u.token));
        dsv_ipc_msg_done(&f);
        dsv_ipc_msg_done(&c);
}

TEST(batch_decodes_to_its_events_in_order) {
        struct dsv_ipc_batch b;
        ASSERT_OK(dsv_ipc_batch_init(&b, 4096, 16));
        ASSERT_TRUE(dsv_ipc_batch_message(&b, NULL) == NULL); /* empty */
        for (int i = 0; i < 5; i++) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
                m.u.token = (struct dsv_ipc_token){.id = (uint64_t)(100 + i), .token = i, .text = (char *)tricky[i]};
                ASSERT_OK(dsv_ipc_batch_add(&b, &m));
        }
        struct dsv_ipc_msg fin = {.type = DSV_IPC_FINAL};
        fin.u.final = (struct dsv_ipc_final){.id = 100, .finish_reason = "stop", .completion_tokens = 1};
        ASSERT_OK(dsv_ipc_batch_add(&b, &fin));
        ASSERT_EQ(dsv_ipc_batch_count(&b), 6);
        size_t len;
        const char *text = dsv_ipc_batch_message(&b, &len);
        ASSERT_TRUE(text != NULL);
        struct dsv_ipc_msg *msgs;
        size_t n;
        char err[256] = "";
        ASSERT_OK(dsv_ipc_msgs_decode(text, len, &msgs, &n, err, sizeof err));
        ASSERT_EQ(n, 6);
        for (int i = 0; i < 5; i++) {
                ASSERT_EQ(msgs[i].type, DSV_IPC_TOKEN);
                ASSERT_EQ(msgs[i].u.token.id, 100 + i);
                ASSERT_STREQ(msgs[i].u.token.text, tricky[i]);
        }
        ASSERT_EQ(msgs[5].type, DSV_IPC_FINAL);
        ASSERT_EQ(msgs[5].minor, DSV_IPC_PROTOCOL_MINOR);
        for (size_t i = 0; i < n; i++)
                dsv_ipc_msg_done(&msgs[i]);
        free(msgs);
        /* A one-message decoder does not take a batch silently. */
        struct dsv_ipc_msg one;
        ASSERT_ERR(dsv_ipc_msg_decode(text, len, &one, err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "events") != NULL);
        /* Each event is also a complete message of its own. */
        for (int i = 0; i < 6; i++) {
                const char *ev = dsv_ipc_batch_event(&b, i, &len);
                ASSERT_OK(dsv_ipc_msg_decode(ev, len, &one, err, sizeof err));
                ASSERT_EQ(one.type, i < 5 ? DSV_IPC_TOKEN : DSV_IPC_FINAL);
                dsv_ipc_msg_done(&one);
        }
        /* A plain message decodes as a batch of one. */
        ASSERT_OK(dsv_ipc_msgs_decode("{\"v\":1,\"type\":\"cancel\",\"id\":3}", 30, &msgs, &n, err, sizeof err));
        ASSERT_EQ(n, 1);
        ASSERT_EQ(msgs[0].type, DSV_IPC_CANCEL);
        ASSERT_EQ(msgs[0].minor, 0); /* an older peer says no minor */
        ASSERT_EQ(msgs[0].u.cancel_id, 3);
        dsv_ipc_msg_done(&msgs[0]);
        free(msgs);
        dsv_ipc_batch_clear(&b);
        ASSERT_EQ(dsv_ipc_batch_count(&b), 0);
        dsv_ipc_batch_done(&b);
}

/* A full batch refuses the next event and stays as it was: still a valid message. */
TEST(batch_full_is_unchanged) {
        struct dsv_ipc_batch b;
        ASSERT_OK(dsv_ipc_batch_init(&b, 256, 100));
        struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
        m.u.token = (struct dsv_ipc_token){.id = 1, .token = 1, .text = "0123456789"};
        int added = 0, r;
        while ((r = dsv_ipc_batch_add(&b, &m)) == 0)
                added++;
        ASSERT_ERR(r, -ENOBUFS);
        ASSERT_TRUE(added >= 2);
        ASSERT_EQ(dsv_ipc_batch_count(&b), added);
        size_t len;
        const char *text = dsv_ipc_batch_message(&b, &len);
        ASSERT_TRUE(len <= 256);
        struct dsv_ipc_msg *msgs;
        size_t n;
        ASSERT_OK(dsv_ipc_msgs_decode(text, len, &msgs, &n, NULL, 0));
        ASSERT_EQ(n, (size_t)added);
        for (size_t i = 0; i < n; i++)
                dsv_ipc_msg_done(&msgs[i]);
        free(msgs);
        /* the event cap holds too */
        dsv_ipc_batch_done(&b);
        ASSERT_OK(dsv_ipc_batch_init(&b, 4096, 2));
        ASSERT_OK(dsv_ipc_batch_add(&b, &m));
        ASSERT_OK(dsv_ipc_batch_add(&b, &m));
        ASSERT_ERR(dsv_ipc_batch_add(&b, &m), -ENOBUFS);
        dsv_ipc_batch_done(&b);
}

TEST(bad_batches_are_refused_whole) {
        static const char *const bad[] = {
                "{\"v\":1,\"type\":\"events\"}",
                "{\"v\":1,\"type\":\"events\",\"events\":{}}",
                "{\"v\":1,\"type\":\"events\",\"events\":[]}",
                "{\"v\":1,\"type\":\"events\",\"events\":[1]}",
                "{\"v\":1,\"type\":\"events\",\"events\":[{\"v\":1,\"type\":\"cancel\",\"id\":1}]}",
                "{\"v\":1,\"type\":\"events\",\"events\":[{\"v\":1,\"type\":\"events\",\"events\":[]}]}",
                "{\"v\":1,\"type\":\"events\",\"events\":[{\"v\":1,\"type\":\"token\",\"id\":1,\"token\":2,\"text\":\"a\"},"
                "{\"v\":1,\"type\":\"token\",\"id\":1,\"token\":-2,\"text\":\"a\"}]}",
                "{\"v\":1,\"type\":\"events\",\"events\":[{\"type\":\"token\",\"id\":1,\"token\":2,\"text\":\"a\"}]}",
                "{\"v\":1,\"minor\":\"1\",\"type\":\"cancel\",\"id\":1}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                struct dsv_ipc_msg *msgs = NULL;
                size_t n = 0;
                char err[256] = "";
                ASSERT_ERR(dsv_ipc_msgs_decode(bad[i], strlen(bad[i]), &msgs, &n, err, sizeof err), -EPROTO);
                ASSERT_TRUE(err[0] != 0);
        }
        const char *v2 = "{\"v\":1,\"type\":\"events\",\"events\":[{\"v\":2,\"type\":\"token\",\"id\":1,\"token\":2,\"text\":\"\"}]}";
        struct dsv_ipc_msg *msgs;
        size_t n;
        ASSERT_ERR(dsv_ipc_msgs_decode(v2, strlen(v2), &msgs, &n, NULL, 0), -EPROTONOSUPPORT);
}

/* Boot ids are what a JSON number carries exactly, never 0 (0 means "not sent"), and two
 * processes (here: two draws) do not share one. */
TEST(boot_ids_are_nonzero_exact_and_distinct) {
        uint64_t seen[64];
        for (int i = 0; i < 64; i++) {
                seen[i] = dsv_ipc_new_boot_id();
                ASSERT_TRUE(seen[i] >= 1 && seen[i] < 999999999999999ull);
                for (int j = 0; j < i; j++)
                        ASSERT_TRUE(seen[j] != seen[i]);
        }
}

/* ---- minor 2: a request's constraint and logit_bias, alternatives' bytes, forced-token stats ---- */

static struct dsv_ipc_msg minor2_request(void) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
        m.u.request.id = 4;
        m.u.request.input = DSV_IPC_INPUT_PROMPT;
        m.u.request.prompt = "x";
        dsv_ipc_sampling_init(&m.u.request.sampling);
        return m;
}

TEST(constraint_and_bias_roundtrip) {
        struct dsv_ipc_logit_bias bias[] = {{0, -100}, {70000, 2.5f}};
        struct dsv_ipc_msg m = minor2_request();
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
        /* minor 4: a composed grammar's description */
        m.u.request.constraint = DSV_IPC_CONSTRAINT_COMPOSED;
        m.u.request.constraint_text = "{\"sequence\":[{\"special\":\"<tool_call>\"},{\"text\":\"\\n\"}]}";
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.request.constraint, DSV_IPC_CONSTRAINT_COMPOSED);
        ASSERT_STREQ(out.u.request.constraint_text, m.u.request.constraint_text);
        ASSERT_STREQ(dsv_ipc_constraint_to_string(DSV_IPC_CONSTRAINT_COMPOSED), "composed");
        dsv_ipc_msg_done(&out);

        /* absent: none */
        m = minor2_request();
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
                "{\"v\":1,\"type\":\"request\",\"id\":1,\"input\":\"prompt\",\"prompt\":\"x\",\"constraint\":{\"kind\":\"composed\"}}",
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
        struct dsv_ipc_msg m = minor2_request();
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

TEST(stats_speculation_counters_roundtrip) {
        struct dsv_ipc_msg st = {.type = DSV_IPC_STATS_REPLY,
                                 .u.stats = {.seq = 2, .spec_verifications = 10, .spec_draft_tokens = 30,
                                             .spec_accepted_tokens = 17, .n_spec_hist = DSV_IPC_SPEC_HIST}};
        for (int i = 0; i < DSV_IPC_SPEC_HIST; i++)
                st.u.stats.spec_accepted_hist[i] = i + 1;
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&st, &out));
        ASSERT_EQ(out.u.stats.spec_verifications, 10);
        ASSERT_EQ(out.u.stats.spec_draft_tokens, 30);
        ASSERT_EQ(out.u.stats.spec_accepted_tokens, 17);
        ASSERT_EQ(out.u.stats.n_spec_hist, DSV_IPC_SPEC_HIST);
        for (int i = 0; i < DSV_IPC_SPEC_HIST; i++)
                ASSERT_EQ(out.u.stats.spec_accepted_hist[i], i + 1);
        dsv_ipc_msg_done(&out);
        /* Without speculation the fields are absent and decode as 0. */
        st.u.stats = (struct dsv_ipc_stats){.seq = 3};
        ASSERT_OK(roundtrip(&st, &out));
        ASSERT_EQ(out.u.stats.spec_verifications, 0);
        ASSERT_EQ(out.u.stats.n_spec_hist, 0);
        dsv_ipc_msg_done(&out);
        char err[256];
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                              "\"queued_prompt_tokens\":0,\"spec_accepted_hist\":[1,2,3,4,5,6,7,8,9,10]}",
                              err, sizeof err),
                   -EPROTO);
        ASSERT_TRUE(strstr(err, "spec_accepted_hist") != NULL);
        ASSERT_ERR(decode_str("{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                              "\"queued_prompt_tokens\":0,\"spec_accepted_hist\":[1,-2]}",
                              err, sizeof err),
                   -EPROTO);
        ASSERT_TRUE(strstr(err, "spec_accepted_hist[1]") != NULL);
}

/* ---- minor 3: the prefix cache's counters in stats ---- */

TEST(stats_carry_prefix_cache_counters) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS_REPLY};
        m.u.stats = (struct dsv_ipc_stats){.seq = 4, .prefix_query_tokens = 120, .prefix_hit_tokens = 48,
                                           .steps = 5, .step_tokens = 300};
        m.u.stats.step_tokens_buckets[0] = 3;
        m.u.stats.step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS] = 2;
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.stats.prefix_query_tokens, 120);
        ASSERT_EQ(out.u.stats.prefix_hit_tokens, 48);
        ASSERT_EQ(out.u.stats.steps, 5);
        ASSERT_EQ(out.u.stats.step_tokens, 300);
        ASSERT_EQ(out.u.stats.step_tokens_buckets[0], 3);
        ASSERT_EQ(out.u.stats.step_tokens_buckets[1], 0);
        ASSERT_EQ(out.u.stats.step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS], 2);
        const char *old = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,\"queued_prompt_tokens\":0}";
        ASSERT_OK(dsv_ipc_msg_decode(old, strlen(old), &out, NULL, 0));
        ASSERT_EQ(out.u.stats.prefix_query_tokens, 0);
        ASSERT_EQ(out.u.stats.prefix_hit_tokens, 0);
        const char *bad = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,\"queued_prompt_tokens\":0,"
                          "\"prefix_hit_tokens\":\"many\"}";
        ASSERT_EQ(dsv_ipc_msg_decode(bad, strlen(bad), &out, NULL, 0), -EPROTO);
        const char *short_buckets = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                                    "\"queued_prompt_tokens\":0,\"step_tokens_buckets\":[1,2]}";
        char err[256];
        ASSERT_EQ(dsv_ipc_msg_decode(short_buckets, strlen(short_buckets), &out, err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "step_tokens_buckets") != NULL);
        const char *negative = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                               "\"queued_prompt_tokens\":0,\"step_tokens_buckets\":[0,0,0,0,0,0,0,0,0,0,0,0,0,-1]}";
        ASSERT_EQ(dsv_ipc_msg_decode(negative, strlen(negative), &out, err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "step_tokens_buckets[13]") != NULL);
}

/* ---- minor 5: the output's confidence histograms in stats ---- */

TEST(stats_carry_the_confidence_histograms) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS_REPLY};
        m.u.stats = (struct dsv_ipc_stats){.seq = 9};
        m.u.stats.token_prob_hist[0] = 7;
        m.u.stats.token_prob_hist[DSV_IPC_CONFIDENCE_BINS - 1] = 40;
        m.u.stats.entropy_hist[3] = 47;
        m.u.stats.confidence_requests = 5;
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.stats.token_prob_hist[0], 7);
        ASSERT_EQ(out.u.stats.token_prob_hist[1], 0);
        ASSERT_EQ(out.u.stats.token_prob_hist[DSV_IPC_CONFIDENCE_BINS - 1], 40);
        ASSERT_EQ(out.u.stats.entropy_hist[3], 47);
        ASSERT_EQ(out.u.stats.confidence_requests, 5);
        const char *old = "{\"v\":1,\"minor\":3,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                          "\"queued_prompt_tokens\":0}";
        ASSERT_OK(dsv_ipc_msg_decode(old, strlen(old), &out, NULL, 0));
        ASSERT_EQ(out.u.stats.token_prob_hist[0] + out.u.stats.entropy_hist[0], 0);
        const char *short_hist = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                                 "\"queued_prompt_tokens\":0,\"entropy_hist\":[1,2]}";
        char err[256];
        ASSERT_EQ(dsv_ipc_msg_decode(short_hist, strlen(short_hist), &out, err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "entropy_hist: expected an array of 32 counts") != NULL);
}

TEST(confidence_bins_cover_their_ranges) {
        ASSERT_EQ(dsv_ipc_token_prob_bin(0), 0);
        ASSERT_EQ(dsv_ipc_token_prob_bin(-0.5), 0);
        ASSERT_EQ(dsv_ipc_token_prob_bin(0.5), 16);
        ASSERT_EQ(dsv_ipc_token_prob_bin(1.0 / 32 - 1e-9), 0);
        ASSERT_EQ(dsv_ipc_token_prob_bin(1), DSV_IPC_CONFIDENCE_BINS - 1);
        ASSERT_EQ(dsv_ipc_token_prob_bin(NAN), 0);
        ASSERT_EQ(dsv_ipc_entropy_bin(0), 0);
        ASSERT_EQ(dsv_ipc_entropy_bin(0.4), 1);
        ASSERT_EQ(dsv_ipc_entropy_bin(11.9), DSV_IPC_CONFIDENCE_BINS - 1);
        ASSERT_EQ(dsv_ipc_entropy_bin(INFINITY), DSV_IPC_CONFIDENCE_BINS - 1);
        ASSERT_EQ(dsv_ipc_entropy_bin(NAN), 0);
}

/* ---- minor 6: cached prompt tokens in final, the KV disk tier in stats ---- */

TEST(final_carries_cached_tokens_both_encoders) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_FINAL};
        m.u.final = (struct dsv_ipc_final){.id = 5, .finish_reason = "stop", .prompt_tokens = 100,
                                           .completion_tokens = 3, .cached_tokens = 96};
        struct dsv_ipc_msg f, c;
        ASSERT_OK(both_ways(&m, &f, &c));
        ASSERT_EQ(f.u.final.cached_tokens, 96);
        ASSERT_EQ(c.u.final.cached_tokens, 96);
        dsv_ipc_msg_done(&f);
        dsv_ipc_msg_done(&c);
        const char *old = "{\"v\":1,\"type\":\"final\",\"id\":1,\"finish_reason\":\"stop\",\"prompt_tokens\":4,"
                          "\"completion_tokens\":1,\"queue_s\":0,\"prefill_s\":0,\"decode_s\":0,\"ttft_s\":0}";
        ASSERT_OK(dsv_ipc_msg_decode(old, strlen(old), &f, NULL, 0));
        ASSERT_EQ(f.u.final.cached_tokens, 0);
        dsv_ipc_msg_done(&f);
        const char *over = "{\"v\":1,\"type\":\"final\",\"id\":1,\"finish_reason\":\"stop\",\"prompt_tokens\":4,"
                           "\"completion_tokens\":1,\"cached_tokens\":5,\"queue_s\":0,\"prefill_s\":0,\"decode_s\":0,"
                           "\"ttft_s\":0}";
        char err[256];
        ASSERT_EQ(dsv_ipc_msg_decode(over, strlen(over), &f, err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "cached_tokens") != NULL);
        m.u.final.cached_tokens = 101; /* more than the prompt */
        char buf[1024];
        ASSERT_EQ(dsv_ipc_event_encode(&m, buf, sizeof buf), -EINVAL);
}

TEST(stats_carry_kv_disk_tier) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_STATS_REPLY};
        m.u.stats = (struct dsv_ipc_stats){.seq = 4, .prefix_hit_tokens = 64, .kv_disk_bytes_used = 8192,
                                           .kv_disk_bytes_capacity = 1 << 20, .kv_disk_blocks_written = 7,
                                           .kv_disk_blocks_read = 4, .kv_disk_blocks_dropped = 2,
                                           .kv_disk_blocks_corrupt = 1, .prefix_disk_hit_tokens = 64,
                                           .kv_disk_failed = true};
        struct dsv_ipc_msg out;
        ASSERT_OK(roundtrip(&m, &out));
        ASSERT_EQ(out.u.stats.kv_disk_bytes_used, 8192);
        ASSERT_EQ(out.u.stats.kv_disk_bytes_capacity, 1 << 20);
        ASSERT_EQ(out.u.stats.kv_disk_blocks_written, 7);
        ASSERT_EQ(out.u.stats.kv_disk_blocks_read, 4);
        ASSERT_EQ(out.u.stats.kv_disk_blocks_dropped, 2);
        ASSERT_EQ(out.u.stats.kv_disk_blocks_corrupt, 1);
        ASSERT_EQ(out.u.stats.prefix_disk_hit_tokens, 64);
        ASSERT_TRUE(out.u.stats.kv_disk_failed);
        const char *bad = "{\"v\":1,\"type\":\"stats_reply\",\"seq\":1,\"running\":0,\"waiting\":0,"
                          "\"queued_prompt_tokens\":0,\"kv_disk_failed\":1}";
        char err[256];
        ASSERT_EQ(dsv_ipc_msg_decode(bad, strlen(bad), &out, err, sizeof err), -EPROTO);
        ASSERT_TRUE(strstr(err, "kv_disk_failed") != NULL);
}
