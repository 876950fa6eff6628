/* dsvisor-bench kvtier: what the KV disk tier saves on the time to first token.
 *
 *     dsvisor-bench kvtier --preset P --format F [--layers N] [--threads T]
 *                   [--prefix 4096] [--tier-dir DIR] [--chat 3,3,256] [--json]
 *
 * TTFT of one prompt (a --prefix-token prefix and 16 more tokens), evaluated through
 * dse_batch_step in 256-token chunks as the worker's default token budget does, with
 * the pool's KV type bf16 (the worker's default), in one run and one pool that holds one
 * context:
 *   cold   the prefix nowhere: prefix P cold, then later prompt Q cold (which evicts P's
 *          blocks from the pool into the disk tier); both are reported
 *   ram    P again right after its cold run: its blocks are still in the pool
 *   disk   P again after Q: its blocks only on the tier, whose file's pages are first
 *          dropped from the page cache (POSIX_FADV_DONTNEED) so they come from the disk
 * disk_load_s is the part of disk spent reading the blocks back (in attach).
 * read: the tier file's first prefix-worth of bytes read into memory in block-sized
 * pieces by pread and by mmap + memcpy (what a load could do), page cache hot and
 * dropped, best of 3 each, alternating.
 * chat: C conversations of T turns, each turn adding K tokens to its history and sending
 * the whole history again, conversations taken in turn, through two pools that each
 * hold one conversation's full history, one with the tier and one without, each turn run
 * in both back to back: the TTFT summed over all turns and the prefix hit tokens by tier. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kv_tier_bench.h"
#include "bench_clock.h"

#define BT 16
#define CHUNK 256
#define SUFFIX 16

/* Deterministic ids: stream `salt` from position `from`. */
static void ids_fill(int32_t *ids, int n, int vocab, uint64_t salt, int from) {
        for (int i = 0; i < n; i++) {
                uint64_t z = (salt + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)(from + i) * 0xBF58476D1CE4E5B9ull;
                z ^= z >> 31;
                z *= 0x94D049BB133111EBull;
                z ^= z >> 29;
                ids[i] = (int32_t)(z % (uint64_t)vocab);
        }
}

struct ttft {
        double total_s, attach_s;
        int cached;
};

/* Evaluates ids (n) as a new sequence: attach, then CHUNK-token steps, logits of the
 * last token; closes the sequence (its full blocks stay cached). */
static int timed_prompt(struct dse_batch *b, struct dse_kv_cache *kv, const int32_t *ids, int n, float *logits,
                        struct ttft *ret) {
        struct dse_diag d = {{0}};
        double t0 = bench_now_s();
        int seq = dse_kv_seq_open(kv);
        if (seq < 0)
                return seq;
        int cached = dse_kv_seq_attach_prefix(kv, seq, ids, (size_t)n);
        double t1 = bench_now_s();
        int r = cached < 0 ? cached : 0;
        for (int pos = cached; r == 0 && pos < n; pos += CHUNK) {
                int k = n - pos < CHUNK ? n - pos : CHUNK;
                struct dse_batch_seq s = {seq, ids + pos, k, pos + k == n ? logits : NULL};
                r = dse_batch_step(b, &s, 1, &d);
        }
        double t2 = bench_now_s();
        dse_kv_seq_close(kv, seq);
        if (r < 0) {
                fprintf(stderr, "kvtier: step: %s\n", d.msg);
                return r;
        }
        *ret = (struct ttft){t2 - t0, t1 - t0, cached};
        return 0;
}

/* A pool of bf16 blocks for n_ctx positions, one sequence; a tier at path unless NULL. */
static int cache_new(const struct dse_model *m, struct dse_pool *pool, int n_ctx, const char *path,
                     struct dse_kv_cache **ret_kv, struct dse_batch **ret_b) {
        struct dse_diag d = {{0}};
        struct dse_kv_cache *probe;
        int r = dse_kv_cache_new_typed(m, DSE_KV_BF16, (size_t)1 << 30, BT, 1, 1, &probe, &d);
        if (r < 0)
                return r;
        size_t bb = dse_kv_cache_block_bytes(probe);
        dse_kv_cache_free(probe);
        size_t blocks = ((size_t)n_ctx + BT - 1) / BT;
        if ((r = dse_kv_cache_new_typed(m, DSE_KV_BF16, blocks * bb, BT, 1, n_ctx, ret_kv, &d)) < 0)
                return r;
        if (path) {
                /* room for four contexts' blocks with their slot heads */
                struct dse_kv_disk_config cfg = {path, (uint64_t)(4 * blocks) * (bb + 4096) + 4096, 0,
                                                 DSE_KV_DISK_FAULT_NONE};
                if ((r = dse_kv_cache_attach_disk(*ret_kv, m, &cfg, &d)) < 0) {
                        fprintf(stderr, "kvtier: %s\n", d.msg);
                        dse_kv_cache_free(*ret_kv);
                        *ret_kv = NULL;
                        return r;
                }
        }
        if ((r = dse_batch_new(m, *ret_kv, pool, ret_b, &d)) < 0) {
                fprintf(stderr, "kvtier: %s\n", d.msg);
                dse_kv_cache_free(*ret_kv);
                *ret_kv = NULL;
        }
        return r;
}

