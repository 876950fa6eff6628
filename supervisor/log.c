/* log.c — the supervisor's log line on stderr, as `--log-format` asks (dsv_log.h): text
 * with an sd-daemon priority prefix, so journald keeps the level, or one JSON object per
 * line for log shippers. */
#include <stdarg.h>
#include <stdio.h>

#include "dsv_log.h"
#include "sup.h"

static enum dsv_log_format log_format = DSV_LOG_FORMAT_TEXT;

void sup_log_set_format(enum dsv_log_format fmt) {
        log_format = fmt;
}

enum dsv_log_format sup_log_format(void) {
        return log_format;
}

void sup_log(int prio, const char *fmt, ...) {
        char buf[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        dsv_log_line(stderr, log_format, prio, "dsvisor", NULL, NULL, buf, NULL);
}

void sup_log_event(int prio, const char *instance, const char *event, const struct cJSON *fields) {
        dsv_log_line(stderr, log_format, prio, "dsvisor", instance, event, NULL, fields);
}
