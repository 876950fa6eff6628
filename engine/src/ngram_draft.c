/* N-gram (prompt-lookup) drafting: the text a sequence is producing often repeats what
 * it has already seen (quotes, code, rewrites of a passage), so the tokens that followed
 * the last earlier occurrence of its current suffix are a free guess at what comes next
 * (see dse.h). The longest suffix is tried first because a longer match is more
 * specific; the most recent occurrence because nearby text predicts best. */
#include <errno.h>
#include <string.h>

#include "dse.h"

int dse_ngram_draft(const int32_t *tokens, int32_t n_tokens, int n_min, int n_max, int32_t window, int max_draft,
                    int32_t *draft) {
        if (n_min < 1 || n_max < n_min || max_draft < 0 || window < 0 || n_tokens < 0 || (!tokens && n_tokens) ||
            (!draft && max_draft))
                return -EINVAL;
        int32_t lo = window > 0 && n_tokens > window ? n_tokens - window : 0;
        for (int n = n_max; n >= n_min; n--) {
                if (n_tokens - lo <= n)
                        continue;
                const int32_t *suffix = tokens + n_tokens - n;
                /* Occurrences end before the last token, so one follows each. */
                for (int32_t start = n_tokens - n - 1; start >= lo; start--) {
                        if (tokens[start + n - 1] != suffix[n - 1] ||
                            memcmp(tokens + start, suffix, (size_t)n * sizeof(int32_t)) != 0)
                                continue;
                        int32_t from = start + n, avail = n_tokens - from;
                        int32_t k = avail < max_draft ? avail : max_draft;
                        if (k > 0)
                                memcpy(draft, tokens + from, (size_t)k * sizeof(int32_t));
                        return k;
                }
        }
        return 0;
}
