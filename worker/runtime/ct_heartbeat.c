/*
 * ct_heartbeat.c - the worker's side of the watchdog pipe: fixed-size progress records written
 * without ever blocking the training loop. A full pipe (a slow or stopped reader) costs a
 * dropped, counted record; a closed pipe (the launcher is gone) turns the heartbeat off. The
 * reading side lives in the launcher.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctworker.h"

_Static_assert(sizeof(ct_heartbeat_record_t) == 32, "the record layout is an interface");
_Static_assert(sizeof(ct_heartbeat_record_t) <= 512, "records must fit PIPE_BUF (atomic)");

static int64_t ct_heartbeat__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int ct_heartbeat_init(ct_heartbeat_t *hb, int fd, int64_t min_interval_ms, ct_errbuf_t *eb)
{
    memset(hb, 0, sizeof *hb);
    hb->fd = -1;
    if (min_interval_ms < 0)
        return ct_errbuf_set(eb, -EINVAL, "heartbeat: negative interval %lld ms",
                             (long long)min_interval_ms);
    hb->min_interval_ns = min_interval_ms * 1000000;
    if (fd < 0)
        return 0;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        int rc = -errno;
        return ct_errbuf_set(eb, rc, "heartbeat fd %d: %s", fd, ct_strerror(rc));
    }
    /* A write to a pipe whose reader is gone raises SIGPIPE, which would kill the worker; we
     * want EPIPE instead. Only the default action is replaced: a program's own choice stays. */
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPIPE, &ign, NULL);
    }
    hb->fd = fd;
    return 0;
}

int ct_heartbeat_beat(ct_heartbeat_t *hb, uint64_t step)
{
    if (hb->fd < 0)
        return 0;
    int64_t now = ct_heartbeat__mono_ns();
    if (hb->seq != 0 && now - hb->last_ns < hb->min_interval_ns)
        return 0;
    hb->last_ns = now;
    hb->seq++;
    ct_heartbeat_record_t rec = {
        .magic = CT_HEARTBEAT_MAGIC,
        .version = CT_HEARTBEAT_VERSION,
        .size = (uint16_t)sizeof rec,
        .seq = hb->seq,
        .dropped = hb->dropped,
        .step = step,
        .time_ns = (uint64_t)now,
    };
    for (;;) {
        ssize_t w = write(hb->fd, &rec, sizeof rec);
        if (w == (ssize_t)sizeof rec) {
            hb->sent++;
            return 0;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            hb->dropped++;
            return -EAGAIN;
        }
        /* EPIPE (reader gone) or another error: stop writing, keep training. A partial write
         * cannot happen for a pipe record below PIPE_BUF; on a socket it would desynchronise
         * the stream, so it also ends the heartbeat. */
        int rc = w < 0 ? -errno : -EIO;
        ct_heartbeat_close(hb);
        return rc;
    }
}

void ct_heartbeat_close(ct_heartbeat_t *hb)
{
    if (hb->fd >= 0)
        close(hb->fd);
    hb->fd = -1;
}
