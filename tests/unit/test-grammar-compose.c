/* Composed grammars (dse_grammar_compile_composed): the tool-call syntaxes of DeepSeek-V3,
 * Qwen2.5 (Hermes) and Llama 3.1 as the gateway forces them, each walked token by token
 * through the masks with the fixture tokenizer of that family: the model's canonical call
 * is accepted; a wrong name, arguments against the schema, a missing end marker, a marker
 * spelled in ordinary tokens and a marker inside a JSON string are refused. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"

#include "dse.h"
#include "grammar/grammar.h"

static void load_into(const char *family, struct dse_tokenizer **ret) {
        const char *fix = getenv("DSV_FIXTURES");
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizers/models/%s/tokenizer.json", fix ? fix : "../shared/fixtures", family);
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        if (dse_tokenizer_load_file(path, &tok, &diag) < 0)
                T_FAIL("cannot load %s: %s", path, diag.msg);
        *ret = tok;
}

static struct dse_tokenizer *load(const char *family) {
        struct dse_tokenizer *tok = NULL;
        load_into(family, &tok);
        return tok;
}

struct ids {
        int32_t v[512];
        int n;
};

/* Appends text's tokens (added tokens such as the call markers become their ids). */
static void add(const struct dse_tokenizer *tok, struct ids *ids, const char *text) {
        int n = dse_tokenizer_encode(tok, text, strlen(text), 0, ids->v + ids->n, (size_t)(512 - ids->n));
        ASSERT_TRUE(n >= 0 && ids->n + n <= 512);
        ids->n += n;
}

/* Feeds ids through the masks: *ret_taken is the count of ids each allowed by the mask
 * and accepted (ids->n: all of them); *complete says whether the output may end there (EOS in the
 * mask: the output is accepting). With scan, every mask is compared with the per-token scan twin. */
static void walk(const struct dse_grammar *g, const struct dse_grammar_vocab *v, const struct ids *ids, int scan,
                 int *ret_taken, int *complete) {
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
        size_t words = dse_grammar_vocab_mask_words(v);
        uint64_t *mask = calloc(words, sizeof *mask), *twin = calloc(words, sizeof *twin);
        int i = 0;
        for (; i < ids->n; i++) {
                int n = dse_grammar_matcher_fill_mask(m, v, mask);
                ASSERT_TRUE(n >= 0);
                if (scan) {
                        ASSERT_EQ(dse__grammar_matcher_fill_mask_scan(m, v, twin), n);
                        ASSERT_TRUE(!memcmp(mask, twin, words * sizeof *mask));
                }
                int32_t id = ids->v[i];
                int allowed = (int)((mask[id / 64] >> (id % 64)) & 1);
                int r = dse_grammar_matcher_accept_token(m, v, id);
                ASSERT_EQ(r == 0, allowed); /* the mask and acceptance agree */
                if (r < 0)
                        break;
        }
        *complete = dse_grammar_matcher_is_accepting(m);
        free(mask);
        free(twin);
        dse_grammar_matcher_free(m);
        *ret_taken = i;
}

#define WEATHER_SCHEMA                                                                                           \
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\","      \
        "\"minimum\":1,\"maximum\":7}},\"required\":[\"city\"],\"additionalProperties\":false}"
#define TIME_SCHEMA "{\"type\":\"object\",\"properties\":{\"zone\":{\"enum\":[\"UTC\",\"CET\"]}},\"required\":[\"zone\"]}"

/* DeepSeek-V3/R1: the template's own call text, one or more calls (parallel). */
static const char DEEPSEEK_SPEC[] =
        "{\"sequence\":[{\"special\":\"<｜tool▁calls▁begin｜>\"},"
        "{\"repeat\":{\"sequence\":[{\"special\":\"<｜tool▁call▁begin｜>\"},{\"text\":\"function\"},"
        "{\"special\":\"<｜tool▁sep｜>\"},{\"one_of\":["
        "{\"sequence\":[{\"text\":\"get_weather\\n```json\\n\"},{\"json_schema\":" WEATHER_SCHEMA "}]},"
        "{\"sequence\":[{\"text\":\"get_time\\n```json\\n\"},{\"json_schema\":" TIME_SCHEMA "}]}]},"
        "{\"text\":\"\\n```\"},{\"special\":\"<｜tool▁call▁end｜>\"}]},\"min\":1,\"separator\":{\"text\":\"\\n\"}},"
        "{\"special\":\"<｜tool▁calls▁end｜>\"}]}";

static const char HERMES_SPEC[] =
        "{\"repeat\":{\"sequence\":[{\"special\":\"<tool_call>\"},{\"text\":\"\\n{\\\"name\\\": \\\"\"},{\"one_of\":["
        "{\"sequence\":[{\"text\":\"get_weather\\\", \\\"arguments\\\": \"},{\"json_schema\":" WEATHER_SCHEMA "}]},"
        "{\"sequence\":[{\"text\":\"get_time\\\", \\\"arguments\\\": \"},{\"json_schema\":" TIME_SCHEMA "}]}]},"
        "{\"text\":\"}\\n\"},{\"special\":\"</tool_call>\"}]},\"min\":1,\"max\":1}";

