/* The lexical rules of compact, canonical JSON (json_rules.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_rules.h"

void dse__json_rules_init(struct json_rules *j, struct grammar_builder *b) {
        j->b = b;
        j->ch = j->ch_wide = j->str_rest = j->str_rest_wide = j->any_string = j->number = j->integer = j->boolean =
                j->null = j->any_value = j->nothing = j->ws_rule = GRAMMAR_NIL;
        j->ws = 0;
        j->strings = NULL;
        j->n_strings = j->cap_strings = 0;
}

void dse__json_rules_done(struct json_rules *j) {
        free(j->strings);
        j->strings = NULL;
        j->n_strings = j->cap_strings = 0;
}

static struct grammar_class range_class(uint8_t lo, uint8_t hi) {
        struct grammar_class c = {{0}};
        grammar_class_add_range(&c, lo, hi);
        return c;
}

static struct grammar_class chars_class(const char *chars) {
        struct grammar_class c = {{0}};
        for (; *chars; chars++)
                grammar_class_add_range(&c, (uint8_t)*chars, (uint8_t)*chars);
        return c;
}

/* The single-byte characters: printable ASCII and DEL, without `"` and `\`. */
static struct grammar_class ascii_chars(void) {
        struct grammar_class c = range_class(0x20, 0x7f);
        c.bits[0x22 >> 6] &= ~((uint64_t)1 << (0x22 & 63));
        c.bits[0x5c >> 6] &= ~((uint64_t)1 << (0x5c & 63));
        return c;
}

/* alternative: lead byte class, then n continuation classes */
static int utf8_alt(struct grammar_builder *b, uint32_t rule, struct grammar_class lead, struct grammar_class second,
                    int n_more) {
        struct grammar_class cont = range_class(0x80, 0xbf);
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        GRAMMAR_TRY(dse__grammar_push_class(b, rule, &lead));
        GRAMMAR_TRY(dse__grammar_push_class(b, rule, &second));
        for (int i = 0; i < n_more; i++)
                GRAMMAR_TRY(dse__grammar_push_class(b, rule, &cont));
        return 0;
}

/* Every character but the single-byte ones: escapes and multi-byte UTF-8. */
static int rule_char_wide(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->ch_wide != GRAMMAR_NIL) {
                *ret_rule = j->ch_wide;
                return 0;
        }
        uint32_t w;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &w));
        struct grammar_class c;
        GRAMMAR_TRY(dse__grammar_alt_begin(b, w));
        GRAMMAR_TRY(dse__grammar_push_byte(b, w, '\\'));
        c = chars_class("\"\\bfnrt");
        GRAMMAR_TRY(dse__grammar_push_class(b, w, &c));
        /* \u00xx for the control characters without a short escape */
        GRAMMAR_TRY(dse__grammar_alt_begin(b, w));
        GRAMMAR_TRY(dse__grammar_push_bytes(b, w, "\\u000", 5));
        c = chars_class("01234567bef");
        GRAMMAR_TRY(dse__grammar_push_class(b, w, &c));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, w));
        GRAMMAR_TRY(dse__grammar_push_bytes(b, w, "\\u001", 5));
        c = chars_class("0123456789abcdef");
        GRAMMAR_TRY(dse__grammar_push_class(b, w, &c));
        /* well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF) */
        struct grammar_class cont = range_class(0x80, 0xbf);
        GRAMMAR_TRY(utf8_alt(b, w, range_class(0xc2, 0xdf), cont, 0));
        GRAMMAR_TRY(utf8_alt(b, w, range_class(0xe0, 0xe0), range_class(0xa0, 0xbf), 1));
        struct grammar_class e1 = range_class(0xe1, 0xec);
        grammar_class_add_range(&e1, 0xee, 0xef);
        GRAMMAR_TRY(utf8_alt(b, w, e1, cont, 1));
        GRAMMAR_TRY(utf8_alt(b, w, range_class(0xed, 0xed), range_class(0x80, 0x9f), 1));
        GRAMMAR_TRY(utf8_alt(b, w, range_class(0xf0, 0xf0), range_class(0x90, 0xbf), 2));
        GRAMMAR_TRY(utf8_alt(b, w, range_class(0xf1, 0xf3), cont, 2));
        GRAMMAR_TRY(utf8_alt(b, w, range_class(0xf4, 0xf4), range_class(0x80, 0x8f), 2));
        j->ch_wide = *ret_rule = w;
        return 0;
}

