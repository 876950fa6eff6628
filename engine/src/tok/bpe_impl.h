/* bpe_impl.h — internals of the tokenizer.json (Hugging Face `tokenizers`) BPE tokenizer.
 *
 * The files split the work the way the HF pipeline does:
 *   tok_json.c   the JSON reader (tok_json.h), shared with the SentencePiece loader and
 *                the chat templates
 *   bpe_regex.c  onig-compatible split regexes on PCRE2 (pattern translation, find_iter)
 *   bpe_text.c   normalizers, pre-tokenizers and decoders
 *   bpe_model.c  vocabulary, merge ranks and the BPE merge loop (with byte fallback)
 *   tok_bpe.c    loading tokenizer.json + tokenizer_config.json, encode/decode driver
 *
 * Everything reachable from struct bpe is immutable after loading; per-call state lives
 * in struct bpe_ws, so encode/decode may run on many threads at once. */
#ifndef DSE_BPE_IMPL_H
#define DSE_BPE_IMPL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "dse.h"
#include "../utf8.h"
#include "tok_buf.h"
#include "tok_json.h"

/* Zeroed memory for the big load-time tables, 64-byte aligned; blocks of 4 MiB or more
 * are mapped 2 MiB-aligned and backed by transparent huge pages where the system allows.
 * dse__bpe_unmap takes the size given to dse__bpe_map. */
void *dse__bpe_map(size_t n);
void dse__bpe_unmap(void *p, size_t n);

/* ---- regexes ------------------------------------------------------------------------- */

struct bpe_regex {
        pcre2_code *code;
        int jit;
};

/* Compiles an onig (Ruby syntax) pattern as used by tokenizers' SysRegex: \s, \S, \w, \W
 * and \h are rewritten to the onig meaning, then PCRE2 compiles with UTF|UCP (+JIT). */
int dse__bpe_regex_compile(struct bpe_regex *re, const char *pattern, size_t len, struct dse_diag *reterr);
/* Same, for a literal string (the {"String": ...} pattern form). */
int dse__bpe_regex_compile_literal(struct bpe_regex *re, const char *lit, size_t len, struct dse_diag *reterr);
void dse__bpe_regex_done(struct bpe_regex *re);
/* Finds the next match at or after *pos in s[0..len); 1 found ([*ret_start, *ret_end)),
 * 0 none, -errno on a matcher failure. md is per-thread match data. */
int dse__bpe_regex_find(const struct bpe_regex *re, pcre2_match_data *md, const char *s, size_t len, size_t pos,
                   size_t *ret_start, size_t *ret_end);

/* ---- normalizers, pre-tokenizers, decoders -------------------------------------------- */

enum bpe_norm_type {
        BPE_NORM_NFC,
        BPE_NORM_NFD,
        BPE_NORM_NFKC,
        BPE_NORM_NFKD,
        BPE_NORM_LOWERCASE,
        BPE_NORM_PREPEND,
        BPE_NORM_REPLACE,
        BPE_NORM_STRIP,
        BPE_NORM_STRIP_ACCENTS,
};

struct bpe_norm {
        enum bpe_norm_type type;
        char *a;              /* Prepend: the prefix; Replace: literal pattern or NULL */
        size_t a_len;
        char *b;              /* Replace: content */
        size_t b_len;
        struct bpe_regex re;  /* Replace with a Regex pattern */
        int left, right;      /* Strip */
};

enum bpe_split_behavior {
        BPE_SPLIT_REMOVED,
        BPE_SPLIT_ISOLATED,
        BPE_SPLIT_MERGED_WITH_PREVIOUS,
        BPE_SPLIT_MERGED_WITH_NEXT,
        BPE_SPLIT_CONTIGUOUS,
};

enum bpe_pretok_type {
        BPE_PRETOK_SPLIT,     /* Split, Whitespace, WhitespaceSplit, Digits */
        BPE_PRETOK_BYTELEVEL,
        BPE_PRETOK_METASPACE,
};

enum bpe_prepend_scheme { BPE_PREPEND_ALWAYS, BPE_PREPEND_FIRST, BPE_PREPEND_NEVER };

