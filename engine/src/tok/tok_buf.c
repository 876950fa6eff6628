#include "tok_buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *dse__tok_reserve(void *items, size_t *cap, size_t need, size_t size) {
        if (need == 0)
                need = 1; /* an allocated block, so NULL means out of memory */
        if (need <= *cap)
                return items;
        if (need > SIZE_MAX / 2 / size)
                return NULL;
        size_t n = *cap ? *cap : 64;
        while (n < need)
                n *= 2;
        void *p = realloc(items, n * size);
        if (p)
                *cap = n;
        return p;
}

int dse__tok_buf_reserve(struct tok_buf *b, size_t extra) {
        if (extra > SIZE_MAX / 2 - b->len)
                return -ENOMEM;
        char *p = dse__tok_reserve(b->p, &b->cap, b->len + extra, 1);
        if (!p)
                return -ENOMEM;
        b->p = p;
        return 0;
}

int dse__tok_buf_put(struct tok_buf *b, const void *data, size_t n) {
        int r = dse__tok_buf_reserve(b, n);
        if (r < 0)
                return r;
        if (n)
                memcpy(b->p + b->len, data, n);
        b->len += n;
        return 0;
}

void dse__tok_buf_done(struct tok_buf *b) {
        free(b->p);
        memset(b, 0, sizeof *b);
}
