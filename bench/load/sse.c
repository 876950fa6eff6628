/* sse.c — incremental event-stream splitter and OpenAI answer classification. */
#include "sse.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void load_sse_init(struct load_sse *p) {
        memset(p, 0, sizeof *p);
}

void load_sse_done(struct load_sse *p) {
        free(p->line);
        free(p->data);
        memset(p, 0, sizeof *p);
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
        if (*len + n + 1 > LOAD_SSE_MAX_EVENT)
                return -E2BIG;
        if (*len + n + 1 > *cap) {
                size_t c = *cap ? *cap : 256;
                while (c < *len + n + 1)
                        c *= 2;
                char *b = realloc(*buf, c);
                if (!b)
                        return -ENOMEM;
                *buf = b;
                *cap = c;
        }
        memcpy(*buf + *len, s, n);
        *len += n;
        (*buf)[*len] = 0;
        return 0;
}

/* One complete line (without its end). */
static int process_line(struct load_sse *p, load_sse_event_fn fn, void *user) {
        const char *l = p->line ? p->line : "";
        size_t n = p->line_len;
        p->line_len = 0;
        if (n == 0) { /* blank line: dispatch */
                if (p->data_len == 0)
                        return 0;
                size_t len = p->data_len - 1; /* drop the last joining newline */
                p->data[len] = 0;
                p->data_len = 0;
                return fn(user, p->data, len);
        }
        if (l[0] == ':')
                return 0;
        const char *colon = memchr(l, ':', n);
        size_t name_len = colon ? (size_t)(colon - l) : n;
        if (name_len != 4 || memcmp(l, "data", 4) != 0)
                return 0;
        const char *v = colon ? colon + 1 : l + n;
        if (v < l + n && *v == ' ')
                v++;
        int r = append(&p->data, &p->data_len, &p->data_cap, v, (size_t)(l + n - v));
        if (r < 0)
                return r;
        return append(&p->data, &p->data_len, &p->data_cap, "\n", 1);
}

int load_sse_feed(struct load_sse *p, const char *bytes, size_t n, load_sse_event_fn fn, void *user) {
        size_t i = 0;
        while (i < n) {
                if (p->after_cr && bytes[i] == '\n') {
                        p->after_cr = 0;
                        i++;
                        continue;
                }
                p->after_cr = 0;
                size_t j = i;
                while (j < n && bytes[j] != '\n' && bytes[j] != '\r')
                        j++;
                int r = append(&p->line, &p->line_len, &p->line_cap, bytes + i, j - i);
                if (r < 0)
                        return r;
                if (j == n)
                        break;
                p->after_cr = bytes[j] == '\r';
                i = j + 1;
                r = process_line(p, fn, user);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int classify_json(const cJSON *o, struct load_answer *a) {
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
        if (err) {
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(err, "type");
                const char *s = cJSON_IsString(code) ? code->valuestring
                                : cJSON_IsString(type) ? type->valuestring : "error";
                a->kind = LOAD_ANSWER_ERROR;
                snprintf(a->error_code, sizeof a->error_code, "%s", s);
                return 0;
        }
        const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(o, "usage");
        if (!cJSON_IsArray(choices) && !cJSON_IsObject(usage))
                return -EBADMSG;
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        if (cJSON_IsNumber(ct))
                a->completion_tokens = (long)ct->valuedouble;
        const cJSON *c;
        cJSON_ArrayForEach(c, choices) {
                const cJSON *fr = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
                if (cJSON_IsString(fr))
                        a->finished = 1;
                const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "text"));
                if (!t) {
                        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "delta");
                        if (!m)
                                m = cJSON_GetObjectItemCaseSensitive(c, "message");
                        t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
                }
                if (t && *t)
                        a->has_text = 1;
        }
        a->kind = LOAD_ANSWER_CHUNK;
        return 0;
}

int load_answer_classify(const char *data, size_t len, struct load_answer *ret) {
        struct load_answer a = {.completion_tokens = -1};
        if (len == 6 && !memcmp(data, "[DONE]", 6)) {
                a.kind = LOAD_ANSWER_DONE;
                *ret = a;
                return 0;
        }
        cJSON *o = cJSON_ParseWithLength(data, len);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return -EBADMSG;
        }
        int r = classify_json(o, &a);
        cJSON_Delete(o);
        if (r < 0)
                return r;
        *ret = a;
        return 0;
}

const char *load_answer_kind_to_string(enum load_answer_kind k) {
        static const char *const names[LOAD_ANSWER_COUNT] = {"done", "chunk", "error"};
        return k < LOAD_ANSWER_COUNT ? names[k] : "?";
}
