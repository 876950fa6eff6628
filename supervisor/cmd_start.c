/* dsvisor start: runs N worker instances and the HTTP gateway in the
 * foreground, systemd-style.
 *
 *   config    the command line and --config JSON (config.c);
 *   setup     placement (policy), RT preflight, the model resolved (served_model.c), one
 *             sealed weight memfd per NUMA node (weights.c), the cgroup host below our
 *             own group (the platform), the gateway (gateway_setup.c), the control socket (control.c);
 *   loop      one poll() over a signalfd, the control socket and every worker's pidfd:
 *             an exit is seen at once and the instance reaps, backs off and restarts
 *             itself (instance.c); readiness comes from the gateway's health polling;
 *             WATCHDOG=1 and STATUS= each tick (sup_notify.c); status (status.c) and metrics
 *             (sup_metrics.c) are rendered from the state the loop keeps;
 *   SIGHUP    re-reads --config and applies what changed (reload.c);
 *   SIGTERM   stop: STOPPING=1, instances leave routing (new requests: 503), workers get
 *             SIGTERM and drain for --grace-ms, then the cgroups are killed and removed.
 *
 * Only the main thread spawns workers: PR_SET_PDEATHSIG in the worker fires when the
 * thread that forked it exits, so workers die with the supervisor. With --rt-priority the
 * workers' compute threads run SCHED_FIFO, and the gateway's HTTP threads one priority
 * above them on the housekeeping CPUs (gateway_setup.c); every other thread of the
 * supervisor runs SCHED_OTHER. */
#include <errno.h>
#include <libgen.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "dse.h"
#include "dsv_gateway.h"
#include "dsv_ipc.h"
#include "dsv_platform.h"
#include "sup.h"

_Static_assert(SUP_MAX_INSTANCES == DSV_GATEWAY_MAX_INSTANCES, "one instance limit for supervisor and gateway");

#define ERESTART_RESTARTBLOCK 516 /* the kernel's include/linux/errno.h; not in userspace headers */

#define TICK_MS 100
#define STARTING_TICK_MS 5
/* How often freed heap memory goes back to the kernel (malloc_trim, see tick()). */
#define TRIM_MS 10000

/* ---- setup -------------------------------------------------------------------------- */

static int setup_paths(struct sup *s) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n < 0)
                return -errno;
        exe[n] = 0;
        snprintf(s->exe_dir, sizeof s->exe_dir, "%s", dirname(exe));
        int r = sup_worker_path(&s->cfg, s->exe_dir, s->worker_path, sizeof s->worker_path);
        if (r < 0)
                return r;
        if (s->cfg.runtime_dir[0]) {
                if (mkdir(s->cfg.runtime_dir, 0700) < 0 && errno != EEXIST)
                        return -errno;
                setenv("DSV_RUNTIME_DIR", s->cfg.runtime_dir, 1);
        }
        if ((r = dsv_ipc_runtime_dir(s->runtime_dir, sizeof s->runtime_dir)) < 0) {
                sup_log(3, "Failed to set up the private runtime directory: %s", strerror(-r));
                return r;
        }
        if ((r = sup_control_path(s->runtime_dir, s->control_path, sizeof s->control_path)) < 0)
                return r;
        s->control_fd = sup_control_listen(s->control_path);
        if (s->control_fd == -EADDRINUSE) {
                sup_log(3, "Another dsvisor is running with runtime directory '%s'", s->runtime_dir);
                return -EADDRINUSE;
        }
        if (s->control_fd < 0) {
                sup_log(3, "Failed to listen on '%s': %s", s->control_path, strerror(-s->control_fd));
                return s->control_fd;
        }
        return 0;
}

static int setup_signals(struct sup *s) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        /* Blocked before the gateway starts its threads, which inherit the mask. */
        if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
                return -EINVAL;
        signal(SIGPIPE, SIG_IGN);
        s->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        return s->sig_fd < 0 ? -errno : 0;
}

static int load_weights(struct sup *s) {
        int nodes[SUP_MAX_INSTANCES];
        for (int i = 0; i < s->n; i++)
                nodes[i] = s->inst[i].node_os;
        int r = sup_weight_set_load(&s->weights, &s->model, nodes, s->n, s->cfg.hugepages);
        for (int i = 0; r == 0 && i < s->n; i++)
                s->inst[i].weights = sup_weight_set_find(&s->weights, s->inst[i].node_os);
        return r;
}

