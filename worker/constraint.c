/* Grammar cache and per-sequence constraints (see constraint.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constraint.h"
#include "sampling.h"

/* Any JSON object: what response_format json_object asks for. */
static const char json_object_schema[] = "{\"type\":\"object\"}";

struct cache_entry {
        struct dse_grammar *g; /* NULL: free */
        uint64_t hash;
        enum dsv_ipc_constraint kind;
        char *text;
        int refs;
        uint64_t last_use;
};

struct grammar_cache {
        const struct dse_tokenizer *tok;
        struct dse_grammar_vocab *vocab; /* built on first use */
        struct cache_entry *e;
        int n;
        uint64_t clock;
        int64_t hits, compiles;
};

int grammar_cache_new(const struct dse_tokenizer *tok, int n_users, struct grammar_cache **ret_cache) {
        if (!ret_cache || n_users < 0)
                return -EINVAL;
        struct grammar_cache *gc = calloc(1, sizeof *gc);
        if (!gc)
                return -ENOMEM;
        gc->tok = tok;
        gc->n = n_users + GRAMMAR_CACHE_IDLE;
        if (!(gc->e = calloc((size_t)gc->n, sizeof *gc->e))) {
                free(gc);
                return -ENOMEM;
        }
        *ret_cache = gc;
        return 0;
}

static void entry_clear(struct cache_entry *e) {
        dse_grammar_free(e->g);
        free(e->text);
        memset(e, 0, sizeof *e);
}

void grammar_cache_free(struct grammar_cache *gc) {
        if (!gc)
                return;
        for (int i = 0; i < gc->n; i++)
                entry_clear(&gc->e[i]);
        free(gc->e);
        dse_grammar_vocab_free(gc->vocab);
        free(gc);
}

const struct dse_grammar_vocab *grammar_cache_vocab(struct grammar_cache *gc, struct dse_diag *diag) {
        if (!gc->vocab) {
                if (!gc->tok) {
                        if (diag)
                                snprintf(diag->msg, sizeof diag->msg, "structured output needs a model with a tokenizer");
                        return NULL;
                }
                if (dse_grammar_vocab_new(gc->tok, &gc->vocab, diag) < 0)
                        return NULL;
        }
        return gc->vocab;
}

void grammar_cache_get_stats(const struct grammar_cache *gc, struct grammar_cache_stats *st) {
        memset(st, 0, sizeof *st);
        st->hits = gc->hits;
        st->compiles = gc->compiles;
        for (int i = 0; i < gc->n; i++)
                st->cached += gc->e[i].g != NULL;
}

/* FNV-1a over the kind and the text. */
static uint64_t key_hash(enum dsv_ipc_constraint kind, const char *text) {
        uint64_t h = 0xcbf29ce484222325ull;
        h = (h ^ (uint64_t)kind) * 0x100000001b3ull;
        for (const unsigned char *p = (const unsigned char *)text; *p; p++)
                h = (h ^ *p) * 0x100000001b3ull;
        return h;
}

static int compile(const struct dsv_ipc_request *req, const struct dse_tokenizer *tok, struct dse_grammar **ret,
                   struct dse_diag *diag) {
        const char *text = req->constraint_text;
        switch (req->constraint) {
        case DSV_IPC_CONSTRAINT_JSON_SCHEMA:
                return dse_grammar_compile_json_schema(text, strlen(text), ret, diag);
        case DSV_IPC_CONSTRAINT_JSON_OBJECT:
                return dse_grammar_compile_json_schema(json_object_schema, sizeof json_object_schema - 1, ret, diag);
        case DSV_IPC_CONSTRAINT_REGEX:
                return dse_grammar_compile_regex(text, strlen(text), ret, diag);
        case DSV_IPC_CONSTRAINT_GRAMMAR:
                return dse_grammar_compile_gbnf(text, strlen(text), ret, diag);
        case DSV_IPC_CONSTRAINT_COMPOSED:
                return dse_grammar_compile_composed(text, strlen(text), tok, ret, diag);
        case DSV_IPC_CONSTRAINT_CHOICE:
                return dse_grammar_compile_choice((const char *const *)req->choices, req->n_choices, ret, diag);
        default:
                return -EINVAL;
        }
}

/* The cache key's text: the constraint text, or the choices each as "<length>:<bytes>"
 * (so no choice list reads as another). A malloc'd string. */
static char *key_text(const struct dsv_ipc_request *req) {
        if (req->constraint != DSV_IPC_CONSTRAINT_CHOICE)
                return strdup(req->constraint_text ? req->constraint_text : "");
        size_t n = 1;
        for (size_t i = 0; i < req->n_choices; i++)
                n += strlen(req->choices[i]) + 21;
        char *k = malloc(n), *at = k;
        for (size_t i = 0; k && i < req->n_choices; i++)
                at += snprintf(at, n - (size_t)(at - k), "%zu:%s", strlen(req->choices[i]), req->choices[i]);
        if (k)
                *at = 0;
        return k;
}

/* The entry for the request's constraint with a reference taken, compiling on a miss.
 * text is the key text (key_text), owned by the cache from here. */
