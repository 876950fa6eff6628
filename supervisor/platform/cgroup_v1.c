/* cgroup_v1.c — libcgroup 2.0.2: mount discovery and the v1 hierarchies of legacy and
 * hybrid hosts. ECG* codes become -errno here, once (dsv__cgroup_v1_errno).
 *
 * What was checked before relying on libcgroup 2.0.2 (src/api.c, and strace of Debian's
 * libcgroup2 2.0.2 on this project's hybrid CI host):
 *  - cgroup_init() builds its mount table from /proc/mounts; v1 controllers register as
 *    V1, and a non-empty <v2 mount>/cgroup.controllers registers those controllers as V2
 *    (on the CI host cgroup_get_controller_begin/next lists "hugetlb
 *    /sys/fs/cgroup/unified" among the v1 mounts). So every mount point is statfs()ed
 *    here and only CGROUP_SUPER_MAGIC ones are treated as v1.
 *  - cgroup_create_cgroup() on a V1 controller mkdir()s <mount>/<name> (mkdir -p) and,
 *    with ignore_ownership=1, changes no owner or mode; it is called without values so
 *    each limit is written, and reported, on its own.
 *  - cgroup_modify_cgroup() writes only values marked dirty, and cgroup_add_value_string()
 *    marks them dirty; a failed write returns ECGOTHER with the write's errno in
 *    cgroup_get_last_errno() (e.g. EINVAL for cpu.rt_runtime_us above the parent's).
 *    It skips files without S_IWUSR and treats EOPNOTSUPP as success, so dsvisor reads
 *    every value back instead of trusting the return code.
 *  - cgroup_delete_cgroup_ext(CGFLAG_DELETE_EMPTY_ONLY) is a plain rmdir() with no task
 *    migration to the parent (cgroup_delete_cgroup() would move live tasks up).
 *  - On v2 controllers cgroup_create_cgroup() writes "+ctrl" into every ancestor's
 *    cgroup.subtree_control (see cgroup_fs.c), so nothing v2 goes through libcgroup. */
#include <errno.h>
#include <libcgroup.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/vfs.h>

#include "cgroup-internal.h"

int dsv__cgroup_v1_errno(int ecg) {
        switch (ecg) {
        case 0:
                return 0;
        case ECGOTHER: {
                int e = cgroup_get_last_errno();
                return e > 0 ? -e : -EIO;
        }
        case ECGROUPNOTMOUNTED:
                return -ENOMEDIUM;
        case ECGROUPSUBSYSNOTMOUNTED:
                return -ENODEV;
        case ECGROUPNOTEXIST:
        case ECGROUPVALUENOTEXIST:
        case ECGEOF:
                return -ENOENT;
        case ECGROUPNOTOWNER:
        case ECGROUPNOTALLOWED:
                return -EPERM;
        case ECGINVAL:
        case ECGROUPNOTINITIALIZED:
                return -EINVAL;
        case ECGCONTROLLEREXISTS:
        case ECGVALUEEXISTS:
                return -EEXIST;
        case ECGMAXVALUESEXCEEDED:
                return -E2BIG;
        case ECGNONEMPTY:
                return -EBUSY;
        case ECGROUPUNSUPP:
                return -EOPNOTSUPP;
        case ECGROUPNOTCOMPILED:
                return -ENOSYS;
        default:
                return -EIO;
        }
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;

static void discard_log(void *userdata, int level, const char *fmt, va_list ap) {
}

static void init_libcgroup(void) {
        /* cgroup_init() installs libcgroup's stdout logger unless one is set already
         * (checked with cgroup_log() after init); this library does not print, the
         * errors come back as -errno. */
        cgroup_set_logger(discard_log, -1, NULL);
        init_result = dsv__cgroup_v1_errno(cgroup_init());
}

static int ensure_init(void) {
        pthread_once(&init_once, init_libcgroup);
        return init_result;
}

int dsv__cgroup_v1_mount(const char *root, const char *controller, char *buf, size_t size) {
        int r = ensure_init();
        if (r < 0)
                return r;
        size_t root_len = strlen(root);
        while (root_len > 1 && root[root_len - 1] == '/')
                root_len--;

        void *handle = NULL;
        struct cgroup_mount_point mp;
        int ecg = cgroup_get_controller_begin(&handle, &mp);
        r = -ENOENT;
        while (ecg == 0) {
                if (strcmp(mp.name, controller) == 0 && strncmp(mp.path, root, root_len) == 0 &&
                    mp.path[root_len] == '/') {
                        struct statfs sfs;
                        if (statfs(mp.path, &sfs) == 0 && sfs.f_type == CGROUP_SUPER_MAGIC) {
                                r = snprintf(buf, size, "%s", mp.path) >= (int)size ? -ENAMETOOLONG : 0;
                                break;
                        }
                }
                ecg = cgroup_get_controller_next(&handle, &mp);
        }
        if (ecg != 0 && ecg != ECGEOF && r == -ENOENT)
                r = dsv__cgroup_v1_errno(ecg);
        cgroup_get_controller_end(&handle);
        return r;
}

/* A libcgroup group named rel (relative to the mount root, no leading '/') holding one
 * controller, optionally with one value. */
static int new_group(const char *controller, const char *rel, const char *file, const char *value,
                     struct cgroup **ret) {
        while (*rel == '/')
                rel++;
        struct cgroup *cg = cgroup_new_cgroup(rel);
        if (!cg)
                return -ENOMEM;
        struct cgroup_controller *ctrl = cgroup_add_controller(cg, controller);
        if (!ctrl) {
                cgroup_free(&cg);
                return -ENOMEM;
        }
        if (file) {
                int r = dsv__cgroup_v1_errno(cgroup_add_value_string(ctrl, file, value));
                if (r < 0) {
                        cgroup_free(&cg);
                        return r;
                }
        }
        *ret = cg;
        return 0;
}

enum v1_op { V1_CREATE, V1_SET, V1_DELETE };

/* One libcgroup operation on the group rel of one controller (file = value for V1_SET). */
static int v1_apply(enum v1_op op, const char *controller, const char *rel, const char *file, const char *value) {
        int r = ensure_init();
        if (r < 0)
                return r;
        struct cgroup *cg;
        r = new_group(controller, rel, file, value, &cg);
        if (r < 0)
                return r;
        switch (op) {
        case V1_CREATE:
                r = dsv__cgroup_v1_errno(cgroup_create_cgroup(cg, 1));
                break;
        case V1_SET:
                r = dsv__cgroup_v1_errno(cgroup_modify_cgroup(cg));
                break;
        case V1_DELETE:
                r = dsv__cgroup_v1_errno(cgroup_delete_cgroup_ext(cg, CGFLAG_DELETE_EMPTY_ONLY));
                break;
        }
        cgroup_free(&cg);
        return r;
}

int dsv__cgroup_v1_create(const char *controller, const char *rel) {
        return v1_apply(V1_CREATE, controller, rel, NULL, NULL);
}

int dsv__cgroup_v1_set(const char *controller, const char *rel, const char *file, const char *value) {
        return v1_apply(V1_SET, controller, rel, file, value);
}

int dsv__cgroup_v1_delete(const char *controller, const char *rel) {
        return v1_apply(V1_DELETE, controller, rel, NULL, NULL);
}
