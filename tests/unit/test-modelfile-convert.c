/* HF folder -> native file -> mmap: hyper-parameters parsed from config.json, every
 * float tensor byte-identical to the checkpoint, shards, tokenizer blobs, open_fd, the
 * resolver's cache, CRC32C. Expected values come from the fixtures' config.json and
 * safetensors files, not from the converter's own output. */
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>

#include "model/format.h"
#include "model/model.h"
#include "t.h"
#include "test-modelfile-helpers.h"

static const char *const float_fixtures[] = {
        "deepseek-v2-group-limited", "deepseek-v2-lite-sharded", "deepseek-v2-mla-qlora-yarn",
        "deepseek-v3-noaux-yarn",    "llama-bf16-linear-rope",   "llama3-rope-gqa",
        "qwen2-bf16-tied",
};

static struct dse_model *open_converted(const char *fixture, const char *dir, const char *quant) {
        char src[4096];
        snprintf(src, sizeof src, "%s", t_fixture(fixture));
        struct dse_diag diag = {{0}};
        int r;
        const char *out = convert_fixture(src, dir, quant, &r, &diag);
        if (r < 0) {
                fprintf(stderr, "  convert %s: %s (%s)\n", fixture, strerror(-r), diag.msg);
                return NULL;
        }
        struct dse_model *m;
        if ((r = dse_model_open(out, 0, &m, &diag)) < 0) {
                fprintf(stderr, "  open %s: %s (%s)\n", out, strerror(-r), diag.msg);
                return NULL;
        }
        return m;
}

/* The safetensors file of a fixture that holds `name` (single file or shards). */
static void *fixture_tensor(const char *fixture, const char *name, char *dtype, size_t *len) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", t_fixture(fixture));
        DIR *d = opendir(dir);
        void *out = NULL;
        struct dirent *e;
        while (d && !out && (e = readdir(d))) {
                size_t n = strlen(e->d_name);
                if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0)
                        continue;
                char p[8192];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                out = st_tensor_bytes(p, name, dtype, len);
        }
        if (d)
                closedir(d);
        return out;
}

TEST(crc32c_reference_vector) {
        /* RFC 3720 B.4 check value and the all-zero 32-byte vector */
        ASSERT_EQ(dse__crc32c_ref(0, "123456789", 9), 0xE3069283u);
        ASSERT_EQ(dse__crc32c(0, "123456789", 9), 0xE3069283u);
        uint8_t zeros[32] = {0};
        ASSERT_EQ(dse__crc32c_ref(0, zeros, 32), 0x8A9136AAu);
        uint8_t buf[1000];
        for (int i = 0; i < 1000; i++)
                buf[i] = (uint8_t)(i * 131 + 7);
        for (int off = 0; off < 9; off++)
                for (int len = 0; len < 300; len += 37) {
                        ASSERT_EQ(dse__crc32c(0, buf + off, (size_t)len), dse__crc32c_ref(0, buf + off, (size_t)len));
                        /* chaining equals one pass */
                        uint32_t a = dse__crc32c(0, buf + off, (size_t)len / 2);
                        ASSERT_EQ(dse__crc32c(a, buf + off + len / 2, (size_t)(len - len / 2)),
                                  dse__crc32c_ref(0, buf + off, (size_t)len));
                }
}