static void drop_page_cache(const char *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
        }
}

static void tier_unlink(const char *path) {
        char p[4200];
        unlink(path);
        snprintf(p, sizeof p, "%s.index", path);
        unlink(p);
}

/* Seconds to read bytes of path in piece-sized reads into buf: pread, or mmap + memcpy. */
static double read_pieces(const char *path, uint8_t *buf, size_t bytes, size_t piece, int use_mmap, int cold) {
        if (cold)
                drop_page_cache(path);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        double t0 = bench_now_s();
        int ok = 1;
        if (use_mmap) {
                uint8_t *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
                ok = map != MAP_FAILED;
                for (size_t off = 0; ok && off < bytes; off += piece)
                        memcpy(buf + off, map + off, bytes - off < piece ? bytes - off : piece);
                if (ok)
                        munmap(map, bytes);
        } else {
                for (size_t off = 0; ok && off < bytes; off += piece) {
                        size_t n = bytes - off < piece ? bytes - off : piece;
                        ok = pread(fd, buf + off, n, (off_t)off) == (ssize_t)n;
                }
        }
        double t = bench_now_s() - t0;
        close(fd);
        return ok ? t : -1;
}

struct read_cmp {
        double pread_hot, mmap_hot, pread_cold, mmap_cold;
        size_t bytes;
};

static void compare_reads(const char *path, size_t bytes, size_t piece, struct read_cmp *rc) {
        uint8_t *buf = malloc(bytes);
        double *best[4] = {&rc->pread_hot, &rc->mmap_hot, &rc->pread_cold, &rc->mmap_cold};
        rc->bytes = bytes;
        for (int k = 0; k < 4; k++)
                *best[k] = 1e30;
        for (int rep = 0; buf && rep < 3; rep++)
                for (int k = 0; k < 4; k++) {
                        double t = read_pieces(path, buf, bytes, piece, k & 1, k >= 2);
                        if (t >= 0 && t < *best[k])
                                *best[k] = t;
                }
        free(buf);
}

