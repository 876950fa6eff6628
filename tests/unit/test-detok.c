/* Streaming detokenization with real fixture tokenizers: the reference ids of
 * encodings/<name>.jsonl streamed one at a time give chunks that are each valid UTF-8
 * and concatenate to the reference `decoded` text; stop strings split across tokens (and
 * across the bytes of one character) stop the stream without leaking into it. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "dse.h"
#include "t.h"

static int utf8_valid(const char *s, size_t n) {
        const unsigned char *u = (const unsigned char *)s;
        for (size_t i = 0; i < n;) {
                int len = u[i] < 0x80 ? 1 : u[i] >= 0xC2 && u[i] <= 0xDF ? 2 : u[i] >= 0xE0 && u[i] <= 0xEF ? 3
                                                                     : u[i] >= 0xF0 && u[i] <= 0xF4 ? 4 : 0;
                if (!len || i + (size_t)len > n)
                        return 0;
                for (int k = 1; k < len; k++)
                        if ((u[i + k] & 0xC0) != 0x80)
                                return 0;
                i += (size_t)len;
        }
        return 1;
}

static struct dse_tokenizer *load(const char *name) {
        char rel[256];
        if (strncmp(name, "sp_", 3) == 0)
                snprintf(rel, sizeof rel, "tokenizers/models/%s/%s.model", name, name);
        else
                snprintf(rel, sizeof rel, "tokenizers/models/%s/tokenizer.json", name);
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        if (dse_tokenizer_load_file(t_fixture(rel), &tok, &diag) < 0) {
                fprintf(stderr, "  %s: %s\n", name, diag.msg);
                return NULL;
        }
        return tok;
}

struct stream_result {
        char text[65536];
        size_t len;
        int bad_chunk;  /* a chunk that was not valid UTF-8 */
        int held;       /* pushes that returned nothing while more text came later */
        int stopped;
};

/* Streams ids through a detokenizer; collects the output. */
static int stream(struct dse_tokenizer *tok, const int32_t *ids, size_t n, const char *const *stops, size_t n_stops,
                  struct stream_result *res) {
        struct dse_detok *d;
        int r = dse_detok_new(tok, stops, n_stops, &d, NULL);
        if (r < 0)
                return r;
        memset(res, 0, sizeof *res);
        int pending_empty = 0;
        for (size_t i = 0; i < n && !res->stopped; i++) {
                const char *chunk;
                r = dse_detok_push(d, ids[i], &chunk, &res->stopped);
                if (r < 0)
                        break;
                if (!utf8_valid(chunk, (size_t)r))
                        res->bad_chunk = 1;
                if (r == 0)
                        pending_empty++;
                else {
                        res->held += pending_empty;
                        pending_empty = 0;
                }
                if (res->len + (size_t)r < sizeof res->text) {
                        memcpy(res->text + res->len, chunk, (size_t)r);
                        res->len += (size_t)r;
                }
        }
        if (r >= 0) {
                const char *chunk;
                r = dse_detok_flush(d, &chunk);
                if (r >= 0) {
                        if (!utf8_valid(chunk, (size_t)r))
                                res->bad_chunk = 1;
                        if (res->len + (size_t)r < sizeof res->text) {
                                memcpy(res->text + res->len, chunk, (size_t)r);
                                res->len += (size_t)r;
                        }
                }
        }
        res->text[res->len] = '\0';
        dse_detok_free(d);
        return r < 0 ? r : 0;
}

