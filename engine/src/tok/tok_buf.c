#include "tok_buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int tok_buf_reserve(struct tok_buf *b, size_t extra) {
        if (extra > SIZE_MAX / 2 - b->len)
                return -ENOMEM;
        if (b->len + extra <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + extra)
                cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
                return -ENOMEM;
        b->p = p;
        b->cap = cap;
        return 0;
}

int tok_buf_put(struct tok_buf *b, const void *data, size_t n) {
        int r = tok_buf_reserve(b, n);
        if (r < 0)
                return r;
        if (n)
                memcpy(b->p + b->len, data, n);
        b->len += n;
        return 0;
}

void tok_buf_done(struct tok_buf *b) {
        free(b->p);
        memset(b, 0, sizeof *b);
}
