/* libFuzzer target: the safetensors JSON header parser (dse__st_parse_header).
 * Input: 8 bytes little-endian data-section size, then the JSON header. */
#include <stdint.h>
#include <stdlib.h>

#include "model/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 8)
                return 0;
        uint64_t data_size = 0;
        for (int i = 7; i >= 0; i--)
                data_size = data_size << 8 | data[i];
        struct dse__st_tensor *v;
        size_t n;
        struct dse_diag diag;
        if (dse__st_parse_header((const char *)data + 8, size - 8, data_size, "fuzz", &v, &n, &diag) == 0) {
                /* accepted headers must be self-consistent */
                for (size_t i = 0; i < n; i++)
                        if (v[i].end > data_size || v[i].begin > v[i].end)
                                abort();
                free(v);
        }
        return 0;
}
