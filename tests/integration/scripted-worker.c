/* scripted-worker — a test double for dsvisor-worker that answers chat requests with a
 * scripted reply, so the gateway sees what a real model of another family would write
 * (R1's think block, DeepSeek-V3's or Qwen2.5's tool calls) through the real pieces: the
 * request's messages and tools are rendered with the chat template by the engine, and the
 * reply is encoded with the real tokenizer and sent token by token through the engine's
 * streaming detokenizer, so special tokens and split markers arrive as a model's would.
 *
 *     scripted-worker --url URL --tokenizer tokenizer.json --script FILE.jsonl
 *                     [--chat-template FILE] [--log FILE]
 *
 * Script lines {"match": TEXT, "reply": TEXT}: the first line whose match occurs in the
 * rendered prompt or in the request's constraint text (a line without match always does)
 * gives the reply. The constraint is not applied, the reply is sent as scripted; but a
 * composed constraint (a forced tool call in the template's syntax) is compiled with the
 * real tokenizer and the reply's tokens walked through its masks: a token the mask
 * refuses, or a reply the grammar does not accept whole, is refused with an error naming
 * the token, so the gateway's grammar is checked against what the model writes. --log gets one JSON
 * line per request: {"messages", "tools", "rendered"} (for comparison with python3-jinja2).
 * The reply stops at its end ("stop") or at max_tokens ("length"; no cap with max_tokens_to_context). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "dsv_ipc.h"

#define MAX_REPLY_TOKENS 4096

static char *read_file(const char *path) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
                free(s);
                s = NULL;
        }
        if (s)
                s[n] = 0;
        fclose(f);
        return s;
}

struct ctx {
        struct dsv_ipc_conn *conn;
        struct dse_tokenizer *tok;
        struct dse_chat_template *tmpl;
        struct dse_grammar_vocab *vocab; /* built on the first composed constraint */
        cJSON *script;
        FILE *log;
};

static void send_or_die(struct ctx *c, const struct dsv_ipc_msg *m) {
        int r = dsv_ipc_send(c->conn, m);
        if (r < 0) {
                fprintf(stderr, "scripted-worker: send failed: %s\n", strerror(-r));
                exit(1);
        }
}

static void refuse(struct ctx *c, uint64_t id, const char *msg) {
        struct dsv_ipc_msg m = {.type = DSV_IPC_ERROR};
        m.u.error.id = id;
        m.u.error.code = DSV_IPC_ERR_INVALID_REQUEST;
        m.u.error.message = (char *)msg;
        send_or_die(c, &m);
}

static void log_request(struct ctx *c, const struct dsv_ipc_request *q, const char *rendered) {
        if (!c->log)
                return;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "messages", cJSON_Parse(q->messages_json ? q->messages_json : "[]"));
        cJSON_AddItemToObject(o, "tools", q->tools_json ? cJSON_Parse(q->tools_json) : cJSON_CreateNull());
        cJSON_AddStringToObject(o, "rendered", rendered);
        char *s = cJSON_PrintUnformatted(o);
        fprintf(c->log, "%s\n", s);
        fflush(c->log);
        free(s);
        cJSON_Delete(o);
}

static const char *pick_reply(const struct ctx *c, const char *rendered, const char *constraint) {
        const cJSON *line;
        cJSON_ArrayForEach(line, c->script) {
                const cJSON *match = cJSON_GetObjectItem(line, "match");
                if (!cJSON_IsString(match) || strstr(rendered, match->valuestring) ||
                    (constraint && strstr(constraint, match->valuestring)))
                        return cJSON_GetStringValue(cJSON_GetObjectItem(line, "reply"));
        }
        return NULL;
}

static void send_token(struct ctx *c, uint64_t id, int32_t tok, const char *text, size_t n) {
        char *copy = strndup(text, n);
        struct dsv_ipc_msg m = {.type = DSV_IPC_TOKEN};
        m.u.token.id = id;
        m.u.token.token = tok;
        m.u.token.text = copy;
        send_or_die(c, &m);
        free(copy);
}

