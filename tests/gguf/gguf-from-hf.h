/* Writes a Hugging Face llama/qwen2/deepseek_v2/deepseek_v3 folder (the model fixtures)
 * as a GGUF file the way llama.cpp's convert_hf_to_gguf.py lays it out, with the
 * bench's model writer (bench/gguf_model.h: what it writes, the flags, what it refuses);
 * `type` is the ggml type of the matrices (0 F32, 1 F16, 8 Q8_0, 2 Q4_0). Quantized
 * checkpoints (AWQ, GPTQ, FP8) are refused. Uses the engine's safetensors reader. */
#ifndef DSV_TESTS_GGUF_FROM_HF_H
#define DSV_TESTS_GGUF_FROM_HF_H

#include <stdint.h>

#include "gguf_model.h"

int gguf_from_hf(const char *hf_dir, const char *out_path, uint32_t type, unsigned flags, struct dse_diag *reterr);
/* The same, with decoder layers added after the checkpoint's up to n_layers (0: none),
 * every weight of them zero: each adds exactly zero to the residual stream, so the
 * model computes what it did. llama.cpp's deepseek2 loader takes a model without
 * q_lora_rank only at DeepSeek-V2-Lite's layer count (26 or 27); padding lets it run a
 * smaller one. -EINVAL for n_layers below the checkpoint's. */
int gguf_from_hf_padded(const char *hf_dir, const char *out_path, uint32_t type, unsigned flags, int32_t n_layers,
                        struct dse_diag *reterr);

#endif
