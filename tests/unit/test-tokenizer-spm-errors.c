/* SentencePiece .model loading on malformed input, and invalid UTF-8 in the text:
 * every failure is a clear negative errno with a message, never a crash. Small models
 * are written here with a minimal protobuf writer so each case breaks exactly one thing.
 * The expected ids and texts of the small valid models below were checked by writing the
 * same bytes to a file and running spm_encode/spm_decode (SentencePiece 0.1.97) on it. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dse.h"
#include "t.h"
#include "test-log-capture.h"

/* ---- a minimal protobuf writer ---------------------------------------------------- */

struct pbw {
        uint8_t buf[8192];
        size_t n;
};

static void w_raw(struct pbw *w, const void *p, size_t n) {
        if (w->n + n <= sizeof w->buf) {
                memcpy(w->buf + w->n, p, n);
                w->n += n;
        }
}

static void w_varint(struct pbw *w, uint64_t v) {
        do {
                uint8_t b = (uint8_t)(v & 0x7f);
                v >>= 7;
                if (v)
                        b |= 0x80;
                w_raw(w, &b, 1);
        } while (v);
}

static void w_key(struct pbw *w, unsigned field, unsigned wire) {
        w_varint(w, (uint64_t)field << 3 | wire);
}

static void w_bytes(struct pbw *w, unsigned field, const void *p, size_t n) {
        w_key(w, field, 2);
        w_varint(w, n);
        w_raw(w, p, n);
}

static void w_uint(struct pbw *w, unsigned field, uint64_t v) {
        w_key(w, field, 0);
        w_varint(w, v);
}

static void w_float(struct pbw *w, unsigned field, float f) {
        w_key(w, field, 5);
        w_raw(w, &f, 4);
}

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

static void w_piece(struct pbw *w, const char *piece, float score, int type) {
        struct pbw p = {.n = 0};
        w_bytes(&p, 1, piece, strlen(piece));
        w_float(&p, 2, score);
        w_uint(&p, 3, (uint64_t)type);
        w_bytes(w, 1, p.buf, p.n);
}

/* TrainerSpec: model_type, byte_fallback; NormalizerSpec: identity, dummy prefix on,
 * no whitespace removal (the Llama-2 settings). */
static void w_specs(struct pbw *w, int model_type, bool byte_fallback) {
        struct pbw t = {.n = 0}, n = {.n = 0};
        w_uint(&t, 3, (uint64_t)model_type);
        w_uint(&t, 35, byte_fallback);
        w_uint(&t, 40, 0);
        w_uint(&t, 41, 1);
        w_uint(&t, 42, 2);
        w_bytes(w, 2, t.buf, t.n);
        w_bytes(&n, 1, "identity", 8);
        w_uint(&n, 3, 1);
        w_uint(&n, 4, 0);
        w_bytes(w, 3, n.buf, n.n);
}

/* A small valid BPE model: <unk> <s> </s>, the 256 byte pieces when byte_fallback, then
 * "▁", "a", "b", "▁a", "ab". */
static void w_small_model(struct pbw *w, bool byte_fallback) {
        w_piece(w, "<unk>", 0, UNKNOWN);
        w_piece(w, "<s>", 0, CONTROL);
        w_piece(w, "</s>", 0, CONTROL);
        if (byte_fallback)
                for (int b = 0; b < 256; b++) {
                        char name[8];
                        snprintf(name, sizeof name, "<0x%02X>", b);
                        w_piece(w, name, 0, BYTE);
                }
        w_piece(w, "\xe2\x96\x81", -1, NORMAL);
        w_piece(w, "a", -2, NORMAL);
        w_piece(w, "b", -3, NORMAL);
        w_piece(w, "\xe2\x96\x81" "a", -4, NORMAL);
        w_piece(w, "ab", -5, NORMAL);
        w_specs(w, 2, byte_fallback);
}

static int load(const struct pbw *w, struct dse_diag *diag, struct dse_tokenizer **ret) {
        memset(diag, 0, sizeof *diag);
        return dse_tokenizer_load_spm(w->buf, w->n, ret, diag);
}

/* Loading must fail with err and say why. */
#define ASSERT_LOAD_FAILS(w, err)                                                     \
        do {                                                                          \
                struct dse_diag d_;                                                   \
                struct dse_tokenizer *tok_ = NULL;                                    \
                ASSERT_ERR(load((w), &d_, &tok_), (err));                             \
                ASSERT_TRUE(tok_ == NULL);                                            \
                ASSERT_TRUE(d_.msg[0] != '\0');                                       \
                fprintf(stderr, "    (%s)\n", d_.msg);                                \
        } while (0)