/* Walks ids through the masks of q's composed constraint: 0, or -1 with why written. */
static int check_composed(struct ctx *c, const struct dsv_ipc_request *q, const int32_t *ids, int n, char *why,
                          size_t size) {
        struct dse_diag diag = {{0}};
        struct dse_grammar *g = NULL;
        struct dse_grammar_matcher *m = NULL;
        uint64_t *mask = NULL;
        int r = c->vocab ? 0 : dse_grammar_vocab_new(c->tok, &c->vocab, &diag);
        if (r == 0)
                r = dse_grammar_compile_composed(q->constraint_text, strlen(q->constraint_text), c->tok, &g, &diag);
        if (r == 0)
                r = dse_grammar_matcher_new(g, &m, &diag);
        if (r < 0)
                snprintf(why, size, "composed constraint: %.400s", diag.msg);
        if (r == 0 && !(mask = calloc(dse_grammar_vocab_mask_words(c->vocab), sizeof *mask)))
                r = -ENOMEM;
        for (int i = 0; r == 0 && i < n; i++) {
                r = dse_grammar_matcher_fill_mask(m, c->vocab, mask);
                if (r >= 0 && !((mask[ids[i] / 64] >> (ids[i] % 64)) & 1))
                        r = -EINVAL;
                if (r >= 0)
                        r = dse_grammar_matcher_accept_token(m, c->vocab, ids[i]);
                if (r < 0)
                        snprintf(why, size, "the scripted reply's token %d (id %d, '%s') is outside the composed "
                                 "constraint", i, ids[i], dse_tokenizer_piece(c->tok, ids[i]));
        }
        if (r == 0 && !dse_grammar_matcher_is_accepting(m)) {
                snprintf(why, size, "the scripted reply ends before the composed constraint is complete");
                r = -EINVAL;
        }
        free(mask);
        dse_grammar_matcher_free(m);
        dse_grammar_free(g);
        return r < 0 ? -1 : 0;
}

static void on_request(struct ctx *c, const struct dsv_ipc_request *q) {
        struct dse_diag diag = {{0}};
        char *rendered = NULL;
        if (q->input != DSV_IPC_INPUT_CHAT) {
                refuse(c, q->id, "the scripted worker answers chat requests only");
                return;
        }
        int bos = dse_tokenizer_bos(c->tok), eos = dse_tokenizer_eos(c->tok);
        if (dse_chat_template_render(c->tmpl, q->messages_json, q->tools_json, 1,
                                     bos >= 0 ? dse_tokenizer_piece(c->tok, bos) : NULL,
                                     eos >= 0 ? dse_tokenizer_piece(c->tok, eos) : NULL, &rendered, &diag) < 0) {
                refuse(c, q->id, diag.msg);
                return;
        }
        log_request(c, q, rendered);
        const char *reply = pick_reply(c, rendered, q->constraint_text);
        static int32_t ids[MAX_REPLY_TOKENS], prompt_ids[1 << 16];
        int n_prompt = dse_tokenizer_encode(c->tok, rendered, strlen(rendered), 0, prompt_ids, 1 << 16);
        int n = reply ? dse_tokenizer_encode(c->tok, reply, strlen(reply), 0, ids, MAX_REPLY_TOKENS) : -EINVAL;
        free(rendered);
        if (n < 0 || n_prompt < 0) {
                refuse(c, q->id, "no scripted reply for this prompt");
                return;
        }
        char why[512];
        if (q->constraint == DSV_IPC_CONSTRAINT_COMPOSED && check_composed(c, q, ids, n, why, sizeof why) < 0) {
                refuse(c, q->id, why);
                return;
        }
        struct dse_detok *dt = NULL;
        if (dse_detok_new(c->tok, NULL, 0, &dt, &diag) < 0) {
                refuse(c, q->id, diag.msg);
                return;
        }
        int sent = 0, stopped = 0;
        int32_t max_tokens = q->max_tokens_to_context ? INT32_MAX : q->max_tokens;
        for (; sent < n && sent < max_tokens; sent++) {
                const char *text = NULL;
                int len = dse_detok_push(dt, ids[sent], &text, &stopped);
                send_token(c, q->id, ids[sent], len > 0 ? text : "", len > 0 ? (size_t)len : 0);
        }
        const char *text = NULL;
        int len = dse_detok_flush(dt, &text);
        if (len > 0)
                send_token(c, q->id, eos, text, (size_t)len);
        dse_detok_free(dt);
        struct dsv_ipc_msg m = {.type = DSV_IPC_FINAL};
        m.u.final.id = q->id;
        m.u.final.finish_reason = (char *)(sent < n ? "length" : "stop");
        m.u.final.prompt_tokens = n_prompt;
        m.u.final.completion_tokens = sent;
        send_or_die(c, &m);
}

