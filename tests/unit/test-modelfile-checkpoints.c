/* Checkpoints as users bring them: leftovers that must convert (module buffers, a tied
 * lm_head, extra index keys) and broken safetensors files that must fail with a message
 * naming the file and the tensor. Every checkpoint is a 1-layer llama written from
 * scratch into a temp folder. */
#include <dirent.h>
#include <math.h>
#include <sys/wait.h>

#include "model/format.h"
#include "model/model.h"
#include "t.h"
#include "test-log-capture.h"
#include "test-modelfile-helpers.h"

static struct dse_diag diag;

#define MSG_HAS(s)                                                                                \
        do {                                                                                      \
                if (!strstr(diag.msg, (s)))                                                       \
                        T_FAIL("message \"%s\" lacks \"%s\"", diag.msg, (s));                    \
        } while (0)

struct st_entry {
        const char *name, *dtype;
        int rows, cols; /* cols 0: a vector */
};

/* The tensors of a 1-layer llama with vocab 4, hidden 4, intermediate 8. */
static const struct st_entry tiny_llama[] = {
        {"model.embed_tokens.weight", "BF16", 4, 4},
        {"model.layers.0.input_layernorm.weight", "BF16", 4, 0},
        {"model.layers.0.self_attn.q_proj.weight", "BF16", 4, 4},
        {"model.layers.0.self_attn.k_proj.weight", "BF16", 4, 4},
        {"model.layers.0.self_attn.v_proj.weight", "BF16", 4, 4},
        {"model.layers.0.self_attn.o_proj.weight", "BF16", 4, 4},
        {"model.layers.0.post_attention_layernorm.weight", "BF16", 4, 0},
        {"model.layers.0.mlp.gate_proj.weight", "BF16", 8, 4},
        {"model.layers.0.mlp.up_proj.weight", "BF16", 8, 4},
        {"model.layers.0.mlp.down_proj.weight", "BF16", 4, 8},
        {"model.norm.weight", "BF16", 4, 0},
};
#define N_TINY (sizeof tiny_llama / sizeof tiny_llama[0])

static size_t entry_bytes(const struct st_entry *e) {
        size_t esize = strcmp(e->dtype, "F32") == 0 ? 4 : 2;
        return (size_t)e->rows * (size_t)(e->cols ? e->cols : 1) * esize;
}

static uint64_t rd_le64(const uint8_t *p) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

/* Writes a safetensors file: the header's length, the header, data_len bytes of 0x3c. */
static void write_st(const char *path, const char *header, size_t data_len) {
        FILE *f = fopen(path, "wb");
        uint64_t hl = strlen(header);
        for (int i = 0; i < 8; i++)
                fputc((int)((hl >> (8 * i)) & 0xff), f);
        fputs(header, f);
        for (size_t i = 0; i < data_len; i++)
                fputc(0x3c, f);
        fclose(f);
}

/* Writes a safetensors file holding `v` back to back, every byte 0x3c (a small finite
 * value in BF16 and F32). Returns the data size. */
static size_t write_entries(const char *path, const struct st_entry *v, size_t n) {
        char h[8192];
        size_t len = 1, off = 0;
        h[0] = '{';
        for (size_t i = 0; i < n; i++) {
                size_t b = entry_bytes(&v[i]);
                char shape[32];
                if (v[i].cols)
                        snprintf(shape, sizeof shape, "%d,%d", v[i].rows, v[i].cols);
                else
                        snprintf(shape, sizeof shape, "%d", v[i].rows);
                len += (size_t)snprintf(h + len, sizeof h - len,
                                        "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                                        i ? "," : "", v[i].name, v[i].dtype, shape, off, off + b);
                off += b;
        }
        snprintf(h + len, sizeof h - len, "}");
        write_st(path, h, off);
        return off;
}

/* A folder with a tiny-llama config.json (plus `config_extra`, a JSON fragment starting
 * with a comma, or "") and model.safetensors holding the tiny llama and `extra`. */
static char *tiny_folder(const char *config_extra, const struct st_entry *extra, size_t n_extra) {
        char *dir = tmp_dir();
        char p[4096];
        snprintf(p, sizeof p, "%s/config.json", dir);
        FILE *f = fopen(p, "w");
        fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": 4, \"hidden_size\": 4, \"intermediate_size\": 8,"
                   " \"num_hidden_layers\": 1, \"num_attention_heads\": 2%s}", config_extra);
        fclose(f);
        struct st_entry v[N_TINY + 8];
        memcpy(v, tiny_llama, sizeof tiny_llama);
        if (n_extra > 0) /* extra may be NULL then */
                memcpy(v + N_TINY, extra, n_extra * sizeof *extra);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_entries(p, v, N_TINY + n_extra);
        return dir;
}