/* A limit the user asked for that is not in effect stops the start, unless
 * --allow-unenforced (then the instance's cgroup report says so). */
static int check_enforced(const struct sup *s, const struct sup_instance *in) {
        char err[512];
        int r = sup_config_check_enforced(&s->cfg, s->env.cg_host ? &in->cg_report : NULL, s->cg_note, err,
                                          sizeof err);
        if (r < 0)
                sup_log(3, "Instance %s: %s", in->name, err);
        return r;
}

/* Each instance's cgroup, then its worker. RT group scheduling: a new v1 cpu group gets
 * rt_runtime 0 and FIFO is EPERM in it; our own runtime is shared between them. */
static int start_instances(struct sup *s) {
        uint64_t rt_share = s->cfg.rt_priority > 0 ? sup_cgroup_rt_share_us(s->env.cg_host, s->n) : 0;
        for (int i = 0; i < s->n; i++) {
                int r = sup_instance_create_cgroup(&s->inst[i], rt_share);
                if (r < 0 || (r = check_enforced(s, &s->inst[i])) < 0 || (r = sup_instance_spawn(&s->inst[i])) < 0)
                        return r;
        }
        return 0;
}

static void teardown(struct sup *s) {
        dsv_gateway_free(s->env.gw);
        s->env.gw = NULL;
        sup_tokenizer_done(&s->tokenizer);
        for (int i = 0; i < s->n; i++)
                sup_instance_done(&s->inst[i]);
        sup_cgroup_host_done(s->env.cg_host);
        s->env.cg_host = NULL;
        sup_weight_set_done(&s->weights);
        if (s->control_fd >= 0) {
                close(s->control_fd);
                unlink(s->control_path);
        }
        if (s->sig_fd >= 0)
                close(s->sig_fd);
        sup_metrics_done(&s->metrics);
}

/* ---- the loop's reactions ----------------------------------------------------------- */

static void begin_stop(struct sup *s, const char *why) {
        if (s->stopping)
                return;
        s->stopping = true;
        sup_log(6, "Stopping (%s): draining for up to %d ms", why, s->cfg.grace_ms);
        sup_notify_stopping();
        for (int i = 0; i < s->n; i++)
                sup_instance_drain(&s->inst[i]);
        s->stop_kill_at_ms = dsv_clock_now_ms() + s->cfg.grace_ms + 5000;
}

