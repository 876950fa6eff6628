/* Tool calls as the model writes them, parsed incrementally into calls (name, arguments
 * text) while the text before them stays the answer. Formats as vLLM's deepseek_v3,
 * hermes and llama3_json parsers read them; the markers of a section never reach the
 * content. A marker may arrive cut over tokens, so content that could begin one is held
 * back until the next piece decides it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chat_output.h"
#include "tool_markers.h"

static const char DS_CALLS_BEGIN[] = DSV_GW_DS_CALLS_BEGIN;
static const char DS_CALL_BEGIN[] = DSV_GW_DS_CALL_BEGIN;
static const char DS_SEP[] = DSV_GW_DS_SEP;
static const char DS_FENCE[] = DSV_GW_DS_FENCE;
static const char DS_ARGS_END[] = "```" DSV_GW_DS_CALL_END;
static const char DS_CALLS_END[] = DSV_GW_DS_CALLS_END;
static const char HERMES_BEGIN[] = DSV_GW_HERMES_BEGIN;
static const char HERMES_END[] = DSV_GW_HERMES_END;
static const char LLAMA_TAG[] = DSV_GW_LLAMA_TAG;

enum { DS_BETWEEN, DS_HEAD, DS_ARGS };        /* deepseek phases */
enum { HERMES_BODY, HERMES_BETWEEN };         /* hermes phases */

static bool is_space(char c) {
        return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static bool starts(const char *s, size_t n, const char *marker) {
        size_t m = strlen(marker);
        return n >= m && memcmp(s, marker, m) == 0;
}

/* s[0..n) is a proper prefix of marker (more text may complete it). */
static bool may_start(const char *s, size_t n, const char *marker) {
        return n < strlen(marker) && memcmp(s, marker, n) == 0;
}

const char *dsv_gateway_tool_format_to_string(enum dsv_gateway_tool_format f) {
        static const char *const names[] = {"none", "deepseek_v3", "hermes", "llama3_json"};
        _Static_assert(sizeof names / sizeof *names == DSV_GATEWAY_TOOLS_FORMAT_COUNT, "a name per format");
        return (unsigned)f < DSV_GATEWAY_TOOLS_FORMAT_COUNT ? names[f] : NULL;
}

void dsv__gw_tools_init(struct dsv_gw_tools *p, enum dsv_gateway_tool_format format, bool parallel) {
        *p = (struct dsv_gw_tools){.format = format, .parallel = parallel};
}

void dsv__gw_tools_free(struct dsv_gw_tools *p) {
        for (size_t i = 0; i < p->n_calls; i++) {
                free(p->calls[i].name);
                dsv__gw_text_free(&p->calls[i].args);
        }
        dsv__gw_text_free(&p->held);
        dsv__gw_text_free(&p->section);
        p->n_calls = 0;
}

void dsv__gw_tools_read_json_calls(struct dsv_gw_tools *p) {
        p->json_calls = true;
        p->state = DSV_GW_TOOLS_CALLS; /* no content: the output is all calls */
}

size_t dsv__gw_tools_complete(const struct dsv_gw_tools *p) {
        size_t n = 0;
        for (size_t i = 0; i < p->n_calls; i++)
                n += p->calls[i].complete;
        return n;
}

/* A new call named name[0..n) (trimmed); NULL when no more calls are taken. */
static struct dsv_gw_tool_call *new_call(struct dsv_gw_tools *p, const char *name, size_t n, int *r) {
        while (n && is_space(*name))
                name++, n--;
        while (n && is_space(name[n - 1]))
                n--;
        if (p->n_calls == DSV_GW_MAX_TOOL_CALLS || (!p->parallel && p->n_calls == 1) || n == 0)
                return NULL;
        char *copy = strndup(name, n);
        if (!copy) {
                *r = -ENOMEM;
                return NULL;
        }
        struct dsv_gw_tool_call *c = &p->calls[p->n_calls++];
        *c = (struct dsv_gw_tool_call){.name = copy};
        return c;
}

/* One Hermes/Llama call object {"name": …, "arguments"|"parameters": …}. 1 taken, 0 not a
 * call, -ENOMEM. */
static int json_call(struct dsv_gw_tools *p, const cJSON *o) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
        if (!args)
                args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        if (!cJSON_IsObject(o) || !cJSON_IsString(name) || (args && !cJSON_IsObject(args) && !cJSON_IsString(args)))
                return 0;
        int r = 0;
        struct dsv_gw_tool_call *c = new_call(p, name->valuestring, strlen(name->valuestring), &r);
        if (!c)
                return r;
        char *text = !args ? strdup("{}") : cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args);
        if (!text)
                return -ENOMEM;
        r = dsv__gw_text_add(&c->args, text, strlen(text));
        free(text);
        c->complete = true;
        return r < 0 ? r : 1;
}

