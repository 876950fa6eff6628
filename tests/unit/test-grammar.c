/* The JSON Schema grammar (engine/src/grammar): accept/reject cases per supported
 * keyword on bytes, compile errors that name the keyword and its pointer, and the token
 * trie's mask against its brute-force twin (every token tried on its own) on random
 * states of a real tokenizer's vocabulary. */
#include <cjson/cJSON.h>

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

TEST(unique_items_over_literals) {
        const char *set = "{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"enum\":[\"a\",\"b\",\"c\"]}}";
        ACCEPTS(set, "[]");
        ACCEPTS(set, "[\"c\"]");
        ACCEPTS(set, "[\"b\",\"c\",\"a\"]");
        REJECTS(set, "[\"a\",\"a\"]");
        REJECTS(set, "[\"a\",\"b\",\"a\"]");
        REJECTS(set, "[\"d\"]");
        const char *bounded = "{\"type\":\"array\",\"uniqueItems\":true,\"minItems\":1,\"maxItems\":2,"
                              "\"items\":{\"enum\":[\"a\",\"b\",\"c\"]}}";
        REJECTS(bounded, "[]");
        ACCEPTS(bounded, "[\"b\",\"a\"]");
        REJECTS(bounded, "[\"b\",\"a\",\"c\"]");
        /* equal values count once (1 and 1.0), values of excluded types drop out, $ref is followed */
        const char *nums = "{\"$defs\":{\"n\":{\"type\":\"integer\",\"enum\":[1,1.0,2,\"x\"]}},"
                           "\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"$ref\":\"#/$defs/n\"}}";
        ACCEPTS(nums, "[2,1]");
        REJECTS(nums, "[1,1]");
        REJECTS(nums, "[\"x\"]");
        REJECTS("{\"type\":\"array\",\"uniqueItems\":true,\"minItems\":2,\"items\":{\"const\":true}}", "[true]");
        ACCEPTS("{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"const\":true}}", "[true]");
        REJECTS("{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"const\":true}}", "[true,true]");
        /* sets a pushdown grammar cannot remember are refused, never weakened */
        REFUSES("{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"type\":\"string\"}}", -EOPNOTSUPP,
                "'uniqueItems' at #");
        REFUSES("{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"enum\":[1,2,3,4,5,6,7,8,9]}}",
                -EOPNOTSUPP, "'uniqueItems'");
        REFUSES("{\"type\":\"array\",\"uniqueItems\":true,\"prefixItems\":[{\"const\":1}],"
                "\"items\":{\"enum\":[2]}}",
                -EOPNOTSUPP, "'uniqueItems'");
        REFUSES("{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"enum\":[1],\"minimum\":0}}", -EOPNOTSUPP,
                "'uniqueItems'");
}

