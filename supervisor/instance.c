/* instance.c — one worker instance and its lifecycle, driven by cmd_start.c's poll loop
 * on the main thread (PR_SET_PDEATHSIG in the worker fires when the thread that forked
 * it exits, so only that thread spawns):
 *
 *   spawn      into its cgroup, on its CPUs, with the node's weight memfd: STARTING;
 *   ready      the gateway's health polling says up: READY, then SCHED_FIFO for its
 *              compute threads (--rt-priority) and its perf counters;
 *   health     not ready after STARTUP_TIMEOUT_MS, or READY without a healthy answer for
 *              UNHEALTHY_KILL_MS: killed (and reaped as a crash);
 *   reap       its pidfd says it exited: out of routing, then BACKOFF (restart after the
 *              backoff's delay), FAILED (crash loop), or STOPPED while stopping;
 *   drain      out of routing and SIGTERM, for stop and for a rolling restart;
 *   roll       a reload restarts the instances one at a time: the next drains only when
 *              the previous is ready again, and one that drained starts again at once. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv_gateway.h"
#include "dsv_policy.h"
#include "sup.h"

#define STARTUP_TIMEOUT_MS 600000 /* a large model loads for minutes */
#define UNHEALTHY_KILL_MS 30000   /* ready worker not answering health this long: killed */

const char *sup_state_to_string(enum sup_state s) {
        static const char *const names[SUP_STATE_COUNT] = {
                [SUP_STATE_STARTING] = "starting", [SUP_STATE_READY] = "ready",
                [SUP_STATE_DRAINING] = "draining", [SUP_STATE_BACKOFF] = "backoff",
                [SUP_STATE_FAILED] = "failed",     [SUP_STATE_STOPPED] = "stopped",
        };
        return (unsigned)s < SUP_STATE_COUNT ? names[s] : "invalid";
}

static void send_signal(const struct sup_instance *in, int sig) {
        if (in->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, in->pidfd, sig, NULL, 0);
}

static void set_routable(const struct sup_instance *in, bool ready) {
        if (in->env->gw)
                dsv_gateway_instance_set_ready(in->env->gw, in->gw_id, ready);
}

int sup_instance_init(struct sup_instance *in, const struct sup_instance_env *env, int index, int node_os,
                      int n_threads, const int *cpus, int n_cpus, const char *runtime_dir) {
        const struct sup_config *cfg = env->cfg;
        memset(in, 0, sizeof *in);
        in->env = env;
        in->index = index;
        snprintf(in->name, sizeof in->name, "%d", index);
        in->node_os = node_os;
        in->n_threads = n_threads;
        in->pidfd = -1;
        in->gw_id = -1;
        in->ready_ms = -1;
        in->exited_ms = -1;
        in->last_exit_status = -1;
        in->ctxsw_invol_per_s = in->migrations_per_s = -1;
        snprintf(in->sched, sizeof in->sched, "SCHED_OTHER");
        snprintf(in->cg_path, sizeof in->cg_path, "(none)");
        int r = dsv_policy_cpulist_format(cpus, (size_t)n_cpus, in->cpus, sizeof in->cpus);
        if (r < 0)
                return r;
        CPU_ZERO(&in->cpu_set);
        for (int c = 0; c < n_cpus; c++)
                if (cpus[c] < CPU_SETSIZE)
                        CPU_SET(cpus[c], &in->cpu_set);
        if (strlen(runtime_dir) > 80) { /* sun_path holds 108 bytes */
                sup_log(3, "Runtime directory '%s' is too long for socket paths", runtime_dir);
                return -ENAMETOOLONG;
        }
        snprintf(in->url, sizeof in->url, "ipc://%.80s/worker-%d.sock", runtime_dir, index);
        sup_backoff_init(&in->backoff, cfg->restart_backoff_min_ms, cfg->restart_backoff_max_ms, cfg->restart_limit,
                         cfg->restart_window_ms);
        return 0;
}

int sup_worker_path(const struct sup_config *cfg, const char *exe_dir, char *buf, size_t size) {
        if (cfg->worker[0])
                snprintf(buf, size, "%s", cfg->worker);
        else
                snprintf(buf, size, "%.4000s/dsvisor-worker", exe_dir);
        if (access(buf, X_OK) < 0) {
                int r = -errno;
                sup_log(3, "Worker binary '%s' is not executable: %s (set --worker)", buf, strerror(-r));
                return r;
        }
        return 0;
}

