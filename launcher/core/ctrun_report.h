/*
 * ctrun_report.h - the end-of-job failure report, in torchrun's layout, and the launcher's
 * own TORCHELASTIC_ERROR_FILE.
 *
 * A failure record is built once per failed worker (ctrun_failure_init reads the worker's
 * error file, if it wrote one, and tolerates a malformed one with a note in place of the
 * message); ctrun_report_format then turns a list of records into the text torchrun prints
 * after "ChildFailedError:" - title "<entrypoint> FAILED", the other failures, and the root
 * cause (the earliest failure):
 *
 *   ============================================================
 *   ./fail.sh FAILED
 *   ------------------------------------------------------------
 *   Failures:
 *     <NO_OTHER_FAILURES>
 *   ------------------------------------------------------------
 *   Root Cause (first observed failure):
 *   [0]:
 *     time      : 2026-11-22_07:39:42
 *     host      : localhost
 *     rank      : 1 (local_rank: 1)
 *     exitcode  : 3 (pid: 11291)
 *     error_file: <N/A>
 *     traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
 *   ============================================================
 *
 * Deliberately not here: deciding which workers failed, and printing (the agent does both).
 */
#ifndef CTRUN_REPORT_H
#define CTRUN_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torchrun's hint for a failure without an error file or signal. */
#define CTRUN_REPORT_HINT \
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"

typedef struct ctrun_failure {
    int rank; /* global rank */
    int local_rank;
    int pid;
    int exitcode;       /* exit status, or -signal when a signal killed the worker */
    int64_t timestamp;  /* seconds since the epoch: the error file's, else when it was noticed */
    char *host;         /* FQDN of the worker's node */
    char *error_file;   /* the worker's error file when it exists, else NULL (shown as <N/A>) */
    char *message;      /* the "traceback :" text before indentation */
    bool error_file_ok; /* error_file was read (so it can be copied to the launcher's file) */
} ctrun_failure_t;

/* Fills f for a failed worker. error_file is the TORCHELASTIC_ERROR_FILE the worker got (NULL
 * or "" for none). When that file exists it supplies the timestamp and the message (dict form:
 * py_callstack, else message.message, else "<N/A>"; string form: the string); when it exists
 * but cannot be parsed the message says so and names the reason. Without a file the message is
 * "Signal <n> (<NAME>) received by PID <pid>" for a signal, else CTRUN_REPORT_HINT, and the
 * timestamp is noticed_s. Returns 0 or -ENOMEM; free with ctrun_failure_free. */
int ctrun_failure_init(ctrun_failure_t *f, int rank, int local_rank, int pid, int exitcode,
                       int64_t noticed_s, const char *host, const char *error_file);

void ctrun_failure_free(ctrun_failure_t *f);

/* One failure as a single JSON line (no newline) for passing records between agents through
 * the store: {"node": node, "rank": .., "local_rank": .., "pid": .., "exitcode": ..,
 * "timestamp": .., "host": .., "error_file": path or null, "message": ..}. *out is malloc'd.
 * Returns 0 or -ENOMEM. */
int ctrun_failure_to_json(const ctrun_failure_t *f, int node, char **out);

/* Reads such a line back into f (free with ctrun_failure_free) and *node. The record describes
 * another process's file, so error_file_ok stays false. Errors: CT_EPARSE with the reason. */
int ctrun_failure_from_json(const char *text, ctrun_failure_t *f, int *node, ct_errbuf_t *eb);

/* Index of the root cause: the smallest timestamp, the first of equals. n must be > 0. */
size_t ctrun_report_root(const ctrun_failure_t *failures, size_t n);

/* The report for failures[0..n) (n > 0) in detection order, as shown above: "[idx]:" is the
 * position in that order, the rule width is min(60, max(title, longest line)) counted in
 * characters, times are local "YYYY-MM-DD_HH:MM:SS", and every '\n' of a message is followed
 * by two spaces. The text starts with the '=' rule and ends with '\n'. *out is malloc'd.
 * Returns 0 or -ENOMEM. */
int ctrun_report_format(const char *name, const ctrun_failure_t *failures, size_t n, char **out);

/* The line torchrun's traceback ends with, right before the text above (log scrapers and job
 * dashboards look for it): the exception's name, ':' and the message's empty first line. */
#define CTRUN_REPORT_EXCEPTION_LINE \
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "

/* torchrun's one-line log of a failed worker:
 * "failed (exitcode: 3) local_rank: 1 (pid: 11291) of binary: ./fail.sh". */
int ctrun_report_failed_line(const ctrun_failure_t *f, const char *name, char *buf, size_t size);

/* The launcher's own TORCHELASTIC_ERROR_FILE (parent_path) at the end of a failed job: the
 * root cause's error file copied with "errorCode": exitcode added (what torchrun does); when
 * the root cause has no readable error file, ctrun writes one itself from the record (message,
 * timestamp, errorCode), so a scheduler still sees the cause. Returns 0, -ENOENT when
 * parent_path is NULL or "" (torchrun logs "no error file defined for parent"), or a write
 * error with the path in eb. */
int ctrun_report_propagate(const ctrun_failure_t *root, const char *parent_path, ct_errbuf_t *eb);

/* This host's fully qualified name as Python's socket.getfqdn() finds it (the first name with
 * a dot among the reverse lookup's name and aliases, else that name, else gethostname()).
 * Blocking name lookups: call once at start-up. */
void ctrun_host_fqdn(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_REPORT_H */
