/*
 * ctrun_proc.c - spawning with a parent-death signal, exit through a pidfd, output and
 * heartbeat through uv pipes.
 *
 * The child is made as posix_spawn makes it: clone(CLONE_VM | CLONE_VFORK) on a stack of its
 * own, so no page table is copied (a launch costs microseconds, whatever the agent's size) and
 * the agent is suspended until the child has exec'd or failed; a failure's errno is written
 * into the shared argument block, which the agent reads when it resumes. (This is the
 * "close-on-exec pipe" of other spawners without the pipe: with a shared address space the
 * answer is already there when clone returns.) Between clone and execve the child only makes
 * async-signal-safe system calls and writes nothing of the agent's memory but that block: it
 * shares the agent's memory, and the agent may have helper threads (the store client's lanes)
 * whose locks it must never touch. Signal dispositions and the fd table are the child's own
 * copies (no CLONE_SIGHAND, no CLONE_FILES), so resetting them does not touch the agent.
 *
 * A worker of a job with a cgroup is created in it by clone3's CLONE_INTO_CGROUP (Linux 5.7):
 * moving a process in through cgroup.procs waits for an RCU grace period on the cgroup lock
 * (8-15 ms on an idle 2-core VM, once per burst of moves), which creating it there does not.
 * clone3 is not given a stack here, so that child is a copy (CLONE_VFORK without CLONE_VM, as
 * fork, a page-table copy of the agent) and reports a failure through a shared page. Where
 * clone3 or CLONE_INTO_CGROUP is refused, the child is made as above and writes cgroup.procs.
 *
 * A caller's start function may make the child instead (a worker forked by a --warm_restart
 * standby, ctrun_warm.c): the pipes, the pidfd and everything after are the same.
 */
#include "ctrun_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CTRUN_PROC__DRAIN_MS_DEFAULT 1000
#define CTRUN_PROC__CHILD_STACK      (64 * 1024)

int ctrun_proc_resolve(const char *file, const char *path_env, char **out, ct_errbuf_t *eb)
{
    if (file == NULL || file[0] == '\0')
        return ct_errbuf_set(eb, -ENOENT, "empty program name");
    if (strchr(file, '/') != NULL) {
        *out = strdup(file);
        return *out ? 0 : ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    const char *path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
    bool found_unexecutable = false;
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        char cand[PATH_MAX];
        /* An empty entry means the current directory, as in execvp. */
        int w = n == 0 ? snprintf(cand, sizeof cand, "%s", file)
                       : snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, file);
        struct stat st;
        if (w > 0 && (size_t)w < sizeof cand && stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0) {
                *out = strdup(cand);
                return *out ? 0 : ct_errbuf_set(eb, -ENOMEM, "out of memory");
            }
            found_unexecutable = true;
        }
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    if (found_unexecutable)
        return ct_errbuf_set(eb, -EACCES, "%s: found in PATH but not executable", file);
    return ct_errbuf_set(eb, -ENOENT, "%s: not found in PATH (%s)", file, path);
}

/* ---- the child, between clone and exec -------------------------------------------------- */

/* Moves fd to a number >= 4, so that the dup2 calls onto 1..3 cannot overwrite a source. */
static int ctrun_proc__lift(int fd)
{
    if (fd < 0 || fd > 3)
        return fd;
    return fcntl(fd, F_DUPFD, 4);
}

typedef struct ctrun_proc__child_args {
    const char *path;
    char *const *argv, *const *envp;
    int out_fd, err_fd, hb_fd;
    int cgroup_fd;         /* cgroup.procs to join, -1 none */
    const cpu_set_t *cpus; /* affinity to set, NULL none */
    size_t cpus_size;
    pid_t parent;
    int *err; /* written by the child when a step before or at execve fails (memory the agent
               * shares with it) */
} ctrun_proc__child_args_t;

