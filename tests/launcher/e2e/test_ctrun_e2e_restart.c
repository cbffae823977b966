/*
 * test_ctrun_e2e_restart.c - failures, restarts and the failure report, with ctrun (argv[1])
 * and the test worker (argv[2]): a worker failing only in attempt 0 is restarted and the job
 * succeeds with TORCHELASTIC_RESTART_COUNT 1 and attempt_1 paths (also when ctrun has no
 * stdin); a worker failing every time runs max_restarts+1 times, then the report and exit 1; a
 * SIGSEGV is named; an error file's message and traceback reach the report and the launcher's own
 * TORCHELASTIC_ERROR_FILE; an unstartable program is reported at spawn time; on two nodes a failure
 * on node 1 restarts the whole job and both nodes print the same root cause; the heartbeat watchdog
 * and the SIGKILL after the grace period.
 */
#include "ctrun_e2e.h"

static void port_arg(char *buf, size_t size)
{
    snprintf(buf, size, "--master_port=%d", e2e_free_port());
}

static void test_fail_once_then_succeed(void)
{
    char dir[600], logs[600], port[32];
    e2e_dir(dir, sizeof dir, "once");
    e2e_dir(logs, sizeof logs, "once_logs");
    port_arg(port, sizeof port);
    const char *const env[] = {"LOGLEVEL=INFO", "CT_LOG_LEVEL", NULL};
    const char *const args[] = {"--nproc_per_node=2",
                                "--max_restarts=2",
                                port,
                                "--log_dir",
                                logs,
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--when-attempt",
                                "0",
                                "--when-rank",
                                "1",
                                "--exit",
                                "3",
                                "--sleep-ms",
                                "100",
                                NULL};
    ct_child_t c;
    e2e_run(&c, env, args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    CT_ASSERT_EQ(e2e_count_starts(dir, 0), 2);
    CT_ASSERT_EQ(e2e_count_starts(dir, 1), 2);
    CT_ASSERT_EQ(e2e_count_starts(dir, 2), 0);
    char *dump = e2e_read("%s/env.1.1", dir);
    CT_ASSERT(dump != NULL);
    E2E_ENV_EQ(dump, "TORCHELASTIC_RESTART_COUNT", "1");
    E2E_ENV_EQ(dump, "TORCHELASTIC_MAX_RESTARTS", "2");
    char ef[4096];
    CT_ASSERT(e2e_env_get(dump, "TORCHELASTIC_ERROR_FILE", ef, sizeof ef) != NULL);
    CT_ASSERT_STR_CONTAINS(ef, "/attempt_1/1/error.json");
    free(dump);
    CT_ASSERT_STR_CONTAINS(c.err, "failed (exitcode: 3) local_rank: 1 (pid: ");
    CT_ASSERT_STR_CONTAINS(c.err, "closing signal SIGTERM");
    CT_ASSERT_STR_CONTAINS(c.err, "[default] Worker group FAILED. 2/2 attempts left; will restart "
                                  "worker group");
    CT_ASSERT_STR_CONTAINS(c.err, "restart_count=1");
    CT_ASSERT_STR_NOT_CONTAINS(c.err, "FAILED\n---");
    ct_child_close(&c);
}

/* ctrun started with stdin closed (a cron job, `ctrun ... <&-`): a restart still works (the
 * first pipe it made used to be fd 0, which libuv refuses to close: an abort). */
static void test_restart_without_stdin(void)
{
    char dir[600], port[32];
    e2e_dir(dir, sizeof dir, "nostdin");
    port_arg(port, sizeof port);
    char *argv[] = {"/bin/sh",
                    "-c",
                    "exec \"$0\" \"$@\" <&-",
                    (char *)e2e_ctrun,
                    "--nproc_per_node=2",
                    "--max_restarts=1",
                    port,
                    "--log_dir=/dev/null",
                    "--no_python",
                    (char *)e2e_worker,
                    "--dir",
                    dir,
                    "--when-attempt",
                    "0",
                    "--when-rank",
                    "1",
                    "--exit",
                    "3",
                    NULL};
    ct_child_t c;
    ct_child_opts_t opts = {0};
    CT_ASSERT_OK(ct_child_start(&c, argv, &opts));
    CT_ASSERT_OK(ct_child_wait(&c, 60000));
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%s", c.exit_code, c.err);
    CT_ASSERT_EQ(e2e_count_starts(dir, 1), 2);
    ct_child_close(&c);
}

static void test_always_failing(void)
{
    char dir[600], port[32];
    e2e_dir(dir, sizeof dir, "always");
    port_arg(port, sizeof port);
    const char *const args[] = {"--nproc_per_node=2",
                                "--max_restarts=2",
                                port,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--when-rank",
                                "1",
                                "--delay-ms",
                                "200",
                                "--exit",
                                "3",
                                "--sleep-ms",
                                "-1",
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    for (int k = 0; k < 3; k++)
        CT_ASSERT_EQ(e2e_count_starts(dir, k), 2);
    CT_ASSERT_EQ(e2e_count_starts(dir, 3), 0);
    /* torchrun's summary: the title, no other failures, the root cause with its fields. */
    char title[700];
    snprintf(title, sizeof title, "=\n%s FAILED\n-", e2e_worker);
    CT_ASSERT_STR_CONTAINS(c.err, title);
    CT_ASSERT_STR_CONTAINS(c.err, "Failures:\n  <NO_OTHER_FAILURES>\n");
    CT_ASSERT_STR_CONTAINS(c.err, "Root Cause (first observed failure):\n[0]:\n  time      : ");
    CT_ASSERT_STR_CONTAINS(c.err, "  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: ");
    CT_ASSERT_STR_CONTAINS(c.err, "  error_file: <N/A>\n  traceback : To enable traceback see: "
                                  "https://pytorch.org/docs/stable/elastic/errors.html\n");
    CT_ASSERT(e2e_all_gone(dir, 10000));
    ct_child_close(&c);
}

static void test_sigsegv_is_named(void)
{
    char dir[600], port[32];
    e2e_dir(dir, sizeof dir, "segv");
    port_arg(port, sizeof port);
    const char *const args[] = {"--nproc_per_node=2",
                                port,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--when-rank",
                                "0",
                                "--signal",
                                "11",
                                "--sleep-ms",
                                "-1",
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "failed (exitcode: -11) local_rank: 0");
    CT_ASSERT_STR_CONTAINS(c.err, "  exitcode  : -11 (pid: ");
    CT_ASSERT_STR_CONTAINS(c.err, "  traceback : Signal 11 (SIGSEGV) received by PID ");
    ct_child_close(&c);
}

static void test_error_file_reaches_the_report(void)
{
    char dir[600], logs[600], port[32], parent_env[700];
    e2e_dir(dir, sizeof dir, "errfile");
    e2e_dir(logs, sizeof logs, "errfile_logs");
    port_arg(port, sizeof port);
    snprintf(parent_env, sizeof parent_env, "TORCHELASTIC_ERROR_FILE=%s/parent.json", dir);
    const char *const env[] = {parent_env, NULL};
    const char *const args[] = {"--nproc_per_node=1",
                                port,
                                "--log_dir",
                                logs,
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--errfile",
                                "ValueError: bad batch",
                                "--exit",
                                "7",
                                NULL};
    ct_child_t c;
    e2e_run(&c, env, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "  exitcode  : 7 (pid: ");
    CT_ASSERT_STR_CONTAINS(c.err, "/attempt_0/0/error.json\n");
    CT_ASSERT_STR_CONTAINS(c.err, "  traceback : Traceback (most recent call last):\n"
                                  "    File \"w.py\", line 1\n");
    /* The launcher's own error file: the worker's, with errorCode added. */
    char *parent = e2e_read("%s/parent.json", dir);
    CT_ASSERT_MSG(parent != NULL, "no launcher error file");
    CT_ASSERT_STR_CONTAINS(parent, "ValueError: bad batch");
    CT_ASSERT_STR_CONTAINS(parent, "\"errorCode\": 7");
    free(parent);
    ct_child_close(&c);
}

static void test_unstartable_program(void)
{
    char port[32];
    port_arg(port, sizeof port);
    const char *const args[] = {
        "--nproc_per_node=2", "--max_restarts=1",  port, "--log_dir=/dev/null",
        "--no_python",        "/nonexistent/prog", NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "cannot start local rank 0: /nonexistent/prog: No such file or "
                                  "directory\n");
    CT_ASSERT_STR_CONTAINS(c.err, "  traceback : could not start: /nonexistent/prog: No such "
                                  "file or directory\n");
    ct_child_close(&c);
    const char *const args2[] = {"--nproc_per_node=1",       port,
                                 "--log_dir=/dev/null",      "--no_python",
                                 "no-such-program-anywhere", NULL};
    e2e_run(&c, NULL, args2);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "no-such-program-anywhere: not found in PATH");
    ct_child_close(&c);
}

static void test_two_nodes_restart_together(void)
{
    char d0[600], d1[600], port[32];
    e2e_dir(d0, sizeof d0, "mn0");
    e2e_dir(d1, sizeof d1, "mn1");
    port_arg(port, sizeof port);
    /* Rank 2 (node 1) fails in attempt 0; node 0's workers would run for a minute. */
    ct_child_t c0, c1;
    const char *const a0[] = {"--nnodes=2",
                              "--node_rank=0",
                              "--nproc_per_node=2",
                              "--max_restarts=1",
                              port,
                              "--log_dir=/dev/null",
                              "--no_python",
                              "WORKER",
                              "--dir",
                              d0,
                              "--when-attempt",
                              "1",
                              "--exit",
                              "0",
                              "--sleep-ms",
                              "60000",
                              NULL};
    const char *const a1[] = {"--nnodes=2",
                              "--node_rank=1",
                              "--nproc_per_node=2",
                              "--max_restarts=1",
                              port,
                              "--log_dir=/dev/null",
                              "--no_python",
                              "WORKER",
                              "--dir",
                              d1,
                              "--when-attempt",
                              "0",
                              "--when-rank",
                              "2",
                              "--delay-ms",
                              "200",
                              "--exit",
                              "9",
                              "--sleep-ms",
                              "100",
                              NULL};
    e2e_start(&c0, NULL, a0);
    e2e_start(&c1, NULL, a1);
    CT_ASSERT_OK(ct_child_wait(&c0, 60000));
    CT_ASSERT_OK(ct_child_wait(&c1, 60000));
    /* Node 0's attempt-0 workers sleep 60 s unless stopped, so a node 0 done early was stopped
     * by node 1's failure; in attempt 1 they exit 0 at once. */
    CT_ASSERT_MSG(c0.exit_code == 0, "node 0 exit %d:\n%s", c0.exit_code, c0.err);
    CT_ASSERT_MSG(c1.exit_code == 0, "node 1 exit %d:\n%s", c1.exit_code, c1.err);
    CT_ASSERT_EQ(e2e_count_starts(d0, 0), 2);
    CT_ASSERT_EQ(e2e_count_starts(d0, 1), 2);
    CT_ASSERT_EQ(e2e_count_starts(d1, 0), 2);
    CT_ASSERT_EQ(e2e_count_starts(d1, 1), 2);
    CT_ASSERT_STR_CONTAINS(c0.err, "attempt 0 failed on node 1");
    CT_ASSERT_STR_CONTAINS(c1.err, "failed (exitcode: 9) local_rank: 0");
    CT_ASSERT(c0.elapsed_ms < 30000);
    ct_child_close(&c0);
    ct_child_close(&c1);
}

static void test_two_nodes_final_failure(void)
{
    char d0[600], d1[600], port[32];
    e2e_dir(d0, sizeof d0, "mnf0");
    e2e_dir(d1, sizeof d1, "mnf1");
    port_arg(port, sizeof port);
    ct_child_t c0, c1;
    const char *const a0[] = {"--nnodes=2",
                              "--node_rank=0",
                              "--nproc_per_node=1",
                              port,
                              "--log_dir=/dev/null",
                              "--no_python",
                              "WORKER",
                              "--dir",
                              d0,
                              "--sleep-ms",
                              "-1",
                              NULL};
    const char *const a1[] = {"--nnodes=2",
                              "--node_rank=1",
                              "--nproc_per_node=1",
                              port,
                              "--log_dir=/dev/null",
                              "--no_python",
                              "WORKER",
                              "--dir",
                              d1,
                              "--delay-ms",
                              "100",
                              "--exit",
                              "5",
                              NULL};
    e2e_start(&c0, NULL, a0);
    e2e_start(&c1, NULL, a1);
    CT_ASSERT_OK(ct_child_wait(&c0, 60000));
    CT_ASSERT_OK(ct_child_wait(&c1, 60000));
    CT_ASSERT_EQ(c0.exit_code, 1);
    CT_ASSERT_EQ(c1.exit_code, 1);
    /* Both nodes name the same root cause: rank 1 on node 1, exit 5. */
    for (int i = 0; i < 2; i++) {
        const char *err = i ? c1.err : c0.err;
        CT_ASSERT_STR_CONTAINS(err, "  rank      : 1 (local_rank: 0)\n  exitcode  : 5 (pid: ");
        CT_ASSERT_STR_CONTAINS(err, "Failures:\n  <NO_OTHER_FAILURES>\n");
    }
    CT_ASSERT(e2e_all_gone(d0, 10000));
    ct_child_close(&c0);
    ct_child_close(&c1);
}

static void test_watchdog(void)
{
    char dir[600], port[32];
    e2e_dir(dir, sizeof dir, "watchdog");
    port_arg(port, sizeof port);
    const char *const args[] = {"--nproc_per_node=2",
                                "--watchdog_timeout=1",
                                port,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--heartbeat",
                                "5",
                                "--sleep-ms",
                                "-1",
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "watchdog: no progress for 1 s (last heartbeat at step 5)");
    CT_ASSERT(e2e_all_gone(dir, 10000));
    ct_child_close(&c);
}

static void test_sigkill_after_grace_period(void)
{
    char dir[600], port[32];
    e2e_dir(dir, sizeof dir, "grace");
    port_arg(port, sizeof port);
    /* Rank 0 ignores SIGTERM (15); rank 1 fails. */
    const char *const args[] = {"--nproc_per_node=2",
                                "--grace_period=1",
                                port,
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                "--ignore",
                                "15",
                                "--when-rank",
                                "1",
                                "--delay-ms",
                                "100",
                                "--exit",
                                "2",
                                "--sleep-ms",
                                "-1",
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "Unable to shutdown process ");
    CT_ASSERT_STR_CONTAINS(c.err, "forcefully exiting via SIGKILL");
    CT_ASSERT(c.elapsed_ms >= 1000);
    CT_ASSERT(e2e_all_gone(dir, 10000));
    ct_child_close(&c);
}

static void test_rendezvous_timeout(void)
{
    /* A node alone in a two-node job gives up after the rendezvous timeout, with the reason. */
    char dir[600], ep[64], port[32];
    e2e_dir(dir, sizeof dir, "rdzv_timeout");
    snprintf(ep, sizeof ep, "--rdzv_endpoint=127.0.0.1:%d", e2e_free_port());
    const char *const args[] = {"--rdzv_backend=c10d",
                                ep,
                                "--nnodes=2",
                                "--rdzv_conf=join_timeout=1",
                                "--log_dir=/dev/null",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                dir,
                                NULL};
    ct_child_t c;
    e2e_run(&c, NULL, args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "rendezvous of attempt 0 timed out after 1 s: not all 2 nodes "
                                  "joined");
    CT_ASSERT_STR_CONTAINS(c.err, "--rdzv_conf join_timeout=SECONDS");
    CT_ASSERT_EQ(e2e_count_starts(dir, -1), 0);
    ct_child_close(&c);
    /* A static node 1 whose node 0 never comes (its connection attempts are refused). */
    port_arg(port, sizeof port);
    const char *const args1[] = {"--nnodes=2",
                                 "--node_rank=1",
                                 port,
                                 "--rdzv_conf=timeout=1",
                                 "--log_dir=/dev/null",
                                 "--no_python",
                                 "WORKER",
                                 "--dir",
                                 dir,
                                 NULL};
    e2e_run(&c, NULL, args1);
    CT_ASSERT_EQ(c.exit_code, 1);
    /* Whichever ends first: the rendezvous timer, or the connection attempts' deadline. */
    CT_ASSERT_MSG(strstr(c.err, "rendezvous of attempt 0 timed out") != NULL ||
                      strstr(c.err, "store 127.0.0.1:") != NULL,
                  "stderr: %s", c.err);
    CT_ASSERT_EQ(e2e_count_starts(dir, -1), 0);
    ct_child_close(&c);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_restart");
    CT_RUN(test_fail_once_then_succeed);
    CT_RUN(test_restart_without_stdin);
    CT_RUN(test_always_failing);
    CT_RUN(test_sigsegv_is_named);
    CT_RUN(test_error_file_reaches_the_report);
    CT_RUN(test_unstartable_program);
    CT_RUN(test_two_nodes_restart_together);
    CT_RUN(test_two_nodes_final_failure);
    CT_RUN(test_watchdog);
    CT_RUN(test_sigkill_after_grace_period);
    CT_RUN(test_rendezvous_timeout);
    return 0;
}
