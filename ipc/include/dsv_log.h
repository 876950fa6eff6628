/* dsv_log.h — the log line every dsvisor process writes on stderr, the supervisor and its
 * workers alike, so one setting (`dsvisor start --log-format`) gives one format:
 *   text: "<prio>source[instance]: message" (the sd-daemon prefix keeps the level in
 *         journald; "[instance]" only when there is one)
 *   json: one object per line, {"time","level","source","instance","event","fields"}:
 *         time in RFC 3339 UTC with milliseconds, level a syslog name, instance a string
 *         or null, event a stable name ("log" for a free-text message, which is then
 *         fields.message), fields an object. No prefix: log shippers parse the line as is.
 * Lives beside the worker protocol because both ends of it write these lines. */
#ifndef DSV_LOG_H
#define DSV_LOG_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dsv_log_format { DSV_LOG_FORMAT_TEXT, DSV_LOG_FORMAT_JSON };

/* "text" or "json" into *ret; -EINVAL otherwise. */
int dsv_log_format_parse(const char *s, enum dsv_log_format *ret);

struct cJSON;

/* Writes one line (one write). prio: syslog priority 0..7. instance: NULL for none.
 * event: NULL means "log". message: the text of a free-text line (text format: the
 * line; json: fields.message). fields: extra members of "fields" (copied; not owned),
 * NULL for none; the text format writes the message (or the event's name) and appends
 * them as " key=value". */
void dsv_log_line(FILE *out, enum dsv_log_format fmt, int prio, const char *source, const char *instance,
                  const char *event, const char *message, const struct cJSON *fields);

#ifdef __cplusplus
}
#endif

#endif
