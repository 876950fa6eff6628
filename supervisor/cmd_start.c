/* dsvisor start (issue 7): runs N worker instances and the HTTP gateway in the
 * foreground, systemd-style.
 *
 *   setup     config (CLI + JSON), placement (policy), RT preflight, the model resolved
 *             (an HF folder is converted once into the cache), one sealed weight memfd
 *             per NUMA node (HugePages when reserved; re-attached from systemd's fd store
 *             after a supervisor restart), a cgroup per instance below our own, the
 *             gateway, the control socket;
 *   loop      one poll() over a signalfd, the control socket and every worker's pidfd:
 *             an exit is seen at once, the instance leaves routing and restarts after an
 *             exponential backoff (crash-loop limit: state "failed"); readiness comes
 *             from the gateway's health polling; WATCHDOG=1 and STATUS= from here;
 *   SIGHUP    re-reads --config and restarts the instances one at a time (the next one
 *             only when the previous is ready again);
 *   SIGTERM   stop: STOPPING=1, instances leave routing (new requests: 503), workers get
 *             SIGTERM and drain for --grace-ms, then the cgroups are killed and removed.
 *
 * Only the main thread spawns workers: PR_SET_PDEATHSIG in the worker fires when the
 * thread that forked it exits, so workers die with the supervisor. The supervisor,
 * gateway and metrics threads always run SCHED_OTHER; only workers' compute threads may
 * run SCHED_FIFO (--rt-priority). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "commands.h"
#include "dse.h"
#include "dsv_gateway.h"
#include "dsv_ipc.h"
#include "dsv_platform.h"
#include "dsv_policy.h"
#include "sup.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#define ERESTART_RESTARTBLOCK 516 /* the kernel's include/linux/errno.h; not in userspace headers */

#define TICK_MS 100
#define STARTING_TICK_MS 5
/* How often freed heap memory goes back to the kernel (malloc_trim, see tick()). */
#define TRIM_MS 10000
/* Readiness is seen within one interval; a worker that misses health replies stays "up"
 * for 3 intervals (the gateway's staleness rule). 500 ms let a busy worker on a loaded
 * 2-core host drop out of routing for a moment (a 503 while its peer restarted). */
#define HEALTH_INTERVAL_MS 1000
#define STARTUP_TIMEOUT_MS 600000 /* a large model loads for minutes */
#define UNHEALTHY_KILL_MS 30000   /* ready worker not answering health this long: killed */
#define RTTIME_LIMIT_US 10000000  /* RLIMIT_RTTIME: a FIFO thread that never blocks for 10 s dies */

/* ---- logging (the program boundary: sd-daemon prefixes) ---------------------------- */

static void slog(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void slog(int prio, const char *fmt, ...) {
        char buf[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        fprintf(stderr, "<%d>dsvisor: %s\n", prio, buf);
}

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- state -------------------------------------------------------------------------- */

struct weights {
        int node_os;
        struct dsv_hugepages_image img;
        bool from_store; /* re-attached from systemd's fd store */
};

struct sup {
        struct sup_config cfg;
        char exe_dir[PATH_MAX];
        char model_path[PATH_MAX]; /* the native file */
        char model_id[128];
        uint64_t model_bytes;
        char model_key[96];        /* size and mtime: names the fd-store entries */
        char worker_path[PATH_MAX];
        char runtime_dir[PATH_MAX];
        char control_path[PATH_MAX];
        int control_fd, sig_fd;
        struct dsv_topology topo;
        struct dsv_policy_placement plan;
        int n_free_cpus;
        struct dsv_cgroup_host *cg_host;
        char cg_note[256];
        struct weights weights[DSV_TOPOLOGY_MAX_NODES];
        int n_weights;
        struct dsv_gateway *gw;
        int gw_port;
        int n;
        struct sup_instance inst[DSV_GATEWAY_MAX_INSTANCES];
        bool stopping;
        int64_t stop_kill_at_ms;
        bool ready_sent;
        uint64_t watchdog_usec;
        int64_t last_watchdog_ms, last_perf_ms, last_trim_ms;
        char last_status[256];
        bool roll_pending[DSV_GATEWAY_MAX_INSTANCES];
        int rolling; /* instance being restarted by a reload, -1 none */
        uint64_t restarts_total, rt_fallbacks_total;
        bool all_failed; /* every instance hit its crash-loop limit */
        int64_t started_ms;
        pthread_mutex_t metrics_lock; /* guards metrics_text (read by a gateway thread) */
        char *metrics_text;
};

static struct sup S; /* large (topology, placement): static storage */

/* ---- model and weights -------------------------------------------------------------- */

static int find_default_model(const struct sup *s, char *buf, size_t size) {
        const char *env = getenv("DSV_DATA_DIR");
        char cand[4][PATH_MAX];
        int n = 0;
        if (env && *env)
                snprintf(cand[n++], PATH_MAX, "%s/models/default", env);
        snprintf(cand[n++], PATH_MAX, "%.3900s/../share/dsvisor/models/default", s->exe_dir);
        snprintf(cand[n++], PATH_MAX, "%.3900s/../../models/default", s->exe_dir);
#ifdef DSV_SOURCE_DIR
        snprintf(cand[n++], PATH_MAX, "%s/models/default", DSV_SOURCE_DIR);
#endif
        for (int i = 0; i < n; i++) {
                struct stat st;
                char real[PATH_MAX];
                if (stat(cand[i], &st) == 0 && realpath(cand[i], real)) {
                        snprintf(buf, size, "%s", real);
                        return 0;
                }
        }
        return -ENOENT;
}

static void derive_model_id(const char *arg, char *buf, size_t size) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", arg);
        size_t len = strlen(tmp);
        while (len > 1 && tmp[len - 1] == '/')
                tmp[--len] = 0;
        const char *base = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
        snprintf(buf, size, "%s", base);
        char *dot = strrchr(buf, '.');
        if (dot && strcmp(dot, ".dse") == 0)
                *dot = 0;
}

static int resolve_model(struct sup *s) {
        char arg[PATH_MAX];
        if (s->cfg.model[0]) {
                snprintf(arg, sizeof arg, "%s", s->cfg.model);
        } else if (find_default_model(s, arg, sizeof arg) < 0) {
                slog(3, "No --model given and the bundled default model (models/default) was not found "
                        "beside the binary, in $DSV_DATA_DIR or in the source tree");
                return -ENOENT;
        }
        struct dse_diag diag = {{0}};
        int r = dse_model_resolve(arg, s->model_path, sizeof s->model_path, &diag);
        if (r < 0) {
                slog(3, "Failed to resolve model '%s': %s", arg, diag.msg[0] ? diag.msg : strerror(-r));
                return r;
        }
        struct stat st;
        if (stat(s->model_path, &st) < 0) {
                r = -errno;
                slog(3, "Failed to stat model '%s': %s", s->model_path, strerror(-r));
                return r;
        }
        s->model_bytes = (uint64_t)st.st_size;
        snprintf(s->model_key, sizeof s->model_key, "%" PRIu64 "-%lld", s->model_bytes, (long long)st.st_mtime);
        if (s->cfg.model_id[0])
                snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.model_id);
        else
                derive_model_id(arg, s->model_id, sizeof s->model_id);
        slog(6, "Model '%s' (%s, %" PRIu64 " bytes), served as '%s'", arg, s->model_path, s->model_bytes,
             s->model_id);
        return 0;
}

static void weights_fdname(const struct sup *s, int node_os, char *buf, size_t size) {
        snprintf(buf, size, "dsvisor-weights-n%d-%s", node_os, s->model_key);
}

/* Adopts a memfd that systemd's fd store handed back, if it matches our model. */
static int adopt_stored(struct sup *s, struct weights *w, char **names, int n_fds) {
        char want[160];
        weights_fdname(s, w->node_os, want, sizeof want);
        for (int i = 0; i < n_fds; i++) {
                if (!names || !names[i] || strcmp(names[i], want) != 0)
                        continue;
                int fd = 3 + i;
                struct stat st;
                struct statfs sf;
                if (fstat(fd, &st) < 0 || fstatfs(fd, &sf) < 0 || (uint64_t)st.st_size < s->model_bytes)
                        return 0;
                memset(&w->img, 0, sizeof w->img);
                w->img.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                if (w->img.fd < 0)
                        return -errno;
                w->img.len_bytes = s->model_bytes;
                w->img.size_bytes = (size_t)st.st_size;
                w->img.hugetlb = (unsigned long)sf.f_type == HUGETLBFS_MAGIC;
                w->img.node = w->node_os;
                w->img.seals = (unsigned)fcntl(fd, F_GET_SEALS);
                snprintf(w->img.note, sizeof w->img.note, "re-attached from the systemd fd store");
                w->from_store = true;
                int q = dsv_hugepages_image_measure_thp(&w->img);
                if (q < 0)
                        slog(4, "Failed to measure the re-attached weight image's 2 MiB pages: %s", strerror(-q));
                return 1;
        }
        return 0;
}

