/*
 * test_ctrun_e2e_signals.c - signals and orphans, with ctrun (argv[1]) and the test worker
 * (argv[2]): SIGTERM, SIGINT and SIGHUP to ctrun while workers and their own children run are
 * forwarded, nothing of the job survives, and ctrun exits with 128+signal; a second SIGINT
 * kills workers that ignore the first; SIGTERM during the rendezvous exits 143 before any
 * worker starts; SIGKILL of ctrun takes its workers with it (parent-death signal); each worker
 * runs in its own session.
 */
#include "ctrun_e2e.h"

/* Starts a 2-worker job whose workers each start a grandchild and run until killed. */
static void start_tree_job(ct_child_t *c, const char *dir, const char *const *extra)
{
    char port[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *args[48] = {"--nproc_per_node=2",
                            port,
                            "--log_dir=/dev/null",
                            "--no_python",
                            "WORKER",
                            "--dir",
                            dir,
                            "--child",
                            "--sleep-ms",
                            "-1"};
    size_t n = 10;
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    e2e_start(c, NULL, args);
    CT_ASSERT_MSG(e2e_wait_starts(dir, 2, 30000), "workers did not start");
    /* Both grandchildren are recorded before the workers sleep. */
    int64_t deadline = ct_time_ms() + 30000;
    for (;;) {
        char *ch = e2e_read("%s/children", dir);
        int lines = e2e_count(ch, "\n");
        free(ch);
        if (lines >= 2)
            break;
        CT_ASSERT(ct_time_ms() < deadline);
        ct_sleep_ms(10);
    }
}

static void forwarded(int sig, const char *name)
{
    char dir[600];
    e2e_dir(dir, sizeof dir, name);
    ct_child_t c;
    start_tree_job(&c, dir, NULL);
    kill(c.pid, sig);
    CT_ASSERT_OK(ct_child_wait(&c, 60000));
    CT_ASSERT_MSG(c.exit_code == 128 + sig, "%s: exit %d (signal %d):\n%s", name, c.exit_code,
                  c.term_signal, c.err);
    char want[64];
    snprintf(want, sizeof want, "Received %d death signal, shutting down workers", sig);
    CT_ASSERT_STR_CONTAINS(c.err, want);
    CT_ASSERT_MSG(e2e_all_gone(dir, 10000), "%s: something of the job survived", name);
    ct_child_close(&c);
}

static void test_sigterm_forwarded_nothing_survives(void)
{
    forwarded(SIGTERM, "term");
}

static void test_sigint_forwarded(void)
{
    forwarded(SIGINT, "int");
}

static void test_sighup_forwarded(void)
{
    forwarded(SIGHUP, "hup");
}

static void test_second_sigint_kills(void)
{
    char dir[600];
    e2e_dir(dir, sizeof dir, "int2");
    /* The workers and their children ignore SIGINT (2); the grace period is long. */
    const char *const extra[] = {"--ignore", "2", NULL};
    ct_child_t c;
    char port[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *const args[] = {"--nproc_per_node=2",
                                "--grace_period=120",
                                port,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--child",
                                "--sleep-ms",
                                "-1",
                                extra[0],
                                extra[1],
                                NULL};
    e2e_start(&c, NULL, args);
    CT_ASSERT(e2e_wait_starts(dir, 2, 30000));
    kill(c.pid, SIGINT);
    ct_child_poll_output(&c, 500);
    CT_ASSERT(ct_proc_alive(c.pid)); /* still waiting for its workers */
    kill(c.pid, SIGINT);
    CT_ASSERT_OK(ct_child_wait(&c, 30000));
    CT_ASSERT_EQ(c.exit_code, 130);
    CT_ASSERT_STR_CONTAINS(c.err, "again: killing every worker now");
    CT_ASSERT(c.elapsed_ms < 100000);
    ct_child_close(&c);
}

static void test_sigterm_during_rendezvous(void)
{
    char dir[600], port[32];
    e2e_dir(dir, sizeof dir, "rdzv");
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    /* Node 0 of 2 waits for node 1, who never comes. */
    const char *const args[] = {"--nnodes=2",  "--node_rank=0", port,    "--log_dir=/dev/null",
                                "--no_python", "WORKER",        "--dir", dir,
                                NULL};
    ct_child_t c;
    e2e_start(&c, NULL, args);
    ct_sleep_ms(300);
    kill(c.pid, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&c, 30000));
    CT_ASSERT_EQ(c.exit_code, 143);
    CT_ASSERT_EQ(e2e_count_starts(dir, -1), 0);
    ct_child_close(&c);
    /* The same for a node that waits for node 0's store. */
    const char *const args1[] = {"--nnodes=2",  "--node_rank=1", port,    "--log_dir=/dev/null",
                                 "--no_python", "WORKER",        "--dir", dir,
                                 NULL};
    e2e_start(&c, NULL, args1);
    ct_sleep_ms(300);
    kill(c.pid, SIGTERM);
    CT_ASSERT_OK(ct_child_wait(&c, 30000));
    CT_ASSERT_EQ(c.exit_code, 143);
    CT_ASSERT_EQ(e2e_count_starts(dir, -1), 0);
    ct_child_close(&c);
}

static void test_sigkill_takes_workers_along(void)
{
    char dir[600];
    e2e_dir(dir, sizeof dir, "kill9");
    ct_child_t c;
    start_tree_job(&c, dir, NULL);
    kill(c.pid, SIGKILL);
    CT_ASSERT_OK(ct_child_wait(&c, 30000));
    /* The workers die with their agent (PR_SET_PDEATHSIG). Their own children are not the
     * agent's to bound, but the workers must be gone. */
    char *s = e2e_read("%s/starts", dir);
    CT_ASSERT(s != NULL);
    int64_t deadline = ct_time_ms() + 10000;
    for (char *p = s; *p != '\0';) {
        int r, lr, k, pid, pgid;
        CT_ASSERT(sscanf(p, "%d %d %d %d %d", &r, &lr, &k, &pid, &pgid) == 5);
        while (ct_proc_alive(pid) && ct_time_ms() < deadline)
            ct_sleep_ms(10);
        CT_ASSERT_MSG(!ct_proc_alive(pid), "worker %d outlived its agent", pid);
        /* Its own session: pgid = pid. */
        CT_ASSERT_EQ(pgid, pid);
        p = strchr(p, '\n') + 1;
    }
    free(s);
    /* Grandchildren stayed in the worker's group: clean them up for the next tests. */
    char *ch = e2e_read("%s/children", dir);
    for (char *p = ch; p != NULL && *p != '\0';) {
        kill(atoi(p), SIGKILL);
        char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    free(ch);
    ct_child_close(&c);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_signals");
    CT_RUN(test_sigterm_forwarded_nothing_survives);
    CT_RUN(test_sigint_forwarded);
    CT_RUN(test_sighup_forwarded);
    CT_RUN(test_second_sigint_kills);
    CT_RUN(test_sigterm_during_rendezvous);
    CT_RUN(test_sigkill_takes_workers_along);
    return 0;
}
