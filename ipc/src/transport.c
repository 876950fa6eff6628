/* nng transport for the worker protocol: one PAIR1 socket per worker link.
 * nng's positive error codes are converted to -errno here, once. */
#include <errno.h>
#include <limits.h>
#include <nng/nng.h>
#include <poll.h>
#include <pthread.h>
#include <nng/protocol/pair1/pair.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dsv_ipc.h"

#define QUEUE_MSGS 8192 /* nng caps socket buffers at 8192 messages */
#define SEND_TIMEOUT_MS 5000
/* A dialer whose worker went away retries after 1 ms, doubling to at most 20 ms: a
 * restarted worker (listening within ~10 ms of its exec) is reached within 20 ms of
 * listening, not after nng's default 100 ms. A failed connect() to a missing unix
 * socket costs microseconds, so 50 tries a second while a worker is down are nothing. */
#define RECONNECT_MIN_MS 1
#define RECONNECT_MAX_MS 20

struct dsv_ipc_conn {
        nng_socket sock;
        int recv_fd; /* NNG_OPT_RECVFD: readable while a message is queued (wait_recv) */
        _Atomic int peers;
        _Atomic int rejected;
        _Atomic int peer_minor; /* "minor" of the last message received */
        pthread_mutex_t rx_mu;  /* guards the rest of an "events" batch being handed out */
        struct dsv_ipc_msg *pending; /* (n_pending) from the last batch, from pending_at on */
        size_t n_pending, pending_at;
};

/* Nanoseconds on CLOCK_MONOTONIC: receive timeouts and the close wait (whose condition
 * variable runs on the same clock). */
static int64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int errno_from_nng(int rv) {
        switch (rv) {
        case 0:
                return 0;
        case NNG_ETIMEDOUT:
                return -ETIMEDOUT;
        case NNG_ECLOSED:
        case NNG_ECANCELED:
                return -ECANCELED;
        case NNG_ENOMEM:
                return -ENOMEM;
        case NNG_EINVAL:
        case NNG_EADDRINVAL:
                return -EINVAL;
        case NNG_EADDRINUSE:
                return -EADDRINUSE;
        case NNG_EPERM:
                return -EACCES;
        case NNG_ECONNREFUSED:
                return -ECONNREFUSED;
        case NNG_ECONNRESET:
        case NNG_ECONNSHUT:
                return -ECONNRESET;
        case NNG_EMSGSIZE:
                return -EMSGSIZE;
        case NNG_ENOENT:
                return -ENOENT;
        case NNG_EAGAIN:
                return -EAGAIN;
        default:
                if (rv & NNG_ESYSERR)
                        return -(rv & ~NNG_ESYSERR);
                return -EIO;
        }
}

/* Accepts a directory only if it is ours and closed to everyone else. */
static int check_private_dir(const char *dir) {
        struct stat st;
        if (lstat(dir, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
                return -EPERM;
        return 0;
}

int dsv_ipc_runtime_dir(char *buf, size_t size) {
        const char *env = getenv("DSV_RUNTIME_DIR");
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        int n;
        if (env && *env)
                n = snprintf(buf, size, "%s", env);
        else if (xdg && *xdg)
                n = snprintf(buf, size, "%s/dsvisor", xdg);
        else
                n = snprintf(buf, size, "%s/dsvisor-%u", getuid() == 0 ? "/run" : "/tmp", (unsigned)getuid());
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
                return -errno;
        return check_private_dir(buf);
}

static void on_pipe(nng_pipe pipe, nng_pipe_ev ev, void *arg) {
        struct dsv_ipc_conn *c = arg;
        if (ev == NNG_PIPE_EV_ADD_PRE) {
                /* ipc:// peers must run as our uid; other transports have no peer uid. */
                uint64_t uid;
                if (nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_UID, &uid) == 0 && uid != (uint64_t)getuid()) {
                        atomic_fetch_add(&c->rejected, 1);
                        nng_pipe_close(pipe);
                }
        } else if (ev == NNG_PIPE_EV_ADD_POST) {
                atomic_fetch_add(&c->peers, 1);
        } else if (ev == NNG_PIPE_EV_REM_POST) {
                if (atomic_load(&c->peers) > 0)
                        atomic_fetch_sub(&c->peers, 1);
        }
}

static int conn_open(struct dsv_ipc_conn **ret) {
        struct dsv_ipc_conn *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        pthread_mutex_init(&c->rx_mu, NULL);
        int rv = nng_pair1_open(&c->sock);
        if (rv == 0)
                rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, DSV_IPC_MAX_MSG_BYTES);
        /* Queue messages instead of blocking each send on the peer's receive: token
         * events stream while the supervisor is busy elsewhere. A peer that stops
         * reading for SEND_TIMEOUT_MS makes send fail rather than hang. */
        if (rv == 0)
                rv = nng_socket_set_int(c->sock, NNG_OPT_SENDBUF, QUEUE_MSGS);
        if (rv == 0)
                rv = nng_socket_set_int(c->sock, NNG_OPT_RECVBUF, QUEUE_MSGS);
        if (rv == 0)
                rv = nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, SEND_TIMEOUT_MS);
        if (rv == 0)
                rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, on_pipe, c);
        if (rv == 0)
                rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, on_pipe, c);
        if (rv == 0)
                rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, on_pipe, c);
        if (rv == 0)
                rv = nng_socket_get_int(c->sock, NNG_OPT_RECVFD, &c->recv_fd);
        if (rv != 0) {
                nng_close(c->sock);
                pthread_mutex_destroy(&c->rx_mu);
                free(c);
                return errno_from_nng(rv);
        }
        *ret = c;
        return 0;
}

