/* Grammar cache and per-sequence constraints (see constraint.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constraint.h"

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

static int compile(enum dsv_ipc_constraint kind, const char *text, struct dse_grammar **ret, struct dse_diag *diag) {
        switch (kind) {
        case DSV_IPC_CONSTRAINT_JSON_SCHEMA:
                return dse_grammar_compile_json_schema(text, strlen(text), ret, diag);
        case DSV_IPC_CONSTRAINT_JSON_OBJECT:
                return dse_grammar_compile_json_schema(json_object_schema, sizeof json_object_schema - 1, ret, diag);
        default:
                return -EINVAL;
        }
}

/* The entry for kind/text with a reference taken, compiling on a miss. */
static int acquire(struct grammar_cache *gc, enum dsv_ipc_constraint kind, const char *text, struct dse_diag *diag) {
        uint64_t h = key_hash(kind, text);
        gc->clock++;
        for (int i = 0; i < gc->n; i++) {
                struct cache_entry *e = &gc->e[i];
                if (e->g && e->hash == h && e->kind == kind && strcmp(e->text, text) == 0) {
                        e->refs++;
                        e->last_use = gc->clock;
                        gc->hits++;
                        return i;
                }
        }
        struct dse_grammar *g = NULL;
        int r = compile(kind, text, &g, diag);
        if (r < 0)
                return r;
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
        char *copy = pick >= 0 ? strdup(text) : NULL;
        if (!copy) {
                dse_grammar_free(g);
                return pick < 0 ? -EBUSY : -ENOMEM;
        }
        struct cache_entry *e = &gc->e[pick];
        entry_clear(e);
        *e = (struct cache_entry){g, h, kind, copy, 1, gc->clock};
        return pick;
}

int constraint_init(struct constraint *c, struct grammar_cache *gc, enum dsv_ipc_constraint kind, const char *text,
                    struct dse_diag *diag) {
        memset(c, 0, sizeof *c);
        if (kind == DSV_IPC_CONSTRAINT_NONE)
                return 0;
        if (kind >= DSV_IPC_CONSTRAINT_COUNT || (kind == DSV_IPC_CONSTRAINT_JSON_SCHEMA && !text))
                return -EINVAL;
        const struct dse_grammar_vocab *v = grammar_cache_vocab(gc, diag);
        if (!v)
                return -EINVAL;
        int entry = acquire(gc, kind, text ? text : "", diag);
        if (entry < 0)
                return entry;
        c->entry = entry + 1;
        int r = dse_grammar_matcher_new(gc->e[entry].g, &c->m, diag);
        if (r >= 0 && !(c->mask = calloc(dse_grammar_vocab_mask_words(v), sizeof *c->mask)))
                r = -ENOMEM;
        if (r < 0)
                constraint_done(c, gc);
        return r;
}

void constraint_done(struct constraint *c, struct grammar_cache *gc) {
        dse_grammar_matcher_free(c->m);
        free(c->mask);
        if (c->entry > 0 && gc->e[c->entry - 1].refs > 0)
                gc->e[c->entry - 1].refs--;
        memset(c, 0, sizeof *c);
}

int constraint_fill_mask(struct constraint *c, const struct grammar_cache *gc) {
        c->n_allowed = dse_grammar_matcher_fill_mask(c->m, gc->vocab, c->mask);
        return c->n_allowed;
}

int constraint_accept(struct constraint *c, const struct grammar_cache *gc, int32_t id) {
        return dse_grammar_matcher_accept_token(c->m, gc->vocab, id);
}

int constraint_accepting(const struct constraint *c) {
        return dse_grammar_matcher_is_accepting(c->m);
}
