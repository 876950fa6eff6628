/* libFuzzer target: the worker protocol decoder on arbitrary bytes, "events" batches
 * included. Whatever decodes must encode again; a token, final or error must also come
 * out of the fixed-buffer encoder (the worker's per-token path) as a message that
 * decodes to the same thing as the cJSON encoder's, and a batch of them must decode to
 * the same events in the same order. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_ipc.h"

/* The canonical (cJSON) text of m; NULL when it does not encode. */
static char *canonical(const struct dsv_ipc_msg *m) {
        char *buf;
        size_t len;
        return dsv_ipc_msg_encode(m, &buf, &len) == 0 ? buf : NULL;
}

static int is_event(const struct dsv_ipc_msg *m) {
        return m->type == DSV_IPC_TOKEN || m->type == DSV_IPC_FINAL || m->type == DSV_IPC_ERROR;
}

/* Fixed-buffer encoding of m decodes to what the cJSON encoding decodes to. */
static void check_fixed(const struct dsv_ipc_msg *m, const char *want) {
        static char buf[1 << 20];
        int n = dsv_ipc_event_encode(m, buf, sizeof buf);
        if (n == -ENOBUFS)
                return; /* larger than the worker would ever batch */
        if (n < 0)
                abort(); /* decoded, so it must encode */
        struct dsv_ipc_msg back;
        if (dsv_ipc_msg_decode(buf, (size_t)n, &back, NULL, 0) != 0)
                abort();
        char *got = canonical(&back);
        if (!got || strcmp(got, want) != 0)
                abort();
        free(got);
        dsv_ipc_msg_done(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct dsv_ipc_msg *msgs;
        size_t n;
        char err[128];
        if (dsv_ipc_msgs_decode(data, size, &msgs, &n, err, sizeof err) != 0)
                return 0;
        struct dsv_ipc_batch b;
        int batch = n > 1 && dsv_ipc_batch_init(&b, 1 << 20, (int)n) == 0;
        size_t n_batched = 0;
        char **want = calloc(n, sizeof *want);
        if (!want)
                abort();
        for (size_t i = 0; i < n; i++) {
                if (!(want[i] = canonical(&msgs[i])))
                        abort(); /* whatever decodes must encode again */
                if (is_event(&msgs[i])) {
                        check_fixed(&msgs[i], want[i]);
                        if (batch && dsv_ipc_batch_add(&b, &msgs[i]) == 0)
                                n_batched++;
                }
        }
        if (batch && n_batched == n) { /* a batch decoded: re-batched, it decodes the same */
                size_t len;
                const char *text = dsv_ipc_batch_message(&b, &len);
                struct dsv_ipc_msg *again;
                size_t n_again;
                if (!text || dsv_ipc_msgs_decode(text, len, &again, &n_again, NULL, 0) != 0 || n_again != n)
                        abort();
                for (size_t i = 0; i < n_again; i++) {
                        char *got = canonical(&again[i]);
                        if (!got || strcmp(got, want[i]) != 0)
                                abort();
                        free(got);
                        dsv_ipc_msg_done(&again[i]);
                }
                free(again);
        }
        if (batch)
                dsv_ipc_batch_done(&b);
        for (size_t i = 0; i < n; i++) {
                free(want[i]);
                dsv_ipc_msg_done(&msgs[i]);
        }
        free(want);
        free(msgs);
        return 0;
}
