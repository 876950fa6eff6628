/* dsvisor-bench model: engine speed on synthetic models shaped like real ones.
 *
 *     dsvisor-bench model --preset r1-distill-qwen-1.5b --format int4 [--layers N]
 *                   [--threads T] [--group G] [--prefill 128,512] [--decode 64]
 *                   [--batches 1,4,8] [--hugepages | --shmem] [--unpaired] [--json]
 *
 * The model is written with random weights straight into the native format (the
 * engine's own header writer and schema, engine/FORMAT.md) and cached under
 * $DSV_CACHE_DIR/bench (else ~/.cache/dsvisor/bench), keyed by preset, format, group
 * size and layer count. Then, through the public session API (so it measures what the
 * engine does, not what a kernel could do):
 *   load_s          dse_model_open with DSE_MODEL_POPULATE (validation + page faults);
 *                   with --hugepages or --shmem the copy into the memfd as well; with a
 *                   second open (pmd_share) both
 *   pmd_share       the share of the weights mapped with 2 MiB pages (dse_model_huge_bytes;
 *                   1 for --hugepages, 0 or 1 for --shmem by shmem_enabled). The engine asks for them, but the
 *                   page cache keeps a file in the folios it came in: below one half,
 *                   the file's cached pages are dropped and it is opened once more, read
 *                   from disk in 2 MiB folios (on 4 KiB pages a decode loses a large
 *                   part of its speed to TLB misses)
 *   prefill tok/s   one dse_session_eval of N random tokens on an empty session
 *   decode tok/s    64 steps of one token per sequence, B sequences per step through
 *                   dse_batch_step (one pass over the weights per step), aggregated
 *   bytes/token     the weight bytes one decoded token reads: every matrix with its
 *                   scales and zeros, norms, one embedding row; for MoE layers only
 *                   n_experts_per_tok / n_routed_experts of the routed experts
 *   read bandwidth  a streaming read on the same pool over the weight mapping itself,
 *                   in 4 MiB pieces spread over the bytes a token reads, as often as it
 *                   reads them (probe_spread: a routed expert's 6 in 64, no embedding),
 *                   one pass of bytes/token beside every timed batch-1 decode step (before
 *                   odd steps, after even ones), the read_probe.h variants (1, 4 or 8
 *                   streams per thread, with and without the kernels' software prefetch)
 *                   taking turns: the bytes over the seconds of the variant that read the
 *                   fastest. On a shared host the read bandwidth drifts by a third within
 *                   seconds, so the probe samples the same seconds as the decode, and both
 *                   are means. The best single pass (5 of each variant over 512 MiB of
 *                   the mapping, before and after decoding) is reported too
 *                   (read_bw_best_bytes_per_s); without batch 1 it is the bandwidth
 *                   With --unpaired no probe runs beside the steps (as llama-bench's tg
 *                   decodes: the side-by-side's figure; a pass between steps costs the
 *                   next one its warm caches and prefetch streams) and the read bandwidth
 *                   is the best single pass
 *   roofline        batch-1 decode tok/s x bytes/token / read bandwidth; roofline_best:
 *                   over the best single pass instead, a mean against a maximum
 *   decode steps    the fastest and the median batch-1 step in ms (decode_step_ms_b1)
 *   cpu_share       the CPU time the process got while measuring over threads x wall time
 *   major_faults    page faults that read from disk while measuring: weights that left
 *                   the page cache after load (reclaim, or a host's DAMON pageout of
 *                   regions it thinks idle) and are read back in the middle of a step. A
 *                   run with any is a reading of the host's memory, not of the engine
 *   rss_ratio       VmRSS + HugetlbPages after the largest batch's last step / (weight
 *                   bytes + the KV cache budget + the batch's arena and logits): the engine
 *                   aims at <= 1.05 (weights used in place from the mapping, nothing repacked)
 *   kv              the cache's element type (--kv-dtype, default bf16 as the worker's;
 *                   the prefill sessions get it through DSV_KV), its bytes per token as
 *                   laid out, and as measured: the growth of RSS when the decode's pool is
 *                   made resident (dse_kv_cache_prefault) over the tokens it holds. The
 *                   pool holds --kv-tokens positions per sequence (default: the decode's
 *                   steps), so a long context's cache can weigh in the rss_ratio
 *   depth           with --depth N,N: one sequence prefilled with N random tokens in
 *                   one dse_session_eval (its tok/s: prefill at depth), then --decode
 *                   steps of one token each (decode tok/s at depth, as llama-bench -d N),
 *                   and the KV bytes a decoded token reads at that depth (its attention
 *                   reads every cached position of every layer once: the mean position
 *                   over the steps x kv bytes per token); each with the split attention
 *                   over the threads and, in the same seconds, without it (split_ratio)
 *                   and a sequence decoding from depth 0 (depth0_decode_tok_s: the
 *                   ratio to depth 0 with both taking the same turns of a loaded host)
 *                   The pages under the sessions' caches (kv_pages: DSV_KV_PAGES=huge,
 *                   the default, or small) and the process's anonymous 2 MiB pages after
 *                   the prefills (anon_huge_bytes: what transparent huge pages gave)
 * Each variant is checked before it is timed: every logit of the first evaluation must
 * be finite.
 *
 * --gguf FILE: instead of the preset's random native file, a GGUF model (e.g. written by
 * `dsvisor-bench gguf` and quantized by llama-quantize) converted through the engine's
 * GGUF reader into the model cache, as `--model FILE.gguf` is; its own hyper-parameters
 * replace the preset's (--preset and --format still label the run, --layers and --group
 * do not apply).
 *
 * --hugepages: the weights are copied into a sealed MFD_HUGETLB memfd and opened with
 * dse_model_open_fd, as the supervisor serves them (supervisor/cmd_start.c); the 2 MiB
 * pages missing from the pool are reserved by raising /proc/sys/vm/nr_hugepages, whose
 * old value is restored at exit, on an error and on SIGINT/SIGTERM.
 * --shmem: the same copy into a normal shmem memfd, as the supervisor serves them without
 * HugePages (--hugepages off, or auto without free pages); it asks for 2 MiB pages, which
 * it gets when /sys/kernel/mm/transparent_hugepage/shmem_enabled allows (pmd_share says).
 *
 * --threads T,T (more than one count): thread scaling instead (bench/thread_scaling.c):
 * batch-1 decode at each count in one process, alternating over --rounds rounds (default
 * 5) of --decode steps, with each count's ratio to the first, the read probe's ratio in
 * the same rounds (a decode cannot scale past its memory), and the pool's per-call idle
 * share and the serial part between the calls. It takes no --depth (decode at depth runs
 * with one count: --threads T --depth N, its depth-0 base in the same turns).
 *
 *     dsvisor-bench weights --preset P --format F [--layers N] [--threads T] [--batches 1,4,8]
 *
 * times the kernel table alone over the same file's matrices (every matrix one decoded
 * token multiplies; for MoE the first n_experts_per_tok routed experts of each layer),
 * rows split over the pool, n tokens per pass: float32 activations (matvec / matmul)
 * and int8 activations (quantize_xq + matmul_xq), against the same bandwidth probe. It
 * shows what the kernels reach before the forward pass uses them. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_sort.h"
#include "dse_internal.h"
#include "dsv_platform.h"
#include "read_probe.h"
#include "kv_tier_bench.h"
#include "spec_bench.h"
#include "thread_scaling.h"

#include "gguf_bench.h"
#include "grammar_bench.h"
#include "bench_clock.h"

/* Where the weights are mapped from: the model file, or a copy in a sealed memfd as the
 * supervisor makes it (--hugepages, --shmem). */
enum weights_in { WEIGHTS_FILE, WEIGHTS_HUGETLB, WEIGHTS_SHMEM };
static const char *const weights_in_name[] = {"file", "hugetlb", "shmem"};
static const char *const weights_in_desc[] = {"the file mapping", "a hugetlb memfd", "a shmem memfd"};

#define GEN_VERSION 1 /* bump when the generated content changes */

/* ---- presets: copies of the real configs ------------------------------------------- */

static void hp_common(struct dse_hparams *hp) {
        memset(hp, 0, sizeof *hp);
        hp->rms_norm_eps = 1e-6f;
        hp->rope_theta = 10000.0f;
        hp->rope_type = DSE_ROPE_DEFAULT;
        hp->rope_factor = 1.0f;
        hp->rope_beta_fast = 32.0f;
        hp->rope_beta_slow = 1.0f;
        hp->rope_mscale = 1.0f;
        hp->moe_layer_freq = 1;
        hp->routed_scaling_factor = 1.0f;
        hp->bos_token_id = 1;
        hp->eos_token_id = 2;
}

int dsv_bench_preset_hparams(const char *name, struct dse_hparams *hp) {
        hp_common(hp);
        if (strcmp(name, "r1-distill-qwen-1.5b") == 0) { /* DeepSeek-R1-Distill-Qwen-1.5B config.json */
                hp->arch = DSE_ARCH_QWEN2;
                hp->n_layers = 28;
                hp->hidden_size = 1536;
                hp->intermediate_size = 8960;
                hp->n_heads = 12;
                hp->n_kv_heads = 2;
                hp->head_dim = 128;
                hp->vocab_size = 151936;
                hp->max_position_embeddings = 131072;
                hp->attention_bias = 1;
        } else if (strcmp(name, "deepseek-coder-1.3b") == 0) { /* deepseek-coder-1.3b-base */
                hp->arch = DSE_ARCH_LLAMA;
                hp->n_layers = 24;
                hp->hidden_size = 2048;
                hp->intermediate_size = 5504;
                hp->n_heads = 16;
                hp->n_kv_heads = 16;
                hp->head_dim = 128;
                hp->vocab_size = 32256;
                hp->max_position_embeddings = 16384;
                hp->rope_theta = 100000.0f;
                hp->rope_type = DSE_ROPE_LINEAR;
                hp->rope_factor = 4.0f;
        } else if (strcmp(name, "deepseek-v2-lite") == 0) { /* DeepSeek-V2-Lite config.json */
                hp->arch = DSE_ARCH_DEEPSEEK_V2;
                hp->n_layers = 27;
                hp->hidden_size = 2048;
                hp->intermediate_size = 10944;
                hp->n_heads = 16;
                hp->n_kv_heads = 16;
                hp->kv_lora_rank = 512;
                hp->qk_nope_head_dim = 128;
                hp->qk_rope_head_dim = 64;
                hp->v_head_dim = 128;
                hp->head_dim = 192;
                hp->vocab_size = 102400;
                hp->max_position_embeddings = 163840;
                hp->rope_type = DSE_ROPE_YARN;
                hp->rope_factor = 40.0f;
                hp->rope_mscale = 0.707f;
                hp->rope_mscale_all_dim = 0.707f;
                hp->n_routed_experts = 64;
                hp->n_shared_experts = 2;
                hp->n_experts_per_tok = 6;
                hp->moe_intermediate_size = 1408;
                hp->first_k_dense_replace = 1;
                hp->n_group = 1;
                hp->topk_group = 1;
                hp->topk_method = DSE_MOE_GREEDY;
                hp->scoring_func = DSE_MOE_SOFTMAX;
                hp->eos_token_id = 100001;
                hp->bos_token_id = 100000;
        } else {
                return -EINVAL;
        }
        hp->rope_original_max_pos = hp->rope_type == DSE_ROPE_YARN ? 4096 : hp->max_position_embeddings;
        return 0;
}

