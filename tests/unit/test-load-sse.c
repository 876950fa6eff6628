/* The load generator's SSE reader and answer classification (bench/load/sse.c). */
#include "t.h"

#include "sse.h"

struct seen {
        int n;
        char ev[8][256];
};

static int collect(void *user, const char *data, size_t len) {
        struct seen *s = user;
        if (s->n < 8)
                snprintf(s->ev[s->n++], sizeof s->ev[0], "%.*s", (int)len, data);
        return 0;
}

static const char stream[] =
        ": keep-alive comment\n"
        "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"hi\",\"finish_reason\":null}]}\n\n"
        "event: ignored\r\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\r\n\r\n"
        "data:a\rdata: b\r\r"
        "id: 4\n\n" /* no data: no event */
        "data: [DONE]\n\n";

TEST(split_at_every_byte_gives_the_same_events) {
        for (size_t step = 1; step <= sizeof stream; step++) {
                struct load_sse p;
                struct seen s = {0};
                load_sse_init(&p);
                for (size_t i = 0; i < sizeof stream - 1; i += step) {
                        size_t n = i + step < sizeof stream - 1 ? step : sizeof stream - 1 - i;
                        ASSERT_OK(load_sse_feed(&p, stream + i, n, collect, &s));
                }
                load_sse_done(&p);
                ASSERT_EQ(s.n, 4);
                ASSERT_TRUE(strstr(s.ev[0], "\"hi\"") != NULL);
                ASSERT_TRUE(strstr(s.ev[1], "there") != NULL);
                ASSERT_STREQ(s.ev[2], "a\nb");
                ASSERT_STREQ(s.ev[3], "[DONE]");
        }
}

TEST(unterminated_event_is_not_dispatched) {
        struct load_sse p;
        struct seen s = {0};
        load_sse_init(&p);
        ASSERT_OK(load_sse_feed(&p, "data: [DONE]\n", 13, collect, &s));
        ASSERT_EQ(s.n, 0); /* a stream cut here never saw [DONE] */
        load_sse_done(&p);
}

TEST(oversized_line_is_refused) {
        struct load_sse p;
        struct seen s = {0};
        load_sse_init(&p);
        char *big = malloc(LOAD_SSE_MAX_EVENT + 10);
        memset(big, 'x', LOAD_SSE_MAX_EVENT + 10);
        ASSERT_ERR(load_sse_feed(&p, big, LOAD_SSE_MAX_EVENT + 10, collect, &s), -E2BIG);
        free(big);
        load_sse_done(&p);
}

static int stop_at_second(void *user, const char *data, size_t len) {
        (void)data, (void)len;
        return ++*(int *)user == 2 ? -ECANCELED : 0;
}

TEST(callback_error_stops_the_feed) {
        struct load_sse p;
        int n = 0;
        load_sse_init(&p);
        ASSERT_ERR(load_sse_feed(&p, stream, sizeof stream - 1, stop_at_second, &n), -ECANCELED);
        ASSERT_EQ(n, 2);
        load_sse_done(&p);
}

#define CLASSIFY(s, a) load_answer_classify(s, strlen(s), a)

TEST(classify_answers) {
        struct load_answer a;
        ASSERT_OK(CLASSIFY("[DONE]", &a));
        ASSERT_EQ(a.kind, LOAD_ANSWER_DONE);

        ASSERT_OK(CLASSIFY("{\"choices\":[{\"text\":\"x\",\"finish_reason\":null}]}", &a));
        ASSERT_EQ(a.kind, LOAD_ANSWER_CHUNK);
        ASSERT_TRUE(a.has_text && !a.finished);
        ASSERT_EQ(a.completion_tokens, -1);

        ASSERT_OK(CLASSIFY("{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}", &a));
        ASSERT_TRUE(a.kind == LOAD_ANSWER_CHUNK && !a.has_text);

        ASSERT_OK(CLASSIFY("{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}", &a));
        ASSERT_TRUE(!a.has_text && a.finished);

        ASSERT_OK(CLASSIFY("{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":7}}", &a));
        ASSERT_EQ(a.completion_tokens, 7);

        ASSERT_OK(CLASSIFY("{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"content\":\"ok\"},"
                           "\"finish_reason\":\"stop\"}]}", &a));
        ASSERT_TRUE(a.kind == LOAD_ANSWER_CHUNK && a.has_text && a.finished);

        ASSERT_OK(CLASSIFY("{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"code\":\"worker_lost\"}}", &a));
        ASSERT_EQ(a.kind, LOAD_ANSWER_ERROR);
        ASSERT_STREQ(a.error_code, "worker_lost");
        ASSERT_OK(CLASSIFY("{\"error\":{\"message\":\"m\",\"type\":\"overloaded\",\"code\":null}}", &a));
        ASSERT_STREQ(a.error_code, "overloaded");
        ASSERT_OK(CLASSIFY("{\"error\":\"x\"}", &a));
        ASSERT_STREQ(a.error_code, "error");

        ASSERT_ERR(CLASSIFY("", &a), -EBADMSG);
        ASSERT_ERR(CLASSIFY("[DONE", &a), -EBADMSG);
        ASSERT_ERR(CLASSIFY("{\"id\":1}", &a), -EBADMSG);
        ASSERT_ERR(CLASSIFY("[1,2]", &a), -EBADMSG);
        ASSERT_ERR(CLASSIFY("{\"choices\":[", &a), -EBADMSG);
}
