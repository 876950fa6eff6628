/* RoPE frequencies and rotation (fixtures/models/README.md "Semantics followed").
 *
 * Frequencies and angles are computed in double: the reference is float64, and the cost
 * is n_dims/2 cos/sin per position per layer-independent call. */
#include <math.h>

#include "internal.h"
#include "model/rope.h"

double dse__yarn_mscale(double factor, double m) {
        return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}

/* YaRN correction dimension: the rotary dim whose wavelength fits num_rot times into the
 * original context (DeepSeek yarn_find_correction_dim). */
static double yarn_correction_dim(double num_rot, double dim, double base, double orig_max_pos) {
        return dim * log(orig_max_pos / (num_rot * 2.0 * M_PI)) / (2.0 * log(base));
}

/* llama3: transformers _compute_llama3_parameters. Wavelengths longer than
 * orig/low_freq_factor are divided by factor, shorter than orig/high_freq_factor kept,
 * and the band between interpolated smoothly. */
static double llama3_inv_freq(double inv_freq, const struct dse_hparams *hp) {
        double factor = hp->rope_factor, lo = hp->rope_low_freq_factor, hi = hp->rope_high_freq_factor;
        double orig = hp->rope_original_max_pos;
        double low_freq_wavelen = orig / lo, high_freq_wavelen = orig / hi;
        double wavelen = 2.0 * M_PI / inv_freq;
        if (wavelen > low_freq_wavelen)
                return inv_freq / factor;
        if (wavelen < high_freq_wavelen)
                return inv_freq;
        double smooth = (orig / wavelen - lo) / (hi - lo);
        return (1.0 - smooth) * inv_freq / factor + smooth * inv_freq;
}

int dse__rope_init(struct dse_rope *rope, const struct dse_hparams *hp, int32_t n_dims,
                   enum dse_rope_pairs pairs, struct dse_diag *reterr) {
        if (n_dims <= 0 || n_dims % 2 || n_dims > DSE_ROPE_MAX_DIMS)
                return dse__fail(reterr, -EINVAL, "rope: %d rotary dims (must be even, <= %d)", n_dims,
                                 DSE_ROPE_MAX_DIMS);
        if (!(hp->rope_theta > 0))
                return dse__fail(reterr, -EINVAL, "rope: rope_theta %g", (double)hp->rope_theta);
        if (hp->rope_type != DSE_ROPE_DEFAULT && !(hp->rope_factor > 0))
                return dse__fail(reterr, -EINVAL, "rope_scaling: factor %g", (double)hp->rope_factor);
        rope->n_dims = n_dims;
        rope->pairs = pairs;
        rope->attn_factor = 1.0;

        int32_t half = n_dims / 2;
        double base = hp->rope_theta, factor = hp->rope_factor;
        for (int32_t i = 0; i < half; i++)
                rope->inv_freq[i] = pow(base, -2.0 * i / n_dims);

        switch (hp->rope_type) {
        case DSE_ROPE_DEFAULT:
                break;
        case DSE_ROPE_LINEAR:
                for (int32_t i = 0; i < half; i++)
                        rope->inv_freq[i] /= factor;
                break;
        case DSE_ROPE_LLAMA3:
                if (hp->rope_original_max_pos <= 0 || !(hp->rope_high_freq_factor > hp->rope_low_freq_factor))
                        return dse__fail(reterr, -EINVAL, "rope_scaling llama3: bad original_max_position_embeddings "
                                         "or frequency factors");
                for (int32_t i = 0; i < half; i++)
                        rope->inv_freq[i] = llama3_inv_freq(rope->inv_freq[i], hp);
                break;
        case DSE_ROPE_YARN: {
                if (hp->rope_original_max_pos <= 0)
                        return dse__fail(reterr, -EINVAL, "rope_scaling yarn: original_max_position_embeddings missing");
                double beta_fast = hp->rope_beta_fast > 0 ? hp->rope_beta_fast : 32.0;
                double beta_slow = hp->rope_beta_slow > 0 ? hp->rope_beta_slow : 1.0;
                double low = floor(yarn_correction_dim(beta_fast, n_dims, base, hp->rope_original_max_pos));
                double high = ceil(yarn_correction_dim(beta_slow, n_dims, base, hp->rope_original_max_pos));
                if (low < 0)
                        low = 0;
                if (high > n_dims - 1)
                        high = n_dims - 1;
                if (low == high)
                        high += 0.001; /* yarn_linear_ramp_mask avoids a zero division */
                for (int32_t i = 0; i < half; i++) {
                        double extra = rope->inv_freq[i], inter = extra / factor;
                        double ramp = (i - low) / (high - low);
                        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
                        double m = 1.0 - ramp; /* 1: keep the extrapolated frequency */
                        rope->inv_freq[i] = inter * (1.0 - m) + extra * m;
                }
                /* DeepSeek's cos/sin amplitude mscale(f, mscale) / mscale(f, mscale_all_dim)
                 * (config defaults: mscale 1, mscale_all_dim 0); transformers' llama/qwen2
                 * YaRN uses that ratio when mscale_all_dim is given, else mscale(f, 1). */
                int deepseek = hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3;
                if (deepseek || hp->rope_mscale_all_dim != 0)
                        rope->attn_factor = dse__yarn_mscale(factor, hp->rope_mscale) /
                                            dse__yarn_mscale(factor, hp->rope_mscale_all_dim);
                else
                        rope->attn_factor = dse__yarn_mscale(factor, 1.0);
                break;
        }
        default:
                return dse__fail(reterr, -EOPNOTSUPP, "rope_scaling type %d not supported", (int)hp->rope_type);
        }
        return 0;
}

void dse__rope_angles(const struct dse_rope *rope, int32_t pos, float *cos_out, float *sin_out) {
        for (int32_t i = 0; i < rope->n_dims / 2; i++) {
                double a = (double)pos * rope->inv_freq[i];
                cos_out[i] = (float)(cos(a) * rope->attn_factor);
                sin_out[i] = (float)(sin(a) * rope->attn_factor);
        }
}

void dse__rope_apply(const struct dse_rope *rope, float *x, const float *cos_v, const float *sin_v) {
        int32_t half = rope->n_dims / 2;
        for (int32_t i = 0; i < half; i++) {
                /* pair (a, b) rotated by angle i: (a cos - b sin, b cos + a sin) */
                float *a, *b;
                if (rope->pairs == DSE_ROPE_PAIRS_INTERLEAVED) {
                        a = &x[2 * i];
                        b = &x[2 * i + 1];
                } else {
                        a = &x[i];
                        b = &x[i + half];
                }
                float va = *a, vb = *b;
                *a = va * cos_v[i] - vb * sin_v[i];
                *b = vb * cos_v[i] + va * sin_v[i];
        }
}
