/* libFuzzer target: a whole GGUF file through the model import (dse__gguf_import, from
 * a memfd): the architecture's hyper-parameters (llama, qwen2, deepseek2 with its MLA,
 * MoE and YaRN keys), the tensor name mapping (stacked experts, the split attn_k_b /
 * attn_v_b kept as k_b_proj / v_b_proj), the tokenizer files, and the first row of every
 * tensor read as the converter reads it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = memfd_create("fuzz-gguf", MFD_CLOEXEC);
        if (fd < 0)
                return 0;
        if (write(fd, data, size) != (ssize_t)size) {
                close(fd);
                return 0;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        struct dse_hparams hp;
        struct dse__st_set *set = NULL;
        struct dse__gguf_tokenizer tok = {0};
        struct dse_diag diag;
        if (dse__gguf_import(path, &hp, &set, &tok, &diag) == 0) {
                for (size_t i = 0; i < dse__st_n_tensors(set); i++) {
                        const struct dse__st_tensor *t = dse__st_tensor_at(set, i);
                        int64_t cols = t->n_dims == 2 ? t->shape[1] : t->shape[0];
                        size_t row = (size_t)cols * dse__st_dtype_size(t->dtype);
                        if (cols <= 0 || row > (1u << 20))
                                continue;
                        void *buf = malloc(row);
                        if (buf)
                                (void)dse__st_read(set, t, 0, buf, row, &diag);
                        free(buf);
                }
                dse__st_close(set);
                dse__gguf_tokenizer_free(&tok);
        }
        close(fd);
        return 0;
}
