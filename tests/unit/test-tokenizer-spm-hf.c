/* A SentencePiece .model with a Hugging Face tokenizer_config.json (tok/spm_hf.c), on
 * the bundled default model's tokenizer. Expected ids come from the rules transformers'
 * LlamaTokenizer follows, with every text segment's ids from Debian's `spm_encode` run
 * here on that segment alone:
 *   legacy=true:  text = seg0 SPECIAL seg1 ... -> spm_encode(seg0) [id] spm_encode(seg1) ...
 *   legacy=false: seg0 gets one "▁" in front, later segments none: their reference is
 *                 spm_encode with a copy of the model whose add_dummy_prefix is false. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dse.h"
#include "t.h"

#define MAX_IDS 256

static char model_path[4096], tmp_dir[64];

/* spm_encode --output_format=id of one line of text with the model at path. Returns
 * the count, or -1. */
static int spm_ref(const char *path, const char *text, int32_t *ids, int max) {
        char in[128], cmd[8192];
        snprintf(in, sizeof in, "%s/in.txt", tmp_dir);
        FILE *f = fopen(in, "w");
        if (!f)
                return -1;
        fprintf(f, "%s\n", text);
        fclose(f);
        snprintf(cmd, sizeof cmd, "spm_encode --model='%s' --output_format=id --input='%s'", path, in);
        FILE *p = popen(cmd, "r");
        if (!p)
                return -1;
        int n = 0, id;
        while (n < max && fscanf(p, "%d", &id) == 1)
                ids[n++] = id;
        return pclose(p) == 0 ? n : -1;
}

/* Appends the reference ids of seg (or the single id when seg is NULL) to want. */
static void want_seg(int32_t *want, int *n_want, const char *path, const char *seg, int32_t id) {
        if (!seg) {
                want[(*n_want)++] = id;
                return;
        }
        int n = spm_ref(path, seg, want + *n_want, MAX_IDS - *n_want);
        if (n < 0) {
                fprintf(stderr, "spm_encode failed on '%s'\n", seg);
                exit(1);
        }
        *n_want += n;
}

static int same_ids(const char *what, const int32_t *got, int n_got, const int32_t *want, int n_want) {
        if (n_got == n_want && memcmp(got, want, (size_t)n_got * sizeof *got) == 0)
                return 1;
        fprintf(stderr, "  %s:\n    got ", what);
        for (int i = 0; i < n_got && i < 40; i++)
                fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n    want");
        for (int i = 0; i < n_want && i < 40; i++)
                fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
        return 0;
}

/* Encodes text and compares with the concatenation of segments: strings are encoded
 * by spm_encode with ref_path, NULL entries stand for the next id of specials. */
#define CHECK_ENCODE(tok, text, add_special, ref_path, segs, specials)                                    \
        do {                                                                                            \
                int32_t got_[MAX_IDS], want_[MAX_IDS];                                                  \
                int n_want_ = 0, k_ = 0;                                                                \
                const char *segs_[] = segs;                                                             \
                const int32_t sp_[] = specials;                                                         \
                for (size_t i_ = 0; i_ < sizeof segs_ / sizeof *segs_; i_++)                            \
                        want_seg(want_, &n_want_, ref_path, segs_[i_], segs_[i_] ? 0 : sp_[k_++]);      \
                int n_got_ = dse_tokenizer_encode(tok, text, strlen(text), add_special, got_, MAX_IDS); \
                ASSERT_OK(n_got_);                                                                      \
                if (!same_ids(text, got_, n_got_, want_, n_want_))                                      \
                        T_FAIL("encode('%s', add_special=%d) differs from the reference", text, add_special); \
        } while (0)
#define L(...) {__VA_ARGS__}

static struct dse_tokenizer *load_model_with_config(const char *path, const char *config) {
        size_t len;
        char *model = slurp(path, &len);
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        int r = model ? dse_tokenizer_load_spm_hf(model, len, config, strlen(config), &tok, &diag) : -1;
        if (r < 0)
                fprintf(stderr, "  load_spm_hf: %d %s\n", r, diag.msg);
        free(model);
        return tok;
}

static struct dse_tokenizer *load_with_config(const char *config) {
        return load_model_with_config(model_path, config);
}