/* For ipc:// URLs: the socket's directory must be private (0700, ours). */
static int check_ipc_url(const char *url) {
        if (strncmp(url, "ipc://", 6) != 0)
                return strncmp(url, "inproc://", 9) == 0 ? 0 : -EINVAL;
        const char *path = url + 6;
        if (path[0] != '/')
                return -EINVAL; /* relative or abstract ("ipc://@name") sockets are refused */
        char dir[PATH_MAX];
        const char *slash = strrchr(path, '/');
        int n = snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
        if (n < 0 || (size_t)n >= sizeof dir)
                return -ENAMETOOLONG;
        return check_private_dir(dir);
}

static int listener_start(struct dsv_ipc_conn *c, const char *url) {
        nng_listener l;
        int rv = nng_listener_create(&l, c->sock, url);
        if (rv == 0 && strncmp(url, "ipc://", 6) == 0)
                rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600);
        if (rv == 0)
                rv = nng_listener_start(l, 0);
        return rv;
}

/* Non-blocking dial: the worker may not be listening yet; nng retries. */
static int dialer_start(struct dsv_ipc_conn *c, const char *url) {
        nng_dialer d;
        int rv = nng_dialer_create(&d, c->sock, url);
        if (rv == 0)
                rv = nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, RECONNECT_MIN_MS);
        if (rv == 0)
                rv = nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, RECONNECT_MAX_MS);
        if (rv == 0)
                rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
        return rv;
}

/* Listen and dial alike: the URL checked, a connection opened and nng's endpoint started
 * on it (start returns nng's code); the connection is closed again when that fails. */
static int conn_start(const char *url, struct dsv_ipc_conn **ret_conn,
                      int (*start)(struct dsv_ipc_conn *c, const char *url)) {
        if (!url || !ret_conn)
                return -EINVAL;
        int r = check_ipc_url(url);
        if (r < 0)
                return r;
        struct dsv_ipc_conn *c;
        if ((r = conn_open(&c)) < 0)
                return r;
        int rv = start(c, url);
        if (rv != 0) {
                dsv_ipc_close(c);
                return errno_from_nng(rv);
        }
        *ret_conn = c;
        return 0;
}

int dsv_ipc_listen(const char *url, struct dsv_ipc_conn **ret_conn) {
        return conn_start(url, ret_conn, listener_start);
}

int dsv_ipc_dial(const char *url, struct dsv_ipc_conn **ret_conn) {
        return conn_start(url, ret_conn, dialer_start);
}

static void drop_pending(struct dsv_ipc_conn *c) {
        for (size_t i = c->pending_at; i < c->n_pending; i++)
                dsv_ipc_msg_done(&c->pending[i]);
        free(c->pending);
        c->pending = NULL;
        c->n_pending = c->pending_at = 0;
}

