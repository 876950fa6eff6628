/* compressed-tensors checkpoints (quant_method "compressed-tensors"), written from the
 * model fixtures by tests/ct/make-ct-fixture.py with the format's documented packing:
 *
 *   int4 (pack-quantized, and int-quantized with one int8 per value): the GPTQ and AWQ
 *        fixtures re-encoded with the same integers, scales and zero points convert to
 *        native tensors byte-identical to the original fixture's, and reproduce the
 *        fixture's reference logits on the exact path (max abs <= 1e-3, greedy ids
 *        identical).
 *   int8 (W8A8: int-quantized weights per channel or per group, dynamic per-token int8
 *        activations): every native weight equals (q - zero) * scale of the checkpoint,
 *        compared with a float32 twin the script writes; symmetric weights become native
 *        Q8, weights with zero points float32; `ignore` entries (names and "re:"
 *        patterns) stay in their float type; the logits equal the twin's within 1e-3.
 *   errors: each broken checkpoint is refused with a message naming the defect, and
 *        leaves no output behind. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dse.h"
#include "model-ref.h"
#include "model/model.h"
#include "t.h"

#define STRICT_MAX_ABS 1e-3
#define N_DECODE 16

static char tmp[] = "/tmp/dsv-ct-XXXXXX";

/* Runs make-ct-fixture.py with `args`; 0 on success. */
static int make_fixture(const char *args) {
        const char *srcdir = getenv("DSV_SOURCE_DIR");
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "python3 '%s/tests/ct/make-ct-fixture.py' %s", srcdir ? srcdir : ".", args);
        int r = system(cmd);
        if (r != 0)
                fprintf(stderr, "  failed: %s\n", cmd);
        return r;
}

static const char *fixture_dir(const char *name) {
        static char dir[4][1024];
        static int slot;
        char *d = dir[slot++ % 4];
        snprintf(d, sizeof dir[0], "%s/%s", t_fixture("models"), name);
        return d;
}

static void remove_tmp(void) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", tmp);
}

/* A path inside this run's temp folder, made on first use and removed at exit. */
static const char *tmp_path(const char *name) {
        static int made;
        if (!made && mkdtemp(tmp)) {
                made = 1;
                atexit(remove_tmp);
        }
        static char p[8][1200];
        static int slot;
        char *d = p[slot++ % 8];
        snprintf(d, sizeof p[0], "%s/%s", tmp, name);
        return d;
}

/* Every tensor of a against the same tensor of b: names, types, shapes and bytes. Returns
 * the number of tensors that differ and counts a's Q4/Q8 matrices in *ret_quantized. */
static size_t diff_models(const char *a_path, const char *b_path, int *ret_quantized) {
        struct dse_model *a = NULL, *b = NULL;
        struct dse_diag diag = {{0}};
        if (dse_model_open(a_path, 0, &a, &diag) < 0 || dse_model_open(b_path, 0, &b, &diag) < 0) {
                fprintf(stderr, "  open: %s\n", diag.msg);
                dse_model_free(a);
                return 1;
        }
        size_t differ = dse__model_n_tensors(a) != dse__model_n_tensors(b);
        *ret_quantized = 0;
        for (size_t i = 0; i < dse__model_n_tensors(a); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(a, i), *u = dse__model_tensor(b, t->name);
                *ret_quantized += t->dtype == DSE_DTYPE_Q4 || t->dtype == DSE_DTYPE_Q8;
                if (!u || u->dtype != t->dtype || u->n_dims != t->n_dims || u->shape[0] != t->shape[0] ||
                    u->shape[1] != t->shape[1] || u->group_size != t->group_size || u->size_bytes != t->size_bytes ||
                    memcmp(u->data, t->data, t->size_bytes) != 0) {
                        fprintf(stderr, "  tensor '%s' differs\n", t->name);
                        differ++;
                }
        }
        dse_model_free(a);
        dse_model_free(b);
        return differ;
}

/* Max abs difference of the logits against the fixture's reference, and whether the
 * greedy ids are the reference's. */
