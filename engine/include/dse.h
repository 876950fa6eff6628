/* dse.h — the dsvisor inference engine's public API.
 *
 * Usage:
 *     struct dse_cpu_info cpu;
 *     int r = dse_cpu_detect(&cpu);              // honours DSV_CPU=scalar|avx2|avx512
 *     if (r < 0) { fprintf(stderr, "%s\n", strerror(-r)); ... }
 *
 *     struct dse_pool *pool;
 *     r = dse_pool_new(2, NULL, 0, &pool);      // calling thread becomes compute thread 0
 *     dse_pool_parallel_for(pool, n_rows, my_rows_fn, &ctx);
 *     dse_pool_free(pool);
 *
 * Conventions: functions return 0 (or a count >= 0) on success and a negative errno on
 * failure. Out-parameters are named ret_* and written only on success. Objects from
 * *_new are owned by the caller and released with *_free, which accepts NULL. The
 * engine never logs above debug level; install a callback with dse_log_set().
 */
#ifndef DSE_H
#define DSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- diagnostics ---------------------------------------------------------------- */

/* Optional detail for a failed call: a message a user can act on ("tensor 'x': offset
 * 0x... past end of file"). Pass NULL when the errno is enough. */
struct dse_diag {
        char msg[512];
};

enum dse_log_level {
        DSE_LOG_ERROR,
        DSE_LOG_WARN,
        DSE_LOG_INFO,
        DSE_LOG_DEBUG,
        DSE_LOG_LEVEL_COUNT
};

typedef void (*dse_log_fn)(enum dse_log_level level, const char *msg, void *user);

/* Installs the engine's log sink (NULL: drop everything). Not thread-safe with respect
 * to concurrent logging; call it once at start-up. */
void dse_log_set(dse_log_fn fn, void *user);

/* ---- CPU features and kernel level ---------------------------------------------- */

enum dse_cpu_level {
        DSE_CPU_SCALAR,  /* plain C reference kernels */
        DSE_CPU_AVX2,    /* AVX2 + FMA + F16C */
        DSE_CPU_AVX512,  /* AVX-512 F/BW/VL (+ VNNI, BF16 when present) */
        DSE_CPU_LEVEL_COUNT
};

const char *dse_cpu_level_to_string(enum dse_cpu_level level);

struct dse_cpu_info {
        /* Features the CPU has and the OS has enabled (XSAVE state checked with xgetbv). */
        unsigned avx2 : 1, fma : 1, f16c : 1;
        unsigned avx512f : 1, avx512bw : 1, avx512vl : 1, avx512vnni : 1, avx512bf16 : 1;
        unsigned amx_tile : 1, amx_int8 : 1, amx_bf16 : 1;
        enum dse_cpu_level detected;  /* best level this machine supports */
        enum dse_cpu_level level;     /* level in use: detected, capped by DSV_CPU */
        char vendor[13];
};

/* Detects CPU features once (cached) and resolves the level. DSV_CPU (scalar, avx2,
 * avx512) forces a level; an unknown value is -EINVAL and a level above what the CPU
 * supports is -EOPNOTSUPP, with the reason in reterr. */
int dse_cpu_detect(struct dse_cpu_info *ret_info, struct dse_diag *reterr);

/* Writes a one-paragraph human summary ("detected: avx2 (avx2 fma f16c), using: avx2")
 * into buf. Returns the length written (truncated to size-1). */
int dse_cpu_info_format(const struct dse_cpu_info *info, char *buf, size_t size);

/* ---- thread pool ---------------------------------------------------------------- */

/* A fixed set of compute threads. The thread that calls dse_pool_new() becomes compute
 * thread 0; only it may call dse_pool_run()/dse_pool_parallel_for(). Idle threads spin
 * for a short bounded time and then block on a futex, so an idle pool costs ~0% CPU
 * (important under SCHED_FIFO). */
struct dse_pool;

/* Work function for dse_pool_run: called once on every thread with its index. */
typedef void (*dse_pool_task_fn)(void *ctx, int ith, int nth);
/* Work function for dse_pool_parallel_for: rows [begin, end) of a static split. */
typedef void (*dse_pool_range_fn)(void *ctx, size_t begin, size_t end, int ith);

/* Creates a pool of n_threads (>= 1). If cpus is non-NULL, thread i is pinned to
 * cpus[i % n_cpus] (thread 0, the caller, included). Returns -EINVAL on bad arguments,
 * the pthread error on failure to start or pin. */
int dse_pool_new(int n_threads, const int *cpus, int n_cpus, struct dse_pool **ret_pool);
void dse_pool_free(struct dse_pool *pool);
int dse_pool_n_threads(const struct dse_pool *pool);

/* Copies the kernel thread ids (gettid) of the pool's threads, thread 0 first, so a
 * caller can set scheduling policy or attach perf counters. Returns the count written. */
int dse_pool_tids(const struct dse_pool *pool, int *tids, int max_tids);

/* Runs fn on all threads and returns when every thread has finished. */
void dse_pool_run(struct dse_pool *pool, dse_pool_task_fn fn, void *ctx);

/* Like dse_pool_run, but fn runs on the caller and on those threads that start it
 * before the caller has returned from it: a thread that is not running (its CPU taken
 * by another process) does not delay the call. fn must therefore complete the work on
 * any subset of the threads, the caller alone included, e.g. by claiming pieces from an
 * atomic counter; ith still names the running thread. Returns once no thread is inside
 * fn. No dse_pool_barrier inside fn. */
void dse_pool_run_shared(struct dse_pool *pool, dse_pool_task_fn fn, void *ctx);

/* Splits [0, n) into one contiguous static chunk per thread and runs fn on each
 * non-empty chunk; returns when all are done. */
void dse_pool_parallel_for(struct dse_pool *pool, size_t n, dse_pool_range_fn fn, void *ctx);

/* Inside a dse_pool_run task: waits until every thread of the pool has reached it. */
void dse_pool_barrier(struct dse_pool *pool);

/* Time accounting of the pool's calls, for benchmarks (dsvisor-bench model --threads
 * 1,2): off until dse_pool_timing_start. Every call (dse_pool_run, dse_pool_run_shared,
 * dse_pool_parallel_for, a 1-thread pool's inline runs included) is counted under the
 * label last given to dse_pool_label ("other" without one), at most
 * DSE_POOL_TIMING_PHASES labels (later ones count under the last). Sums over the calls: */
#define DSE_POOL_TIMING_PHASES 16
struct dse_pool_phase_timing {
        const char *label;
        uint64_t calls;
        uint64_t wall_ns;          /* the caller's wall time from start to join */
        uint64_t caller_cpu_ns;    /* the caller's CPU time over the call, its wait included */
        uint64_t task_wall_ns;     /* over the threads: wall time inside the task */
        uint64_t task_cpu_ns;      /* over the threads: CPU time inside the task */
        uint64_t task_cpu_max_ns;  /* per call, the CPU time of the thread that had the most */
        uint64_t threads_absent;   /* per call, the threads that did not run the task */
        uint64_t start_delay_ns;   /* over the threads but the caller that ran the task: from
                                    * the call's start to theirs (wake-up and scheduling) */
        uint64_t threads_woken;    /* of those, the ones that had blocked in a futex and were
                                    * woken for the call (their spin had run out) */
};
/* Clears the counts and starts counting. */
void dse_pool_timing_start(struct dse_pool *pool);
void dse_pool_timing_stop(struct dse_pool *pool);
/* Copies up to max phases' sums; returns how many there are. */
int dse_pool_timing_read(const struct dse_pool *pool, struct dse_pool_phase_timing *ret, int max);
/* The label the calls that follow are counted under, until the next one (NULL: "other").
 * label must outlive the counts (a string literal). Costs one store when timing is off. */
