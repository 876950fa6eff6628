/* The gateway's own accept path: the listening socket, and one thread that accepts each
 * connection and either hands it to libmicrohttpd (MHD_add_connection) or, beyond the
 * connection limit, answers it 503 + Retry-After itself and closes it. libmicrohttpd
 * closes a connection over its own limit without a word, which a client cannot tell from
 * a crash; its limit is set above ours so that it never does.
 *
 * A new connection waits here, in the accept thread's poll set, until its first request's
 * header block has all arrived (peeked, not read: MHD reads it) or its deadline passes
 * (408, closed): a client that trickles its header a byte at a time holds no MHD thread,
 * and libmicrohttpd's idle timeout, which every byte restarts, cannot bound it. Peeked
 * bytes stay readable, so SO_RCVLOWAT is raised past them: poll wakes for new bytes only.
 * Under TLS the header is encrypted; only the first byte is waited for. A complete
 * header block is checked here for what a lenient parser would hide from the request
 * callback (a NUL byte, a field line with an empty name: 400, closed), so the rule does
 * not rest on libmicrohttpd's discipline level.
 *
 * The per-address cap counts a connection from accept to close (MHD's close
 * notification hands its address back).
 *
 * A refused connection is closed gracefully: the answer is written, the write side shut
 * down, and the socket kept ("lingering") until the client closes or a second passes,
 * reading whatever it still sends. Closing a socket with unread input resets it, and the
 * reset can destroy the answer before the client reads it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_strict.h"
#include "server.h"

#define LISTEN_BACKLOG 4096
#define LINGER_NS 1000000000LL
#define ACCEPT_RETRY_MS 10 /* out of file descriptors: the backlog holds them meanwhile */
#define REFUSAL_RETRY_AFTER_S 1 /* connections come and go quickly once admission answers */

#define HEADER_PEEK_BYTES 16384 /* a header block this long goes to MHD, which limits it */

struct refusal {
        const char *status_line, *body;
        unsigned retry_after_s; /* 0: none */
};

static const struct refusal too_many_connections = {
        "503 Service Unavailable",
        "{\"error\":{\"message\":\"The server has too many open connections; retry later\","
        "\"type\":\"server_error\",\"param\":null,\"code\":\"service_unavailable\"}}",
        REFUSAL_RETRY_AFTER_S};
static const struct refusal too_many_from_address = {
        "429 Too Many Requests",
        "{\"error\":{\"message\":\"Too many open connections from this address; retry later\","
        "\"type\":\"rate_limit_error\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}",
        REFUSAL_RETRY_AFTER_S};
static const struct refusal malformed_header = {
        "400 Bad Request",
        "{\"error\":{\"message\":\"The request header holds a NUL byte or a field line with an empty name\","
        "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"bad_request\"}}",
        0};
static const struct refusal header_timeout = {
        "408 Request Timeout",
        "{\"error\":{\"message\":\"The request header did not arrive in time\","
        "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_timeout\"}}",
        0};

int dsv__gw_listener_open(struct gw_listener *l, const char *host, uint16_t port,
                          const struct gw_listener_limits *lim, struct gw_metrics *metrics) {
        *l = (struct gw_listener){.fd = -1, .wake = {-1, -1}, .lim = *lim, .metrics = metrics};
        l->pending_cap = lim->max_connections < GW_PENDING_MAX ? lim->max_connections : GW_PENDING_MAX;
        l->pending = calloc(l->pending_cap, sizeof *l->pending);
        l->pfd = calloc(2 + GW_LINGER_MAX + l->pending_cap, sizeof *l->pfd);
        l->ip_lock_ok = l->pending && l->pfd && pthread_mutex_init(&l->ip_lock, NULL) == 0;
        if (!l->ip_lock_ok) {
                dsv__gw_listener_done(l);
                return -ENOMEM;
        }
        struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai;
        char service[8];
        snprintf(service, sizeof service, "%u", port);
        if (getaddrinfo(host, service, &hints, &ai) != 0) {
                dsv__gw_listener_done(l);
                return -EINVAL;
        }
        int one = 1, r = 0;
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            (ai->ai_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0) ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0 ||
            pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0)
                r = errno == EADDRINUSE || errno == EACCES ? -errno : -EIO;
        freeaddrinfo(ai);
        if (r < 0) {
                if (fd >= 0)
                        close(fd);
                dsv__gw_listener_close(l);
                dsv__gw_listener_done(l);
                return r;
        }
        l->fd = fd;
        return 0;
}