int dse__json_rule_char(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->ch == GRAMMAR_NIL) {
                uint32_t ch, wide;
                GRAMMAR_TRY(rule_char_wide(j, &wide));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &ch));
                struct grammar_class a = ascii_chars();
                GRAMMAR_TRY(dse__grammar_alt_begin(b, ch));
                GRAMMAR_TRY(dse__grammar_push_class(b, ch, &a));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, ch));
                GRAMMAR_TRY(dse__grammar_push_ref(b, ch, wide));
                j->ch = ch;
        }
        *ret_rule = j->ch;
        return 0;
}

/* The rest of a string after its opening quote: characters, then the closing quote. */
static int rule_str_rest(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->str_rest == GRAMMAR_NIL) {
                uint32_t ch, rest;
                GRAMMAR_TRY(dse__json_rule_char(j, &ch));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &rest));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, rest));
                GRAMMAR_TRY(dse__grammar_push_byte(b, rest, '"'));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, rest));
                GRAMMAR_TRY(dse__grammar_push_ref(b, rest, ch));
                GRAMMAR_TRY(dse__grammar_push_ref(b, rest, rest));
                j->str_rest = rest;
        }
        *ret_rule = j->str_rest;
        return 0;
}

/* The rest of a string from a character other than a single byte on: one rule shared by
 * every place a wide character continues a string, so the stacks inside that character
 * are the same whichever place they came from (the key trie's nodes below). */
static int rule_str_rest_wide(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->str_rest_wide == GRAMMAR_NIL) {
                uint32_t wide, rest, r;
                GRAMMAR_TRY(rule_char_wide(j, &wide));
                GRAMMAR_TRY(rule_str_rest(j, &rest));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                GRAMMAR_TRY(dse__grammar_push_ref(b, r, wide));
                GRAMMAR_TRY(dse__grammar_push_ref(b, r, rest));
                j->str_rest_wide = r;
        }
        *ret_rule = j->str_rest_wide;
        return 0;
}

int dse__json_rule_any_string(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->any_string == GRAMMAR_NIL) {
                uint32_t rest, s;
                GRAMMAR_TRY(rule_str_rest(j, &rest));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &s));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, s));
                GRAMMAR_TRY(dse__grammar_push_byte(b, s, '"'));
                GRAMMAR_TRY(dse__grammar_push_ref(b, s, rest));
                j->any_string = s;
        }
        *ret_rule = j->any_string;
        return 0;
}

int dse__json_rule_string(struct json_rules *j, uint32_t min_chars, uint32_t max_chars, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (min_chars > max_chars)
                return dse__json_rule_nothing(j, ret_rule);
        if (min_chars == 0 && max_chars == UINT32_MAX)
                return dse__json_rule_any_string(j, ret_rule);
        uint32_t last = max_chars == UINT32_MAX ? min_chars : max_chars;
        if (last > JSON_MAX_COUNT)
                return -E2BIG;
        for (uint32_t i = 0; i < j->n_strings; i++)
                if (j->strings[i].min_chars == min_chars && j->strings[i].max_chars == max_chars) {
                        *ret_rule = j->strings[i].rule;
                        return 0;
                }
        GRAMMAR_TRY(dse__grammar_grow((void **)&j->strings, &j->cap_strings, (uint64_t)j->n_strings + 1, sizeof *j->strings));
        uint32_t ch, first, s;
        GRAMMAR_TRY(dse__json_rule_char(j, &ch));
        /* rule first + i: i characters read so far */
        for (uint32_t i = 0; i <= last; i++) {
                uint32_t r;
                GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
                if (i == 0)
                        first = r;
        }
        for (uint32_t i = 0; i <= last; i++) {
                uint32_t r = first + i;
                if (i >= min_chars) {
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                        GRAMMAR_TRY(dse__grammar_push_byte(b, r, '"'));
                }
                if (i < max_chars) {
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, r, ch));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, r, first + (i + 1 <= last ? i + 1 : last)));
                }
        }
        GRAMMAR_TRY(dse__grammar_rule_new(b, &s));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, s));
        GRAMMAR_TRY(dse__grammar_push_byte(b, s, '"'));
        GRAMMAR_TRY(dse__grammar_push_ref(b, s, first));
        j->strings[j->n_strings++] = (struct json_string_rule){min_chars, max_chars, s};
        *ret_rule = s;
        return 0;
}

/* digits ::= [0-9] digits | (nothing) */
static int rule_digits(struct grammar_builder *b, uint32_t *ret_rule) {
        struct grammar_class d = range_class('0', '9');
        uint32_t r;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        GRAMMAR_TRY(dse__grammar_push_class(b, r, &d));
        GRAMMAR_TRY(dse__grammar_push_ref(b, r, r));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        *ret_rule = r;
        return 0;
}

