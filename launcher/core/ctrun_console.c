/*
 * ctrun_console.c - the console queues and their writer threads (see ctrun_console.h).
 *
 * One lane per destination: stdout and stderr share a lane when they are the same file (a
 * terminal, one pipe through 2>&1, the same log file: fstat says so), so their lines keep
 * their order; otherwise each has its own lane and thread, so a stalled stdout reader does not
 * hold back ctrun's messages on a stderr terminal.
 *
 * A lane is a ring of bytes plus a ring of segments, each a run of bytes for one fd in queue
 * order; a line for the same fd as the last segment extends it, so a flood of one stream costs
 * no segment per line. Producers copy into the ring under the console's mutex and wake the
 * lane's writer only when it sleeps, once per call. The writer takes the first segment's
 * extent under the mutex and writes it without the mutex: producers append beyond the queued
 * bytes and never touch that extent, and only the writer moves the head. The last
 * CTRUN_CONSOLE__NOTICE_ROOM bytes and CTRUN_CONSOLE__NOTICE_SEGS segments of a lane are kept for
 * the notices, so a full queue can still say that it is dropping.
 *
 * Lifetime: every writer thread counts itself in `alive`. ctrun_console_destroy joins the
 * threads when the queues went out; when it gives up on a stalled reader it detaches them and
 * marks the console abandoned, and whoever is last (the destroyer or the last thread to finish)
 * frees it.
 */
#include "ctrun_console.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ct_time.h"

#define CTRUN_CONSOLE__NOTICE_ROOM  512
#define CTRUN_CONSOLE__NOTICE_SEGS  4
#define CTRUN_CONSOLE__CAPACITY_MAX ((size_t)1 << 30)
#define CTRUN_CONSOLE__LINGER_NS    1000000L

typedef struct ctrun_console__seg {
    uint32_t len;
    uint32_t which; /* 0: out_fd, 1: err_fd */
} ctrun_console__seg_t;

typedef struct ctrun_console__lane {
    ctrun_console_t *c;
    pthread_t thread;
    bool started;
    pthread_cond_t work; /* the writer sleeps on it while the queue is empty */
    const char *name;    /* "console", "stdout" or "stderr": for the notices */
    char *buf;
    size_t cap, head, used; /* bytes [head, head + used) modulo cap are queued */
    ctrun_console__seg_t *segs;
    size_t seg_cap, seg_head, seg_n;
    uint64_t queued_total, done_total; /* bytes ever queued / written or discarded */
    bool idle;
    bool dropping;
    uint64_t ep_lines, ep_bytes; /* dropped in the current episode */
} ctrun_console__lane_t;

struct ctrun_console {
    pthread_mutex_t mu;
    pthread_cond_t progress; /* flushers sleep on it */
    int fd[2];
    int err[2];     /* first write error of each fd (negative errno), 0 while healthy */
    int lane_of[2]; /* fd index -> lane index, -1 for an fd of -1 */
    ctrun_console__lane_t lane[2];
    int nlanes, alive;
    int64_t progress_ms; /* when a writer last finished a write (ct_time_ms) */
    bool stop, abandoned;
    bool notices;
    char prefix[48]; /* "[ctrun] " or "" */
    uint64_t lines_dropped, bytes_dropped, bytes_written;
};

static void ctrun_console__free(ctrun_console_t *c)
{
    for (int i = 0; i < c->nlanes; i++) {
        pthread_cond_destroy(&c->lane[i].work);
        free(c->lane[i].buf);
        free(c->lane[i].segs);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->progress);
    free(c);
}

/* Appends total bytes from iov for fd `which` when they fit under limit bytes and seg_limit
 * segments. Mutex held. */
static bool ctrun_console__put(ctrun_console__lane_t *l, unsigned which, const struct iovec *iov,
                               int iovcnt, size_t total, size_t limit, size_t seg_limit)
{
    size_t tail = (l->seg_head + l->seg_n + l->seg_cap - 1) % l->seg_cap;
    bool extend = l->seg_n > 0 && l->segs[tail].which == which;
    if (total == 0)
        return true;
    if (l->used + total > limit || (!extend && l->seg_n >= seg_limit))
        return false;
    size_t pos = (l->head + l->used) % l->cap;
    for (int i = 0; i < iovcnt; i++) {
        const char *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        while (n > 0) {
            size_t k = l->cap - pos < n ? l->cap - pos : n;
            memcpy(l->buf + pos, p, k);
            p += k;
            n -= k;
            pos = (pos + k) % l->cap;
        }
    }
    if (extend) {
        l->segs[tail].len += (uint32_t)total;
    } else {
        size_t at = (l->seg_head + l->seg_n) % l->seg_cap;
        l->segs[at] = (ctrun_console__seg_t){.len = (uint32_t)total, .which = which};
        l->seg_n++;
    }
    l->used += total;
    l->queued_total += total;
    return true;
}

