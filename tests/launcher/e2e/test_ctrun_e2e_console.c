/*
 * test_ctrun_e2e_console.c - ctrun (argv[1]) whose console reader stops reading, with the test
 * worker (argv[2]) flooding stdout: the test leaves ctrun's stdout and stderr pipes unread for
 * seconds. A failing rank must still stop the flooding rank within the grace period, a SIGTERM
 * to ctrun must still reach the workers at once, and a node whose console is stalled must keep
 * its heartbeats (its job succeeds); the log file keeps every line, the console shows whole
 * lines only and says that lines were dropped.
 */
#include "ctrun_e2e.h"

/* The worker's lines as a log file must hold them: "flood 0", "flood 1", ... every one, in
 * order, each whole (the last one too: a worker writes whole batches). Returns the count. */
static long check_file_complete(const char *text)
{
    CT_ASSERT(text != NULL);
    long want = 0;
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        CT_ASSERT_MSG(nl != NULL, "log file ends inside a line after %ld lines", want);
        long got = -1;
        int used = 0;
        CT_ASSERT_MSG(sscanf(p, "flood %ld%n", &got, &used) == 1 && p + used == nl,
                      "log file line %ld is \"%.*s\"", want, (int)(nl - p), p);
        CT_ASSERT_MSG(got == want, "log file: line %ld is flood %ld (a line is missing)", want,
                      got);
        want++;
        p = nl + 1;
    }
    return want;
}

/* Console lines from prefix: only whole "<prefix>flood N" lines, N increasing (lines may be
 * missing, never cut); other lines (ctrun's own) are skipped. Returns how many there were. */
static long check_console_whole(const char *text, const char *prefix)
{
    long n = 0, last = -1;
    size_t plen = strlen(prefix);
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        CT_ASSERT_MSG(nl != NULL, "console output ends inside a line");
        if (strncmp(p, prefix, plen) == 0) {
            long got = -1;
            int used = 0;
            CT_ASSERT_MSG(sscanf(p + plen, "flood %ld%n", &got, &used) == 1 &&
                              p + plen + used == nl,
                          "console line \"%.*s\" is not whole", (int)(nl - p), p);
            CT_ASSERT_MSG(got > last, "console: flood %ld after flood %ld", got, last);
            last = got;
            n++;
        }
        p = nl + 1;
    }
    return n;
}

/* Rank 1 fails after 1 s while rank 0 floods a console nobody reads: rank 0 gets its SIGTERM
 * then, not when the reader comes back. */
