/* The engine's only output channel: a user-installed callback (ggml's log callback). */
#include <stdio.h>

#include "internal.h"

static dse_log_fn log_fn;
static void *log_user;

void dse_log_set(dse_log_fn fn, void *user) {
        log_fn = fn;
        log_user = user;
}

void dse__log(enum dse_log_level level, const char *fmt, ...) {
        if (!log_fn)
                return;
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        log_fn(level, buf, log_user);
}

int dse__fail(struct dse_diag *reterr, int err, const char *fmt, ...) {
        if (reterr) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(reterr->msg, sizeof reterr->msg, fmt, ap);
                va_end(ap);
        }
        return err;
}
