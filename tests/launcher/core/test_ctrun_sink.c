/*
 * test_ctrun_sink.c - line framing of worker output: raw bytes to the file, whole prefixed
 * lines to the console whatever the chunk boundaries, a trailing partial line flushed at the
 * end, over-long lines cut into bounded pieces (never inside a UTF-8 character), two workers'
 * output never sharing a console line, a vanished console not stopping the file, and through
 * a console queue whose reader stalls: whole lines dropped, the file complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrun_sink.h"

/* A temp file to stand in for the console or the log file. */
static int ct__tmpfd(void)
{
    char path[] = "/tmp/ctrun_sink_XXXXXX";
    int fd = mkstemp(path);
    CT_ASSERT(fd >= 0);
    unlink(path);
    return fd;
}

static char *ct__contents(int fd)
{
    static char buf[1 << 20];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    CT_ASSERT(n >= 0);
    buf[n] = '\0';
    return buf;
}

/* Feeds text to a sink in chunks of the given size. */
static void ct__feed(ctrun_sink_t *s, const char *text, size_t chunk)
{
    size_t n = strlen(text);
    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        CT_ASSERT_OK(ctrun_sink_write(s, text + off, len));
    }
}

static void test_whole_lines_any_chunking(void)
{
    const char *text = "alpha\nbeta gamma\n\ndelta\nepsilon (no newline)";
    const char *want = "[default0]:alpha\n[default0]:beta gamma\n[default0]:\n[default0]:delta\n"
                       "[default0]:epsilon (no newline)\n";
    for (size_t chunk = 1; chunk <= strlen(text); chunk++) {
        int con = ct__tmpfd(), file = ct__tmpfd();
        ctrun_sink_t s;
        CT_ASSERT_OK(ctrun_sink_init(&s, con, file, "[default0]:", 0));
        ct__feed(&s, text, chunk);
        /* Before the end only whole lines have reached the console. */
        CT_ASSERT_STR_EQ(ct__contents(con), "[default0]:alpha\n[default0]:beta gamma\n"
                                            "[default0]:\n[default0]:delta\n");
        CT_ASSERT_STR_EQ(ct__contents(file), text);
        CT_ASSERT_OK(ctrun_sink_finish(&s));
        CT_ASSERT_STR_EQ(ct__contents(con), want);
        CT_ASSERT_OK(ctrun_sink_finish(&s)); /* nothing left: no extra line */
        CT_ASSERT_STR_EQ(ct__contents(con), want);
        ctrun_sink_close(&s);
        ctrun_sink_close(&s);
        close(con);
        close(file);
    }
}

static void test_no_prefix_and_single_destination(void)
{
    int con = ct__tmpfd();
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, con, -1, NULL, 0));
    ct__feed(&s, "a\nb", 2);
    CT_ASSERT_OK(ctrun_sink_finish(&s));
    CT_ASSERT_STR_EQ(ct__contents(con), "a\nb\n");
    ctrun_sink_close(&s);
    close(con);

    int file = ct__tmpfd();
    CT_ASSERT_OK(ctrun_sink_init(&s, -1, file, "[x]:", 0));
    ct__feed(&s, "raw\nbytes", 3);
    CT_ASSERT_OK(ctrun_sink_finish(&s));
    CT_ASSERT_STR_EQ(ct__contents(file), "raw\nbytes");
    ctrun_sink_close(&s);
    close(file);
}

