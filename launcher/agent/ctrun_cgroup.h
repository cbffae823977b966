/*
 * ctrun_cgroup.h - a cgroup v2 per job, so that nothing a worker started outlives the job even
 * when it left the worker's process group (a daemonising helper, setsid, a double fork).
 *
 * When the unified hierarchy is mounted and the agent's own cgroup is writable, the agent
 * creates <its cgroup>/ctrun-<pid>, every worker joins it before exec (ctrun_proc.h's
 * cgroup_fd), and cgroup.kill empties it after every attempt and at exit, before it is removed.
 * Without a writable cgroup v2 (or with CTRUN_CGROUP=off) ctrun relies on process groups and
 * the parent-death signal alone, as before. An agent killed by SIGKILL cannot remove its
 * folder: its reaper (ctrun_reaper.h) does; should the reaper be gone too, the next agent that
 * creates one beside it empties (cgroup.kill) and removes every ctrun-<pid> whose agent no longer
 * exists. Deliberately not here: resource limits (no controller is enabled) and moving the agent
 * itself.
 */
#ifndef CTRUN_CGROUP_H
#define CTRUN_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrun_cgroup {
    char path[PATH_MAX]; /* the job's cgroup folder, "" when none */
    int procs_fd;        /* its cgroup.procs, open for writing (close-on-exec), -1 when none */
} ctrun_cgroup_t;

/* Creates the job's cgroup under the caller's own. Returns 0, or a negative errno (the reason
 * in eb) when cgroup v2 is missing or not writable; cg is then empty and the other functions
 * do nothing. mountinfo and self_cgroup name the files to read (NULL: /proc/self/...), for
 * tests. */
int ctrun_cgroup_create(ctrun_cgroup_t *cg, const char *mountinfo, const char *self_cgroup,
                        ct_errbuf_t *eb);

/* SIGKILL to every process in it (cgroup.kill). 0 or a negative errno. */
int ctrun_cgroup_kill(ctrun_cgroup_t *cg);

/* True while a process is in it (cgroup.events "populated 1"). */
bool ctrun_cgroup_populated(const ctrun_cgroup_t *cg);

/* Kills what is left, waits up to wait_ms for it to empty, removes it. Safe to call twice. */
void ctrun_cgroup_destroy(ctrun_cgroup_t *cg, int64_t wait_ms);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_CGROUP_H */
