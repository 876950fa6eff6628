/* Bad input: each corruption of a native file or an HF folder gives its own clear error
 * (naming the file and the tensor), and a failed conversion leaves no output behind.
 * Bad files are made in temp folders by copying and patching the fixtures, or written
 * from scratch (tiny safetensors files). */
#include <dirent.h>

#include "model/format.h"
#include "model/model.h"
#include "t.h"
#include "test-modelfile-helpers.h"

static struct dse_diag diag;

/* ---- native files ---------------------------------------------------------------- */

struct native {
        char dir[256], path[4096];
        uint8_t *buf;
        size_t len;
};

static int native_make(struct native *n, const char *fixture) {
        snprintf(n->dir, sizeof n->dir, "%s", tmp_dir());
        int r;
        const char *p = convert_fixture(t_fixture(fixture), n->dir, NULL, &r, &diag);
        if (r < 0)
                return r;
        snprintf(n->path, sizeof n->path, "%s", p);
        n->buf = slurp(n->path, &n->len);
        return n->buf ? 0 : -EIO;
}

static uint64_t rd64(const uint8_t *p) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}
static uint32_t rd32(const uint8_t *p) {
        return (uint32_t)rd64(p) & 0xffffffffu; /* little-endian: low half */
}
static void wr32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
        wr32(p, (uint32_t)v);
        wr32(p + 4, (uint32_t)(v >> 32));
}

/* FORMAT.md: the table entry of tensor `name`, or NULL. */
static uint8_t *entry(struct native *n, const char *name) {
        uint64_t table = rd64(n->buf + 56);
        uint32_t count = rd32(n->buf + 52);
        for (uint32_t i = 0; i < count; i++) {
                uint8_t *e = n->buf + table + (uint64_t)i * 192;
                if (strcmp((char *)e, name) == 0)
                        return e;
        }
        return NULL;
}

/* Re-seals the header checksum after a patch, so the targeted check is what fires. */
static void reseal(struct native *n) {
        uint64_t end = rd64(n->buf + 56) + (uint64_t)rd32(n->buf + 52) * 192;
        uint64_t hp_end = rd64(n->buf + 40) + (uint64_t)rd32(n->buf + 48) * 48;
        if (hp_end > end)
                end = hp_end;
        wr32(n->buf + 80, 0);
        wr32(n->buf + 80, dse__crc32c(0, n->buf, end));
}

/* Writes the (patched) bytes back, opens, and returns the error. */
static int native_open(struct native *n, size_t len) {
        FILE *f = fopen(n->path, "wb");
        if (!f || fwrite(n->buf, 1, len, f) != len || fclose(f) != 0)
                return -EIO;
        struct dse_model *m;
        memset(&diag, 0, sizeof diag);
        int r = dse_model_open(n->path, 0, &m, &diag);
        if (r == 0)
                dse_model_free(m);
        return r;
}

static void native_done(struct native *n) {
        free(n->buf);
        tmp_rm(n->dir);
}

#define MSG_HAS(s)                                                                                \
        do {                                                                                      \
                if (!strstr(diag.msg, (s)))                                                       \
                        T_FAIL("message \"%s\" lacks \"%s\"", diag.msg, (s));                    \
        } while (0)

TEST(native_truncated) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        ASSERT_ERR(native_open(&n, n.len - 4096), -EBADMSG);
        MSG_HAS("truncated");
        MSG_HAS(n.path);
        ASSERT_ERR(native_open(&n, 100), -EBADMSG);
        MSG_HAS("truncated");
        native_done(&n);
}

TEST(native_bad_magic_and_header_checksum) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        n.buf[0] ^= 1;
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("magic");
        n.buf[0] ^= 1;
        uint8_t *e = entry(&n, "model.norm.weight");
        ASSERT_TRUE(e);
        e[176] ^= 0x40; /* offset, without resealing */
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("header checksum");
        native_done(&n);
}