/* ---- the synthetic model file ------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;


static void fill_random(uint8_t *p, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                uint64_t v = bench_xorshift64(&rng_state);
                memcpy(p + i, &v, 8);
        }
        for (; i < n; i++)
                p[i] = (uint8_t)bench_xorshift64(&rng_state);
}

enum fill_kind { FILL_ONES, FILL_SMALL, FILL_BF16, FILL_BYTES, FILL_SCALE, FILL_ZERO };

struct gen_tensor {
        struct dse_tensor t;
        enum fill_kind fill;
        float amp; /* FILL_SMALL / FILL_BF16 amplitude, FILL_SCALE value */
};

struct gen_list {
        struct gen_tensor *v;
        size_t n, cap;
};

static struct gen_tensor *gen_add(struct gen_list *l, const char *name, enum dse_dtype dt, int64_t d0, int64_t d1,
                                  int32_t group, enum fill_kind fill, float amp) {
        if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 256;
                struct gen_tensor *v = realloc(l->v, l->cap * sizeof *v);
                if (!v) {
                        fprintf(stderr, "out of memory\n");
                        exit(1);
                }
                l->v = v;
        }
        struct gen_tensor *g = &l->v[l->n++];
        memset(g, 0, sizeof *g);
        snprintf(g->t.name, sizeof g->t.name, "%s", name);
        g->t.dtype = dt;
        g->t.n_dims = d1 ? 2 : 1;
        g->t.shape[0] = d0;
        g->t.shape[1] = d1;
        g->t.group_size = group;
        g->fill = fill;
        g->amp = amp;
        if (dse__tensor_size_bytes(dt, g->t.n_dims, g->t.shape, &g->t.size_bytes) < 0) {
                fprintf(stderr, "tensor '%s': bad shape\n", name);
                exit(1);
        }
        return g;
}

/* Weight dtypes: projections (and the LM head) in the benchmarked format, like
 * `dsvisor convert --quant-format`; embedding and router BF16, norms and biases F32. */
static void plan_tensors(const struct dse_hparams *hp, enum dse_dtype wdt, int32_t group, struct gen_list *l) {
        struct dse_schema_entry *s;
        size_t n;
        if (dse__model_schema(hp, SIZE_MAX, &s, &n) < 0) {
                fprintf(stderr, "schema failed\n");
                exit(1);
        }
        for (size_t i = 0; i < n; i++) {
                const struct dse_schema_entry *e = &s[i];
                int64_t rows = e->shape[0], cols = e->shape[1];
                char aux[DSE_TENSOR_NAME_MAX + 8];
                switch (e->kind) {
                case DSE_SCHEMA_NORM:
                        gen_add(l, e->name, DSE_DTYPE_F32, rows, 0, 0, FILL_ONES, 0);
                        break;
                case DSE_SCHEMA_BIAS:
                case DSE_SCHEMA_ROUTER_BIAS:
                        gen_add(l, e->name, DSE_DTYPE_F32, rows, 0, 0, FILL_SMALL, 0.02f);
                        break;
                case DSE_SCHEMA_EMBED:
                case DSE_SCHEMA_ROUTER:
                        gen_add(l, e->name, DSE_DTYPE_BF16, rows, cols, 0, FILL_BF16, 1.0f);
                        break;
                case DSE_SCHEMA_LINEAR:
                case DSE_SCHEMA_LM_HEAD: {
                        /* |W| about 1/sqrt(cols), so activations stay in range over the layers */
                        float amp = 1.0f / sqrtf((float)cols);
                        if (wdt == DSE_DTYPE_BF16) {
                                gen_add(l, e->name, DSE_DTYPE_BF16, rows, cols, 0, FILL_BF16, amp);
                                break;
                        }
                        int64_t ng = (cols + group - 1) / group;
                        int64_t srows = dse__scale_rows(wdt, rows);
                        gen_add(l, e->name, wdt, rows, cols, group, FILL_BYTES, 0);
                        snprintf(aux, sizeof aux, "%s.scale", e->name);
                        gen_add(l, aux, DSE_DTYPE_F32, srows, ng, 0, FILL_SCALE, amp / (wdt == DSE_DTYPE_Q8 ? 74.0f : 4.6f));
                        if (wdt == DSE_DTYPE_Q4) {
                                snprintf(aux, sizeof aux, "%s.zero", e->name);
                                gen_add(l, aux, DSE_DTYPE_U8, srows, ng, 0, FILL_ZERO, 0);
                        }
                        break;
                }
                default:
                        break;
                }
        }
        free(s);
}

static void fill_chunk(const struct gen_tensor *g, uint8_t *buf, size_t n) {
        switch (g->fill) {
        case FILL_ONES:
                for (size_t i = 0; i + 4 <= n; i += 4) {
                        float one = 1.0f;
                        memcpy(buf + i, &one, 4);
                }
                break;
        case FILL_SCALE:
                for (size_t i = 0; i + 4 <= n; i += 4)
                        memcpy(buf + i, &g->amp, 4);
                break;
        case FILL_SMALL:
                for (size_t i = 0; i + 4 <= n; i += 4) {
                        float v = g->amp * ((float)(bench_xorshift64(&rng_state) >> 40) / (float)(1 << 24) - 0.5f);
                        memcpy(buf + i, &v, 4);
                }
                break;
        case FILL_BF16: {
                /* random sign and mantissa, exponents spanning [amp/8, amp) */
                int e_hi;
                frexpf(g->amp, &e_hi);
                uint32_t exp_top = (uint32_t)(e_hi - 1 + 127);
                for (size_t i = 0; i + 8 <= n; i += 8) {
                        uint64_t r = bench_xorshift64(&rng_state);
                        for (int k = 0; k < 4; k++) {
                                uint16_t v = (uint16_t)(r >> (16 * k));
                                uint16_t h = (uint16_t)((v & 0x807f) | ((exp_top - ((v >> 7) & 3)) << 7));
                                memcpy(buf + i + 2 * k, &h, 2);
                        }
                }
                break;
        }
        case FILL_BYTES:
                fill_random(buf, n);
                break;
        case FILL_ZERO:
                for (size_t i = 0; i < n; i++)
                        buf[i] = (uint8_t)(7 + (bench_xorshift64(&rng_state) & 1)); /* q - zero centred */
                break;
        }
}

#define CHUNK (16u << 20)

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

