/*
 * test_heartbeat.c - heartbeat records through a real pipe: the documented layout and
 * sequence numbers, the rate limit, a full pipe (records dropped and counted, never a blocked
 * writer: a blocking write would hang the test until its timeout), a closed reader (EPIPE,
 * no SIGPIPE death, heartbeat off), and ct_worker_progress driven by CTRUN_HEARTBEAT_FD.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctworker.h"

/* Reads every record available (the read end is non-blocking). */
static int drain(int fd, ct_heartbeat_record_t *recs, int cap)
{
    int n = 0;
    for (;;) {
        ct_heartbeat_record_t r;
        ssize_t got = read(fd, &r, sizeof r);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        CT_ASSERT_EQ(got, (ssize_t)sizeof r); /* whole records only */
        if (n < cap)
            recs[n] = r;
        n++;
    }
    return n;
}

static void make_pipe(int p[2])
{
    CT_ASSERT_OK(pipe(p));
    CT_ASSERT(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0);
}

static void test_records(void)
{
    int p[2];
    make_pipe(p);
    ct_heartbeat_t hb;
    CT_ASSERT_OK(ct_heartbeat_init(&hb, p[1], 0, NULL));
    CT_ASSERT(fcntl(p[1], F_GETFL) & O_NONBLOCK);
    CT_ASSERT(fcntl(p[1], F_GETFD) & FD_CLOEXEC);
    for (uint64_t s = 1; s <= 10; s++)
        CT_ASSERT_OK(ct_heartbeat_beat(&hb, s * 100));
    ct_heartbeat_record_t r[16];
    CT_ASSERT_EQ(drain(p[0], r, 16), 10);
    for (int i = 0; i < 10; i++) {
        CT_ASSERT_EQ_U64(r[i].magic, CT_HEARTBEAT_MAGIC);
        CT_ASSERT_EQ(r[i].version, CT_HEARTBEAT_VERSION);
        CT_ASSERT_EQ(r[i].size, 32);
        CT_ASSERT_EQ(r[i].seq, i + 1);
        CT_ASSERT_EQ(r[i].dropped, 0);
        CT_ASSERT_EQ(r[i].step, (i + 1) * 100);
        if (i > 0)
            CT_ASSERT(r[i].time_ns >= r[i - 1].time_ns);
    }
    CT_ASSERT(memcmp(&r[0].magic, "CTHB", 4) == 0);
    CT_ASSERT_EQ(hb.sent, 10);
    ct_heartbeat_close(&hb);
    ct_heartbeat_close(&hb);
    CT_ASSERT_EQ(hb.fd, -1);
    CT_ASSERT_OK(ct_heartbeat_beat(&hb, 1)); /* closed: a no-op */
    close(p[0]);
}

static void test_rate_limit(void)
{
    int p[2];
    make_pipe(p);
    ct_heartbeat_t hb;
    /* An hour between records: only the first call writes, whatever the machine's speed. */
    CT_ASSERT_OK(ct_heartbeat_init(&hb, p[1], 3600 * 1000, NULL));
    for (int i = 0; i < 50; i++)
        CT_ASSERT_OK(ct_heartbeat_beat(&hb, (uint64_t)i));
    ct_heartbeat_record_t r[4];
    CT_ASSERT_EQ(drain(p[0], r, 4), 1);
    CT_ASSERT_EQ(r[0].step, 0);
    CT_ASSERT_EQ(hb.seq, 1);
    ct_heartbeat_close(&hb);
    close(p[0]);

    ct_errbuf_t eb;
    CT_ASSERT_ERR(ct_heartbeat_init(&hb, -1, -5, &eb), -EINVAL);
    CT_ASSERT_OK(ct_heartbeat_init(&hb, -1, 0, NULL)); /* disabled */
    CT_ASSERT_OK(ct_heartbeat_beat(&hb, 3));
}