TEST(whitespace_flexible_on_request) {
        const char *s = "{\"x-guidance\":{\"whitespace_flexible\":true},\"type\":\"object\","
                        "\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
                        "\"b\":{\"enum\":[{\"k\":[1,2]},[]]},\"c\":{\"type\":\"object\"},"
                        "\"d\":{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"enum\":[\"x\",\"y\"]}}},"
                        "\"required\":[\"a\"],\"additionalProperties\":false}";
        ACCEPTS(s, "{\"a\":[1,2],\"b\":[],\"c\":{},\"d\":[\"x\"]}");
        ACCEPTS(s, "{\n  \"a\" : [ 1 ,\n\t2 ],\r\n  \"b\": { \"k\" : [1, 2] },\n  \"c\": { \"z\" : [ { } , null ] },\n"
                   "  \"d\": [ \"y\" , \"x\" ]\n}");
        ACCEPTS(s, "{ \"a\": [ ], \"b\": [ ] }");
        REJECTS(s, "{\"a\":[1 2]}");              /* whitespace separates tokens, it does not replace commas */
        REJECTS(s, "{\"a\":[1], \"d\":[\"x\", \"x\"]}"); /* still unique */
        REJECTS(s, "{\"a\":[1 0]}");              /* not inside a number */
        REJECTS(s, " {\"a\":[]}");               /* nothing around the value */
        REJECTS(s, "{\"a\":[]} ");
        REJECTS(s, "{\"a\":[],\"b\":{\"k\":[2,1]}}"); /* the literal keeps its values */
        /* compact unless asked */
        REJECTS("{\"type\":\"object\"}", "{ }");
        REJECTS("{\"x-guidance\":{\"whitespace_flexible\":false},\"type\":\"array\"}", "[1, 2]");
        ACCEPTS("{\"x-guidance\":{\"whitespace_flexible\":true}}", "[ {\"a\" :1 }, \"s p\" ]");
        REFUSES("{\"x-guidance\":{\"key_separator\":\": \"}}", -EOPNOTSUPP, "'x-guidance'");
        REFUSES("{\"x-guidance\":true}", -EINVAL, "'x-guidance'");
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
        REFUSES("{\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"^([0-9])\\\\1$\"}}}", -EOPNOTSUPP,
                "'pattern' at #/properties/zip");
        REFUSES("{\"type\":\"number\",\"minimum\":0.5}", -EOPNOTSUPP, "'minimum' at #");
        REFUSES("{\"type\":\"string\",\"format\":\"duration\"}", -EOPNOTSUPP, "'format'");
        REFUSES("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":2}]}", -EOPNOTSUPP, "'oneOf'");
        REFUSES("{\"type\":\"array\",\"uniqueItems\":true}", -EOPNOTSUPP, "'uniqueItems'");
        REFUSES("{\"not\":{}}", -EOPNOTSUPP, "'not'");
        /* siblings of oneOf that do not merge into a branch (a fuzz finding: the branch
         * was then read from an unset pointer) */
        REFUSES("{\"type\":\"obj\",\"oneOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", -EINVAL, "'type'");
        REFUSES("{\"type\":\"string\",\"maxLength\":100000}", -E2BIG, "'maxLength'");
        REFUSES("{\"type\":\"strin\"}", -EINVAL, "'type'");
        /* inert: the keyword constrains a type the schema excludes, or a format no
         * validator knows */
        ACCEPTS("{\"type\":\"string\",\"minimum\":3}", "\"x\"");
        ACCEPTS("{\"type\":\"integer\",\"format\":\"int64\"}", "7");
}

TEST(pattern_judges_the_decoded_content) {
        ACCEPTS("{\"type\":\"string\",\"pattern\":\"^[0-9]{3}$\"}", "\"123\"");
        REJECTS("{\"type\":\"string\",\"pattern\":\"^[0-9]{3}$\"}", "\"1234\"");
        ACCEPTS("{\"pattern\":\"b\"}", "\"abc\""); /* a search: anywhere in the string */
        REJECTS("{\"pattern\":\"b\"}", "\"acd\"");
        ACCEPTS("{\"pattern\":\"^a\"}", "\"ab\"");
        REJECTS("{\"pattern\":\"^a\"}", "\"ba\"");
        ACCEPTS("{\"pattern\":\"a$\"}", "\"ba\"");
        ACCEPTS("{\"pattern\":\"^a\\\"b$\"}", "\"a\\\"b\""); /* a quote is \" in the output */
        ACCEPTS("{\"pattern\":\"^\\\\n$\"}", "\"\\n\"");     /* the regex \n: a newline, written \n */
        REJECTS("{\"pattern\":\"^\\\\n$\"}", "\"n\"");
        ACCEPTS("{\"pattern\":\"^\\\\\\\\$\"}", "\"\\\\\"");  /* the regex \\: one backslash */
        ACCEPTS("{\"pattern\":\"^[^a]$\"}", "\"\\u0001\"");       /* a control character's escape */
        REJECTS("{\"pattern\":\"^[^a]$\"}", "\"\\u0041\"");       /* never a non-canonical one */
        REJECTS("{\"pattern\":\"^[^\\\"]*$\"}", "\"ab\\\"c\"");
        ACCEPTS("{\"pattern\":\"^.$\"}", "\"\xc3\xa9\"");
        ACCEPTS("{\"type\":[\"string\",\"integer\"],\"pattern\":\"^a\"}", "7"); /* strings only */
        REFUSES("{\"pattern\":\"^a\",\"maxLength\":3}", -EOPNOTSUPP, "'pattern' at #: not supported together");
        /* length bounds every match of the pattern meets are kept */
        ACCEPTS("{\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\",\"minLength\":5,\"maxLength\":10}", "\"12345-6789\"");
        REJECTS("{\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\",\"minLength\":5,\"maxLength\":10}", "\"1234\"");
        ACCEPTS("{\"pattern\":\"^[a-z]+$\",\"minLength\":1}", "\"abc\"");
        REFUSES("{\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\",\"maxLength\":9}", -EOPNOTSUPP, "does not imply");
        REFUSES("{\"pattern\":\"^[a-z]*$\",\"minLength\":1}", -EOPNOTSUPP, "does not imply");
        REFUSES("{\"pattern\":\"^((a{65536}){65536}){65536}b?$\",\"maxLength\":3}", -EOPNOTSUPP, "does not imply");
        REFUSES("{\"pattern\":\"(?=a)\"}", -EOPNOTSUPP, "lookahead");
        REFUSES("{\"pattern\":3}", -EINVAL, "'pattern'");
}

