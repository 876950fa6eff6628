/* dsv_platform.h — the OS behind plain structs: topology (hwloc), cgroups (libcgroup and
 * dsvisor's own cgroupfs writer), hugepages. Every function returns 0 (or a count) on
 * success and a negative errno on failure; foreign error codes are converted here, once.
 * Nothing in this library logs: the caller (dsvisor) reports.
 *
 *     static struct dsv_topology topo;
 *     int r = dsv_topo_load(DSV_TOPO_SOURCE_SYNTHETIC, "pack:2 numa:2 core:16 pu:2", &topo);
 *     if (r < 0)
 *             return log_errno(r, "Failed to read the topology: %m");
 *     // topo.n_nodes == 4, topo.n_cores == 64, topo.n_pus == 128
 *
 * Ownership: results are written into caller-owned structs; no function here keeps a
 * pointer to its arguments or returns memory the caller must free, unless its comment
 * says so.
 */
#ifndef DSV_PLATFORM_H
#define DSV_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>

#include "dsv_topology.h"

/* ---- clock (clock.c) ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ns and in ms: every time dsvisor's supervisor and this library keep
 * is on this clock. */
int64_t dsv_clock_now_ns(void);
int64_t dsv_clock_now_ms(void);

/* ---- topology (topo.c, hwloc) ------------------------------------------------------ */

enum dsv_topo_source {
        DSV_TOPO_SOURCE_SYSTEM,    /* this machine as given to this process; arg NULL.
                                    * hwloc's test seams apply: HWLOC_SYNTHETIC="numa:2 core:4"
                                    * or HWLOC_XMLFILE=x.xml in the environment replace it */
        DSV_TOPO_SOURCE_SYNTHETIC, /* arg: hwloc synthetic string, "pack:2 numa:2 core:16 pu:2" */
        DSV_TOPO_SOURCE_XML,       /* arg: path of an XML file written by `lstopo x.xml` */
        DSV_TOPO_SOURCE_COUNT
};

const char *dsv_topo_source_to_string(enum dsv_topo_source src);

/* Reads a topology into *ret (written only on success): NUMA nodes in logical order,
 * each node's cores, each core's PUs (OS numbers). For SYSTEM, only the set given to
 * this process (dsv_topo_load_given() below). A machine without Core objects gets one core per PU. A core inside the cpusets
 * of several nodes (DDR and HBM nodes of one socket) is listed under the first; such
 * memory-only nodes get no cores.
 * Returns 0; -EINVAL for a bad source, NULL or unparsable arg; -ENOENT when the XML file
 * is missing; -E2BIG when the machine exceeds DSV_TOPOLOGY_MAX_*; another -errno from
 * hwloc. */
int dsv_topo_load(enum dsv_topo_source src, const char *arg, struct dsv_topology *ret);

/* ---- the given set (topo.c, given_set.c) -------------------------------------------- */
/* Under taskset, systemd's AllowedCPUs=/CPUAffinity=, or a Kubernetes pod's cpuset,
 * dsvisor is handed part of the machine: that part is the machine it places on.
 *
 *     struct dsv_given_set g;
 *     r = dsv_topo_load_given(DSV_TOPO_SOURCE_SYSTEM, NULL, &(struct dsv_given_source){.own = true}, &topo, &g);
 *     // topo lists only the given CPUs and memory nodes; g says what was left out */

/* The cpuset of a cgroup, as its effective files say. */
struct dsv_given_cgroup {
        int version;     /* 1 or 2 */
        char group[512]; /* the group directory whose files were read */
        char cpus[1024]; /* cpulist: cpuset.cpus.effective (v1 cpuset.effective_cpus) */
        char mems[256];  /* nodelist: cpuset.mems.effective (v1 cpuset.effective_mems) */
};

/* Reads the cpuset of this process's own group (from proc_self_cgroup, NULL:
 * "/proc/self/cgroup") in the tree at root: the v1 cpuset hierarchy if there is one,
 * else the v2 tree (root itself, or root/unified on hybrid hosts), where a group
 * without the cpuset controller has the cpuset of its nearest ancestor with it.
 * Returns 0; -ENOENT when no cgroup restricts the cpuset; another -errno on a read
 * error. *ret is written on success. */
int dsv_given_cgroup_read(const char *root, const char *proc_self_cgroup, struct dsv_given_cgroup *ret);

/* Where the given set comes from. */
struct dsv_given_source {
        bool own;                     /* this process: its CPU binding (sched_getaffinity) and
                                       * memory policy (get_mempolicy), through hwloc; only
                                       * for DSV_TOPO_SOURCE_SYSTEM */
        const char *affinity;         /* a cpulist standing in for the CPU binding (tests: what
                                       * "taskset -c LIST" would give); NULL: none */
        const char *cgroup_root;      /* the cgroup tree whose own-group cpuset applies; NULL:
                                       * none, or "/sys/fs/cgroup" when own */
        const char *proc_self_cgroup; /* NULL: "/proc/self/cgroup" */
};

