/* A chat template read from a file (`--chat-template FILE`): the text, then
 * dse_chat_template_new, with the file named in any error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"

#define MAX_TEMPLATE_BYTES (1u << 20)

static int read_all(FILE *f, char **ret) {
        char *buf = malloc(MAX_TEMPLATE_BYTES + 1);
        if (!buf)
                return -ENOMEM;
        size_t n = fread(buf, 1, MAX_TEMPLATE_BYTES + 1, f);
        int r = ferror(f) ? -EIO : n > MAX_TEMPLATE_BYTES ? -EFBIG : memchr(buf, 0, n) ? -EINVAL : 0;
        if (r < 0) {
                free(buf);
                return r;
        }
        buf[n] = 0;
        *ret = buf;
        return 0;
}

int dse_chat_template_load(const char *path, struct dse_chat_template **ret_tmpl, struct dse_diag *reterr) {
        if (!path || !ret_tmpl)
                return -EINVAL;
        FILE *f = fopen(path, "re");
        char *src = NULL;
        int r = f ? read_all(f, &src) : -errno;
        if (f)
                fclose(f);
        if (r < 0) {
                if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg, "chat template '%.400s': %s", path,
                                 r == -EFBIG ? "larger than 1 MiB" : r == -EINVAL ? "holds a NUL byte" : strerror(-r));
                return r;
        }
        struct dse_diag d = {{0}};
        r = dse_chat_template_new(src, ret_tmpl, &d);
        free(src);
        if (r < 0 && reterr)
                snprintf(reterr->msg, sizeof reterr->msg, "chat template '%.150s': %.340s", path, d.msg);
        return r;
}