/* -?(0|[1-9][0-9]*) */
static int rule_int_part(struct grammar_builder *b, uint32_t digits, uint32_t *ret_rule) {
        struct grammar_class nz = range_class('1', '9');
        uint32_t unsigned_part, r;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &unsigned_part));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, unsigned_part));
        GRAMMAR_TRY(dse__grammar_push_byte(b, unsigned_part, '0'));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, unsigned_part));
        GRAMMAR_TRY(dse__grammar_push_class(b, unsigned_part, &nz));
        GRAMMAR_TRY(dse__grammar_push_ref(b, unsigned_part, digits));
        GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        GRAMMAR_TRY(dse__grammar_push_ref(b, r, unsigned_part));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        GRAMMAR_TRY(dse__grammar_push_byte(b, r, '-'));
        GRAMMAR_TRY(dse__grammar_push_ref(b, r, unsigned_part));
        *ret_rule = r;
        return 0;
}

int dse__json_rule_integer(struct json_rules *j, uint32_t *ret_rule) {
        if (j->integer == GRAMMAR_NIL) {
                uint32_t digits;
                GRAMMAR_TRY(rule_digits(j->b, &digits));
                GRAMMAR_TRY(rule_int_part(j->b, digits, &j->integer));
        }
        *ret_rule = j->integer;
        return 0;
}

int dse__json_rule_number(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->number == GRAMMAR_NIL) {
                struct grammar_class d = range_class('0', '9'), e = chars_class("eE"), sign = chars_class("+-");
                uint32_t digits, int_part, frac, exp, sgn, n;
                GRAMMAR_TRY(rule_digits(b, &digits));
                GRAMMAR_TRY(rule_int_part(b, digits, &int_part));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &frac)); /* (\.[0-9]+)? */
                GRAMMAR_TRY(dse__grammar_alt_begin(b, frac));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, frac));
                GRAMMAR_TRY(dse__grammar_push_byte(b, frac, '.'));
                GRAMMAR_TRY(dse__grammar_push_class(b, frac, &d));
                GRAMMAR_TRY(dse__grammar_push_ref(b, frac, digits));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &sgn)); /* [+-]? */
                GRAMMAR_TRY(dse__grammar_alt_begin(b, sgn));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, sgn));
                GRAMMAR_TRY(dse__grammar_push_class(b, sgn, &sign));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &exp)); /* ([eE][+-]?[0-9]+)? */
                GRAMMAR_TRY(dse__grammar_alt_begin(b, exp));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, exp));
                GRAMMAR_TRY(dse__grammar_push_class(b, exp, &e));
                GRAMMAR_TRY(dse__grammar_push_ref(b, exp, sgn));
                GRAMMAR_TRY(dse__grammar_push_class(b, exp, &d));
                GRAMMAR_TRY(dse__grammar_push_ref(b, exp, digits));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &n));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, n));
                GRAMMAR_TRY(dse__grammar_push_ref(b, n, int_part));
                GRAMMAR_TRY(dse__grammar_push_ref(b, n, frac));
                GRAMMAR_TRY(dse__grammar_push_ref(b, n, exp));
                j->number = n;
        }
        *ret_rule = j->number;
        return 0;
}

static int literal_rule(struct grammar_builder *b, const char *const *words, size_t n, uint32_t *ret_rule) {
        uint32_t r;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
        for (size_t i = 0; i < n; i++) {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                GRAMMAR_TRY(dse__grammar_push_bytes(b, r, words[i], strlen(words[i])));
        }
        *ret_rule = r;
        return 0;
}

int dse__json_rule_boolean(struct json_rules *j, uint32_t *ret_rule) {
        static const char *const words[] = {"true", "false"};
        if (j->boolean == GRAMMAR_NIL)
                GRAMMAR_TRY(literal_rule(j->b, words, 2, &j->boolean));
        *ret_rule = j->boolean;
        return 0;
}

int dse__json_rule_null(struct json_rules *j, uint32_t *ret_rule) {
        static const char *const words[] = {"null"};
        if (j->null == GRAMMAR_NIL)
                GRAMMAR_TRY(literal_rule(j->b, words, 1, &j->null));
        *ret_rule = j->null;
        return 0;
}

int dse__json_rule_nothing(struct json_rules *j, uint32_t *ret_rule) {
        if (j->nothing == GRAMMAR_NIL)
                GRAMMAR_TRY(dse__grammar_rule_new(j->b, &j->nothing));
        *ret_rule = j->nothing;
        return 0;
}

