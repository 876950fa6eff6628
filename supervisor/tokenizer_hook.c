/* tokenizer_hook.c — /tokenize and /detokenize for the gateway: the served model's
 * tokenizer and chat template, loaded once in the supervisor (the gateway links no
 * engine), rendering and encoding exactly as a worker does for a request
 * (worker/serve.c: the template writes BOS itself, so chats are encoded without
 * add_special unless asked). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dse.h"
#include "dsv_gateway.h"
#include "sup.h"

static int encode(void *userdata, const char *text, const char *messages_json, bool add_special_tokens,
                  bool add_generation_prompt, int32_t *ids, size_t cap, char *err, size_t err_size) {
        const struct sup_tokenizer *t = userdata;
        char *rendered = NULL;
        if (messages_json) {
                if (!t->chat) {
                        snprintf(err, err_size, "the model has no usable chat template");
                        return -EINVAL;
                }
                struct dse_diag diag = {{0}};
                int bos = dse_tokenizer_bos(t->tok), eos = dse_tokenizer_eos(t->tok);
                int r = dse_chat_template_render(t->chat, messages_json, NULL, add_generation_prompt,
                                                 bos >= 0 ? dse_tokenizer_piece(t->tok, bos) : NULL,
                                                 eos >= 0 ? dse_tokenizer_piece(t->tok, eos) : NULL, &rendered, &diag);
                if (r < 0) {
                        snprintf(err, err_size, "%s", diag.msg[0] ? diag.msg : strerror(-r));
                        return r == -EOPNOTSUPP || r == -E2BIG ? -EINVAL : r;
                }
                text = rendered;
        }
        int n = dse_tokenizer_encode(t->tok, text, strlen(text), add_special_tokens, ids, cap);
        if (n == -EILSEQ)
                snprintf(err, err_size, "the text is not valid UTF-8");
        free(rendered);
        return n;
}

static int decode(void *userdata, const int32_t *ids, size_t n_ids, char **ret_text, char *err, size_t err_size) {
        const struct sup_tokenizer *t = userdata;
        int n = dse_tokenizer_decode(t->tok, ids, n_ids, NULL, 0);
        char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (n >= 0 && !text)
                return -ENOMEM;
        if (n >= 0)
                n = dse_tokenizer_decode(t->tok, ids, n_ids, text, (size_t)n);
        if (n < 0) {
                free(text);
                if (n == -EINVAL)
                        snprintf(err, err_size, "a token id is outside the vocabulary (%d)", dse_tokenizer_n_vocab(t->tok));
                return n;
        }
        text[n] = 0;
        *ret_text = text;
        return 0;
}

int sup_tokenizer_setup(struct sup *s) {
        struct sup_tokenizer *t = &s->tokenizer;
        int r = dsv_tokenizer_load_arg(s->model.path, NULL, &t->tok);
        if (r == -ENOENT) {
                sup_log(4, "The model has no tokenizer: /tokenize and /detokenize answer 501");
                return 0;
        }
        if (r < 0)
                return r;
        struct dse_diag diag = {{0}};
        const char *src = dse_tokenizer_chat_template(t->tok);
        if (s->cfg.chat_template[0]) {
                if ((r = dse_chat_template_load(s->cfg.chat_template, &t->chat, &diag)) < 0) {
                        sup_log(3, "--chat-template: %s", diag.msg[0] ? diag.msg : strerror(-r));
                        return r;
                }
        } else if (src && dse_chat_template_new(src, &t->chat, &diag) < 0) {
                /* as the workers do: chats fail, the rest is served */
                sup_log(4, "The model's chat template is unusable (%s): /tokenize of messages will fail, ignoring",
                        diag.msg);
        }
        dsv_gateway_set_tokenizer(s->env.gw,
                                  &(struct dsv_gateway_tokenizer){.encode = encode, .decode = decode, .userdata = t});
        return 0;
}

void sup_tokenizer_done(struct sup_tokenizer *t) {
        dse_chat_template_free(t->chat);
        dse_tokenizer_free(t->tok);
        *t = (struct sup_tokenizer){0};
}