struct bpe_pretok {
        enum bpe_pretok_type type;
        enum bpe_split_behavior behavior;
        int invert;
        struct bpe_regex re;           /* Split; ByteLevel with use_regex (the GPT-2 regex) */
        int add_prefix_space, use_regex; /* ByteLevel */
        char replacement[8];           /* Metaspace, UTF-8 */
        int replacement_len;
        int32_t replacement_cp;
        enum bpe_prepend_scheme prepend_scheme;
        int split;                     /* Metaspace */
};

enum bpe_dec_type {
        BPE_DEC_BYTELEVEL,
        BPE_DEC_REPLACE,
        BPE_DEC_BYTE_FALLBACK,
        BPE_DEC_FUSE,
        BPE_DEC_STRIP,
        BPE_DEC_METASPACE,
};

struct bpe_dec {
        enum bpe_dec_type type;
        char *a, *b;             /* Replace: literal pattern -> content */
        size_t a_len, b_len;
        struct bpe_regex re;     /* Replace with a Regex pattern */
        int32_t strip_cp;        /* Strip: content char */
        int start, stop;         /* Strip */
        int32_t replacement_cp;  /* Metaspace */
        enum bpe_prepend_scheme prepend_scheme;
};

/* ---- added tokens -------------------------------------------------------------------- */

struct bpe_added {
        int32_t id;
        char *content;
        size_t len;
        unsigned special : 1, lstrip : 1, rstrip : 1, single_word : 1, normalized : 1;
};

/* A byte trie over added-token contents; leftmost-longest matching like the
 * aho-corasick LeftmostLongest matcher tokenizers uses. Node 0 is the root. */
struct bpe_trie_node {
        int32_t first_child, next_sibling;
        int32_t token; /* index into bpe->added, -1 when no token ends here */
        uint8_t byte;
};
struct bpe_trie {
        struct bpe_trie_node *nodes;
        uint32_t n_nodes, cap;
        uint8_t first_byte[256];
};

/* ---- the model ----------------------------------------------------------------------- */

/* 32 bytes; the table is 64-byte aligned so a slot never straddles two cache lines (the
 * batched lookups prefetch one line per key), and zeroed means empty. */
struct bpe_vocab_slot {
        uint32_t tag;      /* high half of the key's hash */
        int32_t id1;       /* id + 1; 0: empty, so fresh zeroed pages need no fill pass */
        uint32_t off, len; /* key in bpe->strs */
        uint64_t head[2];  /* the key's first 16 bytes, zero-padded: most compares never touch strs */
};

struct bpe_merge_slot {
        uint64_t nkey;     /* ~((left id << 32) | right id); 0: empty (zeroed pages need no fill) */
        uint32_t rank;
        int32_t new_id;
};

struct bpe {
        /* vocabulary: model pieces + added-token contents, all NUL-terminated in strs */
        char *strs;
        size_t strs_len, strs_cap;
        uint32_t *piece_off;      /* (n_vocab) offset into strs, UINT32_MAX: no token */
        uint32_t *piece_len;      /* (n_vocab) */
        int32_t n_vocab;
        struct bpe_vocab_slot *vocab;  /* model vocabulary hash (not added tokens), dse__bpe_map'ed */
        uint32_t vocab_mask;
        struct bpe_merge_slot *merges; /* dse__bpe_map'ed */
        uint32_t merge_mask;

        /* model options */
        int ignore_merges, byte_fallback, fuse_unk;
        int32_t unk_id;              /* -1 when none */
        char *cont_prefix, *end_suffix; /* NULL or non-empty */
        int32_t byte_fallback_id[256];  /* <0xXX> ids, -1 when absent */
        int32_t byte_char_id[256];      /* ByteLevel: id of the single-char piece of byte b */

        /* pipeline */
        struct bpe_norm *norms;
        int n_norms;
        struct bpe_pretok *pretoks;  /* flattened Sequence */
        int n_pretoks;
        int raw_bytes_model;          /* last pre-tokenizer is ByteLevel: model sees raw bytes */
        struct bpe_dec *decs;
        int n_decs;
        int has_decoder;

        struct bpe_added *added;
        int n_added;
        struct bpe_trie trie_raw, trie_norm;

        /* add_special: ids before and after the sequence */
        int32_t *prefix_ids, *suffix_ids;
        int n_prefix, n_suffix;
};

/* Per-call scratch: grows as needed, freed by dse__bpe_ws_done. */
#define BPE_MAX_LEVELS 16
struct bpe_cache_slot {
        uint64_t hash;
        uint32_t key_off, key_len;
        uint32_t ids_off, n_ids; /* n_ids == 0: empty slot */
};