TEST(small_model_loads_and_encodes) {
        struct pbw w = {.n = 0};
        w_small_model(&w, true);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        ASSERT_OK(load(&w, &d, &tok));
        ASSERT_EQ(dse_tokenizer_n_vocab(tok), 3 + 256 + 5);
        /* "ab a" -> "▁ab▁a": merges by score: "▁a" (-4) beats "ab" (-5), so
         * ▁a|b|▁a; 'c' is unknown and falls back to its byte <0x63> (id 3 + 0x63). */
        int32_t ids[16];
        int n = dse_tokenizer_encode(tok, "ab ac", 5, 0, ids, 16);
        ASSERT_EQ(n, 4);
        ASSERT_STREQ(dse_tokenizer_piece(tok, ids[0]), "\xe2\x96\x81" "a");
        ASSERT_STREQ(dse_tokenizer_piece(tok, ids[1]), "b");
        ASSERT_STREQ(dse_tokenizer_piece(tok, ids[2]), "\xe2\x96\x81" "a");
        ASSERT_EQ(ids[3], 3 + 0x63);
        char out[32];
        ASSERT_EQ(dse_tokenizer_decode(tok, ids, 4, out, sizeof out), 5);
        ASSERT_TRUE(memcmp(out, "ab ac", 5) == 0);
        dse_tokenizer_free(tok);
}

/* sentencepiece_processor.cc Decode: control pieces are invisible, a byte that starts
 * no valid UTF-8 character is U+FFFD, bytes of one character fuse, <unk> is " ⁇ ". */
TEST(decode_bytes_control_unknown) {
        struct pbw w = {.n = 0};
        w_small_model(&w, true);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        ASSERT_OK(load(&w, &d, &tok));
        /* <s> ▁a <0xC3> <0xA9> <0xFF> </s> <unk> */
        int32_t ids[] = {1, 3 + 256 + 3, 3 + 0xc3, 3 + 0xa9, 3 + 0xff, 2, 0};
        char out[64];
        int n = dse_tokenizer_decode(tok, ids, 7, out, sizeof out);
        const char want[] = "a\xc3\xa9\xef\xbf\xbd \xe2\x81\x87 ";
        ASSERT_EQ(n, (int)strlen(want));
        ASSERT_TRUE(memcmp(out, want, strlen(want)) == 0);
        dse_tokenizer_free(tok);
}

/* Without byte fallback a run of unknown characters is one <unk>. */
TEST(unknown_run_is_one_unk) {
        struct pbw w = {.n = 0};
        w_small_model(&w, false);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        ASSERT_OK(load(&w, &d, &tok));
        int32_t ids[16];
        int n = dse_tokenizer_encode(tok, "axyz", 4, 0, ids, 16);
        ASSERT_EQ(n, 2);
        ASSERT_STREQ(dse_tokenizer_piece(tok, ids[0]), "\xe2\x96\x81" "a");
        ASSERT_EQ(ids[1], 0);
        dse_tokenizer_free(tok);
}

/* bpe_model.cc: an UNUSED piece still takes part in merging, but if it survives it is
 * split back into the two symbols it was merged from. */
TEST(bpe_unused_piece_is_resegmented) {
        struct pbw w = {.n = 0};
        w_piece(&w, "<unk>", 0, UNKNOWN);
        w_piece(&w, "\xe2\x96\x81", -5, NORMAL);
        w_piece(&w, "a", -6, NORMAL);
        w_piece(&w, "b", -7, NORMAL);
        w_piece(&w, "c", -8, NORMAL);
        w_piece(&w, "ab", -1, UNUSED);
        w_piece(&w, "abc", -2, NORMAL);
        w_specs(&w, 2, false);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        ASSERT_OK(load(&w, &d, &tok));
        int32_t ids[8];
        /* "▁ab": a+b merge into the unused "ab", which comes back out as a, b */
        ASSERT_EQ(dse_tokenizer_encode(tok, "ab", 2, 0, ids, 8), 3);
        ASSERT_EQ(ids[0], 1);
        ASSERT_EQ(ids[1], 2);
        ASSERT_EQ(ids[2], 3);
        /* "▁abc": through "ab" to the normal "abc" */
        ASSERT_EQ(dse_tokenizer_encode(tok, "abc", 3, 0, ids, 8), 2);
        ASSERT_EQ(ids[0], 1);
        ASSERT_EQ(ids[1], 6);
        dse_tokenizer_free(tok);
}