/* What the given set is and what of the machine it leaves out (cpulists, "" for none). */
struct dsv_given_set {
        char cpus[1024];          /* CPUs the topology lists */
        char mems[256];           /* memory nodes it lists */
        char cpus_left_out[1024]; /* the machine's other CPUs, including those of nodes
                                   * whose memory is not given */
        char mems_left_out[256];  /* the machine's other memory nodes, including those
                                   * left without a given CPU */
        char binding[1024];       /* the CPU binding that applied; "" when none did */
        struct dsv_given_cgroup cgroup; /* version 0 when no cgroup cpuset applied */
};

/* dsv_topo_load() restricted to the given set: the CPUs allowed by hwloc (the host's
 * own cgroup, for SYSTEM), the binding and the cgroup of *given, and the memory nodes
 * allowed by the same. CPUs whose node's memory is not given are left out with it, and
 * so are nodes without a given CPU (restricting, not by default: a memory-only node of
 * the unrestricted machine stays).
 * given NULL: no restriction (dsv_topo_load() of SYNTHETIC and XML); dsv_topo_load() of
 * SYSTEM is this with {.own = true}. *ret_given (may be NULL) describes the set.
 * Returns as dsv_topo_load(); -ENODEV when the given set holds no CPU of the machine;
 * -EINVAL for an unparsable affinity list; the error of an explicit cgroup_root that
 * cannot be read. */
int dsv_topo_load_given(enum dsv_topo_source src, const char *arg, const struct dsv_given_source *given,
                        struct dsv_topology *ret, struct dsv_given_set *ret_given);

/* ---- cgroups (cgroup*.c) ----------------------------------------------------------- */

#include <sys/types.h>

/* One cgroup per worker instance, created below dsvisor's own cgroup in every hierarchy
 * that can carry one of its limits, and nowhere else.
 *
 *     struct dsv_cgroup_config cfg = {0};            // /sys/fs/cgroup, /proc/self/cgroup
 *     struct dsv_cgroup_host *h;
 *     r = dsv_cgroup_host_new(&cfg, &h);
 *     r = dsv_cgroup_host_delegate(h);               // v2: self to <own>/supervisor, +ctrl
 *     struct dsv_cgroup_limits lim = { .cpus = "0-15", .mems = "0", .cpu_weight = 100,
 *                                      .memory_max_bytes = 64ULL << 30 };
 *     struct dsv_cgroup_report rep;
 *     struct dsv_cgroup_instance *w;
 *     r = dsv_cgroup_instance_new(h, "worker-0", &lim, &rep, &w);
 *     dsv_cgroup_report_format(&rep, buf, sizeof buf);   // log it, show it in status
 *     r = dsv_cgroup_instance_spawn(w, "/usr/bin/dsvisor-worker", argv, envp, &pid, &pidfd);
 *     ...
 *     r = dsv_cgroup_instance_stop(w, 5000);         // kill all, wait until empty, rmdir
 *     dsv_cgroup_instance_free(w);
 *     dsv_cgroup_host_free(h);
 *
 * Modes: unified (pure v2: every controller in one tree, writes go through dsvisor's
 * own openat() writer rooted at the delegated directory, never through libcgroup, whose
 * 2.0.2 cgroup_create_cgroup writes "+ctrl" into every ancestor); hybrid (v1 controllers
 * through libcgroup, plus the v2 tree at <root>/unified for spawning, cgroup.kill and
 * whatever controllers it holds); legacy (v1 only).
 * Ownership: a host owns its directory fds; an instance borrows its host and must be
 * freed first. Objects are not thread-safe; use one from one thread at a time. */

enum dsv_cgroup_mode {
        DSV_CGROUP_MODE_DETECT,  /* config only: statfs() the root */
        DSV_CGROUP_MODE_LEGACY,  /* tmpfs root, v1 hierarchies only */
        DSV_CGROUP_MODE_HYBRID,  /* tmpfs root, v1 hierarchies + cgroup2 at <root>/unified */
        DSV_CGROUP_MODE_UNIFIED, /* cgroup2 at the root */
        DSV_CGROUP_MODE_COUNT
};
const char *dsv_cgroup_mode_to_string(enum dsv_cgroup_mode mode);

/* statfs(root): CGROUP2_SUPER_MAGIC is unified; TMPFS_MAGIC is hybrid when
 * <root>/unified is a cgroup2 mount, else legacy. -ENOMEDIUM for any other filesystem. */
int dsv_cgroup_mode_detect(const char *root, enum dsv_cgroup_mode *ret_mode);

/* Controller bits (dsv_cgroup_config.controllers, dsv_cgroup_host_info). */
enum {
        DSV_CGROUP_CTRL_CPU = 1u << 0,
        DSV_CGROUP_CTRL_CPUSET = 1u << 1,
        DSV_CGROUP_CTRL_MEMORY = 1u << 2,
        DSV_CGROUP_CTRL_HUGETLB = 1u << 3,
        DSV_CGROUP_CTRL_ALL = (1u << 4) - 1,
};