TEST(element_conversions) {
        ASSERT_FLOAT_EQ(dse__f16_to_f32(0x3c00), 1.0f);
        ASSERT_FLOAT_EQ(dse__f16_to_f32(0xc000), -2.0f);
        ASSERT_FLOAT_EQ(dse__f16_to_f32(0x0001), 5.9604644775390625e-8f); /* smallest subnormal */
        ASSERT_FLOAT_EQ(dse__f16_to_f32(0x7bff), 65504.0f);
        ASSERT_FLOAT_EQ(dse__bf16_to_f32(0x3f80), 1.0f);
        ASSERT_EQ(dse__f32_to_bf16(1.0f), 0x3f80);
        ASSERT_EQ(dse__f32_to_bf16(1.00390625f), 0x3f80); /* tie to even */
        ASSERT_EQ(dse__f32_to_bf16(1.01171875f), 0x3f82); /* tie to even, upwards */
        ASSERT_FLOAT_EQ(dse__e4m3_to_f32(0x7e), 448.0f);
        ASSERT_FLOAT_EQ(dse__e4m3_to_f32(0x38), 1.0f);
        ASSERT_FLOAT_EQ(dse__e4m3_to_f32(0x01), 0.001953125f); /* 2^-9 */
        ASSERT_FLOAT_EQ(dse__e4m3_to_f32(0xb8), -1.0f);
        ASSERT_TRUE(isnan(dse__e4m3_to_f32(0x7f)));
}

