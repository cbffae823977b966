/*
 * ctrun_warm.c - the standbys of --warm_restart: starting them (posix_spawn: their own session,
 * default signal dispositions, the socket on fd 3, /dev/null on 0-2), the request and its
 * descriptors, the reply, and making the forked worker this process's child.
 *
 * Everything here is synchronous and bounded: a fork request waits for the standby's reply
 * (milliseconds: one fork of an interpreter) and at most ctrun_warm_t.ready_wait_ms for a
 * standby that is still importing (the caller sets it: 0 where other nodes need the agent's loop
 * to answer their heartbeats).
 *
 * Deliberately not here: the standby's own code (ctrun_standby.py), the decision to go warm and
 * the cold fallback (ctrun_group.c), watching the worker (ctrun_proc.c).
 */
#include "ctrun_warm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ct_time.h"

#define CTRUN_WARM__SCRIPT        "ctrun_standby.py"
#define CTRUN_WARM__FD            3
#define CTRUN_WARM__REPLY_MS      3000
#define CTRUN_WARM__READY_WAIT_MS 10000
#define CTRUN_WARM__MAX_FDS       5

static char *ctrun_warm__find_script(const char *self_exe)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", self_exe != NULL ? self_exe : "");
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return NULL;
    *slash = '\0';
    const char *rel[] = {"/" CTRUN_WARM__SCRIPT, "/../share/ctrun/" CTRUN_WARM__SCRIPT};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX];
        struct stat st;
        int len = snprintf(cand, sizeof cand, "%s%s", dir, rel[i]);
        if (len > 0 && (size_t)len < sizeof cand && stat(cand, &st) == 0 && S_ISREG(st.st_mode))
            return realpath(cand, NULL);
    }
    return NULL;
}

