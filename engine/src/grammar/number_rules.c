/* Numbers in an interval and integer multiples as rules (number_rules.h). A magnitude
 * range [lo, hi] of canonical unsigned integers is split by digit count, and each
 * same-length range by its first differing digit (the construction regex range
 * generators use), so the rule reads each digit once. With fractions, the magnitude
 * t = I.F is judged through its integer part I: t >= a is I >= a; t > a is I > a or
 * I = a with a fraction that is not zero; t <= b is I < b or I = b with a zero
 * fraction; t < b is I < b. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "grammar/number_rules.h"
#include "grammar/regex.h"

#define MAG_UNBOUNDED UINT64_MAX

static int push_digit_class(struct grammar_builder *b, uint32_t rule, char lo, char hi) {
        struct grammar_class c = {{0}};
        grammar_class_add_range(&c, (uint8_t)lo, (uint8_t)hi);
        return dse__grammar_push_class(b, rule, &c);
}

/* A rule matching the n-digit strings from x to y (x <= y; leading zeros are the
 * caller's business). */
static int digits_between(struct grammar_builder *b, const char *x, const char *y, size_t n, uint32_t *ret_rule) {
        uint32_t r;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &r));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        *ret_rule = r;
        if (n == 0)
                return 0;
        size_t k = 1;
        while (k < n && x[k] == '0' && y[k] == '9')
                k++;
        if (k == n) { /* [x0-y0] then any digits */
                GRAMMAR_TRY(push_digit_class(b, r, x[0], y[0]));
                for (size_t i = 1; i < n; i++)
                        GRAMMAR_TRY(push_digit_class(b, r, '0', '9'));
                return 0;
        }
        uint32_t sub;
        if (x[0] == y[0]) {
                GRAMMAR_TRY(dse__grammar_push_byte(b, r, (uint8_t)x[0]));
                GRAMMAR_TRY(digits_between(b, x + 1, y + 1, n - 1, &sub));
                return dse__grammar_push_ref(b, r, sub);
        }
        char nines[24], zeros[24];
        memset(nines, '9', n - 1);
        memset(zeros, '0', n - 1);
        GRAMMAR_TRY(dse__grammar_push_byte(b, r, (uint8_t)x[0]));
        GRAMMAR_TRY(digits_between(b, x + 1, nines, n - 1, &sub));
        GRAMMAR_TRY(dse__grammar_push_ref(b, r, sub));
        if (x[0] + 1 <= y[0] - 1) {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
                GRAMMAR_TRY(push_digit_class(b, r, (char)(x[0] + 1), (char)(y[0] - 1)));
                for (size_t i = 1; i < n; i++)
                        GRAMMAR_TRY(push_digit_class(b, r, '0', '9'));
        }
        GRAMMAR_TRY(dse__grammar_alt_begin(b, r));
        GRAMMAR_TRY(dse__grammar_push_byte(b, r, (uint8_t)y[0]));
        GRAMMAR_TRY(digits_between(b, zeros, y + 1, n - 1, &sub));
        return dse__grammar_push_ref(b, r, sub);
}

/* Adds to rule alternatives for the canonical unsigned integers in [lo, hi]
 * (hi MAG_UNBOUNDED: no upper end), each followed by a reference to tail (GRAMMAR_NIL:
 * nothing). */
static int push_magnitudes(struct grammar_builder *b, uint32_t rule, uint64_t lo, uint64_t hi, uint32_t tail) {
        if (lo > hi)
                return 0;
        char x[24], y[24];
        int nx = snprintf(x, sizeof x, "%llu", (unsigned long long)lo);
        int ny = hi == MAG_UNBOUNDED ? nx : snprintf(y, sizeof y, "%llu", (unsigned long long)hi);
        for (int n = nx; n <= ny; n++) {
                char from[24], to[24];
                if (n == nx)
                        memcpy(from, x, (size_t)n);
                else {
                        from[0] = '1';
                        memset(from + 1, '0', (size_t)n - 1);
                }
                if (n == ny && hi != MAG_UNBOUNDED)
                        memcpy(to, y, (size_t)n);
                else
                        memset(to, '9', (size_t)n);
                uint32_t digits;
                GRAMMAR_TRY(digits_between(b, from, to, (size_t)n, &digits));
                GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
                GRAMMAR_TRY(dse__grammar_push_ref(b, rule, digits));
                if (n == ny && hi == MAG_UNBOUNDED) {
                        /* and every longer number: [1-9] then n or more digits */
                        uint32_t more;
                        struct grammar_class d = {{0}};
                        grammar_class_add_range(&d, '0', '9');
                        GRAMMAR_TRY(dse__grammar_rule_new(b, &more));
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, more));
                        GRAMMAR_TRY(dse__grammar_push_class(b, more, &d));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, more, more));
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, more));
                        if (tail != GRAMMAR_NIL)
                                GRAMMAR_TRY(dse__grammar_push_ref(b, rule, tail));
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
                        GRAMMAR_TRY(push_digit_class(b, rule, '1', '9'));
                        for (int i = 0; i < n; i++)
                                GRAMMAR_TRY(dse__grammar_push_class(b, rule, &d));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, rule, more));
                }
                if (tail != GRAMMAR_NIL)
                        GRAMMAR_TRY(dse__grammar_push_ref(b, rule, tail));
        }
        return 0;
}

struct fractions {
        uint32_t any, zero, nonzero; /* (\.[0-9]+)?, (\.0+)?, \.0*[1-9][0-9]* */
};