/* The folder's own files, through dse_tokenizer_load_file (sibling config). */
TEST(default_folder_config) {
        struct dse_tokenizer *tok = NULL;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_tokenizer_load_file(model_path, &tok, &diag));
        const char *tmpl = dse_tokenizer_chat_template(tok);
        ASSERT_TRUE(tmpl && strstr(tmpl, "bos_token") && strstr(tmpl, "messages"));
        ASSERT_EQ(dse_tokenizer_bos(tok), 1);
        ASSERT_EQ(dse_tokenizer_eos(tok), 2);
        ASSERT_STREQ(dse_tokenizer_piece(tok, 1), "<s>");
        ASSERT_STREQ(dse_tokenizer_piece(tok, 2), "</s>");

        /* "<s>" then text: [<s>] + the text's pieces (legacy=true). */
        CHECK_ENCODE(tok, "<s>And God said", 0, model_path, L(NULL, "And God said"), L(1));
        /* add_bos_token true, add_eos_token false. */
        CHECK_ENCODE(tok, "And God said", 1, model_path, L(NULL, "And God said"), L(1));
        CHECK_ENCODE(tok, "<s>And God said", 1, model_path, L(NULL, NULL, "And God said"), L(1, 1));
        /* EOS and UNK in text; every segment gets the dummy prefix. */
        CHECK_ENCODE(tok, "And God said</s>", 0, model_path, L("And God said", NULL), L(2));
        CHECK_ENCODE(tok, "In the beginning</s><s>And God said", 0, model_path,
                     L("In the beginning", NULL, NULL, "And God said"), L(2, 1));
        CHECK_ENCODE(tok, "Let there be<unk>light", 0, model_path, L("Let there be", NULL, "light"), L(0));
        CHECK_ENCODE(tok, "<s> And  God</s>", 0, model_path, L(NULL, " And  God", NULL), L(1, 2));
        /* Not a special token: plain text. */
        CHECK_ENCODE(tok, "<s >x</ s>", 0, model_path, L("<s >x</ s>"), L(0));

        char text[64];
        int32_t ids[] = {1, 1, 2};
        ASSERT_EQ(dse_tokenizer_encode(tok, "", 0, 1, NULL, 0), 1); /* just BOS */
        ASSERT_EQ(dse_tokenizer_encode(tok, "<s><s></s>", 10, 0, NULL, 0), 3);
        ASSERT_EQ(dse_tokenizer_decode(tok, ids, 3, text, sizeof text), 0); /* control pieces vanish */
        ASSERT_EQ(dse_tokenizer_encode(tok, "a\xff", 2, 0, NULL, 0), -EILSEQ);
        dse_tokenizer_free(tok);
}

/* Without the config the .model keeps SentencePiece's semantics: "<s>" is text. */
TEST(plain_model_keeps_spm_semantics) {
        size_t len;
        char *model = slurp(model_path, &len);
        ASSERT_TRUE(model);
        struct dse_tokenizer *tok = NULL;
        int r = dse_tokenizer_load_spm(model, len, &tok, NULL);
        free(model);
        ASSERT_OK(r);
        ASSERT_TRUE(dse_tokenizer_chat_template(tok) == NULL);
        CHECK_ENCODE(tok, "<s>And God said</s>", 0, model_path, L("<s>And God said</s>"), L(0));
        dse_tokenizer_free(tok);
}

/* Token objects, lstrip/rstrip, added_tokens_decoder (longest match at the leftmost
 * position), the list form of chat_template. */
