/* dsvisor-bench gguf: a GGUF file of random weights in the shapes of a bench preset,
 * for running the same model through llama.cpp (bench/llamacpp_side_by_side.sh).
 *
 *     dsvisor-bench gguf --preset P --format f32|f16|q8_0|q4_0 [--layers N] --out FILE
 *
 * The file is laid out as llama.cpp's convert_hf_to_gguf.py writes the preset's
 * architecture (bench/gguf_model.h: r1-distill-qwen-1.5b as qwen2, deepseek-coder-1.3b
 * as llama, deepseek-v2-lite as deepseek2 with the split attn_k_b / attn_v_b of current
 * converters), with a synthetic SentencePiece vocabulary so llama.cpp's loader accepts
 * it; llama-quantize turns it into Q4_0 / Q8_0. q8_0 / q4_0 quantize here with ggml's
 * reference quantizers instead, for a model llama-quantize refuses to load (its
 * deepseek2 loader wants q_lora_rank unless the model has 26 or 27 layers). Weights are uniform in +-1/sqrt(cols)
 * from a generator seeded by the tensor's name (the same file every time), norms 1. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_bench.h"
#include "gguf_model.h"

static int random_tensor(void *ctx, const char *name, int64_t rows, int64_t cols, float *out) {
        (void)ctx;
        size_t n = (size_t)(rows * cols), len = strlen(name);
        if ((len >= 11 && strcmp(name + len - 11, "norm.weight") == 0) ||
            (len >= 16 && strcmp(name + len - 16, "layernorm.weight") == 0)) {
                for (size_t i = 0; i < n; i++)
                        out[i] = 1.0f;
                return 0;
        }
        uint64_t x = 0xcbf29ce484222325ull; /* FNV-1a of the name seeds xorshift64* */
        for (size_t i = 0; i < len; i++)
                x = (x ^ (uint8_t)name[i]) * 0x100000001b3ull;
        float a = 1.0f / sqrtf((float)cols);
        for (size_t i = 0; i < n; i++) {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                uint64_t v = x * 0x2545f4914f6cdd1dull;
                out[i] = a * ((float)(v >> 40) * (2.0f / 16777216.0f) - 1.0f);
        }
        return 0;
}

static void usage(void) {
        fprintf(stderr, "usage: dsvisor-bench gguf --preset r1-distill-qwen-1.5b|deepseek-coder-1.3b|deepseek-v2-lite\n"
                        "           --format f32|f16|q8_0|q4_0 [--layers N] --out FILE\n");
        exit(2);
}

int dsv_bench_gguf(int argc, char **argv) {
        const char *preset = NULL, *format = NULL, *out = NULL;
        int layers = 0;
        for (int i = 2; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--preset") == 0)
                        preset = argv[i + 1];
                else if (strcmp(argv[i], "--format") == 0)
                        format = argv[i + 1];
                else if (strcmp(argv[i], "--layers") == 0)
                        layers = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--out") == 0)
                        out = argv[i + 1];
                else
                        usage();
        }
        static const struct {
                const char *name;
                uint32_t type; /* ggml's id */
        } formats[] = {{"f32", 0}, {"f16", 1}, {"q8_0", 8}, {"q4_0", 2}};
        int f = -1;
        for (int i = 0; format && i < 4; i++)
                if (strcmp(format, formats[i].name) == 0)
                        f = i;
        struct dse_hparams hp;
        if (argc % 2 || f < 0 || !preset || !out || layers < 0 || dsv_bench_preset_hparams(preset, &hp) < 0)
                usage();
        if (layers > 0 && layers < hp.n_layers)
                hp.n_layers = layers;
        struct dse_diag d = {{0}};
        int r = dse__hparams_validate(&hp, preset, &d);
        struct gguf_model_source src = {.read = random_tensor};
        if (r == 0)
                r = gguf_model_write(&hp, &src, formats[f].type,
                                     GGUF_MODEL_SYNTHETIC_VOCAB | GGUF_MODEL_KV_B_SPLIT, out, &d);
        if (r < 0) {
                fprintf(stderr, "dsvisor-bench gguf: %s: %s\n", out, d.msg[0] ? d.msg : strerror(-r));
                return 1;
        }
        return 0;
}