/* Cutting a real model inside its last field fails; cutting it anywhere either fails
 * with -EBADMSG or (at a field boundary) loads a shorter valid model. */
TEST(truncated_file) {
        size_t len;
        char *model = slurp(t_fixture("tokenizers/models/sp_bpe/sp_bpe.model"), &len);
        ASSERT_TRUE(model);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        size_t cuts[] = {1, 2, 3, len / 2 + 1, len - 2, len - 1};
        int fails = 0;
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
                memset(&d, 0, sizeof d);
                int r = dse_tokenizer_load_spm(model, cuts[i], &tok, &d);
                if (r == 0) {
                        dse_tokenizer_free(tok);
                        continue;
                }
                if (r != -EBADMSG || !d.msg[0]) {
                        free(model);
                        T_FAIL("cut at %zu: %d (%s)", cuts[i], r, d.msg);
                }
                fails++;
        }
        /* 1-3 bytes end inside the first field; len-1 and len-2 inside the last one. */
        ASSERT_TRUE(fails >= 5);
        for (size_t cut = 0; cut < len; cut += 61) {
                int r = dse_tokenizer_load_spm(model, cut, &tok, NULL);
                if (r == 0)
                        dse_tokenizer_free(tok);
                else if (r != -EBADMSG) {
                        free(model);
                        T_FAIL("cut at %zu: %s", cut, strerror(-r));
                }
        }
        free(model);
}

TEST(bad_varint) {
        struct pbw w = {.n = 0};
        w_small_model(&w, false);
        /* an 11-byte key varint */
        for (int i = 0; i < 10; i++)
                w_raw(&w, "\xff", 1);
        w_raw(&w, "\x01", 1);
        ASSERT_LOAD_FAILS(&w, -EBADMSG);

        struct pbw v = {.n = 0};
        w_small_model(&v, false);
        /* a varint whose 10th byte overflows 64 bits */
        w_key(&v, 99, 0);
        w_raw(&v, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10);
        ASSERT_LOAD_FAILS(&v, -EBADMSG);

        struct pbw u = {.n = 0};
        w_small_model(&u, false);
        w_key(&u, 99, 0);
        w_raw(&u, "\x80\x80", 2); /* runs off the end */
        ASSERT_LOAD_FAILS(&u, -EBADMSG);
}

TEST(length_past_end) {
        struct pbw w = {.n = 0};
        w_small_model(&w, false);
        w_key(&w, 1, 2);
        w_varint(&w, 1000);
        w_raw(&w, "\x0a\x01x", 3);
        ASSERT_LOAD_FAILS(&w, -EBADMSG);

        /* a length that passes the end of the enclosing piece message, not the file */
        struct pbw p = {.n = 0}, inner = {.n = 0};
        w_key(&inner, 1, 2);
        w_varint(&inner, 40);
        w_raw(&inner, "<unk>", 5);
        w_bytes(&p, 1, inner.buf, inner.n);
        w_small_model(&p, false);
        ASSERT_LOAD_FAILS(&p, -EBADMSG);
}

TEST(wrong_wire_types) {
        struct pbw w = {.n = 0};
        w_uint(&w, 1, 5); /* pieces as a varint */
        w_small_model(&w, false);
        ASSERT_LOAD_FAILS(&w, -EBADMSG);

        struct pbw s = {.n = 0}, piece = {.n = 0};
        w_bytes(&piece, 1, "x", 1);
        w_uint(&piece, 2, 3); /* score as a varint instead of fixed32 */
        w_bytes(&s, 1, piece.buf, piece.n);
        w_small_model(&s, false);
        ASSERT_LOAD_FAILS(&s, -EBADMSG);

        struct pbw t = {.n = 0}, trainer = {.n = 0};
        w_bytes(&trainer, 3, "x", 1); /* model_type as bytes */
        w_small_model(&t, false);
        w_bytes(&t, 2, trainer.buf, trainer.n);
        ASSERT_LOAD_FAILS(&t, -EBADMSG);

        struct pbw g = {.n = 0};
        w_small_model(&g, false);
        w_key(&g, 7, 3); /* a (deprecated) group */
        ASSERT_LOAD_FAILS(&g, -EBADMSG);

        struct pbw z = {.n = 0};
        w_small_model(&z, false);
        w_raw(&z, "\x00", 1); /* field number 0 */
        ASSERT_LOAD_FAILS(&z, -EBADMSG);
}

