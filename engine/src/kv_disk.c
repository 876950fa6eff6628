/* The KV cache's disk tier (kv_disk.h): one preallocated file of fixed-size slots, an
 * in-memory index (chained block key -> slot, LRU order) published atomically to a
 * side file, and a writer thread fed by a bounded queue.
 *
 * File: a 4096-byte header (identity and geometry, CRC32C), then n_slots slots of
 * slot_bytes: a slot head (magic, CRC32C, key, parent key), the block's token ids, the
 * block's rows. The CRC covers everything after it, so a slot torn by a crash or
 * damaged on disk never verifies. Index: its own header (the file header's CRC, entry
 * count, CRC of the entries) and (key, parent, slot) entries, oldest first; written to
 * path.index.tmp, synced, renamed over path.index after the slots it names are synced.
 * A slot reused after the last publish no longer matches its index entry (key or CRC)
 * and is dropped at its first read, so a crash between a slot write and the publish
 * serves nothing stale.
 *
 * Reads back into the pool run on a reader thread of their own, one run of blocks per
 * sequence at a time, in the order the runs came, so the cache's thread never waits
 * for the disk; a run stops at its first block that does not verify.
 *
 * Locking: one mutex over the index, the queue's counters, the read runs and the
 * statistics; file reads and writes run outside it. A slot is taken out of the index
 * before the writer overwrites it, and a reader that raced with that sees a key or CRC
 * mismatch. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "kv_disk.h"
#include "model/format.h"

#define NIL (-1)
#define HEADER_BYTES 4096
#define SLOT_ALIGN 512 /* a disk sector: slots are read and written whole, never mapped */
#define DEFAULT_QUEUE 32
#define PUBLISH_EVERY 64 /* slot writes between index publishes while the queue stays busy */

/* 2: a block's rows in planes, head-major (kv.h) */
static const char file_magic[8] = {'D', 'S', 'V', 'K', 'V', 'T', 'R', '2'};
static const char index_magic[8] = {'D', 'S', 'V', 'K', 'V', 'I', 'X', '1'};
#define SLOT_MAGIC 0x4C534B44u /* "DKSL" */

struct file_header {
        char magic[8];
        uint32_t model_crc, tokenizer_crc;
        int32_t dtype, block_tokens, n_layers, row_bytes;
        uint64_t block_bytes, n_slots, slot_bytes;
        uint32_t crc; /* of the bytes before it */
        uint32_t pad;
};

struct slot_head {
        uint32_t magic;
        uint32_t crc; /* of key, parent, the ids and the rows */
        uint64_t key, parent;
};

struct index_header {
        char magic[8];
        uint32_t file_crc; /* the file header's crc: the index belongs to that file */
        uint32_t entries_crc;
        uint64_t n_entries;
        uint32_t crc; /* of the bytes before it */
        uint32_t pad;
};

struct index_entry {
        uint64_t key, parent;
        uint32_t slot, pad;
};

struct slot {
        uint64_t key, parent;
        int32_t used;
        int32_t hnext, lru_prev, lru_next;
};

struct spill {
        uint64_t key, parent;
};

struct dse__kv_disk {
        char *path, *index_path, *tmp_path;
        int fd;
        struct file_header hdr;
        int32_t n_slots, bt;
        uint64_t block_bytes, slot_bytes;

        pthread_mutex_t mu;
        pthread_cond_t wake; /* the writer: work, a flush, or stop */
        pthread_cond_t idle; /* flushers: the queue is empty and the index published */
        pthread_cond_t space; /* spills that may wait: an entry left the queue */
        pthread_t writer;
        int writer_started;
        pthread_cond_t read_wake; /* the reader: a run queued, a hold released, or stop */
        pthread_cond_t read_done; /* the cache: a read finished */
        pthread_t reader;
        int reader_started;
        struct dse__kv_disk_reads *runs_head, *runs_tail; /* queued read runs, oldest first */
        struct dse__kv_disk_reads *reading;               /* the run whose read is in flight */
        int64_t reads_finished;                           /* reads done since open */

        struct slot *slots;
        int32_t *buckets;
        uint32_t bucket_mask;
        int32_t *free_stack, n_free;
        int32_t lru_head, lru_tail, n_used;

