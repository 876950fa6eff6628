/* JSON Schema -> grammar rules (README.md): one rule per schema object, memoized by the
 * schema's address so $ref cycles become recursive rules. Every keyword is enforced
 * exactly or refused with -EOPNOTSUPP naming it and its JSON pointer. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/number_rules.h"
#include "grammar/regex.h"
#include "grammar/schema.h"

int dse__schema_fail(struct schema_ctx *c, int err, const char *keyword, const char *fmt, ...) {
        if (c->reterr) {
                char msg[384];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(msg, sizeof msg, fmt, ap);
                va_end(ap);
                snprintf(c->reterr->msg, sizeof c->reterr->msg, "'%s' at #%.*s: %s", keyword, (int)c->ptr_len, c->ptr,
                         msg);
                c->reterr = NULL; /* the first, innermost cause is the one to report */
        }
        return err;
}

/* Appends "/segment" (escaped as RFC 6901 says) to the pointer; returns the old length
 * for pop_ptr. A pointer too long for the buffer is cut, which only shortens messages. */
static size_t push_ptr(struct schema_ctx *c, const char *segment) {
        size_t old = c->ptr_len;
        char buf[sizeof c->ptr];
        size_t n = 0;
        buf[n++] = '/';
        for (const char *p = segment; *p && n + 2 < sizeof buf; p++) {
                if (*p == '~' || *p == '/') {
                        buf[n++] = '~';
                        buf[n++] = *p == '~' ? '0' : '1';
                } else {
                        buf[n++] = *p;
                }
        }
        size_t room = sizeof c->ptr - 1 - c->ptr_len;
        if (n > room)
                n = room;
        memcpy(c->ptr + c->ptr_len, buf, n);
        c->ptr_len += n;
        c->ptr[c->ptr_len] = 0;
        return old;
}

static void pop_ptr(struct schema_ctx *c, size_t old) {
        c->ptr_len = old;
        c->ptr[old] = 0;
}

static size_t push_index(struct schema_ctx *c, const char *keyword, int i) {
        char seg[32];
        size_t old = push_ptr(c, keyword);
        snprintf(seg, sizeof seg, "%d", i);
        push_ptr(c, seg);
        return old;
}

int dse__schema_resolve_ref(struct schema_ctx *c, const cJSON *ref, const cJSON **ret_target) {
        if (!cJSON_IsString(ref))
                return dse__schema_fail(c, -EINVAL, "$ref", "must be a string");
        const char *s = ref->valuestring;
        if (s[0] != '#')
                return dse__schema_fail(c, -EOPNOTSUPP, "$ref", "\"%s\": only references inside the schema (\"#...\")", s);
        if (s[1] && s[1] != '/')
                return dse__schema_fail(c, -EOPNOTSUPP, "$ref", "\"%s\": anchors are not supported", s);
        const cJSON *node = c->root;
        const char *p = s + 1;
        while (*p == '/') {
                char seg[256];
                size_t n = 0;
                for (p++; *p && *p != '/'; p++) {
                        char ch = *p;
                        if (ch == '~' && (p[1] == '0' || p[1] == '1')) {
                                ch = p[1] == '0' ? '~' : '/';
                                p++;
                        } else if (ch == '%' && p[1] && p[2]) {
                                unsigned v;
                                char hex[3] = {p[1], p[2], 0};
                                if (sscanf(hex, "%2x", &v) == 1) {
                                        ch = (char)v;
                                        p += 2;
                                }
                        }
                        if (n + 1 >= sizeof seg)
                                return dse__schema_fail(c, -EINVAL, "$ref", "\"%s\": segment too long", s);
                        seg[n++] = ch;
                }
                seg[n] = 0;
                if (cJSON_IsArray(node)) {
                        char *end;
                        long i = strtol(seg, &end, 10);
                        node = *end || end == seg ? NULL : cJSON_GetArrayItem(node, (int)i);
                } else {
                        node = cJSON_GetObjectItemCaseSensitive(node, seg);
                }
                if (!node)
                        return dse__schema_fail(c, -EINVAL, "$ref", "\"%s\" names nothing in the schema", s);
        }
        *ret_target = node;
        return 0;
}

static int compile_schema(struct schema_ctx *c, const cJSON *s, uint32_t *ret_rule);

static int alt_ref(struct schema_ctx *c, uint32_t rule, uint32_t ref) {
        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule));
        return dse__grammar_push_ref(&c->b, rule, ref);
}

static int count_keyword(struct schema_ctx *c, const cJSON *s, const char *kw, uint32_t dflt, uint32_t *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
        if (!v) {
                *ret = dflt;
                return 0;
        }
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
                return dse__schema_fail(c, -EINVAL, kw, "must be a non-negative integer");
        *ret = v->valuedouble >= (double)UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)v->valuedouble;
        return 0;
}

static int too_big(struct schema_ctx *c, const char *kw) {
        return dse__schema_fail(c, -E2BIG, kw, "a count over %u cannot be unrolled into the grammar", JSON_MAX_COUNT);
}

/* ---- strings ---- */

/* "content" with its quotes, the content matching a regex search (`pattern`); the
 * lengths of the contents it matches in *ret_lengths when not NULL */
static int emit_pattern_string(struct schema_ctx *c, const char *pattern, const char *keyword, uint32_t *ret_rule,
                               struct regex_lengths *ret_lengths) {
        struct dse_diag diag = {{0}};
        uint32_t content, s;
        int r = dse__regex_rule(&c->b, pattern, strlen(pattern), REGEX_JSON_STRING | REGEX_SEARCH, &content,
                                ret_lengths, &diag);
        if (r < 0)
                return dse__schema_fail(c, r, keyword, "%s", diag.msg);
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &s));
        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, s));
        GRAMMAR_TRY(dse__grammar_push_byte(&c->b, s, '"'));
        GRAMMAR_TRY(dse__grammar_push_ref(&c->b, s, content));
        GRAMMAR_TRY(dse__grammar_push_byte(&c->b, s, '"'));
        *ret_rule = s;
        return 0;
}

