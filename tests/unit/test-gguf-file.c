/* The GGUF reader on broken files: each defect gives an error whose message names the
 * file, the entry and the defect (engine/FORMAT.md "Input invariants", GGUF rows). The
 * files are made by the test GGUF writer and then damaged byte by byte. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dse.h"
#include "gguf_writer.h"
#include "model/gguf/gguf.h"
#include "t.h"

/* A small valid file: two metadata keys, tensors "a" (F32 [8]) and "bb" (Q8_0 [32, 2]). */
static uint8_t *good(size_t *n) {
        struct gguf_writer *w = gguf_writer_new();
        gguf_kv_str(w, "general.architecture", "llama");
        gguf_kv_u32(w, "llama.block_count", 1);
        float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        uint8_t q[68] = {0};
        gguf_tensor(w, "a", 0, 1, (int64_t[]){8}, a, sizeof a);
        gguf_tensor(w, "bb", 8, 2, (int64_t[]){32, 2}, q, sizeof q);
        uint8_t *b = gguf_writer_bytes(w, n);
        gguf_writer_free(w);
        return b;
}

static size_t find(const uint8_t *b, size_t n, const char *s, size_t len) {
        for (size_t i = 0; i + len <= n; i++)
                if (memcmp(b + i, s, len) == 0)
                        return i;
        return (size_t)-1;
}