/* Wakes the lanes' writers that sleep with something to write: once per call of the API, not
 * per line (a wake-up is a system call). Mutex held. */
static void ctrun_console__wake(ctrun_console_t *c)
{
    for (int i = 0; i < c->nlanes; i++) {
        if (c->lane[i].idle && c->lane[i].seg_n > 0)
            pthread_cond_signal(&c->lane[i].work);
    }
}

/* Queues a notice on err_fd, using the room kept for notices. Mutex held. */
__attribute__((format(printf, 2, 3))) static void ctrun_console__notice(ctrun_console_t *c,
                                                                        const char *fmt, ...)
{
    if (!c->notices || c->lane_of[1] < 0 || c->err[1] != 0)
        return;
    char line[320];
    size_t room = sizeof line - 1; /* one byte kept for the newline */
    int n = snprintf(line, room, "%swarn: ", c->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, room - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    struct iovec iov = {.iov_base = line, .iov_len = len};
    ctrun_console__lane_t *l = &c->lane[c->lane_of[1]];
    ctrun_console__put(l, 1, &iov, 1, len, l->cap, l->seg_cap);
}

static void ctrun_console__count_notice(ctrun_console_t *c, ctrun_console__lane_t *l,
                                        const char *how)
{
    ctrun_console__notice(c, "the %s reader %s: %llu %s line%s (%llu bytes) were dropped", l->name,
                          how, (unsigned long long)l->ep_lines, l->name,
                          l->ep_lines == 1 ? "" : "s", (unsigned long long)l->ep_bytes);
    l->ep_lines = l->ep_bytes = 0;
    l->dropping = false;
}

/* Writes some of the ring extent [start, start + len) to fd: the number of bytes written, or
 * 0 with *err set. Blocks as long as the reader makes it (this is the only place that may). */
static size_t ctrun_console__write_some(int fd, const char *buf, size_t cap, size_t start,
                                        size_t len, int *err)
{
    struct iovec iov[2];
    int n = 1;
    iov[0].iov_base = (void *)(buf + start);
    iov[0].iov_len = cap - start < len ? cap - start : len;
    if (iov[0].iov_len < len) {
        iov[1].iov_base = (void *)buf;
        iov[1].iov_len = len - iov[0].iov_len;
        n = 2;
    }
    for (;;) {
        ssize_t w = writev(fd, iov, n);
        if (w > 0)
            return (size_t)w;
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Someone else made the shared description non-blocking: wait here instead. */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, -1);
            continue;
        }
        *err = w < 0 ? -errno : -EIO;
        return 0;
    }
}

static void ctrun_console__sleep_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ns / 1000000000L);
    ts.tv_nsec += (long)(ns % 1000000000L);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cond, mu, &ts);
}

static void *ctrun_console__writer(void *arg)
{
    ctrun_console__lane_t *l = arg;
    ctrun_console_t *c = l->c;
    bool lingered = false;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (l->seg_n == 0 && !c->stop) {
            if (!lingered) {
                /* Found the queue empty: look again in a millisecond before sleeping for good,
                 * without being woken. Under a flood the producers then never pay for a
                 * wake-up; the cost is up to 1 ms of latency on the console. */
                ctrun_console__sleep_until(&l->work, &c->mu, CTRUN_CONSOLE__LINGER_NS);
                lingered = true;
                continue;
            }
            l->idle = true;
            pthread_cond_wait(&l->work, &c->mu);
            l->idle = false;
        }
        lingered = false;
        if (l->seg_n == 0)
            break; /* stopped and drained */
        ctrun_console__seg_t *s = &l->segs[l->seg_head];
        unsigned which = s->which;
        size_t len = s->len, start = l->head;
        int fd = c->fd[which], err = c->err[which];
        pthread_mutex_unlock(&c->mu);
        size_t n = len; /* a failed fd's bytes are discarded */
        if (err == 0)
            n = ctrun_console__write_some(fd, l->buf, l->cap, start, len, &err);
        pthread_mutex_lock(&c->mu);
        if (err != 0) {
            if (c->err[which] == 0)
                c->err[which] = err;
            n = len;
        } else {
            c->bytes_written += n;
        }
        l->head = (l->head + n) % l->cap;
        l->used -= n;
        l->done_total += n;
        s->len -= (uint32_t)n;
        if (s->len == 0) {
            l->seg_head = (l->seg_head + 1) % l->seg_cap;
            l->seg_n--;
        }
        c->progress_ms = ct_time_ms();
        pthread_cond_broadcast(&c->progress);
    }
    c->alive--;
    bool free_it = c->abandoned && c->alive == 0;
    pthread_mutex_unlock(&c->mu);
    if (free_it)
        ctrun_console__free(c);
    return NULL;
}

