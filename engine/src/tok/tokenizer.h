/* Engine-internal tokenizer core: the public dse_tokenizer is one of these, with an ops
 * table per model family (tok_bpe.c for tokenizer.json, tok_spm.c for SentencePiece).
 * tokenizer.c implements the public dse_tokenizer_* functions on top of it. */
#ifndef DSE_TOKENIZER_H
#define DSE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"

struct dse_tokenizer;

struct dse_tokenizer_ops {
        /* Same contract as dse_tokenizer_encode / dse_tokenizer_decode. */
        int (*encode)(const struct dse_tokenizer *tok, const char *text, size_t len, int add_special,
                      int32_t *ids, size_t max_ids);
        int (*decode)(const struct dse_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out,
                      size_t max_len);
        const char *(*piece)(const struct dse_tokenizer *tok, int32_t id);
        void (*free_impl)(void *impl);
};

struct dse_tokenizer {
        const struct dse_tokenizer_ops *ops;
        void *impl;
        int32_t n_vocab;
        int32_t bos_id; /* -1 when none */
        int32_t eos_id; /* -1 when none */
        char *chat_template; /* from tokenizer_config.json, NULL when none (owned) */
};

/* Constructors used by dse_tokenizer_load_*: fill a zeroed *tok or return -errno. */
int dse__tok_bpe_init(struct dse_tokenizer *tok, const char *json, size_t json_len,
                      const char *config_json, size_t config_len, struct dse_diag *reterr);
int dse__tok_spm_init(struct dse_tokenizer *tok, const void *data, size_t len, struct dse_diag *reterr);
/* A SentencePiece model read the way transformers' LlamaTokenizer reads it with its
 * tokenizer_config.json (spm_hf.c). */
int dse__tok_spm_hf_init(struct dse_tokenizer *tok, const void *model, size_t model_len, const char *config_json,
                         size_t config_len, struct dse_diag *reterr);
/* Encodes with a tokenizer made by dse__tok_spm_init as if the model's normalizer had
 * add_dummy_prefix=false (what non-legacy LlamaTokenizer configures); no BOS/EOS. */
int dse__tok_spm_encode_bare(const struct dse_tokenizer *tok, const char *text, size_t len, int32_t *ids,
                             size_t max_ids);

#endif
