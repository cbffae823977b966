/*
 * test_ctrun_console.c - the console queue: lines of both fds come out whole and in queue
 * order; with a reader that does not read, a write never waits, lines that do not fit are
 * dropped whole and counted, ctrun's own lines still fit, and the notices say when dropping
 * started, how much was dropped once the reader caught up, and the count at the end; a flush
 * gives up on a stalled reader; stdout and stderr to different readers do not hold each other
 * back; a reader that went away turns into -EPIPE.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "ct_time.h"
#include "ctrun_console.h"

/* A reader thread that collects everything from fd until end-of-file. */
typedef struct reader {
    pthread_t thread;
    int fd;
    char *buf;
    size_t len, cap;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    for (;;) {
        if (r->cap - r->len < 65536) {
            r->cap = r->cap ? r->cap * 2 : 1 << 20;
            r->buf = realloc(r->buf, r->cap + 1);
            if (r->buf == NULL)
                abort();
        }
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        r->len += (size_t)n;
    }
    if (r->buf != NULL)
        r->buf[r->len] = '\0';
    return NULL;
}

static void reader_start(reader_t *r, int fd)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
    CT_ASSERT_EQ(pthread_create(&r->thread, NULL, reader_main, r), 0);
}

static char *reader_join(reader_t *r)
{
    pthread_join(r->thread, NULL);
    return r->buf ? r->buf : calloc(1, 1);
}

/* A pipe with the smallest buffer the kernel allows, so that it fills at once. */
static void small_pipe(int p[2])
{
    CT_ASSERT_OK(pipe2(p, O_CLOEXEC) == 0 ? 0 : -errno);
    fcntl(p[1], F_SETPIPE_SZ, 4096);
}

static int put(ctrun_console_t *c, int fd, const char *text, ctrun_console_origin_t origin)
{
    struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
    return ctrun_console_write(c, fd, &iov, 1, origin);
}

static void test_order_across_fds(void)
{
    int p[2];
    CT_ASSERT_OK(pipe2(p, O_CLOEXEC) == 0 ? 0 : -errno);
    int err_fd = dup(p[1]); /* as with 2>&1: two fds, one reader */
    ctrun_console_t *c;
    CT_ASSERT_OK(ctrun_console_create(p[1], err_fd, 0, "[t]", true, &c));
    CT_ASSERT_OK(put(c, p[1], "out 1\n", CTRUN_CONSOLE_RELAY));
    struct iovec parts[3] = {{"[r]:", 4}, {"err ", 4}, {"1\n", 2}};
    CT_ASSERT_OK(ctrun_console_write(c, err_fd, parts, 3, CTRUN_CONSOLE_RELAY));
    CT_ASSERT_OK(put(c, p[1], "out 2\n", CTRUN_CONSOLE_OWN));
    CT_ASSERT_OK(put(c, err_fd, "err 2\n", CTRUN_CONSOLE_OWN));
    CT_ASSERT_ERR(put(c, 99, "x\n", CTRUN_CONSOLE_OWN), -EINVAL);
    CT_ASSERT_OK(ctrun_console_flush(c, -1));
    ctrun_console_stats_t st;
    ctrun_console_get_stats(c, &st);
    CT_ASSERT_EQ_U64(st.bytes_written, 28);
    CT_ASSERT_EQ_U64(st.lines_dropped, 0);
    CT_ASSERT_OK(ctrun_console_destroy(c, 1000));
    close(p[1]);
    close(err_fd);
    char buf[256];
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    CT_ASSERT(n > 0);
    buf[n] = '\0';
    CT_ASSERT_STR_EQ(buf, "out 1\n[r]:err 1\nout 2\nerr 2\n");
    close(p[0]);
}

/* Every "line N" line whole and N increasing; returns how many. */
static long count_whole_lines(const char *text)
{
    long n = 0, last = -1;
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        CT_ASSERT_MSG(nl != NULL, "output ends inside a line");
        if (strncmp(p, "line ", 5) == 0) {
            long got = -1;
            int used = 0;
            CT_ASSERT_MSG(sscanf(p, "line %ld%n", &got, &used) == 1 && p + used == nl,
                          "\"%.*s\" is not a whole line", (int)(nl - p), p);
            CT_ASSERT_MSG(got > last, "line %ld after line %ld", got, last);
            last = got;
            n++;
        }
        p = nl + 1;
    }
    return n;
}

