/* tokenizer.json tokenizers on small synthetic files (tests/fuzz/fuzz-tokenizer-load.seeds):
 * each pipeline stage with ids worked out by hand from the vocabulary and merge ranks,
 * and the errors for bad files and bad text. */
#include <stdint.h>

#include "dse.h"
#include "t.h"
#include "test-log-capture.h"
#include "tok/tokenizer.h" /* chat_template, for the chat-template work */

static char *seed(const char *name, size_t *ret_len) {
        char path[4096];
        const char *src = getenv("DSV_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/tests/fuzz/fuzz-tokenizer-load.seeds/%s", src ? src : "..", name);
        return slurp(path, ret_len);
}

static struct dse_tokenizer *load_seed(const char *name) {
        size_t len = 0;
        char *json = seed(name, &len);
        if (!json)
                return NULL;
        size_t jlen = strnlen(json, len);
        const char *cfg = jlen < len ? json + jlen + 1 : NULL; /* "json NUL config" */
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        int r = dse_tokenizer_load_hf(json, jlen, cfg, cfg ? len - jlen - 1 : 0, &tok, &diag);
        if (r < 0)
                fprintf(stderr, "  load %s: %s\n", name, diag.msg);
        free(json);
        return r < 0 ? NULL : tok;
}

/* Encodes text and compares with want[0..n_want). */
static int encodes_to(const struct dse_tokenizer *tok, const char *text, int special, const int32_t *want, int n_want) {
        int32_t got[64];
        int n = dse_tokenizer_encode(tok, text, strlen(text), special, got, 64);
        int same = n == n_want;
        for (int i = 0; same && i < n; i++)
                same = got[i] == want[i];
        if (!same) {
                fprintf(stderr, "  \"%s\": got", text);
                for (int i = 0; i < n && i < 64; i++)
                        fprintf(stderr, " %d", got[i]);
                fprintf(stderr, " (n=%d), want", n);
                for (int i = 0; i < n_want; i++)
                        fprintf(stderr, " %d", want[i]);
                fprintf(stderr, "\n");
        }
        return same;
}