int sup_instance_create_cgroup(struct sup_instance *in, uint64_t rt_runtime_us) {
        const struct sup_config *cfg = in->env->cfg;
        in->rt_runtime_us = rt_runtime_us;
        if (!in->env->cg_host)
                return 0;
        char mems[16];
        snprintf(mems, sizeof mems, "%d", in->node_os);
        struct dsv_cgroup_limits lim = {.cpus = in->cpus, .mems = mems, .memory_max_bytes = cfg->memory_max_bytes,
                                        .memory_oom_group = true, .cpu_rt_runtime_us = rt_runtime_us};
        char cgname[64];
        int r = dsv_cgroup_instance_name(getpid(), in->index, cgname, sizeof cgname);
        if (r == 0)
                r = dsv_cgroup_instance_new(in->env->cg_host, cgname, &lim, &in->cg_report, &in->cg);
        if (r < 0) {
                sup_log(3, "Failed to create cgroup '%s' for instance %s: %s", cgname, in->name, strerror(-r));
                return r;
        }
        dsv_cgroup_instance_describe(in->cg, in->cg_path, sizeof in->cg_path);
        char rep[2048];
        dsv_cgroup_report_format(&in->cg_report, rep, sizeof rep);
        int missing = dsv_cgroup_report_n_missing(&in->cg_report);
        sup_log(missing ? 4 : 6, "Instance %s cgroup %s: %d limit%s not in effect", in->name, in->cg_path, missing,
                missing == 1 ? "" : "s");
        for (char *save = NULL, *line = strtok_r(rep, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                sup_log(missing ? 4 : 6, "Instance %s: %s", in->name, line);
        return 0;
}

int sup_instance_spawn(struct sup_instance *in) {
        const struct sup_config *cfg = in->env->cfg;
        const char *worker = in->env->worker_path;
        int wfd = in->weights->img.fd;
        char fdarg[16], threads[16], grace[16], nctx[16], batch[16], kvmem[16], kmin[16], kmax[16], kvdisk[16];
        const char *argv[40];
        int a = 0;
        snprintf(fdarg, sizeof fdarg, "%d", wfd);
        snprintf(threads, sizeof threads, "%d", in->n_threads);
        snprintf(grace, sizeof grace, "%d", cfg->grace_ms);
        argv[a++] = worker;
        argv[a++] = "--model-fd";
        argv[a++] = fdarg;
        argv[a++] = "--listen";
        argv[a++] = in->url;
        argv[a++] = "--threads";
        argv[a++] = threads;
        argv[a++] = "--cpus";
        argv[a++] = in->cpus;
        argv[a++] = "--grace-ms";
        argv[a++] = grace;
        argv[a++] = "--instance";
        argv[a++] = in->name;
        if (cfg->n_ctx > 0) {
                snprintf(nctx, sizeof nctx, "%d", cfg->n_ctx);
                argv[a++] = "--n-ctx";
                argv[a++] = nctx;
        }
        if (cfg->max_batch > 0) {
                snprintf(batch, sizeof batch, "%d", cfg->max_batch);
                argv[a++] = "--max-batch";
                argv[a++] = batch;
        }
        if (cfg->chat_template[0]) {
                argv[a++] = "--chat-template";
                argv[a++] = cfg->chat_template;
        }
        if (cfg->kv_mem_mib > 0) {
                snprintf(kvmem, sizeof kvmem, "%d", cfg->kv_mem_mib);
                argv[a++] = "--kv-mem-mib";
                argv[a++] = kvmem;
        }
        if (cfg->speculative[0]) {
                argv[a++] = "--speculative";
                argv[a++] = cfg->speculative;
        }
        if (cfg->draft_model[0]) {
                argv[a++] = "--draft-model";
                argv[a++] = cfg->draft_model;
        }
        if (cfg->spec_k_min > 0) {
                snprintf(kmin, sizeof kmin, "%d", cfg->spec_k_min);
                argv[a++] = "--spec-k-min";
                argv[a++] = kmin;
        }
        if (cfg->spec_k_max > 0) {
                snprintf(kmax, sizeof kmax, "%d", cfg->spec_k_max);
                argv[a++] = "--spec-k-max";
                argv[a++] = kmax;
        }
        if (cfg->kv_dtype[0]) {
                argv[a++] = "--kv-dtype";
                argv[a++] = cfg->kv_dtype;
        }
        if (cfg->kv_disk[0]) {
                snprintf(kvdisk, sizeof kvdisk, "%d", cfg->kv_disk_gib);
                argv[a++] = "--kv-disk";
                argv[a++] = cfg->kv_disk;
                argv[a++] = "--kv-disk-gib";
                argv[a++] = kvdisk;
        }
        if (sup_log_format() == DSV_LOG_FORMAT_JSON) {
                argv[a++] = "--log-format";
                argv[a++] = "json";
        }
        argv[a] = NULL;

        /* The memfd is inherited by this exec only: only this thread spawns. The child
         * also inherits this thread's affinity: the instance's CPUs, not the
         * housekeeping ones the supervisor keeps to (this matters without a cpuset). */
        int flags = fcntl(wfd, F_GETFD);
        fcntl(wfd, F_SETFD, flags & ~FD_CLOEXEC);
        cpu_set_t own;
        bool widened = sched_getaffinity(0, sizeof own, &own) == 0 &&
                       sched_setaffinity(0, sizeof in->cpu_set, &in->cpu_set) == 0;
        pid_t pid;
        int pidfd, r;
        if (in->cg)
                r = dsv_cgroup_instance_spawn(in->cg, worker, (char *const *)argv, NULL, &pid, &pidfd);
        else
                r = dsv_cgroup_spawn(-1, NULL, 0, worker, (char *const *)argv, NULL, &pid, &pidfd);
        if (widened)
                sched_setaffinity(0, sizeof own, &own);
        fcntl(wfd, F_SETFD, flags | FD_CLOEXEC);
        if (r < 0) {
                sup_log(3, "Failed to spawn worker '%s' for instance %s: %s", worker, in->name, strerror(-r));
                return r;
        }
        in->pid = pid;
        in->pidfd = pidfd;
        in->state = SUP_STATE_STARTING;
        in->started_ms = dsv_clock_now_ms();
        in->ready_ms = -1;
        in->rt_applied = false;
        snprintf(in->sched, sizeof in->sched, "SCHED_OTHER");
        in->weights_huge_bytes = in->weights->img.hugetlb ? in->weights->img.size_bytes : 0;
        set_routable(in, true); /* routable once its health says ready */
        sup_log(6, "Instance %s: worker pid %d on CPUs %s (node %d), %d thread%s", in->name, (int)pid, in->cpus,
                in->node_os, in->n_threads, in->n_threads == 1 ? "" : "s");
        return 0;
}

/* Compute threads: the worker's own threads — its main thread, which drives each
 * engine step, and the pool threads it pins to the CPUs of --cpus. */
static void apply_rt(struct sup_instance *in) {
        struct sup_rt_result res;
        if (sup_rt_apply_compute_threads(in->pid, &in->cpu_set, in->env->cfg->rt_priority, &res) < 0)
                return;
        if (res.rttime_err < 0)
                sup_log(4, "Instance %s: failed to set RLIMIT_RTTIME: %s, ignoring", in->name, strerror(-res.rttime_err));
        if (res.n_fifo > 0) {
                in->rt_applied = true;
                sup_thread_policy_format(res.sample_tid, in->sched, sizeof in->sched);
                sup_log(6, "Instance %s: %d compute thread%s run %s (SCHED_RESET_ON_FORK, RLIMIT_RTTIME %d s)",
                        in->name, res.n_fifo, res.n_fifo == 1 ? "" : "s", in->sched, SUP_RTTIME_LIMIT_US / 1000000);
        }
        if (res.first_err) {
                in->rt_fallbacks++;
                snprintf(in->sched, sizeof in->sched, res.n_fifo ? "mixed" : "SCHED_OTHER (fallback)");
                sup_log(4, "Instance %s: SCHED_FIFO refused (%s%s); %s compute threads stay SCHED_OTHER, ignoring",
                        in->name, strerror(-res.first_err),
                        res.first_err == -EPERM  ? ": RT group scheduling without cpu.rt_runtime_us in the group"
                        : res.first_err == -EDOM ? ": a thread may run outside the instance's CPUs"
                                                 : "",
                        res.n_fifo ? "some" : "its");
        }
}

static void on_ready(struct sup_instance *in, int64_t now) {
        in->state = SUP_STATE_READY;
        in->ready_ms = now;
        if (in->exited_ms >= 0) /* restart-to-ready, what bench/restart_bench.sh reports */
                sup_log(6, "Instance %s ready in %" PRId64 " ms (pid %d), %" PRId64 " ms after the previous worker exited",
                        in->name, now - in->started_ms, (int)in->pid, now - in->exited_ms);
        else
                sup_log(6, "Instance %s ready in %" PRId64 " ms (pid %d)", in->name, now - in->started_ms, (int)in->pid);
        if (in->env->cfg->rt_priority > 0)
                apply_rt(in);
        dsv_perfctr_free(in->perf);
        in->perf = NULL;
        in->perf_prev_valid = false;
        in->ctxsw_invol_per_s = in->migrations_per_s = -1;
        int r = dsv_perfctr_open_threads(in->pid, NULL, 0, &in->perf);
        if (r < 0)
                sup_log(4, "Instance %s: perf counters unavailable: %s, ignoring", in->name, strerror(-r));
}

bool sup_instance_reap(struct sup_instance *in, bool stopping, bool rolling) {
        siginfo_t si = {0};
        if (in->pidfd < 0 || waitid((idtype_t)P_PIDFD, (id_t)in->pidfd, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
                return false;
        int64_t now = dsv_clock_now_ms();
        in->exited_ms = now;
        close(in->pidfd);
        in->pidfd = -1;
        dsv_perfctr_free(in->perf);
        in->perf = NULL;
        in->last_exit_code = si.si_code;
        in->last_exit_status = si.si_status;
        set_routable(in, false);
        const char *how = si.si_code == CLD_EXITED ? "exited with status" : "killed by signal";
        pid_t pid = in->pid;
        in->pid = 0;
        if (stopping) {
                in->state = SUP_STATE_STOPPED;
                sup_log(6, "Instance %s: worker %d %s %d", in->name, (int)pid, how, si.si_status);
                return true;
        }
        if (in->state == SUP_STATE_DRAINING && rolling) {
                /* Rolling restart: it drained on purpose; start it again now. */
                in->restarts++;
                in->state = SUP_STATE_BACKOFF;
                in->restart_at_ms = now;
                return true;
        }
        int delay = sup_backoff_on_exit(&in->backoff, now, in->ready_ms);
        if (delay == -ELOOP) {
                in->state = SUP_STATE_FAILED;
                sup_log(3, "Instance %s: worker %d %s %d; %d exits within %d ms: crash loop, giving up", in->name,
                        (int)pid, how, si.si_status, in->backoff.n_recent, in->env->cfg->restart_window_ms);
                return true;
        }
        in->state = SUP_STATE_BACKOFF;
        in->restart_at_ms = now + delay;
        sup_log(4, "Instance %s: worker %d %s %d; restarting in %d ms", in->name, (int)pid, how, si.si_status, delay);
        return true;
}

/* The worker is gone: its group goes and a new one gets the running configuration's
 * limits (a group's limits are written before any task joins it). */
static int renew_cgroup(struct sup_instance *in) {
        if (in->cg) {
                int r = dsv_cgroup_instance_stop(in->cg, 5000);
                if (r < 0) {
                        sup_log(3, "Failed to remove cgroup '%s' for its new limits: %s", in->cg_path, strerror(-r));
                        return r;
                }
                dsv_cgroup_instance_free(in->cg);
                in->cg = NULL;
        }
        memset(&in->cg_report, 0, sizeof in->cg_report);
        snprintf(in->cg_path, sizeof in->cg_path, "(none)");
        int r = sup_instance_create_cgroup(in, in->rt_runtime_us);
        if (r == 0)
                in->renew_cgroup = false;
        return r;
}

bool sup_instance_tick(struct sup_instance *in, int64_t now, bool rolling) {
        struct dsv_gateway *gw = in->env->gw;
        bool became_ready = false;
        if (in->state == SUP_STATE_BACKOFF && now >= in->restart_at_ms) {
                if ((!in->renew_cgroup || renew_cgroup(in) == 0) && sup_instance_spawn(in) == 0) {
                        in->restarts += !rolling;
                } else {
                        int d = sup_backoff_on_exit(&in->backoff, now, -1);
                        in->state = d < 0 ? SUP_STATE_FAILED : SUP_STATE_BACKOFF;
                        in->restart_at_ms = now + (d < 0 ? 0 : d);
                }
        }
        int up = gw && in->pidfd >= 0 ? dsv_gateway_instance_is_up(gw, in->gw_id) : 0;
        if (in->state == SUP_STATE_STARTING && up == 1) {
                on_ready(in, dsv_clock_now_ms());
                became_ready = true;
        } else if (in->state == SUP_STATE_STARTING && now - in->started_ms > STARTUP_TIMEOUT_MS) {
                sup_log(3, "Instance %s: not ready after %d s, killing it", in->name, STARTUP_TIMEOUT_MS / 1000);
                send_signal(in, SIGKILL);
                in->started_ms = now;
        }
        if (in->state == SUP_STATE_READY && up == 1)
                in->term_at_ms = now; /* last seen healthy */
        else if (in->state == SUP_STATE_READY && now - in->term_at_ms > UNHEALTHY_KILL_MS) {
                sup_log(3, "Instance %s: no healthy answer for %d s, killing it", in->name, UNHEALTHY_KILL_MS / 1000);
                send_signal(in, SIGKILL);
                in->term_at_ms = now;
        }
        return became_ready;
}

void sup_instance_drain(struct sup_instance *in) {
        set_routable(in, false); /* new requests go elsewhere */
        if (in->pidfd < 0) {
                in->state = SUP_STATE_STOPPED;
                return;
        }
        in->state = SUP_STATE_DRAINING;
        in->term_at_ms = dsv_clock_now_ms();
        send_signal(in, SIGTERM);
}

void sup_instance_kill(struct sup_instance *in) {
        send_signal(in, SIGKILL);
}

void sup_instance_perf_refresh(struct sup_instance *in) {
        struct dsv_perfctr_sample cur;
        if (!in->perf || dsv_perfctr_read(in->perf, &cur) < 0)
                return;
        struct dsv_perfctr_rates rates;
        if (in->perf_prev_valid && dsv_perfctr_rates_compute(&in->perf_prev, &cur, &rates) == 0) {
                in->ctxsw_invol_per_s = (rates.valid & (1u << DSV_PERF_CTXSW_INVOLUNTARY))
                                                ? rates.per_s[DSV_PERF_CTXSW_INVOLUNTARY]
                                                : -1;
                in->migrations_per_s = (rates.valid & (1u << DSV_PERF_CPU_MIGRATIONS))
                                               ? rates.per_s[DSV_PERF_CPU_MIGRATIONS]
                                               : -1;
        }
        in->perf_prev = cur;
        in->perf_prev_valid = true;
}

void sup_instance_done(struct sup_instance *in) {
        if (in->pidfd >= 0) {
                send_signal(in, SIGKILL);
                siginfo_t si;
                waitid((idtype_t)P_PIDFD, (id_t)in->pidfd, &si, WEXITED);
                close(in->pidfd);
                in->pidfd = -1;
        }
        if (in->cg) {
                int r = dsv_cgroup_instance_stop(in->cg, 5000);
                if (r < 0)
                        sup_log(3, "Failed to remove cgroup '%s': %s", in->cg_path, strerror(-r));
                dsv_cgroup_instance_free(in->cg);
                in->cg = NULL;
        }
        dsv_perfctr_free(in->perf);
        in->perf = NULL;
}

void sup_roll_begin(struct sup_roll *roll, const struct sup_instance *in, int n) {
        for (int i = 0; i < n; i++)
                roll->pending[i] = in[i].state != SUP_STATE_FAILED;
}

void sup_roll_step(struct sup_roll *roll, struct sup_instance *in, int n) {
        if (roll->current >= 0) {
                const struct sup_instance *cur = &in[roll->current];
                if (cur->state == SUP_STATE_READY || cur->state == SUP_STATE_FAILED)
                        roll->current = -1;
                else
                        return;
        }
        for (int i = 0; i < n; i++) {
                if (!roll->pending[i])
                        continue;
                if (in[i].state != SUP_STATE_READY)
                        return; /* wait until it is up to restart it cleanly */
                roll->pending[i] = false;
                roll->current = i;
                sup_instance_drain(&in[i]);
                sup_log(6, "Reload: draining instance %s (pid %d)", in[i].name, (int)in[i].pid);
                return;
        }
}

int sup_instances_in_state(const struct sup_instance *in, int n, enum sup_state st) {
        int k = 0;
        for (int i = 0; i < n; i++)
                k += in[i].state == st;
        return k;
}

uint64_t sup_instances_restarts(const struct sup_instance *in, int n) {
        uint64_t k = 0;
        for (int i = 0; i < n; i++)
                k += (uint64_t)in[i].restarts;
        return k;
}

uint64_t sup_instances_rt_fallbacks(const struct sup_instance *in, int n) {
        uint64_t k = 0;
        for (int i = 0; i < n; i++)
                k += (uint64_t)in[i].rt_fallbacks;
        return k;
}
