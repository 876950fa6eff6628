/* HF folder -> GGUF as llama.cpp's converter writes it (gguf-from-hf.h), through the
 * bench's model writer (bench/gguf_model.h). */
#include "gguf-from-hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-ref.h"
#include "gguf_model.h"
#include "model/format.h"

static char *slurp_text(const char *path) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *s = malloc((size_t)n + 1);
        if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
                free(s);
                s = NULL;
        }
        if (s)
                s[n] = 0;
        fclose(f);
        return s;
}

/* gguf_model_source.read over the folder's safetensors: F32/F16/BF16 widened exactly. */
static int read_st(void *ctx, const char *name, int64_t rows, int64_t cols, float *out) {
        const struct dse__st_set *st = ctx;
        const struct dse__st_tensor *t = dse__st_find(st, name);
        if (!t || (t->dtype != DSE_ST_F32 && t->dtype != DSE_ST_F16 && t->dtype != DSE_ST_BF16))
                return -ENOENT;
        size_t n = 1;
        for (int d = 0; d < t->n_dims; d++)
                n *= (size_t)t->shape[d];
        if (n != (size_t)(rows * cols))
                return -EINVAL;
        size_t es = dse__st_dtype_size(t->dtype);
        uint8_t *raw = malloc(n * es);
        if (!raw || dse__st_read(st, t, 0, raw, n * es, NULL) < 0) {
                free(raw);
                return -EIO;
        }
        for (size_t i = 0; i < n; i++) {
                uint16_t h = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
                out[i] = t->dtype == DSE_ST_F32 ? ((float *)raw)[i] : t->dtype == DSE_ST_F16 ? dse__f16_to_f32(h)
                                                                                           : dse__bf16_to_f32(h);
        }
        free(raw);
        return 0;
}

struct padded_source {
        const struct dse__st_set *st;
        int32_t n_real_layers;
};

/* read_st, with every tensor of a decoder layer past the checkpoint's all zeros. */
static int read_padded(void *ctx, const char *name, int64_t rows, int64_t cols, float *out) {
        const struct padded_source *p = ctx;
        int layer, n = 0;
        if (sscanf(name, "model.layers.%d.%n", &layer, &n) == 1 && n > 0 && layer >= p->n_real_layers) {
                memset(out, 0, (size_t)(rows * cols) * sizeof *out);
                return 0;
        }
        return read_st((void *)p->st, name, rows, cols, out);
}

int gguf_from_hf(const char *dir, const char *out_path, uint32_t type, unsigned flags, struct dse_diag *reterr) {
        return gguf_from_hf_padded(dir, out_path, type, flags, 0, reterr);
}

int gguf_from_hf_padded(const char *dir, const char *out_path, uint32_t type, unsigned flags, int32_t n_layers,
                        struct dse_diag *reterr) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *cfg = slurp_text(path);
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        char *gen = slurp_text(path);
        struct dse_hparams hp;
        struct dse__hf_quant q;
        struct dse__st_set *st = NULL;
        int r = cfg ? dse__hf_parse_config(cfg, strlen(cfg), gen, gen ? strlen(gen) : 0, dir, &hp, &q, reterr) : -ENOENT;
        if (r == 0 && q.method != DSE_HF_QUANT_NONE) {
                snprintf(reterr->msg, sizeof reterr->msg, "%s: a quantized checkpoint is not GGUF fixture material", dir);
                r = -EOPNOTSUPP;
        }
        if (r == 0 && n_layers > 0 && n_layers < hp.n_layers) {
                snprintf(reterr->msg, sizeof reterr->msg, "%s: cannot pad %d layers to %d", dir, hp.n_layers, n_layers);
                r = -EINVAL;
        }
        if (r == 0)
                r = dse__st_open_dir(dir, &st, reterr);
        free(cfg);
        free(gen);
        if (r < 0)
                return r;
        struct padded_source padded = {.st = st, .n_real_layers = hp.n_layers};
        struct gguf_model_source src = {.read = read_padded, .ctx = &padded, .block_value = gguf_ref_value};
        if (n_layers > 0)
                hp.n_layers = n_layers;
        r = gguf_model_write(&hp, &src, type, flags, out_path, reterr);
        dse__st_close(st);
        return r;
}
