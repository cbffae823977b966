/*
 * ctrun_filetimer.h - the requests of PyTorch's FileTimerClient
 * (torch.distributed.elastic.timer.FileTimerClient) and the table of armed timers they build:
 * one request per line, a JSON object of at most PIPE_BUF bytes
 *   {"version": 1, "pid": P, "scope_id": "S", "expiration_time": T, "signal": N}
 * where T is an absolute Unix time in seconds; a negative T releases the timer (pid, scope id),
 * any other acquires or re-arms it. When timers expire, every timer of the expired ones' worker
 * goes (the worker is about to be killed with the first one's signal), as torchrun's
 * FileTimerServer does.
 *
 * Deliberately not here: the named pipe and reading it, knowing which pids are the agent's
 * workers (the caller drops requests of other pids), sending the signal, and the failure
 * records: those belong to the agent's FileTimer watchdog (ctrun_agent_ftimer.c). Pure: no
 * I/O, no clock; times are passed in.
 */
#ifndef CTRUN_FILETIMER_H
#define CTRUN_FILETIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest request line (PyTorch's client refuses longer ones too): PIPE_BUF on Linux. */
#define CTRUN_FILETIMER_REQUEST_MAX 4096
#define CTRUN_FILETIMER_SCOPE_MAX   256

typedef struct ctrun_filetimer_req {
    pid_t pid;
    char scope[CTRUN_FILETIMER_SCOPE_MAX]; /* scope_id, NUL-terminated */
    double expiration;                     /* Unix seconds; < 0: a release */
    int signal;
} ctrun_filetimer_req_t;

/* Parses one request line (without its newline). 0, or a negative errno with a one-line reason
 * in eb: -EMSGSIZE for more than CTRUN_FILETIMER_REQUEST_MAX bytes, -EINVAL for anything that
 * is not such an object (not JSON, a missing or mistyped field, an unknown version, a pid <= 0,
 * a signal outside 0..64, a scope id longer than CTRUN_FILETIMER_SCOPE_MAX - 1 bytes). */
int ctrun_filetimer_parse(const char *line, size_t len, ctrun_filetimer_req_t *req,
                          ct_errbuf_t *eb);

typedef struct ctrun_filetimers {
    ctrun_filetimer_req_t *t; /* armed timers, unordered */
    size_t n, cap;
} ctrun_filetimers_t;

/* Acquire (re-arm) or release, as the request says. 0 or -ENOMEM. */
int ctrun_filetimers_apply(ctrun_filetimers_t *ts, const ctrun_filetimer_req_t *req);

/* Forgets every timer of pid (its worker exited). */
void ctrun_filetimers_forget(ctrun_filetimers_t *ts, pid_t pid);

/* The earliest expiration among the armed timers; false when none is armed. */
bool ctrun_filetimers_next(const ctrun_filetimers_t *ts, double *when);

/* The earliest timer expired at now (expiration <= now), copied to *out, and every timer of its
 * pid removed; false when none has expired. Call until false. */
bool ctrun_filetimers_pop_expired(ctrun_filetimers_t *ts, double now, ctrun_filetimer_req_t *out);

/* "timer 'S' expired X.Y s ago in rank R, pid P" into buf. */
void ctrun_filetimer_cause(const ctrun_filetimer_req_t *req, double now, int rank, char *buf,
                           size_t size);

void ctrun_filetimers_free(ctrun_filetimers_t *ts);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_FILETIMER_H */
