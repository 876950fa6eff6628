/* gguf-from-hf DIR OUT.gguf F32|F16|Q8_0|Q4_0 [--synthetic-vocab] [--kv-b-split]
 * [--pad-layers N]: a
 * Hugging Face llama/qwen2/deepseek folder written as GGUF the way llama.cpp's converter
 * lays it out (gguf-from-hf.h; --pad-layers: gguf_from_hf_padded), for benchmarks that run the same file through llama.cpp
 * (bench/gguf_vs_llamacpp.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "gguf-from-hf.h"

int main(int argc, char **argv) {
        static const struct {
                const char *name;
                uint32_t type;
        } types[] = {{"F32", 0}, {"F16", 1}, {"Q8_0", 8}, {"Q4_0", 2}};
        int t = -1;
        unsigned flags = 0;
        int32_t pad_layers = 0;
        for (int i = 0; argc >= 4 && i < 4; i++)
                if (strcmp(argv[3], types[i].name) == 0)
                        t = i;
        for (int i = 4; i < argc; i++) {
                if (strcmp(argv[i], "--synthetic-vocab") == 0)
                        flags |= GGUF_MODEL_SYNTHETIC_VOCAB;
                else if (strcmp(argv[i], "--kv-b-split") == 0)
                        flags |= GGUF_MODEL_KV_B_SPLIT;
                else if (strcmp(argv[i], "--pad-layers") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
                        pad_layers = atoi(argv[++i]);
                else
                        t = -1;
        }
        if (t < 0) {
                fprintf(stderr, "usage: gguf-from-hf DIR OUT.gguf F32|F16|Q8_0|Q4_0 [--synthetic-vocab] [--kv-b-split] "
                                "[--pad-layers N]\n");
                return 2;
        }
        struct dse_diag diag = {{0}};
        int r = gguf_from_hf_padded(argv[1], argv[2], types[t].type, flags, pad_layers, &diag);
        if (r < 0) {
                fprintf(stderr, "gguf-from-hf: %s: %s\n", argv[1], diag.msg[0] ? diag.msg : strerror(-r));
                return 1;
        }
        return 0;
}
