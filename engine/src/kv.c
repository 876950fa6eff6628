/* Paged KV cache: a pool of fixed-size blocks, per-sequence block tables, reference
 * counts and a prefix table of full blocks (see dse.h, "batched sessions").
 *
 * A full block is keyed by a hash chained over every token id up to its end (block i's
 * key mixes block i-1's key with its own ids), as vLLM's automatic prefix caching does,
 * so equal keys mean equal prefixes; the ids and the parent key are stored too and
 * compared on a hit, so a hash collision can never share a wrong block. Blocks whose
 * count drops to zero keep their key in an LRU list and are reused oldest first, after
 * the never-hashed free blocks. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "env_choice.h"
#include "internal.h"
#include "kernels/kernels.h"
#include "kv.h"
#include "kv_disk.h"
#include "kv_pages.h"

#define NIL (-1)

struct kv_block {
        int32_t ref;
        int32_t hashed;             /* in the prefix table */
        uint64_t key, parent_key;
        int32_t hnext;              /* prefix-table bucket chain */
        int32_t lru_prev, lru_next; /* ref == 0 && hashed: the evictable list */
};

struct kv_seq {
        int32_t open;
        uint32_t opened;   /* times the slot was opened: tells a reopened slot from its predecessor */
        int32_t len;       /* positions held */
        int32_t n_ahead;   /* draft rows written past len by the last step, not yet accepted */
        int32_t n_blocks;  /* entries of table in use */
        int32_t n_keyed;   /* leading full blocks whose key is known */
        uint64_t last_key; /* key of block n_keyed - 1 (0 before the first) */
        int32_t *table;    /* (max_blocks) */
        int32_t *tokens;   /* (n_ctx) ids at positions 0..len-1 (and of the blocks loading) */
        int32_t n_loading; /* blocks after the first n_blocks - n_loading being read back */
        struct dse__kv_disk_reads reads; /* their reads (r: max_blocks entries once a tier is attached) */
};

struct dse_kv_cache {
        int32_t block_tokens, n_layers, n_ctx, max_blocks, max_seqs;
        int32_t n_blocks;
        int32_t n_taken;           /* blocks dse__kv_blocks_take handed out: outside the pool's stats */
        struct dse__kv_view layout; /* the rows' layout (base and blocks unset) */
        uint8_t *data;             /* (n_blocks, n_layers, n_planes, block_tokens, layout.plane_bytes) */
        size_t data_bytes;
        struct dse__kv_pages pages; /* the mapping behind data */
        struct kv_block *blocks;   /* (n_blocks) */
        int32_t *block_tokens_ids; /* (n_blocks, block_tokens) ids of hashed blocks */
        int32_t *free_stack;       /* (n_blocks) never-hashed free blocks */
        int32_t n_free;
        int32_t lru_head, lru_tail, n_lru;
        int32_t *buckets;          /* (n_buckets) prefix table heads */
        uint32_t bucket_mask;
        struct kv_seq *seqs;       /* (max_seqs) */
        int32_t *seq_mem;          /* backing of every seq's table and tokens */
        int64_t query_tokens, hit_tokens, disk_hit_tokens;
        struct dse__kv_disk *disk; /* the tier below, or NULL */
        struct dse__kv_disk_read *read_mem; /* backing of every seq's reads.r */
};

int32_t dse__kv_row_floats(const struct dse_hparams *hp) {
        switch (hp->arch) {
        case DSE_ARCH_LLAMA:
        case DSE_ARCH_QWEN2: return 2 * hp->n_kv_heads * hp->head_dim;
        case DSE_ARCH_DEEPSEEK_V2:
        case DSE_ARCH_DEEPSEEK_V3: return hp->kv_lora_rank + hp->qk_rope_head_dim;
        default: return 0;
        }
}

static int32_t gcd32(int32_t a, int32_t b) {
        while (b) {
                int32_t t = a % b;
                a = b;
                b = t;
        }
        return a;
}

void dse__kv_layout(const struct dse_hparams *hp, enum dse_kv_dtype dtype, struct dse__kv_view *v) {
        memset(v, 0, sizeof *v);
        int32_t n = dse__kv_row_floats(hp);
        v->n_layers = hp->n_layers + hp->n_mtp_layers; /* an MTP module caches like a layer */
        v->row_floats = n;
        v->dtype = dtype;
        /* a scale group never spans two heads, K and V, or c and k_pe */
        v->group = hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3
                           ? gcd32(hp->kv_lora_rank, hp->qk_rope_head_dim)
                           : hp->head_dim;
        if (v->group <= 0)
                v->group = n > 0 ? n : 1;
        /* a plane is what one attention pass reads: one head's K or V; MLA's heads all
         * read the whole latent row */
        v->plane_floats = hp->arch == DSE_ARCH_DEEPSEEK_V2 || hp->arch == DSE_ARCH_DEEPSEEK_V3 ? n : hp->head_dim;
        if (v->plane_floats <= 0 || n % v->plane_floats != 0 || v->plane_floats % v->group != 0) {
                v->plane_floats = n > 0 ? n : 1;
                v->group = n > 0 ? n : 1;
        }
        size_t elem = dtype == DSE_KV_F32 ? 4 : dtype == DSE_KV_BF16 ? 2 : 1;
        size_t bytes = ((size_t)v->plane_floats * elem + 3) & ~(size_t)3;
        if (dtype == DSE_KV_FP8 || dtype == DSE_KV_INT8) {
                v->scale_off = (int32_t)bytes;
                bytes += (size_t)(v->plane_floats / v->group) * sizeof(float);
        }
        v->plane_bytes = (int32_t)bytes;
        v->row_bytes = (int32_t)((size_t)(n / v->plane_floats) * bytes);
}