/* nng 1.5.2's nng_close can wait forever. Seen here in about 1 of 30 runs of
 * test-gateway-http, and within a few hundred dial / poll / close cycles against a live
 * peer: nng's one reaper thread blocks for good in pair1's pipe_stop (nni_aio_stop on a
 * pipe aio whose task never finishes), so that pipe is never removed, and nng_close,
 * which waits for its socket's pipes to go, waits with it — as does every later close in
 * the process, since nothing is reaped any more. nng reworked endpoint and aio teardown
 * after 1.5.2; Debian 12 ships 1.5.2. So the close runs on a thread of its own and the
 * caller waits for it at most CLOSE_WAIT_MS: a close that finishes later frees the
 * connection then; one that never does is left behind (its socket and thread leak), with
 * a warning, and the caller goes on — a supervisor or worker that is stopping stops. */
#define CLOSE_WAIT_MS 500

struct closing {
        struct dsv_ipc_conn *conn;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool done, abandoned;
};

static _Atomic unsigned abandoned_closes;

static void conn_free(struct dsv_ipc_conn *c) {
        drop_pending(c);
        pthread_mutex_destroy(&c->rx_mu);
        free(c);
}

static void closing_free(struct closing *k) {
        pthread_cond_destroy(&k->cv);
        pthread_mutex_destroy(&k->mu);
        free(k);
}

/* Closes the socket, frees the connection (its pipe callbacks may run until nng_close
 * returns), and frees k too if the caller stopped waiting. */
static void *close_main(void *arg) {
        struct closing *k = arg;
        nng_close(k->conn->sock);
        conn_free(k->conn);
        pthread_mutex_lock(&k->mu);
        k->done = true;
        bool abandoned = k->abandoned;
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
        if (abandoned)
                closing_free(k);
        return NULL;
}

void dsv_ipc_close(struct dsv_ipc_conn *conn) {
        if (!conn)
                return;
        struct closing *k = calloc(1, sizeof *k);
        pthread_condattr_t ca;
        pthread_attr_t ta;
        pthread_t t;
        if (!k || pthread_condattr_init(&ca) != 0) {
                free(k);
                nng_close(conn->sock); /* no memory for the guard: close unguarded */
                conn_free(conn);
                return;
        }
        k->conn = conn;
        pthread_mutex_init(&k->mu, NULL);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&k->cv, &ca);
        pthread_condattr_destroy(&ca);
        int started = pthread_attr_init(&ta) == 0;
        if (started) {
                pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
                started = pthread_create(&t, &ta, close_main, k) == 0;
                pthread_attr_destroy(&ta);
        }
        if (!started) {
                close_main(k);
                closing_free(k);
                return;
        }
        int64_t until_ns = mono_ns() + (int64_t)CLOSE_WAIT_MS * 1000000;
        struct timespec until = {.tv_sec = until_ns / 1000000000, .tv_nsec = until_ns % 1000000000};
        pthread_mutex_lock(&k->mu);
        while (!k->done && pthread_cond_timedwait(&k->cv, &k->mu, &until) == 0)
                ;
        bool done = k->done;
        k->abandoned = !done;
        pthread_mutex_unlock(&k->mu);
        if (done) {
                closing_free(k);
                return;
        }
        unsigned n = atomic_fetch_add(&abandoned_closes, 1) + 1;
        fprintf(stderr,
                "dsv_ipc: an nng socket did not close within %d ms (nng 1.5.2 can hang in nng_close); "
                "going on without waiting for it (%u so far in this process)\n",
                CLOSE_WAIT_MS, n);
}

unsigned dsv_ipc_abandoned_closes(void) {
        return atomic_load(&abandoned_closes);
}

