/*
 * ctrun_sink.c - line framing. Complete lines inside a chunk are gathered into one writev
 * (prefix and line as separate iovecs, nothing copied), or into one call of the console queue
 * (which copies them, each line kept or dropped whole) when the sink has one; only the bytes
 * after a chunk's last '\n' are copied into the pending buffer, which is bounded: when it
 * fills without a newline its content is written as a piece of its own (cut at a UTF-8
 * character boundary) ending in '\n', and a '\n' that arrives right after such a cut is taken
 * as the end of that piece rather than as an empty line.
 */
#include "ctrun_sink.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define CTRUN_SINK__IOV_MAX 192

typedef struct ctrun_sink__batch {
    struct iovec iov[CTRUN_SINK__IOV_MAX];
    int n;
    int line_end[CTRUN_SINK__IOV_MAX]; /* where each line's iovecs end (for the console queue) */
    int nlines;
} ctrun_sink__batch_t;

/* Writes every byte of iov[0..n) to fd; the iovecs are consumed. Returns 0 or -errno. */
static int ctrun_sink__writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                poll(&p, 1, -1);
                continue;
            }
            return -errno;
        }
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

static int ctrun_sink__flush(ctrun_sink_t *s, ctrun_sink__batch_t *b)
{
    int rc = 0;
    if (b->n > 0 && s->console_err == 0 && s->console != NULL) {
        rc = ctrun_console_write_lines(s->console, s->console_fd, b->iov, b->line_end, b->nlines,
                                       CTRUN_CONSOLE_RELAY);
        if (rc == -EAGAIN)
            rc = 0; /* lines dropped for lack of room: the console counts them and says so */
        if (rc != 0)
            s->console_err = rc;
    } else if (b->n > 0 && s->console_err == 0) {
        rc = ctrun_sink__writev_all(s->console_fd, b->iov, b->n);
        if (rc != 0)
            s->console_err = rc;
    }
    b->n = 0;
    b->nlines = 0;
    return rc;
}

static void ctrun_sink__add(ctrun_sink__batch_t *b, const void *p, size_t n)
{
    if (n > 0)
        b->iov[b->n++] = (struct iovec){.iov_base = (void *)p, .iov_len = n};
}

/* Queues one console line made of the prefix, a and b; flushes first when the batch is full. */
static int ctrun_sink__line(ctrun_sink_t *s, ctrun_sink__batch_t *b, const char *a, size_t an,
                            const char *c, size_t cn, bool add_nl)
{
    int rc = 0;
    if (b->n + 4 > CTRUN_SINK__IOV_MAX)
        rc = ctrun_sink__flush(s, b);
    ctrun_sink__add(b, s->prefix, s->prefix_len);
    ctrun_sink__add(b, a, an);
    ctrun_sink__add(b, c, cn);
    if (add_nl)
        ctrun_sink__add(b, "\n", 1);
    b->line_end[b->nlines++] = b->n;
    if (s->dup_fd >= 0 && s->dup_err == 0 && ctrun_line_filter_match(s->dup_filter, a, an, c, cn)) {
        struct iovec iov[4];
        int n = 0;
        const void *parts[4] = {s->prefix, a, c, "\n"};
        size_t lens[4] = {s->prefix_len, an, cn, add_nl ? 1 : 0};
        for (int k = 0; k < 4; k++) {
            if (lens[k] > 0)
                iov[n++] = (struct iovec){.iov_base = (void *)parts[k], .iov_len = lens[k]};
        }
        s->dup_err = ctrun_sink__writev_all(s->dup_fd, iov, n);
    }
    return rc;
}

/* Where to cut a full buffer so that a UTF-8 character is not split: before a lead byte
 * whose character would not fit. */