struct dsv_cgroup_config {
        const char *root;             /* cgroupfs root; NULL: "/sys/fs/cgroup" */
        const char *proc_self_cgroup; /* NULL: "/proc/self/cgroup" (tests inject a file) */
        enum dsv_cgroup_mode mode;    /* DETECT, or forced (a fake v2 tree is UNIFIED) */
        const char *supervisor_leaf;  /* v2 leaf dsvisor moves into; NULL: "supervisor" */
        unsigned controllers;         /* DSV_CGROUP_CTRL_* to use; 0: all */
        const char *parent;           /* where the instance groups go, relative to the own
                                       * group in every hierarchy: "inference/prod" puts
                                       * them in <own>/inference/prod/ (NULL or "": <own>).
                                       * See dsv_cgroup_parent_check() for what is refused */
        uint64_t parent_rt_runtime_us; /* v1 cpu.rt_runtime_us for each parent level
                                        * dsvisor creates (RT workers need runtime along
                                        * the whole path); 0: none */
        /* Test seam for fake v2 trees (NULL on real hosts): on_mkdir runs after each
         * mkdir of a group with the parent's fd and the new name, to lay out the files
         * the kernel would create (a negative return fails the creation); on_rmdir runs
         * before each rmdir, to delete them again. */
        int (*on_mkdir)(int parent_fd, const char *name, void *user);
        int (*on_rmdir)(int parent_fd, const char *name, void *user);
        void *fake_user;
};

/* Where each controller lives for this process (dsv_cgroup_host_info). */
struct dsv_cgroup_host_info {
        enum dsv_cgroup_mode mode;
        char v2_own[512];         /* own v2 group, absolute path; "" when there is no v2 tree */
        unsigned v2_available;    /* DSV_CGROUP_CTRL_* listed in own cgroup.controllers */
        unsigned v2_enabled;      /* ... enabled in own cgroup.subtree_control */
        unsigned v1_mounted;      /* DSV_CGROUP_CTRL_* with a v1 hierarchy in use */
        char v1_own[4][512];      /* own v1 group per controller bit index, absolute path */
        char v2_parent[512];      /* where the instance groups go: v2_own[/parent]; "" without v2 */
        char v1_parent[4][512];   /* ... per v1 controller: v1_own[b][/parent] */
};

#define DSV_CGROUP_PARENT_MAX_LEVELS 16

/* 0 when rel is a usable parent subtree: NULL or "" (none), or names joined by '/'.
 * -EINVAL, with a static reason in *ret_why (may be NULL), for an absolute path, an
 * empty component ("a//b", "a/"), "." or "..", a component of NAME_MAX or more, over
 * 255 characters or over DSV_CGROUP_PARENT_MAX_LEVELS levels: it must stay inside the
 * delegated subtree. */
int dsv_cgroup_parent_check(const char *rel, const char **ret_why);

struct dsv_cgroup_host;
struct dsv_cgroup_instance;

/* Detects the mode, finds this process's own group in each hierarchy (from
 * cfg->proc_self_cgroup) and opens them. v1 hierarchies come from libcgroup's mount
 * table and are used only when they lie below cfg->root. *ret is written on success;
 * free it with dsv_cgroup_host_free(). -ENOMEDIUM when root is not a cgroup filesystem;
 * -ENOENT when this process has no group in any usable hierarchy. */
int dsv_cgroup_host_new(const struct dsv_cgroup_config *cfg, struct dsv_cgroup_host **ret);
void dsv_cgroup_host_free(struct dsv_cgroup_host *h);
int dsv_cgroup_host_info(const struct dsv_cgroup_host *h, struct dsv_cgroup_host_info *ret);

/* v2 delegation, per the no-internal-processes rule: unless the own group is the
 * hierarchy root (exempt), moves this process (all its threads) into
 * <own>/<supervisor_leaf>, then enables each configured controller that
 * <own>/cgroup.controllers lists and <own>/cgroup.subtree_control does not enable yet.
 * Then creates the parent subtree (cfg->parent) in every hierarchy, level by level,
 * enabling the same controllers in each v2 level (instance_new does this too when
 * delegate was not called). Writes nothing above <own>. Everything it creates or
 * enables is recorded for dsv_cgroup_host_restore(). -EBUSY when other processes remain
 * in <own> or in an existing parent level. */
int dsv_cgroup_host_delegate(struct dsv_cgroup_host *h);

/* Undoes delegate, after every instance was stopped: removes the parent levels it
 * created (deepest first; levels that existed stay), disables in each subtree_control
 * only the controllers it enabled there itself, moves this process back from the leaf
 * into <own> and removes the leaf if it made it. The rule for a controller it enabled:
 * it is disabled only when no child group is left below that directory (other than the
 * leaf), since a group someone else made meanwhile — another dsvisor that found the
 * controller on and so did not record it — may use it; then it stays on and the reason
 * is given. 0 when all was undone; else the first -errno (-EBUSY for "still in use"),
 * with every step left undone described in why (may be NULL). Idempotent. */
int dsv_cgroup_host_restore(struct dsv_cgroup_host *h, char *why, size_t why_size);

/* Requested limits; zero/NULL fields are not requested. */
struct dsv_cgroup_limits {
        const char *cpus;            /* cpuset.cpus list, "0-15" */
        const char *mems;            /* cpuset.mems list, "0" */
        unsigned cpu_weight;         /* cpu.weight 1..10000 (v1: cpu.shares = w*1024/100) */
        uint64_t cpu_max_quota_us;   /* cpu.max quota (v1: cpu.cfs_quota_us) */
        uint64_t cpu_max_period_us;  /* cpu.max period; 0: 100000 */
        uint64_t cpu_rt_runtime_us;  /* v1 cpu.rt_runtime_us, for SCHED_FIFO workers */
        uint64_t memory_high_bytes;  /* memory.high (v1: memory.soft_limit_in_bytes) */
        uint64_t memory_max_bytes;   /* memory.max (v1: memory.limit_in_bytes) */
        bool memory_oom_group;       /* memory.oom.group = 1 (v2 only) */
        uint64_t hugetlb_2mb_max_bytes; /* hugetlb.2MB.max (v1: hugetlb.2MB.limit_in_bytes) */
};