int ctrun_warm_init(ctrun_warm_t *w, const char *self_exe, const char *python, const char *preload,
                    int n, ct_errbuf_t *eb)
{
    memset(w, 0, sizeof *w);
    w->ready_wait_ms = CTRUN_WARM__READY_WAIT_MS;
    w->script = ctrun_warm__find_script(self_exe);
    if (w->script == NULL)
        return ct_errbuf_set(eb, -ENOENT, "%s not found next to %s or in its ../share/ctrun/",
                             CTRUN_WARM__SCRIPT, self_exe != NULL ? self_exe : "ctrun");
    w->python = strdup(python);
    w->preload = strdup(preload != NULL ? preload : "");
    w->sb = calloc((size_t)(n > 0 ? n : 1), sizeof *w->sb);
    if (w->python == NULL || w->preload == NULL || w->sb == NULL) {
        ctrun_warm_free(w);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    w->n = n;
    for (int i = 0; i < n; i++) {
        w->sb[i].pid = -1;
        w->sb[i].sock = -1;
    }
    w->on = true;
    return 0;
}

/* Stops standby i (SIGKILL, reaped). */
static void ctrun_warm__stop(ctrun_warm_t *w, int i)
{
    ctrun_warm_standby_t *s = &w->sb[i];
    if (s->sock >= 0)
        close(s->sock);
    s->sock = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    s->pid = -1;
    s->ready = false;
}

bool ctrun_warm_alive(ctrun_warm_t *w, int i)
{
    if (!w->on || i < 0 || i >= w->n || w->sb[i].pid <= 0)
        return false;
    pid_t r = waitpid(w->sb[i].pid, NULL, WNOHANG);
    if (r == 0)
        return true;
    w->sb[i].pid = -1; /* exited (and now reaped) */
    ctrun_warm__stop(w, i);
    return false;
}

int ctrun_warm_start(ctrun_warm_t *w, int i, char *const *envp, ct_errbuf_t *eb)
{
    if (!w->on || i < 0 || i >= w->n)
        return ct_errbuf_set(eb, -EINVAL, "no standby slot for local rank %d", i);
    if (ctrun_warm_alive(w, i))
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return ct_errbuf_set(eb, -errno, "socketpair: %s", strerror(errno));
    /* Above 3, so that the dup2 onto 3 clears close-on-exec. */
    int child = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    close(sv[1]);
    if (child < 0) {
        close(sv[0]);
        return ct_errbuf_set(eb, -errno, "fcntl: %s", strerror(errno));
    }
    size_t nenv = 0;
    while (envp[nenv] != NULL)
        nenv++;
    char **env = calloc(nenv + 4, sizeof *env);
    char fdvar[32], agentvar[48], *preloadvar = NULL;
    snprintf(fdvar, sizeof fdvar, "CTRUN_STANDBY_FD=%d", CTRUN_WARM__FD);
    snprintf(agentvar, sizeof agentvar, "CTRUN_STANDBY_AGENT=%d", (int)getpid());
    size_t plen = strlen(w->preload) + sizeof "CTRUN_STANDBY_PRELOAD=";
    preloadvar = malloc(plen);
    if (env == NULL || preloadvar == NULL) {
        free(env);
        free(preloadvar);
        close(sv[0]);
        close(child);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    snprintf(preloadvar, plen, "CTRUN_STANDBY_PRELOAD=%s", w->preload);
    size_t k = 0;
    for (size_t j = 0; j < nenv; j++) {
        /* fd 3 is the socket here, not a heartbeat pipe. */
        if (strncmp(envp[j], "CTRUN_HEARTBEAT_FD=", 19) != 0)
            env[k++] = envp[j];
    }
    env[k++] = fdvar;
    env[k++] = agentvar;
    env[k++] = preloadvar;
    env[k] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_adddup2(&fa, child, CTRUN_WARM__FD);
    sigset_t all, none;
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at,
                             POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
    char *argv[] = {w->python, "-u", w->script, NULL};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, w->python, &fa, &at, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(env);
    free(preloadvar);
    close(child);
    if (rc != 0) {
        close(sv[0]);
        return ct_errbuf_set(eb, -rc, "%s: %s", w->python, strerror(rc));
    }
    w->sb[i].pid = pid;
    w->sb[i].sock = sv[0];
    w->sb[i].ready = false;
    return 0;
}

/* One message from standby i into buf (NUL-terminated), waiting at most ms. 0, -ETIMEDOUT, or
 * -EPIPE when it closed the socket (it exited). */
static int ctrun_warm__recv(ctrun_warm_standby_t *s, char *buf, size_t size, int64_t ms)
{
    int64_t deadline = ct_deadline_after_ms(ms > 0 ? ms : 0);
    for (;;) {
        struct pollfd pfd = {.fd = s->sock, .events = POLLIN};
        int r = poll(&pfd, 1, ct_deadline_poll_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? -ETIMEDOUT : -errno;
        ssize_t n = recv(s->sock, buf, size - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? -EPIPE : -errno;
        buf[n] = '\0';
        return 0;
    }
}

/* Appends s and its NUL to the message. */
static int ctrun_warm__put(char **msg, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n)
            c *= 2;
        char *m = realloc(*msg, c);
        if (m == NULL)
            return -ENOMEM;
        *msg = m;
        *cap = c;
    }
    memcpy(*msg + *len, s, n);
    *len += n;
    return 0;
}

static int ctrun_warm__message(const ctrun_warm_req_t *req, const char *fdnames, char **out,
                               size_t *outlen)
{
    char *msg = NULL;
    size_t len = 0, cap = 0;
    char num[32], cpus[4096];
    size_t cl = 0;
    cpus[0] = '\0';
    for (size_t i = 0; req->cpus != NULL && i < req->ncpus && cl + 16 < sizeof cpus; i++)
        cl += (size_t)snprintf(cpus + cl, sizeof cpus - cl, "%s%d", i ? "," : "", req->cpus[i]);
    size_t nargs = 0;
    while (req->args != NULL && req->args[nargs] != NULL)
        nargs++;
    int rc = ctrun_warm__put(&msg, &len, &cap, "RUN");
    snprintf(num, sizeof num, "%d", (int)getpid());
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, num);
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, req->cwd);
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, fdnames);
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, cpus);
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, req->module ? "m" : "s");
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, req->target);
    snprintf(num, sizeof num, "%zu", nargs);
    rc = rc ? rc : ctrun_warm__put(&msg, &len, &cap, num);
    for (size_t i = 0; rc == 0 && i < nargs; i++)
        rc = ctrun_warm__put(&msg, &len, &cap, req->args[i]);
    for (size_t i = 0; rc == 0 && req->envp[i] != NULL; i++)
        rc = ctrun_warm__put(&msg, &len, &cap, req->envp[i]);
    if (rc != 0) {
        free(msg);
        return rc;
    }
    *out = msg;
    *outlen = len - 1; /* the last NUL is a separator too many */
    return 0;
}