TEST(formats) {
        const char *date = "{\"format\":\"date\"}", *dt = "{\"format\":\"date-time\"}", *time = "{\"format\":\"time\"}";
        ACCEPTS(date, "\"2024-02-29\"");
        ACCEPTS(date, "\"2000-02-29\"");
        ACCEPTS(date, "\"2023-12-31\"");
        REJECTS(date, "\"2023-02-29\"");
        REJECTS(date, "\"1900-02-29\"");
        REJECTS(date, "\"2023-04-31\"");
        REJECTS(date, "\"2023-13-01\"");
        REJECTS(date, "\"0000-01-01\"");
        REJECTS(date, "\"2023-1-01\"");
        ACCEPTS(dt, "\"2024-05-06T10:20:30Z\"");
        ACCEPTS(dt, "\"2024-05-06T10:20:30.123+02:00\"");
        REJECTS(dt, "\"2024-05-06 10:20:30Z\"");
        REJECTS(dt, "\"2024-05-06T24:00:00Z\"");
        REJECTS(dt, "\"2024-05-06T10:20:30\"");
        ACCEPTS(time, "\"23:59:59-05:30\"");
        REJECTS(time, "\"23:60:00Z\"");
        const char *uuid = "{\"format\":\"uuid\"}";
        ACCEPTS(uuid, "\"123e4567-e89b-12d3-A456-426614174000\"");
        REJECTS(uuid, "\"123e4567e89b12d3a456426614174000\"");
        REJECTS(uuid, "\"123e4567-e89b-12d3-a456-42661417400g\"");
        const char *v4 = "{\"format\":\"ipv4\"}", *v6 = "{\"format\":\"ipv6\"}";
        ACCEPTS(v4, "\"192.168.0.255\"");
        REJECTS(v4, "\"256.1.1.1\"");
        REJECTS(v4, "\"01.1.1.1\"");
        REJECTS(v4, "\"1.1.1\"");
        ACCEPTS(v6, "\"::1\"");
        ACCEPTS(v6, "\"2001:db8::8a2e:370:7334\"");
        ACCEPTS(v6, "\"::ffff:192.0.2.1\"");
        ACCEPTS(v6, "\"1:2:3:4:5:6:7:8\"");
        REJECTS(v6, "\"1::2::3\"");
        REJECTS(v6, "\"12345::\"");
        REJECTS(v6, "\"1:2:3:4:5:6:7:8:9\"");
        const char *host = "{\"format\":\"hostname\"}";
        ACCEPTS(host, "\"example.com\"");
        ACCEPTS(host, "\"a-1.b2.example\"");
        REJECTS(host, "\"-a.com\"");
        REJECTS(host, "\"a-.com\"");
        REJECTS(host, "\"a..com\"");
        REJECTS(host, "\"a_b.com\"");
        REJECTS(host, "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.com\""); /* 64 */
        const char *email = "{\"format\":\"email\"}";
        ACCEPTS(email, "\"first.last+tag@example.com\"");
        REJECTS(email, "\"a..b@example.com\"");
        REJECTS(email, "\".a@example.com\"");
        REJECTS(email, "\"@example.com\"");
        REJECTS(email, "\"a@-example.com\"");
        const char *uri = "{\"format\":\"uri\"}";
        ACCEPTS(uri, "\"https://user@example.com:8080/a/b?c=d&e#f\"");
        ACCEPTS(uri, "\"urn:isbn:0451450523\"");
        ACCEPTS(uri, "\"mailto:a@example.com\"");
        ACCEPTS(uri, "\"http://[::1]/x%20y\"");
        REJECTS(uri, "\"//example.com/a\""); /* a relative reference */
        REJECTS(uri, "\"http://exa mple.com\"");
        REJECTS(uri, "\"http://example.com/%zz\"");
        REJECTS(uri, "\"http://example.com:70000/\"");
        ACCEPTS("{\"format\":\"int64\",\"type\":\"string\"}", "\"x\""); /* unknown: ignored */
        REFUSES("{\"format\":\"date\",\"maxLength\":3}", -EOPNOTSUPP, "'format'");
}

