/* http_strict.h — the server room's HTTP/1.1 strictness (http_strict.c): the parts of
 * RFC 9110/9112 the gateway relies on, checked before any work is done on a request
 * whether or not libmicrohttpd refused them first. Used by server.c. */
#ifndef DSV_GATEWAY_HTTP_STRICT_H
#define DSV_GATEWAY_HTTP_STRICT_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "openai.h"

/* The request target as it arrived, before libmicrohttpd percent-decodes it: false when
 * it holds a control character, a space, DEL, a malformed escape or an escaped NUL
 * (decoded, a NUL would cut the path short where a proxy in front did not). */
bool dsv__gw_strict_target_ok(const char *raw_target);

/* The raw header block of a connection's first request (request line and field lines,
 * as far as `n` bytes of it arrived; not under TLS), before libmicrohttpd parses it:
 * false when it holds a NUL byte or a field line with an empty name. A parser more
 * lenient than libmicrohttpd 1.0 at discipline level 1 drops such a line, or cuts the
 * value at the NUL, before the request callback could see it. */
bool dsv__gw_strict_header_block(const char *buf, size_t n);

/* A request whose header fields are all in, with target_ok from
 * dsv__gw_strict_target_ok(): 0, or -EPROTO with e filled (400, or 501 for a transfer
 * coding other than chunked) for a request to refuse with its connection closed: its
 * target is refused, its version is not HTTP/1.0 or 1.1, its framing is ambiguous
 * (several or malformed Content-Length, Transfer-Encoding with Content-Length or in
 * HTTP/1.0, chunked not the last coding or repeated), it lacks exactly one valid Host in
 * HTTP/1.1, or a field name is not a token or a value holds NUL, CR, LF or another
 * control character. */
int dsv__gw_strict_request(struct MHD_Connection *conn, const char *version, bool target_ok, struct dsv_gw_error *e);

#endif
