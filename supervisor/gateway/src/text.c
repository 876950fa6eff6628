/* The growable texts the chat output pipeline passes between its stages (buf.h's buffer
 * with its sizes), and the marker test every stage makes before it lets text go. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chat_output.h"

int dsv__gw_text_add(struct dsv_gw_text *t, const char *s, size_t n) {
        return n ? dsv__gw_buf_append(&t->s, &t->len, &t->cap, s, n) : 0;
}

void dsv__gw_text_free(struct dsv_gw_text *t) {
        free(t->s);
        *t = (struct dsv_gw_text){0};
}

size_t dsv__gw_partial_suffix(const char *s, size_t n, const char *marker) {
        size_t m = strlen(marker);
        for (size_t k = n < m - 1 ? n : m - 1; k > 0; k--)
                if (memcmp(s + n - k, marker, k) == 0)
                        return k;
        return 0;
}