TEST(integer_and_number_bounds) {
        const char *small = "{\"type\":\"integer\",\"minimum\":3,\"maximum\":250}";
        const char *in_small[] = {"3", "9", "10", "17", "100", "199", "250"}, *out_small[] = {"2", "0", "251", "300", "-5", "1000", "03"};
        for (size_t i = 0; i < 7; i++) {
                ACCEPTS(small, in_small[i]);
                REJECTS(small, out_small[i]);
        }
        const char *neg = "{\"type\":\"integer\",\"minimum\":-20,\"exclusiveMaximum\":-3}";
        ACCEPTS(neg, "-20");
        ACCEPTS(neg, "-4");
        REJECTS(neg, "-3");
        REJECTS(neg, "-21");
        REJECTS(neg, "0");
        const char *open = "{\"type\":\"integer\",\"minimum\":95}";
        ACCEPTS(open, "95");
        ACCEPTS(open, "100");
        ACCEPTS(open, "123456789");
        REJECTS(open, "94");
        REJECTS(open, "9");
        ACCEPTS("{\"type\":\"integer\",\"exclusiveMinimum\":0}", "1");
        REJECTS("{\"type\":\"integer\",\"exclusiveMinimum\":0}", "0");
        REJECTS("{\"type\":\"integer\",\"exclusiveMinimum\":0}", "-1");
        ACCEPTS("{\"type\":\"integer\",\"maximum\":0}", "-1234");
        REJECTS("{\"type\":\"integer\",\"maximum\":0}", "1");
        ACCEPTS("{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true}", "6"); /* draft-04 */
        REJECTS("{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true}", "5");
        ACCEPTS("{\"type\":\"integer\",\"minimum\":2.5}", "3");
        REJECTS("{\"type\":\"integer\",\"minimum\":2.5}", "2");
        const char *unit = "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}";
        const char *in_unit[] = {"0", "0.5", "1", "1.0", "0.999", "1.000"}, *out_unit[] = {"1.5", "-0.1", "1.01", "2", "10", "1e0"};
        for (size_t i = 0; i < 6; i++) {
                ACCEPTS(unit, in_unit[i]);
                REJECTS(unit, out_unit[i]);
        }
        const char *half_open = "{\"type\":\"number\",\"exclusiveMinimum\":-2,\"exclusiveMaximum\":1}";
        ACCEPTS(half_open, "-1.99");
        ACCEPTS(half_open, "0.99");
        ACCEPTS(half_open, "-0.5");
        REJECTS(half_open, "1");
        REJECTS(half_open, "1.0");
        REJECTS(half_open, "-2");
        REJECTS(half_open, "-2.0");
        ACCEPTS(half_open, "-1.0");
        REJECTS(half_open, "-2.5");
        ACCEPTS("{\"minimum\":10}", "\"text\""); /* numbers only */
        ACCEPTS("{\"allOf\":[{\"minimum\":1},{\"minimum\":4}],\"type\":\"integer\"}", "4");
        REJECTS("{\"allOf\":[{\"minimum\":1},{\"minimum\":4}],\"type\":\"integer\"}", "3");
        REFUSES("{\"type\":\"integer\",\"maximum\":1e300}", -EOPNOTSUPP, "'maximum'");
        REFUSES("{\"type\":\"integer\",\"maximum\":\"3\"}", -EINVAL, "'maximum'");
}

TEST(multiple_of) {
        const char *three = "{\"type\":\"integer\",\"multipleOf\":3}";
        const char *in3[] = {"0", "3", "-9", "12", "999"}, *out3[] = {"4", "10", "-1", "1000", "-0"};
        for (size_t i = 0; i < 5; i++) {
                ACCEPTS(three, in3[i]);
                REJECTS(three, out3[i]);
        }
        ACCEPTS("{\"type\":\"integer\",\"multipleOf\":25}", "1075");
        REJECTS("{\"type\":\"integer\",\"multipleOf\":25}", "1076");
        ACCEPTS("{\"type\":\"number\",\"multipleOf\":1}", "12");
        REJECTS("{\"type\":\"number\",\"multipleOf\":1}", "1.5");
        REFUSES("{\"type\":\"number\",\"multipleOf\":0.5}", -EOPNOTSUPP, "'multipleOf'");
        REFUSES("{\"type\":\"integer\",\"multipleOf\":2,\"minimum\":0}", -EOPNOTSUPP, "'multipleOf'");
        REFUSES("{\"type\":\"integer\",\"multipleOf\":0}", -EINVAL, "'multipleOf'");
}

