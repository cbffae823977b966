/*
 * test_chaos_policy.c - ctrun's restart policy with the launcher's test worker: the job-wide
 * budget (--max_restarts), exponential --restart_backoff (the waits are logged and the job takes
 * at least their sum), and the no-progress guard (--progress_guard K: workers that report the
 * same step and fail, attempt after attempt, stop the restarts after K attempts with exit status
 * 3, while workers that progress use the whole budget); report.json counts the attempts. Also
 * the periodic fault (kill:rank=any:every=T:count=K).
 *
 * argv: CTRUN TEST_WORKER.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"

static const char *worker;

static void run(ct_child_t *c, const char *tag, const char *const *args)
{
    char *argv[48];
    size_t n = 0;
    argv[n++] = (char *)chaos_ctrun;
    for (size_t i = 0; args[i] != NULL && n + 1 < 48; i++)
        argv[n++] = (char *)(strcmp(args[i], "WORKER") == 0 ? worker : args[i]);
    argv[n] = NULL;
    char tagvar[96];
    snprintf(tagvar, sizeof tagvar, "CT_CHAOS_TAG=%s", tag);
    const char *env[] = {tagvar, "LOGLEVEL=INFO", NULL};
    ct_child_opts_t opts = {.env = env};
    CT_ASSERT_OK(ct_child_start(c, argv, &opts));
    CT_ASSERT_OK(ct_child_wait(c, 120000));
}

static void test_backoff(void)
{
    char logs[600];
    chaos_dir(logs, sizeof logs, "backoff");
    const char *args[] = {"--standalone", "--nproc_per_node=1", "--max_restarts=3",
                          "--restart_backoff", "0.25", "--log_dir", logs, "WORKER", "--exit", "2",
                          NULL};
    ct_child_t c;
    run(&c, "policy-backoff", args);
    CT_ASSERT_EQ(c.exit_code, 1);
    CT_ASSERT_STR_CONTAINS(c.err, "restart 1 in 0.25 s (--restart_backoff)");
    CT_ASSERT_STR_CONTAINS(c.err, "restart 2 in 0.5 s (--restart_backoff)");
    CT_ASSERT_STR_CONTAINS(c.err, "restart 3 in 1 s (--restart_backoff)");
    CT_ASSERT_GE(c.elapsed_ms, 1750); /* 0.25 + 0.5 + 1 */
    json_t *r = chaos_report(logs);
    CT_ASSERT_EQ(json_integer_value(json_object_get(r, "attempts")), 4);
    CT_ASSERT_EQ(chaos_count_causes(r, "exit 2"), 4);
    json_decref(r);
    ct_child_close(&c);
    chaos_assert_no_survivors("policy-backoff", 5000);
}

static void test_no_progress_guard(void)
{
    char logs[600];
    chaos_dir(logs, sizeof logs, "guard");
    /* Every attempt reports step 1 only, then fails: no progress. */
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=20",
                          "--progress_guard", "3", "--log_dir", logs, "WORKER", "--heartbeat",
                          "1", "--exit", "1", "--when-rank", "1", NULL};
    ct_child_t c;
    run(&c, "policy-guard", args);
    CT_ASSERT_MSG(c.exit_code == 3, "exit %d:\n%.1500s", c.exit_code, chaos_tail(&c));
    CT_ASSERT_STR_CONTAINS(c.err, "the last 3 attempts made no step progress; not restarting "
                                  "again (exit status 3; see --progress_guard)");
    json_t *r = chaos_report(logs);
    CT_ASSERT_EQ(json_integer_value(json_object_get(r, "attempts")), 3);
    CT_ASSERT_EQ(json_integer_value(json_object_get(r, "exit_code")), 3);
    json_decref(r);
    ct_child_close(&c);
    chaos_assert_no_survivors("policy-guard", 5000);

    /* Steps 1..3 every attempt: progress, so the whole budget is used. */
    char logs2[600];
    chaos_dir(logs2, sizeof logs2, "guard_progress");
    const char *args2[] = {"--standalone", "--nproc_per_node=1", "--max_restarts=4",
                           "--progress_guard", "2", "--log_dir", logs2, "WORKER", "--heartbeat",
                           "3", "--exit", "1", NULL};
    run(&c, "policy-guard2", args2);
    CT_ASSERT_EQ(c.exit_code, 1);
    r = chaos_report(logs2);
    CT_ASSERT_EQ(json_integer_value(json_object_get(r, "attempts")), 5);
    json_decref(r);
    ct_child_close(&c);

    /* Workers without heartbeats are not guarded. */
    char logs3[600];
    chaos_dir(logs3, sizeof logs3, "guard_foreign");
    const char *args3[] = {"--standalone", "--nproc_per_node=1", "--max_restarts=3",
                           "--progress_guard", "1", "--log_dir", logs3, "WORKER", "--exit", "1",
                           NULL};
    run(&c, "policy-guard3", args3);
    CT_ASSERT_EQ(c.exit_code, 1);
    r = chaos_report(logs3);
    CT_ASSERT_EQ(json_integer_value(json_object_get(r, "attempts")), 4);
    json_decref(r);
    ct_child_close(&c);
}

/* kill:rank=any:every=T:count=2 kills a seeded rank T after each attempt's start, twice. */
static void test_every(void)
{
    char logs[600];
    chaos_dir(logs, sizeof logs, "every");
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=3", "--inject",
                          "kill:rank=any:every=700ms:count=2", "--inject_seed", "5",
                          "--log_dir", logs, "WORKER", "--sleep-ms", "2500", NULL};
    ct_child_t c;
    run(&c, "policy-every", args);
    CT_ASSERT_MSG(c.exit_code == 0, "exit %d:\n%.1500s", c.exit_code, chaos_tail(&c));
    json_t *r = chaos_report(logs);
    CT_ASSERT_EQ(json_integer_value(json_object_get(r, "attempts")), 3);
    CT_ASSERT_EQ(chaos_count_causes(r, "injected kill (spec 1)"), 2);
    json_t *row = json_array_get(json_object_get(r, "failures"), 0);
    CT_ASSERT(json_is_number(json_object_get(row, "detection_latency_ms")));
    json_decref(r);
    ct_child_close(&c);
    chaos_assert_no_survivors("policy-every", 5000);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_policy");
    worker = chaos_ctrain; /* argv[2] is the test worker here */
    CT_RUN(test_backoff);
    CT_RUN(test_no_progress_guard);
    CT_RUN(test_every);
    return 0;
}