static int emit_string(struct schema_ctx *c, const cJSON *s, uint32_t *ret_rule) {
        uint32_t min = 0, max = UINT32_MAX; /* set by count_keyword; -O3 cannot see it */
        GRAMMAR_TRY(count_keyword(c, s, "minLength", 0, &min));
        GRAMMAR_TRY(count_keyword(c, s, "maxLength", UINT32_MAX, &max));
        const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(s, "pattern");
        const cJSON *format = cJSON_GetObjectItemCaseSensitive(s, "format");
        if (format && (!cJSON_IsString(format) || !dse__schema_format_enforced(format->valuestring)))
                format = NULL; /* unknown formats are ignored; known ones not enforced were refused */
        if (pattern && !cJSON_IsString(pattern))
                return dse__schema_fail(c, -EINVAL, "pattern", "must be a string");
        if (pattern || format) {
                /* a regular language intersected with a length bound or with another regular
                 * language is not built: refused rather than one of them dropped */
                const char *kw = pattern ? "pattern" : "format";
                if (pattern && format)
                        return dse__schema_fail(c, -EOPNOTSUPP, kw, "not supported together with format");
                if (!pattern) {
                        if (min > 0 || max != UINT32_MAX)
                                return dse__schema_fail(c, -EOPNOTSUPP, kw,
                                                        "not supported together with minLength/maxLength");
                        return dse__schema_format_rule(c, format->valuestring, ret_rule);
                }
                /* the length bounds are kept when every match of the pattern meets them */
                struct regex_lengths lengths;
                GRAMMAR_TRY(emit_pattern_string(c, pattern->valuestring, "pattern", ret_rule, &lengths));
                if (lengths.min < min || (max != UINT32_MAX && lengths.max > max))
                        return dse__schema_fail(c, -EOPNOTSUPP, kw,
                                                "not supported together with minLength/maxLength that the pattern "
                                                "does not imply");
                return 0;
        }
        int r = dse__json_rule_string(&c->j, min, max, ret_rule);
        if (r == -E2BIG)
                return too_big(c, max != UINT32_MAX && max > JSON_MAX_COUNT ? "maxLength" : "minLength");
        return r;
}

/* ---- numbers ---- */

/* Tightens the interval by one bound keyword; `lower` for minimum-like ones. */
static int bound_keyword(struct schema_ctx *c, const cJSON *s, const char *kw, int lower, int open, int integer_only,
                         struct number_interval *in) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
        if (!v)
                return 0;
        if (!cJSON_IsNumber(v))
                return dse__schema_fail(c, -EINVAL, kw, "must be a number");
        double d = v->valuedouble;
        if (!(fabs(d) <= (double)NUMBER_MAX_BOUND))
                return dse__schema_fail(c, -EOPNOTSUPP, kw, "bounds beyond 2^53 are not supported");
        double whole = lower ? ceil(d) : floor(d);
        if (whole != d) {
                if (!integer_only)
                        return dse__schema_fail(c, -EOPNOTSUPP, kw,
                                                "a bound with a fraction on a non-integer number is not supported");
                open = 0; /* for integers, x >= 2.5 and x > 2.5 are x >= 3 */
        }
        int64_t b = (int64_t)whole;
        if (lower && (!in->has_lo || b > in->lo || (b == in->lo && open))) {
                in->has_lo = 1;
                in->lo = b;
                in->lo_open = open;
        } else if (!lower && (!in->has_hi || b < in->hi || (b == in->hi && open))) {
                in->has_hi = 1;
                in->hi = b;
                in->hi_open = open;
        }
        return 0;
}

/* The interval of minimum/maximum/exclusive* (draft-04's boolean exclusive flags, or
 * draft-06+ numbers); *ret_any 0 when there is none. */
static int number_bounds(struct schema_ctx *c, const cJSON *s, int integer_only, struct number_interval *in,
                         int *ret_any) {
        const cJSON *xmin = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
        const cJSON *xmax = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
        memset(in, 0, sizeof *in);
        GRAMMAR_TRY(bound_keyword(c, s, "minimum", 1, cJSON_IsTrue(xmin), integer_only, in));
        GRAMMAR_TRY(bound_keyword(c, s, "maximum", 0, cJSON_IsTrue(xmax), integer_only, in));
        if (xmin && !cJSON_IsBool(xmin))
                GRAMMAR_TRY(bound_keyword(c, s, "exclusiveMinimum", 1, 1, integer_only, in));
        if (xmax && !cJSON_IsBool(xmax))
                GRAMMAR_TRY(bound_keyword(c, s, "exclusiveMaximum", 0, 1, integer_only, in));
        *ret_any = in->has_lo || in->has_hi;
        return 0;
}

/* A number (integer_only: an integer) under the bound keywords and multipleOf. */
static int emit_number(struct schema_ctx *c, const cJSON *s, int integer_only, uint32_t *ret_rule) {
        const cJSON *mult = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
        uint32_t k = 1;
        if (mult) {
                if (!cJSON_IsNumber(mult) || !(mult->valuedouble > 0))
                        return dse__schema_fail(c, -EINVAL, "multipleOf", "must be a number above 0");
                if (floor(mult->valuedouble) != mult->valuedouble || mult->valuedouble > NUMBER_MAX_MULTIPLE)
                        return dse__schema_fail(c, -EOPNOTSUPP, "multipleOf",
                                                "only whole numbers up to %d are supported", NUMBER_MAX_MULTIPLE);
                k = (uint32_t)mult->valuedouble;
                integer_only = 1; /* a multiple of a whole number is an integer */
        }
        struct number_interval in;
        int bounded;
        GRAMMAR_TRY(number_bounds(c, s, integer_only, &in, &bounded));
        if (k > 1 && bounded)
                return dse__schema_fail(c, -EOPNOTSUPP, "multipleOf", "not supported together with numeric bounds");
        int r;
        if (k > 1)
                r = dse__number_rule_multiple(&c->b, k, ret_rule);
        else if (bounded)
                r = dse__number_rule_interval(&c->b, integer_only, &in, ret_rule);
        else if (integer_only)
                r = dse__json_rule_integer(&c->j, ret_rule);
        else
                r = dse__json_rule_number(&c->j, ret_rule);
        return r;
}

/* ---- objects ---- */

/* "name" as a canonical JSON string, with the colon: the bytes that open a member */
struct object_member {
        const char *name;
        uint32_t value;
        int required;
};

/* The members after the opening brace: declared members in order (optional ones may be
 * left out), with extra members (when additionalProperties allows them) anywhere in
 * between. Two rules per position i (members i.. still to come) and `first` (no member
 * written yet, so no comma): T may start with an extra member, S skips optional members
 * without offering one, so an extra member has one place in the parse, not one per
 * skipped member (which would multiply the matcher's stacks). */
