/* dsv_log_line: the text line keeps its sd-daemon prefix and appends fields; the JSON
 * line is one object with the six members, the message escaped, null without an
 * instance. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dsv_log.h"
#include "t.h"

static char *line(enum dsv_log_format fmt, int prio, const char *instance, const char *event, const char *msg,
                  const cJSON *fields) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return NULL;
        dsv_log_line(f, fmt, prio, "src", instance, event, msg, fields);
        fclose(f);
        return buf;
}

TEST(text_lines) {
        char *t = line(DSV_LOG_FORMAT_TEXT, 4, NULL, NULL, "plain", NULL);
        ASSERT_STREQ(t, "<4>src: plain\n");
        free(t);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "endpoint", "chat");
        cJSON_AddNumberToObject(f, "prompt_tokens", 12);
        t = line(DSV_LOG_FORMAT_TEXT, 6, "w1", "request", NULL, f);
        ASSERT_STREQ(t, "<6>src[w1]: request endpoint=chat prompt_tokens=12\n");
        free(t);
        cJSON_Delete(f);
}

TEST(json_lines) {
        char *t = line(DSV_LOG_FORMAT_JSON, 3, NULL, NULL, "a \"quoted\"\nline", NULL);
        ASSERT_TRUE(t != NULL && t[strlen(t) - 1] == '\n' && strchr(t, '\n') == t + strlen(t) - 1);
        cJSON *o = cJSON_Parse(t);
        ASSERT_TRUE(o != NULL);
        ASSERT_STREQ(cJSON_GetObjectItem(o, "level")->valuestring, "err");
        ASSERT_STREQ(cJSON_GetObjectItem(o, "source")->valuestring, "src");
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(o, "instance")));
        ASSERT_STREQ(cJSON_GetObjectItem(o, "event")->valuestring, "log");
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "fields"), "message")->valuestring, "a \"quoted\"\nline");
        const char *when = cJSON_GetObjectItem(o, "time")->valuestring;
        ASSERT_EQ(strlen(when), 24);
        ASSERT_TRUE(when[10] == 'T' && when[19] == '.' && when[23] == 'Z');
        ASSERT_EQ(cJSON_GetArraySize(o), 6);
        cJSON_Delete(o);
        free(t);

        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "prompt_tokens", 12);
        t = line(DSV_LOG_FORMAT_JSON, 6, "w1", "request", NULL, f);
        o = cJSON_Parse(t);
        ASSERT_TRUE(o != NULL);
        ASSERT_STREQ(cJSON_GetObjectItem(o, "instance")->valuestring, "w1");
        ASSERT_STREQ(cJSON_GetObjectItem(o, "event")->valuestring, "request");
        ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "fields"), "prompt_tokens")->valueint, 12);
        ASSERT_TRUE(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "fields"), "message") == NULL);
        ASSERT_EQ(cJSON_GetArraySize(f), 1); /* the caller's fields are left as they were */
        cJSON_Delete(o);
        cJSON_Delete(f);
        free(t);
}

TEST(format_names) {
        enum dsv_log_format fmt = DSV_LOG_FORMAT_JSON;
        ASSERT_OK(dsv_log_format_parse("text", &fmt));
        ASSERT_EQ(fmt, DSV_LOG_FORMAT_TEXT);
        ASSERT_OK(dsv_log_format_parse("json", &fmt));
        ASSERT_EQ(fmt, DSV_LOG_FORMAT_JSON);
        ASSERT_ERR(dsv_log_format_parse("JSON", &fmt), -EINVAL);
        ASSERT_ERR(dsv_log_format_parse(NULL, &fmt), -EINVAL);
}
