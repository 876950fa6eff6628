/* ggml's dequantisation written per element from the GGUF block layouts (ggml-common.h,
 * the spec's formulas), as the reference the engine's block-wise dequantiser is checked
 * against. Each formula keeps ggml's order of float operations. */
#ifndef DSV_TESTS_GGUF_REF_H
#define DSV_TESTS_GGUF_REF_H

#include <stdint.h>

/* Element e of one block of ggml type `type` (ids as in ggml: Q4_0 2 ... BF16 30). */
float gguf_ref_value(uint32_t type, const uint8_t *block, int e);

#endif
