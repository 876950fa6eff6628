/* Rotary position embeddings: frequencies per rope_scaling type and their application in
 * the two pair layouts the supported checkpoints use.
 *
 *     struct dse_rope rope;
 *     dse__rope_init(&rope, hp, head_dim, DSE_ROPE_PAIRS_HALF, reterr);
 *     dse__rope_angles(&rope, pos, cos, sin);       // (n_dims/2) each
 *     dse__rope_apply(&rope, q_head, cos, sin);     // in place, one head
 */
#ifndef DSE_ROPE_H
#define DSE_ROPE_H

#include "model/model.h"

#define DSE_ROPE_MAX_DIMS 1024

enum dse_rope_pairs {
        DSE_ROPE_PAIRS_HALF,        /* llama/qwen2 rotate-half: dims (i, i + n/2) */
        DSE_ROPE_PAIRS_INTERLEAVED, /* DeepSeek checkpoints: dims (2i, 2i + 1) */
};

struct dse_rope {
        int32_t n_dims;
        enum dse_rope_pairs pairs;
        double attn_factor;                     /* cos/sin amplitude (YaRN mscale ratio) */
        double inv_freq[DSE_ROPE_MAX_DIMS / 2]; /* (n_dims/2) */
};

/* Frequencies for hp's rope_scaling over n_dims rotary dimensions (even, <= 1024).
 * -EINVAL for an odd or oversized n_dims or a bad factor, -EOPNOTSUPP for an unknown
 * rope type. */
int dse__rope_init(struct dse_rope *rope, const struct dse_hparams *hp, int32_t n_dims,
                   enum dse_rope_pairs pairs, struct dse_diag *reterr);

/* cos/sin (n_dims/2) of position pos, amplitude attn_factor included. */
void dse__rope_angles(const struct dse_rope *rope, int32_t pos, float *cos_out, float *sin_out);

/* Rotates one head's n_dims values in place. */
void dse__rope_apply(const struct dse_rope *rope, float *x, const float *cos_v, const float *sin_v);

/* DeepSeek's yarn_get_mscale: 0.1 * m * ln(factor) + 1, or 1 when factor <= 1. */
double dse__yarn_mscale(double factor, double m);

#endif
