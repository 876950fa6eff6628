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

/* A deepseek2 file's keys (2 layers, 1 leading dense, 4 experts) without `omit`; the
 * token embedding. Each case adds the defect. */
static struct gguf_writer *deepseek2(const char *omit) {
        static const struct {
                const char *key;
                uint32_t v;
        } keys[] = {{"deepseek2.embedding_length", 8},       {"deepseek2.block_count", 2},
                    {"deepseek2.feed_forward_length", 8},    {"deepseek2.attention.head_count", 2},
                    {"deepseek2.attention.kv_lora_rank", 8}, {"deepseek2.rope.dimension_count", 4},
                    {"deepseek2.attention.key_length", 12},  {"deepseek2.attention.value_length", 8},
                    {"deepseek2.leading_dense_block_count", 1}, {"deepseek2.expert_count", 4},
                    {"deepseek2.expert_used_count", 2},      {"deepseek2.expert_shared_count", 1},
                    {"deepseek2.expert_feed_forward_length", 8}};
        static float e[128];
        struct gguf_writer *w = gguf_writer_new();
        gguf_kv_str(w, "general.architecture", "deepseek2");
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                if (!omit || strcmp(keys[i].key, omit) != 0)
                        gguf_kv_u32(w, keys[i].key, keys[i].v);
        gguf_tensor(w, "token_embd.weight", 0, 2, (int64_t[]){8, 16}, e, sizeof e);
        return w;
}

TEST(import_deepseek2_keys) {
        expect_convert(deepseek2("deepseek2.attention.kv_lora_rank"), -EBADMSG,
                       "required key 'deepseek2.attention.kv_lora_rank' is missing");
        expect_convert(deepseek2("deepseek2.attention.key_length"), -EBADMSG,
                       "required key 'deepseek2.attention.key_length' is missing");

        struct gguf_writer *w = deepseek2(NULL);
        gguf_kv_u32(w, "deepseek2.expert_gating_func", 3);
        expect_convert(w, -EOPNOTSUPP, "deepseek2.expert_gating_func 3 is not supported");

        w = deepseek2(NULL);
        gguf_kv_u32(w, "deepseek2.expert_weights_norm", 1);
        expect_convert(w, -EBADMSG, "key 'deepseek2.expert_weights_norm' must be a bool");

        /* the MQA-style keys: value_length must then be kv_lora_rank */
        w = deepseek2("deepseek2.attention.value_length");
        gguf_kv_u32(w, "deepseek2.attention.value_length", 6);
        gguf_kv_u32(w, "deepseek2.attention.key_length_mla", 12);
        gguf_kv_u32(w, "deepseek2.attention.value_length_mla", 8);
        gguf_kv_u32(w, "deepseek2.attention.head_count_kv", 1);
        expect_convert(w, -EBADMSG, "key_length 12 and value_length 6 must be 1, kv_lora_rank + rope (12) and "
                                    "kv_lora_rank (8)");

        w = deepseek2("deepseek2.attention.key_length");
        gguf_kv_u32(w, "deepseek2.attention.key_length", 4);
        expect_convert(w, -EBADMSG, "key length 4 must exceed rope.dimension_count 4");

        w = deepseek2(NULL);
        gguf_kv_u32(w, "deepseek2.attention.head_count_kv", 3);
        expect_convert(w, -EBADMSG, "head_count_kv 3 must be 1 or head_count 2");

        w = deepseek2(NULL);
        gguf_kv_str(w, "deepseek2.rope.scaling.type", "yarn");
        gguf_kv_f32(w, "deepseek2.rope.scaling.factor", 4);
        expect_convert(w, -EBADMSG, "required key 'deepseek2.rope.scaling.original_context_length' is missing");

        w = deepseek2(NULL);
        gguf_kv_str(w, "deepseek2.rope.scaling.type", "yarn");
        gguf_kv_u32(w, "deepseek2.rope.scaling.original_context_length", 32);
        gguf_kv_f32(w, "deepseek2.rope.scaling.yarn_ext_factor", 1);
        expect_convert(w, -EOPNOTSUPP, "key 'deepseek2.rope.scaling.yarn_ext_factor' is not supported");

        w = deepseek2(NULL);
        gguf_kv_str(w, "deepseek2.rope.scaling.type", "yarn");
        gguf_kv_u32(w, "deepseek2.rope.scaling.original_context_length", 32);
        gguf_kv_f32(w, "deepseek2.rope.scaling.yarn_log_multiplier", -1);
        expect_convert(w, -EBADMSG, "yarn_log_multiplier -1 is out of range");

        w = deepseek2(NULL);
        gguf_kv_str(w, "deepseek2.rope.scaling.type", "llama3");
        expect_convert(w, -EOPNOTSUPP, "rope scaling type 'llama3' is not supported for GGUF deepseek2 (none, linear, yarn)");
}

