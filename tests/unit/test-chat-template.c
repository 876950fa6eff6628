/* Chat templates against the reference renderings in fixtures/tokenizers/chat/<name>.jsonl
 * (Jinja2 as transformers configures it), then the rendered text's ids through the
 * tokenizer; plus the error contract for templates outside the supported subset.
 * Run with a fixture name (deepseek_v3, qwen2_5, llama3) to check one template. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "dse.h"
#include "t.h"

/* First differing byte, with a little context, for a failure message. */
static void show_diff(const char *id, const char *want, const char *got) {
        size_t i = 0;
        while (want[i] && want[i] == got[i])
                i++;
        size_t from = i > 40 ? i - 40 : 0;
        fprintf(stderr, "  %s: differs at byte %zu\n    want: \"%.80s\"\n    got:  \"%.80s\"\n", id, i, want + from,
                got + from);
}

/* Renders every conversation of chat/<name>.jsonl; returns how many agree with
 * `rendered`, and with `ids` when the tokenizer loads (*ret_ids_ok, -1 if it does not). */
static int check_fixture(const char *name, int *ret_total, int *ret_ids_ok) {
        char rel[256];
        snprintf(rel, sizeof rel, "tokenizers/models/%s/tokenizer_config.json", name);
        char *config = slurp(t_fixture(rel), NULL);
        if (!config)
                return -ENOENT;
        cJSON *cfg = cJSON_Parse(config);
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        struct dse_diag diag = {{0}};
        struct dse_chat_template *tmpl = NULL;
        int r = cJSON_IsString(src) ? dse_chat_template_new(src->valuestring, &tmpl, &diag) : -EBADMSG;
        if (r < 0) {
                fprintf(stderr, "  %s: template: %s\n", name, diag.msg);
                cJSON_Delete(cfg);
                free(config);
                return r;
        }

        struct dse_tokenizer *tok = NULL;
        snprintf(rel, sizeof rel, "tokenizers/models/%s/tokenizer.json", name);
        struct dse_diag tdiag = {{0}};
        if (dse_tokenizer_load_file(t_fixture(rel), &tok, &tdiag) < 0) {
                fprintf(stderr, "  %s: tokenizer not available (%s): comparing text only\n", name, tdiag.msg);
                tok = NULL;
        }

        const char *tok_tmpl = tok ? dse_tokenizer_chat_template(tok) : NULL;
        if (tok && (!tok_tmpl || strcmp(tok_tmpl, src->valuestring) != 0)) {
                fprintf(stderr, "  %s: the tokenizer's chat template differs from tokenizer_config.json's\n", name);
                dse_tokenizer_free(tok);
                dse_chat_template_free(tmpl);
                cJSON_Delete(cfg);
                free(config);
                return -EBADMSG;
        }

        snprintf(rel, sizeof rel, "tokenizers/chat/%s.jsonl", name);
        char *lines = slurp(t_fixture(rel), NULL);
        int total = 0, ok = 0, ids_ok = 0;
        for (char *line = lines, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                else
                        next = line + strlen(line);
                cJSON *c = cJSON_Parse(line);
                if (!c)
                        continue;
                total++;
                const char *id = cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring;
                const cJSON *vars = cJSON_GetObjectItemCaseSensitive(c, "template_vars");
                const cJSON *bos = cJSON_GetObjectItemCaseSensitive(vars, "bos_token");
                const cJSON *eos = cJSON_GetObjectItemCaseSensitive(vars, "eos_token");
                const cJSON *tools = cJSON_GetObjectItemCaseSensitive(vars, "tools");
                const cJSON *agp = cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt");
                const char *want = cJSON_GetObjectItemCaseSensitive(c, "rendered")->valuestring;
                char *messages = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "messages"));
                char *tools_json = tools && !cJSON_IsNull(tools) ? cJSON_PrintUnformatted(tools) : NULL;
                char *got = NULL;
                memset(&diag, 0, sizeof diag);
                r = dse_chat_template_render(tmpl, messages, tools_json, cJSON_IsTrue(agp),
                                             cJSON_IsString(bos) ? bos->valuestring : NULL,
                                             cJSON_IsString(eos) ? eos->valuestring : NULL, &got, &diag);
                if (r < 0) {
                        fprintf(stderr, "  %s: render failed: %s (%s)\n", id, strerror(-r), diag.msg);
                } else if ((size_t)r != strlen(want) || strcmp(got, want) != 0) {
                        show_diff(id, want, got);
                } else {
                        ok++;
                        if (tok) {
                                const cJSON *ids = cJSON_GetObjectItemCaseSensitive(c, "ids");
                                int n_want = cJSON_GetArraySize(ids);
                                int32_t *buf = malloc(sizeof(int32_t) * ((size_t)n_want + 64));
                                int n = dse_tokenizer_encode(tok, got, (size_t)r, 0, buf, (size_t)n_want + 64);
                                int same = n == n_want;
                                for (int i = 0; same && i < n; i++)
                                        same = buf[i] == cJSON_GetArrayItem(ids, i)->valueint;
                                if (same)
                                        ids_ok++;
                                else
                                        fprintf(stderr, "  %s: ids differ (%d ids, want %d)\n", id, n, n_want);
                                free(buf);
                        }
                }
                free(got);
                free(messages);
                free(tools_json);
                cJSON_Delete(c);
        }
        printf("%s: %d/%d conversations render exactly", name, ok, total);
        if (tok)
                printf(", %d/%d encode to the reference ids", ids_ok, total);
        printf("\n");
        *ret_total = total;
        *ret_ids_ok = tok ? ids_ok : -1;
        dse_tokenizer_free(tok);
        free(lines);
        dse_chat_template_free(tmpl);
        cJSON_Delete(cfg);
        free(config);
        return ok;
}

static void run_fixture(const char *name) {
        int total = 0, ids_ok = 0;
        int ok = check_fixture(name, &total, &ids_ok);
        if (ok < 0)
                T_FAIL("%s: %s", name, strerror(-ok));
        if (total == 0)
                T_FAIL("%s: no conversations read", name);
        if (ok != total)
                T_FAIL("%s: %d of %d conversations differ", name, total - ok, total);
        if (ids_ok >= 0 && ids_ok != total)
                T_FAIL("%s: %d of %d renderings encode to other ids", name, total - ids_ok, total);
}

TEST(deepseek_v3) { run_fixture("deepseek_v3"); }
TEST(qwen2_5) { run_fixture("qwen2_5"); }
TEST(llama3) { run_fixture("llama3"); }
