/*
 * ctrun_agent_ftimer.c - torchrun's FileTimer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1): the
 * named pipe every worker gets as TORCHELASTIC_TIMER_FILE (made by ctrun, or the user's
 * TORCHELASTIC_TIMER_FILE), read on the agent's loop; FileTimerClient's requests
 * (ctrun_filetimer.h) arm and release timers of the agent's own running workers; a timer's
 * expiry becomes a FILETIMER event; whom it blames and with which words.
 *
 * A request that is malformed, longer than PIPE_BUF, or from a pid that is not a running worker
 * of this agent is dropped with a warning (the first ten; then one line says the rest are
 * dropped silently); nothing a worker writes stalls or stops the agent. Timers of a worker that
 * exited are forgotten.
 *
 * Deliberately not here: what the agent does about an expired timer (ctrun_agent_step.c fails
 * the attempt as for a crash) and the failure records (ctrun_agent_outcome.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ct_log.h"
#include "ctrun_agent_internal.h"

#define CTRUN_AGENT__FTIMER_WARNINGS 10

static double ctrun_agent__ftimer_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void ctrun_agent__ftimer_warn(ctrun_agent_t *a, const char *what)
{
    if (a->ftimer_warnings < CTRUN_AGENT__FTIMER_WARNINGS)
        ct_log_warn("FileTimer: dropped a request: %s", what);
    else if (a->ftimer_warnings == CTRUN_AGENT__FTIMER_WARNINGS)
        ct_log_warn("FileTimer: further bad requests are dropped without a warning");
    a->ftimer_warnings++;
}

/* The local rank whose running worker has pid, or -1. */
static int ctrun_agent__ftimer_worker(const ctrun_agent_t *a, pid_t pid)
{
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].proc.pid == pid && a->workers[i].state == CTRUN_WORKER_RUNNING)
            return i;
    return -1;
}

static void ctrun_agent__ftimer_timer_cb(uv_timer_t *t);

/* The timer fires at the earliest expiry (Unix time, turned into a delay on the loop). */
static void ctrun_agent__ftimer_schedule(ctrun_agent_t *a)
{
    double when;
    if (!ctrun_filetimers_next(&a->ftimers, &when)) {
        uv_timer_stop(&a->ftimer_timer);
        return;
    }
    double ms = (when - ctrun_agent__ftimer_now()) * 1000.0;
    uv_timer_start(&a->ftimer_timer, ctrun_agent__ftimer_timer_cb,
                   ms > 0 ? (uint64_t)(ms + 0.999) : 0, 0);
}

static void ctrun_agent__ftimer_timer_cb(uv_timer_t *t)
{
    ctrun_agent_t *a = t->data;
    ctrun_filetimer_req_t req;
    while (ctrun_filetimers_pop_expired(&a->ftimers, ctrun_agent__ftimer_now(), &req)) {
        int i = ctrun_agent__ftimer_worker(a, req.pid);
        if (i < 0)
            continue; /* gone meanwhile */
        a->workers[i].timer_expired = req;
        ctrun_agent__event_t ev = {.kind = CTRUN_AGENT__EV_FILETIMER, .worker = i};
        ctrun_agent__step(a, &ev);
    }
    if (a->ftimer_open)
        ctrun_agent__ftimer_schedule(a);
}

static void ctrun_agent__ftimer_line(ctrun_agent_t *a, const char *line, size_t len)
{
    ctrun_filetimer_req_t req;
    ct_errbuf_t eb = {{0}};
    if (ctrun_filetimer_parse(line, len, &req, &eb) != 0) {
        ctrun_agent__ftimer_warn(a, eb.msg);
        return;
    }
    if (ctrun_agent__ftimer_worker(a, req.pid) < 0) {
        char what[96];
        snprintf(what, sizeof what, "pid %d is not a running worker of this node", (int)req.pid);
        ctrun_agent__ftimer_warn(a, what);
        return;
    }
    if (ctrun_filetimers_apply(&a->ftimers, &req) != 0) {
        ctrun_agent__ftimer_warn(a, "out of memory");
        return;
    }
    ctrun_agent__ftimer_schedule(a);
}