void dse_pool_label(struct dse_pool *pool, const char *label);

/* ---- model files (native format, HF import) ------------------------------------- */

/* A model in the native format (engine/FORMAT.md): hyper-parameters, embedded tokenizer
 * files and a table of tensors that are used in place from a read-only mapping.
 *
 *     char path[4096];
 *     struct dse_diag diag;
 *     struct dse_model *m;
 *     int r = dse_model_resolve("/models/DeepSeek-V2-Lite", path, sizeof path, &diag);
 *     if (r >= 0) r = dse_model_open(path, DSE_MODEL_POPULATE, &m, &diag);
 *     if (r < 0) { fprintf(stderr, "%s\n", diag.msg); ... }
 *     ...
 *     dse_model_free(m);
 *
 * A model is immutable once open: any number of threads may read it. The mapping lives
 * until dse_model_free(). */
struct dse_model;
struct dse_tokenizer; /* see "tokenizers" below */

#define DSE_MODEL_POPULATE 0x1u /* fault every page in at open (after validation) */

/* Maps a native model file read-only. Every offset, size, dtype, name and shape is
 * validated against the hyper-parameters and the architecture's expected tensor list
 * before a tensor is used; -EBADMSG for a corrupt file (the message names the file and
 * tensor), -EOPNOTSUPP for a newer major format version. Checksums are not read here
 * (see dse_model_verify). */
int dse_model_open(const char *path, unsigned flags, struct dse_model **ret_model, struct dse_diag *reterr);
/* The same from an open file descriptor (e.g. a shared memfd). The fd is not consumed:
 * the caller may close it after the call; the mapping stays valid. */
int dse_model_open_fd(int fd, unsigned flags, struct dse_model **ret_model, struct dse_diag *reterr);
void dse_model_free(struct dse_model *model);

/* Recomputes every tensor's CRC32C and compares it with the table (reads the whole
 * file). 0, or -EBADMSG naming the first tensor that does not match. */
int dse_model_verify(const struct dse_model *model, struct dse_diag *reterr);
/* Scans every value of the floating-point tensors (weights, norms, scales) for NaN and
 * Inf: each tensor holding any is logged as a warning (file, tensor, counts, first
 * index) and counted in *ret_n_bad. Reads the whole file. */
int dse_model_verify_values(const struct dse_model *model, size_t *ret_n_bad);

/* Bytes of the model's mapping the kernel maps with 2 MiB pages now (*ret_huge: all of
 * a hugetlb memfd, a file's FilePmdMapped or a shmem memfd's ShmemPmdMapped, proc(5),
 * from /proc/self/smaps) and the mapping's size (*ret_total). A file the page cache held
 * in small folios before it was opened stays in 4 KiB pages; dropping its cached pages
 * (e.g. `dd if=FILE iflag=nocache count=0`) lets the next open read it in 2 MiB ones. 0,
 * or -errno if /proc cannot be read. */
int dse_model_huge_bytes(const struct dse_model *model, uint64_t *ret_huge, uint64_t *ret_total);

/* One line: path, architecture, layers, tensors, size, quant format. Returns the length
 * snprintf would write. */
int dse_model_describe(const struct dse_model *model, char *buf, size_t size);
/* The quant format the file was converted with ("auto", "bf16", "int8", "int4", ...). */
const char *dse_model_quant_format(const struct dse_model *model);

/* Builds a tokenizer from the embedded "tokenizer.json" or "tokenizer.model", with
 * "tokenizer_config.json" when embedded too; -ENOENT when the model has none. */
int dse_model_tokenizer(const struct dse_model *model, struct dse_tokenizer **ret_tok, struct dse_diag *reterr);

/* Converts a Hugging Face folder (config.json, model.safetensors or shards + index,
 * tokenizer files) into a native file at out_path, streaming one tensor at a time. The
 * file appears only when complete (written to a temporary name, then renamed).
 * quant_format: NULL or "auto" (keep the checkpoint's formats: BF16/F16/F32, FP8 with
 * block scales, AWQ/GPTQ int4 repacked losslessly), "bf16", "int8", "int4" (group-wise
 * quantization of the projection weights; norms, router and embedding stay as they are),
 * "awq", "gptq" (as auto, but the checkpoint must be that format). DeepSeek-V3 MTP
 * modules (num_nextn_predict_layers, the layers from num_hidden_layers on) are kept, their
 * copies of the embedding and LM head dropped (FORMAT.md "MTP modules"). hf_dir may also be a GGUF file
 * (architectures llama and qwen2; engine/FORMAT.md "GGUF import"). */
int dse_model_convert_hf(const char *hf_dir, const char *out_path, const char *quant_format, struct dse_diag *reterr);

/* Turns a model argument into a native file path. A folder with config.json is
 * converted once (quant "auto") into the cache ($DSV_CACHE_DIR, else
 * $XDG_CACHE_HOME/dsvisor, else ~/.cache/dsvisor), keyed by its absolute path and the
 * sizes and mtimes of its files; later calls return the cached file. A GGUF file is
 * converted and cached the same way. A native file is returned as is. -ENAMETOOLONG when the path does not fit in size. */
int dse_model_resolve(const char *arg, char *ret_path, size_t size, struct dse_diag *reterr);

/* ---- sessions and the forward pass ----------------------------------------------- */
/* A session runs one sequence through a model: it holds the activations, the scratch
 * space and the KV cache, all sized at dse_session_new from the config and n_ctx (decode
 * never allocates). It borrows the model and the pool, which must outlive it. One
 * thread at a time per session; many sessions may share a model.
 *
 *     struct dse_session *s;
 *     r = dse_session_new(model, 256, pool, &s, &diag);
 *     r = dse_session_eval(s, prompt, n_prompt, NULL, last, &diag);  // last: (vocab)
 *     r = dse_session_eval(s, &next, 1, NULL, last, &diag);          // continues at n_past
 *     dse_session_free(s);
 *
 * The kernels are those of the level dse_cpu_detect() resolves (DSV_CPU=scalar forces
 * the reference kernels). Accumulation is float32 at every level; the activations that
 * meet Q8/Q4 weights are int8 by default (enum dse_activations), everything else float32.
 * DeepSeek MLA caches only the normalised latent and the rotated k_pe per token and
 * layer, and attends in the absorbed form. */
struct dse_model;
struct dse_session;

/* The model's vocabulary size (logits per position), or -EINVAL for NULL. */
int dse_model_vocab_size(const struct dse_model *model);
/* 0 when a and b tokenize alike, as a draft model and the model it drafts for must: the
 * same tokens (each id's piece), BOS and EOS; two models without a tokenizer, the same
 * vocabulary size. -EINVAL with reterr saying how they differ (a's side first), or the
 * error loading a tokenizer. */
int dse_model_tokenizers_match(const struct dse_model *a, const struct dse_model *b, struct dse_diag *reterr);

/* n_ctx: positions the KV cache holds (it may exceed max_position_embeddings; the
 * memory is allocated here). pool may be NULL (single-threaded). The model's weights were
 * bound for the forward pass when it was opened, once for all its sessions, which only
 * read them; a model that could not be bound fails here. -EINVAL, -EOPNOTSUPP
 * (architecture, dtype), -EBADMSG (a missing or misshapen tensor), -ENOMEM. */
