/* Internals of the JSON Schema compiler shared by schema_compile.c (schema -> rules)
 * and schema_merge.c (allOf and sibling merging, type sets). */
#ifndef DSE_GRAMMAR_SCHEMA_H
#define DSE_GRAMMAR_SCHEMA_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "grammar/json_rules.h"

/* The JSON types as a partition, so sets intersect with a plain AND: "number" is
 * SCHEMA_INT | SCHEMA_FRAC, "integer" is SCHEMA_INT. */
enum {
        SCHEMA_NULL = 1 << 0,
        SCHEMA_BOOL = 1 << 1,
        SCHEMA_OBJECT = 1 << 2,
        SCHEMA_ARRAY = 1 << 3,
        SCHEMA_STRING = 1 << 4,
        SCHEMA_INT = 1 << 5,  /* numbers with no fractional part */
        SCHEMA_FRAC = 1 << 6, /* other numbers */
        SCHEMA_ALL = (1 << 7) - 1,
};

/* Nesting (of $ref chains through allOf, of schema objects) beyond this is refused. */
#define SCHEMA_MAX_DEPTH 200

struct schema_memo {
        const cJSON *schema;
        uint32_t rule;
};

/* The formats schema_formats.c enforces. */
#define SCHEMA_N_FORMATS 9

struct schema_ctx {
        struct grammar_builder b;
        struct json_rules j;
        const cJSON *root;
        int refs_replace_siblings; /* draft-04/06/07: keywords beside $ref are ignored */
        cJSON *scratch;            /* owns the schemas made by merging */
        struct dse_diag *reterr;
        char ptr[768]; /* JSON pointer of the schema being compiled */
        size_t ptr_len;
        struct schema_memo *memo;
        uint32_t n_memo, cap_memo;
        int depth;
        uint32_t format_rules[SCHEMA_N_FORMATS]; /* each format's rule + 1; 0 until built */
};

/* Writes "'keyword' at #pointer: message" to reterr and returns err. */
int dse__schema_fail(struct schema_ctx *c, int err, const char *keyword, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* The rule of a JSON string in an enforced format (schema_formats.c): 0, -ENOENT for a
 * format not enforced, -ENOMEM / -E2BIG. */
int dse__schema_format_rule(struct schema_ctx *c, const char *format, uint32_t *ret_rule);
/* 1 when dse__schema_format_rule enforces format. */
int dse__schema_format_enforced(const char *format);

/* Resolves a local "$ref" ("#", "#/json/pointer"). -EOPNOTSUPP for a remote reference or
 * an anchor, -EINVAL when the pointer names nothing. */
int dse__schema_resolve_ref(struct schema_ctx *c, const cJSON *ref, const cJSON **ret_target);

/* The types a "type" keyword (plus OpenAPI "nullable") allows; SCHEMA_ALL without one.
 * -EINVAL for an unknown type name. */
int dse__schema_type_keyword(struct schema_ctx *c, const cJSON *schema, unsigned *ret_types);
/* The type of one JSON value. */
unsigned dse__schema_value_type(const cJSON *v);
/* Every type an instance of schema can have, approximated from above (SCHEMA_ALL when
 * unsure): two schemas whose sets do not meet have no instance in common. */
unsigned dse__schema_types(struct schema_ctx *c, const cJSON *schema, int depth);

/* A copy of the schema object s with "allOf" (and, from draft 2019-09 on, "$ref" with
 * sibling keywords) folded into one schema object owned by c->scratch. Folding is exact:
 * keyword pairs whose meaning depends on each other (properties and
 * additionalProperties, items and prefixItems) are merged only when the result means
 * the same, else -EOPNOTSUPP naming the keyword. */
int dse__schema_merge_all_of(struct schema_ctx *c, const cJSON *s, cJSON **ret_merged);
/* A new schema (owned by c->scratch) meaning both a and b: the siblings of an
 * anyOf/oneOf distributed into each branch. Same exactness rule. */
int dse__schema_merge_pair(struct schema_ctx *c, const cJSON *a, const cJSON *b, cJSON **ret_merged);

/* Compiles schema (its own root for "#" references) into rules of b, the rule matching
 * a valid value in *ret_rule: how dse_grammar_compile_json_schema and a composed
 * grammar's "json_schema" part (grammar_compose.c) build it. Errors as the former's. */
int dse__schema_compile_into(struct grammar_builder *b, const cJSON *schema, uint32_t *ret_rule,
                             struct dse_diag *reterr);

/* Keywords that do not constrain instances (annotations, containers): ignored. */
int dse__schema_keyword_is_annotation(const char *name);

#endif
