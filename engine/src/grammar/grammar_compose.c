/* Composed grammars: a JSON description of parts (literal text, special tokens, JSON
 * Schema values, sequences, alternatives, repetitions) compiled into one grammar, and the
 * special tokens' place in masks. A special token is a token of the tokenizer admitted by
 * its id: its position in the grammar is a class element of an empty class of its own, so
 * no byte (and so no spelling in ordinary tokens) gets past it, and the masks set its id
 * exactly where a stack waits on that class. Its id is cleared everywhere else, so a
 * tool-call marker never turns up inside a JSON string either. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/schema.h"

/* Nesting of parts beyond this is refused. */
#define COMPOSE_MAX_DEPTH 64

struct compose_special {
        char *text;
        int32_t id;
        uint32_t rule; /* the rule holding just this token, defined last */
};

struct compose_ctx {
        struct grammar_builder b;
        const struct dse_tokenizer *tok;
        struct dse_diag *reterr;
        struct compose_special *specials;
        uint32_t n_specials, cap_specials;
        char path[256]; /* where the part being compiled sits, e.g. "sequence[2].one_of[0]" */
        int depth;
};

static int fail(struct compose_ctx *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct compose_ctx *c, int err, const char *fmt, ...) {
        char prefix[300];
        snprintf(prefix, sizeof prefix, "composed grammar at %s: ", c->path[0] ? c->path : "the root");
        va_list ap;
        va_start(ap, fmt);
        dse__grammar_vfail(c->reterr, err, prefix, fmt, ap);
        va_end(ap);
        return err;
}

/* The one token whose text is text: its id, or -EINVAL when the tokenizer writes the
 * text as several tokens (or none). The token is that text when its piece is (a control
 * token, which decodes to nothing) or when it decodes to it (an added token). */
static int special_id(struct compose_ctx *c, const char *text, int32_t *ret_id) {
        int32_t ids[2];
        size_t len = strlen(text);
        int n = dse_tokenizer_encode(c->tok, text, len, 0, ids, 2);
        if (n < 0)
                return fail(c, n, "special token '%.64s': the tokenizer cannot encode it", text);
        char back[512];
        const char *piece = n == 1 ? dse_tokenizer_piece(c->tok, ids[0]) : NULL;
        int m = n == 1 ? dse_tokenizer_decode(c->tok, ids, 1, back, sizeof back) : -1;
        bool same = (piece && strcmp(piece, text) == 0) || (m >= 0 && (size_t)m == len && memcmp(back, text, len) == 0);
        if (!same)
                return fail(c, -EINVAL, "special token '%.64s' is not one token of the tokenizer", text);
        /* EOS is the mask's own: allowed exactly where the whole output may end */
        if (ids[0] == dse_tokenizer_eos(c->tok))
                return fail(c, -EINVAL, "special token '%.64s' is the end-of-sequence token, which ends the output "
                                        "where the grammar is complete", text);
        *ret_id = ids[0];
        return 0;
}

/* The rule of the special token text, reserved on its first use. */
static int special_rule(struct compose_ctx *c, const char *text, uint32_t *ret_rule) {
        for (uint32_t i = 0; i < c->n_specials; i++)
                if (strcmp(c->specials[i].text, text) == 0) {
                        *ret_rule = c->specials[i].rule;
                        return 0;
                }
        int32_t id = -1;
        GRAMMAR_TRY(special_id(c, text, &id));
        GRAMMAR_TRY(dse__grammar_grow((void **)&c->specials, &c->cap_specials, (uint64_t)c->n_specials + 1,
                                      sizeof *c->specials));
        struct compose_special *s = &c->specials[c->n_specials];
        if (!(s->text = strdup(text)))
                return -ENOMEM;
        s->id = id;
        c->n_specials++;
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &s->rule));
        *ret_rule = s->rule;
        return 0;
}

static int compile_part(struct compose_ctx *c, const cJSON *part, uint32_t *ret_rule);

/* Compiles the element index of list (the members of "sequence" or "one_of") with the
 * path extended by "key[index]". */
static int compile_member(struct compose_ctx *c, const char *key, int index, const cJSON *item, uint32_t *ret_rule) {
        size_t len = strlen(c->path);
        snprintf(c->path + len, sizeof c->path - len, "%s%s[%d]", len ? "." : "", key, index);
        int r = compile_part(c, item, ret_rule);
        if (r == 0)
                c->path[len] = '\0'; /* an error keeps the path of the part at fault */
        return r;
}

static int compile_list(struct compose_ctx *c, const char *key, const cJSON *list, int is_sequence,
                        uint32_t *ret_rule) {
        if (!cJSON_IsArray(list) || !list->child)
                return fail(c, -EINVAL, "'%s' must be a non-empty array of parts", key);
        uint32_t rule;
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &rule));
        if (is_sequence)
                GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule));
        int i = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, list) {
                uint32_t sub;
                GRAMMAR_TRY(compile_member(c, key, i++, item, &sub));
                if (!is_sequence)
                        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule));
                GRAMMAR_TRY(dse__grammar_push_ref(&c->b, rule, sub));
        }
        *ret_rule = rule;
        return 0;
}

