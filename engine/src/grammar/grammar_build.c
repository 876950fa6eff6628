/* Building a grammar rule by rule, then flattening it (grammar.h), and the check for
 * left recursion on a finished grammar. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

int dse__grammar_grow(void **items, uint32_t *cap, uint64_t need, size_t size) {
        if (need <= *cap)
                return 0;
        if (need > UINT32_MAX / 2)
                return -E2BIG;
        uint32_t n = *cap ? *cap : 8;
        while (n < need)
                n *= 2;
        void *p = realloc(*items, (size_t)n * size);
        if (!p)
                return -ENOMEM;
        *items = p;
        *cap = n;
        return 0;
}

void dse__grammar_builder_init(struct grammar_builder *b) {
        memset(b, 0, sizeof *b);
}

void dse__grammar_builder_done(struct grammar_builder *b) {
        for (uint32_t r = 0; r < b->n_rules; r++) {
                for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
                        free(b->rules[r].alts[a].elems);
                free(b->rules[r].alts);
        }
        free(b->rules);
        free(b->classes);
        memset(b, 0, sizeof *b);
}

int dse__grammar_rule_new(struct grammar_builder *b, uint32_t *ret_rule) {
        int r = dse__grammar_grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules);
        if (r < 0)
                return r;
        memset(&b->rules[b->n_rules], 0, sizeof *b->rules);
        *ret_rule = b->n_rules++;
        return 0;
}

int dse__grammar_alt_begin(struct grammar_builder *b, uint32_t rule) {
        struct grammar_rule_build *rb = &b->rules[rule];
        int r = dse__grammar_grow((void **)&rb->alts, &rb->cap_alts, rb->n_alts + 1, sizeof *rb->alts);
        if (r < 0)
                return r;
        memset(&rb->alts[rb->n_alts++], 0, sizeof *rb->alts);
        return 0;
}

static int push_elem(struct grammar_builder *b, uint32_t rule, enum grammar_elem_kind kind, uint32_t arg) {
        struct grammar_rule_build *rb = &b->rules[rule];
        struct grammar_alt_build *ab = &rb->alts[rb->n_alts - 1];
        if (b->n_elems_total >= GRAMMAR_MAX_ELEMS)
                return -E2BIG;
        int r = dse__grammar_grow((void **)&ab->elems, &ab->cap, ab->n + 1, sizeof *ab->elems);
        if (r < 0)
                return r;
        ab->elems[ab->n++] = (struct grammar_elem){.kind = kind, .arg = arg};
        b->n_elems_total++;
        return 0;
}

int dse__grammar_push_class(struct grammar_builder *b, uint32_t rule, const struct grammar_class *c) {
        /* classes repeat a lot (string characters, digits): share equal ones */
        uint32_t i;
        for (i = 0; i < b->n_classes; i++)
                if (!memcmp(&b->classes[i], c, sizeof *c))
                        break;
        if (i == b->n_classes) {
                int r = dse__grammar_grow((void **)&b->classes, &b->cap_classes, b->n_classes + 1, sizeof *b->classes);
                if (r < 0)
                        return r;
                b->classes[b->n_classes++] = *c;
        }
        return push_elem(b, rule, GRAMMAR_CLASS, i);
}

int dse__grammar_push_class_unshared(struct grammar_builder *b, uint32_t rule, const struct grammar_class *c,
                                     uint32_t *ret_class) {
        int r = dse__grammar_grow((void **)&b->classes, &b->cap_classes, b->n_classes + 1, sizeof *b->classes);
        if (r < 0)
                return r;
        b->classes[b->n_classes] = *c;
        *ret_class = b->n_classes++;
        return push_elem(b, rule, GRAMMAR_CLASS, *ret_class);
}

int dse__grammar_push_byte(struct grammar_builder *b, uint32_t rule, uint8_t byte) {
        struct grammar_class c = {{0}};
        grammar_class_add_range(&c, byte, byte);
        return dse__grammar_push_class(b, rule, &c);
}

