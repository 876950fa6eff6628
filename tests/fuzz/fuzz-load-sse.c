/* libFuzzer target: the load generator's SSE splitter and answer classification
 * (bench/load/sse.c) on arbitrary bytes, fed in two pieces cut where the first byte
 * says, so chunk boundaries land everywhere. */
#include <stddef.h>
#include <stdint.h>

#include "sse.h"

static int on_event(void *user, const char *data, size_t len) {
        struct load_answer a;
        (void)user;
        load_answer_classify(data, len, &a);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size == 0)
                return 0;
        const char *bytes = (const char *)data + 1;
        size_t n = size - 1, cut = data[0] % (n + 1);
        struct load_sse p;
        load_sse_init(&p);
        if (load_sse_feed(&p, bytes, cut, on_event, NULL) == 0)
                load_sse_feed(&p, bytes + cut, n - cut, on_event, NULL);
        load_sse_done(&p);
        return 0;
}