static void control_accept(struct sup *s) {
        int fd = accept4(s->control_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return;
        char cmd[32];
        int r = sup_control_read_cmd(fd, 1000, cmd, sizeof cmd);
        if (r < 0) {
                sup_control_write(fd, "{\"error\":\"bad request\"}");
        } else if (strcmp(cmd, "status") == 0) {
                char *text = sup_status_json(s);
                sup_control_write(fd, text ? text : "{\"error\":\"out of memory\"}");
                free(text);
        } else if (strcmp(cmd, "stop") == 0) {
                sup_control_write(fd, "{\"ok\":true}");
                begin_stop(s, "stop requested on the control socket");
        } else {
                sup_control_write(fd, "{\"error\":\"unknown command\"}");
        }
        close(fd);
}

/* The loop sleeps TICK_MS, less when something is due sooner: a restart whose backoff
 * ends, or an instance that is starting (its readiness is the gateway's state, which
 * gives no wake-up, so it is checked every STARTING_TICK_MS: a restart is seen ready
 * within 5 ms, not within a tick). */
static int poll_timeout_ms(const struct sup *s) {
        int64_t now = dsv_clock_now_ms(), t = TICK_MS;
        for (int i = 0; i < s->n; i++) {
                const struct sup_instance *in = &s->inst[i];
                if (in->state == SUP_STATE_STARTING && t > STARTING_TICK_MS)
                        t = STARTING_TICK_MS;
                else if (in->state == SUP_STATE_BACKOFF && in->restart_at_ms - now < t)
                        t = in->restart_at_ms > now ? in->restart_at_ms - now : 0;
        }
        return (int)t;
}

static void tick(struct sup *s) {
        int64_t now = dsv_clock_now_ms();
        bool became_ready = false;
        for (int i = 0; i < s->n && !s->stopping; i++)
                became_ready |= sup_instance_tick(&s->inst[i], now, s->roll.current == i);
        /* /metrics shows a new worker's scheduling policy at once, not at the next 1 s
         * refresh: readiness now comes within milliseconds of the worker's start. */
        if (became_ready)
                sup_metrics_refresh(&s->metrics, s);
        if (!s->stopping)
                sup_roll_step(&s->roll, s->inst, s->n);
        if (s->stopping && now >= s->stop_kill_at_ms)
                for (int i = 0; i < s->n; i++)
                        if (s->inst[i].pidfd >= 0) {
                                sup_log(4, "Instance %s: still running after the grace period, killing it",
                                        s->inst[i].name);
                                sup_instance_kill(&s->inst[i]);
                        }
        int ready = sup_instances_in_state(s->inst, s->n, SUP_STATE_READY);
        int failed = sup_instances_in_state(s->inst, s->n, SUP_STATE_FAILED);
        if (!s->stopping && s->n > 0 && failed == s->n) {
                s->all_failed = true;
                begin_stop(s, "every instance failed");
        }
        sup_notify_tick(s, now, ready, failed, TICK_MS);
        if (now - s->last_perf_ms >= 1000) {
                s->last_perf_ms = now;
                for (int i = 0; i < s->n; i++)
                        sup_instance_perf_refresh(&s->inst[i]);
                sup_drift_refresh(s, now);
                sup_metrics_refresh(&s->metrics, s);
        }
        /* Freed heap pages stay resident: glibc returns memory only from the heap's top
         * and only past M_TRIM_THRESHOLD, so the holes left by finished connections
         * (their threads, MHD pools and request buffers) accumulate. malloc_trim(0)
         * also releases the free whole pages inside the heap, a walk over a few MB every
         * 10 s, on the main thread and off the request path. With the single arena set in
         * dsv_cmd_start() the supervisor's RSS then follows its open connections. */
        if (now - s->last_trim_ms >= TRIM_MS) {
                s->last_trim_ms = now;
                malloc_trim(0);
        }
}

static bool all_stopped(const struct sup *s) {
        for (int i = 0; i < s->n; i++)
                if (s->inst[i].pidfd >= 0)
                        return false;
        return true;
}

/* One poll() over the signalfd, the control socket and every worker's pidfd, then a
 * tick; until stopped and every worker is gone. */
static int run_loop(struct sup *s) {
        int r = 0;
        while (!(s->stopping && all_stopped(s))) {
                struct pollfd pfd[2 + SUP_MAX_INSTANCES];
                int map[2 + SUP_MAX_INSTANCES];
                int np = 0;
                pfd[np++] = (struct pollfd){.fd = s->sig_fd, .events = POLLIN};
                pfd[np++] = (struct pollfd){.fd = s->control_fd, .events = POLLIN};
                for (int i = 0; i < s->n; i++)
                        if (s->inst[i].pidfd >= 0) {
                                map[np] = i;
                                pfd[np++] = (struct pollfd){.fd = s->inst[i].pidfd, .events = POLLIN};
                        }
                int n = poll(pfd, (nfds_t)np, poll_timeout_ms(s));
                /* A debugger attaching makes poll return the kernel's internal
                 * ERESTART_RESTARTBLOCK rather than EINTR: both mean "poll again". */
                if (n < 0 && errno != EINTR && errno != ERESTART_RESTARTBLOCK) {
                        r = -errno;
                        sup_log(3, "poll failed: %s", strerror(-r));
                        break;
                }
                for (int k = 2; n > 0 && k < np; k++)
                        if (pfd[k].revents)
                                sup_instance_reap(&s->inst[map[k]], s->stopping, s->roll.current == map[k]);
                if (n > 0 && (pfd[0].revents & POLLIN)) {
                        struct signalfd_siginfo si;
                        while (read(s->sig_fd, &si, sizeof si) == sizeof si) {
                                if (si.ssi_signo == SIGHUP)
                                        sup_reload(s);
                                else
                                        begin_stop(s, si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
                        }
                }
                if (n > 0 && (pfd[1].revents & POLLIN))
                        control_accept(s);
                tick(s);
                r = 0;
        }
        return r == 0 && s->all_failed ? -ELOOP : r;
}

/* --chat-template is compiled here once, so that a template the workers could not use
 * stops the start with its error instead of failing every chat request. */
static int check_chat_template(const struct sup_config *cfg) {
        if (!cfg->chat_template[0])
                return 0;
        struct dse_chat_template *t = NULL;
        struct dse_diag diag = {{0}};
        int r = dse_chat_template_load(cfg->chat_template, &t, &diag);
        dse_chat_template_free(t);
        if (r < 0)
                sup_log(3, "--chat-template: %s", diag.msg[0] ? diag.msg : strerror(-r));
        return r;
}

static int setup(struct sup *s) {
        int r;
        if ((r = check_chat_template(&s->cfg)) < 0)
                return r;
        if ((r = setup_signals(s)) < 0 || (r = setup_paths(s)) < 0 || (r = sup_place_instances(&s->env, s->runtime_dir, s->inst, &s->n, &s->n_free_cpus)) < 0)
                return r;
        if (s->cfg.rt_priority > 0) {
                char why[256];
                if ((r = sup_rt_preflight(NULL, s->cfg.rt_priority, s->n_free_cpus, why, sizeof why)) < 0) {
                        sup_log(3, "--rt-priority %d refused: %s", s->cfg.rt_priority, why);
                        return r;
                }
                sup_log(6, "Compute threads will run SCHED_FIFO %d on instance CPUs only; %d CPU%s stay free of them "
                           "for the supervisor, the HTTP threads and the kernel (note: cpu.max and cpu.weight do not "
                           "bound FIFO threads)",
                        s->cfg.rt_priority, s->n_free_cpus, s->n_free_cpus == 1 ? "" : "s");
        }
        if ((r = sup_model_resolve(&s->cfg, s->exe_dir, &s->model)) < 0 ||
            (r = sup_model_check_speculative(&s->cfg, &s->model)) < 0 ||
            (r = sup_chat_format_detect(&s->cfg, &s->model, &s->chat)) < 0 || (r = load_weights(s)) < 0)
                return r;
        if ((r = sup_cgroup_host_setup(&s->cfg, s->n, &s->env.cg_host, s->cg_note, sizeof s->cg_note)) < 0 ||
            (r = sup_gateway_setup(s)) < 0 || (r = sup_tokenizer_setup(s)) < 0)
                return r;
        sup_notify_setup(s);
        return start_instances(s);
}

int dsv_cmd_start(int argc, char **argv) {
        /* Large (the instances): on the heap. */
        struct sup *s = calloc(1, sizeof *s);
        if (!s) {
                sup_log(3, "Out of memory");
                return 1;
        }
        char err[512];
        s->control_fd = s->sig_fd = -1;
        s->roll.current = -1;
        s->started_ms = dsv_clock_now_ms();
        s->env.cfg = &s->cfg;
        s->env.worker_path = s->worker_path;
        sup_metrics_init(&s->metrics);
        /* One malloc arena for the whole process, set before any thread exists. The
         * gateway runs a thread per HTTP connection and glibc would bind each new one
         * to one of up to 8 arenas per CPU; every arena keeps its own high-water mark of
         * freed memory, so RSS ratchets up as connections come and go (soak: +1.8 MB/h
         * with a flat live heap; malloc_stats: 14 arenas, 3.1 MB held for 1.3 MB in
         * use, 13 arenas under 25% used). A request costs the gateway a few small
         * allocations, so one arena's lock is not a bottleneck at the token rates a
         * CPU host serves. */
        mallopt(M_ARENA_MAX, 1);
        int r = sup_config_parse(argc, argv, &s->cfg, err, sizeof err);
        if (r != 0) {
                if (r < 0)
                        fprintf(stderr, "dsvisor start: %s\n", err);
                sup_start_usage(r == 1 ? stdout : stderr);
                sup_metrics_done(&s->metrics);
                free(s);
                return r == 1 ? 0 : 2;
        }
        enum dsv_log_format log_format = DSV_LOG_FORMAT_TEXT;
        if (s->cfg.log_format[0])
                dsv_log_format_parse(s->cfg.log_format, &log_format); /* checked by sup_config_parse */
        sup_log_set_format(log_format);
        char pidbuf[16];
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)getpid());
        setenv("DSV_PARENT_PID", pidbuf, 1); /* the worker checks it after PR_SET_PDEATHSIG */

        r = setup(s);
        if (r == 0)
                r = run_loop(s);
        teardown(s);
        if (r == 0)
                sup_log(6, "Stopped: no worker and no cgroup left");
        free(s);
        return r < 0 ? 1 : 0;
}
