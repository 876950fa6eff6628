/* tok_buf.h — the growable byte buffer of the tokenizers (engine-internal): text being
 * normalised, decoded or split, and arrays of small structs built a few at a time. */
#ifndef DSE_TOK_BUF_H
#define DSE_TOK_BUF_H

#include <stddef.h>

struct tok_buf {
        char *p;
        size_t len, cap;
};

/* Room for extra more bytes; -ENOMEM. */
int tok_buf_reserve(struct tok_buf *b, size_t extra);
/* Appends data[0, n); -ENOMEM. */
int tok_buf_put(struct tok_buf *b, const void *data, size_t n);
/* Frees the bytes and empties b. */
void tok_buf_done(struct tok_buf *b);

#endif
