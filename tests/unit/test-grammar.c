/* The JSON Schema grammar (engine/src/grammar): accept/reject cases per supported
 * keyword on bytes, compile errors that name the keyword and its pointer, and the token
 * trie's mask against its brute-force twin (every token tried on its own) on random
 * states of a real tokenizer's vocabulary. */
#include "t.h"

#include "dse.h"
#include "grammar/grammar.h"

/* 1 when the whole text is an output of schema's grammar, 0 when not, -errno when the
 * schema does not compile. */
static int judge(const char *schema, const char *text) {
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        int r = dse_grammar_compile_json_schema(schema, strlen(schema), &g, &diag);
        if (r < 0) {
                fprintf(stderr, "  compile: %s\n", diag.msg);
                return r;
        }
        r = dse_grammar_matcher_new(g, &m, &diag);
        if (r == 0) {
                r = dse_grammar_matcher_advance(m, text, strlen(text));
                r = r == 0 ? dse_grammar_matcher_is_accepting(m) : r == -EINVAL ? 0 : r;
                dse_grammar_matcher_free(m);
        }
        dse_grammar_free(g);
        return r;
}

#define ACCEPTS(schema, text) ASSERT_EQ(judge(schema, text), 1)
#define REJECTS(schema, text) ASSERT_EQ(judge(schema, text), 0)

/* The schema is refused with err and a message naming what. */
#define REFUSES(schema, err, what)                                                                   \
        do {                                                                                         \
                struct dse_grammar *g_ = NULL;                                                       \
                struct dse_diag d_ = {{0}};                                                          \
                ASSERT_ERR(dse_grammar_compile_json_schema(schema, strlen(schema), &g_, &d_), err); \
                if (!strstr(d_.msg, what))                                                           \
                        T_FAIL("message \"%s\" does not name %s", d_.msg, what);                     \
        } while (0)

TEST(type_scalars) {
        ACCEPTS("{\"type\":\"integer\"}", "-12");
        ACCEPTS("{\"type\":\"integer\"}", "0");
        REJECTS("{\"type\":\"integer\"}", "1.5");
        REJECTS("{\"type\":\"integer\"}", "012");
        ACCEPTS("{\"type\":\"number\"}", "-1.5e+3");
        REJECTS("{\"type\":\"number\"}", "1.");
        ACCEPTS("{\"type\":\"boolean\"}", "false");
        REJECTS("{\"type\":\"boolean\"}", "null");
        ACCEPTS("{\"type\":\"null\"}", "null");
        ACCEPTS("{\"type\":[\"string\",\"null\"]}", "null");
        ACCEPTS("{\"type\":[\"string\",\"null\"]}", "\"x\"");
        REJECTS("{\"type\":[\"string\",\"null\"]}", "1");
        ACCEPTS("{\"type\":\"string\",\"nullable\":true}", "null");
        REJECTS("{\"type\":\"string\"}", "null");
}

TEST(strings_are_canonical_and_counted_in_code_points) {
        ACCEPTS("{\"type\":\"string\"}", "\"a\\\"b\\n\\u001f\"");
        REJECTS("{\"type\":\"string\"}", "\"\\/\"");      /* not canonical: / is never escaped */
        REJECTS("{\"type\":\"string\"}", "\"\\u0041\"");  /* not canonical: A is written raw */
        REJECTS("{\"type\":\"string\"}", "\"a\nb\"");     /* raw control character */
        REJECTS("{\"type\":\"string\"}", "\"\xc3\"");     /* truncated UTF-8 */
        ACCEPTS("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9t\xc3\xa9\"");
        REJECTS("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\"");
        REJECTS("{\"type\":\"string\",\"maxLength\":3}", "\"abcd\"");
        ACCEPTS("{\"type\":\"string\",\"minLength\":3}", "\"abcdefgh\"");
        ACCEPTS("{\"minLength\":3}", "12"); /* applies to strings only */
}

TEST(properties_required_additional) {
        const char *closed = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
                             "\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}";
        ACCEPTS(closed, "{\"a\":1,\"b\":\"x\"}");
        ACCEPTS(closed, "{\"b\":\"x\"}");
        REJECTS(closed, "{\"a\":1}");
        REJECTS(closed, "{\"b\":\"x\",\"c\":1}");
        REJECTS(closed, "{\"a\":\"1\",\"b\":\"x\"}");
        const char *open = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
        ACCEPTS(open, "{}");
        ACCEPTS(open, "{\"a\":1,\"ab\":[true]}");
        ACCEPTS(open, "{\"z\":{},\"a\":1}");
        REJECTS(open, "{\"a\":\"no\"}");
        REJECTS(open, "{\"z\":1,\"a\":\"no\"}"); /* "a" is never an additional property */
        const char *typed_extra = "{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":"
                                  "\"boolean\"}}";
        ACCEPTS(typed_extra, "{\"a\":1,\"x\":true}");
        REJECTS(typed_extra, "{\"a\":1,\"x\":1}");
        const char *req_undeclared = "{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":false}";
        REJECTS(req_undeclared, "{}");
        REJECTS(req_undeclared, "{\"k\":1}");
}