/* A count of "min"/"max": a whole number 0..GRAMMAR_MAX_REPEAT; absent gives dflt. */
static int repeat_bound(struct compose_ctx *c, const cJSON *part, const char *key, uint32_t dflt, uint32_t *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(part, key);
        if (!v) {
                *ret = dflt;
                return 0;
        }
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > GRAMMAR_MAX_REPEAT ||
            v->valuedouble != (double)(uint32_t)v->valuedouble)
                return fail(c, -EINVAL, "'%s' must be a whole number from 0 to %d", key, GRAMMAR_MAX_REPEAT);
        *ret = (uint32_t)v->valuedouble;
        return 0;
}

/* {"repeat": part, "min": m, "max": n, "separator": part}: m to n parts (no "max": no
 * limit), the separator between two of them: part (separator part){m-1,n-1}, or nothing
 * as well when m is 0. */
static int compile_repeat(struct compose_ctx *c, const cJSON *part, uint32_t *ret_rule) {
        uint32_t min = 1, max = UINT32_MAX, item, rule;
        GRAMMAR_TRY(repeat_bound(c, part, "min", 1, &min));
        GRAMMAR_TRY(repeat_bound(c, part, "max", UINT32_MAX, &max));
        if (max < min || max == 0)
                return fail(c, -EINVAL, "'max' must be at least 1 and at least 'min'");
        GRAMMAR_TRY(compile_member(c, "repeat", 0, cJSON_GetObjectItemCaseSensitive(part, "repeat"), &item));
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(part, "separator");
        uint32_t rest = item;
        if (sep) {
                uint32_t sep_rule;
                GRAMMAR_TRY(compile_member(c, "separator", 0, sep, &sep_rule));
                GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &rest));
                GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rest));
                GRAMMAR_TRY(dse__grammar_push_ref(&c->b, rest, sep_rule));
                GRAMMAR_TRY(dse__grammar_push_ref(&c->b, rest, item));
        }
        uint32_t tail;
        GRAMMAR_TRY(dse__grammar_rule_repeat(&c->b, rest, min ? min - 1 : 0, max == UINT32_MAX ? max : max - 1, &tail));
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &rule));
        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule));
        GRAMMAR_TRY(dse__grammar_push_ref(&c->b, rule, item));
        GRAMMAR_TRY(dse__grammar_push_ref(&c->b, rule, tail));
        if (min == 0)
                GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule)); /* or nothing */
        *ret_rule = rule;
        return 0;
}

static int compile_part(struct compose_ctx *c, const cJSON *part, uint32_t *ret_rule) {
        if (!cJSON_IsObject(part))
                return fail(c, -EINVAL, "a part must be an object");
        if (++c->depth > COMPOSE_MAX_DEPTH)
                return fail(c, -E2BIG, "parts nest deeper than %d", COMPOSE_MAX_DEPTH);
        const cJSON *v;
        int r;
        if ((v = cJSON_GetObjectItemCaseSensitive(part, "text"))) {
                if (!cJSON_IsString(v))
                        return fail(c, -EINVAL, "'text' must be a string");
                r = dse__grammar_rule_new(&c->b, ret_rule);
                if (r == 0)
                        r = dse__grammar_alt_begin(&c->b, *ret_rule);
                if (r == 0)
                        r = dse__grammar_push_bytes(&c->b, *ret_rule, v->valuestring, strlen(v->valuestring));
        } else if ((v = cJSON_GetObjectItemCaseSensitive(part, "special"))) {
                if (!cJSON_IsString(v) || !v->valuestring[0])
                        return fail(c, -EINVAL, "'special' must be the text of a token");
                r = special_rule(c, v->valuestring, ret_rule);
        } else if ((v = cJSON_GetObjectItemCaseSensitive(part, "json_schema"))) {
                if (!cJSON_IsObject(v) && !cJSON_IsBool(v))
                        return fail(c, -EINVAL, "'json_schema' must be a schema (an object or a boolean)");
                struct dse_diag diag = {{0}};
                r = dse__schema_compile_into(&c->b, v, ret_rule, &diag);
                if (r < 0)
                        return fail(c, r, "json_schema: %s", diag.msg);
        } else if ((v = cJSON_GetObjectItemCaseSensitive(part, "sequence"))) {
                r = compile_list(c, "sequence", v, 1, ret_rule);
        } else if ((v = cJSON_GetObjectItemCaseSensitive(part, "one_of"))) {
                r = compile_list(c, "one_of", v, 0, ret_rule);
        } else if (cJSON_GetObjectItemCaseSensitive(part, "repeat")) {
                r = compile_repeat(c, part, ret_rule);
        } else {
                return fail(c, -EINVAL, "a part needs one of 'text', 'special', 'json_schema', 'sequence', "
                                        "'one_of', 'repeat'");
        }
        c->depth--;
        return r;
}