/* Converts `hf` with the log collected; the output folder is removed. */
static int convert(const char *hf) {
        char *out = tmp_dir();
        int r;
        memset(&diag, 0, sizeof diag);
        t_log_start(DSE_LOG_INFO);
        convert_fixture(hf, out, NULL, &r, &diag);
        t_log_stop();
        tmp_rm(out);
        return r;
}

TEST(tiny_llama_converts) {
        char *hf = tiny_folder(", \"tie_word_embeddings\": true", NULL, 0);
        ASSERT_OK(convert(hf));
        tmp_rm(hf);
}

TEST(rotary_buffers_skipped_with_a_note) {
        const struct st_entry extra[] = {
                {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", 1, 0},
                {"model.layers.0.self_attn.rotary_emb.cos_cached", "F32", 2, 1},
                {"lm_head.weight", "BF16", 4, 4},
        };
        char *hf = tiny_folder("", extra, 3);
        ASSERT_OK(convert(hf));
        T_LOG_HAS("skipping 2 non-parameter buffers");
        tmp_rm(hf);
        /* a name that merely ends like a buffer is still unexpected */
        const struct st_entry odd[] = {{"model.layers.0.self_attn.myrotary_emb.inv_freq", "F32", 1, 0},
                                       {"lm_head.weight", "BF16", 4, 4}};
        hf = tiny_folder("", odd, 2);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("unexpected tensor 'model.layers.0.self_attn.myrotary_emb.inv_freq'");
        tmp_rm(hf);
}

TEST(tied_lm_head_in_the_file_is_the_embedding) {
        const struct st_entry extra[] = {{"lm_head.weight", "BF16", 4, 4}};
        char *hf = tiny_folder(", \"tie_word_embeddings\": true", extra, 1);
        char *out = tmp_dir();
        int r;
        t_log_start(DSE_LOG_INFO);
        const char *path = convert_fixture(hf, out, NULL, &r, &diag);
        t_log_stop();
        ASSERT_OK(r);
        T_LOG_HAS("lm_head.weight ignored (a copy of model.embed_tokens.weight)");
        struct dse_model *m;
        ASSERT_OK(dse_model_open(path, 0, &m, &diag));
        ASSERT_TRUE(!dse__model_tensor(m, "lm_head.weight"));
        ASSERT_TRUE(dse__model_tensor(m, "model.embed_tokens.weight"));
        dse_model_free(m);
        tmp_rm(out);
        tmp_rm(hf);
}

TEST(index_with_extra_keys_accepted) {
        char *hf = tiny_folder(", \"tie_word_embeddings\": true", NULL, 0);
        char p[4096], q[4096];
        snprintf(p, sizeof p, "%s/model.safetensors", hf);
        snprintf(q, sizeof q, "%s/model-00001-of-00001.safetensors", hf);
        ASSERT_OK(rename(p, q));
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", hf);
        FILE *f = fopen(p, "w");
        fprintf(f, "{\"metadata\": {\"total_size\": 352, \"format\": \"pt\", \"mergekit_version\": \"0.1\"},"
                   " \"dtype\": \"bfloat16\", \"weight_map\": {");
        for (size_t i = 0; i < N_TINY; i++)
                fprintf(f, "%s\"%s\": \"model-00001-of-00001.safetensors\"", i ? ", " : "", tiny_llama[i].name);
        fprintf(f, "}, \"trailer\": [1, 2]}");
        fclose(f);
        ASSERT_OK(convert(hf));
        tmp_rm(hf);
}

/* ---- broken safetensors files ------------------------------------------------------- */

/* Writes `header` and data_len bytes of data as dir/model.safetensors. */
static void write_raw(const char *dir, const char *header, size_t data_len) {
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_st(p, header, data_len);
}

static const char two_tensors[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[%d,%d]},"
                                  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}}";

TEST(st_offsets_must_tile_the_data) {
        char *hf = tiny_folder("", NULL, 0);
        char h[512];
        /* a gap between a and b */
        snprintf(h, sizeof h, two_tensors, 0, 8, 12, 16);
        write_raw(hf, h, 16);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("model.safetensors");
        MSG_HAS("data bytes [8, 12) between tensor 'a' and tensor 'b' belong to no tensor");
        /* bytes before the first tensor */
        snprintf(h, sizeof h, two_tensors, 4, 12, 12, 16);
        write_raw(hf, h, 16);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("data bytes [0, 4) before tensor 'a'");
        /* trailing bytes */
        snprintf(h, sizeof h, two_tensors, 0, 8, 8, 12);
        write_raw(hf, h, 20);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("8 trailing bytes after tensor 'b'");
        write_raw(hf, "{}", 4);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("4 trailing bytes after an empty header");
        /* overlap (the header parser's own check) */
        snprintf(h, sizeof h, two_tensors, 0, 8, 4, 8);
        write_raw(hf, h, 8);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("'a' and 'b' overlap");
        tmp_rm(hf);
}

