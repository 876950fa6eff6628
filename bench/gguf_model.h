/* A model given by its hyper-parameters and Hugging Face-named tensors, written as a
 * GGUF file the way llama.cpp's convert_hf_to_gguf.py lays it out (architectures llama,
 * qwen2, deepseek2): its metadata keys and tensor names, ggml dimension order, llama's
 * attn_q/attn_k rows permuted to interleaved rope pairs, deepseek2's routed experts
 * stacked per projection (ffn_*_exps), 1-D tensors and the MoE router as F32, matrices
 * as `type` (F32, F16, Q8_0 or Q4_0 with ggml's reference quantizers; a matrix whose
 * rows do not split into 32-element blocks stays F32). Tensor data is produced while
 * the file is written, one tensor at a time.
 *
 * Flags:
 *   GGUF_MODEL_DEQUANTIZED     quantized matrices are written as F32 holding their
 *                              dequantised values (source->block_value): the same
 *                              model, unquantized.
 *   GGUF_MODEL_SYNTHETIC_VOCAB a SentencePiece vocabulary for tools that insist on one
 *                              (llama.cpp): <unk>, <s>, </s>, then whole-text pieces
 *                              "▁t<id>" (no byte pieces: every token decodes to complete
 *                              UTF-8).
 *   GGUF_MODEL_KV_B_SPLIT      deepseek2's kv_b_proj as newer converters write it: per
 *                              head, attn_k_b (the nope rows, transposed) and attn_v_b,
 *                              with the MQA-style attention keys (head_count_kv 1,
 *                              key_length_mla / value_length_mla); without it attn_kv_b
 *                              and the older per-head key_length / value_length.
 *
 * A model llama.cpp's deepseek2 cannot express is refused (-EOPNOTSUPP with a message):
 * YaRN with mscale != mscale_all_dim (its graph fixes the cos/sin amplitude at 1),
 * moe_layer_freq != 1, DeepSeek-V2 routing that both normalises and scales the weights
 * (llama.cpp scales after normalising, as V3 does), rope scalings other than linear
 * (llama, qwen2) or YaRN (deepseek2), DeepSeek-V2's group_limited_greedy over more than
 * one group (llama.cpp scores a group by its two best experts' sum, V3's rule, where V2
 * takes the best one). */
#ifndef DSV_BENCH_GGUF_MODEL_H
#define DSV_BENCH_GGUF_MODEL_H

#include <stdint.h>

#include "dse_internal.h"

enum {
        GGUF_MODEL_DEQUANTIZED = 1,
        GGUF_MODEL_SYNTHETIC_VOCAB = 2,
        GGUF_MODEL_KV_B_SPLIT = 4,
};

struct gguf_model_source {
        /* the values of Hugging Face tensor `name`, [rows, cols] (1-D: rows 1), as F32 */
        int (*read)(void *ctx, const char *name, int64_t rows, int64_t cols, float *out);
        void *ctx;
        /* ggml's value of element e of a Q8_0 / Q4_0 block (GGUF_MODEL_DEQUANTIZED only) */
        float (*block_value)(uint32_t type, const uint8_t *block, int e);
};

/* The tensors written are those dse__model_schema(hp) lists, without DeepSeek-V3's MTP
 * modules (llama.cpp's converter drops them for deepseek2). `type` is a ggml type id
 * (0 F32, 1 F16, 8 Q8_0, 2 Q4_0). */
int gguf_model_write(const struct dse_hparams *hp, const struct gguf_model_source *source, uint32_t type,
                     unsigned flags, const char *path, struct dse_diag *reterr);

#endif
