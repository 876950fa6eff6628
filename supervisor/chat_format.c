/* chat_format.c — what the served model's chat template says about its output: whether
 * its generation prompt opens a think block (R1 and its distills end it in "<think>\n"),
 * whether it thinks at all (default of --reasoning-format), and which tool-call syntax
 * it writes (the gateway parses that one, and forces a call in it). Decided once at start
 * from the template the workers render (--chat-template's file, else the model's), by
 * rendering one user turn and reading the template's text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "dsv_gateway.h"
#include "sup.h"

/* dse_chat_template_load's limit: a longer file is refused at start anyway. */
#define TEMPLATE_FILE_MAX (1u << 20)

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), m = strlen(suffix);
        return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* From the template's source and a rendered one-turn prompt with the generation prompt
 * (probe; NULL without a template) and the option. */
static int decide(const char *template_src, const char *probe, const char *reasoning_opt, struct sup_chat_format *ret,
                  char *why, size_t why_size) {
        struct sup_chat_format f = {0};
        const char *src = template_src ? template_src : "";
        f.think_opened = probe && (ends_with(probe, "<think>\n") || ends_with(probe, "<think>"));
        bool thinks = f.think_opened || strstr(src, "<think>") || strstr(src, "</think>");
        if (!reasoning_opt[0] || strcmp(reasoning_opt, "auto") == 0) {
                f.reasoning = thinks ? DSV_GATEWAY_REASONING_DEEPSEEK : DSV_GATEWAY_REASONING_NONE;
        } else {
                f.reasoning = DSV_GATEWAY_REASONING_FORMAT_COUNT;
                for (int k = 0; k < DSV_GATEWAY_REASONING_FORMAT_COUNT; k++)
                        if (strcmp(reasoning_opt, dsv_gateway_reasoning_format_to_string(k)) == 0)
                                f.reasoning = k;
                if (f.reasoning == DSV_GATEWAY_REASONING_FORMAT_COUNT) {
                        snprintf(why, why_size, "reasoning-format: '%s' is not one of auto, deepseek, none",
                                 reasoning_opt);
                        return -EINVAL;
                }
        }
        if (strstr(src, "tool▁calls▁begin") || strstr(src, "tool▁call▁begin"))
                f.tools = DSV_GATEWAY_TOOLS_DEEPSEEK_V3;
        else if (strstr(src, "<tool_call>"))
                f.tools = DSV_GATEWAY_TOOLS_HERMES;
        else if (strstr(src, "<|python_tag|>") || strstr(src, "ipython"))
                f.tools = DSV_GATEWAY_TOOLS_LLAMA3_JSON;
        *ret = f;
        return 0;
}

/* Renders one user turn with the generation prompt: what a chat prompt ends with. */
static char *probe_prompt(const struct dse_tokenizer *tok, const char *src) {
        struct dse_chat_template *t = NULL;
        struct dse_diag diag = {{0}};
        char *text = NULL;
        int bos = dse_tokenizer_bos(tok), eos = dse_tokenizer_eos(tok);
        if (dse_chat_template_new(src, &t, &diag) == 0)
                dse_chat_template_render(t, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL, 1,
                                         bos >= 0 ? dse_tokenizer_piece(tok, bos) : NULL,
                                         eos >= 0 ? dse_tokenizer_piece(tok, eos) : NULL, &text, &diag);
        dse_chat_template_free(t);
        return text;
}

int sup_chat_format_of(const struct dse_tokenizer *tok, const char *template_src, const char *reasoning_opt,
                       struct sup_chat_format *ret, char *why, size_t why_size) {
        char *probe = template_src ? probe_prompt(tok, template_src) : NULL;
        int r = decide(template_src, probe, reasoning_opt, ret, why, why_size);
        free(probe);
        return r;
}

/* The text of the --chat-template file (NULL when it cannot be read: the workers refuse
 * it at start with the reason). */
static char *template_file(const char *path) {
        FILE *f = fopen(path, "rb");
        char *text = f ? malloc(TEMPLATE_FILE_MAX + 1) : NULL;
        size_t n = text ? fread(text, 1, TEMPLATE_FILE_MAX, f) : 0;
        if (text)
                text[n] = '\0';
        if (f)
                fclose(f);
        return text;
}

int sup_chat_format_detect(const struct sup_config *cfg, const struct sup_model *m, struct sup_chat_format *ret) {
        struct dse_diag diag = {{0}};
        struct dse_model *model = NULL;
        struct dse_tokenizer *tok = NULL;
        char why[160] = "";
        if (dse_model_open(m->path, 0, &model, &diag) == 0)
                dse_model_tokenizer(model, &tok, &diag);
        char *file = cfg->chat_template[0] ? template_file(cfg->chat_template) : NULL;
        const char *src = file ? file : tok ? dse_tokenizer_chat_template(tok) : NULL;
        int r = sup_chat_format_of(tok, src, cfg->reasoning_format, ret, why, sizeof why);
        free(file);
        if (r < 0)
                sup_log(3, "%s", why);
        else
                sup_log(6, "Chat output: reasoning %s%s, tool calls %s",
                        ret->reasoning ? "split into reasoning_content" : "left in content",
                        ret->think_opened ? " (the prompt opens the think block)" : "",
                        dsv_gateway_tool_format_to_string(ret->tools));
        dse_tokenizer_free(tok);
        dse_model_free(model);
        return r;
}