TEST(no_pieces) {
        struct pbw w = {.n = 0};
        w_specs(&w, 2, false);
        ASSERT_LOAD_FAILS(&w, -EBADMSG);
        struct pbw e = {.n = 0};
        ASSERT_LOAD_FAILS(&e, -EBADMSG);
        /* text is not a ModelProto */
        struct pbw t = {.n = 0};
        w_raw(&t, "{\"model\": {}}", 13);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        ASSERT_TRUE(load(&t, &d, &tok) < 0);
}

TEST(inconsistent_vocabulary) {
        struct pbw w = {.n = 0};
        w_piece(&w, "<s>", 0, CONTROL);
        w_piece(&w, "a", -1, NORMAL);
        w_specs(&w, 2, false);
        ASSERT_LOAD_FAILS(&w, -EBADMSG); /* no <unk> */

        struct pbw two = {.n = 0};
        w_piece(&two, "<unk>", 0, UNKNOWN);
        w_piece(&two, "<unk2>", 0, UNKNOWN);
        w_specs(&two, 2, false);
        ASSERT_LOAD_FAILS(&two, -EBADMSG);

        struct pbw dup = {.n = 0};
        w_small_model(&dup, false);
        w_piece(&dup, "ab", -6, NORMAL);
        ASSERT_LOAD_FAILS(&dup, -EBADMSG);

        struct pbw empty = {.n = 0};
        w_small_model(&empty, false);
        w_piece(&empty, "", -6, NORMAL);
        ASSERT_LOAD_FAILS(&empty, -EBADMSG);

        struct pbw byte = {.n = 0};
        w_small_model(&byte, false);
        w_piece(&byte, "<0xZZ>", 0, BYTE);
        ASSERT_LOAD_FAILS(&byte, -EBADMSG);

        struct pbw type = {.n = 0};
        w_small_model(&type, false);
        w_piece(&type, "c", 0, 9);
        ASSERT_LOAD_FAILS(&type, -EBADMSG);
}

TEST(unsupported_model_type) {
        struct pbw w = {.n = 0};
        w_piece(&w, "<unk>", 0, UNKNOWN);
        w_piece(&w, "a", -1, NORMAL);
        w_specs(&w, 7, false); /* no such TrainerSpec.ModelType */
        ASSERT_LOAD_FAILS(&w, -EOPNOTSUPP);
}

TEST(bad_charsmap) {
        struct pbw w = {.n = 0}, n = {.n = 0};
        w_piece(&w, "<unk>", 0, UNKNOWN);
        w_piece(&w, "a", -1, NORMAL);
        /* trie size 64 in a 10-byte blob */
        w_bytes(&n, 2, "\x40\x00\x00\x00xxxxxx", 10);
        w_bytes(&w, 3, n.buf, n.n);
        ASSERT_LOAD_FAILS(&w, -EBADMSG);

        struct pbw s = {.n = 0}, m = {.n = 0};
        w_piece(&s, "<unk>", 0, UNKNOWN);
        w_bytes(&m, 2, "\x01\x00", 2); /* shorter than its own header */
        w_bytes(&s, 3, m.buf, m.n);
        ASSERT_LOAD_FAILS(&s, -EBADMSG);
}

TEST(invalid_utf8) {
        static const char *const bad[] = {
                "\xff",             /* never valid */
                "abc\xc3",          /* truncated 2-byte character */
                "\xc0\xaf",         /* overlong '/' */
                "\xed\xa0\x80",     /* UTF-16 surrogate */
                "\xf4\x90\x80\x80", /* past U+10FFFF */
                "ok \x80 ok",       /* lone continuation byte */
        };
        static const char *const models[] = {"tokenizers/models/sp_bpe/sp_bpe.model",
                                             "tokenizers/models/sp_unigram/sp_unigram.model"};
        for (size_t m = 0; m < 2; m++) {
                struct dse_tokenizer *tok = NULL;
                ASSERT_OK(dse_tokenizer_load_file(t_fixture(models[m]), &tok, NULL));
                int32_t ids[64];
                for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                        ASSERT_ERR(dse_tokenizer_encode(tok, bad[i], strlen(bad[i]), 1, ids, 64), -EILSEQ);
                /* valid edge cases still encode */
                ASSERT_TRUE(dse_tokenizer_encode(tok, "\xf4\x8f\xbf\xbf", 4, 0, ids, 64) > 0);
                ASSERT_EQ(dse_tokenizer_encode(tok, "", 0, 0, ids, 64), 0);
                ASSERT_EQ(dse_tokenizer_encode(tok, "", 0, 1, ids, 64), 1);
                dse_tokenizer_free(tok);
        }
}