static const char *const kv_dtype_names[DSE_KV_DTYPE_COUNT] = {
        [DSE_KV_F32] = "f32",
        [DSE_KV_BF16] = "bf16",
        [DSE_KV_FP8] = "fp8",
        [DSE_KV_INT8] = "int8",
};

const char *dse_kv_dtype_to_string(enum dse_kv_dtype t) {
        return (unsigned)t < DSE_KV_DTYPE_COUNT ? kv_dtype_names[t] : "unknown";
}

int dse_kv_dtype_parse(const char *str, enum dse_kv_dtype *ret, struct dse_diag *reterr) {
        int t = dse__choice_index(kv_dtype_names, DSE_KV_DTYPE_COUNT, str);
        if (t < 0) {
                char allowed[64];
                dse__choice_names(kv_dtype_names, DSE_KV_DTYPE_COUNT, -1, allowed, sizeof allowed);
                return dse__fail(reterr, -EINVAL, "'%s' is not a KV cache type; use %s", str ? str : "(null)",
                                 allowed);
        }
        *ret = (enum dse_kv_dtype)t;
        return 0;
}

int dse__kv_dtype_from_env(enum dse_kv_dtype *ret, struct dse_diag *reterr) {
        int t, r = dse__env_choice("DSV_KV", "a KV cache type", kv_dtype_names, DSE_KV_DTYPE_COUNT, DSE_KV_F32, &t,
                                   reterr);
        if (r >= 0)
                *ret = (enum dse_kv_dtype)t;
        return r;
}

/* One group of FP8 or INT8 elements and its scale: max|x| maps to the format's largest
 * value (448 or 127); an all-zero group has scale 0. */
static float quantize_group(const float *x, int32_t n, uint8_t *q, int fp8) {
        float amax = 0.0f;
        for (int32_t i = 0; i < n; i++)
                amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float top = fp8 ? 448.0f : 127.0f, inv = amax > 0.0f ? top / amax : 0.0f;
        for (int32_t i = 0; i < n; i++)
                q[i] = fp8 ? dse__kern_f32_to_f8e4m3(x[i] * inv) : (uint8_t)(int8_t)nearbyintf(x[i] * inv);
        return amax / top;
}

/* Elements [off, off + n) of one plane's part of a position (row), from x. */
static void store_part(const struct dse__kv_view *v, uint8_t *row, int32_t off, const float *x, int32_t n) {
        switch (v->dtype) {
        case DSE_KV_F32: memcpy((float *)row + off, x, (size_t)n * sizeof(float)); break;
        case DSE_KV_BF16:
                for (int32_t i = 0; i < n; i++)
                        ((uint16_t *)row)[off + i] = dse__kern_f32_to_bf16(x[i]);
                break;
        case DSE_KV_FP8:
        case DSE_KV_INT8: {
                float *sc = (float *)(row + v->scale_off);
                for (int32_t g = off; g < off + n; g += v->group)
                        sc[g / v->group] = quantize_group(x + (g - off), v->group, row + g, v->dtype == DSE_KV_FP8);
                break;
        }
        default: break;
        }
}

/* Elements [off, off + n) of one plane's part of a position (row), to out. */
static void load_part(const struct dse__kv_view *v, const uint8_t *row, int32_t off, int32_t n, float *out) {
        const float *sc = (const float *)(row + v->scale_off), *lut = dse__f8e4m3_table();
        for (int32_t i = 0; i < n; i++) {
                int32_t d = off + i;
                switch (v->dtype) {
                case DSE_KV_F32: out[i] = ((const float *)row)[d]; break;
                case DSE_KV_BF16: out[i] = dse__kern_bf16_to_f32(((const uint16_t *)row)[d]); break;
                case DSE_KV_FP8: out[i] = lut[row[d]] * sc[d / v->group]; break;
                case DSE_KV_INT8: out[i] = (float)(int8_t)row[d] * sc[d / v->group]; break;
                default: out[i] = 0.0f; break;
                }
        }
}

