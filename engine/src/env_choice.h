/* The engine's switches read from the environment whose value is one of a few names
 * (DSV_CPU, DSV_ACT, DSV_KV, DSV_KV_PAGES): one lookup, one message for an unknown
 * value. Not installed. */
#ifndef DSE_ENV_CHOICE_H
#define DSE_ENV_CHOICE_H

#include "dse.h"

/* The index of str among names[0..n_names-1], or -1 (str NULL included). */
int dse__choice_index(const char *const *names, int n_names, const char *str);

/* "a, b or c" into buf (size >= 1), names[first] first when first >= 0; a list too long
 * for buf is cut at a name. */
void dse__choice_names(const char *const *names, int n_names, int first, char *buf, size_t size);

/* *ret_index = the index among names[0..n_names-1] of the value of the environment
 * variable var, or default_index when var is unset or empty (-1: no default). An
 * unknown value is -EINVAL, with "VAR='value' is not WHAT; use a, b or c" naming the
 * default first. */
int dse__env_choice(const char *var, const char *what, const char *const *names, int n_names, int default_index,
                    int *ret_index, struct dse_diag *reterr);

#endif