TEST(native_newer_major_version_refused) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        wr32(n.buf + 8, DSE_FORMAT_VERSION_MAJOR + 1);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EOPNOTSUPP);
        MSG_HAS("newer");
        char want[16];
        snprintf(want, sizeof want, "%d.0", DSE_FORMAT_VERSION_MAJOR + 1);
        MSG_HAS(want);
        /* an older major version (2.x stored Q4 scales row-major) is refused with what to do */
        wr32(n.buf + 8, DSE_FORMAT_VERSION_MAJOR - 1);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EOPNOTSUPP);
        MSG_HAS("convert the model again");
        /* a newer minor version is read */
        wr32(n.buf + 8, DSE_FORMAT_VERSION_MAJOR);
        wr32(n.buf + 12, 7);
        reseal(&n);
        ASSERT_OK(native_open(&n, n.len));
        native_done(&n);
}

TEST(native_offset_out_of_range) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        uint8_t *e = entry(&n, "model.layers.1.mlp.up_proj.weight");
        ASSERT_TRUE(e);
        wr64(e + 176, rd64(n.buf + 32) - 64); /* last 64 bytes of the data region */
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("model.layers.1.mlp.up_proj.weight");
        MSG_HAS("past the end");
        wr64(e + 176, 1ull << 62);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("past the end");
        wr64(e + 176, 32); /* misaligned */
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("aligned");
        native_done(&n);
}

TEST(native_overlapping_tensors) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        uint8_t *a = entry(&n, "model.layers.0.input_layernorm.weight");
        uint8_t *b = entry(&n, "model.layers.0.post_attention_layernorm.weight");
        ASSERT_TRUE(a && b);
        wr64(b + 176, rd64(a + 176) + 64);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("overlap");
        MSG_HAS("layernorm");
        native_done(&n);
}

TEST(native_dtype_contradicts_size) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        uint8_t *e = entry(&n, "model.layers.2.self_attn.k_proj.weight");
        ASSERT_TRUE(e);
        wr32(e + 128, DSE_DTYPE_F32);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("model.layers.2.self_attn.k_proj.weight");
        wr32(e + 128, 99);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EOPNOTSUPP);
        MSG_HAS("unknown dtype");
        /* a dtype the role does not allow: an I32 norm */
        wr32(e + 128, DSE_DTYPE_BF16);
        uint8_t *nw = entry(&n, "model.norm.weight");
        wr32(nw + 128, DSE_DTYPE_I32);
        wr64(nw + 136, 64); /* [64] I32 = 256 bytes = [128] BF16 */
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("model.norm.weight");
        native_done(&n);
}

/* FORMAT.md: the value of the integer hyper-parameter record `name`, or NULL. */
static uint8_t *hparam_i32(struct native *n, const char *name) {
        uint8_t *hp = n->buf + rd64(n->buf + 40);
        for (uint32_t i = 0; i < rd32(n->buf + 48); i++, hp += 48)
                if (strcmp((char *)hp, name) == 0)
                        return hp + 44;
        return NULL;
}

TEST(native_shape_contradicts_hparams) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        /* hyper-parameter record "intermediate_size": 352 -> 320 */
        uint8_t *v = hparam_i32(&n, "intermediate_size");
        ASSERT_TRUE(v);
        ASSERT_EQ(rd32(v), 352);
        wr32(v, 320);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("contradicts the hyper-parameters");
        MSG_HAS("mlp");
        native_done(&n);
}

/* Hyper-parameters within their ranges can still describe millions of tensors (layers x
 * experts x MTP modules): the schema stops at the file's own tensor count instead of
 * being built whole first. */
TEST(native_hparams_call_for_more_tensors_than_the_file_holds) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        uint8_t *v = hparam_i32(&n, "n_layers");
        ASSERT_TRUE(v);
        wr32(v, 4096);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("call for more tensors than the");
        native_done(&n);
}

/* MTP modules are DeepSeek-V3's alone: a Llama header that declares them is refused by
 * the range check, not taken to the schema, which would otherwise walk one MTP module
 * after another. */