enum dsv_cgroup_limit {
        DSV_CGROUP_LIMIT_CPUS,
        DSV_CGROUP_LIMIT_MEMS,
        DSV_CGROUP_LIMIT_CPU_WEIGHT,
        DSV_CGROUP_LIMIT_CPU_MAX,
        DSV_CGROUP_LIMIT_CPU_RT_RUNTIME,
        DSV_CGROUP_LIMIT_MEMORY_HIGH,
        DSV_CGROUP_LIMIT_MEMORY_MAX,
        DSV_CGROUP_LIMIT_MEMORY_OOM_GROUP,
        DSV_CGROUP_LIMIT_HUGETLB_2MB_MAX,
        DSV_CGROUP_LIMIT_COUNT
};
/* The v2 name of a limit: "cpuset.cpus", "cpu.max", "hugetlb.2MB.max"... */
const char *dsv_cgroup_limit_to_string(enum dsv_cgroup_limit limit);

/* What happened to each limit. An applied limit was written and read back as requested
 * (cpusets: the *.effective file matches). reason says why one was not applied, or
 * which substitute carries it ("memory controller is v1 here: memory.limit_in_bytes"). */
struct dsv_cgroup_report_entry {
        bool requested;
        bool applied;
        char value[64];   /* the requested value, as written */
        char file[64];    /* "<hierarchy>:<file>" written, "" when none */
        char reason[160];
};
struct dsv_cgroup_report {
        struct dsv_cgroup_report_entry e[DSV_CGROUP_LIMIT_COUNT]; /* by enum dsv_cgroup_limit */
};

/* One line per requested limit: "cpu.max=50000 100000 applied (v1 cpu:cpu.cfs_quota_us; ...)".
 * Returns the length it needed (snprintf rules). */
int dsv_cgroup_report_format(const struct dsv_cgroup_report *rep, char *buf, size_t size);
/* Number of requested limits that are not in effect. */
int dsv_cgroup_report_n_missing(const struct dsv_cgroup_report *rep);

/* Creates <own>/<name> in the v2 tree and in each v1 hierarchy in use, and applies lim
 * before any task can join (cpusets first; a v1 cpuset group gets its parent's cpus and
 * mems when none are requested, since an empty cpuset admits no task). name is one path
 * component. *ret_report says what is in effect. A limit the kernel refuses is reported,
 * not fatal; failing to create a group is (-EEXIST when it exists already: a previous
 * run did not clean up). *ret is written on success. */
int dsv_cgroup_instance_new(struct dsv_cgroup_host *h, const char *name,
                            const struct dsv_cgroup_limits *lim,
                            struct dsv_cgroup_report *ret_report,
                            struct dsv_cgroup_instance **ret);

/* Directory fd of the instance's v2 group (owned by the instance), or -ENOENT. */
int dsv_cgroup_instance_v2_fd(const struct dsv_cgroup_instance *inst);

/* Spawns path with argv/envp (envp NULL: environ) inside the instance's groups; see
 * dsv_cgroup_spawn(). */
int dsv_cgroup_instance_spawn(const struct dsv_cgroup_instance *inst, const char *path,
                              char *const argv[], char *const envp[], pid_t *ret_pid,
                              int *ret_pidfd);

/* Spawns path as a child that is in its groups before its first instruction of the new
 * program: clone3(CLONE_INTO_CGROUP|CLONE_PIDFD) into v2_fd (-1: none), and the child
 * writes itself into each fd of v1_procs_fds (open cgroup.procs files) before execve.
 * Without clone3 (ENOSYS) the child also joins v2_fd's cgroup.procs itself and the pidfd
 * comes from pidfd_open(). The child's signal mask is cleared, and it makes only
 * async-signal-safe calls, so this is safe in a threaded process. *ret_pidfd (O_CLOEXEC)
 * is the caller's; reap the child with waitid(P_PIDFD). Returns -errno of the failed
 * join or execve, after reaping the child. */
int dsv_cgroup_spawn(int v2_fd, const int *v1_procs_fds, size_t n_v1, const char *path,
                     char *const argv[], char *const envp[], pid_t *ret_pid, int *ret_pidfd);

/* Kills every process of the instance and removes its groups: cgroup.kill (v2; kernels
 * without it, and every v1 group: SIGKILL each pid in cgroup.procs until it is empty),
 * waits for "populated 0" in cgroup.events (v1: empty cgroup.procs), then rmdir.
 * Spawned children become zombies, which no longer count; reap them through their
 * pidfds. -ETIMEDOUT when a group is still populated after timeout_ms. */
int dsv_cgroup_instance_stop(struct dsv_cgroup_instance *inst, int timeout_ms);

/* Frees the handle (closes its fds); leaves the groups as they are. NULL is a no-op. */
void dsv_cgroup_instance_free(struct dsv_cgroup_instance *inst);