/* DeepSeek: parses what the section holds from pos on. */
static int parse_deepseek(struct dsv_gw_tools *p) {
        int r = 0;
        while (r == 0 && p->state == DSV_GW_TOOLS_CALLS) {
                const char *s = p->section.s + p->pos;
                size_t n = p->section.len - p->pos;
                if (p->phase == DS_BETWEEN) {
                        size_t ws = 0;
                        while (ws < n && is_space(s[ws]))
                                ws++;
                        s += ws, n -= ws;
                        if (starts(s, n, DS_CALL_BEGIN)) {
                                p->pos += ws + strlen(DS_CALL_BEGIN);
                                p->phase = DS_HEAD;
                        } else if (n == 0 || may_start(s, n, DS_CALL_BEGIN) || may_start(s, n, DS_CALLS_END)) {
                                return 0;
                        } else {
                                p->state = DSV_GW_TOOLS_DONE; /* calls end, or text that is none */
                        }
                } else if (p->phase == DS_HEAD) {
                        const char *fence = memmem(s, n, DS_FENCE, strlen(DS_FENCE));
                        if (!fence)
                                return 0;
                        const char *sep = memmem(s, (size_t)(fence - s), DS_SEP, strlen(DS_SEP));
                        const char *name = sep ? sep + strlen(DS_SEP) : s;
                        p->pos += (size_t)(fence - s) + strlen(DS_FENCE);
                        if (!new_call(p, name, (size_t)(fence - name), &r)) {
                                if (r == 0)
                                        p->state = DSV_GW_TOOLS_DONE; /* no more calls taken */
                        } else {
                                p->phase = DS_ARGS;
                        }
                } else {
                        struct dsv_gw_tool_call *c = &p->calls[p->n_calls - 1];
                        const char *end = memmem(s, n, DS_ARGS_END, strlen(DS_ARGS_END));
                        size_t take = end ? (size_t)(end - s) : n - dsv__gw_partial_suffix(s, n, DS_ARGS_END);
                        /* The newline before the closing fence is not part of the arguments. */
                        bool nl = take > 0 && s[take - 1] == '\n';
                        r = dsv__gw_text_add(&c->args, s, take - nl);
                        if (!end) {
                                p->pos += take - nl;
                                return r;
                        }
                        p->pos += take + strlen(DS_ARGS_END);
                        c->complete = true;
                        p->phase = DS_BETWEEN;
                }
        }
        return r;
}

