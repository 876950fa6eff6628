/* CORS (the Fetch standard's CORS protocol): a browser asks before a cross-origin POST
 * with JSON or an Authorization header (a preflight: OPTIONS with Origin and
 * Access-Control-Request-Method) and reads an answer only when it names the page's origin
 * in Access-Control-Allow-Origin. Credentials here are bearer keys, not cookies, so
 * Access-Control-Allow-Credentials is never sent and "*" is safe to offer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cors.h"

#define PREFLIGHT_MAX_AGE_S "600"
#define MAX_ORIGIN_BYTES 256

void dsv__gw_cors_done(struct gw_cors *c) {
        if (!c)
                return;
        for (size_t i = 0; i < c->n; i++)
                free(c->origins[i]);
        free(c->origins);
        *c = (struct gw_cors){0};
}

/* "scheme://host[:port]": what a browser sends in Origin (no path, no trailing slash). */
static bool origin_valid(const char *s, size_t len) {
        const char *sep = memmem(s, len, "://", 3);
        if (!sep || sep == s || len > MAX_ORIGIN_BYTES || (size_t)(sep - s) + 3 >= len)
                return false;
        for (const char *p = s; p < s + len; p++)
                if (*p <= ' ' || *p == 0x7f || *p == ',' || (p > sep + 2 && (*p == '/' || *p == '?' || *p == '#')))
                        return false;
        return true;
}

int dsv__gw_cors_init(struct gw_cors *c, const char *list) {
        *c = (struct gw_cors){0};
        if (!list)
                return 0;
        c->on = true;
        const char *p = list;
        for (;;) {
                while (*p == ' ')
                        p++;
                const char *end = p + strcspn(p, ",");
                const char *last = end;
                while (last > p && last[-1] == ' ')
                        last--;
                size_t len = (size_t)(last - p);
                if (len == 1 && *p == '*') {
                        c->any = true;
                } else {
                        if (!origin_valid(p, len)) {
                                dsv__gw_cors_done(c);
                                return -EINVAL;
                        }
                        char **grown = realloc(c->origins, (c->n + 1) * sizeof *c->origins);
                        if (grown)
                                c->origins = grown;
                        if (!grown || !(c->origins[c->n] = strndup(p, len))) {
                                dsv__gw_cors_done(c);
                                return -ENOMEM;
                        }
                        c->n++;
                }
                if (!*end)
                        return 0;
                p = end + 1;
        }
}

const char *dsv__gw_cors_allow(const struct gw_cors *c, const char *origin) {
        if (!c || !c->on || !origin)
                return NULL;
        if (c->any)
                return "*";
        for (size_t i = 0; i < c->n; i++)
                if (strcmp(c->origins[i], origin) == 0)
                        return c->origins[i];
        return NULL;
}

static const struct gw_cors *connection_cors(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

void dsv__gw_cors_decorate(struct MHD_Connection *conn, struct MHD_Response *resp) {
        const struct gw_cors *c = connection_cors(conn);
        if (!c || !c->on)
                return;
        const char *allow = dsv__gw_cors_allow(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"));
        if (allow)
                MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow);
        if (!c->any) /* the answer depends on Origin: caches must key on it */
                MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
}

enum MHD_Result dsv__gw_cors_options(const struct gw_cors *c, struct MHD_Connection *conn, const char *methods) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        char allow_methods[64];
        snprintf(allow_methods, sizeof allow_methods, "%s, OPTIONS", methods);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow_methods);
        const char *origin = dsv__gw_cors_allow(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"));
        bool preflight = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method") != NULL;
        if (origin && preflight) {
                /* The headers a client may send: the ones it asks for are echoed (they were
                 * parsed as a field value, so they hold no CR/LF), else the API's own. */
                const char *want = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
                MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow_methods);
                MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                        want && *want ? want : "Authorization, Content-Type");
                MHD_add_response_header(resp, "Access-Control-Max-Age", PREFLIGHT_MAX_AGE_S);
        }
        dsv__gw_cors_decorate(conn, resp);
        enum MHD_Result r = MHD_queue_response(conn, MHD_HTTP_NO_CONTENT, resp);
        MHD_destroy_response(resp);
        return r;
}