static int load_weights(struct sup *s) {
        char **names = NULL;
        int n_fds = dsv_notify_listen_fds(&names);
        if (n_fds < 0) {
                slog(4, "Failed to read the systemd fd store: %s, ignoring", strerror(-n_fds));
                n_fds = 0;
        }
        int r = 0;
        for (int i = 0; i < s->plan.n_instances && r >= 0; i++) {
                int node = s->plan.instances[i].mem_node_os, k;
                for (k = 0; k < s->n_weights; k++)
                        if (s->weights[k].node_os == node)
                                break;
                if (k < s->n_weights)
                        continue;
                struct weights *w = &s->weights[s->n_weights];
                w->node_os = node;
                w->img.fd = -1;
                r = adopt_stored(s, w, names, n_fds);
                if (r > 0) {
                        s->n_weights++;
                        slog(6, "Weights for node %d re-attached from the fd store (%zu bytes, %s%s)", node,
                             w->img.size_bytes, w->img.hugetlb ? "HugePages" : "normal pages",
                             w->img.thp_bytes ? ", some in transparent 2 MiB pages" : "");
                        continue;
                }
                if (r < 0)
                        break;
                char name[160];
                weights_fdname(s, node, name, sizeof name);
                int64_t t0 = mono_ms();
                r = dsv_hugepages_image_init(&w->img, name, s->model_bytes, node, s->cfg.hugepages, NULL);
                if (r == -ENOMEM && s->cfg.hugepages == DSV_HUGEPAGES_MODE_REQUIRE) {
                        uint64_t free_pages = 0;
                        dsv_hugepages_free_on_node(NULL, node, &free_pages);
                        slog(3, "--hugepages require: node %d has %" PRIu64 " free 2 MiB pages, the model needs %" PRIu64
                                " (reserve them in /proc/sys/vm/nr_hugepages or "
                                "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages)",
                             node, (uint64_t)free_pages, (uint64_t)((s->model_bytes + DSV_HUGEPAGE_2MB_BYTES - 1) / DSV_HUGEPAGE_2MB_BYTES), node);
                        break;
                }
                if (r < 0) {
                        slog(3, "Failed to create the weight image for node %d: %s", node, strerror(-r));
                        break;
                }
                s->n_weights++;
                if ((r = dsv_hugepages_image_fill(&w->img, s->model_path)) < 0) {
                        slog(3, "Failed to read '%s' into the weight image: %s", s->model_path, strerror(-r));
                        break;
                }
                if ((r = dsv_hugepages_image_seal(&w->img)) < 0) {
                        slog(3, "Failed to seal the weight image for node %d: %s", node, strerror(-r));
                        break;
                }
                char pages[96];
                if (w->img.hugetlb)
                        snprintf(pages, sizeof pages, "HugePages");
                else
                        snprintf(pages, sizeof pages, "normal pages, %zu MiB of them in transparent 2 MiB pages",
                                 w->img.thp_bytes >> 20);
                slog(6, "Weights for node %d loaded in %" PRId64 " ms: %zu bytes in %s%s%s", node, mono_ms() - t0,
                     w->img.size_bytes, pages, w->img.note[0] ? "; " : "", w->img.note);
                char state[256];
                snprintf(state, sizeof state, "FDSTORE=1\nFDNAME=%s", name);
                int q = dsv_notify_with_fds(state, &w->img.fd, 1);
                if (q < 0)
                        slog(4, "Failed to keep the weight image in the systemd fd store: %s, ignoring",
                             strerror(-q));
        }
        dsv_notify_names_free(names);
        for (int i = 0; i < n_fds; i++)
                close(3 + i); /* adopted ones were duplicated */
        return r < 0 ? r : 0;
}

static struct weights *weights_for(struct sup *s, int node_os) {
        for (int k = 0; k < s->n_weights; k++)
                if (s->weights[k].node_os == node_os)
                        return &s->weights[k];
        return NULL;
}

/* ---- instances ---------------------------------------------------------------------- */

/* Every group of the instance: "v2 <path>, v1 cpu <path>, v1 cpuset <path>, ...". */
static void instance_cgroup_path(const struct sup *s, const struct sup_instance *in, char *buf, size_t size) {
        static const char *const v1_names[4] = {"cpu", "cpuset", "memory", "hugetlb"};
        struct dsv_cgroup_host_info info;
        if (!s->cg_host || !in->cg || dsv_cgroup_host_info(s->cg_host, &info) < 0) {
                snprintf(buf, size, "(none)");
                return;
        }
        char cgname[64];
        snprintf(cgname, sizeof cgname, "dsvisor-%d-worker-%d", (int)getpid(), in->index);
        size_t len = 0;
        buf[0] = 0;
        if (info.v2_parent[0])
                len += (size_t)snprintf(buf, size, "v2 %.400s/%s", info.v2_parent, cgname);
        for (int b = 0; b < 4 && len < size; b++)
                if (info.v1_mounted & (1u << b))
                        len += (size_t)snprintf(buf + len, size - len, "%sv1 %s %.400s/%s", len ? ", " : "",
                                                v1_names[b], info.v1_parent[b], cgname);
        if (!buf[0])
                snprintf(buf, size, "(none)");
}

static uint64_t own_rt_runtime_us(const struct sup *s) {
        struct dsv_cgroup_host_info info;
        uint64_t v = 950000;
        if (s->cg_host && dsv_cgroup_host_info(s->cg_host, &info) == 0 && (info.v1_mounted & DSV_CGROUP_CTRL_CPU)) {
                char path[600];
                snprintf(path, sizeof path, "%.500s/cpu.rt_runtime_us", info.v1_own[0]);
                FILE *f = fopen(path, "re");
                unsigned long long x;
                if (f && fscanf(f, "%llu", &x) == 1)
                        v = x;
                if (f)
                        fclose(f);
        }
        return v;
}

static int instance_create_cgroup(struct sup *s, struct sup_instance *in) {
        if (!s->cg_host)
                return 0;
        char mems[16];
        snprintf(mems, sizeof mems, "%d", in->node_os);
        struct dsv_cgroup_limits lim = {.cpus = in->cpus, .mems = mems, .memory_max_bytes = s->cfg.memory_max_bytes,
                                        .memory_oom_group = true};
        if (s->cfg.rt_priority > 0) {
                /* RT group scheduling: a new v1 cpu group gets rt_runtime 0 and FIFO is EPERM
                 * in it; share our own runtime between the instances. */
                uint64_t own = own_rt_runtime_us(s);
                lim.cpu_rt_runtime_us = own / (uint64_t)(s->n + 1);
        }
        char cgname[64];
        snprintf(cgname, sizeof cgname, "dsvisor-%d-worker-%d", (int)getpid(), in->index);
        int r = dsv_cgroup_instance_new(s->cg_host, cgname, &lim, &in->cg_report, &in->cg);
        if (r < 0) {
                slog(3, "Failed to create cgroup '%s' for instance %s: %s", cgname, in->name, strerror(-r));
                return r;
        }
        instance_cgroup_path(s, in, in->cg_path, sizeof in->cg_path);
        char rep[2048];
        dsv_cgroup_report_format(&in->cg_report, rep, sizeof rep);
        int missing = dsv_cgroup_report_n_missing(&in->cg_report);
        slog(missing ? 4 : 6, "Instance %s cgroup %s: %d limit%s not in effect", in->name, in->cg_path, missing,
             missing == 1 ? "" : "s");
        for (char *line = strtok(rep, "\n"); line; line = strtok(NULL, "\n"))
                slog(missing ? 4 : 6, "Instance %s: %s", in->name, line);
        return 0;
}

