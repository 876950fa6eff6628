/* tok_buf.h — the tokenizers' growable arrays (engine-internal): the byte buffer for
 * text being normalised, decoded or split, and dse__tok_reserve for arrays of anything. */
#ifndef DSE_TOK_BUF_H
#define DSE_TOK_BUF_H

#include <stddef.h>

struct tok_buf {
        char *p;
        size_t len, cap;
};

/* items (an array with room for *cap elements of size bytes) with room for need (at
 * least one): the same pointer, or a larger block that replaces it (*cap updated; the
 * capacity doubles from 64). NULL when out of memory, items then left as it was. */
void *dse__tok_reserve(void *items, size_t *cap, size_t need, size_t size);

/* Room for extra more bytes; -ENOMEM. */
int dse__tok_buf_reserve(struct tok_buf *b, size_t extra);
/* Appends data[0, n); -ENOMEM. */
int dse__tok_buf_put(struct tok_buf *b, const void *data, size_t n);
/* Frees the bytes and empties b. */
void dse__tok_buf_done(struct tok_buf *b);

#endif