void dsv_ipc_close_linger(struct dsv_ipc_conn *conn, int linger_ms) {
        if (conn && linger_ms > 0) {
                struct timespec ts = {linger_ms / 1000, (long)(linger_ms % 1000) * 1000000L};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        dsv_ipc_close(conn);
}

int dsv_ipc_send(struct dsv_ipc_conn *conn, const struct dsv_ipc_msg *msg) {
        if (!conn || !msg)
                return -EINVAL;
        char *buf;
        size_t len;
        int r = dsv_ipc_msg_encode(msg, &buf, &len);
        if (r < 0)
                return r;
        int rv = nng_send(conn->sock, buf, len, 0);
        free(buf);
        return errno_from_nng(rv);
}

int dsv_ipc_send_batch(struct dsv_ipc_conn *conn, struct dsv_ipc_batch *b) {
        if (!conn || !b)
                return -EINVAL;
        int n = dsv_ipc_batch_count(b), rv = 0;
        if (n == 0)
                return 0;
        if (n == 1 || atomic_load(&conn->peer_minor) < 1) {
                /* Each event is a complete message: alone, or to a peer without "events". */
                for (int i = 0; i < n; i++) {
                        size_t len;
                        const char *ev = dsv_ipc_batch_event(b, i, &len);
                        int rv1 = nng_send(conn->sock, (void *)ev, len, 0);
                        if (rv == 0)
                                rv = rv1;
                }
        } else {
                size_t len;
                const char *msg = dsv_ipc_batch_message(b, &len);
                rv = nng_send(conn->sock, (void *)msg, len, 0);
        }
        dsv_ipc_batch_clear(b);
        return errno_from_nng(rv);
}

/* The next event of the batch being handed out, if any. */
static int pop_pending(struct dsv_ipc_conn *c, struct dsv_ipc_msg *ret) {
        int got = 0;
        pthread_mutex_lock(&c->rx_mu);
        if (c->pending_at < c->n_pending) {
                *ret = c->pending[c->pending_at++];
                got = 1;
                if (c->pending_at == c->n_pending) {
                        free(c->pending);
                        c->pending = NULL;
                        c->n_pending = c->pending_at = 0;
                }
        }
        pthread_mutex_unlock(&c->rx_mu);
        return got;
}

/* nng 1.5.2's timed receive can miss its deadline and wait forever: a receiver thread
 * polling with 50 ms timeouts and no traffic was seen stuck within a few hundred cycles of
 * sockets being dialed and closed beside it (nng's aio expiry; see dsv_ipc_close for its
 * close hang). So the wait is the kernel's: poll() on the socket's receive descriptor
 * (NNG_OPT_RECVFD, readable while a message is queued) with our own deadline, then a
 * non-blocking receive, which nng completes at once or fails without arming a timer. */
static int wait_recv(struct dsv_ipc_conn *c, int timeout_ms, char **ret_buf, size_t *ret_len) {
        int64_t start_ns = mono_ns();
        for (;;) {
                int rv = nng_recv(c->sock, ret_buf, ret_len, NNG_FLAG_ALLOC | NNG_FLAG_NONBLOCK);
                if (rv != NNG_EAGAIN && rv != NNG_ETIMEDOUT)
                        return rv;
                int left = -1;
                if (timeout_ms >= 0) {
                        int64_t spent = (mono_ns() - start_ns) / 1000000;
                        if (spent >= timeout_ms)
                                return NNG_ETIMEDOUT;
                        left = (int)(timeout_ms - spent);
                }
                struct pollfd p = {.fd = c->recv_fd, .events = POLLIN};
                if (poll(&p, 1, left) < 0 && errno != EINTR)
                        return NNG_ESYSERR | errno;
        }
}

int dsv_ipc_recv(struct dsv_ipc_conn *conn, struct dsv_ipc_msg *ret, int timeout_ms, char *err, size_t err_size) {
        if (!conn || !ret)
                return -EINVAL;
        if (pop_pending(conn, ret))
                return 0;
        char *buf = NULL;
        size_t len = 0;
        int rv = wait_recv(conn, timeout_ms, &buf, &len);
        if (rv != 0)
                return errno_from_nng(rv);
        struct dsv_ipc_msg *msgs;
        size_t n;
        int r = dsv_ipc_msgs_decode(buf, len, &msgs, &n, err, err_size);
        nng_free(buf, len);
        if (r < 0)
                return r;
        atomic_store(&conn->peer_minor, msgs[0].minor);
        *ret = msgs[0];
        if (n == 1) {
                free(msgs);
                return 0;
        }
        pthread_mutex_lock(&conn->rx_mu);
        drop_pending(conn); /* empty unless two threads receive at once */
        conn->pending = msgs;
        conn->n_pending = n;
        conn->pending_at = 1;
        pthread_mutex_unlock(&conn->rx_mu);
        return 0;
}

int dsv_ipc_peers(const struct dsv_ipc_conn *conn) {
        return atomic_load(&((struct dsv_ipc_conn *)conn)->peers);
}

int dsv_ipc_rejected_peers(const struct dsv_ipc_conn *conn) {
        return atomic_load(&((struct dsv_ipc_conn *)conn)->rejected);
}
