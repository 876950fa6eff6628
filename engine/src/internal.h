/* Engine-internal helpers shared by the engine's source files. Not installed. */
#ifndef DSE_INTERNAL_H
#define DSE_INTERNAL_H

#include <errno.h>
#include <stdarg.h>

#include "dse.h"

/* Logs through the sink installed with dse_log_set(); a no-op without one. */
void dse__log(enum dse_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Formats a message into reterr (when non-NULL) and returns err, so a failure reads
 * `return dse__fail(reterr, -EBADMSG, "tensor '%s': offset past end of file", name);` */
int dse__fail(struct dse_diag *reterr, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Opens an input file read-only without blocking: returns the descriptor, or a negative
 * errno with a message when it cannot be opened or is a FIFO, device or directory. */
int dse__open_input(const char *path, struct dse_diag *reterr);

#endif
