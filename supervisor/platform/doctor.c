/* doctor.c — the host settings steady P99 depends on, read and judged.
 *
 * Every file is read through req->root, so tests run the same code over fake /proc and
 * /sys trees. Sources, per check:
 * /proc/self below stands for /proc/<req->pid> when a running dsvisor is checked.
 *   cgroup mode       the filesystem mounted at /sys/fs/cgroup in <root>/proc/self/mounts
 *                     (cgroup2: unified; tmpfs plus cgroup2 at .../unified: hybrid),
 *                     the same test systemd's CGROUP_DELEGATION.md makes with statfs();
 *   controllers       own group from <root>/proc/self/cgroup ("0::" line), its
 *                     cgroup.controllers; v1 controllers from the cgroup mounts' options;
 *   cpufreq           cpu<N>/cpufreq/scaling_{driver,governor} (Documentation/admin-guide/pm/cpufreq.rst);
 *   THP               /sys/kernel/mm/transparent_hugepage/{enabled,defrag,shmem_enabled} and
 *                     hugepages-2048kB/shmem_enabled, bracketed word (transhuge.rst);
 *   HugePages         node<N>/hugepages/hugepages-2048kB/{nr,free}_hugepages and node<N>/meminfo (hugetlbpage.rst);
 *   RT throttling     /proc/sys/kernel/sched_rt_{runtime,period}_us (sched-rt-group.rst);
 *   RT group sched    cpu.rt_runtime_us in the v1 cpu hierarchy, else rt_group_sched= on
 *                     /proc/cmdline (6.16+), else CONFIG_RT_GROUP_SCHED in /boot/config-<release>;
 *   NUMA balancing    /proc/sys/kernel/numa_balancing;
 *   limits            "Max locked memory" and "Max realtime priority" in /proc/self/limits,
 *                     CapEff in /proc/self/status (CAP_IPC_LOCK and CAP_SYS_NICE lift them);
 *   IRQs              /proc/irq/<N>/effective_affinity_list (else smp_affinity_list), IRQs
 *                     with a zero count in /proc/interrupts ignored (core-api/irq/irq-affinity.rst);
 *   SMT               /sys/devices/system/cpu/smt/control;
 *   CPU flags         the first "flags" line of /proc/cpuinfo. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values and reasons go into fixed-size report fields: cutting a long one short is
 * intended, so GCC's truncation warnings do not apply to this file. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#include "cgroup-internal.h"
#include "dsv_platform.h"

#define CAP_IPC_LOCK_BIT 14 /* linux/capability.h */
#define CAP_SYS_NICE_BIT 23

const char *dsv_doctor_status_to_string(enum dsv_doctor_status status) {
        static const char *const names[DSV_DOCTOR_STATUS_COUNT] = {
                [DSV_DOCTOR_OK] = "ok",
                [DSV_DOCTOR_UNKNOWN] = "unknown",
                [DSV_DOCTOR_WARN] = "warn",
                [DSV_DOCTOR_FAIL] = "fail",
        };
        return (unsigned)status < DSV_DOCTOR_STATUS_COUNT ? names[status] : "invalid";
}

int dsv_doctor_status_exit_code(enum dsv_doctor_status status) {
        switch (status) {
        case DSV_DOCTOR_WARN:
                return 1;
        case DSV_DOCTOR_FAIL:
                return 2;
        default:
                return 0;
        }
}

int dsv_doctor_report_add(struct dsv_doctor_report *rep, const char *name, enum dsv_doctor_status status,
                          const char *found, const char *recommended, const char *reason) {
        if (!rep || !name || (unsigned)status >= DSV_DOCTOR_STATUS_COUNT)
                return -EINVAL;
        if (rep->n_checks >= DSV_DOCTOR_MAX_CHECKS) {
                rep->n_dropped++;
                return -ENOSPC;
        }
        struct dsv_doctor_check *c = &rep->checks[rep->n_checks++];
        snprintf(c->name, sizeof c->name, "%s", name);
        c->status = status;
        snprintf(c->found, sizeof c->found, "%s", found ? found : "");
        snprintf(c->recommended, sizeof c->recommended, "%s", recommended ? recommended : "");
        snprintf(c->reason, sizeof c->reason, "%s", reason ? reason : "");
        return 0;
}

enum dsv_doctor_status dsv_doctor_report_worst(const struct dsv_doctor_report *rep) {
        enum dsv_doctor_status worst = DSV_DOCTOR_OK;
        for (int i = 0; rep && i < rep->n_checks; i++)
                if (rep->checks[i].status > worst)
                        worst = rep->checks[i].status;
        return worst;
}

/* ---- reading files below the root ---------------------------------------------------- */

struct ctx {
        const struct dsv_doctor_request *req;
        const char *prefix; /* root without its trailing '/'; "" for the host */
        struct dsv_doctor_report *rep;
        struct dsv__cpulist instance_cpus;
        int n_host_nodes;   /* node<N> directories in sysfs; 0 when unknown */
        char proc[16];      /* "self", or the pid of the process whose view is checked */
};

