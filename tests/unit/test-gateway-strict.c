/* The gateway's strictness: the RFC 8259 pass over request bodies (json_strict.c), the
 * string fields' length bounds (request.c) and the request-target check done before
 * percent-decoding (http_strict.c). The framing checks need a connection: they are
 * test-gateway-hostile's. */
#include "http_strict.h"
#include "openai.h"
#include "t.h"

static int strict(const char *body, size_t len, struct dsv_gw_error *e) {
        memset(e, 0, sizeof *e);
        return dsv__gw_json_strict(body, len, e);
}

#define OK_JSON(s) ASSERT_OK(strict(s, sizeof s - 1, &e))
#define BAD_JSON(s)                                                   \
        do {                                                          \
                ASSERT_EQ(strict(s, sizeof s - 1, &e), -EINVAL);      \
                ASSERT_EQ(e.status, 400);                             \
        } while (0)

TEST(json_strict_accepts_rfc8259) {
        struct dsv_gw_error e;
        OK_JSON("{}");
        OK_JSON(" [1, -0.5e+3, 0, 1E2, true, false, null, \"\\u00e9\\ud83d\\ude00\\n\\\"\"] \r\n\t");
        OK_JSON("{\"a\":{\"a\":1},\"b\":[{\"a\":1},{\"a\":2}]}"); /* same key in sibling objects */
        OK_JSON("\"x\"");
        OK_JSON("{\"ab\":1,\"a\":2,\"b\":3}");
}

TEST(json_strict_refuses_what_cjson_lets_through) {
        struct dsv_gw_error e;
        BAD_JSON("{\"a\":\"x\x01y\"}");  /* raw control character */
        BAD_JSON("{\"a\":\"x\0y\"}");    /* raw NUL */
        BAD_JSON("{\"a\":\"x\\u0000\"}"); /* escaped NUL: cJSON's string would end there */
        BAD_JSON("{} x");
        BAD_JSON("{}\0");
        BAD_JSON("{}{}");
        BAD_JSON("{\"a\":01}");
        BAD_JSON("{\"a\":1.}");
        BAD_JSON("{\"a\":-}");
        BAD_JSON("{\"a\":NaN}");
        BAD_JSON("{\"a\":1,}");
        BAD_JSON("[1,]");
        BAD_JSON("{'a':1}");
        BAD_JSON("{\"a\":\"\\ud800\"}");
        BAD_JSON("{\"a\":\"\\udc00\"}");
        BAD_JSON("{\"a\":\"\\x\"}");
        BAD_JSON("{\"a\":tru}");
        BAD_JSON("");
        BAD_JSON("   ");
        BAD_JSON("{\"a\"");
}

TEST(json_strict_refuses_duplicate_keys_naming_them) {
        struct dsv_gw_error e;
        BAD_JSON("{\"model\":\"m\",\"prompt\":\"a\",\"prompt\":\"b\"}");
        ASSERT_STREQ(e.param, "prompt");
        BAD_JSON("{\"prompt\":\"a\",\"\\u0070rompt\":\"b\"}"); /* equal once decoded */
        ASSERT_STREQ(e.param, "prompt");
        BAD_JSON("{\"x\":[{\"k\":1,\"j\":2,\"k\":3}]}");
        ASSERT_STREQ(e.param, "k");
        BAD_JSON("{\"\":[4,-44],\"\":0}"); /* only empty keys: no key text stored */
        ASSERT_STREQ(e.param, "");
        /* a long key is named cut at a character boundary: 23 of its 30 two-byte characters */
        char key[61] = {0}, body[160], want[47] = {0};
        for (int i = 0; i < 30; i++)
                memcpy(key + 2 * i, "\xc3\xa9", 2);
        memcpy(want, key, 46);
        int n = snprintf(body, sizeof body, "{\"%s\":1,\"%s\":2}", key, key);
        ASSERT_EQ(strict(body, (size_t)n, &e), -EINVAL);
        ASSERT_STREQ(e.param, want);
}

