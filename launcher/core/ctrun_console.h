/*
 * ctrun_console.h - ctrun's own stdout and stderr while the agent runs: every console line (the
 * worker lines it relays, its log lines, its reports) is copied into a bounded queue in memory
 * and written out by a helper thread, so that a console reader that is slow or has stopped
 * reading (a pipe to a paused program, a Slurm or Kubernetes log pipe, a terminal on hold)
 * never blocks the agent's loop: worker failures, signals to ctrun and node heartbeats are
 * acted on at once whatever the console does.
 *
 * Why threads and not O_NONBLOCK: the inherited fds 1 and 2 usually share their open file
 * description with other processes (the shell's terminal, the other end of `2>&1`), and
 * O_NONBLOCK is a flag of that shared description; setting it would make the shell's own
 * writes fail with EAGAIN, and restoring it at exit does not survive a SIGKILL. The helper
 * threads write with the fds exactly as ctrun inherited them (they wait in poll(2) should
 * someone else have made them non-blocking) and are the only threads that can block on them.
 *
 * One queue and thread per destination: when stdout and stderr are the same file (a terminal,
 * `2>&1`) they share one, and lines keep the order in which they were queued across both;
 * otherwise each has its own, so ctrun's messages on a stderr terminal are not held back by a
 * stalled stdout pipe.
 *
 * When a reader falls so far behind that a line no longer fits in its queue, the line is
 * dropped whole (never cut), counted, and one notice goes to stderr when dropping starts; once
 * the queue has drained to half its size, the next line is preceded by a notice with the count
 * of lines and bytes dropped, and at the end the count is given if dropping was still going on.
 * ctrun's own lines (log lines, reports) may use the last eighth of a queue that relayed
 * worker lines may not, so a failure report still gets through behind a flood of worker
 * output. Log files (ctrun_sink.h writes them directly) are never affected.
 *
 * Deliberately not here: line framing and prefixes (ctrun_sink.h), log formatting (ct_log.h),
 * the choice of the queue size (the agent's: CTRUN_CONSOLE_BUFFER).
 */
#ifndef CTRUN_CONSOLE_H
#define CTRUN_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The default size of each queue, and the smallest accepted. */
#define CTRUN_CONSOLE_CAPACITY_DEFAULT ((size_t)4 << 20)
#define CTRUN_CONSOLE_CAPACITY_MIN     ((size_t)16 << 10)

typedef struct ctrun_console ctrun_console_t;

/* Who wrote a line: relayed worker output, or ctrun itself (which may use the reserved room). */
typedef enum ctrun_console_origin {
    CTRUN_CONSOLE_RELAY = 0,
    CTRUN_CONSOLE_OWN = 1,
} ctrun_console_origin_t;

typedef struct ctrun_console_stats {
    uint64_t lines_dropped, bytes_dropped; /* since creation */
    uint64_t bytes_written;
    bool dropping; /* lines are being dropped now */
} ctrun_console_stats_t;

/* Starts the writer threads for out_fd and err_fd (either may be -1; they are not owned), each
 * queue of capacity bytes (0: the default; at least CTRUN_CONSOLE_CAPACITY_MIN). notice_prefix
 * (e.g. "[ctrun]", NULL for none) starts the notices about dropped lines, which go to err_fd;
 * notices false: no notices at all (the log level hides warnings). Returns 0, -ENOMEM, or the
 * error of pthread_create (negated). */
int ctrun_console_create(int out_fd, int err_fd, size_t capacity, const char *notice_prefix,
                         bool notices, ctrun_console_t **out);

/* Queues one line (or several whole lines, kept together) made of iov[0..iovcnt) for fd, which
 * must be the console's out_fd or err_fd. Never blocks on the reader. Returns 0 when queued;
 * -EAGAIN when it was dropped for lack of room (counted); the first write error of that fd
 * (e.g. -EPIPE once the reader is gone; everything for it is discarded from then on);
 * -EINVAL for another fd. Thread-safe. */
int ctrun_console_write(ctrun_console_t *c, int fd, const struct iovec *iov, int iovcnt,
                        ctrun_console_origin_t origin);

/* Queues nlines lines for fd under one lock and one wake-up of the writer: line k is made of
 * iov[line_end[k-1] .. line_end[k]) (line_end[-1] taken as 0). Each line is queued or dropped
 * whole, as by ctrun_console_write. Returns 0 when all were queued, -EAGAIN when some were
 * dropped, or the fd's write error (the lines from there on are discarded). */
int ctrun_console_write_lines(ctrun_console_t *c, int fd, const struct iovec *iov,
                              const int *line_end, int nlines, ctrun_console_origin_t origin);

/* Waits until everything queued before the call is written, or until the reader has taken
 * nothing for stall_ms (then -ETIMEDOUT; a negative stall_ms waits without limit). 0 when
 * written (or discarded because its fd failed). */
int ctrun_console_flush(ctrun_console_t *c, int64_t stall_ms);

void ctrun_console_get_stats(ctrun_console_t *c, ctrun_console_stats_t *out);

/* The end: queues the count of dropped lines if dropping was going on, flushes as
 * ctrun_console_flush(c, stall_ms) does, stops the threads and frees everything. When a reader
 * stalls past stall_ms the threads are left to finish on their own (the last one frees the
 * console once its queue has gone out, or they die with the process) and -ETIMEDOUT is
 * returned; either way c must not be used again. NULL is a no-op. */
int ctrun_console_destroy(ctrun_console_t *c, int64_t stall_ms);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_CONSOLE_H */
