/*
 * test_hello_allreduce.c (suite e2e) - examples/hello_allreduce as a user would run it: alone
 * (no launcher), and as 2 and 3 ranks with the torchrun environment and a ctrun-store
 * (tests/ct_ranks.h, until ctrun runs it): every step's sum is exact, the counter checkpoint
 * is written, and a second run resumes from it on every rank. The second run reuses the
 * first one's run id on the same store, as two jobs sharing a long-lived store would: a rank
 * may find its neighbour's stale address from the first run and must retry until the new one
 * is published.
 * Usage: test_hello_allreduce PATH_TO_CTRUN_STORE PATH_TO_HELLO_ALLREDUCE
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_ranks.h"
#include "ct_test.h"

static ct_store_proc_t store;
static const char *hello;
static char root[256];

static void run(int w, const char *dir, const char *steps, const char *expect1, const char *expect2)
{
    char *argv[] = {(char *)hello, "--steps", (char *)steps, "--count",
                    "100003",      "--dir",   (char *)dir,   NULL};
    ct_ranks_t g;
    if (w == 1) {
        const char *env[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "TORCHELASTIC_RESTART_COUNT",
                             "CTRUN_HEARTBEAT_FD",
                             "CTRUN_COMM_BACKEND",
                             NULL};
        ct_child_opts_t o = {.env = env};
        memset(&g, 0, sizeof g);
        CT_ASSERT_OK(ct_child_start(&g.child[0], argv, &o));
        g.n = 1;
    } else {
        ct_ranks_opts_t o = {.world = w, .port = store.port, .run_id = dir, .timeout_s = 60};
        CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    }
    int rc = ct_ranks_wait(&g, 120000);
    if (rc != 0)
        ct_ranks_dump(&g);
    CT_ASSERT_EQ(rc, 0);
    CT_ASSERT_STR_CONTAINS(g.child[0].out, expect1);
    CT_ASSERT_STR_CONTAINS(g.child[0].out, expect2);
    ct_ranks_close(&g);
}

static void test_alone(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/alone", root);
    run(1, dir, "2", "1 rank, cpu backend, starting at step 0 of 2", "done, counter 2");
    run(1, dir, "3", "starting at step 2 of 3", "done, counter 3");
}

static void test_ranks(void)
{
    for (int w = 2; w <= 3; w++) {
        char dir[300], first[80], sum[80];
        snprintf(dir, sizeof dir, "%s/w%d", root, w);
        snprintf(first, sizeof first, "%d ranks, cpu backend, starting at step 0 of 3", w);
        snprintf(sum, sizeof sum, "over %d ranks = %d on every element", w, w * (w + 1) / 2);
        run(w, dir, "3", first, sum);
        run(w, dir, "5", "starting at step 3 of 5", "done, counter 5");
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_hello_allreduce PATH_TO_CTRUN_STORE PATH_TO_HELLO\n");
        return 2;
    }
    hello = argv[2];
    snprintf(root, sizeof root, "/tmp/ct_hello.XXXXXX");
    CT_ASSERT(mkdtemp(root) != NULL);
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[1]));
    CT_RUN(test_alone);
    CT_RUN(test_ranks);
    ct_store_proc_stop(&store);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return 0;
}