/* What dsvisor knows of its instance groups, decided here once: the group name scheme,
 * where each group lives (with dsv_cgroup_instance_new's report: which limits are in
 * effect), the CPU throttling counters of the hierarchy that carries the cpu controller,
 * and the RT runtime of the supervisor's own v1 cpu group. */

/* The instance group name: "dsvisor-<supervisor_pid>-worker-<index>". */
int dsv_cgroup_instance_name(pid_t supervisor_pid, int index, char *buf, size_t size);

/* Every group of the instance: "v2 <path>, v1 cpu <path>, v1 cpuset <path>, ...". */
int dsv_cgroup_instance_describe(const struct dsv_cgroup_instance *inst, char *buf, size_t size);

struct dsv_cgroup_cpu_stat {
        uint64_t throttled_periods; /* CFS periods in which the group was throttled */
        double throttled_seconds;   /* time it spent throttled */
};
/* From cpu.stat of the group in the hierarchy that carries cpu for the instance (v1
 * cpu,cpuacct or v2). -ENOENT without a cpu controller, -ENODATA when the file has
 * neither counter. */
int dsv_cgroup_instance_cpu_stat(const struct dsv_cgroup_instance *inst, struct dsv_cgroup_cpu_stat *ret);

/* Where the instance groups go, every hierarchy: "<v2 parent>, <v1 cpu parent>, ...". */
int dsv_cgroup_host_describe_parent(const struct dsv_cgroup_host *h, char *buf, size_t size);

/* cpu.rt_runtime_us of the supervisor's own v1 cpu group; -ENOENT without one. */
int dsv_cgroup_host_rt_runtime_us(const struct dsv_cgroup_host *h, uint64_t *ret);

/* An instance group a killed supervisor left: removed (result 0) or why not. */
struct dsv_cgroup_stale {
        char path[1024];
        pid_t supervisor_pid; /* the gone supervisor named in the group's name */
        int result;           /* 0 removed, else -errno of the rmdir */
};
/* Removes empty instance groups a killed supervisor left in the own groups and the
 * parent levels of every hierarchy (their supervisor pid is gone); a group still
 * holding tasks is left alone, an EBUSY retried for up to 2 s. Each one is written to
 * ret[0..max) (removed or not; the rest are dropped). Returns how many were written. */
int dsv_cgroup_host_remove_stale(const struct dsv_cgroup_host *h, struct dsv_cgroup_stale *ret, size_t max);

/* ---- hugepages (hugepages.c) ------------------------------------------------------- */
/* The shared weight image: one memfd per NUMA node, backed by 2 MiB pages from the
 * node's hugetlb pool when they are there, filled once through a mapping (write(2) is
 * unsupported on hugetlbfs), then sealed and mapped read-only by the workers.
 *
 *     struct dsv_hugepages_image img;
 *     r = dsv_hugepages_image_init(&img, "weights-node0", len, 0, DSV_HUGEPAGES_MODE_REQUIRE, NULL);
 *     if (r == -ENOMEM)   // fewer free 2 MiB pages on node 0 than len needs: nothing allocated
 *             return log_errno(r, "Not enough HugePages on node 0: %m");
 *     memcpy(img.addr, weights, len);
 *     r = dsv_hugepages_image_seal(&img);   // drops the writable mapping
 *     ...pass img.fd to the workers (inherit, SCM_RIGHTS, FDSTORE=1)...
 *     dsv_hugepages_image_done(&img);
 *
 * Ownership: the image (its fd and mapping) lives in caller storage until _done(). */

#define DSV_HUGEPAGE_2MB_BYTES (2ull << 20)

/* Free pages in node's 2 MiB pool, from
 * <sysfs_root>/devices/system/node/node<N>/hugepages/hugepages-2048kB/free_hugepages
 * (sysfs_root NULL: "/sys"); node -1 sums every node. Pages reserved by a mapping but
 * not yet faulted still count as free here. */
int dsv_hugepages_free_on_node(const char *sysfs_root, int node, uint64_t *ret_free_pages);

enum dsv_hugepages_mode {
        DSV_HUGEPAGES_MODE_AUTO,    /* hugetlb when the node has enough free pages, else normal */
        DSV_HUGEPAGES_MODE_REQUIRE, /* hugetlb or -ENOMEM, checked before anything is allocated */
        DSV_HUGEPAGES_MODE_OFF,     /* normal shmem pages */
        DSV_HUGEPAGES_MODE_COUNT
};
const char *dsv_hugepages_mode_to_string(enum dsv_hugepages_mode mode);

struct dsv_hugepages_image {
        int fd;            /* the memfd (O_CLOEXEC, sealable) */
        void *addr;        /* writable MAP_SHARED mapping of size_bytes; NULL once sealed */
        size_t len_bytes;  /* as requested */
        size_t size_bytes; /* len_bytes rounded up to 2 MiB (both modes, so sizes agree) */
        bool hugetlb;      /* backed by MFD_HUGETLB|MFD_HUGE_2MB pages */
        size_t thp_bytes;  /* shmem: bytes in transparent 2 MiB pages (ShmemPmdMapped of the
                            * filling mapping at init; reclaim may split them later); 0 for
                            * hugetlb */
        int node;          /* pages bound (mbind MPOL_BIND) and faulted on this node; -1: any */
        unsigned seals;    /* F_SEAL_* in effect (after _seal) */
        char note[160];    /* why normal pages were used; which seals the kernel refused */
};

