/* cgroup-internal.h — what the cgroup files (cgroup*.c) and doctor.c share.
 *
 * Layering inside the cgroup layer:
 *   cgroup_fs.c  the openat()-based cgroupfs reader/writer. Every path it touches is one
 *                validated name below a directory fd, so a write can never leave the
 *                directory the caller was handed (the delegated cgroup, or a fake tree).
 *   cgroup_v1.c  libcgroup: mount discovery and the v1 hierarchies of legacy/hybrid hosts.
 *   cgroup_v2.c  unified-hierarchy delegation and v2 limit files, through cgroup_fs.c only.
 *   cgroup_mode.c  the mode (v1/hybrid/v2) and where each hierarchy is, decided once;
 *                the controller-name table.
 *   cgroup.c     the public API: host, instances, spawn, stop, report, and the instance
 *                description (group names, paths, cpu.stat). */
#ifndef DSV_CGROUP_INTERNAL_H
#define DSV_CGROUP_INTERNAL_H

#include <stdbool.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dsv_platform.h"

/* ---- cgroup_fs.c: the fd-rooted cgroupfs reader/writer ------------------------------ */

/* 0 if name is one path component: non-empty, shorter than NAME_MAX, no '/', not "." or
 * ".."; -EINVAL otherwise. */
int dsv__cgfs_name_check(const char *name);

/* Opens directory name below dirfd (O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC) into *ret_fd. */
int dsv__cgfs_open_dir(int dirfd, const char *name, int *ret_fd);

/* Opens the relative path rel ("a/b/c"; leading and repeated '/' ignored, "" or "/" is
 * rootfd itself) below rootfd, one checked component at a time, into *ret_fd. */
int dsv__cgfs_open_path(int rootfd, const char *rel, int *ret_fd);

/* mkdirat(dirfd, name, 0755); -EEXIST if it already exists. */
int dsv__cgfs_mkdir(int dirfd, const char *name);

/* unlinkat(dirfd, name, AT_REMOVEDIR); 0 if it is already gone. */
int dsv__cgfs_rmdir(int dirfd, const char *name);

/* Writes "value\n" to the existing regular file below dirfd with one appending write(2)
 * (cgroupfs parses one write per call). Never creates a file, never follows a symlink. */
int dsv__cgfs_write(int dirfd, const char *file, const char *value);

/* Reads the file below dirfd into buf (NUL-terminated, trailing newlines removed).
 * Returns the length; -ENOENT when missing; -E2BIG when it does not fit. */
int dsv__cgfs_read(int dirfd, const char *file, char *buf, size_t size);

/* True if word occurs in the space-separated list (cgroup.controllers format). */
bool dsv__cgfs_has_word(const char *list, const char *word);

/* Reads the first max "pid\n" lines of cgroup.procs below dirfd into pids, streaming
 * (the file has no size limit). Returns the number read or -errno. */
int dsv__cgfs_read_pids(int dirfd, pid_t *pids, size_t max);
/* The same for any id list below dirfd: "cgroup.procs", or v1 "tasks" (thread ids). */
int dsv__cgfs_read_ids(int dirfd, const char *file, pid_t *ids, size_t max);

/* ---- cpu lists ("0-3,8,10-11") ------------------------------------------------------ */

#define DSV__CPULIST_BITS 4096
struct dsv__cpulist {
        uint64_t bits[DSV__CPULIST_BITS / 64];
};

/* Parses a kernel cpu/node list; "" is the empty set. -EINVAL on bad syntax, -ERANGE
 * past DSV__CPULIST_BITS. */
int dsv__cpulist_parse(const char *s, struct dsv__cpulist *ret);
bool dsv__cpulist_equal(const struct dsv__cpulist *a, const struct dsv__cpulist *b);

/* ---- cgroup_mode.c: where cgroups are, and the controller names -------------------- */

/* Controller names for the DSV_CGROUP_CTRL_* bit positions (NULL past the last). */
const char *dsv__cgroup_ctrl_name(unsigned bit);
/* The names of the controllers in bits, space-separated, into buf. */
void dsv__cgroup_ctrl_list(unsigned bits, char *buf, size_t size);
/* The DSV_CGROUP_CTRL_* bits of the controllers named in a space-separated list. */
unsigned dsv__cgroup_ctrl_bits(const char *list);

