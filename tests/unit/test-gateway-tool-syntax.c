/* tool_choice "required" and a named function for templates with a tool-call syntax: the
 * gateway constrains the output to the call in that syntax (a composed grammar), which
 * is compiled here with the fixture tokenizer of the family and walked token by token
 * through the masks (the model's canonical call passes; a wrong name, bad arguments, a
 * missing end marker and a marker spelled in ordinary tokens do not), and the canonical
 * call is read back by the format's parser. A template without one keeps the JSON form. */
#include <cjson/cJSON.h>
#include <errno.h>

#include "chat_output.h"
#include "dse.h"
#include "gateway-tool-defs.h"
#include "openai.h"
#include "t.h"

#define LIMITS(fmt)                                                                                                  \
        {.model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 1000, .default_max_tokens = 7, .tool_format = fmt}
static const struct dsv_gw_limits lim_none = LIMITS(DSV_GATEWAY_TOOLS_NONE);
static const struct dsv_gw_limits lim_ds = LIMITS(DSV_GATEWAY_TOOLS_DEEPSEEK_V3);
static const struct dsv_gw_limits lim_hermes = LIMITS(DSV_GATEWAY_TOOLS_HERMES);
static const struct dsv_gw_limits lim_llama = LIMITS(DSV_GATEWAY_TOOLS_LLAMA3_JSON);

#define NAMED_ADD ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}"

static void parse(const struct dsv_gw_limits *l, const char *body, struct dsv_gw_request *r) {
        struct dsv_gw_error e;
        memset(&e, 0, sizeof e);
        if (dsv__gw_request_parse(body, strlen(body), DSV_GW_API_CHAT, l, r, &e) < 0)
                T_FAIL("refused: %s (%s)", e.message, e.param);
}

/* The request's composed constraint compiled with the family's fixture tokenizer. */
struct rig {
        struct dse_tokenizer *tok;
        struct dse_grammar_vocab *v;
        struct dse_grammar *g;
        enum dsv_gateway_tool_format format;
        bool parallel;
};

static void rig_init(struct rig *k, const char *family, const struct dsv_gw_request *r) {
        const char *fix = getenv("DSV_FIXTURES");
        char path[4096];
        struct dse_diag diag = {{0}};
        snprintf(path, sizeof path, "%s/tokenizers/models/%s/tokenizer.json", fix ? fix : "../shared/fixtures", family);
        if (dse_tokenizer_load_file(path, &k->tok, &diag) < 0)
                T_FAIL("cannot load %s: %s", path, diag.msg);
        ASSERT_OK(dse_grammar_vocab_new(k->tok, &k->v, &diag));
        const char *text = r->ipc.u.request.constraint_text;
        if (dse_grammar_compile_composed(text, strlen(text), k->tok, &k->g, &diag) < 0)
                T_FAIL("%s: %s", text, diag.msg);
        k->format = r->tool_parse;
        k->parallel = r->parallel_tool_calls;
}

static void rig_done(struct rig *k) {
        dse_grammar_free(k->g);
        dse_grammar_vocab_free(k->v);
        dse_tokenizer_free(k->tok);
}

/* 1 when output, encoded by the tokenizer (the markers their added tokens; or the text
 * pieces encoded one by one, so a marker cut between them is spelled in ordinary
 * tokens), passes every mask and completes the grammar; 0 when not. */
static int walks_pieces(const struct rig *k, const char *const *pieces) {
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        if (dse_grammar_matcher_new(k->g, &m, &diag) < 0)
                return -1;
        uint64_t *mask = calloc(dse_grammar_vocab_mask_words(k->v), sizeof *mask);
        int ok = 1;
        for (int p = 0; pieces[p] && ok; p++) {
                int32_t ids[512];
                int n = dse_tokenizer_encode(k->tok, pieces[p], strlen(pieces[p]), 0, ids, 512);
                for (int i = 0; i < n && ok; i++) {
                        ok = dse_grammar_matcher_fill_mask(m, k->v, mask) >= 0 && ((mask[ids[i] / 64] >> (ids[i] % 64)) & 1) &&
                             dse_grammar_matcher_accept_token(m, k->v, ids[i]) == 0;
                }
        }
        ok = ok && dse_grammar_matcher_is_accepting(m);
        free(mask);
        dse_grammar_matcher_free(m);
        return ok;
}