TEST(config_forms) {
        struct dse_tokenizer *tok = load_with_config(
                "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": true, \"rstrip\": false},"
                " \"eos_token\": {\"content\": \"</s>\", \"rstrip\": true},"
                " \"add_bos_token\": false, \"add_eos_token\": true,"
                " \"added_tokens_decoder\": {\"7\": {\"content\": \"<s>A\", \"special\": false}},"
                " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                "                     {\"name\": \"default\", \"template\": \"D\"}]}");
        ASSERT_TRUE(tok);
        ASSERT_STREQ(dse_tokenizer_chat_template(tok), "D");
        /* add_bos_token false, add_eos_token true. */
        CHECK_ENCODE(tok, "And God said", 1, model_path, L("And God said", NULL), L(2));
        /* "<s>A" is longer than "<s>" at the same position. */
        CHECK_ENCODE(tok, "<s>And", 0, model_path, L(NULL, "nd"), L(7));
        /* lstrip on <s> eats the spaces before it, rstrip on </s> those after it. */
        CHECK_ENCODE(tok, "light  <s>day", 0, model_path, L("light", NULL, "day"), L(1));
        CHECK_ENCODE(tok, "light</s> \t day", 0, model_path, L("light", NULL, "day"), L(2));
        CHECK_ENCODE(tok, "light </s> day", 0, model_path, L("light ", NULL, "day"), L(2));
        dse_tokenizer_free(tok);

        /* bos_token null: no BOS, "<s>" is text again; eos/unk keep their defaults. */
        tok = load_with_config("{\"bos_token\": null}");
        ASSERT_TRUE(tok);
        ASSERT_EQ(dse_tokenizer_bos(tok), -1);
        ASSERT_EQ(dse_tokenizer_eos(tok), 2);
        ASSERT_TRUE(dse_tokenizer_chat_template(tok) == NULL);
        CHECK_ENCODE(tok, "<s>And</s>", 1, model_path, L("<s>And", NULL), L(2));
        dse_tokenizer_free(tok);

        struct dse_diag diag = {{0}};
        size_t len;
        char *model = slurp(model_path, &len);
        ASSERT_TRUE(model);
        static const char *const bad[] = {
                "{\"bos_token\": \"<nope>\"}",
                "{\"bos_token\": 3.5}",
                "{\"legacy\": \"yes\"}",
                "{\"added_tokens_decoder\": {\"4000\": {\"content\": \"x\"}}}",
                "{\"chat_template\": [{\"name\": \"a\", \"template\": \"x\"}, {\"name\": \"b\", \"template\": \"y\"}]}",
                "[1]",
                "{\"bos_token\": ",
        };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                tok = NULL;
                int r = dse_tokenizer_load_spm_hf(model, len, bad[i], strlen(bad[i]), &tok, &diag);
                if (r != -EBADMSG) {
                        dse_tokenizer_free(tok);
                        free(model);
                        T_FAIL("config %s: %d, expected -EBADMSG", bad[i], r);
                }
        }
        const char *sw = "{\"added_tokens_decoder\": {\"5\": {\"content\": \"x\", \"single_word\": true}}}";
        int r = dse_tokenizer_load_spm_hf(model, len, sw, strlen(sw), &tok, &diag);
        free(model);
        ASSERT_EQ(r, -EOPNOTSUPP);
}

/* Reads a protobuf varint at *p; -1 past end. */
static long long varint(const unsigned char *buf, size_t len, size_t *p) {
        unsigned long long v = 0;
        for (int shift = 0; *p < len && shift < 64; shift += 7) {
                unsigned char b = buf[(*p)++];
                v |= (unsigned long long)(b & 0x7f) << shift;
                if (!(b & 0x80))
                        return (long long)v;
        }
        return -1;
}

/* Writes a copy of the model with NormalizerSpec.add_dummy_prefix (ModelProto field 3,
 * its field 3) set to false; 0 on success. */
static int write_bare_model(const char *in, const char *out) {
        size_t len;
        unsigned char *m = (unsigned char *)slurp(in, &len);
        int done = -1;
        for (size_t p = 0; m && p < len && done < 0;) {
                long long key = varint(m, len, &p);
                if (key < 0 || (key & 7) != 2)
                        break; /* every top-level ModelProto field is length-delimited */
                long long n = varint(m, len, &p);
                if (n < 0 || (size_t)n > len - p)
                        break;
                for (size_t q = p; key >> 3 == 3 && q < p + (size_t)n;) {
                        long long k = varint(m, p + (size_t)n, &q);
                        if (k < 0)
                                break;
                        if ((k & 7) == 0) {
                                size_t at = q;
                                long long v = varint(m, p + (size_t)n, &q);
                                if (k >> 3 == 3 && v == 1 && q == at + 1) {
                                        m[at] = 0;
                                        done = 0;
                                }
                        } else if ((k & 7) == 2) {
                                long long l = varint(m, p + (size_t)n, &q);
                                q += l < 0 ? p + (size_t)n : (size_t)l;
                        } else {
                                break;
                        }
                }
                p += (size_t)n;
        }
        FILE *f = done == 0 ? fopen(out, "wb") : NULL;
        if (f) {
                done = fwrite(m, 1, len, f) == len ? 0 : -1;
                fclose(f);
        } else {
                done = -1;
        }
        free(m);
        return done;
}