/* Whether two fds write to the same file (then one lane keeps their lines in order). */
static bool ctrun_console__same_file(int a, int b)
{
    struct stat sa, sb;
    return a >= 0 && b >= 0 && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino && sa.st_rdev == sb.st_rdev;
}

int ctrun_console_create(int out_fd, int err_fd, size_t capacity, const char *notice_prefix,
                         bool notices, ctrun_console_t **out)
{
    *out = NULL;
    if (capacity == 0)
        capacity = CTRUN_CONSOLE_CAPACITY_DEFAULT;
    if (capacity < CTRUN_CONSOLE_CAPACITY_MIN)
        capacity = CTRUN_CONSOLE_CAPACITY_MIN;
    if (capacity > CTRUN_CONSOLE__CAPACITY_MAX)
        capacity = CTRUN_CONSOLE__CAPACITY_MAX;
    ctrun_console_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    c->fd[0] = out_fd;
    c->fd[1] = err_fd;
    c->notices = notices;
    if (notice_prefix != NULL && notice_prefix[0] != '\0')
        snprintf(c->prefix, sizeof c->prefix, "%.40s ", notice_prefix);
    c->progress_ms = ct_time_ms();
    c->lane_of[0] = c->lane_of[1] = -1;
    bool shared = ctrun_console__same_file(out_fd, err_fd);
    static const char *const names[2] = {"stdout", "stderr"};
    for (int k = 0; k < 2; k++) {
        if (c->fd[k] < 0)
            continue;
        if (k == 1 && shared) {
            c->lane_of[1] = c->lane_of[0];
            c->lane[c->lane_of[0]].name = "console";
            continue;
        }
        c->lane_of[k] = c->nlanes;
        ctrun_console__lane_t *l = &c->lane[c->nlanes++];
        l->c = c;
        l->name = names[k];
        l->cap = capacity;
        l->seg_cap = capacity / 256;
        l->seg_cap = l->seg_cap < 64 ? 64 : l->seg_cap > 65536 ? 65536 : l->seg_cap;
        l->buf = malloc(capacity);
        l->segs = calloc(l->seg_cap, sizeof *l->segs);
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->progress, &ca);
    for (int i = 0; i < c->nlanes; i++)
        pthread_cond_init(&c->lane[i].work, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    for (int i = 0; i < c->nlanes; i++) {
        if (c->lane[i].buf == NULL || c->lane[i].segs == NULL)
            rc = -ENOMEM;
    }
    /* Signals are for the agent's thread (libuv's handlers): the writers block them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; rc == 0 && i < c->nlanes; i++) {
        int e = pthread_create(&c->lane[i].thread, NULL, ctrun_console__writer, &c->lane[i]);
        c->lane[i].started = e == 0;
        c->alive += e == 0;
        rc = -e;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        for (int i = 0; i < c->nlanes; i++)
            pthread_cond_signal(&c->lane[i].work);
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < c->nlanes; i++) {
            if (c->lane[i].started)
                pthread_join(c->lane[i].thread, NULL);
        }
        ctrun_console__free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* One line (or block of lines) into the lane of fd index `which`, or counted as dropped.
 * Mutex held. */
static int ctrun_console__put_line(ctrun_console_t *c, unsigned which, const struct iovec *iov,
                                   int iovcnt, ctrun_console_origin_t origin)
{
    if (c->err[which] != 0)
        return c->err[which];
    ctrun_console__lane_t *l = &c->lane[c->lane_of[which]];
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (l->dropping && l->used <= l->cap / 2)
        ctrun_console__count_notice(c, l, "caught up");
    /* Relayed lines leave the last eighth to ctrun's own; notices have the rest. */
    size_t limit =
        l->cap - CTRUN_CONSOLE__NOTICE_ROOM - (origin == CTRUN_CONSOLE_RELAY ? l->cap / 8 : 0);
    if (ctrun_console__put(l, which, iov, iovcnt, total, limit,
                           l->seg_cap - CTRUN_CONSOLE__NOTICE_SEGS))
        return 0;
    if (!l->dropping) {
        l->dropping = true;
        ctrun_console__notice(c,
                              "the %s reader is too slow: dropping %s lines until it catches up "
                              "(log files are written in full)",
                              l->name, l->name);
    }
    uint64_t lines = 0;
    for (int i = 0; i < iovcnt; i++) {
        const char *p = iov[i].iov_base, *end = p + iov[i].iov_len;
        while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            lines++;
            p++;
        }
    }
    lines = lines ? lines : 1;
    l->ep_lines += lines;
    l->ep_bytes += total;
    c->lines_dropped += lines;
    c->bytes_dropped += total;
    return -EAGAIN;
}

static int ctrun_console__which(const ctrun_console_t *c, int fd)
{
    return fd >= 0 && fd == c->fd[0] ? 0 : fd >= 0 && fd == c->fd[1] ? 1 : -1;
}

int ctrun_console_write(ctrun_console_t *c, int fd, const struct iovec *iov, int iovcnt,
                        ctrun_console_origin_t origin)
{
    int which = ctrun_console__which(c, fd);
    if (which < 0)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    int rc = ctrun_console__put_line(c, (unsigned)which, iov, iovcnt, origin);
    ctrun_console__wake(c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int ctrun_console_write_lines(ctrun_console_t *c, int fd, const struct iovec *iov,
                              const int *line_end, int nlines, ctrun_console_origin_t origin)
{
    int which = ctrun_console__which(c, fd);
    if (which < 0)
        return -EINVAL;
    int rc = 0, first = 0;
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < nlines; k++) {
        int r =
            ctrun_console__put_line(c, (unsigned)which, iov + first, line_end[k] - first, origin);
        first = line_end[k];
        if (r != 0 && r != -EAGAIN) {
            rc = r; /* the fd failed: the rest would be discarded too */
            break;
        }
        rc = rc ? rc : r;
    }
    ctrun_console__wake(c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static bool ctrun_console__done(const ctrun_console_t *c, const uint64_t *target)
{
    for (int i = 0; i < c->nlanes; i++) {
        if (c->lane[i].done_total < target[i])
            return false;
    }
    return true;
}

int ctrun_console_flush(ctrun_console_t *c, int64_t stall_ms)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    uint64_t target[2] = {0, 0};
    for (int i = 0; i < c->nlanes; i++)
        target[i] = c->lane[i].queued_total;
    int64_t start = ct_time_ms();
    while (!ctrun_console__done(c, target)) {
        if (stall_ms < 0) {
            pthread_cond_wait(&c->progress, &c->mu);
            continue;
        }
        int64_t last = c->progress_ms > start ? c->progress_ms : start;
        int64_t now = ct_time_ms();
        if (now - last >= stall_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        ctrun_console__sleep_until(&c->progress, &c->mu, (last + stall_ms - now) * 1000000L);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void ctrun_console_get_stats(ctrun_console_t *c, ctrun_console_stats_t *out)
{
    pthread_mutex_lock(&c->mu);
    out->lines_dropped = c->lines_dropped;
    out->bytes_dropped = c->bytes_dropped;
    out->bytes_written = c->bytes_written;
    out->dropping = false;
    for (int i = 0; i < c->nlanes; i++)
        out->dropping = out->dropping || c->lane[i].dropping;
    pthread_mutex_unlock(&c->mu);
}

int ctrun_console_destroy(ctrun_console_t *c, int64_t stall_ms)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nlanes; i++) {
        if (c->lane[i].dropping)
            ctrun_console__count_notice(c, &c->lane[i], "was too slow");
    }
    ctrun_console__wake(c);
    pthread_mutex_unlock(&c->mu);
    int rc = ctrun_console_flush(c, stall_ms);
    pthread_mutex_lock(&c->mu);
    pthread_t threads[2];
    for (int i = 0; i < c->nlanes; i++) {
        threads[i] = c->lane[i].thread;
        pthread_cond_signal(&c->lane[i].work);
    }
    int n = c->nlanes;
    c->stop = true;
    c->abandoned = rc != 0; /* from here on the last thread to finish frees c */
    bool free_now = rc != 0 && c->alive == 0;
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) {
        for (int i = 0; i < n; i++)
            pthread_detach(threads[i]);
        if (free_now)
            ctrun_console__free(c);
        return rc;
    }
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    ctrun_console__free(c);
    return 0;
}
