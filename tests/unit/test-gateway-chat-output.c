/* The chat output pipeline: the think-block splitter and the tool-call parsers fed the
 * same generated text cut at every split point (and byte by byte), which must give the
 * same reasoning, content and calls; stream deltas in OpenAI's order; malformed and cut
 * output giving a well-formed partial answer with no marker in content. */
#include <cjson/cJSON.h>

#include "chat_output.h"
#include "t.h"

#define R1_OUT "Two and two.\nSo 4.\n</think>\n\nThe answer is 4."

/* Runs the splitter over s cut at i and j (0 <= i <= j <= n). */
static void split3(const char *s, size_t i, size_t j, bool opened, struct dsv_gw_text *re, struct dsv_gw_text *co) {
        struct dsv_gw_think t;
        size_t n = strlen(s);
        dsv__gw_think_init(&t, opened);
        dsv__gw_think_push(&t, s, i, re, co);
        dsv__gw_think_push(&t, s + i, j - i, re, co);
        dsv__gw_think_push(&t, s + j, n - j, re, co);
        dsv__gw_think_flush(&t, re, co);
        dsv__gw_think_free(&t);
}

static bool text_is(const struct dsv_gw_text *t, const char *want) {
        return t->len == strlen(want) && memcmp(t->s ? t->s : "", want, t->len) == 0;
}

TEST(think_split_at_every_point) {
        size_t n = strlen(R1_OUT);
        for (size_t i = 0; i <= n; i++)
                for (size_t j = i; j <= n; j++) {
                        struct dsv_gw_text re = {0}, co = {0};
                        split3(R1_OUT, i, j, true, &re, &co);
                        if (!text_is(&re, "Two and two.\nSo 4.\n") || !text_is(&co, "The answer is 4."))
                                T_FAIL("cut at %zu,%zu: reasoning '%s' content '%s'", i, j, re.s, co.s);
                        dsv__gw_text_free(&re);
                        dsv__gw_text_free(&co);
                }
}

TEST(think_opened_by_the_model) {
        const char *out = "<think>\nhmm</think>ok <think> stays";
        size_t n = strlen(out);
        for (size_t i = 0; i <= n; i++) {
                struct dsv_gw_text re = {0}, co = {0};
                split3(out, i, i, false, &re, &co);
                if (!text_is(&re, "\nhmm") || !text_is(&co, "ok <think> stays"))
                        T_FAIL("cut at %zu: reasoning '%s' content '%s'", i, re.s, co.s);
                dsv__gw_text_free(&re);
                dsv__gw_text_free(&co);
        }
}

TEST(think_not_at_the_start_is_content) {
        const char *out = "  hello <think>x</think>";
        for (size_t i = 0; i <= strlen(out); i++) {
                struct dsv_gw_text re = {0}, co = {0};
                split3(out, i, i, false, &re, &co);
                ASSERT_TRUE(text_is(&co, out) && re.len == 0);
                dsv__gw_text_free(&re);
                dsv__gw_text_free(&co);
        }
}

TEST(think_unterminated_is_all_reasoning) {
        struct dsv_gw_text re = {0}, co = {0};
        split3("still thinking </thi", 5, 17, true, &re, &co);
        ASSERT_TRUE(text_is(&re, "still thinking </thi"));
        ASSERT_EQ(co.len, 0);
        dsv__gw_text_free(&re);
        dsv__gw_text_free(&co);
}

TEST(think_counts_reasoning_tokens) {
        const char *toks[] = {"a", "b", "</think>", "\n\n", "c"};
        struct dsv_gw_think t;
        struct dsv_gw_text re = {0}, co = {0};
        dsv__gw_think_init(&t, true);
        for (int i = 0; i < 5; i++)
                ASSERT_OK(dsv__gw_think_push(&t, toks[i], strlen(toks[i]), &re, &co));
        ASSERT_OK(dsv__gw_think_flush(&t, &re, &co));
        ASSERT_EQ(t.reasoning_tokens, 3);
        ASSERT_TRUE(text_is(&re, "ab") && text_is(&co, "c"));
        dsv__gw_think_free(&t);
        dsv__gw_text_free(&re);
        dsv__gw_text_free(&co);
}

