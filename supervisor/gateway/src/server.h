/* server.h — the server room's shared parts: answering over libmicrohttpd (reply.c) and
 * the completion endpoints (completion.c), both used by server.c, which owns the gateway
 * object, the daemon, the routing table and auth. */
#ifndef DSV_GATEWAY_SERVER_H
#define DSV_GATEWAY_SERVER_H

#include <microhttpd.h>

#include "calls.h"
#include "metrics.h"
#include "openai.h"

struct cJSON;

/* Queues a response with a copy of body; retry_after_s > 0 adds Retry-After, a 401 the
 * WWW-Authenticate challenge. */
enum MHD_Result dsv__gw_reply(struct MHD_Connection *conn, unsigned status, const char *type, const char *body,
                              size_t len, uint32_t retry_after_s);
/* Queues o as application/json (frees o). */
enum MHD_Result dsv__gw_reply_json(struct MHD_Connection *conn, unsigned status, struct cJSON *o);
/* Queues the error; counted in dsvisor_requests_total when count is non-NULL. */
enum MHD_Result dsv__gw_reply_error(struct MHD_Connection *conn, const struct dsv_gw_error *e,
                                    struct gw_metrics *count);
/* The same, with "Connection: close": after a request whose framing cannot be trusted,
 * the bytes that follow on its connection are not read as another request. */
enum MHD_Result dsv__gw_reply_refusal(struct MHD_Connection *conn, const struct dsv_gw_error *e,
                                      struct gw_metrics *count);
enum MHD_Result dsv__gw_reply_simple_error(struct MHD_Connection *conn, int status, const char *type,
                                           const char *code, const char *msg, struct gw_metrics *count);

/* ---- the accept path (listener.c) --------------------------------------------------- */

#define GW_LINGER_MAX 64

/* A refused connection, answered and shut down for writing, read until the client closes
 * or until_ns. */
struct gw_lingering {
        int fd;
        int64_t until_ns;
};

struct gw_listener {
        int fd;      /* listening */
        int wake[2]; /* a byte in wake[1] stops the thread */
        pthread_t thread;
        bool running;
        struct MHD_Daemon *mhd;
        unsigned limit;    /* connections handed to MHD at once; beyond: refused */
        atomic_uint open;  /* started by MHD and not closed yet */
        struct gw_metrics *metrics;
        /* the thread's own */
        struct gw_lingering linger[GW_LINGER_MAX];
        size_t n_linger;
};

/* Binds and listens on host (numeric) and port (0: ephemeral). -EINVAL for a bad host,
 * -EADDRINUSE, -EACCES, -EIO. */
int dsv__gw_listener_open(struct gw_listener *l, const char *host, uint16_t port, unsigned max_connections,
                          struct gw_metrics *metrics);
/* The bound port, or -ENOTCONN. */
int dsv__gw_listener_port(const struct gw_listener *l);
/* Starts accepting: connections under the limit go to mhd (started with
 * MHD_USE_NO_LISTEN_SOCKET and a higher limit), the others are answered 503 and closed. */
int dsv__gw_listener_start(struct gw_listener *l, struct MHD_Daemon *mhd);
/* MHD started (opened) or closed a connection the listener handed to it. */
void dsv__gw_listener_connection_event(struct gw_listener *l, bool opened);
/* Connections MHD has open now. */
unsigned dsv__gw_listener_connections(struct gw_listener *l);
/* Stops accepting, closes lingering connections and the socket; opened or not. */
void dsv__gw_listener_close(struct gw_listener *l);

/* Answers POST /v1/chat/completions or /v1/completions with body[0..len): parses it, runs
 * the call, and answers as one object or, streamed, from a content reader that blocks
 * for the next token (MHD runs one thread per connection). */
enum MHD_Result dsv__gw_completion(struct gw_calls *cs, struct MHD_Connection *conn, const char *body, size_t len,
                                   enum dsv_gw_api api);

#endif