/* Creates the memfd named name of len_bytes, rounded up to 2 MiB; with node ≥ 0 binds
 * the range to node before faulting, then faults every page in
 * (MADV_POPULATE_WRITE, so a shortage is an error here and not a SIGBUS later).
 * REQUIRE checks the node's free pages first and returns -ENOMEM without allocating.
 * *img is written on success only. */
int dsv_hugepages_image_init(struct dsv_hugepages_image *img, const char *name, size_t len_bytes,
                             int node, enum dsv_hugepages_mode mode, const char *sysfs_root);

/* Copies the first len_bytes of the file at path into the writable mapping (pread, so
 * hugetlbfs's missing write(2) does not matter). -EIO if the file is shorter. */
int dsv_hugepages_image_fill(struct dsv_hugepages_image *img, const char *path);

/* Unmaps the writable mapping and adds F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_WRITE; seals
 * the kernel refuses are left out and named in img->note. Returns 0 when at least
 * SHRINK and GROW hold, else -errno. */
int dsv_hugepages_image_seal(struct dsv_hugepages_image *img);

/* Counts the image's pages (2 MiB, or base pages without hugetlb) that are not on
 * node, asking move_pages(2) through a temporary read-only mapping: 0 means all of them
 * are there. For the check before READY=1. Returns the count or -errno. */
int dsv_hugepages_image_pages_off_node(const struct dsv_hugepages_image *img, int node);

/* Sets img->thp_bytes for a shmem image: the bytes the kernel holds in transparent 2 MiB
 * pages, read as ShmemPmdMapped through a temporary read-only mapping that asks for them
 * (nothing is allocated); 0 for hugetlb. For an image re-attached from the fd store;
 * _init measures its own. 0 or -errno. */
int dsv_hugepages_image_measure_thp(struct dsv_hugepages_image *img);

/* Unmaps and closes, leaving fd -1 and addr NULL; NULL or a done image is a no-op. */
void dsv_hugepages_image_done(struct dsv_hugepages_image *img);

/* ---- host checks for `dsvisor doctor` (doctor.c) ----------------------------------- */
/* The host settings that steady P99 depends on, read through a root
 * prefix (tests point it at fake /proc and /sys trees) and judged against what dsvisor
 * wants. Pure reading: nothing is changed, nothing is printed.
 *
 *     int cpus[] = {1, 2, 3, 8, 9, 10, 11}, hk[] = {0}, nodes[] = {0, 1};
 *     struct dsv_doctor_request req = { .root = "/", .instance_cpus = cpus, .n_instance_cpus = 7,
 *                                       .housekeeping_cpus = hk, .n_housekeeping_cpus = 1,
 *                                       .instance_nodes = nodes, .n_instance_nodes = 2,
 *                                       .model_bytes = 40ull << 30 };
 *     static struct dsv_doctor_report rep;
 *     r = dsv_doctor_run(&req, &rep);
 *     for (int i = 0; i < rep.n_checks; i++)
 *             printf("%s %s: %s\n", dsv_doctor_status_to_string(rep.checks[i].status),
 *                    rep.checks[i].name, rep.checks[i].found);
 *     exit_code = dsv_doctor_status_exit_code(dsv_doctor_report_worst(&rep));   // 0/1/2
 *
 * A file the host does not have (no cpufreq in a VM, no node directory) makes its check
 * UNKNOWN, never an error. Ownership: the report is caller storage, pointer-free. */

enum dsv_doctor_status {
        DSV_DOCTOR_OK,      /* as dsvisor wants it */
        DSV_DOCTOR_UNKNOWN, /* could not be read here (missing file); does not change the exit code */
        DSV_DOCTOR_WARN,    /* works, but costs latency or isolation; the reason says how */
        DSV_DOCTOR_FAIL,    /* dsvisor cannot run as planned */
        DSV_DOCTOR_STATUS_COUNT
};
/* "ok", "unknown", "warn", "fail". */
const char *dsv_doctor_status_to_string(enum dsv_doctor_status status);
/* The exit code of `dsvisor doctor` for a worst status: 0 ok or unknown, 1 warn, 2 fail. */
int dsv_doctor_status_exit_code(enum dsv_doctor_status status);

#define DSV_DOCTOR_MAX_CHECKS 48

struct dsv_doctor_check {
        char name[32];         /* "thp-enabled", "hugepages-node1" */
        enum dsv_doctor_status status;
        char found[160];       /* the value read, "always", "950000/1000000 us (95%)" */
        char recommended[160]; /* the value dsvisor wants, "madvise" */
        char reason[320];      /* one line: why it matters for dsvisor */
};

struct dsv_doctor_report {
        int n_checks;
        int n_dropped; /* checks beyond DSV_DOCTOR_MAX_CHECKS */
        struct dsv_doctor_check checks[DSV_DOCTOR_MAX_CHECKS];
};

