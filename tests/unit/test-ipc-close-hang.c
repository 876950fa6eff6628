/* test-ipc-close-hang — dsv_ipc_close returns even when nng 1.5.2's nng_close never does.
 *
 * Its own executable because it drives nng into that bug on purpose: a socket whose close
 * nng never finishes keeps the messages queued in its pipes, and nng's reaper, stuck, never
 * frees them. That is the documented cost of an abandoned close (ipc/src/transport.c), so
 * LeakSanitizer is told to ignore allocations made inside libnng in this executable only.
 * Leaks of our own code are still reported, and test-ipc-transport keeps the full check
 * for every other use of the transport. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsv_ipc.h"
#include "t.h"

/* Read by LeakSanitizer at start-up in sanitized builds; an unused function otherwise. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
        return "leak:libnng.so\n";
}

/* nng 1.5.2's nng_close can hang for good (transport.c): dsv_ipc_close must return anyway.
 * The pattern that hangs it here within a few hundred cycles is the gateway's link
 * against a live worker: a receiver thread polling health every few ms while the worker
 * answers, stopped, then the socket closed. Without the guard this test does not end
 * (ctest's timeout fails it); with it every close returns, and the ones nng left
 * unfinished are counted. Up to 250 cycles, or 5 more after the first hung close (each
 * later close then hangs too: nng's reaper is stuck). */
struct echo_worker {
        struct dsv_ipc_conn *conn;
        atomic_bool stop;
};

static void *echo_worker_main(void *arg) {
        struct echo_worker *w = arg;
        while (!atomic_load(&w->stop)) {
                struct dsv_ipc_msg m;
                if (dsv_ipc_recv(w->conn, &m, 20, NULL, 0) != 0)
                        continue;
                struct dsv_ipc_msg rep = {.type = m.type == DSV_IPC_HEALTH ? DSV_IPC_HEALTH_REPLY : DSV_IPC_STATS_REPLY};
                if (m.type == DSV_IPC_HEALTH) {
                        rep.u.health.seq = m.u.probe.seq;
                        rep.u.health.state = "ready";
                } else {
                        rep.u.stats.seq = m.u.probe.seq;
                }
                (void)dsv_ipc_send(w->conn, &rep);
                dsv_ipc_msg_done(&m);
        }
        return NULL;
}

struct poller {
        struct dsv_ipc_conn *conn;
        atomic_bool stop;
};

static void *poller_main(void *arg) {
        struct poller *p = arg;
        for (uint64_t seq = 1; !atomic_load(&p->stop); seq++) {
                struct dsv_ipc_msg m;
                if (dsv_ipc_recv(p->conn, &m, 2, NULL, 0) == 0)
                        dsv_ipc_msg_done(&m);
                if (dsv_ipc_peers(p->conn) > 0) {
                        struct dsv_ipc_msg probe = {.type = DSV_IPC_HEALTH, .u.probe.seq = seq};
                        (void)dsv_ipc_send(p->conn, &probe);
                        probe.type = DSV_IPC_STATS;
                        (void)dsv_ipc_send(p->conn, &probe);
                }
        }
        return NULL;
}

static double mono_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void dial_poll_close_cycles(void) {
        char dir[] = "/tmp/dsv-ipc-XXXXXX";
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        char url[320];
        snprintf(url, sizeof url, "ipc://%s/w.sock", dir);
        struct echo_worker w = {0};
        ASSERT_OK(dsv_ipc_listen(url, &w.conn));
        pthread_t wt;
        ASSERT_OK(-pthread_create(&wt, NULL, echo_worker_main, &w));
        unsigned before = dsv_ipc_abandoned_closes();
        int cycles = 0, after_hang = 0;
        double worst = 0;
        srand(7);
        for (; cycles < 250 && after_hang < 5; cycles++) {
                struct poller p = {0};
                ASSERT_OK(dsv_ipc_dial(url, &p.conn));
                pthread_t pt;
                ASSERT_OK(-pthread_create(&pt, NULL, poller_main, &p));
                usleep((useconds_t)(5000 + rand() % 20000));
                atomic_store(&p.stop, true);
                pthread_join(pt, NULL);
                double t0 = mono_s();
                dsv_ipc_close(p.conn);
                double dt = mono_s() - t0;
                worst = dt > worst ? dt : worst;
                ASSERT_TRUE(dt < 5.0); /* returned at all: the guard waits about 0.5 s */
                after_hang += dsv_ipc_abandoned_closes() > before;
        }
        fprintf(stderr, "  %d dial/poll/close cycles, %u closes left unfinished by nng, slowest close %.3f s\n",
                cycles, dsv_ipc_abandoned_closes() - before, worst);
        atomic_store(&w.stop, true);
        pthread_join(wt, NULL);
        dsv_ipc_close(w.conn);
        char path[340];
        snprintf(path, sizeof path, "%s/w.sock", dir);
        unlink(path);
        rmdir(dir);
}

/* nng 1.5.2 does not always hang on this path: now and then the same race trips nng's
 * own assertion instead ("panic: ... aio.c ... a_cancel_fn == NULL"), which aborts the
 * process from inside nng, where no guard of ours can act. So the cycles run in a child
 * process; a child that nng's panic ended runs again (at most 5 times), and any other
 * end of the child is the verdict. */
static int run_cycles_in_child(const char *log_path, int *ret_status) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int fd = open(log_path, O_WRONLY | O_TRUNC); /* on fd 2, stderr stays unbuffered */
                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(3);
                close(fd);
                dial_poll_close_cycles();
                exit(t_failed_current ? 1 : 0); /* exit, not _exit: LeakSanitizer runs at exit */
        }
        return waitpid(pid, ret_status, 0) == pid ? 0 : -errno;
}

TEST(close_returns_when_nng_close_hangs) {
        char log_path[] = "/tmp/dsv-close-hang-XXXXXX";
        int fd = mkstemp(log_path);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        int status = 0, nng_panics = 0;
        for (int attempt = 0; attempt < 5; attempt++) {
                ASSERT_OK(run_cycles_in_child(log_path, &status));
                char *log = slurp(log_path, NULL);
                ASSERT_TRUE(log != NULL);
                fputs(log, stderr);
                int nng_panic = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(log, "panic: ") &&
                                strstr(log, "nanomsg/nng");
                free(log);
                if (!nng_panic)
                        break;
                nng_panics++;
                fprintf(stderr, "  nng panicked in its own code (%d so far); the cycles run again\n", nng_panics);
        }
        unlink(log_path);
        ASSERT_TRUE(nng_panics < 5);
        if (WIFSIGNALED(status))
                T_FAIL("the cycles' process ended by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        ASSERT_EQ(WEXITSTATUS(status), 0);
}
