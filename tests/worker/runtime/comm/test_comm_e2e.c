/*
 * test_comm_e2e.c (suite e2e) - the CPU ring across real processes: a ctrun-store on loopback
 * and W comm_worker processes started with the torchrun environment (ct_ranks.h; ctrun-based
 * variants come with the launcher):
 *   - W = 2, 3, 4: allreduce from 1 element to 64 MiB equals the documented order bit for bit on
 *     every rank, and broadcast / allgather / barrier deliver; all ranks print the same digest,
 *     and a second run prints it again (bit-identical run to run);
 *   - a rank SIGKILLed in the middle of a stream of 16 MiB allreduces: every other rank fails
 *     with an error (not a hang) well within the timeout;
 *   - ranks that disagree about a collective fail at once;
 *   - restart-attempt namespacing: with stale keys of attempt 0 left in the store (pointing at
 *     a listener that is no ring peer), attempt 1 forms its ring without ever touching them,
 *     while a group that does read them (attempt 0 again) fails; two runs with different run
 *     ids share one store at the same time.
 * Usage: test_comm_e2e PATH_TO_CTRUN_STORE PATH_TO_COMM_WORKER
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ct_ranks.h"
#include "ct_store_client.h"
#include "ct_test.h"
#include "ct_time.h"

static ct_store_proc_t store;
static const char *worker;

static void run_group(ct_ranks_t *g, int w, const char *run_id, int attempt, double timeout_s,
                      const char *mode, const char *arg)
{
    char *argv[] = {(char *)worker, (char *)mode, (char *)arg, NULL};
    ct_ranks_opts_t o = {.world = w,
                         .port = store.port,
                         .run_id = run_id,
                         .restart_count = attempt,
                         .timeout_s = timeout_s};
    CT_ASSERT_OK(ct_ranks_start(g, &o, argv));
}

/* The digest all ranks printed (they must agree). */
static unsigned long group_digest(ct_ranks_t *g)
{
    unsigned long d0 = 0;
    for (int r = 0; r < g->n; r++) {
        const char *p = g->child[r].out ? strstr(g->child[r].out, "digest ") : NULL;
        CT_ASSERT_MSG(p != NULL, "rank %d printed no digest", r);
        unsigned long d = strtoul(p + 7, NULL, 16);
        if (r == 0)
            d0 = d;
        CT_ASSERT_MSG(d == d0, "rank %d's digest %08lx differs from rank 0's %08lx", r, d, d0);
    }
    return d0;
}

static void test_sizes_bit_exact(void)
{
    unsigned long first[5] = {0};
    for (int w = 2; w <= 4; w++) {
        ct_ranks_t g;
        char id[32];
        snprintf(id, sizeof id, "sizes-%d", w);
        int64_t t0 = ct_time_ms();
        run_group(&g, w, id, 0, 120, "check", NULL);
        int rc = ct_ranks_wait(&g, 400000);
        if (rc != 0)
            ct_ranks_dump(&g);
        CT_ASSERT_EQ(rc, 0);
        first[w] = group_digest(&g);
        printf("  W=%d: every size bit-exact, digest %08lx (%.1f s)\n", w, first[w],
               (double)(ct_time_ms() - t0) / 1000.0);
        ct_ranks_close(&g);
    }
    /* Again, on a new run id: the same bits. */
    for (int w = 2; w <= 4; w += 2) {
        ct_ranks_t g;
        char id[32];
        snprintf(id, sizeof id, "sizes-again-%d", w);
        run_group(&g, w, id, 0, 120, "check", NULL);
        int rc = ct_ranks_wait(&g, 400000);
        if (rc != 0)
            ct_ranks_dump(&g);
        CT_ASSERT_EQ(rc, 0);
        unsigned long d = group_digest(&g);
        CT_ASSERT_MSG(d == first[w], "W=%d: second run digest %08lx, first %08lx", w, d, first[w]);
        printf("  W=%d again: digest %08lx, identical\n", w, d);
        ct_ranks_close(&g);
    }
}

/* Waits until every rank printed "ready". */
static void wait_ready(ct_ranks_t *g)
{
    int64_t deadline = ct_time_ms() + 60000;
    for (;;) {
        int ready = 0;
        for (int r = 0; r < g->n; r++) {
            ct_child_poll_output(&g->child[r], 5);
            ready += g->child[r].out != NULL && strstr(g->child[r].out, "ready") != NULL;
            if (ct_child_exited(&g->child[r])) {
                ct_ranks_dump(g);
                CT_ASSERT_MSG(false, "rank %d exited before the kill", r);
            }
        }
        if (ready == g->n)
            return;
        CT_ASSERT_MSG(ct_time_ms() < deadline, "only %d of %d ranks ready", ready, g->n);
    }
}

