/*
 * test_ct_child.c - the test helper that runs programs: output capture, exit codes and
 * signals, environment changes, exec failures reported at start, and a deadline that kills
 * the whole process group, grandchildren included.
 */
#include <errno.h>
#include <signal.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ct_time.h"

static void test_capture_and_exit_code(void)
{
    ct_child_t c;
    char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 10000));
    CT_ASSERT_STR_EQ(c.out, "out\n");
    CT_ASSERT_STR_EQ(c.err, "err\n");
    CT_ASSERT_EQ(c.exit_code, 3);
    CT_ASSERT_EQ(c.term_signal, 0);
    CT_ASSERT(!c.timed_out);
    ct_child_close(&c);
    ct_child_close(&c); /* twice is allowed */
}

static void test_signal_and_env_and_stdin(void)
{
    ct_child_t c;
    char *argv[] = {"sh", "-c", "kill -SEGV $$", NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv, NULL, 10000));
    CT_ASSERT_EQ(c.exit_code, -1);
    CT_ASSERT_EQ(c.term_signal, SIGSEGV);
    ct_child_close(&c);

    setenv("CT_CHILD_GONE", "1", 1);
    const char *env[] = {"CT_CHILD_A=hello", "CT_CHILD_GONE", NULL};
    ct_child_opts_t opts = {.env = env, .stdin_text = "typed\n", .cwd = "/"};
    char *argv2[] = {"sh", "-c", "read x; echo \"$CT_CHILD_A ${CT_CHILD_GONE-unset} $x $(pwd)\"",
                     NULL};
    CT_ASSERT_OK(ct_child_run(&c, argv2, &opts, 10000));
    CT_ASSERT_STR_EQ(c.out, "hello unset typed /\n");
    CT_ASSERT_EQ(c.exit_code, 0);
    ct_child_close(&c);
}

static void test_exec_failure_is_reported_at_start(void)
{
    ct_child_t c;
    char *argv[] = {"/nonexistent/program", NULL};
    CT_ASSERT_EQ(ct_child_run(&c, argv, NULL, 10000), -ENOENT);
    ct_child_close(&c);
}

static void test_deadline_kills_the_group(void)
{
    ct_child_t c;
    /* The shell starts a grandchild that would outlive it; the group kill must take both. */
    char *argv[] = {"sh", "-c", "sleep 60 & echo started; wait", NULL};
    int64_t t0 = ct_time_ms();
    CT_ASSERT_ERR(ct_child_run(&c, argv, NULL, 300), -ETIMEDOUT);
    CT_ASSERT(c.timed_out);
    CT_ASSERT_EQ(c.term_signal, SIGKILL);
    CT_ASSERT_LT(ct_time_ms() - t0, 5000);
    CT_ASSERT_STR_EQ(c.out, "started\n");
    pid_t pgid = c.pid;
    ct_child_close(&c);
    for (int i = 0; i < 100 && ct_pgid_alive(pgid); i++)
        ct_sleep_ms(10);
    CT_ASSERT(!ct_pgid_alive(pgid));
}

int main(void)
{
    CT_RUN(test_capture_and_exit_code);
    CT_RUN(test_signal_and_env_and_stdin);
    CT_RUN(test_exec_failure_is_reported_at_start);
    CT_RUN(test_deadline_kills_the_group);
    return 0;
}