static int ctrun_proc__child(void *arg)
{
    ctrun_proc__child_args_t *a = arg;
    /* Handlers the agent installed (libuv's signal handles) must not run here; ignored
     * SIGPIPE/SIGXFSZ go back to the default, as Python's subprocess does (restore_signals). */
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction old;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &old) != 0)
            continue;
        bool handled = !(old.sa_flags & SA_SIGINFO)
                           ? (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)
                           : true;
        if (handled || sig == SIGPIPE || sig == SIGXFSZ) {
            struct sigaction dfl;
            memset(&dfl, 0, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            sigaction(sig, &dfl, NULL);
        }
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    int err = 0;
    /* Into the job's cgroup first, so that whatever it starts is there too. A failure leaves
     * the worker to its process group, as without cgroups. */
    if (a->cgroup_fd >= 0 && write(a->cgroup_fd, "0", 1) != 1)
        errno = 0;
    if (setsid() < 0)
        err = errno;
    if (err == 0 && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        err = errno;
    if (err == 0 && getppid() != a->parent)
        _exit(127); /* the agent died before the death signal was armed */
    if (err == 0 && a->cpus != NULL && sched_setaffinity(0, a->cpus_size, a->cpus) != 0)
        err = errno;
    int out_fd = ctrun_proc__lift(a->out_fd);
    int err_fd = ctrun_proc__lift(a->err_fd);
    int hb_fd = ctrun_proc__lift(a->hb_fd);
    if (err == 0 && (out_fd < 0 || dup2(out_fd, 1) < 0))
        err = errno ? errno : EBADF;
    if (err == 0 && (err_fd < 0 || dup2(err_fd, 2) < 0))
        err = errno ? errno : EBADF;
    if (err == 0 && hb_fd >= 0 && dup2(hb_fd, CTRUN_PROC_HEARTBEAT_FD) < 0)
        err = errno;
    if (err == 0) {
        /* Nothing of the agent's leaks into the worker beyond fds 0-2 (and 3 when it is the
         * heartbeat), as Python's subprocess closes them for torchrun's workers. */
        unsigned first = hb_fd >= 0 ? 4u : 3u;
        if (syscall(SYS_close_range, first, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
            long max = sysconf(_SC_OPEN_MAX);
            if (max < 0 || max > 65536)
                max = 65536;
            for (int fd = (int)first; fd < max; fd++)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        execve(a->path, a->argv, a->envp);
        err = errno;
    }
    *a->err = err ? err : EIO;
    _exit(127);
}

/* clone3 refused CLONE_INTO_CGROUP once (an old kernel, a cgroup it will not create in): the
 * other workers of this agent are moved in through cgroup.procs without asking again. */
static bool ctrun_proc__no_clone3;

/* The child created in the cgroup dir_fd by clone3 (see the top of the file); its pid, or -1
 * with errno set. The caller has blocked every signal. */
static pid_t ctrun_proc__clone_into(ctrun_proc__child_args_t *ca, int dir_fd)
{
    struct clone_args cl;
    memset(&cl, 0, sizeof cl);
    cl.flags = CLONE_VFORK | CLONE_INTO_CGROUP;
    cl.exit_signal = SIGCHLD;
    cl.cgroup = (uint64_t)dir_fd;
    long pid = syscall(SYS_clone3, &cl, sizeof cl);
    if (pid == 0)
        ctrun_proc__child(ca); /* never returns */
    return (pid_t)pid;
}

/* ---- handles ------------------------------------------------------------------------------ */

static void ctrun_proc__maybe_finish(ctrun_proc_t *p);

static void ctrun_proc__handle_closed(uv_handle_t *h)
{
    ctrun_proc_t *p = h->data;
    p->open_handles--;
    if (p->open_handles == 0 && !p->done) {
        p->done = true;
        if (p->pidfd >= 0) {
            close(p->pidfd);
            p->pidfd = -1;
        }
        if (p->cb->on_done != NULL)
            p->cb->on_done(p, p->data);
    }
}

static void ctrun_proc__close_handle(ctrun_proc_t *p, uv_handle_t *h, bool *open)
{
    if (!*open)
        return;
    *open = false;
    h->data = p;
    uv_close(h, ctrun_proc__handle_closed);
}

static void ctrun_proc__close_stream(ctrun_proc_t *p, uv_pipe_t *pipe, bool *open,
                                     ctrun_sink_t *sink)
{
    if (!*open)
        return;
    if (sink != NULL)
        ctrun_sink_finish(sink);
    ctrun_proc__close_handle(p, (uv_handle_t *)pipe, open);
}

static void ctrun_proc__drain_hb(ctrun_proc_t *p);

static void ctrun_proc__close_all(ctrun_proc_t *p)
{
    ctrun_proc__drain_hb(p);
    ctrun_proc__close_stream(p, &p->out_pipe, &p->out_open, p->out_sink);
    ctrun_proc__close_stream(p, &p->err_pipe, &p->err_open, p->err_sink);
    ctrun_proc__close_handle(p, (uv_handle_t *)&p->hb_pipe, &p->hb_open);
    ctrun_proc__close_handle(p, (uv_handle_t *)&p->exit_poll, &p->poll_open);
    ctrun_proc__close_handle(p, (uv_handle_t *)&p->drain_timer, &p->timer_open);
}

/* After the exit: done once both output streams reached end-of-file. */
static void ctrun_proc__maybe_finish(ctrun_proc_t *p)
{
    if (p->exited && !p->out_open && !p->err_open)
        ctrun_proc__close_all(p);
}

static void ctrun_proc__alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    ctrun_proc_t *p = h->data;
    (void)suggested;
    if (h == (uv_handle_t *)&p->hb_pipe) {
        *buf = uv_buf_init((char *)p->hb_buf + p->hb_len, (unsigned)(sizeof p->hb_buf - p->hb_len));
        return;
    }
    *buf = uv_buf_init(p->read_buf, sizeof p->read_buf);
}

static void ctrun_proc__read_out(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    ctrun_proc_t *p = s->data;
    bool is_out = s == (uv_stream_t *)&p->out_pipe;
    ctrun_sink_t *sink = is_out ? p->out_sink : p->err_sink;
    if (n > 0) {
        ctrun_sink_write(sink, buf->base, (size_t)n);
        return;
    }
    if (n == 0)
        return;
    /* End of file, or a read error: either way this stream is over. */
    if (is_out)
        ctrun_proc__close_stream(p, &p->out_pipe, &p->out_open, sink);
    else
        ctrun_proc__close_stream(p, &p->err_pipe, &p->err_open, sink);
    ctrun_proc__maybe_finish(p);
}

static void ctrun_proc__read_hb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    ctrun_proc_t *p = s->data;
    (void)buf;
    if (n < 0) {
        ctrun_proc__close_handle(p, (uv_handle_t *)&p->hb_pipe, &p->hb_open);
        return;
    }
    p->hb_len += (size_t)n;
    if (p->hb_len < sizeof p->hb_buf)
        return;
    ct_heartbeat_record_t rec;
    memcpy(&rec, p->hb_buf, sizeof rec);
    p->hb_len = 0;
    if (rec.magic != CT_HEARTBEAT_MAGIC || rec.version != CT_HEARTBEAT_VERSION ||
        rec.size != sizeof rec) {
        /* Not our record format: whatever writes there is not libctworker; stop listening. */
        ctrun_proc__close_handle(p, (uv_handle_t *)&p->hb_pipe, &p->hb_open);
        return;
    }
    if (p->cb->on_heartbeat != NULL)
        p->cb->on_heartbeat(p, &rec, p->data);
}

/* Reads, now, the heartbeat records already in the pipe. A worker's exit and its last records
 * become readable together and the loop may take either first; the exit callback must see the
 * last one (libctworker writes one right before an injected fault), and closing the pipe must
 * not drop them. The pipe is non-blocking (libuv made it so): this stops at EAGAIN; libuv's
 * own reader finds end-of-file later. */
static void ctrun_proc__drain_hb(ctrun_proc_t *p)
{
    uv_os_fd_t fd;
    while (p->hb_open && uv_fileno((uv_handle_t *)&p->hb_pipe, &fd) == 0) {
        ssize_t n = read(fd, p->hb_buf + p->hb_len, sizeof p->hb_buf - p->hb_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        uv_buf_t none = uv_buf_init(NULL, 0);
        ctrun_proc__read_hb((uv_stream_t *)&p->hb_pipe, n, &none);
    }
}

static void ctrun_proc__drain_expired(uv_timer_t *t)
{
    ctrun_proc_t *p = t->data;
    /* Something the worker started still holds its output pipes: stop reading them. */
    ctrun_proc__close_all(p);
}

static void ctrun_proc__exit_ready(uv_poll_t *h, int status, int events)
{
    ctrun_proc_t *p = h->data;
    (void)status;
    (void)events;
    int wstatus = 0;
    pid_t r;
    do {
        r = waitpid(p->pid, &wstatus, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0)
        return; /* not yet (a spurious wake-up) */
    ctrun_proc__close_handle(p, (uv_handle_t *)&p->exit_poll, &p->poll_open);
    ctrun_proc__drain_hb(p);
    p->exited = true;
    if (r < 0)
        p->exitcode = -SIGKILL; /* ECHILD: only if someone else reaped it; report it as killed */
    else if (WIFSIGNALED(wstatus))
        p->exitcode = -WTERMSIG(wstatus);
    else
        p->exitcode = WEXITSTATUS(wstatus);
    if (p->cb->on_exit != NULL)
        p->cb->on_exit(p, p->exitcode, p->data);
    if (p->closing)
        return;
    if (p->out_open || p->err_open) {
        p->timer_open = true;
        p->open_handles++;
        uv_timer_init(p->loop, &p->drain_timer);
        p->drain_timer.data = p;
        uv_timer_start(&p->drain_timer, ctrun_proc__drain_expired, (uint64_t)p->drain_ms, 0);
    }
    ctrun_proc__maybe_finish(p);
}

static int ctrun_proc__open_pipe(ctrun_proc_t *p, uv_pipe_t *pipe, int fd, bool *open,
                                 uv_read_cb cb)
{
    int rc = uv_pipe_init(p->loop, pipe, 0);
    if (rc != 0)
        return rc;
    pipe->data = p;
    p->open_handles++;
    *open = true;
    if ((rc = uv_pipe_open(pipe, fd)) != 0)
        return rc;
    return uv_read_start((uv_stream_t *)pipe, ctrun_proc__alloc, cb);
}

static void ctrun_proc__close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

int ctrun_proc_spawn(ctrun_proc_t *p, uv_loop_t *loop, const ctrun_proc_opts_t *opts,
                     const ctrun_proc_callbacks_t *cb, void *data, ct_errbuf_t *eb)
{
    memset(p, 0, sizeof *p);
    p->loop = loop;
    p->cb = cb;
    p->data = data;
    p->pidfd = -1;
    p->pid = -1;
    p->out_sink = opts->out;
    p->err_sink = opts->err;
    p->drain_ms = opts->drain_ms > 0 ? opts->drain_ms : CTRUN_PROC__DRAIN_MS_DEFAULT;
    p->done = true; /* until a handle is open, a failure leaves nothing behind */

    char *path = NULL;
    /* The agent's PATH as it is now, as execvp would use it: the one environment read outside
     * the command line's parsing besides the workers' copy (ctrun_env.c), because the worker
     * runs with that environment too. */
    int rc = opts->start != NULL ? 0 : ctrun_proc_resolve(opts->file, getenv("PATH"), &path, eb);
    if (rc != 0)
        return rc;

    /* [0] read end (ours), [1] write end (the child's); everything close-on-exec. */
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, hbp[2] = {-1, -1};
    int devnull = -1;
    const char *what = "pipe2";
    if ((opts->out == NULL || opts->err == NULL) &&
        (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
        what = "/dev/null";
    else if ((opts->out != NULL && pipe2(outp, O_CLOEXEC) != 0) ||
             (opts->err != NULL && pipe2(errp, O_CLOEXEC) != 0) ||
             (opts->heartbeat && pipe2(hbp, O_CLOEXEC) != 0))
        what = "pipe2";
    else
        what = NULL;
    if (what != NULL) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "%s: %s", what, strerror(errno));
        goto fail_fds;
    }

    pid_t pid = -1;
    if (opts->start != NULL) {
        rc = opts->start(opts->start_data, opts->out ? outp[1] : devnull,
                         opts->err ? errp[1] : devnull, hbp[1], &pid, eb);
        if (rc != 0)
            goto fail_fds;
        goto started;
    }

    /* The CPU set is made here: the child shares our memory and must not allocate. */
    cpu_set_t *cpus = NULL;
    size_t cpus_size = 0;
    if (opts->cpus != NULL && opts->ncpus > 0) {
        int max = opts->cpus[opts->ncpus - 1];
        for (size_t i = 0; i < opts->ncpus; i++)
            max = opts->cpus[i] > max ? opts->cpus[i] : max;
        cpus = CPU_ALLOC((size_t)max + 1);
        if (cpus == NULL) {
            rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
            goto fail_fds;
        }
        cpus_size = CPU_ALLOC_SIZE((size_t)max + 1);
        CPU_ZERO_S(cpus_size, cpus);
        for (size_t i = 0; i < opts->ncpus; i++)
            CPU_SET_S((size_t)opts->cpus[i], cpus_size, cpus);
    }
    ctrun_proc__child_args_t ca = {
        .path = path,
        .argv = opts->argv,
        .envp = opts->envp,
        .out_fd = opts->out ? outp[1] : devnull,
        .err_fd = opts->err ? errp[1] : devnull,
        .hb_fd = hbp[1],
        .cgroup_fd = opts->cgroup_fd > 0 ? opts->cgroup_fd : -1,
        .cpus = cpus,
        .cpus_size = cpus_size,
        .parent = getpid(),
    };
    /* The child's answer: a page shared with it whether or not it shares all our memory. */
    int *child_err =
        mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (child_err == MAP_FAILED) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "mmap of a shared page: %s", strerror(errno));
        CPU_FREE(cpus);
        goto fail_fds;
    }
    *child_err = 0;
    ca.err = child_err;
    void *stack = mmap(NULL, CTRUN_PROC__CHILD_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        CPU_FREE(cpus);
        rc = -errno;
        ct_errbuf_set(eb, rc, "mmap of a %d-byte stack: %s", CTRUN_PROC__CHILD_STACK,
                      strerror(errno));
        munmap(child_err, sizeof(int));
        goto fail_fds;
    }
    /* No signal may reach the child before it has reset the handlers it inherited. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (opts->cgroup_dir_fd > 0 && !ctrun_proc__no_clone3) {
        ctrun_proc__child_args_t in_cg = ca;
        in_cg.cgroup_fd = -1; /* created in it already */
        pid = ctrun_proc__clone_into(&in_cg, opts->cgroup_dir_fd);
        if (pid < 0 && errno != EAGAIN && errno != ENOMEM && errno != EINTR)
            ctrun_proc__no_clone3 = true;
    }
    if (pid < 0)
        pid = clone(ctrun_proc__child, (char *)stack + CTRUN_PROC__CHILD_STACK,
                    CLONE_VM | CLONE_VFORK | SIGCHLD, &ca);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, CTRUN_PROC__CHILD_STACK);
    int ca_err = *child_err;
    munmap(child_err, sizeof(int));
    if (cpus != NULL)
        CPU_FREE(cpus);
    if (pid < 0) {
        rc = ct_errbuf_set(eb, -clone_errno, "clone: %s", strerror(clone_errno));
        goto fail_fds;
    }
    if (ca_err != 0) {
        /* The child got no further than execve: reap it and report why. */
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        /* execve says EACCES for a directory; say what it is instead. */
        struct stat sb;
        bool is_dir = ca_err == EACCES && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        rc = ct_errbuf_set(eb, CT_ESPAWN, "%s: %s", path, strerror(is_dir ? EISDIR : ca_err));
        goto fail_fds;
    }
