/*
 * ct_errfile.h - writing a TORCHELASTIC_ERROR_FILE in the JSON layout PyTorch's @record writes,
 * so that ctrun's (and torchrun's) failure report shows a C worker's message and traceback:
 *
 *   {"message": {"message": "<text>", "extraInfo": {"py_callstack": "<traceback>",
 *                                                   "timestamp": "<unix seconds>"}}}
 *
 * The writer is async-signal-safe: no malloc, no stdio, no locale, only open/write/close/
 * rename on a directory opened in advance, so a fatal-signal handler can use it. Output is
 * pure ASCII like Python's json.dump (valid UTF-8 becomes \uXXXX escapes; invalid bytes become
 * U+FFFD), and the file appears whole or not at all (written under a temporary name in the
 * same directory, then renamed).
 *
 * Reading error files (the launcher's side) is deliberately not here.
 */
#ifndef CT_ERRFILE_H
#define CT_ERRFILE_H

#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_ERRFILE_NAME_MAX 256

/* Where an error file goes: its directory, opened once, and its base name. */
typedef struct ct_errfile_target {
    int dirfd; /* -1 when closed */
    char name[CT_ERRFILE_NAME_MAX];
} ct_errfile_target_t;

/* Opens the directory of path (which must exist; the file itself is not created). Errors: the
 * open's -errno, or CT_ELIMIT for a base name longer than CT_ERRFILE_NAME_MAX - 1, with the
 * path in eb. */
int ct_errfile_target_open(ct_errfile_target_t *t, const char *path, ct_errbuf_t *eb);

/* Closes the directory; safe to call twice. */
void ct_errfile_target_close(ct_errfile_target_t *t);

/* Writes the file: message and callstack are NUL-terminated text (callstack may be NULL for
 * ""), timestamp is Unix seconds. Async-signal-safe. Returns 0 or a negated errno. */
int ct_errfile_write(const ct_errfile_target_t *t, const char *message, const char *callstack,
                     int64_t timestamp);

/* open + write + close, for callers outside signal handlers. */
int ct_errfile_write_path(const char *path, const char *message, const char *callstack,
                          int64_t timestamp, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_ERRFILE_H */
