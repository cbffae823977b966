/*
 * ct_proc.h - what /proc says about a process: its scheduler state letter, and whether it is
 * alive. Used by the agent (is a silent worker stopped?) and by the tests that prove no
 * process outlives its job. Linux only; nothing here signals or waits.
 */
#ifndef CT_PROC_H
#define CT_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* The state letter of /proc/<pid>/stat (R, S, D, T stopped, t traced, Z zombie, X dead, ...),
 * or 0 when there is no such process. */
char ct_proc_state(pid_t pid);

/* True when pid exists and is neither a zombie nor dead. */
bool ct_proc_alive(pid_t pid);

#endif /* CT_PROC_H */