static int instance_spawn(struct sup *s, struct sup_instance *in) {
        struct weights *w = weights_for(s, in->node_os);
        char fdarg[16], threads[16], grace[16], nctx[16], batch[16], kvmem[16];
        const char *argv[32];
        int a = 0;
        snprintf(fdarg, sizeof fdarg, "%d", w->img.fd);
        snprintf(threads, sizeof threads, "%d", in->n_threads);
        snprintf(grace, sizeof grace, "%d", s->cfg.grace_ms);
        argv[a++] = s->worker_path;
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
        if (s->cfg.n_ctx > 0) {
                snprintf(nctx, sizeof nctx, "%d", s->cfg.n_ctx);
                argv[a++] = "--n-ctx";
                argv[a++] = nctx;
        }
        if (s->cfg.max_batch > 0) {
                snprintf(batch, sizeof batch, "%d", s->cfg.max_batch);
                argv[a++] = "--max-batch";
                argv[a++] = batch;
        }
        if (s->cfg.kv_mem_mib > 0) {
                snprintf(kvmem, sizeof kvmem, "%d", s->cfg.kv_mem_mib);
                argv[a++] = "--kv-mem-mib";
                argv[a++] = kvmem;
        }
        argv[a] = NULL;

        /* The memfd is inherited by this exec only: only this thread spawns. The child
         * also inherits this thread's affinity: the instance's CPUs, not the
         * housekeeping ones the supervisor keeps to (this matters without a cpuset). */
        int flags = fcntl(w->img.fd, F_GETFD);
        fcntl(w->img.fd, F_SETFD, flags & ~FD_CLOEXEC);
        cpu_set_t own;
        bool widened = sched_getaffinity(0, sizeof own, &own) == 0 &&
                       sched_setaffinity(0, sizeof in->cpu_set, &in->cpu_set) == 0;
        pid_t pid;
        int pidfd, r;
        if (in->cg)
                r = dsv_cgroup_instance_spawn(in->cg, s->worker_path, (char *const *)argv, NULL, &pid, &pidfd);
        else
                r = dsv_cgroup_spawn(-1, NULL, 0, s->worker_path, (char *const *)argv, NULL, &pid, &pidfd);
        if (widened)
                sched_setaffinity(0, sizeof own, &own);
        fcntl(w->img.fd, F_SETFD, flags | FD_CLOEXEC);
        if (r < 0) {
                slog(3, "Failed to spawn worker '%s' for instance %s: %s", s->worker_path, in->name, strerror(-r));
                return r;
        }
        in->pid = pid;
        in->pidfd = pidfd;
        in->state = SUP_STATE_STARTING;
        in->started_ms = mono_ms();
        in->ready_ms = -1;
        in->rt_applied = false;
        snprintf(in->sched, sizeof in->sched, "SCHED_OTHER");
        in->weights_huge_bytes = w->img.hugetlb ? w->img.size_bytes : 0;
        if (s->gw)
                dsv_gateway_instance_set_ready(s->gw, in->gw_id, true); /* routable once its health says ready */
        slog(6, "Instance %s: worker pid %d on CPUs %s (node %d), %d thread%s", in->name, (int)pid, in->cpus,
             in->node_os, in->n_threads, in->n_threads == 1 ? "" : "s");
        return 0;
}

/* Compute threads: the worker's own threads — its main thread, which drives each
 * engine step, and the pool threads it pins to the CPUs of --cpus. nng's threads
 * ("nng:*": I/O, timers, resolver) stay SCHED_OTHER. */
static int instance_apply_rt(struct sup *s, struct sup_instance *in) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task", (int)in->pid);
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        struct rlimit rl = {RTTIME_LIMIT_US, RTTIME_LIMIT_US};
        if (prlimit(in->pid, RLIMIT_RTTIME, &rl, NULL) < 0)
                slog(4, "Instance %s: failed to set RLIMIT_RTTIME: %m, ignoring", in->name);
        int n_fifo = 0, first_err = 0;
        pid_t sample_tid = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                pid_t tid = (pid_t)atoi(de->d_name);
                if (tid <= 0)
                        continue;
                char st[96], comm[32] = "";
                snprintf(st, sizeof st, "/proc/%d/task/%d/comm", (int)in->pid, (int)tid);
                FILE *f = fopen(st, "re");
                bool io_thread = f && fgets(comm, sizeof comm, f) && strncmp(comm, "nng:", 4) == 0;
                if (f)
                        fclose(f);
                if (io_thread)
                        continue; /* nng's I/O, timer and resolver threads are not compute */
                /* Never FIFO on a CPU outside the instance (the housekeeping CPUs): a
                 * thread that may run there (a cpuset that did not apply) is left alone. */
                cpu_set_t allowed, outside;
                if (sched_getaffinity(tid, sizeof allowed, &allowed) < 0)
                        continue;
                CPU_XOR(&outside, &allowed, &in->cpu_set);
                CPU_AND(&outside, &outside, &allowed);
                if (CPU_COUNT(&outside) > 0) {
                        if (!first_err)
                                first_err = -EDOM;
                        continue;
                }
                int r = sup_thread_set_fifo(tid, s->cfg.rt_priority);
                if (r < 0 && !first_err)
                        first_err = r;
                if (r == 0) {
                        n_fifo++;
                        sample_tid = tid;
                }
        }
        closedir(d);
        if (n_fifo > 0) {
                in->rt_applied = true;
                sup_thread_policy_format(sample_tid, in->sched, sizeof in->sched);
                slog(6, "Instance %s: %d compute thread%s run %s (SCHED_RESET_ON_FORK, RLIMIT_RTTIME %d s)", in->name,
                     n_fifo, n_fifo == 1 ? "" : "s", in->sched, RTTIME_LIMIT_US / 1000000);
        }
        if (first_err) {
                in->rt_fallbacks++;
                s->rt_fallbacks_total++;
                snprintf(in->sched, sizeof in->sched, n_fifo ? "mixed" : "SCHED_OTHER (fallback)");
                slog(4, "Instance %s: SCHED_FIFO refused (%s%s); %s compute threads stay SCHED_OTHER, ignoring",
                     in->name, strerror(-first_err),
                     first_err == -EPERM  ? ": RT group scheduling without cpu.rt_runtime_us in the group"
                     : first_err == -EDOM ? ": a thread may run outside the instance's CPUs"
                                          : "",
                     n_fifo ? "some" : "its");
        }
        return 0;
}

static void metrics_refresh(struct sup *s);

static void instance_on_ready(struct sup *s, struct sup_instance *in) {
        int64_t now = mono_ms();
        in->state = SUP_STATE_READY;
        in->ready_ms = now;
        if (in->exited_ms >= 0) /* restart-to-ready, what bench/restart_bench.sh reports */
                slog(6, "Instance %s ready in %" PRId64 " ms (pid %d), %" PRId64 " ms after the previous worker exited",
                     in->name, now - in->started_ms, (int)in->pid, now - in->exited_ms);
        else
                slog(6, "Instance %s ready in %" PRId64 " ms (pid %d)", in->name, now - in->started_ms, (int)in->pid);
        if (s->cfg.rt_priority > 0)
                instance_apply_rt(s, in);
        dsv_perfctr_free(in->perf);
        in->perf = NULL;
        in->perf_prev_valid = false;
        in->ctxsw_invol_per_s = in->migrations_per_s = -1;
        int r = dsv_perfctr_open_threads(in->pid, NULL, 0, &in->perf);
        if (r < 0)
                slog(4, "Instance %s: perf counters unavailable: %s, ignoring", in->name, strerror(-r));
        /* /metrics shows the new worker's scheduling policy at once, not at the next 1 s
         * refresh: readiness now comes within milliseconds of the worker's start. */
        metrics_refresh(s);
}