TEST(pattern_properties) {
        const char *closed = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},"
                             "\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":false}";
        ACCEPTS(closed, "{}");
        ACCEPTS(closed, "{\"name\":\"n\",\"x-b\":2}");
        ACCEPTS(closed, "{\"x-a\":1,\"name\":\"n\",\"x-b\":2}");
        REJECTS(closed, "{\"x-a\":\"s\"}");
        REJECTS(closed, "{\"y\":1}");
        ACCEPTS("{\"patternProperties\":{\".*\":{}}}", "{\"any\":[1]}"); /* constrains nothing */
        const char *required = "{\"required\":[\"x-r\"],\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
                               "\"additionalProperties\":false}";
        ACCEPTS(required, "{\"x-r\":1}");
        REJECTS(required, "{\"x-r\":true}");
        REFUSES("{\"properties\":{\"x-a\":{}},\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
                "\"additionalProperties\":false}",
                -EOPNOTSUPP, "'x-a' matches");
        REFUSES("{\"patternProperties\":{\"^a\":{\"type\":\"integer\"},\"^b\":{\"type\":\"integer\"}},"
                "\"additionalProperties\":false}",
                -EOPNOTSUPP, "'patternProperties'");
        REFUSES("{\"patternProperties\":{\"^a\":{\"type\":\"integer\"}}}", -EOPNOTSUPP, "additionalProperties: false");
        /* a pattern every key matches judges every member, declared ones too */
        const char *all = "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"patternProperties\":{\".*\":{\"type\":"
                          "\"integer\",\"minimum\":0}}}";
        ACCEPTS(all, "{\"a\":1,\"b\":2}");
        REJECTS(all, "{\"a\":-1}");
        REJECTS(all, "{\"b\":-3}");
        REJECTS(all, "{\"b\":\"x\"}");
        const char *prefix = "{\"patternProperties\":{\"^[a-z]*\":{\"type\":\"string\"}},\"additionalProperties\":false}";
        ACCEPTS(prefix, "{\"Q\":\"x\"}"); /* "^[a-z]*" matches the empty start of any key */
        REJECTS(prefix, "{\"Q\":1}");
        REFUSES("{\"patternProperties\":{\"^.*$\":{\"type\":\"string\"}}}", -EOPNOTSUPP, "additionalProperties: false");
}

/* ---- the token trie mask against the per-token scan ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) { return (uint32_t)(t_xorshift64(&rng_state) >> 11); }

/* walks random walks of up to steps tokens per schema; the scan twin costs a whole
 * vocabulary per state, so big vocabularies get fewer states */
/* Loads a tokenizer (a path in the source tree, or "fixtures/..." in the fixtures) and
 * its token tries. */
static int load_vocab(const char *tokenizer_rel, struct dse_tokenizer **tok, struct dse_grammar_vocab **v) {
        const char *src = getenv("DSV_SOURCE_DIR"), *fix = getenv("DSV_FIXTURES");
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", strncmp(tokenizer_rel, "fixtures/", 9) ? (src ? src : "..") : fix,
                 strncmp(tokenizer_rel, "fixtures/", 9) ? tokenizer_rel : tokenizer_rel + 9);
        struct dse_diag diag = {{0}};
        int r = dse_tokenizer_load_file(path, tok, &diag);
        if (r < 0) {
                fprintf(stderr, "  cannot load %s: %s\n", path, diag.msg);
                return r;
        }
        r = dse_grammar_vocab_new(*tok, v, &diag);
        if (r < 0) {
                fprintf(stderr, "  %s: %s\n", path, diag.msg);
                dse_tokenizer_free(*tok);
        }
        return r;
}