static void test_killed_peer(void)
{
    const double timeout_s = 30;
    for (int w = 3; w <= 4; w++) {
        ct_ranks_t g;
        char id[32];
        snprintf(id, sizeof id, "kill-%d", w);
        run_group(&g, w, id, 0, timeout_s, "loop", "4194304"); /* 16 MiB per allreduce */
        wait_ready(&g);
        ct_sleep_ms(150);
        int victim = 1;
        int64_t t_kill = ct_time_ms();
        ct_child_signal(&g.child[victim], SIGKILL);
        ct_child_wait_all(g.child, g.n, 120000);
        for (int r = 0; r < w; r++) {
            ct_child_t *c = &g.child[r];
            if (r == victim) {
                CT_ASSERT_EQ(c->term_signal, SIGKILL);
                continue;
            }
            int64_t after = c->start_ms + c->elapsed_ms - t_kill;
            const char *line = c->err ? strstr(c->err, "failed after") : NULL;
            printf("  W=%d rank %d: exit %d %lld ms after the kill: %.*s\n", w, r, c->exit_code,
                   (long long)after, line ? (int)strcspn(line, "\n") : 0, line ? line : "");
            if (c->exit_code != 3)
                ct_ranks_dump(&g);
            CT_ASSERT_EQ(c->exit_code, 3);
            CT_ASSERT_MSG(c->err && (strstr(c->err, "CT_EPEER") || strstr(c->err, "ETIMEDOUT")),
                          "rank %d: %s", r, c->err ? c->err : "");
            /* Within the timeout, with slack for a loaded machine; in practice milliseconds,
             * since a failing rank closes its connections and the failure runs around the
             * ring. */
            CT_ASSERT_MSG(after < (int64_t)(timeout_s * 1000) + 15000, "rank %d took %lld ms", r,
                          (long long)after);
        }
        ct_ranks_close(&g);
    }
}

static void test_mismatch(void)
{
    ct_ranks_t g;
    run_group(&g, 3, "mismatch", 0, 60, "mismatch", NULL);
    int rc = ct_ranks_wait(&g, 60000);
    if (rc != 0)
        ct_ranks_dump(&g);
    CT_ASSERT_EQ(rc, 0);
    bool protocol = false;
    for (int r = 0; r < 3; r++) {
        protocol |= strstr(g.child[r].out, "CT_EPROTOCOL") != NULL;
        CT_ASSERT_MSG(g.child[r].elapsed_ms < 30000, "rank %d: %lld ms", r,
                      (long long)g.child[r].elapsed_ms);
    }
    CT_ASSERT(protocol);
    ct_ranks_close(&g);
}

/* A listener that counts connections and never answers: what stale ring keys point at. */
static int poison_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CT_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 64) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static int poison_connections(int fd)
{
    int n = 0;
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            return n;
        close(c);
        n++;
    }
}

static void test_attempt_namespacing(void)
{
    int pport;
    int pfd = poison_listener(&pport);
    ct_store_client_t st;
    ct_errbuf_t eb;
    ct_store_client_opts_t so = {.timeout_ms = 10000};
    CT_ASSERT_OK(ct_store_client_connect(&st, "127.0.0.1", store.port, &so, &eb));
    char key[128], val[64];
    snprintf(val, sizeof val, "127.0.0.1:%d", pport);
    for (int r = 0; r < 3; r++) {
        snprintf(key, sizeof key, "ctworker/job-ns/attempt_0/ring/%d", r);
        CT_ASSERT_OK(ct_store_set(&st, key, val, strlen(val), &eb));
    }

    /* Attempt 1 of the same run: its own keys only. Rank 2 joins 1.5 s late, so rank 1 looks
     * its address up before rank 2 has published one: a reader of attempt 0's keys would find
     * the stale one there. */
    ct_ranks_t g;
    run_group(&g, 3, "job-ns", 1, 20, "hello", "2:1500");
    int rc = ct_ranks_wait(&g, 60000);
    if (rc != 0)
        ct_ranks_dump(&g);
    CT_ASSERT_EQ(rc, 0);
    for (int r = 0; r < 3; r++) {
        CT_ASSERT_STR_CONTAINS(g.child[r].out, "prefix ctworker/job-ns/attempt_1/ sum 3");
    }
    ct_ranks_close(&g);
    CT_ASSERT_EQ(poison_connections(pfd), 0);
    bool ready = false;
    snprintf(key, sizeof key, "ctworker/job-ns/attempt_1/ring/2");
    const char *k = key;
    CT_ASSERT_OK(ct_store_check(&st, &k, 1, &ready, &eb));
    CT_ASSERT(ready);

    /* The control: a group that reads those keys (attempt 0) meets the poison and fails
     * within its timeout - so the success above was the namespace's doing. */
    run_group(&g, 3, "job-ns", 0, 2, "hello", "2:1500");
    rc = ct_ranks_wait(&g, 60000);
    CT_ASSERT_EQ(rc, 1);
    for (int r = 0; r < 2; r++)
        CT_ASSERT_NE(g.child[r].exit_code, 0);
    CT_ASSERT_STR_CONTAINS(g.child[1].err, "ct_worker_init");
    ct_ranks_close(&g);
    CT_ASSERT_GE(poison_connections(pfd), 1);
    close(pfd);

    /* Two runs, one store, at the same time. */
    ct_ranks_t a, b;
    run_group(&a, 2, "run-a", 0, 30, "hello", NULL);
    run_group(&b, 3, "run-b", 0, 30, "hello", NULL);
    CT_ASSERT_EQ(ct_ranks_wait(&a, 60000), 0);
    CT_ASSERT_EQ(ct_ranks_wait(&b, 60000), 0);
    CT_ASSERT_STR_CONTAINS(a.child[1].out, "prefix ctworker/run-a/attempt_0/ sum 1");
    CT_ASSERT_STR_CONTAINS(b.child[2].out, "prefix ctworker/run-b/attempt_0/ sum 3");
    ct_ranks_close(&a);
    ct_ranks_close(&b);
    ct_store_client_close(&st);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_comm_e2e PATH_TO_CTRUN_STORE PATH_TO_COMM_WORKER\n");
        return 2;
    }
    worker = argv[2];
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[1]));
    CT_RUN(test_mismatch);
    CT_RUN(test_attempt_namespacing);
    CT_RUN(test_killed_peer);
    CT_RUN(test_sizes_bit_exact);
    ct_store_proc_stop(&store);
    return 0;
}