static int walks(const struct rig *k, const char *output) {
        const char *pieces[] = {output, NULL};
        return walks_pieces(k, pieces);
}

/* The output read by the format's parser in 3-byte pieces: the complete calls, with no
 * content left over; call i's name and arguments in *name, *args (static buffers). */
static size_t read_calls(const struct rig *k, const char *output, int i, char *name, char *args) {
        struct dsv_gw_tools p;
        struct dsv_gw_text content = {0};
        dsv__gw_tools_init(&p, k->format, k->parallel);
        size_t len = strlen(output), n = 99;
        int r = 0;
        for (size_t at = 0; at < len && r == 0; at += 3)
                r = dsv__gw_tools_push(&p, output + at, len - at < 3 ? len - at : 3, &content);
        if (r == 0 && dsv__gw_tools_finish(&p, &content) == 0 && content.len == 0) {
                n = dsv__gw_tools_complete(&p);
                if ((size_t)i < p.n_calls) {
                        snprintf(name, 64, "%s", p.calls[i].name);
                        snprintf(args, 256, "%.*s", (int)p.calls[i].args.len, p.calls[i].args.s ? p.calls[i].args.s : "");
                }
        }
        dsv__gw_text_free(&content);
        dsv__gw_tools_free(&p);
        return n;
}

#define DS_CALL(name, args)                                                                                          \
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" name "\n```json\n" args "\n```<｜tool▁call▁end｜>"
#define DS_CALLS(calls) "<｜tool▁calls▁begin｜>" calls "<｜tool▁calls▁end｜>"

TEST(deepseek_required_is_the_templates_syntax) {
        struct dsv_gw_request r;
        struct rig k;
        char name[64] = "", args[256] = "";
        parse(&lim_ds, CHAT(WEATHER "," ADD "," NOARGS "],\"tool_choice\":\"required\""), &r);
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_COMPOSED);
        ASSERT_TRUE(r.tool_forced && !r.tool_json);
        ASSERT_EQ(r.tool_parse, DSV_GATEWAY_TOOLS_DEEPSEEK_V3);
        ASSERT_TRUE(r.ipc.u.request.tools_json != NULL); /* the template still shows the tools */
        rig_init(&k, "deepseek_v3", &r);
        const char *one = DS_CALLS(DS_CALL("get_weather", "{\"city\":\"Oslo\",\"unit\":\"c\"}"));
        ASSERT_EQ(walks(&k, one), 1);
        ASSERT_EQ(read_calls(&k, one, 0, name, args), 1);
        ASSERT_STREQ(name, "get_weather");
        ASSERT_STREQ(args, "{\"city\":\"Oslo\",\"unit\":\"c\"}");
        const char *two = DS_CALLS(DS_CALL("add", "{\"a\":1,\"b\":2}") "\n" DS_CALL("now", "{}"));
        ASSERT_EQ(walks(&k, two), 1);
        ASSERT_EQ(read_calls(&k, two, 1, name, args), 2);
        ASSERT_STREQ(name, "now");
        ASSERT_STREQ(args, "{}");
        /* a name not in tools, arguments against the schema ($ref'd minimum, a missing
         * member, an extra one), no end marker, JSON instead of the syntax */
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("sleep", "{}"))), 0);
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("add", "{\"a\":-1,\"b\":2}"))), 0);
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("get_weather", "{\"city\":\"Oslo\"}"))), 0);
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("now", "{\"x\":1}"))), 0);
        ASSERT_EQ(walks(&k, "<｜tool▁calls▁begin｜>" DS_CALL("now", "{}")), 0);
        ASSERT_EQ(walks(&k, "{\"name\":\"now\",\"arguments\":{}}"), 0);
        /* the first marker spelled in ordinary tokens */
        const char *spelled[] = {"<｜tool▁calls▁", "begin｜>", DS_CALL("now", "{}") "<｜tool▁calls▁end｜>", NULL};
        ASSERT_EQ(walks_pieces(&k, spelled), 0);
        rig_done(&k);
        dsv__gw_request_done(&r);
}

