/* cgroup_fs.c — dsvisor's own cgroupfs reader/writer, rooted at directory fds.
 *
 * Why not libcgroup for v2: libcgroup 2.0.2's cgroup_create_cgroup() calls
 * cgroupv2_subtree_control_recursive(), which walks from the mount root down to the new
 * group's parent, mkdir()s each level and writes "+<ctrl>" into each level's
 * cgroup.subtree_control (read in src/api.c; confirmed with strace against Debian's
 * libcgroup2 2.0.2 on a hybrid host: mkdir("/sys/fs/cgroup/unified/<a>") then
 * write("<a>/cgroup.subtree_control", "+hugetlb")). Those ancestors belong to systemd
 * (single-writer rule), and paths are taken relative to the mount root instead of the
 * delegated group. Everything here is relative to an fd the caller opened on the
 * delegated directory, one validated component at a time, with O_NOFOLLOW, so a write
 * cannot land outside it; tests point the same code at a fake tree. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup-internal.h"

int dsv__cgfs_name_check(const char *name) {
        if (!name || !name[0] || strlen(name) >= NAME_MAX)
                return -EINVAL;
        if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return -EINVAL;
        return 0;
}

int dsv__cgfs_open_dir(int dirfd, const char *name, int *ret_fd) {
        int r = dsv__cgfs_name_check(name);
        if (r < 0)
                return r;
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        *ret_fd = fd;
        return 0;
}

int dsv__cgfs_open_path(int rootfd, const char *rel, int *ret_fd) {
        char comp[NAME_MAX + 1];
        int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        const char *p = rel ? rel : "";
        for (;;) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                size_t n = strcspn(p, "/");
                if (n >= sizeof comp) {
                        close(fd);
                        return -ENAMETOOLONG;
                }
                memcpy(comp, p, n);
                comp[n] = '\0';
                p += n;
                int next;
                int r = dsv__cgfs_open_dir(fd, comp, &next);
                close(fd);
                if (r < 0)
                        return r;
                fd = next;
        }
        *ret_fd = fd;
        return 0;
}

int dsv__cgfs_mkdir(int dirfd, const char *name) {
        int r = dsv__cgfs_name_check(name);
        if (r < 0)
                return r;
        if (mkdirat(dirfd, name, 0755) < 0)
                return -errno;
        return 0;
}

int dsv__cgfs_rmdir(int dirfd, const char *name) {
        int r = dsv__cgfs_name_check(name);
        if (r < 0)
                return r;
        if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
                return errno == ENOENT ? 0 : -errno;
        return 0;
}

int dsv__cgfs_write(int dirfd, const char *file, const char *value) {
        int r = dsv__cgfs_name_check(file);
        if (r < 0)
                return r;
        int fd = openat(dirfd, file, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* A regular-file check keeps a planted FIFO or device from being written. */
        struct stat st;
        if (fstat(fd, &st) < 0)
                r = -errno;
        else if (!S_ISREG(st.st_mode))
                r = -EBADF;
        if (r < 0) {
                close(fd);
                return r;
        }
        /* One write of "value\n", appended, as echo(1) does: the kernel parses every
         * write on its own and strips the newline, and a fake tree keeps a log of every
         * write in every file. */
        char line[1024];
        int len = snprintf(line, sizeof line, "%s\n", value);
        if (len < 0 || (size_t)len >= sizeof line) {
                close(fd);
                return -E2BIG;
        }
        ssize_t n = write(fd, line, (size_t)len);
        r = n < 0 ? -errno : n != len ? -EIO : 0;
        close(fd);
        return r;
}

int dsv__cgfs_read(int dirfd, const char *file, char *buf, size_t size) {
        int r = dsv__cgfs_name_check(file);
        if (r < 0)
                return r;
        if (size == 0)
                return -EINVAL;
        int fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = 0;
        for (;;) {
                if (len == size - 1) {
                        char extra;
                        ssize_t n = read(fd, &extra, 1);
                        r = n < 0 ? -errno : n > 0 ? -E2BIG : 0;
                        break;
                }
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        close(fd);
        if (r < 0)
                return r;
        while (len > 0 && buf[len - 1] == '\n')
                len--;
        buf[len] = '\0';
        return (int)len;
}

bool dsv__cgfs_has_word(const char *list, const char *word) {
        size_t wlen = strlen(word);
        const char *p = list;
        while (*p) {
                while (*p == ' ' || *p == '\n')
                        p++;
                size_t n = strcspn(p, " \n");
                if (n == wlen && memcmp(p, word, n) == 0)
                        return true;
                p += n;
        }
        return false;
}

int dsv__cgfs_read_pids(int dirfd, pid_t *pids, size_t max) {
        return dsv__cgfs_read_ids(dirfd, "cgroup.procs", pids, max);
}

int dsv__cgfs_read_ids(int dirfd, const char *file, pid_t *pids, size_t max) {
        int r0 = dsv__cgfs_name_check(file);
        if (r0 < 0)
                return r0;
        int fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        FILE *f = fdopen(fd, "re");
        if (!f) {
                int r = -errno;
                close(fd);
                return r;
        }
        size_t n = 0;
        long v;
        int got = 1, r = 0;
        while (n < max && (got = fscanf(f, "%ld", &v)) == 1) {
                if (v <= 0 || v > INT_MAX) {
                        r = -EBADMSG;
                        break;
                }
                pids[n++] = (pid_t)v;
        }
        if (r == 0 && got == 0) /* not a number */
                r = -EBADMSG;
        else if (r == 0 && got == EOF && ferror(f))
                r = -EIO;
        fclose(f);
        return r < 0 ? r : (int)n;
}

int dsv__cpulist_parse(const char *s, struct dsv__cpulist *ret) {
        struct dsv__cpulist set;
        memset(&set, 0, sizeof set);
        const char *p = s;
        while (*p == ' ' || *p == '\n')
                p++;
        while (*p) {
                char *end;
                errno = 0;
                unsigned long a = strtoul(p, &end, 10), b;
                if (end == p || errno || *p == '-')
                        return -EINVAL;
                p = end;
                b = a;
                if (*p == '-') {
                        p++;
                        b = strtoul(p, &end, 10);
                        if (end == p || errno || *p == '-' || b < a)
                                return -EINVAL;
                        p = end;
                }
                if (b >= DSV__CPULIST_BITS)
                        return -ERANGE;
                for (unsigned long i = a; i <= b; i++)
                        set.bits[i / 64] |= 1ull << (i % 64);
                if (*p == ',')
                        p++;
                else if (*p == '\n' || *p == ' ' || *p == '\0')
                        while (*p == ' ' || *p == '\n')
                                p++;
                else
                        return -EINVAL;
        }
        *ret = set;
        return 0;
}

bool dsv__cpulist_equal(const struct dsv__cpulist *a, const struct dsv__cpulist *b) {
        return memcmp(a->bits, b->bits, sizeof a->bits) == 0;
}
