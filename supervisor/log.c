/* log.c — the supervisor's log line: stderr with an sd-daemon priority prefix, so
 * journald keeps the level. */
#include <stdarg.h>
#include <stdio.h>

#include "sup.h"

void sup_log(int prio, const char *fmt, ...) {
        char buf[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        fprintf(stderr, "<%d>dsvisor: %s\n", prio, buf);
}