static int fraction_rules(struct grammar_builder *b, struct fractions *f) {
        static const char *const res[] = {"(\\.[0-9]+)?", "(\\.0+)?", "\\.0*[1-9][0-9]*"};
        uint32_t *out[] = {&f->any, &f->zero, &f->nonzero};
        for (size_t i = 0; i < 3; i++)
                GRAMMAR_TRY(dse__regex_rule(b, res[i], strlen(res[i]), 0, out[i], NULL, NULL));
        return 0;
}

/* Adds alternatives, each starting with sign (0: none), for magnitudes t between a
 * and b (b MAG_UNBOUNDED: none), open ends excluded. */
static int push_side(struct grammar_builder *b, uint32_t rule, char sign, uint64_t a, int a_open, uint64_t hi,
                     int hi_open, const struct fractions *f) {
        uint32_t part;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &part));
        int unbounded = hi == MAG_UNBOUNDED;
        uint64_t lo_int = a + (a_open ? 1 : 0);
        if (!f) { /* integers: I itself */
                uint64_t top = unbounded ? MAG_UNBOUNDED : hi_open ? (hi == 0 ? 0 : hi - 1) : hi;
                if (!unbounded && hi_open && hi == 0)
                        return 0;
                GRAMMAR_TRY(push_magnitudes(b, part, lo_int, top, GRAMMAR_NIL));
        } else {
                if (unbounded)
                        GRAMMAR_TRY(push_magnitudes(b, part, lo_int, MAG_UNBOUNDED, f->any));
                else if (hi >= 1)
                        GRAMMAR_TRY(push_magnitudes(b, part, lo_int, hi - 1, f->any));
                if (a_open && (unbounded || a < hi))
                        GRAMMAR_TRY(push_magnitudes(b, part, a, a, f->nonzero));
                if (!unbounded && !hi_open && hi >= a && !(a_open && a == hi))
                        GRAMMAR_TRY(push_magnitudes(b, part, hi, hi, f->zero));
        }
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        if (sign)
                GRAMMAR_TRY(dse__grammar_push_byte(b, rule, (uint8_t)sign));
        return dse__grammar_push_ref(b, rule, part);
}

int dse__number_rule_interval(struct grammar_builder *b, int integer_only, const struct number_interval *in,
                              uint32_t *ret_rule) {
        struct fractions f;
        if (!integer_only)
                GRAMMAR_TRY(fraction_rules(b, &f));
        uint32_t rule;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &rule));
        /* x >= 0 */
        if (!in->has_hi || in->hi > 0 || (in->hi == 0 && !in->hi_open)) {
                int lo_pos = in->has_lo && in->lo >= 0;
                GRAMMAR_TRY(push_side(b, rule, 0, lo_pos ? (uint64_t)in->lo : 0, lo_pos && in->lo_open,
                                      in->has_hi ? (uint64_t)in->hi : MAG_UNBOUNDED, in->hi_open,
                                      integer_only ? NULL : &f));
        }
        /* x < 0: t = -x, with t > 0 */
        if (!in->has_lo || in->lo < 0) {
                int hi_neg = in->has_hi && in->hi < 0;
                GRAMMAR_TRY(push_side(b, rule, '-', hi_neg ? (uint64_t)-in->hi : 0, hi_neg ? in->hi_open : 1,
                                      in->has_lo ? (uint64_t)-in->lo : MAG_UNBOUNDED, in->lo_open,
                                      integer_only ? NULL : &f));
        }
        *ret_rule = rule;
        return 0;
}

int dse__number_rule_multiple(struct grammar_builder *b, uint32_t k, uint32_t *ret_rule) {
        if (k < 1 || k > NUMBER_MAX_MULTIPLE)
                return -E2BIG;
        /* rule rem + r: digits read so far leave remainder r */
        uint32_t rem = 0, rule;
        for (uint32_t r = 0; r < k; r++) {
                uint32_t id;
                GRAMMAR_TRY(dse__grammar_rule_new(b, &id));
                if (r == 0)
                        rem = id;
        }
        for (uint32_t r = 0; r < k; r++) {
                if (r == 0)
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, rem));
                /* the digits leading to the same remainder share one class */
                for (uint32_t d0 = 0; d0 < 10 && d0 < k; d0++) {
                        struct grammar_class c = {{0}};
                        uint32_t to = (r * 10 + d0) % k;
                        for (uint32_t d = d0; d < 10; d += k)
                                grammar_class_add_range(&c, (uint8_t)('0' + d), (uint8_t)('0' + d));
                        GRAMMAR_TRY(dse__grammar_alt_begin(b, rem + r));
                        GRAMMAR_TRY(dse__grammar_push_class(b, rem + r, &c));
                        GRAMMAR_TRY(dse__grammar_push_ref(b, rem + r, rem + to));
                }
        }
        uint32_t positive;
        GRAMMAR_TRY(dse__grammar_rule_new(b, &positive));
        for (uint32_t d = 1; d < 10; d++) {
                GRAMMAR_TRY(dse__grammar_alt_begin(b, positive));
                GRAMMAR_TRY(dse__grammar_push_byte(b, positive, (uint8_t)('0' + d)));
                GRAMMAR_TRY(dse__grammar_push_ref(b, positive, rem + d % k));
        }
        GRAMMAR_TRY(dse__grammar_rule_new(b, &rule));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        GRAMMAR_TRY(dse__grammar_push_byte(b, rule, '0'));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        GRAMMAR_TRY(dse__grammar_push_ref(b, rule, positive));
        GRAMMAR_TRY(dse__grammar_alt_begin(b, rule));
        GRAMMAR_TRY(dse__grammar_push_byte(b, rule, '-'));
        GRAMMAR_TRY(dse__grammar_push_ref(b, rule, positive));
        *ret_rule = rule;
        return 0;
}