static int generate(const char *path, const struct dse_hparams *hp, enum dse_dtype wdt, int32_t group,
                    const char *quant_label) {
        struct gen_list l = {0};
        plan_tensors(hp, wdt, group, &l);
        struct dse_tensor *ts = calloc(l.n, sizeof *ts);
        uint64_t *offsets = calloc(l.n, sizeof *offsets);
        uint32_t *crcs = calloc(l.n, sizeof *crcs);
        uint8_t *buf = aligned_alloc(64, CHUNK);
        if (!ts || !offsets || !crcs || !buf)
                return -ENOMEM;
        uint64_t off = 0;
        for (size_t i = 0; i < l.n; i++) {
                ts[i] = l.v[i].t;
                offsets[i] = off;
                off = align_up(off + ts[i].size_bytes, DSE_FORMAT_TENSOR_ALIGN);
        }
        uint64_t data_off = dse__native_header_size(l.n), data_size = align_up(off, DSE_FORMAT_DATA_ALIGN);

        char tmp[4400];
        snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = 0;
        if (ftruncate(fd, (off_t)(data_off + data_size)) < 0) {
                r = -errno;
                goto out;
        }
        for (size_t i = 0; i < l.n && r == 0; i++) {
                uint32_t crc = 0;
                for (uint64_t done = 0; done < ts[i].size_bytes;) {
                        size_t n = ts[i].size_bytes - done < CHUNK ? (size_t)(ts[i].size_bytes - done) : CHUNK;
                        fill_chunk(&l.v[i], buf, n);
                        crc = dse__crc32c(crc, buf, n);
                        if (pwrite(fd, buf, n, (off_t)(data_off + offsets[i] + done)) != (ssize_t)n) {
                                r = -EIO;
                                break;
                        }
                        done += n;
                }
                crcs[i] = crc;
        }
        if (r == 0) {
                uint8_t *hdr = calloc(1, data_off);
                if (!hdr) {
                        r = -ENOMEM;
                        goto out;
                }
                r = dse__native_write_header(hdr, data_off, data_size, hp, quant_label, ts, offsets, crcs, l.n);
                if (r == 0 && pwrite(fd, hdr, data_off, 0) != (ssize_t)data_off)
                        r = -EIO;
                free(hdr);
        }
        /* clean and out of the page cache: the first open reads it back in 2 MiB folios
         * (the write path's small ones would stay; format.c) */
        if (r == 0 && fdatasync(fd) < 0)
                r = -errno;
        if (r == 0)
                (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* advice: failure costs speed only */
out:
        close(fd);
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                unlink(tmp);
        free(l.v);
        free(ts);
        free(offsets);
        free(crcs);
        free(buf);
        return r;
}

static int mkdir_p(char *path) {
        for (char *p = path + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                int r = mkdir(path, 0755);
                *p = '/';
                if (r < 0 && errno != EEXIST)
                        return -errno;
        }
        return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

/* ---- what one decoded token reads ------------------------------------------------ */

/* "model.layers.L.mlp.experts.E.*": a routed expert (shared_experts do not match). */
static int is_routed_expert(const char *name) {
        return strstr(name, ".mlp.experts.") != NULL;
}

/* What one decoded token reads of a tensor. */
enum read_kind {
        READ_WHOLE,   /* every matrix and vector of the layers and the head */
        READ_ROUTED,  /* a routed expert: n_experts_per_tok / n_routed_experts of them */
        READ_ONE_ROW, /* the embedding */
        READ_NONE,    /* the tokenizer's files */
};

static enum read_kind read_kind(const struct dse_tensor *t) {
        if (t->name[0] != 'm' && t->name[0] != 'l')
                return READ_NONE;
        if (strcmp(t->name, "model.embed_tokens.weight") == 0)
                return READ_ONE_ROW;
        return is_routed_expert(t->name) ? READ_ROUTED : READ_WHOLE;
}

/* The share of tensor t's bytes one decoded token reads. */
static double read_share(const struct dse_tensor *t, const struct dse_hparams *hp) {
        switch (read_kind(t)) {
        case READ_WHOLE: return 1.0;
        case READ_ROUTED:
                return hp->n_routed_experts ? (double)hp->n_experts_per_tok / hp->n_routed_experts : 1.0;
        case READ_ONE_ROW: return 1.0 / (double)t->shape[0];
        case READ_NONE: break;
        }
        return 0;
}

static double bytes_per_token(const struct dse_model *m, const struct dse_hparams *hp, uint64_t *ret_weight_bytes) {
        double active = 0;
        uint64_t all = 0;
        for (size_t i = 0; i < dse__model_n_tensors(m); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(m, i);
                double share = read_share(t, hp);
                if (share > 0)
                        all += t->size_bytes;
                active += (double)t->size_bytes * share;
        }
        *ret_weight_bytes = all;
        return active;
}

static void die(int r, const char *what, const struct dse_diag *d) {
        fprintf(stderr, "dsvisor-bench: %s: %s%s%s\n", what, strerror(-r), d && d->msg[0] ? ": " : "",
                d ? d->msg : "");
        exit(1);
}

/* ---- read-bandwidth probe ---------------------------------------------------------- */

#define PROBE_MAX_BYTES (512ull << 20)
#define PROBE_PIECE (4ull << 20) /* bytes of the mapping read in one run */
#define PROBE_SLICE_ALIGN 2048 /* 8 streams of 256-byte steps: read_probe reads every byte */

struct probe {
        const uint8_t **start; /* n_pieces runs of piece bytes */
        size_t piece, n_pieces;
        int variant;
        uint64_t sink[64];
};

/* Bytes of each piece one of nth threads reads: its share, whole 8-stream steps. */
static size_t probe_slice(const struct probe *pr, int nth) {
        return pr->piece / (size_t)nth / PROBE_SLICE_ALIGN * PROBE_SLICE_ALIGN;
}

static void probe_task(void *ctx, int ith, int nth) {
        struct probe *pr = ctx;
        size_t per = probe_slice(pr, nth);
        for (size_t i = 0; i < pr->n_pieces; i++)
                pr->sink[ith % 64] ^= read_probe(pr->start[i] + (size_t)ith * per, per, pr->variant);
}

/* Major page faults of the process so far (getrusage(2) ru_majflt). */
static long major_faults(void) {
        struct rusage ru;
        return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_majflt : 0;
}

/* The weight mapping's span, 64-byte aligned at the start: what the probes read. */
static void weights_span(const struct dse_model *m, const uint8_t **ret_lo, size_t *ret_len) {
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        for (size_t i = 0; i < dse__model_n_tensors(m); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(m, i);
                uintptr_t a = (uintptr_t)t->data;
                if (!t->data || !t->size_bytes)
                        continue;
                lo = a < lo ? a : lo;
                hi = a + t->size_bytes > hi ? a + t->size_bytes : hi;
        }
        lo = (lo + 63) / 64 * 64;
        *ret_lo = (const uint8_t *)lo;
        *ret_len = hi - lo;
}

/* Bytes one pool run of probe_task over pr reads. */
static size_t probe_bytes(const struct probe *pr, int nth) {
        return probe_slice(pr, nth) * (size_t)nth * pr->n_pieces;
}

/* A probe pass of about want bytes of the weight mapping, in PROBE_PIECE runs placed
 * where a decoded token reads and as often as it reads there: evenly over the tensors'
 * bytes weighted by read_share (hp), or by the bytes alone (hp NULL: every matrix read
 * once, as `dsvisor-bench weights` does). Memory is not equally fast everywhere: on a VM
 * one range of guest-physical memory can read markedly slower per core than the rest, so a
 * probe of the mapping's first bytes misjudges a decode whose file lies partly in that
 * range; and a probe spread over the file by bytes alone reads mostly routed experts, of
 * which a token reads a few, while the head, the attention and the shared experts it reads
 * every token may sit elsewhere. Hence: where the decode reads, and as often as it reads
 * there. On memory that is all alike the pieces read as fast as one run does.
 * Returns -ENOMEM, or 0 with pr->start allocated (probe_free). */
static double probe_share(const struct dse_tensor *t, const struct dse_hparams *hp) {
        if (!t->data || !t->size_bytes)
                return 0;
        return hp ? read_share(t, hp) : 1.0;
}

static int probe_spread(const struct dse_model *m, const struct dse_hparams *hp, size_t want, struct probe *pr) {
        const uint8_t *lo;
        size_t len;
        weights_span(m, &lo, &len);
        double total = 0;
        for (size_t i = 0; i < dse__model_n_tensors(m); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(m, i);
                total += (double)t->size_bytes * probe_share(t, hp);
        }
        pr->piece = PROBE_PIECE < want ? PROBE_PIECE : want;
        pr->piece = pr->piece < len ? pr->piece : len;
        pr->n_pieces = want >= len ? 1 : want / pr->piece;
        if (!(pr->start = calloc(pr->n_pieces, sizeof *pr->start)))
                return -ENOMEM;
        const uint8_t *last = lo + len - pr->piece; /* the last start a whole piece fits at */
        if (want >= len) {
                pr->start[0] = lo;
                return 0;
        }
        /* piece k starts at weighted position (k + 1/2) total / n_pieces of the tensors
         * laid end to end in the model's (name) order; a piece runs on past its tensor's
         * end into whatever the mapping holds next */
        size_t i = 0, k = 0;
        double before = 0; /* weighted bytes of the tensors before tensor i */
        for (; k < pr->n_pieces && i < dse__model_n_tensors(m); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(m, i);
                double share = probe_share(t, hp), here = (double)t->size_bytes * share;
                for (; k < pr->n_pieces; k++) {
                        double at = ((double)k + 0.5) * total / (double)pr->n_pieces - before;
                        if (at >= here)
                                break;
                        const uint8_t *a = (const uint8_t *)t->data + (size_t)(at / share) / 64 * 64;
                        pr->start[k] = a < lo ? lo : a > last ? last : a;
                }
                before += here;
        }
        for (; k < pr->n_pieces; k++) /* rounding at the very end */
                pr->start[k] = last;
        return 0;
}

static void probe_free(struct probe *pr) {
        free(pr->start);
        pr->start = NULL;
}

/* The shares of a pass's bytes (nth threads) that fall in routed experts and in what no
 * token reads whole (the embedding, the tokenizer's files): ret_mix[0] and [1], of the
 * bytes that fall in any tensor. */
static void probe_mix(const struct dse_model *m, const struct probe *pr, int nth, double ret_mix[2]) {
        double in[3] = {0}; /* the rest, routed experts, unread */
        uintptr_t len = probe_slice(pr, nth) * (size_t)nth;
        for (size_t k = 0; k < pr->n_pieces; k++) {
                uintptr_t a = (uintptr_t)pr->start[k], b = a + len;
                for (size_t i = 0; i < dse__model_n_tensors(m); i++) {
                        const struct dse_tensor *t = dse__model_tensor_at(m, i);
                        uintptr_t ta = (uintptr_t)t->data, tb = ta + t->size_bytes;
                        if (!t->data || tb <= a || ta >= b)
                                continue;
                        enum read_kind kind = read_kind(t);
                        in[kind == READ_WHOLE ? 0 : kind == READ_ROUTED ? 1 : 2] +=
                                (double)((tb < b ? tb : b) - (ta > a ? ta : a));
                }
        }
        double all = in[0] + in[1] + in[2];
        ret_mix[0] = all > 0 ? in[1] / all : 0;
        ret_mix[1] = all > 0 ? in[2] / all : 0;
}

/* Bytes per second of the best of 5 streaming passes of each read_probe variant over
 * the weight mapping itself (512 MiB of it: far past any cache), on the pool: the same
 * pages as the kernels read (file mapping or hugetlb memfd), already faulted in.
 * ret_variant: the variant that won. */
static double probe_read_bw(struct dse_pool *pool, const struct dse_model *m, const struct dse_hparams *hp,
                            int *ret_variant) {
        int nth = dse_pool_n_threads(pool);
        struct probe pr = {0};
        int r = probe_spread(m, hp, PROBE_MAX_BYTES, &pr);
        if (r < 0)
                die(r, "probe", NULL);
        double best = 0;
        for (int v = 0; v < READ_PROBE_VARIANTS; v++) {
                pr.variant = v;
                for (int rep = 0; rep < 5; rep++) {
                        double t0 = bench_now_s();
                        dse_pool_run(pool, probe_task, &pr);
                        double bw = (double)probe_bytes(&pr, nth) / (bench_now_s() - t0);
                        if (bw > best) {
                                best = bw;
                                *ret_variant = v;
                        }
                }
        }
        probe_free(&pr);
        return best;
}

/* One read pass for the thread-scaling rounds: a token's bytes of the mapping where a
 * token reads them (pr, from probe_spread), every read_probe variant once, the fastest. */
static double scaling_probe_pass(struct dse_pool *pool, void *ctx) {
        struct probe *pr = ctx;
        double best = 0;
        for (int v = 0; v < READ_PROBE_VARIANTS; v++) {
                pr->variant = v;
                double t0 = bench_now_s();
                dse_pool_run(pool, probe_task, pr);
                double bw = (double)probe_bytes(pr, dse_pool_n_threads(pool)) / (bench_now_s() - t0);
                best = bw > best ? bw : best;
        }
        return best;
}

/* ---- measurements ------------------------------------------------------------------ */

/* What the process holds resident: VmRSS plus HugetlbPages (hugetlb mappings, the
 * --hugepages weight image, are not part of VmRSS; proc(5)). */
static long rss_bytes(void) {
        FILE *f = fopen("/proc/self/status", "re");
        if (!f)
                return -1;
        char line[256];
        long kb = -1, rss_kb = -1, huge_kb = 0;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
                        rss_kb = kb;
                else if (sscanf(line, "HugetlbPages: %ld kB", &kb) == 1)
                        huge_kb = kb;
        fclose(f);
        return rss_kb < 0 ? -1 : (rss_kb + huge_kb) * 1024;
}

/* Anonymous memory the kernel maps with transparent 2 MiB pages (the KV caches'
 * when they got them; -1 when /proc/self/smaps_rollup says nothing). */
static long anon_huge_bytes(void) {
        FILE *f = fopen("/proc/self/smaps_rollup", "re");
        if (!f)
                return -1;
        char line[256];
        long kb, huge_kb = -1;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
                        huge_kb = kb;
        fclose(f);
        return huge_kb < 0 ? -1 : huge_kb * 1024;
}

/* The share of m's mapping the kernel maps with 2 MiB pages (0 if /proc says nothing). */
static double pmd_share_of(const struct dse_model *m) {
        uint64_t huge, total;
        return dse_model_huge_bytes(m, &huge, &total) == 0 && total ? (double)huge / (double)total : 0;
}

/* dse_model_open, and once more after dropping the file's cached pages if fewer than half
 * of them came mapped in 2 MiB pages: the page cache keeps a file in the folios it was
 * read or written in, and the engine asks for 2 MiB ones only for what it reads itself
 * (format.c). A file written by an older generator, copied, or read by another program
 * would otherwise be measured on 4 KiB pages, run after run. */
static int open_file_mapping(const char *path, struct dse_model **ret_m, struct dse_diag *d) {
        for (int attempt = 0;; attempt++) {
                int r = dse_model_open(path, DSE_MODEL_POPULATE, ret_m, d);
                if (r < 0)
                        return r;
                double share = pmd_share_of(*ret_m);
                if (share >= 0.5 || attempt == 1)
                        return 0;
                dse_model_free(*ret_m);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                r = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
                if (r != 0)
                        return -r;
                fprintf(stderr, "dsvisor-bench: %.0f%% of %s came in 2 MiB pages; read again from disk\n",
                        share * 100, path);
        }
}

static int all_finite(const float *v, int n) {
        for (int i = 0; i < n; i++)
                if (!isfinite(v[i]))
                        return 0;
        return 1;
}

static void random_tokens(int32_t *t, int n, int vocab, uint64_t seed) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
        for (int i = 0; i < n; i++) {
                t[i] = (int32_t)(bench_xorshift64(&s) % (uint64_t)vocab);
        }
}


/* Prefill tokens/s: n tokens in one eval on a fresh session. */
static double measure_prefill(const struct dse_model *m, struct dse_pool *pool, int n, float *logits) {
        struct dse_diag d = {0};
        struct dse_session *s;
        int vocab = dse_model_vocab_size(m), r;
        if ((r = dse_session_new(m, n, pool, &s, &d)) < 0)
                die(r, "session", &d);
        int32_t *tok = malloc((size_t)n * sizeof *tok);
        random_tokens(tok, n, vocab, 7);
        double t0 = bench_now_s();
        if ((r = dse_session_eval(s, tok, (size_t)n, NULL, logits, &d)) < 0)
                die(r, "prefill", &d);
        double dt = bench_now_s() - t0;
        if (!all_finite(logits, vocab)) {
                fprintf(stderr, "dsvisor-bench: prefill %d: non-finite logits\n", n);
                exit(1);
        }
        free(tok);
        dse_session_free(s);
        return n / dt;
}

/* Aggregate decode tokens/s of B sequences stepping one token each, n_steps times,
 * through dse_batch_step over a paged KV cache: one step evaluates all B sequences with
 * one pass over the weights. */
struct mem_sample {
        long rss;           /* VmRSS after the last step, everything still allocated */
        size_t kv_bytes;    /* the paged cache's budget */
        size_t scratch_bytes; /* the batch's arena plus the logits buffer */
        size_t kv_bytes_per_token; /* as the cache lays a position out, all layers */
        double kv_resident_per_token; /* RSS growth when the pool was prefaulted / its positions */
        double step_min_s, step_median_s; /* the timed steps' fastest and median */
};

/* Probe passes beside the timed decode steps (measure_decode): the read bandwidth of the
 * same seconds as the decode. Each pass reads bytes/token of the mapping with one
 * read_probe variant; the variants take turns, two steps each, so every variant's passes
 * spread over the whole decode. */
struct paired_probe {
        struct probe pr;                                  /* buf and n: what one pass reads */
        double s[READ_PROBE_VARIANTS], bytes[READ_PROBE_VARIANTS]; /* per variant, summed */
};

static void paired_pass(struct dse_pool *pool, struct paired_probe *pair, int variant) {
        pair->pr.variant = variant;
        double t0 = bench_now_s();
        dse_pool_run(pool, probe_task, &pair->pr);
        pair->s[variant] += bench_now_s() - t0;
        pair->bytes[variant] += (double)probe_bytes(&pair->pr, dse_pool_n_threads(pool));
}

/* The variant whose paired passes read the fastest on average (-1: none ran); its bytes
 * per second in *ret_bw. A maximum over noisy means errs high, as a limit should. */
static int paired_best(const struct paired_probe *pair, double *ret_bw) {
        int best = -1;
        *ret_bw = 0;
        for (int v = 0; v < READ_PROBE_VARIANTS; v++)
                if (pair->s[v] > 0 && pair->bytes[v] / pair->s[v] > *ret_bw) {
                        *ret_bw = pair->bytes[v] / pair->s[v];
                        best = v;
                }
        return best;
}

static double measure_decode(const struct dse_model *m, struct dse_pool *pool, int B, int n_steps,
                             enum dse_kv_dtype kv_dtype, int kv_tokens, float *logits, struct paired_probe *pair,
                             struct mem_sample *ret_mem) {
        struct dse_diag d = {0};
        int vocab = dse_model_vocab_size(m), r;
        struct dse_kv_cache *kv;
        struct dse_batch *b;
        int block = 16, n_ctx = kv_tokens > n_steps + 1 ? kv_tokens : n_steps + 1;
        size_t blocks_per_seq = (size_t)(n_ctx + block - 1) / block;
        /* the budget: exactly the blocks B sequences need (block bytes from a first cache) */
        if ((r = dse_kv_cache_new_typed(m, kv_dtype, 64u << 20, block, B, n_ctx, &kv, &d)) < 0)
                die(r, "kv cache", &d);
        size_t budget = dse_kv_cache_block_bytes(kv) * blocks_per_seq * (size_t)B;
        dse_kv_cache_free(kv);
        if ((r = dse_kv_cache_new_typed(m, kv_dtype, budget, block, B, n_ctx, &kv, &d)) < 0)
                die(r, "kv cache", &d);
        long rss0 = rss_bytes();
        if ((r = dse_kv_cache_prefault(kv, &d)) < 0)
                die(r, "kv prefault", &d);
        struct dse_kv_stats kst;
        dse_kv_cache_stats(kv, &kst);
        ret_mem->kv_bytes_per_token = dse_kv_cache_bytes_per_token(kv);
        ret_mem->kv_resident_per_token = (double)(rss_bytes() - rss0) / ((double)kst.n_blocks * kst.block_tokens);
        if ((r = dse_batch_new(m, kv, pool, &b, &d)) < 0)
                die(r, "batch", &d);
        ret_mem->kv_bytes = budget;
        struct dse_batch_seq seqs[64];
        int32_t tok[64];
        float *lg = malloc((size_t)B * (size_t)vocab * sizeof(float));
        double *step_s = malloc((size_t)n_steps * sizeof *step_s);
        if (!lg || !step_s)
                die(-ENOMEM, "decode buffers", NULL);
        for (int i = 0; i < B; i++) {
                if ((r = dse_kv_seq_open(kv)) < 0)
                        die(r, "kv seq", NULL);
                seqs[i] = (struct dse_batch_seq){.seq = r, .tokens = &tok[i], .n_tokens = 1,
                                                 .logits = lg + (size_t)i * vocab};
        }
        /* the timed steps' seconds; step 0 (the check) is not timed. A paired pass comes
         * before odd steps and after even ones, so neither side always follows the other,
         * and each variant gets as many of both */
        double dt = 0;
        for (int step = 0; step <= n_steps; step++) {
                random_tokens(tok, B, vocab, 100 + (uint64_t)step);
                int variant = step > 0 ? (step - 1) / 2 % READ_PROBE_VARIANTS : 0;
                if (pair && step % 2)
                        paired_pass(pool, pair, variant);
                double ts = bench_now_s();
                if ((r = dse_batch_step(b, seqs, (size_t)B, &d)) < 0)
                        die(r, "decode step", &d);
                double te = bench_now_s();
                if (step == 0 && !all_finite(lg, B * vocab)) {
                        fprintf(stderr, "dsvisor-bench: decode batch %d: non-finite logits\n", B);
                        exit(1);
                }
                if (step == 0)
                        continue;
                step_s[step - 1] = te - ts;
                dt += te - ts;
                if (pair && step % 2 == 0)
                        paired_pass(pool, pair, variant);
        }
        qsort(step_s, (size_t)n_steps, sizeof *step_s, bench_cmp_double);
        ret_mem->step_min_s = step_s[0];
        ret_mem->step_median_s = step_s[n_steps / 2];
        free(step_s);
        ret_mem->rss = rss_bytes();
        ret_mem->scratch_bytes = dse_batch_arena_bytes(b) + (size_t)B * (size_t)vocab * sizeof(float);
        memcpy(logits, lg, (size_t)vocab * sizeof(float));
        free(lg);
        dse_batch_free(b);
        dse_kv_cache_free(kv);
        return (double)B * n_steps / dt;
}

/* Decode after a long prompt, on one sequence, twice in the same seconds: with the
 * engine's split attention (a query over more than 512 positions in chunks over the
 * threads, engine/src/attend.c) and without it (dse__session_set_attn_split 0: heads
 * over the threads only). Two sessions: each prefilled with the same depth tokens in
 * one eval (timed), then their decode steps alternate, and with them the steps of a
 * third session decoding from depth 0, the ratio's base. */
struct depth_sample {
        double prefill_tok_s[2], decode_tok_s[3]; /* [0]: split, [1]: whole, [2]: depth 0 */
        double kv_read_bytes_per_token;
        enum dse_kv_pages kv_pages; /* asked for under the sessions' caches (DSV_KV_PAGES) */
        long anon_huge_bytes;       /* the process's anonymous 2 MiB pages after both prefills */
};

static struct depth_sample measure_depth(const struct dse_model *m, struct dse_pool *pool, int depth, int n_steps,
                                         float *logits) {
        struct dse_diag d = {0};
        int vocab = dse_model_vocab_size(m), r, n_ctx = depth + n_steps + 1;
        struct dse_session *s[3];
        int32_t *prompt = malloc((size_t)(depth > 0 ? depth : 1) * sizeof *prompt);
        if (!prompt)
                die(-ENOMEM, "depth prompt", NULL);
        random_tokens(prompt, depth, vocab, 7);
        struct depth_sample ds = {0};
        for (int v = 0; v < 2; v++) {
                if ((r = dse_session_new(m, n_ctx, pool, &s[v], &d)) < 0)
                        die(r, "session at depth", &d);
                if (v == 1 && (r = dse__session_set_attn_split(s[v], 0)) < 0)
                        die(r, "attention split off", NULL);
                double t0 = bench_now_s();
                if (depth > 0 && (r = dse_session_eval(s[v], prompt, (size_t)depth, NULL, logits, &d)) < 0)
                        die(r, "prefill at depth", &d);
                ds.prefill_tok_s[v] = depth > 0 ? depth / (bench_now_s() - t0) : 0;
                if (depth > 0 && !all_finite(logits, vocab)) {
                        fprintf(stderr, "dsvisor-bench: prefill at depth %d: non-finite logits\n", depth);
                        exit(1);
                }
        }
        ds.kv_pages = dse_session_kv_pages(s[0]);
        ds.anon_huge_bytes = anon_huge_bytes();
        if ((r = dse_session_new(m, n_steps + 1, pool, &s[2], &d)) < 0)
                die(r, "session at depth 0", &d);
        double dt[3] = {0, 0, 0};
        for (int step = 0; step <= n_steps; step++) {
                int32_t tok;
                random_tokens(&tok, 1, vocab, 500 + (uint64_t)step);
                for (int k = 0; k < 3; k++) {
                        int v = (step + k) % 3; /* none always goes first */
                        double ts = bench_now_s();
                        if ((r = dse_session_eval(s[v], &tok, 1, NULL, logits, &d)) < 0)
                                die(r, "decode at depth", &d);
                        if (step > 0) /* step 0 reaches the steady state (and is checked) */
                                dt[v] += bench_now_s() - ts;
                        else if (!all_finite(logits, vocab)) {
                                fprintf(stderr, "dsvisor-bench: decode at depth %d: non-finite logits\n", depth);
                                exit(1);
                        }
                }
        }
        for (int v = 0; v < 3; v++)
                ds.decode_tok_s[v] = n_steps / dt[v];
        /* the timed steps attend to positions 0 .. depth + step: on average depth + 1 +
         * (n_steps + 1) / 2 rows per layer */
        ds.kv_read_bytes_per_token =
                ((double)depth + 1.0 + (n_steps + 1) / 2.0) * (double)dse_session_kv_bytes_per_token(s[0]);
        free(prompt);
        for (int v = 0; v < 3; v++)
                dse_session_free(s[v]);
        return ds;
}

/* ---- dsvisor-bench weights: the kernels alone over the model's own matrices ---------- */

/* The matrices one decoded token multiplies (MoE: the first n_experts_per_tok routed
 * experts of each layer stand for the routed ones), as the kernels see them. */
struct wmat {
        struct dse_qmat w;
        uint64_t bytes; /* data + scales + zeros */
};

static int is_decode_matrix(const struct dse_hparams *hp, const struct dse_tensor *t) {
        size_t len = strlen(t->name);
        if (t->n_dims != 2 || len < 7 || strcmp(t->name + len - 7, ".weight") != 0 ||
            strcmp(t->name, "model.embed_tokens.weight") == 0)
                return 0;
        const char *e = strstr(t->name, ".mlp.experts.");
        return !e || atoi(e + strlen(".mlp.experts.")) < hp->n_experts_per_tok;
}

static size_t collect_matrices(const struct dse_model *m, const struct dse_hparams *hp, struct wmat *out) {
        size_t n = 0;
        for (size_t i = 0; i < dse__model_n_tensors(m); i++) {
                const struct dse_tensor *t = dse__model_tensor_at(m, i);
                if (!is_decode_matrix(hp, t))
                        continue;
                struct wmat *wm = &out[n++];
                memset(wm, 0, sizeof *wm);
                wm->w = (struct dse_qmat){.dtype = t->dtype, .rows = t->shape[0], .cols = t->shape[1],
                                          .group_size = t->group_size, .data = t->data};
                wm->bytes = t->size_bytes;
                if (t->dtype == DSE_DTYPE_Q8 || t->dtype == DSE_DTYPE_Q4) {
                        char aux[DSE_TENSOR_NAME_MAX + 8];
                        wm->w.n_groups = (wm->w.cols + t->group_size - 1) / t->group_size;
                        snprintf(aux, sizeof aux, "%s.scale", t->name);
                        const struct dse_tensor *sc = dse__model_tensor(m, aux);
                        snprintf(aux, sizeof aux, "%s.zero", t->name);
                        const struct dse_tensor *z = dse__model_tensor(m, aux);
                        if (sc->dtype == DSE_DTYPE_F16) /* Q4's symmetric form (kernels.h) */
                                wm->w.scale_f16 = sc->data;
                        else
                                wm->w.scale = sc->data;
                        wm->bytes += sc->size_bytes;
                        if (z) {
                                wm->w.zero = z->data;
                                wm->bytes += z->size_bytes;
                        }
                }
        }
        return n;
}

struct wjob {
        const struct dse_kernels *k;
        const struct dse_qmat *w;
        const float *x;
        const struct dse_xq *xq;
        float *y;
        int64_t n, ldx, ldy;
};

static void wjob_float(void *ctx, size_t r0, size_t r1, int ith) {
        const struct wjob *j = ctx;
        (void)ith;
        if (j->n == 1)
                j->k->matvec[j->w->dtype](j->w, j->x, j->y, (int64_t)r0, (int64_t)r1);
        else
                j->k->matmul[j->w->dtype](j->w, j->x, j->ldx, j->n, j->y, j->ldy, (int64_t)r0, (int64_t)r1);
}

static void wjob_xq(void *ctx, size_t r0, size_t r1, int ith) {
        const struct wjob *j = ctx;
        (void)ith;
        j->k->matmul_xq[j->w->dtype](j->w, j->xq, j->y, j->ldy, (int64_t)r0, (int64_t)r1);
}

/* Seconds for one pass over every matrix with n tokens (best of reps). xq: the int8
 * activation path (quantizing x once per matrix, as a forward pass would). */
static double weights_pass(struct dse_pool *pool, const struct dse_kernels *k, const struct wmat *mats, size_t n_mats,
                           int64_t n, int xq_path, const float *x, int64_t ldx, float *y, int64_t ldy, void *xq_mem,
                           int reps) {
        double best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
                double t0 = bench_now_s();
                for (size_t i = 0; i < n_mats; i++) {
                        const struct dse_qmat *w = &mats[i].w;
                        struct wjob j = {k, w, x, NULL, y, n, ldx, ldy};
                        struct dse_xq xq;
                        if (xq_path && k->matmul_xq[w->dtype]) {
                                dse__xq_init(&xq, xq_mem, n, w->cols);
                                k->quantize_xq(x, ldx, &xq);
                                j.xq = &xq;
                                dse_pool_parallel_for(pool, (size_t)w->rows, wjob_xq, &j);
                        } else {
                                dse_pool_parallel_for(pool, (size_t)w->rows, wjob_float, &j);
                        }
                }
                double dt = bench_now_s() - t0;
                best = dt < best ? dt : best;
        }
        return best;
}

