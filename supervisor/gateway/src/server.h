/* server.h — the server room's shared parts: answering over libmicrohttpd (reply.c) and
 * the completion endpoints (completion.c), both used by server.c, which owns the gateway
 * object, the daemon, the routing table and auth. */
#ifndef DSV_GATEWAY_SERVER_H
#define DSV_GATEWAY_SERVER_H

#include <microhttpd.h>
#include <poll.h>
#include <sys/socket.h>

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
#define GW_PENDING_MAX 1024 /* connections waiting for their first request's header */
#define GW_IP_BUCKETS 256

/* A refused connection, answered and shut down for writing, read until the client closes
 * or until_ns. */
struct gw_lingering {
        int fd;
        int64_t until_ns;
};

/* An accepted connection whose first request's header has not all arrived yet. */
struct gw_pending {
        int fd;
        socklen_t addr_len;
        struct sockaddr_storage addr;
        int64_t first_byte_by_ns, header_by_ns; /* INT64_MAX: no such deadline */
        size_t peeked;                          /* bytes seen so far (still unread) */
};

/* Connections from one client address, from accept to close. */
struct gw_ip_count {
        struct gw_ip_count *next;
        unsigned char addr[16]; /* IPv4 in the first 4 bytes */
        int family;
        unsigned n;
};

enum gw_timeout { GW_TIMEOUT_FIRST_BYTE, GW_TIMEOUT_HEADER, GW_TIMEOUT_BODY, GW_TIMEOUT_COUNT };

struct gw_listener_limits {
        unsigned max_connections;      /* open in MHD plus pending; beyond: 503 */
        unsigned per_ip;               /* from one address; beyond: 429; 0: no cap */
        unsigned first_byte_timeout_s; /* 0: none */
        unsigned header_timeout_s;     /* 0: none */
        bool tls;                      /* encrypted: only the first byte can be waited for */
};

struct gw_listener {
        int fd;      /* listening */
        int wake[2]; /* a byte in wake[1] stops the thread */
        pthread_t thread;
        bool running;
        struct MHD_Daemon *mhd;
        struct gw_listener_limits lim;
        atomic_uint open;  /* started by MHD and not closed yet */
        atomic_uint n_pending_now;
        atomic_ullong refused_per_ip, timeouts[GW_TIMEOUT_COUNT];
        struct gw_metrics *metrics;
        pthread_mutex_t ip_lock; /* ip_buckets: the accept thread and MHD's threads */
        bool ip_lock_ok;
        struct gw_ip_count *ip_buckets[GW_IP_BUCKETS];
        /* the thread's own */
        struct gw_lingering linger[GW_LINGER_MAX];
        size_t n_linger;
        struct gw_pending *pending; /* [pending_cap] */
        size_t n_pending, pending_cap;
        struct pollfd *pfd;         /* [2 + GW_LINGER_MAX + pending_cap] */
};

/* Binds and listens on host (numeric) and port (0: ephemeral). -EINVAL for a bad host,
 * -EADDRINUSE, -EACCES, -EIO, -ENOMEM. */
int dsv__gw_listener_open(struct gw_listener *l, const char *host, uint16_t port,
                          const struct gw_listener_limits *lim, struct gw_metrics *metrics);
/* The bound port, or -ENOTCONN. */
int dsv__gw_listener_port(const struct gw_listener *l);
/* Starts accepting. A connection over max_connections is answered 503, one over the
 * per-address cap 429, and closed; the others wait here until their first request's
 * header has arrived (first-byte and header deadlines: else 408 and closed), then go to
 * mhd (started with MHD_USE_NO_LISTEN_SOCKET and a higher limit). */
int dsv__gw_listener_start(struct gw_listener *l, struct MHD_Daemon *mhd);
/* MHD started (opened) or closed a connection the listener handed to it; addr: the
 * client's address (MHD_CONNECTION_INFO_CLIENT_ADDRESS), NULL when unknown. */
void dsv__gw_listener_connection_event(struct gw_listener *l, bool opened, const struct sockaddr *addr);
/* Connections MHD has open now. */
unsigned dsv__gw_listener_connections(struct gw_listener *l);
/* Counts a connection closed for a deadline (the body's is the server's). */
void dsv__gw_listener_count_timeout(struct gw_listener *l, enum gw_timeout which);
/* Fills the listener's part of the metrics sample. */
void dsv__gw_listener_sample(struct gw_listener *l, struct gw_server_sample *ret);
/* Stops accepting, closes lingering and pending connections and the socket; opened or not. */
void dsv__gw_listener_close(struct gw_listener *l);
/* Frees what open allocated, once MHD is stopped (its close notifications use it). On a
 * closed or never opened listener (zeroed with fd -1); twice is harmless. */
void dsv__gw_listener_done(struct gw_listener *l);

/* ---- POST /tokenize, /detokenize (tokenize.c) --------------------------------------- */

struct gw_tokenize {
        struct dsv_gateway_tokenizer fn; /* encode/decode NULL: 501 */
        struct dsv_gw_limits lim;        /* the served names */
        size_t max_prompt_bytes;
        int32_t max_model_len;
};

/* Answers a tokenize (detok false) or detokenize request with body[0..len). */
enum MHD_Result dsv__gw_tokenize(const struct gw_tokenize *t, struct MHD_Connection *conn, const char *body,
                                 size_t len, bool detok);

/* ---- the status page (status_page.c) ---------------------------------------------- */

/* status_page.html, embedded by the build (status_page_html.c, generated). */
extern const unsigned char dsv__gw_status_page_html[];
extern const size_t dsv__gw_status_page_html_len;

/* What GET /status reads. */
struct gw_status_source {
        struct gw_calls *calls;
        struct gw_metrics *metrics;
        const char *model;
        bool keys; /* /v1/... need a key */
        dsv_gateway_status_fn hook; /* NULL: "host" is null */
        void *hook_userdata;
};

/* Answers GET / with the page, GET /status with the JSON it polls (dsv_gateway.h). */
enum MHD_Result dsv__gw_status_page(struct MHD_Connection *conn);
enum MHD_Result dsv__gw_status_json(const struct gw_status_source *src, struct MHD_Connection *conn);

/* Answers POST /v1/chat/completions or /v1/completions with body[0..len): parses it, runs
 * the call, and answers as one object or, streamed, from a content reader that blocks
 * for the next token (MHD runs one thread per connection). */
enum MHD_Result dsv__gw_completion(struct gw_calls *cs, struct MHD_Connection *conn, const char *body, size_t len,
                                   enum dsv_gw_api api);

#endif