void dse__kv_store(const struct dse__kv_view *v, int l, int32_t pos, int32_t off, const float *x, int32_t n) {
        for (int32_t e = off, m; e < off + n; e += m) {
                int32_t d = e % v->plane_floats;
                m = off + n - e < v->plane_floats - d ? off + n - e : v->plane_floats - d;
                store_part(v, dse__kv_plane_row(v, l, pos, e / v->plane_floats), d, x + (e - off), m);
        }
}

void dse__kv_load(const struct dse__kv_view *v, int l, int32_t pos, int32_t off, int32_t n, float *out) {
        for (int32_t e = off, m; e < off + n; e += m) {
                int32_t d = e % v->plane_floats;
                m = off + n - e < v->plane_floats - d ? off + n - e : v->plane_floats - d;
                load_part(v, dse__kv_plane_row(v, l, pos, e / v->plane_floats), d, m, out + (e - off));
        }
}

static uint64_t mix64(uint64_t z) {
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
}

static uint64_t block_key(uint64_t parent, const int32_t *ids, int32_t n) {
        uint64_t h = mix64(parent ^ 0x9E3779B97F4A7C15ull);
        for (int32_t i = 0; i < n; i++)
                h = mix64(h ^ ((uint64_t)(uint32_t)ids[i] + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)));
        return h ? h : 1; /* 0 is "no parent" */
}

void dse_kv_cache_free(struct dse_kv_cache *kv) {
        if (!kv)
                return;
        for (int i = 0; kv->disk && i < kv->max_seqs; i++)
                if (kv->seqs[i].n_loading)
                        dse__kv_disk_read_cancel(kv->disk, &kv->seqs[i].reads);
        dse__kv_disk_close(kv->disk);
        free(kv->read_mem);
        dse__kv_pages_unmap(&kv->pages);
        free(kv->blocks);
        free(kv->block_tokens_ids);
        free(kv->free_stack);
        free(kv->buckets);
        free(kv->seqs);
        free(kv->seq_mem);
        free(kv);
}

size_t dse_kv_cache_block_bytes(const struct dse_kv_cache *kv) {
        return kv ? (size_t)kv->block_tokens * (size_t)kv->n_layers * (size_t)kv->layout.row_bytes : 0;
}

size_t dse_kv_cache_bytes_per_token(const struct dse_kv_cache *kv) {
        return kv ? (size_t)kv->n_layers * (size_t)kv->layout.row_bytes : 0;
}

enum dse_kv_dtype dse_kv_cache_dtype(const struct dse_kv_cache *kv) {
        return kv ? kv->layout.dtype : DSE_KV_F32;
}

enum dse_kv_pages dse_kv_cache_pages(const struct dse_kv_cache *kv) {
        return kv ? kv->pages.kind : DSE_KV_PAGES_SMALL;
}

int dse_kv_cache_prefault(struct dse_kv_cache *kv, struct dse_diag *reterr) {
        if (!kv)
                return -EINVAL;
#ifdef MADV_POPULATE_WRITE
        /* Faults every page in writable without storing to it (unlike touching each page),
         * hence safe beside threads that write blocks. */
        if (madvise(kv->data, kv->data_bytes, MADV_POPULATE_WRITE) == 0)
                return 0;
        int r = -errno;
        if (r == -EINVAL)
                return dse__fail(reterr, -EOPNOTSUPP, "KV cache: this kernel cannot prefault (MADV_POPULATE_WRITE needs Linux 5.14)");
        return dse__fail(reterr, r, "KV cache: cannot make the %zu MiB pool resident: %s", kv->data_bytes >> 20,
                         strerror(-r));
#else
        return dse__fail(reterr, -EOPNOTSUPP, "KV cache: built without MADV_POPULATE_WRITE (needs Linux 5.14 headers)");
#endif
}

int dse_kv_cache_new(const struct dse_model *model, size_t mem_bytes, int block_tokens, int max_seqs, int n_ctx,
                     struct dse_kv_cache **ret_kv, struct dse_diag *reterr) {
        enum dse_kv_dtype dtype;
        int r = dse__kv_dtype_from_env(&dtype, reterr);
        if (r < 0)
                return r;
        return dse_kv_cache_new_typed(model, dtype, mem_bytes, block_tokens, max_seqs, n_ctx, ret_kv, reterr);
}