static const char LLAMA_SPEC[] =
        "{\"sequence\":[{\"text\":\"{\\\"name\\\": \\\"\"},{\"one_of\":["
        "{\"sequence\":[{\"text\":\"get_weather\\\", \\\"parameters\\\": \"},{\"json_schema\":" WEATHER_SCHEMA "}]},"
        "{\"sequence\":[{\"text\":\"get_time\\\", \\\"parameters\\\": \"},{\"json_schema\":" TIME_SCHEMA "}]}]},"
        "{\"text\":\"}\"}]}";

struct fmt_case {
        const char *text; /* the output as text (markers as their added tokens) */
        int accepted;     /* every token accepted and the output complete */
};

static void run_cases(const char *family, const char *spec, const struct fmt_case *cases, size_t n, int scan_first) {
        struct dse_tokenizer *tok = load(family);
        struct dse_grammar_vocab *v;
        struct dse_grammar *g;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_vocab_new(tok, &v, &diag));
        if (dse_grammar_compile_composed(spec, strlen(spec), tok, &g, &diag) < 0)
                T_FAIL("%s: %s", family, diag.msg);
        for (size_t i = 0; i < n; i++) {
                struct ids ids = {.n = 0};
                add(tok, &ids, cases[i].text);
                int complete = 0;
                int taken = 0;
                walk(g, v, &ids, scan_first && i == 0, &taken, &complete);
                int accepted = taken == ids.n && complete;
                if (accepted != cases[i].accepted)
                        T_FAIL("%s case %zu %s (token %d of %d, complete %d): %s", family, i,
                               accepted ? "accepted" : "refused", taken, ids.n, complete, cases[i].text);
        }
        dse_grammar_free(g);
        dse_grammar_vocab_free(v);
        dse_tokenizer_free(tok);
}