TEST(config_llama_linear_rope) {
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/llama-bf16-linear-rope", dir, NULL);
        ASSERT_TRUE(m);
        const struct dse_hparams *hp = dse__model_hparams(m);
        ASSERT_EQ(hp->arch, DSE_ARCH_LLAMA);
        ASSERT_EQ(hp->n_layers, 3);
        ASSERT_EQ(hp->hidden_size, 128);
        ASSERT_EQ(hp->intermediate_size, 352);
        ASSERT_EQ(hp->n_heads, 8);
        ASSERT_EQ(hp->n_kv_heads, 2);
        ASSERT_EQ(hp->head_dim, 16);
        ASSERT_EQ(hp->vocab_size, 384);
        ASSERT_EQ(hp->max_position_embeddings, 2048);
        ASSERT_EQ(hp->rope_type, DSE_ROPE_LINEAR);
        ASSERT_NEAR(hp->rope_factor, 4.0, 0);
        ASSERT_NEAR(hp->rope_theta, 100000.0, 0);
        ASSERT_NEAR(hp->rms_norm_eps, 1e-6f, 0);
        ASSERT_EQ(hp->tie_word_embeddings, 0);
        ASSERT_EQ(hp->attention_bias, 0);
        ASSERT_EQ(hp->bos_token_id, 0);
        ASSERT_EQ(hp->eos_token_id, 1);
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(config_llama3_rope) {
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/llama3-rope-gqa", dir, NULL);
        ASSERT_TRUE(m);
        const struct dse_hparams *hp = dse__model_hparams(m);
        ASSERT_EQ(hp->rope_type, DSE_ROPE_LLAMA3);
        ASSERT_NEAR(hp->rope_factor, 8.0, 0);
        ASSERT_NEAR(hp->rope_low_freq_factor, 1.0, 0);
        ASSERT_NEAR(hp->rope_high_freq_factor, 4.0, 0);
        ASSERT_EQ(hp->rope_original_max_pos, 64);
        ASSERT_NEAR(hp->rope_theta, 500000.0, 0);
        ASSERT_NEAR(hp->rms_norm_eps, 1e-5f, 0);
        ASSERT_EQ(hp->head_dim, 32);
        ASSERT_EQ(hp->n_kv_heads, 2);
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(config_qwen2_tied) {
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/qwen2-bf16-tied", dir, NULL);
        ASSERT_TRUE(m);
        const struct dse_hparams *hp = dse__model_hparams(m);
        ASSERT_EQ(hp->arch, DSE_ARCH_QWEN2);
        ASSERT_EQ(hp->tie_word_embeddings, 1);
        ASSERT_EQ(hp->attention_bias, 1);
        ASSERT_EQ(hp->rope_type, DSE_ROPE_DEFAULT);
        ASSERT_NEAR(hp->rope_theta, 1e6, 0);
        ASSERT_TRUE(dse__model_tensor(m, "lm_head.weight") == NULL);
        ASSERT_TRUE(dse__model_tensor(m, "model.layers.2.self_attn.k_proj.bias") != NULL);
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(config_deepseek_v2_group_limited) {
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/deepseek-v2-group-limited", dir, NULL);
        ASSERT_TRUE(m);
        const struct dse_hparams *hp = dse__model_hparams(m);
        ASSERT_EQ(hp->arch, DSE_ARCH_DEEPSEEK_V2);
        ASSERT_EQ(hp->q_lora_rank, 64);
        ASSERT_EQ(hp->kv_lora_rank, 64);
        ASSERT_EQ(hp->qk_nope_head_dim, 24);
        ASSERT_EQ(hp->qk_rope_head_dim, 8);
        ASSERT_EQ(hp->v_head_dim, 32);
        ASSERT_EQ(hp->n_routed_experts, 16);
        ASSERT_EQ(hp->n_shared_experts, 1);
        ASSERT_EQ(hp->n_experts_per_tok, 4);
        ASSERT_EQ(hp->moe_intermediate_size, 64);
        ASSERT_EQ(hp->first_k_dense_replace, 1);
        ASSERT_EQ(hp->moe_layer_freq, 1);
        ASSERT_EQ(hp->n_group, 4);
        ASSERT_EQ(hp->topk_group, 2);
        ASSERT_EQ(hp->topk_method, DSE_MOE_GROUP_LIMITED_GREEDY);
        ASSERT_EQ(hp->scoring_func, DSE_MOE_SOFTMAX);
        ASSERT_EQ(hp->norm_topk_prob, 0);
        ASSERT_NEAR(hp->routed_scaling_factor, 4.0, 0);
        ASSERT_EQ(hp->rope_type, DSE_ROPE_YARN);
        ASSERT_NEAR(hp->rope_factor, 4.0, 0);
        ASSERT_EQ(hp->rope_original_max_pos, 32);
        ASSERT_NEAR(hp->rope_mscale, 1.0, 0);
        ASSERT_NEAR(hp->rope_mscale_all_dim, 0.707f, 0);
        ASSERT_NEAR(hp->rope_beta_fast, 32, 0);
        ASSERT_NEAR(hp->rope_beta_slow, 1, 0);
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(config_deepseek_v2_lite_no_q_lora) {
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/deepseek-v2-lite-sharded", dir, NULL);
        ASSERT_TRUE(m);
        const struct dse_hparams *hp = dse__model_hparams(m);
        ASSERT_EQ(hp->q_lora_rank, 0); /* null in config.json */
        ASSERT_TRUE(dse__model_tensor(m, "model.layers.0.self_attn.q_proj.weight") != NULL);
        ASSERT_TRUE(dse__model_tensor(m, "model.layers.0.self_attn.q_a_proj.weight") == NULL);
        ASSERT_EQ(hp->topk_method, DSE_MOE_GREEDY);
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(config_deepseek_v3_noaux) {
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/deepseek-v3-noaux-yarn", dir, NULL);
        ASSERT_TRUE(m);
        const struct dse_hparams *hp = dse__model_hparams(m);
        ASSERT_EQ(hp->arch, DSE_ARCH_DEEPSEEK_V3);
        ASSERT_EQ(hp->topk_method, DSE_MOE_NOAUX_TC);
        ASSERT_EQ(hp->scoring_func, DSE_MOE_SIGMOID);
        ASSERT_EQ(hp->norm_topk_prob, 1);
        ASSERT_NEAR(hp->routed_scaling_factor, 2.5, 0);
        const struct dse_tensor *b = dse__model_tensor(m, "model.layers.1.mlp.gate.e_score_correction_bias");
        ASSERT_TRUE(b);
        ASSERT_EQ(b->dtype, DSE_DTYPE_F32);
        ASSERT_EQ(b->shape[0], 16);
        dse_model_free(m);
        tmp_rm(dir);
}

/* Every checkpoint tensor is in the native file with the same dtype, shape and bytes,
 * every native tensor is 64-byte aligned, and the data region starts on 2 MiB. */
TEST(float_fixtures_roundtrip_exact) {
        for (size_t f = 0; f < sizeof float_fixtures / sizeof float_fixtures[0]; f++) {
                char fx[256];
                snprintf(fx, sizeof fx, "models/%s", float_fixtures[f]);
                char *dir = tmp_dir();
                struct dse_model *m = open_converted(fx, dir, NULL);
                ASSERT_TRUE(m);
                struct dse_diag diag = {{0}};
                ASSERT_OK(dse_model_verify(m, &diag));
                size_t n = dse__model_n_tensors(m);
                ASSERT_TRUE(n > 10);
                const uint8_t *lowest = NULL;
                for (size_t i = 0; i < n; i++) {
                        const struct dse_tensor *t = dse__model_tensor_at(m, i);
                        ASSERT_EQ((uintptr_t)t->data % 64, 0);
                        if (!lowest || (const uint8_t *)t->data < lowest)
                                lowest = t->data;
                        char dtype[16];
                        size_t len = 0;
                        void *src = fixture_tensor(fx, t->name, dtype, &len);
                        if (!src)
                                T_FAIL("%s: tensor '%s' not in the checkpoint", fx, t->name);
                        ASSERT_STREQ(dse_dtype_to_string(t->dtype), dtype);
                        ASSERT_EQ(t->size_bytes, len);
                        int same = memcmp(src, t->data, len) == 0;
                        free(src);
                        if (!same)
                                T_FAIL("%s: tensor '%s' differs from the checkpoint", fx, t->name);
                }
                /* tensor data region: the first tensor sits at the 2 MiB-aligned data start */
                const struct dse_tensor *t0 = dse__model_tensor_at(m, 0);
                (void)t0;
                char path[4096];
                snprintf(path, sizeof path, "%s/model.dse", dir);
                size_t flen;
                uint8_t *file = slurp(path, &flen);
                ASSERT_TRUE(file);
                uint64_t data_off = 0;
                for (int i = 7; i >= 0; i--)
                        data_off = data_off << 8 | file[24 + i];
                free(file);
                ASSERT_EQ(data_off % (2u << 20), 0);
                ASSERT_TRUE(data_off > 0);
                dse_model_free(m);
                tmp_rm(dir);
        }
}

TEST(deepseek_v2_schema_counts) {
        /* deepseek-v2-mla-qlora-yarn: 3 layers, layer 0 dense, layers 1-2 MoE with 8
         * experts + shared: embed + norm + lm_head + per layer 2 norms + 6 MLA tensors
         * (q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b) + o_proj; dense 3, MoE 1 + 8*3 + 3 */
        char *dir = tmp_dir();
        struct dse_model *m = open_converted("models/deepseek-v2-mla-qlora-yarn", dir, NULL);
        ASSERT_TRUE(m);
        size_t want = 3 + 3 * (2 + 7) + 3 + 2 * (1 + 8 * 3 + 3);
        ASSERT_EQ(dse__model_n_tensors(m), want);
        const struct dse_tensor *sh = dse__model_tensor(m, "model.layers.2.mlp.shared_experts.up_proj.weight");
        ASSERT_TRUE(sh);
        ASSERT_EQ(sh->shape[0], 128); /* moe_intermediate_size 64 * 2 shared experts */
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(open_fd_memfd) {
        char *dir = tmp_dir();
        char src[4096];
        snprintf(src, sizeof src, "%s", t_fixture("models/qwen2-bf16-tied"));
        struct dse_diag diag = {{0}};
        int r;
        const char *out = convert_fixture(src, dir, NULL, &r, &diag);
        ASSERT_OK(r);
        size_t len;
        void *bytes = slurp(out, &len);
        ASSERT_TRUE(bytes);
        ASSERT_EQ(len % (2u << 20), 0); /* padded for hugetlbfs memfds */
        int fd = memfd_create("dsv-test-model", MFD_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, bytes, len), (ssize_t)len);
        free(bytes);
        struct dse_model *m;
        ASSERT_OK(dse_model_open_fd(fd, DSE_MODEL_POPULATE, &m, &diag));
        close(fd); /* the mapping outlives the descriptor */
        uint64_t huge, total;
        ASSERT_OK(dse_model_huge_bytes(m, &huge, &total));
        ASSERT_EQ(total, len);
        ASSERT_TRUE(huge <= total);
        ASSERT_OK(dse_model_verify(m, &diag));
        ASSERT_EQ(dse__model_hparams(m)->vocab_size, 448);
        dse_model_free(m);
        ASSERT_ERR(dse_model_open_fd(-1, 0, &m, &diag), -EINVAL);
        tmp_rm(dir);
}

/* The VmFlags of the mapping that holds addr, from /proc/self/smaps ("" if none). */
static void vma_flags(const void *addr, char *flags, size_t len) {
        FILE *f = fopen("/proc/self/smaps", "re");
        char line[512];
        int inside = 0;
        flags[0] = 0;
        while (f && fgets(line, sizeof line, f)) {
                unsigned long lo, hi;
                if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
                        inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
                else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
                        snprintf(flags, len, "%.200s", line + 8);
                        break;
                }
        }
        if (f)
                fclose(f);
}

/* The converter leaves its output out of the page cache (written pages come in small
 * folios, which a mapping would keep), and the loader asks for 2 MiB pages (VmFlags "hg",
 * MADV_HUGEPAGE) before the first touch. Whether the kernel then maps them so depends on
 * its file-THP support; that part is not asserted. */
TEST(output_uncached_and_mapped_for_2mib_pages) {
        char *dir = tmp_dir();
        struct dse_diag diag = {{0}};
        int r;
        const char *out = convert_fixture(t_fixture("models/qwen2-bf16-tied"), dir, NULL, &r, &diag);
        ASSERT_OK(r);
        struct statfs sf;
        ASSERT_OK(statfs(out, &sf));
        if (sf.f_type != TMPFS_MAGIC) { /* on tmpfs the page cache is the file itself */
                int fd = open(out, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                struct stat st;
                ASSERT_OK(fstat(fd, &st));
                void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
                ASSERT_TRUE(p != MAP_FAILED);
                size_t pages = ((size_t)st.st_size + 4095) / 4096, resident = 0;
                unsigned char *vec = malloc(pages);
                ASSERT_OK(mincore(p, (size_t)st.st_size, vec));
                for (size_t i = 0; i < pages; i++)
                        resident += vec[i] & 1;
                ASSERT_EQ(resident, 0);
                free(vec);
                munmap(p, (size_t)st.st_size);
                close(fd);
        }
        struct dse_model *m;
        ASSERT_OK(dse_model_open(out, DSE_MODEL_POPULATE, &m, &diag));
        char flags[256];
        vma_flags(dse__model_tensor_at(m, 0)->data, flags, sizeof flags);
        ASSERT_TRUE(strstr(flags, " hg") != NULL);
        /* dse_model_huge_bytes reads the mapping's own VMA; the process-wide rollup must
         * agree, as nothing else here maps a file with 2 MiB pages */
        uint64_t huge = 1, total = 0;
        ASSERT_OK(dse_model_huge_bytes(m, &huge, &total));
        struct stat st;
        ASSERT_OK(stat(out, &st));
        ASSERT_EQ(total, (uint64_t)st.st_size);
        FILE *f = fopen("/proc/self/smaps_rollup", "re");
        ASSERT_TRUE(f != NULL);
        char line[256];
        unsigned long kb = 0;
        while (fgets(line, sizeof line, f) && sscanf(line, "FilePmdMapped: %lu kB", &kb) != 1)
                ;
        fclose(f);
        ASSERT_EQ(huge, (uint64_t)kb * 1024);
        fprintf(stderr, "  %llu of %llu bytes in 2 MiB pages\n", (unsigned long long)huge,
                (unsigned long long)total);
        dse_model_free(m);
        tmp_rm(dir);
}

TEST(tokenizer_blobs_embedded) {
        char *hf = tmp_dir(), *dir = tmp_dir();
        char a[4096], b[4096];
        const char *files[][2] = {
                {"models/qwen2-bf16-tied/config.json", "config.json"},
                {"models/qwen2-bf16-tied/model.safetensors", "model.safetensors"},
                {"tokenizers/models/qwen2_5/tokenizer.json", "tokenizer.json"},
                {"tokenizers/models/qwen2_5/tokenizer_config.json", "tokenizer_config.json"},
                {"tokenizers/models/sp_bpe/sp_bpe.model", "tokenizer.model"},
        };
        for (size_t i = 0; i < 5; i++) {
                snprintf(a, sizeof a, "%s", t_fixture(files[i][0]));
                snprintf(b, sizeof b, "%s/%s", hf, files[i][1]);
                ASSERT_OK(copy_file(a, b));
        }
        struct dse_diag diag = {{0}};
        int r;
        const char *out = convert_fixture(hf, dir, NULL, &r, &diag);
        ASSERT_OK(r);
        struct dse_model *m;
        ASSERT_OK(dse_model_open(out, 0, &m, &diag));
        for (size_t i = 2; i < 5; i++) {
                const struct dse_tensor *t = dse__model_tensor(m, files[i][1]);
                ASSERT_TRUE(t);
                ASSERT_EQ(t->dtype, DSE_DTYPE_U8);
                size_t len;
                void *want = slurp(t_fixture(files[i][0]), &len);
                ASSERT_TRUE(want);
                ASSERT_EQ(t->size_bytes, len);
                int same = memcmp(want, t->data, len) == 0;
                free(want);
                ASSERT_TRUE(same);
        }
        ASSERT_OK(dse_model_verify(m, &diag));
        dse_model_free(m);
        tmp_rm(hf);
        tmp_rm(dir);
}

TEST(resolve_caches_hf_folders) {
        char *cache = tmp_dir();
        setenv("DSV_CACHE_DIR", cache, 1);
        struct dse_diag diag = {{0}};
        char p1[4096], p2[4096], p3[4096];
        ASSERT_OK(dse_model_resolve(t_fixture("models/llama3-rope-gqa"), p1, sizeof p1, &diag));
        ASSERT_TRUE(strncmp(p1, cache, strlen(cache)) == 0);
        struct stat st1, st2;
        ASSERT_OK(stat(p1, &st1));
        ASSERT_OK(dse_model_resolve(t_fixture("models/llama3-rope-gqa"), p2, sizeof p2, &diag));
        ASSERT_STREQ(p1, p2);
        ASSERT_OK(stat(p2, &st2));
        ASSERT_EQ(st1.st_ino, st2.st_ino); /* not converted again */
        /* a native file resolves to itself */
        ASSERT_OK(dse_model_resolve(p1, p3, sizeof p3, &diag));
        ASSERT_STREQ(p1, p3);
        /* anything else is refused */
        ASSERT_ERR(dse_model_resolve(t_fixture("models/README.md"), p3, sizeof p3, &diag), -EINVAL);
        ASSERT_ERR(dse_model_resolve(t_fixture("models"), p3, sizeof p3, &diag), -EINVAL);
        ASSERT_ERR(dse_model_resolve(t_fixture("models/llama3-rope-gqa"), p3, 8, &diag), -ENAMETOOLONG);
        struct dse_model *m;
        ASSERT_OK(dse_model_open(p1, 0, &m, &diag));
        dse_model_free(m);
        unsetenv("DSV_CACHE_DIR");
        tmp_rm(cache);
}