int dse_session_new(const struct dse_model *model, int n_ctx, struct dse_pool *pool,
                    struct dse_session **ret_session, struct dse_diag *reterr);
void dse_session_free(struct dse_session *s);

/* Feeds n_tokens at positions n_past.. and advances n_past. logits (may be NULL)
 * receives [n_tokens, vocab] rows, last_logits (may be NULL) the last row. -E2BIG when
 * the tokens do not fit in n_ctx, -EINVAL for a token id outside the vocabulary (nothing
 * is evaluated then). */
int dse_session_eval(struct dse_session *s, const int32_t *tokens, size_t n_tokens, float *logits,
                     float *last_logits, struct dse_diag *reterr);

/* The precision of the activations a weight matrix multiplies. Only Q8/Q4 weights
 * have an int8 path; every other weight (F32/F16/BF16/F8) always takes float32.
 *   INT8: each token's activations are quantized to int8 per 32 columns (symmetric,
 *         llama.cpp's Q8_0 activations, which llama.cpp always uses for Q4_0/Q8_0) and
 *         multiplied in integers: the fast path. Logits move by the activation rounding
 *         (the fixtures' second tolerance row: mean abs <= 0.05, top-1 >= 0.9).
 *   F32:  float32 activations: exact up to float32 rounding (the strict row, 1e-3).
 * A token's logits do not depend on the other tokens of a call, bitwise, except that
 * with int8 activations the AMX kernels (used for 8 or more tokens per call where the CPU
 * has them) and the AVX-512 VNNI 8-token layout (5 or more tokens per call; DSV_NO_AMX=1
 * turns both off) sum the exact block products in another float order: then they differ within float rounding (measured <= 2.4e-6 on logits of
 * standard deviation ~3), and a near-tied MoE routing can flip. The default
 * is INT8, overridden by DSV_ACT=f32|int8 in the environment at *_new (for the CLI and
 * the worker); the setters below override both. */
enum dse_activations {
        DSE_ACTIVATIONS_INT8,
        DSE_ACTIVATIONS_F32,
        DSE_ACTIVATIONS_COUNT
};
const char *dse_activations_to_string(enum dse_activations a);
/* -EINVAL for NULL or an unknown value. Takes effect at the next eval. */
int dse_session_set_activations(struct dse_session *s, enum dse_activations a);

/* The element type of a KV cache (a session's private one or the paged pool), fixed when
 * the cache is made. The attention kernels read the stored type directly, converting
 * inside their dot products.
 *   F32:  exact; the engine's default, so the fixtures' strict row runs on it.
 *   BF16: each element rounded to bfloat16 (nearest even): half the bytes of F32; the
 *         serving default (dsvisor-worker --kv-dtype, dsvisor start).
 *   FP8:  OCP e4m3 (the FP8 weights' element) times a float32 scale per group,
 *   INT8: symmetric int8 times a float32 scale per group: about a quarter of F32's bytes.
 *         A group is one head's K or V (llama, qwen2) or gcd(kv_lora_rank,
 *         qk_rope_head_dim) elements of an MLA latent row, so the latent c and k_pe never
 *         share a scale; scale = max|x| / 448 (FP8) or / 127 (INT8).
 * DSV_KV=f32|bf16|fp8|int8 in the environment chooses the type at dse_session_new and
 * dse_kv_cache_new; dse_kv_cache_new_typed takes it explicitly. */
enum dse_kv_dtype {
        DSE_KV_F32,
        DSE_KV_BF16,
        DSE_KV_FP8,
        DSE_KV_INT8,
        DSE_KV_DTYPE_COUNT
};
const char *dse_kv_dtype_to_string(enum dse_kv_dtype t);
/* "f32", "bf16", "fp8" or "int8"; -EINVAL (with a message naming the choices) otherwise. */
int dse_kv_dtype_parse(const char *s, enum dse_kv_dtype *ret_dtype, struct dse_diag *reterr);

/* The pages under a KV cache (a session's private one or the paged pool), chosen when the
 * cache is made: decode at depth reads every cached row per token, hundreds of MiB in
 * long runs, which 4 KiB pages cut into as many TLB entries.
 *   SMALL: 4 KiB pages.
 *   HUGE:  2 MiB pages: the memory is 2 MiB aligned and marked MADV_HUGEPAGE, which
 *          transparent huge pages honour in their "always" and "madvise" modes; the
 *          kernel falls back to 4 KiB pages wherever it finds no free 2 MiB page.
 * DSV_KV_PAGES=huge|small in the environment chooses (default huge); a host whose
 * transparent huge pages are off or absent gets SMALL whatever is asked. */
enum dse_kv_pages {
        DSE_KV_PAGES_SMALL,
        DSE_KV_PAGES_HUGE,
        DSE_KV_PAGES_COUNT
};
const char *dse_kv_pages_to_string(enum dse_kv_pages kind);

/* Bytes the session allocated at setup for activations, scratch and its private KV
 * cache (the arena and the cache's mapping; nothing grows later). */
size_t dse_session_arena_bytes(const struct dse_session *s);

/* Forgets the sequence (n_past = 0). */
void dse_session_reset(struct dse_session *s);
int dse_session_n_past(const struct dse_session *s);
int dse_session_n_ctx(const struct dse_session *s);

/* KV cache bytes per token over all layers for the session's KV type: in F32 llama/qwen2
 * 2 * n_layers * n_kv_heads * head_dim * 4, DeepSeek MLA n_layers * (kv_lora_rank +
 * qk_rope_head_dim) * 4; BF16 half of that, FP8 and INT8 a byte per element plus a
 * float32 scale per group, each layer's row rounded up to 4 bytes. */
size_t dse_session_kv_bytes_per_token(const struct dse_session *s);
/* The pages under the session's private KV cache (enum dse_kv_pages). */
enum dse_kv_pages dse_session_kv_pages(const struct dse_session *s);

/* ---- tokenizers -------------------------------------------------------------------- */

/* A tokenizer loaded from a Hugging Face tokenizer.json (+ tokenizer_config.json for
 * BOS/EOS and the chat template) or a SentencePiece .model. Immutable after loading:
 * encode/decode may be called from many threads at once. */
struct dse_tokenizer;

/* Loads tokenizer.json from memory; config_json (tokenizer_config.json) may be NULL.
 * Buffers are copied as needed and may be freed after the call. BPE models only:
 * byte-level (DeepSeek-V3, Qwen2.5, Llama 3) and SentencePiece-style with byte fallback
 * (Mistral, Llama 2), with tokenizers' normalizers (Sequence, NFC, NFD, NFKC, NFKD,
 * Lowercase, Prepend, Replace, Strip, StripAccents), pre-tokenizers (Sequence, Split,
 * ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits) and decoders. With
 * add_special, BOS/EOS follow tokenizer_config.json's add_bos_token/add_eos_token when
 * it sets them (as transformers' Llama tokenizers do), else the post-processor
 * (TemplateProcessing). -EBADMSG for malformed input, -EOPNOTSUPP (naming the type) for
 * an unknown model, normalizer, pre-tokenizer, decoder or post-processor type. */
int dse_tokenizer_load_hf(const char *json, size_t json_len, const char *config_json,
                          size_t config_len, struct dse_tokenizer **ret_tok, struct dse_diag *reterr);
/* Loads a SentencePiece ModelProto (.model file contents; copied, may be freed after the
 * call): BPE, Unigram, WORD or CHAR with the model's normalizer (precompiled_charsmap,
 * dummy prefix, whitespace rules), user-defined symbols and byte fallback, encoding and
 * decoding as SentencePiece 0.1.97 does. BOS/EOS are trainer_spec's bos_id/eos_id.
 * -EBADMSG for a malformed or truncated file, -EOPNOTSUPP for an unknown model_type. */
