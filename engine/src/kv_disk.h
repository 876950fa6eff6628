/* The KV cache's disk tier: full prefix blocks evicted from the RAM pool, kept in one
 * preallocated file of fixed-size slots and found again by the prefix table's chained
 * block keys (kv.c spills and loads; this file owns the file, its index and the writer
 * thread). */
#ifndef DSE_KV_DISK_H
#define DSE_KV_DISK_H

#include <stdint.h>
#include <time.h>

#include "dse.h"

struct dse__kv_disk;

/* What a tier's blocks are only valid for: a file made for anything else is cleared. */
struct dse__kv_disk_identity {
        uint32_t model_crc, tokenizer_crc;
        int32_t dtype, block_tokens, n_layers, row_bytes;
        uint64_t block_bytes;
};

/* Opens (or creates and preallocates) the tier file at path, with its index at
 * path + ".index", sized to hold as many slots as fit in bytes; queue_blocks spills may
 * wait for the writer (0: a default). A file of another identity or size, truncated or
 * with a damaged header, is cleared with a log line; an index that does not verify
 * leaves the tier empty. -ENOSPC when the file cannot be preallocated, -EBUSY when
 * another process holds it, other negative errnos from the file system. fault: a test
 * hook in force from the start (DSE_KV_DISK_FAULT_NONE: none). */
int dse__kv_disk_open(const char *path, uint64_t bytes, int queue_blocks, const struct dse__kv_disk_identity *id,
                      enum dse_kv_disk_fault fault, struct dse__kv_disk **ret_disk, struct dse_diag *reterr);
/* Writes what is queued, publishes the index and stops the writer. */
void dse__kv_disk_close(struct dse__kv_disk *d);
/* Queues a copy of one block (its key, parent key, block_tokens ids and block_bytes of
 * rows) for the writer, without waiting for it: 0 queued, 1 already on disk, -EAGAIN
 * dropped because the queue is full, -EIO when the tier is off after an error. */
int dse__kv_disk_spill(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids, const void *rows);
/* As dse__kv_disk_spill, waiting for room in the queue until the CLOCK_REALTIME time
 * until (NULL: not at all) before dropping the spill. */
int dse__kv_disk_spill_until(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids,
                             const void *rows, const struct timespec *until);
/* Reads the block of (key, parent, ids) into rows (block_bytes): 0, -ENOENT when the
 * tier does not hold it (or is off), -EBADMSG when its slot fails its checksum (the
 * slot is dropped, never served). rows is unspecified after a failure. One caller at a
 * time: the reader thread (or a caller that queues no read runs). */
int dse__kv_disk_load(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids, void *rows);
/* Nonzero when the index names the block of (key, parent) (it may still fail its read). */
int dse__kv_disk_holds(struct dse__kv_disk *d, uint64_t key, uint64_t parent);

/* Blocks read back for one sequence by the tier's reader thread, in order; the run
 * ends at its first read that fails. ids and rows stay the caller's and must stay put
 * until the run is done or cancelled. */
struct dse__kv_disk_read {
        uint64_t key, parent;
        const int32_t *ids; /* block_tokens ids the slot must hold */
        void *rows;         /* block_bytes */
        int result;         /* 0, dse__kv_disk_load's error, or -ECANCELED (not read) */
};
struct dse__kv_disk_reads {
        struct dse__kv_disk_read *r;
        int n;
        int n_done;                       /* under the tier's lock */
        struct dse__kv_disk_reads *next;  /* the reader's queue */
};
/* Queues run rs (r and n set) behind the runs already queued. */
void dse__kv_disk_read_start(struct dse__kv_disk *d, struct dse__kv_disk_reads *rs);
/* Nonzero once every read of rs has its result. */
int dse__kv_disk_read_done(struct dse__kv_disk *d, const struct dse__kv_disk_reads *rs);
/* Ends rs now: reads not started get -ECANCELED; waits for the one read in flight, if
 * it is rs's, so no read writes into rs's rows after the return. */
void dse__kv_disk_read_cancel(struct dse__kv_disk *d, struct dse__kv_disk_reads *rs);
/* The CLOCK_REALTIME time timeout_ms from now (the deadlines the tier's waits take). */
void dse__kv_disk_deadline(int timeout_ms, struct timespec *ret);
/* Waits until some read finishes, no run is queued, or timeout_ms passes. */
void dse__kv_disk_read_wait(struct dse__kv_disk *d, int timeout_ms);
/* Waits until every queued spill is written and the index published. */
void dse__kv_disk_flush(struct dse__kv_disk *d);
/* Fills the disk_* fields of st. */
void dse__kv_disk_stats(struct dse__kv_disk *d, struct dse_kv_stats *st);
/* Blocks the file holds at most. */
int32_t dse__kv_disk_n_slots(const struct dse__kv_disk *d);
void dse__kv_disk_set_fault(struct dse__kv_disk *d, enum dse_kv_disk_fault fault);

#endif