int dse__grammar_push_bytes(struct grammar_builder *b, uint32_t rule, const char *s, size_t n) {
        for (size_t i = 0; i < n; i++) {
                int r = dse__grammar_push_byte(b, rule, (uint8_t)s[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

int dse__grammar_push_ref(struct grammar_builder *b, uint32_t rule, uint32_t ref) {
        return push_elem(b, rule, GRAMMAR_REF, ref);
}

int dse__grammar_rule_repeat(struct grammar_builder *b, uint32_t item, uint32_t min, uint32_t max, uint32_t *ret_rule) {
        if (min > GRAMMAR_MAX_REPEAT || (max != UINT32_MAX && max > GRAMMAR_MAX_REPEAT))
                return -E2BIG;
        uint32_t tail = GRAMMAR_NIL, rule;
        if (max == UINT32_MAX) {
                /* tail ::= item tail | (nothing) */
                GRAMMAR_TRY(dse__grammar_rule_new(b, &tail));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, tail));
                GRAMMAR_TRY(dse__grammar_push_ref(b, tail, item));
                GRAMMAR_TRY(dse__grammar_push_ref(b, tail, tail));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, tail));
        } else {
                /* optional_k ::= item optional_(k-1) | (nothing), for the max - min optional ones */
                for (uint32_t k = min; k < max; k++) {
                        uint32_t o;
                        GRAMMAR_TRY(dse__grammar_rule_new(b, &o));
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, o));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, o, item));
                        if (tail != GRAMMAR_NIL)
                                GRAMMAR_TRY(dse__grammar_push_ref(b, o, tail));
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, o));
                        tail = o;
                }
        }
        GRAMMAR_TRY(dse__grammar_rule_new(b, &rule));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        for (uint32_t k = 0; k < min; k++)
                GRAMMAR_TRY(dse__grammar_push_ref(b, rule, item));
        if (tail != GRAMMAR_NIL)
                GRAMMAR_TRY(dse__grammar_push_ref(b, rule, tail));
        *ret_rule = rule;
        return 0;
}

int dse__grammar_builder_finish(struct grammar_builder *b, uint32_t root, struct dse_grammar **ret_g) {
        struct dse_grammar *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        uint32_t n_alts = 0;
        for (uint32_t r = 0; r < b->n_rules; r++)
                n_alts += b->rules[r].n_alts;
        g->elems = malloc(((size_t)b->n_elems_total + n_alts) * sizeof *g->elems);
        g->alt_start = malloc(((size_t)n_alts + 1) * sizeof *g->alt_start);
        g->rules = malloc(((size_t)b->n_rules + 1) * sizeof *g->rules);
        g->classes = malloc(((size_t)b->n_classes + 1) * sizeof *g->classes);
        int r = dse__grammar_mask_cache_new(&g->cache);
        if (r < 0 || !g->elems || !g->alt_start || !g->rules || !g->classes) {
                dse_grammar_free(g);
                return -ENOMEM;
        }
        for (uint32_t r = 0; r < b->n_rules; r++) {
                const struct grammar_rule_build *rb = &b->rules[r];
                g->rules[r] = (struct grammar_rule){.first_alt = g->n_alt_start, .n_alts = rb->n_alts};
                for (uint32_t a = 0; a < rb->n_alts; a++) {
                        g->alt_start[g->n_alt_start++] = g->n_elems;
                        if (rb->alts[a].n > 0) /* an empty alternative has no elems array */
                                memcpy(g->elems + g->n_elems, rb->alts[a].elems, rb->alts[a].n * sizeof *g->elems);
                        g->n_elems += rb->alts[a].n;
                        g->elems[g->n_elems++] = (struct grammar_elem){.kind = GRAMMAR_END, .arg = 0};
                }
        }
        g->n_rules = b->n_rules;
        if (b->n_classes > 0)
                memcpy(g->classes, b->classes, b->n_classes * sizeof *g->classes);
        g->n_classes = b->n_classes;
        g->root = root;
        *ret_g = g;
        return 0;
}