static void instance_reap(struct sup *s, struct sup_instance *in) {
        siginfo_t si = {0};
        if (waitid((idtype_t)P_PIDFD, (id_t)in->pidfd, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
                return;
        int64_t now = mono_ms();
        in->exited_ms = now;
        close(in->pidfd);
        in->pidfd = -1;
        dsv_perfctr_free(in->perf);
        in->perf = NULL;
        in->last_exit_code = si.si_code;
        in->last_exit_status = si.si_status;
        if (s->gw)
                dsv_gateway_instance_set_ready(s->gw, in->gw_id, false);
        const char *how = si.si_code == CLD_EXITED ? "exited with status" : "killed by signal";
        pid_t pid = in->pid;
        in->pid = 0;
        if (s->stopping) {
                in->state = SUP_STATE_STOPPED;
                slog(6, "Instance %s: worker %d %s %d", in->name, (int)pid, how, si.si_status);
                return;
        }
        if (in->state == SUP_STATE_DRAINING && s->rolling == in->index) {
                /* Rolling restart: it drained on purpose; start it again now. */
                in->restarts++;
                s->restarts_total++;
                in->state = SUP_STATE_BACKOFF;
                in->restart_at_ms = now;
                return;
        }
        int delay = sup_backoff_on_exit(&in->backoff, now, in->ready_ms);
        if (delay == -ELOOP) {
                in->state = SUP_STATE_FAILED;
                slog(3, "Instance %s: worker %d %s %d; %d exits within %d ms: crash loop, giving up", in->name,
                     (int)pid, how, si.si_status, in->backoff.n_recent, s->cfg.restart_window_ms);
                return;
        }
        in->state = SUP_STATE_BACKOFF;
        in->restart_at_ms = now + delay;
        slog(4, "Instance %s: worker %d %s %d; restarting in %d ms", in->name, (int)pid, how, si.si_status, delay);
}

/* ---- status ------------------------------------------------------------------------- */

static int n_in_state(const struct sup *s, enum sup_state st) {
        int k = 0;
        for (int i = 0; i < s->n; i++)
                k += s->inst[i].state == st;
        return k;
}

static cJSON *status_json(struct sup *s) {
        int64_t now = mono_ms();
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "pid", getpid());
        cJSON_AddStringToObject(root, "state", s->stopping ? "stopping" : s->ready_sent ? "ready" : "starting");
        cJSON_AddNumberToObject(root, "uptime_s", (double)(now - s->started_ms) / 1000.0);
        cJSON_AddStringToObject(root, "model", s->model_path);
        cJSON_AddStringToObject(root, "model_id", s->model_id);
        cJSON_AddNumberToObject(root, "model_bytes", (double)s->model_bytes);
        cJSON_AddStringToObject(root, "host", s->cfg.host);
        cJSON_AddNumberToObject(root, "port", s->gw_port);
        cJSON_AddStringToObject(root, "hugepages", dsv_hugepages_mode_to_string(s->cfg.hugepages));
        cJSON_AddNumberToObject(root, "rt_priority", s->cfg.rt_priority);
        cJSON_AddNumberToObject(root, "rt_fallbacks", (double)s->rt_fallbacks_total);
        cJSON_AddStringToObject(root, "cgroups", s->cg_host ? "in use" : s->cg_note);
        cJSON_AddStringToObject(root, "cgroup_parent", s->cfg.cgroup_parent);
        cJSON_AddNumberToObject(root, "instances_ready", n_in_state(s, SUP_STATE_READY));
        cJSON_AddNumberToObject(root, "instances_total", s->n);
        cJSON *ws = cJSON_AddArrayToObject(root, "weights");
        for (int k = 0; k < s->n_weights; k++) {
                const struct weights *w = &s->weights[k];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "numa_node", w->node_os);
                cJSON_AddNumberToObject(o, "bytes", (double)w->img.size_bytes);
                cJSON_AddBoolToObject(o, "hugepages", w->img.hugetlb);
                cJSON_AddNumberToObject(o, "thp_bytes", (double)w->img.thp_bytes);
                cJSON_AddBoolToObject(o, "from_fd_store", w->from_store);
                cJSON_AddStringToObject(o, "note", w->img.note);
                cJSON_AddItemToArray(ws, o);
        }
        struct dsv_gateway_stats gst;
        if (s->gw && dsv_gateway_stats(s->gw, &gst) == 0) {
                cJSON *g = cJSON_AddObjectToObject(root, "gateway");
                cJSON *rej = cJSON_AddObjectToObject(g, "rejected");
                for (int i = 0; i < DSV_GATEWAY_REJECT_COUNT; i++)
                        cJSON_AddNumberToObject(rej, dsv_gateway_reject_to_string(i), (double)gst.rejected[i]);
                cJSON_AddNumberToObject(g, "connections_refused", (double)gst.connections_refused);
                cJSON_AddNumberToObject(g, "connections_open", gst.connections_open);
                cJSON_AddNumberToObject(g, "max_connections", gst.max_connections);
                cJSON_AddNumberToObject(g, "queue_length", gst.queue_length);
        }
        cJSON *arr = cJSON_AddArrayToObject(root, "instances");
        for (int i = 0; i < s->n; i++) {
                const struct sup_instance *in = &s->inst[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", in->name);
                cJSON_AddNumberToObject(o, "pid", in->pid);
                cJSON_AddStringToObject(o, "state", sup_state_to_string(in->state));
                cJSON_AddNumberToObject(o, "numa_node", in->node_os);
                cJSON_AddStringToObject(o, "cpus", in->cpus);
                cJSON_AddNumberToObject(o, "threads", in->n_threads);
                cJSON_AddStringToObject(o, "cgroup", in->cg_path);
                cJSON *lims = cJSON_AddArrayToObject(o, "limits");
                for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++) {
                        const struct dsv_cgroup_report_entry *e = &in->cg_report.e[l];
                        if (!e->requested)
                                continue;
                        cJSON *lo = cJSON_CreateObject();
                        cJSON_AddStringToObject(lo, "limit", dsv_cgroup_limit_to_string(l));
                        cJSON_AddStringToObject(lo, "value", e->value);
                        cJSON_AddBoolToObject(lo, "in_effect", e->applied);
                        cJSON_AddStringToObject(lo, "file", e->file);
                        cJSON_AddStringToObject(lo, "reason", e->reason);
                        cJSON_AddItemToArray(lims, lo);
                }
                cJSON_AddStringToObject(o, "sched", in->sched);
                cJSON_AddNumberToObject(o, "weights_hugepages_bytes", (double)in->weights_huge_bytes);
                struct dsv_gateway_instance_stats gs;
                bool have = s->gw && dsv_gateway_instance_stats(s->gw, in->gw_id, &gs) == 0;
                cJSON_AddNumberToObject(o, "queue_depth", have ? (double)gs.waiting : -1);
                cJSON_AddNumberToObject(o, "running", have ? (double)gs.running : -1);
                cJSON_AddNumberToObject(o, "restarts", in->restarts);
                cJSON_AddNumberToObject(o, "uptime_s",
                                        in->pid && in->state != SUP_STATE_BACKOFF
                                                ? (double)(now - in->started_ms) / 1000.0
                                                : 0);
                cJSON_AddNumberToObject(o, "ctxsw_involuntary_per_s", in->ctxsw_invol_per_s);
                cJSON_AddNumberToObject(o, "migrations_per_s", in->migrations_per_s);
                cJSON_AddItemToArray(arr, o);
        }
        return root;
}

/* CPU throttling of an instance's cpu cgroup from its cpu.stat: v1 reports nr_throttled
 * and throttled_time (ns), v2 nr_throttled and throttled_usec. 0, or -errno when the
 * file is absent or has neither. */
static int read_cpu_throttling(const char *group_dir, uint64_t *ret_periods, double *ret_seconds) {
        char path[1100], key[64];
        snprintf(path, sizeof path, "%s/cpu.stat", group_dir);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        unsigned long long v, periods = 0;
        double seconds = -1;
        int have_periods = 0;
        while (fscanf(f, "%63s %llu", key, &v) == 2) {
                if (strcmp(key, "nr_throttled") == 0) {
                        periods = v;
                        have_periods = 1;
                } else if (strcmp(key, "throttled_time") == 0) {
                        seconds = (double)v / 1e9;
                } else if (strcmp(key, "throttled_usec") == 0) {
                        seconds = (double)v / 1e6;
                }
        }
        fclose(f);
        if (!have_periods || seconds < 0)
                return -ENODATA;
        *ret_periods = periods;
        *ret_seconds = seconds;
        return 0;
}

/* The supervisor's own metric families, rendered by the main thread each second and
 * served by the gateway's /metrics hook from a copy. */
