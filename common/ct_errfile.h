/*
 * ct_errfile.h - the JSON error file of TORCHELASTIC_ERROR_FILE, in the layout PyTorch's
 * @record writes, so ctrun, torchrun and PyTorch tooling all read what the other side wrote:
 *
 *   {"message": {"message": "<text>",
 *                "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<unix s>"},
 *                "errorCode": <exit code, added when a launcher copies the file up>}}
 *
 * Reading also takes the older string form {"message": "<text>", "timestamp": <int>}.
 * Shared by the launcher (reads workers' files, copies the root cause to its own
 * TORCHELASTIC_ERROR_FILE) and libctworker (writes one on a fatal error, also from a signal
 * handler).
 *
 * Writing (ct_errfile_write.c) is async-signal-safe: no malloc, no stdio, only
 * open/write/close/rename on a directory opened in advance. Output is pure ASCII like Python's
 * json.dump (valid UTF-8 becomes \uXXXX escapes; invalid bytes become U+FFFD), and the file
 * appears whole or not at all (temporary name in the same directory, then rename). Reading and
 * copying (ct_errfile.c) use jansson. Nothing here formats reports.
 */
#ifndef CT_ERRFILE_H
#define CT_ERRFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- writing -------------------------------------------------------------------------------- */

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
 * ""), timestamp is Unix seconds, error_code 0 leaves "errorCode" out. Async-signal-safe.
 * Returns 0 or a negated errno. */
int ct_errfile_write(const ct_errfile_target_t *t, const char *message, const char *callstack,
                     int64_t timestamp, int error_code);

/* open + write + close, for callers outside signal handlers; errors name the path in eb. */
int ct_errfile_write_path(const char *path, const char *message, const char *callstack,
                          int64_t timestamp, int error_code, ct_errbuf_t *eb);

/* ---- reading and copying -------------------------------------------------------------------- */

typedef struct ct_errfile {
    char *message;       /* message.message, or the message string; NULL when absent */
    char *traceback;     /* message.extraInfo.py_callstack; NULL when absent */
    int64_t timestamp;   /* seconds since the epoch; 0 when absent or not a number */
    bool dict_form;      /* "message" is an object (what @record writes) */
    bool has_error_code; /* message.errorCode was present (and an integer) */
    int error_code;
} ct_errfile_t;

/* Reads path into out (strings are malloc'd; free with ct_errfile_free). Errors: -ENOENT when
 * the file does not exist, another -errno when it cannot be read, CT_EFORMAT when it is not
 * JSON or has no "message" (eb names the file and says what is wrong, e.g. the JSON error's
 * line and column). */
int ct_errfile_read(const char *path, ct_errfile_t *out, ct_errbuf_t *eb);

void ct_errfile_free(ct_errfile_t *ef);

/* Copies the JSON of src to dst, as torchrun's launcher does with the root-cause worker's
 * file: a dict-form message gets "errorCode": error_code (when error_code != 0), any
 * existing dst is replaced. Errors as for read and write. */
int ct_errfile_copy(const char *src, const char *dst, int error_code, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_ERRFILE_H */
