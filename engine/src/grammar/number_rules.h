/* JSON numbers under numeric constraints (number_rules.c): a value interval, built as
 * a digit automaton over the canonical decimal digits, and integer multiples. */
#ifndef DSE_GRAMMAR_NUMBER_RULES_H
#define DSE_GRAMMAR_NUMBER_RULES_H

#include "grammar/grammar.h"

/* Bounds exact in a double: |bound| <= 2^53. */
#define NUMBER_MAX_BOUND 9007199254740992LL
/* The largest k an integer multipleOf is built for (k rules of up to 10 alternatives). */
#define NUMBER_MAX_MULTIPLE 1000

/* An interval of values with integer ends; an end absent is unbounded. */
struct number_interval {
        int has_lo, has_hi;
        int64_t lo, hi;
        int lo_open, hi_open;
};

/* A new rule matching the JSON numbers in the interval: integers only
 * (-?(0|[1-9][0-9]*)), or with integer_only 0 also with a fraction (\.[0-9]+), never
 * an exponent. "-0" and negative zero fractions are not produced. 0, -ENOMEM, -E2BIG. */
int dse__number_rule_interval(struct grammar_builder *b, int integer_only, const struct number_interval *in,
                              uint32_t *ret_rule);
/* A new rule matching the JSON integers that are multiples of k (1 <= k <=
 * NUMBER_MAX_MULTIPLE), without "-0". */
int dse__number_rule_multiple(struct grammar_builder *b, uint32_t k, uint32_t *ret_rule);

#endif