TEST(deepseek_named_function_one_call) {
        struct dsv_gw_request r;
        struct rig k;
        parse(&lim_ds, CHAT(WEATHER "," ADD "]" NAMED_ADD ",\"parallel_tool_calls\":false"), &r);
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_COMPOSED);
        rig_init(&k, "deepseek_v3", &r);
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("add", "{\"a\":10,\"b\":0}"))), 1);
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("get_weather", "{\"city\":\"Oslo\",\"unit\":\"c\"}"))), 0);
        ASSERT_EQ(walks(&k, DS_CALLS(DS_CALL("add", "{\"a\":1,\"b\":2}") "\n" DS_CALL("add", "{\"a\":1,\"b\":2}"))), 0);
        rig_done(&k);
        dsv__gw_request_done(&r);
}

#define HERMES_CALL(name, args) "<tool_call>\n{\"name\": \"" name "\", \"arguments\": " args "}\n</tool_call>"

TEST(hermes_required_is_the_templates_syntax) {
        struct dsv_gw_request r;
        struct rig k;
        char name[64] = "", args[256] = "";
        parse(&lim_hermes, CHAT(WEATHER "," ADD "],\"tool_choice\":\"required\""), &r);
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_COMPOSED);
        ASSERT_EQ(r.tool_parse, DSV_GATEWAY_TOOLS_HERMES);
        rig_init(&k, "qwen2_5", &r);
        const char *two = HERMES_CALL("get_weather", "{\"city\":\"Rome\",\"unit\":\"f\"}") "\n"
                          HERMES_CALL("add", "{\"a\":3,\"b\":4}");
        ASSERT_EQ(walks(&k, two), 1);
        ASSERT_EQ(read_calls(&k, two, 1, name, args), 2);
        ASSERT_STREQ(name, "add");
        ASSERT_STREQ(args, "{\"a\":3,\"b\":4}");
        ASSERT_EQ(walks(&k, HERMES_CALL("sub", "{\"a\":3,\"b\":4}")), 0);
        ASSERT_EQ(walks(&k, HERMES_CALL("get_weather", "{\"city\":\"Copenhagen\",\"unit\":\"f\"}")), 0);
        ASSERT_EQ(walks(&k, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\":3,\"b\":4}}\n"), 0);
        const char *spelled[] = {"<tool_", "call>", "\n{\"name\": \"add\", \"arguments\": {\"a\":3,\"b\":4}}\n</tool_call>",
                                 NULL};
        ASSERT_EQ(walks_pieces(&k, spelled), 0);
        rig_done(&k);
        dsv__gw_request_done(&r);
}

TEST(llama3_required_is_the_json_form_of_the_template) {
        struct dsv_gw_request r;
        struct rig k;
        char name[64] = "", args[256] = "";
        parse(&lim_llama, CHAT(ADD "," NOARGS "],\"tool_choice\":\"required\""), &r);
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_COMPOSED);
        rig_init(&k, "llama3", &r);
        const char *two = "{\"name\": \"add\", \"parameters\": {\"a\":1,\"b\":2}}; {\"name\": \"now\", \"parameters\": {}}";
        ASSERT_EQ(walks(&k, two), 1);
        ASSERT_EQ(read_calls(&k, two, 0, name, args), 2);
        ASSERT_STREQ(name, "add");
        ASSERT_STREQ(args, "{\"a\":1,\"b\":2}");
        ASSERT_EQ(walks(&k, "{\"name\": \"add\", \"parameters\": {\"a\":1}}"), 0);
        ASSERT_EQ(walks(&k, "{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}"), 0);
        rig_done(&k);
        dsv__gw_request_done(&r);
}

TEST(no_template_syntax_keeps_the_json_form) {
        struct dsv_gw_request r;
        parse(&lim_none, CHAT(ADD "]" NAMED_ADD), &r);
        ASSERT_EQ(r.ipc.u.request.constraint, DSV_IPC_CONSTRAINT_JSON_SCHEMA);
        ASSERT_TRUE(r.tool_forced && r.tool_json);
        dsv__gw_request_done(&r);
}
