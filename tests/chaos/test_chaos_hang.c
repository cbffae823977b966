/*
 * test_chaos_hang.c - hangs: a worker stopped by SIGSTOP (an injected hang at a step) in a
 * 2-rank ctrain job is caught by the watchdog within its timeout (plus scheduling slack), its
 * stack is dumped into its stderr log before the attempt is stopped, the job restarts and
 * finishes with the clean run's bits; with the watchdog off, the peer's collective timeout in
 * the CPU ring (CTRUN_COMM_TIMEOUT) is what fails the attempt, and the job restarts and
 * finishes too. No process of any job survives it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "train_compare.h"

static char clean[600];

static void test_clean(void)
{
    chaos_dir(clean, sizeof clean, "clean");
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=0",
                          CHAOS_TRAIN_ARGS(clean, "2"), NULL};
    ct_child_t c;
    chaos_run(&c, "hang-clean", NULL, 240000, args);
    CT_ASSERT_MSG(c.exit_code == 0, "clean run failed:\n%.1500s", chaos_tail(&c));
    ct_child_close(&c);
    chaos_assert_no_survivors("hang-clean", 10000);
}

static void test_sigstop_caught_by_the_watchdog(void)
{
    char dir[600], logs[600], run[600];
    chaos_dir(dir, sizeof dir, "watchdog");
    chaos_dir(logs, sizeof logs, "watchdog_logs");
    const double timeout_s = 3.0;
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=2",
                          "--watchdog_timeout", "3", "--redirects", "3", "--log_dir", logs,
                          "--inject", "hang:rank=1:at=step=10", CHAOS_TRAIN_ARGS(dir, "2"),
                          NULL};
    ct_child_t c;
    chaos_run(&c, "hang-watchdog", NULL, 240000, args);
    CT_ASSERT_MSG(c.exit_code == 0, "run failed:\n%.1500s", chaos_tail(&c));
    CT_ASSERT_STR_CONTAINS(c.err, "watchdog: local rank 1 (rank 1");
    json_t *report = chaos_report(logs);
    CT_ASSERT_EQ(chaos_count_causes(report, "watchdog: injected hang at step 10"), 1);
    json_t *row = json_array_get(json_object_get(report, "failures"), 0);
    double detect_ms = json_number_value(json_object_get(row, "detection_latency_ms"));
    /* Detected when the first of the two ranks (the stopped one, or its peer waiting for it in
     * the step's reduction, whose last heartbeat can be older) was silent for the timeout: not
     * much before, and within the timeout plus slack for a loaded machine. */
    CT_ASSERT_MSG(detect_ms >= timeout_s * 1000.0 - 1000.0 && detect_ms <= timeout_s * 1000.0 + 10000,
                  "detection latency %.0f ms for a %.0f s watchdog", detect_ms, timeout_s);
    CT_ASSERT_EQ(json_integer_value(json_object_get(row, "rank")), 1);
    CT_ASSERT_EQ(json_integer_value(json_object_get(row, "failed_step")), 10);
    /* resumed from the checkpoint at step 9, nothing trained on after the hang */
    CT_ASSERT_EQ(json_integer_value(json_object_get(row, "resume_step")), 9);
    CT_ASSERT_EQ(json_integer_value(json_object_get(row, "steps_replayed")), 1);
    json_decref(report);
    /* The stuck rank's stack, in its log of the attempt that hung. */
    chaos_run_dir(logs, run, sizeof run);
    char path[700];
    snprintf(path, sizeof path, "%s/attempt_0/1/stderr.log", run);
    FILE *f = fopen(path, "r");
    CT_ASSERT_MSG(f != NULL, "%s missing", path);
    static char log[1 << 16];
    size_t n = fread(log, 1, sizeof log - 1, f);
    fclose(f);
    log[n] = '\0';
    CT_ASSERT_STR_CONTAINS(log, "stack dump on signal");
    CT_ASSERT_STR_CONTAINS(log, "C backtrace (most recent call first):");
    CT_ASSERT_STR_CONTAINS(log, "ct_worker_progress"); /* where the injected stop sat */
    ct_child_close(&c);
    chaos_assert_no_survivors("hang-watchdog", 10000);
    train_same_bits(clean, dir);
}

static void test_collective_timeout_restarts(void)
{
    char dir[600], logs[600];
    chaos_dir(dir, sizeof dir, "collective");
    chaos_dir(logs, sizeof logs, "collective_logs");
    const char *env[] = {"CTRUN_COMM_TIMEOUT=3", NULL};
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=2",
                          "--watchdog_timeout", "0", "--log_dir", logs, "--inject",
                          "hang:rank=1:at=step=10", CHAOS_TRAIN_ARGS(dir, "2"), NULL};
    ct_child_t c;
    chaos_run(&c, "hang-collective", env, 240000, args);
    CT_ASSERT_MSG(c.exit_code == 0, "run failed:\n%.1500s", chaos_tail(&c));
    json_t *report = chaos_report(logs);
    json_t *row = json_array_get(json_object_get(report, "failures"), 0);
    CT_ASSERT_STR_EQ(json_string_value(json_object_get(row, "cause")), "exit 1");
    CT_ASSERT_EQ(json_integer_value(json_object_get(row, "rank")), 0);
    CT_ASSERT_EQ(json_integer_value(json_object_get(report, "attempts")), 2);
    json_decref(report);
    CT_ASSERT_STR_CONTAINS(c.err, "timed out");
    ct_child_close(&c);
    chaos_assert_no_survivors("hang-collective", 10000);
    train_same_bits(clean, dir);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_hang");
    CT_RUN(test_clean);
    CT_RUN(test_sigstop_caught_by_the_watchdog);
    CT_RUN(test_collective_timeout_restarts);
    return 0;
}