int kv_tier_bench_run(const struct dse_model *m, struct dse_pool *pool, const char *preset, const char *format,
                      int threads, int json, const struct kv_tier_bench_opts *o) {
        int vocab = dse_model_vocab_size(m), np = o->prefix_tokens, n = np + SUFFIX;
        char path[4096], chat_path[4096];
        snprintf(path, sizeof path, "%s/kvtier-bench-%d.kvtier", o->tier_dir, (int)getpid());
        snprintf(chat_path, sizeof chat_path, "%s/kvtier-bench-chat-%d.kvtier", o->tier_dir, (int)getpid());
        tier_unlink(path);
        float *logits = malloc((size_t)vocab * sizeof(float));
        int32_t *p = malloc((size_t)n * sizeof(int32_t)), *q = malloc((size_t)n * sizeof(int32_t));
        struct dse_kv_cache *kv = NULL;
        struct dse_batch *b = NULL;
        int r = logits && p && q ? cache_new(m, pool, n + 64, path, &kv, &b) : -ENOMEM;
        struct ttft cold1 = {0}, ram = {0}, cold2 = {0}, disk = {0};
        struct dse_kv_stats st = {0};
        ids_fill(p, np, vocab, 1, 0);
        ids_fill(q, n, vocab, 2, 0);
        /* each run of P gets another suffix: only the prefix can come from a cache */
        ids_fill(p + np, SUFFIX, vocab, 10, 0);
        if (r == 0)
                r = timed_prompt(b, kv, p, n, logits, &cold1);
        ids_fill(p + np, SUFFIX, vocab, 11, 0);
        if (r == 0)
                r = timed_prompt(b, kv, p, n, logits, &ram);
        if (r == 0)
                r = timed_prompt(b, kv, q, n, logits, &cold2);
        if (r == 0) {
                dse_kv_cache_disk_flush(kv);
                drop_page_cache(path);
                ids_fill(p + np, SUFFIX, vocab, 12, 0);
                r = timed_prompt(b, kv, p, n, logits, &disk);
                dse_kv_cache_stats(kv, &st);
        }
        size_t block_bytes = kv ? dse_kv_cache_block_bytes(kv) : 0;
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        struct read_cmp rc = {0};
        if (r == 0)
                compare_reads(path, (size_t)(np / BT) * block_bytes, block_bytes, &rc);
        tier_unlink(path);

        /* the multi-turn replay */
        int C = o->chat_convs, T = o->chat_turns, K = o->chat_turn_tokens;
        double chat_s[2] = {0, 0};
        struct dse_kv_stats cst[2] = {{0}, {0}};
        int32_t *hist = malloc((size_t)T * K * sizeof(int32_t));
        if (r == 0 && C > 0 && T > 0 && K > 0) {
                struct dse_kv_cache *ckv[2] = {NULL, NULL};
                struct dse_batch *cb[2] = {NULL, NULL};
                tier_unlink(chat_path);
                r = hist ? cache_new(m, pool, T * K + 64, NULL, &ckv[0], &cb[0]) : -ENOMEM;
                if (r == 0)
                        r = cache_new(m, pool, T * K + 64, chat_path, &ckv[1], &cb[1]);
                for (int t = 1; r == 0 && t <= T; t++)
                        for (int c = 0; r == 0 && c < C; c++) {
                                ids_fill(hist, t * K, vocab, 100 + (uint64_t)c, 0);
                                for (int mode = 0; r == 0 && mode < 2; mode++) {
                                        struct ttft x;
                                        r = timed_prompt(cb[mode], ckv[mode], hist, t * K, logits, &x);
                                        chat_s[mode] += x.total_s;
                                }
                        }
                for (int mode = 0; mode < 2; mode++) {
                        if (ckv[mode])
                                dse_kv_cache_stats(ckv[mode], &cst[mode]);
                        dse_batch_free(cb[mode]);
                        dse_kv_cache_free(ckv[mode]);
                }
                tier_unlink(chat_path);
        }
        free(hist);
        free(logits);
        free(p);
        free(q);
        if (r < 0) {
                fprintf(stderr, "kvtier: failed: %s\n", strerror(-r));
                return r;
        }
        double cold = (cold1.total_s + cold2.total_s) / 2;
        if (json) {
                printf("{\"preset\":\"%s\",\"format\":\"%s\",\"threads\":%d,\"prefix_tokens\":%d,\"kv\":\"bf16\","
                       "\"block_bytes\":%zu,\"ttft_cold_s\":[%.4f,%.4f],\"ttft_ram_s\":%.4f,\"ttft_disk_s\":%.4f,"
                       "\"disk_load_s\":%.4f,\"ram_cached\":%d,\"disk_cached\":%d,\"disk_over_cold\":%.4f,"
                       "\"disk_minus_ram_s\":%.4f,\"blocks_written\":%lld,\"blocks_read\":%lld,\"blocks_dropped\":%lld,"
                       "\"read_bytes\":%zu,\"pread_hot_s\":%.5f,\"mmap_hot_s\":%.5f,\"pread_cold_s\":%.5f,"
                       "\"mmap_cold_s\":%.5f,\"chat\":{\"convs\":%d,\"turns\":%d,\"turn_tokens\":%d,"
                       "\"ttft_sum_no_tier_s\":%.3f,\"ttft_sum_tier_s\":%.3f,\"hit_tokens_no_tier\":%lld,"
                       "\"hit_tokens_tier_ram\":%lld,\"hit_tokens_tier_disk\":%lld}}\n",
                       preset, format, threads, np, block_bytes, cold1.total_s, cold2.total_s, ram.total_s,
                       disk.total_s, disk.attach_s, ram.cached, disk.cached, disk.total_s / cold,
                       disk.total_s - ram.total_s, (long long)st.disk_blocks_written, (long long)st.disk_blocks_read,
                       (long long)st.disk_blocks_dropped, rc.bytes, rc.pread_hot, rc.mmap_hot, rc.pread_cold,
                       rc.mmap_cold, C, T, K, chat_s[0], chat_s[1], (long long)cst[0].prefix_hit_tokens,
                       (long long)(cst[1].prefix_hit_tokens - cst[1].disk_hit_tokens),
                       (long long)cst[1].disk_hit_tokens);
                return 0;
        }
        printf("kvtier: preset %s, format %s, %d threads, bf16 KV, %zu bytes per 16-token block\n", preset, format,
               threads, block_bytes);
        printf("  TTFT, %d-token prefix + %d: cold %.3f s / %.3f s, RAM %.3f s (%d cached), disk %.3f s (%d cached, "
               "%.3f s reading them)\n",
               np, SUFFIX, cold1.total_s, cold2.total_s, ram.total_s, ram.cached, disk.total_s, disk.cached,
               disk.attach_s);
        printf("  disk / cold %.4f (target <= 0.1), disk - RAM %.1f ms (target <= 100); blocks written %lld, read "
               "%lld, dropped %lld\n",
               disk.total_s / cold, (disk.total_s - ram.total_s) * 1e3, (long long)st.disk_blocks_written,
               (long long)st.disk_blocks_read, (long long)st.disk_blocks_dropped);
        printf("  reading %zu MiB in blocks: pread %.1f ms hot / %.1f ms cold, mmap + copy %.1f ms hot / %.1f ms cold\n",
               rc.bytes >> 20, rc.pread_hot * 1e3, rc.pread_cold * 1e3, rc.mmap_hot * 1e3, rc.mmap_cold * 1e3);
        if (C > 0)
                printf("  chat replay, %d conversations x %d turns of %d tokens, pool of one history: TTFT sum "
                       "%.2f s without the tier, %.2f s with it (x%.2f); hit tokens %lld without, %lld RAM + %lld "
                       "disk with\n",
                       C, T, K, chat_s[0], chat_s[1], chat_s[1] > 0 ? chat_s[0] / chat_s[1] : 0,
                       (long long)cst[0].prefix_hit_tokens,
                       (long long)(cst[1].prefix_hit_tokens - cst[1].disk_hit_tokens),
                       (long long)cst[1].disk_hit_tokens);
        return 0;
}
