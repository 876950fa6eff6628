/* libFuzzer target: the native header, hyper-parameter and tensor-table parser
 * (dse__native_parse), with the schema check. Input: the first bytes of a native file;
 * the file size is taken from the header's own file_size field (the data region is not
 * part of the input), and the header CRC is re-sealed so the fuzzer reaches the checks
 * behind it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/format.h"

static uint64_t rd64(const uint8_t *p) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < DSE_FORMAT_HEADER_SIZE)
                return 0;
        uint8_t *buf = malloc(size);
        if (!buf)
                return 0;
        memcpy(buf, data, size);
        /* FORMAT.md: header CRC over [0, max(table end, hparams end)), field at 80 */
        uint64_t table_end = rd64(buf + 56) + (rd64(buf + 48) >> 32) * DSE_FORMAT_ENTRY_SIZE;
        uint64_t hp_end = rd64(buf + 40) + (rd64(buf + 48) & 0xffffffffu) * DSE_FORMAT_HPARAM_SIZE;
        uint64_t end = table_end > hp_end ? table_end : hp_end;
        if (end <= size && end >= 84 && table_end >= rd64(buf + 56) && hp_end >= rd64(buf + 40)) {
                memset(buf + 80, 0, 4);
                uint32_t c = dse__crc32c(0, buf, end);
                for (int i = 0; i < 4; i++)
                        buf[80 + i] = (uint8_t)(c >> (8 * i));
        }
        struct dse_hparams hp;
        char quant[DSE_FORMAT_QUANT_MAX];
        struct dse_tensor *tensors;
        size_t n;
        struct dse_diag diag;
        if (dse__native_parse(buf, size, rd64(buf + 16), "fuzz", NULL, &hp, quant, &tensors, &n, &diag) == 0)
                free(tensors);
        free(buf);
        return 0;
}