static int add(struct ctx *c, const char *name, enum dsv_doctor_status st, const char *found,
               const char *recommended, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int add(struct ctx *c, const char *name, enum dsv_doctor_status st, const char *found,
               const char *recommended, const char *fmt, ...) {
        char reason[sizeof c->rep->checks[0].reason];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(reason, sizeof reason, fmt, ap);
        va_end(ap);
        int r = dsv_doctor_report_add(c->rep, name, st, found, recommended, reason);
        return r == -ENOSPC ? 0 : r; /* counted in n_dropped */
}

static int host_path(const struct ctx *c, char *buf, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int host_path(const struct ctx *c, char *buf, size_t size, const char *fmt, ...) {
        int n = snprintf(buf, size, "%s", c->prefix);
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, size - (size_t)n, fmt, ap);
        va_end(ap);
        if (m < 0 || (size_t)m >= size - (size_t)n)
                return -ENAMETOOLONG;
        return 0;
}

/* First line of the host file at rel (printf format), trailing whitespace removed. */
static int read_line(const struct ctx *c, char *buf, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int read_line(const struct ctx *c, char *buf, size_t size, const char *fmt, ...) {
        char rel[512], path[1024];
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(rel, sizeof rel, fmt, ap);
        va_end(ap);
        if (m < 0 || (size_t)m >= sizeof rel)
                return -ENAMETOOLONG;
        int r = host_path(c, path, sizeof path, "%s", rel);
        if (r < 0)
                return r;
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        if (!fgets(buf, (int)size, f))
                buf[0] = '\0';
        fclose(f);
        size_t n = strlen(buf);
        while (n > 0 && isspace((unsigned char)buf[n - 1]))
                buf[--n] = '\0';
        return 0;
}

static int parse_ll(const char *s, long long *ret) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s)
                return -EBADMSG;
        while (isspace((unsigned char)*end))
                end++;
        if (*end)
                return -EBADMSG;
        *ret = v;
        return 0;
}

static int read_ll(const struct ctx *c, long long *ret, const char *rel) {
        char buf[64];
        int r = read_line(c, buf, sizeof buf, "%s", rel);
        return r < 0 ? r : parse_ll(buf, ret);
}

/* Appends to a fixed buffer, leaving "..." when it is full. */
static void appendf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t size, const char *fmt, ...) {
        size_t n = strlen(buf);
        if (n + 1 >= size)
                return;
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, size - n, fmt, ap);
        va_end(ap);
        if (m >= 0 && (size_t)m >= size - n && size >= 4)
                memcpy(buf + size - 4, "...", 4);
}

static bool cpulist_has(const struct dsv__cpulist *s, int cpu) {
        return cpu >= 0 && cpu < DSV__CPULIST_BITS && (s->bits[cpu / 64] >> (cpu % 64) & 1);
}

static bool cpulist_empty(const struct dsv__cpulist *s) {
        for (size_t i = 0; i < DSV__CPULIST_BITS / 64; i++)
                if (s->bits[i])
                        return false;
        return true;
}

/* Writes a cpulist string ("0-3,8") of a set. */
static void cpulist_format(const struct dsv__cpulist *s, char *buf, size_t size) {
        buf[0] = '\0';
        for (int i = 0; i < DSV__CPULIST_BITS; i++) {
                if (!cpulist_has(s, i))
                        continue;
                int j = i;
                while (j + 1 < DSV__CPULIST_BITS && cpulist_has(s, j + 1))
                        j++;
                appendf(buf, size, buf[0] ? ",%d" : "%d", i);
                if (j > i)
                        appendf(buf, size, "-%d", j);
                i = j;
        }
}

static void cpus_to_list(const int *cpus, size_t n, struct dsv__cpulist *ret) {
        memset(ret, 0, sizeof *ret);
        for (size_t i = 0; i < n; i++)
                if (cpus[i] >= 0 && cpus[i] < DSV__CPULIST_BITS)
                        ret->bits[cpus[i] / 64] |= 1ull << (cpus[i] % 64);
}

/* The bracketed choice of a sysfs selector file: "always [madvise] never" → "madvise". */
static int selected_word(const char *line, char *buf, size_t size) {
        const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (!b || (size_t)(b - a - 1) >= size)
                return -EBADMSG;
        memcpy(buf, a + 1, (size_t)(b - a - 1));
        buf[b - a - 1] = '\0';
        return 0;
}

/* ---- cgroups ---------------------------------------------------------------------- */

/* The cgroup mounts of the checked tree; found is false when its mounts file is
 * unreadable. */
struct mounts {
        bool found;
        struct dsv__cgroup_mounts cg;
};

static void read_mounts(const struct ctx *c, struct mounts *m) {
        char path[1024];
        memset(m, 0, sizeof *m);
        if (host_path(c, path, sizeof path, "/proc/%s/mounts", c->proc) < 0)
                return;
        m->found = dsv__cgroup_mounts_read(path, "/sys/fs/cgroup", &m->cg) == 0;
}

/* The controller names in bits, or "none". */
static void ctrl_names(unsigned bits, char *buf, size_t size) {
        dsv__cgroup_ctrl_list(bits, buf, size);
        if (!buf[0])
                snprintf(buf, size, "none");
}

