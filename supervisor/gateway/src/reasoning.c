/* The think-block splitter: generated text in pieces, reasoning and answer out.
 *
 * R1-style templates end the prompt with "<think>\n", so the model starts inside the
 * block and only "</think>" ever appears; other models may open it themselves with
 * "<think>" first thing. A marker can arrive split over tokens (or be ordinary text the
 * tokenizer cut into pieces), so the longest tail that could still begin a marker is held
 * back until the next piece decides it. After "</think>" the whitespace before the answer
 * is dropped, as llama-server does; an unterminated block is all reasoning. */
#include <string.h>

#include "chat_output.h"

static const char OPEN[] = "<think>";
static const char CLOSE[] = "</think>";

static bool is_space(char c) {
        return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

const char *dsv_gateway_reasoning_format_to_string(enum dsv_gateway_reasoning_format f) {
        static const char *const names[] = {"none", "deepseek"};
        _Static_assert(sizeof names / sizeof *names == DSV_GATEWAY_REASONING_FORMAT_COUNT, "a name per format");
        return (unsigned)f < DSV_GATEWAY_REASONING_FORMAT_COUNT ? names[f] : NULL;
}

void dsv__gw_think_init(struct dsv_gw_think *t, bool opened) {
        *t = (struct dsv_gw_think){.state = opened ? DSV_GW_THINK_IN : DSV_GW_THINK_START};
}

void dsv__gw_think_free(struct dsv_gw_think *t) {
        dsv__gw_text_free(&t->held);
}

/* Runs the state machine over held (which holds everything undecided) and keeps in it
 * only what is still undecided. */
static int advance(struct dsv_gw_think *t, struct dsv_gw_text *reasoning, struct dsv_gw_text *content) {
        struct dsv_gw_text *h = &t->held;
        size_t at = 0;
        int r = 0;
        while (r == 0 && at < h->len) {
                const char *s = h->s + at;
                size_t n = h->len - at;
                if (t->state == DSV_GW_THINK_START) {
                        size_t ws = 0;
                        while (ws < n && is_space(s[ws]))
                                ws++;
                        size_t rest = n - ws, m = strlen(OPEN);
                        if (rest >= m && memcmp(s + ws, OPEN, m) == 0) {
                                t->state = DSV_GW_THINK_IN;
                                at += ws + m;
                        } else if (rest < m && memcmp(s + ws, OPEN, rest) == 0) {
                                break; /* still possibly "<think>" */
                        } else {
                                t->state = DSV_GW_THINK_OUT;
                        }
                } else if (t->state == DSV_GW_THINK_IN) {
                        const char *end = memmem(s, n, CLOSE, strlen(CLOSE));
                        if (end) {
                                r = dsv__gw_text_add(reasoning, s, (size_t)(end - s));
                                at += (size_t)(end - s) + strlen(CLOSE);
                                t->state = DSV_GW_THINK_AFTER;
                        } else {
                                size_t keep = dsv__gw_partial_suffix(s, n, CLOSE);
                                r = dsv__gw_text_add(reasoning, s, n - keep);
                                at += n - keep;
                                break;
                        }
                } else if (t->state == DSV_GW_THINK_AFTER) {
                        while (at < h->len && is_space(h->s[at]))
                                at++;
                        if (at < h->len)
                                t->state = DSV_GW_THINK_OUT;
                } else {
                        r = dsv__gw_text_add(content, s, n);
                        at = h->len;
                }
        }
        if (r < 0)
                return r;
        if (h->len > at)
                memmove(h->s, h->s + at, h->len - at);
        h->len -= at;
        if (h->s)
                h->s[h->len] = 0;
        return 0;
}

int dsv__gw_think_push(struct dsv_gw_think *t, const char *s, size_t n, struct dsv_gw_text *reasoning,
                       struct dsv_gw_text *content) {
        bool was_in = t->state == DSV_GW_THINK_IN;
        int r = dsv__gw_text_add(&t->held, s, n);
        if (r == 0)
                r = advance(t, reasoning, content);
        if (r == 0 && (was_in || t->state == DSV_GW_THINK_IN))
                t->reasoning_tokens++;
        return r;
}

int dsv__gw_think_flush(struct dsv_gw_think *t, struct dsv_gw_text *reasoning, struct dsv_gw_text *content) {
        struct dsv_gw_text *h = &t->held;
        int r = 0;
        if (t->state == DSV_GW_THINK_IN)
                r = dsv__gw_text_add(reasoning, h->s, h->len);
        else if (t->state != DSV_GW_THINK_AFTER)
                r = dsv__gw_text_add(content, h->s, h->len);
        h->len = 0;
        return r;
}