int main(int argc, char **argv) {
        const char *url = NULL, *tok_path = NULL, *script_path = NULL, *tmpl_path = NULL, *log_path = NULL;
        for (int i = 1; i + 1 < argc; i += 2) {
                const char *k = argv[i], *v = argv[i + 1];
                if (!strcmp(k, "--url"))
                        url = v;
                else if (!strcmp(k, "--tokenizer"))
                        tok_path = v;
                else if (!strcmp(k, "--script"))
                        script_path = v;
                else if (!strcmp(k, "--chat-template"))
                        tmpl_path = v;
                else if (!strcmp(k, "--log"))
                        log_path = v;
                else {
                        fprintf(stderr, "scripted-worker: unknown option %s\n", k);
                        return 2;
                }
        }
        if (!url || !tok_path || !script_path) {
                fprintf(stderr, "usage: scripted-worker --url URL --tokenizer FILE --script FILE [--chat-template FILE] "
                                "[--log FILE]\n");
                return 2;
        }
        struct ctx c = {0};
        struct dse_diag diag = {{0}};
        char *script = read_file(script_path), *tmpl_src = tmpl_path ? read_file(tmpl_path) : NULL;
        if (!script || (tmpl_path && !tmpl_src)) {
                fprintf(stderr, "scripted-worker: cannot read '%s'\n", !script ? script_path : tmpl_path);
                return 1;
        }
        c.script = cJSON_CreateArray();
        for (char *save, *line = strtok_r(script, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                cJSON *o = cJSON_Parse(line);
                if (!cJSON_IsObject(o) || !cJSON_IsString(cJSON_GetObjectItem(o, "reply"))) {
                        fprintf(stderr, "scripted-worker: bad script line: %s\n", line);
                        return 1;
                }
                cJSON_AddItemToArray(c.script, o);
        }
        if (dse_tokenizer_load_file(tok_path, &c.tok, &diag) < 0) {
                fprintf(stderr, "scripted-worker: tokenizer '%s': %s\n", tok_path, diag.msg);
                return 1;
        }
        const char *src = tmpl_src ? tmpl_src : dse_tokenizer_chat_template(c.tok);
        if (!src || dse_chat_template_new(src, &c.tmpl, &diag) < 0) {
                fprintf(stderr, "scripted-worker: chat template: %s\n", src ? diag.msg : "none");
                return 1;
        }
        if (log_path && !(c.log = fopen(log_path, "ae"))) {
                fprintf(stderr, "scripted-worker: cannot open '%s': %m\n", log_path);
                return 1;
        }
        int r = dsv_ipc_listen(url, &c.conn);
        if (r < 0) {
                fprintf(stderr, "scripted-worker: cannot listen on '%s': %s\n", url, strerror(-r));
                return 1;
        }
        uint64_t boot_id = dsv_ipc_new_boot_id();
        for (;;) {
                struct dsv_ipc_msg m;
                r = dsv_ipc_recv(c.conn, &m, 1000, NULL, 0);
                if (r == -ETIMEDOUT || r == -EPROTO)
                        continue;
                if (r < 0) {
                        fprintf(stderr, "scripted-worker: receive failed: %s\n", strerror(-r));
                        return 1;
                }
                if (m.type == DSV_IPC_REQUEST) {
                        on_request(&c, &m.u.request);
                } else if (m.type == DSV_IPC_HEALTH) {
                        struct dsv_ipc_msg rep = {.type = DSV_IPC_HEALTH_REPLY};
                        rep.u.health.seq = m.u.probe.seq;
                        rep.u.health.state = (char *)"ready";
                        rep.u.health.boot_id = boot_id;
                        send_or_die(&c, &rep);
                } else if (m.type == DSV_IPC_STATS) {
                        struct dsv_ipc_msg rep = {.type = DSV_IPC_STATS_REPLY};
                        rep.u.stats.seq = m.u.probe.seq;
                        send_or_die(&c, &rep);
                }
                dsv_ipc_msg_done(&m);
        }
}
