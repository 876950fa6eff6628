/* The lexical rules of compact, canonical JSON (json_rules.c), built once per grammar
 * and shared by every schema that needs them. Canonical strings escape only `"`, `\`
 * and control characters (\" \\ \b \f \n \r \t, else \u00xx with lowercase hex) and
 * carry everything else as raw, well-formed UTF-8: each string has exactly one spelling,
 * so a string's characters are its code points (minLength/maxLength count them) and
 * a key can be excluded by its bytes. */
#ifndef DSE_GRAMMAR_JSON_RULES_H
#define DSE_GRAMMAR_JSON_RULES_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"

/* Longest repetition a count keyword (minLength, maxItems, ...) may unroll to. */
#define JSON_MAX_COUNT 65536

struct json_rules {
        struct grammar_builder *b;
        int ws; /* JSON whitespace allowed between tokens (else compact) */
        /* rule ids, GRAMMAR_NIL until first asked for */
        uint32_t ch, ch_wide, str_rest, str_rest_wide, any_string, number, integer, boolean, null, any_value, nothing,
                ws_rule;
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
/* Structural characters with the whitespace JSON allows around them when j->ws is set
 * (exactly the character otherwise): open `{`/`[` then whitespace; close: whitespace then
 * `}`/`]`; separator `,`/`:` with whitespace on both sides. Placed so that no two
 * whitespace runs meet (an empty `[]` is open then the bare close byte), which would make
 * one text parse two ways. */
int dse__json_push_open(struct json_rules *j, uint32_t rule, uint8_t ch);
int dse__json_push_close(struct json_rules *j, uint32_t rule, uint8_t ch);
int dse__json_push_separator(struct json_rules *j, uint32_t rule, uint8_t ch);
/* An object key: name as a canonical JSON string with its quotes. */
int dse__json_push_key(struct json_rules *j, uint32_t rule, const char *name);
/* A value given as JSON (an enum or const literal): its compact text, with the
 * whitespace above between the tokens of an array or object when j->ws is set. */
int dse__json_push_literal(struct json_rules *j, uint32_t rule, const cJSON *v);
/* A string of min_chars to max_chars characters (max_chars UINT32_MAX: unbounded);
 * -E2BIG when a bound exceeds JSON_MAX_COUNT. */
int dse__json_rule_string(struct json_rules *j, uint32_t min_chars, uint32_t max_chars, uint32_t *ret_rule);
/* A string (with its quotes) that is none of the n names. Each name is the content of a
 * canonical string in printable ASCII without `"` or `\` (-EINVAL otherwise). */
int dse__json_rule_key_excluding(struct json_rules *j, const char *const *names, size_t n, uint32_t *ret_rule);

#endif
