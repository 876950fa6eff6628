/* The KV cache's disk tier: full prefix blocks evicted from the RAM pool, kept in one
 * preallocated file of fixed-size slots and found again by the prefix table's chained
 * block keys (kv.c spills and loads; this file owns the file, its index and the writer
 * thread). */
#ifndef DSE_KV_DISK_H
#define DSE_KV_DISK_H

#include <stdint.h>

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
 * another process holds it, other negative errnos from the file system. */
int dse__kv_disk_open(const char *path, uint64_t bytes, int queue_blocks, const struct dse__kv_disk_identity *id,
                      struct dse__kv_disk **ret_disk, struct dse_diag *reterr);
/* Writes what is queued, publishes the index and stops the writer. */
void dse__kv_disk_close(struct dse__kv_disk *d);
/* Queues a copy of one block (its key, parent key, block_tokens ids and block_bytes of
 * rows) for the writer, without waiting for it: 0 queued, 1 already on disk, -EAGAIN
 * dropped because the queue is full, -EIO when the tier is off after an error. */
int dse__kv_disk_spill(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids, const void *rows);
/* Reads the block of (key, parent, ids) into rows (block_bytes): 0, -ENOENT when the
 * tier does not hold it (or is off), -EBADMSG when its slot fails its checksum (the
 * slot is dropped, never served). rows is unspecified after a failure. */
int dse__kv_disk_load(struct dse__kv_disk *d, uint64_t key, uint64_t parent, const int32_t *ids, void *rows);
/* Waits until every queued spill is written and the index published. */
void dse__kv_disk_flush(struct dse__kv_disk *d);
/* Fills the disk_* fields of st. */
void dse__kv_disk_stats(struct dse__kv_disk *d, struct dse_kv_stats *st);
void dse__kv_disk_set_fault(struct dse__kv_disk *d, enum dse_kv_disk_fault fault);

#endif