TEST(native_llama_header_declaring_mtp_modules) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        uint8_t *v = hparam_i32(&n, "n_mtp_layers");
        ASSERT_TRUE(v);
        wr32(v, 134283263);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("n_mtp_layers 134283263 out of range (0..16, deepseek_v3 only)");
        native_done(&n);
}

TEST(native_missing_and_unexpected_tensor) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/llama-bf16-linear-rope"));
        uint8_t *e = entry(&n, "model.layers.1.self_attn.v_proj.weight");
        ASSERT_TRUE(e);
        e[strlen("model.layers.1.self_attn.v")] = 'w'; /* -> "...w_proj.weight" */
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("missing tensor 'model.layers.1.self_attn.v_proj.weight'");
        native_done(&n);
}

/* Q4's two forms (FORMAT.md "Quantized tensors"): F32 scales need U8 zero points (a
 * missing .zero is an error, never a symmetric weight); F16 scales are the symmetric form,
 * shaped as the F32 ones, and a .zero beside them is refused by name. */
TEST(native_q4_scale_forms) {
        struct native n;
        snprintf(n.dir, sizeof n.dir, "%s", tmp_dir());
        int r;
        const char *p = convert_fixture(t_fixture("models/llama-bf16-linear-rope"), n.dir, "int4", &r, &diag);
        ASSERT_OK(r);
        snprintf(n.path, sizeof n.path, "%s", p);
        ASSERT_TRUE((n.buf = slurp(n.path, &n.len)) != NULL);
        const char *w = "model.layers.0.self_attn.q_proj.weight";
        char sname[160], zname[160];
        snprintf(sname, sizeof sname, "%s.scale", w);
        snprintf(zname, sizeof zname, "%s.zero", w);
        uint8_t *se = entry(&n, sname), *ze = entry(&n, zname);
        ASSERT_TRUE(se && ze);
        ASSERT_EQ(rd32(se + 128), (uint32_t)DSE_DTYPE_F32);
        ASSERT_OK(native_open(&n, n.len));

        ze[strlen(zname) - 1] = 'x'; /* ".zerx": no zero points for F32 scales */
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS(zname);
        ze[strlen(zname) - 1] = 'o';

        uint64_t cols = rd64(se + 144), size = rd64(se + 184);
        wr32(se + 128, DSE_DTYPE_F16); /* F16 in the F32 scales' bytes: twice the columns */
        wr64(se + 144, 2 * cols);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS(sname);
        MSG_HAS("expected F16");

        wr64(se + 144, cols); /* F16 of the right shape: half the bytes */
        wr64(se + 184, size / 2);
        reseal(&n);
        ASSERT_ERR(native_open(&n, n.len), -EBADMSG);
        MSG_HAS("unexpected tensor");
        MSG_HAS(zname);
        native_done(&n);
}

TEST(native_checksum_mismatch_found_by_verify) {
        struct native n;
        ASSERT_OK(native_make(&n, "models/qwen2-bf16-tied"));
        uint8_t *e = entry(&n, "model.layers.1.mlp.down_proj.weight");
        ASSERT_TRUE(e);
        n.buf[rd64(n.buf + 24) + rd64(e + 176) + 100] ^= 0x10;
        ASSERT_OK(native_open(&n, n.len)); /* open reads no data */
        struct dse_model *m;
        ASSERT_OK(dse_model_open(n.path, 0, &m, &diag));
        ASSERT_ERR(dse_model_verify(m, &diag), -EBADMSG);
        MSG_HAS("model.layers.1.mlp.down_proj.weight");
        MSG_HAS("checksum");
        dse_model_free(m);
        native_done(&n);
}

/* ---- HF folders ------------------------------------------------------------------ */

/* A copy of a fixture folder: config.json rewritten with `from` -> `to` (when given),
 * every other file symlinked. */