static void mask_matches_scan(const char *tokenizer_rel, int walks, int steps, int min_states) {
        struct dse_tokenizer *tok;
        struct dse_diag diag = {{0}};
        struct dse_grammar_vocab *v;
        ASSERT_OK(load_vocab(tokenizer_rel, &tok, &v));
        /* the last one is GBNF; the mask of a state is asked twice, so the cached mask
         * is checked both when it is made and when it is reused */
        const char *schemas[] = {
                "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"n\":"
                "{\"type\":\"number\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\"]}}}}",
                "true",
                "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\","
                "\"pattern\":\"^[a-z]+-[0-9]{2}$\"},\"at\":{\"format\":\"date\"},\"n\":{\"type\":\"integer\","
                "\"minimum\":-40,\"maximum\":1200},\"s\":{\"type\":\"string\"}},\"required\":[\"id\",\"n\"]}}",
                "root ::= (\"say \" [^\\n\"]+ \"\\n\")+ \"end\"",
        };
        const size_t n_schemas = sizeof schemas / sizeof *schemas;
        size_t words = dse_grammar_vocab_mask_words(v);
        uint64_t *trie = calloc(words, sizeof *trie), *scan = calloc(words, sizeof *scan);
        int states = 0;
        for (size_t s = 0; s < n_schemas; s++) {
                struct dse_grammar *g;
                if (s + 1 < n_schemas)
                        ASSERT_OK(dse_grammar_compile_json_schema(schemas[s], strlen(schemas[s]), &g, &diag));
                else
                        ASSERT_OK(dse_grammar_compile_gbnf(schemas[s], strlen(schemas[s]), &g, &diag));
                for (int walk = 0; walk < walks; walk++) {
                        struct dse_grammar_matcher *m;
                        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                        for (int step = 0; step < steps; step++, states++) {
                                int n_scan = dse__grammar_matcher_fill_mask_scan(m, v, scan);
                                for (int again = 0; again < 2; again++) {
                                        int n = dse_grammar_matcher_fill_mask(m, v, trie);
                                        ASSERT_EQ(n, n_scan);
                                        ASSERT_TRUE(!memcmp(trie, scan, words * sizeof *trie));
                                }
                                int n_trie = n_scan;
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

/* States where the plain tokens are taken or refused whole, or only in part, and states
 * just around it (mid-character, after a backslash, at a length bound, in a key that
 * must not be a declared name, in a number, in GBNF), each reached by feeding bytes:
 * the mask equals the scan twin, fresh and cached. The object of many optional
 * properties gives states of dozens of stacks of which a byte continues a few (the walk
 * steps only those), and keys in the middle of a wide character or escape at several
 * nodes of the declared names' trie (one shared rule continues them). */
#define MANY_PROPERTIES                                                                                       \
        "{\"type\":\"object\",\"properties\":{\"clear\":{},\"clearAll\":{},\"create\":{},\"get\":{},"        \
        "\"getAll\":{},\"getBytesInUse\":{},\"remove\":{},\"set\":{\"type\":\"string\"},\"size\":{\"type\":"     \
        "\"integer\"}}}"
struct awkward_state {
        char kind; /* 's' schema, 'g' GBNF */
        const char *grammar, *prefix;
};

static const struct awkward_state awkward_states[] = {
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\""},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"ab"},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"abcd"},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"abcde"},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"\xc3"},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"\xe4\xb8\xad\xe6\x96"},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"a\\"},
        {'s', "{\"type\":\"string\",\"maxLength\":5}", "\"a\\u00"},
        {'s', "{\"type\":\"string\",\"minLength\":3,\"maxLength\":40}", "\"\xf0\x9f\x98\x80"},
        {'s', "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", "[\"x\",\""},
        {'s', "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", "[\"x\\\"y"},
        {'s', "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":3}}}", "{\""},
        {'s', "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":3}}}", "{\"tit"},
        {'s', "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":3}}}",
         "{\"title\":\"ab"},
        {'s', "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", "\"ab"},
        {'s', "{\"enum\":[\"\xc3\xa9t\xc3\xa9\",\"\xe4\xb8\xad\xe6\x96\x87\",\"ab\"]}", "\""},
        {'s', "{\"enum\":[\"\xc3\xa9t\xc3\xa9\",\"\xe4\xb8\xad\xe6\x96\x87\",\"ab\"]}", "\"\xc3\xa9"},
        {'s', "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"}}}", "{\"n\":-0."},
        {'s', "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"}}}", "{\"n\":12"},
        {'s', "{\"format\":\"date\"}", "\"2024-0"},
        {'s', "true", "{\"k\":[\"v"},
        {'s', MANY_PROPERTIES, "{\""},
        {'s', MANY_PROPERTIES, "{\"ge"},
        {'s', MANY_PROPERTIES, "{\"ge\xc3"},
        {'s', MANY_PROPERTIES, "{\"\xe4\xb8"},
        {'s', MANY_PROPERTIES, "{\"clear\\"},
        {'s', MANY_PROPERTIES, "{\"clear\":1,\""},
        {'s', MANY_PROPERTIES, "{\"clear\":1,\"getA\xf0\x9f"},
        {'s', MANY_PROPERTIES, "{\"create\":{\"x\":[1,\"y\"]},\"s"},
        {'s', "{\"type\":\"array\",\"items\":" MANY_PROPERTIES "}", "[{\""},
        {'s', "{\"type\":\"array\",\"items\":" MANY_PROPERTIES "}", "[{\"clear\":1,\"ge"},
        {'s', "{\"type\":\"array\",\"items\":" MANY_PROPERTIES "}", "[{\"getAll\":2,\"\xc3"},
        {'s', "{\"type\":\"array\",\"items\":" MANY_PROPERTIES "}", "[{\"getAll\":2,\"x\":3,\""},
        {'s', "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"minLength\":4}]}", "\"a"},
        {'s', "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},"
              "{\"type\":\"string\",\"maxLength\":9}]}}", "[\"a"},
        {'g', "root ::= [^\"]{2,4} \"!\"", ""},
        {'g', "root ::= [^\"]{2,4} \"!\"", "ab"},
        {'g', "root ::= [a-z ]* \".\"", "x"},
        {'g', "root ::= (\"say \" [^\\n\"]+ \"\\n\")+ \"end\"", "say h\xc3\xa9"},
};