static int logits_match_reference(const char *fixture, const char *src, const char *native) {
        char path[1200];
        int32_t prompt[512], gen[N_DECODE];
        snprintf(path, sizeof path, "%s/ref/prompt_ids.json", fixture_dir(fixture));
        int P = read_ids(path, prompt, 512);
        snprintf(path, sizeof path, "%s/ref/generated_ids.json", fixture_dir(fixture));
        if (P <= 0 || read_ids(path, gen, N_DECODE) != N_DECODE)
                return 0;
        size_t len_l = 0, len_d = 0;
        snprintf(path, sizeof path, "%s/ref/logits.f32", fixture_dir(fixture));
        float *ref = slurp(path, &len_l);
        snprintf(path, sizeof path, "%s/ref/decode_logits.f32", fixture_dir(fixture));
        float *ref_decode = slurp(path, &len_d);
        int V = 0;
        float *got = ref && ref_decode ? convert_and_run(src, native, prompt, P, gen, N_DECODE, &V) : NULL;
        int ok = got && len_l == (size_t)P * V * 4 && len_d == (size_t)N_DECODE * V * 4;
        double max_abs = 0;
        int greedy = ok && argmax(got + (size_t)(P - 1) * V, V) == gen[0];
        for (size_t i = 0; ok && i < (size_t)P * V; i++)
                max_abs = fmax(max_abs, fabs((double)got[i] - ref[i]));
        for (int j = 0; ok && j < N_DECODE; j++) {
                const float *row = got + (size_t)(P + j) * V;
                for (int i = 0; i < V; i++)
                        max_abs = fmax(max_abs, fabs((double)row[i] - ref_decode[(size_t)j * V + i]));
                greedy &= j + 1 == N_DECODE || argmax(row, V) == gen[j + 1];
        }
        fprintf(stderr, "  %-28s logits max abs %.3g to the reference, greedy ids %s\n", fixture, max_abs,
                greedy ? "identical" : "DIVERGE");
        free(got);
        free(ref);
        free(ref_decode);
        return ok && greedy && max_abs <= STRICT_MAX_ABS;
}

static void check_int4(const char *fixture, int unpacked) {
        char args[4096];
        const char *ct = tmp_path(unpacked ? "int4-unpacked" : "int4");
        snprintf(args, sizeof args, "int4 '%s' '%s'%s", fixture_dir(fixture), ct, unpacked ? " --unpacked" : "");
        ASSERT_EQ(make_fixture(args), 0);
        const char *orig_native = tmp_path("orig.dse"), *ct_native = tmp_path("ct.dse");
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_model_convert_hf(fixture_dir(fixture), orig_native, "auto", &diag));
        ASSERT_TRUE(logits_match_reference(fixture, ct, ct_native));
        int n_quantized = 0;
        size_t differ = diff_models(ct_native, orig_native, &n_quantized);
        fprintf(stderr, "  %-28s %s: %d Q4 matrices, %zu native tensors differ from the %s conversion\n", fixture,
                unpacked ? "int-quantized" : "pack-quantized", n_quantized, differ, fixture);
        ASSERT_EQ(differ, 0);
        ASSERT_TRUE(n_quantized > 0);
        unlink(orig_native);
        unlink(ct_native);
}

TEST(int4_gptq_symmetric) { check_int4("llama-gptq-sym", 0); }
TEST(int4_awq_zero_points) { check_int4("qwen2-awq-g32", 0); }
TEST(int4_gptq_act_order_zero_points) { check_int4("llama-gptq-actorder-asym", 0); }
TEST(int4_unpacked_act_order_zero_points) { check_int4("llama-gptq-actorder-asym", 1); }

