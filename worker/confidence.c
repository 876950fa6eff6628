/* The output's confidence per sampled token, and the drift test hook (confidence.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "confidence.h"

void confidence_observe(struct confidence *c, const float *logits, int32_t vocab, float scale, int32_t tok,
                        bool first) {
        /* softmax p_i = exp(l_i - max) / Z over l = scale * logits; entropy
         * H = log Z - sum p_i (l_i - max) */
        float max = -INFINITY;
        for (int32_t i = 0; i < vocab; i++)
                if (logits[i] > max)
                        max = logits[i];
        if (!isfinite(max))
                return;
        double z = 0, weighted = 0;
        for (int32_t i = 0; i < vocab; i++) {
                double d = ((double)logits[i] - max) * scale;
                double e = exp(d);
                z += e;
                if (e > 0)
                        weighted += e * d;
        }
        double log_z = log(z);
        double p = exp(((double)logits[tok] - max) * scale - log_z);
        double entropy = log_z - weighted / z;
        c->token_prob_hist[dsv_ipc_token_prob_bin(p)]++;
        c->entropy_hist[dsv_ipc_entropy_bin(entropy)]++;
        c->requests += first;
}

int confidence_fault_scale(const char *spec, const char *instance, float *ret_scale) {
        *ret_scale = 1;
        if (!spec || !spec[0])
                return 0;
        const char *colon = strrchr(spec, ':');
        if (!colon || colon == spec)
                return -EINVAL;
        char *end;
        double scale = strtod(colon + 1, &end);
        if (end == colon + 1 || *end || !(scale > 0 && scale <= 100))
                return -EINVAL;
        if (strlen(instance) == (size_t)(colon - spec) && strncmp(spec, instance, (size_t)(colon - spec)) == 0)
                *ret_scale = (float)scale;
        return 0;
}