int dse_tokenizer_load_spm(const void *data, size_t len, struct dse_tokenizer **ret_tok,
                           struct dse_diag *reterr);
/* Loads a SentencePiece model with its Hugging Face tokenizer_config.json, as
 * transformers' LlamaTokenizer does: chat_template, bos/eos/unk/pad_token,
 * additional_special_tokens and added_tokens_decoder are cut out of the text (leftmost,
 * longest match) and become their ids; each text segment between them is encoded by
 * the model, with its dummy-prefix "▁" (legacy=true, the default) or with one "▁" only
 * at the start of the text (legacy=false). add_special adds BOS per add_bos_token
 * (default true) and EOS per add_eos_token (default false). Buffers are copied.
 * -EBADMSG for a malformed file or a special token that is no piece of the model. */
int dse_tokenizer_load_spm_hf(const void *model, size_t model_len, const char *config_json, size_t config_len,
                              struct dse_tokenizer **ret_tok, struct dse_diag *reterr);
/* Loads from a path: "*.model" as SentencePiece, otherwise tokenizer.json. A sibling
 * tokenizer_config.json is read when present (for a .model: dse_tokenizer_load_spm_hf). */
int dse_tokenizer_load_file(const char *path, struct dse_tokenizer **ret_tok, struct dse_diag *reterr);
void dse_tokenizer_free(struct dse_tokenizer *tok);

/* Encodes UTF-8 text (-EILSEQ if invalid). add_special: add BOS/EOS the way the
 * model's own loader does. Writes up to max_ids ids and returns the total count, which
 * may exceed max_ids (call again with a bigger buffer). -E2BIG when a tokenizer.json's
 * normalizers would make a piece of the text over 64 times longer (plus 4 KiB): a
 * sequence of Replaces that multiplies text. */
int dse_tokenizer_encode(const struct dse_tokenizer *tok, const char *text, size_t len,
                         int add_special, int32_t *ids, size_t max_ids);
/* Decodes ids to UTF-8 (special tokens kept). Writes up to max_len bytes (no NUL) and
 * returns the total length, which may exceed max_len. -EINVAL for an id out of range;
 * -E2BIG when a tokenizer.json's decoders would make the text over 64 times longer than
 * the tokens' pieces (plus 4 KiB). */
int dse_tokenizer_decode(const struct dse_tokenizer *tok, const int32_t *ids, size_t n_ids,
                         char *out, size_t max_len);
int dse_tokenizer_n_vocab(const struct dse_tokenizer *tok);
int dse_tokenizer_bos(const struct dse_tokenizer *tok); /* -1 when none */
int dse_tokenizer_eos(const struct dse_tokenizer *tok); /* -1 when none */
/* The token's text as stored in the vocabulary (e.g. "\u0120the", "<0x0A>"), or NULL. */
const char *dse_tokenizer_piece(const struct dse_tokenizer *tok, int32_t id);

/* ---- chat templates and streaming text ------------------------------------------ */

/* A chat template (the Jinja `chat_template` of tokenizer_config.json), parsed once and
 * rendered per request the way transformers' apply_chat_template renders it (Jinja2
 * with trim_blocks, lstrip_blocks, loop controls, tojson as json.dumps with
 * ensure_ascii=False). Immutable after parsing: render may run on many threads at once.
 *
 *     struct dse_chat_template *t;
 *     char *prompt;
 *     r = dse_chat_template_new(dse_tokenizer_chat_template(tok), &t, &diag);
 *     r = dse_chat_template_render(t, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL, 1,
 *                                  "<s>", "</s>", &prompt, &diag);   // r = strlen(prompt)
 *     free(prompt);
 *     dse_chat_template_free(t);
 *
 * The interpreter covers the Jinja subset chat templates use (if/for/set/macro,
 * namespace(), loop.*, break/continue, filters, tests, string and dict methods,
 * slicing). A construct outside it is -EOPNOTSUPP at parse or render time, never a
 * silently different prompt; the message says to pass a simpler template with
 * `--chat-template FILE`. -EINVAL: a syntax error, or the template rejected the
 * conversation (raise_exception, an undefined value used); -EILSEQ: invalid UTF-8;
 * -E2BIG: the render exceeded its step or memory bounds. */
struct dse_chat_template;

int dse_chat_template_new(const char *src, struct dse_chat_template **ret_tmpl, struct dse_diag *reterr);
void dse_chat_template_free(struct dse_chat_template *tmpl);
/* The same from a template file (at most 1 MiB): -ENOENT/-EACCES/-EFBIG for the file, or
 * dse_chat_template_new's error; the message names the file. */
int dse_chat_template_load(const char *path, struct dse_chat_template **ret_tmpl, struct dse_diag *reterr);

/* messages_json: a JSON array of {"role", "content", ...} objects (any JSON values the
 * template reads: tool_calls, ...); tools_json: a JSON array or NULL (the template sees
 * `tools` = none). bos_token/eos_token may be NULL (left undefined). On success
 * *ret_text is a malloc'd NUL-terminated string the caller frees; returns its length. */
int dse_chat_template_render(const struct dse_chat_template *tmpl, const char *messages_json,
                             const char *tools_json, int add_generation_prompt, const char *bos_token,
                             const char *eos_token, char **ret_text, struct dse_diag *reterr);

/* The chat template from the tokenizer's tokenizer_config.json, or NULL when none. */
const char *dse_tokenizer_chat_template(const struct dse_tokenizer *tok);

/* Streaming detokenizer: fed one generated id at a time, it returns the text that is
 * final so far. It never splits a UTF-8 character (byte-fallback pieces such as <0xE4>
 * and byte-level pieces ending mid-character are held until the character completes;
 * bytes that can never complete become U+FFFD, as Hugging Face's decode does) and never
 * lets a stop string through: text that could still begin a stop string is held back
 * until it cannot, and when a stop string completes (possibly across several tokens)
 * the text before it is returned with *ret_stopped = 1 and the rest is dropped.
 *
 *     struct dse_detok *d;
 *     const char *stops[] = {"\nUser:"};
 *     r = dse_detok_new(tok, stops, 1, &d, &diag);
 *     for (each sampled id) {
 *             const char *text;
 *             int stopped;
 *             r = dse_detok_push(d, id, &text, &stopped);   // r = bytes in text
 *             fwrite(text, 1, r, stdout);
 *             if (stopped) break;
 *     }
 *     r = dse_detok_flush(d, &text);                        // what was held back
 *     dse_detok_free(d);
 *
 * The tokenizer must outlive the detokenizer; the stop strings are copied. The returned
 * text belongs to the detokenizer and stays valid until its next call. One thread at a
 * time per detokenizer. */
struct dse_detok;

int dse_detok_new(const struct dse_tokenizer *tok, const char *const *stop_strings, size_t n_stop,
                  struct dse_detok **ret_detok, struct dse_diag *reterr);
void dse_detok_free(struct dse_detok *d);
/* Returns the length of *ret_text (0 when everything is held back), or -errno (-EINVAL
 * for an id outside the vocabulary). After a stop, further pushes return 0. */
int dse_detok_push(struct dse_detok *d, int32_t id, const char **ret_text, int *ret_stopped);
/* Ends the stream: returns the held-back text (incomplete UTF-8 as U+FFFD; nothing after
 * a stop). The detokenizer then starts a new stream. */
int dse_detok_flush(struct dse_detok *d, const char **ret_text);

