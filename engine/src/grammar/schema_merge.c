/* Folding allOf (and $ref with siblings) into one schema object, distributing the
 * siblings of anyOf/oneOf into its branches, and type sets (schema.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "grammar/schema.h"

/* Every keyword that constrains instances in the drafts the compiler reads (04 to
 * 2020-12, plus OpenAPI's nullable); any other member of a schema object is an
 * annotation, which validators ignore and so does the compiler. */
static const char *const constraining_keywords[] = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
        "propertyNames", "minProperties", "maxProperties", "dependencies", "dependentRequired",
        "dependentSchemas", "unevaluatedProperties", "items", "prefixItems", "additionalItems", "contains",
        "minContains", "maxContains", "minItems", "maxItems", "uniqueItems", "unevaluatedItems", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef",
        "$recursiveRef", "nullable", "contentSchema",
};

int dse__schema_keyword_is_annotation(const char *name) {
        for (size_t i = 0; i < sizeof constraining_keywords / sizeof *constraining_keywords; i++)
                if (!strcmp(name, constraining_keywords[i]))
                        return 0;
        return 1;
}

unsigned dse__schema_value_type(const cJSON *v) {
        if (cJSON_IsNull(v))
                return SCHEMA_NULL;
        if (cJSON_IsBool(v))
                return SCHEMA_BOOL;
        if (cJSON_IsString(v))
                return SCHEMA_STRING;
        if (cJSON_IsArray(v))
                return SCHEMA_ARRAY;
        if (cJSON_IsObject(v))
                return SCHEMA_OBJECT;
        if (cJSON_IsNumber(v))
                return isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) ? SCHEMA_INT
                                                                                            : SCHEMA_FRAC;
        return 0;
}

static int type_name(const char *name, unsigned *ret) {
        static const struct {
                const char *name;
                unsigned types;
        } names[] = {
                {"null", SCHEMA_NULL},     {"boolean", SCHEMA_BOOL},  {"object", SCHEMA_OBJECT},
                {"array", SCHEMA_ARRAY},   {"string", SCHEMA_STRING}, {"number", SCHEMA_INT | SCHEMA_FRAC},
                {"integer", SCHEMA_INT},
        };
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
                if (!strcmp(name, names[i].name)) {
                        *ret = names[i].types;
                        return 0;
                }
        return -EINVAL;
}

int dse__schema_type_keyword(struct schema_ctx *c, const cJSON *schema, unsigned *ret_types) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
        unsigned t = SCHEMA_ALL;
        if (type) {
                t = 0;
                const cJSON *one;
                if (cJSON_IsString(type)) {
                        if (type_name(type->valuestring, &t) < 0)
                                return dse__schema_fail(c, -EINVAL, "type", "unknown type \"%s\"", type->valuestring);
                } else if (cJSON_IsArray(type)) {
                        cJSON_ArrayForEach(one, type) {
                                unsigned u;
                                if (!cJSON_IsString(one) || type_name(one->valuestring, &u) < 0)
                                        return dse__schema_fail(c, -EINVAL, "type", "unknown type in the list");
                                t |= u;
                        }
                } else {
                        return dse__schema_fail(c, -EINVAL, "type", "must be a string or an array of strings");
                }
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(schema, "nullable")))
                        t |= SCHEMA_NULL;
        }
        *ret_types = t;
        return 0;
}

unsigned dse__schema_types(struct schema_ctx *c, const cJSON *s, int depth) {
        if (cJSON_IsBool(s))
                return cJSON_IsTrue(s) ? SCHEMA_ALL : 0;
        if (!cJSON_IsObject(s) || depth > SCHEMA_MAX_DEPTH)
                return SCHEMA_ALL;
        struct dse_diag *saved = c->reterr;
        c->reterr = NULL; /* an upper bound only: errors are reported where compiled */
        unsigned t, u;
        if (dse__schema_type_keyword(c, s, &t) < 0)
                t = SCHEMA_ALL;
        const cJSON *v, *one;
        if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum")) && cJSON_IsArray(v)) {
                u = 0;
                cJSON_ArrayForEach(one, v) u |= dse__schema_value_type(one);
                t &= u;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(s, "const")))
                t &= dse__schema_value_type(v);
        if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
                const cJSON *target;
                if (dse__schema_resolve_ref(c, v, &target) == 0) {
                        u = dse__schema_types(c, target, depth + 1);
                        t = c->refs_replace_siblings ? u : t & u;
                }
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(s, "allOf")) && cJSON_IsArray(v))
                cJSON_ArrayForEach(one, v) t &= dse__schema_types(c, one, depth + 1);
        const char *unions[] = {"anyOf", "oneOf"};
        for (int i = 0; i < 2; i++)
                if ((v = cJSON_GetObjectItemCaseSensitive(s, unions[i])) && cJSON_IsArray(v)) {
                        u = 0;
                        cJSON_ArrayForEach(one, v) u |= dse__schema_types(c, one, depth + 1);
                        t &= u;
                }
        c->reterr = saved;
        return t;
}

