/* Environment switches whose value is one of a few names (env_choice.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env_choice.h"
#include "internal.h"

int dse__choice_index(const char *const *names, int n_names, const char *str) {
        for (int i = 0; str && i < n_names; i++)
                if (strcmp(str, names[i]) == 0)
                        return i;
        return -1;
}

void dse__choice_names(const char *const *names, int n_names, int first, char *buf, size_t size) {
        size_t len = 0;
        buf[0] = '\0';
        for (int k = 0; k < n_names; k++) {
                /* the k-th name listed: the first one, then the others in order */
                int i = first < 0 ? k : k == 0 ? first : k <= first ? k - 1 : k;
                const char *sep = k == 0 ? "" : k == n_names - 1 ? " or " : ", ";
                int w = snprintf(buf + len, size - len, "%s%s", sep, names[i]);
                if (w < 0 || (size_t)w >= size - len)
                        return;
                len += (size_t)w;
        }
}

int dse__env_choice(const char *var, const char *what, const char *const *names, int n_names, int default_index,
                    int *ret_index, struct dse_diag *reterr) {
        const char *v = getenv(var);
        if (!v || !*v) {
                *ret_index = default_index;
                return 0;
        }
        int i = dse__choice_index(names, n_names, v);
        if (i >= 0) {
                *ret_index = i;
                return 0;
        }
        char allowed[256];
        dse__choice_names(names, n_names, default_index, allowed, sizeof allowed);
        return dse__fail(reterr, -EINVAL, "%s='%s' is not %s; use %s", var, v, what, allowed);
}