static void test_long_lines_in_pieces(void)
{
    /* line_max 8: a 20-byte line without newline becomes pieces of 8, 8 and (at the end) 4. */
    for (size_t chunk = 1; chunk <= 21; chunk++) {
        int con = ct__tmpfd();
        ctrun_sink_t s;
        CT_ASSERT_OK(ctrun_sink_init(&s, con, -1, "[p]:", 8));
        ct__feed(&s, "0123456789abcdefghij", chunk);
        CT_ASSERT_STR_EQ(ct__contents(con), "[p]:01234567\n[p]:89abcdef\n");
        CT_ASSERT_OK(ctrun_sink_finish(&s));
        CT_ASSERT_STR_EQ(ct__contents(con), "[p]:01234567\n[p]:89abcdef\n[p]:ghij\n");
        ctrun_sink_close(&s);
        close(con);
    }
    /* A newline right after a full piece ends that piece: no empty line. */
    for (size_t chunk = 1; chunk <= 18; chunk++) {
        int con = ct__tmpfd();
        ctrun_sink_t s;
        CT_ASSERT_OK(ctrun_sink_init(&s, con, -1, "[p]:", 8));
        ct__feed(&s, "01234567\nab\n\nxyz01234\n", chunk);
        CT_ASSERT_OK(ctrun_sink_finish(&s));
        CT_ASSERT_STR_EQ(ct__contents(con), "[p]:01234567\n[p]:ab\n[p]:\n[p]:xyz01234\n");
        ctrun_sink_close(&s);
        close(con);
    }
    /* Long lines that do end in a newline inside one chunk are cut the same way. */
    int con = ct__tmpfd();
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, con, -1, "", 4));
    ct__feed(&s, "abcdefghij\nk\n", 100);
    CT_ASSERT_STR_EQ(ct__contents(con), "abcd\nefgh\nij\nk\n");
    ctrun_sink_close(&s);
    close(con);
}

static void test_utf8_is_not_split(void)
{
    /* "aé€😀" = 61 | c3 a9 | e2 82 ac | f0 9f 98 80: with line_max 4 every cut must fall
     * between characters. */
    const char *text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
    int con = ct__tmpfd();
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, con, -1, "", 4));
    ct__feed(&s, text, 1);
    CT_ASSERT_OK(ctrun_sink_finish(&s));
    CT_ASSERT_STR_EQ(ct__contents(con), "a\xc3\xa9\n\xe2\x82\xac\n\xf0\x9f\x98\x80\nz\n");
    ctrun_sink_close(&s);
    close(con);
}

/* Two workers writing interleaved chunks of random sizes to one console: every console line
 * is one whole line of one worker. */
static void test_two_workers_never_share_a_line(void)
{
    int con = ct__tmpfd();
    ctrun_sink_t s[2];
    CT_ASSERT_OK(ctrun_sink_init(&s[0], con, -1, "[default0]:", 64));
    CT_ASSERT_OK(ctrun_sink_init(&s[1], con, -1, "[default1]:", 64));
    static char text[2][20000];
    for (int r = 0; r < 2; r++) {
        size_t n = 0;
        for (int line = 0; line < 300; line++)
            n += (size_t)snprintf(text[r] + n, sizeof text[r] - n, "rank%d line %03d %.*s\n", r,
                                  line, line % 40, "........................................");
    }
    size_t off[2] = {0, 0}, len[2] = {strlen(text[0]), strlen(text[1])};
    unsigned seed = 12345;
    while (off[0] < len[0] || off[1] < len[1]) {
        int r = (int)(rand_r(&seed) % 2);
        if (off[r] >= len[r])
            r = 1 - r;
        size_t c = 1 + (size_t)(rand_r(&seed) % 97);
        if (c > len[r] - off[r])
            c = len[r] - off[r];
        CT_ASSERT_OK(ctrun_sink_write(&s[r], text[r] + off[r], c));
        off[r] += c;
    }
    const char *out = ct__contents(con);
    int lines[2] = {0, 0};
    for (const char *p = out; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        CT_ASSERT(nl != NULL);
        int r = strncmp(p, "[default0]:", 11) == 0   ? 0
                : strncmp(p, "[default1]:", 11) == 0 ? 1
                                                     : -1;
        CT_ASSERT_MSG(r >= 0, "line without a prefix: %.40s", p);
        char want[80];
        int wl = snprintf(want, sizeof want, "rank%d line %03d ", r, lines[r]);
        CT_ASSERT_MSG(strncmp(p + 11, want, (size_t)wl) == 0, "line %.60s, want %s", p, want);
        const char *dots = p + 11 + wl;
        CT_ASSERT_EQ(nl - dots, lines[r] % 40);
        lines[r]++;
        p = nl + 1;
    }
    CT_ASSERT_EQ(lines[0], 300);
    CT_ASSERT_EQ(lines[1], 300);
    ctrun_sink_close(&s[0]);
    ctrun_sink_close(&s[1]);
    close(con);
}