static int set_types(cJSON *dst, unsigned t) {
        static const char *const names[] = {"null", "boolean", "object", "array", "string"};
        cJSON *arr = cJSON_CreateArray();
        if (!arr)
                return -ENOMEM;
        for (int i = 0; i < 5; i++)
                if (t & (1u << i))
                        cJSON_AddItemToArray(arr, cJSON_CreateString(names[i]));
        if (t & SCHEMA_FRAC)
                cJSON_AddItemToArray(arr, cJSON_CreateString("number"));
        else if (t & SCHEMA_INT)
                cJSON_AddItemToArray(arr, cJSON_CreateString("integer"));
        cJSON_DeleteItemFromObjectCaseSensitive(dst, "type");
        cJSON_AddItemToObject(dst, "type", arr);
        return 0;
}

static int has_name(const cJSON *obj, const char *name) {
        return cJSON_GetObjectItemCaseSensitive(obj, name) != NULL;
}

/* a's additionalProperties (when not true) judges b's properties as extras: merging is
 * exact only when b names no property a does not. */
static int check_extras(struct schema_ctx *c, const cJSON *a, const cJSON *b) {
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
        const cJSON *b_props = cJSON_GetObjectItemCaseSensitive(b, "properties"), *p;
        if (!ap || cJSON_IsTrue(ap) || !b_props)
                return 0;
        const cJSON *a_props = cJSON_GetObjectItemCaseSensitive(a, "properties");
        cJSON_ArrayForEach(p, b_props) if (!a_props || !has_name(a_props, p->string)) return dse__schema_fail(
                c, -EOPNOTSUPP, "additionalProperties",
                "cannot merge with a schema listing property \"%s\" it does not list", p->string);
        return 0;
}

static int has_tuple(const cJSON *s) {
        return has_name(s, "prefixItems") || has_name(s, "additionalItems") ||
               cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s, "items"));
}

static int check_tuples(struct schema_ctx *c, const cJSON *a, const cJSON *b) {
        static const char *const kws[] = {"items", "prefixItems", "additionalItems"};
        if (!(has_tuple(a) && (has_tuple(b) || has_name(b, "items"))) &&
            !(has_tuple(b) && (has_tuple(a) || has_name(a, "items"))))
                return 0;
        for (int i = 0; i < 3; i++)
                if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, kws[i]),
                                   cJSON_GetObjectItemCaseSensitive(b, kws[i]), 1) &&
                    (has_name(a, kws[i]) || has_name(b, kws[i])))
                        return dse__schema_fail(c, -EOPNOTSUPP, kws[i], "cannot merge differing tuple item schemas");
        return 0;
}

/* {"allOf": [a, b]} replacing dst's member key */
static int replace_with_all_of(cJSON *dst, const char *key, const cJSON *a, const cJSON *b) {
        cJSON *both = cJSON_CreateObject(), *list = cJSON_CreateArray();
        if (!both || !list) {
                cJSON_Delete(both);
                cJSON_Delete(list);
                return -ENOMEM;
        }
        cJSON_AddItemToArray(list, cJSON_Duplicate(a, 1));
        cJSON_AddItemToArray(list, cJSON_Duplicate(b, 1));
        cJSON_AddItemToObject(both, "allOf", list);
        cJSON_ReplaceItemInObjectCaseSensitive(dst, key, both);
        return 0;
}

static int merge_member(struct schema_ctx *c, cJSON *dst, const char *k, const cJSON *v) {
        cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, k), *one;
        if (!d) {
                cJSON_AddItemToObject(dst, k, cJSON_Duplicate(v, 1));
                return 0;
        }
        if (cJSON_Compare(d, v, 1))
                return 0;
        if (!strcmp(k, "properties") && cJSON_IsObject(d) && cJSON_IsObject(v)) {
                cJSON_ArrayForEach(one, v) {
                        cJSON *old = cJSON_GetObjectItemCaseSensitive(d, one->string);
                        if (!old)
                                cJSON_AddItemToObject(d, one->string, cJSON_Duplicate(one, 1));
                        else if (!cJSON_Compare(old, one, 1)) {
                                cJSON *old_copy = cJSON_Duplicate(old, 1);
                                int r = replace_with_all_of(d, one->string, old_copy, one);
                                cJSON_Delete(old_copy);
                                if (r < 0)
                                        return r;
                        }
                }
                return 0;
        }
        if (!strcmp(k, "required") && cJSON_IsArray(d) && cJSON_IsArray(v)) {
                cJSON_ArrayForEach(one, v) {
                        const cJSON *have;
                        int found = 0;
                        cJSON_ArrayForEach(have, d) found |= cJSON_Compare(have, one, 1);
                        if (!found)
                                cJSON_AddItemToArray(d, cJSON_Duplicate(one, 1));
                }
                return 0;
        }
        int is_min = !strcmp(k, "minItems") || !strcmp(k, "minLength") || !strcmp(k, "minimum");
        int is_max = !strcmp(k, "maxItems") || !strcmp(k, "maxLength") || !strcmp(k, "maximum");
        if ((is_min || is_max) && cJSON_IsNumber(d) && cJSON_IsNumber(v)) {
                if (is_min ? v->valuedouble > d->valuedouble : v->valuedouble < d->valuedouble)
                        cJSON_SetNumberValue(d, v->valuedouble);
                return 0;
        }
        if (!strcmp(k, "enum") && cJSON_IsArray(d) && cJSON_IsArray(v)) {
                cJSON *keep = cJSON_CreateArray();
                if (!keep)
                        return -ENOMEM;
                cJSON_ArrayForEach(one, d) {
                        const cJSON *other;
                        int found = 0;
                        cJSON_ArrayForEach(other, v) found |= cJSON_Compare(other, one, 1);
                        if (found)
                                cJSON_AddItemToArray(keep, cJSON_Duplicate(one, 1));
                }
                cJSON_ReplaceItemInObjectCaseSensitive(dst, k, keep);
                return 0;
        }
        if ((!strcmp(k, "items") && !cJSON_IsArray(d) && !cJSON_IsArray(v)) || !strcmp(k, "additionalProperties")) {
                cJSON *old_copy = cJSON_Duplicate(d, 1);
                int r = replace_with_all_of(dst, k, old_copy, v);
                cJSON_Delete(old_copy);
                return r;
        }
        return dse__schema_fail(c, -EOPNOTSUPP, k, "cannot merge two different values in allOf or beside $ref/anyOf/oneOf");
}

