/* A growable byte buffer: capacity doubles, so appending n bytes costs O(n) amortised. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

int dsv__gw_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
        if (*len + n + 1 > *cap) {
                size_t c = *cap ? *cap : 256;
                while (c < *len + n + 1)
                        c *= 2;
                char *nb = realloc(*buf, c);
                if (!nb)
                        return -ENOMEM;
                *buf = nb;
                *cap = c;
        }
        memcpy(*buf + *len, s, n);
        *len += n;
        (*buf)[*len] = 0;
        return 0;
}