static void bench_weights(const struct dse_model *m, const struct dse_hparams *hp, struct dse_pool *pool,
                          const int *tokens, int n_tokens, const char *preset, const char *format, int threads,
                          enum weights_in wi, int json) {
        struct dse_cpu_info cpu;
        struct dse_kernels k;
        dse_cpu_detect(&cpu, NULL);
        dse_kernels_resolve(cpu.level, &k);
        struct wmat *mats = calloc(dse__model_n_tensors(m), sizeof *mats);
        size_t n_mats = collect_matrices(m, hp, mats);
        uint64_t bytes = 0;
        int64_t max_rows = 1, max_cols = 1, max_n = 1;
        for (size_t i = 0; i < n_mats; i++) {
                bytes += mats[i].bytes;
                max_rows = mats[i].w.rows > max_rows ? mats[i].w.rows : max_rows;
                max_cols = mats[i].w.cols > max_cols ? mats[i].w.cols : max_cols;
        }
        for (int i = 0; i < n_tokens; i++)
                max_n = tokens[i] > max_n ? tokens[i] : max_n;
        float *x = malloc((size_t)(max_n * max_cols) * sizeof(float));
        float *y = malloc((size_t)(max_n * max_rows) * sizeof(float));
        void *xq_mem = aligned_alloc(64, dse__xq_bytes(max_n, max_cols));
        random_tokens((int32_t *)x, (int)(max_n * max_cols), 2000, 3);
        for (int64_t i = 0; i < max_n * max_cols; i++)
                x[i] = (float)((int32_t *)x)[i] / 1000.0f - 1.0f;
        int probe_v0 = 0, probe_v1 = 0;
        double bw0 = probe_read_bw(pool, m, NULL, &probe_v0);
        int has_xq = k.matmul_xq[mats[0].w.dtype] != NULL;
        double t_f[8], t_q[8], wall0 = bench_now_s(), cpu0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int i = 0; i < n_tokens; i++) {
                int reps = tokens[i] > 16 ? 2 : 5;
                t_f[i] = weights_pass(pool, &k, mats, n_mats, tokens[i], 0, x, max_cols, y, max_rows, xq_mem, reps);
                t_q[i] = has_xq ? weights_pass(pool, &k, mats, n_mats, tokens[i], 1, x, max_cols, y, max_rows, xq_mem,
                                              reps)
                                : 0;
        }
        double cpu_share = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / ((bench_now_s() - wall0) * threads);
        double bw1 = probe_read_bw(pool, m, NULL, &probe_v1), bw = bw0 > bw1 ? bw0 : bw1;
        const char *probe_name = read_probe_name(bw0 > bw1 ? probe_v0 : probe_v1);
        if (json) {
                printf("{\"preset\":\"%s\",\"format\":\"%s\",\"threads\":%d,\"layers\":%d,\"level\":\"%s\","
                       "\"hugepages\":%s,\"matrices\":%zu,\"bytes_per_pass\":%llu,\"read_bw_bytes_per_s\":%.0f,"
                       "\"read_probe\":\"%s\",\"passes\":[",
                       preset, format, threads, hp->n_layers, dse_cpu_level_to_string(cpu.level),
                       wi == WEIGHTS_HUGETLB ? "true" : "false", n_mats, (unsigned long long)bytes, bw, probe_name);
                for (int i = 0; i < n_tokens; i++)
                        printf("%s{\"tokens\":%d,\"f32act_s\":%.6f,\"f32act_roofline\":%.4f,\"xq_s\":%.6f,"
                               "\"xq_roofline\":%.4f}",
                               i ? "," : "", tokens[i], t_f[i], bytes / t_f[i] / bw, t_q[i],
                               has_xq ? bytes / t_q[i] / bw : 0.0);
                printf("],\"cpu_share\":%.3f}\n", cpu_share);
        } else {
                printf("weights: preset %s, format %s, %d layers, %d threads, kernels %s\n", preset, format,
                       hp->n_layers, threads, dse_cpu_level_to_string(cpu.level));
                printf("%zu matrices, %.1f MB per pass, weights in %s, read bandwidth %.2f GB/s (probe %s over the "
                       "weights: before %.2f, after %.2f), cpu share %.2f\n", n_mats, bytes / 1e6,
                       weights_in_desc[wi], bw / 1e9, probe_name, bw0 / 1e9, bw1 / 1e9,
                       cpu_share);
                for (int i = 0; i < n_tokens; i++) {
                        printf("tokens %d: float activations %.2f ms/pass (%.1f tok/s, %.3f of bandwidth)", tokens[i],
                               t_f[i] * 1e3, tokens[i] / t_f[i], bytes / t_f[i] / bw);
                        if (has_xq)
                                printf("; int8 activations %.2f ms/pass (%.1f tok/s, %.3f of bandwidth)", t_q[i] * 1e3,
                                       tokens[i] / t_q[i], bytes / t_q[i] / bw);
                        printf("\n");
                }
        }
        free(x);
        free(y);
        free(xq_mem);
        free(mats);
}