static void ctrun_agent__ftimer_read_cb(uv_poll_t *h, int status, int events)
{
    ctrun_agent_t *a = h->data;
    (void)events;
    if (status < 0)
        return;
    for (;;) {
        size_t room = sizeof a->ftimer_buf - a->ftimer_len;
        ssize_t n = read(a->ftimer_fd, a->ftimer_buf + a->ftimer_len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* EAGAIN: all read (our own write end keeps EOF away) */
        a->ftimer_len += (size_t)n;
        size_t start = 0;
        for (size_t k = 0; k < a->ftimer_len; k++) {
            if (a->ftimer_buf[k] != '\n')
                continue;
            if (!a->ftimer_skip)
                ctrun_agent__ftimer_line(a, a->ftimer_buf + start, k - start);
            a->ftimer_skip = false;
            start = k + 1;
        }
        memmove(a->ftimer_buf, a->ftimer_buf + start, a->ftimer_len - start);
        a->ftimer_len -= start;
        if (a->ftimer_len > CTRUN_FILETIMER_REQUEST_MAX) {
            /* No newline within PIPE_BUF: an oversized request; drop it up to its newline. */
            if (!a->ftimer_skip) {
                char what[96];
                snprintf(what, sizeof what, "a request longer than %d bytes",
                         CTRUN_FILETIMER_REQUEST_MAX);
                ctrun_agent__ftimer_warn(a, what);
            }
            a->ftimer_skip = true;
            a->ftimer_len = 0;
        }
    }
}

int ctrun_agent__ftimer_setup(ctrun_agent_t *a, ct_errbuf_t *eb)
{
    a->ftimer_fd = a->ftimer_wfd = -1;
    a->ftimer_path[0] = '\0';
    if (!a->cfg->file_timer)
        return 0;
    int n = a->cfg->timer_file != NULL
                ? snprintf(a->ftimer_path, sizeof a->ftimer_path, "%s", a->cfg->timer_file)
                : snprintf(a->ftimer_path, sizeof a->ftimer_path, "%s/ctrun-timer-%d",
                           a->cfg->tmp_dir, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof a->ftimer_path) {
        a->ftimer_path[0] = '\0';
        return ct_errbuf_set(eb, -ENAMETOOLONG, "TORCHELASTIC_TIMER_FILE: path too long");
    }
    struct stat st;
    if (stat(a->ftimer_path, &st) == 0) {
        if (!S_ISFIFO(st.st_mode)) {
            int rc = ct_errbuf_set(eb, -EINVAL,
                                   "TORCHELASTIC_TIMER_FILE: %s exists and is not a named pipe",
                                   a->ftimer_path);
            a->ftimer_path[0] = '\0';
            return rc;
        }
    } else if (mkfifo(a->ftimer_path, 0600) == 0) {
        a->ftimer_made = true;
    } else {
        int rc = ct_errbuf_set(eb, -errno,
                               "TORCHELASTIC_TIMER_FILE: cannot make the named pipe "
                               "%s: %s",
                               a->ftimer_path, strerror(errno));
        a->ftimer_path[0] = '\0';
        return rc;
    }
    a->ftimer_fd = open(a->ftimer_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (a->ftimer_fd >= 0)
        a->ftimer_wfd = open(a->ftimer_path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (a->ftimer_fd < 0 || a->ftimer_wfd < 0) {
        int rc = ct_errbuf_set(eb, -errno, "TORCHELASTIC_TIMER_FILE: cannot open %s: %s",
                               a->ftimer_path, strerror(errno));
        ctrun_agent__ftimer_cleanup(a);
        return rc;
    }
    uv_timer_init(&a->loop, &a->ftimer_timer);
    a->ftimer_timer.data = a;
    int rc = uv_poll_init(&a->loop, &a->ftimer_poll, a->ftimer_fd);
    if (rc != 0) {
        uv_close((uv_handle_t *)&a->ftimer_timer, NULL);
        ctrun_agent__ftimer_cleanup(a);
        return ct_errbuf_set(eb, rc, "watching the FileTimer pipe: %s", uv_strerror(rc));
    }
    a->ftimer_poll.data = a;
    a->ftimer_open = true;
    uv_poll_start(&a->ftimer_poll, UV_READABLE, ctrun_agent__ftimer_read_cb);
    ct_log_info("FileTimer: serving worker timers on %s", a->ftimer_path);
    return 0;
}

void ctrun_agent__ftimer_blame(ctrun_agent_t *a, int i)
{
    ctrun_worker_t *w = &a->workers[i];
    const ctrun_filetimer_req_t *req = &w->timer_expired;
    double now = ctrun_agent__ftimer_now();
    int sig = req->signal > 0 ? req->signal : SIGKILL;
    char cause[CTRUN_RECOVERY_CAUSE_MAX], msg[512];
    ctrun_filetimer_cause(req, now, w->rank, cause, sizeof cause);
    snprintf(msg, sizeof msg, "FileTimer: %s; sent signal %d", cause, sig);
    ct_log_error("local rank %d: %s", i, msg);
    double late = now - req->expiration;
    ctrun_agent__record_failure(a, i, -sig, msg, cause, late > 0 ? (int64_t)(late * 1e9) : 0);
    kill(w->proc.pid, sig); /* that worker only, as torchrun does */
}

void ctrun_agent__ftimer_forget(ctrun_agent_t *a, pid_t pid)
{
    ctrun_filetimers_forget(&a->ftimers, pid);
}

void ctrun_agent__ftimer_close(ctrun_agent_t *a)
{
    if (!a->ftimer_open)
        return;
    a->ftimer_open = false;
    uv_close((uv_handle_t *)&a->ftimer_poll, NULL);
    uv_close((uv_handle_t *)&a->ftimer_timer, NULL);
}

void ctrun_agent__ftimer_cleanup(ctrun_agent_t *a)
{
    if (a->ftimer_fd >= 0)
        close(a->ftimer_fd);
    if (a->ftimer_wfd >= 0)
        close(a->ftimer_wfd);
    a->ftimer_fd = a->ftimer_wfd = -1;
    if (a->ftimer_made && a->ftimer_path[0] != '\0')
        unlink(a->ftimer_path);
    a->ftimer_made = false;
    ctrun_filetimers_free(&a->ftimers);
}