static int emit_object_members(struct schema_ctx *c, const struct object_member *m, size_t n, uint32_t extra,
                               uint32_t *ret_rule) {
        struct grammar_builder *b = &c->b;
        uint32_t base = 0;
        for (size_t i = 0; i < 4 * (n + 1); i++) {
                uint32_t r;
                GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
                if (i == 0)
                        base = r;
        }
#define RULE_T(i, first) (base + 4 * (uint32_t)(i) + (uint32_t)(first))
#define RULE_S(i, first) (base + 4 * (uint32_t)(i) + 2 + (uint32_t)(first))
        for (size_t i = 0; i <= n; i++)
                for (int first = 0; first < 2; first++) {
                        uint32_t t = RULE_T(i, first), r = RULE_S(i, first);
                        if (extra != GRAMMAR_NIL) {
                                GRAMMAR_TRY(dse__grammar_alt_begin(b, t));
                                if (!first)
                                        GRAMMAR_TRY(dse__json_push_separator(&c->j, t, ','));
                                GRAMMAR_TRY(dse__grammar_push_ref(b, t, extra));
                                GRAMMAR_TRY(dse__grammar_push_ref(b, t, RULE_T(i, 0)));
                        }
                        GRAMMAR_TRY(alt_ref(c, t, r));
                        if (i == n) {
                                GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                                if (first)
                                        GRAMMAR_TRY(dse__grammar_push_byte(b, r, '}'));
                                else
                                        GRAMMAR_TRY(dse__json_push_close(&c->j, r, '}'));
                                continue;
                        }
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                        if (!first)
                                GRAMMAR_TRY(dse__json_push_separator(&c->j, r, ','));
                        GRAMMAR_TRY(dse__json_push_key(&c->j, r, m[i].name));
                        GRAMMAR_TRY(dse__json_push_separator(&c->j, r, ':'));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, r, m[i].value));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, r, RULE_T(i + 1, 0)));
                        if (!m[i].required)
                                GRAMMAR_TRY(alt_ref(c, r, RULE_S(i + 1, first)));
                }
        *ret_rule = RULE_T(0, 1);
#undef RULE_T
#undef RULE_S
        return 0;
}

/* A new rule for an undeclared member: key ':' value. */
static int extra_member_rule(struct schema_ctx *c, uint32_t key, uint32_t value, uint32_t *ret_rule) {
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, ret_rule));
        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, *ret_rule));
        GRAMMAR_TRY(dse__grammar_push_ref(&c->b, *ret_rule, key));
        GRAMMAR_TRY(dse__json_push_separator(&c->j, *ret_rule, ':'));
        return dse__grammar_push_ref(&c->b, *ret_rule, value);
}

/* A schema that every instance satisfies: true or {} (annotations only). */
static int schema_is_trivial(const cJSON *s) {
        const cJSON *one;
        if (cJSON_IsTrue(s))
                return 1;
        if (!cJSON_IsObject(s))
                return 0;
        cJSON_ArrayForEach(one, s) if (!dse__schema_keyword_is_annotation(one->string)) return 0;
        return 1;
}

/* 1 when a search for the regex finds a match in every string (a pattern such as
 * ".*" or "^[a-z]*"), 0 when not, or an error naming patternProperties. */
static int pattern_matches_all(struct schema_ctx *c, const char *pattern) {
        struct grammar_builder scratch;
        struct dse_diag diag = {{0}};
        struct regex_lengths lengths = {0, 0, 0};
        uint32_t rule;
        dse__grammar_builder_init(&scratch);
        int r = dse__regex_rule(&scratch, pattern, strlen(pattern), REGEX_SEARCH, &rule, &lengths, &diag);
        dse__grammar_builder_done(&scratch);
        return r < 0 ? dse__schema_fail(c, r, "patternProperties", "%s", diag.msg) : lengths.matches_all;
}

/* patternProperties, enforced when it is one pattern beside additionalProperties: false
 * that no declared property name matches (then a member is declared, or its key
 * matches the pattern and its value the pattern's schema), or when its schemas allow
 * everything and so do additionalProperties. Sets *ret_prop (NULL when the keyword
 * constrains nothing) and its value rule. A single pattern every key matches
 * (*ret_all set) judges every member: additionalProperties never applies, declared
 * members must satisfy both their schema and the pattern's. */
static int pattern_properties(struct schema_ctx *c, const cJSON *s, const cJSON *props, const cJSON *ap,
                              const cJSON **ret_prop, uint32_t *ret_value, int *ret_all) {
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(s, "patternProperties"), *one;
        *ret_prop = NULL;
        *ret_all = 0;
        if (!pp)
                return 0;
        if (!cJSON_IsObject(pp))
                return dse__schema_fail(c, -EINVAL, "patternProperties", "must be an object");
        int all_trivial = 1;
        cJSON_ArrayForEach(one, pp) all_trivial &= schema_is_trivial(one);
        if (all_trivial && (!ap || cJSON_IsTrue(ap)))
                return 0;
        if (cJSON_GetArraySize(pp) != 1)
                return dse__schema_fail(c, -EOPNOTSUPP, "patternProperties",
                                        "more than one pattern (keys may match several) is not supported");
        int all = pattern_matches_all(c, pp->child->string);
        if (all < 0)
                return all;
        if (all) {
                size_t old = push_ptr(c, "patternProperties");
                push_ptr(c, pp->child->string);
                int r = compile_schema(c, pp->child, ret_value);
                pop_ptr(c, old);
                GRAMMAR_TRY(r);
                *ret_prop = pp->child;
                *ret_all = 1;
                return 0;
        }
        if (!cJSON_IsFalse(ap))
                return dse__schema_fail(c, -EOPNOTSUPP, "patternProperties",
                                        "supported only beside additionalProperties: false");
        const cJSON *prop = pp->child;
        cJSON_ArrayForEach(one, props) {
                struct dse_diag diag = {{0}};
                int m = dse__regex_search(prop->string, strlen(prop->string), one->string, strlen(one->string), &diag);
                if (m < 0)
                        return dse__schema_fail(c, m, "patternProperties", "%s", diag.msg);
                if (m)
                        return dse__schema_fail(c, -EOPNOTSUPP, "patternProperties",
                                                "the declared property '%s' matches the pattern (its value would "
                                                "have to satisfy both schemas)",
                                                one->string);
        }
        size_t old = push_ptr(c, "patternProperties");
        push_ptr(c, prop->string);
        int r = compile_schema(c, prop, ret_value);
        pop_ptr(c, old);
        GRAMMAR_TRY(r);
        *ret_prop = prop;
        return 0;
}