static int check_cgroups(struct ctx *c, const struct mounts *m) {
        const char *want_mode = "unified (cgroup v2 only; systemd.unified_cgroup_hierarchy=1)";
        if (!m->found)
                return add(c, "cgroup-mode", DSV_DOCTOR_UNKNOWN, "/proc/self/mounts unreadable", want_mode,
                           "dsvisor isolates each instance in its own cgroup");
        enum dsv_cgroup_mode mode = m->cg.mode;
        int r;
        if (mode == DSV_CGROUP_MODE_DETECT)
                r = add(c, "cgroup-mode", DSV_DOCTOR_FAIL, "no cgroup filesystem at /sys/fs/cgroup", want_mode,
                        "without cgroups dsvisor cannot pin instances to their node's CPUs and memory");
        else if (mode == DSV_CGROUP_MODE_UNIFIED)
                r = add(c, "cgroup-mode", DSV_DOCTOR_OK, "unified", want_mode,
                        "one tree: CLONE_INTO_CGROUP spawns, cgroup.kill, delegation by systemd's Delegate=");
        else
                r = add(c, "cgroup-mode", DSV_DOCTOR_WARN, dsv_cgroup_mode_to_string(mode), want_mode,
                        "v1 hierarchies work through libcgroup but miss cgroup.kill and Delegate=; systemd "
                        "deprecated them in v256 and removed them in v258");
        if (r < 0 || mode == DSV_CGROUP_MODE_DETECT)
                return r;

        /* The controllers this process's own group can hand to instances. */
        const char *want = "cpu cpuset memory (hugetlb optional)";
        unsigned avail = 0;
        char own[512] = "", path[1024], list[512], found[160], names[64];
        if (mode != DSV_CGROUP_MODE_LEGACY) {
                if (host_path(c, path, sizeof path, "/proc/%s/cgroup", c->proc) < 0 ||
                    dsv__cgroup_own_path(path, NULL, own, sizeof own) < 0)
                        return add(c, "cgroup-controllers", DSV_DOCTOR_UNKNOWN, "no \"0::\" line in /proc/self/cgroup",
                                   want, "dsvisor creates instance groups below its own group");
                r = read_line(c, list, sizeof list, "%s%s/cgroup.controllers", m->cg.v2_dir,
                              strcmp(own, "/") == 0 ? "" : own);
                if (r < 0)
                        return add(c, "cgroup-controllers", DSV_DOCTOR_UNKNOWN, "own cgroup.controllers unreadable",
                                   want, "dsvisor creates instance groups below its own group");
                avail = dsv__cgroup_ctrl_bits(list);
        }
        if (mode != DSV_CGROUP_MODE_UNIFIED)
                avail |= m->cg.v1;
        ctrl_names(avail, names, sizeof names);
        snprintf(found, sizeof found, "%s in %s", names, own[0] ? own : "the v1 hierarchies");
        unsigned need = DSV_CGROUP_CTRL_CPU | DSV_CGROUP_CTRL_CPUSET | DSV_CGROUP_CTRL_MEMORY;
        if (!(avail & DSV_CGROUP_CTRL_CPUSET))
                return add(c, "cgroup-controllers", DSV_DOCTOR_FAIL, found, want,
                           "without cpuset instances cannot be held to their node's CPUs and memory; "
                           "run dsvisor as a unit with Delegate=cpu cpuset memory pids");
        if ((avail & need) != need)
                return add(c, "cgroup-controllers", DSV_DOCTOR_WARN, found, want,
                           "cpu gives instances their weights, memory their limits and OOM grouping; "
                           "run dsvisor as a unit with Delegate=cpu cpuset memory pids");
        return add(c, "cgroup-controllers", DSV_DOCTOR_OK, found, want,
                   "each instance gets its cpuset, CPU weight and memory limit (this process's group; "
                   "the service's comes from Delegate=)");
}

/* ---- CPU frequency ------------------------------------------------------------------ */

#define MAX_VALUES 8
struct tally {
        int n;
        char value[MAX_VALUES][32];
        struct dsv__cpulist cpus[MAX_VALUES];
};

static void tally_add(struct tally *t, const char *value, int cpu) {
        int i;
        for (i = 0; i < t->n; i++)
                if (strcmp(t->value[i], value) == 0)
                        break;
        if (i == t->n) {
                if (t->n == MAX_VALUES)
                        return;
                snprintf(t->value[t->n], sizeof t->value[0], "%s", value);
                memset(&t->cpus[t->n], 0, sizeof t->cpus[0]);
                t->n++;
        }
        t->cpus[i].bits[cpu / 64] |= 1ull << (cpu % 64);
}

static void tally_format(const struct tally *t, char *buf, size_t size) {
        buf[0] = '\0';
        for (int i = 0; i < t->n; i++) {
                char cpus[64];
                cpulist_format(&t->cpus[i], cpus, sizeof cpus);
                appendf(buf, size, "%s%s on CPUs %s", i ? "; " : "", t->value[i], cpus);
        }
}

/* The CPUs a per-CPU check looks at: the instance CPUs, else every CPU in sysfs. */
static void checked_cpus(const struct ctx *c, struct dsv__cpulist *ret) {
        if (!cpulist_empty(&c->instance_cpus)) {
                *ret = c->instance_cpus;
                return;
        }
        char buf[4096];
        memset(ret, 0, sizeof *ret);
        if (read_line(c, buf, sizeof buf, "/sys/devices/system/cpu/possible") == 0)
                dsv__cpulist_parse(buf, ret);
}

static int check_cpufreq(struct ctx *c) {
        struct dsv__cpulist cpus;
        struct tally drivers = {0}, governors = {0};
        struct dsv__cpulist missing;
        checked_cpus(c, &cpus);
        memset(&missing, 0, sizeof missing);
        for (int cpu = 0; cpu < DSV__CPULIST_BITS; cpu++) {
                char driver[32], governor[32];
                if (!cpulist_has(&cpus, cpu))
                        continue;
                if (read_line(c, driver, sizeof driver, "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_driver", cpu) < 0 ||
                    read_line(c, governor, sizeof governor, "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor", cpu) < 0) {
                        missing.bits[cpu / 64] |= 1ull << (cpu % 64);
                        continue;
                }
                tally_add(&drivers, driver, cpu);
                tally_add(&governors, governor, cpu);
        }
        const char *want_gov = "performance on every instance CPU";
        const char *why_gov = "other governors lower the clock between bursts, and decode steps are bursts: "
                              "each token then starts on a slow core";
        char found[160];
        int r;
        if (drivers.n == 0) {
                r = add(c, "cpufreq-driver", DSV_DOCTOR_UNKNOWN, "no cpufreq in sysfs", "any (intel_pstate, amd-pstate, acpi-cpufreq)",
                        "a VM or the firmware owns the clock; the host or BIOS power profile decides");
                return r < 0 ? r : add(c, "cpufreq-governor", DSV_DOCTOR_UNKNOWN, "no cpufreq in sysfs", want_gov, "%s", why_gov);
        }
        tally_format(&drivers, found, sizeof found);
        r = add(c, "cpufreq-driver", DSV_DOCTOR_OK, found, "any (intel_pstate, amd-pstate, acpi-cpufreq)",
                "the driver decides which governors exist");
        if (r < 0)
                return r;
        tally_format(&governors, found, sizeof found);
        if (!cpulist_empty(&missing)) {
                char list[64];
                cpulist_format(&missing, list, sizeof list);
                appendf(found, sizeof found, "; none on CPUs %s", list);
        }
        bool all_perf = governors.n == 1 && strcmp(governors.value[0], "performance") == 0 && cpulist_empty(&missing);
        return add(c, "cpufreq-governor", all_perf ? DSV_DOCTOR_OK : DSV_DOCTOR_WARN, found, want_gov, "%s", why_gov);
}