int dse_kv_cache_new_typed(const struct dse_model *model, enum dse_kv_dtype dtype, size_t mem_bytes,
                           int block_tokens, int max_seqs, int n_ctx, struct dse_kv_cache **ret_kv,
                           struct dse_diag *reterr) {
        if (!model || block_tokens < 1 || max_seqs < 1 || n_ctx < 1 || !ret_kv || (unsigned)dtype >= DSE_KV_DTYPE_COUNT)
                return dse__fail(reterr, -EINVAL, "dse_kv_cache_new: bad arguments (block %d, seqs %d, n_ctx %d, dtype %d)",
                                 block_tokens, max_seqs, n_ctx, (int)dtype);
        const struct dse_hparams *hp = dse__model_hparams(model);
        int32_t row = dse__kv_row_floats(hp);
        if (row <= 0 || hp->n_layers <= 0)
                return dse__fail(reterr, -EOPNOTSUPP, "KV cache: architecture %s has no KV layout",
                                 dse_arch_to_string(hp->arch));
        enum dse_kv_pages pages;
        int r = dse__kv_pages_from_env(&pages, reterr);
        if (r < 0)
                return r;
        struct dse_kv_cache *kv = calloc(1, sizeof *kv);
        if (!kv)
                return -ENOMEM;
        kv->block_tokens = block_tokens;
        dse__kv_layout(hp, dtype, &kv->layout);
        kv->n_layers = kv->layout.n_layers;
        kv->layout.block_tokens = block_tokens;
        kv->n_ctx = n_ctx;
        kv->max_seqs = max_seqs;
        kv->max_blocks = (n_ctx + block_tokens - 1) / block_tokens;
        size_t bb = dse_kv_cache_block_bytes(kv);
        size_t n = mem_bytes / bb;
        if (n > (size_t)INT32_MAX / 2)
                n = (size_t)INT32_MAX / 2;
        if (n == 0) {
                dse_kv_cache_free(kv);
                return dse__fail(reterr, -ENOSPC, "KV cache: %zu bytes hold no block of %zu bytes", mem_bytes, bb);
        }
        kv->n_blocks = (int32_t)n;
        uint32_t nb = 16;
        while (nb < 2 * (uint32_t)n)
                nb <<= 1;
        kv->bucket_mask = nb - 1;
        size_t per_seq = (size_t)kv->max_blocks + (size_t)n_ctx;
        /* Fresh anonymous pages read as zero and cost nothing until a block is first
         * written: a worker start no longer touches the whole pool (a memset of a
         * 1 GiB pool took ~1 s). Page alignment covers the kernels' 64-byte need. */
        kv->data_bytes = n * bb;
        if ((r = dse__kv_pages_map(kv->data_bytes, pages, NULL, &kv->pages, reterr)) < 0) {
                dse_kv_cache_free(kv);
                return r;
        }
        kv->data = kv->pages.base;
        kv->blocks = calloc(n, sizeof *kv->blocks);
        kv->block_tokens_ids = malloc(n * (size_t)block_tokens * sizeof(int32_t));
        kv->free_stack = malloc(n * sizeof(int32_t));
        kv->buckets = malloc(nb * sizeof(int32_t));
        kv->seqs = calloc((size_t)max_seqs, sizeof *kv->seqs);
        kv->seq_mem = malloc((size_t)max_seqs * per_seq * sizeof(int32_t));
        if (!kv->data || !kv->blocks || !kv->block_tokens_ids || !kv->free_stack || !kv->buckets || !kv->seqs ||
            !kv->seq_mem) {
                dse_kv_cache_free(kv);
                return dse__fail(reterr, -ENOMEM, "KV cache: cannot allocate %zu blocks of %zu bytes", n, bb);
        }
        for (uint32_t i = 0; i < nb; i++)
                kv->buckets[i] = NIL;
        /* Stack order: block 0 is handed out first. */
        for (int32_t i = 0; i < kv->n_blocks; i++) {
                kv->free_stack[i] = kv->n_blocks - 1 - i;
                kv->blocks[i].hnext = kv->blocks[i].lru_prev = kv->blocks[i].lru_next = NIL;
        }
        kv->n_free = kv->n_blocks;
        kv->lru_head = kv->lru_tail = NIL;
        for (int i = 0; i < max_seqs; i++) {
                kv->seqs[i].table = kv->seq_mem + (size_t)i * per_seq;
                kv->seqs[i].tokens = kv->seqs[i].table + kv->max_blocks;
        }
        *ret_kv = kv;
        return 0;
}

void dse_kv_cache_stats(const struct dse_kv_cache *kv, struct dse_kv_stats *ret) {
        memset(ret, 0, sizeof *ret);
        if (!kv)
                return;
        ret->block_tokens = kv->block_tokens;
        ret->n_blocks = kv->n_blocks - kv->n_taken;
        ret->n_cached = kv->n_lru;
        ret->n_used = kv->n_blocks - kv->n_taken - kv->n_free - kv->n_lru;
        for (int i = 0; i < kv->max_seqs; i++)
                ret->n_seqs += kv->seqs[i].open;
        ret->prefix_query_tokens = kv->query_tokens;
        ret->prefix_hit_tokens = kv->hit_tokens;
        ret->disk_hit_tokens = kv->disk_hit_tokens;
        if (kv->disk)
                dse__kv_disk_stats(kv->disk, ret);
}