/* Where the v2 tree is mounted for mode: root (unified) or root/unified (hybrid);
 * -ENOENT for legacy. */
int dsv__cgroup_v2_mount(const char *root, enum dsv_cgroup_mode mode, char *buf, size_t size);

/* The cgroup mounts a mounts file (/proc/<pid>/mounts format) shows below root
 * ("/sys/fs/cgroup"): the mode (DETECT when there is no cgroup filesystem), the v2 tree,
 * and the v1 hierarchies. -errno when the file cannot be read. */
struct dsv__cgroup_mounts {
        enum dsv_cgroup_mode mode;
        char v2_dir[PATH_MAX];     /* root, or root/unified (hybrid); "" without a v2 tree */
        unsigned v1;               /* DSV_CGROUP_CTRL_* with a v1 hierarchy */
        char v1_cpu_dir[256];      /* mount point of the v1 hierarchy holding cpu */
};
int dsv__cgroup_mounts_read(const char *mounts_path, const char *root, struct dsv__cgroup_mounts *ret);

/* ---- /proc/self/cgroup ------------------------------------------------------------- */

/* Finds this process's cgroup path in the file at proc_path (format of
 * /proc/self/cgroup): the "0::" line when controller is NULL, else the line whose
 * comma-separated controller list holds controller. Writes the path (starts with '/')
 * into buf. -ENOENT when there is no such line. */
int dsv__cgroup_own_path(const char *proc_path, const char *controller, char *buf, size_t size);

/* ---- cgroup_v1.c: libcgroup ------------------------------------------------------- */

/* Converts a libcgroup return code (0 or ECG*) to 0 or -errno, once. */
int dsv__cgroup_v1_errno(int ecg);

/* Mount point of the v1 hierarchy holding controller, from libcgroup's mount table, if
 * it lies below root (prefix match) and is a cgroup v1 filesystem (libcgroup 2.0.2 also
 * lists the controllers of a non-empty unified/cgroup.controllers, as v2). -ENOENT when
 * the controller has no v1 hierarchy here. */
int dsv__cgroup_v1_mount(const char *root, const char *controller, char *buf, size_t size);

/* Creates the group rel (relative to the controller's mount root) through libcgroup. */
int dsv__cgroup_v1_create(const char *controller, const char *rel);

/* Writes one control file of the group rel through libcgroup (cgroup_modify_cgroup). */
int dsv__cgroup_v1_set(const char *controller, const char *rel, const char *file, const char *value);

/* Removes the empty group rel (libcgroup, CGFLAG_DELETE_EMPTY_ONLY: no task migration). */
int dsv__cgroup_v1_delete(const char *controller, const char *rel);

/* ---- cgroup_v2.c ------------------------------------------------------------------- */

/* Writes "+ctrl" into dirfd's cgroup.subtree_control for every controller in want that
 * dirfd's cgroup.controllers lists and its subtree_control does not enable yet.
 * *ret_enabled gets the DSV_CGROUP_CTRL_* bits enabled afterwards, *ret_newly the ones
 * this call enabled (written and accepted; what to undo later), plus those a gone
 * supervisor recorded as enabled by it and left on (adopted; see cgroup_v2.c). The
 * process's controllers are recorded on the group (xattr) until disabled. -EBUSY when
 * the group holds processes (no-internal-processes rule); *ret_newly is valid then too. */
int dsv__cgroup_v2_enable(int dirfd, unsigned want, unsigned *ret_enabled, unsigned *ret_newly);

/* Writes "-ctrl" into dirfd's cgroup.subtree_control for each bit, and drops them from
 * the process's record on the group. First -errno. */
int dsv__cgroup_v2_disable(int dirfd, unsigned bits);

/* Records on the group fd that this process made it (xattr; best effort). */
void dsv__cgroup_v2_mark_made(int fd);
/* true when the group fd was made by a process that is gone: it is now recorded as
 * this process's, to be removed at its teardown like a group it made itself. */
bool dsv__cgroup_v2_adopt_made(int fd);

/* Moves the calling process (all its threads) into the group dirfd. */
int dsv__cgroup_v2_move_self(int dirfd);


#endif