/* The native value of weight [r, c] of a Q8 or float tensor. */
static float native_value(const struct dse_model *m, const struct dse_tensor *t, int64_t r, int64_t c) {
        int64_t cols = t->shape[1];
        if (t->dtype == DSE_DTYPE_F32)
                return ((const float *)t->data)[r * cols + c];
        char name[DSE_TENSOR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.scale", t->name);
        const struct dse_tensor *sc = dse__model_tensor(m, name);
        int64_t ng = (cols + t->group_size - 1) / t->group_size;
        return (float)((const int8_t *)t->data)[r * cols + c] * ((const float *)sc->data)[r * ng + c / t->group_size];
}

/* W8A8: the checkpoint's matrices against the float32 twin, value by value. */
static void check_int8(const char *extra, enum dse_dtype want) {
        char args[4096];
        const char *ct = tmp_path("int8"), *twin = tmp_path("int8-twin");
        snprintf(args, sizeof args, "int8 '%s' '%s' '%s' --ignore 're:.*layers\\.1\\.mlp\\.down_proj$' %s",
                 fixture_dir("llama-bf16-linear-rope"), ct, twin, extra);
        ASSERT_EQ(make_fixture(args), 0);
        const char *ct_native = tmp_path("ct8.dse"), *twin_native = tmp_path("twin.dse");
        int32_t prompt[512], gen[N_DECODE];
        char path[1200];
        snprintf(path, sizeof path, "%s/ref/prompt_ids.json", fixture_dir("llama-bf16-linear-rope"));
        int P = read_ids(path, prompt, 512);
        snprintf(path, sizeof path, "%s/ref/generated_ids.json", fixture_dir("llama-bf16-linear-rope"));
        ASSERT_EQ(read_ids(path, gen, N_DECODE), N_DECODE);
        int V = 0, V2 = 0;
        float *got = convert_and_run(ct, ct_native, prompt, P, gen, N_DECODE, &V);
        float *want_logits = convert_and_run(twin, twin_native, prompt, P, gen, N_DECODE, &V2);
        ASSERT_TRUE(got && want_logits && V == V2);
        double max_abs = 0;
        for (size_t i = 0; i < (size_t)(P + N_DECODE) * V; i++)
                max_abs = fmax(max_abs, fabs((double)got[i] - want_logits[i]));

        struct dse_model *m = NULL, *f = NULL;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_model_open(ct_native, 0, &m, &diag));
        ASSERT_OK(dse_model_open(twin_native, 0, &f, &diag));
        size_t differ = 0;
        int n_want = 0, n_quantized = 0, minus128 = 0;
        for (size_t i = 0; i < dse__model_n_tensors(m); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(m, i), *u = dse__model_tensor(f, t->name);
                if (!u || u->dtype != DSE_DTYPE_F32 || t->n_dims != 2)
                        continue; /* not one the script quantized: those are float32 in the twin */
                n_want += t->dtype == want;
                n_quantized++;
                for (int64_t r = 0; r < t->shape[0]; r++)
                        for (int64_t c = 0; c < t->shape[1]; c++) {
                                float w = native_value(m, t, r, c), x = ((const float *)u->data)[r * t->shape[1] + c];
                                differ += memcmp(&w, &x, 4) != 0;
                                minus128 += t->dtype == DSE_DTYPE_Q8 && ((const int8_t *)t->data)[r * t->shape[1] + c] == -128;
                        }
        }
        const struct dse_tensor *ignored = dse__model_tensor(m, "model.layers.1.mlp.down_proj.weight");
        const struct dse_tensor *head = dse__model_tensor(m, "lm_head.weight");
        fprintf(stderr, "  int8 %-22s %d native %s matrices, %zu values differ from (q - zero) * scale, logits max abs "
                "%.3g to the float32 twin; ignored layer %s, lm_head %s\n", extra, n_want, dse_dtype_to_string(want),
                differ, max_abs, ignored ? dse_dtype_to_string(ignored->dtype) : "missing",
                head ? dse_dtype_to_string(head->dtype) : "missing");
        ASSERT_EQ(differ, 0);
        ASSERT_TRUE(n_want > 0);
        ASSERT_EQ(n_want, n_quantized); /* every projection but the ignored one */
        ASSERT_TRUE(want != DSE_DTYPE_Q8 || minus128 >= 1);
        ASSERT_TRUE(ignored && ignored->dtype == DSE_DTYPE_BF16);
        ASSERT_TRUE(head && head->dtype == DSE_DTYPE_BF16);
        ASSERT_TRUE(max_abs <= STRICT_MAX_ABS);
        dse_model_free(m);
        dse_model_free(f);
        free(got);
        free(want_logits);
        unlink(ct_native);
        unlink(twin_native);
}

TEST(int8_per_channel_symmetric_is_native_q8) { check_int8("", DSE_DTYPE_Q8); }
TEST(int8_groups_of_64_is_native_q8) { check_int8("--group 64", DSE_DTYPE_Q8); }
TEST(int8_zero_points_are_kept_exact_as_f32) { check_int8("--asym", DSE_DTYPE_F32); }

/* ---- broken checkpoints ------------------------------------------------------------- */

/* Replaces the first `from` in dir/config.json with `to`. */
static int edit_config(const char *dir, const char *from, const char *to) {
        char path[1300];
        snprintf(path, sizeof path, "%s/config.json", dir);
        size_t len;
        char *s = slurp(path, &len);
        char *at = s ? strstr(s, from) : NULL;
        if (!at) {
                fprintf(stderr, "  '%s' not in %s\n", from, path);
                free(s);
                return -1;
        }
        FILE *f = fopen(path, "w");
        int ok = f && fwrite(s, 1, (size_t)(at - s), f) == (size_t)(at - s) && fputs(to, f) >= 0 &&
                 fputs(at + strlen(from), f) >= 0;
        if (f && fclose(f) != 0)
                ok = 0;
        free(s);
        return ok ? 0 : -1;
}

