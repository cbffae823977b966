/*
 * ct_errfile.h - the JSON error file of TORCHELASTIC_ERROR_FILE, in the layout PyTorch's
 * @record writes, so ctrun, torchrun and PyTorch tooling all read what the other side wrote:
 *
 *   {"message": {"message": "<ExcType>: <text>",
 *                "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<unix s>"},
 *                "errorCode": <exit code, added when a launcher copies the file up>}}
 *
 * Reading also takes the older string form {"message": "<text>", "timestamp": <int>}.
 * Shared by the launcher (reads workers' files, copies the root cause to its own
 * TORCHELASTIC_ERROR_FILE) and libctworker (writes one on a fatal error). Writes are atomic
 * (temp file + rename), so a reader never sees half a file. Nothing here formats reports.
 */
#ifndef CT_ERRFILE_H
#define CT_ERRFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Writes a dict-form error file. traceback may be NULL (written as ""); error_code 0 leaves
 * "errorCode" out. Returns 0 or -errno with the path in eb. */
int ct_errfile_write(const char *path, const char *message, const char *traceback,
                     int64_t timestamp, int error_code, ct_errbuf_t *eb);

/* Copies the JSON of src to dst, as torchrun's launcher does with the root-cause worker's
 * file: a dict-form message gets "errorCode": error_code (when error_code != 0), any
 * existing dst is replaced. Errors as for read and write. */
int ct_errfile_copy(const char *src, const char *dst, int error_code, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_ERRFILE_H */
