/*
 * ctrun_reaper.c - the reaper of ctrun_reaper.h: the agent's side (start, records over a pipe,
 * the normal end) and the reaper's own life in the forked child (wait for the agent's pidfd,
 * then empty the cgroup, kill the recorded groups, find tagged processes through /proc).
 *
 * The child is a fork of a process that may have helper threads, so it touches none of the
 * agent's locks: no stdio, nothing of libuv or the console; only system calls, the allocator
 * (which glibc keeps usable across fork) and directory reads, as ctrun_agent__tidy_logs' child
 * does.
 */
#include "ctrun_reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ct_log.h"

/* One record on the channel: written whole (8 bytes < PIPE_BUF, so never split). */
typedef struct ctrun_reaper__rec {
    int32_t op, value;
} ctrun_reaper__rec_t;

enum { CTRUN_REAPER__TRACK = 1, CTRUN_REAPER__UNTRACK = 2, CTRUN_REAPER__END = 3 };

/* How long the reaper waits for the cgroup to empty after cgroup.kill. */
#define CTRUN_REAPER__DRAIN_MS 10000
/* At most this many /proc scans for tagged processes (each kills what it finds). */
#define CTRUN_REAPER__SCANS 8

/* What the child needs: its own copy, made by fork. */
typedef struct ctrun_reaper__job {
    pid_t agent;
    int chan, pidfd, cgdir;
    char cgpath[4096];
    char needle[CTRUN_REAPER_TAG_LEN + 32]; /* "\0CTRUN_JOB_TAG=<tag>\0" */
    size_t needle_len;
} ctrun_reaper__job_t;

/* ---- the child -------------------------------------------------------------------------- */

typedef struct ctrun_reaper__groups {
    pid_t *pgid;
    size_t n, cap;
    bool ended;
} ctrun_reaper__groups_t;

static void ctrun_reaper__apply(ctrun_reaper__groups_t *g, const ctrun_reaper__rec_t *rec)
{
    if (rec->op == CTRUN_REAPER__END) {
        g->ended = true;
        return;
    }
    if (rec->value <= 1)
        return;
    if (rec->op == CTRUN_REAPER__UNTRACK) {
        for (size_t i = 0; i < g->n; i++)
            if (g->pgid[i] == rec->value) {
                g->pgid[i] = g->pgid[--g->n];
                break;
            }
        return;
    }
    if (rec->op != CTRUN_REAPER__TRACK)
        return;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        pid_t *grown = realloc(g->pgid, cap * sizeof *grown);
        if (grown == NULL)
            return; /* the cgroup and the tag still find the group's processes */
        g->pgid = grown;
        g->cap = cap;
    }
    g->pgid[g->n++] = rec->value;
}

