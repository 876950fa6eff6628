/* test-platform-hugepages.c — the sealed weight image on real 2 MiB pages (needs root).
 * Pages are reserved by raising /proc/sys/vm/nr_hugepages, and shmem's transparent ones
 * allowed by setting /sys/kernel/mm/transparent_hugepage/shmem_enabled to advise; the old
 * value is restored by the parent after the test body, which runs in a forked child so
 * that a crash or a SIGBUS in the body cannot skip the restore. */
#include <fcntl.h>
#include <ftw.h>
#include <numaif.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv_platform.h"
#include "t.h"

#define MIB (1ull << 20)
#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static int read_long(const char *path, long *ret) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        int n = fscanf(f, "%ld", ret);
        fclose(f);
        return n == 1 ? 0 : -EBADMSG;
}

static int write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        if (!f)
                return -errno;
        fputs(text, f);
        return fclose(f) == 0 ? 0 : -errno;
}

static int write_long(const char *path, long v) {
        char text[32];
        snprintf(text, sizeof text, "%ld\n", v);
        return write_text(path, text);
}

static long meminfo(const char *key) {
        FILE *f = fopen("/proc/meminfo", "re");
        if (!f)
                return -1;
        char line[256];
        long v = -1;
        size_t lk = strlen(key);
        while (fgets(line, sizeof line, f))
                if (strncmp(line, key, lk) == 0 && line[lk] == ':')
                        v = strtol(line + lk + 1, NULL, 10);
        fclose(f);
        return v;
}

static unsigned char pattern(size_t i) {
        return (unsigned char)((i * 131u) % 251u);
}

/* Maps fd read-only in a forked child and checks len bytes of the pattern there. */
static int check_in_child(int fd, size_t len) {
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                const unsigned char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
                if (p == MAP_FAILED)
                        _exit(2);
                for (size_t i = 0; i < len; i++)
                        if (p[i] != pattern(i))
                                _exit(3);
                _exit(0);
        }
        int st;
        if (waitpid(pid, &st, 0) < 0)
                return -errno;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EBADMSG;
}

/* Runs body in a forked child, so that a crash or a SIGBUS in it cannot skip the
 * caller's restore of a host setting; returns the child's wait status, -1 if there was
 * no child. */
static int run_in_child(void (*body)(void)) {
        pid_t pid = fork();
        if (pid == 0) {
                body();
                fflush(stderr);
                _exit(t_failed_current ? 1 : 0);
        }
        int st = -1;
        if (pid > 0)
                waitpid(pid, &st, 0);
        return st;
}

#define ASSERT_CHILD_PASSED(st)                                                                   \
        do {                                                                                      \
                if ((st) == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)                         \
                        T_FAIL("test body failed (status 0x%x)", st);                             \
        } while (0)

/* Runs body in a child with nr_hugepages raised by extra; restores the old value in
 * the parent whatever happens to the child. */
static void with_reserved_pages(long extra, void (*body)(void)) {
        long old;
        ASSERT_OK(read_long(NR_HUGEPAGES, &old));
        int r = write_long(NR_HUGEPAGES, old + extra);
        int st = r < 0 ? -1 : run_in_child(body);
        int rr = write_long(NR_HUGEPAGES, old);
        long now = -1;
        read_long(NR_HUGEPAGES, &now);
        ASSERT_OK(r);
        ASSERT_OK(rr);
        ASSERT_EQ(now, old);
        ASSERT_CHILD_PASSED(st);
}

