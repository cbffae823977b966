/*
 * ct_child.c - fork/exec with captured pipes and a deadline, for tests.
 */
#include "ct_child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_time.h"

static void ct__append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t ncap = *cap ? *cap : 4096;
        while (*len + n + 1 > ncap)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (nb == NULL)
            abort(); /* a test that cannot hold its child's output cannot go on */
        *buf = nb;
        *cap = ncap;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
}

static void ct__child_exec(char *const argv[], const ct_child_opts_t *opts, int out_w, int err_w,
                           int in_r, int errpipe_w, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* the test died before we set the death signal */
    dup2(in_r, STDIN_FILENO);
    dup2(out_w, STDOUT_FILENO);
    dup2(err_w, STDERR_FILENO);
    /* Signals the test may have blocked or ignored must not leak into the program. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    if (opts != NULL) {
        if (opts->clear_env)
            clearenv();
        for (const char *const *e = opts->env; e != NULL && *e != NULL; e++) {
            const char *eq = strchr(*e, '=');
            if (eq == NULL) {
                unsetenv(*e);
            } else {
                char name[256];
                size_t n = (size_t)(eq - *e);
                if (n >= sizeof name)
                    continue;
                memcpy(name, *e, n);
                name[n] = '\0';
                setenv(name, eq + 1, 1);
            }
        }
        if (opts->cwd != NULL && chdir(opts->cwd) != 0) {
            int e = errno;
            (void)!write(errpipe_w, &e, sizeof e);
            _exit(127);
        }
    }
    execvp(argv[0], argv);
    int e = errno;
    (void)!write(errpipe_w, &e, sizeof e);
    _exit(127);
}

int ct_child_start(ct_child_t *c, char *const argv[], const ct_child_opts_t *opts)
{
    memset(c, 0, sizeof *c);
    c->pid = -1;
    c->out_fd = c->err_fd = -1;
    int out_p[2], err_p[2], in_p[2], errpipe[2];
    if (pipe2(out_p, O_CLOEXEC) != 0)
        return -errno;
    if (pipe2(err_p, O_CLOEXEC) != 0)
        return -errno;
    if (pipe2(in_p, O_CLOEXEC) != 0)
        return -errno;
    if (pipe2(errpipe, O_CLOEXEC) != 0)
        return -errno;

    /* Become the reaper of our descendants, so a grandchild orphaned by a killed child is
     * re-parented to the test (and reaped in ct_child_close) rather than to an init that may
     * reap late, which would make the group look alive. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        ct__child_exec(argv, opts, out_p[1], err_p[1], in_p[0], errpipe[1], parent);

    setpgid(pid, pid); /* also done in the child; whichever runs first wins the race */
    close(out_p[1]);
    close(err_p[1]);
    close(in_p[0]);
    close(errpipe[1]);
    c->pid = pid;
    c->out_fd = out_p[0];
    c->err_fd = err_p[0];
    c->start_ms = ct_time_ms();

    int exec_errno = 0;
    ssize_t r;
    do {
        r = read(errpipe[0], &exec_errno, sizeof exec_errno);
    } while (r < 0 && errno == EINTR);
    close(errpipe[0]);

    if (opts != NULL && opts->stdin_text != NULL && r == 0) {
        /* Small inputs only: the pipe buffer (64 KiB) must hold it, tests do not need more. */
        size_t left = strlen(opts->stdin_text);
        const char *p = opts->stdin_text;
        while (left > 0) {
            ssize_t w = write(in_p[1], p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            p += w;
            left -= (size_t)w;
        }
    }
    close(in_p[1]);

    if (r == (ssize_t)sizeof exec_errno) {
        int status;
        waitpid(pid, &status, 0);
        close(c->out_fd);
        close(c->err_fd);
        memset(c, 0, sizeof *c);
        c->pid = -1;
        c->out_fd = c->err_fd = -1;
        c->reaped = true;
        return -exec_errno;
    }
    ct__append(&c->out, &c->out_len, &c->out_cap, "", 0);
    ct__append(&c->err, &c->err_len, &c->err_cap, "", 0);
    return 0;
}

/* Reads from the open output pipes for up to wait_ms; closes a pipe at EOF. */
static void ct__read_some(ct_child_t *c, int wait_ms)
{
    struct pollfd pf[2];
    int n = 0;
    if (c->out_fd >= 0)
        pf[n++] = (struct pollfd){.fd = c->out_fd, .events = POLLIN};
    if (c->err_fd >= 0)
        pf[n++] = (struct pollfd){.fd = c->err_fd, .events = POLLIN};
    if (n == 0) {
        ct_sleep_ms(wait_ms);
        return;
    }
    int pr = poll(pf, (nfds_t)n, wait_ms);
    if (pr <= 0)
        return;
    for (int i = 0; i < n; i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        char buf[65536];
        ssize_t got = read(pf[i].fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        bool is_out = pf[i].fd == c->out_fd;
        if (got <= 0) {
            close(pf[i].fd);
            if (is_out)
                c->out_fd = -1;
            else
                c->err_fd = -1;
            continue;
        }
        if (is_out)
            ct__append(&c->out, &c->out_len, &c->out_cap, buf, (size_t)got);
        else
            ct__append(&c->err, &c->err_len, &c->err_cap, buf, (size_t)got);
    }
}

static bool ct__try_reap(ct_child_t *c, int flags)
{
    if (c->reaped || c->pid <= 0)
        return true;
    int status;
    pid_t r;
    do {
        r = waitpid(c->pid, &status, flags);
    } while (r < 0 && errno == EINTR);
    if (r != c->pid)
        return false;
    c->reaped = true;
    c->elapsed_ms = ct_time_ms() - c->start_ms;
    if (WIFEXITED(status)) {
        c->exit_code = WEXITSTATUS(status);
        c->term_signal = 0;
    } else if (WIFSIGNALED(status)) {
        c->exit_code = -1;
        c->term_signal = WTERMSIG(status);
    }
    return true;
}

void ct_child_poll_output(ct_child_t *c, int64_t wait_ms)
{
    int64_t deadline = ct_deadline_after_ms(wait_ms);
    do {
        ct__read_some(c, ct_deadline_poll_ms(deadline) < 10 ? ct_deadline_poll_ms(deadline) : 10);
    } while (!ct_deadline_passed(deadline) && (c->out_fd >= 0 || c->err_fd >= 0));
}

int ct_child_wait(ct_child_t *c, int64_t timeout_ms)
{
    int64_t deadline = ct_deadline_after_ms(timeout_ms);
    while (!ct__try_reap(c, WNOHANG)) {
        if (ct_deadline_passed(deadline)) {
            c->timed_out = true;
            ct_child_signal(c, SIGKILL);
            ct__try_reap(c, 0);
            ct_child_poll_output(c, 100);
            return -ETIMEDOUT;
        }
        ct__read_some(c, 5);
    }
    /* Exited: take the rest of its output. A grandchild still holding the pipes open must not
     * stall the test, hence the bound. */
    int64_t drain = ct_deadline_after_ms(500);
    while ((c->out_fd >= 0 || c->err_fd >= 0) && !ct_deadline_passed(drain))
        ct__read_some(c, 10);
    return 0;
}

int ct_child_wait_all(ct_child_t *cs, int n, int64_t timeout_ms)
{
    int64_t deadline = ct_deadline_after_ms(timeout_ms);
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (ct__try_reap(&cs[i], WNOHANG))
                continue;
            left++;
            ct__read_some(&cs[i], 0);
        }
        if (left == 0)
            break;
        if (ct_deadline_passed(deadline)) {
            for (int i = 0; i < n; i++)
                if (!cs[i].reaped) {
                    cs[i].timed_out = true;
                    ct_child_signal(&cs[i], SIGKILL);
                    ct__try_reap(&cs[i], 0);
                }
            break;
        }
        ct_sleep_ms(5);
    }
    int rc = 0;
    int64_t drain = ct_deadline_after_ms(500);
    for (int i = 0; i < n; i++) {
        while ((cs[i].out_fd >= 0 || cs[i].err_fd >= 0) && !ct_deadline_passed(drain))
            ct__read_some(&cs[i], 10);
        if (cs[i].timed_out)
            rc = -ETIMEDOUT;
    }
    return rc;
}

