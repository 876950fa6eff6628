/* libFuzzer target: the KV disk tier's readers of its own files, which a crash, a full
 * disk or another program may have left in any state (engine/src/kv_disk.c). Byte 0:
 * bit 0 picks the file fed, bit 1 re-seals its checksums so the fuzzer reaches the
 * checks behind them. The file header (bit 0 clear): the rest of the input becomes the
 * tier file's first bytes (the file keeps its full size unless bit 2 is set); the index
 * (bit 0 set): the rest becomes the index beside a valid tier file. Then the tier is
 * opened, the block its first index entry names is looked up, and the tier closed. With
 * the index, bit 3 makes the input's last SLOT_IMAGE bytes the slot that entry names (its
 * head, token ids and rows; re-sealed with bit 1), and the lookup asks for those ids, so
 * the slot checks behind the index are reached too. The offsets re-sealed are those of the
 * file, index and slot heads in kv_disk.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_disk.h"
#include "model/format.h"

#define BT 4
#define BLOCK_BYTES 64
#define SLOTS 4
#define SLOT_BYTES 512 /* slot head, ids and rows rounded up to 512 */
#define FILE_BYTES (4096 + SLOTS * SLOT_BYTES)
#define SLOT_IMAGE (24 + BT * 4 + BLOCK_BYTES) /* magic, crc, key, parent; ids; rows */

static const struct dse__kv_disk_identity id = {1, 2, 0, BT, 1, BLOCK_BYTES / BT, BLOCK_BYTES};
static char path[256], index_path[300];

static void put32(uint8_t *p, uint32_t v) {
        memcpy(p, &v, 4);
}

static void write_file(const char *p, const uint8_t *data, size_t n, size_t size) {
        FILE *f = fopen(p, "wb");
        if (!f)
                return;
        uint8_t *buf = calloc(1, size > n ? size : n);
        if (buf) {
                memcpy(buf, data, n);
                fwrite(buf, 1, size > n ? size : n, f);
                free(buf);
        }
        fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (!path[0]) {
                /* memory-backed where there is /dev/shm: the tier fsyncs its file, and on a
                 * disk every input would wait for the device, the fuzzer idling */
                char dir[64];
                snprintf(dir, sizeof dir, "%s/fuzz-kv-disk.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
                if (!mkdtemp(dir))
                        return 0;
                snprintf(path, sizeof path, "%s/f.kvtier", dir);
                snprintf(index_path, sizeof index_path, "%s.index", path);
        }
        if (size < 1)
                return 0;
        uint8_t mode = data[0];
        size_t n = size - 1 > 65536 ? 65536 : size - 1;
        uint8_t *in = malloc(n + 64);
        if (!in)
                return 0;
        memcpy(in, data + 1, n);
        struct dse__kv_disk *d = NULL;
        uint8_t *slot = NULL;
        unlink(index_path);
        if (!(mode & 1)) {
                if ((mode & 2) && n >= 64)
                        put32(in + 56, dse__crc32c(0, in, 56));
                write_file(path, in, n, mode & 4 ? n : FILE_BYTES);
        } else {
                unlink(path);
                if (dse__kv_disk_open(path, FILE_BYTES, 1, &id, DSE_KV_DISK_FAULT_NONE, &d, NULL) == 0)
                        dse__kv_disk_close(d); /* a valid, empty tier file */
                d = NULL;
                if ((mode & 8) && n >= SLOT_IMAGE) {
                        n -= SLOT_IMAGE;
                        slot = in + n;
                }
                if ((mode & 2) && n >= 32) {
                        uint8_t head[64];
                        FILE *f = fopen(path, "rb");
                        if (f && fread(head, 1, sizeof head, f) == sizeof head) {
                                memcpy(in + 8, head + 56, 4);
                                put32(in + 12, dse__crc32c(0, in + 32, n - 32));
                                put32(in + 24, dse__crc32c(0, in, 24));
                        }
                        if (f)
                                fclose(f);
                }
                write_file(index_path, in, n, 0);
                if (slot && n >= 56) {
                        uint32_t s;
                        memcpy(&s, in + 48, 4);
                        if (mode & 2) {
                                put32(slot, 0x4C534B44u);
                                put32(slot + 4, dse__crc32c(0, slot + 8, SLOT_IMAGE - 8));
                        }
                        FILE *f = fopen(path, "r+b");
                        if (f && fseek(f, 4096 + (long)(s % SLOTS) * SLOT_BYTES, SEEK_SET) == 0)
                                fwrite(slot, 1, SLOT_IMAGE, f);
                        if (f)
                                fclose(f);
                }
        }
        if (dse__kv_disk_open(path, FILE_BYTES, 1, &id, DSE_KV_DISK_FAULT_NONE, &d, NULL) == 0) {
                uint64_t key = 0, parent = 0;
                if ((mode & 1) && n >= 48) {
                        memcpy(&key, in + 32, 8);
                        memcpy(&parent, in + 40, 8);
                }
                int32_t ids[BT] = {0};
                if (slot)
                        memcpy(ids, slot + 24, sizeof ids);
                uint8_t rows[BLOCK_BYTES];
                dse__kv_disk_load(d, key, parent, ids, rows);
                dse__kv_disk_close(d);
        }
        free(in);
        return 0;
}
