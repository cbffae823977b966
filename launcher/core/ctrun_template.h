/*
 * ctrun_template.h - "$name" / "${name}" substitution with the exact rules of Python's
 * string.Template.safe_substitute, which torchrun uses for the ${local_rank} macro in script
 * arguments and for TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
 *
 * Rules: "$$" becomes "$"; "$id" and "${id}" (id = [A-Za-z_][A-Za-z0-9_]*, the longest such
 * run) are replaced when id is one of the given names (case-sensitive) and left as written
 * otherwise; any other "$" stays as it is. Nothing else is interpreted.
 */
#ifndef CTRUN_TEMPLATE_H
#define CTRUN_TEMPLATE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_template_var {
    const char *name;
    const char *value;
} ctrun_template_var_t;

/* Substitutes vars into text. *out is a new string the caller frees. Returns 0 or -ENOMEM. */
int ctrun_template_substitute(const char *text, const ctrun_template_var_t *vars, size_t nvars,
                              char **out);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_TEMPLATE_H */
