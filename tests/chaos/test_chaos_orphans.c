/*
 * test_chaos_orphans.c - no process of a job outlives it: workers that start children of their
 * own (in their process group, like a dataloader), one of them killed by an injected fault and
 * the job restarted, then the job succeeding: after ctrun exits, every child of every attempt
 * is gone. With a writable cgroup v2 (ctrun_cgroup.h) the same holds for daemons that left
 * the worker's session and process group, already at the end of the attempt that started them;
 * without one that case is reported as skipped and the rest still runs.
 *
 * argv: CTRUN TEST_WORKER (tests/launcher/ctrun_test_worker.c, which writes D/starts and, for
 * each child, its pid to D/children).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "ct_proc.h"

static const char *worker;

/* pids listed in D/children */
static int read_children(const char *dir, int *pids, int max)
{
    char path[700];
    snprintf(path, sizeof path, "%s/children", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f != NULL && n < max && fscanf(f, "%d", &pids[n]) == 1)
        n++;
    if (f != NULL)
        fclose(f);
    return n;
}

static void assert_children_gone(const char *dir, int want, int64_t ms)
{
    int pids[64];
    int n = read_children(dir, pids, 64);
    CT_ASSERT_EQ(n, want);
    int64_t deadline = ct_time_ms() + ms;
    for (int i = 0; i < n; i++)
        while (ct_proc_alive(pids[i])) {
            CT_ASSERT_MSG(ct_time_ms() < deadline, "child %d (%d of %d) survived", pids[i], i + 1,
                          n);
            ct_sleep_ms(20);
        }
}

static void test_children_after_kill_restart_and_success(void)
{
    char dir[600];
    chaos_dir(dir, sizeof dir, "children");
    const char *args[] = {"--standalone",
                          "--nproc_per_node=2",
                          "--max_restarts=1",
                          "--inject",
                          "kill:rank=0:at=time=1500ms",
                          "CTRAIN",
                          "--dir",
                          dir,
                          "--child",
                          "--sleep-ms",
                          "4000",
                          NULL};
    ct_child_t c;
    chaos_run(&c, "orphans-children", NULL, 120000, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%.1500s", c.exit_code, chaos_tail(&c));
    CT_ASSERT_STR_CONTAINS(c.err, "injected kill (spec 1)");
    ct_child_close(&c);
    assert_children_gone(dir, 4, 5000); /* 2 workers x 2 attempts */
    chaos_assert_no_survivors("orphans-children", 5000);
}

static void test_daemons_need_the_cgroup(void)
{
    char dir[600];
    chaos_dir(dir, sizeof dir, "daemons");
    const char *env[] = {"CT_LOG_LEVEL=debug", NULL};
    const char *args[] = {"--standalone",
                          "--nproc_per_node=1",
                          "--max_restarts=1",
                          "--inject",
                          "kill:rank=0:at=time=1500ms",
                          "CTRAIN",
                          "--dir",
                          dir,
                          "--daemon",
                          "--sleep-ms",
                          "4000",
                          NULL};
    char *argv[32];
    size_t n = 0;
    argv[n++] = (char *)chaos_ctrun;
    for (size_t i = 0; args[i] != NULL; i++)
        argv[n++] = (char *)(strcmp(args[i], "CTRAIN") == 0 ? worker : args[i]);
    argv[n] = NULL;
    const char *envs[] = {"CT_CHAOS_TAG=orphans-daemons", env[0], NULL};
    ct_child_opts_t opts = {.env = envs};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, argv, &opts));
    /* While attempt 1 runs, attempt 0's daemon is already gone. */
    int pids[8];
    int64_t deadline = ct_time_ms() + 60000;
    while (read_children(dir, pids, 8) < 2 && ct_time_ms() < deadline && !ct_child_exited(&c))
        ct_sleep_ms(20);
    ct_child_poll_output(&c, 10);
    bool cgroup = c.err != NULL && strstr(c.err, "workers run in the cgroup") != NULL;
    if (cgroup) {
        CT_ASSERT_EQ(read_children(dir, pids, 8), 2);
        int64_t d2 = ct_time_ms() + 5000;
        while (ct_proc_alive(pids[0]) && ct_time_ms() < d2)
            ct_sleep_ms(20);
        CT_ASSERT_MSG(!ct_proc_alive(pids[0]), "attempt 0's daemon %d outlived its attempt",
                      pids[0]);
    }
    CT_ASSERT_OK(ct_child_wait(&c, 60000));
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%.1500s", c.exit_code, chaos_tail(&c));
    bool saw_cgroup = strstr(c.err, "workers run in the cgroup") != NULL;
    ct_child_close(&c);
    if (!saw_cgroup) {
        /* Daemons escape process groups by design; without a cgroup nothing can find them. */
        int k = read_children(dir, pids, 8);
        for (int i = 0; i < k; i++)
            kill(pids[i], SIGKILL);
        printf("# skip: no writable cgroup v2 here, so daemons of a job are not tracked\n");
        return;
    }
    assert_children_gone(dir, 2, 5000);
    chaos_assert_no_survivors("orphans-daemons", 5000);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_orphans");
    worker = chaos_ctrain; /* argv[2] is the test worker here */
    CT_RUN(test_children_after_kill_restart_and_success);
    CT_RUN(test_daemons_need_the_cgroup);
    return 0;
}
