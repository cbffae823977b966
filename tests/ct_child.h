/*
 * ct_child.h - run a program from a test: capture its stdout and stderr, give it a deadline,
 * and make sure nothing it started outlives the test.
 *
 * The child runs in its own process group with a parent-death signal, so killing the group
 * (on timeout, or in ct_child_close) also takes down anything it spawned, and a crashed test
 * leaves no orphans. An exec failure is reported by ct_child_start itself (through a
 * close-on-exec pipe, as libuv does) rather than as a puzzling exit status. Test code only:
 * this is not a launcher.
 */
#ifndef CT_CHILD_H
#define CT_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ct_child_opts {
    /* Changes to the inherited environment, NULL-terminated: "NAME=value" sets, "NAME" unsets. */
    const char *const *env;
    bool clear_env;         /* start from an empty environment before applying env */
    const char *cwd;        /* NULL: the test's working directory */
    const char *stdin_text; /* NULL: stdin is /dev/null */
} ct_child_opts_t;

typedef struct ct_child {
    pid_t pid; /* also the process group id */
    int out_fd, err_fd;
    char *out, *err; /* captured output, always NUL-terminated once the child was waited for */
    size_t out_len, err_len, out_cap, err_cap;
    bool reaped;
    bool timed_out;  /* the deadline passed and the group was killed */
    int exit_code;   /* exit status, or -1 when killed by a signal */
    int term_signal; /* the signal that killed it, or 0 */
    int64_t start_ms, elapsed_ms;
} ct_child_t;

/* Starts argv[0] (looked up in PATH). Returns 0, or a negated errno when it could not be
 * executed (ENOENT, EACCES, ...). */
int ct_child_start(ct_child_t *c, char *const argv[], const ct_child_opts_t *opts);

/* Collects output until the child exits (and its output pipes close, or 500 ms pass), or until
 * timeout_ms, when its whole process group is killed with SIGKILL and timed_out is set. Returns
 * 0 when it exited on its own, -ETIMEDOUT otherwise. */
int ct_child_wait(ct_child_t *c, int64_t timeout_ms);

/* Waits for n children together, collecting everyone's output (so none stalls on a full
 * pipe), until each has exited or timeout_ms passes, when those left are killed (SIGKILL,
 * timed_out set). Each child's elapsed_ms is taken when it is seen to exit (within a few ms).
 * Returns 0 when all exited on their own, -ETIMEDOUT otherwise. */
int ct_child_wait_all(ct_child_t *cs, int n, int64_t timeout_ms);

/* Reaps the child when it has exited, without waiting (its output read so far is kept).
 * True once it has been reaped. */
bool ct_child_exited(ct_child_t *c);

/* Sends sig to the child's process group. */
void ct_child_signal(ct_child_t *c, int sig);

/* Reads whatever output is available within wait_ms, without waiting for exit. */
void ct_child_poll_output(ct_child_t *c, int64_t wait_ms);

/* Kills the process group (SIGKILL), reaps the child, frees buffers. Safe to call twice. */
void ct_child_close(ct_child_t *c);

/* start + wait. On exec failure returns that error with c cleared. */
int ct_child_run(ct_child_t *c, char *const argv[], const ct_child_opts_t *opts,
                 int64_t timeout_ms);

/* True when a live (not zombie) process is still in the process group pgid. */
bool ct_pgid_alive(pid_t pgid);

#endif /* CT_CHILD_H */