static int emit_object(struct schema_ctx *c, const cJSON *s, uint32_t *ret_rule) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *required = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        const cJSON *one;
        if (props && !cJSON_IsObject(props))
                return dse__schema_fail(c, -EINVAL, "properties", "must be an object");
        if (required && !cJSON_IsArray(required))
                return dse__schema_fail(c, -EINVAL, "required", "must be an array of strings");
        cJSON_ArrayForEach(one, required) if (!cJSON_IsString(one)) return dse__schema_fail(
                c, -EINVAL, "required", "must be an array of strings");
        const cJSON *pattern_prop = NULL; /* the one patternProperties member that constrains */
        uint32_t pattern_value = GRAMMAR_NIL;
        int pattern_all = 0;
        GRAMMAR_TRY(pattern_properties(c, s, props, ap, &pattern_prop, &pattern_value, &pattern_all));
        const cJSON *pattern_all_schema = pattern_all && !schema_is_trivial(pattern_prop) ? pattern_prop : NULL;
        uint32_t extra_value = GRAMMAR_NIL; /* additionalProperties' value rule; NIL: none allowed */
        if (pattern_all) {
                /* every key matches: the pattern's schema judges the undeclared members */
                extra_value = pattern_value;
                pattern_prop = NULL;
        } else if (!ap || cJSON_IsTrue(ap)) {
                GRAMMAR_TRY(dse__json_rule_any_value(&c->j, &extra_value));
        } else if (!cJSON_IsFalse(ap)) {
                size_t old = push_ptr(c, "additionalProperties");
                GRAMMAR_TRY(compile_schema(c, ap, &extra_value));
                pop_ptr(c, old);
        }
        size_t n = (size_t)cJSON_GetArraySize(props) + (size_t)cJSON_GetArraySize(required);
        struct object_member *m = calloc(n + 1, sizeof *m);
        const char **names = calloc(n + 1, sizeof *names);
        int r = m && names ? 0 : -ENOMEM;
        size_t k = 0;
        cJSON_ArrayForEach(one, props) {
                if (r < 0)
                        break;
                const cJSON *req;
                m[k].name = names[k] = one->string;
                cJSON_ArrayForEach(req, required) m[k].required |= !strcmp(req->valuestring, one->string);
                size_t old = push_ptr(c, "properties");
                push_ptr(c, one->string);
                cJSON *both = NULL;
                if (pattern_all_schema)
                        r = dse__schema_merge_pair(c, one, pattern_all_schema, &both);
                if (r == 0)
                        r = compile_schema(c, both ? both : one, &m[k].value);
                pop_ptr(c, old);
                k++;
        }
        /* required names that properties does not declare: their value is judged by
         * additionalProperties (none allowed: the object can never be valid) */
        cJSON_ArrayForEach(one, required) {
                if (r < 0 || (props && cJSON_GetObjectItemCaseSensitive(props, one->valuestring)))
                        continue;
                size_t j;
                for (j = 0; j < k && strcmp(names[j], one->valuestring); j++)
                        ;
                if (j < k)
                        continue;
                m[k].name = names[k] = one->valuestring;
                m[k].required = 1;
                int matches = 0;
                if (pattern_prop) {
                        struct dse_diag diag = {{0}};
                        matches = dse__regex_search(pattern_prop->string, strlen(pattern_prop->string), one->valuestring,
                                                    strlen(one->valuestring), &diag);
                        if (matches < 0)
                                r = matches;
                }
                if (r < 0)
                        break;
                if (matches)
                        m[k].value = pattern_value;
                else if (extra_value == GRAMMAR_NIL)
                        r = dse__json_rule_nothing(&c->j, &m[k].value);
                else
                        m[k].value = extra_value;
                k++;
        }
        uint32_t extra = GRAMMAR_NIL;
        if (r == 0 && pattern_prop) {
                /* additionalProperties is false: every extra member's key matches the pattern */
                uint32_t key;
                size_t old = push_ptr(c, "patternProperties");
                r = emit_pattern_string(c, pattern_prop->string, "patternProperties", &key, NULL);
                pop_ptr(c, old);
                if (r == 0)
                        r = extra_member_rule(c, key, pattern_value, &extra);
        } else if (r == 0 && extra_value != GRAMMAR_NIL) {
                uint32_t key;
                r = dse__json_rule_key_excluding(&c->j, names, k, &key);
                if (r == -EINVAL)
                        r = dse__schema_fail(c, -EOPNOTSUPP, "additionalProperties",
                                             "extra properties beside property names with escapes or non-ASCII "
                                             "characters (set additionalProperties to false)");
                if (r == 0)
                        r = extra_member_rule(c, key, extra_value, &extra);
        }
        uint32_t members = 0, obj;
        if (r == 0)
                r = emit_object_members(c, m, k, extra, &members);
        free(m);
        free(names);
        GRAMMAR_TRY(r);
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &obj));
        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, obj));
        GRAMMAR_TRY(dse__json_push_open(&c->j, obj, '{'));
        GRAMMAR_TRY(dse__grammar_push_ref(&c->b, obj, members));
        *ret_rule = obj;
        return 0;
}

/* ---- arrays ---- */

/* uniqueItems is enforced where the items are a small finite set of literals: a rule per
 * subset of the values written so far, so a value can follow only while it is unused. A
 * pushdown grammar cannot remember an unbounded set, so any other item schema is refused. */
#define UNIQUE_MAX_VALUES 8

static int unique_fail(struct schema_ctx *c) {
        return dse__schema_fail(c, -EOPNOTSUPP, "uniqueItems",
                                "enforced only when items is an enum or const of at most %d values "
                                "(with no prefixItems)",
                                UNIQUE_MAX_VALUES);
}