/* DeepSeek-V3's vocabulary and room for two masks, to compare the trie mask with the
 * scan twin at chosen states. */
struct scan_check {
        struct dse_tokenizer *tok;
        struct dse_grammar_vocab *v;
        size_t words;
        uint64_t *trie, *scan;
};

static int scan_check_open(struct scan_check *c) {
        int r = load_vocab("fixtures/tokenizers/models/deepseek_v3/tokenizer.json", &c->tok, &c->v);
        if (r < 0)
                return r;
        c->words = dse_grammar_vocab_mask_words(c->v);
        c->trie = calloc(c->words, sizeof *c->trie);
        c->scan = calloc(c->words, sizeof *c->scan);
        return c->trie && c->scan ? 0 : -ENOMEM;
}

static void scan_check_close(struct scan_check *c) {
        free(c->trie);
        free(c->scan);
        dse_grammar_vocab_free(c->v);
        dse_tokenizer_free(c->tok);
}

/* The mask of m's state against the scan twin, made fresh and then taken from the
 * cache: 0 when both equal the scan, else 1 (fresh) or 2 (cached); *ret_n and
 * *ret_n_scan are the counts of the last mask compared and of the scan. */
static int scan_check_state(struct scan_check *c, struct dse_grammar_matcher *m, int *ret_n, int *ret_n_scan) {
        *ret_n_scan = dse__grammar_matcher_fill_mask_scan(m, c->v, c->scan);
        for (int again = 0; again < 2; again++) {
                *ret_n = dse_grammar_matcher_fill_mask(m, c->v, c->trie);
                if (*ret_n != *ret_n_scan || memcmp(c->trie, c->scan, c->words * sizeof *c->trie))
                        return 1 + again;
        }
        return 0;
}

TEST(trie_mask_equals_scan_at_awkward_states) {
        struct scan_check c;
        struct dse_diag diag = {{0}};
        ASSERT_OK(scan_check_open(&c));
        for (size_t i = 0; i < sizeof awkward_states / sizeof *awkward_states; i++) {
                const struct awkward_state *a = &awkward_states[i];
                struct dse_grammar *g;
                if (a->kind == 's')
                        ASSERT_OK(dse_grammar_compile_json_schema(a->grammar, strlen(a->grammar), &g, &diag));
                else
                        ASSERT_OK(dse_grammar_compile_gbnf(a->grammar, strlen(a->grammar), &g, &diag));
                struct dse_grammar_matcher *m;
                ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                ASSERT_OK(dse_grammar_matcher_advance(m, a->prefix, strlen(a->prefix)));
                int n, n_scan, differs = scan_check_state(&c, m, &n, &n_scan);
                if (differs)
                        T_FAIL("%s after '%s': mask %d tokens, scan %d (%s)", a->grammar, a->prefix, n, n_scan,
                               differs == 2 ? "cached" : "fresh");
                ASSERT_TRUE(n_scan > 0);
                dse_grammar_matcher_free(m);
                dse_grammar_free(g);
        }
        scan_check_close(&c);
}

/* Where a JSON text is after some of its bytes: in a key (an object member's name) or
 * not, tracked byte by byte. */