static int decodes_to(const struct dse_tokenizer *tok, const int32_t *ids, int n, const char *want) {
        char out[256];
        int m = dse_tokenizer_decode(tok, ids, (size_t)n, out, sizeof out);
        if (m < 0 || (size_t)m != strlen(want) || memcmp(out, want, (size_t)m) != 0) {
                fprintf(stderr, "  decode: got \"%.*s\" (%d), want \"%s\"\n", m < 0 ? 0 : m, out, m, want);
                return 0;
        }
        return 1;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

/* byte_level.json: ids 0-255 are the ByteLevel characters of bytes 0-255; then
 * Ġt 256, he 257, Ġthe 258, ll 259, llo 260, Ġw 261, or 262, ld 263, <|end|> 264 (special,
 * raw), <tool> 265 (normalized, lstrip+rstrip); merges Ġ+t h+e Ġt+he l+l ll+o Ġ+w o+r l+d;
 * ignore_merges; NFC; TemplateProcessing adds <|end|> in front. */
TEST(byte_level_merges_and_ignore_merges) {
        struct dse_tokenizer *tok = load_seed("byte_level.json");
        ASSERT_TRUE(tok);
        /* " the" is a vocabulary entry (ignore_merges); " hello" merges to Ġ he llo */
        ASSERT_TRUE(encodes_to(tok, " the hello world", 0, IDS(258, 32, 257, 260, 261, 262, 263)));
        ASSERT_TRUE(encodes_to(tok, " the hello world", 1, IDS(264, 258, 32, 257, 260, 261, 262, 263)));
        ASSERT_TRUE(decodes_to(tok, IDS(258, 32, 257, 260), " the hello"));
        ASSERT_EQ(dse_tokenizer_bos(tok), 264);
        ASSERT_EQ(dse_tokenizer_n_vocab(tok), 266);
        ASSERT_TRUE(tok->chat_template == NULL);
        ASSERT_STREQ(dse_tokenizer_piece(tok, 256), "\xC4\xA0t");
        ASSERT_TRUE(dse_tokenizer_piece(tok, 266) == NULL);
        dse_tokenizer_free(tok);
}

TEST(byte_level_nfc_added_tokens_and_lossy_decode) {
        struct dse_tokenizer *tok = load_seed("byte_level.json");
        ASSERT_TRUE(tok);
        /* NFC composes e + U+0301 into U+00E9 (bytes C3 A9) before the byte mapping */
        ASSERT_TRUE(encodes_to(tok, "e\xCC\x81", 0, IDS(0xC3, 0xA9)));
        /* <|end|> is cut out of the raw text; <tool> (lstrip, rstrip) takes the spaces */
        ASSERT_TRUE(encodes_to(tok, "a<|end|>b", 0, IDS(97, 264, 98)));
        ASSERT_TRUE(encodes_to(tok, "a  <tool>  b", 0, IDS(97, 265, 98)));
        ASSERT_TRUE(encodes_to(tok, "", 0, NULL, 0));
        ASSERT_TRUE(decodes_to(tok, IDS(264, 97), "<|end|>a"));
        /* a lone byte C3 is not UTF-8: one U+FFFD, as from_utf8_lossy */
        ASSERT_TRUE(decodes_to(tok, IDS(0xC3, 65), "\xEF\xBF\xBD" "A"));
        ASSERT_TRUE(decodes_to(tok, IDS(0xE4, 0xBD, 0xE4, 0xBD, 0xA0), "\xEF\xBF\xBD\xE4\xBD\xA0"));
        dse_tokenizer_free(tok);
}

TEST(encode_reports_the_full_count) {
        struct dse_tokenizer *tok = load_seed("byte_level.json");
        ASSERT_TRUE(tok);
        int32_t ids[4] = {-7, -7, -7, -7};
        ASSERT_EQ(dse_tokenizer_encode(tok, " the hello world", 16, 0, ids, 2), 7);
        ASSERT_EQ(ids[0], 258);
        ASSERT_EQ(ids[1], 32);
        ASSERT_EQ(ids[2], -7);
        ASSERT_EQ(dse_tokenizer_encode(tok, " the", 4, 0, NULL, 0), 1);
        char out[4];
        ASSERT_EQ(dse_tokenizer_decode(tok, IDS(258, 258), out, 2), 8);
        ASSERT_ERR(dse_tokenizer_decode(tok, IDS(266), out, 4), -EINVAL);
        ASSERT_ERR(dse_tokenizer_decode(tok, IDS(-1), out, 4), -EINVAL);
        dse_tokenizer_free(tok);
}

TEST(config_bos_and_chat_template) {
        struct dse_tokenizer *tok = load_seed("with_config.json");
        ASSERT_TRUE(tok);
        ASSERT_EQ(dse_tokenizer_bos(tok), 264);
        ASSERT_EQ(dse_tokenizer_eos(tok), 264);
        ASSERT_TRUE(encodes_to(tok, " the", 1, IDS(264, 258)));
        ASSERT_STREQ(tok->chat_template, "{{ x }}");
        dse_tokenizer_free(tok);
}

/* gpt2_style.json: the byte_level.json vocabulary and merges, no normalizer, and the
 * GPT-2 pre-tokenizer: ByteLevel with add_prefix_space and its own split regex. */
TEST(byte_level_gpt2_regex_and_prefix_space) {
        struct dse_tokenizer *tok = load_seed("gpt2_style.json");
        ASSERT_TRUE(tok);
        /* " the" | " world" | "'s", each merged by rank */
        ASSERT_TRUE(encodes_to(tok, "the world's", 0, IDS(258, 261, 262, 263, 39, 115)));
        ASSERT_TRUE(encodes_to(tok, "hello", 0, IDS(32, 257, 260)));
        /* the prefix space goes in front of every segment between added tokens */
        ASSERT_TRUE(encodes_to(tok, "a<|end|>b", 0, IDS(32, 97, 264, 32, 98)));
        /* a segment that already starts with a space gets none */
        ASSERT_TRUE(encodes_to(tok, " the", 0, IDS(258)));
        ASSERT_TRUE(decodes_to(tok, IDS(258, 261, 262, 263, 39, 115), " the world's"));
        dse_tokenizer_free(tok);
}

/* sp_style.json: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then ▁ 259, H 260, e 261,
 * l 262, o 263, ▁H 264, ll 265, ▁He 266, llo 267, ▁Hello 268, w 269, r 270, d 271, ▁w 272,
 * or 273, ld 274; merges as ["a", "b"] arrays; Prepend ▁ + Replace ' '→▁; byte fallback;
 * decoder Replace, ByteFallback, Fuse, Strip. */
TEST(sentencepiece_style_byte_fallback) {
        struct dse_tokenizer *tok = load_seed("sp_style.json");
        ASSERT_TRUE(tok);
        ASSERT_TRUE(encodes_to(tok, "Hello world", 0, IDS(268, 272, 273, 274)));
        ASSERT_TRUE(encodes_to(tok, "Hello world", 1, IDS(1, 268, 272, 273, 274)));
        /* é has no entry: its bytes C3 A9 as <0xC3> <0xA9> */
        ASSERT_TRUE(encodes_to(tok, "H\xC3\xA9", 0, IDS(264, 3 + 0xC3, 3 + 0xA9)));
        /* the normalizer runs on each segment after an added token: ▁ again */
        ASSERT_TRUE(encodes_to(tok, "<s>Hello", 0, IDS(1, 268)));
        ASSERT_TRUE(encodes_to(tok, "", 0, NULL, 0));
        ASSERT_TRUE(encodes_to(tok, "", 1, IDS(1)));
        ASSERT_TRUE(decodes_to(tok, IDS(268, 272, 273, 274), "Hello world"));
        ASSERT_TRUE(decodes_to(tok, IDS(1, 268), "<s> Hello"));
        ASSERT_TRUE(decodes_to(tok, IDS(264, 3 + 0xC3, 3 + 0xA9), "H\xC3\xA9"));
        /* an invalid byte run: one U+FFFD per byte (ByteFallback decoder) */
        ASSERT_TRUE(decodes_to(tok, IDS(264, 3 + 0xC3, 3 + 0xC3), "H\xEF\xBF\xBD\xEF\xBF\xBD"));
        dse_tokenizer_free(tok);
}

/* metaspace.json: the sp_style vocabulary with Lowercase + Strip + NFKC normalizers and a
 * Metaspace pre-tokenizer (prepend_scheme first, split) and decoder. */
TEST(metaspace_pretokenizer_and_decoder) {
        struct dse_tokenizer *tok = load_seed("metaspace.json");
        ASSERT_TRUE(tok);
        /* "  HELLO WORLD " -> "hello world" -> "▁hello", "▁world": h is not in the
         * vocabulary (only H), so it falls back to <0x68> */
        ASSERT_TRUE(encodes_to(tok, "  hELLO wORLD ", 0,
                               IDS(259, 3 + 'h', 261, 267, 272, 273, 274)));
        ASSERT_TRUE(decodes_to(tok, IDS(268, 272, 273, 274), "Hello world"));
        dse_tokenizer_free(tok);
}

static int load_error(const char *json, const char *want_in_msg) {
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        int r = dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag);
        if (r >= 0) {
                dse_tokenizer_free(tok);
                fprintf(stderr, "  loaded, expected an error: %s\n", json);
                return 0;
        }
        if (want_in_msg && !strstr(diag.msg, want_in_msg)) {
                fprintf(stderr, "  message \"%s\" does not name \"%s\"\n", diag.msg, want_in_msg);
                return 0;
        }
        return r;
}

