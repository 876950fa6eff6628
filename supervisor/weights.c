/* weights.c — the model's weights in shared memory: one sealed memfd image per NUMA node
 * (HugePages when reserved), handed to systemd's fd store so that a restarted supervisor
 * re-attaches it instead of reading the model again. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "sup.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

static void weights_fdname(const struct sup_model *m, int node_os, char *buf, size_t size) {
        snprintf(buf, size, "dsvisor-weights-n%d-%s", node_os, m->key);
}

/* Adopts a memfd that systemd's fd store handed back, if it matches our model. */
static int adopt_stored(const struct sup_model *m, struct sup_weights *w, char **names, int n_fds) {
        char want[160];
        weights_fdname(m, w->node_os, want, sizeof want);
        for (int i = 0; i < n_fds; i++) {
                if (!names || !names[i] || strcmp(names[i], want) != 0)
                        continue;
                int fd = 3 + i;
                struct stat st;
                struct statfs sf;
                if (fstat(fd, &st) < 0 || fstatfs(fd, &sf) < 0 || (uint64_t)st.st_size < m->bytes)
                        return 0;
                memset(&w->img, 0, sizeof w->img);
                w->img.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                if (w->img.fd < 0)
                        return -errno;
                w->img.len_bytes = m->bytes;
                w->img.size_bytes = (size_t)st.st_size;
                w->img.hugetlb = (unsigned long)sf.f_type == HUGETLBFS_MAGIC;
                w->img.node = w->node_os;
                w->img.seals = (unsigned)fcntl(fd, F_GET_SEALS);
                snprintf(w->img.note, sizeof w->img.note, "re-attached from the systemd fd store");
                w->from_store = true;
                int q = dsv_hugepages_image_measure_thp(&w->img);
                if (q < 0)
                        sup_log(4, "Failed to measure the re-attached weight image's 2 MiB pages: %s", strerror(-q));
                return 1;
        }
        return 0;
}

static void store_one(const struct sup_weights *w, const struct sup_model *m) {
        char name[160], state[256];
        weights_fdname(m, w->node_os, name, sizeof name);
        snprintf(state, sizeof state, "FDSTORE=1\nFDNAME=%s", name);
        int q = dsv_notify_with_fds(state, &w->img.fd, 1);
        if (q < 0)
                sup_log(4, "Failed to keep the weight image in the systemd fd store: %s, ignoring", strerror(-q));
}

/* Creates, fills and seals node w->node_os's image, and offers it to the fd store. */
static int load_one(struct sup_weight_set *set, struct sup_weights *w, const struct sup_model *m,
                    enum dsv_hugepages_mode mode) {
        int node = w->node_os;
        char name[160];
        weights_fdname(m, node, name, sizeof name);
        int64_t t0 = dsv_clock_now_ms();
        int r = dsv_hugepages_image_init(&w->img, name, m->bytes, node, mode, NULL);
        if (r == -ENOMEM && mode == DSV_HUGEPAGES_MODE_REQUIRE) {
                uint64_t free_pages = 0;
                dsv_hugepages_free_on_node(NULL, node, &free_pages);
                sup_log(3, "--hugepages require: node %d has %" PRIu64 " free 2 MiB pages, the model needs %" PRIu64
                           " (reserve them in /proc/sys/vm/nr_hugepages or "
                           "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages)",
                        node, (uint64_t)free_pages,
                        (uint64_t)((m->bytes + DSV_HUGEPAGE_2MB_BYTES - 1) / DSV_HUGEPAGE_2MB_BYTES), node);
                return r;
        }
        if (r < 0) {
                sup_log(3, "Failed to create the weight image for node %d: %s", node, strerror(-r));
                return r;
        }
        set->n++;
        if ((r = dsv_hugepages_image_fill(&w->img, m->path)) < 0) {
                sup_log(3, "Failed to read '%s' into the weight image: %s", m->path, strerror(-r));
                return r;
        }
        if ((r = dsv_hugepages_image_seal(&w->img)) < 0) {
                sup_log(3, "Failed to seal the weight image for node %d: %s", node, strerror(-r));
                return r;
        }
        char pages[96];
        if (w->img.hugetlb)
                snprintf(pages, sizeof pages, "HugePages");
        else
                snprintf(pages, sizeof pages, "normal pages, %zu MiB of them in transparent 2 MiB pages",
                         w->img.thp_bytes >> 20);
        sup_log(6, "Weights for node %d loaded in %" PRId64 " ms: %zu bytes in %s%s%s", node, dsv_clock_now_ms() - t0,
                w->img.size_bytes, pages, w->img.note[0] ? "; " : "", w->img.note);
        store_one(w, m);
        return 0;
}

int sup_weight_set_load(struct sup_weight_set *set, const struct sup_model *m, const int *nodes, int n_nodes,
                        enum dsv_hugepages_mode mode) {
        char **names = NULL;
        int n_fds = dsv_notify_listen_fds(&names);
        if (n_fds < 0) {
                sup_log(4, "Failed to read the systemd fd store: %s, ignoring", strerror(-n_fds));
                n_fds = 0;
        }
        int r = 0;
        for (int i = 0; i < n_nodes && r >= 0; i++) {
                int node = nodes[i];
                if (sup_weight_set_find(set, node))
                        continue;
                if (set->n >= DSV_TOPOLOGY_MAX_NODES) {
                        r = -E2BIG;
                        break;
                }
                struct sup_weights *w = &set->w[set->n];
                w->node_os = node;
                w->img.fd = -1;
                r = adopt_stored(m, w, names, n_fds);
                if (r > 0) {
                        set->n++;
                        sup_log(6, "Weights for node %d re-attached from the fd store (%zu bytes, %s%s)", node,
                                w->img.size_bytes, w->img.hugetlb ? "HugePages" : "normal pages",
                                w->img.thp_bytes ? ", some in transparent 2 MiB pages" : "");
                        r = 0;
                        continue;
                }
                if (r == 0)
                        r = load_one(set, w, m, mode);
        }
        dsv_notify_names_free(names);
        for (int i = 0; i < n_fds; i++)
                close(3 + i); /* adopted ones were duplicated */
        return r < 0 ? r : 0;
}

struct sup_weights *sup_weight_set_find(struct sup_weight_set *set, int node_os) {
        for (int k = 0; k < set->n; k++)
                if (set->w[k].node_os == node_os)
                        return &set->w[k];
        return NULL;
}

void sup_weight_set_unstore(const struct sup_weight_set *set, const struct sup_model *m) {
        for (int k = 0; k < set->n; k++) {
                char name[160], state[256];
                weights_fdname(m, set->w[k].node_os, name, sizeof name);
                snprintf(state, sizeof state, "FDSTOREREMOVE=1\nFDNAME=%s", name);
                int q = dsv_notify(state);
                if (q < 0)
                        sup_log(4, "Failed to remove '%s' from the systemd fd store: %s, ignoring", name, strerror(-q));
        }
}

void sup_weight_set_store(const struct sup_weight_set *set, const struct sup_model *m) {
        for (int k = 0; k < set->n; k++)
                store_one(&set->w[k], m);
}

void sup_weight_set_done(struct sup_weight_set *set) {
        for (int k = 0; k < set->n; k++)
                dsv_hugepages_image_done(&set->w[k].img);
        set->n = 0;
}