struct json_position {
        char open[64]; /* the containers around, '{' or '[' */
        int depth, in_string, escaped, in_key, expect_key;
};

static void json_position_step(struct json_position *p, char c) {
        if (p->in_string) {
                if (p->escaped)
                        p->escaped = 0;
                else if (c == '\\')
                        p->escaped = 1;
                else if (c == '"')
                        p->in_string = p->in_key = 0;
                return;
        }
        if (c == '"') {
                p->in_string = 1;
                p->in_key = p->expect_key;
                p->expect_key = 0;
        } else if ((c == '{' || c == '[') && p->depth < (int)sizeof p->open) {
                p->open[p->depth++] = c;
                p->expect_key = c == '{';
        } else if ((c == '}' || c == ']') && p->depth > 0) {
                p->depth--;
        } else if (c == ',') {
                p->expect_key = p->depth > 0 && p->open[p->depth - 1] == '{';
        }
}

/* The corpus schemas with the most masks over the p99 target (objects of dozens of
 * declared names beside extra members, at the root and nested): each valid instance
 * walked token by token, and at every sixth state inside a key (a fresh key beside
 * the names still allowed, or part of one) the mask equals the scan twin, fresh and
 * cached; at most 12 such states per schema, as the scan costs a whole vocabulary. */
TEST(trie_mask_equals_scan_in_keys_of_corpus_objects) {
        static const char *const names[] = {"Github_ultra---o57878", "Github_ultra---o80235", "Github_ultra---o4826",
                                            "Github_hard---o30544", "JsonSchemaStore---codecov"};
        struct scan_check c;
        struct dse_diag diag = {{0}};
        ASSERT_OK(scan_check_open(&c));
        int32_t *ids = NULL;
        int checked_all = 0;
        for (size_t s = 0; s < sizeof names / sizeof *names; s++) {
                char path[4096];
                snprintf(path, sizeof path, "%s/json-schema/schemas/%s.json", getenv("DSV_FIXTURES"), names[s]);
                FILE *f = fopen(path, "re");
                if (!f)
                        T_FAIL("cannot open %s", path);
                static char text[1 << 20];
                size_t len = fread(text, 1, sizeof text - 1, f);
                fclose(f);
                text[len] = 0;
                cJSON *doc = cJSON_Parse(text);
                ASSERT_TRUE(doc != NULL);
                char *schema = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(doc, "schema"));
                struct dse_grammar *g;
                ASSERT_OK(dse_grammar_compile_json_schema(schema, strlen(schema), &g, &diag));
                int checked = 0, in_key = 0;
                const cJSON *one;
                cJSON_ArrayForEach(one, cJSON_GetObjectItemCaseSensitive(doc, "tests")) {
                        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "valid")))
                                continue;
                        char *out = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(one, "data"));
                        size_t out_len = strlen(out);
                        int n_ids = dse_tokenizer_encode(c.tok, out, out_len, 0, NULL, 0);
                        ASSERT_TRUE(n_ids > 0);
                        ids = realloc(ids, (size_t)n_ids * sizeof *ids);
                        ASSERT_EQ(dse_tokenizer_encode(c.tok, out, out_len, 0, ids, (size_t)n_ids), n_ids);
                        struct dse_grammar_matcher *m;
                        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                        struct json_position pos = {.depth = 0};
                        for (int i = 0; i < n_ids && checked < 12; i++) {
                                if (pos.in_key && in_key++ % 6 == 0) {
                                        int n, n_scan, differs = scan_check_state(&c, m, &n, &n_scan);
                                        if (differs)
                                                T_FAIL("%s, token %d of '%s': mask %d tokens, scan %d (%s)", names[s],
                                                       i, out, n, n_scan, differs == 2 ? "cached" : "fresh");
                                        checked++;
                                }
                                ASSERT_OK(dse_grammar_matcher_accept_token(m, c.v, ids[i]));
                                size_t n_bytes;
                                const uint8_t *b = dse_grammar_vocab_token_bytes(c.v, ids[i], &n_bytes);
                                for (size_t k = 0; k < n_bytes; k++)
                                        json_position_step(&pos, (char)b[k]);
                        }
                        dse_grammar_matcher_free(m);
                        free(out);
                }
                ASSERT_TRUE(checked >= 8);
                checked_all += checked;
                dse_grammar_free(g);
                free(schema);
                cJSON_Delete(doc);
        }
        ASSERT_TRUE(checked_all >= 40);
        free(ids);
        scan_check_close(&c);
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
