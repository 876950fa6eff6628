/* test-supervisor-stub-worker — a test double for dsvisor-worker that keeps the worker's
 * command line and process contract (worker/README.md) so the supervisor's lifecycle can
 * be tested without the engine: it maps --model-fd PROT_READ, MAP_SHARED and reads every
 * page (so PSS shows whether the weights are shared), dies with its parent
 * (PR_SET_PDEATHSIG), answers `health` (loading for --load-ms, then ready; draining after
 * SIGTERM) and `stats`, and answers each `request` with max_tokens token events (token
 * ids 1, 2, 3..., text "t") at --delay-ms each, then `final` "length". SIGTERM: new
 * requests get shutting_down, in-flight ones finish, then exit 0.
 * Other worker options (--threads, --cpus, --n-ctx, ...) are accepted; --cpus pins the
 * process to the first CPU listed (it has one compute thread). */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dsv_ipc.h"

/* Generations it runs at once, all of them every step; reported as its max_batch, as the
 * worker reports its own, so admission knows when its batch is full. */
#define STUB_MAX_BATCH 256

static volatile sig_atomic_t drain;
static void on_term(int sig) {
        (void)sig;
        drain = 1;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct gen {
        uint64_t id;
        int sent, max;
        int64_t next_ms;
};

int main(int argc, char **argv) {
        const char *url = NULL;
        int model_fd = -1, delay_ms = 5, load_ms = 200;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (!strcmp(argv[i], "--listen"))
                        url = argv[i + 1];
                else if (!strcmp(argv[i], "--model-fd"))
                        model_fd = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--delay-ms"))
                        delay_ms = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--load-ms"))
                        load_ms = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--cpus")) {
                        cpu_set_t set;
                        CPU_ZERO(&set);
                        CPU_SET(atoi(argv[i + 1]), &set);
                        sched_setaffinity(0, sizeof set, &set);
                }
        }
        if (!url || model_fd < 0) {
                fprintf(stderr, "stub-worker: need --listen and --model-fd\n");
                return 2;
        }
        const char *pp = getenv("DSV_PARENT_PID");
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (pp && atoi(pp) != getppid())
                return 1;
        struct sigaction sa = {.sa_handler = on_term};
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);

        struct stat st;
        if (fstat(model_fd, &st) < 0 || st.st_size == 0) {
                fprintf(stderr, "stub-worker: bad --model-fd: %m\n");
                return 1;
        }
        const volatile unsigned char *w = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, model_fd, 0);
        if (w == MAP_FAILED) {
                fprintf(stderr, "stub-worker: mmap: %m\n");
                return 1;
        }
        unsigned sum = 0;
        for (off_t o = 0; o < st.st_size; o += 4096)
                sum += w[o];

        struct dsv_ipc_conn *c;
        int r = dsv_ipc_listen(url, &c);
        if (r < 0) {
                fprintf(stderr, "stub-worker: listen '%s': %s\n", url, strerror(-r));
                return 1;
        }
        int64_t t0 = now_ms();
        uint64_t boot_id = dsv_ipc_new_boot_id();
        struct gen gens[STUB_MAX_BATCH];
        int n_gens = 0;
        for (;;) {
                struct dsv_ipc_msg m, out;
                bool loading = now_ms() - t0 < load_ms;
                if (drain && n_gens == 0)
                        break;
                r = dsv_ipc_recv(c, &m, n_gens ? 1 : 20, NULL, 0);
                if (r == 0) {
                        memset(&out, 0, sizeof out);
                        if (m.type == DSV_IPC_HEALTH) {
                                out.type = DSV_IPC_HEALTH_REPLY;
                                out.u.health.seq = m.u.probe.seq;
                                out.u.health.state = drain ? "draining" : loading ? "loading" : "ready";
                                out.u.health.uptime_s = (double)(now_ms() - t0) / 1000.0;
                                out.u.health.boot_id = boot_id;
                                dsv_ipc_send(c, &out);
                        } else if (m.type == DSV_IPC_STATS) {
                                out.type = DSV_IPC_STATS_REPLY;
                                out.u.stats.seq = m.u.probe.seq;
                                out.u.stats.running = n_gens;
                                out.u.stats.max_batch = STUB_MAX_BATCH;
                                dsv_ipc_send(c, &out);
                        } else if (m.type == DSV_IPC_REQUEST) {
                                if (drain || loading || n_gens == STUB_MAX_BATCH) {
                                        out.type = DSV_IPC_ERROR;
                                        out.u.error.id = m.u.request.id;
                                        out.u.error.code = drain ? DSV_IPC_ERR_SHUTTING_DOWN : DSV_IPC_ERR_OVERLOADED;
                                        out.u.error.message = "stub-worker: not now";
                                        dsv_ipc_send(c, &out);
                                } else {
                                        gens[n_gens++] = (struct gen){.id = m.u.request.id,
                                                                      .max = m.u.request.max_tokens,
                                                                      .next_ms = now_ms() + delay_ms};
                                }
                        } else if (m.type == DSV_IPC_CANCEL) {
                                for (int i = 0; i < n_gens; i++)
                                        if (gens[i].id == m.u.cancel_id)
                                                gens[i].max = gens[i].sent;
                        }
                        dsv_ipc_msg_done(&m);
                }
                for (int i = 0; i < n_gens; i++) {
                        struct gen *g = &gens[i];
                        if (now_ms() < g->next_ms)
                                continue;
                        memset(&out, 0, sizeof out);
                        if (g->sent < g->max) {
                                out.type = DSV_IPC_TOKEN;
                                out.u.token.id = g->id;
                                out.u.token.token = ++g->sent;
                                out.u.token.text = "t";
                                dsv_ipc_send(c, &out);
                                g->next_ms = now_ms() + delay_ms;
                                continue;
                        }
                        out.type = DSV_IPC_FINAL;
                        out.u.final.id = g->id;
                        out.u.final.finish_reason = "length";
                        out.u.final.prompt_tokens = 1;
                        out.u.final.completion_tokens = g->sent;
                        dsv_ipc_send(c, &out);
                        gens[i--] = gens[--n_gens];
                }
        }
        dsv_ipc_close_linger(c, DSV_IPC_LINGER_MS); /* as the worker: drained answers reach the gateway */
        return sum == 0xffffffffu; /* keeps the page reads */
}