/* The distinct values items may take, as their compact text, into c->scratch. */
static int unique_item_values(struct schema_ctx *c, const cJSON *items, cJSON **ret_list) {
        for (int hops = 0; cJSON_IsObject(items) && cJSON_GetObjectItemCaseSensitive(items, "$ref"); hops++) {
                const cJSON *one;
                cJSON_ArrayForEach(one, items) {
                        if (strcmp(one->string, "$ref") && !dse__schema_keyword_is_annotation(one->string))
                                return unique_fail(c);
                }
                if (hops == SCHEMA_MAX_DEPTH)
                        return unique_fail(c);
                GRAMMAR_TRY(dse__schema_resolve_ref(c, cJSON_GetObjectItemCaseSensitive(items, "$ref"), &items));
        }
        if (!cJSON_IsObject(items))
                return unique_fail(c);
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(items, "enum");
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(items, "const");
        const cJSON *one, *v;
        if ((!en && !cn) || (en && !cJSON_IsArray(en)))
                return unique_fail(c);
        cJSON_ArrayForEach(one, items) {
                if (strcmp(one->string, "enum") && strcmp(one->string, "const") && strcmp(one->string, "type") &&
                    strcmp(one->string, "nullable") && !dse__schema_keyword_is_annotation(one->string))
                        return unique_fail(c);
        }
        unsigned types;
        size_t old = push_ptr(c, "items");
        int r = dse__schema_type_keyword(c, items, &types);
        pop_ptr(c, old);
        GRAMMAR_TRY(r);
        cJSON *list = cJSON_CreateArray();
        if (!list)
                return -ENOMEM;
        cJSON_AddItemToArray(c->scratch, list);
        for (one = en ? en->child : cn; one; one = en ? one->next : NULL) {
                int dup = cn && !cJSON_Compare(cn, one, 1);
                dup |= !(dse__schema_value_type(one) & types);
                cJSON_ArrayForEach(v, list) {
                        dup |= cJSON_Compare(v, one, 1);
                }
                if (dup)
                        continue;
                if (cJSON_GetArraySize(list) == UNIQUE_MAX_VALUES)
                        return unique_fail(c);
                cJSON *copy = cJSON_Duplicate(one, 1);
                if (!copy)
                        return -ENOMEM;
                cJSON_AddItemToArray(list, copy);
        }
        *ret_list = list;
        return 0;
}

/* An alternative of rule that is the empty array. */
static int push_empty_array(struct schema_ctx *c, uint32_t rule) {
        GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule));
        GRAMMAR_TRY(dse__json_push_open(&c->j, rule, '['));
        return dse__grammar_push_byte(&c->b, rule, ']');
}

static int emit_unique_array(struct schema_ctx *c, const cJSON *items, uint32_t min, uint32_t max,
                             uint32_t *ret_rule) {
        struct grammar_builder *b = &c->b;
        cJSON *list = NULL;
        GRAMMAR_TRY(items ? unique_item_values(c, items, &list) : unique_fail(c));
        uint32_t n = (uint32_t)cJSON_GetArraySize(list), base = 0, arr;
        /* rule base + S - 1: the values in bit set S (S > 0) written */
        for (uint32_t set = 1; set < (1u << n); set++) {
                uint32_t id;
                GRAMMAR_TRY(dse__grammar_rule_new(b, &id));
                if (set == 1)
                        base = id;
        }
        for (uint32_t set = 1; set < (1u << n); set++) {
                uint32_t id = base + set - 1, count = (uint32_t)__builtin_popcount(set);
                if (count >= min) {
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, id));
                        GRAMMAR_TRY(dse__json_push_close(&c->j, id, ']'));
                }
                for (uint32_t i = 0; i < n && count < max; i++) {
                        if (set & (1u << i))
                                continue;
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, id));
                        GRAMMAR_TRY(dse__json_push_separator(&c->j, id, ','));
                        GRAMMAR_TRY(dse__json_push_literal(&c->j, id, cJSON_GetArrayItem(list, (int)i)));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, id, base + (set | (1u << i)) - 1));
                }
        }
        if (min > n)
                return dse__json_rule_nothing(&c->j, ret_rule);
        GRAMMAR_TRY(dse__grammar_rule_new(b, &arr));
        if (min == 0)
                GRAMMAR_TRY(push_empty_array(c, arr));
        for (uint32_t i = 0; i < n && max > 0; i++) {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, arr));
                GRAMMAR_TRY(dse__json_push_open(&c->j, arr, '['));
                GRAMMAR_TRY(dse__json_push_literal(&c->j, arr, cJSON_GetArrayItem(list, (int)i)));
                GRAMMAR_TRY(dse__grammar_push_ref(b, arr, base + (1u << i) - 1));
        }
        *ret_rule = arr;
        return 0;
}