started:
    ctrun_proc__close_fd(&outp[1]);
    ctrun_proc__close_fd(&errp[1]);
    ctrun_proc__close_fd(&hbp[1]);
    ctrun_proc__close_fd(&devnull);
    p->pid = pid;

    p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (p->pidfd < 0) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "pidfd_open(%d): %s (ctrun needs Linux >= 5.3)", (int)pid,
                      strerror(errno));
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        goto fail_fds;
    }
    free(path);
    path = NULL;

    p->done = false;
    rc = uv_poll_init(loop, &p->exit_poll, p->pidfd);
    if (rc == 0) {
        p->exit_poll.data = p;
        p->poll_open = true;
        p->open_handles++;
        rc = uv_poll_start(&p->exit_poll, UV_READABLE, ctrun_proc__exit_ready);
    }
    if (rc == 0 && opts->out != NULL) {
        rc = ctrun_proc__open_pipe(p, &p->out_pipe, outp[0], &p->out_open, ctrun_proc__read_out);
        if (p->out_open)
            outp[0] = -1; /* the handle owns it now */
    }
    if (rc == 0 && opts->err != NULL) {
        rc = ctrun_proc__open_pipe(p, &p->err_pipe, errp[0], &p->err_open, ctrun_proc__read_out);
        if (p->err_open)
            errp[0] = -1;
    }
    if (rc == 0 && opts->heartbeat) {
        rc = ctrun_proc__open_pipe(p, &p->hb_pipe, hbp[0], &p->hb_open, ctrun_proc__read_hb);
        if (p->hb_open)
            hbp[0] = -1;
    }
    if (rc != 0) {
        /* Cannot watch it: do not leave it running unwatched. */
        ct_errbuf_set(eb, rc, "watching worker %d: %s", (int)pid, uv_strerror(rc));
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        p->exited = true;
        p->closing = true;
        ctrun_proc__close_fd(&outp[0]);
        ctrun_proc__close_fd(&errp[0]);
        ctrun_proc__close_fd(&hbp[0]);
        ctrun_proc__close_all(p);
        return rc;
    }
    return 0;

fail_fds:
    free(path);
    ctrun_proc__close_fd(&outp[0]);
    ctrun_proc__close_fd(&outp[1]);
    ctrun_proc__close_fd(&errp[0]);
    ctrun_proc__close_fd(&errp[1]);
    ctrun_proc__close_fd(&hbp[0]);
    ctrun_proc__close_fd(&hbp[1]);
    ctrun_proc__close_fd(&devnull);
    if (p->pidfd >= 0)
        ctrun_proc__close_fd(&p->pidfd);
    return rc;
}

int ctrun_proc_signal(ctrun_proc_t *p, int sig)
{
    if (p->pid <= 0)
        return -ESRCH;
    return killpg(p->pid, sig) == 0 ? 0 : -errno;
}

void ctrun_proc_close(ctrun_proc_t *p)
{
    if (p->closing || p->done)
        return;
    p->closing = true;
    ctrun_proc__close_all(p);
}