struct dsv_doctor_request {
        const char *root;              /* prefix of /proc, /sys and /boot; NULL or "/": this host */
        const int *instance_cpus;      /* OS CPU numbers the plan gives to instances (union) */
        size_t n_instance_cpus;        /* 0: CPU-specific checks look at every CPU */
        const int *housekeeping_cpus;  /* CPUs left for the supervisor, IRQs and the rest */
        size_t n_housekeeping_cpus;
        const int *instance_nodes;     /* OS numbers of the NUMA nodes that host instances */
        size_t n_instance_nodes;
        uint64_t model_bytes;          /* weight image size; 0: unknown (HugePages unknown) */
        pid_t pid;                     /* whose limits, capabilities and cgroup are checked:
                                        * 0 this process, else a running dsvisor's */
};

/* Runs every host check into *ret (written on success): cgroup mode and own
 * controllers, cpufreq driver and governor, THP enabled/defrag, 2 MiB HugePages per
 * instance node (one shared weight image per node: ceil(model_bytes / 2 MiB) pages
 * each), RT throttling, RT group scheduling, NUMA balancing, RLIMIT_MEMLOCK and
 * RLIMIT_RTPRIO (from <root>/proc/<pid or self>/limits and CapEff), IRQs whose
 * affinity overlaps instance CPUs, SMT and the CPU's SIMD flags. -EINVAL on bad
 * arguments; a missing or malformed host file is UNKNOWN inside the report. */
int dsv_doctor_run(const struct dsv_doctor_request *req, struct dsv_doctor_report *ret);

/* Appends one check (for checks the caller makes itself, e.g. the engine's kernel
 * level). Strings are truncated to their fields. -ENOSPC when the report is full
 * (counted in n_dropped). */
int dsv_doctor_report_add(struct dsv_doctor_report *rep, const char *name, enum dsv_doctor_status status,
                          const char *found, const char *recommended, const char *reason);

/* The worst status in the report (OK < UNKNOWN < WARN < FAIL). */
enum dsv_doctor_status dsv_doctor_report_worst(const struct dsv_doctor_report *rep);

/* ---- per-instance counters (perfctr.c, perf_event_open) ----------------------------- */
/* What each worker costs the CPU and what its neighbours cost it.
 * Software events (task clock, context switches, page faults, CPU migrations) exist on
 * every kernel; hardware events (cycles, instructions, LLC load misses, dTLB load
 * misses) only where a PMU is exposed — a VM often has none, and those events are
 * reported as unsupported, never faked. perf has one combined context-switch event, so
 * voluntary and involuntary switches (the noisy-neighbour signal: the thread was
 * runnable and something else ran) come from each thread's
 * /proc/<pid>/task/<tid>/status.
 *
 *     struct dsv_perfctr *pc;
 *     r = dsv_perfctr_open_threads(worker_pid, NULL, 0, &pc);  // every thread it has now
 *     char why[256];
 *     if (dsv_perfctr_unsupported_format(pc, why, sizeof why) > 0)
 *             log_info("perf events unsupported here, not exported: %s", why);   // once
 *     struct dsv_perfctr_sample prev, cur;
 *     r = dsv_perfctr_read(pc, &prev);
 *     ...one interval later...
 *     r = dsv_perfctr_read(pc, &cur);
 *     struct dsv_perfctr_rates rates;
 *     r = dsv_perfctr_rates_compute(&prev, &cur, &rates);   // involuntary switches/s ...
 *     struct dsv_perfctr_series s = { .instance = "0", .numa_node = 0, .sample = &cur };
 *     n = dsv_perfctr_format_prometheus(&s, 1, buf, sizeof buf);
 *     dsv_perfctr_free(pc);
 *
 * Threads: perf counts a thread only if its counters were opened on it (no inherit, so
 * group reads stay one read(2)); open after the worker has started its pool. In cgroup
 * mode every thread that runs in the group on the given CPUs counts.
 * Ownership: the counter set owns its fds (O_CLOEXEC); one thread at a time per set. */

enum dsv_perf_event {
        DSV_PERF_TASK_CLOCK,        /* CPU time on the threads, ns (software) */
        DSV_PERF_CONTEXT_SWITCHES,  /* all switches (software) */
        DSV_PERF_CTXSW_VOLUNTARY,   /* blocked or yielded (procfs voluntary_ctxt_switches) */
        DSV_PERF_CTXSW_INVOLUNTARY, /* preempted while runnable (procfs nonvoluntary_ctxt_switches) */
        DSV_PERF_PAGE_FAULTS,       /* software */
        DSV_PERF_CPU_MIGRATIONS,    /* software */
        DSV_PERF_CYCLES,            /* hardware */
        DSV_PERF_INSTRUCTIONS,      /* hardware */
        DSV_PERF_LLC_LOAD_MISSES,   /* hardware cache: LL, read, miss */
        DSV_PERF_DTLB_LOAD_MISSES,  /* hardware cache: dTLB, read, miss */
        DSV_PERF_EVENT_COUNT
};
/* Metric stem of an event: "task_clock", "involuntary_context_switches", ... */
const char *dsv_perf_event_to_string(enum dsv_perf_event ev);

struct dsv_perfctr;

/* Opens the counters on threads tids[0..n) of process pid; tids NULL: every thread
 * pid has now (/proc/<pid>/task). Each thread gets a software group and a hardware
 * group (read_format GROUP, so a read is one syscall per group). An event the kernel
 * refuses on the first thread with ENOENT, EOPNOTSUPP, EINVAL or ENODEV is marked
 * unsupported and left out for all threads; a thread that exits meanwhile is skipped.
 * -ESRCH when no thread could be opened; -EACCES/-EPERM without the privilege
 * (perf_event_paranoid). *ret is written on success. */