#define BPE_MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

TEST(unknown_types_are_eopnotsupp_naming_the_type) {
        ASSERT_EQ(load_error("{" BPE_MODEL ", \"pre_tokenizer\": {\"type\": \"FooSplit\"}}", "FooSplit"), -EOPNOTSUPP);
        ASSERT_EQ(load_error("{" BPE_MODEL ", \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
                             "[{\"type\": \"NFC\"}, {\"type\": \"BertNormalizer\"}]}}",
                             "BertNormalizer"),
                  -EOPNOTSUPP);
        ASSERT_EQ(load_error("{" BPE_MODEL ", \"decoder\": {\"type\": \"CTC\"}}", "CTC"), -EOPNOTSUPP);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", "WordPiece"),
                  -EOPNOTSUPP);
        ASSERT_EQ(load_error("{" BPE_MODEL ", \"post_processor\": {\"type\": \"Weird\"}}", "Weird"), -EOPNOTSUPP);
        ASSERT_EQ(load_error("{" BPE_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
                             "\"behavior\": \"Sideways\"}}",
                             "Sideways"),
                  -EOPNOTSUPP);
}

TEST(malformed_files_are_ebadmsg) {
        ASSERT_EQ(load_error("", "JSON"), -EBADMSG);
        ASSERT_EQ(load_error("{" BPE_MODEL, "JSON"), -EBADMSG);                 /* truncated */
        ASSERT_EQ(load_error("{" BPE_MODEL ",}", "JSON"), -EBADMSG);            /* trailing comma */
        ASSERT_EQ(load_error("{" BPE_MODEL "} x", "trailing"), -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"\xff\"}, \"merges\": []}}", "UTF-8"),
                  -EBADMSG);
        ASSERT_EQ(load_error("[1, 2]", "object"), -EBADMSG);
        ASSERT_EQ(load_error("{\"normalizer\": null}", "model"), -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a c\"]}}", "'c'"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "merges[0]"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", "'a'"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0.5}, \"merges\": []}}", "'a'"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{" BPE_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
                             "\"behavior\": \"Isolated\"}}",
                             "regex"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
                             "\"unk_token\": \"<unk>\"}}",
                             "<unk>"),
                  -EBADMSG);
        /* deep nesting is refused, not a stack overflow */
        char deep[2000];
        memset(deep, '[', sizeof deep - 1);
        deep[sizeof deep - 1] = '\0';
        ASSERT_EQ(load_error(deep, "deep"), -EBADMSG);
}