/* ---- structured output: JSON Schema grammars, matchers, token masks ------------- */

/* A grammar compiled from a JSON Schema (engine/src/grammar/README.md), a regex, GBNF
 * text or a choice list (below); all share the matcher and masks. The JSON Schema output it
 * describes is compact JSON (no whitespace between tokens, unless the root asks for it
 * with "x-guidance": {"whitespace_flexible": true}), object properties in the
 * order of `properties`, strings in their canonical escaped form (only `"`, `\` and
 * control characters escaped, as \" \\ \b \f \n \r \t or \u00xx; everything else raw
 * UTF-8). Immutable once compiled: many matchers on many threads may share it.
 *
 *     struct dse_grammar *g;
 *     struct dse_grammar_vocab *v;
 *     struct dse_grammar_matcher *m;
 *     r = dse_grammar_compile_json_schema(schema, strlen(schema), &g, &diag);
 *     r = dse_grammar_vocab_new(tok, &v, &diag);
 *     r = dse_grammar_matcher_new(g, &m, &diag);
 *     uint64_t *mask = calloc(dse_grammar_vocab_mask_words(v), sizeof *mask);
 *     for (;;) {
 *             r = dse_grammar_matcher_fill_mask(m, v, mask);  // bit id set: id allowed
 *             id = sample among the allowed ids;
 *             r = dse_grammar_matcher_accept_token(m, v, id);
 *             if (id == dse_tokenizer_eos(tok)) break;        // allowed only when complete
 *     }
 *
 * The compiler enforces every keyword it accepts exactly; a keyword it cannot enforce
 * is -EOPNOTSUPP naming the keyword and its JSON pointer ("'pattern' at
 * /properties/zip: not supported"), never a silently weaker grammar. -EINVAL for a
 * malformed schema (naming the pointer), -EBADMSG when the text is not JSON, -E2BIG
 * when the grammar outgrows its size limit, -ELOOP for a $ref cycle that never
 * consumes input. */
struct dse_grammar;
int dse_grammar_compile_json_schema(const char *schema_json, size_t len, struct dse_grammar **ret_grammar,
                                    struct dse_diag *reterr);
/* A grammar from an ECMA-262 regular expression (UTF-8, len bytes) that the whole
 * output must match, per code point: literals and escapes (\t \n \v \f \r \0 \xHH
 * \uHHHH \u{H...} \cX, identity escapes of punctuation), classes [...] and [^...] with
 * ranges and \d \w \s \D \W \S (ECMA's ASCII \d \w, ECMA white space for \s), `.`
 * (anything but \n \r U+2028 U+2029), groups (capturing, (?:...), (?<name>...)),
 * alternation, ? * + {n} {n,} {n,m} (lazy forms alike), ^ and $ at the start and end
 * (no-ops: the match is whole anyway). -EOPNOTSUPP naming the construct and its offset
 * for backreferences, lookahead/lookbehind, \b \B, \p{...}, anchors elsewhere and an
 * unbounded repetition of something that can match nothing; -EINVAL for a malformed
 * regex. */
int dse_grammar_compile_regex(const char *re, size_t len, struct dse_grammar **ret_grammar, struct dse_diag *reterr);
/* A grammar from GBNF text (llama.cpp's `grammar` format): rules `name ::= ...`, the
 * whole output matching `root`; literals "...", classes [...] / [^...], `.`, groups,
 * alternation, ? * + {m} {m,} {m,n}, # comments (engine/src/grammar/README.md). -EINVAL
 * naming line and column for a syntax error, a rule used but never defined (named) or
 * a missing root; -ELOOP for left recursion. */
int dse_grammar_compile_gbnf(const char *text, size_t len, struct dse_grammar **ret_grammar, struct dse_diag *reterr);
/* A grammar whose output is exactly one of the n strings (raw text, not JSON).
 * -EINVAL for an empty list or a NULL string. */
int dse_grammar_compile_choice(const char *const *choices, size_t n, struct dse_grammar **ret_grammar,
                               struct dse_diag *reterr);
/* A grammar composed of parts, described as JSON (engine/src/grammar/README.md,
 * "Composed grammars"); a part is one of
 *     {"text": "..."}             exactly these bytes
 *     {"special": "<tool_call>"}  exactly this one token of tok, by its id: masks admit it
 *                                 only where the grammar expects it, and its text spelled
 *                                 in other tokens is refused
 *     {"json_schema": SCHEMA}     a value valid against the schema, compact JSON as with
 *                                 dse_grammar_compile_json_schema ("#" is SCHEMA itself)
 *     {"sequence": [PART, ...]}   the parts one after the other
 *     {"one_of": [PART, ...]}     exactly one of the parts
 *     {"repeat": PART, "min": m, "max": n, "separator": PART}
 *                                 m (default 1) to n (absent: no limit) parts, the
 *                                 separator (optional) between two of them
 * Use it with a vocabulary of tok. -EBADMSG for text that is not JSON, -EINVAL naming the
 * part ("sequence[2].one_of[0]") for a malformed part or a special text that is not one
 * token of tok (or is its EOS, which masks keep for the end), a JSON Schema's errors
 * prefixed by its part. */
int dse_grammar_compile_composed(const char *spec_json, size_t len, const struct dse_tokenizer *tok,
                                 struct dse_grammar **ret_grammar, struct dse_diag *reterr);
void dse_grammar_free(struct dse_grammar *grammar);

/* A tokenizer's vocabulary as a token trie (the prefix tree of every token's bytes as
 * they appear in decoded text), built once per tokenizer. Tokens that decode to no bytes
 * (control tokens) are never allowed by a mask, EOS excepted (allowed exactly when the
 * output is complete). Immutable: shareable across threads. The tokenizer must outlive
 * it. */
struct dse_grammar_vocab;
int dse_grammar_vocab_new(const struct dse_tokenizer *tok, struct dse_grammar_vocab **ret_vocab,
                          struct dse_diag *reterr);
void dse_grammar_vocab_free(struct dse_grammar_vocab *vocab);
/* Words of a mask: (n_vocab + 63) / 64. */
size_t dse_grammar_vocab_mask_words(const struct dse_grammar_vocab *vocab);
/* The bytes token id adds to the output in the middle of a text (a SentencePiece "▁"
 * is a space there), as the masks see them; *ret_len = 0 for a token that adds none.
 * NULL for an id out of range. Valid as long as the vocab. */
const uint8_t *dse_grammar_vocab_token_bytes(const struct dse_grammar_vocab *vocab, int32_t id, size_t *ret_len);

/* The incremental state of one output against a grammar: one per sequence, used by one
 * thread at a time. The grammar must outlive it. */
struct dse_grammar_matcher;
int dse_grammar_matcher_new(const struct dse_grammar *grammar, struct dse_grammar_matcher **ret_matcher,
                            struct dse_diag *reterr);
void dse_grammar_matcher_free(struct dse_grammar_matcher *m);
/* Feeds output bytes: 0, or -EINVAL when the grammar cannot continue with them (the
 * state is then unchanged), -ENOMEM, -E2BIG when the grammar is so ambiguous that the
 * state would exceed its size limit. */
int dse_grammar_matcher_advance(struct dse_grammar_matcher *m, const void *bytes, size_t n);
/* 1 when the bytes fed so far are a whole output of the grammar, else 0. */
int dse_grammar_matcher_is_accepting(const struct dse_grammar_matcher *m);
/* Gives dst the state (and grammar) of src, to look ahead without changing src; dst's
 * memory is reused. 0 or -ENOMEM (dst is then unchanged). */