/* ---- tool calls ------------------------------------------------------------------------ */

#define DS_TWO_CALLS                                                                                                  \
        "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"            \
        "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n"   \
        "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"

/* Parses s cut at i and j; the content, and the calls in p (freed by the caller). */
static void parse3(struct dsv_gw_tools *p, enum dsv_gateway_tool_format f, bool parallel, const char *s, size_t i,
                   size_t j, struct dsv_gw_text *co) {
        size_t n = strlen(s);
        dsv__gw_tools_init(p, f, parallel);
        dsv__gw_tools_push(p, s, i, co);
        dsv__gw_tools_push(p, s + i, j - i, co);
        dsv__gw_tools_push(p, s + j, n - j, co);
        dsv__gw_tools_finish(p, co);
}

static bool call_is(const struct dsv_gw_tools *p, size_t k, const char *name, const char *args) {
        return k < p->n_calls && p->calls[k].complete && strcmp(p->calls[k].name, name) == 0 &&
               text_is(&p->calls[k].args, args);
}

TEST(deepseek_calls_at_every_split_point) {
        size_t n = strlen(DS_TWO_CALLS);
        for (size_t i = 0; i <= n; i++)
                for (size_t j = i; j <= n; j += 7) {
                        struct dsv_gw_tools p;
                        struct dsv_gw_text co = {0};
                        parse3(&p, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, true, DS_TWO_CALLS, i, j, &co);
                        if (!text_is(&co, "Let me check.") || p.n_calls != 2 ||
                            !call_is(&p, 0, "get_weather", "{\"city\": \"Paris\"}") || !call_is(&p, 1, "get_time", "{}"))
                                T_FAIL("cut at %zu,%zu: content '%s', %zu calls", i, j, co.s, p.n_calls);
                        dsv__gw_tools_free(&p);
                        dsv__gw_text_free(&co);
                }
}

TEST(deepseek_one_call_when_not_parallel) {
        struct dsv_gw_tools p;
        struct dsv_gw_text co = {0};
        parse3(&p, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, false, DS_TWO_CALLS, 3, 90, &co);
        ASSERT_EQ(p.n_calls, 1);
        ASSERT_TRUE(call_is(&p, 0, "get_weather", "{\"city\": \"Paris\"}"));
        dsv__gw_tools_free(&p);
        dsv__gw_text_free(&co);
}

TEST(deepseek_cut_mid_call_is_incomplete) {
        const char *out = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\":";
        struct dsv_gw_tools p;
        struct dsv_gw_text co = {0};
        parse3(&p, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, true, out, 10, 40, &co);
        ASSERT_EQ(co.len, 0);
        ASSERT_EQ(dsv__gw_tools_complete(&p), 0);
        dsv__gw_tools_free(&p);
        dsv__gw_text_free(&co);
}

TEST(hermes_calls_at_every_split_point) {
        const char *out = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                          "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        size_t n = strlen(out);
        for (size_t i = 0; i <= n; i++) {
                struct dsv_gw_tools p;
                struct dsv_gw_text co = {0};
                parse3(&p, DSV_GATEWAY_TOOLS_HERMES, true, out, i, i + (n - i) / 2, &co);
                if (!text_is(&co, "Checking.\n") || p.n_calls != 2 ||
                    !call_is(&p, 0, "get_weather", "{\"city\":\"Paris\"}") || !call_is(&p, 1, "get_time", "{}"))
                        T_FAIL("cut at %zu: content '%s', %zu calls", i, co.s, p.n_calls);
                dsv__gw_tools_free(&p);
                dsv__gw_text_free(&co);
        }
}

