/* hugepages.c — per-node 2 MiB hugetlb pools and the sealed shared weight image.
 *
 * hugetlbpage.rst: pools are per node and never swap; write(2) is unsupported on
 * hugetlbfs, so the image is filled through a mapping; a shared mapping reserves its
 * pages at mmap() time, but the node is chosen at fault time by the faulting task's
 * mempolicy (hugetlb_vm_ops has no set_policy), so the range is mbind()ed before the
 * first fault, and faulted with MADV_POPULATE_WRITE, which reports a shortage as an
 * error where a touching loop or MAP_POPULATE would SIGBUS or fail silently.
 * Seals: memfd_create(2) with MFD_ALLOW_SEALING; hugetlbfs memfds accept
 * F_SEAL_SHRINK|GROW|WRITE since Linux 4.16 (checked on the 6.18 CI kernel); older
 * kernels refuse them, which _seal() reports instead of failing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dsv_platform.h"

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26) /* log2(2 MiB) << MFD_HUGE_SHIFT */
#endif

const char *dsv_hugepages_mode_to_string(enum dsv_hugepages_mode mode) {
        static const char *const names[DSV_HUGEPAGES_MODE_COUNT] = {
                [DSV_HUGEPAGES_MODE_AUTO] = "auto",
                [DSV_HUGEPAGES_MODE_REQUIRE] = "require",
                [DSV_HUGEPAGES_MODE_OFF] = "off",
        };
        return (unsigned)mode < DSV_HUGEPAGES_MODE_COUNT ? names[mode] : "invalid";
}

static int read_u64(const char *path, uint64_t *ret) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        unsigned long long v;
        int n = fscanf(f, "%llu", &v);
        fclose(f);
        if (n != 1)
                return -EBADMSG;
        *ret = v;
        return 0;
}

static int node_free(const char *sysfs, int node, uint64_t *ret) {
        char path[512];
        int n = snprintf(path, sizeof path,
                         "%s/devices/system/node/node%d/hugepages/hugepages-2048kB/free_hugepages", sysfs, node);
        if (n < 0 || (size_t)n >= sizeof path)
                return -ENAMETOOLONG;
        return read_u64(path, ret);
}

int dsv_hugepages_free_on_node(const char *sysfs_root, int node, uint64_t *ret_free_pages) {
        const char *sysfs = sysfs_root ? sysfs_root : "/sys";
        if (!ret_free_pages || node < -1)
                return -EINVAL;
        if (node >= 0)
                return node_free(sysfs, node, ret_free_pages);

        char path[512];
        int n = snprintf(path, sizeof path, "%s/devices/system/node", sysfs);
        if (n < 0 || (size_t)n >= sizeof path)
                return -ENAMETOOLONG;
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        uint64_t total = 0;
        int r = -ENOENT;
        struct dirent *de;
        while ((de = readdir(d))) {
                char *end;
                if (strncmp(de->d_name, "node", 4) != 0)
                        continue;
                long id = strtol(de->d_name + 4, &end, 10);
                if (end == de->d_name + 4 || *end || id < 0)
                        continue;
                uint64_t v = 0;
                r = node_free(sysfs, (int)id, &v);
                if (r < 0)
                        break;
                total += v;
        }
        closedir(d);
        if (r < 0)
                return r;
        *ret_free_pages = total;
        return 0;
}

/* ShmemPmdMapped of this process's VMA that starts at addr, in bytes (0 if unreadable). */
static size_t shmem_pmd_bytes(const void *addr) {
        FILE *f = fopen("/proc/self/smaps", "re");
        if (!f)
                return 0;
        char line[512];
        bool inside = false;
        unsigned long kb = 0;
        while (fgets(line, sizeof line, f)) {
                unsigned long a, b;
                if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
                        if (inside)
                                break;
                        inside = a == (uintptr_t)addr;
                } else if (inside && sscanf(line, "ShmemPmdMapped: %lu kB", &kb) == 1) {
                        break;
                }
        }
        fclose(f);
        return inside ? (size_t)kb * 1024 : 0;
}

static int bind_range(void *addr, size_t size, int node) {
        unsigned long mask[16] = {0};
        if ((size_t)node >= sizeof mask * 8)
                return -ERANGE;
        mask[node / (8 * sizeof mask[0])] |= 1ul << (node % (8 * sizeof mask[0]));
        if (mbind(addr, size, MPOL_BIND, mask, sizeof mask * 8, 0) < 0)
                return -errno;
        return 0;
}