/* Defines each special token's rule as one element of a class of its own. Done after
 * everything else, so no later class is shared with one of them. */
static int define_specials(struct compose_ctx *c, struct grammar_special *out) {
        static const struct grammar_class none = {{0}};
        for (uint32_t i = 0; i < c->n_specials; i++) {
                out[i].id = c->specials[i].id;
                GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, c->specials[i].rule));
                GRAMMAR_TRY(dse__grammar_push_class_unshared(&c->b, c->specials[i].rule, &none, &out[i].cls));
        }
        return 0;
}

int dse_grammar_compile_composed(const char *spec_json, size_t len, const struct dse_tokenizer *tok,
                                 struct dse_grammar **ret_grammar, struct dse_diag *reterr) {
        if (!spec_json || !tok || !ret_grammar)
                return -EINVAL;
        cJSON *spec = cJSON_ParseWithLength(spec_json, len);
        if (!spec) {
                if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg, "the composed grammar is not valid JSON");
                return -EBADMSG;
        }
        struct compose_ctx c = {.tok = tok, .reterr = reterr};
        dse__grammar_builder_init(&c.b);
        uint32_t root = GRAMMAR_NIL;
        struct grammar_special *specials = NULL;
        int r = compile_part(&c, spec, &root);
        if (r == 0 && c.n_specials && !(specials = calloc(c.n_specials, sizeof *specials)))
                r = -ENOMEM;
        if (r == 0)
                r = define_specials(&c, specials);
        if (r == -ENOMEM)
                fail(&c, r, "out of memory");
        else if (r == -E2BIG && reterr && !reterr->msg[0])
                fail(&c, r, "the grammar grew past its size limit");
        struct dse_grammar *g = NULL;
        r = dse__grammar_builder_complete(&c.b, r, root, &g, reterr);
        if (r == 0) {
                g->specials = specials;
                g->n_specials = c.n_specials;
                specials = NULL;
                *ret_grammar = g;
        }
        free(specials);
        for (uint32_t i = 0; i < c.n_specials; i++)
                free(c.specials[i].text);
        free(c.specials);
        cJSON_Delete(spec);
        return r;
}

/* 1 when a stack of the current state waits on class cls. */
static int waits_on(const struct dse_grammar_matcher *m, uint32_t cls) {
        for (uint32_t i = m->cur_begin; i < m->cur_end; i++) {
                uint32_t t = m->tops[i];
                if (t < GRAMMAR_POPPED) {
                        struct grammar_elem e = m->g->elems[m->frames[t].pos];
                        if (e.kind == GRAMMAR_CLASS && e.arg == cls)
                                return 1;
                }
        }
        return 0;
}

int dse__grammar_mask_specials(const struct dse_grammar_matcher *m, const struct dse_grammar_vocab *vocab,
                               uint64_t *mask) {
        int change = 0;
        for (uint32_t s = 0; s < m->g->n_specials; s++) {
                const struct grammar_special *sp = &m->g->specials[s];
                if (sp->id >= vocab->n_vocab)
                        continue; /* a vocabulary of another tokenizer: no such token */
                uint64_t bit = (uint64_t)1 << (sp->id % 64);
                int had = (mask[sp->id / 64] & bit) != 0, wanted = waits_on(m, sp->cls);
                mask[sp->id / 64] = wanted ? mask[sp->id / 64] | bit : mask[sp->id / 64] & ~bit;
                change += wanted - had;
        }
        return change;
}

int dse__grammar_accept_special(struct dse_grammar_matcher *m, int32_t id) {
        const struct grammar_special *sp = NULL;
        for (uint32_t s = 0; s < m->g->n_specials && !sp; s++)
                if (m->g->specials[s].id == id)
                        sp = &m->g->specials[s];
        if (!sp)
                return 1;
        if (m->ended || !waits_on(m, sp->cls))
                return -EINVAL;
        /* Every stack waiting on it moves past it; the new state follows the old one in
         * the arena, as a byte step's does. */
        uint32_t mark_frames = m->n_frames, mark_tops = m->n_tops, begin = m->n_tops;
        for (uint32_t i = m->cur_begin; i < m->cur_end; i++) {
                uint32_t t = m->tops[i];
                if (t >= GRAMMAR_POPPED)
                        continue;
                struct grammar_frame f = m->frames[t];
                struct grammar_elem e = m->g->elems[f.pos];
                if (e.kind != GRAMMAR_CLASS || e.arg != sp->cls)
                        continue;
                int64_t end = dse__grammar_matcher_expand(m, f.pos + 1, f.parent);
                if (end < 0) {
                        m->n_frames = mark_frames;
                        m->n_tops = mark_tops;
                        return (int)end;
                }
        }
        m->cur_begin = begin;
        m->cur_end = m->n_tops;
        return 0;
}
