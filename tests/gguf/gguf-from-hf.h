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

#endif