/* ws ::= "" | [ \t\n\r] ws */
static int rule_ws(struct json_rules *j, uint32_t *ret_rule) {
        if (j->ws_rule == GRAMMAR_NIL) {
                struct grammar_class blank = chars_class(" \t\n\r");
                uint32_t ws;
                GRAMMAR_TRY(dse__grammar_rule_new(j->b, &ws));
                GRAMMAR_TRY(dse__grammar_alt_begin(j->b, ws));
                GRAMMAR_TRY(dse__grammar_alt_begin(j->b, ws));
                GRAMMAR_TRY(dse__grammar_push_class(j->b, ws, &blank));
                GRAMMAR_TRY(dse__grammar_push_ref(j->b, ws, ws));
                j->ws_rule = ws;
        }
        *ret_rule = j->ws_rule;
        return 0;
}

static int push_ws(struct json_rules *j, uint32_t rule) {
        uint32_t ws;
        if (!j->ws)
                return 0;
        GRAMMAR_TRY(rule_ws(j, &ws));
        return dse__grammar_push_ref(j->b, rule, ws);
}

int dse__json_push_open(struct json_rules *j, uint32_t rule, uint8_t ch) {
        GRAMMAR_TRY(dse__grammar_push_byte(j->b, rule, ch));
        return push_ws(j, rule);
}

int dse__json_push_close(struct json_rules *j, uint32_t rule, uint8_t ch) {
        GRAMMAR_TRY(push_ws(j, rule));
        return dse__grammar_push_byte(j->b, rule, ch);
}

int dse__json_push_separator(struct json_rules *j, uint32_t rule, uint8_t ch) {
        GRAMMAR_TRY(push_ws(j, rule));
        GRAMMAR_TRY(dse__grammar_push_byte(j->b, rule, ch));
        return push_ws(j, rule);
}

static int push_printed(struct grammar_builder *b, uint32_t rule, const cJSON *v) {
        char *text = cJSON_PrintUnformatted(v);
        if (!text)
                return -ENOMEM;
        int r = dse__grammar_push_bytes(b, rule, text, strlen(text));
        free(text);
        return r;
}

int dse__json_push_key(struct json_rules *j, uint32_t rule, const char *name) {
        cJSON *key = cJSON_CreateString(name);
        int r = key ? push_printed(j->b, rule, key) : -ENOMEM;
        cJSON_Delete(key);
        return r;
}

int dse__json_push_literal(struct json_rules *j, uint32_t rule, const cJSON *v) {
        if (!j->ws || !(cJSON_IsArray(v) || cJSON_IsObject(v)))
                return push_printed(j->b, rule, v);
        int obj = cJSON_IsObject(v);
        const cJSON *e;
        GRAMMAR_TRY(dse__json_push_open(j, rule, obj ? '{' : '['));
        cJSON_ArrayForEach(e, v) {
                if (e != v->child)
                        GRAMMAR_TRY(dse__json_push_separator(j, rule, ','));
                if (obj) {
                        GRAMMAR_TRY(dse__json_push_key(j, rule, e->string));
                        GRAMMAR_TRY(dse__json_push_separator(j, rule, ':'));
                }
                GRAMMAR_TRY(dse__json_push_literal(j, rule, e));
        }
        if (!v->child)
                return dse__grammar_push_byte(j->b, rule, obj ? '}' : ']');
        return dse__json_push_close(j, rule, obj ? '}' : ']');
}

/* After the opening character (and its whitespace):
 * list ::= close | item tail;  tail ::= close | ',' item tail */
static int rule_list_rest(struct json_rules *j, uint32_t item, uint8_t close, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        uint32_t rest, tail;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &rest));
        GRAMMAR_TRY(dse__grammar_rule_new(b, &tail));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rest));
        GRAMMAR_TRY(dse__grammar_push_byte(b, rest, close));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rest));
        GRAMMAR_TRY(dse__grammar_push_ref(b, rest, item));
        GRAMMAR_TRY(dse__grammar_push_ref(b, rest, tail));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, tail));
        GRAMMAR_TRY(dse__json_push_close(j, tail, close));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, tail));
        GRAMMAR_TRY(dse__json_push_separator(j, tail, ','));
        GRAMMAR_TRY(dse__grammar_push_ref(b, tail, item));
        GRAMMAR_TRY(dse__grammar_push_ref(b, tail, tail));
        *ret_rule = rest;
        return 0;
}