static void test_failure_stops_flooder_while_console_stalls(void)
{
    char d[600], logs[600], logs_arg[700], port[32], rd[1200];
    e2e_dir(d, sizeof d, "fail");
    e2e_dir(logs, sizeof logs, "fail_logs");
    snprintf(logs_arg, sizeof logs_arg, "--log_dir=%s", logs);
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *const env[] = {"CTRUN_CONSOLE_BUFFER=64K", NULL};
    const char *const args[] = {"--nproc_per_node=2",
                                "--grace_period=3",
                                port,
                                logs_arg,
                                "--tee=1",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                d,
                                "--flood",
                                "--sleep-ms",
                                "-1",
                                "--when-rank",
                                "1",
                                "--delay-ms",
                                "1000",
                                "--exit",
                                "1",
                                NULL};
    ct_child_t c;
    e2e_start(&c, env, args);
    /* Nothing reads ctrun's output from here until both workers are gone. */
    CT_ASSERT_MSG(e2e_wait_starts(d, 2, 30000), "the workers did not start");
    int64_t t0 = ct_time_ms();
    /* Rank 1 exits at 1 s; rank 0 dies at its SIGTERM (it does not ignore it): both are gone
     * well within 1 s + the 3 s grace period, however loaded the machine. */
    bool gone = e2e_all_gone(d, 6000);
    CT_ASSERT_MSG(gone,
                  "rank 0 still runs %lld ms after the start: ctrun did not stop it while "
                  "its console was not read",
                  (long long)(ct_time_ms() - t0));
    CT_ASSERT_OK(ct_child_wait(&c, 60000));
    CT_ASSERT_MSG(c.exit_code == 1, "exit %d:\n%.2000s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "local_rank: 1");
    CT_ASSERT_STR_CONTAINS(c.err, "[ctrun] warn: the stdout reader is too slow: dropping stdout "
                                  "lines until it catches up");
    CT_ASSERT_STR_CONTAINS(c.err, "[ctrun] warn: the stdout reader was too slow: ");
    /* The file has every line; the console a part of them, each whole. */
    e2e_run_dir(logs, rd, sizeof rd);
    char *file = e2e_read("%s/attempt_0/0/stdout.log", rd);
    long in_file = check_file_complete(file);
    long on_console = check_console_whole(c.out, "[default0]:");
    CT_ASSERT_MSG(on_console < in_file, "console %ld lines, file %ld: nothing was dropped",
                  on_console, in_file);
    CT_ASSERT_GT(on_console, 0);
    free(file);
    ct_child_close(&c);
}

/* A SIGTERM to ctrun while its console is stalled reaches the workers at once. */
static void test_sigterm_acted_on_while_console_stalls(void)
{
    char d[600], port[32];
    e2e_dir(d, sizeof d, "term");
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    const char *const env[] = {"CTRUN_CONSOLE_BUFFER=64K", NULL};
    const char *const args[] = {"--nproc_per_node=2",
                                port,
                                "--log_dir=/dev/null",
                                "--tee=1",
                                "--no_python",
                                "WORKER",
                                "--dir",
                                d,
                                "--flood",
                                "--sleep-ms",
                                "-1",
                                NULL};
    ct_child_t c;
    e2e_start(&c, env, args);
    CT_ASSERT_MSG(e2e_wait_starts(d, 2, 30000), "the workers did not start");
    ct_sleep_ms(1500); /* the pipe and the console queue are full by now */
    int64_t t0 = ct_time_ms();
    kill(c.pid, SIGTERM);
    bool gone = e2e_all_gone(d, 3000);
    CT_ASSERT_MSG(gone, "workers still run %lld ms after SIGTERM to ctrun",
                  (long long)(ct_time_ms() - t0));
    CT_ASSERT_OK(ct_child_wait(&c, 60000));
    CT_ASSERT_MSG(c.exit_code == 143, "exit %d:\n%.2000s", c.exit_code, c.err);
    CT_ASSERT_STR_CONTAINS(c.err, "dropping stdout lines");
    CT_ASSERT_GT(check_console_whole(c.out, "[default0]:"), 0);
    CT_ASSERT_GT(check_console_whole(c.out, "[default1]:"), 0);
    ct_child_close(&c);
}

/* Two nodes; nobody reads node 1's console while both flood for 5 s. Node 1 keeps heartbeating
 * (a 2 s timeout here), so the job succeeds instead of losing node 1. */
static void test_stalled_node_keeps_heartbeating(void)
{
    char d[2][600], port[32], rank[32];
    snprintf(port, sizeof port, "--master_port=%d", e2e_free_port());
    e2e_dir(d[0], sizeof d[0], "hb0");
    e2e_dir(d[1], sizeof d[1], "hb1");
    const char *const env[] = {"CTRUN_CONSOLE_BUFFER=64K", NULL};
    ct_child_t c[2];
    for (int i = 0; i < 2; i++) {
        snprintf(rank, sizeof rank, "--node_rank=%d", i);
        const char *const args[] = {"--nnodes=2",
                                    rank,
                                    port,
                                    "--rdzv_conf=heartbeat_timeout=2,keep_alive_interval=0.5",
                                    "--log_dir=/dev/null",
                                    "--no_python",
                                    "WORKER",
                                    "--dir",
                                    d[i],
                                    "--flood",
                                    "--sleep-ms",
                                    "5000",
                                    NULL};
        e2e_start(&c[i], env, args);
    }
    /* Node 0 is read as usual; node 1 not at all until node 0 is done. */
    CT_ASSERT_OK(ct_child_wait(&c[0], 60000));
    CT_ASSERT_MSG(c[0].exit_code == 0, "node 0 exit %d:\n%.1500s", c[0].exit_code, c[0].err);
    CT_ASSERT_STR_NOT_CONTAINS(c[0].err, "was lost");
    CT_ASSERT_OK(ct_child_wait(&c[1], 60000));
    CT_ASSERT_MSG(c[1].exit_code == 0, "node 1 exit %d:\n%.1500s", c[1].exit_code, c[1].err);
    CT_ASSERT_STR_CONTAINS(c[1].err, "dropping stdout lines");
    CT_ASSERT(e2e_all_gone(d[0], 10000));
    CT_ASSERT(e2e_all_gone(d[1], 10000));
    ct_child_close(&c[0]);
    ct_child_close(&c[1]);
}

int main(int argc, char **argv)
{
    e2e_init(argc, argv, "test_ctrun_e2e_console");
    CT_RUN(test_failure_stops_flooder_while_console_stalls);
    CT_RUN(test_sigterm_acted_on_while_console_stalls);
    CT_RUN(test_stalled_node_keeps_heartbeating);
    return 0;
}