TEST(json_strict_bounds_depth_and_keys) {
        struct dsv_gw_error e;
        char deep[2 * 65 + 1];
        memset(deep, '[', 65);
        memset(deep + 65, ']', 65);
        deep[130] = 0;
        ASSERT_EQ(strict(deep, 130, &e), -EINVAL);
        ASSERT_OK(strict(deep + 1, 128, &e)); /* 64 deep */
        char key[300 + 8];
        memset(key, 'k', sizeof key);
        key[0] = '{', key[1] = '"';
        memcpy(key + 2 + 300, "\":1}", 4);
        ASSERT_EQ(strict(key, 2 + 300 + 4, &e), -EINVAL);
}

static const struct dsv_gw_limits lim = {
        .model = "m", .max_prompt_bytes = 4096, .max_tokens_limit = 1000, .default_max_tokens = 7};

/* The status of parsing body as a completion request, with the param in e. */
static int parse_status(const char *body, struct dsv_gw_error *e) {
        struct dsv_gw_request req;
        memset(e, 0, sizeof *e);
        if (dsv__gw_request_parse(body, strlen(body), DSV_GW_API_COMPLETIONS, &lim, &req, e) == 0) {
                dsv__gw_request_done(&req);
                return 200;
        }
        return e->status;
}

TEST(string_fields_have_bounds_named_in_the_error) {
        struct dsv_gw_error e;
        char body[8192];
        char *big = malloc(2000);
        memset(big, 'x', 1999);
        big[1999] = 0;
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"user\":\"%.256s\"}", big);
        ASSERT_EQ(parse_status(body, &e), 200);
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"user\":\"%.257s\"}", big);
        ASSERT_EQ(parse_status(body, &e), 400);
        ASSERT_STREQ(e.param, "user");
        snprintf(body, sizeof body, "{\"model\":\"%.257s\",\"prompt\":\"p\"}", big);
        ASSERT_EQ(parse_status(body, &e), 400);
        ASSERT_STREQ(e.param, "model");
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"stop\":[\"a\",\"%.1024s\"]}", big);
        ASSERT_EQ(parse_status(body, &e), 200);
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"stop\":\"%.1025s\"}", big);
        ASSERT_EQ(parse_status(body, &e), 400);
        ASSERT_STREQ(e.param, "stop");
        free(big);
}

TEST(request_target_checked_before_decoding) {
        ASSERT_TRUE(dsv__gw_strict_target_ok("/v1/models"));
        ASSERT_TRUE(dsv__gw_strict_target_ok("/health?a=%20b&c=%2F"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/health%00"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/health?a=%00"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/health%0"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/health%zz"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/hea lth"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/health\x01"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok("/health\x7f"));
        ASSERT_TRUE(!dsv__gw_strict_target_ok(""));
}

/* The accept path's look at a raw header block, for what libmicrohttpd 0.9 hides. */
TEST(header_block_refuses_nul_and_empty_names_not_the_body) {
        static const struct {
                const char *block;
                size_t len;
                bool ok;
        } cases[] = {
                {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27, true},
                {"GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 32, false},
                {"GET / HTTP/1.1\nHost: a\n: x\n\n", 28, false},            /* bare LF line ends */
                {"GET / HTTP/1.1\r\nHost: a\r\nX-Y: a\0b\r\n\r\n", 37, false},
                {"POST / HTTP/1.1\r\nHost: a\r\n\r\n{\"a\0\":1}", 36, true}, /* NUL in the body: not here */
                {"POST / HTTP/1.1\r\nHost: a\r\n\r\n: not a field", 41, true},
                {"GET / HTTP/1.1\r\nHost: a\r\nX: b", 29, true}, /* a part: what arrived is fine */
                {"GET /a:b HTTP/1.1\r\nHost: a\r\n\r\n", 30, true},   /* a colon in the request line */
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                fprintf(stderr, "  case %zu\n", i);
                ASSERT_EQ(dsv__gw_strict_header_block(cases[i].block, cases[i].len), cases[i].ok);
        }
}