static void test_stalled_reader_drops_whole_lines(void)
{
    int p[2];
    small_pipe(p);
    int err_fd = dup(p[1]);
    ctrun_console_t *c;
    CT_ASSERT_OK(ctrun_console_create(p[1], err_fd, CTRUN_CONSOLE_CAPACITY_MIN, "[t]", true, &c));
    /* Nobody reads: 5000 lines (about 60 KiB) into a 16 KiB queue and a 4 KiB pipe. No call
     * may wait for the reader. */
    long queued = 0, dropped = 0;
    int64_t worst_ms = 0;
    for (long i = 0; i < 5000; i++) {
        char line[64];
        snprintf(line, sizeof line, "line %ld\n", i);
        int64_t t = ct_time_ms();
        int rc = put(c, p[1], line, CTRUN_CONSOLE_RELAY);
        int64_t took = ct_time_ms() - t;
        worst_ms = took > worst_ms ? took : worst_ms;
        CT_ASSERT_MSG(rc == 0 || rc == -EAGAIN, "rc %d", rc);
        queued += rc == 0;
        dropped += rc == -EAGAIN;
    }
    CT_ASSERT_MSG(worst_ms < 500, "a write took %lld ms", (long long)worst_ms);
    CT_ASSERT_GT(dropped, 0);
    ctrun_console_stats_t st;
    ctrun_console_get_stats(c, &st);
    CT_ASSERT_EQ_U64(st.lines_dropped, (uint64_t)dropped);
    CT_ASSERT(st.dropping);
    /* ctrun's own lines have room that relayed ones may not use. */
    CT_ASSERT_EQ(put(c, p[1], "line 999999 relayed\n", CTRUN_CONSOLE_RELAY), -EAGAIN);
    dropped++;
    CT_ASSERT_OK(put(c, err_fd, "own line\n", CTRUN_CONSOLE_OWN));
    /* A flush gives up on a reader that takes nothing. */
    int64_t t = ct_time_ms();
    CT_ASSERT_ERR(ctrun_console_flush(c, 200), -ETIMEDOUT);
    CT_ASSERT_LT(ct_time_ms() - t, 2000);

    /* The reader comes back: everything queued goes out, then the next line is preceded by the
     * count of what was dropped. */
    reader_t r;
    reader_start(&r, p[0]);
    CT_ASSERT_OK(ctrun_console_flush(c, 5000));
    CT_ASSERT_OK(put(c, p[1], "line 1000000\n", CTRUN_CONSOLE_RELAY));
    ctrun_console_get_stats(c, &st);
    CT_ASSERT(!st.dropping);
    CT_ASSERT_OK(ctrun_console_destroy(c, 5000));
    close(p[1]);
    close(err_fd);
    char *out = reader_join(&r);
    close(p[0]);

    CT_ASSERT_EQ(count_whole_lines(out), queued + 1);
    const char *notice = "[t] warn: the console reader is too slow: dropping console lines until "
                         "it catches up (log files are written in full)\n";
    const char *start = strstr(out, notice);
    CT_ASSERT(start != NULL);
    CT_ASSERT(strstr(start + strlen(notice), "too slow") == NULL); /* said once */
    char want[200];
    snprintf(want, sizeof want,
             "[t] warn: the console reader caught up: %ld console lines (%llu bytes) were "
             "dropped\nline 1000000\n",
             dropped, (unsigned long long)st.bytes_dropped);
    CT_ASSERT_STR_CONTAINS(out, want);
    CT_ASSERT_STR_CONTAINS(out, "own line\n");
    CT_ASSERT_STR_NOT_CONTAINS(out, "relayed");
    free(out);
}

static void test_end_count_with_stalled_reader(void)
{
    int p[2];
    small_pipe(p);
    int err_fd = dup(p[1]);
    ctrun_console_t *c;
    CT_ASSERT_OK(ctrun_console_create(p[1], err_fd, CTRUN_CONSOLE_CAPACITY_MIN, "[t]", true, &c));
    long dropped = 0;
    for (long i = 0; i < 5000; i++) {
        char line[64];
        snprintf(line, sizeof line, "line %ld\n", i);
        dropped += put(c, p[1], line, CTRUN_CONSOLE_RELAY) == -EAGAIN;
    }
    CT_ASSERT_GT(dropped, 0);
    /* The end, with the reader still away: destroy gives up after the stall limit and leaves
     * the rest, the count included, to the writer thread. */
    int64_t t = ct_time_ms();
    CT_ASSERT_ERR(ctrun_console_destroy(c, 200), -ETIMEDOUT);
    CT_ASSERT_LT(ct_time_ms() - t, 2000);
    char want[160];
    snprintf(want, sizeof want, "the console reader was too slow: %ld console lines", dropped);
    /* The reader returns: the queue, then the count, arrive. */
    char buf[1 << 16];
    size_t len = 0;
    int64_t deadline = ct_time_ms() + 10000;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    while (ct_time_ms() < deadline && len < sizeof buf - 1) {
        ssize_t n = read(p[0], buf + len, sizeof buf - 1 - len);
        if (n > 0) {
            len += (size_t)n;
            buf[len] = '\0';
            if (strstr(buf, want) != NULL && buf[len - 1] == '\n')
                break;
        } else {
            ct_sleep_ms(5);
        }
    }
    buf[len] = '\0';
    CT_ASSERT_STR_CONTAINS(buf, want);
    ct_sleep_ms(100); /* the writer thread frees the console once its queue is out */
    close(p[0]);
    close(p[1]);
    close(err_fd);
}

