/* buf.h — a growable byte buffer, the one every room of the gateway appends to (request
 * bodies, answer text, SSE bytes, metrics text). Depends on nothing. */
#ifndef DSV_GATEWAY_BUF_H
#define DSV_GATEWAY_BUF_H

#include <stddef.h>

/* Appends s[0..n) to *buf (len bytes used of cap), growing it; the buffer stays
 * NUL-terminated. 0 or -ENOMEM (the buffer is then unchanged). */
int dsv__gw_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

#endif