static char *hf_copy(const char *fixture, const char *from, const char *to) {
        char *dir = tmp_dir();
        char src[4096], p[8192], q[8192];
        snprintf(src, sizeof src, "%s", t_fixture(fixture));
        DIR *d = opendir(src);
        struct dirent *e;
        while (d && (e = readdir(d))) {
                if (e->d_name[0] == '.' || strcmp(e->d_name, "ref") == 0)
                        continue;
                snprintf(p, sizeof p, "%s/%s", src, e->d_name);
                snprintf(q, sizeof q, "%s/%s", dir, e->d_name);
                if (strcmp(e->d_name, "config.json") != 0 || !from) {
                        if (symlink(p, q) < 0)
                                return NULL;
                        continue;
                }
                size_t len;
                char *text = slurp(p, &len);
                char *at = text ? strstr(text, from) : NULL;
                if (!at)
                        return NULL;
                FILE *f = fopen(q, "w");
                fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
                fclose(f);
                free(text);
        }
        if (d)
                closedir(d);
        return dir;
}

/* Converts hf into a fresh folder; on failure checks that nothing was left there. */
static int hf_convert(const char *hf, int *leftovers) {
        char *out = tmp_dir();
        int r;
        memset(&diag, 0, sizeof diag);
        convert_fixture(hf, out, NULL, &r, &diag);
        int n = 0;
        DIR *d = opendir(out);
        struct dirent *e;
        while (d && (e = readdir(d)))
                n += e->d_name[0] != '.';
        if (d)
                closedir(d);
        *leftovers = r < 0 ? n : 0;
        tmp_rm(out);
        return r;
}

TEST(hf_unknown_model_type) {
        char *hf = hf_copy("models/llama-bf16-linear-rope", "\"model_type\": \"llama\"", "\"model_type\": \"gpt_neox\"");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EOPNOTSUPP);
        MSG_HAS("gpt_neox");
        MSG_HAS("config.json");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

/* An MTP module whose shared_head.head is not a copy of lm_head: the native file keeps
 * only the main head, so the converter refuses it, naming the tensor. */