/* Reads every record the channel holds now; false once it is closed. */
static bool ctrun_reaper__drain(int chan, ctrun_reaper__groups_t *g)
{
    static unsigned char buf[64 * sizeof(ctrun_reaper__rec_t)];
    static size_t have;
    for (;;) {
        ssize_t n = read(chan, buf + have, sizeof buf - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        have += (size_t)n;
        size_t used = 0;
        for (; have - used >= sizeof(ctrun_reaper__rec_t); used += sizeof(ctrun_reaper__rec_t)) {
            ctrun_reaper__rec_t rec;
            memcpy(&rec, buf + used, sizeof rec);
            ctrun_reaper__apply(g, &rec);
        }
        memmove(buf, buf + used, have - used);
        have -= used;
    }
}

/* "populated 1" in cgroup.events (1), "populated 0" (0), or a negative errno. */
static int ctrun_reaper__populated(int events_fd)
{
    char buf[256];
    ssize_t n = pread(events_fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    const char *p = strstr(buf, "populated ");
    return p == NULL ? -EPROTO : p[10] == '1';
}

/* The number of lines of the file at dir/name. */
static int ctrun_reaper__count(int dir, const char *name)
{
    int n = 0, fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < got; i++)
            n += buf[i] == '\n';
    close(fd);
    return n;
}

/* The folders of the job's attempts (ctrun_cgroup.h) in the folder dir: removed (remove), or
 * the number of processes in them. */
static int ctrun_reaper__attempts(int dir, bool remove)
{
    int n = 0, sub = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = sub >= 0 ? fdopendir(sub) : NULL;
    if (d == NULL) {
        if (sub >= 0)
            close(sub);
        return 0;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char file[300];
        if (strncmp(e->d_name, "attempt-", 8) != 0)
            continue;
        if (remove)
            unlinkat(dir, e->d_name, AT_REMOVEDIR);
        else if (snprintf(file, sizeof file, "%s/cgroup.procs", e->d_name) < (int)sizeof file)
            n += ctrun_reaper__count(dir, file);
    }
    closedir(d);
    return n;
}

/* Empties the job's cgroup and removes it; returns how many processes it held. */
static int ctrun_reaper__cgroup(const ctrun_reaper__job_t *job)
{
    if (job->cgdir < 0)
        return 0;
    /* Count them first, for the message (cgroup.procs: one pid per line; the job's folder
     * and those of its attempts). */
    int killed =
        ctrun_reaper__count(job->cgdir, "cgroup.procs") + ctrun_reaper__attempts(job->cgdir, false);
    int kfd = openat(job->cgdir, "cgroup.kill", O_WRONLY | O_CLOEXEC);
    if (kfd < 0)
        return 0; /* removed already: the agent ended normally */
    if (write(kfd, "1", 1) != 1)
        killed = 0;
    close(kfd);
    int ev = openat(job->cgdir, "cgroup.events", O_RDONLY | O_CLOEXEC);
    for (int waited = 0;
         ev >= 0 && ctrun_reaper__populated(ev) == 1 && waited < CTRUN_REAPER__DRAIN_MS;
         waited += 100) {
        /* cgroup.events raises POLLPRI when "populated" changes. */
        struct pollfd p = {.fd = ev, .events = POLLPRI};
        poll(&p, 1, 100);
    }
    if (ev >= 0)
        close(ev);
    /* Remove the folder only if the path still names the one we were given, the folders of
     * its attempts (ctrun_cgroup.h) first. */
    ctrun_reaper__attempts(job->cgdir, true);
    struct stat mine, now;
    if (fstat(job->cgdir, &mine) == 0 && stat(job->cgpath, &now) == 0 &&
        mine.st_dev == now.st_dev && mine.st_ino == now.st_ino)
        rmdir(job->cgpath);
    return killed;
}

/* Whether /proc/<pid>/environ holds the needle. The stream is read in pieces; the tail of each
 * piece is kept so that a needle across two pieces is found, and a virtual NUL before the first
 * variable lets the first one match too. */
static bool ctrun_reaper__tagged(int pid, const ctrun_reaper__job_t *job)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    static char buf[16384 + 128];
    size_t keep = 1;
    buf[0] = '\0';
    bool found = false;
    for (;;) {
        ssize_t n = read(fd, buf + keep, sizeof buf - keep - 1);
        if (n < 0)
            break;
        size_t len = keep + (size_t)n;
        if (n == 0) {
            /* The end: a last variable without its NUL still counts. */
            buf[len] = '\0';
            found = memmem(buf, len + 1, job->needle, job->needle_len) != NULL;
            break;
        }
        if (memmem(buf, len, job->needle, job->needle_len) != NULL) {
            found = true;
            break;
        }
        keep = job->needle_len - 1 < len ? job->needle_len - 1 : len;
        memmove(buf, buf + len - keep, keep);
    }
    close(fd);
    return found;
}

/* Kills, through a pidfd, every process that carries the job's tag; returns how many. */
static int ctrun_reaper__scan(const ctrun_reaper__job_t *job)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    int killed = 0;
    pid_t self = getpid();
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || pid <= 1 || pid == self || pid == job->agent)
            continue;
        if (!ctrun_reaper__tagged((int)pid, job))
            continue;
        /* The pidfd pins the process; the tag is checked again through it, so a pid reused
         * between the two reads is never killed. */
        int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
        if (pfd < 0)
            continue;
        if (ctrun_reaper__tagged((int)pid, job) &&
            syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) == 0)
            killed++;
        close(pfd);
    }
    closedir(d);
    return killed;
}