int dsv__gw_listener_port(const struct gw_listener *l) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (l->fd < 0 || getsockname(l->fd, (struct sockaddr *)&ss, &len) < 0)
                return -ENOTCONN;
        return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
}

static void drain(int fd) {
        char buf[4096];
        while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
        }
}

static void linger_close(struct gw_listener *l, size_t i) {
        close(l->linger[i].fd);
        l->linger[i] = l->linger[--l->n_linger];
}

/* ---- connections per client address ------------------------------------------------ */

/* The address as a key; false for a family without one (then it is not capped). */
static bool ip_key(const struct sockaddr *sa, unsigned char key[16], int *family) {
        memset(key, 0, 16);
        if (sa && sa->sa_family == AF_INET) {
                memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else if (sa && sa->sa_family == AF_INET6) {
                memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        } else {
                return false;
        }
        *family = sa->sa_family;
        return true;
}

static struct gw_ip_count **ip_slot(struct gw_listener *l, const unsigned char key[16], int family) {
        unsigned h = 2166136261u; /* FNV-1a */
        for (int i = 0; i < 16; i++)
                h = (h ^ key[i]) * 16777619u;
        struct gw_ip_count **p = &l->ip_buckets[h % GW_IP_BUCKETS];
        while (*p && ((*p)->family != family || memcmp((*p)->addr, key, 16) != 0))
                p = &(*p)->next;
        return p;
}

/* Counts one more connection from sa; false (nothing counted) when the cap is reached. */
static bool ip_take(struct gw_listener *l, const struct sockaddr *sa) {
        unsigned char key[16];
        int family;
        if (!l->lim.per_ip || !ip_key(sa, key, &family))
                return true;
        bool ok = true;
        pthread_mutex_lock(&l->ip_lock);
        struct gw_ip_count **p = ip_slot(l, key, family);
        if (!*p && (*p = calloc(1, sizeof **p))) {
                memcpy((*p)->addr, key, 16);
                (*p)->family = family;
        }
        if (!*p || (*p)->n >= l->lim.per_ip)
                ok = false; /* out of memory refuses too: the cap must hold */
        else
                (*p)->n++;
        pthread_mutex_unlock(&l->ip_lock);
        return ok;
}

static void ip_release(struct gw_listener *l, const struct sockaddr *sa) {
        unsigned char key[16];
        int family;
        if (!l->lim.per_ip || !ip_key(sa, key, &family))
                return;
        pthread_mutex_lock(&l->ip_lock);
        struct gw_ip_count **p = ip_slot(l, key, family);
        if (*p && --(*p)->n == 0) {
                struct gw_ip_count *gone = *p;
                *p = gone->next;
                free(gone);
        }
        pthread_mutex_unlock(&l->ip_lock);
}

/* ---- refusals ------------------------------------------------------------------------ */

/* Answers a connection and keeps it lingering (the oldest lingering one closes when there
 * is no room). */
static void refuse(struct gw_listener *l, int fd, int64_t now, const struct refusal *why) {
        char answer[640], retry[32] = "";
        if (why->retry_after_s)
                snprintf(retry, sizeof retry, "Retry-After: %u\r\n", why->retry_after_s);
        int n = snprintf(answer, sizeof answer,
                         "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                         "%sConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                         why->status_line, retry, strlen(why->body), why->body);
        drain(fd);
        (void)send(fd, answer, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
        if (l->n_linger == GW_LINGER_MAX)
                linger_close(l, 0);
        l->linger[l->n_linger++] = (struct gw_lingering){.fd = fd, .until_ns = now + LINGER_NS};
}

/* ---- pending connections ------------------------------------------------------------- */

static void hand_over(struct gw_listener *l, int fd, const struct sockaddr_storage *ss, socklen_t len) {
        /* On failure (out of threads or memory) MHD has closed the socket. */
        if (MHD_add_connection(l->mhd, fd, (const struct sockaddr *)ss, len) != MHD_YES) {
                ip_release(l, (const struct sockaddr *)ss);
                dsv__gw_metrics_connection_refused(l->metrics);
        }
}

static void pending_remove(struct gw_listener *l, size_t i) {
        l->pending[i] = l->pending[--l->n_pending];
        atomic_store(&l->n_pending_now, (unsigned)l->n_pending);
}

/* Looks at what arrived: hands the connection over once its header block is complete
 * (or, under TLS, once anything came), closes it when the client went away. */
static void pending_check(struct gw_listener *l, size_t i, short revents) {
        struct gw_pending *pc = &l->pending[i];
        char buf[HEADER_PEEK_BYTES];
        ssize_t n = recv(pc->fd, buf, l->lim.tls ? 1 : sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        /* A bare LF ends a line too, so such a header is handed on at once (libmicrohttpd
         * at discipline level 1 refuses it 400) rather than held to its deadline. */
        bool complete = n > 0 && (l->lim.tls || (size_t)n == sizeof buf || !l->lim.header_timeout_s ||
                                  memmem(buf, (size_t)n, "\r\n\r\n", 4) || memmem(buf, (size_t)n, "\n\n", 2) ||
                                  memmem(buf, (size_t)n, "\n\r\n", 3));
        /* A client gone before its header was whole (its bytes still unread: a peek
         * returns them, not the end of the stream). One that sent a whole request and
         * then shut its side still gets its answer. */
        if (n <= 0 || (!complete && (revents & (POLLRDHUP | POLLHUP | POLLERR)))) {
                ip_release(l, (struct sockaddr *)&pc->addr);
                close(pc->fd);
                pending_remove(l, i);
                return;
        }
        if (!complete) {
                /* Wake again only when more than what is here has come. */
                int lowat = (int)n + 1;
                (void)setsockopt(pc->fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
                pc->peeked = (size_t)n;
                pc->first_byte_by_ns = INT64_MAX;
                return;
        }
        int one = 1;
        (void)setsockopt(pc->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
        struct gw_pending done = *pc;
        pending_remove(l, i);
        if (!l->lim.tls && !dsv__gw_strict_header_block(buf, (size_t)n)) {
                ip_release(l, (struct sockaddr *)&done.addr);
                refuse(l, done.fd, dsv__gw_now_ns(), &malformed_header);
                return;
        }
        hand_over(l, done.fd, &done.addr, done.addr_len);
}

static void pending_expire(struct gw_listener *l, size_t i, int64_t now) {
        struct gw_pending *pc = &l->pending[i];
        bool first = now >= pc->first_byte_by_ns;
        if (!first && now < pc->header_by_ns)
                return;
        atomic_fetch_add(&l->timeouts[first ? GW_TIMEOUT_FIRST_BYTE : GW_TIMEOUT_HEADER], 1);
        ip_release(l, (struct sockaddr *)&pc->addr);
        refuse(l, pc->fd, now, &header_timeout);
        pending_remove(l, i);
}

static void accept_one(struct gw_listener *l) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                        poll(NULL, 0, ACCEPT_RETRY_MS);
                return;
        }
        int64_t now = dsv__gw_now_ns();
        bool wait_header = l->lim.first_byte_timeout_s || l->lim.header_timeout_s;
        if (atomic_load(&l->open) + l->n_pending >= l->lim.max_connections ||
            (wait_header && l->n_pending == l->pending_cap)) {
                dsv__gw_metrics_connection_refused(l->metrics);
                refuse(l, fd, now, &too_many_connections);
                return;
        }
        if (!ip_take(l, (struct sockaddr *)&ss)) {
                atomic_fetch_add(&l->refused_per_ip, 1);
                refuse(l, fd, now, &too_many_from_address);
                return;
        }
        if (!wait_header) {
                hand_over(l, fd, &ss, len);
                return;
        }
        const int64_t s_ns = 1000000000LL;
        l->pending[l->n_pending++] = (struct gw_pending){
                .fd = fd, .addr_len = len, .addr = ss,
                .first_byte_by_ns = l->lim.first_byte_timeout_s ? now + l->lim.first_byte_timeout_s * s_ns : INT64_MAX,
                .header_by_ns = l->lim.header_timeout_s ? now + l->lim.header_timeout_s * s_ns : INT64_MAX};
        atomic_store(&l->n_pending_now, (unsigned)l->n_pending);
}

static void *listener_main(void *arg) {
        struct gw_listener *l = arg;
        struct pollfd *p = l->pfd;
        pthread_setname_np(pthread_self(), "dsv-accept"); /* beside libmicrohttpd's "MHD-*" */
        for (;;) {
                p[0] = (struct pollfd){.fd = l->fd, .events = POLLIN};
                p[1] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
                int64_t now = dsv__gw_now_ns(), soonest = INT64_MAX;
                for (size_t i = 0; i < l->n_linger; i++) {
                        p[2 + i] = (struct pollfd){.fd = l->linger[i].fd, .events = POLLIN};
                        if (l->linger[i].until_ns < soonest)
                                soonest = l->linger[i].until_ns;
                }
                size_t n_linger = l->n_linger;
                struct pollfd *pp = p + 2 + n_linger;
                size_t n_pending = l->n_pending;
                for (size_t i = 0; i < n_pending; i++) {
                        const struct gw_pending *pc = &l->pending[i];
                        pp[i] = (struct pollfd){.fd = pc->fd, .events = POLLIN | POLLRDHUP};
                        int64_t by = pc->first_byte_by_ns < pc->header_by_ns ? pc->first_byte_by_ns : pc->header_by_ns;
                        if (by < soonest)
                                soonest = by;
                }
                int timeout_ms = -1;
                if (soonest != INT64_MAX)
                        timeout_ms = soonest <= now ? 0 : (int)((soonest - now) / 1000000 + 1);
                if (poll(p, 2 + n_linger + n_pending, timeout_ms) < 0) {
                        if (errno != EINTR)
                                poll(NULL, 0, ACCEPT_RETRY_MS);
                        continue;
                }
                if (p[1].revents)
                        break;
                now = dsv__gw_now_ns();
                /* Backwards: pending_remove and linger_close move the last entry into the
                 * removed one's place. Pending first: an expired one joins the lingering. */
                for (size_t i = n_pending; i-- > 0;) {
                        if (pp[i].revents)
                                pending_check(l, i, pp[i].revents);
                        if (i < l->n_pending && l->pending[i].fd == pp[i].fd)
                                pending_expire(l, i, now);
                }
                for (size_t i = l->n_linger; i-- > 0;) {
                        char buf[4096];
                        if (i < n_linger && p[2 + i].fd == l->linger[i].fd && p[2 + i].revents) {
                                ssize_t n = recv(l->linger[i].fd, buf, sizeof buf, MSG_DONTWAIT);
                                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                                        l->linger[i].until_ns = now;
                        }
                        if (l->linger[i].until_ns <= now)
                                linger_close(l, i);
                }
                if (p[0].revents & POLLIN)
                        accept_one(l);
        }
        return NULL;
}

int dsv__gw_listener_start(struct gw_listener *l, struct MHD_Daemon *mhd) {
        l->mhd = mhd;
        int r = -pthread_create(&l->thread, NULL, listener_main, l);
        l->running = r == 0;
        return r;
}

void dsv__gw_listener_connection_event(struct gw_listener *l, bool opened, const struct sockaddr *addr) {
        if (opened) {
                atomic_fetch_add(&l->open, 1);
        } else {
                atomic_fetch_sub(&l->open, 1);
                ip_release(l, addr);
        }
}

unsigned dsv__gw_listener_connections(struct gw_listener *l) {
        return atomic_load(&l->open);
}

void dsv__gw_listener_count_timeout(struct gw_listener *l, enum gw_timeout which) {
        atomic_fetch_add(&l->timeouts[which], 1);
}

void dsv__gw_listener_sample(struct gw_listener *l, struct gw_server_sample *ret) {
        ret->connections_open = atomic_load(&l->open);
        ret->max_connections = l->lim.max_connections;
        ret->connections_pending = atomic_load(&l->n_pending_now);
        ret->max_connections_per_ip = l->lim.per_ip;
        ret->http_threads_max = l->lim.max_connections + 2;
        ret->refused_per_ip = atomic_load(&l->refused_per_ip);
        for (int i = 0; i < GW_TIMEOUT_COUNT; i++)
                ret->timeouts[i] = atomic_load(&l->timeouts[i]);
}

void dsv__gw_listener_close(struct gw_listener *l) {
        if (l->running) {
                (void)write(l->wake[1], "x", 1);
                pthread_join(l->thread, NULL);
                l->running = false;
        }
        while (l->n_linger)
                linger_close(l, l->n_linger - 1);
        while (l->n_pending) {
                close(l->pending[l->n_pending - 1].fd);
                pending_remove(l, l->n_pending - 1);
        }
        for (int i = 0; i < 2; i++)
                if (l->wake[i] >= 0)
                        close(l->wake[i]);
        if (l->fd >= 0)
                close(l->fd);
        l->fd = l->wake[0] = l->wake[1] = -1;
}

void dsv__gw_listener_done(struct gw_listener *l) {
        free(l->pfd);
        free(l->pending);
        l->pfd = NULL;
        l->pending = NULL;
        l->pending_cap = 0;
        if (!l->ip_lock_ok)
                return;
        for (size_t b = 0; b < GW_IP_BUCKETS; b++)
                while (l->ip_buckets[b]) {
                        struct gw_ip_count *next = l->ip_buckets[b]->next;
                        free(l->ip_buckets[b]);
                        l->ip_buckets[b] = next;
                }
        pthread_mutex_destroy(&l->ip_lock);
        l->ip_lock_ok = false;
}