TEST(deepseek_v3_call_syntax) {
        const struct fmt_case cases[] = {
                /* the canonical call, the template's own text with compact arguments */
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                 "{\"city\":\"Paris\",\"days\":3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 1},
                /* two calls, as the template joins them */
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                 "{\"city\":\"Tokyo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
                 "```json\n{\"zone\":\"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 1},
                /* a name that is none of the tools */
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_news\n```json\n{}\n```"
                 "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 0},
                /* arguments against the schema: days out of range, a missing required city */
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                 "{\"city\":\"Paris\",\"days\":9}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 0},
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                 "{\"days\":2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 0},
                /* the end marker missing */
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                 "{\"city\":\"Paris\"}\n```<｜tool▁call▁end｜>", 0},
                /* a marker inside a JSON string */
                {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                 "{\"city\":\"<｜tool▁call▁end｜>\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 0},
                /* text before the calls */
                {"Sure. <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
                 "{\"zone\":\"UTC\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 0},
        };
        run_cases("deepseek_v3", DEEPSEEK_SPEC, cases, sizeof cases / sizeof *cases, 1);
}

TEST(hermes_call_syntax) {
        const struct fmt_case cases[] = {
                {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>", 1},
                {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>", 1},
                {"<tool_call>\n{\"name\": \"get_date\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>", 0},
                {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"PST\"}}\n</tool_call>", 0},
                {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n", 0},
                /* one call only ("max": 1) */
                {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>"
                 "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>", 0},
        };
        run_cases("qwen2_5", HERMES_SPEC, cases, sizeof cases / sizeof *cases, 1);
}

TEST(llama3_json_call_syntax) {
        const struct fmt_case cases[] = {
                {"{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\",\"days\":1}}", 1},
                {"{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}", 0},
                {"{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\",\"wind\":1}}", 0},
                {"{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}", 0},
        };
        run_cases("llama3", LLAMA_SPEC, cases, sizeof cases / sizeof *cases, 1);
}

/* The markers written in ordinary tokens are refused where the marker token is expected,
 * though their bytes are the marker's text. */
static void marker_spelled_refused(const char *family, const char *spec, const char *const *pieces) {
        struct dse_tokenizer *tok = load(family);
        struct dse_grammar_vocab *v;
        struct dse_grammar *g;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_vocab_new(tok, &v, &diag));
        ASSERT_OK(dse_grammar_compile_composed(spec, strlen(spec), tok, &g, &diag));
        struct ids ids = {.n = 0};
        for (int i = 0; pieces[i]; i++)
                add(tok, &ids, pieces[i]);
        ASSERT_TRUE(ids.n > 1); /* really spelled in several tokens */
        int complete = 0, taken = -1;
        walk(g, v, &ids, 0, &taken, &complete);
        ASSERT_EQ(taken, 0);
        dse_grammar_free(g);
        dse_grammar_vocab_free(v);
        dse_tokenizer_free(tok);
}

TEST(markers_spelled_in_ordinary_tokens_are_refused) {
        const char *const ds[] = {"<｜tool▁calls▁begin", "｜>", NULL};
        marker_spelled_refused("deepseek_v3", DEEPSEEK_SPEC, ds);
        const char *const hermes[] = {"<tool_call", ">", NULL};
        marker_spelled_refused("qwen2_5", HERMES_SPEC, hermes);
}

TEST(special_token_is_one_mask_bit_where_expected) {
        struct dse_tokenizer *tok = load("qwen2_5");
        struct dse_grammar_vocab *v;
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_vocab_new(tok, &v, &diag));
        ASSERT_OK(dse_grammar_compile_composed(HERMES_SPEC, strlen(HERMES_SPEC), tok, &g, &diag));
        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
        uint64_t *mask = calloc(dse_grammar_vocab_mask_words(v), sizeof *mask);
        ASSERT_EQ(dse_grammar_matcher_fill_mask(m, v, mask), 1);
        struct ids ids = {.n = 0};
        add(tok, &ids, "<tool_call>");
        ASSERT_EQ(ids.n, 1);
        ASSERT_TRUE((mask[ids.v[0] / 64] >> (ids.v[0] % 64)) & 1);
        free(mask);
        dse_grammar_matcher_free(m);
        dse_grammar_free(g);
        dse_grammar_vocab_free(v);
        dse_tokenizer_free(tok);
}

TEST(composed_errors_name_the_part) {
        struct dse_tokenizer *tok = load("qwen2_5");
        struct dse_grammar *g;
        struct dse_diag diag = {{0}};
        const char *not_one = "{\"sequence\":[{\"text\":\"a\"},{\"special\":\"<not a token>\"}]}";
        ASSERT_ERR(dse_grammar_compile_composed(not_one, strlen(not_one), tok, &g, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "sequence[1]") && strstr(diag.msg, "not one token"));
        const char *bad_schema = "{\"one_of\":[{\"text\":\"a\"},{\"json_schema\":{\"type\":\"string\",\"not\":{}}}]}";
        ASSERT_ERR(dse_grammar_compile_composed(bad_schema, strlen(bad_schema), tok, &g, &diag), -EOPNOTSUPP);
        ASSERT_TRUE(strstr(diag.msg, "one_of[1]") && strstr(diag.msg, "'not'"));
        char eos[160];
        snprintf(eos, sizeof eos, "{\"sequence\":[{\"text\":\"a\"},{\"special\":\"%s\"}]}",
                 dse_tokenizer_piece(tok, dse_tokenizer_eos(tok)));
        ASSERT_ERR(dse_grammar_compile_composed(eos, strlen(eos), tok, &g, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "end-of-sequence") != NULL);
        const char *unknown = "{\"sequence\":[{\"literal\":\"a\"}]}";
        ASSERT_ERR(dse_grammar_compile_composed(unknown, strlen(unknown), tok, &g, &diag), -EINVAL);
        ASSERT_TRUE(strstr(diag.msg, "sequence[0]") != NULL);
        const char *bad_max = "{\"repeat\":{\"text\":\"a\"},\"min\":2,\"max\":1}";
        ASSERT_ERR(dse_grammar_compile_composed(bad_max, strlen(bad_max), tok, &g, &diag), -EINVAL);
        ASSERT_ERR(dse_grammar_compile_composed("{", 1, tok, &g, &diag), -EBADMSG);
        ASSERT_ERR(dse_grammar_compile_composed("{}", 2, NULL, &g, &diag), -EINVAL);
        dse_tokenizer_free(tok);
}

TEST(repeat_bounds_and_separator) {
        struct dse_tokenizer *tok = load("qwen2_5");
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        const char *spec = "{\"sequence\":[{\"text\":\"[\"},{\"repeat\":{\"one_of\":[{\"text\":\"a\"},{\"text\":\"b\"}]},"
                           "\"min\":0,\"max\":3,\"separator\":{\"text\":\",\"}},{\"text\":\"]\"}]}";
        ASSERT_OK(dse_grammar_compile_composed(spec, strlen(spec), tok, &g, &diag));
        const char *good[] = {"[]", "[a]", "[a,b]", "[b,a,b]"}, *bad[] = {"[a,]", "[,a]", "[ab]", "[a,b,a,b]"};
        for (int i = 0; i < 4; i++) {
                ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                ASSERT_TRUE(dse_grammar_matcher_advance(m, good[i], strlen(good[i])) == 0 &&
                            dse_grammar_matcher_is_accepting(m));
                dse_grammar_matcher_free(m);
                ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                ASSERT_TRUE(dse_grammar_matcher_advance(m, bad[i], strlen(bad[i])) < 0 ||
                            !dse_grammar_matcher_is_accepting(m));
                dse_grammar_matcher_free(m);
        }
        dse_grammar_free(g);
        dse_tokenizer_free(tok);
}