        int32_t q_cap, q_head, q_count;
        struct spill *q;
        int32_t *q_ids;    /* (q_cap, bt) */
        uint8_t *q_rows;   /* (q_cap, block_bytes) */
        struct index_entry *publish_buf; /* (n_slots) */
        int32_t *load_ids; /* (bt) a slot's ids as read (loads come from the reader thread) */
        int32_t dirty;     /* slot writes since the last publish */
        int flush_wanted, stop, failed;
        enum dse_kv_disk_fault fault;

        int64_t written, read, dropped, corrupt;
};

/* ---- the index ---- */

static int32_t find(const struct dse__kv_disk *d, uint64_t key, uint64_t parent) {
        for (int32_t s = d->buckets[key & d->bucket_mask]; s != NIL; s = d->slots[s].hnext)
                if (d->slots[s].key == key && d->slots[s].parent == parent)
                        return s;
        return NIL;
}

static void lru_unlink(struct dse__kv_disk *d, int32_t s) {
        struct slot *e = &d->slots[s];
        if (e->lru_prev != NIL)
                d->slots[e->lru_prev].lru_next = e->lru_next;
        else
                d->lru_head = e->lru_next;
        if (e->lru_next != NIL)
                d->slots[e->lru_next].lru_prev = e->lru_prev;
        else
                d->lru_tail = e->lru_prev;
        e->lru_prev = e->lru_next = NIL;
}

static void lru_append(struct dse__kv_disk *d, int32_t s) {
        struct slot *e = &d->slots[s];
        e->lru_prev = d->lru_tail;
        e->lru_next = NIL;
        if (d->lru_tail != NIL)
                d->slots[d->lru_tail].lru_next = s;
        else
                d->lru_head = s;
        d->lru_tail = s;
}

static void insert(struct dse__kv_disk *d, int32_t s, uint64_t key, uint64_t parent) {
        struct slot *e = &d->slots[s];
        e->key = key;
        e->parent = parent;
        e->used = 1;
        uint32_t h = (uint32_t)(key & d->bucket_mask);
        e->hnext = d->buckets[h];
        d->buckets[h] = s;
        lru_append(d, s);
        d->n_used++;
}

/* Takes slot s out of the index (its contents are no longer named by anything). */
static void evict(struct dse__kv_disk *d, int32_t s) {
        int32_t *p = &d->buckets[d->slots[s].key & d->bucket_mask];
        while (*p != s)
                p = &d->slots[*p].hnext;
        *p = d->slots[s].hnext;
        d->slots[s].hnext = NIL;
        d->slots[s].used = 0;
        lru_unlink(d, s);
        d->n_used--;
}

static void clear_index(struct dse__kv_disk *d) {
        for (uint32_t i = 0; i <= d->bucket_mask; i++)
                d->buckets[i] = NIL;
        for (int32_t i = 0; i < d->n_slots; i++) {
                d->slots[i] = (struct slot){0, 0, 0, NIL, NIL, NIL};
                d->free_stack[i] = d->n_slots - 1 - i;
        }
        d->n_free = d->n_slots;
        d->lru_head = d->lru_tail = NIL;
        d->n_used = 0;
}

/* A slot for a new block: a free one, else the least recently used. */
static int32_t slot_take(struct dse__kv_disk *d) {
        if (d->n_free > 0)
                return d->free_stack[--d->n_free];
        int32_t s = d->lru_head;
        evict(d, s);
        return s;
}

/* ---- file I/O ---- */