int dse_kv_cache_attach_disk(struct dse_kv_cache *kv, const struct dse_model *model,
                             const struct dse_kv_disk_config *cfg, struct dse_diag *reterr) {
        if (!kv || !model || !cfg || !cfg->path || !*cfg->path || cfg->queue_blocks < 0 || kv->disk ||
            (unsigned)cfg->fault >= DSE_KV_DISK_FAULT_COUNT)
                return dse__fail(reterr, -EINVAL, "dse_kv_cache_attach_disk: bad arguments%s",
                                 kv && kv->disk ? " (a disk tier is already attached)" : "");
        struct dse__kv_disk_identity id = {
                .model_crc = dse__model_header_crc(model),
                .tokenizer_crc = dse__model_tokenizer_crc(model),
                .dtype = (int32_t)kv->layout.dtype,
                .block_tokens = kv->block_tokens,
                .n_layers = kv->n_layers,
                .row_bytes = kv->layout.row_bytes,
                .block_bytes = dse_kv_cache_block_bytes(kv),
        };
        kv->read_mem = malloc((size_t)kv->max_seqs * (size_t)kv->max_blocks * sizeof *kv->read_mem);
        if (!kv->read_mem)
                return dse__fail(reterr, -ENOMEM, "KV disk tier %s: cannot allocate its read-back lists", cfg->path);
        int r = dse__kv_disk_open(cfg->path, cfg->bytes, cfg->queue_blocks, &id, cfg->fault, &kv->disk, reterr);
        if (r < 0) {
                free(kv->read_mem);
                kv->read_mem = NULL;
                return r;
        }
        for (int i = 0; i < kv->max_seqs; i++)
                kv->seqs[i].reads.r = kv->read_mem + (size_t)i * (size_t)kv->max_blocks;
        return 0;
}

void dse_kv_cache_disk_flush(struct dse_kv_cache *kv) {
        if (kv && kv->disk)
                dse__kv_disk_flush(kv->disk);
}

void dse_kv_cache_disk_set_fault(struct dse_kv_cache *kv, enum dse_kv_disk_fault fault) {
        if (kv && kv->disk)
                dse__kv_disk_set_fault(kv->disk, fault);
}

int dse_kv_cache_n_available(const struct dse_kv_cache *kv) {
        return kv ? kv->n_free + kv->n_lru : -EINVAL;
}

/* ---- evictable list and prefix table ---- */

static void lru_remove(struct dse_kv_cache *kv, int32_t b) {
        struct kv_block *k = &kv->blocks[b];
        if (k->lru_prev != NIL)
                kv->blocks[k->lru_prev].lru_next = k->lru_next;
        else
                kv->lru_head = k->lru_next;
        if (k->lru_next != NIL)
                kv->blocks[k->lru_next].lru_prev = k->lru_prev;
        else
                kv->lru_tail = k->lru_prev;
        k->lru_prev = k->lru_next = NIL;
        kv->n_lru--;
}

static void lru_push(struct dse_kv_cache *kv, int32_t b) {
        struct kv_block *k = &kv->blocks[b];
        k->lru_prev = kv->lru_tail;
        k->lru_next = NIL;
        if (kv->lru_tail != NIL)
                kv->blocks[kv->lru_tail].lru_next = b;
        else
                kv->lru_head = b;
        kv->lru_tail = b;
        kv->n_lru++;
}

static void table_remove(struct dse_kv_cache *kv, int32_t b) {
        int32_t *p = &kv->buckets[kv->blocks[b].key & kv->bucket_mask];
        while (*p != b)
                p = &kv->blocks[*p].hnext;
        *p = kv->blocks[b].hnext;
        kv->blocks[b].hnext = NIL;
        kv->blocks[b].hashed = 0;
}

static int32_t table_find(const struct dse_kv_cache *kv, uint64_t key, uint64_t parent, const int32_t *ids) {
        for (int32_t b = kv->buckets[key & kv->bucket_mask]; b != NIL; b = kv->blocks[b].hnext)
                if (kv->blocks[b].key == key && kv->blocks[b].parent_key == parent &&
                    !memcmp(kv->block_tokens_ids + (size_t)b * kv->block_tokens, ids,
                            (size_t)kv->block_tokens * sizeof(int32_t)))
                        return b;
        return NIL;
}

static uint8_t *block_rows(const struct dse_kv_cache *kv, int32_t b) {
        return kv->data + (size_t)b * dse_kv_cache_block_bytes(kv);
}

/* Enters block b, holding (key, parent, ids), in the prefix table. */
static void table_insert(struct dse_kv_cache *kv, int32_t b, uint64_t key, uint64_t parent, const int32_t *ids) {
        struct kv_block *blk = &kv->blocks[b];
        blk->key = key;
        blk->parent_key = parent;
        blk->hashed = 1;
        memcpy(kv->block_tokens_ids + (size_t)b * kv->block_tokens, ids, (size_t)kv->block_tokens * sizeof(int32_t));
        uint32_t h = (uint32_t)(key & kv->bucket_mask);
        blk->hnext = kv->buckets[h];
        kv->buckets[h] = b;
}