int dse_grammar_matcher_copy(struct dse_grammar_matcher *dst, const struct dse_grammar_matcher *src);
/* Writes the mask of the tokens allowed next (bit id of mask[id / 64], mask_words(vocab)
 * words) by walking the token trie against the state: a byte the grammar refuses skips
 * the whole subtree under it. The part of a mask that does not depend on the frames
 * below the stacks' tops is cached in the grammar (thread-safe), so a state shape met
 * before costs a copy plus the context-dependent tokens. Returns the number of allowed
 * tokens (0: nothing can follow, not even EOS), or -ENOMEM / -E2BIG. Does not change
 * the state. */
int dse_grammar_matcher_fill_mask(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                                  uint64_t *mask);
/* Feeds one token's bytes (EOS: accepted only when the state is accepting, after which
 * nothing more is). 0, or -EINVAL when the mask would not allow the token (state
 * unchanged), -ENOMEM, -E2BIG. */
int dse_grammar_matcher_accept_token(struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                                     int32_t id);

/* ---- sampler ----------------------------------------------------------------------- */

/* Picks the next token from a row of logits. The filters run in the order transformers
 * applies its logits warpers: temperature, top-k, top-p, min-p; then one draw from the
 * renormalised distribution with a seeded xoshiro256** generator (the same seed and
 * logits give the same ids on every machine). temperature <= 0 is greedy: the argmax,
 * lowest id on ties, and no random draw.
 *
 *     struct dse_sampler_params sp;
 *     dse_sampler_params_default(&sp);
 *     sp.temperature = 0.7f; sp.top_p = 0.9f; sp.seed = 42;
 *     r = dse_sampler_new(&sp, n_vocab, &smp, &diag);
 *     int id = dse_sampler_sample(smp, logits);           // id >= 0 or -errno
 *
 * All scratch memory is allocated by dse_sampler_new; sampling never allocates. One
 * thread at a time per sampler. */
struct dse_sampler_params {
        float temperature; /* <= 0: greedy */
        int top_k;         /* keep the k most likely tokens; <= 0: off */
        float top_p;       /* keep the smallest set whose probability reaches top_p; >= 1: off */
        float min_p;       /* drop tokens below min_p * p(most likely); <= 0: off */
        uint64_t seed;
};
struct dse_sampler;

/* temperature 1, top_k 0, top_p 1, min_p 0, seed 0: plain sampling from the softmax. */
void dse_sampler_params_default(struct dse_sampler_params *params);
/* -EINVAL for n_vocab < 1 or a parameter out of range (top_p <= 0, min_p > 1, a NaN,
 * an infinite temperature), with the reason in reterr. */
int dse_sampler_new(const struct dse_sampler_params *params, int n_vocab, struct dse_sampler **ret_sampler,
                    struct dse_diag *reterr);
void dse_sampler_free(struct dse_sampler *smp);
/* logits: (n_vocab). Returns the chosen id, or -EINVAL when every logit is NaN or -inf. */
int dse_sampler_sample(struct dse_sampler *smp, const float *logits);
/* The distribution dse_sampler_sample draws from, spread over the vocabulary: probs
 * (n_vocab) gets each token's probability after temperature, top-k, top-p and min-p (0
 * for a token the filters drop; temperature <= 0: 1 at the argmax). Speculative
 * sampling needs it whole, to weigh a draft against the target. Draws nothing; returns
 * how many tokens are possible, or -EINVAL when every logit is NaN or -inf. */
int dse_sampler_probs(struct dse_sampler *smp, const float *logits, float *probs);
/* A uniform number in [0, 1) that depends only on the sampler's seed, counter and lane
 * (a counter-based stream: a hash of the three, never the generator dse_sampler_sample
 * advances), so a caller can give each output position and purpose its own draw,
 * whatever happened before it. */
double dse_sampler_uniform_at(const struct dse_sampler *smp, uint64_t counter, uint32_t lane);

/* ---- n-gram (prompt-lookup) drafting for speculative decoding ---------------------- */
/* Proposes what follows tokens[0..n_tokens) by looking it up in itself: for n from
 * n_max down to n_min, the last n tokens are searched for earlier in the sequence, most
 * recent occurrence first and no further back than `window` tokens (0: the whole
 * sequence); the first match's following tokens (up to max_draft, never past the end)
 * are copied to draft. Returns how many (0: no n-gram recurs), or -EINVAL for bad
 * bounds (1 <= n_min <= n_max, max_draft >= 0, window >= 0). Needs no model: any
 * architecture can verify the drafts (dse_batch_seq.n_draft). */
int dse_ngram_draft(const int32_t *tokens, int32_t n_tokens, int n_min, int n_max, int32_t window, int max_draft,
                    int32_t *draft);

/* ---- batched sessions: paged KV cache, prefix sharing, multi-sequence steps ------ */
/* For serving many sequences at once (the worker's continuous batching). The KV cache
 * is a pool of fixed-size blocks (block_tokens positions x every layer's K/V row, or
 * the MLA latent + k_pe row), sized from a byte budget at dse_kv_cache_new; a sequence
 * holds a table of blocks and grows block by block. Full blocks are hashed by their
 * token ids chained with every earlier token (vLLM's prefix caching), so a sequence
 * that starts with a cached prefix (a common system prompt) borrows those blocks by
 * reference count instead of recomputing them. Blocks nobody references keep their
 * contents and hash until the pool reuses them (oldest first).
 *
 *     struct dse_kv_cache *kv;
 *     struct dse_batch *b;
 *     r = dse_kv_cache_new(model, 64 << 20, 16, 32, 4096, &kv, &diag);
 *     r = dse_batch_new(model, kv, pool, &b, &diag);
 *     int seq = dse_kv_seq_open(kv);                        // -EBUSY: no free slot
 *     int n = dse_kv_seq_attach_prefix(kv, seq, prompt, n_prompt);  // cached tokens
 *     struct dse_batch_seq one = {seq, prompt + n, n_prompt - n, last};
 *     r = dse_batch_step(b, &one, 1, &diag);               // -ENOSPC: out of blocks
 *     dse_kv_seq_close(kv, seq);
 *     dse_batch_free(b);
 *     dse_kv_cache_free(kv);
 *
 * dse_batch_step evaluates several sequences in one call, each with one or more new
 * tokens (decode tokens and prefill chunks mixed); a sequence's logits do not depend on
 * which other sequences share the step, nor on how its tokens were chunked (but see
 * enum dse_activations on AMX rounding). All memory
 * is allocated at *_new; steps never allocate. The model, pool and cache must outlive
 * the batch; one thread at a time per cache and batch. */
struct dse_kv_cache;
struct dse_batch;

struct dse_kv_stats {
        int32_t block_tokens;
        int32_t n_blocks;          /* the pool */
        int32_t n_used;            /* referenced by at least one sequence */
        int32_t n_cached;          /* unreferenced but still holding a hashed prefix */
        int32_t n_seqs;            /* open sequences */
        int64_t prefix_query_tokens; /* tokens offered to dse_kv_seq_attach_prefix */
        int64_t prefix_hit_tokens;   /* of which found in the cache (either tier) */
        /* the disk tier (dse_kv_cache_attach_disk); all 0 without one */
        int32_t disk_state;           /* enum dse_kv_disk_state */
        int64_t disk_bytes_used, disk_bytes_capacity;
        int64_t disk_blocks_written;  /* spills written to the file */
        int64_t disk_blocks_read;     /* blocks brought back into the pool */
        int64_t disk_blocks_dropped;  /* spills dropped: the writer's queue was full */
        int64_t disk_blocks_corrupt;  /* slots that failed their checksum (never served) */
        int64_t disk_hit_tokens;      /* of prefix_hit_tokens, read from the disk tier */
};

