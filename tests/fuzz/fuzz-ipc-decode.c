/* libFuzzer target: the worker protocol decoder on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dsv_ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct dsv_ipc_msg m;
        char err[128];
        if (dsv_ipc_msg_decode(data, size, &m, err, sizeof err) == 0) {
                char *buf;
                size_t len;
                /* Whatever decodes must encode again. */
                if (dsv_ipc_msg_encode(&m, &buf, &len) != 0)
                        abort();
                free(buf);
                dsv_ipc_msg_done(&m);
        }
        return 0;
}