static int pwrite_all(int fd, const void *buf, size_t n, off_t off) {
        const uint8_t *p = buf;
        while (n > 0) {
                ssize_t w = pwrite(fd, p, n, off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                p += w;
                n -= (size_t)w;
                off += w;
        }
        return 0;
}

static int pread_all(int fd, void *buf, size_t n, off_t off) {
        uint8_t *p = buf;
        while (n > 0) {
                ssize_t r = pread(fd, p, n, off);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return r < 0 ? -errno : -EIO;
                p += r;
                n -= (size_t)r;
                off += r;
        }
        return 0;
}

static off_t slot_offset(const struct dse__kv_disk *d, int32_t s) {
        return (off_t)HEADER_BYTES + (off_t)s * (off_t)d->slot_bytes;
}

static uint32_t slot_crc(const struct slot_head *h, const int32_t *ids, int32_t bt, const void *rows, uint64_t n) {
        uint32_t c = dse__crc32c(0, &h->key, sizeof h->key);
        c = dse__crc32c(c, &h->parent, sizeof h->parent);
        c = dse__crc32c(c, ids, (size_t)bt * sizeof(int32_t));
        return dse__crc32c(c, rows, n);
}

static int write_slot(struct dse__kv_disk *d, int32_t s, const struct spill *e, const int32_t *ids, const uint8_t *rows,
                      enum dse_kv_disk_fault fault) {
        if (fault == DSE_KV_DISK_FAULT_WRITE_EIO)
                return -EIO;
        struct slot_head h = {SLOT_MAGIC, 0, e->key, e->parent};
        h.crc = slot_crc(&h, ids, d->bt, rows, d->block_bytes);
        struct iovec iov[3] = {{&h, sizeof h}, {(void *)ids, (size_t)d->bt * sizeof(int32_t)},
                               {(void *)rows, d->block_bytes}};
        size_t want = iov[0].iov_len + iov[1].iov_len + iov[2].iov_len;
        ssize_t w = pwritev(d->fd, iov, 3, slot_offset(d, s));
        if (w == (ssize_t)want)
                return 0;
        return w < 0 ? -errno : -EIO; /* a short write into preallocated space is an I/O error */
}

/* Writes the index (the caller holds no lock; entries were gathered under it). */
static int write_index(struct dse__kv_disk *d, const struct index_entry *entries, uint64_t n) {
        struct index_header ih;
        memset(&ih, 0, sizeof ih);
        memcpy(ih.magic, index_magic, sizeof ih.magic);
        ih.file_crc = d->hdr.crc;
        ih.entries_crc = dse__crc32c(0, entries, n * sizeof *entries);
        ih.n_entries = n;
        ih.crc = dse__crc32c(0, &ih, offsetof(struct index_header, crc));
        if (fdatasync(d->fd) < 0)
                return -errno;
        int fd = open(d->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        int r = pwrite_all(fd, &ih, sizeof ih, 0);
        if (r == 0 && n > 0)
                r = pwrite_all(fd, entries, n * sizeof *entries, (off_t)sizeof ih);
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        close(fd);
        if (r == 0 && rename(d->tmp_path, d->index_path) < 0)
                r = -errno;
        return r;
}

/* Called with the lock held; drops it while writing. */
static int publish(struct dse__kv_disk *d) {
        uint64_t n = 0;
        for (int32_t s = d->lru_head; s != NIL; s = d->slots[s].lru_next)
                d->publish_buf[n++] = (struct index_entry){d->slots[s].key, d->slots[s].parent, (uint32_t)s, 0};
        d->dirty = 0;
        pthread_mutex_unlock(&d->mu);
        int r = write_index(d, d->publish_buf, n);
        pthread_mutex_lock(&d->mu);
        return r;
}

/* Turns the tier off after an I/O error (lock held). */
static void fail(struct dse__kv_disk *d, int err, const char *what) {
        if (!d->failed)
                dse__log(DSE_LOG_WARN, "KV disk tier %s: %s failed: %s; the tier is off, the RAM cache goes on", d->path,
                         what, strerror(-err));
        d->failed = 1;
}

static void *writer_main(void *arg) {
        struct dse__kv_disk *d = arg;
        pthread_mutex_lock(&d->mu);
        for (;;) {
                while ((d->q_count == 0 && !d->stop && !d->flush_wanted) ||
                       (d->q_count > 0 && d->fault == DSE_KV_DISK_FAULT_HOLD_WRITES && !d->stop))
                        pthread_cond_wait(&d->wake, &d->mu);
                if (d->q_count == 0) {
                        if (d->dirty > 0 && !d->failed) {
                                int r = publish(d);
                                if (r < 0)
                                        fail(d, r, "publishing the index");
                        }
                        if (d->q_count > 0)
                                continue;
                        d->flush_wanted = 0;
                        pthread_cond_broadcast(&d->idle);
                        if (d->stop)
                                break;
                        continue;
                }
                int32_t qi = d->q_head;
                struct spill e = d->q[qi];
                int32_t s = d->failed || find(d, e.key, e.parent) != NIL ? NIL : slot_take(d);
                if (s != NIL) {
                        enum dse_kv_disk_fault fault = d->fault;
                        if (fault == DSE_KV_DISK_FAULT_WRITE_EIO)
                                d->fault = DSE_KV_DISK_FAULT_NONE;
                        pthread_mutex_unlock(&d->mu);
                        int r = write_slot(d, s, &e, d->q_ids + (size_t)qi * d->bt,
                                           d->q_rows + (size_t)qi * d->block_bytes, fault);
                        if (r == 0 && fault == DSE_KV_DISK_FAULT_EXIT_BEFORE_INDEX)
                                _exit(0);
                        pthread_mutex_lock(&d->mu);
                        if (r < 0) {
                                d->free_stack[d->n_free++] = s;
                                fail(d, r, "writing a slot");
                        } else {
                                insert(d, s, e.key, e.parent);
                                d->written++;
                                d->dirty++;
                        }
                }
                d->q_head = (d->q_head + 1) % d->q_cap;
                d->q_count--;
                pthread_cond_broadcast(&d->space);
                if (d->dirty >= PUBLISH_EVERY && !d->failed) {
                        int r = publish(d);
                        if (r < 0)
                                fail(d, r, "publishing the index");
                }
        }
        pthread_mutex_unlock(&d->mu);
        return NULL;
}

static void *reader_main(void *arg);

/* ---- opening ---- */

static void make_header(struct file_header *h, const struct dse__kv_disk_identity *id, uint64_t n_slots,
                        uint64_t slot_bytes) {
        memset(h, 0, sizeof *h);
        memcpy(h->magic, file_magic, sizeof h->magic);
        h->model_crc = id->model_crc;
        h->tokenizer_crc = id->tokenizer_crc;
        h->dtype = id->dtype;
        h->block_tokens = id->block_tokens;
        h->n_layers = id->n_layers;
        h->row_bytes = id->row_bytes;
        h->block_bytes = id->block_bytes;
        h->n_slots = n_slots;
        h->slot_bytes = slot_bytes;
        h->crc = dse__crc32c(0, h, offsetof(struct file_header, crc));
}

/* Why the file on disk cannot be reused as it is (NULL: it can). */
static const char *mismatch(const struct file_header *want, const struct file_header *got, uint64_t file_size) {
        if (file_size < HEADER_BYTES)
                return "shorter than its header";
        if (memcmp(got->magic, file_magic, sizeof got->magic) != 0)
                return "not a KV tier file";
        if (got->crc != dse__crc32c(0, got, offsetof(struct file_header, crc)))
                return "its header fails its checksum";
        if (got->model_crc != want->model_crc)
                return "made for another model";
        if (got->tokenizer_crc != want->tokenizer_crc)
                return "made for another tokenizer";
        if (got->dtype != want->dtype)
                return "made for another KV type";
        if (got->block_tokens != want->block_tokens || got->n_layers != want->n_layers ||
            got->row_bytes != want->row_bytes || got->block_bytes != want->block_bytes)
                return "made for another block layout";
        if (got->n_slots != want->n_slots || got->slot_bytes != want->slot_bytes)
                return "made for another size";
        if (file_size != HEADER_BYTES + want->n_slots * want->slot_bytes)
                return "truncated or extended";
        return NULL;
}

/* Loads the published index into the empty in-memory one; the reason it cannot, or
 * NULL (a missing index is an empty tier, not an error). */
static const char *load_index(struct dse__kv_disk *d) {
        int fd = open(d->index_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? NULL : "its index cannot be opened";
        struct index_header ih;
        const char *why = NULL;
        struct stat st;
        if (fstat(fd, &st) < 0 || pread_all(fd, &ih, sizeof ih, 0) < 0)
                why = "its index is truncated";
        else if (memcmp(ih.magic, index_magic, sizeof ih.magic) != 0 ||
                 ih.crc != dse__crc32c(0, &ih, offsetof(struct index_header, crc)))
                why = "its index header fails its checksum";
        else if (ih.file_crc != d->hdr.crc)
                why = "its index belongs to another file";
        else if (ih.n_entries > (uint64_t)d->n_slots ||
                 (uint64_t)st.st_size != sizeof ih + ih.n_entries * sizeof(struct index_entry))
                why = "its index is truncated";
        else if (ih.n_entries > 0 &&
                 pread_all(fd, d->publish_buf, ih.n_entries * sizeof(struct index_entry), (off_t)sizeof ih) < 0)
                why = "its index cannot be read";
        else if (dse__crc32c(0, d->publish_buf, ih.n_entries * sizeof(struct index_entry)) != ih.entries_crc)
                why = "its index fails its checksum";
        close(fd);
        if (why)
                return why;
        for (uint64_t i = 0; i < ih.n_entries; i++) {
                const struct index_entry *e = &d->publish_buf[i];
                if (e->slot >= (uint32_t)d->n_slots || d->slots[e->slot].used) {
                        clear_index(d);
                        return "its index names a slot twice or past the end";
                }
                insert(d, (int32_t)e->slot, e->key, e->parent);
        }
        d->n_free = 0;
        for (int32_t s = d->n_slots - 1; s >= 0; s--)
                if (!d->slots[s].used)
                        d->free_stack[d->n_free++] = s;
        return NULL;
}

/* Makes the file a fresh, empty, preallocated tier. */
static int reset_file(struct dse__kv_disk *d, struct dse_diag *reterr) {
        uint64_t total = HEADER_BYTES + (uint64_t)d->n_slots * d->slot_bytes;
        uint8_t head[HEADER_BYTES];
        memset(head, 0, sizeof head);
        memcpy(head, &d->hdr, sizeof d->hdr);
        unlink(d->index_path);
        if (ftruncate(d->fd, 0) < 0)
                return dse__fail(reterr, -errno, "KV disk tier %s: cannot clear: %s", d->path, strerror(errno));
        int r = d->fault == DSE_KV_DISK_FAULT_PREALLOC_ENOSPC ? ENOSPC : posix_fallocate(d->fd, 0, (off_t)total);
        if (r != 0)
                return dse__fail(reterr, -r, "KV disk tier %s: cannot preallocate %llu MiB: %s", d->path,
                                 (unsigned long long)(total >> 20), strerror(r));
        if ((r = pwrite_all(d->fd, head, sizeof head, 0)) == 0 && fsync(d->fd) < 0)
                r = -errno;
        if (r < 0)
                return dse__fail(reterr, r, "KV disk tier %s: cannot write its header: %s", d->path, strerror(-r));
        return 0;
}

void dse__kv_disk_close(struct dse__kv_disk *d) {
        if (!d)
                return;
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_signal(&d->wake);
        pthread_cond_signal(&d->read_wake);
        pthread_mutex_unlock(&d->mu);
        if (d->writer_started)
                pthread_join(d->writer, NULL);
        if (d->reader_started)
                pthread_join(d->reader, NULL);
        if (d->fd >= 0)
                close(d->fd);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->wake);
        pthread_cond_destroy(&d->idle);
        pthread_cond_destroy(&d->space);
        pthread_cond_destroy(&d->read_wake);
        pthread_cond_destroy(&d->read_done);
        free(d->path);
        free(d->index_path);
        free(d->tmp_path);
        free(d->slots);
        free(d->buckets);
        free(d->free_stack);
        free(d->q);
        free(d->q_ids);
        free(d->q_rows);
        free(d->publish_buf);
        free(d->load_ids);
        free(d);
}

static char *concat(const char *a, const char *b) {
        size_t na = strlen(a), nb = strlen(b);
        char *s = malloc(na + nb + 1);
        if (s) {
                memcpy(s, a, na);
                memcpy(s + na, b, nb + 1);
        }
        return s;
}

int dse__kv_disk_open(const char *path, uint64_t bytes, int queue_blocks, const struct dse__kv_disk_identity *id,
                      enum dse_kv_disk_fault fault, struct dse__kv_disk **ret_disk, struct dse_diag *reterr) {
        uint64_t slot_bytes = sizeof(struct slot_head) + (uint64_t)id->block_tokens * sizeof(int32_t) + id->block_bytes;
        slot_bytes = (slot_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
        uint64_t n_slots = bytes > HEADER_BYTES ? (bytes - HEADER_BYTES) / slot_bytes : 0;
        if (n_slots > INT32_MAX / 2)
                n_slots = INT32_MAX / 2;
        if (n_slots == 0)
                return dse__fail(reterr, -ENOSPC, "KV disk tier %s: %llu bytes hold no slot of %llu bytes", path,
                                 (unsigned long long)bytes, (unsigned long long)slot_bytes);
        struct dse__kv_disk *d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->fd = -1;
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->wake, NULL);
        pthread_cond_init(&d->idle, NULL);
        pthread_cond_init(&d->space, NULL);
        pthread_cond_init(&d->read_wake, NULL);
        pthread_cond_init(&d->read_done, NULL);
        d->n_slots = (int32_t)n_slots;
        d->bt = id->block_tokens;
        d->block_bytes = id->block_bytes;
        d->slot_bytes = slot_bytes;
        d->q_cap = queue_blocks > 0 ? queue_blocks : DEFAULT_QUEUE;
        d->fault = fault;
        uint32_t nb = 16;
        while (nb < 2 * (uint32_t)n_slots)
                nb <<= 1;
        d->bucket_mask = nb - 1;
        d->path = strdup(path);
        d->index_path = concat(path, ".index");
        d->tmp_path = concat(path, ".index.tmp");
        d->slots = malloc((size_t)n_slots * sizeof *d->slots);
        d->buckets = malloc(nb * sizeof *d->buckets);
        d->free_stack = malloc((size_t)n_slots * sizeof *d->free_stack);
        d->q = calloc((size_t)d->q_cap, sizeof *d->q);
        d->q_ids = malloc((size_t)d->q_cap * (size_t)d->bt * sizeof(int32_t));
        d->q_rows = malloc((size_t)d->q_cap * d->block_bytes);
        d->publish_buf = malloc((size_t)n_slots * sizeof *d->publish_buf);
        d->load_ids = malloc((size_t)d->bt * sizeof(int32_t));
        if (!d->path || !d->index_path || !d->tmp_path || !d->slots || !d->buckets || !d->free_stack || !d->q ||
            !d->q_ids || !d->q_rows || !d->publish_buf || !d->load_ids) {
                dse__kv_disk_close(d);
                return dse__fail(reterr, -ENOMEM, "KV disk tier %s: cannot allocate its index and queue", path);
        }
        clear_index(d);
        make_header(&d->hdr, id, n_slots, slot_bytes);
        int r;
        d->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (d->fd < 0) {
                r = dse__fail(reterr, -errno, "KV disk tier %s: cannot open: %s", path, strerror(errno));
                dse__kv_disk_close(d);
                return r;
        }
        if (flock(d->fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? -EBUSY : -errno;
                dse__fail(reterr, r, "KV disk tier %s: in use by another process", path);
                dse__kv_disk_close(d);
                return r;
        }
        struct stat st;
        struct file_header got;
        memset(&got, 0, sizeof got);
        if (fstat(d->fd, &st) < 0) {
                r = dse__fail(reterr, -errno, "KV disk tier %s: cannot stat: %s", path, strerror(errno));
                dse__kv_disk_close(d);
                return r;
        }
        const char *why = NULL;
        if ((uint64_t)st.st_size >= HEADER_BYTES && pread_all(d->fd, &got, sizeof got, 0) < 0)
                why = "its header cannot be read";
        if (!why)
                why = mismatch(&d->hdr, &got, (uint64_t)st.st_size);
        if (!why && (why = load_index(d)) != NULL)
                clear_index(d);
        if (why) {
                if (st.st_size > 0)
                        dse__log(DSE_LOG_INFO, "KV disk tier %s: %s; clearing it", path, why);
                if ((r = reset_file(d, reterr)) < 0) {
                        dse__kv_disk_close(d);
                        return r;
                }
        }
        if ((r = pthread_create(&d->writer, NULL, writer_main, d)) != 0) {
                dse__kv_disk_close(d);
                return dse__fail(reterr, -r, "KV disk tier %s: cannot start its writer thread", path);
        }
        d->writer_started = 1;
        if ((r = pthread_create(&d->reader, NULL, reader_main, d)) != 0) {
                dse__kv_disk_close(d);
                return dse__fail(reterr, -r, "KV disk tier %s: cannot start its reader thread", path);
        }
        d->reader_started = 1;
        dse__log(DSE_LOG_INFO, "KV disk tier %s: %d slots of %llu bytes, %d blocks reused", path, d->n_slots,
                 (unsigned long long)slot_bytes, d->n_used);
        *ret_disk = d;
        return 0;
}

/* ---- the cache's side ---- */

int dse__kv_disk_spill(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids, const void *rows) {
        return dse__kv_disk_spill_until(d, key, parent, ids, rows, NULL);
}

int dse__kv_disk_spill_until(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids,
                             const void *rows, const struct timespec *until) {
        pthread_mutex_lock(&d->mu);
        if (d->failed) {
                pthread_mutex_unlock(&d->mu);
                return -EIO;
        }
        int32_t s = find(d, key, parent);
        if (s != NIL) {
                lru_unlink(d, s);
                lru_append(d, s);
                pthread_mutex_unlock(&d->mu);
                return 1;
        }
        while (until && d->q_count == d->q_cap && !d->failed)
                if (pthread_cond_timedwait(&d->space, &d->mu, until) != 0)
                        break;
        if (d->q_count == d->q_cap || d->failed) {
                int failed = d->failed;
                d->dropped += !failed;
                pthread_mutex_unlock(&d->mu);
                return failed ? -EIO : -EAGAIN;
        }
        /* The one producer fills the entry past the queue's end; the writer only reads
         * entries inside it. */
        int32_t qi = (d->q_head + d->q_count) % d->q_cap;
        pthread_mutex_unlock(&d->mu);
        d->q[qi] = (struct spill){key, parent};
        memcpy(d->q_ids + (size_t)qi * d->bt, ids, (size_t)d->bt * sizeof(int32_t));
        memcpy(d->q_rows + (size_t)qi * d->block_bytes, rows, d->block_bytes);
        pthread_mutex_lock(&d->mu);
        d->q_count++;
        pthread_cond_signal(&d->wake);
        pthread_mutex_unlock(&d->mu);
        return 0;
}

int dse__kv_disk_load(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids, void *rows) {
        pthread_mutex_lock(&d->mu);
        int32_t s = d->failed ? NIL : find(d, key, parent);
        if (s != NIL) {
                lru_unlink(d, s);
                lru_append(d, s);
        }
        pthread_mutex_unlock(&d->mu);
        if (s == NIL)
                return -ENOENT;
        struct slot_head h;
        int32_t *got_ids = d->load_ids;
        size_t ids_bytes = (size_t)d->bt * sizeof(int32_t);
        struct iovec iov[3] = {{&h, sizeof h}, {got_ids, ids_bytes}, {rows, d->block_bytes}};
        size_t want = iov[0].iov_len + iov[1].iov_len + iov[2].iov_len;
        ssize_t n = preadv(d->fd, iov, 3, slot_offset(d, s));
        int err = n < 0 ? -errno : 0;
        pthread_mutex_lock(&d->mu);
        int r = 0;
        if (n < 0 || (size_t)n != want) {
                fail(d, n < 0 ? err : -EIO, "reading a slot");
                r = -ENOENT;
        } else if (h.magic != SLOT_MAGIC || h.crc != slot_crc(&h, got_ids, d->bt, rows, d->block_bytes)) {
                /* torn or damaged, unless the writer took the slot meanwhile */
                r = -EBADMSG;
                if (d->slots[s].used && d->slots[s].key == key && d->slots[s].parent == parent) {
                        evict(d, s);
                        d->free_stack[d->n_free++] = s;
                        d->corrupt++;
                        dse__log(DSE_LOG_WARN, "KV disk tier %s: slot %d fails its checksum; dropped", d->path, s);
                }
        } else if (h.key != key || h.parent != parent || memcmp(got_ids, ids, ids_bytes) != 0) {
                /* the slot holds another block: reused after the index was published, or
                 * a hash collision */
                r = -ENOENT;
                if (d->slots[s].used && d->slots[s].key == key && d->slots[s].parent == parent && h.key != key) {
                        evict(d, s);
                        d->free_stack[d->n_free++] = s;
                }
        } else {
                d->read++;
        }
        pthread_mutex_unlock(&d->mu);
        return r;
}

/* ---- reads back, on the reader thread ---- */

/* Ends run rs (lock held): the reads not done get -ECANCELED, the run leaves the queue. */
static void run_end(struct dse__kv_disk *d, struct dse__kv_disk_reads *rs) {
        for (int i = rs->n_done; i < rs->n; i++)
                rs->r[i].result = -ECANCELED;
        rs->n_done = rs->n;
        struct dse__kv_disk_reads **p = &d->runs_head, *prev = NULL;
        while (*p && *p != rs) {
                prev = *p;
                p = &(*p)->next;
        }
        if (*p) {
                *p = rs->next;
                if (d->runs_tail == rs)
                        d->runs_tail = prev;
        }
        rs->next = NULL;
}

static void *reader_main(void *arg) {
        struct dse__kv_disk *d = arg;
        pthread_mutex_lock(&d->mu);
        while (!d->stop) {
                struct dse__kv_disk_reads *rs = d->runs_head;
                if (!rs || d->fault == DSE_KV_DISK_FAULT_HOLD_READS) {
                        pthread_cond_wait(&d->read_wake, &d->mu);
                        continue;
                }
                struct dse__kv_disk_read *e = &rs->r[rs->n_done];
                d->reading = rs;
                pthread_mutex_unlock(&d->mu);
                int r = dse__kv_disk_load(d, e->key, e->parent, e->ids, e->rows);
                pthread_mutex_lock(&d->mu);
                d->reading = NULL;
                e->result = r;
                rs->n_done++;
                if (r < 0 || rs->n_done == rs->n)
                        run_end(d, rs); /* a prefix stops at its first block that does not come back */
                d->reads_finished++;
                pthread_cond_broadcast(&d->read_done);
        }
        while (d->runs_head)
                run_end(d, d->runs_head);
        pthread_cond_broadcast(&d->read_done);
        pthread_mutex_unlock(&d->mu);
        return NULL;
}

void dse__kv_disk_read_start(struct dse__kv_disk *d, struct dse__kv_disk_reads *rs) {
        pthread_mutex_lock(&d->mu);
        rs->n_done = 0;
        rs->next = NULL;
        if (rs->n <= 0 || d->stop) {
                run_end(d, rs);
        } else {
                if (d->runs_tail)
                        d->runs_tail->next = rs;
                else
                        d->runs_head = rs;
                d->runs_tail = rs;
                pthread_cond_signal(&d->read_wake);
        }
        pthread_mutex_unlock(&d->mu);
}

int dse__kv_disk_read_done(struct dse__kv_disk *d, const struct dse__kv_disk_reads *rs) {
        pthread_mutex_lock(&d->mu);
        int done = rs->n_done == rs->n;
        pthread_mutex_unlock(&d->mu);
        return done;
}

void dse__kv_disk_read_cancel(struct dse__kv_disk *d, struct dse__kv_disk_reads *rs) {
        pthread_mutex_lock(&d->mu);
        while (d->reading == rs) /* one block's read: its rows are being written */
                pthread_cond_wait(&d->read_done, &d->mu);
        if (rs->n_done < rs->n)
                run_end(d, rs);
        pthread_mutex_unlock(&d->mu);
}

void dse__kv_disk_deadline(int timeout_ms, struct timespec *ret) {
        clock_gettime(CLOCK_REALTIME, ret);
        ret->tv_sec += timeout_ms / 1000;
        ret->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ret->tv_nsec >= 1000000000L) {
                ret->tv_sec++;
                ret->tv_nsec -= 1000000000L;
        }
}

void dse__kv_disk_read_wait(struct dse__kv_disk *d, int timeout_ms) {
        struct timespec until;
        dse__kv_disk_deadline(timeout_ms, &until);
        pthread_mutex_lock(&d->mu);
        int64_t seen = d->reads_finished;
        while (d->runs_head && d->reads_finished == seen)
                if (pthread_cond_timedwait(&d->read_done, &d->mu, &until) != 0)
                        break;
        pthread_mutex_unlock(&d->mu);
}

int dse__kv_disk_holds(struct dse__kv_disk *d, uint64_t key, uint64_t parent) {
        pthread_mutex_lock(&d->mu);
        int held = !d->failed && find(d, key, parent) != NIL;
        pthread_mutex_unlock(&d->mu);
        return held;
}

void dse__kv_disk_flush(struct dse__kv_disk *d) {
        pthread_mutex_lock(&d->mu);
        d->flush_wanted = 1;
        pthread_cond_signal(&d->wake);
        while (d->flush_wanted)
                pthread_cond_wait(&d->idle, &d->mu);
        pthread_mutex_unlock(&d->mu);
}

void dse__kv_disk_stats(struct dse__kv_disk *d, struct dse_kv_stats *st) {
        pthread_mutex_lock(&d->mu);
        st->disk_state = d->failed ? DSE_KV_DISK_FAILED : DSE_KV_DISK_ON;
        st->disk_bytes_used = (int64_t)d->n_used * (int64_t)d->slot_bytes;
        st->disk_bytes_capacity = (int64_t)d->n_slots * (int64_t)d->slot_bytes;
        st->disk_blocks_written = d->written;
        st->disk_blocks_read = d->read;
        st->disk_blocks_dropped = d->dropped;
        st->disk_blocks_corrupt = d->corrupt;
        pthread_mutex_unlock(&d->mu);
}

int32_t dse__kv_disk_n_slots(const struct dse__kv_disk *d) {
        return d->n_slots;
}

void dse__kv_disk_set_fault(struct dse__kv_disk *d, enum dse_kv_disk_fault fault) {
        pthread_mutex_lock(&d->mu);
        d->fault = fault;
        pthread_cond_signal(&d->wake); /* a held thread looks again */
        pthread_cond_signal(&d->read_wake);
        pthread_mutex_unlock(&d->mu);
}