static size_t ctrun_sink__utf8_cut(const unsigned char *p, size_t n)
{
    for (size_t back = 1; back <= 3 && back < n; back++) {
        unsigned char c = p[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation byte: keep looking for its lead */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

int ctrun_sink_init(ctrun_sink_t *sink, int console_fd, int file_fd, const char *prefix,
                    size_t line_max)
{
    memset(sink, 0, sizeof *sink);
    sink->console_fd = console_fd;
    sink->file_fd = file_fd;
    sink->dup_fd = -1;
    sink->line_max = line_max ? line_max : CTRUN_SINK_LINE_MAX;
    sink->prefix = strdup(prefix ? prefix : "");
    sink->pending = console_fd >= 0 ? malloc(sink->line_max) : NULL;
    if (sink->prefix == NULL || (console_fd >= 0 && sink->pending == NULL)) {
        ctrun_sink_close(sink);
        return -ENOMEM;
    }
    sink->prefix_len = strlen(sink->prefix);
    return 0;
}

void ctrun_sink_use_console(ctrun_sink_t *sink, ctrun_console_t *console)
{
    sink->console = console;
}

void ctrun_sink_duplicate(ctrun_sink_t *sink, int fd, const ctrun_line_filter_t *filter)
{
    sink->dup_fd = filter != NULL && filter->count > 0 ? fd : -1;
    sink->dup_filter = filter;
}

int ctrun_sink_write(ctrun_sink_t *sink, const void *data, size_t nbytes)
{
    if (sink->file_fd >= 0 && sink->file_err == 0 && nbytes > 0) {
        struct iovec iov = {.iov_base = (void *)data, .iov_len = nbytes};
        sink->file_err = ctrun_sink__writev_all(sink->file_fd, &iov, 1);
    }
    bool dup = sink->dup_fd >= 0 && sink->dup_err == 0;
    if (sink->console_fd < 0 || (sink->console_err != 0 && !dup))
        return sink->file_err ? sink->file_err : sink->console_err;

    ctrun_sink__batch_t b = {.n = 0, .nlines = 0};
    const char *p = data, *end = p + nbytes;
    if (sink->cut_pending && p < end) {
        if (*p == '\n' && sink->pending_len == 0)
            p++; /* the '\n' that ends a piece already written with its own '\n' */
        sink->cut_pending = false;
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t seg = (size_t)((nl ? nl : end) - p);
        /* A line too long for the buffer goes out in pieces of line_max bytes. */
        while (sink->pending_len + seg > sink->line_max ||
               (nl == NULL && sink->pending_len + seg == sink->line_max)) {
            ctrun_sink__flush(sink, &b); /* the batch may point into pending */
            size_t take = sink->line_max - sink->pending_len;
            memcpy(sink->pending + sink->pending_len, p, take);
            p += take;
            seg -= take;
            size_t cut = ctrun_sink__utf8_cut((unsigned char *)sink->pending, sink->line_max);
            ctrun_sink__line(sink, &b, sink->pending, cut, NULL, 0, true);
            ctrun_sink__flush(sink, &b);
            sink->pending_len = sink->line_max - cut;
            memmove(sink->pending, sink->pending + cut, sink->pending_len);
            sink->cut_pending = sink->pending_len == 0 && seg == 0;
        }
        if (nl == NULL) {
            ctrun_sink__flush(sink, &b);
            memcpy(sink->pending + sink->pending_len, p, seg);
            sink->pending_len += seg;
            break;
        }
        if (sink->cut_pending && seg == 0) {
            sink->cut_pending = false; /* the piece just written already ended the line */
        } else {
            ctrun_sink__line(sink, &b, sink->pending, sink->pending_len, p, seg + 1, false);
            if (sink->pending_len > 0)
                ctrun_sink__flush(sink, &b);
        }
        sink->cut_pending = false;
        sink->pending_len = 0;
        p = nl + 1;
    }
    ctrun_sink__flush(sink, &b);
    return sink->file_err ? sink->file_err : sink->console_err;
}

int ctrun_sink_finish(ctrun_sink_t *sink)
{
    bool dup = sink->dup_fd >= 0 && sink->dup_err == 0;
    if (sink->console_fd < 0 || (sink->console_err != 0 && !dup) || sink->pending_len == 0)
        return sink->file_err ? sink->file_err : sink->console_err;
    ctrun_sink__batch_t b = {.n = 0, .nlines = 0};
    ctrun_sink__line(sink, &b, sink->pending, sink->pending_len, NULL, 0, true);
    sink->pending_len = 0;
    sink->cut_pending = false;
    ctrun_sink__flush(sink, &b);
    return sink->file_err ? sink->file_err : sink->console_err;
}

void ctrun_sink_close(ctrun_sink_t *sink)
{
    free(sink->prefix);
    free(sink->pending);
    sink->prefix = NULL;
    sink->pending = NULL;
    sink->pending_len = 0;
}