TEST(import_deepseek2_tensors) {
        static float x[4 * 8 * 8 * 2];
        struct gguf_writer *w = deepseek2(NULL);
        gguf_tensor(w, "blk.1.ffn_gate_exps.weight", 0, 2, (int64_t[]){8, 32}, x, 8 * 32 * 4);
        expect_convert(w, -EBADMSG, "tensor 'blk.1.ffn_gate_exps.weight' has 2 dimensions (3 expected)");

        w = deepseek2(NULL);
        gguf_tensor(w, "blk.1.ffn_up_exps.weight", 0, 3, (int64_t[]){8, 8, 3}, x, 8 * 8 * 3 * 4);
        expect_convert(w, -EBADMSG, "tensor 'blk.1.ffn_up_exps.weight' stacks 3 experts, deepseek2.expert_count is 4");

        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.attn_norm.weight", 0, 3, (int64_t[]){2, 2, 2}, x, 8 * 4);
        expect_convert(w, -EBADMSG, "tensor 'blk.0.attn_norm.weight' has 3 dimensions (1 or 2 expected)");

        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.attn_k_b.weight", 0, 3, (int64_t[]){8, 8, 2}, x, 8 * 8 * 2 * 4);
        expect_convert(w, -EBADMSG, "tensor 'blk.0.attn_k_b.weight' has no 'blk.0.attn_v_b.weight' beside it");

        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.attn_v_b.weight", 0, 3, (int64_t[]){8, 8, 2}, x, 8 * 8 * 2 * 4);
        expect_convert(w, -EBADMSG, "tensor 'blk.0.attn_v_b.weight' has no 'blk.0.attn_k_b.weight' beside it");

        /* k_b must be [nope 8, kv_lora 8, heads 2], v_b [kv_lora 8, v 8, heads 2] */
        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.attn_k_b.weight", 0, 3, (int64_t[]){8, 8, 2}, x, 8 * 8 * 2 * 4);
        gguf_tensor(w, "blk.0.attn_v_b.weight", 0, 3, (int64_t[]){8, 4, 2}, x, 8 * 4 * 2 * 4);
        expect_convert(w, -EBADMSG, "'blk.0.attn_v_b.weight' [8, 4, 2] are not [nope 8, kv_lora_rank 8, heads 2]");

        /* layer 0 tells the form of kv_b_proj; a later layer may not change it */
        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.attn_kv_b.weight", 0, 2, (int64_t[]){8, 32}, x, 8 * 32 * 4);
        gguf_tensor(w, "blk.1.attn_k_b.weight", 0, 3, (int64_t[]){8, 8, 2}, x, 8 * 8 * 2 * 4);
        gguf_tensor(w, "blk.1.attn_v_b.weight", 0, 3, (int64_t[]){8, 8, 2}, x, 8 * 8 * 2 * 4);
        expect_convert(w, -EBADMSG, "layer 1 splits kv_b_proj (attn_k_b, attn_v_b) where layer 0 keeps attn_kv_b");

        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.ffn_gate_exps.weight", 0, 3, (int64_t[]){8, 8, 4}, x, 8 * 8 * 4 * 4);
        gguf_tensor(w, "blk.0.ffn_gate_shexp.weight", 0, 2, (int64_t[]){8, 8}, x, 8 * 8 * 4);
        gguf_tensor(w, "blk.0.exp_probs_b.bias", 0, 1, (int64_t[]){4}, x, 4 * 4);
        gguf_tensor(w, "blk.0.ssm_a", 0, 1, (int64_t[]){4}, x, 4 * 4);
        expect_convert(w, -EBADMSG, "unexpected tensor 'blk.0.ssm_a' for architecture deepseek2");

        /* a layer the file declares dense holding experts: the converter names the tensor */
        w = deepseek2(NULL);
        gguf_tensor(w, "blk.0.ffn_gate_exps.weight", 0, 3, (int64_t[]){8, 8, 4}, x, 8 * 8 * 4 * 4);
        expect_convert(w, -EBADMSG, "model.layers.0.");
}