static void metrics_refresh(struct sup *s) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return;
        fprintf(f, "# HELP dsvisor_worker_restarts_total Worker restarts (crashes and reloads).\n"
                   "# TYPE dsvisor_worker_restarts_total counter\n");
        for (int i = 0; i < s->n; i++)
                fprintf(f, "dsvisor_worker_restarts_total{instance=\"%s\",numa_node=\"%d\"} %d\n", s->inst[i].name,
                        s->inst[i].node_os, s->inst[i].restarts);
        fprintf(f, "# HELP dsvisor_worker_sched_fifo 1 when the instance's compute threads run SCHED_FIFO.\n"
                   "# TYPE dsvisor_worker_sched_fifo gauge\n");
        for (int i = 0; i < s->n; i++)
                fprintf(f, "dsvisor_worker_sched_fifo{instance=\"%s\",numa_node=\"%d\"} %d\n", s->inst[i].name,
                        s->inst[i].node_os, s->inst[i].rt_applied ? 1 : 0);
        fprintf(f, "# HELP dsvisor_worker_sched_fifo_fallbacks_total SCHED_FIFO requests refused (kept SCHED_OTHER).\n"
                   "# TYPE dsvisor_worker_sched_fifo_fallbacks_total counter\n"
                   "dsvisor_worker_sched_fifo_fallbacks_total %" PRIu64 "\n",
                s->rt_fallbacks_total);
        fprintf(f, "# HELP dsvisor_cgroup_limit_in_effect 1 when a requested cgroup limit is in effect, 0 when not.\n"
                   "# TYPE dsvisor_cgroup_limit_in_effect gauge\n");
        for (int i = 0; i < s->n; i++)
                for (int l = 0; l < DSV_CGROUP_LIMIT_COUNT; l++)
                        if (s->inst[i].cg_report.e[l].requested)
                                fprintf(f, "dsvisor_cgroup_limit_in_effect{instance=\"%s\",limit=\"%s\"} %d\n",
                                        s->inst[i].name, dsv_cgroup_limit_to_string(l),
                                        s->inst[i].cg_report.e[l].applied ? 1 : 0);
        fprintf(f, "# HELP dsvisor_weights_hugepages_bytes Weight image bytes backed by 2 MiB HugePages, per node.\n"
                   "# TYPE dsvisor_weights_hugepages_bytes gauge\n");
        for (int k = 0; k < s->n_weights; k++)
                fprintf(f, "dsvisor_weights_hugepages_bytes{numa_node=\"%d\"} %zu\n", s->weights[k].node_os,
                        s->weights[k].img.hugetlb ? s->weights[k].img.size_bytes : (size_t)0);
        fprintf(f, "# HELP dsvisor_weights_thp_bytes Weight image bytes in transparent 2 MiB pages of shmem when loaded, per node.\n"
                   "# TYPE dsvisor_weights_thp_bytes gauge\n");
        for (int k = 0; k < s->n_weights; k++)
                fprintf(f, "dsvisor_weights_thp_bytes{numa_node=\"%d\"} %zu\n", s->weights[k].node_os,
                        s->weights[k].img.thp_bytes);
        /* CPU throttling where the cpu controller is in use for the instance (v2 when
         * delegated, else v1); absent on hosts without it. */
        struct dsv_cgroup_host_info info;
        if (s->cg_host && dsv_cgroup_host_info(s->cg_host, &info) == 0) {
                const char *base = (info.v2_enabled & DSV_CGROUP_CTRL_CPU) ? info.v2_parent
                                 : (info.v1_mounted & DSV_CGROUP_CTRL_CPU) ? info.v1_parent[0]
                                                                            : NULL;
                uint64_t periods[DSV_GATEWAY_MAX_INSTANCES] = {0};
                double seconds[DSV_GATEWAY_MAX_INSTANCES] = {0};
                bool have[DSV_GATEWAY_MAX_INSTANCES] = {0}, any = false;
                for (int i = 0; base && i < s->n && i < DSV_GATEWAY_MAX_INSTANCES; i++) {
                        char dir[1024];
                        if (!s->inst[i].cg)
                                continue;
                        snprintf(dir, sizeof dir, "%.900s/dsvisor-%d-worker-%d", base, (int)getpid(), s->inst[i].index);
                        have[i] = read_cpu_throttling(dir, &periods[i], &seconds[i]) == 0;
                        any |= have[i];
                }
                if (any) {
                        fprintf(f, "# HELP dsvisor_cgroup_cpu_throttled_periods_total CFS periods in which the instance's cgroup was throttled.\n"
                                   "# TYPE dsvisor_cgroup_cpu_throttled_periods_total counter\n");
                        for (int i = 0; i < s->n && i < DSV_GATEWAY_MAX_INSTANCES; i++)
                                if (have[i])
                                        fprintf(f, "dsvisor_cgroup_cpu_throttled_periods_total{instance=\"%s\",numa_node=\"%d\"} %" PRIu64 "\n",
                                                s->inst[i].name, s->inst[i].node_os, periods[i]);
                        fprintf(f, "# HELP dsvisor_cgroup_cpu_throttled_seconds_total Time the instance's cgroup spent throttled.\n"
                                   "# TYPE dsvisor_cgroup_cpu_throttled_seconds_total counter\n");
                        for (int i = 0; i < s->n && i < DSV_GATEWAY_MAX_INSTANCES; i++)
                                if (have[i])
                                        fprintf(f, "dsvisor_cgroup_cpu_throttled_seconds_total{instance=\"%s\",numa_node=\"%d\"} %.9f\n",
                                                s->inst[i].name, s->inst[i].node_os, seconds[i]);
                }
        }
        struct dsv_perfctr_series series[DSV_GATEWAY_MAX_INSTANCES];
        int ns = 0;
        for (int i = 0; i < s->n; i++)
                if (s->inst[i].perf && s->inst[i].perf_prev_valid)
                        series[ns++] = (struct dsv_perfctr_series){.instance = s->inst[i].name,
                                                                   .numa_node = s->inst[i].node_os,
                                                                   .sample = &s->inst[i].perf_prev};
        if (ns > 0) {
                char pbuf[16384];
                int n = dsv_perfctr_format_prometheus(series, (size_t)ns, pbuf, sizeof pbuf);
                if (n > 0 && (size_t)n < sizeof pbuf)
                        fputs(pbuf, f);
        }
        if (fclose(f) != 0) {
                free(buf);
                return;
        }
        pthread_mutex_lock(&s->metrics_lock);
        free(s->metrics_text);
        s->metrics_text = buf;
        pthread_mutex_unlock(&s->metrics_lock);
}

static int metrics_hook(FILE *out, void *userdata) {
        struct sup *s = userdata;
        pthread_mutex_lock(&s->metrics_lock);
        if (s->metrics_text)
                fputs(s->metrics_text, out);
        pthread_mutex_unlock(&s->metrics_lock);
        return 0;
}