TEST(arrays_items_prefix_counts) {
        const char *list = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}";
        ACCEPTS(list, "[1]");
        ACCEPTS(list, "[1,2,3]");
        REJECTS(list, "[]");
        REJECTS(list, "[1,2,3,4]");
        REJECTS(list, "[1,\"2\"]");
        const char *tuple = "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
                            "\"items\":false}";
        ACCEPTS(tuple, "[\"a\",1]");
        ACCEPTS(tuple, "[\"a\"]");
        REJECTS(tuple, "[\"a\",1,2]");
        REJECTS(tuple, "[1]");
        const char *draft7 = "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"array\","
                             "\"items\":[{\"type\":\"null\"}],\"additionalItems\":{\"type\":\"boolean\"}}";
        ACCEPTS(draft7, "[null,true,false]");
        REJECTS(draft7, "[null,1]");
        ACCEPTS("{\"type\":\"array\",\"minItems\":2}", "[{},[1],\"x\"]");
        REJECTS("{\"type\":\"array\",\"uniqueItems\":false,\"maxItems\":0}", "[1]");
}

TEST(enum_const) {
        ACCEPTS("{\"enum\":[\"a\",1,null,{\"k\":[1]}]}", "{\"k\":[1]}");
        ACCEPTS("{\"enum\":[\"a\",1,null]}", "1");
        REJECTS("{\"enum\":[\"a\",1,null]}", "\"b\"");
        REJECTS("{\"type\":\"string\",\"enum\":[\"a\",1]}", "1"); /* filtered by type */
        REFUSES("{\"enum\":[\"abc\"],\"maxLength\":2}", -EOPNOTSUPP, "'maxLength'");
        ACCEPTS("{\"type\":\"string\",\"enum\":[\"abc\"],\"maxItems\":2}", "\"abc\""); /* inert */
        ACCEPTS("{\"const\":\"x\"}", "\"x\"");
        REJECTS("{\"const\":\"x\"}", "\"y\"");
}

TEST(any_one_all_of) {
        const char *any = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}";
        ACCEPTS(any, "5");
        ACCEPTS(any, "\"a\"");
        REJECTS(any, "\"ab\"");
        ACCEPTS("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", "null");
        /* siblings of anyOf apply to every branch */
        const char *sib = "{\"type\":\"object\",\"required\":[\"a\"],\"anyOf\":[{\"properties\":{\"a\":{\"type\":"
                          "\"integer\"}}},{\"properties\":{\"a\":{\"type\":\"string\"}}}]}";
        ACCEPTS(sib, "{\"a\":1}");
        REJECTS(sib, "{}");
        const char *all = "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}},"
                          "{\"required\":[\"a\"]},{\"properties\":{\"a\":{\"maxLength\":2}}}]}";
        ACCEPTS(all, "{\"a\":1}");
        REJECTS(all, "{}");
        REJECTS(all, "{\"a\":\"x\"}");
}

TEST(refs_and_recursion) {
        const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                           "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
                           "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
        ACCEPTS(tree, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}");
        REJECTS(tree, "{\"v\":1,\"kids\":[{\"kids\":[]}]}");
        ACCEPTS("{\"definitions\":{\"a~b\":{\"type\":\"null\"}},\"$ref\":\"#/definitions/a~0b\"}", "null");
        REFUSES("{\"$ref\":\"other.json#/x\"}", -EOPNOTSUPP, "'$ref' at #");
        REFUSES("{\"$ref\":\"#/nowhere\"}", -EINVAL, "names nothing");
        REFUSES("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},"
                "\"$ref\":\"#/$defs/a\"}",
                -ELOOP, "left recursion");
}