struct bpe_out {
        int32_t *ids;
        size_t max, n;
};

struct bpe_ws {
        const struct bpe *bpe;
        pcre2_match_data *md;
        struct tok_buf norm;                    /* normalized segment */
        struct tok_buf tmp;                     /* normalizer ping-pong */
        struct tok_buf pre[BPE_MAX_LEVELS];     /* transformed piece per pre-tokenizer level */
        struct tok_buf map[BPE_MAX_LEVELS];     /* byte-level mapped piece per level */
        struct tok_buf spans[BPE_MAX_LEVELS];   /* split spans per level */
        struct tok_buf word;                    /* model scratch */
        struct tok_buf heap;
        struct tok_buf cache_keys, cache_ids;
        struct bpe_cache_slot *cache;
        uint32_t cache_mask, cache_used;
        struct bpe_out *out;
};

void dse__bpe_ws_init(struct bpe_ws *ws, const struct bpe *bpe);
void dse__bpe_ws_done(struct bpe_ws *ws);

static inline int bpe_out_push(struct bpe_out *out, int32_t id) {
        if (out->n < out->max)
                out->ids[out->n] = id;
        out->n++;
        return out->n > (size_t)INT32_MAX ? -E2BIG : 0;
}

/* bpe_model.c */
int32_t dse__bpe_vocab_find(const struct bpe *bpe, const char *s, size_t len);
/* Both return how many keys were already present (their id is replaced, as tokenizers'
 * HashMap does). */
int dse__bpe_vocab_insert(struct bpe *bpe, const char *s, size_t len, int32_t id);
/* Batched forms for loading: hash and prefetch every slot first, then resolve, so the
 * cache misses of a batch overlap. */
void dse__bpe_vocab_find_batch(const struct bpe *bpe, const char *const *s, const uint32_t *len, size_t n,
                               int32_t *ret_ids);
size_t dse__bpe_vocab_insert_batch(struct bpe *bpe, const uint32_t *off, const uint32_t *len, const int32_t *ids,
                                   size_t n);
int dse__bpe_merge_insert(struct bpe *bpe, int32_t left, int32_t right, uint32_t rank, int32_t new_id);
void dse__bpe_merge_insert_batch(struct bpe *bpe, const int32_t *left, const int32_t *right, const uint32_t *rank,
                            const int32_t *new_id, size_t n);
/* Tokenizes one pre-token and pushes its ids. raw_bytes: s is the raw UTF-8 of a ByteLevel
 * piece (each byte is one symbol); otherwise s is the model's text. */
int dse__bpe_model_encode(struct bpe_ws *ws, const char *s, size_t len, int raw_bytes);
/* The ByteLevel alphabet: code point for byte b, and byte for code point cp (-1 if none). */
int32_t dse__bpe_byte_to_cp(uint8_t b);
int dse__bpe_cp_to_byte(int32_t cp);

/* bpe_text.c */
/* The longest text the normalizers may make of len bytes, and the decoders of pieces of
 * len bytes in all: 64 times as long plus 4 KiB. Real chains stay far below it (NFKC's
 * widest decomposition is 18 code points; Prepend, Replace and the decoders add or swap a
 * character or two), but a sequence of Replaces, each inserting more of what the next one
 * replaces, multiplies the text at every step and would exhaust memory: past the limit
 * normalizing and decoding fail with -E2BIG. */
size_t dse__bpe_growth_limit(size_t len);
/* -E2BIG past dse__bpe_growth_limit(len), -ENOMEM. */
int dse__bpe_normalize(struct bpe_ws *ws, const char *s, size_t len, const char **ret_s, size_t *ret_len);
int dse__bpe_normalize_string(const struct bpe *bpe, const char *s, size_t len, char **ret, size_t *ret_len);
/* Pre-tokenizes one segment (between added tokens) and runs the model on every piece. */
int dse__bpe_pretokenize(struct bpe_ws *ws, const char *s, size_t len, int at_start);
/* Runs the decoder chain on the pieces of ids and appends the text to out; -E2BIG past
 * dse__bpe_growth_limit of the pieces' length, -ENOMEM. */
int dse__bpe_decode(const struct bpe *bpe, const int32_t *ids, size_t n_ids, struct tok_buf *out);

#endif