static void test_full_pipe_never_blocks(void)
{
    int p[2];
    make_pipe(p);
    int cap = fcntl(p[1], F_SETPIPE_SZ, 4096); /* the smallest pipe: 128 records */
    CT_ASSERT(cap >= 4096);
    ct_heartbeat_t hb;
    CT_ASSERT_OK(ct_heartbeat_init(&hb, p[1], 0, NULL));
    const int total = 5000;
    int dropped = 0;
    for (int i = 0; i < total; i++) {
        int rc = ct_heartbeat_beat(&hb, (uint64_t)i);
        CT_ASSERT(rc == 0 || rc == -EAGAIN);
        dropped += rc == -EAGAIN;
    }
    CT_ASSERT_EQ(hb.dropped, dropped);
    CT_ASSERT_EQ(hb.sent + hb.dropped, total);
    CT_ASSERT_EQ(hb.sent, cap / 32);
    static ct_heartbeat_record_t r[8192];
    int n = drain(p[0], r, 8192);
    CT_ASSERT_EQ(n, (int)hb.sent);
    for (int i = 1; i < n; i++)
        CT_ASSERT_EQ(r[i].seq, r[i - 1].seq + 1); /* the first cap/32 went through in order */

    /* Once the reader catches up, the next record carries the drop count and a seq gap. */
    CT_ASSERT_OK(ct_heartbeat_beat(&hb, 99999));
    CT_ASSERT_EQ(drain(p[0], r, 8192), 1);
    CT_ASSERT_EQ(r[0].dropped, dropped);
    CT_ASSERT_EQ(r[0].seq, total + 1);
    CT_ASSERT_EQ(r[0].seq - (uint32_t)n - 1, r[0].dropped);
    CT_ASSERT_EQ(r[0].step, 99999);
    ct_heartbeat_close(&hb);
    close(p[0]);
}

static void test_reader_gone(void)
{
    signal(SIGPIPE, SIG_DFL);
    int p[2];
    make_pipe(p);
    ct_heartbeat_t hb;
    CT_ASSERT_OK(ct_heartbeat_init(&hb, p[1], 0, NULL));
    struct sigaction sa;
    sigaction(SIGPIPE, NULL, &sa);
    CT_ASSERT(sa.sa_handler == SIG_IGN); /* the default action would kill us on EPIPE */
    close(p[0]);
    CT_ASSERT_ERR(ct_heartbeat_beat(&hb, 1), -EPIPE);
    CT_ASSERT_EQ(hb.fd, -1);
    CT_ASSERT_OK(ct_heartbeat_beat(&hb, 2));

    /* A program's own SIGPIPE handler is left alone. */
    signal(SIGPIPE, SIG_DFL);
    struct sigaction mine = {.sa_handler = SIG_IGN};
    mine.sa_flags = SA_RESTART;
    sigaction(SIGPIPE, &mine, NULL);
    make_pipe(p);
    CT_ASSERT_OK(ct_heartbeat_init(&hb, p[1], 0, NULL));
    sigaction(SIGPIPE, NULL, &sa);
    CT_ASSERT(sa.sa_flags & SA_RESTART);
    ct_heartbeat_close(&hb);
    close(p[0]);
}

static void test_worker_progress(void)
{
    CT_ASSERT_OK(ct_worker_progress(1)); /* before setup: nothing to do */
    int p[2];
    make_pipe(p);
    char text[16];
    snprintf(text, sizeof text, "%d", p[1]);
    setenv("CTRUN_HEARTBEAT_FD", text, 1);
    ct_worker_env_t env;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ct_worker_env_read(&env, &eb));
    CT_ASSERT_OK(ct_worker_setup(&env, 0, &eb));
    CT_ASSERT_ERR(ct_worker_setup(&env, 0, &eb), CT_ESTATE);
    CT_ASSERT_OK(ct_worker_progress(42));
    /* The second call normally falls within the runtime's 100 ms rate limit and writes
     * nothing; a machine stalled for longer than that between the two calls may write it,
     * which is also correct. */
    CT_ASSERT_OK(ct_worker_progress(43));
    ct_heartbeat_record_t r[4];
    int n = drain(p[0], r, 4);
    CT_ASSERT(n == 1 || n == 2);
    CT_ASSERT_EQ(r[0].step, 42);
    ct_worker_cleanup();
    CT_ASSERT(fcntl(p[1], F_GETFD) < 0); /* the runtime owned and closed it */
    CT_ASSERT_OK(ct_worker_progress(44));
    CT_ASSERT_ERR(ct_worker_setup(&env, 0x100, &eb), -EINVAL);
    close(p[0]);
    unsetenv("CTRUN_HEARTBEAT_FD");
}

int main(void)
{
    CT_RUN(test_records);
    CT_RUN(test_rate_limit);
    CT_RUN(test_full_pipe_never_blocks);
    CT_RUN(test_reader_gone);
    CT_RUN(test_worker_progress);
    return 0;
}
