/* Non-finite values in tensors: a NaN or Inf in a norm, a scale or a weight poisons
 * every logit it reaches, and nothing downstream names the tensor it came from. The
 * converter scans what it reads, `dsvisor verify --values` scans a native file. */
#include <string.h>

#include "../internal.h"
#include "format.h"
#include "model.h"

void dse__nonfinite_count(enum dse_dtype dtype, const void *data, size_t n, uint64_t base,
                          struct dse__nonfinite *acc) {
        for (size_t i = 0; i < n; i++) {
                int nan = 0, inf = 0; /* from the bit patterns: no FP environment involved */
                switch (dtype) {
                case DSE_DTYPE_F32: {
                        uint32_t w;
                        memcpy(&w, (const uint8_t *)data + 4 * i, 4);
                        nan = (w & 0x7f800000u) == 0x7f800000u && (w & 0x007fffffu);
                        inf = (w & 0x7fffffffu) == 0x7f800000u;
                        break;
                }
                case DSE_DTYPE_F16: {
                        uint16_t h;
                        memcpy(&h, (const uint8_t *)data + 2 * i, 2);
                        nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
                        inf = (h & 0x7fff) == 0x7c00;
                        break;
                }
                case DSE_DTYPE_BF16: {
                        uint16_t h;
                        memcpy(&h, (const uint8_t *)data + 2 * i, 2);
                        nan = (h & 0x7f80) == 0x7f80 && (h & 0x007f);
                        inf = (h & 0x7fff) == 0x7f80;
                        break;
                }
                case DSE_DTYPE_F8_E4M3: /* FN: no infinities, S.1111.111 is NaN */
                        nan = (((const uint8_t *)data)[i] & 0x7f) == 0x7f;
                        break;
                default:
                        return;
                }
                if ((nan || inf) && acc->n_nan + acc->n_inf == 0)
                        acc->first = base + i;
                acc->n_nan += (uint64_t)nan;
                acc->n_inf += (uint64_t)inf;
        }
}

void dse__nonfinite_warn(const char *what, const char *tensor, const struct dse__nonfinite *acc) {
        if (acc->n_nan + acc->n_inf)
                dse__log(DSE_LOG_WARN, "%s: tensor '%s': %llu NaN and %llu Inf values (the first at element %llu)",
                         what, tensor, (unsigned long long)acc->n_nan, (unsigned long long)acc->n_inf,
                         (unsigned long long)acc->first);
}