static void ctrun_reaper__close_others(const int *keep, int nkeep)
{
    /* keep is sorted ascending; everything above 2 that is not in it goes. */
    unsigned lo = 3;
    for (int i = 0; i <= nkeep; i++) {
        unsigned hi = i < nkeep ? (unsigned)keep[i] : ~0u;
        if (i < nkeep && keep[i] < 3)
            continue;
        if (hi > lo && syscall(SYS_close_range, lo, hi - 1, 0) != 0) {
            for (unsigned fd = lo; fd < hi && fd < 65536; fd++)
                close((int)fd);
        }
        lo = hi + 1;
    }
}

static void ctrun_reaper__setup_child(ctrun_reaper__job_t *job)
{
    setsid();
    prctl(PR_SET_NAME, "ctrun-reaper", 0, 0, 0);
    /* Handlers of the agent must not run here; the terminal's and a broken pipe's signals are
     * not for the reaper (SIGTERM and SIGKILL from a person still end it). */
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = sig == SIGINT || sig == SIGHUP || sig == SIGPIPE || sig == SIGQUIT ||
                                sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU
                            ? SIG_IGN
                            : SIG_DFL;
        sigaction(sig, &sa, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        close(null);
    }
    int keep[3], n = 0;
    int *fds[3] = {&job->chan, &job->pidfd, &job->cgdir};
    for (int i = 0; i < 3; i++)
        if (*fds[i] >= 0)
            keep[n++] = *fds[i];
    for (int i = 1; i < n; i++) /* three at most: insertion sort */
        for (int j = i; j > 0 && keep[j] < keep[j - 1]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    ctrun_reaper__close_others(keep, n);
    fcntl(job->chan, F_SETFL, O_NONBLOCK);
    if (chdir("/") != 0) {
        /* a reaper in a removed folder still works */
    }
}

__attribute__((noreturn)) static void ctrun_reaper__main(ctrun_reaper__job_t *job)
{
    ctrun_reaper__setup_child(job);
    ctrun_reaper__groups_t g = {0};
    bool chan_open = true;
    for (;;) {
        struct pollfd p[2] = {{.fd = job->pidfd, .events = POLLIN},
                              {.fd = job->chan, .events = POLLIN}};
        int n = poll(p, chan_open ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break; /* cannot wait: clean up now rather than never */
        if (chan_open && p[1].revents != 0)
            chan_open = ctrun_reaper__drain(job->chan, &g);
        if (p[0].revents != 0)
            break;
    }
    /* The agent is gone: every record it wrote is in the pipe. */
    if (chan_open)
        ctrun_reaper__drain(job->chan, &g);
    int killed = ctrun_reaper__cgroup(job);
    for (size_t i = 0; i < g.n; i++)
        killed += killpg(g.pgid[i], SIGKILL) == 0;
    if (job->cgdir < 0 && job->needle_len > 0) {
        for (int k = 0; k < CTRUN_REAPER__SCANS; k++) {
            int now = ctrun_reaper__scan(job);
            killed += now;
            if (now == 0)
                break;
            /* What they were starting when killed shows up in the next scan. */
            struct timespec ts = {0, 5 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    if (!g.ended && killed > 0) {
        char msg[256];
        int len =
            snprintf(msg, sizeof msg,
                     "[ctrun] the agent (pid %d) ended without stopping its job; its reaper "
                     "killed what was left (%d process%s or process group%s)\n",
                     (int)job->agent, killed, killed == 1 ? "" : "es", killed == 1 ? "" : "s");
        if (len > 0 && write(2, msg, (size_t)len) < 0) {
            /* nobody to tell */
        }
    }
    _exit(0);
}

/* ---- the agent's side ------------------------------------------------------------------- */

int ctrun_reaper_tag(char *tag)
{
    unsigned char raw[CTRUN_REAPER_TAG_LEN / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        tag[2 * i] = hex[raw[i] >> 4];
        tag[2 * i + 1] = hex[raw[i] & 15];
    }
    tag[CTRUN_REAPER_TAG_LEN] = '\0';
    return 0;
}

int ctrun_reaper_start(ctrun_reaper_t *r, const char *cgroup_dir, const char *tag, ct_errbuf_t *eb)
{
    r->pid = -1;
    r->fd = -1;
    r->broken = false;
    ctrun_reaper__job_t job;
    memset(&job, 0, sizeof job);
    job.agent = getpid();
    job.chan = job.pidfd = job.cgdir = -1;
    if (tag != NULL && tag[0] != '\0') {
        int n = snprintf(job.needle + 1, sizeof job.needle - 2, "%s=%s", CTRUN_REAPER_TAG_ENV, tag);
        if (n < 0 || (size_t)n >= sizeof job.needle - 2)
            return ct_errbuf_set(eb, -EINVAL, "job tag too long");
        job.needle_len = (size_t)n + 2; /* NUL before and after */
    }
    int chan[2] = {-1, -1};
    int rc = 0;
    if (pipe2(chan, O_CLOEXEC) != 0) {
        rc = -errno;
        return ct_errbuf_set(eb, rc, "pipe2: %s", strerror(errno));
    }
    job.chan = chan[0];
    job.pidfd = (int)syscall(SYS_pidfd_open, job.agent, 0);
    if (job.pidfd < 0) {
        rc = -errno;
        ct_errbuf_set(eb, rc, "pidfd_open of the agent: %s", strerror(errno));
        goto fail;
    }
    fcntl(job.pidfd, F_SETFD, FD_CLOEXEC);
    if (cgroup_dir != NULL && cgroup_dir[0] != '\0') {
        if (strlen(cgroup_dir) >= sizeof job.cgpath) {
            rc = ct_errbuf_set(eb, -ENAMETOOLONG, "cgroup path too long");
            goto fail;
        }
        snprintf(job.cgpath, sizeof job.cgpath, "%s", cgroup_dir);
        job.cgdir = open(cgroup_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (job.cgdir < 0) {
            rc = -errno;
            ct_errbuf_set(eb, rc, "%s: %s", cgroup_dir, strerror(errno));
            goto fail;
        }
    }
    /* No signal may reach the agent's handlers in the child before it has reset them (they
     * write to the loop's pipe, which the child shares until it closes it). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0)
        ctrun_reaper__main(&job);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        rc = -fork_errno;
        ct_errbuf_set(eb, rc, "fork: %s", strerror(fork_errno));
        goto fail;
    }
    close(chan[0]);
    close(job.pidfd);
    if (job.cgdir >= 0)
        close(job.cgdir);
    /* A reaper that stopped reading must never stall the agent: records are dropped instead. */
    fcntl(chan[1], F_SETFL, O_NONBLOCK);
    r->pid = pid;
    r->fd = chan[1];
    return 0;
fail:
    close(chan[0]);
    close(chan[1]);
    if (job.pidfd >= 0)
        close(job.pidfd);
    if (job.cgdir >= 0)
        close(job.cgdir);
    return rc;
}

static void ctrun_reaper__send(ctrun_reaper_t *r, int op, pid_t value)
{
    if (r->fd < 0)
        return;
    ctrun_reaper__rec_t rec = {.op = op, .value = (int32_t)value};
    ssize_t n;
    do {
        n = write(r->fd, &rec, sizeof rec);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof rec && !r->broken) {
        r->broken = true;
        /* The reaper died or stopped reading: the cgroup (if any) and the workers' parent-death
         * signal still hold; the agent carries on. */
        ct_log_warn("the reaper (pid %d) does not take records (%s); a SIGKILL of ctrun may "
                    "leave processes of the job behind",
                    (int)r->pid, n < 0 ? strerror(errno) : "short write");
    }
}

void ctrun_reaper_track(ctrun_reaper_t *r, pid_t pgid)
{
    ctrun_reaper__send(r, CTRUN_REAPER__TRACK, pgid);
}

void ctrun_reaper_untrack(ctrun_reaper_t *r, pid_t pgid)
{
    ctrun_reaper__send(r, CTRUN_REAPER__UNTRACK, pgid);
}

void ctrun_reaper_close(ctrun_reaper_t *r)
{
    if (r->fd < 0)
        return;
    ctrun_reaper__send(r, CTRUN_REAPER__END, 0);
    close(r->fd);
    r->fd = -1;
}
