/*
 * ctrun_sink.h - a line-framing output sink: the agent feeds it the raw chunks it reads from
 * one worker stream's pipe; it writes the bytes unchanged to the log file and whole lines,
 * each with the console prefix, to the console. Lines of different workers therefore never
 * share a console line, whatever the chunk boundaries were.
 *
 * The log file gets blocking write(2) calls (a disk keeps up; the file must be complete). Console
 * lines go, one whole line at a time, to the agent's console queue when the sink has one
 * (ctrun_sink_use_console: the agent's loop never waits for a console reader, and a line the
 * queue has no room for is dropped whole); without one, to console_fd with blocking writev
 * calls, one per batch of lines (tools and tests).
 *
 * A sink may also duplicate its console lines that match a filter, prefix included, into a
 * file shared by the attempt's workers (--duplicate_std{out,err}_filters; ctrun_logs.h).
 *
 * Deliberately not here: pipes and libuv (the agent calls ctrun_sink_write from its uv_read
 * callback), deciding where a stream goes (ctrun_logs.h), and the console queue itself
 * (ctrun_console.h).
 */
#ifndef CTRUN_SINK_H
#define CTRUN_SINK_H

#include <stdbool.h>
#include <stddef.h>

#include "ctrun_console.h"
#include "ctrun_logs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default longest console line: a longer run of bytes without '\n' is written in pieces
 * of this size, each ended with '\n', so lines of different workers never share a console
 * line. */
#define CTRUN_SINK_LINE_MAX (64 * 1024)

/* Bytes from one worker stream: raw to the file as they come, and to the console one whole
 * line at a time with the prefix before each line. Either fd may be -1. The sink does not own
 * the fds. A destination whose write fails (EPIPE when the console reader went away, ENOSPC)
 * is switched off and its first error kept, so a closed terminal never stops the job. */
typedef struct ctrun_sink {
    int console_fd, file_fd;
    char *prefix;
    size_t prefix_len;
    char *pending; /* console bytes after the last '\n' */
    size_t pending_len, line_max;
    bool cut_pending; /* the last piece was cut at line_max; a '\n' right after it ends it */
    int console_err, file_err; /* first write error (negative errno), 0 while healthy */
    ctrun_console_t *console;  /* not owned; NULL: blocking writes to console_fd */
    int dup_fd;                /* filtered copy of the console lines, -1 none (not owned) */
    const ctrun_line_filter_t *dup_filter;
    int dup_err;
} ctrun_sink_t;

/* prefix may be NULL or "" (no prefix); line_max 0 means CTRUN_SINK_LINE_MAX. Returns 0 or
 * -ENOMEM. */
int ctrun_sink_init(ctrun_sink_t *sink, int console_fd, int file_fd, const char *prefix,
                    size_t line_max);

/* Console lines go through console (for its fd console_fd) instead of blocking writes. The
 * console must outlive the sink's last write. */
void ctrun_sink_use_console(ctrun_sink_t *sink, ctrun_console_t *console);

/* Console lines that match filter also go, whole and with the prefix, to fd (blocking writes).
 * Both must outlive the sink's last write; a write error switches the copy off. */
void ctrun_sink_duplicate(ctrun_sink_t *sink, int fd, const ctrun_line_filter_t *filter);

/* Takes the next chunk of the stream. Returns 0 while every destination in use is healthy,
 * else the error that switched one off (the file's first); the other keeps working. */
int ctrun_sink_write(ctrun_sink_t *sink, const void *data, size_t nbytes);

/* End of the stream: a trailing partial line goes to the console with a '\n' added. Returns
 * as ctrun_sink_write does. */
int ctrun_sink_finish(ctrun_sink_t *sink);

/* Frees the buffers (the fds stay open). Safe to call twice. */
void ctrun_sink_close(ctrun_sink_t *sink);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_SINK_H */
