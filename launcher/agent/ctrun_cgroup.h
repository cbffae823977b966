/*
 * ctrun_cgroup.h - a cgroup v2 per job, so that nothing a worker started outlives the job even
 * when it left the worker's process group (a daemonising helper, setsid, a double fork).
 *
 * When the unified hierarchy is mounted and the agent's own cgroup is writable, the agent
 * creates <its cgroup>/ctrun-<pid> and in it a fresh folder per attempt (attempt-<k>); every
 * worker is created in its attempt's folder (ctrun_proc.h's cgroup_dir_fd: clone3 with
 * CLONE_INTO_CGROUP, no migration and so no wait for an RCU grace period; where the kernel
 * cannot, the worker joins it through cgroup.procs before exec), and cgroup.kill of the job's
 * folder empties all of it after every attempt and at exit, before it is removed. The folder of
 * an attempt is fresh because some kernels (6.18 among them) SIGKILL a child created by
 * CLONE_INTO_CGROUP in a cgroup that has been through cgroup.kill; the emptied folders of past
 * attempts are removed when the next one is made.
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
    /* Where the workers of the current attempt go (ctrun_cgroup_attempt): its folder (O_DIRECTORY,
     * for CLONE_INTO_CGROUP) and its cgroup.procs; -1 when none (procs: then the job's). */
    int attempt_dir_fd, attempt_procs_fd;
    int attempts; /* folders made so far: the next is attempt-<attempts> */
} ctrun_cgroup_t;

/* Creates the job's cgroup under the caller's own. Returns 0, or a negative errno (the reason
 * in eb) when cgroup v2 is missing or not writable; cg is then empty and the other functions
 * do nothing. mountinfo and self_cgroup name the files to read (NULL: /proc/self/...), for
 * tests. */
int ctrun_cgroup_create(ctrun_cgroup_t *cg, const char *mountinfo, const char *self_cgroup,
                        ct_errbuf_t *eb);

/* Makes a new folder in the job's (attempt-<n>, n counting from 0, never reused) the one the
 * next workers go to, and removes the emptied folders of earlier attempts. On failure (a
 * negative errno) the workers join the job's folder through cgroup.procs instead. Nothing
 * happens without a job cgroup. */
int ctrun_cgroup_attempt(ctrun_cgroup_t *cg);

/* SIGKILL to every process in it, every attempt's folder included (cgroup.kill). 0 or a
 * negative errno. */
int ctrun_cgroup_kill(ctrun_cgroup_t *cg);

/* True while a process is in it (cgroup.events "populated 1"). */
bool ctrun_cgroup_populated(const ctrun_cgroup_t *cg);

/* Kills what is left, waits up to wait_ms for it to empty, removes it with the folders of its
 * attempts. Safe to call twice. */
void ctrun_cgroup_destroy(ctrun_cgroup_t *cg, int64_t wait_ms);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_CGROUP_H */