static void perf_refresh(struct sup *s) {
        for (int i = 0; i < s->n; i++) {
                struct sup_instance *in = &s->inst[i];
                struct dsv_perfctr_sample cur;
                if (!in->perf || dsv_perfctr_read(in->perf, &cur) < 0)
                        continue;
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
}

/* ---- control socket ----------------------------------------------------------------- */

static void begin_stop(struct sup *s, const char *why);

static void control_accept(struct sup *s) {
        int fd = accept4(s->control_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return;
        char cmd[32];
        int r = sup_control_read_cmd(fd, 1000, cmd, sizeof cmd);
        if (r < 0) {
                sup_control_write(fd, "{\"error\":\"bad request\"}");
        } else if (strcmp(cmd, "status") == 0) {
                cJSON *j = status_json(s);
                char *text = j ? cJSON_PrintUnformatted(j) : NULL;
                sup_control_write(fd, text ? text : "{\"error\":\"out of memory\"}");
                free(text);
                cJSON_Delete(j);
        } else if (strcmp(cmd, "stop") == 0) {
                sup_control_write(fd, "{\"ok\":true}");
                begin_stop(s, "stop requested on the control socket");
        } else {
                sup_control_write(fd, "{\"error\":\"unknown command\"}");
        }
        close(fd);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void begin_stop(struct sup *s, const char *why) {
        if (s->stopping)
                return;
        s->stopping = true;
        slog(6, "Stopping (%s): draining for up to %d ms", why, s->cfg.grace_ms);
        dsv_notify("STOPPING=1\nSTATUS=stopping: draining workers");
        for (int i = 0; i < s->n; i++) {
                struct sup_instance *in = &s->inst[i];
                if (s->gw)
                        dsv_gateway_instance_set_ready(s->gw, in->gw_id, false);
                if (in->pidfd >= 0) {
                        syscall(SYS_pidfd_send_signal, in->pidfd, SIGTERM, NULL, 0);
                        in->state = SUP_STATE_DRAINING;
                } else {
                        in->state = SUP_STATE_STOPPED;
                }
        }
        s->stop_kill_at_ms = mono_ms() + s->cfg.grace_ms + 5000;
}

static void begin_reload(struct sup *s) {
        struct sup_config next;
        char err[512];
        int r = sup_config_reload(&s->cfg, &next, err, sizeof err);
        if (r < 0) {
                slog(3, "Reload failed, keeping the running configuration: %s", err);
                return;
        }
        if (strcmp(next.model, s->cfg.model) || next.n_instances != s->cfg.n_instances ||
            next.threads_per_instance != s->cfg.threads_per_instance || strcmp(next.host, s->cfg.host) ||
            next.port != s->cfg.port || next.hugepages != s->cfg.hugepages || next.rt_priority != s->cfg.rt_priority ||
            strcmp(next.runtime_dir, s->cfg.runtime_dir) || strcmp(next.cgroup_parent, s->cfg.cgroup_parent))
                slog(4, "Reload: model, instances, threads, host, port, hugepages, rt-priority, runtime-dir and "
                        "cgroup-parent changes need a full restart, ignoring them");
        s->cfg.grace_ms = next.grace_ms;
        s->cfg.n_ctx = next.n_ctx;
        s->cfg.max_batch = next.max_batch;
        s->cfg.kv_mem_mib = next.kv_mem_mib;
        s->cfg.restart_limit = next.restart_limit;
        s->cfg.restart_window_ms = next.restart_window_ms;
        s->cfg.restart_backoff_min_ms = next.restart_backoff_min_ms;
        s->cfg.restart_backoff_max_ms = next.restart_backoff_max_ms;
        for (int i = 0; i < s->n; i++) {
                s->roll_pending[i] = s->inst[i].state != SUP_STATE_FAILED;
                sup_backoff_init(&s->inst[i].backoff, s->cfg.restart_backoff_min_ms, s->cfg.restart_backoff_max_ms,
                                 s->cfg.restart_limit, s->cfg.restart_window_ms);
        }
        slog(6, "Reloaded the configuration: rolling restart, one instance at a time");
}

/* One step of a rolling restart: drain the next instance when no other is in the way. */
static void rolling_step(struct sup *s) {
        if (s->rolling >= 0) {
                struct sup_instance *in = &s->inst[s->rolling];
                if (in->state == SUP_STATE_READY || in->state == SUP_STATE_FAILED)
                        s->rolling = -1;
                else
                        return;
        }
        for (int i = 0; i < s->n; i++) {
                if (!s->roll_pending[i])
                        continue;
                struct sup_instance *in = &s->inst[i];
                if (in->state != SUP_STATE_READY)
                        return; /* wait until it is up to restart it cleanly */
                s->roll_pending[i] = false;
                s->rolling = i;
                if (s->gw)
                        dsv_gateway_instance_set_ready(s->gw, in->gw_id, false); /* new requests go elsewhere */
                in->state = SUP_STATE_DRAINING;
                in->term_at_ms = mono_ms();
                syscall(SYS_pidfd_send_signal, in->pidfd, SIGTERM, NULL, 0);
                slog(6, "Reload: draining instance %s (pid %d)", in->name, (int)in->pid);
                return;
        }
}

/* The loop sleeps TICK_MS, less when something is due sooner: a restart whose backoff
 * ends, or an instance that is starting (its readiness is the gateway's state, which
 * gives no wake-up, so it is checked every STARTING_TICK_MS: a restart is seen ready
 * within 5 ms, not within a tick). */
static int poll_timeout_ms(const struct sup *s) {
        int64_t now = mono_ms(), t = TICK_MS;
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
        int64_t now = mono_ms();
        for (int i = 0; i < s->n; i++) {
                struct sup_instance *in = &s->inst[i];
                if (s->stopping)
                        break;
                if (in->state == SUP_STATE_BACKOFF && now >= in->restart_at_ms) {
                        if (instance_spawn(s, in) == 0) {
                                in->restarts += s->rolling != i;
                                s->restarts_total += s->rolling != i;
                        } else {
                                int d = sup_backoff_on_exit(&in->backoff, now, -1);
                                in->state = d < 0 ? SUP_STATE_FAILED : SUP_STATE_BACKOFF;
                                in->restart_at_ms = now + (d < 0 ? 0 : d);
                        }
                }
                int up = s->gw && in->pidfd >= 0 ? dsv_gateway_instance_is_up(s->gw, in->gw_id) : 0;
                if (in->state == SUP_STATE_STARTING && up == 1)
                        instance_on_ready(s, in);
                else if (in->state == SUP_STATE_STARTING && now - in->started_ms > STARTUP_TIMEOUT_MS) {
                        slog(3, "Instance %s: not ready after %d s, killing it", in->name, STARTUP_TIMEOUT_MS / 1000);
                        syscall(SYS_pidfd_send_signal, in->pidfd, SIGKILL, NULL, 0);
                        in->started_ms = now;
                }
                if (in->state == SUP_STATE_READY && up == 1)
                        in->term_at_ms = now; /* last seen healthy */
                else if (in->state == SUP_STATE_READY && now - in->term_at_ms > UNHEALTHY_KILL_MS) {
                        slog(3, "Instance %s: no healthy answer for %d s, killing it", in->name, UNHEALTHY_KILL_MS / 1000);
                        syscall(SYS_pidfd_send_signal, in->pidfd, SIGKILL, NULL, 0);
                        in->term_at_ms = now;
                }
        }
        if (!s->stopping)
                rolling_step(s);
        if (s->stopping && now >= s->stop_kill_at_ms)
                for (int i = 0; i < s->n; i++)
                        if (s->inst[i].pidfd >= 0) {
                                slog(4, "Instance %s: still running after the grace period, killing it",
                                     s->inst[i].name);
                                syscall(SYS_pidfd_send_signal, s->inst[i].pidfd, SIGKILL, NULL, 0);
                        }

        int ready = n_in_state(s, SUP_STATE_READY), failed = n_in_state(s, SUP_STATE_FAILED);
        if (!s->stopping && s->n > 0 && failed == s->n) {
                s->all_failed = true;
                begin_stop(s, "every instance failed");
        }
        char status[256];
        snprintf(status, sizeof status, "STATUS=%s%d/%d instances ready, %" PRIu64 " restarts%s, http://%s:%d",
                 s->stopping ? "stopping: " : "", ready, s->n, s->restarts_total, failed ? ", some failed" : "",
                 s->cfg.host, s->gw_port);
        if (!s->ready_sent && !s->stopping && ready == s->n) {
                char msg[300];
                s->ready_sent = true;
                slog(6, "All %d instances ready in %" PRId64 " ms; HTTP on %s:%d", s->n, now - s->started_ms,
                     s->cfg.host, s->gw_port);
                snprintf(msg, sizeof msg, "READY=1\n%s", status);
                dsv_notify(msg);
                snprintf(s->last_status, sizeof s->last_status, "%s", status);
        } else if (strcmp(status, s->last_status) != 0) {
                snprintf(s->last_status, sizeof s->last_status, "%s", status);
                dsv_notify(status);
        }
        /* Healthy: the loop runs and not every instance has given up. Pinged one tick
         * early so the gap stays within WATCHDOG_USEC/2. */
        int64_t wd_ms = (int64_t)(s->watchdog_usec / 2000) - TICK_MS;
        if (s->watchdog_usec && failed < s->n && now - s->last_watchdog_ms >= (wd_ms > TICK_MS ? wd_ms : TICK_MS)) {
                dsv_notify("WATCHDOG=1");
                s->last_watchdog_ms = now;
        }
        if (now - s->last_perf_ms >= 1000) {
                s->last_perf_ms = now;
                perf_refresh(s);
                metrics_refresh(s);
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

/* ---- setup -------------------------------------------------------------------------- */

static int setup_placement(struct sup *s) {
        int r = dsv_topo_load(DSV_TOPO_SOURCE_SYSTEM, NULL, &s->topo);
        if (r < 0) {
                slog(3, "Failed to read the topology: %s", strerror(-r));
                return r;
        }
        struct dsv_policy_place_request req = {
                .n_instances = s->cfg.n_instances,
                .threads_per_instance = s->cfg.threads_per_instance,
                .housekeeping = s->cfg.no_housekeeping ? DSV_POLICY_HOUSEKEEPING_NONE : DSV_POLICY_HOUSEKEEPING_AUTO};
        if ((r = dsv_policy_place_instances(&s->topo, &req, &s->plan)) < 0) {
                slog(3, "Failed to place %d instances: %s", s->cfg.n_instances, strerror(-r));
                return r;
        }
        if (s->plan.n_instances > DSV_GATEWAY_MAX_INSTANCES) {
                slog(3, "%d instances: the gateway takes at most %d", s->plan.n_instances, DSV_GATEWAY_MAX_INSTANCES);
                return -E2BIG;
        }
        for (int i = 0; i < s->plan.n_warnings; i++)
                slog(4, "Placement: %s", s->plan.warnings[i]);
        /* CPUs no instance uses: the supervisor's, gateway's and kernel's. */
        static bool used[DSV_TOPOLOGY_MAX_PUS];
        memset(used, 0, sizeof used);
        s->n = s->plan.n_instances;
        for (int i = 0; i < s->n; i++) {
                int cpus[DSV_TOPOLOGY_MAX_PUS];
                int n = dsv_policy_instance_cpus(&s->topo, &s->plan.instances[i], cpus, DSV_TOPOLOGY_MAX_PUS);
                if (n < 0)
                        return n;
                for (int c = 0; c < n; c++)
                        for (int p = 0; p < s->topo.n_pus; p++)
                                if (s->topo.pus[p] == cpus[c])
                                        used[p] = true;
                struct sup_instance *in = &s->inst[i];
                memset(in, 0, sizeof *in);
                in->index = i;
                snprintf(in->name, sizeof in->name, "%d", i);
                in->node_os = s->plan.instances[i].mem_node_os;
                in->n_threads = s->plan.instances[i].n_threads;
                in->pidfd = -1;
                in->gw_id = -1;
                in->ready_ms = -1;
                in->exited_ms = -1;
                in->last_exit_status = -1;
                in->ctxsw_invol_per_s = in->migrations_per_s = -1;
                snprintf(in->sched, sizeof in->sched, "SCHED_OTHER");
                snprintf(in->cg_path, sizeof in->cg_path, "(none)");
                if ((r = dsv_policy_cpulist_format(cpus, (size_t)n, in->cpus, sizeof in->cpus)) < 0)
                        return r;
                CPU_ZERO(&in->cpu_set);
                for (int c = 0; c < n; c++)
                        if (cpus[c] < CPU_SETSIZE)
                                CPU_SET(cpus[c], &in->cpu_set);
                if (strlen(s->runtime_dir) > 80) { /* sun_path holds 108 bytes */
                        slog(3, "Runtime directory '%s' is too long for socket paths", s->runtime_dir);
                        return -ENAMETOOLONG;
                }
                snprintf(in->url, sizeof in->url, "ipc://%.80s/worker-%d.sock", s->runtime_dir, i);
                sup_backoff_init(&in->backoff, s->cfg.restart_backoff_min_ms, s->cfg.restart_backoff_max_ms,
                                 s->cfg.restart_limit, s->cfg.restart_window_ms);
        }
        s->n_free_cpus = 0;
        cpu_set_t free_set;
        CPU_ZERO(&free_set);
        for (int p = 0; p < s->topo.n_pus; p++)
                if (!used[p] && s->topo.pus[p] < CPU_SETSIZE) {
                        s->n_free_cpus++;
                        CPU_SET(s->topo.pus[p], &free_set);
                }
        /* The supervisor and the gateway's threads (started later, they inherit this)
         * stay on the CPUs no instance uses, when there are any. Never real-time. */
        if (s->n_free_cpus > 0 && sched_setaffinity(0, sizeof free_set, &free_set) < 0)
                slog(4, "Failed to keep the supervisor on the housekeeping CPUs: %m, ignoring");
        if (sched_getscheduler(0) != SCHED_OTHER) {
                struct sched_param sp = {0};
                slog(4, "The supervisor was started with a real-time policy; switching it to SCHED_OTHER");
                sched_setscheduler(0, SCHED_OTHER, &sp);
        }
        return 0;
}

/* Removes instance groups a killed supervisor left behind in dir: "dsvisor-<pid>-worker-<i>"
 * whose supervisor is gone. rmdir fails on a group that still has tasks, so nothing
 * running is touched; the workers of a supervisor killed a moment ago may still be
 * exiting (PR_SET_PDEATHSIG), so an EBUSY is retried for up to 2 s in all, not given up
 * at once (that left empty groups behind). */
static void remove_stale_groups(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return;
        int64_t deadline = mono_ms() + 2000;
        struct dirent *de;
        while ((de = readdir(d))) {
                int pid, idx;
                char tail;
                if (sscanf(de->d_name, "dsvisor-%d-worker-%d%c", &pid, &idx, &tail) != 2 || pid <= 0)
                        continue;
                if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
                        continue;
                char path[1024];
                snprintf(path, sizeof path, "%.500s/%.400s", dir, de->d_name);
                int r;
                while ((r = rmdir(path) < 0 ? -errno : 0) == -EBUSY && mono_ms() < deadline)
                        usleep(20000);
                if (r == 0)
                        slog(6, "Removed cgroup '%s' left by supervisor %d, which is gone", path, pid);
                else if (r != -ENOENT)
                        slog(4, "Failed to remove cgroup '%s' left by supervisor %d: %s, ignoring", path, pid,
                             strerror(-r));
        }
        closedir(d);
}

/* Undoes what setup_cgroups changed in our own groups (after the instance groups are
 * gone): the parent levels it made, the controllers it enabled, the supervisor leaf. */
static void restore_cgroups(struct sup *s) {
        if (!s->cg_host)
                return;
        char why[1024];
        int r = dsv_cgroup_host_restore(s->cg_host, why, sizeof why);
        if (r < 0)
                slog(4, "Cgroups not fully restored (%s): %s, ignoring", strerror(-r), why);
}

static int setup_cgroups(struct sup *s) {
        struct dsv_cgroup_config cc = {.parent = s->cfg.cgroup_parent};
        int r = dsv_cgroup_host_new(&cc, &s->cg_host);
        if (r == 0 && s->cfg.rt_priority > 0 && s->cfg.cgroup_parent[0]) {
                /* FIFO workers need RT runtime in every v1 cpu group on their path: the
                 * parent levels get what the instances get together (see
                 * instance_create_cgroup). host_new writes nothing; make it again. */
                cc.parent_rt_runtime_us = own_rt_runtime_us(s) / (uint64_t)(s->n + 1) * (uint64_t)s->n;
                dsv_cgroup_host_free(s->cg_host);
                s->cg_host = NULL;
                r = dsv_cgroup_host_new(&cc, &s->cg_host);
        }
        if (r == 0)
                r = dsv_cgroup_host_delegate(s->cg_host);
        if (r < 0) {
                snprintf(s->cg_note, sizeof s->cg_note, "none: %s", strerror(-r));
                restore_cgroups(s);
                dsv_cgroup_host_free(s->cg_host);
                s->cg_host = NULL;
                if (s->cfg.cgroup_parent[0]) {
                        /* Asked for explicitly: running without them would hide it. */
                        slog(3, "Failed to set up the instance cgroups below --cgroup-parent '%s': %s",
                             s->cfg.cgroup_parent, strerror(-r));
                        return r;
                }
                slog(4, "No cgroups for the instances (%s): no limit is in effect, ignoring", strerror(-r));
                return 0;
        }
        struct dsv_cgroup_host_info info;
        if (dsv_cgroup_host_info(s->cg_host, &info) == 0) {
                if (info.v2_own[0])
                        remove_stale_groups(info.v2_own);
                if (info.v2_parent[0] && strcmp(info.v2_parent, info.v2_own) != 0)
                        remove_stale_groups(info.v2_parent);
                for (int b = 0; b < 4; b++)
                        if (info.v1_mounted & (1u << b)) {
                                remove_stale_groups(info.v1_own[b]);
                                if (strcmp(info.v1_parent[b], info.v1_own[b]) != 0)
                                        remove_stale_groups(info.v1_parent[b]);
                        }
                if (s->cfg.cgroup_parent[0]) {
                        char where[2048] = "";
                        size_t len = 0;
                        if (info.v2_parent[0])
                                len += (size_t)snprintf(where, sizeof where, "%.500s", info.v2_parent);
                        for (int b = 0; b < 4 && len < sizeof where; b++)
                                if (info.v1_mounted & (1u << b))
                                        len += (size_t)snprintf(where + len, sizeof where - len, "%s%.400s",
                                                                len ? ", " : "", info.v1_parent[b]);
                        slog(6, "Instance cgroups below --cgroup-parent: %s", where);
                }
        }
        return 0;
}

static int setup_gateway(struct sup *s) {
        struct dsv_gateway_config gc;
        dsv_gateway_config_init(&gc);
        gc.listen_host = s->cfg.host;
        gc.port = (uint16_t)s->cfg.port;
        gc.model = s->model_id;
        gc.health_interval_ms = HEALTH_INTERVAL_MS;
        gc.admit.max_queue_per_instance = (uint32_t)s->cfg.max_queue;
        gc.max_connections = (unsigned)s->cfg.max_connections;
        int r = dsv_gateway_new(&gc, &s->gw);
        if (r < 0) {
                slog(3, "Failed to create the gateway: %s", strerror(-r));
                return r;
        }
        dsv_gateway_set_metrics_hook(s->gw, metrics_hook, s);
        for (int i = 0; i < s->n; i++) {
                struct dsv_gateway_instance_config ic = {.name = s->inst[i].name, .numa_node = s->inst[i].node_os,
                                                         .url = s->inst[i].url, .ready = false};
                r = dsv_gateway_instance_add(s->gw, &ic);
                if (r < 0) {
                        slog(3, "Failed to add instance %d to the gateway: %s", i, strerror(-r));
                        return r;
                }
                s->inst[i].gw_id = r;
        }
        if ((r = dsv_gateway_start(s->gw)) < 0) {
                slog(3, "Failed to listen on %s:%d: %s", s->cfg.host, s->cfg.port, strerror(-r));
                return r;
        }
        s->gw_port = dsv_gateway_port(s->gw);
        slog(6, "HTTP gateway on http://%s:%d (model '%s')", s->cfg.host, s->gw_port, s->model_id);
        return 0;
}

static int setup_paths(struct sup *s) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n < 0)
                return -errno;
        exe[n] = 0;
        snprintf(s->exe_dir, sizeof s->exe_dir, "%s", dirname(exe));
        if (s->cfg.worker[0])
                snprintf(s->worker_path, sizeof s->worker_path, "%s", s->cfg.worker);
        else
                snprintf(s->worker_path, sizeof s->worker_path, "%.4000s/dsvisor-worker", s->exe_dir);
        if (access(s->worker_path, X_OK) < 0) {
                int r = -errno;
                slog(3, "Worker binary '%s' is not executable: %s (set --worker)", s->worker_path, strerror(-r));
                return r;
        }
        int r;
        if (s->cfg.runtime_dir[0]) {
                if (mkdir(s->cfg.runtime_dir, 0700) < 0 && errno != EEXIST)
                        return -errno;
                setenv("DSV_RUNTIME_DIR", s->cfg.runtime_dir, 1);
        }
        if ((r = dsv_ipc_runtime_dir(s->runtime_dir, sizeof s->runtime_dir)) < 0) {
                slog(3, "Failed to set up the private runtime directory: %s", strerror(-r));
                return r;
        }
        if ((r = sup_control_path(s->runtime_dir, s->control_path, sizeof s->control_path)) < 0)
                return r;
        s->control_fd = sup_control_listen(s->control_path);
        if (s->control_fd == -EADDRINUSE) {
                slog(3, "Another dsvisor is running with runtime directory '%s'", s->runtime_dir);
                return -EADDRINUSE;
        }
        if (s->control_fd < 0) {
                slog(3, "Failed to listen on '%s': %s", s->control_path, strerror(-s->control_fd));
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

static void teardown(struct sup *s) {
        dsv_gateway_free(s->gw);
        s->gw = NULL;
        for (int i = 0; i < s->n; i++) {
                struct sup_instance *in = &s->inst[i];
                if (in->pidfd >= 0) {
                        syscall(SYS_pidfd_send_signal, in->pidfd, SIGKILL, NULL, 0);
                        siginfo_t si;
                        waitid((idtype_t)P_PIDFD, (id_t)in->pidfd, &si, WEXITED);
                        close(in->pidfd);
                        in->pidfd = -1;
                }
                if (in->cg) {
                        int r = dsv_cgroup_instance_stop(in->cg, 5000);
                        if (r < 0)
                                slog(3, "Failed to remove cgroup '%s': %s", in->cg_path, strerror(-r));
                        dsv_cgroup_instance_free(in->cg);
                        in->cg = NULL;
                }
                dsv_perfctr_free(in->perf);
                in->perf = NULL;
        }
        restore_cgroups(s);
        dsv_cgroup_host_free(s->cg_host);
        s->cg_host = NULL;
        for (int k = 0; k < s->n_weights; k++)
                dsv_hugepages_image_done(&s->weights[k].img);
        if (s->control_fd >= 0) {
                close(s->control_fd);
                unlink(s->control_path);
        }
        free(s->metrics_text);
        s->metrics_text = NULL;
}

int dsv_cmd_start(int argc, char **argv) {
        struct sup *s = &S;
        char err[512];
        memset(s, 0, sizeof *s);
        s->control_fd = s->sig_fd = -1;
        s->rolling = -1;
        s->started_ms = mono_ms();
        pthread_mutex_init(&s->metrics_lock, NULL);
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
        if (r == 1) {
                sup_start_usage(stdout);
                return 0;
        }
        if (r < 0) {
                fprintf(stderr, "dsvisor start: %s\n", err);
                sup_start_usage(stderr);
                return 2;
        }
        char pidbuf[16];
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)getpid());
        setenv("DSV_PARENT_PID", pidbuf, 1); /* the worker checks it after PR_SET_PDEATHSIG */

        if ((r = setup_signals(s)) < 0 || (r = setup_paths(s)) < 0 || (r = setup_placement(s)) < 0)
                goto out;
        if (s->cfg.rt_priority > 0) {
                char why[256];
                if ((r = sup_rt_preflight(NULL, s->cfg.rt_priority, s->n_free_cpus, why, sizeof why)) < 0) {
                        slog(3, "--rt-priority %d refused: %s", s->cfg.rt_priority, why);
                        goto out;
                }
                slog(6, "Compute threads will run SCHED_FIFO %d on instance CPUs only; %d CPU%s stay free of FIFO "
                        "threads (note: cpu.max and cpu.weight do not bound FIFO threads)",
                     s->cfg.rt_priority, s->n_free_cpus, s->n_free_cpus == 1 ? "" : "s");
        }
        if ((r = resolve_model(s)) < 0 || (r = load_weights(s)) < 0)
                goto out;
        if ((r = setup_cgroups(s)) < 0 || (r = setup_gateway(s)) < 0)
                goto out;
        uint64_t wd;
        if (dsv_notify_watchdog_usec(&wd) > 0)
                s->watchdog_usec = wd;
        for (int i = 0; i < s->n; i++) {
                if ((r = instance_create_cgroup(s, &s->inst[i])) < 0 || (r = instance_spawn(s, &s->inst[i])) < 0)
                        goto out;
        }

        while (!(s->stopping && all_stopped(s))) {
                struct pollfd pfd[2 + DSV_GATEWAY_MAX_INSTANCES];
                int map[2 + DSV_GATEWAY_MAX_INSTANCES];
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
                        slog(3, "poll failed: %s", strerror(-r));
                        break;
                }
                for (int k = 2; n > 0 && k < np; k++)
                        if (pfd[k].revents)
                                instance_reap(s, &s->inst[map[k]]);
                if (n > 0 && (pfd[0].revents & POLLIN)) {
                        struct signalfd_siginfo si;
                        while (read(s->sig_fd, &si, sizeof si) == sizeof si) {
                                if (si.ssi_signo == SIGHUP)
                                        begin_reload(s);
                                else
                                        begin_stop(s, si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
                        }
                }
                if (n > 0 && (pfd[1].revents & POLLIN))
                        control_accept(s);
                tick(s);
                r = 0;
        }
        if (r == 0 && s->all_failed)
                r = -ELOOP;
out:
        teardown(s);
        if (r == 0)
                slog(6, "Stopped: no worker and no cgroup left");
        return r < 0 ? 1 : 0;
}