int dse__grammar_builder_complete(struct grammar_builder *b, int r, uint32_t root, struct dse_grammar **ret_g,
                                  struct dse_diag *reterr) {
        struct dse_grammar *g = NULL;
        if (r == 0)
                r = dse__grammar_builder_finish(b, root, &g);
        if (r == 0 && (r = dse__grammar_check(g, reterr)) < 0) {
                dse_grammar_free(g);
                g = NULL;
        }
        dse__grammar_builder_done(b);
        if (r == 0)
                *ret_g = g;
        return r;
}

int dse__grammar_vfail(struct dse_diag *reterr, int err, const char *prefix, const char *fmt, va_list ap) {
        if (reterr) {
                int n = snprintf(reterr->msg, sizeof reterr->msg, "%s", prefix);
                if (n >= 0 && (size_t)n < sizeof reterr->msg)
                        vsnprintf(reterr->msg + n, sizeof reterr->msg - (size_t)n, fmt, ap);
        }
        return err;
}

void dse_grammar_free(struct dse_grammar *g) {
        if (!g)
                return;
        free(g->elems);
        free(g->alt_start);
        free(g->rules);
        free(g->classes);
        free(g->specials);
        dse__grammar_mask_cache_free(g->cache);
        free(g);
}

/* nullable[r]: rule r can match the empty string (a fixpoint over all rules) */
static uint8_t *nullable_rules(const struct dse_grammar *g) {
        uint8_t *nullable = calloc(g->n_rules + 1, 1);
        if (!nullable)
                return NULL;
        for (int changed = 1; changed;) {
                changed = 0;
                for (uint32_t r = 0; r < g->n_rules; r++) {
                        if (nullable[r])
                                continue;
                        for (uint32_t a = 0; a < g->rules[r].n_alts && !nullable[r]; a++) {
                                const struct grammar_elem *e = g->elems + g->alt_start[g->rules[r].first_alt + a];
                                while (e->kind == GRAMMAR_REF && nullable[e->arg])
                                        e++;
                                if (e->kind == GRAMMAR_END)
                                        nullable[r] = changed = 1;
                        }
                }
        }
        return nullable;
}

/* Depth-first search over "r can start with rule s without consuming a byte";
 * state: 0 unseen, 1 on the path, 2 done. */
static int left_dfs(const struct dse_grammar *g, const uint8_t *nullable, uint8_t *state, uint32_t r,
                    uint32_t depth, struct dse_diag *reterr) {
        if (state[r] == 2)
                return 0;
        if (state[r] == 1 || depth > 10000) {
                if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg,
                                 "grammar rule %u can reach itself without consuming a byte (left recursion, "
                                 "e.g. a $ref cycle that never enters an object or array, or a repetition of "
                                 "something that can match nothing)",
                                 r);
                return -ELOOP;
        }
        state[r] = 1;
        for (uint32_t a = 0; a < g->rules[r].n_alts; a++) {
                const struct grammar_elem *e = g->elems + g->alt_start[g->rules[r].first_alt + a];
                for (; e->kind == GRAMMAR_REF; e++) {
                        int ret = left_dfs(g, nullable, state, e->arg, depth + 1, reterr);
                        if (ret < 0)
                                return ret;
                        if (!nullable[e->arg])
                                break;
                }
        }
        state[r] = 2;
        return 0;
}

int dse__grammar_check(const struct dse_grammar *g, struct dse_diag *reterr) {
        uint8_t *nullable = nullable_rules(g);
        uint8_t *state = calloc(g->n_rules + 1, 1);
        int r = nullable && state ? 0 : -ENOMEM;
        for (uint32_t i = 0; i < g->n_rules && r == 0; i++)
                r = left_dfs(g, nullable, state, i, 0, reterr);
        free(nullable);
        free(state);
        return r;
}
