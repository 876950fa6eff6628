/* Public tokenizer entry points: load by kind, then dispatch through the ops table. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../internal.h"
#include "tokenizer.h"

static struct dse_tokenizer *tok_alloc(void) {
        struct dse_tokenizer *tok = calloc(1, sizeof *tok);
        if (tok) {
                tok->bos_id = -1;
                tok->eos_id = -1;
        }
        return tok;
}

/* The end of each loader: tok handed out when its init returned r >= 0, freed otherwise. */
static int hand_out(struct dse_tokenizer *tok, int r, struct dse_tokenizer **ret_tok) {
        if (r < 0) {
                dse_tokenizer_free(tok);
                return r;
        }
        *ret_tok = tok;
        return 0;
}

int dse_tokenizer_load_hf(const char *json, size_t json_len, const char *config_json, size_t config_len,
                          struct dse_tokenizer **ret_tok, struct dse_diag *reterr) {
        if (!json || !ret_tok)
                return -EINVAL;
        struct dse_tokenizer *tok = tok_alloc();
        if (!tok)
                return -ENOMEM;
        return hand_out(tok, dse__tok_bpe_init(tok, json, json_len, config_json, config_len, reterr), ret_tok);
}

int dse_tokenizer_load_spm(const void *data, size_t len, struct dse_tokenizer **ret_tok, struct dse_diag *reterr) {
        if (!data || !ret_tok)
                return -EINVAL;
        struct dse_tokenizer *tok = tok_alloc();
        if (!tok)
                return -ENOMEM;
        return hand_out(tok, dse__tok_spm_init(tok, data, len, reterr), ret_tok);
}

int dse_tokenizer_load_spm_hf(const void *model, size_t model_len, const char *config_json, size_t config_len,
                              struct dse_tokenizer **ret_tok, struct dse_diag *reterr) {
        if (!model || !config_json || !ret_tok)
                return -EINVAL;
        struct dse_tokenizer *tok = tok_alloc();
        if (!tok)
                return -ENOMEM;
        return hand_out(tok, dse__tok_spm_hf_init(tok, model, model_len, config_json, config_len, reterr), ret_tok);
}

/* Maps a whole file read-only (tokenizer.json files are 2-10 MB: mapping the page cache
 * is cheaper than copying it). Release with unmap_file(). An empty file maps to "". */
static int map_file(const char *path, char **ret_buf, size_t *ret_len, struct dse_diag *reterr) {
        int fd = dse__open_input(path, reterr);
        if (fd < 0)
                return fd;
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int r = -errno;
                close(fd);
                return dse__fail(reterr, r, "cannot stat '%s'", path);
        }
        if (st.st_size == 0) {
                close(fd);
                *ret_buf = (char *)"";
                *ret_len = 0;
                return 0;
        }
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        int r = p == MAP_FAILED ? -errno : 0;
        close(fd);
        if (r < 0)
                return dse__fail(reterr, r, "cannot map '%s': %s", path, strerror(-r));
        *ret_buf = p;
        *ret_len = (size_t)st.st_size;
        return 0;
}

static void unmap_file(char *buf, size_t len) {
        if (buf && len)
                munmap(buf, len);
}

int dse_tokenizer_load_file(const char *path, struct dse_tokenizer **ret_tok, struct dse_diag *reterr) {
        if (!path || !ret_tok)
                return -EINVAL;
        char *buf = NULL;
        size_t len = 0;
        int r = map_file(path, &buf, &len, reterr);
        if (r < 0)
                return r;
        /* tokenizer_config.json beside tokenizer.json or a .model supplies BOS/EOS, the
         * special tokens and the template. */
        char cfg_path[4096];
        const char *slash = strrchr(path, '/');
        int dir_len = slash ? (int)(slash - path) : 1;
        snprintf(cfg_path, sizeof cfg_path, "%.*s/tokenizer_config.json", dir_len, slash ? path : ".");
        char *cfg = NULL;
        size_t cfg_len = 0;
        if (access(cfg_path, R_OK) == 0 && (r = map_file(cfg_path, &cfg, &cfg_len, reterr)) < 0) {
                unmap_file(buf, len);
                return r;
        }
        size_t plen = strlen(path);
        if (plen >= 6 && strcmp(path + plen - 6, ".model") == 0)
                r = cfg ? dse_tokenizer_load_spm_hf(buf, len, cfg, cfg_len, ret_tok, reterr)
                        : dse_tokenizer_load_spm(buf, len, ret_tok, reterr);
        else
                r = dse_tokenizer_load_hf(buf, len, cfg, cfg_len, ret_tok, reterr);
        unmap_file(cfg, cfg_len);
        unmap_file(buf, len);
        return r;
}

void dse_tokenizer_free(struct dse_tokenizer *tok) {
        if (!tok)
                return;
        if (tok->ops && tok->ops->free_impl)
                tok->ops->free_impl(tok->impl);
        free(tok->chat_template);
        free(tok);
}

int dse_tokenizer_encode(const struct dse_tokenizer *tok, const char *text, size_t len, int add_special,
                         int32_t *ids, size_t max_ids) {
        if (!tok || (!text && len) || (!ids && max_ids))
                return -EINVAL;
        return tok->ops->encode(tok, text ? text : "", len, add_special, ids, max_ids);
}

int dse_tokenizer_decode(const struct dse_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out,
                         size_t max_len) {
        if (!tok || (!ids && n_ids) || (!out && max_len))
                return -EINVAL;
        for (size_t i = 0; i < n_ids; i++)
                if (ids[i] < 0 || ids[i] >= tok->n_vocab)
                        return -EINVAL;
        return tok->ops->decode(tok, ids, n_ids, out, max_len);
}

int dse_tokenizer_n_vocab(const struct dse_tokenizer *tok) {
        return tok->n_vocab;
}

int dse_tokenizer_bos(const struct dse_tokenizer *tok) {
        return tok->bos_id;
}

int dse_tokenizer_eos(const struct dse_tokenizer *tok) {
        return tok->eos_id;
}

const char *dse_tokenizer_piece(const struct dse_tokenizer *tok, int32_t id) {
        if (!tok || id < 0 || id >= tok->n_vocab)
                return NULL;
        return tok->ops->piece(tok, id);
}