TEST(unsupported_keywords_are_refused_by_name_and_pointer) {
        REFUSES("{\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]+$\"}}}", -EOPNOTSUPP,
                "'pattern' at #/properties/zip");
        REFUSES("{\"type\":\"integer\",\"minimum\":3}", -EOPNOTSUPP, "'minimum' at #");
        REFUSES("{\"type\":\"string\",\"format\":\"date-time\"}", -EOPNOTSUPP, "'format'");
        REFUSES("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":2}]}", -EOPNOTSUPP, "'oneOf'");
        REFUSES("{\"type\":\"array\",\"uniqueItems\":true}", -EOPNOTSUPP, "'uniqueItems'");
        REFUSES("{\"not\":{}}", -EOPNOTSUPP, "'not'");
        REFUSES("{\"type\":\"string\",\"maxLength\":100000}", -E2BIG, "'maxLength'");
        REFUSES("{\"type\":\"strin\"}", -EINVAL, "'type'");
        /* inert: the keyword constrains a type the schema excludes, or a format no
         * validator knows */
        ACCEPTS("{\"type\":\"string\",\"minimum\":3}", "\"x\"");
        ACCEPTS("{\"type\":\"integer\",\"format\":\"int64\"}", "7");
}

/* ---- the token trie mask against the per-token scan ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return (uint32_t)(rng_state >> 11);
}

/* walks random walks of up to steps tokens per schema; the scan twin costs a whole
 * vocabulary per state, so big vocabularies get fewer states */
static void mask_matches_scan(const char *tokenizer_rel, int walks, int steps, int min_states) {
        const char *src = getenv("DSV_SOURCE_DIR"), *fix = getenv("DSV_FIXTURES");
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", strncmp(tokenizer_rel, "fixtures/", 9) ? (src ? src : "..") : fix,
                 strncmp(tokenizer_rel, "fixtures/", 9) ? tokenizer_rel : tokenizer_rel + 9);
        struct dse_tokenizer *tok;
        struct dse_diag diag = {{0}};
        if (dse_tokenizer_load_file(path, &tok, &diag) < 0)
                T_FAIL("cannot load %s: %s", path, diag.msg);
        struct dse_grammar_vocab *v;
        ASSERT_OK(dse_grammar_vocab_new(tok, &v, &diag));
        const char *schemas[] = {
                "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"n\":"
                "{\"type\":\"number\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\"]}}}}",
                "true",
        };
        size_t words = dse_grammar_vocab_mask_words(v);
        uint64_t *trie = calloc(words, sizeof *trie), *scan = calloc(words, sizeof *scan);
        int states = 0;
        for (size_t s = 0; s < 2; s++) {
                struct dse_grammar *g;
                ASSERT_OK(dse_grammar_compile_json_schema(schemas[s], strlen(schemas[s]), &g, &diag));
                for (int walk = 0; walk < walks; walk++) {
                        struct dse_grammar_matcher *m;
                        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                        for (int step = 0; step < steps; step++, states++) {
                                int n_trie = dse_grammar_matcher_fill_mask(m, v, trie);
                                int n_scan = dse__grammar_matcher_fill_mask_scan(m, v, scan);
                                ASSERT_EQ(n_trie, n_scan);
                                ASSERT_TRUE(!memcmp(trie, scan, words * sizeof *trie));
                                if (n_trie <= 0)
                                        break;
                                /* a random allowed token: the walk goes where sampling could */
                                int pick = (int)(rng() % (uint32_t)n_trie), id = -1;
                                for (size_t w = 0; w < words && id < 0; w++)
                                        for (int b = 0; b < 64; b++)
                                                if ((trie[w] >> b) & 1 && pick-- == 0) {
                                                        id = (int)(w * 64 + (size_t)b);
                                                        break;
                                                }
                                if (id == dse_tokenizer_eos(tok))
                                        break;
                                ASSERT_OK(dse_grammar_matcher_accept_token(m, v, id));
                        }
                        dse_grammar_matcher_free(m);
                }
                dse_grammar_free(g);
        }
        ASSERT_TRUE(states >= min_states);
        free(trie);
        free(scan);
        dse_grammar_vocab_free(v);
        dse_tokenizer_free(tok);
}

TEST(trie_mask_equals_scan_sentencepiece) {
        mask_matches_scan("models/default/tokenizer.model", 6, 40, 100);
}

TEST(trie_mask_equals_scan_byte_level_bpe) {
        mask_matches_scan("fixtures/tokenizers/models/qwen2_5/tokenizer.json", 1, 12, 12);
}

TEST(eos_only_when_complete) {
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_compile_json_schema("{\"type\":\"integer\"}", 18, &g, &diag));
        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
        ASSERT_EQ(dse_grammar_matcher_is_accepting(m), 0);
        ASSERT_ERR(dse_grammar_matcher_advance(m, "-x", 2), -EINVAL);
        ASSERT_OK(dse_grammar_matcher_advance(m, "-", 1)); /* the refused call left no trace */
        ASSERT_EQ(dse_grammar_matcher_is_accepting(m), 0);
        ASSERT_OK(dse_grammar_matcher_advance(m, "12", 2));
        ASSERT_EQ(dse_grammar_matcher_is_accepting(m), 1);
        dse_grammar_matcher_free(m);
        dse_grammar_free(g);
}