TEST(hermes_unclosed_last_call_is_read) {
        struct dsv_gw_tools p;
        struct dsv_gw_text co = {0};
        parse3(&p, DSV_GATEWAY_TOOLS_HERMES, true, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}", 4, 9, &co);
        ASSERT_TRUE(call_is(&p, 0, "f", "{\"x\":1}"));
        dsv__gw_tools_free(&p);
        dsv__gw_text_free(&co);
        parse3(&p, DSV_GATEWAY_TOOLS_HERMES, true, "<tool_call>\n{\"name\": \"f\", \"argu", 4, 9, &co);
        ASSERT_EQ(p.n_calls, 0);
        ASSERT_EQ(co.len, 0);
        dsv__gw_tools_free(&p);
        dsv__gw_text_free(&co);
}

TEST(llama3_json_calls_or_plain_answer) {
        const char *out = "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": {}}";
        size_t n = strlen(out);
        for (size_t i = 0; i <= n; i++) {
                struct dsv_gw_tools p;
                struct dsv_gw_text co = {0};
                parse3(&p, DSV_GATEWAY_TOOLS_LLAMA3_JSON, true, out, i, i, &co);
                if (co.len || p.n_calls != 2 || !call_is(&p, 0, "f", "{\"a\":1}") || !call_is(&p, 1, "g", "{}"))
                        T_FAIL("cut at %zu: content '%s', %zu calls", i, co.s, p.n_calls);
                dsv__gw_tools_free(&p);
                dsv__gw_text_free(&co);
        }
        struct dsv_gw_tools p;
        struct dsv_gw_text co = {0};
        parse3(&p, DSV_GATEWAY_TOOLS_LLAMA3_JSON, true, "{\"answer\": 42} is JSON", 3, 8, &co);
        ASSERT_TRUE(text_is(&co, "{\"answer\": 42} is JSON"));
        ASSERT_EQ(p.n_calls, 0);
        dsv__gw_tools_free(&p);
        dsv__gw_text_free(&co);
        parse3(&p, DSV_GATEWAY_TOOLS_LLAMA3_JSON, true, "Plain {not a call}", 3, 8, &co);
        ASSERT_TRUE(text_is(&co, "Plain {not a call}"));
        dsv__gw_tools_free(&p);
        dsv__gw_text_free(&co);
}

/* ---- the pipeline ---------------------------------------------------------------------- */

/* Streams out byte by byte; checks the deltas' order and content, and returns the
 * concatenated reasoning, content and first call's arguments. */
static void stream_bytes(struct dsv_gw_chat_out *c, const char *out, struct dsv_gw_text *re, struct dsv_gw_text *co,
                         struct dsv_gw_text *args, char *first_name, int *announced) {
        size_t n = strlen(out);
        for (size_t i = 0; i <= n; i++) {
                if (i < n)
                        dsv__gw_chat_out_push(c, out + i, 1);
                else
                        dsv__gw_chat_out_finish(c);
                cJSON *d = dsv__gw_chat_out_delta(c);
                if (!d)
                        continue;
                cJSON *r = cJSON_GetObjectItem(d, "reasoning_content"), *t = cJSON_GetObjectItem(d, "content");
                if (r)
                        dsv__gw_text_add(re, r->valuestring, strlen(r->valuestring));
                if (t)
                        dsv__gw_text_add(co, t->valuestring, strlen(t->valuestring));
                cJSON *call;
                cJSON_ArrayForEach(call, cJSON_GetObjectItem(d, "tool_calls")) {
                        cJSON *f = cJSON_GetObjectItem(call, "function");
                        cJSON *name = cJSON_GetObjectItem(f, "name"), *a = cJSON_GetObjectItem(f, "arguments");
                        if (name) {
                                (*announced)++;
                                if (!first_name[0])
                                        strcpy(first_name, name->valuestring);
                                if (!cJSON_GetObjectItem(call, "id"))
                                        first_name[0] = '!'; /* the id must come with the name */
                        }
                        if (cJSON_GetObjectItem(call, "index")->valueint == 0 && a)
                                dsv__gw_text_add(args, a->valuestring, strlen(a->valuestring));
                }
                cJSON_Delete(d);
        }
}