int dsv_perfctr_open_threads(pid_t pid, const pid_t *tids, size_t n, struct dsv_perfctr **ret);

/* Opens the counters for every task of the cgroup (directory fd cgroup_fd, v2 or a v1
 * perf_event hierarchy) on each CPU of cpus[0..n_cpus) (PERF_FLAG_PID_CGROUP counts
 * per CPU). Voluntary/involuntary switches come from the group's cgroup.threads (v1:
 * tasks). The fd is borrowed during the call only. */
int dsv_perfctr_open_cgroup(int cgroup_fd, const int *cpus, size_t n_cpus, struct dsv_perfctr **ret);

/* Bit (1u << event) per event counted by this set. */
unsigned dsv_perfctr_supported(const struct dsv_perfctr *pc);

/* "cycles (No such file or directory), instructions (...)": the unsupported events and
 * the kernel's reason, for one log line. Returns the length (snprintf rules); 0 when
 * everything is supported. */
int dsv_perfctr_unsupported_format(const struct dsv_perfctr *pc, char *buf, size_t size);

struct dsv_perfctr_sample {
        uint64_t time_ns;                     /* CLOCK_MONOTONIC when read */
        unsigned valid;                       /* bit per event with a value in this sample */
        uint64_t value[DSV_PERF_EVENT_COUNT]; /* totals since open (task clock in ns);
                                               * hardware counts scaled by enabled/running
                                               * when the PMU multiplexed them */
};

/* Reads every counter; totals are monotonic (an exited thread keeps its last counts).
 * An event is valid when it is supported and was counted (a multiplexed hardware
 * group that never ran is not). *ret is written on success. */
int dsv_perfctr_read(struct dsv_perfctr *pc, struct dsv_perfctr_sample *ret);

/* Closes every fd. NULL is a no-op. */
void dsv_perfctr_free(struct dsv_perfctr *pc);

/* Per-second rates over one interval (`dsvisor status` shows
 * involuntary switches/s and migrations/s per instance). */
struct dsv_perfctr_rates {
        double interval_s;
        unsigned valid;                       /* valid in both samples and not decreasing */
        double per_s[DSV_PERF_EVENT_COUNT];   /* task clock: CPUs busy (seconds per second) */
};
/* rate = (cur - prev) / (cur.time - prev.time). -EINVAL when cur is not later than
 * prev. An event that decreased (a restarted counter set) is left invalid. */
int dsv_perfctr_rates_compute(const struct dsv_perfctr_sample *prev, const struct dsv_perfctr_sample *cur,
                              struct dsv_perfctr_rates *ret);

struct dsv_perfctr_series {
        const char *instance;                  /* label instance="..." */
        int numa_node;                         /* label numa_node="..." */
        const struct dsv_perfctr_sample *sample;
};
/* Prometheus text format (0.0.4): per event valid in at least one series, one
 * "# HELP" and "# TYPE ... counter" and a line per series that has it:
 *     dsvisor_perf_involuntary_context_switches_total{instance="0",numa_node="0"} 1234
 * Task clock is dsvisor_perf_task_clock_seconds_total. Events valid nowhere are
 * omitted. Label values are escaped (\\, \", \n). Returns the length needed (snprintf
 * rules: output truncated, NUL-terminated, when size is too small); -EINVAL on bad
 * input. */
int dsv_perfctr_format_prometheus(const struct dsv_perfctr_series *series, size_t n, char *buf, size_t size);

/* ---- systemd notify (notify.c, libsystemd sd-daemon) -------------------------------- */
/* Readiness, status line, watchdog and the file-descriptor store. Works
 * unchanged without systemd: with no $NOTIFY_SOCKET every call returns 0 and does nothing.
 *
 *     uint64_t wd_usec;
 *     if (dsv_notify_watchdog_usec(&wd_usec) > 0)  // ping every wd_usec / 2
 *     dsv_notify("READY=1\nSTATUS=2/2 instances ready");
 *     dsv_notify("WATCHDOG=1");
 *     dsv_notify_with_fds("FDSTORE=1\nFDNAME=weights-node0", &memfd, 1);
 *     char **names;
 *     int n = dsv_notify_listen_fds(&names);      // fds 3..3+n-1 with their FDNAMEs
 *     dsv_notify_names_free(names);
 *
 * Returns > 0 when the message was sent, 0 without a notify socket, -errno on failure. */
int dsv_notify(const char *state);
/* The same with file descriptors attached (SCM_RIGHTS), e.g. FDSTORE=1. */
int dsv_notify_with_fds(const char *state, const int *fds, size_t n_fds);
/* > 0 when systemd expects WATCHDOG=1 pings (*ret_usec: WatchdogSec in µs), 0 when not. */
int dsv_notify_watchdog_usec(uint64_t *ret_usec);
/* Number of fds passed in (LISTEN_FDS: sockets and the fd store's contents), starting
 * at fd 3, and their names in *ret_names (a NULL-terminated array owned by the caller:
 * free with dsv_notify_names_free). Unsets LISTEN_* so children do not inherit them. */
int dsv_notify_listen_fds(char ***ret_names);
void dsv_notify_names_free(char **names);

#endif