static int emit_array(struct schema_ctx *c, const cJSON *s, uint32_t *ret_rule) {
        struct grammar_builder *b = &c->b;
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        const cJSON *tail = items; /* the schema of elements after the prefix */
        const char *tail_kw = "items", *prefix_kw = "prefixItems";
        if (prefix && !cJSON_IsArray(prefix))
                return dse__schema_fail(c, -EINVAL, "prefixItems", "must be an array of schemas");
        if (!prefix && cJSON_IsArray(items)) { /* draft 4-7 tuple form */
                prefix = items;
                prefix_kw = "items";
                tail = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
                tail_kw = "additionalItems";
        } else if (cJSON_IsArray(items)) {
                return dse__schema_fail(c, -EINVAL, "items", "must be a schema beside prefixItems");
        }
        uint32_t min = 0, max = UINT32_MAX; /* set by count_keyword; -O3 cannot see it */
        GRAMMAR_TRY(count_keyword(c, s, "minItems", 0, &min));
        GRAMMAR_TRY(count_keyword(c, s, "maxItems", UINT32_MAX, &max));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems"))) {
                if (prefix)
                        return unique_fail(c);
                return emit_unique_array(c, items, min, max, ret_rule);
        }
        uint32_t n_prefix = (uint32_t)cJSON_GetArraySize(prefix);
        uint32_t last = n_prefix > min ? n_prefix : min; /* L(last) loops when max is unbounded */
        if (max != UINT32_MAX)
                last = max;
        if (last == 0 && max != 0)
                last = 1;
        if (last > JSON_MAX_COUNT)
                return too_big(c, max != UINT32_MAX ? "maxItems" : n_prefix > min ? prefix_kw : "minItems");
        uint32_t *elem = calloc((size_t)n_prefix + 1, sizeof *elem);
        if (!elem)
                return -ENOMEM;
        int r = 0;
        for (uint32_t i = 0; i < n_prefix && r == 0; i++) {
                size_t old = push_index(c, prefix_kw, (int)i);
                r = compile_schema(c, cJSON_GetArrayItem(prefix, (int)i), &elem[i]);
                pop_ptr(c, old);
        }
        /* elements past the prefix; NIL when none may follow */
        elem[n_prefix] = GRAMMAR_NIL;
        if (r == 0 && (!tail || cJSON_IsTrue(tail))) {
                r = dse__json_rule_any_value(&c->j, &elem[n_prefix]);
        } else if (r == 0 && !cJSON_IsFalse(tail)) {
                size_t old = push_ptr(c, tail_kw);
                r = compile_schema(c, tail, &elem[n_prefix]);
                pop_ptr(c, old);
        }
        uint32_t base = 0, arr = 0;
        /* rule base + i - 1 (i >= 1): i elements written */
        for (uint32_t i = 1; i <= last && r == 0; i++) {
                uint32_t id;
                r = dse__grammar_rule_new(b, &id);
                if (i == 1)
                        base = id;
        }
        for (uint32_t i = 1; i <= last && r == 0; i++) {
                uint32_t id = base + i - 1;
                uint32_t e = elem[i < n_prefix ? i : n_prefix];
                if (i >= min) {
                        r = dse__grammar_alt_begin(b, id);
                        if (r == 0)
                                r = dse__json_push_close(&c->j, id, ']');
                }
                if (r == 0 && i < max && e != GRAMMAR_NIL) {
                        uint32_t next = base + (i + 1 <= last ? i + 1 : last) - 1;
                        r = dse__grammar_alt_begin(b, id);
                        if (r == 0)
                                r = dse__json_push_separator(&c->j, id, ',');
                        if (r == 0)
                                r = dse__grammar_push_ref(b, id, e);
                        if (r == 0)
                                r = dse__grammar_push_ref(b, id, next);
                }
        }
        uint32_t e0 = elem[n_prefix > 0 ? 0 : n_prefix];
        free(elem);
        GRAMMAR_TRY(r);
        GRAMMAR_TRY(dse__grammar_rule_new(b, &arr));
        if (min == 0)
                GRAMMAR_TRY(push_empty_array(c, arr));
        if (max > 0 && e0 != GRAMMAR_NIL) {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, arr));
                GRAMMAR_TRY(dse__json_push_open(&c->j, arr, '['));
                GRAMMAR_TRY(dse__grammar_push_ref(b, arr, e0));
                GRAMMAR_TRY(dse__grammar_push_ref(b, arr, base));
        }
        *ret_rule = arr;
        return 0;
}

/* ---- keyword checks ---- */

static const char *const known_formats[] = {
        "date-time", "date",         "time",          "duration", "email",    "idn-email",     "hostname",
        "idn-hostname", "ipv4",      "ipv6",          "uri",      "uri-reference", "iri",      "iri-reference",
        "uuid",      "uri-template", "json-pointer",  "relative-json-pointer", "regex",
};

/* The types a keyword the compiler cannot enforce would constrain (0: it can). A
 * keyword that only constrains types the schema excludes is inert and so harmless. */
static unsigned unsupported_for(const char *k, const cJSON *v) {
        static const struct {
                const char *name;
                unsigned types;
        } table[] = {
                {"propertyNames", SCHEMA_OBJECT},
                {"minProperties", SCHEMA_OBJECT},
                {"maxProperties", SCHEMA_OBJECT},
                {"dependencies", SCHEMA_OBJECT},
                {"dependentRequired", SCHEMA_OBJECT},
                {"dependentSchemas", SCHEMA_OBJECT},
                {"unevaluatedProperties", SCHEMA_OBJECT},
                {"contains", SCHEMA_ARRAY},
                {"minContains", SCHEMA_ARRAY},
                {"maxContains", SCHEMA_ARRAY},
                {"unevaluatedItems", SCHEMA_ARRAY},
                {"not", SCHEMA_ALL},
                {"if", SCHEMA_ALL},
                {"$dynamicRef", SCHEMA_ALL},
                {"$recursiveRef", SCHEMA_ALL},
        };
        for (size_t i = 0; i < sizeof table / sizeof *table; i++)
                if (!strcmp(k, table[i].name))
                        return table[i].types;
        if (!strcmp(k, "format") && cJSON_IsString(v)) {
                /* validators ignore formats they do not know, and so may we */
                for (size_t i = 0; i < sizeof known_formats / sizeof *known_formats; i++)
                        if (!strcmp(v->valuestring, known_formats[i]) && !dse__schema_format_enforced(v->valuestring))
                                return SCHEMA_STRING;
        }
        return 0;
}

static int check_unsupported(struct schema_ctx *c, const cJSON *s, unsigned types) {
        const cJSON *one;
        cJSON_ArrayForEach(one, s) {
                unsigned t = unsupported_for(one->string, one);
                if (t & types)
                        return dse__schema_fail(c, -EOPNOTSUPP, one->string, "not supported");
        }
        return 0;
}

/* ---- enum and const ---- */

