/* Which compressed-tensors config group covers a module, with the library's own
 * matching rules (compressed_tensors.utils.match: a target or ignore entry is a module
 * class name, an exact module name, or "re:" and a pattern that re.match()es the name,
 * i.e. anchored at its start only); and freeing a parsed quantization_config. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "../../internal.h"
#include "../format.h"

static void free_strings(char **list, size_t n) {
        for (size_t i = 0; list && i < n; i++)
                free(list[i]);
        free(list);
}

void dse__hf_quant_free(struct dse__hf_quant *q) {
        if (!q)
                return;
        for (size_t i = 0; q->ct && i < q->n_ct; i++)
                free_strings(q->ct[i].targets, q->ct[i].n_targets);
        free(q->ct);
        free_strings(q->ct_ignore, q->n_ct_ignore);
        q->ct = NULL;
        q->ct_ignore = NULL;
        q->n_ct = q->n_ct_ignore = 0;
}

/* 1 when `entry` names the module, 0 when not, -EBADMSG for a bad pattern. */
static int matches(const char *entry, const char *module, int linear, struct dse_diag *reterr) {
        if (strncmp(entry, "re:", 3) != 0)
                return strcmp(entry, module) == 0 || (linear && strcmp(entry, "Linear") == 0);
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)entry + 3, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, &err, &off, NULL);
        if (!re) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(err, msg, sizeof msg);
                return dse__fail(reterr, -EBADMSG, "compressed-tensors pattern '%s': %s at offset %zu", entry,
                                 (const char *)msg, (size_t)off);
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int r = md ? pcre2_match(re, (PCRE2_SPTR)module, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : PCRE2_ERROR_NOMEMORY;
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (r == PCRE2_ERROR_NOMEMORY)
                return -ENOMEM;
        return r >= 0;
}

static int any_matches(char *const *list, size_t n, const char *module, int linear, struct dse_diag *reterr) {
        for (size_t i = 0; i < n; i++) {
                int r = matches(list[i], module, linear, reterr);
                if (r != 0)
                        return r;
        }
        return 0;
}

int dse__ct_scheme_for(const struct dse__hf_quant *q, const char *module, int linear,
                       const struct dse__ct_scheme **ret, struct dse_diag *reterr) {
        *ret = NULL;
        int r = any_matches(q->ct_ignore, q->n_ct_ignore, module, linear, reterr);
        if (r != 0)
                return r < 0 ? r : 0;
        for (size_t i = 0; i < q->n_ct; i++) {
                if ((r = any_matches(q->ct[i].targets, q->ct[i].n_targets, module, linear, reterr)) < 0)
                        return r;
                if (r) {
                        *ret = &q->ct[i];
                        return 0;
                }
        }
        return 0;
}