/* ---- pieces sentencepiece loads but that cannot work: warnings -------------------------- */

/* Loads w (must succeed) and returns the warnings logged. */
static const char *load_warnings(const struct pbw *w) {
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        t_log_start(DSE_LOG_WARN);
        int r = load(w, &d, &tok);
        t_log_stop();
        if (r < 0) {
                fprintf(stderr, "  load failed: %s\n", d.msg);
                return NULL;
        }
        dse_tokenizer_free(tok);
        return t_log;
}

#define WARNS(w, want)                                                                                      \
        do {                                                                                                \
                ASSERT_TRUE(load_warnings(w));                                                            \
                T_LOG_HAS(want);                                                                            \
        } while (0)

TEST(pieces_that_cannot_work_are_warnings) {
        struct pbw utf = {.n = 0};
        w_piece(&utf, "<unk>", 0, UNKNOWN);
        w_piece(&utf, "a", -1, NORMAL);
        w_piece(&utf, "b\xff", -2, NORMAL);
        w_specs(&utf, 2, false);
        WARNS(&utf, "1 pieces are not valid UTF-8 (the first: piece 2)");

        struct pbw nan = {.n = 0};
        w_piece(&nan, "<unk>", 0, UNKNOWN);
        w_piece(&nan, "a", -1, NORMAL);
        w_piece(&nan, "b", NAN, NORMAL);
        w_specs(&nan, 1, false);
        WARNS(&nan, "1 pieces have a NaN score (the first: piece 2 'b')");

        struct pbw bytes = {.n = 0};
        w_piece(&bytes, "<unk>", 0, UNKNOWN);
        w_piece(&bytes, "<0x00>", 0, BYTE);
        w_piece(&bytes, "a", -1, NORMAL);
        w_specs(&bytes, 2, true);
        WARNS(&bytes, "byte_fallback is set but 255 of the 256 <0xXX> pieces are missing (the first: <0x01>)");

        struct pbw good = {.n = 0};
        w_small_model(&good, true);
        const char *w = load_warnings(&good);
        ASSERT_TRUE(w);
        ASSERT_STREQ(w, "");
}

/* Fields this reader does not know are skipped by wire type, as protobuf does, at every
 * level: the model, a piece, the trainer and normalizer specs. */
TEST(unknown_fields_are_skipped) {
        struct pbw w = {.n = 0}, p = {.n = 0}, t = {.n = 0};
        w_uint(&w, 99, 12345);                 /* varint */
        w_key(&w, 98, 1);                      /* fixed64 */
        w_raw(&w, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
        w_bytes(&w, 97, "opaque", 6);          /* length-delimited */
        w_float(&w, 96, 1.5f);                 /* fixed32 */
        w_piece(&w, "<unk>", 0, UNKNOWN);
        w_bytes(&p, 1, "a", 1);
        w_float(&p, 2, -1);
        w_uint(&p, 3, NORMAL);
        w_uint(&p, 50, 7);
        w_bytes(&p, 51, "x", 1);
        w_bytes(&w, 1, p.buf, p.n);
        w_uint(&t, 3, 2);
        w_uint(&t, 200, 1);
        w_bytes(&w, 2, t.buf, t.n);
        struct dse_diag d;
        struct dse_tokenizer *tok = NULL;
        int r = load(&w, &d, &tok);
        if (r < 0)
                T_FAIL("load: %s", d.msg);
        ASSERT_EQ(dse_tokenizer_n_vocab(tok), 2);
        int32_t ids[8];
        ASSERT_TRUE(dse_tokenizer_encode(tok, "a", 1, 0, ids, 8) > 0);
        dse_tokenizer_free(tok);
}

TEST(fixture_models_load_without_warnings) {
        static const char *const models[] = {"tokenizers/models/sp_bpe/sp_bpe.model",
                                             "tokenizers/models/sp_unigram/sp_unigram.model"};
        for (size_t m = 0; m < 2; m++) {
                struct dse_tokenizer *tok = NULL;
                t_log_start(DSE_LOG_WARN);
                int r = dse_tokenizer_load_file(t_fixture(models[m]), &tok, NULL);
                t_log_stop();
                ASSERT_OK(r);
                if (t_log[0])
                        T_FAIL("%s: %s", models[m], t_log);
                dse_tokenizer_free(tok);
        }
}