bool ct_child_exited(ct_child_t *c)
{
    ct__read_some(c, 0);
    return ct__try_reap(c, WNOHANG);
}

void ct_child_signal(ct_child_t *c, int sig)
{
    if (c->pid > 0)
        kill(-c->pid, sig);
}

void ct_child_close(ct_child_t *c)
{
    if (c->pid > 0) {
        kill(-c->pid, SIGKILL);
        ct__try_reap(c, 0);
        /* Reap the group's orphans that were re-parented to us (we are a subreaper). */
        while (waitpid(-c->pid, NULL, WNOHANG) > 0) {
        }
        c->pid = -1;
    }
    if (c->out_fd >= 0)
        close(c->out_fd);
    if (c->err_fd >= 0)
        close(c->err_fd);
    c->out_fd = c->err_fd = -1;
    free(c->out);
    free(c->err);
    c->out = c->err = NULL;
    c->out_len = c->err_len = c->out_cap = c->err_cap = 0;
}

int ct_child_run(ct_child_t *c, char *const argv[], const ct_child_opts_t *opts,
                 int64_t timeout_ms)
{
    int rc = ct_child_start(c, argv, opts);
    if (rc != 0)
        return rc;
    return ct_child_wait(c, timeout_ms);
}

bool ct_pgid_alive(pid_t pgid)
{
    if (pgid <= 0)
        return false;
    /* Reap our own zombies of that group first: they are dead, just not yet collected. */
    while (waitpid(-pgid, NULL, WNOHANG) > 0) {
    }
    /* A zombie someone else has not reaped yet is dead too, so kill(-pgid, 0) is not enough:
     * look for a member of the group in any state but Z. */
    DIR *d = opendir("/proc");
    if (d == NULL)
        return kill(-pgid, 0) == 0;
    bool alive = false;
    struct dirent *e;
    while (!alive && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        /* "pid (comm) state ppid pgrp ...": comm may contain spaces, so parse after the last ')'. */
        const char *rp = strrchr(buf, ')');
        char state;
        int ppid, pgrp;
        if (rp != NULL && sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 &&
            pgrp == pgid && state != 'Z' && state != 'X')
            alive = true;
    }
    closedir(d);
    return alive;
}
