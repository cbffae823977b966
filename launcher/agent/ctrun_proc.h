/*
 * ctrun_proc.h - one worker process on the agent's libuv loop: start it, see it exit, carry its
 * output and heartbeat, signal its process group.
 *
 * Spawning is fork + execve, not uv_spawn, because the child must set a parent-death signal
 * (uv_spawn cannot): the child resets the signal handlers it inherited, calls setsid() (its own
 * session and process group, pgid = pid, so a signal to the group reaches anything the worker
 * starts), sets PR_SET_PDEATHSIG = SIGKILL (and exits at once if the agent is already gone),
 * binds itself to the CPUs of --numa_binding when given (sched_setaffinity),
 * puts its pipes on fds 1, 2 and 3 (the heartbeat, CTRUN_HEARTBEAT_FD=3), marks every other
 * fd above 2 close-on-exec (as Python's subprocess closes them for torchrun's workers), and
 * execs. An exec failure travels back through a close-on-exec pipe, so ctrun_proc_spawn itself
 * returns it with the reason ("./train: No such file or directory"), never a puzzling exit
 * status later. The program is looked up in PATH before forking (execvp's rules without its
 * /bin/sh fallback, as subprocess does).
 *
 * Exits are seen through a pidfd in a uv_poll (readable when the process ends; then it is
 * reaped), never by polling. Each output stream is a pipe read with uv_read into a ctrun_sink
 * (line framing, files, console); a stream with no sink goes to /dev/null. After the exit the
 * streams are drained until end-of-file or until drain_ms pass (a grandchild may hold a pipe
 * open), then everything is closed and on_done runs: only then may the struct be freed.
 *
 * Deliberately not here: what an exit means (the agent decides), where output goes (the caller
 * builds the sinks), rank bookkeeping, timers other than the drain.
 */
#ifndef CTRUN_PROC_H
#define CTRUN_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "ct_error.h"
#include "ctrun_sink.h"
#include "ct_heartbeat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The fd number of the heartbeat pipe in a worker (CTRUN_HEARTBEAT_FD). */
#define CTRUN_PROC_HEARTBEAT_FD 3

typedef struct ctrun_proc ctrun_proc_t;

typedef struct ctrun_proc_callbacks {
    /* The process ended: exitcode is its status, or -signal when a signal killed it. */
    void (*on_exit)(ctrun_proc_t *p, int exitcode, void *data);
    /* A well-formed heartbeat record arrived (malformed bytes end the heartbeat stream). */
    void (*on_heartbeat)(ctrun_proc_t *p, const ct_heartbeat_record_t *rec, void *data);
    /* Every handle is closed (after on_exit, or after ctrun_proc_close). */
    void (*on_done)(ctrun_proc_t *p, void *data);
} ctrun_proc_callbacks_t;

typedef struct ctrun_proc_opts {
    const char *file;        /* program: a path, or a name looked up in PATH */
    char *const *argv;       /* argv[0] as the program sees it */
    char *const *envp;       /* complete environment */
    ctrun_sink_t *out, *err; /* NULL: the stream goes to /dev/null */
    bool heartbeat;          /* give it a heartbeat pipe on CTRUN_PROC_HEARTBEAT_FD */
    int64_t drain_ms;        /* after the exit, how long to wait for end-of-file (0: 1000) */
    int cgroup_dir_fd;       /* > 0: the cgroup folder the child is created in (clone3's
                              * CLONE_INTO_CGROUP; ctrun_cgroup.h); 0 or -1: none */
    int cgroup_fd;           /* > 0: its cgroup.procs, which the child joins before exec where
                              * the kernel cannot create it in the folder (best effort) */
    const int *cpus;         /* CPUs the child is bound to before exec, or NULL: inherited */
    size_t ncpus;
    /* NULL: the child is created here (file, argv, cgroup and cpus apply). Otherwise start
     * makes it, given the child's ends of its streams (stdout, stderr: a pipe or /dev/null;
     * the heartbeat pipe or -1): 0 with *pid a child of this process that already runs the
     * program with those descriptors, in its own process group (a warm worker, ctrun_warm.h),
     * or a negative error with the reason in eb. */
    int (*start)(void *start_data, int out_fd, int err_fd, int hb_fd, pid_t *pid, ct_errbuf_t *eb);
    void *start_data;
} ctrun_proc_opts_t;

struct ctrun_proc {
    uv_loop_t *loop;
    pid_t pid; /* also the process group id */
    bool exited;
    int exitcode;
    const ctrun_proc_callbacks_t *cb;
    void *data;
    /* internal */
    int pidfd;
    uv_poll_t exit_poll;
    uv_pipe_t out_pipe, err_pipe, hb_pipe;
    uv_timer_t drain_timer;
    ctrun_sink_t *out_sink, *err_sink;
    int open_handles; /* handles not yet closed */
    bool out_open, err_open, hb_open, poll_open, timer_open, closing, done;
    int64_t drain_ms;
    uint8_t hb_buf[sizeof(ct_heartbeat_record_t)];
    size_t hb_len;
    char read_buf[64 * 1024];
};

/* Resolves file as execvp would (a name without '/' is searched in path_env, default
 * "/usr/local/bin:/usr/bin:/bin"). *out is malloc'd. Errors: -ENOENT (not found), -EACCES
 * (found but not executable), -ENOMEM, with the reason in eb. */
int ctrun_proc_resolve(const char *file, const char *path_env, char **out, ct_errbuf_t *eb);

/* Starts the process. On success every handle is open and the callbacks will run. On failure
 * eb says why (an exec failure: CT_ESPAWN, the child already reaped); p->done is then true when
 * nothing is left open, and false in the one case where the worker had started but could not
 * be watched (it was killed and reaped): its handles close from the loop and on_done runs.
 * p must stay at its address until p->done. */
int ctrun_proc_spawn(ctrun_proc_t *p, uv_loop_t *loop, const ctrun_proc_opts_t *opts,
                     const ctrun_proc_callbacks_t *cb, void *data, ct_errbuf_t *eb);

/* Sends sig to the process group (the worker and whatever it started that stayed in its
 * group). Returns 0 or -errno (-ESRCH when the group is empty). */
int ctrun_proc_signal(ctrun_proc_t *p, int sig);

/* Stops reading and closes every handle now (the process, if still running, is not waited for;
 * on_exit will not run). on_done follows from the loop. */
void ctrun_proc_close(ctrun_proc_t *p);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_PROC_H */