static void test_console_gone_file_continues(void)
{
    signal(SIGPIPE, SIG_IGN); /* the agent ignores SIGPIPE too */
    int p[2];
    CT_ASSERT_EQ(pipe(p), 0);
    close(p[0]);
    int file = ct__tmpfd();
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, p[1], file, "[x]:", 0));
    CT_ASSERT_EQ(ctrun_sink_write(&s, "one\n", 4), -EPIPE);
    CT_ASSERT_EQ(s.console_err, -EPIPE);
    /* Later writes still reach the file; the console error is reported, not retried. */
    CT_ASSERT_EQ(ctrun_sink_write(&s, "two\n", 4), -EPIPE);
    CT_ASSERT_EQ(ctrun_sink_finish(&s), -EPIPE);
    CT_ASSERT_STR_EQ(ct__contents(file), "one\ntwo\n");
    ctrun_sink_close(&s);
    close(p[1]);
    close(file);
}

static void test_large_output_through_a_pipe(void)
{
    /* 4 MiB of lines through a pipe read by a child: partial writes are completed. */
    int p[2];
    CT_ASSERT_EQ(pipe(p), 0);
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        char buf[65536];
        size_t total = 0;
        ssize_t r;
        while ((r = read(p[0], buf, sizeof buf)) > 0)
            total += (size_t)r;
        _exit(total == 64 * (4 + sizeof(char[64 * 1024])) ? 0 : 1);
    }
    close(p[0]);
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, p[1], -1, "[r]:", 0));
    static char line[64 * 1024];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    /* 64 lines of 65535 'x' and '\n', each with the 4-byte prefix. */
    for (int i = 0; i < 64; i++)
        CT_ASSERT_OK(ctrun_sink_write(&s, line, sizeof line));
    ctrun_sink_close(&s);
    close(p[1]);
    int status;
    CT_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    CT_ASSERT(WIFEXITED(status));
    CT_ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* Through a console queue whose reader has stopped: the file gets every byte, the console
 * whole prefixed lines (some dropped, none cut, long pieces included), and no call waits. */