static void expect_refused(const char *dir, const char *want) {
        const char *out = tmp_path("refused.dse");
        unlink(out);
        struct dse_diag diag = {{0}};
        int r = dse_model_convert_hf(dir, out, "auto", &diag);
        fprintf(stderr, "  refused: %s\n", diag.msg);
        ASSERT_TRUE(r < 0);
        ASSERT_TRUE(strstr(diag.msg, want) != NULL);
        ASSERT_TRUE(access(out, F_OK) < 0);
}

static const char *broken(const char *kind, const char *extra) {
        static int n;
        char name[64], args[4096];
        snprintf(name, sizeof name, "broken-%d", n++);
        const char *dir = tmp_path(name);
        if (strcmp(kind, "int4") == 0)
                snprintf(args, sizeof args, "int4 '%s' '%s' %s", fixture_dir("llama-gptq-actorder-asym"), dir, extra);
        else
                snprintf(args, sizeof args, "int8 '%s' '%s' '%s-twin' %s", fixture_dir("llama-bf16-linear-rope"), dir,
                         dir, extra);
        return make_fixture(args) == 0 ? dir : NULL;
}

TEST(refused_missing_scale) {
        const char *d = broken("int4", "--drop model.layers.0.self_attn.q_proj.weight_scale");
        ASSERT_TRUE(d);
        expect_refused(d, "model.layers.0.self_attn.q_proj.weight_scale");
}

TEST(refused_missing_zero_point_of_an_asymmetric_group) {
        const char *d = broken("int4", "--drop model.layers.1.mlp.up_proj.weight_zero_point");
        ASSERT_TRUE(d);
        expect_refused(d, "weight_zero_point");
}

TEST(refused_missing_g_idx_under_actorder_group) {
        const char *d = broken("int4", "--drop model.layers.0.mlp.down_proj.weight_g_idx");
        ASSERT_TRUE(d);
        expect_refused(d, "weight_g_idx");
}

TEST(refused_weight_shape_that_contradicts_config) {
        const char *d = broken("int4", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"hidden_size\": 128", "\"hidden_size\": 128, \"_x\": 0"));
        /* a packed tensor whose recorded shape disagrees: rewrite the intermediate size */
        ASSERT_OK(edit_config(d, "\"intermediate_size\": 256", "\"intermediate_size\": 248"));
        expect_refused(d, "contradicts config.json");
}

TEST(refused_float_quantized_format) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        for (int i = 0; i < 2; i++) /* the group's own format, and the checkpoint's */
                ASSERT_OK(edit_config(d, "\"format\": \"int-quantized\"", "\"format\": \"float-quantized\""));
        expect_refused(d, "format 'float-quantized'");
}

TEST(refused_static_activation_scales) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"dynamic\": true", "\"dynamic\": false"));
        expect_refused(d, "static activation scales");
}

TEST(refused_status_other_than_compressed) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"quantization_status\": \"compressed\"", "\"quantization_status\": \"frozen\""));
        expect_refused(d, "quantization_status 'frozen'");
}

TEST(refused_bits_it_cannot_hold) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"num_bits\": 8", "\"num_bits\": 2"));
        expect_refused(d, "2-bit weights");
}

TEST(refused_quantized_tensor_no_group_targets) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"Linear\"", "\"re:.*q_proj$\""));
        expect_refused(d, "no compressed-tensors config group targets");
}

TEST(refused_quantized_tensor_the_ignore_list_names) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"lm_head\"", "\"lm_head\", \"model.layers.0.mlp.gate_proj\""));
        expect_refused(d, "'ignore' names it");
}

TEST(refused_float_tensor_a_group_claims) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"lm_head\"", "\"re:^model\\\\.norm$\""));
        expect_refused(d, "lm_head.weight' is BF16");
}

TEST(refused_pattern_that_does_not_compile) {
        const char *d = broken("int8", "");
        ASSERT_TRUE(d);
        ASSERT_OK(edit_config(d, "\"lm_head\"", "\"re:([\""));
        expect_refused(d, "pattern 're:(['");
}
