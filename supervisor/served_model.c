/* served_model.c — which model `dsvisor start` serves: the --model argument resolved to
 * its native file (an HF folder is converted once into the cache), or the bundled
 * default; its size, the key that names its fd-store entries, and its served id. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dse.h"
#include "sup.h"

static int find_default_model(const char *exe_dir, char *buf, size_t size) {
        const char *env = getenv("DSV_DATA_DIR");
        char cand[4][PATH_MAX];
        int n = 0;
        if (env && *env)
                snprintf(cand[n++], PATH_MAX, "%s/models/default", env);
        snprintf(cand[n++], PATH_MAX, "%.3900s/../share/dsvisor/models/default", exe_dir);
        snprintf(cand[n++], PATH_MAX, "%.3900s/../../models/default", exe_dir);
#ifdef DSV_SOURCE_DIR
        snprintf(cand[n++], PATH_MAX, "%s/models/default", DSV_SOURCE_DIR);
#endif
        for (int i = 0; i < n; i++) {
                struct stat st;
                char real[PATH_MAX];
                if (stat(cand[i], &st) == 0 && realpath(cand[i], real)) {
                        snprintf(buf, size, "%s", real);
                        return 0;
                }
        }
        return -ENOENT;
}

static void derive_model_id(const char *arg, char *buf, size_t size) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", arg);
        size_t len = strlen(tmp);
        while (len > 1 && tmp[len - 1] == '/')
                tmp[--len] = 0;
        const char *base = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
        snprintf(buf, size, "%s", base);
        char *dot = strrchr(buf, '.');
        if (dot && strcmp(dot, ".dse") == 0)
                *dot = 0;
}

int sup_model_resolve(const struct sup_config *cfg, const char *exe_dir, struct sup_model *ret) {
        char arg[PATH_MAX];
        struct sup_model m;
        memset(&m, 0, sizeof m);
        if (cfg->model[0]) {
                snprintf(arg, sizeof arg, "%s", cfg->model);
        } else if (find_default_model(exe_dir, arg, sizeof arg) < 0) {
                sup_log(3, "No --model given and the bundled default model (models/default) was not found "
                           "beside the binary, in $DSV_DATA_DIR or in the source tree");
                return -ENOENT;
        }
        struct dse_diag diag = {{0}};
        int r = dse_model_resolve(arg, m.path, sizeof m.path, &diag);
        if (r < 0) {
                sup_log(3, "Failed to resolve model '%s': %s", arg, diag.msg[0] ? diag.msg : strerror(-r));
                return r;
        }
        struct stat st;
        if (stat(m.path, &st) < 0) {
                r = -errno;
                sup_log(3, "Failed to stat model '%s': %s", m.path, strerror(-r));
                return r;
        }
        m.bytes = (uint64_t)st.st_size;
        snprintf(m.key, sizeof m.key, "%" PRIu64 "-%lld", m.bytes, (long long)st.st_mtime);
        if (cfg->served_model_names[0]) /* the first name */
                snprintf(m.id, sizeof m.id, "%.*s", (int)strcspn(cfg->served_model_names, "\n"),
                         cfg->served_model_names);
        else if (cfg->model_id[0])
                snprintf(m.id, sizeof m.id, "%s", cfg->model_id);
        else
                derive_model_id(arg, m.id, sizeof m.id);
        sup_log(6, "Model '%s' (%s, %" PRIu64 " bytes), served as '%s'", arg, m.path, m.bytes, m.id);
        *ret = m;
        return 0;
}

/* --draft-model: it opens (an HF folder converted once into the cache) and tokenizes as
 * the served model does. */
static int check_draft_model(const struct sup_config *cfg, const struct sup_model *m) {
        struct dse_diag diag = {{0}};
        struct dse_model *model = NULL, *draft = NULL;
        char native[PATH_MAX];
        int r = dse_model_open(m->path, 0, &model, &diag);
        if (r >= 0)
                r = dse_model_resolve(cfg->draft_model, native, sizeof native, &diag);
        if (r >= 0)
                r = dse_model_open(native, 0, &draft, &diag);
        if (r < 0) {
                sup_log(3, "--draft-model %s: %s", cfg->draft_model, diag.msg);
        } else if ((r = dse_model_tokenizers_match(model, draft, &diag)) < 0) {
                sup_log(3, "--draft-model %s: its tokenizer differs from the served model %s's (the served model's "
                           "against the draft's: %s); a draft model must share the served model's tokenizer",
                        cfg->draft_model, m->id, diag.msg);
                r = -EINVAL;
        }
        dse_model_free(draft);
        dse_model_free(model);
        return r;
}

int sup_model_check_speculative(const struct sup_config *cfg, const struct sup_model *m) {
        if (cfg->draft_model[0])
                return check_draft_model(cfg, m);
        if (strcmp(cfg->speculative, "mtp") != 0)
                return 0;
        struct dse_diag diag = {{0}};
        struct dse_model *model = NULL;
        int r = dse_model_open(m->path, 0, &model, &diag);
        if (r < 0) {
                sup_log(3, "--speculative mtp: cannot open %s: %s", m->path, diag.msg);
                return r;
        }
        int n = dse_model_n_mtp_layers(model);
        dse_model_free(model);
        if (n > 0)
                return 0;
        sup_log(3, "--speculative mtp: model %s has no MTP module (num_nextn_predict_layers 0, a DeepSeek-V3 "
                   "checkpoint's multi-token prediction layers); use --speculative ngram or off",
                m->id);
        return -EINVAL;
}
