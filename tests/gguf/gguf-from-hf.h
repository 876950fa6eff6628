/* Writes a Hugging Face llama/qwen2 folder (the model fixtures) as a GGUF file the way
 * llama.cpp's convert_hf_to_gguf.py lays it out: its tensor names, ggml dimension order,
 * llama's attn_q/attn_k rows permuted to interleaved rope pairs, 1-D tensors as F32,
 * matrices as `type` (F32, F16, Q8_0 or Q4_0 with ggml's reference quantizers). With
 * `dequantized` set, quantized matrices are written as F32 holding their dequantised
 * values instead: the same model, unquantized. With `synthetic_vocab`, a SentencePiece
 * vocabulary is added for tools that insist on one (llama.cpp): <unk>, <s>, </s>, then
 * whole-text pieces "▁t<id>" (no byte pieces: every token decodes to complete UTF-8).
 * Uses the engine's safetensors reader. */
#ifndef DSV_TESTS_GGUF_FROM_HF_H
#define DSV_TESTS_GGUF_FROM_HF_H

#include <stdint.h>

struct dse_diag;

int gguf_from_hf(const char *hf_dir, const char *out_path, uint32_t type, int dequantized, int synthetic_vocab,
                 struct dse_diag *reterr);

#endif
