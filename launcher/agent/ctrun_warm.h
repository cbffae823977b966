/*
 * ctrun_warm.h - --warm_restart: one standby Python interpreter per local rank, which has
 * imported torch (and the --warm_preload modules) and forks workers on request.
 *
 * A standby is `<python> -u ctrun_standby.py` (shipped with ctrun: next to the executable in the
 * build tree, ../share/ctrun/ once installed), started with the local rank's worker environment
 * and a seqpacket socket. It answers READY once its imports are done (FAIL <reason> when torch
 * or a module cannot be imported, or CUDA got initialised). ctrun_warm_fork sends one worker
 * (working directory, CPUs, script or -m module, arguments, environment, and its descriptors
 * over SCM_RIGHTS); the standby double-forks and answers with the worker's pid, which is
 * re-parented to this process: ctrun is a child subreaper (PR_SET_CHILD_SUBREAPER) for the
 * moment it waits for the reply and for the re-parenting, so the worker becomes its child and
 * ctrun_proc waits for it as for a worker it started itself. A standby serves every later
 * restart of its rank (a fork leaves it as it was); one that died is started again.
 *
 * Deliberately not here: when to use a standby and what to do when it cannot serve (the caller
 * starts the worker cold and warns), the worker's supervision (ctrun_proc.h).
 */
#ifndef CTRUN_WARM_H
#define CTRUN_WARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_warm_standby {
    pid_t pid;  /* -1: none */
    int sock;   /* our end, -1: none */
    bool ready; /* said READY */
} ctrun_warm_standby_t;

typedef struct ctrun_warm {
    bool on;
    char *python, *script, *preload; /* interpreter, ctrun_standby.py, modules (or "") */
    ctrun_warm_standby_t *sb;
    int n;
    int64_t ready_wait_ms; /* how long a fork waits for a standby still importing (the loop
                            * is blocked meanwhile; default 10 s) */
} ctrun_warm_t;

/* One worker for a standby. */
typedef struct ctrun_warm_req {
    const char *cwd;
    bool module;        /* -m target, else a script path */
    const char *target; /* the module or script as the command line gives it */
    char *const *args;  /* the script's arguments, NULL-terminated */
    char *const *envp;  /* its complete environment */
    int out_fd, err_fd; /* its stdout and stderr */
    int hb_fd;          /* its heartbeat pipe, -1 none */
    int cgroup_fd;      /* a cgroup.procs it joins, -1 none */
    const int *cpus;    /* CPUs it is bound to, NULL: inherited */
    size_t ncpus;
} ctrun_warm_req_t;

/* Finds ctrun_standby.py relative to the executable self_exe; python is the interpreter,
 * preload the comma-separated modules (NULL: none). n local ranks. 0, or a negative error with
 * the reason in eb (the feature is then off: w->on is false). */
int ctrun_warm_init(ctrun_warm_t *w, const char *self_exe, const char *python, const char *preload,
                    int n, ct_errbuf_t *eb);

/* Starts the standby of local rank i with environment envp unless one is alive. Does not wait
 * for its imports. 0 or a negative error (eb). */
int ctrun_warm_start(ctrun_warm_t *w, int i, char *const *envp, ct_errbuf_t *eb);

/* Forks local rank i's worker from its standby: *pid is then a child of this process. Waits
 * up to w->ready_wait_ms for a standby still importing (-ETIMEDOUT: it stays, for the next
 * restart). A negative error with the reason in eb when the standby is missing, died, refused
 * or could not fork; a standby that failed is stopped (ctrun_warm_start starts a new one). */
int ctrun_warm_fork(ctrun_warm_t *w, int i, const ctrun_warm_req_t *req, pid_t *pid,
                    ct_errbuf_t *eb);

/* True when local rank i has a live standby (ready or importing). */
bool ctrun_warm_alive(ctrun_warm_t *w, int i);

/* Stops every standby (SIGKILL, reaped) and frees everything. */
void ctrun_warm_free(ctrun_warm_t *w);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_WARM_H */
