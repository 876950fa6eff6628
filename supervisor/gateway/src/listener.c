/* The gateway's own accept path: the listening socket, and one thread that accepts each
 * connection and either hands it to libmicrohttpd (MHD_add_connection) or, beyond the
 * connection limit, answers it 503 + Retry-After itself and closes it. libmicrohttpd
 * closes a connection over its own limit without a word, which a client cannot tell from
 * a crash; its limit is set above ours so that it never does.
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
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server.h"

#define LISTEN_BACKLOG 4096
#define LINGER_NS 1000000000LL
#define ACCEPT_RETRY_MS 10 /* out of file descriptors: the backlog holds them meanwhile */
#define REFUSAL_RETRY_AFTER_S 1 /* connections come and go quickly once admission answers */

static const char refusal_body[] =
        "{\"error\":{\"message\":\"The server has too many open connections; retry later\","
        "\"type\":\"server_error\",\"param\":null,\"code\":\"service_unavailable\"}}";

int dsv__gw_listener_open(struct gw_listener *l, const char *host, uint16_t port, unsigned max_connections,
                          struct gw_metrics *metrics) {
        *l = (struct gw_listener){.fd = -1, .wake = {-1, -1}, .limit = max_connections, .metrics = metrics};
        struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai;
        char service[8];
        snprintf(service, sizeof service, "%u", port);
        if (getaddrinfo(host, service, &hints, &ai) != 0)
                return -EINVAL;
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

/* Answers a connection over the limit and keeps it lingering (the oldest lingering one
 * closes when there is no room). */
static void refuse(struct gw_listener *l, int fd, int64_t now) {
        char answer[512];
        int n = snprintf(answer, sizeof answer,
                         "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Retry-After: %u\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                         REFUSAL_RETRY_AFTER_S, sizeof refusal_body - 1, refusal_body);
        drain(fd);
        (void)send(fd, answer, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
        dsv__gw_metrics_connection_refused(l->metrics);
        if (l->n_linger == GW_LINGER_MAX)
                linger_close(l, 0);
        l->linger[l->n_linger++] = (struct gw_lingering){.fd = fd, .until_ns = now + LINGER_NS};
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
        if (atomic_load(&l->open) >= l->limit) {
                refuse(l, fd, dsv__gw_now_ns());
                return;
        }
        /* On failure (out of threads or memory) MHD has closed the socket. */
        if (MHD_add_connection(l->mhd, fd, (struct sockaddr *)&ss, len) != MHD_YES)
                dsv__gw_metrics_connection_refused(l->metrics);
}

static void *listener_main(void *arg) {
        struct gw_listener *l = arg;
        struct pollfd p[2 + GW_LINGER_MAX];
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
                int timeout_ms = -1;
                if (soonest != INT64_MAX)
                        timeout_ms = soonest <= now ? 0 : (int)((soonest - now) / 1000000 + 1);
                if (poll(p, 2 + l->n_linger, timeout_ms) < 0) {
                        if (errno != EINTR)
                                poll(NULL, 0, ACCEPT_RETRY_MS);
                        continue;
                }
                if (p[1].revents)
                        break;
                now = dsv__gw_now_ns();
                /* Backwards: linger_close moves the last entry into the closed one's place. */
                for (size_t i = l->n_linger; i-- > 0;) {
                        char buf[4096];
                        if (p[2 + i].revents) {
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

void dsv__gw_listener_connection_event(struct gw_listener *l, bool opened) {
        if (opened)
                atomic_fetch_add(&l->open, 1);
        else
                atomic_fetch_sub(&l->open, 1);
}

unsigned dsv__gw_listener_connections(struct gw_listener *l) {
        return atomic_load(&l->open);
}

void dsv__gw_listener_close(struct gw_listener *l) {
        if (l->running) {
                (void)write(l->wake[1], "x", 1);
                pthread_join(l->thread, NULL);
                l->running = false;
        }
        while (l->n_linger)
                linger_close(l, l->n_linger - 1);
        for (int i = 0; i < 2; i++)
                if (l->wake[i] >= 0)
                        close(l->wake[i]);
        if (l->fd >= 0)
                close(l->fd);
        l->fd = l->wake[0] = l->wake[1] = -1;
}
