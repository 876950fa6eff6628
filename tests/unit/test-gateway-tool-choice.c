/* tool_choice "required" and a named function: the constraint the gateway puts on the
 * request, compiled by the engine's JSON Schema compiler and judged on whole outputs (a
 * call of an allowed function with valid arguments passes, anything else does not), and
 * the constrained output read back into tool calls. */
#include <cjson/cJSON.h>

#include "chat_output.h"
#include "dse.h"
#include "gateway-tool-defs.h"
#include "openai.h"
#include "t.h"

static const struct dsv_gw_limits lim = {.model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 1000,
                                         .default_max_tokens = 7};

static int parse(const struct dsv_gw_limits *l, const char *body, struct dsv_gw_request *r) {
        struct dsv_gw_error e;
        memset(&e, 0, sizeof e);
        int rc = dsv__gw_request_parse(body, strlen(body), DSV_GW_API_CHAT, l, r, &e);
        if (rc < 0)
                fprintf(stderr, "refused: %s (%s)\n", e.message, e.param);
        return rc;
}

/* 1 when the request's constraint accepts output whole, 0 when not. */
static int accepts(const struct dsv_gw_request *r, const char *output) {
        const char *schema = r->ipc.u.request.constraint_text;
        struct dse_grammar *g = NULL;
        struct dse_grammar_matcher *m = NULL;
        struct dse_diag d;
        if (dse_grammar_compile_json_schema(schema, strlen(schema), &g, &d) < 0) {
                fprintf(stderr, "schema %s: %s\n", schema, d.msg);
                return -1;
        }
        int ok = dse_grammar_matcher_new(g, &m, &d) == 0 && dse_grammar_matcher_advance(m, output, strlen(output)) == 0 &&
                 dse_grammar_matcher_is_accepting(m) == 1;
        dse_grammar_matcher_free(m);
        dse_grammar_free(g);
        return ok;
}

TEST(required_one_call_of_any_tool) {
        struct dsv_gw_request r;
        ASSERT_OK(parse(&lim, CHAT(WEATHER "," ADD "," NOARGS "],\"tool_choice\":\"required\",\"parallel_tool_calls\":false"),
                        &r));
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_SCHEMA);
        ASSERT_TRUE(r.tool_json);
        /* No tool-call format: the template is not given the tools. */
        ASSERT_TRUE(r.ipc.u.request.tools_json == NULL);
        ASSERT_EQ(accepts(&r, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}"), 1);
        ASSERT_EQ(accepts(&r, "{\"name\":\"add\",\"arguments\":{\"a\":2,\"b\":40}}"), 1);
        ASSERT_EQ(accepts(&r, "{\"name\":\"now\",\"arguments\":{}}"), 1);
        /* arguments of another function, a bad value, a missing member, an unknown name */
        ASSERT_EQ(accepts(&r, "{\"name\":\"add\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}"), 0);
        ASSERT_EQ(accepts(&r, "{\"name\":\"add\",\"arguments\":{\"a\":-2,\"b\":40}}"), 0);
        ASSERT_EQ(accepts(&r, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}"), 0);
        ASSERT_EQ(accepts(&r, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Copenhagen\",\"unit\":\"c\"}}"), 0);
        ASSERT_EQ(accepts(&r, "{\"name\":\"now\",\"arguments\":{\"x\":1}}"), 0);
        ASSERT_EQ(accepts(&r, "{\"name\":\"sleep\",\"arguments\":{}}"), 0);
        ASSERT_EQ(accepts(&r, "[{\"name\":\"now\",\"arguments\":{}}]"), 0);
        dsv__gw_request_done(&r);
}

TEST(parallel_calls_are_an_array_of_one_or_more) {
        struct dsv_gw_request r;
        ASSERT_OK(parse(&lim, CHAT(WEATHER "," ADD "],\"tool_choice\":\"required\""), &r));
        ASSERT_EQ(accepts(&r, "[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}]"), 1);
        ASSERT_EQ(accepts(&r, "[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}},"
                              "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\",\"unit\":\"f\"}}]"), 1);
        ASSERT_EQ(accepts(&r, "[]"), 0);
        ASSERT_EQ(accepts(&r, "{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}"), 0);
        dsv__gw_request_done(&r);
}

TEST(named_function_only) {
        struct dsv_gw_request r;
        /* A template without a call format: the output is JSON (the call in a template's
         * own syntax is test-gateway-tool-syntax's). */
        ASSERT_OK(parse(&lim, CHAT(WEATHER "," ADD "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},"
                                   "\"parallel_tool_calls\":false"),
                        &r));
        ASSERT_TRUE(r.ipc.u.request.tools_json == NULL);
        ASSERT_TRUE(r.tool_json && r.tool_forced);
        ASSERT_EQ(accepts(&r, "{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}"), 1);
        ASSERT_EQ(accepts(&r, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}"), 0);
        dsv__gw_request_done(&r);
}

/* The constrained output read into calls, whole and cut. */
static size_t calls_of(const char *output, bool parallel, struct dsv_gw_tools *p) {
        struct dsv_gw_text content = {0};
        dsv__gw_tools_init(p, DSV_GATEWAY_TOOLS_NONE, parallel);
        dsv__gw_tools_read_json_calls(p);
        /* in pieces, as tokens arrive */
        size_t len = strlen(output);
        for (size_t i = 0; i < len; i += 3) {
                size_t n = len - i < 3 ? len - i : 3;
                if (dsv__gw_tools_push(p, output + i, n, &content) < 0)
                        return 99;
        }
        if (dsv__gw_tools_finish(p, &content) < 0)
                return 99;
        size_t n = content.len ? 98 : dsv__gw_tools_complete(p);
        dsv__gw_text_free(&content);
        return n;
}

TEST(constrained_output_becomes_calls) {
        struct dsv_gw_tools p;
        ASSERT_EQ(calls_of("{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}", false, &p), 1);
        ASSERT_STREQ(p.calls[0].name, "add");
        ASSERT_TRUE(p.calls[0].args.len == strlen("{\"a\":1,\"b\":2}") &&
                    memcmp(p.calls[0].args.s, "{\"a\":1,\"b\":2}", p.calls[0].args.len) == 0);
        dsv__gw_tools_free(&p);
        ASSERT_EQ(calls_of("[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}},{\"name\":\"now\",\"arguments\":{}}]", true,
                           &p),
                  2);
        ASSERT_STREQ(p.calls[1].name, "now");
        dsv__gw_tools_free(&p);
        /* cut by max_tokens or a stop string: no call, and nothing leaks into content */
        ASSERT_EQ(calls_of("{\"name\":\"add\",\"argu", false, &p), 0);
        dsv__gw_tools_free(&p);
        /* an array cut after its first call keeps that call */
        ASSERT_EQ(calls_of("[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"add\",\"arguments\":{\"a\":1", true, &p), 1);
        ASSERT_STREQ(p.calls[0].name, "now");
        dsv__gw_tools_free(&p);
        /* parallel false keeps one call even if given more */
        ASSERT_EQ(calls_of("[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"now\",\"arguments\":{}}]", false, &p), 1);
        dsv__gw_tools_free(&p);
}
