/*
 * ctrun_reaper.h - a small process of ctrun's own that makes sure nothing of a job outlives its
 * agent, however the agent ends: SIGKILL, the OOM killer and a crash included, which no code in
 * the agent itself can answer.
 *
 * The agent forks it at set-up, before any worker exists (a fork without exec: nothing to load,
 * so the launch does not wait for it). It leaves the agent's session and process group at once
 * (setsid), so a signal to the job's process group (a terminal's Ctrl-C, a group SIGKILL from a
 * scheduler or a test harness) does not reach it, keeps only its channel, a pidfd of the agent,
 * the job's cgroup folder and stderr, and sleeps in poll() until the pidfd says the agent has
 * exited. Then, in this order:
 *   - with the job's cgroup (ctrun_cgroup.h): cgroup.kill, a wait for "populated 0" through
 *     cgroup.events' notification (bounded), and the removal of the folder and of its
 *     attempts' folders - it finds every process of the job, daemons that left their session
 *     included;
 *   - every worker process group the agent recorded (track/untrack below) gets SIGKILL: children
 *     that stayed in a worker's group die even without a cgroup;
 *   - without a cgroup: every process whose environment carries this job's CTRUN_JOB_TAG (a
 *     random value every worker inherits, and with it everything the workers start unless it
 *     clears its environment) is killed through a pidfd, scan after scan until a scan finds none;
 * then it exits. After a normal end (the agent sent END first) there is usually nothing left to
 * kill; after an abnormal one it says on stderr what it killed.
 *
 * It never kills anything that is not the job's: the cgroup folder is the one it was given (its
 * directory fd pins it, so a folder of the same name made later is not touched), process groups
 * are the workers' own and are dropped from the record when the agent has emptied them, and a
 * process is killed for its tag only when its environment holds this job's random value.
 *
 * Deliberately not here: stopping workers while the agent lives (the agent does that), the
 * cgroup's creation (ctrun_cgroup.h), anything of the store or the rendezvous.
 */
#ifndef CTRUN_REAPER_H
#define CTRUN_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The name of the environment variable that marks a job's processes, and its value's length. */
#define CTRUN_REAPER_TAG_ENV "CTRUN_JOB_TAG"
#define CTRUN_REAPER_TAG_LEN 32

typedef struct ctrun_reaper {
    pid_t pid;   /* the reaper, -1 when none runs */
    int fd;      /* the agent's end of its channel (non-blocking, close-on-exec), -1 when none */
    bool broken; /* a record could not be sent: said once */
} ctrun_reaper_t;

/* Makes a fresh tag for a job: CTRUN_REAPER_TAG_LEN hex digits from getrandom, NUL-terminated
 * (tag holds CTRUN_REAPER_TAG_LEN + 1 bytes). 0 or a negative errno. */
int ctrun_reaper_tag(char *tag);

/* Starts the reaper of this process's job. cgroup_dir: the job's cgroup folder, or NULL/"" when
 * it has none; tag: the job's tag (ctrun_reaper_tag), or NULL for none. On failure (eb says why)
 * r->pid is -1 and the other functions do nothing. Call once, before the first worker starts,
 * and before the loop has anything the reaper must not hold (it keeps only what it needs). */
int ctrun_reaper_start(ctrun_reaper_t *r, const char *cgroup_dir, const char *tag, ct_errbuf_t *eb);

/* Records a worker's process group (its pid), right after the worker is spawned. */
void ctrun_reaper_track(ctrun_reaper_t *r, pid_t pgid);

/* The agent has killed the group and its worker is reaped: forget it. */
void ctrun_reaper_untrack(ctrun_reaper_t *r, pid_t pgid);

/* The agent ends normally: END, then the channel closes. The reaper still cleans up what is left
 * once the agent has exited, quietly. Safe to call twice. */
void ctrun_reaper_close(ctrun_reaper_t *r);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_REAPER_H */
