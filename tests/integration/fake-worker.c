/* fake-worker — a test double for dsvisor-worker, to exercise the gateway (not the
 * product's worker). It listens with dsv_ipc_listen and answers every `request` with a
 * deterministic stream: the words of the prompt (for chat, of the last message), one
 * token per word, " word" after the first, at --delay-ms per token, up to max_tokens
 * (finish "length") or the last word ("stop"). It answers health and stats, and records
 * what it received in --log (lines "request <id>", "cancel <id>").
 *
 *     fake-worker --url ipc:///tmp/x/w0.sock [--delay-ms 10] [--die-after-tokens N]
 *                 [--stall-after N] [--state ready|loading] [--log FILE]
 *
 * Faults: --die-after-tokens N exits (status 3, no goodbye) when about to send its
 * (N+1)-th token overall, so 0 dies on the first request; --stall-after N stops each
 * stream after N tokens while still serving health, stats and cancel; --restart-after-tokens N
 * plays a worker restarted behind an unbroken pipe: after its N-th token it forgets every
 * generation, its uptime starts again from zero and it draws a new boot id. A prompt starting
 * with "__error__" is refused with an invalid_request error, "__overload__" with
 * overloaded, "__internal__" with internal_error (message holding a fake path); one
 * starting with "__cached__" reports all its words but the last as cached_tokens. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsv_ipc.h"

#define MAX_GENS 256
#define MAX_WORDS 4096

struct gen {
        uint64_t id;
        char *words[MAX_WORDS];
        int n_words, next, max_tokens, logprobs;
        int cached; /* report n_words - 1 cached prompt tokens */
        int64_t next_ms;
        int stalled;
};

static struct gen gens[MAX_GENS];
static int n_gens;
static int delay_ms, die_after = -1, stall_after = -1, restart_after = -1;
static int64_t started_ms;
static uint64_t boot_id;
static long tokens_sent;
static const char *state = "ready";
static FILE *logf;

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void note(const char *what, uint64_t id) {
        if (logf) {
                fprintf(logf, "%s %llu\n", what, (unsigned long long)id);
                fflush(logf);
        }
}

static void send_or_die(struct dsv_ipc_conn *c, const struct dsv_ipc_msg *m) {
        int r = dsv_ipc_send(c, m);
        if (r < 0) {
                fprintf(stderr, "fake-worker: send failed: %s\n", strerror(-r));
                exit(1);
        }
}

static void send_error(struct dsv_ipc_conn *c, uint64_t id, enum dsv_ipc_error_code code, const char *msg) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_ERROR};
        m.u.error.id = id;
        m.u.error.code = code;
        m.u.error.message = (char *)msg;
        send_or_die(c, &m);
}

/* The text the reply echoes: the prompt, or the last chat message's content. */
static char *input_text(const struct dsv_ipc_request *q) {
        if (q->input == DSV_IPC_INPUT_PROMPT)
                return strdup(q->prompt ? q->prompt : "");
        if (q->input == DSV_IPC_INPUT_TOKENS) {
                char *s = calloc(q->n_tokens * 12 + 1, 1);
                for (size_t i = 0; s && i < q->n_tokens; i++)
                        sprintf(s + strlen(s), "%st%d", i ? " " : "", q->tokens[i]);
                return s;
        }
        cJSON *msgs = cJSON_Parse(q->messages_json ? q->messages_json : "[]");
        int n = cJSON_GetArraySize(msgs);
        cJSON *content = n > 0 ? cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, n - 1), "content") : NULL;
        char *s = strdup(cJSON_IsString(content) ? content->valuestring : "");
        cJSON_Delete(msgs);
        return s;
}

static void finish(struct dsv_ipc_conn *c, int i, const char *reason) {
        struct gen *g = &gens[i];
        struct dsv_ipc_msg m = {.type = DSV_IPC_FINAL};
        m.u.final.id = g->id;
        m.u.final.finish_reason = (char *)reason;
        m.u.final.prompt_tokens = g->n_words;
        m.u.final.completion_tokens = g->next;
        m.u.final.cached_tokens = g->cached && g->n_words > 0 ? g->n_words - 1 : 0;
        m.u.final.queue_s = 0.002;
        m.u.final.ttft_s = delay_ms / 1000.0;
        send_or_die(c, &m);
        for (int w = 0; w < g->n_words; w++)
                free(g->words[w]);
        gens[i] = gens[--n_gens];
}

static void on_request(struct dsv_ipc_conn *c, const struct dsv_ipc_request *q) {
        note("request", q->id);
        char *text = input_text(q);
        if (!text || n_gens == MAX_GENS) {
                free(text);
                send_error(c, q->id, DSV_IPC_ERR_OVERLOADED, "queue full");
                return;
        }
        if (strncmp(text, "__error__", 9) == 0 || strncmp(text, "__overload__", 12) == 0 ||
            strncmp(text, "__internal__", 12) == 0) {
                send_error(c, q->id,
                           text[2] == 'e' ? DSV_IPC_ERR_INVALID_REQUEST
                           : text[2] == 'o' ? DSV_IPC_ERR_OVERLOADED
                                            : DSV_IPC_ERR_INTERNAL,
                           text[2] == 'i' ? "assert failed in /srv/secret/worker.c:42" : "the fake worker refuses this prompt");
                free(text);
                return;
        }
        struct gen *g = &gens[n_gens++];
        /* Up to the context: no limit but the prompt's words. */
        *g = (struct gen){.id = q->id, .max_tokens = q->max_tokens_to_context ? INT32_MAX : q->max_tokens,
                          .logprobs = q->logprobs, .cached = strncmp(text, "__cached__", 10) == 0,
                          .next_ms = now_ms() + delay_ms};
        for (char *save, *w = strtok_r(text, " \t\n", &save); w && g->n_words < MAX_WORDS; w = strtok_r(NULL, " \t\n", &save))
                g->words[g->n_words++] = strdup(w);
        free(text);
        if (g->n_words == 0 || g->max_tokens == 0)
                finish(c, n_gens - 1, g->max_tokens == 0 ? "length" : "stop");
}