/* ---- transparent hugepages ---------------------------------------------------------- */

static int check_thp(struct ctx *c) {
        char line[256], word[32];
        int r = read_line(c, line, sizeof line, "/sys/kernel/mm/transparent_hugepage/enabled");
        if (r < 0 || selected_word(line, word, sizeof word) < 0)
                r = add(c, "thp-enabled", DSV_DOCTOR_UNKNOWN, r < 0 ? "missing" : line, "madvise",
                        "a kernel without THP: nothing to tune");
        else if (strcmp(word, "always") == 0)
                r = add(c, "thp-enabled", DSV_DOCTOR_WARN, word, "madvise",
                        "with always, khugepaged scans and collapses every process's memory and faults "
                        "may compact: latency spikes dsvisor cannot attribute; weights use hugetlb anyway");
        else if (strcmp(word, "never") == 0)
                r = add(c, "thp-enabled", DSV_DOCTOR_WARN, word, "madvise",
                        "with never, a model a worker maps from its file (dsvisor-worker --model PATH, "
                        "dsvisor-bench) gets 4 KiB pages: DeepSeek-V2-Lite decoded at 0.5-0.7 of "
                        "its speed on 2 MiB pages (bench/RESULTS.md)");
        else
                r = add(c, "thp-enabled", DSV_DOCTOR_OK, word, "madvise",
                        "only regions that ask (MADV_HUGEPAGE) get THP: a worker's mapping of a model file "
                        "asks; dsvisor start's weight image is a HugePages or a shmem memfd (thp-shmem)");
        if (r < 0)
                return r;
        r = read_line(c, line, sizeof line, "/sys/kernel/mm/transparent_hugepage/defrag");
        if (r < 0 || selected_word(line, word, sizeof word) < 0)
                r = add(c, "thp-defrag", DSV_DOCTOR_UNKNOWN, r < 0 ? "missing" : line, "madvise or defer+madvise",
                        "a kernel without THP: nothing to tune");
        else if (strcmp(word, "always") == 0)
                r = add(c, "thp-defrag", DSV_DOCTOR_WARN, word, "madvise or defer+madvise",
                        "always stalls any faulting thread in direct compaction until a huge page is free");
        else
                r = add(c, "thp-defrag", DSV_DOCTOR_OK, word, "madvise or defer+madvise",
                        "no thread outside MADV_HUGEPAGE regions waits for direct compaction");
        if (r < 0)
                return r;
        /* shmem: the 2 MiB size's own setting (6.11+) wins unless it is inherit, or the
         * global one is deny or force, which hold for every size (transhuge.rst) */
        char size_word[32] = "";
        if (read_line(c, line, sizeof line, "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled") >= 0)
                (void)selected_word(line, size_word, sizeof size_word);
        r = read_line(c, line, sizeof line, "/sys/kernel/mm/transparent_hugepage/shmem_enabled");
        if (r < 0 || selected_word(line, word, sizeof word) < 0)
                return add(c, "thp-shmem", DSV_DOCTOR_UNKNOWN, r < 0 ? "missing" : line, "advise",
                           "a kernel without shmem THP: the weight image gets 2 MiB pages from HugePages only");
        const char *in_effect = word;
        char found[96];
        if (size_word[0] && strcmp(size_word, "inherit") != 0 && strcmp(word, "deny") != 0 &&
            strcmp(word, "force") != 0) {
                in_effect = size_word;
                snprintf(found, sizeof found, "%s (hugepages-2048kB: %s)", word, size_word);
        } else {
                snprintf(found, sizeof found, "%s", word);
        }
        if (strcmp(in_effect, "never") == 0 || strcmp(in_effect, "deny") == 0)
                return add(c, "thp-shmem", DSV_DOCTOR_WARN, found, "advise",
                           "dsvisor start serves weights from a shmem memfd when HugePages are off or short "
                           "(--hugepages off, or auto without free pages): with %s every worker maps it in "
                           "4 KiB pages, about 2 MiB of page tables per GB of weights each (5.6 MB against "
                           "0.3 MB for a 2.8 GB image, bench/RESULTS.md)", in_effect);
        return add(c, "thp-shmem", DSV_DOCTOR_OK, found, "advise",
                   "the weight image in shmem (--hugepages off, or auto without free pages) asks for "
                   "2 MiB pages (MADV_HUGEPAGE) and gets them");
}

/* ---- HugePages per node -------------------------------------------------------------- */

