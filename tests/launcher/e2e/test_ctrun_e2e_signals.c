/*
 * test_ctrun_e2e_signals.c - signals and orphans, with ctrun (argv[1]) and the test worker
 * (argv[2]): SIGTERM, SIGINT and SIGHUP to ctrun while workers and their own children run are
 * forwarded, nothing of the job survives, and ctrun exits with 128+signal; a second SIGINT
 * kills workers that ignore the first; SIGTERM during the rendezvous exits 143 before any
 * worker starts; SIGKILL of ctrun leaves nothing of its job 1 s later - workers, children in
 * their groups, double-forked setsid daemons - with the job's cgroup and without (the reaper),
 * spares a process that is not the job's, and the reaper exits then, as after a normal end.
 */
#include <sys/wait.h>

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

/* The number in ctrun's debug line "<prefix><number>", or -1. */
static int logged_number(const char *err, const char *prefix)
{
    const char *p = err != NULL ? strstr(err, prefix) : NULL;
    return p != NULL ? atoi(p + strlen(prefix)) : -1;
}

/* The cgroup folder of ctrun's debug line "workers run in the cgroup <path>", or "". */
static void logged_cgroup(const char *err, char *buf, size_t size)
{
    buf[0] = '\0';
    const char *p = err != NULL ? strstr(err, "workers run in the cgroup ") : NULL;
    if (p != NULL) {
        p += strlen("workers run in the cgroup ");
        snprintf(buf, size, "%.*s", (int)strcspn(p, "\n"), p);
    }
}

static bool wait_dead(pid_t pid, int64_t ms)
{
    int64_t deadline = ct_time_ms() + ms;
    while (ct_proc_alive(pid)) {
        if (ct_time_ms() > deadline)
            return false;
        ct_sleep_ms(10);
    }
    return true;
}

/* SIGKILL of ctrun whose two workers each started a child in their group and a double-forked
 * setsid daemon: 1 s later nothing of the job is left (the reaper emptied the cgroup, or
 * without one killed the workers' groups and the tagged daemons), the reaper has exited and
 * the cgroup folder is gone. A process outside the job that carries another job's tag is
 * left alone. */
static void sigkill_leaves_nothing(const char *name, bool cgroup)
{
    char dir[600];
    e2e_dir(dir, sizeof dir, name);
    /* Not the job's: it mimics another job's worker, with that job's tag. */
    pid_t bystander = fork();
    if (bystander == 0) {
        setenv("CTRUN_JOB_TAG", "00000000000000000000000000000000", 1);
        execl("/bin/sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    CT_ASSERT(bystander > 0);
    char port[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *const args[] = {"--nproc_per_node=2",
                                port,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--child",
                                "--daemonize",
                                "--sleep-ms",
                                "-1",
                                NULL};
    const char *const env_on[] = {"CT_LOG_LEVEL=debug", NULL};
    const char *const env_off[] = {"CT_LOG_LEVEL=debug", "CTRUN_CGROUP=off", NULL};
    ct_child_t c;
    e2e_start(&c, cgroup ? env_on : env_off, args);
    CT_ASSERT_MSG(e2e_wait_starts(dir, 2, 30000), "workers did not start");
    int64_t deadline = ct_time_ms() + 30000;
    for (;;) { /* 2 children and 2 daemons recorded */
        char *ch = e2e_read("%s/children", dir);
        int lines = e2e_count(ch, "\n");
        free(ch);
        if (lines >= 4)
            break;
        CT_ASSERT(ct_time_ms() < deadline);
        ct_sleep_ms(10);
    }
    ct_child_poll_output(&c, 50);
    int reaper = logged_number(c.err, "debug: reaper ");
    char cg[600];
    logged_cgroup(c.err, cg, sizeof cg);
    if (cgroup && cg[0] == '\0')
        printf("# %s: no writable cgroup v2 here; the reaper works without one\n", name);
    kill(c.pid, SIGKILL);
    CT_ASSERT_OK(ct_child_wait(&c, 30000));
    CT_ASSERT_MSG(e2e_all_gone(dir, 1000), "%s: something of the job outlived ctrun by 1 s", name);
    CT_ASSERT_MSG(reaper > 0, "no reaper in the log:\n%s", c.err);
    CT_ASSERT_MSG(wait_dead(reaper, 2000), "%s: the reaper %d did not exit", name, reaper);
    if (cg[0] != '\0')
        CT_ASSERT_MSG(!e2e_exists("%s", cg), "%s: the cgroup %s is still there", name, cg);
    CT_ASSERT_STR_CONTAINS(c.err, "ended without stopping its job");
    CT_ASSERT_MSG(ct_proc_alive(bystander), "%s: a process outside the job was killed", name);
    kill(bystander, SIGKILL);
    waitpid(bystander, NULL, 0);
    ct_child_close(&c);
}

static void test_sigkill_leaves_nothing(void)
{
    sigkill_leaves_nothing("kill9", true);
}

static void test_sigkill_leaves_nothing_without_cgroup(void)
{
    sigkill_leaves_nothing("kill9-nocg", false);
}

/* After a normal end the reaper exits too, quietly. */
static void test_reaper_exits_with_the_job(void)
{
    char dir[600];
    e2e_dir(dir, sizeof dir, "reaper-end");
    const char *const args[] = {"--standalone",
                                "--nproc_per_node=2",
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--sleep-ms",
                                "100",
                                NULL};
    const char *const env[] = {"CT_LOG_LEVEL=debug", NULL};
    ct_child_t c;
    e2e_run(&c, env, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    int reaper = logged_number(c.err, "debug: reaper ");
    CT_ASSERT_MSG(reaper > 0, "no reaper in the log:\n%s", c.err);
    CT_ASSERT_MSG(wait_dead(reaper, 2000), "the reaper %d outlived its job", reaper);
    CT_ASSERT(strstr(c.err, "ended without stopping its job") == NULL);
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
    CT_RUN(test_sigkill_leaves_nothing);
    CT_RUN(test_sigkill_leaves_nothing_without_cgroup);
    CT_RUN(test_reaper_exits_with_the_job);
    return 0;
}