/* A block for new contents: a never-hashed free one, else the oldest cached one, whose
 * prefix goes to the disk tier's queue (a copy: the block is reused at once). */
static int32_t block_take(struct dse_kv_cache *kv) {
        int32_t b;
        if (kv->n_free > 0) {
                b = kv->free_stack[--kv->n_free];
        } else {
                b = kv->lru_head;
                lru_remove(kv, b);
                if (kv->disk)
                        dse__kv_disk_spill(kv->disk, kv->blocks[b].key, kv->blocks[b].parent_key,
                                           kv->block_tokens_ids + (size_t)b * kv->block_tokens, block_rows(kv, b));
                table_remove(kv, b);
        }
        kv->blocks[b].ref = 1;
        return b;
}

static void block_release(struct dse_kv_cache *kv, int32_t b) {
        struct kv_block *k = &kv->blocks[b];
        if (--k->ref > 0)
                return;
        if (k->hashed)
                lru_push(kv, b);
        else
                kv->free_stack[kv->n_free++] = b;
}

int dse_kv_cache_disk_write_back(struct dse_kv_cache *kv, int timeout_ms) {
        if (!kv || timeout_ms < 0)
                return -EINVAL;
        if (!kv->disk)
                return 0;
        struct timespec until;
        dse__kv_disk_deadline(timeout_ms, &until);
        /* the most recently used blocks the tier can hold, written oldest first so the
         * tier's LRU order is the pool's */
        int32_t b = kv->lru_tail, room = dse__kv_disk_n_slots(kv->disk);
        for (int32_t n = 1; n < room && b != NIL && kv->blocks[b].lru_prev != NIL; n++)
                b = kv->blocks[b].lru_prev;
        int kept = 0;
        for (; b != NIL; b = kv->blocks[b].lru_next) {
                int r = dse__kv_disk_spill_until(kv->disk, kv->blocks[b].key, kv->blocks[b].parent_key,
                                                 kv->block_tokens_ids + (size_t)b * kv->block_tokens, block_rows(kv, b),
                                                 &until);
                if (r < 0)
                        break;
                kept++;
        }
        dse__kv_disk_flush(kv->disk);
        return kept;
}

/* ---- sequences ---- */

static struct kv_seq *seq_get(const struct dse_kv_cache *kv, int seq) {
        if (!kv || seq < 0 || seq >= kv->max_seqs || !kv->seqs[seq].open)
                return NULL;
        return &kv->seqs[seq];
}

int dse_kv_seq_open(struct dse_kv_cache *kv) {
        if (!kv)
                return -EINVAL;
        for (int i = 0; i < kv->max_seqs; i++) {
                struct kv_seq *q = &kv->seqs[i];
                if (!q->open) {
                        q->open = 1;
                        q->opened++;
                        q->len = q->n_blocks = q->n_keyed = q->n_ahead = 0;
                        q->last_key = 0;
                        return i;
                }
        }
        return -EBUSY;
}

void dse_kv_seq_close(struct dse_kv_cache *kv, int seq) {
        struct kv_seq *q = seq_get(kv, seq);
        if (!q)
                return;
        if (q->n_loading) { /* the reader may be filling a block: it stops first */
                dse__kv_disk_read_cancel(kv->disk, &q->reads);
                q->n_loading = 0;
        }
        /* Release the tail first so the LRU list evicts a prefix's deepest blocks before
         * its shared head. */
        for (int32_t i = q->n_blocks - 1; i >= 0; i--)
                block_release(kv, q->table[i]);
        q->open = 0;
        q->len = q->n_blocks = q->n_keyed = q->n_ahead = 0;
}

int dse_kv_seq_len(const struct dse_kv_cache *kv, int seq) {
        const struct kv_seq *q = seq_get(kv, seq);
        return q ? q->len : -EINVAL;
}

int dse_kv_seq_attach_prefix(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens) {
        return dse_kv_seq_attach_prefix_loading(kv, seq, tokens, n_tokens, INT32_MAX);
}

int dse_kv_seq_attach_prefix_loading(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens,
                                     int max_loads) {
        int r = dse_kv_seq_attach_prefix_start(kv, seq, tokens, n_tokens, max_loads);
        if (r < 0)
                return r;
        while ((r = dse_kv_seq_load_poll(kv, seq)) == -EINPROGRESS)
                dse__kv_disk_read_wait(kv->disk, 1000);
        return r;
}

