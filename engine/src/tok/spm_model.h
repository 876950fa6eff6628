/* SentencePiece internals: the ModelProto reader (spm_proto.c), a byte trie for piece
 * lookup (spm_trie.c) and the normalizer (spm_norm.c). tok_spm.c builds the tokenizer
 * (BPE and Unigram encoders, decoder) on top of them.
 *
 * The semantics follow google/sentencepiece 0.1.9x (src/normalizer.cc, bpe_model.cc,
 * unigram_model.cc, model_interface.cc, sentencepiece_processor.cc); the code is our own.
 * Nothing here allocates after loading except the per-call scratch of encode/decode. */
#ifndef DSE_SPM_MODEL_H
#define DSE_SPM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dse.h"
#include "../utf8.h"
#include "tok_buf.h"

/* ---- ModelProto (sentencepiece_model.proto) --------------------------------------- */

enum spm_piece_type {  /* ModelProto.SentencePiece.Type */
        SPM_PIECE_NORMAL = 1,
        SPM_PIECE_UNKNOWN = 2,
        SPM_PIECE_CONTROL = 3,
        SPM_PIECE_USER_DEFINED = 4,
        SPM_PIECE_UNUSED = 5,
        SPM_PIECE_BYTE = 6,
};

enum spm_model_type {  /* TrainerSpec.ModelType */
        SPM_MODEL_UNIGRAM = 1,
        SPM_MODEL_BPE = 2,
        SPM_MODEL_WORD = 3,
        SPM_MODEL_CHAR = 4,
};

/* A string field: a view into the buffer given to dse__spm_proto_parse. */
struct spm_str {
        const char *ptr;
        size_t len;
};

struct spm_proto_piece {
        struct spm_str piece;
        float score;
        int type; /* enum spm_piece_type; NORMAL when absent */
};

struct spm_proto_normalizer {  /* NormalizerSpec */
        bool present;
        struct spm_str name;
        struct spm_str precompiled_charsmap;
        bool add_dummy_prefix;         /* default true */
        bool remove_extra_whitespaces; /* default true */
        bool escape_whitespaces;       /* default true */
};

struct spm_proto {
        struct spm_proto_piece *pieces; /* (n_pieces), owned */
        int32_t n_pieces;
        /* TrainerSpec: the fields that change encoding or decoding, with proto defaults. */
        int model_type;                  /* default UNIGRAM */
        bool byte_fallback;              /* default false */
        bool treat_whitespace_as_suffix; /* default false */
        bool split_digits;               /* training only; kept for callers' information */
        int32_t unk_id, bos_id, eos_id, pad_id; /* defaults 0, 1, 2, -1 */
        bool has_unk_surface;
        struct spm_str unk_surface;      /* default " \u2047 " */
        struct spm_proto_normalizer normalizer;   /* ModelProto field 3 */
        struct spm_proto_normalizer denormalizer; /* ModelProto field 5 */
};

/* Parses a serialized ModelProto. String views point into data, which must outlive
 * *ret. Unknown fields are skipped by wire type; a truncated field, a varint over 10
 * bytes, a length past the end, a known field with the wrong wire type or a group is
 * -EBADMSG with the offset in reterr. Writes *ret_proto only on success. */
int dse__spm_proto_parse(const void *data, size_t len, struct spm_proto *ret_proto, struct dse_diag *reterr);
void dse__spm_proto_done(struct spm_proto *p);

/* ---- byte trie ----------------------------------------------------------------- */

/* Maps byte strings to int32 values (piece ids). Node 0 is the root; edges live in one
 * open-addressing hash table keyed by (parent, byte). Read-only after building, so
 * lookups may run from many threads. */
struct spm_trie {
        int32_t *value;   /* (n_nodes) value stored at the node, -1 when none */
        uint32_t n_nodes, cap_nodes;
        uint64_t *edge_key;   /* (edge_cap) (parent << 8 | byte) + 1; 0 = empty slot */
        uint32_t *edge_child; /* (edge_cap) */
        size_t edge_cap, n_edges;
};

int dse__spm_trie_init(struct spm_trie *t);
void dse__spm_trie_done(struct spm_trie *t);
/* Inserts key -> value. Returns 0, -EEXIST if the key already has a value (kept), or
 * -ENOMEM. */
int dse__spm_trie_insert(struct spm_trie *t, const char *key, size_t len, int32_t value);
/* The child of node along byte b, or 0 when there is none (the root is no child). */
uint32_t dse__spm_trie_step(const struct spm_trie *t, uint32_t node, uint8_t b);
/* The value stored for key, or -1. */
int32_t dse__spm_trie_get(const struct spm_trie *t, const char *key, size_t len);
/* Length of the longest key that is a prefix of s[0..len), 0 when none. */
size_t dse__spm_trie_longest_prefix(const struct spm_trie *t, const char *s, size_t len);

/* ---- normalizer (normalizer.cc) ------------------------------------------------- */

struct spm_normalizer {
        const uint8_t *trie_units;   /* darts-clone double array, little-endian uint32 units */
        size_t n_units;
        const char *replacements;    /* NUL-separated normalized strings */
        size_t replacements_len;
        bool add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
        bool treat_whitespace_as_suffix;
        const struct spm_trie *user_defined; /* matched verbatim, never normalized; may be NULL */
};

/* Sets up a normalizer over spec's precompiled_charsmap (kept by reference). -EBADMSG
 * when the charsmap blob is malformed. */
int dse__spm_normalizer_init(struct spm_normalizer *n, const struct spm_proto_normalizer *spec,
                             bool treat_whitespace_as_suffix, const struct spm_trie *user_defined,
                             struct dse_diag *reterr);
/* Appends the normalized form of in[0..len) to out. -ENOMEM, or -EBADMSG when a charsmap
 * rule points outside its string blob. */
int dse__spm_normalize(const struct spm_normalizer *n, const char *in, size_t len, struct tok_buf *out);

/* ---- UTF-8 (util.cc semantics) -------------------------------------------------- */

/* Length of the character starting at s judged by its first byte alone (1..4). */
static inline size_t spm_one_char_len(const char *s) {
        static const uint8_t len_by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        return len_by_high_nibble[(uint8_t)s[0] >> 4];
}


#endif