/* Hermes: each "<tool_call>…</tool_call>" body is one JSON call. */
static int parse_hermes(struct dsv_gw_tools *p, bool at_end) {
        int r = 0;
        while (r == 0 && p->state == DSV_GW_TOOLS_CALLS) {
                const char *s = p->section.s + p->pos;
                size_t n = p->section.len - p->pos;
                if (p->phase == HERMES_BODY) {
                        const char *end = memmem(s, n, HERMES_END, strlen(HERMES_END));
                        if (!end && !at_end)
                                return 0;
                        size_t body = end ? (size_t)(end - s) : n;
                        cJSON *o = cJSON_ParseWithLength(s, body);
                        r = o ? json_call(p, o) : 0;
                        cJSON_Delete(o);
                        if (r < 0)
                                return r;
                        r = 0;
                        p->pos += body + (end ? strlen(HERMES_END) : 0);
                        p->phase = HERMES_BETWEEN;
                        if (!end)
                                p->state = DSV_GW_TOOLS_DONE;
                } else {
                        size_t ws = 0;
                        while (ws < n && is_space(s[ws]))
                                ws++;
                        if (starts(s + ws, n - ws, HERMES_BEGIN)) {
                                p->pos += ws + strlen(HERMES_BEGIN);
                                p->phase = HERMES_BODY;
                        } else if (!at_end && may_start(s + ws, n - ws, HERMES_BEGIN)) {
                                return 0;
                        } else {
                                p->state = DSV_GW_TOOLS_DONE;
                        }
                }
        }
        return r;
}

/* Llama 3.1: the whole output is calls joined by ';', or it is an answer after all. */
static int parse_llama(struct dsv_gw_tools *p, struct dsv_gw_text *content) {
        const char *s = p->section.s ? p->section.s : "", *end = s + p->section.len;
        int r = 0;
        while (r >= 0 && s < end) {
                const char *next = NULL;
                cJSON *o = cJSON_ParseWithLengthOpts(s, (size_t)(end - s), &next, false);
                r = o ? json_call(p, o) : -EINVAL;
                cJSON_Delete(o);
                if (r == 0)
                        r = -EINVAL;
                if (r < 0)
                        break;
                s = next;
                while (s < end && (is_space(*s) || *s == ';'))
                        s++;
        }
        p->state = DSV_GW_TOOLS_DONE;
        if (r != -EINVAL)
                return r < 0 ? r : 0;
        /* Not calls: the answer is the text. */
        for (size_t i = 0; i < p->n_calls; i++) {
                free(p->calls[i].name);
                dsv__gw_text_free(&p->calls[i].args);
        }
        p->n_calls = 0;
        return dsv__gw_text_add(content, p->section.s, p->section.len);
}

/* Constrained JSON: one call object, or an array of them (compact, as the grammar writes
 * it). Each call is taken once its object is complete, so an array cut by max_tokens or
 * a stop string keeps the calls before the cut; a call cut midway is no call. */
static int parse_json_calls(struct dsv_gw_tools *p) {
        const char *s = p->section.s ? p->section.s : "";
        size_t n = p->section.len;
        if (p->pos == 0 && n > 0 && s[0] == '[')
                p->pos = 1;
        while (p->state == DSV_GW_TOOLS_CALLS && p->pos < n) {
                if (s[p->pos] == ',') {
                        p->pos++;
                        continue;
                }
                if (s[p->pos] == ']') {
                        p->state = DSV_GW_TOOLS_DONE;
                        break;
                }
                const char *end = NULL;
                cJSON *o = cJSON_ParseWithLengthOpts(s + p->pos, n - p->pos, &end, false);
                if (!o)
                        return 0; /* not complete yet */
                int r = json_call(p, o);
                cJSON_Delete(o);
                if (r < 0)
                        return r;
                p->pos = (size_t)(end - s);
                if (r == 0 || s[0] != '[')
                        p->state = DSV_GW_TOOLS_DONE; /* one call, or no more taken */
        }
        return 0;
}

