/* The lexical rules of compact, canonical JSON (json_rules.c), built once per grammar
 * and shared by every schema that needs them. Canonical strings escape only `"`, `\`
 * and control characters (\" \\ \b \f \n \r \t, else \u00xx with lowercase hex) and
 * carry everything else as raw, well-formed UTF-8: each string has exactly one spelling,
 * so a string's characters are its code points (minLength/maxLength count them) and
 * a key can be excluded by its bytes. */
#ifndef DSE_GRAMMAR_JSON_RULES_H
#define DSE_GRAMMAR_JSON_RULES_H

#include "grammar/grammar.h"

/* Longest repetition a count keyword (minLength, maxItems, ...) may unroll to. */
#define JSON_MAX_COUNT 65536

struct json_rules {
        struct grammar_builder *b;
        /* rule ids, GRAMMAR_NIL until first asked for */
        uint32_t ch, ch_wide, str_rest, str_rest_wide, any_string, number, integer, boolean, null, any_value, nothing;
        /* bounded strings already built, shared by every schema with the same bounds */
        struct json_string_rule {
                uint32_t min_chars, max_chars, rule;
        } *strings;
        uint32_t n_strings, cap_strings;
};

void dse__json_rules_init(struct json_rules *j, struct grammar_builder *b);
void dse__json_rules_done(struct json_rules *j);
/* Each sets *ret_rule to the rule matching: one canonical string character; a whole
 * string; a number / an integer (JSON syntax); true|false; null; any JSON value; no
 * input at all. 0, -ENOMEM or -E2BIG. */
int dse__json_rule_char(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_any_string(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_number(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_integer(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_boolean(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_null(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_any_value(struct json_rules *j, uint32_t *ret_rule);
int dse__json_rule_nothing(struct json_rules *j, uint32_t *ret_rule);
/* A string of min_chars to max_chars characters (max_chars UINT32_MAX: unbounded);
 * -E2BIG when a bound exceeds JSON_MAX_COUNT. */
int dse__json_rule_string(struct json_rules *j, uint32_t min_chars, uint32_t max_chars, uint32_t *ret_rule);
/* A string (with its quotes) that is none of the n names. Each name is the content of a
 * canonical string in printable ASCII without `"` or `\` (-EINVAL otherwise). */
int dse__json_rule_key_excluding(struct json_rules *j, const char *const *names, size_t n, uint32_t *ret_rule);

#endif