TEST(pipeline_streams_reasoning_then_calls) {
        const char *out = "I need the weather.\n</think>\n\n" DS_TWO_CALLS;
        struct dsv_gw_chat_out c;
        struct dsv_gw_text re = {0}, co = {0}, args = {0};
        char name[64] = "";
        int announced = 0;
        dsv__gw_chat_out_init(&c, true, true, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, true, "call-1");
        stream_bytes(&c, out, &re, &co, &args, name, &announced);
        ASSERT_TRUE(text_is(&re, "I need the weather.\n"));
        ASSERT_TRUE(text_is(&co, "Let me check."));
        ASSERT_TRUE(text_is(&args, "{\"city\": \"Paris\"}"));
        ASSERT_STREQ(name, "get_weather");
        ASSERT_EQ(announced, 2);
        ASSERT_STREQ(dsv__gw_chat_out_finish_reason(&c, "stop"), "tool_calls");
        ASSERT_STREQ(dsv__gw_chat_out_finish_reason(&c, "length"), "length");
        dsv__gw_chat_out_free(&c);
        dsv__gw_text_free(&re);
        dsv__gw_text_free(&co);
        dsv__gw_text_free(&args);
}

TEST(pipeline_whole_message) {
        struct dsv_gw_chat_out c;
        dsv__gw_chat_out_init(&c, true, true, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, true, "call-7");
        const char *out = "think</think>" DS_TWO_CALLS;
        for (size_t i = 0; i < strlen(out); i += 5)
                ASSERT_OK(dsv__gw_chat_out_push(&c, out + i, strlen(out + i) < 5 ? strlen(out + i) : 5));
        ASSERT_OK(dsv__gw_chat_out_finish(&c));
        cJSON *m = cJSON_CreateObject();
        ASSERT_OK(dsv__gw_chat_out_message(&c, m));
        char *s = cJSON_PrintUnformatted(m);
        ASSERT_STREQ(s, "{\"reasoning_content\":\"think\",\"content\":\"Let me check.\",\"tool_calls\":["
                        "{\"id\":\"call-7_0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},{\"id\":\"call-7_1\",\"type\":\"function\","
                        "\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]}");
        free(s);
        cJSON_Delete(m);
        dsv__gw_chat_out_free(&c);
}

TEST(pipeline_cut_output_is_well_formed) {
        /* Cut inside the think block: all reasoning, content null, no call. */
        struct dsv_gw_chat_out c;
        dsv__gw_chat_out_init(&c, true, true, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, true, "call-2");
        ASSERT_OK(dsv__gw_chat_out_push(&c, "halfway </th", 12));
        ASSERT_OK(dsv__gw_chat_out_finish(&c));
        cJSON *m = cJSON_CreateObject();
        ASSERT_OK(dsv__gw_chat_out_message(&c, m));
        char *s = cJSON_PrintUnformatted(m);
        ASSERT_STREQ(s, "{\"reasoning_content\":\"halfway </th\",\"content\":null}");
        free(s);
        cJSON_Delete(m);
        dsv__gw_chat_out_free(&c);
        /* Cut inside a call: no call, no marker in content, the worker's reason. */
        dsv__gw_chat_out_init(&c, false, false, DSV_GATEWAY_TOOLS_DEEPSEEK_V3, true, "call-3");
        const char *out = "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\":";
        ASSERT_OK(dsv__gw_chat_out_push(&c, out, strlen(out)));
        ASSERT_OK(dsv__gw_chat_out_finish(&c));
        m = cJSON_CreateObject();
        ASSERT_OK(dsv__gw_chat_out_message(&c, m));
        s = cJSON_PrintUnformatted(m);
        ASSERT_STREQ(s, "{\"content\":\"Sure.\"}");
        ASSERT_STREQ(dsv__gw_chat_out_finish_reason(&c, "length"), "length");
        free(s);
        cJSON_Delete(m);
        dsv__gw_chat_out_free(&c);
}
