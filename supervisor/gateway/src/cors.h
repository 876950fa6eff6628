/* cors.h — Cross-Origin Resource Sharing (cors.c), the server room's: which browser
 * origins may call the API, the preflight answer, and the header every answer to an
 * allowed origin carries. */
#ifndef DSV_GATEWAY_CORS_H
#define DSV_GATEWAY_CORS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct gw_cors {
        bool on;        /* an origin list was configured */
        bool any;       /* "*": every origin */
        char **origins; /* exact "scheme://host[:port]" strings */
        size_t n;
};

/* Parses list ("*" or comma-separated origins, spaces around them ignored); NULL: CORS
 * off. -EINVAL for an empty entry or one that is not "scheme://host[:port]". */
int dsv__gw_cors_init(struct gw_cors *c, const char *list);
void dsv__gw_cors_done(struct gw_cors *c);

/* The Access-Control-Allow-Origin value for a request from origin ("*" or origin
 * itself), or NULL when it is not allowed (or CORS is off, or origin is NULL). */
const char *dsv__gw_cors_allow(const struct gw_cors *c, const char *origin);

/* Adds Access-Control-Allow-Origin and Vary: Origin to resp when the request on conn
 * comes from an allowed origin. The connection's socket context must be the gateway's
 * struct gw_cors (set when the connection starts) or NULL. */
void dsv__gw_cors_decorate(struct MHD_Connection *conn, struct MHD_Response *resp);

/* Answers an OPTIONS request: 204 with Allow, and, for a preflight from an allowed origin,
 * the Access-Control-Allow-{Origin,Methods,Headers} and Max-Age headers. methods: the
 * URL's methods ("GET, HEAD" or "POST"). */
enum MHD_Result dsv__gw_cors_options(const struct gw_cors *c, struct MHD_Connection *conn, const char *methods);

#endif