/* legacy=false: one "▁" at the start of the text, none after special tokens. */
TEST(non_legacy) {
        char bare[128];
        snprintf(bare, sizeof bare, "%s/bare.model", tmp_dir);
        ASSERT_OK(write_bare_model(model_path, bare));
        /* The patched copy really lacks the dummy prefix: "And" alone differs. */
        int32_t a[8], b[8];
        int na = spm_ref(model_path, "And", a, 8), nb = spm_ref(bare, "And", b, 8);
        ASSERT_TRUE(na > 0 && nb > 0 && (na != nb || memcmp(a, b, (size_t)na * sizeof *a) != 0));

        struct dse_tokenizer *tok = load_with_config("{\"legacy\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
        ASSERT_TRUE(tok);
        CHECK_ENCODE(tok, "And God said", 0, model_path, L("And God said"), L(0));
        CHECK_ENCODE(tok, "And God said", 1, model_path, L(NULL, "And God said"), L(1));
        /* "▁<s>And": the lone "▁" before <s> is dropped, "And" gets no prefix. */
        CHECK_ENCODE(tok, "<s>And God said", 0, bare, L(NULL, "And God said"), L(1));
        CHECK_ENCODE(tok, "In the beginning</s>And God", 0, bare, L(" In the beginning", NULL, "And God"), L(2));
        /* A segment starting with a space keeps it as "▁" (the unk_token trick). */
        CHECK_ENCODE(tok, "<s> And", 0, bare, L(NULL, " And"), L(1));
        dse_tokenizer_free(tok);
}

/* legacy=false on a model that removes extra whitespace (the sp_unigram fixture,
 * nmt_nfkc): a segment after a special token that starts with a space is encoded as
 * unk_token + segment and the unk_token's ids dropped, so its leading "▁" survives. */
TEST(non_legacy_unk_prefix) {
        char src[4096], bare[128];
        const char *fx = getenv("DSV_FIXTURES");
        snprintf(src, sizeof src, "%s/tokenizers/models/sp_unigram/sp_unigram.model", fx ? fx : "../shared/fixtures");
        snprintf(bare, sizeof bare, "%s/bare.model", tmp_dir);
        ASSERT_OK(write_bare_model(src, bare));
        struct dse_tokenizer *tok = load_model_with_config(src, "{\"legacy\": false}");
        ASSERT_TRUE(tok);
        ASSERT_STREQ(dse_tokenizer_piece(tok, 1), "<s>");
        int32_t want[MAX_IDS], unk[MAX_IDS], got[MAX_IDS];
        int n_unk = spm_ref(bare, "<unk>", unk, MAX_IDS);
        want[0] = 1;
        int n_want = spm_ref(bare, "<unk> Hello world", want + 1, MAX_IDS - 1);
        ASSERT_TRUE(n_unk > 0 && n_want > n_unk);
        memmove(want + 1, want + 1 + n_unk, (size_t)(n_want - n_unk) * sizeof *want);
        n_want = 1 + n_want - n_unk;
        int n_got = dse_tokenizer_encode(tok, "<s> Hello world", 15, 0, got, MAX_IDS);
        ASSERT_OK(n_got);
        ASSERT_TRUE(same_ids("<s> Hello world", got, n_got, want, n_want));
        /* Without the trick the space would be stripped: the pieces differ. */
        int32_t plain[MAX_IDS];
        int n_plain = spm_ref(bare, " Hello world", plain, MAX_IDS);
        ASSERT_TRUE(n_plain != n_want - 1 || memcmp(plain, want + 1, (size_t)n_plain * sizeof *plain) != 0);
        dse_tokenizer_free(tok);
}

/* The model path and a scratch folder for spm_encode's input, before the tests run. */
__attribute__((constructor)) static void setup(void) {
        const char *src = getenv("DSV_SOURCE_DIR");
        snprintf(model_path, sizeof model_path, "%s/models/default/tokenizer.model", src ? src : ".");
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test-spm-hf.XXXXXX");
        if (!mkdtemp(tmp_dir)) {
                perror("mkdtemp");
                exit(1);
        }
}

__attribute__((destructor)) static void teardown(void) {
        char path[128];
        static const char *const files[] = {"in.txt", "bare.model"};
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
                snprintf(path, sizeof path, "%s/%s", tmp_dir, files[i]);
                unlink(path);
        }
        rmdir(tmp_dir);
}