static int emit_literals(struct schema_ctx *c, const cJSON *s, unsigned types, uint32_t rule) {
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
        const cJSON *one;
        static const char *const allowed[] = {"enum", "const", "type", "nullable"};
        /* the type-specific keywords the compiler enforces elsewhere */
        static const struct {
                const char *name;
                unsigned types;
        } typed[] = {
                {"minLength", SCHEMA_STRING},       {"maxLength", SCHEMA_STRING},   {"properties", SCHEMA_OBJECT},
                {"required", SCHEMA_OBJECT},        {"additionalProperties", SCHEMA_OBJECT},
                {"items", SCHEMA_ARRAY},            {"prefixItems", SCHEMA_ARRAY},  {"additionalItems", SCHEMA_ARRAY},
                {"minItems", SCHEMA_ARRAY},         {"maxItems", SCHEMA_ARRAY},     {"pattern", SCHEMA_STRING},
                {"minimum", SCHEMA_INT | SCHEMA_FRAC}, {"maximum", SCHEMA_INT | SCHEMA_FRAC},
                {"exclusiveMinimum", SCHEMA_INT | SCHEMA_FRAC}, {"exclusiveMaximum", SCHEMA_INT | SCHEMA_FRAC},
                {"multipleOf", SCHEMA_INT | SCHEMA_FRAC}, {"patternProperties", SCHEMA_OBJECT},
                {"uniqueItems", SCHEMA_ARRAY},
        };
        cJSON_ArrayForEach(one, s) {
                int ok = dse__schema_keyword_is_annotation(one->string);
                for (size_t i = 0; i < 4; i++)
                        ok |= !strcmp(one->string, allowed[i]);
                /* a keyword that constrains only types the literals cannot have is inert;
                 * any other one would have to be checked against each literal */
                unsigned kw_types = unsupported_for(one->string, one);
                for (size_t i = 0; i < sizeof typed / sizeof *typed; i++)
                        if (!strcmp(one->string, typed[i].name))
                                kw_types = typed[i].types;
                if (!strcmp(one->string, "format") && cJSON_IsString(one) && dse__schema_format_enforced(one->valuestring))
                        kw_types = SCHEMA_STRING;
                if (!ok && !strcmp(one->string, "uniqueItems") && cJSON_IsFalse(one))
                        ok = 1;
                if (!ok && kw_types && !(kw_types & types))
                        ok = 1;
                if (!ok)
                        return dse__schema_fail(c, -EOPNOTSUPP, one->string, "not supported beside enum/const");
        }
        if (en && !cJSON_IsArray(en))
                return dse__schema_fail(c, -EINVAL, "enum", "must be an array");
        cJSON *list = cJSON_CreateArray();
        if (!list)
                return -ENOMEM;
        cJSON_AddItemToArray(c->scratch, list);
        if (en) {
                cJSON_ArrayForEach(one, en) {
                        if (cn && !cJSON_Compare(cn, one, 1))
                                continue;
                        cJSON_AddItemToArray(list, cJSON_Duplicate(one, 1));
                }
        } else {
                cJSON_AddItemToArray(list, cJSON_Duplicate(cn, 1));
        }
        cJSON_ArrayForEach(one, list) {
                if (!(dse__schema_value_type(one) & types))
                        continue;
                GRAMMAR_TRY(dse__grammar_alt_begin(&c->b, rule));
                GRAMMAR_TRY(dse__json_push_literal(&c->j, rule, one));
        }
        return 0;
}

/* ---- schema objects ---- */

static int has_constraints_besides(const cJSON *s, const char *const *skip, size_t n_skip) {
        const cJSON *one;
        cJSON_ArrayForEach(one, s) {
                if (dse__schema_keyword_is_annotation(one->string))
                        continue;
                size_t i;
                for (i = 0; i < n_skip && strcmp(one->string, skip[i]); i++)
                        ;
                if (i == n_skip)
                        return 1;
        }
        return 0;
}

static int compile_body(struct schema_ctx *c, const cJSON *s, uint32_t rule);

static int emit_union(struct schema_ctx *c, const cJSON *s, const char *kw, const cJSON *list, uint32_t rule) {
        static const char *const skip[] = {"anyOf", "oneOf"};
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
                return dse__schema_fail(c, -EINVAL, kw, "must be a non-empty array of schemas");
        if (cJSON_GetObjectItemCaseSensitive(s, !strcmp(kw, "anyOf") ? "oneOf" : "anyOf"))
                return dse__schema_fail(c, -EOPNOTSUPP, kw, "anyOf and oneOf in one schema object");
        cJSON *siblings = NULL;
        if (has_constraints_besides(s, skip, 2)) {
                siblings = cJSON_Duplicate(s, 1);
                if (!siblings)
                        return -ENOMEM;
                cJSON_AddItemToArray(c->scratch, siblings);
                cJSON_DeleteItemFromObjectCaseSensitive(siblings, "anyOf");
                cJSON_DeleteItemFromObjectCaseSensitive(siblings, "oneOf");
        }
        int n = cJSON_GetArraySize(list);
        const cJSON **branch = calloc((size_t)n, sizeof *branch);
        unsigned *types = calloc((size_t)n, sizeof *types);
        int r = branch && types ? 0 : -ENOMEM;
        for (int i = 0; i < n && r == 0; i++) {
                branch[i] = cJSON_GetArrayItem(list, i);
                if (siblings) {
                        cJSON *merged = NULL;
                        size_t old = push_index(c, kw, i);
                        r = dse__schema_merge_pair(c, siblings, branch[i], &merged);
                        pop_ptr(c, old);
                        if (r < 0)
                                break; /* merged is not set */
                        branch[i] = merged;
                }
                types[i] = dse__schema_types(c, branch[i], 0);
        }
        /* oneOf is an alternation only when no instance can match two branches: proven
         * here by the branches' types not meeting */
        for (int i = 0; i < n && r == 0 && !strcmp(kw, "oneOf"); i++)
                for (int k = i + 1; k < n && r == 0; k++)
                        if (types[i] & types[k])
                                r = dse__schema_fail(c, -EOPNOTSUPP, "oneOf",
                                                     "branches %d and %d may both match one instance (only oneOf "
                                                     "whose branches have disjoint types is enforced)",
                                                     i, k);
        for (int i = 0; i < n && r == 0; i++) {
                uint32_t br;
                size_t old = push_index(c, kw, i);
                r = compile_schema(c, branch[i], &br);
                pop_ptr(c, old);
                if (r == 0)
                        r = alt_ref(c, rule, br);
        }
        free(branch);
        free(types);
        return r;
}

static int emit_types(struct schema_ctx *c, const cJSON *s, unsigned types, uint32_t rule) {
        uint32_t t;
        if (types & SCHEMA_NULL) {
                GRAMMAR_TRY(dse__json_rule_null(&c->j, &t));
                GRAMMAR_TRY(alt_ref(c, rule, t));
        }
        if (types & SCHEMA_BOOL) {
                GRAMMAR_TRY(dse__json_rule_boolean(&c->j, &t));
                GRAMMAR_TRY(alt_ref(c, rule, t));
        }
        if (types & (SCHEMA_INT | SCHEMA_FRAC)) {
                GRAMMAR_TRY(emit_number(c, s, !(types & SCHEMA_FRAC), &t));
                GRAMMAR_TRY(alt_ref(c, rule, t));
        }
        if (types & SCHEMA_STRING) {
                GRAMMAR_TRY(emit_string(c, s, &t));
                GRAMMAR_TRY(alt_ref(c, rule, t));
        }
        if (types & SCHEMA_ARRAY) {
                GRAMMAR_TRY(emit_array(c, s, &t));
                GRAMMAR_TRY(alt_ref(c, rule, t));
        }
        if (types & SCHEMA_OBJECT) {
                GRAMMAR_TRY(emit_object(c, s, &t));
                GRAMMAR_TRY(alt_ref(c, rule, t));
        }
        return 0;
}