/* stdout and stderr to different readers: a stalled stdout does not hold back stderr. */
static void test_separate_destinations(void)
{
    int o[2], e[2];
    small_pipe(o);
    CT_ASSERT_OK(pipe2(e, O_CLOEXEC) == 0 ? 0 : -errno);
    ctrun_console_t *c;
    CT_ASSERT_OK(ctrun_console_create(o[1], e[1], CTRUN_CONSOLE_CAPACITY_MIN, "[t]", true, &c));
    long dropped = 0;
    for (long i = 0; i < 5000; i++) {
        char line[64];
        snprintf(line, sizeof line, "line %ld\n", i);
        dropped += put(c, o[1], line, CTRUN_CONSOLE_RELAY) == -EAGAIN;
    }
    CT_ASSERT_GT(dropped, 0);
    CT_ASSERT_OK(put(c, e[1], "ctrun's own message\n", CTRUN_CONSOLE_OWN));
    /* stderr gets the notice and the message now, while stdout is still not read. */
    const char *want = "[t] warn: the stdout reader is too slow: dropping stdout lines until it "
                       "catches up (log files are written in full)\nctrun's own message\n";
    char buf[1024];
    size_t len = 0;
    int64_t deadline = ct_time_ms() + 5000;
    while (len < strlen(want) && ct_time_ms() < deadline) {
        struct pollfd p = {.fd = e[0], .events = POLLIN};
        if (poll(&p, 1, 100) == 1) {
            ssize_t n = read(e[0], buf + len, sizeof buf - 1 - len);
            CT_ASSERT(n > 0);
            len += (size_t)n;
        }
    }
    buf[len] = '\0';
    CT_ASSERT_STR_EQ(buf, want);
    /* stdout's reader comes back: its lines, and the count on stderr at the end. */
    reader_t r;
    reader_start(&r, o[0]);
    CT_ASSERT_OK(ctrun_console_destroy(c, 5000));
    close(o[1]);
    char *out = reader_join(&r);
    CT_ASSERT_EQ(count_whole_lines(out), 5000 - dropped);
    free(out);
    close(e[1]);
    ssize_t n = read(e[0], buf, sizeof buf - 1);
    CT_ASSERT(n > 0);
    buf[n] = '\0';
    char count[160];
    snprintf(count, sizeof count, "[t] warn: the stdout reader was too slow: %ld stdout lines (",
             dropped);
    CT_ASSERT_STR_CONTAINS(buf, count);
    close(o[0]);
    close(e[0]);
}

static void test_reader_gone(void)
{
    int p[2];
    CT_ASSERT_OK(pipe2(p, O_CLOEXEC) == 0 ? 0 : -errno);
    close(p[0]);
    ctrun_console_t *c;
    CT_ASSERT_OK(ctrun_console_create(p[1], -1, 0, NULL, true, &c));
    CT_ASSERT_OK(put(c, p[1], "nobody reads this\n", CTRUN_CONSOLE_RELAY));
    CT_ASSERT_OK(ctrun_console_flush(c, 5000)); /* discarded counts as done */
    CT_ASSERT_ERR(put(c, p[1], "or this\n", CTRUN_CONSOLE_RELAY), -EPIPE);
    CT_ASSERT_OK(ctrun_console_destroy(c, 1000));
    CT_ASSERT_OK(ctrun_console_destroy(NULL, 0));
    close(p[1]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as in ctrun */
    CT_RUN(test_order_across_fds);
    CT_RUN(test_stalled_reader_drops_whole_lines);
    CT_RUN(test_end_count_with_stalled_reader);
    CT_RUN(test_separate_destinations);
    CT_RUN(test_reader_gone);
    return 0;
}
