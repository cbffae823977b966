/*
 * ctrain_yaml.h - a two-level YAML configuration file (section: {key: scalar}) read with
 * libyaml, leaf by leaf, for --config. Knows no key names (ctrain_cfg.c does).
 */
#ifndef CTRAIN_YAML_H
#define CTRAIN_YAML_H

#include <stdbool.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ctrain_yaml_kind {
    CTRAIN_YAML_PLAIN = 0,  /* an unquoted scalar: number, bool or word */
    CTRAIN_YAML_QUOTED,     /* a quoted string */
    CTRAIN_YAML_NULL,       /* null, ~ or nothing */
    CTRAIN_YAML_NOT_SCALAR, /* a list or mapping where a value belongs (value NULL) */
} ctrain_yaml_kind_t;

/* One leaf section.key of kind with its text (NULL unless PLAIN or QUOTED); a non-zero return
 * (with eb set) stops the reading and is returned. */
typedef int (*ctrain_yaml_leaf_fn)(void *ctx, const char *section, const char *key,
                                   const char *value, ctrain_yaml_kind_t kind, ct_errbuf_t *eb);

/* Reads path and calls fn for every leaf in file order. An unreadable or malformed file, or a
 * structure other than sections of scalars: one line naming the file (and line) in eb. */
int ctrain_yaml_read(const char *path, ctrain_yaml_leaf_fn fn, void *ctx, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_YAML_H */