static void on_cancel(struct dsv_ipc_conn *c, uint64_t id) {
        note("cancel", id);
        for (int i = 0; i < n_gens; i++)
                if (gens[i].id == id) {
                        finish(c, i, "cancelled");
                        return;
                }
}

static void emit_due(struct dsv_ipc_conn *c) {
        int64_t now = now_ms();
        for (int i = 0; i < n_gens; i++) {
                struct gen *g = &gens[i];
                if (g->stalled || g->next_ms > now)
                        continue;
                if (die_after >= 0 && tokens_sent >= die_after)
                        _exit(3);
                char text[512];
                snprintf(text, sizeof text, "%s%s", g->next ? " " : "", g->words[g->next]);
                struct dsv_ipc_logprob top[20];
                struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
                m.u.token.id = g->id;
                m.u.token.token = 1000 + g->next;
                m.u.token.text = text;
                if (g->logprobs > 0) {
                        m.u.token.logprob = -0.25f;
                        for (int k = 0; k < g->logprobs && k < 20; k++)
                                top[k] = (struct dsv_ipc_logprob){.token = 1000 + g->next + k, .logprob = -0.25f * (k + 1)};
                        m.u.token.top = top;
                        m.u.token.n_top = (size_t)(g->logprobs < 20 ? g->logprobs : 20);
                }
                send_or_die(c, &m);
                tokens_sent++;
                if (restart_after >= 0 && tokens_sent == restart_after) {
                        for (int k = 0; k < n_gens; k++)
                                for (int w = 0; w < gens[k].n_words; w++)
                                        free(gens[k].words[w]);
                        n_gens = 0;
                        started_ms = now_ms();
                        boot_id = dsv_ipc_new_boot_id();
                        return;
                }
                g->next++;
                g->next_ms = now + delay_ms;
                if (g->next == g->max_tokens && g->next < g->n_words)
                        finish(c, i--, "length");
                else if (g->next == g->n_words)
                        finish(c, i--, "stop");
                else if (stall_after >= 0 && g->next >= stall_after)
                        g->stalled = 1;
        }
}

static int next_wait_ms(void) {
        int64_t now = now_ms(), wait = 200;
        for (int i = 0; i < n_gens; i++)
                if (!gens[i].stalled && gens[i].next_ms - now < wait)
                        wait = gens[i].next_ms - now;
        return wait < 0 ? 0 : (int)wait;
}

int main(int argc, char **argv) {
        const char *url = NULL;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (!strcmp(argv[i], "--url"))
                        url = argv[i + 1];
                else if (!strcmp(argv[i], "--delay-ms"))
                        delay_ms = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--die-after-tokens"))
                        die_after = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--restart-after-tokens"))
                        restart_after = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--stall-after"))
                        stall_after = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--state"))
                        state = argv[i + 1];
                else if (!strcmp(argv[i], "--log") && !(logf = fopen(argv[i + 1], "ae"))) {
                        fprintf(stderr, "fake-worker: cannot open '%s': %m\n", argv[i + 1]);
                        return 1;
                } else if (strcmp(argv[i], "--log") != 0) {
                        fprintf(stderr, "fake-worker: unknown option %s\n", argv[i]);
                        return 2;
                }
        }
        if (!url) {
                fprintf(stderr, "usage: fake-worker --url URL [--delay-ms N] [--die-after-tokens N] "
                                "[--stall-after N] [--state S] [--log FILE]\n");
                return 2;
        }
        struct dsv_ipc_conn *c;
        int r = dsv_ipc_listen(url, &c);
        if (r < 0) {
                fprintf(stderr, "fake-worker: cannot listen on '%s': %s\n", url, strerror(-r));
                return 1;
        }
        started_ms = now_ms();
        boot_id = dsv_ipc_new_boot_id();
        for (;;) {
                struct dsv_ipc_msg m;
                r = dsv_ipc_recv(c, &m, next_wait_ms(), NULL, 0);
                if (r == 0) {
                        switch (m.type) {
                        case DSV_IPC_REQUEST:
                                on_request(c, &m.u.request);
                                break;
                        case DSV_IPC_CANCEL:
                                on_cancel(c, m.u.cancel_id);
                                break;
                        case DSV_IPC_HEALTH: {
                                struct dsv_ipc_msg rep = {.type = DSV_IPC_HEALTH_REPLY};
                                rep.u.health.seq = m.u.probe.seq;
                                rep.u.health.state = (char *)state;
                                rep.u.health.uptime_s = (now_ms() - started_ms) / 1000.0;
                                rep.u.health.boot_id = boot_id;
                                send_or_die(c, &rep);
                                break;
                        }
                        case DSV_IPC_STATS: {
                                struct dsv_ipc_msg rep = {.type = DSV_IPC_STATS_REPLY};
                                rep.u.stats.seq = m.u.probe.seq;
                                rep.u.stats.running = n_gens;
                                send_or_die(c, &rep);
                                break;
                        }
                        default:
                                break;
                        }
                        dsv_ipc_msg_done(&m);
                } else if (r != -ETIMEDOUT && r != -EPROTO) {
                        fprintf(stderr, "fake-worker: receive failed: %s\n", strerror(-r));
                        return 1;
                }
                emit_due(c);
        }
}
