/*
 * ctrun_logs.h - where worker output goes: the log directory layout, the --redirects/--tee
 * and --local_ranks_filter decisions per local rank and stream, and console line prefixes.
 *
 * Layout (torchrun's): <log_dir or a new temp dir>/<run_id>_<8 random chars>/
 * attempt_<k>/<local_rank>/{stdout.log,stderr.log,error.json}, and
 * attempt_<k>/filtered_{stdout,stderr}.log with --duplicate_std{out,err}_filters. The run folder is
 * made once per agent with mkdtemp semantics (so one --log_dir holds many runs); an attempt folder
 * is wiped and recreated when that attempt's workers start. --log_dir /dev/null disables every
 * file.
 *
 * Deliberately not here: pipes, libuv handles, spawning. The agent feeds a ctrun_sink_t from
 * its uv_read callbacks; everything below is plain data structures and blocking fd writes.
 */
#ifndef CTRUN_LOGS_H
#define CTRUN_LOGS_H

#include <stdbool.h>
#include <stddef.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- --redirects / --tee values -------------------------------------------------------------- */

#define CTRUN_STD_NONE 0u
#define CTRUN_STD_OUT  1u
#define CTRUN_STD_ERR  2u
#define CTRUN_STD_ALL  3u

/* One value for every local rank ("3"), or a per-rank map ("0:1,1:2") over the single-digit
 * local ranks torchrun's grammar can name; unlisted ranks get CTRUN_STD_NONE. */
typedef struct ctrun_std_spec {
    bool is_map;
    unsigned char all;     /* when !is_map */
    unsigned char map[10]; /* when is_map, indexed by local rank 0..9 */
} ctrun_std_spec_t;

/* Parses "^[0123]$" or "^(\d:[0123],)*(\d:[0123])$" (a repeated rank: the last one wins, as
 * in torchrun's dict). Errors: CT_EPARSE with the grammar in the message. */
int ctrun_std_parse(const char *text, ctrun_std_spec_t *out, ct_errbuf_t *eb);

/* The CTRUN_STD_* bits that apply to local_rank. */
unsigned ctrun_std_get(const ctrun_std_spec_t *spec, int local_rank);

/* ---- --local_ranks_filter -------------------------------------------------------------------- */

/* Local ranks whose output reaches the console; count == 0 means no filter (all do). */
typedef struct ctrun_rank_filter {
    int *ranks;
    size_t count;
} ctrun_rank_filter_t;

/* Parses "0,1,2" (blanks around numbers allowed; "" = no filter). Errors: CT_EPARSE,
 * CT_ERANGE_VALUE, -ENOMEM. */
int ctrun_rank_filter_parse(const char *text, ctrun_rank_filter_t *out, ct_errbuf_t *eb);
bool ctrun_rank_filter_shows(const ctrun_rank_filter_t *filter, int local_rank);
void ctrun_rank_filter_free(ctrun_rank_filter_t *filter);

/* ---- --duplicate_stdout_filters / --duplicate_stderr_filters --------------------------------- */

/* Substrings: a tee'd console line that contains any of them is also written, with its prefix,
 * to attempt_<k>/filtered_<stream>.log (lines of every tee'd local rank in one file). */
typedef struct ctrun_line_filter {
    char **needles;
    size_t count; /* 0: no filter, nothing is duplicated */
} ctrun_line_filter_t;

/* torchrun's comma_separated_list: ",," stands for a comma, then the text is split on ','.
 * So "" is one empty needle (every line matches), "a,,b" the single needle "a,b". Errors:
 * -ENOMEM. */
int ctrun_line_filter_parse(const char *text, ctrun_line_filter_t *out, ct_errbuf_t *eb);

/* True when the line made of a[0..an) and b[0..bn) contains one of the needles. */
bool ctrun_line_filter_match(const ctrun_line_filter_t *filter, const char *a, size_t an,
                             const char *b, size_t bn);

void ctrun_line_filter_free(ctrun_line_filter_t *filter);

/* ---- per-stream decision --------------------------------------------------------------------- */

typedef enum ctrun_stream {
    CTRUN_STREAM_STDOUT = 0,
    CTRUN_STREAM_STDERR = 1,
} ctrun_stream_t;

/* What happens to one stream of one worker. Neither to_file nor to_console: discard (the
 * worker's stream goes to /dev/null). */
typedef struct ctrun_stream_plan {
    bool to_file;    /* written raw to attempt_<k>/<local_rank>/<stream>.log */
    bool to_console; /* echoed to the agent's own stdout/stderr in whole lines */
    bool prefixed;   /* console lines carry the tee prefix (only tee'd streams do) */
} ctrun_stream_plan_t;