/* The JSON reader checks UTF-8 while it scans strings, a word at a time: every kind of
 * bad sequence, at every offset within a word, and non-ASCII outside strings. */
TEST(json_utf8_is_checked_inside_strings_at_every_offset) {
        static const char *bad[] = {"\xff", "\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80",
                                    "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe4\xbd", "\xf0\x9f\x98"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                for (int pad = 0; pad < 9; pad++) {
                        char json[256];
                        snprintf(json, sizeof json,
                                 "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"%.*s%s\": 0}, \"merges\": []}}", pad,
                                 "xxxxxxxxx", bad[i]);
                        ASSERT_EQ(load_error(json, "UTF-8"), -EBADMSG);
                }
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []} \xc3\xa9}", "JSON"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\x01\"]}}",
                             "control"),
                  -EBADMSG);
}

/* Valid keys of every length around the 8-byte word, mixing plain runs, multi-byte
 * characters and escapes, decode to their exact bytes. */
TEST(json_strings_decode_exactly_across_word_boundaries) {
        const char *json = "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {"
                           "\"abcdefg\": 0, \"abcdefgh\": 1, \"abcdefghi\": 2, \"\xc4\xa0" "abcdef\\u00e9xyz\\\"q\": 3,"
                           "\"\\ud83d\\ude00abcdefgh\xf0\x9f\x98\x80\\n\": 4, \"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c\": 5,"
                           "\"abcdefghijklmnop\\\\\": 6, \"\": 7}}}";
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        ASSERT_EQ(dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag), 0);
        ASSERT_STREQ(dse_tokenizer_piece(tok, 0), "abcdefg");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 1), "abcdefgh");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 2), "abcdefghi");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 3), "\xc4\xa0" "abcdef\xc3\xa9xyz\"q");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 4), "\xf0\x9f\x98\x80" "abcdefgh\xf0\x9f\x98\x80\n");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 5), "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 6), "abcdefghijklmnop\\");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 7), "");
        dse_tokenizer_free(tok);
}

/* The loader guesses each merge's result id as the one after the previous merge's (the
 * order BPE training writes) and checks the guess against the piece. A wrong guess must
 * fall back to the lookup, and a vocabulary that repeats a key (the last id wins, as in
 * tokenizers' HashMap) must not be fooled by the earlier id's piece. */