static void hugetlb_image_body(void) {
        uint64_t free0 = 0, free1 = 0, free2 = 0;
        ASSERT_OK(dsv_hugepages_free_on_node(NULL, 0, &free0));
        if (free0 < 4)
                T_FAIL("only %llu free 2 MiB pages on node 0 after reserving", (unsigned long long)free0);
        long mi0 = meminfo("HugePages_Free");

        struct dsv_hugepages_image img;
        size_t len = 8 * MIB - 100;
        ASSERT_OK(dsv_hugepages_image_init(&img, "dsvtest-weights", len, 0, DSV_HUGEPAGES_MODE_REQUIRE, NULL));
        ASSERT_TRUE(img.hugetlb);
        ASSERT_EQ(img.thp_bytes, 0); /* counts shmem's transparent pages only */
        ASSERT_EQ(img.size_bytes, 8 * MIB);
        ASSERT_EQ(img.len_bytes, len);
        ASSERT_TRUE(img.addr != NULL);

        /* Faulted in at init: the pool shrank by exactly 4 pages, on node 0. */
        ASSERT_EQ(meminfo("HugePages_Free"), mi0 - 4);
        ASSERT_OK(dsv_hugepages_free_on_node(NULL, 0, &free1));
        ASSERT_EQ(free1, free0 - 4);
        int node = -1;
        unsigned char *p = img.addr;
        ASSERT_OK(get_mempolicy(&node, NULL, 0, p + 6 * MIB, MPOL_F_NODE | MPOL_F_ADDR));
        ASSERT_EQ(node, 0);

        for (size_t i = 0; i < len; i++)
                p[i] = pattern(i);
        ASSERT_OK(dsv_hugepages_image_seal(&img));
        ASSERT_TRUE(img.addr == NULL);
        fprintf(stderr, "  hugetlb memfd seals in effect: 0x%x%s%s\n", img.seals, img.note[0] ? "; " : "",
                img.note);
        ASSERT_EQ(img.seals & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
        if (img.seals & F_SEAL_WRITE) {
                void *w = mmap(NULL, img.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, img.fd, 0);
                ASSERT_TRUE(w == MAP_FAILED);
                ASSERT_EQ(errno, EPERM);
        }
        ASSERT_TRUE(ftruncate(img.fd, (off_t)img.size_bytes * 2) < 0);
        ASSERT_EQ(errno, EPERM);

        /* Placement, as dsvisor checks it before READY=1: all 4 pages on node 0. */
        ASSERT_EQ(dsv_hugepages_image_pages_off_node(&img, 0), 0);
        ASSERT_EQ(dsv_hugepages_image_pages_off_node(&img, 1), 4);
        ASSERT_EQ(meminfo("HugePages_Free"), mi0 - 4);

        /* A worker's view: read-only shared mapping in another process. */
        ASSERT_OK(check_in_child(img.fd, len));

        dsv_hugepages_image_done(&img);
        ASSERT_EQ(img.fd, -1);
        ASSERT_EQ(meminfo("HugePages_Free"), mi0);
        ASSERT_OK(dsv_hugepages_free_on_node(NULL, 0, &free2));
        ASSERT_EQ(free2, free0);
}

TEST(hugetlb_image_fill_seal_share) {
        with_reserved_pages(6, hugetlb_image_body);
}

static void require_refuses_body(void) {
        uint64_t free0 = 0, free_all = 0;
        ASSERT_OK(dsv_hugepages_free_on_node(NULL, 0, &free0));
        ASSERT_OK(dsv_hugepages_free_on_node(NULL, -1, &free_all));
        ASSERT_TRUE(free_all >= free0);
        long mi0 = meminfo("HugePages_Free");

        /* One page more than the node has: refused before anything is allocated. */
        struct dsv_hugepages_image img = {.fd = -1};
        size_t len = (size_t)(free0 + 1) * DSV_HUGEPAGE_2MB_BYTES;
        ASSERT_ERR(dsv_hugepages_image_init(&img, "dsvtest-too-big", len, 0, DSV_HUGEPAGES_MODE_REQUIRE, NULL),
                   -ENOMEM);
        ASSERT_EQ(img.fd, -1);
        ASSERT_EQ(meminfo("HugePages_Free"), mi0);

        /* auto falls back to normal pages and says why. */
        ASSERT_OK(dsv_hugepages_image_init(&img, "dsvtest-auto", len, 0, DSV_HUGEPAGES_MODE_AUTO, NULL));
        ASSERT_TRUE(!img.hugetlb);
        ASSERT_TRUE(strstr(img.note, "normal pages") != NULL);
        ASSERT_EQ(meminfo("HugePages_Free"), mi0);
        dsv_hugepages_image_done(&img);
}

TEST(require_refuses_when_too_few_pages_are_free) {
        with_reserved_pages(2, require_refuses_body);
}

/* Normal shmem pages (mode off): same contract, no hugetlb pool needed. */
TEST(normal_image_fill_seal_share) {
        struct dsv_hugepages_image img;
        size_t len = 3 * MIB + 7;
        ASSERT_OK(dsv_hugepages_image_init(&img, "dsvtest-normal", len, -1, DSV_HUGEPAGES_MODE_OFF, NULL));
        ASSERT_TRUE(!img.hugetlb);
        ASSERT_EQ(img.size_bytes, 4 * MIB);
        unsigned char *p = img.addr;
        for (size_t i = 0; i < len; i++)
                p[i] = pattern(i);
        int r = dsv_hugepages_image_seal(&img);
        unsigned seals = img.seals;
        int child = r < 0 ? r : check_in_child(img.fd, len);
        int off = r < 0 ? r : dsv_hugepages_image_pages_off_node(&img, 0);
        dsv_hugepages_image_done(&img);
        ASSERT_OK(r);
        ASSERT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
        ASSERT_OK(child);
        ASSERT_EQ(off, 0); /* one node here: every base page is on node 0 */
        dsv_hugepages_image_done(&img); /* a second call is a no-op */
}

#define SHMEM_ENABLED "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

/* kB of `field` (e.g. "ShmemPmdMapped") in this process's VMA starting at addr, or -1. */
static long smaps_field(const void *addr, const char *field) {
        FILE *f = fopen("/proc/self/smaps", "re");
        if (!f)
                return -1;
        char line[512];
        int inside = 0;
        long v = -1;
        size_t lf = strlen(field);
        while (fgets(line, sizeof line, f) && v < 0) {
                unsigned long a, b;
                if (sscanf(line, "%lx-%lx ", &a, &b) == 2)
                        inside = a == (uintptr_t)addr;
                else if (inside && strncmp(line, field, lf) == 0 && line[lf] == ':')
                        v = strtol(line + lf + 1, NULL, 10);
        }
        fclose(f);
        return v;
}

static void shmem_image_body(void) {
        struct dsv_hugepages_image img;
        size_t len = 8 * MIB - 100;
        ASSERT_OK(dsv_hugepages_image_init(&img, "dsvtest-shmem", len, -1, DSV_HUGEPAGES_MODE_OFF, NULL));
        ASSERT_TRUE(!img.hugetlb);
        /* the supervisor's own mapping: every 2 MiB of the image in one PMD */
        ASSERT_EQ(smaps_field(img.addr, "ShmemPmdMapped"), 8 * 1024);
        ASSERT_EQ(img.thp_bytes, 8 * MIB);
        unsigned char *p = img.addr;
        for (size_t i = 0; i < len; i++)
                p[i] = pattern(i);
        ASSERT_OK(dsv_hugepages_image_seal(&img));
        /* measured again through the fd, as for an image re-attached from the fd store */
        img.thp_bytes = 0;
        ASSERT_OK(dsv_hugepages_image_measure_thp(&img));
        ASSERT_EQ(img.thp_bytes, 8 * MIB);
        /* a worker's read-only mapping that asks, as dse_model_open_fd does, gets them too */
        pid_t pid = fork();
        if (pid == 0) {
                const unsigned char *q = mmap(NULL, img.size_bytes, PROT_READ, MAP_SHARED, img.fd, 0);
                if (q == MAP_FAILED || madvise((void *)q, img.size_bytes, MADV_HUGEPAGE) < 0)
                        _exit(2);
                unsigned sum = 0;
                for (size_t i = 0; i < len; i += 4096)
                        sum += q[i];
                long kb = smaps_field(q, "ShmemPmdMapped");
                fprintf(stderr, "  worker view: ShmemPmdMapped %ld kB (sum %u)\n", kb, sum);
                _exit(kb == 8 * 1024 ? 0 : 3);
        }
        int st = 0;
        ASSERT_TRUE(pid > 0);
        waitpid(pid, &st, 0);
        dsv_hugepages_image_done(&img);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* shmem_enabled "advise" (as deploy/host/tmpfiles.d sets it): the normal-pages image asks
 * for 2 MiB pages and gets them. The old setting is written back by the parent whatever
 * happens to the child. */
TEST(normal_image_asks_for_2mib_pages) {
        char line[256] = "", old[32] = "";
        FILE *f = fopen(SHMEM_ENABLED, "re");
        ASSERT_TRUE(f != NULL);
        ASSERT_TRUE(fgets(line, sizeof line, f) != NULL);
        fclose(f);
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        ASSERT_TRUE(a && b && b - a - 1 < (long)sizeof old);
        memcpy(old, a + 1, (size_t)(b - a - 1));
        int wr = write_text(SHMEM_ENABLED, "advise\n");
        int st = wr < 0 ? -1 : run_in_child(shmem_image_body);
        int rr = write_text(SHMEM_ENABLED, old);
        ASSERT_OK(wr);
        ASSERT_OK(rr);
        ASSERT_CHILD_PASSED(st);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

/* The free-page check reads the per-node sysfs file: a fake sysfs with 3 free pages
 * admits 6 MiB and refuses 6 MiB + 1 in require mode. */
TEST(free_check_reads_per_node_sysfs) {
        char root[] = "/tmp/dsv-sysfs-XXXXXX";
        ASSERT_TRUE(mkdtemp(root) != NULL);
        char p[512];
        const char *dirs[] = {"devices", "devices/system", "devices/system/node", "devices/system/node/node0",
                              "devices/system/node/node0/hugepages",
                              "devices/system/node/node0/hugepages/hugepages-2048kB",
                              "devices/system/node/node1", "devices/system/node/node1/hugepages",
                              "devices/system/node/node1/hugepages/hugepages-2048kB"};
        int r = 0;
        for (size_t i = 0; !r && i < sizeof dirs / sizeof dirs[0]; i++) {
                snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
                r = mkdir(p, 0755) < 0 ? -errno : 0;
        }
        snprintf(p, sizeof p, "%s/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages", root);
        r = r ?: write_long(p, 3);
        snprintf(p, sizeof p, "%s/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages", root);
        r = r ?: write_long(p, 5);
        uint64_t n0 = 0, n1 = 0, all = 0;
        int r0 = r ?: dsv_hugepages_free_on_node(root, 0, &n0);
        int r1 = r ?: dsv_hugepages_free_on_node(root, 1, &n1);
        int ra = r ?: dsv_hugepages_free_on_node(root, -1, &all);
        int r2 = r ?: dsv_hugepages_free_on_node(root, 2, &all);
        struct dsv_hugepages_image img = {.fd = -1};
        int rq = r ?: dsv_hugepages_image_init(&img, "dsvtest-fake", 6 * MIB + 1, 0, DSV_HUGEPAGES_MODE_REQUIRE, root);
        nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        ASSERT_OK(r);
        ASSERT_OK(r0);
        ASSERT_OK(r1);
        ASSERT_OK(ra);
        ASSERT_EQ(n0, 3);
        ASSERT_EQ(n1, 5);
        ASSERT_EQ(all, 8);
        ASSERT_ERR(r2, -ENOENT);
        ASSERT_ERR(rq, -ENOMEM);
        ASSERT_EQ(img.fd, -1);
}