static int check_hugepages(struct ctx *c) {
        uint64_t need = (c->req->model_bytes + DSV_HUGEPAGE_2MB_BYTES - 1) / DSV_HUGEPAGE_2MB_BYTES;
        for (size_t i = 0; i < c->req->n_instance_nodes; i++) {
                int node = c->req->instance_nodes[i];
                const char *dir = "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/%s";
                char name[32], found[160], want[160], line[256];
                long long total, freep;
                int r;
                snprintf(name, sizeof name, "hugepages-node%d", node);
                char nr_rel[128], free_rel[128];
                snprintf(nr_rel, sizeof nr_rel, dir, node, "nr_hugepages");
                snprintf(free_rel, sizeof free_rel, dir, node, "free_hugepages");
                if (read_ll(c, &total, nr_rel) < 0 || read_ll(c, &freep, free_rel) < 0) {
                        r = add(c, name, DSV_DOCTOR_UNKNOWN, "no 2 MiB pool in sysfs for this node",
                                need ? "a 2 MiB pool" : "--model or --model-bytes to compute",
                                "dsvisor keeps one weight image per node in its 2 MiB pool");
                        if (r < 0)
                                return r;
                        continue;
                }
                snprintf(found, sizeof found, "%lld free of %lld 2 MiB pages", freep, total);
                if (need == 0) {
                        r = add(c, name, DSV_DOCTOR_UNKNOWN, found, "--model or --model-bytes to compute",
                                "dsvisor keeps one weight image per node in its 2 MiB pool");
                        if (r < 0)
                                return r;
                        continue;
                }
                snprintf(want, sizeof want, ">= %" PRIu64 " free (%" PRIu64 " MiB of weights)", need,
                         c->req->model_bytes >> 20);
                /* node<N>/meminfo: "Node 0 MemTotal:       16384 kB" */
                unsigned long long mem_kb = 0;
                char path[1024];
                if (host_path(c, path, sizeof path, "/sys/devices/system/node/node%d/meminfo", node) == 0) {
                        FILE *f = fopen(path, "re");
                        while (f && fgets(line, sizeof line, f)) {
                                const char *p = strstr(line, "MemTotal:");
                                if (p && sscanf(p + 9, "%llu", &mem_kb) == 1)
                                        break;
                        }
                        if (f)
                                fclose(f);
                }
                if (mem_kb && (uint64_t)mem_kb * 1024 < c->req->model_bytes) {
                        appendf(found, sizeof found, "; node memory %llu MiB", mem_kb >> 10);
                        r = add(c, name, DSV_DOCTOR_FAIL, found, want,
                                "the weights do not fit in this node's memory: the instance would read them "
                                "across the interconnect or not load at all");
                } else if ((uint64_t)freep >= need) {
                        r = add(c, name, DSV_DOCTOR_OK, found, want,
                                "the node's weight image fits in reserved pages: no TLB pressure, no swap, "
                                "no fault-time shortage");
                } else if ((uint64_t)total >= need) {
                        r = add(c, name, DSV_DOCTOR_WARN, found, want,
                                "the pool is big enough but in use (a running dsvisor holds its images): "
                                "a second one would fall back to 4 KiB pages");
                } else {
                        r = add(c, name, DSV_DOCTOR_WARN, found, want,
                                "too few reserved pages: the image falls back to 4 KiB shmem pages (dTLB misses "
                                "on every weight read, pages not bound until faulted); reserve at boot");
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- scheduler ---------------------------------------------------------------------- */

static int check_rt_throttling(struct ctx *c) {
        long long runtime, period;
        const char *want = "950000/1000000 us (95%, the default)";
        if (read_ll(c, &runtime, "/proc/sys/kernel/sched_rt_runtime_us") < 0 ||
            read_ll(c, &period, "/proc/sys/kernel/sched_rt_period_us") < 0 || period <= 0)
                return add(c, "rt-throttling", DSV_DOCTOR_UNKNOWN, "sched_rt_{runtime,period}_us unreadable", want,
                           "the global guard on SCHED_FIFO time per CPU");
        char found[64];
        if (runtime < 0) {
                snprintf(found, sizeof found, "-1/%lld us (no limit)", period);
                return add(c, "rt-throttling", DSV_DOCTOR_WARN, found, want,
                           "no guard: a spinning SCHED_FIFO worker thread can starve kworkers and RCU on its "
                           "CPUs and hang the host");
        }
        snprintf(found, sizeof found, "%lld/%lld us (%lld%%)", runtime, period, runtime * 100 / period);
        if (runtime * 100 < period * 95)
                return add(c, "rt-throttling", DSV_DOCTOR_WARN, found, want,
                           "SCHED_FIFO workers are throttled for more than 5%% of each period: forced stalls "
                           "in the middle of decode steps");
        return add(c, "rt-throttling", DSV_DOCTOR_OK, found, want,
                   "FIFO workers that block between batches never reach the limit; it still stops a runaway thread");
}

/* RT group scheduling: 1 on, 0 off, -ENOENT unknown. */
static int rt_group_sched_state(const struct ctx *c, const struct mounts *m, char *how, size_t size) {
        char line[4096], path[1024];
        if (m->cg.v1_cpu_dir[0] && host_path(c, path, sizeof path, "%s/cpu.rt_runtime_us", m->cg.v1_cpu_dir) == 0) {
                FILE *f = fopen(path, "re");
                if (f) {
                        fclose(f);
                        snprintf(how, size, "on (cpu.rt_runtime_us in %s)", m->cg.v1_cpu_dir);
                        return 1;
                }
        }
        if (read_line(c, line, sizeof line, "/proc/cmdline") == 0) {
                for (char *save = NULL, *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save))
                        if (strncmp(w, "rt_group_sched=", 15) == 0) {
                                int on = strcmp(w + 15, "0") != 0;
                                snprintf(how, size, "%s (%s on the command line)", on ? "on" : "off", w);
                                return on;
                        }
        }
        char release[128];
        if (read_line(c, release, sizeof release, "/proc/sys/kernel/osrelease") < 0 ||
            host_path(c, path, sizeof path, "/boot/config-%s", release) < 0)
                return -ENOENT;
        FILE *f = fopen(path, "re");
        if (!f)
                return -ENOENT;
        int state = -ENOENT;
        bool default_disabled = false;
        while (fgets(line, sizeof line, f)) {
                if (strncmp(line, "CONFIG_RT_GROUP_SCHED=y", 23) == 0)
                        state = 1;
                else if (strstr(line, "CONFIG_RT_GROUP_SCHED is not set"))
                        state = 0;
                else if (strncmp(line, "CONFIG_RT_GROUP_SCHED_DEFAULT_DISABLED=y", 40) == 0)
                        default_disabled = true;
        }
        fclose(f);
        if (state == 1 && default_disabled)
                state = 0;
        if (state >= 0)
                snprintf(how, size, "%s (/boot/config-%s)", state ? "on" : "off", release);
        return state;
}

static int check_rt_group_sched(struct ctx *c, const struct mounts *m) {
        char how[160];
        const char *want = "off (CONFIG_RT_GROUP_SCHED=n, or rt_group_sched=0 on 6.16+)";
        int st = rt_group_sched_state(c, m, how, sizeof how);
        if (st < 0)
                return add(c, "rt-group-sched", DSV_DOCTOR_UNKNOWN, "no v1 cpu hierarchy, no kernel config", want,
                           "with it on, SCHED_FIFO is refused in non-root cgroups");
        if (st)
                return add(c, "rt-group-sched", DSV_DOCTOR_WARN, how, want,
                           "new groups get rt_runtime 0, so SCHED_FIFO fails with EPERM inside instance "
                           "cgroups: workers fall back to SCHED_OTHER (systemd does not support it either)");
        return add(c, "rt-group-sched", DSV_DOCTOR_OK, how, want, "workers may use SCHED_FIFO inside their cgroups");
}

static int check_numa_balancing(struct ctx *c) {
        long long v;
        const char *want = "0 (kernel.numa_balancing)";
        if (read_ll(c, &v, "/proc/sys/kernel/numa_balancing") < 0)
                return add(c, "numa-balancing", DSV_DOCTOR_UNKNOWN, "missing (kernel without NUMA balancing?)", want,
                           "dsvisor binds each instance's memory itself");
        char found[32];
        snprintf(found, sizeof found, "%lld", v);
        if (v == 0)
                return add(c, "numa-balancing", DSV_DOCTOR_OK, found, want,
                           "memory stays where dsvisor bound it; no hinting faults");
        if (c->n_host_nodes == 1)
                return add(c, "numa-balancing", DSV_DOCTOR_OK, found, want,
                           "inactive with a single NUMA node; set 0 anyway before adding nodes");
        return add(c, "numa-balancing", DSV_DOCTOR_WARN, found, want,
                   "the kernel unmaps pages to sample accesses: hinting page faults and page migrations "
                   "inside decode steps, on memory dsvisor already placed");
}

/* ---- limits ----------------------------------------------------------------------- */

/* The host's /proc/<pid>/<name> of the checked process, open for reading; NULL with errno
 * set on failure. */
static FILE *proc_open(const struct ctx *c, const char *name) {
        char path[1024];
        int r = host_path(c, path, sizeof path, "/proc/%s/%s", c->proc, name);
        if (r < 0) {
                errno = -r;
                return NULL;
        }
        return fopen(path, "re");
}

/* The soft limit of one /proc/<pid>/limits row: "unlimited" is UINT64_MAX. */
static int read_limit(const struct ctx *c, const char *row, uint64_t *ret) {
        char line[256];
        FILE *f = proc_open(c, "limits");
        if (!f)
                return -errno;
        int r = -ENOENT;
        size_t n = strlen(row);
        while (fgets(line, sizeof line, f)) {
                if (strncmp(line, row, n) != 0 || line[n] != ' ')
                        continue;
                char soft[32];
                if (sscanf(line + n, "%31s", soft) != 1) {
                        r = -EBADMSG;
                } else if (strcmp(soft, "unlimited") == 0) {
                        *ret = UINT64_MAX;
                        r = 0;
                } else {
                        long long v;
                        r = parse_ll(soft, &v);
                        if (r == 0 && v < 0)
                                r = -EBADMSG;
                        if (r == 0)
                                *ret = (uint64_t)v;
                }
                break;
        }
        fclose(f);
        return r;
}

/* Bit cap of CapEff in /proc/self/status: 1, 0, or -errno. */
static int has_cap(const struct ctx *c, int cap) {
        char line[256];
        FILE *f = proc_open(c, "status");
        if (!f)
                return -errno;
        int r = -ENOENT;
        while (fgets(line, sizeof line, f)) {
                unsigned long long v;
                if (sscanf(line, "CapEff: %llx", &v) == 1) {
                        r = (int)(v >> cap & 1);
                        break;
                }
        }
        fclose(f);
        return r;
}

static int check_limits(struct ctx *c) {
        uint64_t v;
        char found[96];
        const char *want = "unlimited (LimitMEMLOCK=infinity)";
        int r = read_limit(c, "Max locked memory", &v);
        if (r < 0)
                r = add(c, "rlimit-memlock", DSV_DOCTOR_UNKNOWN, "no \"Max locked memory\" in /proc/self/limits", want,
                        "the limit of the process checked (this one, or the pid asked for)");
        else {
                if (v == UINT64_MAX)
                        snprintf(found, sizeof found, "unlimited");
                else
                        snprintf(found, sizeof found, "%" PRIu64 " KiB", v >> 10);
                bool cap = has_cap(c, CAP_IPC_LOCK_BIT) == 1;
                if (cap && v != UINT64_MAX)
                        appendf(found, sizeof found, ", CAP_IPC_LOCK");
                r = add(c, "rlimit-memlock", v == UINT64_MAX || cap ? DSV_DOCTOR_OK : DSV_DOCTOR_WARN, found, want,
                        v == UINT64_MAX || cap ? "workers can lock their KV cache and arena against reclaim "
                                                 "(of the process checked; a service's comes from its unit)"
                                               : "workers cannot mlock their KV cache and arena: under memory "
                                                 "pressure they are reclaimed and faulted back mid-decode");
        }
        if (r < 0)
                return r;
        want = ">= 1 (LimitRTPRIO=49)";
        r = read_limit(c, "Max realtime priority", &v);
        if (r < 0)
                return add(c, "rlimit-rtprio", DSV_DOCTOR_UNKNOWN, "no \"Max realtime priority\" in /proc/self/limits",
                           want, "the limit of the process checked (this one, or the pid asked for)");
        if (v == UINT64_MAX)
                snprintf(found, sizeof found, "unlimited");
        else
                snprintf(found, sizeof found, "%" PRIu64, v);
        bool cap = has_cap(c, CAP_SYS_NICE_BIT) == 1;
        if (cap)
                appendf(found, sizeof found, ", CAP_SYS_NICE");
        if (v == 0 && !cap)
                return add(c, "rlimit-rtprio", DSV_DOCTOR_WARN, found, want,
                           "SCHED_FIFO is refused: workers run SCHED_OTHER and share their cores' time with "
                           "whatever else is runnable there");
        return add(c, "rlimit-rtprio", DSV_DOCTOR_OK, found, want,
                   "workers may run SCHED_FIFO (of the process checked; a service's comes from its unit)");
}

/* ---- IRQs -------------------------------------------------------------------------- */

#define MAX_IRQS 4096
/* Marks in fired[] the IRQ numbers with a non-zero count in /proc/interrupts. Returns
 * -errno when the file is missing (then every IRQ counts). */
static int irqs_fired(const struct ctx *c, unsigned char *fired) {
        char path[1024];
        int r = host_path(c, path, sizeof path, "/proc/interrupts");
        if (r < 0)
                return r;
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        size_t cap = 1 << 16;
        char *line = malloc(cap);
        if (!line) {
                fclose(f);
                return -ENOMEM;
        }
        while (fgets(line, (int)cap, f)) {
                char *end;
                long irq = strtol(line, &end, 10);
                if (end == line || *end != ':' || irq < 0 || irq >= MAX_IRQS)
                        continue;
                for (char *p = end + 1;;) {
                        char *e;
                        unsigned long long n = strtoull(p, &e, 10);
                        if (e == p)
                                break;
                        if (n)
                                fired[irq] = 1;
                        p = e;
                }
        }
        free(line);
        fclose(f);
        return 0;
}

static int check_irqs(struct ctx *c) {
        unsigned char fired[MAX_IRQS];
        char path[1024], found[160], want[160], hk[96];
        struct dsv__cpulist hks;
        cpus_to_list(c->req->housekeeping_cpus, c->req->n_housekeeping_cpus, &hks);
        cpulist_format(&hks, hk, sizeof hk);
        if (hk[0])
                snprintf(want, sizeof want, "housekeeping CPUs %s only", hk);
        else
                snprintf(want, sizeof want, "CPUs outside the instances");
        const char *why = "an interrupt on an instance CPU preempts a compute thread mid-step; "
                          "one late thread delays the whole step";
        if (cpulist_empty(&c->instance_cpus))
                return add(c, "irq-affinity", DSV_DOCTOR_UNKNOWN, "no instance CPUs planned", want, "%s", why);
        memset(fired, 0, sizeof fired);
        bool counts = irqs_fired(c, fired) == 0;
        if (host_path(c, path, sizeof path, "/proc/irq") < 0)
                return -ENAMETOOLONG;
        DIR *d = opendir(path);
        if (!d)
                return add(c, "irq-affinity", DSV_DOCTOR_UNKNOWN, "no /proc/irq", want, "%s", why);
        struct dsv__cpulist overlap_irqs;
        memset(&overlap_irqs, 0, sizeof overlap_irqs);
        int n_overlap = 0, n_seen = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                char *end, list[4096];
                long irq = strtol(de->d_name, &end, 10);
                if (end == de->d_name || *end || irq < 0 || irq >= MAX_IRQS || (counts && !fired[irq]))
                        continue;
                if (read_line(c, list, sizeof list, "/proc/irq/%ld/effective_affinity_list", irq) < 0 &&
                    read_line(c, list, sizeof list, "/proc/irq/%ld/smp_affinity_list", irq) < 0)
                        continue;
                struct dsv__cpulist aff;
                if (dsv__cpulist_parse(list, &aff) < 0)
                        continue;
                n_seen++;
                for (size_t w = 0; w < DSV__CPULIST_BITS / 64; w++)
                        if (aff.bits[w] & c->instance_cpus.bits[w]) {
                                overlap_irqs.bits[irq / 64] |= 1ull << (irq % 64);
                                n_overlap++;
                                break;
                        }
        }
        closedir(d);
        if (n_overlap == 0) {
                snprintf(found, sizeof found, "none of %d %sIRQs on instance CPUs", n_seen, counts ? "active " : "");
                return add(c, "irq-affinity", DSV_DOCTOR_OK, found, want, "%s", why);
        }
        char irqs[96];
        cpulist_format(&overlap_irqs, irqs, sizeof irqs);
        snprintf(found, sizeof found, "%d of %d %sIRQs may fire on instance CPUs: %s", n_overlap, n_seen,
                 counts ? "active " : "", irqs);
        return add(c, "irq-affinity", DSV_DOCTOR_WARN, found, want, "%s", why);
}

/* ---- CPU ----------------------------------------------------------------------------- */

static int check_smt(struct ctx *c) {
        char v[32];
        if (read_line(c, v, sizeof v, "/sys/devices/system/cpu/smt/control") < 0)
                return add(c, "smt", DSV_DOCTOR_UNKNOWN, "missing", "on or off",
                           "dsvisor places whole cores with their siblings either way");
        return add(c, "smt", DSV_DOCTOR_OK, v, "on or off",
                   "dsvisor gives each instance whole cores with their siblings and runs one compute thread per "
                   "core by default, so no other task shares a compute thread's core");
}

static int check_cpu_flags(struct ctx *c) {
        char path[1024];
        char line[8192];
        int r = host_path(c, path, sizeof path, "/proc/cpuinfo");
        if (r < 0)
                return r;
        FILE *f = fopen(path, "re");
        bool found_flags = false;
        while (f && fgets(line, sizeof line, f))
                if (strncmp(line, "flags", 5) == 0 && strchr(line, ':')) {
                        found_flags = true;
                        break;
                }
        if (f)
                fclose(f);
        const char *want = "avx512f avx512bw avx512vl (or avx2 fma f16c)";
        if (!found_flags)
                return add(c, "cpu-features", DSV_DOCTOR_UNKNOWN, "no flags line in /proc/cpuinfo", want,
                           "the engine picks its kernels from these");
        static const char *const wanted[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                             "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"};
        char flags[sizeof line];
        snprintf(flags, sizeof flags, "%s", strchr(line, ':') + 1);
        flags[strcspn(flags, "\n")] = '\0';
        bool has[sizeof wanted / sizeof wanted[0]];
        char found[160] = "";
        for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
                has[i] = dsv__cgfs_has_word(flags, wanted[i]);
                if (has[i])
                        appendf(found, sizeof found, "%s%s", found[0] ? " " : "", wanted[i]);
        }
        bool avx2 = has[0] && has[1] && has[2], avx512 = has[3] && has[4] && has[5];
        if (!found[0])
                snprintf(found, sizeof found, "no avx2, no avx512");
        if (avx512 || avx2)
                return add(c, "cpu-features", DSV_DOCTOR_OK, found, want, "the engine runs its %s kernels",
                           avx512 ? "AVX-512" : "AVX2");
        return add(c, "cpu-features", DSV_DOCTOR_WARN, found, want,
                   "only the scalar reference kernels can run: several times slower per token");
}