static void test_console_queue_drops_whole_lines(void)
{
    int p[2];
    CT_ASSERT_EQ(pipe(p), 0);
    fcntl(p[1], F_SETPIPE_SZ, 4096);
    ctrun_console_t *con;
    CT_ASSERT_OK(ctrun_console_create(p[1], -1, CTRUN_CONSOLE_CAPACITY_MIN, NULL, false, &con));
    int file = ct__tmpfd();
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, p[1], file, "[p]:", 64));
    ctrun_sink_use_console(&s, con);
    static char text[3000 * 16];
    size_t len = 0;
    for (int i = 0; i < 3000; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "line %d\n", i);
    for (size_t off = 0; off < len; off += 7)
        CT_ASSERT_OK(ctrun_sink_write(&s, text + off, len - off < 7 ? len - off : 7));
    CT_ASSERT_OK(ctrun_sink_write(&s, text, 0));
    static char longline[200];
    memset(longline, 'y', sizeof longline);
    CT_ASSERT_OK(ctrun_sink_write(&s, longline, sizeof longline)); /* pieces of 64, no '\n' */
    CT_ASSERT_OK(ctrun_sink_finish(&s));
    ctrun_console_stats_t st;
    ctrun_console_get_stats(con, &st);
    CT_ASSERT(st.lines_dropped > 0);
    /* The file has everything. */
    char *f = ct__contents(file);
    CT_ASSERT_EQ(strncmp(f, text, len), 0);
    CT_ASSERT_EQ(strlen(f), len + sizeof longline);
    /* Now read the console: whole lines only. */
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        static char got[1 << 20];
        size_t n = 0;
        ssize_t r;
        while ((r = read(p[0], got + n, sizeof got - 1 - n)) > 0)
            n += (size_t)r;
        got[n] = '\0';
        int last = -1;
        for (char *q = got; *q != '\0';) {
            char *nl = strchr(q, '\n');
            if (nl == NULL || strncmp(q, "[p]:", 4) != 0)
                _exit(1);
            int v = -1, used = 0;
            if (sscanf(q + 4, "line %d%n", &v, &used) == 1) {
                if (q + 4 + used != nl || v <= last)
                    _exit(2);
                last = v;
            } else if (nl - q - 4 != 64 && nl - q - 4 != 200 - 3 * 64) {
                _exit(3); /* a piece of the long line, whole */
            }
            q = nl + 1;
        }
        _exit(last >= 0 ? 0 : 4);
    }
    close(p[0]);
    CT_ASSERT_OK(ctrun_console_destroy(con, 5000));
    ctrun_sink_close(&s);
    close(p[1]);
    close(file);
    int status;
    CT_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    CT_ASSERT(WIFEXITED(status));
    CT_ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* --duplicate_std*_filters: console lines containing a needle also go, with the prefix, to the
 * shared filtered file, whatever the chunking (a needle split across two reads included); a
 * console that went away does not stop the copy. */
static void test_filtered_copy(void)
{
    ctrun_line_filter_t f;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_line_filter_parse("loss,a,,b", &f, &eb));
    const char *text = "step 1 loss 0.5\nnothing here\nx a,b y\nfinal loss";
    for (size_t chunk = 1; chunk <= strlen(text); chunk++) {
        int con = ct__tmpfd(), dup = ct__tmpfd();
        ctrun_sink_t s;
        CT_ASSERT_OK(ctrun_sink_init(&s, con, -1, "[default1]:", 0));
        ctrun_sink_duplicate(&s, dup, &f);
        ct__feed(&s, text, chunk);
        CT_ASSERT_OK(ctrun_sink_finish(&s));
        CT_ASSERT_STR_EQ(ct__contents(dup), "[default1]:step 1 loss 0.5\n[default1]:x a,b y\n"
                                            "[default1]:final loss\n");
        ctrun_sink_close(&s);
        close(con);
        close(dup);
    }
    /* The console reader is gone (EPIPE): the copy goes on. */
    int p[2];
    CT_ASSERT_EQ(pipe(p), 0);
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    int dup = ct__tmpfd();
    ctrun_sink_t s;
    CT_ASSERT_OK(ctrun_sink_init(&s, p[1], -1, "", 0));
    ctrun_sink_duplicate(&s, dup, &f);
    ctrun_sink_write(&s, "loss 1\n", 7);
    ctrun_sink_write(&s, "loss 2\nother\n", 14);
    CT_ASSERT_STR_EQ(ct__contents(dup), "loss 1\nloss 2\n");
    ctrun_sink_close(&s);
    close(p[1]);
    close(dup);
    ctrun_line_filter_free(&f);
}

int main(void)
{
    CT_RUN(test_whole_lines_any_chunking);
    CT_RUN(test_no_prefix_and_single_destination);
    CT_RUN(test_long_lines_in_pieces);
    CT_RUN(test_utf8_is_not_split);
    CT_RUN(test_two_workers_never_share_a_line);
    CT_RUN(test_console_gone_file_continues);
    CT_RUN(test_large_output_through_a_pipe);
    CT_RUN(test_console_queue_drops_whole_lines);
    CT_RUN(test_filtered_copy);
    return 0;
}
