/* log_line.c — one log line, as text with the sd-daemon prefix or as one JSON object
 * (dsv_log.h). The whole line is built first and written with one fputs, so lines of
 * threads and processes sharing stderr do not interleave mid-line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv_log.h"

int dsv_log_format_parse(const char *s, enum dsv_log_format *ret) {
        if (s && strcmp(s, "text") == 0)
                *ret = DSV_LOG_FORMAT_TEXT;
        else if (s && strcmp(s, "json") == 0)
                *ret = DSV_LOG_FORMAT_JSON;
        else
                return -EINVAL;
        return 0;
}

static const char *level_name(int prio) {
        static const char *const names[] = {"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"};
        return names[prio < 0 ? 0 : prio > 7 ? 7 : prio];
}

/* The message, or for an event without one its name, then " key=value" per field. */
static void write_text(FILE *out, int prio, const char *source, const char *instance, const char *message,
                       const cJSON *fields) {
        char line[4096];
        size_t n = 0;
        int w = instance ? snprintf(line, sizeof line, "<%d>%s[%s]: %s", prio, source, instance, message)
                         : snprintf(line, sizeof line, "<%d>%s: %s", prio, source, message);
        n = w < 0 ? 0 : (size_t)w < sizeof line ? (size_t)w : sizeof line - 1;
        for (const cJSON *f = fields ? fields->child : NULL; f && n < sizeof line - 1; f = f->next) {
                char *v = cJSON_IsString(f) ? NULL : cJSON_PrintUnformatted(f);
                w = snprintf(line + n, sizeof line - n, " %s=%s", f->string, v ? v : f->valuestring);
                free(v);
                n = w < 0 ? n : n + (size_t)w < sizeof line ? n + (size_t)w : sizeof line - 1;
        }
        fprintf(out, "%s\n", line);
}

void dsv_log_line(FILE *out, enum dsv_log_format fmt, int prio, const char *source, const char *instance,
                  const char *event, const char *message, const cJSON *fields) {
        if (fmt == DSV_LOG_FORMAT_TEXT) {
                write_text(out, prio, source, instance, message ? message : event ? event : "", fields);
                return;
        }
        struct timespec ts;
        struct tm tm;
        char when[40];
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t k = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + k, sizeof when - k, ".%03ldZ", ts.tv_nsec / 1000000);
        cJSON *o = cJSON_CreateObject();
        cJSON *f = fields ? cJSON_Duplicate(fields, 1) : cJSON_CreateObject();
        char *text = NULL;
        if (o && f && (!message || cJSON_AddStringToObject(f, "message", message)) &&
            cJSON_AddStringToObject(o, "time", when) && cJSON_AddStringToObject(o, "level", level_name(prio)) &&
            cJSON_AddStringToObject(o, "source", source) &&
            (instance ? cJSON_AddStringToObject(o, "instance", instance) != NULL
                      : cJSON_AddNullToObject(o, "instance") != NULL) &&
            cJSON_AddStringToObject(o, "event", event ? event : "log")) {
                cJSON_AddItemToObject(o, "fields", f);
                f = NULL;
                text = cJSON_PrintUnformatted(o);
        }
        if (text)
                fprintf(out, "%s\n", text);
        else /* out of memory: still say something, in the format asked for */
                fprintf(out, "{\"level\":\"err\",\"source\":\"%s\",\"event\":\"log_failed\"}\n", source);
        free(text);
        cJSON_Delete(f);
        cJSON_Delete(o);
}