/* Every case of encodings/<name>.jsonl in the given categories (NULL: all). */
static void check_corpus(const char *name, const char *const *categories) {
        struct dse_tokenizer *tok = load(name);
        if (!tok)
                T_FAIL("%s: tokenizer did not load", name);
        char rel[256];
        snprintf(rel, sizeof rel, "tokenizers/encodings/%s.jsonl", name);
        FILE *f = fopen(t_fixture(rel), "r");
        FILE *corpus = fopen(t_fixture("tokenizers/corpus.jsonl"), "r");
        if (!f || !corpus)
                T_FAIL("%s: cannot open the encodings or the corpus", name);
        static char line[1 << 20], cline[1 << 20];
        static struct stream_result res;
        int total = 0, agree = 0, held = 0;
        while (fgets(line, sizeof line, f) && fgets(cline, sizeof cline, corpus)) {
                cJSON *c = cJSON_Parse(line), *cc = cJSON_Parse(cline);
                const char *cat = cJSON_GetObjectItemCaseSensitive(cc, "category")->valuestring;
                int wanted = !categories;
                for (const char *const *k = categories; k && *k; k++)
                        wanted |= strcmp(*k, cat) == 0;
                const cJSON *ids = cJSON_GetObjectItemCaseSensitive(c, "ids");
                const char *want = cJSON_GetObjectItemCaseSensitive(c, "decoded")->valuestring;
                int n = cJSON_GetArraySize(ids);
                if (wanted && n > 0 && n < 4096) {
                        static int32_t buf[4096];
                        for (int i = 0; i < n; i++)
                                buf[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valueint;
                        total++;
                        int r = stream(tok, buf, (size_t)n, NULL, 0, &res);
                        if (r < 0)
                                fprintf(stderr, "  %s %s: %s\n", name, cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring,
                                        strerror(-r));
                        else if (res.bad_chunk)
                                fprintf(stderr, "  %s %s: a chunk is not valid UTF-8\n", name,
                                        cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring);
                        else if (strcmp(res.text, want) != 0)
                                fprintf(stderr, "  %s %s: streamed \"%.60s\" != decoded \"%.60s\"\n", name,
                                        cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring, res.text, want);
                        else
                                agree++;
                        held += res.held;
                }
                cJSON_Delete(c);
                cJSON_Delete(cc);
        }
        fclose(f);
        fclose(corpus);
        dse_tokenizer_free(tok);
        printf("%s: %d/%d streamed cases equal the reference decode (%d pushes held a partial character)\n", name,
               agree, total, held);
        if (total == 0 || agree != total)
                T_FAIL("%s: %d of %d cases differ", name, total - agree, total);
}

static const char *const unicode_categories[] = {"cjk", "emoji", "combining", NULL};

TEST(stream_deepseek_v3) { check_corpus("deepseek_v3", unicode_categories); }
TEST(stream_qwen2_5) { check_corpus("qwen2_5", unicode_categories); }
TEST(stream_mistral7b_byte_fallback) { check_corpus("mistral7b", NULL); }
TEST(stream_sp_bpe) { check_corpus("sp_bpe", unicode_categories); }

/* Encodes text with the tokenizer (no special tokens). */
static int encode(struct dse_tokenizer *tok, const char *text, int32_t *ids, size_t max) {
        return dse_tokenizer_encode(tok, text, strlen(text), 0, ids, max);
}

/* How many tokens the first occurrence of s in decode(ids) spans. */
static int tokens_spanned(struct dse_tokenizer *tok, const int32_t *ids, int n, const char *s) {
        char full[4096];
        int len = dse_tokenizer_decode(tok, ids, (size_t)n, full, sizeof full - 1);
        full[len > 0 ? len : 0] = '\0';
        const char *at = strstr(full, s);
        if (!at)
                return 0;
        size_t from = (size_t)(at - full), to = from + strlen(s);
        int first = -1, last = -1;
        for (int i = 1; i <= n; i++) {
                char pre[4096];
                int pl = dse_tokenizer_decode(tok, ids, (size_t)i, pre, sizeof pre);
                if (first < 0 && (size_t)pl > from)
                        first = i - 1;
                if (last < 0 && (size_t)pl >= to)
                        last = i - 1;
        }
        return last - first + 1;
}

TEST(stop_string_across_tokens) {
        struct dse_tokenizer *tok = load("qwen2_5");
        ASSERT_TRUE(tok);
        int32_t ids[256];
        static struct stream_result res;
        const char *text = "The answer is 42.\nUser: and now something else";
        int n = encode(tok, text, ids, 256);
        ASSERT_TRUE(n > 0);
        const char *stops[] = {"never appears", "\nUser:"};
        ASSERT_TRUE(tokens_spanned(tok, ids, n, "\nUser:") >= 2);
        ASSERT_OK(stream(tok, ids, (size_t)n, stops, 2, &res));
        ASSERT_EQ(res.stopped, 1);
        ASSERT_EQ(res.bad_chunk, 0);
        ASSERT_STREQ(res.text, "The answer is 42.");

        /* A prefix of a stop string that then diverges is released in full. */
        text = "Use the User interface\nUsually it works";
        n = encode(tok, text, ids, 256);
        ASSERT_OK(stream(tok, ids, (size_t)n, stops, 2, &res));
        ASSERT_EQ(res.stopped, 0);
        ASSERT_STREQ(res.text, text);

        /* The earliest of several stop strings wins. */
        const char *two[] = {"C D", "B"};
        text = "A B C D E";
        n = encode(tok, text, ids, 256);
        ASSERT_OK(stream(tok, ids, (size_t)n, two, 2, &res));
        ASSERT_EQ(res.stopped, 1);
        ASSERT_STREQ(res.text, "A ");
        dse_tokenizer_free(tok);
}

TEST(stop_string_inside_byte_fallback_characters) {
        /* mistral7b spells rare CJK characters as <0xXX> byte tokens: the stop string ends
         * in the middle of such a run. */
        struct dse_tokenizer *tok = load("mistral7b");
        ASSERT_TRUE(tok);
        int32_t ids[256];
        static struct stream_result res;
        const char *text = "ok 龘齉靐 then 靑讌 end";
        int n = encode(tok, text, ids, 256);
        ASSERT_TRUE(n > 0);
        int byte_tokens = 0;
        for (int i = 0; i < n; i++) {
                const char *piece = dse_tokenizer_piece(tok, ids[i]);
                byte_tokens += piece && strncmp(piece, "<0x", 3) == 0;
        }
        ASSERT_TRUE(byte_tokens >= 3);
        const char *stops[] = {"靐 th"};
        ASSERT_OK(stream(tok, ids, (size_t)n, stops, 1, &res));
        ASSERT_EQ(res.stopped, 1);
        ASSERT_EQ(res.bad_chunk, 0);
        ASSERT_STREQ(res.text, "ok 龘齉");
        dse_tokenizer_free(tok);
}

TEST(flush_gives_up_incomplete_bytes) {
        struct dse_tokenizer *tok = load("mistral7b");
        ASSERT_TRUE(tok);
        int32_t ids[16];
        int n = encode(tok, "a", ids, 16);
        ASSERT_TRUE(n >= 1);
        int32_t lead = -1; /* the byte token <0xE4>: the first of three bytes */
        for (int32_t id = 0; id < 300 && lead < 0; id++) {
                const char *piece = dse_tokenizer_piece(tok, id);
                if (piece && strcmp(piece, "<0xE4>") == 0)
                        lead = id;
        }
        ASSERT_TRUE(lead >= 0);
        struct dse_detok *d;
        const char *text;
        int stopped = 0;
        ASSERT_OK(dse_detok_new(tok, NULL, 0, &d, NULL));
        ASSERT_EQ(dse_detok_push(d, ids[n - 1], &text, &stopped), 1);
        ASSERT_EQ(dse_detok_push(d, lead, &text, &stopped), 0); /* held */
        int r = dse_detok_flush(d, &text);
        ASSERT_EQ(r, 3);
        ASSERT_TRUE(memcmp(text, "\xEF\xBF\xBD", 3) == 0); /* U+FFFD, as the lossy decode gives */
        ASSERT_ERR(dse_detok_push(d, -1, &text, &stopped), -EINVAL);
        ASSERT_ERR(dse_detok_push(d, dse_tokenizer_n_vocab(tok), &text, &stopped), -EINVAL);
        dse_detok_free(d);
        const char *empty[] = {""};
        ASSERT_ERR(dse_detok_new(tok, empty, 1, &d, NULL), -EINVAL);
        dse_tokenizer_free(tok);
}

/* Random id streams, rich in byte-fallback ids (most of them invalid UTF-8): every chunk
 * is valid UTF-8, a stop string never appears in the output, and when the full decode is
 * valid UTF-8 the stream reproduces it. */
TEST(random_ids_keep_invariants) {
        struct dse_tokenizer *tok = load("mistral7b");
        ASSERT_TRUE(tok);
        int n_vocab = dse_tokenizer_n_vocab(tok);
        uint64_t x = 12345;
        static struct stream_result res;
        static char full[65536];
        int exact = 0, valid_full = 0;
        const char *stops[] = {"e ", "\xE4\xBD\xA0"};
        for (int trial = 0; trial < 300; trial++) {
                int32_t ids[64];
                int n = 1 + (int)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 59) * 2;
                for (int i = 0; i < n; i++) {
                        x = x * 6364136223846793005ull + 1442695040888963407ull;
                        uint32_t r = (uint32_t)(x >> 33);
                        ids[i] = r % 3 ? 3 + (int32_t)(r / 3 % 256) : (int32_t)(r / 3 % (uint32_t)n_vocab);
                }
                ASSERT_OK(stream(tok, ids, (size_t)n, NULL, 0, &res));
                ASSERT_EQ(res.bad_chunk, 0);
                int len = dse_tokenizer_decode(tok, ids, (size_t)n, full, sizeof full - 1);
                ASSERT_TRUE(len >= 0 && len < (int)sizeof full);
                full[len] = '\0';
                if (utf8_valid(full, (size_t)len) && !strstr(full, "\xEF\xBF\xBD")) {
                        valid_full++;
                        if (strcmp(res.text, full) != 0)
                                T_FAIL("trial %d: streamed \"%s\" != decoded \"%s\"", trial, res.text, full);
                        exact++;
                }
                ASSERT_OK(stream(tok, ids, (size_t)n, stops, 2, &res));
                ASSERT_EQ(res.bad_chunk, 0);
                ASSERT_TRUE(strstr(res.text, stops[0]) == NULL && strstr(res.text, stops[1]) == NULL);
        }
        printf("random streams: %d of 300 decode to valid UTF-8 and stream exactly\n", exact);
        ASSERT_TRUE(valid_full > 10);
        dse_tokenizer_free(tok);
}