TEST(merge_result_ids_match_the_lookup_whatever_the_id_order) {
        struct {
                const char *vocab, *text;
                int32_t want;
        } cases[] = {
                /* consecutive: guesses hold */
                {"\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4", "abc", 4},
                /* shuffled: every guess misses */
                {"\"a\": 0, \"b\": 1, \"c\": 2, \"abc\": 3, \"ab\": 4", "abc", 3},
                /* "abc" twice: the guess (4) names the right piece but the key maps to 5 */
                {"\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4, \"abc\": 5", "abc", 5},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                char json[512];
                snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {%s}, \"merges\": [\"a b\", \"ab c\"]}}",
                         cases[i].vocab);
                struct dse_tokenizer *tok = NULL;
                struct dse_diag diag = {{0}};
                ASSERT_EQ(dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag), 0);
                int32_t ids[8];
                ASSERT_EQ(dse_tokenizer_encode(tok, cases[i].text, strlen(cases[i].text), 0, ids, 8), 1);
                ASSERT_EQ(ids[0], cases[i].want);
                dse_tokenizer_free(tok);
        }
}

TEST(invalid_utf8_text_is_eilseq) {
        struct dse_tokenizer *tok = load_seed("byte_level.json");
        ASSERT_TRUE(tok);
        int32_t ids[16];
        static const char *bad[] = {
                "\xff",             /* never valid */
                "a\x80",            /* lone continuation byte */
                "\xc0\x80",         /* overlong NUL */
                "\xe0\x80\xaf",     /* overlong '/' */
                "\xed\xa0\x80",     /* UTF-16 surrogate */
                "\xf4\x90\x80\x80", /* above U+10FFFF */
                "ok \xe4\xbd",      /* truncated at the end */
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                ASSERT_ERR(dse_tokenizer_encode(tok, bad[i], strlen(bad[i]), 0, ids, 16), -EILSEQ);
        /* NUL and the largest code point are valid */
        ASSERT_EQ(dse_tokenizer_encode(tok, "a\0b", 3, 0, ids, 16), 3);
        ASSERT_EQ(dse_tokenizer_encode(tok, "\xf4\x8f\xbf\xbf", 4, 0, ids, 16), 4);
        dse_tokenizer_free(tok);
}

/* A tokenizer.json whose normalizer (or decoder) is `steps` Replaces of what by eight of
 * it, so every step multiplies the text by up to eight; added: a normalized added token. */
static char *multiplying_chain(const char *stage, const char *what, int steps, int added) {
        static char json[8192];
        int n = snprintf(json, sizeof json, "{%s\"%s\": {\"type\": \"Sequence\", \"%ss\": [",
                         added ? "\"added_tokens\": [{\"id\": 3, \"content\": \"x y\", \"single_word\": false, "
                                 "\"lstrip\": false, \"rstrip\": false, \"normalized\": true, \"special\": false}], "
                               : "",
                         stage, stage);
        for (int i = 0; i < steps; i++)
                n += snprintf(json + n, sizeof json - (size_t)n,
                              "%s{\"type\": \"Replace\", \"pattern\": {\"String\": \"%s\"}, \"content\": "
                              "\"%s%s%s%s%s%s%s%s\"}",
                              i ? ", " : "", what, what, what, what, what, what, what, what, what);
        snprintf(json + n, sizeof json - (size_t)n, "]}, " BPE_MODEL "}");
        return json;
}

/* Such chains grow text eightfold a step (10 steps: a billion times) and would exhaust
 * memory; past 64 times the input plus 4 KiB they are refused: at load for a normalized
 * added token (naming it), -E2BIG at encode and decode. Three steps (512 times) run. */
TEST(multiplying_replace_chains_are_refused_not_run) {
        ASSERT_EQ(load_error(multiplying_chain("normalizer", " ", 10, 1), "'x y'"), -E2BIG);
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        int32_t ids[8];
        const char *json = multiplying_chain("normalizer", " ", 10, 0);
        ASSERT_OK(dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag));
        ASSERT_ERR(dse_tokenizer_encode(tok, "a b", 3, 0, ids, 8), -E2BIG);
        ASSERT_EQ(dse_tokenizer_encode(tok, "ab", 2, 0, ids, 8), 1); /* nothing to replace */
        dse_tokenizer_free(tok);
        json = multiplying_chain("normalizer", " ", 3, 1); /* the added token becomes 514 bytes */
        ASSERT_OK(dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag));
        ASSERT_EQ(dse_tokenizer_encode(tok, "ab", 2, 0, ids, 8), 1);
        dse_tokenizer_free(tok);

        char out[1024];
        json = multiplying_chain("decoder", "a", 10, 0);
        ASSERT_OK(dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag));
        ASSERT_ERR(dse_tokenizer_decode(tok, IDS(0), out, sizeof out), -E2BIG);
        ASSERT_EQ(dse_tokenizer_decode(tok, IDS(1), out, sizeof out), 1); /* "b": nothing to replace */
        dse_tokenizer_free(tok);
        json = multiplying_chain("decoder", "a", 3, 0);
        ASSERT_OK(dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag));
        ASSERT_EQ(dse_tokenizer_decode(tok, IDS(0), out, sizeof out), 512);
        dse_tokenizer_free(tok);
}