static int count_host_nodes(const struct ctx *c) {
        char path[1024];
        if (host_path(c, path, sizeof path, "/sys/devices/system/node") < 0)
                return 0;
        DIR *d = opendir(path);
        if (!d)
                return 0;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strncmp(de->d_name, "node", 4) == 0 && isdigit((unsigned char)de->d_name[4]))
                        n++;
        closedir(d);
        return n;
}

int dsv_doctor_run(const struct dsv_doctor_request *req, struct dsv_doctor_report *ret) {
        if (!req || !ret || req->pid < 0 || (req->n_instance_cpus && !req->instance_cpus) ||
            (req->n_housekeeping_cpus && !req->housekeeping_cpus) || (req->n_instance_nodes && !req->instance_nodes))
                return -EINVAL;
        for (size_t i = 0; i < req->n_instance_nodes; i++)
                if (req->instance_nodes[i] < 0)
                        return -EINVAL;
        struct ctx c;
        char prefix[PATH_MAX];
        const char *root = req->root ? req->root : "/";
        size_t len = strlen(root);
        while (len > 0 && root[len - 1] == '/')
                len--;
        if (len >= sizeof prefix)
                return -ENAMETOOLONG;
        memcpy(prefix, root, len);
        prefix[len] = '\0';
        for (size_t i = 0; i < req->n_instance_cpus; i++)
                if (req->instance_cpus[i] < 0 || req->instance_cpus[i] >= DSV__CPULIST_BITS)
                        return -EINVAL;
        memset(&c, 0, sizeof c);
        c.req = req;
        if (req->pid > 0)
                snprintf(c.proc, sizeof c.proc, "%d", (int)req->pid);
        else
                snprintf(c.proc, sizeof c.proc, "self");
        c.prefix = prefix;
        c.rep = calloc(1, sizeof *c.rep); /* ~34 KiB; *ret is written only on success */
        if (!c.rep)
                return -ENOMEM;
        cpus_to_list(req->instance_cpus, req->n_instance_cpus, &c.instance_cpus);
        c.n_host_nodes = count_host_nodes(&c);

        struct mounts m;
        read_mounts(&c, &m);
        int r;
        if ((r = check_cgroups(&c, &m)) < 0 || (r = check_cpufreq(&c)) < 0 || (r = check_thp(&c)) < 0 ||
            (r = check_hugepages(&c)) < 0 || (r = check_rt_throttling(&c)) < 0 ||
            (r = check_rt_group_sched(&c, &m)) < 0 || (r = check_numa_balancing(&c)) < 0 ||
            (r = check_limits(&c)) < 0 || (r = check_irqs(&c)) < 0 || (r = check_smt(&c)) < 0 ||
            (r = check_cpu_flags(&c)) < 0) {
                free(c.rep);
                return r;
        }
        memcpy(ret, c.rep, sizeof *c.rep);
        free(c.rep);
        return 0;
}