static int compile_body(struct schema_ctx *c, const cJSON *s, uint32_t rule) {
        static const char *const ref_skip[] = {"$ref"};
        if (++c->depth > SCHEMA_MAX_DEPTH)
                return dse__schema_fail(c, -ELOOP, "$ref", "schemas nest deeper than %d", SCHEMA_MAX_DEPTH);
        int r;
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref"), *v;
        if (s != c->root && cJSON_GetObjectItemCaseSensitive(s, "$id"))
                r = dse__schema_fail(c, -EOPNOTSUPP, "$id", "only the root schema may set $id");
        else if (cJSON_GetObjectItemCaseSensitive(s, "allOf") ||
                 (ref && !c->refs_replace_siblings && has_constraints_besides(s, ref_skip, 1))) {
                cJSON *merged;
                r = dse__schema_merge_all_of(c, s, &merged);
                if (r == 0)
                        r = compile_body(c, merged, rule);
        } else if (ref) {
                const cJSON *target;
                uint32_t t;
                size_t old = c->ptr_len;
                r = dse__schema_resolve_ref(c, ref, &target);
                if (r == 0) {
                        /* errors inside the target are reported at its own pointer */
                        char saved[sizeof c->ptr];
                        memcpy(saved, c->ptr, sizeof saved);
                        snprintf(c->ptr, sizeof c->ptr, "%s", ref->valuestring + 1);
                        c->ptr_len = strlen(c->ptr);
                        r = compile_schema(c, target, &t);
                        memcpy(c->ptr, saved, sizeof saved);
                        c->ptr_len = old;
                }
                if (r == 0)
                        r = alt_ref(c, rule, t);
        } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
                r = emit_union(c, s, "anyOf", v, rule);
        } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
                r = emit_union(c, s, "oneOf", v, rule);
        } else {
                unsigned types;
                r = dse__schema_type_keyword(c, s, &types);
                if (r == 0 && (cJSON_GetObjectItemCaseSensitive(s, "enum") ||
                               cJSON_GetObjectItemCaseSensitive(s, "const")))
                        r = emit_literals(c, s, types, rule);
                else if (r == 0 && (r = check_unsupported(c, s, types)) == 0)
                        r = emit_types(c, s, types, rule);
        }
        c->depth--;
        return r;
}

static int compile_schema(struct schema_ctx *c, const cJSON *s, uint32_t *ret_rule) {
        if (cJSON_IsTrue(s))
                return dse__json_rule_any_value(&c->j, ret_rule);
        if (cJSON_IsFalse(s))
                return dse__json_rule_nothing(&c->j, ret_rule);
        if (!cJSON_IsObject(s))
                return dse__schema_fail(c, -EINVAL, "$schema", "a schema must be an object or a boolean");
        for (uint32_t i = 0; i < c->n_memo; i++)
                if (c->memo[i].schema == s) {
                        *ret_rule = c->memo[i].rule;
                        return 0;
                }
        uint32_t rule;
        GRAMMAR_TRY(dse__grammar_rule_new(&c->b, &rule));
        GRAMMAR_TRY(dse__grammar_grow((void **)&c->memo, &c->cap_memo, (uint64_t)c->n_memo + 1, sizeof *c->memo));
        c->memo[c->n_memo++] = (struct schema_memo){s, rule};
        GRAMMAR_TRY(compile_body(c, s, rule));
        *ret_rule = rule;
        return 0;
}

static int draft_before_2019(const cJSON *root) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "$schema");
        return cJSON_IsString(v) && (strstr(v->valuestring, "draft-04") || strstr(v->valuestring, "draft-06") ||
                                     strstr(v->valuestring, "draft-07") || strstr(v->valuestring, "draft-03"));
}

/* The root's "x-guidance" member, as LLGuidance spells its options: whitespace_flexible
 * allows JSON whitespace between tokens (compact output otherwise). */
static int root_options(struct schema_ctx *c, const cJSON *schema) {
        const cJSON *x = cJSON_IsObject(schema) ? cJSON_GetObjectItemCaseSensitive(schema, "x-guidance") : NULL;
        const cJSON *one;
        if (!x)
                return 0;
        if (!cJSON_IsObject(x))
                return dse__schema_fail(c, -EINVAL, "x-guidance", "must be an object");
        cJSON_ArrayForEach(one, x) {
                if (strcmp(one->string, "whitespace_flexible") || !cJSON_IsBool(one))
                        return dse__schema_fail(c, -EOPNOTSUPP, "x-guidance",
                                                "'%s' is not supported (the one option is whitespace_flexible: "
                                                "true or false)",
                                                one->string);
                c->j.ws = cJSON_IsTrue(one);
        }
        return 0;
}

int dse__schema_compile_into(struct grammar_builder *b, const cJSON *schema, uint32_t *ret_rule,
                             struct dse_diag *reterr) {
        struct schema_ctx c = {.reterr = reterr, .b = *b};
        c.root = schema;
        c.refs_replace_siblings = draft_before_2019(schema);
        c.scratch = cJSON_CreateArray();
        dse__json_rules_init(&c.j, &c.b);
        int r = c.scratch ? root_options(&c, schema) : -ENOMEM;
        if (r == 0)
                r = compile_schema(&c, schema, ret_rule);
        if (r == -ENOMEM)
                dse__schema_fail(&c, r, "$schema", "out of memory");
        else if (r == -E2BIG)
                dse__schema_fail(&c, r, "$schema", "the grammar grew past its size limit");
        dse__json_rules_done(&c.j);
        *b = c.b;
        free(c.memo);
        cJSON_Delete(c.scratch);
        return r;
}

int dse_grammar_compile_json_schema(const char *schema_json, size_t len, struct dse_grammar **ret_grammar,
                                    struct dse_diag *reterr) {
        if (!schema_json || !ret_grammar)
                return -EINVAL;
        cJSON *root = cJSON_ParseWithLength(schema_json, len);
        if (!root) {
                if (reterr)
                        snprintf(reterr->msg, sizeof reterr->msg, "the schema is not valid JSON");
                return -EBADMSG;
        }
        struct grammar_builder b;
        dse__grammar_builder_init(&b);
        uint32_t top = GRAMMAR_NIL;
        int r = dse__schema_compile_into(&b, root, &top, reterr);
        r = dse__grammar_builder_complete(&b, r, top, ret_grammar, reterr);
        cJSON_Delete(root);
        return r;
}