/* Sends the request with its descriptors. */
static int ctrun_warm__send(ctrun_warm_standby_t *s, const char *msg, size_t len, const int *fds,
                            int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * CTRUN_WARM__MAX_FDS)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    ssize_t n;
    do {
        n = sendmsg(s->sock, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EIO;
}

/* Waits (bounded) until pid is a child of this process: waitid with WNOWAIT answers ECHILD for a
 * process that is not. */
static int ctrun_warm__adopted(pid_t pid)
{
    int64_t deadline = ct_deadline_after_ms(CTRUN_WARM__REPLY_MS);
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
            return 0;
        if (errno != ECHILD && errno != EINTR)
            return -errno;
        if (ct_deadline_passed(deadline))
            return -ETIMEDOUT;
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
}

int ctrun_warm_fork(ctrun_warm_t *w, int i, const ctrun_warm_req_t *req, pid_t *pid,
                    ct_errbuf_t *eb)
{
    *pid = -1;
    if (!ctrun_warm_alive(w, i))
        return ct_errbuf_set(eb, -ESRCH, "no standby for local rank %d", i);
    ctrun_warm_standby_t *s = &w->sb[i];
    char reply[1024];
    int rc;
    if (!s->ready) {
        int64_t t0 = ct_time_ms();
        rc = ctrun_warm__recv(s, reply, sizeof reply, w->ready_wait_ms);
        if (rc == 0 && strcmp(reply, "READY") == 0) {
            s->ready = true;
        } else {
            int err;
            if (rc == 0)
                err = ct_errbuf_set(eb, -EPROTO, "standby %d: %s", (int)s->pid, reply);
            else if (rc == -ETIMEDOUT)
                /* Still importing: it stays, for the next restart. */
                return ct_errbuf_set(eb, rc, "standby %d is still importing (waited %.1f s)",
                                     (int)s->pid, (double)(ct_time_ms() - t0) / 1000.0);
            else
                err = ct_errbuf_set(eb, rc, "standby %d exited before it was ready", (int)s->pid);
            ctrun_warm__stop(w, i);
            return err;
        }
    }
    int fds[CTRUN_WARM__MAX_FDS];
    char names[CTRUN_WARM__MAX_FDS + 1];
    int nfds = 0;
    /* The agent's stdin, as a cold worker inherits it (not when it is closed or close-on-exec:
     * a cold worker does not get it then either). */
    int fl = fcntl(0, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC)) {
        fds[nfds] = 0;
        names[nfds++] = 'i';
    }
    fds[nfds] = req->out_fd;
    names[nfds++] = 'o';
    fds[nfds] = req->err_fd;
    names[nfds++] = 'e';
    if (req->hb_fd >= 0) {
        fds[nfds] = req->hb_fd;
        names[nfds++] = 'h';
    }
    if (req->cgroup_fd >= 0) {
        fds[nfds] = req->cgroup_fd;
        names[nfds++] = 'c';
    }
    names[nfds] = '\0';
    char *msg = NULL;
    size_t len = 0;
    if ((rc = ctrun_warm__message(req, names, &msg, &len)) != 0)
        return ct_errbuf_set(eb, rc, "out of memory");
    /* A subreaper until the worker is ours: its parent exits right after the reply. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    rc = ctrun_warm__send(s, msg, len, fds, nfds);
    free(msg);
    if (rc != 0) {
        prctl(PR_SET_CHILD_SUBREAPER, 0);
        ct_errbuf_set(eb, rc, "standby %d: sending the worker: %s", (int)s->pid, strerror(-rc));
        ctrun_warm__stop(w, i);
        return rc;
    }
    rc = ctrun_warm__recv(s, reply, sizeof reply, CTRUN_WARM__REPLY_MS);
    long v = 0;
    char *end = NULL;
    if (rc == 0 && strncmp(reply, "PID ", 4) == 0)
        v = strtol(reply + 4, &end, 10);
    if (rc != 0 || end == NULL || *end != '\0' || v <= 0 || v > INT_MAX) {
        prctl(PR_SET_CHILD_SUBREAPER, 0);
        int err = rc == 0 ? ct_errbuf_set(eb, -EPROTO, "standby %d: %s", (int)s->pid, reply)
                          : ct_errbuf_set(eb, rc, "standby %d: %s", (int)s->pid,
                                          rc == -EPIPE ? "exited" : "no reply");
        /* An ERR reply (a refused request, a failed fork) leaves the standby serving. */
        if (rc != 0)
            ctrun_warm__stop(w, i);
        return err;
    }
    rc = ctrun_warm__adopted((pid_t)v);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (rc != 0) {
        kill((pid_t)v, SIGKILL);
        return ct_errbuf_set(eb, rc, "standby %d: worker %ld did not become ctrun's child",
                             (int)s->pid, v);
    }
    *pid = (pid_t)v;
    return 0;
}

void ctrun_warm_free(ctrun_warm_t *w)
{
    for (int i = 0; w->sb != NULL && i < w->n; i++)
        ctrun_warm__stop(w, i);
    free(w->sb);
    free(w->python);
    free(w->script);
    free(w->preload);
    memset(w, 0, sizeof *w);
}