int dsv_hugepages_image_init(struct dsv_hugepages_image *img, const char *name, size_t len_bytes,
                             int node, enum dsv_hugepages_mode mode, const char *sysfs_root) {
        if (!img || !name || len_bytes == 0 || node < -1 || (unsigned)mode >= DSV_HUGEPAGES_MODE_COUNT)
                return -EINVAL;
        if (len_bytes > SIZE_MAX - DSV_HUGEPAGE_2MB_BYTES)
                return -E2BIG;
        struct dsv_hugepages_image im = {.fd = -1, .node = node, .len_bytes = len_bytes};
        im.size_bytes = (len_bytes + DSV_HUGEPAGE_2MB_BYTES - 1) / DSV_HUGEPAGE_2MB_BYTES * DSV_HUGEPAGE_2MB_BYTES;
        uint64_t need = im.size_bytes / DSV_HUGEPAGE_2MB_BYTES;
        int r;

        bool want_huge = mode != DSV_HUGEPAGES_MODE_OFF;
        if (want_huge) {
                uint64_t free_pages = 0;
                r = dsv_hugepages_free_on_node(sysfs_root, node, &free_pages);
                if (r < 0 && mode == DSV_HUGEPAGES_MODE_REQUIRE)
                        return r;
                if (r < 0 || free_pages < need) {
                        if (mode == DSV_HUGEPAGES_MODE_REQUIRE)
                                return -ENOMEM;
                        snprintf(im.note, sizeof im.note, "%llu free 2 MiB pages on %s%d, %llu needed: normal pages",
                                 (unsigned long long)(r < 0 ? 0 : free_pages), node < 0 ? "all nodes " : "node ",
                                 node < 0 ? 0 : node, (unsigned long long)need);
                        want_huge = false;
                }
        }
        if (want_huge) {
                im.fd = memfd_create(name, MFD_HUGETLB | MFD_HUGE_2MB | MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (im.fd < 0 && mode == DSV_HUGEPAGES_MODE_REQUIRE)
                        return -errno;
                if (im.fd < 0)
                        snprintf(im.note, sizeof im.note, "memfd_create(MFD_HUGETLB): %s: normal pages",
                                 strerror(errno));
                im.hugetlb = im.fd >= 0;
        }
        if (im.fd < 0) {
                im.fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (im.fd < 0)
                        return -errno;
        }
        if (ftruncate(im.fd, (off_t)im.size_bytes) < 0) {
                r = -errno;
                goto fail;
        }
        /* A shared hugetlb mapping reserves all its pages here: ENOMEM, not a later SIGBUS. */
        im.addr = mmap(NULL, im.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, im.fd, 0);
        if (im.addr == MAP_FAILED) {
                im.addr = NULL;
                r = -errno;
                goto fail;
        }
        if (node >= 0) {
                r = bind_range(im.addr, im.size_bytes, node);
                if (r < 0)
                        goto fail;
        }
        /* Normal pages come from shmem, which allocates 2 MiB folios for a region that asks
         * when shmem_enabled is advise (within_size and always need no asking; never and deny
         * refuse): asked before the first fault, since a folio keeps the size it was
         * allocated in. Every worker's mapping then maps them with one PMD each. Advice: a
         * refusal costs each worker page tables (about 2 MiB per GB of image) and TLB
         * reach, and dsvisor doctor reports the setting (thp-shmem). */
        if (!im.hugetlb)
                (void)madvise(im.addr, im.size_bytes, MADV_HUGEPAGE);
        if (madvise(im.addr, im.size_bytes, MADV_POPULATE_WRITE) < 0) {
                r = errno == EFAULT || errno == EHWPOISON ? -ENOMEM : -errno;
                goto fail;
        }
        if (!im.hugetlb)
                im.thp_bytes = shmem_pmd_bytes(im.addr);
        *img = im;
        return 0;
fail:
        dsv_hugepages_image_done(&im);
        return r;
}

int dsv_hugepages_image_fill(struct dsv_hugepages_image *img, const char *path) {
        if (!img || !img->addr || !path)
                return -EINVAL;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t off = 0;
        int r = 0;
        while (off < img->len_bytes) {
                ssize_t n = pread(fd, (char *)img->addr + off, img->len_bytes - off, (off_t)off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = n < 0 ? -errno : -EIO;
                        break;
                }
                off += (size_t)n;
        }
        close(fd);
        return r;
}

int dsv_hugepages_image_seal(struct dsv_hugepages_image *img) {
        if (!img || img->fd < 0)
                return -EINVAL;
        /* F_SEAL_WRITE fails with EBUSY while a writable shared mapping exists. */
        if (img->addr) {
                munmap(img->addr, img->size_bytes);
                img->addr = NULL;
        }
        static const struct { unsigned seal; const char *name; } seals[] = {
                {F_SEAL_SHRINK, "F_SEAL_SHRINK"},
                {F_SEAL_GROW, "F_SEAL_GROW"},
                {F_SEAL_WRITE, "F_SEAL_WRITE"},
        };
        unsigned all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
        if (fcntl(img->fd, F_ADD_SEALS, all) < 0) {
                /* Add what the kernel takes one by one, and name what it refused. */
                size_t len = strlen(img->note);
                for (size_t i = 0; i < sizeof seals / sizeof seals[0]; i++) {
                        if (fcntl(img->fd, F_ADD_SEALS, seals[i].seal) == 0)
                                continue;
                        int n = snprintf(img->note + len, sizeof img->note - len, "%s%s refused: %s",
                                         len ? "; " : "", seals[i].name, strerror(errno));
                        if (n > 0)
                                len = len + (size_t)n < sizeof img->note ? len + (size_t)n : sizeof img->note - 1;
                }
        }
        int got = fcntl(img->fd, F_GET_SEALS);
        if (got < 0)
                return -errno;
        img->seals = (unsigned)got;
        unsigned size_seals = F_SEAL_SHRINK | F_SEAL_GROW;
        return (img->seals & size_seals) == size_seals ? 0 : -EOPNOTSUPP;
}

int dsv_hugepages_image_pages_off_node(const struct dsv_hugepages_image *img, int node) {
        if (!img || img->fd < 0 || node < 0)
                return -EINVAL;
        size_t page = img->hugetlb ? DSV_HUGEPAGE_2MB_BYTES : (size_t)sysconf(_SC_PAGESIZE);
        unsigned char *map = mmap(NULL, img->size_bytes, PROT_READ, MAP_SHARED, img->fd, 0);
        if (map == MAP_FAILED)
                return -errno;
        /* A fresh mapping has no page table entries, and move_pages() reports those as
         * -ENOENT: map the existing pages in first (nothing is allocated). */
        int r = madvise(map, img->size_bytes, MADV_POPULATE_READ) < 0 ? -errno : 0;
        size_t n_pages = img->size_bytes / page, off_node = 0;
        void *pages[512];
        int status[512];
        for (size_t i = 0; r == 0 && i < n_pages; i += 512) {
                size_t n = n_pages - i < 512 ? n_pages - i : 512;
                for (size_t j = 0; j < n; j++)
                        pages[j] = map + (i + j) * page;
                if (move_pages(0, n, pages, NULL, status, 0) < 0) {
                        r = -errno;
                        break;
                }
                for (size_t j = 0; j < n; j++)
                        off_node += status[j] != node;
        }
        munmap(map, img->size_bytes);
        if (r < 0)
                return r;
        return off_node > INT_MAX ? -EOVERFLOW : (int)off_node;
}

int dsv_hugepages_image_measure_thp(struct dsv_hugepages_image *img) {
        if (!img || img->fd < 0)
                return -EINVAL;
        img->thp_bytes = 0;
        if (img->hugetlb)
                return 0;
        void *map = mmap(NULL, img->size_bytes, PROT_READ, MAP_SHARED, img->fd, 0);
        if (map == MAP_FAILED)
                return -errno;
        /* the mapping is 2 MiB aligned for shmem; asking lets the fault map whole folios */
        (void)madvise(map, img->size_bytes, MADV_HUGEPAGE);
        int r = madvise(map, img->size_bytes, MADV_POPULATE_READ) < 0 ? -errno : 0;
        if (r == 0)
                img->thp_bytes = shmem_pmd_bytes(map);
        munmap(map, img->size_bytes);
        return r;
}

void dsv_hugepages_image_done(struct dsv_hugepages_image *img) {
        if (!img)
                return;
        if (img->addr) {
                munmap(img->addr, img->size_bytes);
                img->addr = NULL;
        }
        if (img->fd >= 0) {
                close(img->fd);
                img->fd = -1;
        }
}
