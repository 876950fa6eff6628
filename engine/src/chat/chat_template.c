/* Public chat-template entry points: parse once, render per request (see dse.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "jinja.h"
#include "tok/tokenizer.h"

/* Bounds one render's memory: a template cannot make a request allocate without limit. */
#define RENDER_LIMIT_BYTES ((size_t)128 << 20)
#define PARSE_LIMIT_BYTES ((size_t)64 << 20)

static void prefix_diag(struct dse_diag *reterr, const char *what) {
        if (!reterr)
                return;
        struct dse_diag d = *reterr;
        snprintf(reterr->msg, sizeof reterr->msg, "%s: %.490s", what, d.msg);
}

struct dse_chat_template {
        struct jarena arena; /* the AST and its literals */
        struct jnode *root;
};

int dse_chat_template_new(const char *src, struct dse_chat_template **ret_tmpl, struct dse_diag *reterr) {
        if (!src || !ret_tmpl)
                return -EINVAL;
        struct dse_chat_template *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        dse__jarena_init(&t->arena, PARSE_LIMIT_BYTES);
        int r = dse__jinja_parse(&t->arena, src, &t->root, reterr);
        if (r < 0) {
                dse_chat_template_free(t);
                return r;
        }
        *ret_tmpl = t;
        return 0;
}

void dse_chat_template_free(struct dse_chat_template *tmpl) {
        if (!tmpl)
                return;
        dse__jarena_done(&tmpl->arena);
        free(tmpl);
}

int dse_chat_template_render(const struct dse_chat_template *tmpl, const char *messages_json, const char *tools_json,
                             int add_generation_prompt, const char *bos_token, const char *eos_token, char **ret_text,
                             struct dse_diag *reterr) {
        if (!tmpl || !messages_json || !ret_text)
                return -EINVAL;
        struct jarena a;
        dse__jarena_init(&a, RENDER_LIMIT_BYTES);
        struct jinja_vars vars = {.add_generation_prompt = !!add_generation_prompt, .bos_token = bos_token, .eos_token = eos_token};
        char *text = NULL;
        int r = dse__json_parse(&a, messages_json, &vars.messages, reterr);
        if (r < 0) {
                prefix_diag(reterr, "messages");
                goto out;
        }
        if (vars.messages->t != JT_LIST) {
                r = dse__fail(reterr, -EINVAL, "messages must be a JSON array");
                goto out;
        }
        if (tools_json) {
                r = dse__json_parse(&a, tools_json, &vars.tools, reterr);
                if (r < 0) {
                        prefix_diag(reterr, "tools");
                        goto out;
                }
        }
        r = dse__jinja_render(&a, tmpl->root, &vars, &text, reterr);
        if (r < 0) {
                if (r == -ENOMEM && reterr && !reterr->msg[0])
                        dse__fail(reterr, r, "chat template: out of memory (render limit %zu MiB)", RENDER_LIMIT_BYTES >> 20);
                goto out;
        }
        char *copy = malloc((size_t)r + 1);
        if (!copy) {
                r = -ENOMEM;
                goto out;
        }
        memcpy(copy, text, (size_t)r + 1);
        *ret_text = copy;
out:
        dse__jarena_done(&a);
        return r;
}

const char *dse_tokenizer_chat_template(const struct dse_tokenizer *tok) {
        return tok ? tok->chat_template : NULL;
}