static int merge_into(struct schema_ctx *c, cJSON *dst, const cJSON *src, int depth) {
        if (depth > SCHEMA_MAX_DEPTH)
                return dse__schema_fail(c, -ELOOP, "allOf", "merging nests too deep (a $ref cycle through allOf?)");
        if (cJSON_IsBool(src))
                return cJSON_IsTrue(src) ? 0 : set_types(dst, 0);
        if (!cJSON_IsObject(src))
                return dse__schema_fail(c, -EINVAL, "allOf", "a schema must be an object or a boolean");
        int r;
        const cJSON *v, *one;
        if ((v = cJSON_GetObjectItemCaseSensitive(src, "$ref"))) {
                const cJSON *target;
                if ((r = dse__schema_resolve_ref(c, v, &target)) < 0 || (r = merge_into(c, dst, target, depth + 1)) < 0)
                        return r;
                if (c->refs_replace_siblings)
                        return 0;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(src, "allOf"))) {
                if (!cJSON_IsArray(v))
                        return dse__schema_fail(c, -EINVAL, "allOf", "must be an array of schemas");
                cJSON_ArrayForEach(one, v) if ((r = merge_into(c, dst, one, depth + 1)) < 0) return r;
        }
        if ((r = check_extras(c, dst, src)) < 0 || (r = check_extras(c, src, dst)) < 0 ||
            (r = check_tuples(c, dst, src)) < 0)
                return r;
        if (has_name(src, "type")) {
                unsigned a, b;
                if ((r = dse__schema_type_keyword(c, dst, &a)) < 0 || (r = dse__schema_type_keyword(c, src, &b)) < 0 ||
                    (r = set_types(dst, a & b)) < 0)
                        return r;
        }
        cJSON_ArrayForEach(one, src) {
                const char *k = one->string;
                /* nullable is folded into "type" above: on its own it allows nothing more */
                if (!strcmp(k, "$ref") || !strcmp(k, "allOf") || !strcmp(k, "type") || !strcmp(k, "nullable") ||
                    dse__schema_keyword_is_annotation(k))
                        continue;
                if (!strcmp(k, "const")) {
                        cJSON *as_enum = cJSON_CreateArray();
                        if (!as_enum)
                                return -ENOMEM;
                        cJSON_AddItemToArray(as_enum, cJSON_Duplicate(one, 1));
                        r = merge_member(c, dst, "enum", as_enum);
                        cJSON_Delete(as_enum);
                } else {
                        r = merge_member(c, dst, k, one);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

static int new_scratch_object(struct schema_ctx *c, cJSON **ret) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return -ENOMEM;
        cJSON_AddItemToArray(c->scratch, o);
        *ret = o;
        return 0;
}

int dse__schema_merge_all_of(struct schema_ctx *c, const cJSON *s, cJSON **ret_merged) {
        cJSON *dst;
        int r = new_scratch_object(c, &dst);
        if (r < 0 || (r = merge_into(c, dst, s, 0)) < 0)
                return r;
        *ret_merged = dst;
        return 0;
}

int dse__schema_merge_pair(struct schema_ctx *c, const cJSON *a, const cJSON *b, cJSON **ret_merged) {
        cJSON *dst;
        int r = new_scratch_object(c, &dst);
        if (r < 0 || (r = merge_into(c, dst, a, 0)) < 0 || (r = merge_into(c, dst, b, 0)) < 0)
                return r;
        *ret_merged = dst;
        return 0;
}