enum dse_kv_disk_state {
        DSE_KV_DISK_NONE,   /* no disk tier */
        DSE_KV_DISK_ON,
        DSE_KV_DISK_FAILED, /* turned off by an I/O error (logged); the RAM pool goes on */
};

/* Test hooks of the disk tier: the next slot write fails with EIO; the process exits
 * (status 0) right after a slot write, before the index is published (a worker killed
 * mid-write); the writer, or the reader, holds still until the fault is set to
 * another value (queued spills and reads wait; closing the cache releases them);
 * preallocating the file fails with ENOSPC (a disk full at start: set in
 * dse_kv_disk_config.fault). */
enum dse_kv_disk_fault {
        DSE_KV_DISK_FAULT_NONE,
        DSE_KV_DISK_FAULT_WRITE_EIO,
        DSE_KV_DISK_FAULT_EXIT_BEFORE_INDEX,
        DSE_KV_DISK_FAULT_HOLD_WRITES,
        DSE_KV_DISK_FAULT_HOLD_READS,
        DSE_KV_DISK_FAULT_PREALLOC_ENOSPC,
        DSE_KV_DISK_FAULT_COUNT
};

/* mem_bytes: the pool's budget (the block count is mem_bytes / block bytes);
 * block_tokens >= 1; max_seqs: sequence
 * slots; n_ctx: longest sequence; the element type from DSV_KV (enum dse_kv_dtype), else
 * F32. -EINVAL (also a bad DSV_KV), -EOPNOTSUPP (architecture), -ENOSPC (the budget
 * holds no block), -ENOMEM. */
int dse_kv_cache_new(const struct dse_model *model, size_t mem_bytes, int block_tokens, int max_seqs, int n_ctx,
                     struct dse_kv_cache **ret_kv, struct dse_diag *reterr);
/* As dse_kv_cache_new, with the element type given instead of taken from DSV_KV. */
int dse_kv_cache_new_typed(const struct dse_model *model, enum dse_kv_dtype dtype, size_t mem_bytes,
                           int block_tokens, int max_seqs, int n_ctx, struct dse_kv_cache **ret_kv,
                           struct dse_diag *reterr);
void dse_kv_cache_free(struct dse_kv_cache *kv);
enum dse_kv_dtype dse_kv_cache_dtype(const struct dse_kv_cache *kv);
/* The pages under the pool (enum dse_kv_pages). */
enum dse_kv_pages dse_kv_cache_pages(const struct dse_kv_cache *kv);
/* Bytes one position takes over all layers, a DeepSeek-V3 model's MTP modules included
 * (dse_kv_cache_block_bytes / block_tokens). */
size_t dse_kv_cache_bytes_per_token(const struct dse_kv_cache *kv);
void dse_kv_cache_stats(const struct dse_kv_cache *kv, struct dse_kv_stats *ret_stats);
/* Bytes one block occupies (all layers). */
size_t dse_kv_cache_block_bytes(const struct dse_kv_cache *kv);
/* Blocks that can be handed out now (free plus cached-unreferenced). */
int dse_kv_cache_n_available(const struct dse_kv_cache *kv);
/* Makes the whole pool resident now (the pool's pages are otherwise faulted in as blocks
 * are first written, and prefix caching keeps old blocks, so a serving process's memory
 * would creep up to the pool size over its first minutes). Leaves every block's contents
 * as they are, so it may run on another thread while the cache is in use. -ENOMEM when
 * memory runs out, -EOPNOTSUPP before Linux 5.14. */
int dse_kv_cache_prefault(struct dse_kv_cache *kv, struct dse_diag *reterr);

/* A second tier below the RAM pool: full prefix blocks the pool evicts are copied to a
 * queue and written by a thread of the cache's own into path, a file preallocated to
 * `bytes` (slots of one block each, least recently used reused first), with its index
 * in path + ".index" (written to a temporary file, synced and renamed). A prefix lookup
 * (dse_kv_seq_attach_prefix) that misses the pool reads the following blocks back from
 * the file before evaluation starts, on a reader thread of the tier's
 * (dse_kv_seq_attach_prefix_start: without waiting for it). Every slot carries a CRC32C and its block's key and
 * token ids, checked on every read: a torn or damaged slot is dropped, never served. The
 * file's header names the model (its header checksum), the tokenizer, the KV type and
 * the block layout: a cache of the same identity reuses the file after a restart,
 * anything else (or a truncated or damaged file) clears it with a log line. An I/O error
 * later turns the tier off with a warning (stats: DSE_KV_DISK_FAILED); the pool goes on.
 * A spill never waits: a full queue drops it (disk_blocks_dropped). */
struct dse_kv_disk_config {
        const char *path;
        uint64_t bytes;   /* the file's size; at least one block's slot */
        int queue_blocks; /* spills waiting for the writer; 0: 32 */
        enum dse_kv_disk_fault fault; /* a test hook in force from the start; 0: none */
};
/* -EINVAL (arguments, or a tier already attached), -ENOSPC (the file cannot be
 * preallocated, or bytes hold no slot), -EBUSY (another process uses the file), or the
 * file system's error; the cache is unchanged on failure. */
int dse_kv_cache_attach_disk(struct dse_kv_cache *kv, const struct dse_model *model,
                             const struct dse_kv_disk_config *cfg, struct dse_diag *reterr);
/* Waits until the disk tier has written every queued spill and published its index (a
 * no-op without a tier). */
void dse_kv_cache_disk_flush(struct dse_kv_cache *kv);
/* For a graceful stop: queues the full prefix blocks no sequence holds, up to as many
 * as the tier holds, most recently used kept, to the tier (those it already holds are
 * only marked used), waiting for room in the writer's queue for at most timeout_ms in
 * all, then waits for the writer to write what is queued (at most one queue's worth,
 * dse_kv_disk_config.queue_blocks) and publish the index. Returns the blocks now on
 * the tier or queued, 0 without a tier; -EINVAL. */
int dse_kv_cache_disk_write_back(struct dse_kv_cache *kv, int timeout_ms);
void dse_kv_cache_disk_set_fault(struct dse_kv_cache *kv, enum dse_kv_disk_fault fault);

/* As dse_kv_seq_attach_prefix_loading, without waiting for the disk: the blocks found
 * only on the disk tier are read back by the tier's reader thread, into pool blocks the
 * sequence holds meanwhile (not in the prefix table, so nothing evicts or shares them
 * half-written). Returns the tokens attached from the RAM pool, or -EINVAL; the
 * sequence must not be stepped while dse_kv_seq_load_poll says -EINPROGRESS (its steps
 * fail with -EBUSY). Closing it cancels its reads (waiting for the one block being read,
 * if any). */
int dse_kv_seq_attach_prefix_start(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens,
                                   int max_loads);
/* -EINPROGRESS while the sequence's blocks are being read back; then the tokens it
 * holds: the RAM prefix and the blocks that came back and verified, up to the first
 * that did not (a torn or damaged slot, an I/O error), whose positions are left to
 * prefill. -EINVAL when seq is not open. */
int dse_kv_seq_load_poll(struct dse_kv_cache *kv, int seq);
/* Waits until a read back from the disk tier finishes or timeout_ms passes; returns at
 * once when none is in flight. */
void dse_kv_cache_load_wait(struct dse_kv_cache *kv, int timeout_ms);