/* torchrun's rules: a tee'd stream is also redirected; a redirected stream leaves the console
 * unless tee'd; the filter only removes console output; files_enabled is false for
 * --log_dir /dev/null. */
ctrun_stream_plan_t ctrun_logs_plan(const ctrun_std_spec_t *redirects, const ctrun_std_spec_t *tee,
                                    const ctrun_rank_filter_t *filter, bool files_enabled,
                                    int local_rank, ctrun_stream_t stream);

/* ---- console prefix -------------------------------------------------------------------------- */

/* The console prefix of a tee'd line: "[<role><local_rank>]:" by default, or
 * TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (tmpl, when not NULL) with ${role_name}, ${rank},
 * ${local_rank}, ${group_rank} and ${restart_count} substituted (safe_substitute rules).
 * *out is malloc'd. Returns 0 or -ENOMEM. */
int ctrun_logs_prefix(const char *tmpl, const char *role, int rank, int local_rank, int group_rank,
                      int restart_count, char **out);

/* ---- directory layout ------------------------------------------------------------------------ */

typedef enum ctrun_log_file {
    CTRUN_LOG_STDOUT = 0, /* stdout.log */
    CTRUN_LOG_STDERR = 1, /* stderr.log */
    CTRUN_LOG_ERROR = 2,  /* error.json (TORCHELASTIC_ERROR_FILE; written by the worker) */
} ctrun_log_file_t;

typedef struct ctrun_logs {
    char *base_dir;    /* --log_dir made absolute, or the temp dir made for this run; NULL when
                        * disabled */
    char *run_dir;     /* <base_dir>/<run_id>_<8 chars>; NULL when disabled */
    bool disabled;     /* --log_dir /dev/null: no files at all */
    bool base_created; /* base_dir is a temp dir this agent made */
} ctrun_logs_t;

/* The folder a run folder goes into without --log_dir, as Python's tempfile.gettempdir picks
 * it: the first of the n candidates (the values of TMPDIR, TEMP and TMP, NULL when unset) that
 * is a folder this process may write to, else "/tmp". Returns one of the candidates or "/tmp". */
const char *ctrun_logs_tmpdir(const char *const *candidates, size_t n);

/* Creates the run folder: log_dir (made with its parents when missing) or, when log_dir is
 * NULL or empty, a new "<tmp_dir>/ctrun_<8 chars>" folder (tmp_dir NULL: /tmp); then
 * "<run_id>_<8 chars>" inside it (mode 0700, retried on collision). Errors: -errno with the
 * path in eb, CT_EPARSE for a run id with '/'. */
int ctrun_logs_init(ctrun_logs_t *logs, const char *log_dir, const char *tmp_dir,
                    const char *run_id, ct_errbuf_t *eb);

/* Removes <run_dir>/attempt_<attempt> with everything in it, then creates it and one folder
 * per local rank 0..nproc-1. A no-op when disabled. */
int ctrun_logs_attempt_prepare(const ctrun_logs_t *logs, int attempt, int nproc, ct_errbuf_t *eb);

/* Writes the path of one file into buf ("" when disabled). Returns 0 or -ENAMETOOLONG. */
int ctrun_logs_path(const ctrun_logs_t *logs, int attempt, int local_rank, ctrun_log_file_t which,
                    char *buf, size_t size);

/* Opens (creates, truncates) the log file of a stream for writing, close-on-exec; the caller
 * owns *fd. Errors: -errno with the path in eb, -ENOENT when disabled. */
int ctrun_logs_open(const ctrun_logs_t *logs, int attempt, int local_rank, ctrun_stream_t stream,
                    int *fd, ct_errbuf_t *eb);

/* Opens (creates, truncates) attempt_<attempt>/filtered_<stream>.log for writing,
 * close-on-exec, appending. Errors as ctrun_logs_open. */
int ctrun_logs_filtered_open(const ctrun_logs_t *logs, int attempt, ctrun_stream_t stream, int *fd,
                             ct_errbuf_t *eb);

/* Removes the folders of this run that hold no file (bottom-up), and the temp base folder
 * when this agent made it and it ended up empty; folders with files stay. Best effort. */
void ctrun_logs_remove_empty(const ctrun_logs_t *logs);

/* Frees the paths (the folders stay). Safe to call twice. */
void ctrun_logs_close(ctrun_logs_t *logs);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_LOGS_H */
