/*
 * ct_parse.h - strict conversion of text to typed values, shared by the environment reader,
 * the command-line parsers and the file loaders.
 *
 * The rules follow what torchrun users already type: integers as Python's int() takes them
 * (optional blanks around, an optional sign, decimal digits only), booleans in every spelling
 * torchrun and its rendezvous configuration accept. Anything else is rejected with a message
 * that quotes the text, never silently truncated the way atoi() does. The messages do not name
 * the source of the text; callers prefix that ("--nnodes: ..." or "RANK=...").
 */
#ifndef CT_PARSE_H
#define CT_PARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A decimal integer within [min, max]. Errors: CT_EPARSE (not an integer: empty, junk, "2.0",
 * "0x10") or CT_ERANGE_VALUE (an integer outside the range, or beyond int64). */
int ct_parse_int64(const char *text, int64_t min, int64_t max, int64_t *out, ct_errbuf_t *eb);

/* The same into an int. */
int ct_parse_int(const char *text, int min, int max, int *out, ct_errbuf_t *eb);

/* A finite decimal number within [min, max] ("0.1", "5", "1e-3"; not "nan", "inf", "0x1p3"). */
int ct_parse_double(const char *text, double min, double max, double *out, ct_errbuf_t *eb);

/* A boolean: 1/0, true/false, yes/no, t/f, y/n, on/off in any case, or any other integer
 * (non-zero = true, as torchrun's bool(int(...)) does). Errors: CT_EPARSE. */
int ct_parse_bool(const char *text, bool *out, ct_errbuf_t *eb);

/* A byte count with an optional binary suffix: "4096", "8K", "8KiB", "64M", "2G" (K = 1024).
 * Used for limits and benchmark sizes. */
int ct_parse_size(const char *text, uint64_t max, uint64_t *out, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_PARSE_H */