/* Content state: finds where the section starts in held; releases what cannot start it. */
static int scan_content(struct dsv_gw_tools *p, struct dsv_gw_text *content, bool at_end) {
        struct dsv_gw_text *h = &p->held;
        const char *s = h->s ? h->s : "";
        size_t n = h->len, cut = n, skip = 0, keep = 0;
        if (p->format == DSV_GATEWAY_TOOLS_LLAMA3_JSON) {
                size_t ws = 0;
                while (ws < n && is_space(s[ws]))
                        ws++;
                if (p->seen_text || ws == n) {
                        keep = p->seen_text || at_end ? 0 : n; /* leading whitespace waits */
                } else if (starts(s + ws, n - ws, LLAMA_TAG) || s[ws] == '{') {
                        cut = 0;
                        skip = ws + (s[ws] == '{' ? 0 : strlen(LLAMA_TAG));
                } else if (!at_end && may_start(s + ws, n - ws, LLAMA_TAG)) {
                        keep = n;
                } else {
                        p->seen_text = true;
                }
        } else {
                const char *markers[2] = {HERMES_BEGIN, NULL};
                if (p->format == DSV_GATEWAY_TOOLS_DEEPSEEK_V3)
                        markers[0] = DS_CALLS_BEGIN, markers[1] = DS_CALL_BEGIN;
                for (int i = 0; i < 2 && markers[i]; i++) {
                        const char *at = memmem(s, n, markers[i], strlen(markers[i]));
                        if (at && (size_t)(at - s) < cut) {
                                cut = (size_t)(at - s);
                                /* DeepSeek's call begin without the calls begin is kept: the
                                 * parser reads the call from it. */
                                skip = markers[i] == DS_CALL_BEGIN ? 0 : strlen(markers[i]);
                        }
                }
                for (int i = 0; i < 2 && markers[i] && cut == n && !at_end; i++) {
                        size_t k = dsv__gw_partial_suffix(s, n, markers[i]);
                        keep = k > keep ? k : keep;
                }
        }
        int r = dsv__gw_text_add(content, s, cut < n ? cut : n - keep);
        if (r < 0)
                return r;
        if (cut < n) {
                p->state = DSV_GW_TOOLS_CALLS;
                /* Allocated even when empty: the parsers read from section.s. */
                r = dsv__gw_buf_append(&p->section.s, &p->section.len, &p->section.cap, s + cut + skip, n - cut - skip);
                h->len = 0;
                return r;
        }
        if (keep)
                memmove(h->s, s + n - keep, keep);
        h->len = keep;
        return 0;
}

static int parse_section(struct dsv_gw_tools *p, struct dsv_gw_text *content, bool at_end) {
        if (p->json_calls) {
                /* A call can only have ended where the text ends after a '}'. */
                bool closed = p->section.len && strchr("},]", p->section.s[p->section.len - 1]);
                return at_end || closed ? parse_json_calls(p) : 0;
        }
        switch (p->format) {
        case DSV_GATEWAY_TOOLS_DEEPSEEK_V3:
                return parse_deepseek(p);
        case DSV_GATEWAY_TOOLS_HERMES:
                return parse_hermes(p, at_end);
        case DSV_GATEWAY_TOOLS_LLAMA3_JSON:
                return at_end ? parse_llama(p, content) : 0;
        default:
                return 0;
        }
}

int dsv__gw_tools_push(struct dsv_gw_tools *p, const char *s, size_t n, struct dsv_gw_text *content) {
        if (p->state == DSV_GW_TOOLS_DONE)
                return 0;
        if (p->state == DSV_GW_TOOLS_CALLS) {
                int r = dsv__gw_text_add(&p->section, s, n);
                return r < 0 ? r : parse_section(p, content, false);
        }
        int r = dsv__gw_text_add(&p->held, s, n);
        if (r == 0)
                r = scan_content(p, content, false);
        if (r == 0 && p->state == DSV_GW_TOOLS_CALLS)
                r = parse_section(p, content, false);
        return r;
}

int dsv__gw_tools_finish(struct dsv_gw_tools *p, struct dsv_gw_text *content) {
        int r = 0;
        if (p->state == DSV_GW_TOOLS_CONTENT)
                r = scan_content(p, content, true);
        if (r == 0 && p->state == DSV_GW_TOOLS_CALLS)
                r = parse_section(p, content, true);
        p->state = DSV_GW_TOOLS_DONE;
        return r;
}