int dse__json_rule_any_value(struct json_rules *j, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        if (j->any_value == GRAMMAR_NIL) {
                uint32_t v, str, num, boolean, null, member, obj_rest, arr_rest;
                GRAMMAR_TRY(dse__json_rule_any_string(j, &str));
                GRAMMAR_TRY(dse__json_rule_number(j, &num));
                GRAMMAR_TRY(dse__json_rule_boolean(j, &boolean));
                GRAMMAR_TRY(dse__json_rule_null(j, &null));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &v));
                GRAMMAR_TRY(dse__grammar_rule_new(b, &member)); /* string ':' value */
                GRAMMAR_TRY(dse__grammar_alt_begin(b, member));
                GRAMMAR_TRY(dse__grammar_push_ref(b, member, str));
                GRAMMAR_TRY(dse__json_push_separator(j, member, ':'));
                GRAMMAR_TRY(dse__grammar_push_ref(b, member, v));
                GRAMMAR_TRY(rule_list_rest(j, member, '}', &obj_rest));
                GRAMMAR_TRY(rule_list_rest(j, v, ']', &arr_rest));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, v));
                GRAMMAR_TRY(dse__json_push_open(j, v, '{'));
                GRAMMAR_TRY(dse__grammar_push_ref(b, v, obj_rest));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, v));
                GRAMMAR_TRY(dse__json_push_open(j, v, '['));
                GRAMMAR_TRY(dse__grammar_push_ref(b, v, arr_rest));
                uint32_t scalars[] = {str, num, boolean, null};
                for (size_t i = 0; i < 4; i++) {
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, v));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, v, scalars[i]));
                }
                j->any_value = v;
        }
        *ret_rule = j->any_value;
        return 0;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The rest of a key after `depth` bytes that are a common prefix of names[0..n) (sorted):
 * the key may still turn into one of them, so only a byte leaving that prefix tree (or
 * the closing quote where no name ends) frees it. */
static int key_node(struct json_rules *j, const char *const *names, size_t n, size_t depth, uint32_t *ret_rule) {
        struct grammar_builder *b = j->b;
        uint32_t r, wide_rest, rest;
        GRAMMAR_TRY(rule_str_rest_wide(j, &wide_rest));
        GRAMMAR_TRY(rule_str_rest(j, &rest));
        GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
        size_t i = 0;
        if (strlen(names[0]) == depth) {
                i = 1; /* a name ends here: the key may not */
        } else {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                GRAMMAR_TRY(dse__grammar_push_byte(b, r, '"'));
        }
        struct grammar_class other = ascii_chars();
        while (i < n) {
                uint8_t c = (uint8_t)names[i][depth];
                size_t k = i;
                while (k < n && (uint8_t)names[k][depth] == c)
                        k++;
                uint32_t child;
                GRAMMAR_TRY(key_node(j, names + i, k - i, depth + 1, &child));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                GRAMMAR_TRY(dse__grammar_push_byte(b, r, c));
                GRAMMAR_TRY(dse__grammar_push_ref(b, r, child));
                other.bits[c >> 6] &= ~((uint64_t)1 << (c & 63));
                i = k;
        }
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        GRAMMAR_TRY(dse__grammar_push_class(b, r, &other));
        GRAMMAR_TRY(dse__grammar_push_ref(b, r, rest));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        GRAMMAR_TRY(dse__grammar_push_ref(b, r, wide_rest));
        *ret_rule = r;
        return 0;
}

int dse__json_rule_key_excluding(struct json_rules *j, const char *const *names, size_t n, uint32_t *ret_rule) {
        if (n == 0)
                return dse__json_rule_any_string(j, ret_rule);
        for (size_t i = 0; i < n; i++)
                for (const char *p = names[i]; *p; p++)
                        if ((uint8_t)*p < 0x20 || (uint8_t)*p > 0x7e || *p == '"' || *p == '\\')
                                return -EINVAL;
        const char **sorted = malloc(n * sizeof *sorted);
        if (!sorted)
                return -ENOMEM;
        memcpy(sorted, names, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_names);
        size_t m = 0; /* drop repeats */
        for (size_t i = 0; i < n; i++)
                if (m == 0 || strcmp(sorted[m - 1], sorted[i]))
                        sorted[m++] = sorted[i];
        uint32_t node, key;
        int r = key_node(j, sorted, m, 0, &node);
        free(sorted);
        if (r < 0)
                return r;
        GRAMMAR_TRY(dse__grammar_rule_new(j->b, &key));
        GRAMMAR_TRY(dse__grammar_alt_begin(j->b, key));
        GRAMMAR_TRY(dse__grammar_push_byte(j->b, key, '"'));
        GRAMMAR_TRY(dse__grammar_push_ref(j->b, key, node));
        *ret_rule = key;
        return 0;
}