static int acquire(struct grammar_cache *gc, const struct dsv_ipc_request *req, char *text, struct dse_diag *diag) {
        enum dsv_ipc_constraint kind = req->constraint;
        uint64_t h = key_hash(kind, text);
        gc->clock++;
        for (int i = 0; i < gc->n; i++) {
                struct cache_entry *e = &gc->e[i];
                if (e->g && e->hash == h && e->kind == kind && strcmp(e->text, text) == 0) {
                        e->refs++;
                        e->last_use = gc->clock;
                        gc->hits++;
                        free(text);
                        return i;
                }
        }
        struct dse_grammar *g = NULL;
        int r = compile(req, gc->tok, &g, diag);
        if (r < 0) {
                free(text);
                return r;
        }
        gc->compiles++;
        /* The least recently used idle grammar makes room once GRAMMAR_CACHE_IDLE are
         * idle; before that a free entry exists (users hold at most n_users entries). */
        int pick = -1, lru = -1, idle = 0;
        for (int i = 0; i < gc->n; i++) {
                const struct cache_entry *e = &gc->e[i];
                if (!e->g && pick < 0)
                        pick = i;
                if (e->g && e->refs == 0) {
                        idle++;
                        if (lru < 0 || e->last_use < gc->e[lru].last_use)
                                lru = i;
                }
        }
        if (idle >= GRAMMAR_CACHE_IDLE || pick < 0)
                pick = lru;
        if (pick < 0) {
                dse_grammar_free(g);
                free(text);
                return -EBUSY;
        }
        struct cache_entry *e = &gc->e[pick];
        entry_clear(e);
        *e = (struct cache_entry){g, h, kind, text, 1, gc->clock};
        return pick;
}

int constraint_init(struct constraint *c, struct grammar_cache *gc, const struct dsv_ipc_request *req,
                    struct dse_diag *diag) {
        memset(c, 0, sizeof *c);
        enum dsv_ipc_constraint kind = req->constraint;
        if (kind == DSV_IPC_CONSTRAINT_NONE)
                return 0;
        int has_input = kind == DSV_IPC_CONSTRAINT_CHOICE        ? req->choices != NULL
                        : kind == DSV_IPC_CONSTRAINT_JSON_OBJECT ? 1
                                                                 : req->constraint_text != NULL;
        if (kind >= DSV_IPC_CONSTRAINT_COUNT || !has_input)
                return -EINVAL;
        const struct dse_grammar_vocab *v = grammar_cache_vocab(gc, diag);
        if (!v)
                return -EINVAL;
        char *text = key_text(req);
        if (!text)
                return -ENOMEM;
        int entry = acquire(gc, req, text, diag);
        if (entry < 0)
                return entry;
        c->entry = entry + 1;
        int r = dse_grammar_matcher_new(gc->e[entry].g, &c->m, diag);
        if (r >= 0)
                r = dse_grammar_matcher_new(gc->e[entry].g, &c->ahead, diag);
        if (r >= 0 && (!(c->mask = calloc(dse_grammar_vocab_mask_words(v), sizeof *c->mask)) ||
                       !(c->ahead_mask = calloc(dse_grammar_vocab_mask_words(v), sizeof *c->ahead_mask))))
                r = -ENOMEM;
        if (r < 0)
                constraint_done(c, gc);
        return r;
}

void constraint_done(struct constraint *c, struct grammar_cache *gc) {
        dse_grammar_matcher_free(c->m);
        free(c->mask);
        dse_grammar_matcher_free(c->ahead);
        free(c->ahead_mask);
        if (c->entry > 0 && gc->e[c->entry - 1].refs > 0)
                gc->e[c->entry - 1].refs--;
        memset(c, 0, sizeof *c);
}

int constraint_fill_mask(struct constraint *c, const struct grammar_cache *gc) {
        if (!c->mask_current) {
                c->n_allowed = dse_grammar_matcher_fill_mask(c->m, gc->vocab, c->mask);
                c->mask_current = c->n_allowed >= 0;
        }
        return c->n_allowed;
}

int constraint_accept(struct constraint *c, const struct grammar_cache *gc, int32_t id) {
        c->mask_current = 0;
        return dse_grammar_matcher_accept_token(c->m, gc->vocab, id);
}

int constraint_forced_run(struct constraint *c, const struct grammar_cache *gc, int32_t n_vocab, int32_t eos,
                          int max, int32_t *run) {
        int n = constraint_fill_mask(c, gc);
        if (n != 1 || max < 1)
                return n < 0 ? n : 0;
        int32_t only = sampling_mask_single(c->mask, n_vocab);
        if (only < 0 || only == eos)
                return 0;
        run[0] = only;
        if (max == 1)
                return 1;
        int r = dse_grammar_matcher_copy(c->ahead, c->m);
        for (n = 1; r == 0 && n < max; n++) {
                if ((r = dse_grammar_matcher_accept_token(c->ahead, gc->vocab, run[n - 1])) < 0 ||
                    (r = dse_grammar_matcher_fill_mask(c->ahead, gc->vocab, c->ahead_mask)) != 1)
                        break;
                only = sampling_mask_single(c->ahead_mask, n_vocab);
                if (only < 0 || only == eos)
                        break;
                run[n] = only;
                r = 0;
        }
        return n; /* a failed look-ahead only ends the run: the state itself is untouched */
}

int constraint_accepting(const struct constraint *c) {
        return dse_grammar_matcher_is_accepting(c->m);
}