TEST(st_header_must_be_a_utf8_object_with_string_metadata) {
        char *hf = tiny_folder("", NULL, 0);
        write_raw(hf, " {}", 0);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("does not start with '{'");
        MSG_HAS("model.safetensors");
        write_raw(hf, "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("not valid UTF-8 (at byte 3)");
        write_raw(hf, "{\"__metadata__\":{\"format\":\"pt\",\"total\":3}}", 0);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("__metadata__ entry 'total' is not a string");
        write_raw(hf, "{\"__metadata__\":[1]}", 0);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("__metadata__ is not a JSON object");
        /* trailing spaces pad a header, as the reference writer aligns the data */
        tmp_rm(hf);
        hf = tiny_folder(", \"tie_word_embeddings\": true", NULL, 0);
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors", hf);
        size_t len;
        uint8_t *f = slurp(p, &len);
        ASSERT_TRUE(f);
        uint64_t hl = rd_le64(f);
        FILE *o = fopen(p, "wb");
        for (int i = 0; i < 8; i++)
                fputc((int)(((hl + 5) >> (8 * i)) & 0xff), o);
        fwrite(f + 8, 1, hl, o);
        fputs("     ", o);
        fwrite(f + 8 + hl, 1, len - 8 - hl, o);
        fclose(o);
        free(f);
        ASSERT_OK(convert(hf));
        tmp_rm(hf);
}

/* Runs convert in a child with an alarm: a hang fails the test instead of stalling it. */
static int convert_no_hang(const char *hf) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
                alarm(10);
                int r = convert(hf);
                if (r != -EINVAL)
                        fprintf(stderr, "convert: %d %s\n", r, diag.msg);
                _exit(r == -EINVAL && strstr(diag.msg, "not a regular file") ? 0 : 1);
        }
        int status;
        waitpid(pid, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(shards_that_are_not_regular_files_refused_without_blocking) {
        char *hf = tiny_folder(", \"tie_word_embeddings\": true", NULL, 0);
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors", hf);
        ASSERT_OK(unlink(p));
        ASSERT_OK(mkfifo(p, 0600));
        ASSERT_EQ(convert_no_hang(hf), 0);
        ASSERT_OK(unlink(p));
        ASSERT_OK(mkdir(p, 0700));
        ASSERT_EQ(convert_no_hang(hf), 0);
        ASSERT_OK(rmdir(p));
        ASSERT_OK(symlink("/dev/zero", p));
        ASSERT_EQ(convert_no_hang(hf), 0);
        ASSERT_OK(unlink(p));
        /* config.json and tokenizer.json as FIFOs */
        write_entries(p, tiny_llama, N_TINY);
        snprintf(p, sizeof p, "%s/tokenizer.json", hf);
        ASSERT_OK(mkfifo(p, 0600));
        ASSERT_EQ(convert_no_hang(hf), 0);
        ASSERT_OK(unlink(p));
        snprintf(p, sizeof p, "%s/config.json", hf);
        ASSERT_OK(unlink(p));
        ASSERT_OK(mkfifo(p, 0600));
        ASSERT_EQ(convert_no_hang(hf), 0);
        tmp_rm(hf);
        /* a FIFO given as a native model file */
        char *dir = tmp_dir();
        snprintf(p, sizeof p, "%s/model.dse", dir);
        ASSERT_OK(mkfifo(p, 0600));
        struct dse_model *m;
        ASSERT_ERR(dse_model_open(p, 0, &m, &diag), -EINVAL);
        MSG_HAS("is a FIFO, not a regular file");
        tmp_rm(dir);
}

/* ---- NaN and Inf ---------------------------------------------------------------------- */

/* Overwrites element `i` of tensor `name` (BF16) in dir/model.safetensors with `bits`. */
static void poke_bf16(const char *dir, const char *name, size_t i, uint16_t bits) {
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        size_t len = 0;
        uint8_t *f = slurp(p, &len);
        uint64_t hl = rd_le64(f);
        char key[256];
        snprintf(key, sizeof key, "\"%s\":", name);
        char *h = strndup((char *)f + 8, hl);
        unsigned long long b, e;
        char *off = strstr(strstr(h, key), "\"data_offsets\":");
        if (sscanf(off, "\"data_offsets\":[%llu,%llu]", &b, &e) == 2) {
                f[8 + hl + b + 2 * i] = (uint8_t)(bits & 0xff);
                f[8 + hl + b + 2 * i + 1] = (uint8_t)(bits >> 8);
        }
        FILE *o = fopen(p, "wb");
        fwrite(f, 1, len, o);
        fclose(o);
        free(h);
        free(f);
}

TEST(nan_and_inf_reported_with_the_tensor_name) {
        char *hf = tiny_folder(", \"tie_word_embeddings\": true", NULL, 0);
        poke_bf16(hf, "model.norm.weight", 2, 0x7fc0);                      /* NaN */
        poke_bf16(hf, "model.layers.0.mlp.up_proj.weight", 5, 0xff80);      /* -Inf */
        poke_bf16(hf, "model.layers.0.mlp.up_proj.weight", 9, 0x7f80);      /* +Inf */
        char *out = tmp_dir();
        int r;
        t_log_start(DSE_LOG_INFO);
        const char *path = convert_fixture(hf, out, NULL, &r, &diag);
        ASSERT_OK(r);
        T_LOG_HAS("model.safetensors: tensor 'model.norm.weight': 1 NaN and 0 Inf values (the first at element 2)");
        T_LOG_HAS("tensor 'model.layers.0.mlp.up_proj.weight': 0 NaN and 2 Inf values (the first at element 5)");
        ASSERT_TRUE(!strstr(t_log, "q_proj"));
        /* the native file keeps them; verify --values finds both again, by name */
        struct dse_model *m;
        ASSERT_OK(dse_model_open(path, 0, &m, &diag));
        ASSERT_OK(dse_model_verify(m, &diag));
        t_log[0] = 0;
        size_t n_bad = 0;
        ASSERT_OK(dse_model_verify_values(m, &n_bad));
        t_log_stop();
        ASSERT_EQ(n_bad, 2);
        T_LOG_HAS("model.dse: tensor 'model.norm.weight': 1 NaN and 0 Inf values");
        T_LOG_HAS("tensor 'model.layers.0.mlp.up_proj.weight': 0 NaN and 2 Inf values");
        dse_model_free(m);
        tmp_rm(out);
        tmp_rm(hf);
}

TEST(nonfinite_count_per_dtype) {
        struct dse__nonfinite a = {0};
        const float f[] = {1.0f, NAN, INFINITY, -INFINITY, 0.0f};
        dse__nonfinite_count(DSE_DTYPE_F32, f, 5, 10, &a);
        ASSERT_EQ(a.n_nan, 1);
        ASSERT_EQ(a.n_inf, 2);
        ASSERT_EQ(a.first, 11);
        struct dse__nonfinite h = {0};
        const uint16_t f16[] = {0x3c00, 0x7c00, 0xfc01, 0x7bff}; /* 1, +Inf, NaN, max finite */
        dse__nonfinite_count(DSE_DTYPE_F16, f16, 4, 0, &h);
        ASSERT_EQ(h.n_nan, 1);
        ASSERT_EQ(h.n_inf, 1);
        ASSERT_EQ(h.first, 1);
        struct dse__nonfinite e = {0};
        const uint8_t e4m3[] = {0x7e, 0x7f, 0xff, 0x78}; /* 448, NaN, NaN, 256: no Inf in FN */
        dse__nonfinite_count(DSE_DTYPE_F8_E4M3, e4m3, 4, 0, &e);
        ASSERT_EQ(e.n_nan, 2);
        ASSERT_EQ(e.n_inf, 0);
        struct dse__nonfinite q = {0};
        dse__nonfinite_count(DSE_DTYPE_Q8, e4m3, 4, 0, &q);
        ASSERT_EQ(q.n_nan + q.n_inf, 0);
}

/* ---- config.json ---------------------------------------------------------------------- */

TEST(quant_method_claimed_on_plain_weights) {
        char *hf = tiny_folder(", \"tie_word_embeddings\": true, \"quantization_config\": {\"quant_method\": \"awq\","
                               " \"bits\": 4, \"group_size\": 4, \"version\": \"gemm\", \"zero_point\": true}",
                               NULL, 0);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("config.json: quantization_config claims quant_method 'awq' but no weight is quantized");
        tmp_rm(hf);
        hf = tiny_folder(", \"tie_word_embeddings\": true, \"quantization_config\": {\"quant_method\": \"fp8\","
                         " \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", \"weight_block_size\": [128, 128]}",
                         NULL, 0);
        ASSERT_ERR(convert(hf), -EBADMSG);
        MSG_HAS("quant_method 'fp8' but no weight is quantized");
        tmp_rm(hf);
}

TEST(tied_lm_head_that_differs_is_a_warning) {
        const struct st_entry extra[] = {{"lm_head.weight", "BF16", 4, 4}};
        char *hf = tiny_folder(", \"tie_word_embeddings\": true", extra, 1);
        poke_bf16(hf, "lm_head.weight", 3, 0x3f80);
        ASSERT_OK(convert(hf));
        T_LOG_HAS("lm_head.weight ignored (it differs from model.embed_tokens.weight)");
        tmp_rm(hf);
}
