/*
 * ct_env.h - typed reading of environment variables (RANK, WORLD_SIZE, PET_*, CT_*).
 *
 * Each reader distinguishes "not set" (the default applies) from "set but wrong" (an error
 * whose message names the variable and quotes its value, e.g. `WORLD_SIZE="0": 0 is out of
 * range (expected 1..1048576)`). A variable set to the empty string counts as set: an empty
 * RANK is a mistake worth reporting, not a reason to fall back silently.
 */
#ifndef CT_ENV_H
#define CT_ENV_H

#include <stdbool.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value of name, or NULL when it is not set. */
const char *ct_env_str(const char *name);

/* True when name is set (possibly to the empty string). */
bool ct_env_is_set(const char *name);

/* Reads an integer in [min, max]. Unset: *out = dflt, *found = false (found may be NULL).
 * Set but invalid: CT_EPARSE or CT_ERANGE_VALUE, message in eb, *out untouched. */
int ct_env_int64(const char *name, int64_t min, int64_t max, int64_t dflt, int64_t *out,
                 bool *found, ct_errbuf_t *eb);
int ct_env_int(const char *name, int min, int max, int dflt, int *out, bool *found,
               ct_errbuf_t *eb);

/* Reads a finite number in [min, max], same contract. */
int ct_env_double(const char *name, double min, double max, double dflt, double *out,
                  bool *found, ct_errbuf_t *eb);

/* Reads a boolean in torchrun's spellings (see ct_parse_bool), same contract. */
int ct_env_bool(const char *name, bool dflt, bool *out, bool *found, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_ENV_H */