TEST(hf_mtp_head_differs) {
        char *hf = hf_copy("models/deepseek-v3-fp8-mtp", NULL, NULL);
        ASSERT_TRUE(hf);
        const char *shard = "model-00003-of-00003.safetensors", *name = "model.layers.3.shared_head.head.weight";
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", hf, shard);
        size_t len;
        uint8_t *buf = slurp(path, &len);
        ASSERT_TRUE(buf && len > 8);
        /* the tensor's first byte: 8 + header length + its data_offsets[0] */
        uint64_t hlen = rd64(buf);
        char *key = memmem(buf + 8, (size_t)hlen, name, strlen(name));
        char *offs = key ? strstr(key, "data_offsets") : NULL;
        unsigned long long begin = 0;
        ASSERT_TRUE(offs && sscanf(offs, "data_offsets\":[%llu", &begin) == 1);
        buf[8 + hlen + begin] ^= 0x40;
        ASSERT_EQ(unlink(path), 0);
        FILE *f = fopen(path, "wb");
        ASSERT_TRUE(f && fwrite(buf, 1, len, f) == len);
        fclose(f);
        free(buf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EOPNOTSUPP);
        MSG_HAS(name);
        MSG_HAS("differs from lm_head.weight");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

/* config.json declares an MTP module the checkpoint does not hold (an export that
 * dropped it): converted without it. */
TEST(hf_declared_mtp_module_absent) {
        char *hf = hf_copy("models/deepseek-v3-noaux-yarn", "\"num_nextn_predict_layers\": 0",
                           "\"num_nextn_predict_layers\": 1");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_OK(hf_convert(hf, &left));
        tmp_rm(hf);
}

TEST(hf_unknown_rope_type) {
        char *hf = hf_copy("models/llama-bf16-linear-rope", "\"type\": \"linear\"", "\"type\": \"dynamic\"");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EOPNOTSUPP);
        MSG_HAS("dynamic");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(hf_shape_contradicts_config) {
        char *hf = hf_copy("models/llama-bf16-linear-rope", "\"intermediate_size\": 352", "\"intermediate_size\": 320");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("model.layers.0.mlp");
        MSG_HAS("contradicts config.json");
        MSG_HAS("model.safetensors");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(hf_missing_tensor) {
        char *hf = hf_copy("models/llama-bf16-linear-rope", "\"num_hidden_layers\": 3", "\"num_hidden_layers\": 4");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("missing tensor 'model.layers.3.");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(hf_unexpected_tensor) {
        /* fewer layers than the checkpoint holds: only DeepSeek-V3's MTP layers may be
         * skipped, a llama's layer 2 is unexpected */
        char *hf = hf_copy("models/llama-bf16-linear-rope", "\"num_hidden_layers\": 3", "\"num_hidden_layers\": 2");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("unexpected tensor 'model.layers.2.");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
        /* a llama config over a qwen2 checkpoint: its q/k/v biases are unexpected */
        hf = hf_copy("models/qwen2-bf16-tied", "\"model_type\": \"qwen2\"", "\"model_type\": \"llama\"");
        ASSERT_TRUE(hf);
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("unexpected tensor");
        MSG_HAS("_proj.bias");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

/* Writes a safetensors file: 8-byte length, header, then data_len bytes of 0x3c. */
static int write_st(const char *path, const char *header, size_t data_len, uint64_t claimed_len) {
        FILE *f = fopen(path, "wb");
        if (!f)
                return -1;
        uint64_t n = claimed_len ? claimed_len : strlen(header);
        for (int i = 0; i < 8; i++)
                fputc((int)((n >> (8 * i)) & 0xff), f);
        fputs(header, f);
        for (size_t i = 0; i < data_len; i++)
                fputc(0x3c, f);
        return fclose(f);
}

/* A folder with config.json holding config and a handmade model.safetensors. */
static char *hf_handmade_with(const char *config, const char *header, size_t data_len, uint64_t claimed_len) {
        char *dir = tmp_dir();
        char p[4096];
        snprintf(p, sizeof p, "%s/config.json", dir);
        FILE *f = fopen(p, "w");
        fputs(config, f);
        fclose(f);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        return write_st(p, header, data_len, claimed_len) == 0 ? dir : NULL;
}

/* A folder with a llama config and a handmade model.safetensors. */
static char *hf_handmade(const char *header, size_t data_len, uint64_t claimed_len) {
        return hf_handmade_with("{\"model_type\": \"llama\", \"vocab_size\": 4, \"hidden_size\": 4, \"intermediate_size\": 8,"
                                " \"num_hidden_layers\": 1, \"num_attention_heads\": 2}",
                                header, data_len, claimed_len);
}

TEST(st_header_length_larger_than_file) {
        char *hf = hf_handmade("{}", 0, 1u << 20);
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("header length 1048576 is larger than the file");
        MSG_HAS("model.safetensors");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(st_truncated_data) {
        char *hf = hf_handmade("{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[4,4],\"data_offsets\":[0,32]}}",
                               20, 0);
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("model.embed_tokens.weight");
        MSG_HAS("past the end");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(st_overlapping_offsets) {
        char *hf = hf_handmade("{\"a\":{\"dtype\":\"BF16\",\"shape\":[4,4],\"data_offsets\":[0,32]},"
                               "\"b\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[16,48]}}",
                               48, 0);
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("'a' and 'b' overlap");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(st_size_contradicts_shape) {
        char *hf = hf_handmade("{\"a\":{\"dtype\":\"BF16\",\"shape\":[4,4],\"data_offsets\":[0,30]}}", 32, 0);
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("tensor 'a'");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(st_wrong_dtype_for_config) {
        /* a complete 1-layer llama except that the embedding is I32 */
        char h[4096];
        const char *names[] = {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                               "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                               "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                               "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
                               "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
                               "model.norm.weight", "lm_head.weight"};
        const int shapes[][2] = {{4, 4}, {4, 0}, {4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 0}, {8, 4}, {8, 4}, {4, 8}, {4, 0}, {4, 4}};
        size_t off = 0, len = 1;
        h[0] = '{';
        for (int i = 0; i < 12; i++) {
                size_t n = (size_t)shapes[i][0] * (shapes[i][1] ? shapes[i][1] : 1) * (i == 0 ? 4 : 2);
                if (shapes[i][1])
                        len += (size_t)snprintf(h + len, sizeof h - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                                i ? "," : "", names[i], i == 0 ? "I32" : "BF16", shapes[i][0], shapes[i][1], off, off + n);
                else
                        len += (size_t)snprintf(h + len, sizeof h - len, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                                names[i], shapes[i][0], off, off + n);
                off += n;
        }
        snprintf(h + len, sizeof h - len, "}");
        char *hf = hf_handmade(h, off, 0);
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EOPNOTSUPP);
        MSG_HAS("model.embed_tokens.weight");
        MSG_HAS("I32");
        ASSERT_EQ(left, 0);
        /* the same file with a BF16 embedding converts: the test file itself is sound */
        char *at = strstr(h, "I32");
        memcpy(at, "F32", 3);
        tmp_rm(hf);
        hf = hf_handmade(h, off, 0);
        ASSERT_OK(hf_convert(hf, &left));
        tmp_rm(hf);
}

/* Hyper-parameters within their ranges (4096 layers x 64 experts) describe close to a
 * million tensors: the converter bounds the expected list by the checkpoint's own tensor
 * count, as the native loader does, instead of building it whole first, and says why the
 * first tensor it misses is missing. */
TEST(hf_config_calls_for_more_tensors_than_the_checkpoint_holds) {
        char *hf = hf_handmade_with(
                "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 512, \"hidden_size\": 192,"
                " \"intermediate_size\": 320, \"moe_intermediate_size\": 96, \"num_hidden_layers\": 4096,"
                " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"q_lora_rank\": 160,"
                " \"kv_lora_rank\": 128, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 32, \"v_head_dim\": 48,"
                " \"n_routed_experts\": 64, \"n_shared_experts\": 1, \"num_experts_per_tok\": 2, \"n_group\": 4,"
                " \"topk_group\": 2, \"first_k_dense_replace\": 1, \"topk_method\": \"noaux_tc\","
                " \"scoring_func\": \"sigmoid\", \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5,"
                " \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000}",
                "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[512,192],\"data_offsets\":[0,196608]}}",
                196608, 0);
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("missing tensor 'model.layers.0.input_layernorm.weight'; the hyper-parameters in config.json call for "
                "more tensors than the 1 the checkpoint holds");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(st_parser_rejects_malformed_headers) {
        struct dse__st_tensor *v;
        size_t n;
        const char *bad[] = {
                "not json",
                "[1,2]",
                "{\"a\":{\"dtype\":\"X9\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                int r = dse__st_parse_header(bad[i], strlen(bad[i]), 64, "x.safetensors", &v, &n, &diag);
                if (r >= 0)
                        T_FAIL("accepted: %s", bad[i]);
                ASSERT_TRUE(strstr(diag.msg, "x.safetensors"));
        }
        const char *good = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                           "\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}";
        ASSERT_OK(dse__st_parse_header(good, strlen(good), 8, "x", &v, &n, &diag));
        ASSERT_EQ(n, 2);
        ASSERT_STREQ(v[0].name, "a");
        ASSERT_EQ(v[1].begin, 4);
        free(v);
}

TEST(sharded_index_names_missing_tensor) {
        char *hf = tmp_dir();
        char src[4096], p[8192], q[8192];
        snprintf(src, sizeof src, "%s", t_fixture("models/deepseek-v2-lite-sharded"));
        const char *files[] = {"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
        for (int i = 0; i < 3; i++) {
                snprintf(p, sizeof p, "%s/%s", src, files[i]);
                snprintf(q, sizeof q, "%s/%s", hf, files[i]);
                ASSERT_OK(symlink(p, q));
        }
        /* the index claims model.norm.weight lives in shard 1 (it is in shard 2) */
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", src);
        size_t len;
        char *text = slurp(p, &len);
        ASSERT_TRUE(text);
        char *at = strstr(text, "\"model.norm.weight\": \"model-00002");
        ASSERT_TRUE(at);
        at[strlen("\"model.norm.weight\": \"model-0000")] = '1';
        snprintf(q, sizeof q, "%s/model.safetensors.index.json", hf);
        FILE *f = fopen(q, "w");
        fwrite(text, 1, len, f);
        fclose(f);
        free(text);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("model.norm.weight");
        MSG_HAS("model-00001-of-00002.safetensors");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(gptq_groups_must_be_contiguous_after_sorting) {
        /* 8 inputs, group 4, but g_idx puts 5 inputs in group 0: no contiguous layout */
        int32_t qweight[1 * 8] = {0}, qzeros[2 * 1] = {0}, g_idx[8] = {0, 0, 1, 0, 0, 1, 0, 1}, perm[8];
        uint16_t scales[2 * 8] = {0};
        uint8_t data[DSE_Q4_TILE], zero[16 * 2]; /* 8 x 8 Q4: one padded tile, 16 rows of scales */
        float scale[16 * 2];
        ASSERT_ERR(dse__gptq_repack(qweight, qzeros, scales, g_idx, 8, 8, 4, data, scale, zero, perm), -EOPNOTSUPP);
        int32_t ok_idx[8] = {1, 0, 1, 0, 0, 1, 0, 1};
        ASSERT_EQ(dse__gptq_repack(qweight, qzeros, scales, ok_idx, 8, 8, 4, data, scale, zero, perm), 1);
        const int32_t want[8] = {1, 3, 4, 6, 0, 2, 5, 7}; /* stable sort by group */
        for (int i = 0; i < 8; i++)
                ASSERT_EQ(perm[i], want[i]);
        int32_t bad_idx[8] = {0, 0, 0, 0, 1, 1, 1, 2};
        ASSERT_ERR(dse__gptq_repack(qweight, qzeros, scales, bad_idx, 8, 8, 4, data, scale, zero, perm), -EOPNOTSUPP);
}

TEST(gptq_quantize_config_json_fallback) {
        /* no quantization_config in config.json: AutoGPTQ's quantize_config.json is used */
        char *hf = hf_copy("models/llama-gptq-sym", "\"quantization_config\"", "\"quantization_config_moved\"");
        ASSERT_TRUE(hf);
        char *out = tmp_dir();
        int r;
        const char *path = convert_fixture(hf, out, NULL, &r, &diag);
        ASSERT_OK(r);
        struct dse_model *m;
        ASSERT_OK(dse_model_open(path, 0, &m, &diag));
        const struct dse_tensor *t = dse__model_tensor(m, "model.layers.1.mlp.down_proj.weight");
        ASSERT_TRUE(t);
        ASSERT_EQ(t->dtype, DSE_DTYPE_Q4);
        ASSERT_EQ(t->group_size, 32);
        dse_model_free(m);
        tmp_rm(out);
        /* and without it, the packed tensors are refused with a reason */
        char p[8192];
        snprintf(p, sizeof p, "%s/quantize_config.json", hf);
        ASSERT_OK(unlink(p));
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EBADMSG);
        MSG_HAS("no awq/gptq quantization_config");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}

TEST(hf_llama_biases_refused) {
        char *hf = hf_copy("models/llama-bf16-linear-rope", "\"attention_bias\": false", "\"attention_bias\": true");
        ASSERT_TRUE(hf);
        int left;
        ASSERT_ERR(hf_convert(hf, &left), -EOPNOTSUPP);
        MSG_HAS("attention_bias");
        ASSERT_EQ(left, 0);
        tmp_rm(hf);
}