/* Opens an empty sequence: its id (>= 0), or -EBUSY when every slot is taken. */
int dse_kv_seq_open(struct dse_kv_cache *kv);
/* Drops the sequence's block references; its full blocks stay cached for reuse. */
void dse_kv_seq_close(struct dse_kv_cache *kv, int seq);
/* Positions the sequence holds, or -EINVAL. */
int dse_kv_seq_len(const struct dse_kv_cache *kv, int seq);
/* On an empty sequence: attaches the longest run of cached full blocks that match the
 * start of tokens, leaving at least one token to evaluate (its logits are needed).
 * Returns the number of tokens now held (a multiple of block_tokens), or -EINVAL. */
int dse_kv_seq_attach_prefix(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens);
/* As dse_kv_seq_attach_prefix, taking at most max_loads pool blocks for blocks read back
 * from the disk tier (the caller's free blocks; dse_kv_seq_attach_prefix: all). */
int dse_kv_seq_attach_prefix_loading(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens,
                                     int max_loads);
/* Blocks the sequence must newly take to hold n_tokens more positions. */
int dse_kv_seq_blocks_needed(const struct dse_kv_cache *kv, int seq, size_t n_tokens);
/* After a dse_batch_verify that carried n_draft draft tokens of seq: keeps
 * the first n_accepted of them (tokens: their ids, the drafts' first n_accepted) as if
 * they had been evaluated normally, and rolls the rest back: the sequence's length
 * stops after the accepted ones, blocks holding only rejected positions go back to the
 * pool, and no block containing a rejected position is ever entered in the prefix table
 * (its rows are overwritten by the next step). n_accepted 0 drops every draft.
 * -EINVAL when the sequence is not open or n_accepted exceeds the drafts of its last
 * step. */
int dse_kv_seq_accept(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_accepted);
/* Cuts the sequence back to the longest common prefix of its ids and tokens (n_tokens
 * of them), for a draft model's cache whose drafts were rejected: the positions past it
 * are dropped and their blocks go back to the pool; a block the prefix table shares
 * with another sequence is never written again, so when the cut falls inside one the
 * sequence keeps only the blocks before it. Returns the positions kept (the caller
 * evaluates tokens from there), or -EINVAL. Not for a batch with MTP enabled (its
 * module's saved hidden states would not follow). */
int dse_kv_seq_rewind(struct dse_kv_cache *kv, int seq, const int32_t *tokens, size_t n_tokens);

struct dse_batch_seq {
        int32_t seq;           /* from dse_kv_seq_open */
        const int32_t *tokens; /* (n_tokens) new tokens at positions len.. */
        int32_t n_tokens;      /* >= 1 */
        float *logits;         /* (vocab) the last token's logits, or NULL (but see dse_batch_verify) */
};

/* The batch's activations and scratch are sized for the cache's n_ctx. */
int dse_batch_new(const struct dse_model *model, struct dse_kv_cache *kv, struct dse_pool *pool,
                  struct dse_batch **ret_batch, struct dse_diag *reterr);
void dse_batch_free(struct dse_batch *b);
/* As dse_session_set_activations, for the batch's steps. */
int dse_batch_set_activations(struct dse_batch *b, enum dse_activations a);
/* Bytes of activations and scratch the batch allocated at dse_batch_new (the KV cache
 * is the cache's own). */
size_t dse_batch_arena_bytes(const struct dse_batch *b);
/* Checks every sequence first (open, distinct, token ids in the vocabulary: -EINVAL;
 * over n_ctx: -E2BIG), then takes the blocks all of them need (-ENOSPC when the pool is
 * short: nothing is taken or evaluated), then evaluates. */
int dse_batch_step(struct dse_batch *b, const struct dse_batch_seq *seqs, size_t n_seqs, struct dse_diag *reterr);
/* dse_batch_step for speculative decoding's verification: the last n_draft[i] tokens
 * of seqs[i] (0 <= n_draft[i] < n_tokens; n_draft NULL: none) are drafts. Their KV rows
 * are written and seqs[i].logits receives n_draft[i] + 1 rows (vocab each): the logits
 * of the last n_draft[i] + 1 tokens, in order, each the same a one-token step would
 * give. The sequence grows by n_tokens - n_draft[i] only; dse_kv_seq_accept then keeps
 * the accepted drafts and rolls back the rest. */
int dse_batch_verify(struct dse_batch *b, const struct dse_batch_seq *seqs, const int32_t *n_draft, size_t n_seqs,
                     struct dse_diag *reterr);

/* ---- MTP drafting (DeepSeek-V3 multi-token prediction) ------------------------------ */
/* A DeepSeek-V3 checkpoint's MTP module (num_nextn_predict_layers) predicts the token
 * after next from the main model's hidden state and the next token; dsvisor uses it to
 * draft tokens for dse_batch_verify. Its KV rows are one more layer of the paged cache
 * (dse_kv_cache_new sizes blocks for it), so they follow the sequence's blocks, prefix
 * sharing and rollback. */

/* Drafts one MTP call may propose per sequence, and the most drafts a sequence may
 * verify per step on a batch with MTP enabled. */
#define DSE_MTP_MAX_DRAFT 16

/* MTP modules the model holds (0: none), or -EINVAL for NULL. */
int dse_model_n_mtp_layers(const struct dse_model *model);

/* Logits of the model's first MTP module over tokens evaluated from the session's
 * position n_past on, as DeepSeek's reference computes them: row i (n_tokens - 1 rows of
 * vocab) from the main model's hidden state at n_past + i (after the final norm) and
 * tokens[i + 1], predicting tokens[i + 2]. Evaluates tokens like dse_session_eval (the
 * session advances by n_tokens). The module attends to its own rows of the earlier
 * positions, so the logits are the reference's from a fresh or reset session (n_past
 * 0); rows it never wrote (positions evaluated without it, and the last one of an
 * earlier call, whose next token was not known) read as zero. -EOPNOTSUPP without a
 * module, -EINVAL, -E2BIG. */
int dse_session_eval_mtp(struct dse_session *s, const int32_t *tokens, size_t n_tokens, float *mtp_logits,
                         struct dse_diag *reterr);

/* From now on the batch's steps also run the MTP module over every position whose next
 * token is final and keep the hidden states of the others (at most DSE_MTP_MAX_DRAFT
 * drafts per sequence and step: -EINVAL beyond). A sequence's one-token steps let its
 * module rows wait, until it drafts or a KV block would fill with rows waiting, and
 * then write them in one pass, the rows the eager order would write; so plain decoding
 * with MTP enabled costs about what it costs without. Takes a few KV blocks for the
 * drafts' own rows (-ENOSPC). -EOPNOTSUPP for a model without an MTP module. */
int dse_batch_enable_mtp(struct dse_batch *b, struct dse_diag *reterr);
/* Up to max_draft greedy MTP drafts (max_draft <= DSE_MTP_MAX_DRAFT) to follow
 * sequence seq, whose last evaluated position's token was just sampled as next_token
 * (the token the next step evaluates first). The first comes from the main model's
 * hidden state at the sequence's last position, each further one from the module's own
 * hidden state and the draft before it. Returns how many (0 when the sequence has no
 * evaluated position since its last draft or opening), or -EINVAL (MTP not enabled,
 * sequence not open, bad bounds or token). */
int dse_batch_mtp_draft(struct dse_batch *b, int seq, int32_t next_token, int max_draft, int32_t *draft,
                        struct dse_diag *reterr);

#ifdef __cplusplus
}
#endif
#endif /* DSE_H */