int dse_kv_seq_attach_prefix_start(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens,
                                   int max_loads) {
        struct kv_seq *q = seq_get(kv, seq);
        if (!q || q->len != 0 || q->n_blocks != 0 || (!tokens && n_tokens) || n_tokens > (size_t)kv->n_ctx ||
            max_loads < 0)
                return -EINVAL;
        kv->query_tokens += (int64_t)n_tokens;
        int32_t bt = kv->block_tokens, max_full = n_tokens ? (int32_t)((n_tokens - 1) / (size_t)bt) : 0;
        uint64_t key = 0;
        int32_t i;
        for (i = 0; i < max_full; i++) {
                const int32_t *ids = tokens + (size_t)i * bt;
                uint64_t k = block_key(key, ids, bt);
                int32_t b = table_find(kv, k, key, ids);
                if (b == NIL)
                        break;
                if (kv->blocks[b].ref++ == 0)
                        lru_remove(kv, b);
                q->table[i] = b;
                key = k;
        }
        q->n_blocks = q->n_keyed = i;
        q->last_key = key;
        q->len = i * bt;
        kv->hit_tokens += q->len;
        /* A pool miss: the blocks the disk tier holds next come back into fresh pool
         * blocks the sequence holds, unhashed, so nothing evicts or shares them while the
         * reader fills them; dse_kv_seq_load_poll enters them in the prefix table. */
        int32_t n_load = 0;
        for (int32_t j = i; kv->disk && j < max_full && n_load < max_loads && kv->n_free + kv->n_lru > 0; j++) {
                const int32_t *ids = tokens + (size_t)j * bt;
                uint64_t k = block_key(key, ids, bt);
                if (!dse__kv_disk_holds(kv->disk, k, key))
                        break;
                int32_t b = block_take(kv);
                q->table[j] = b;
                q->reads.r[n_load++] = (struct dse__kv_disk_read){k, key, q->tokens + (size_t)j * bt, block_rows(kv, b), 0};
                key = k;
        }
        int32_t held = (i + n_load) * bt;
        if (held)
                memcpy(q->tokens, tokens, (size_t)held * sizeof(int32_t));
        if (n_load > 0) {
                q->n_blocks += n_load;
                q->n_loading = n_load;
                q->reads.n = n_load;
                dse__kv_disk_read_start(kv->disk, &q->reads);
        }
        return q->len;
}

int dse_kv_seq_load_poll(struct dse_kv_cache *kv, int seq) {
        struct kv_seq *q = seq_get(kv, seq);
        if (!q)
                return -EINVAL;
        if (!q->n_loading)
                return q->len;
        if (!dse__kv_disk_read_done(kv->disk, &q->reads))
                return -EINPROGRESS;
        int32_t bt = kv->block_tokens, loaded = 0;
        for (; loaded < q->n_loading && q->reads.r[loaded].result == 0; loaded++) {
                const struct dse__kv_disk_read *e = &q->reads.r[loaded];
                int32_t b = q->table[q->n_keyed];
                /* a twin another sequence computed meanwhile keeps its entry; ours stays private */
                if (table_find(kv, e->key, e->parent, e->ids) == NIL)
                        table_insert(kv, b, e->key, e->parent, e->ids);
                q->n_keyed++;
                q->last_key = e->key;
        }
        /* after the first block that did not come back, prefill computes the rest */
        while (q->n_blocks > q->n_keyed)
                block_release(kv, q->table[--q->n_blocks]);
        q->n_loading = 0;
        q->len = q->n_keyed * bt;
        kv->hit_tokens += (int64_t)loaded * bt;
        kv->disk_hit_tokens += (int64_t)loaded * bt;
        return q->len;
}

void dse_kv_cache_load_wait(struct dse_kv_cache *kv, int timeout_ms) {
        if (kv && kv->disk)
                dse__kv_disk_read_wait(kv->disk, timeout_ms);
}

int dse_kv_seq_blocks_needed(const struct dse_kv_cache *kv, int seq, size_t n_tokens) {
        const struct kv_seq *q = seq_get(kv, seq);
        if (!q)
                return -EINVAL;
        size_t end = (size_t)q->len + n_tokens, have = (size_t)q->n_blocks;
        size_t need = (end + (size_t)kv->block_tokens - 1) / (size_t)kv->block_tokens;
        return need > have ? (int)(need - have) : 0;
}

int dse__kv_fits_model(const struct dse_kv_cache *kv, const struct dse_hparams *hp) {
        return kv->n_layers == hp->n_layers + hp->n_mtp_layers && kv->layout.row_floats == dse__kv_row_floats(hp);
}

uint32_t dse__kv_seq_opened(const struct dse_kv_cache *kv, int seq) {
        return kv->seqs[seq].opened;
}

const int32_t *dse__kv_seq_tokens(const struct dse_kv_cache *kv, int seq) {
        return kv->seqs[seq].tokens;
}

int32_t dse__kv_seq_n_blocks(const struct dse_kv_cache *kv, int seq) {
        return kv->seqs[seq].n_blocks;
}

int32_t dse__kv_max_seqs(const struct dse_kv_cache *kv) {
        return kv->max_seqs;
}

int32_t dse__kv_block_tokens(const struct dse_kv_cache *kv) {
        return kv->block_tokens;
}