/* ---- files tokenizers accepts but that lose text: warnings, naming the entry ---------- */

/* Loads json (must succeed) and returns the warnings it logged. */
static const char *load_warnings(const char *json) {
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        t_log_start(DSE_LOG_WARN);
        int r = dse_tokenizer_load_hf(json, strlen(json), NULL, 0, &tok, &diag);
        t_log_stop();
        if (r < 0) {
                fprintf(stderr, "  load failed: %s\n", diag.msg);
                return NULL;
        }
        dse_tokenizer_free(tok);
        return t_log;
}

#define WARNS(json, want)                                                                                      \
        do {                                                                                                \
                ASSERT_TRUE(load_warnings(json));                                                            \
                T_LOG_HAS(want);                                                                            \
        } while (0)

TEST(vocab_merges_and_added_tokens_invariants) {
        /* errors: no entries, mixed merge forms */
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"added_tokens\": "
                             "[{\"id\": 0, \"content\": \"<s>\"}]}",
                             "model.vocab has no entries"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"abb\": 3}, "
                             "\"merges\": [\"a b\", [\"ab\", \"b\"]]}}",
                             "merges[1] is [\"a\", \"b\"] but merges[0] is \"a b\""),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"abb\": 3}, "
                             "\"merges\": [[\"a\", \"b\"], \"ab b\"]}}",
                             "merges[1] is \"a b\" but merges[0] is [\"a\", \"b\"]"),
                  -EBADMSG);
        ASSERT_EQ(load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                             "\"merges\": [[\"a\", \"b\", \"c\"]]}}",
                             "merges[0] is neither"),
                  -EBADMSG);
        /* warnings: an id given twice, an added token over another token's id */
        WARNS("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 1}, \"merges\": []}}",
              "model.vocab gives 1 ids to more than one entry (the first: id 1, again for 'ab')");
        WARNS("{" BPE_MODEL ", \"added_tokens\": [{\"id\": 2, \"content\": \"<s>\", \"special\": true}]}",
              "added_tokens[0] '<s>' has id 2, which is already 'ab'");
        /* the same content at the same id is how most files list their special tokens */
        ASSERT_STREQ(load_warnings("{" BPE_MODEL ", \"added_tokens\": [{\"id\": 2, \"content\": \"ab\"}]}"), "");
}

TEST(byte_coverage_invariants) {
        /* a ByteLevel pre-tokenizer over a vocabulary without the byte characters */
        WARNS("{" BPE_MODEL ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}}",
              "ByteLevel vocabulary lacks the tokens of 254 of the 256 bytes (the first: byte 0x00, '\xc4\x80')");
        WARNS("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<unk>\": 0, \"<0x00>\": 1, \"a\": 2}, \"merges\": [], "
              "\"byte_fallback\": true, \"unk_token\": \"<unk>\"}}",
              "byte_fallback is set but 255 of the 256 <0xXX> pieces are missing (the first: <0x01>)");
        ASSERT_STREQ(load_warnings("{" BPE_MODEL "}"), "");
}

TEST(fixture_tokenizers_load_without_warnings) {
        static const char *const names[] = {"deepseek_v3", "llama3", "mistral7b", "qwen2_5"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                char path[256];
                snprintf(path, sizeof path, "tokenizers/models/%s/tokenizer.json", names[i]);
                struct dse_tokenizer *tok = NULL;
                t_log_start(DSE_LOG_WARN);
                int r = dse_tokenizer_load_file(t_fixture(path), &tok, NULL);
                t_log_stop();
                if (r == -ENOENT)
                        continue;
                ASSERT_OK(r);
                if (t_log[0])
                        T_FAIL("%s: %s", names[i], t_log);
                dse_tokenizer_free(tok);
        }
}