static void put64(uint8_t *p, uint64_t v) {
        for (int i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

/* position of tensor info field of the tensor whose name (with its u64 length) is `name` */
static size_t info_of(const uint8_t *b, size_t n, const char *name) {
        uint8_t pat[16] = {0};
        size_t len = strlen(name);
        put64(pat, len);
        memcpy(pat + 8, name, len);
        size_t p = find(b, n, (const char *)pat, 8 + len);
        if (p == (size_t)-1)
                abort(); /* the writer's layout changed */
        return p + 8 + len; /* at n_dims */
}

/* parses and expects err with every fragment in the message */
static void expect(const uint8_t *b, size_t n, int err, const char *frag1, const char *frag2) {
        struct dse_diag diag = {{0}};
        struct dse__gguf *g = NULL;
        int r = dse__gguf_parse(b, n, "m.gguf", &g, &diag);
        if (r != err || !strstr(diag.msg, "m.gguf") || (frag1 && !strstr(diag.msg, frag1)) ||
            (frag2 && !strstr(diag.msg, frag2))) {
                dse__gguf_free(g);
                T_FAIL("got %d '%s'; want %d with '%s' and '%s'", r, diag.msg, err, frag1 ? frag1 : "",
                       frag2 ? frag2 : "");
        }
}

TEST(good_file_parses) {
        size_t n;
        uint8_t *b = good(&n);
        struct dse_diag diag = {{0}};
        struct dse__gguf *g = NULL;
        ASSERT_OK(dse__gguf_parse(b, n, "m.gguf", &g, &diag));
        ASSERT_EQ(g->n_tensors, 2u);
        ASSERT_EQ(g->n_kv, 2u);
        ASSERT_EQ(g->alignment, 32u);
        ASSERT_EQ(g->tensors[1].size, 68u);
        int64_t v = 0;
        ASSERT_OK(dse__gguf_get_i64(g, "m", "llama.block_count", &v, &diag));
        ASSERT_EQ(v, 1);
        ASSERT_ERR(dse__gguf_get_i64(g, "m", "general.architecture", &v, &diag), -EBADMSG);
        ASSERT_ERR(dse__gguf_get_i64(g, "m", "absent", &v, &diag), -ENOENT);
        dse__gguf_free(g);
        free(b);
}

TEST(truncated_anywhere) {
        size_t n;
        uint8_t *b = good(&n);
        /* the file must hold every tensor's data; the padding after the last may be cut */
        struct dse__gguf *whole = NULL;
        ASSERT_OK(dse__gguf_parse(b, n, "m.gguf", &whole, NULL));
        size_t end = whole->data_offset + whole->tensors[1].offset + whole->tensors[1].size;
        dse__gguf_free(whole);
        ASSERT_TRUE(end < n);
        for (size_t cut = 0; cut < end; cut++) {
                struct dse_diag diag = {{0}};
                struct dse__gguf *g = NULL;
                int r = dse__gguf_parse(b, cut, "m.gguf", &g, &diag);
                if (r != -EBADMSG || !strstr(diag.msg, "m.gguf"))
                        T_FAIL("cut at %zu: %d '%s'", cut, r, diag.msg);
        }
        expect(b, 6, -EBADMSG, "truncated", "version");
        free(b);
}

TEST(bad_magic_and_versions) {
        size_t n;
        uint8_t *b = good(&n);
        b[0] = 'X';
        expect(b, n, -EBADMSG, "not a GGUF file", NULL);
        b[0] = 'G';
        put32(b + 4, 1);
        expect(b, n, -EOPNOTSUPP, "version 1", NULL);
        put32(b + 4, 0x03000000); /* a byte-swapped v3 */
        expect(b, n, -EOPNOTSUPP, "version", NULL);
        put32(b + 4, 2);
        struct dse__gguf *g = NULL;
        ASSERT_OK(dse__gguf_parse(b, n, "m.gguf", &g, NULL));
        dse__gguf_free(g);
        free(b);
}

TEST(counts_that_cannot_fit) {
        size_t n;
        uint8_t *b = good(&n);
        put64(b + 8, UINT64_MAX);
        expect(b, n, -EBADMSG, "tensor count", "cannot fit");
        put64(b + 8, 2);
        put64(b + 16, 1ull << 60);
        expect(b, n, -EBADMSG, "metadata count", "cannot fit");
        free(b);
}

TEST(string_length_past_the_end) {
        size_t n;
        uint8_t *b = good(&n);
        size_t p = find(b, n, "general.architecture", 20);
        put64(b + p - 8, n); /* the key's length */
        expect(b, n, -EBADMSG, "string length", "past the end");
        free(b);
        b = good(&n);
        p = find(b, n, "llama", 5); /* the value's length: key, u32 type, then u64 length */
        put64(b + p - 8, UINT64_MAX - 3);
        expect(b, n, -EBADMSG, "string length", "past the end");
        free(b);
}

TEST(tensor_offsets) {
        size_t n;
        uint8_t *b = good(&n);
        size_t p = info_of(b, n, "bb"); /* n_dims, ne[2], type, offset */
        size_t off = p + 4 + 16 + 4;
        put64(b + off, 1ull << 40);
        expect(b, n, -EBADMSG, "'bb'", "past the end of the file");
        put64(b + off, 33);
        expect(b, n, -EBADMSG, "'bb'", "not a multiple of the alignment 32");
        put64(b + off, 0); /* on top of "a" */
        expect(b, n, -EBADMSG, "'a' and 'bb'", "overlap");
        free(b);
}

TEST(tensor_types_and_shapes) {
        size_t n;
        uint8_t *b = good(&n);
        size_t p = info_of(b, n, "bb");
        put32(b + p + 20, 15); /* Q8_K: not a storage type we read */
        expect(b, n, -EOPNOTSUPP, "'bb'", "ggml type 15 is not supported");
        put32(b + p + 20, 99);
        expect(b, n, -EOPNOTSUPP, "ggml type 99", NULL);
        put32(b + p + 20, 8);
        put64(b + p + 4, 31); /* Q8_0 rows of 31 */
        expect(b, n, -EBADMSG, "'bb'", "not a multiple of the Q8_0 block");
        put64(b + p + 4, 1ull << 62);
        put64(b + p + 12, 1ull << 62);
        expect(b, n, -EBADMSG, "'bb'", "element count overflows");
        put64(b + p + 4, 32);
        put64(b + p + 12, 0);
        expect(b, n, -EBADMSG, "'bb'", "dimension 1 is 0");
        put64(b + p + 12, 2);
        put32(b + p, 5);
        expect(b, n, -EBADMSG, "'bb'", "5 dimensions");
        free(b);
}

TEST(duplicate_names_and_keys) {
        struct gguf_writer *w = gguf_writer_new();
        float a[8] = {0};
        gguf_tensor(w, "x", 0, 1, (int64_t[]){8}, a, sizeof a);
        gguf_tensor(w, "x", 0, 1, (int64_t[]){8}, a, sizeof a);
        size_t n2;
        uint8_t *b2 = gguf_writer_bytes(w, &n2);
        expect(b2, n2, -EBADMSG, "tensor 'x' appears twice", NULL);
        free(b2);
        gguf_writer_free(w);
        w = gguf_writer_new();
        gguf_kv_u32(w, "k.v", 1);
        gguf_kv_u32(w, "k.v", 2);
        b2 = gguf_writer_bytes(w, &n2);
        expect(b2, n2, -EBADMSG, "key 'k.v' appears twice", NULL);
        free(b2);
        gguf_writer_free(w);
}

TEST(metadata_values) {
        struct gguf_writer *w = gguf_writer_new();
        gguf_kv_u32(w, "general.alignment", 48);
        size_t n;
        uint8_t *b = gguf_writer_bytes(w, &n);
        expect(b, n, -EBADMSG, "general.alignment 48", "power of two");
        free(b);
        gguf_writer_free(w);
        w = gguf_writer_new();
        gguf_kv_f32(w, "general.alignment", 32);
        b = gguf_writer_bytes(w, &n);
        expect(b, n, -EBADMSG, "general.alignment is a f32", NULL);
        free(b);
        gguf_writer_free(w);
        /* unknown value type, nested arrays, bad bool */
        static const uint8_t bad_type[] = {3, 0, 0, 0, 0, 0, 0, 0, 'k', '.', 'x', 13, 0, 0, 0};
        static const uint8_t nested[] = {3, 0, 0, 0, 0, 0, 0, 0, 'k', '.', 'x', 9, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        static const uint8_t bad_bool[] = {3, 0, 0, 0, 0, 0, 0, 0, 'k', '.', 'x', 7, 0, 0, 0, 2};
        static const struct {
                const uint8_t *p;
                size_t n;
                const char *frag;
        } cases[] = {{bad_type, sizeof bad_type, "unknown value type 13"},
                     {nested, sizeof nested, "arrays of arrays"},
                     {bad_bool, sizeof bad_bool, "bool value 2"}};
        for (size_t i = 0; i < 3; i++) {
                w = gguf_writer_new();
                gguf_kv_raw(w, cases[i].p, cases[i].n, 1);
                gguf_kv_u32(w, "pad.to.make.room.for.the.count.check", 0);
                b = gguf_writer_bytes(w, &n);
                expect(b, n, -EBADMSG, "'k.x'", cases[i].frag);
                free(b);
                gguf_writer_free(w);
        }
        /* an array whose count runs past the end */
        static const uint8_t long_array[] = {3, 0, 0, 0, 0, 0, 0, 0, 'k', '.', 'x', 9, 0, 0, 0, 4, 0, 0, 0,
                                             0, 0, 0, 0, 0, 0, 0, 0x10};
        w = gguf_writer_new();
        gguf_kv_raw(w, long_array, sizeof long_array, 1);
        gguf_kv_u32(w, "pad.to.make.room.for.the.count.check", 0);
        b = gguf_writer_bytes(w, &n);
        expect(b, n, -EBADMSG, "'k.x'", "runs past the end");
        free(b);
        gguf_writer_free(w);
}

/* The importer: through dse_model_convert_hf on a file. */
static void expect_convert(struct gguf_writer *w, int err, const char *frag) {
        char path[] = "/tmp/dsv-gguf-bad-XXXXXX";
        int fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        ASSERT_OK(gguf_writer_write(w, path));
        gguf_writer_free(w);
        char out[64];
        snprintf(out, sizeof out, "%s.dse", path);
        struct dse_diag diag = {{0}};
        int r = dse_model_convert_hf(path, out, "auto", &diag);
        unlink(path);
        unlink(out);
        if (r != err || !strstr(diag.msg, frag))
                T_FAIL("got %d '%s'; want %d with '%s'", r, diag.msg, err, frag);
}

TEST(import_refuses_what_it_cannot_map) {
        float e[64] = {0};
        struct gguf_writer *w = gguf_writer_new();
        gguf_tensor(w, "token_embd.weight", 0, 2, (int64_t[]){8, 8}, e, sizeof e);
        expect_convert(w, -EBADMSG, "required key 'general.architecture' is missing");

        w = gguf_writer_new();
        gguf_kv_str(w, "general.architecture", "mamba");
        expect_convert(w, -EOPNOTSUPP, "GGUF architecture 'mamba' is not supported");

        w = gguf_writer_new();
        gguf_kv_str(w, "general.architecture", "llama");
        gguf_tensor(w, "token_embd.weight", 0, 2, (int64_t[]){8, 8}, e, sizeof e);
        gguf_kv_u32(w, "llama.embedding_length", 8);
        expect_convert(w, -EBADMSG, "required key 'llama.block_count' is missing");

        w = gguf_writer_new();
        gguf_kv_str(w, "general.architecture", "llama");
        gguf_kv_u32(w, "llama.embedding_length", 8);
        gguf_kv_u32(w, "llama.block_count", 1);
        gguf_kv_u32(w, "llama.feed_forward_length", 8);
        gguf_kv_u32(w, "llama.attention.head_count", 2);
        gguf_tensor(w, "token_embd.weight", 0, 2, (int64_t[]){8, 8}, e, sizeof e);
        gguf_tensor(w, "blk.0.ssm_conv1d.weight", 0, 2, (int64_t[]){8, 8}, e, sizeof e);
        expect_convert(w, -EBADMSG, "unexpected tensor 'blk.0.ssm_conv1d.weight'");

        w = gguf_writer_new();
        gguf_kv_str(w, "general.architecture", "llama");
        gguf_kv_u32(w, "llama.embedding_length", 8);
        gguf_kv_u32(w, "llama.block_count", 1);
        gguf_kv_u32(w, "llama.feed_forward_length", 8);
        gguf_kv_u32(w, "llama.attention.head_count", 2);
        gguf_tensor(w, "token_embd.weight", 0, 2, (int64_t[]){8, 8}, e, sizeof e);
        expect_convert(w, -EBADMSG, "missing tensor 'model.layers.0.input_layernorm.weight'");
}