int dse__kv_blocks_take(struct dse_kv_cache *kv, int n, int32_t *ret) {
        if (n > kv->n_free + kv->n_lru)
                return -ENOSPC;
        for (int i = 0; i < n; i++)
                ret[i] = block_take(kv);
        kv->n_taken += n;
        return 0;
}

void dse__kv_blocks_put(struct dse_kv_cache *kv, int n, const int32_t *blocks) {
        for (int i = 0; i < n; i++)
                block_release(kv, blocks[i]);
        kv->n_taken -= n;
}

int32_t dse__kv_n_ctx(const struct dse_kv_cache *kv) {
        return kv->n_ctx;
}

int dse__kv_seq_is_open(const struct dse_kv_cache *kv, int seq) {
        return seq_get(kv, seq) != NULL;
}

int dse__kv_seq_reserve(struct dse_kv_cache *kv, int seq, size_t n_tokens) {
        struct kv_seq *q = seq_get(kv, seq);
        if (!q || (size_t)q->len + n_tokens > (size_t)kv->n_ctx)
                return -EINVAL;
        if (q->n_loading)
                return -EBUSY;
        int need = dse_kv_seq_blocks_needed(kv, seq, n_tokens);
        if (need > kv->n_free + kv->n_lru)
                return -ENOSPC;
        for (int i = 0; i < need; i++)
                q->table[q->n_blocks++] = block_take(kv);
        return 0;
}

void dse__kv_seq_view(const struct dse_kv_cache *kv, int seq, struct dse__kv_view *v) {
        *v = kv->layout;
        v->base = kv->data;
        v->blocks = kv->seqs[seq].table;
}

/* Appends n_tokens ids at the sequence's end and registers every block they filled in
 * the prefix table. */
static void seq_append(struct dse_kv_cache *kv, struct kv_seq *q, const int32_t *tokens, size_t n_tokens) {
        int32_t bt = kv->block_tokens;
        if (n_tokens)
                memcpy(q->tokens + q->len, tokens, n_tokens * sizeof(int32_t));
        q->len += (int32_t)n_tokens;
        for (; (q->n_keyed + 1) * bt <= q->len; q->n_keyed++) {
                const int32_t *ids = q->tokens + (size_t)q->n_keyed * bt;
                uint64_t k = block_key(q->last_key, ids, bt);
                int32_t b = q->table[q->n_keyed];
                /* A twin computed by another sequence keeps its entry; ours stays private. */
                if (!kv->blocks[b].hashed && table_find(kv, k, q->last_key, ids) == NIL)
                        table_insert(kv, b, k, q->last_key, ids);
                q->last_key = k;
        }
}

void dse__kv_seq_commit(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens, size_t n_ahead) {
        struct kv_seq *q = &kv->seqs[seq];
        seq_append(kv, q, tokens, n_tokens);
        q->n_ahead = (int32_t)n_ahead;
}

int dse_kv_seq_accept(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_accepted) {
        struct kv_seq *q = seq_get(kv, seq);
        if (!q || n_accepted > (size_t)q->n_ahead || (!tokens && n_accepted))
                return -EINVAL;
        /* Accepted rows are where a plain step would have written them: keeping them is
         * appending their ids. A block is keyed only once every position in it is
         * accepted, so the prefix table never names a rejected token. */
        seq_append(kv, q, tokens, n_accepted);
        q->n_ahead = 0;
        int32_t keep = (q->len + kv->block_tokens - 1) / kv->block_tokens;
        while (q->n_blocks > keep)
                block_release(kv, q->table[--q->n_blocks]);
        return 0;
}

int dse_kv_seq_rewind(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens) {
        struct kv_seq *q = seq_get(kv, seq);
        if (!q || (!tokens && n_tokens))
                return -EINVAL;
        int32_t bt = kv->block_tokens, keep = 0;
        while (keep < q->len && (size_t)keep < n_tokens && q->tokens[keep] == tokens[keep])
                keep++;
        /* The block that would hold kept and dropped positions is written again from
         * `keep` on: another sequence's block (shared through the prefix table) is
         * given up whole, the positions before it evaluated again; our own leaves the
         * prefix table, so no one attaches rows about to change. */
        if (keep % bt && kv->blocks[q->table[keep / bt]].ref > 1)
                keep -= keep % bt;
        int32_t n_blocks = (keep + bt - 1) / bt;
        while (q->n_blocks > n_blocks)
                block_release(kv, q->table[--q->n_blocks]);
        if (keep % bt && kv->blocks[q->table[keep / bt]].hashed)
                table_remove(kv, q->table[keep / bt]);
        q->len = keep;
        q->n_ahead = 0;
        if (q->n_keyed > keep / bt) {
                q->n_keyed = keep / bt;
                q->last_key = 0;
                for (int32_t i = 0; i < q->n_keyed; i++)
                        q->last_key = block_key(q->last_key, q->tokens + (size_t)i * bt, bt);
        }
        return keep;
}