/* ---- --hugepages, --shmem: the weights in a memfd, as the supervisor serves them ------ */

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

/* The value nr_hugepages had before we raised it, written back at exit, on die() and on
 * SIGINT/SIGTERM (the handler uses only open/write/close); empty when nothing to undo. */
static char hp_old[32];
static size_t hp_old_len;

static void hp_restore(void) {
        if (!hp_old_len)
                return;
        int fd = open(NR_HUGEPAGES, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        if (write(fd, hp_old, hp_old_len) == (ssize_t)hp_old_len)
                hp_old_len = 0; /* else atexit tries again after a signal handler's attempt */
        close(fd);
}

static void hp_on_signal(int sig) {
        hp_restore();
        signal(sig, SIG_DFL);
        raise(sig);
}

static int write_nr_hugepages(uint64_t v) {
        FILE *f = fopen(NR_HUGEPAGES, "we");
        if (!f)
                return -errno;
        int r = fprintf(f, "%llu\n", (unsigned long long)v) < 0 ? -EIO : 0;
        if (fclose(f) != 0 && r == 0)
                r = -errno;
        return r;
}

/* Makes sure `need` 2 MiB pages are free, raising nr_hugepages by the shortfall only;
 * the old value is restored at exit. -ENOMEM (with the count reached) if the kernel
 * could not find the memory. */
static int hp_reserve(uint64_t need, uint64_t *ret_free) {
        uint64_t free_pages = 0;
        int r = dsv_hugepages_free_on_node(NULL, -1, &free_pages);
        if (r < 0)
                return r;
        *ret_free = free_pages;
        if (free_pages >= need)
                return 0;
        FILE *f = fopen(NR_HUGEPAGES, "re");
        if (!f)
                return -errno;
        unsigned long long v;
        r = fscanf(f, "%llu", &v) == 1 ? 0 : -EBADMSG;
        fclose(f);
        if (r < 0)
                return r;
        snprintf(hp_old, sizeof hp_old, "%llu\n", v);
        hp_old_len = strlen(hp_old);
        atexit(hp_restore);
        struct sigaction sa = {.sa_handler = hp_on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        /* The kernel grows the pool as far as reclaim and compaction get in one attempt
         * (next to a large page cache, only part of what was asked for);
         * writing the same target makes it try again: do so until three attempts in a row
         * gain nothing. */
        uint64_t target = v + need - free_pages;
        for (int idle = 0; idle < 3;) {
                uint64_t before = free_pages;
                if ((r = write_nr_hugepages(target)) < 0 || (r = dsv_hugepages_free_on_node(NULL, -1, &free_pages)) < 0)
                        return r;
                *ret_free = free_pages;
                if (free_pages >= need)
                        return 0;
                idle = free_pages > before ? 0 : idle + 1;
        }
        return -ENOMEM;
}

/* Copies the model file into a sealed memfd (dsv_hugepages_image, the supervisor's own
 * weight image): MFD_HUGETLB for WEIGHTS_HUGETLB, shmem for WEIGHTS_SHMEM; opens it with
 * dse_model_open_fd. */
static int open_image(const char *path, enum weights_in wi, struct dsv_hugepages_image *img, struct dse_model **ret_m,
                      struct dse_diag *d) {
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        uint64_t need = ((uint64_t)st.st_size + DSV_HUGEPAGE_2MB_BYTES - 1) / DSV_HUGEPAGE_2MB_BYTES, free_pages = 0;
        int r = wi == WEIGHTS_HUGETLB ? hp_reserve(need, &free_pages) : 0;
        if (r < 0) {
                fprintf(stderr, "dsvisor-bench: --hugepages: %llu free 2 MiB pages, %llu needed: %s (raise %s "
                        "or free memory)\n", (unsigned long long)free_pages, (unsigned long long)need,
                        strerror(-r), NR_HUGEPAGES);
                return r;
        }
        if ((r = dsv_hugepages_image_init(img, "dsvisor-bench-weights", (size_t)st.st_size, -1,
                                          wi == WEIGHTS_HUGETLB ? DSV_HUGEPAGES_MODE_REQUIRE : DSV_HUGEPAGES_MODE_OFF,
                                          NULL)) < 0)
                return r;
        if ((r = dsv_hugepages_image_fill(img, path)) < 0 || (r = dsv_hugepages_image_seal(img)) < 0)
                return r;
        return dse_model_open_fd(img->fd, DSE_MODEL_POPULATE, ret_m, d);
}

/* ---- command line ------------------------------------------------------------------- */

/* Comma-separated integers, each at least min. */
static int parse_list(const char *s, int *v, int max, int min) {
        int n = 0;
        while (*s && n < max) {
                char *end;
                long x = strtol(s, &end, 10);
                if (end == s || x < min || x > INT32_MAX)
                        return -1;
                v[n++] = (int)x;
                s = *end == ',' ? end + 1 : end;
                if (*end && *end != ',')
                        return -1;
        }
        return n;
}

static void usage(void) {
        fprintf(stderr,
                "usage: dsvisor-bench model --preset r1-distill-qwen-1.5b|deepseek-coder-1.3b|deepseek-v2-lite\n"
                "           --format int4|int8|bf16 [--layers N] [--threads T | --threads T,T [--rounds N]] [--group G]\n"
                "           [--prefill N,N] [--decode STEPS] [--batches B,B] [--hugepages | --shmem]\n"
                "           [--kv-dtype f32|bf16|fp8|int8] [--kv-tokens N] [--depth N,N] [--gguf FILE] [--unpaired]\n"
                "           [--json]\n"
                "       dsvisor-bench weights (the same options; --batches: tokens per pass)\n"
                "       dsvisor-bench gguf --preset P --format f32|f16|q8_0|q4_0 [--layers N] --out FILE (bench/gguf_bench.c)\n"
                "       dsvisor-bench grammar --tokenizer FILE [--corpus DIR] [--dsvisor PATH] [--slowest N] [--json]\n"
                "       dsvisor-bench spec --preset P --format F [--layers N] [--threads T] [--serve-model DIR]\n"
                "           [--draft-model M] [--held-out FILE] [--passages N] [--max-tokens N] [--repeat N] [--json]\n"
                "           (bench/spec_bench.c)\n"
                "       dsvisor-bench kvtier --preset P --format F [--layers N] [--threads T] [--prefix 4096]\n"
                "           [--tier-dir DIR] [--chat CONVS,TURNS,TOKENS] [--json] (bench/kv_tier_bench.c)\n");
        exit(2);
}

int main(int argc, char **argv) {
        if (argc >= 2 && strcmp(argv[1], "grammar") == 0)
                return dsv_bench_grammar(argc, argv);
        if (argc >= 2 && strcmp(argv[1], "gguf") == 0)
                return dsv_bench_gguf(argc, argv);
        if (argc < 2 || (strcmp(argv[1], "model") != 0 && strcmp(argv[1], "weights") != 0 &&
                         strcmp(argv[1], "spec") != 0 && strcmp(argv[1], "kvtier") != 0))
                usage();
        int weights_mode = strcmp(argv[1], "weights") == 0, spec_mode = strcmp(argv[1], "spec") == 0;
        int kvtier_mode = strcmp(argv[1], "kvtier") == 0;
        struct kv_tier_bench_opts kvtier = {.prefix_tokens = 4096, .chat_convs = 3, .chat_turns = 3,
                                            .chat_turn_tokens = 256};
        int chat[3];
        struct spec_bench_opts spec = {.serve_model = "models/default", .held_out = NULL,
                                       .n_passages = 24, .max_tokens = 64, .repeat = 3};
        const char *preset = NULL, *format = NULL, *gguf = NULL;
        int layers = 0, threads = 2, group = 0, json = 0, unpaired = 0, decode_steps = 64, kv_tokens = 0, rounds = 5;
        int thread_counts[8] = {2}, n_thread_counts = 1;
        enum dse_kv_dtype kv_dtype = DSE_KV_BF16;
        enum weights_in wi = WEIGHTS_FILE;
        int prefill[8] = {128, 512}, n_prefill = 2, batches[8] = {1, 4, 8}, n_batches = 3, depths[8], n_depths = 0;
        for (int i = 2; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (strcmp(a, "--json") == 0) {
                        json = 1;
                        continue;
                }
                if (strcmp(a, "--unpaired") == 0) {
                        unpaired = 1;
                        continue;
                }
                if (strcmp(a, "--hugepages") == 0 || strcmp(a, "--shmem") == 0) {
                        wi = strcmp(a, "--hugepages") == 0 ? WEIGHTS_HUGETLB : WEIGHTS_SHMEM;
                        continue;
                }
                if (!v)
                        usage();
                i++;
                if (strcmp(a, "--preset") == 0)
                        preset = v;
                else if (strcmp(a, "--format") == 0)
                        format = v;
                else if (strcmp(a, "--layers") == 0)
                        layers = atoi(v);
                else if (strcmp(a, "--threads") == 0) {
                        n_thread_counts = parse_list(v, thread_counts, 8, 1);
                        threads = n_thread_counts > 0 ? thread_counts[0] : 0;
                } else if (strcmp(a, "--rounds") == 0)
                        rounds = atoi(v);
                else if (strcmp(a, "--group") == 0)
                        group = atoi(v);
                else if (strcmp(a, "--decode") == 0)
                        decode_steps = atoi(v);
                else if (strcmp(a, "--prefill") == 0)
                        n_prefill = strcmp(v, "none") == 0 ? 0 : parse_list(v, prefill, 8, 1);
                else if (strcmp(a, "--batches") == 0)
                        n_batches = parse_list(v, batches, 8, 1);
                else if (strcmp(a, "--depth") == 0)
                        n_depths = parse_list(v, depths, 8, 0);
                else if (strcmp(a, "--gguf") == 0 && !spec_mode)
                        gguf = v;
                else if (strcmp(a, "--kv-tokens") == 0)
                        kv_tokens = atoi(v);
                else if (strcmp(a, "--kv-dtype") == 0) {
                        if (dse_kv_dtype_parse(v, &kv_dtype, NULL) < 0)
                                usage();
                } else if (kvtier_mode && strcmp(a, "--prefix") == 0 && atoi(v) >= 16)
                        kvtier.prefix_tokens = atoi(v) / 16 * 16;
                else if (kvtier_mode && strcmp(a, "--tier-dir") == 0)
                        kvtier.tier_dir = v;
                else if (kvtier_mode && strcmp(a, "--chat") == 0 && parse_list(v, chat, 3, 0) == 3) {
                        kvtier.chat_convs = chat[0];
                        kvtier.chat_turns = chat[1];
                        kvtier.chat_turn_tokens = chat[2];
                } else if (spec_mode && strcmp(a, "--serve-model") == 0)
                        spec.serve_model = v;
                else if (spec_mode && strcmp(a, "--draft-model") == 0)
                        spec.draft_model = v;
                else if (spec_mode && strcmp(a, "--held-out") == 0)
                        spec.held_out = v;
                else if (spec_mode && strcmp(a, "--passages") == 0 && atoi(v) > 0)
                        spec.n_passages = atoi(v);
                else if (spec_mode && strcmp(a, "--max-tokens") == 0 && atoi(v) > 0 && atoi(v) < 500)
                        spec.max_tokens = atoi(v);
                else if (spec_mode && strcmp(a, "--repeat") == 0 && atoi(v) > 0 && atoi(v) <= SPEC_BENCH_MAX_REPEAT)
                        spec.repeat = atoi(v);
                else
                        usage();
        }
        struct dse_hparams hp;
        if (!preset || !format || dsv_bench_preset_hparams(preset, &hp) < 0 || threads < 1 || decode_steps < 1 ||
            rounds < 1 || rounds > 64 || (n_thread_counts > 1 && (weights_mode || spec_mode || n_depths > 0)) ||
            n_prefill < 0 || n_batches < 1 || kv_tokens < 0 || n_depths < 0)
                usage();
        for (int i = 0; i < n_depths; i++)
                if (depths[i] < 0)
                        usage();
        setenv("DSV_KV", dse_kv_dtype_to_string(kv_dtype), 1); /* the prefill sessions' cache */
        for (int i = 0; i < n_batches; i++)
                if (batches[i] > 64)
                        usage();
        enum dse_dtype wdt;
        if (strcmp(format, "int4") == 0)
                wdt = DSE_DTYPE_Q4;
        else if (strcmp(format, "int8") == 0)
                wdt = DSE_DTYPE_Q8;
        else if (strcmp(format, "bf16") == 0)
                wdt = DSE_DTYPE_BF16;
        else
                usage();
        if (group <= 0)
                group = wdt == DSE_DTYPE_Q4 && !gguf ? 128 : 32; /* AWQ/GPTQ's g128; int8 and GGUF blocks g32 */
        if (layers > 0 && layers < hp.n_layers)
                hp.n_layers = layers;
        struct dse_diag d = {0};
        int r;
        if ((r = dse__hparams_validate(&hp, preset, &d)) < 0)
                die(r, "preset", &d);

        /* the cached model file */
        char dir[4096], path[4200], quant[DSE_FORMAT_QUANT_MAX];
        const char *cache = getenv("DSV_CACHE_DIR"), *home = getenv("HOME");
        if (cache && *cache)
                snprintf(dir, sizeof dir, "%s/bench", cache);
        else
                snprintf(dir, sizeof dir, "%s/.cache/dsvisor/bench", home ? home : "/tmp");
        if ((r = mkdir_p(dir)) < 0)
                die(r, dir, NULL);
        /* the format's major version in the name: a file of another version does not open */
        snprintf(path, sizeof path, "%s/%s-%s-g%d-L%d-v%d-f%d.dse", dir, preset, format,
                 wdt == DSE_DTYPE_BF16 ? 0 : group, hp.n_layers, GEN_VERSION, DSE_FORMAT_VERSION_MAJOR);
        snprintf(quant, sizeof quant, "%s/bench", format);
        if (gguf) {
                /* converted into the model cache as `dsvisor convert` does (Q8_0 / Q4_0
                 * blocks kept as native Q8 / Q4 group 32, bit-identical) */
                if ((r = dse_model_resolve(gguf, path, sizeof path, &d)) < 0)
                        die(r, gguf, &d);
        } else if (access(path, R_OK) != 0) {
                fprintf(stderr, "dsvisor-bench: generating %s\n", path);
                double t0 = bench_now_s();
                if ((r = generate(path, &hp, wdt, group, quant)) < 0)
                        die(r, "generate", NULL);
                fprintf(stderr, "dsvisor-bench: generated in %.1f s\n", bench_now_s() - t0);
        }

        struct dse_cpu_info cpu;
        if ((r = dse_cpu_detect(&cpu, &d)) < 0)
                die(r, "cpu", &d);
        struct dse_pool *pool;
        if ((r = dse_pool_new(threads, NULL, 0, &pool)) < 0)
                die(r, "pool", NULL);
        struct dse_model *m;
        struct dsv_hugepages_image img = {.fd = -1};
        double t0 = bench_now_s();
        if (wi == WEIGHTS_FILE)
                r = open_file_mapping(path, &m, &d);
        else
                r = open_image(path, wi, &img, &m, &d);
        if (r < 0)
                die(r, wi == WEIGHTS_HUGETLB ? "open (--hugepages)" : wi == WEIGHTS_SHMEM ? "open (--shmem)" : "open", &d);
        double load_s = bench_now_s() - t0, pmd_share = pmd_share_of(m);
        if (gguf)
                hp = *dse__model_hparams(m);
        if (kvtier_mode) {
                if (!kvtier.tier_dir)
                        kvtier.tier_dir = dir;
                r = kv_tier_bench_run(m, pool, preset, format, threads, json, &kvtier);
                dse_model_free(m);
                dsv_hugepages_image_done(&img);
                dse_pool_free(pool);
                return r < 0 ? 1 : 0;
        }
        if (spec_mode) {
                r = spec_bench_run(m, pool, preset, format, threads, json, &spec);
                dse_model_free(m);
                dsv_hugepages_image_done(&img);
                dse_pool_free(pool);
                return r < 0 ? 1 : 0;
        }
        if (n_thread_counts > 1) {
                struct probe pr = {0};
                uint64_t all_bytes;
                if ((r = probe_spread(m, &hp, (size_t)bytes_per_token(m, &hp, &all_bytes), &pr)) < 0)
                        die(r, "probe", NULL);
                struct thread_scaling_opts o = {.threads = thread_counts, .n_threads = n_thread_counts,
                                                .steps = decode_steps, .rounds = rounds, .kv_dtype = kv_dtype,
                                                .json = json};
                if (!json)
                        printf("preset %s, format %s (group %d), %d layers, kernels %s, weights in %s\n", preset,
                               format, wdt == DSE_DTYPE_BF16 ? 0 : group, hp.n_layers, dse_cpu_level_to_string(cpu.level),
                               weights_in_desc[wi]);
                r = thread_scaling_run(m, &o, scaling_probe_pass, &pr);
                probe_free(&pr);
                dse_model_free(m);
                dsv_hugepages_image_done(&img);
                dse_pool_free(pool);
                return r < 0 ? 1 : 0;
        }
        if (weights_mode) {
                bench_weights(m, &hp, pool, batches, n_batches, preset, format, threads, wi, json);
                dse_model_free(m);
                dsv_hugepages_image_done(&img);
                dse_pool_free(pool);
                return 0;
        }
        int probe_v0 = 0, probe_v1 = 0;
        double bw0 = probe_read_bw(pool, m, &hp, &probe_v0);
        uint64_t weight_bytes;
        double bpt = bytes_per_token(m, &hp, &weight_bytes);
        int vocab = dse_model_vocab_size(m);
        float *logits = malloc((size_t)vocab * sizeof(float));
        /* batch 1's steps alternate with probe passes over bytes/token of the mapping */
        struct paired_probe pair = {0};
        if ((r = probe_spread(m, &hp, (size_t)bpt, &pair.pr)) < 0)
                die(r, "probe", NULL);

        double pf[8], dec[8], step_min = 0, step_median = 0; /* steps at batch 1 */
        struct mem_sample mem = {0}; /* at the largest batch */
        /* the share of the requested CPUs the process got while measuring: well below 1
         * means other jobs took the cores and every tok/s here is low by about that */
        double wall0 = bench_now_s(), cpu0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        long majflt0 = major_faults();
        for (int i = 0; i < n_batches; i++) {
                struct mem_sample ms;
                dec[i] = measure_decode(m, pool, batches[i], decode_steps, kv_dtype, kv_tokens, logits,
                                        batches[i] == 1 && !unpaired ? &pair : NULL, &ms);
                if (batches[i] == 1) {
                        step_min = ms.step_min_s;
                        step_median = ms.step_median_s;
                }
                if (ms.kv_bytes + ms.scratch_bytes >= mem.kv_bytes + mem.scratch_bytes)
                        mem = ms;
                if (!json)
                        fprintf(stderr, "  decode batch %d: %.2f tok/s\n", batches[i], dec[i]);
        }
        for (int i = 0; i < n_prefill; i++) {
                pf[i] = measure_prefill(m, pool, prefill[i], logits);
                if (!json)
                        fprintf(stderr, "  prefill %d: %.2f tok/s\n", prefill[i], pf[i]);
        }
        struct depth_sample dep[8];
        for (int i = 0; i < n_depths; i++) {
                dep[i] = measure_depth(m, pool, depths[i], decode_steps, logits);
                if (!json)
                        fprintf(stderr, "  depth %d: prefill %.2f tok/s, decode %.2f tok/s\n", depths[i],
                                dep[i].prefill_tok_s[0], dep[i].decode_tok_s[0]);
        }
        double cpu_share = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / ((bench_now_s() - wall0) * threads);
        long majflt = major_faults() - majflt0;
        long rss = mem.rss;
        size_t kv_bytes = mem.kv_bytes;
        /* RSS against what must be resident (weights used in place, no repacked
         * copy) plus the KV cache and scratch the engine reports */
        double rss_ratio = (double)rss / (double)(weight_bytes + mem.kv_bytes + mem.scratch_bytes);
        double bw1 = probe_read_bw(pool, m, &hp, &probe_v1);
        double bw_best = bw0 > bw1 ? bw0 : bw1;
        /* the roofline's bandwidth: the passes paired with batch 1's steps, so that both
         * are means over the same seconds (the host's read bandwidth drifts by a third
         * within a run); without batch 1, the best single pass */
        double bw;
        int paired_v = paired_best(&pair, &bw);
        if (paired_v < 0)
                bw = bw_best;
        const char *probe_name = read_probe_name(paired_v >= 0 ? paired_v : bw0 > bw1 ? probe_v0 : probe_v1);
        double dec1 = 0;
        for (int i = 0; i < n_batches; i++)
                if (batches[i] == 1)
                        dec1 = dec[i];
        double roofline = bw > 0 ? dec1 * bpt / bw : 0;
        double roofline_best = bw_best > 0 ? dec1 * bpt / bw_best : 0;
        double mix[2];
        probe_mix(m, &pair.pr, threads, mix);

        if (json) {
                printf("{\"preset\":\"%s\",\"format\":\"%s\",\"threads\":%d,\"layers\":%d,\"group\":%d,"
                       "\"level\":\"%s\",\"hugepages\":%s,\"weights_in\":\"%s\",\"pmd_share\":%.3f,\"load_s\":%.3f,\"rss_bytes\":%ld,\"weight_bytes\":%llu,"
                       "\"kv_bytes\":%zu,\"scratch_bytes\":%zu,\"rss_ratio\":%.4f,\"kv_dtype\":\"%s\","
                       "\"kv_bytes_per_token\":%zu,\"kv_resident_bytes_per_token\":%.1f,\"bytes_per_token\":%.0f,"
                       "\"read_bw_bytes_per_s\":%.0f,\"read_bw_best_bytes_per_s\":%.0f,\"read_probe\":\"%s\","
                       "\"probe_mix\":{\"experts\":%.4f,\"unread\":%.4f},\"prefill_tok_s\":{",
                       preset, format, threads, hp.n_layers, wdt == DSE_DTYPE_BF16 ? 0 : group,
                       dse_cpu_level_to_string(cpu.level), wi == WEIGHTS_HUGETLB ? "true" : "false", weights_in_name[wi],
                       pmd_share, load_s, rss,
                       (unsigned long long)weight_bytes, kv_bytes, mem.scratch_bytes, rss_ratio,
                       dse_kv_dtype_to_string(kv_dtype), mem.kv_bytes_per_token, mem.kv_resident_per_token, bpt, bw,
                       bw_best,
                       probe_name, mix[0], mix[1]);
                for (int i = 0; i < n_prefill; i++)
                        printf("%s\"%d\":%.3f", i ? "," : "", prefill[i], pf[i]);
                printf("},\"decode_tok_s\":{");
                for (int i = 0; i < n_batches; i++)
                        printf("%s\"%d\":%.3f", i ? "," : "", batches[i], dec[i]);
                printf("},\"depth\":{");
                for (int i = 0; i < n_depths; i++)
                        printf("%s\"%d\":{\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"kv_read_bytes_per_token\":%.0f,"
                               "\"unsplit_prefill_tok_s\":%.3f,\"unsplit_decode_tok_s\":%.3f,\"depth0_decode_tok_s\":%.3f,"
                               "\"kv_pages\":\"%s\",\"anon_huge_bytes\":%ld}",
                               i ? "," : "", depths[i], dep[i].prefill_tok_s[0], dep[i].decode_tok_s[0],
                               dep[i].kv_read_bytes_per_token, dep[i].prefill_tok_s[1], dep[i].decode_tok_s[1],
                               dep[i].decode_tok_s[2], dse_kv_pages_to_string(dep[i].kv_pages),
                               dep[i].anon_huge_bytes);
                printf("},\"roofline\":%.4f,\"roofline_best\":%.4f,\"decode_step_ms_b1\":{\"min\":%.2f,"
                       "\"median\":%.2f},\"cpu_share\":%.3f,\"major_faults\":%ld}\n", roofline, roofline_best,
                       step_min * 1e3, step_median * 1e3, cpu_share, majflt);
        } else {
                printf("preset %s, format %s (group %d), %d layers, %d threads, kernels %s, weights in %s (%.0f%% "
                       "in 2 MiB pages)\n", preset, format, wdt == DSE_DTYPE_BF16 ? 0 : group, hp.n_layers, threads,
                       dse_cpu_level_to_string(cpu.level), weights_in_desc[wi],
                       pmd_share * 100);
                printf("load %.3f s, RSS %.1f MiB while decoding (weights %.1f MiB, KV %.1f MiB, scratch %.1f MiB: "
                       "%.3fx their sum)\n", load_s, rss / 1048576.0, weight_bytes / 1048576.0, kv_bytes / 1048576.0,
                       mem.scratch_bytes / 1048576.0, rss_ratio);
                printf("KV %s: %zu bytes/token as laid out, %.1f resident (RSS growth over the prefaulted pool)\n",
                       dse_kv_dtype_to_string(kv_dtype), mem.kv_bytes_per_token, mem.kv_resident_per_token);
                printf("bytes/token %.1f MB, read bandwidth %.2f GB/s (probe %s over the weights, %s; best "
                       "single pass before %.2f, after %.2f)\n", bpt / 1e6, bw / 1e9, probe_name,
                       paired_v >= 0 ? "passes beside the batch-1 steps" : "best single pass", bw0 / 1e9, bw1 / 1e9);
                for (int i = 0; i < n_prefill; i++)
                        printf("prefill %d: %.2f tok/s\n", prefill[i], pf[i]);
                for (int i = 0; i < n_batches; i++)
                        printf("decode batch %d: %.2f tok/s (%.2fx batch 1)\n", batches[i], dec[i],
                               dec1 > 0 ? dec[i] / dec1 : 0);
                for (int i = 0; i < n_depths; i++)
                        printf("depth %d: prefill %.2f tok/s, decode %.2f tok/s (%.2fx batch 1 at depth 0; %.2fx the "
                               "%.2f tok/s of depth 0 in the same turns), KV read %.2f MB per decoded token; without "
                               "the split: prefill %.2f, decode %.2f tok/s (split %.2fx, %.2fx); KV in %s pages, %.1f MiB "
                               "of anonymous 2 MiB pages after the prefills\n",
                               depths[i], dep[i].prefill_tok_s[0], dep[i].decode_tok_s[0],
                               dec1 > 0 ? dep[i].decode_tok_s[0] / dec1 : 0, dep[i].decode_tok_s[0] / dep[i].decode_tok_s[2],
                               dep[i].decode_tok_s[2], dep[i].kv_read_bytes_per_token / 1e6,
                               dep[i].prefill_tok_s[1], dep[i].decode_tok_s[1],
                               dep[i].prefill_tok_s[1] > 0 ? dep[i].prefill_tok_s[0] / dep[i].prefill_tok_s[1] : 0,
                               dep[i].decode_tok_s[0] / dep[i].decode_tok_s[1], dse_kv_pages_to_string(dep[i].kv_pages),
                               dep[i].anon_huge_bytes / 1048576.0);
                printf("roofline: %.3f of the read bandwidth at batch 1 (%.3f of the best single pass)\n", roofline,
                       roofline_best);
                if (step_median > 0 && bw_best > 0)
                        printf("batch-1 steps: fastest %.2f ms, median %.2f ms (%.3f and %.3f of the read "
                               "bandwidth's best single pass)\n", step_min * 1e3, step_median * 1e3, bpt / step_min / bw_best,
                               bpt / step_median / bw_best);
                printf("cpu share: %.2f of %d threads while measuring; %ld major page faults%s\n", cpu_share, threads,
                       majflt, majflt ? " (weights read back from disk: a reading of the host's memory)" : "");
        }
        free(logits);
        probe_free(&pair.pr);
        dse_model_free(m);
        dsv_hugepages_image_done(&img);
        dse_pool_free(pool);
        return 0;
}
