/*
 * test_ctrun_inject.c - the --inject grammar and its seeded choices (ctrun_inject.h), and the
 * recovery table's bookkeeping (ctrun_recovery.h): pure functions, no processes.
 */
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrun_inject.h"
#include "ctrun_recovery.h"

static void test_parse_every_kind(void)
{
    ctrun_inject_t inj;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_inject_parse("kill:rank=1:at=step=50; kill:rank=any:every=30s:count=2;"
                                    "hang:rank=0:at=time=500ms;torn_ckpt:at=step=100;"
                                    "torn_ckpt:at=step=7:phase=any;;kill_agent:node=1:at=time=5s",
                                    9, &inj, &eb));
    CT_ASSERT_EQ(inj.n, 6);
    CT_ASSERT_EQ(inj.specs[0].kind, CTRUN_INJECT_KILL);
    CT_ASSERT_EQ(inj.specs[0].trigger, CTRUN_INJECT_AT_STEP);
    CT_ASSERT_EQ(inj.specs[0].rank, 1);
    CT_ASSERT_EQ(inj.specs[0].step, 50);
    CT_ASSERT_STR_EQ(inj.specs[0].text, "kill:rank=1:at=step=50");
    CT_ASSERT_EQ(inj.specs[1].rank, CTRUN_INJECT_ANY);
    CT_ASSERT_EQ(inj.specs[1].trigger, CTRUN_INJECT_EVERY);
    CT_ASSERT_CLOSE(inj.specs[1].seconds, 30.0, 0, 0);
    CT_ASSERT_EQ(inj.specs[1].count, 2);
    CT_ASSERT_EQ(inj.specs[2].kind, CTRUN_INJECT_HANG);
    CT_ASSERT_CLOSE(inj.specs[2].seconds, 0.5, 1e-12, 0);
    CT_ASSERT_EQ(inj.specs[3].kind, CTRUN_INJECT_TORN);
    CT_ASSERT_EQ(inj.specs[3].rank, 0);
    CT_ASSERT_EQ(inj.specs[3].phase, 0);
    CT_ASSERT_EQ(inj.specs[4].phase, CTRUN_INJECT_ANY);
    CT_ASSERT_EQ(inj.specs[5].kind, CTRUN_INJECT_KILL_AGENT);
    CT_ASSERT_EQ(inj.specs[5].node, 1);
    CT_ASSERT_CLOSE(inj.specs[5].seconds, 5.0, 0, 0);
    ctrun_inject_free(&inj);
}

static void test_parse_errors_name_the_spec(void)
{
    static const char *const bad[][2] = {
        {"kill:rank=1", "--inject: spec 1 \"kill:rank=1\": needs a trigger: at=step=N, "
                        "at=time=T or every=T"},
        {"kill:at=step=3", "--inject: spec 1 \"kill:at=step=3\": needs rank=R or rank=any"},
        {"kill:rank=0:at=step=1;hang:rank=0:at=soon",
         "--inject: spec 2 \"hang:rank=0:at=soon\": at=\"soon\": expected at=step=N or "
         "at=time=T"},
        {"kill:rank=0:at=time=0s",
         "--inject: spec 1 \"kill:rank=0:at=time=0s\": at=time: duration \"0s\" must be above "
         "zero"},
        {"kill:rank=0:at=step=1:every=2s",
         "--inject: spec 1 \"kill:rank=0:at=step=1:every=2s\": give one trigger: at= or every="},
        {"kill:rank=0:rank=1:at=step=1",
         "--inject: spec 1 \"kill:rank=0:rank=1:at=step=1\": \"rank\" given twice"},
        {"kill:rank=0:at=step=1:color=red",
         "--inject: spec 1 \"kill:rank=0:at=step=1:color=red\": unknown key \"color\""},
        {"kill:rank=0:at=step=1:count=2",
         "--inject: spec 1 \"kill:rank=0:at=step=1:count=2\": count= goes with every="},
        {"torn_ckpt:every=1s", "--inject: spec 1 \"torn_ckpt:every=1s\": needs at=step=N (a "
                               "checkpoint write)"},
        {"torn_ckpt:at=step=4:phase=middle",
         "--inject: spec 1 \"torn_ckpt:at=step=4:phase=middle\": phase \"middle\" (expected "
         "data, file, latest or any)"},
        {"kill_agent:at=time=1s", "--inject: spec 1 \"kill_agent:at=time=1s\": needs node=N"},
        {"kill:rank", "--inject: spec 1 \"kill:rank\": \"rank\" is not KEY=VALUE"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ctrun_inject_t inj;
        ct_errbuf_t eb = {{0}};
        CT_ASSERT_MSG(ctrun_inject_parse(bad[i][0], 0, &inj, &eb) != 0, "%s", bad[i][0]);
        CT_ASSERT_STR_EQ(eb.msg, bad[i][1]);
        CT_ASSERT_EQ(inj.n, 0);
        CT_ASSERT(strchr(eb.msg, '\n') == NULL);
    }
}

static void test_arm_lowest_step_per_rank(void)
{
    ctrun_inject_t inj;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_inject_parse("kill:rank=1:at=step=50;hang:rank=1:at=step=20;"
                                    "torn_ckpt:at=step=30:phase=file;kill:rank=0:at=time=2s",
                                    0, &inj, &eb));
    char buf[48];
    CT_ASSERT_EQ(ctrun_inject_arm(&inj, 1, 2, buf, sizeof buf), 1);
    CT_ASSERT_STR_EQ(buf, "stop@20");
    CT_ASSERT_EQ(ctrun_inject_arm(&inj, 0, 2, buf, sizeof buf), 2);
    CT_ASSERT_STR_EQ(buf, "torn@30:file");
    inj.specs[1].fired = 1; /* the hang fired: the kill is next for rank 1 */
    CT_ASSERT_EQ(ctrun_inject_arm(&inj, 1, 2, buf, sizeof buf), 0);
    CT_ASSERT_STR_EQ(buf, "kill@50");
    inj.specs[0].fired = 1;
    CT_ASSERT_EQ(ctrun_inject_arm(&inj, 1, 2, buf, sizeof buf), -1);
    CT_ASSERT_STR_EQ(buf, "");
    CT_ASSERT(ctrun_inject_pending(&inj, 3));
    ctrun_inject_free(&inj);
}

static void test_seeded_choices_are_reproducible(void)
{
    const char *text = "kill:rank=any:every=1s;torn_ckpt:at=step=3:phase=any";
    ctrun_inject_t a, b, c;
    ct_errbuf_t eb = {{0}};
    CT_ASSERT_OK(ctrun_inject_parse(text, 1234, &a, &eb));
    CT_ASSERT_OK(ctrun_inject_parse(text, 1234, &b, &eb));
    CT_ASSERT_OK(ctrun_inject_parse(text, 99, &c, &eb));
    int seen[4] = {0}, phases[3] = {0};
    bool differs = false;
    for (int k = 0; k < 64; k++) {
        a.specs[0].fired = b.specs[0].fired = c.specs[0].fired = k;
        a.specs[1].fired = b.specs[1].fired = c.specs[1].fired = k;
        int r = ctrun_inject_rank(&a, 0, 4);
        CT_ASSERT_EQ(r, ctrun_inject_rank(&b, 0, 4));
        CT_ASSERT(r >= 0 && r < 4);
        seen[r]++;
        differs = differs || r != ctrun_inject_rank(&c, 0, 4);
        int p = ctrun_inject_phase(&a, 1);
        CT_ASSERT_EQ(p, ctrun_inject_phase(&b, 1));
        CT_ASSERT(p >= 0 && p < 3);
        phases[p]++;
    }
    CT_ASSERT(differs); /* another seed, other choices */
    for (int r = 0; r < 4; r++)
        CT_ASSERT_MSG(seen[r] > 0, "rank %d never drawn in 64 firings", r);
    for (int p = 0; p < 3; p++)
        CT_ASSERT_MSG(phases[p] > 0, "phase %d never drawn in 64 firings", p);
    /* every= with count: pending until the count is reached */
    ctrun_inject_t d;
    CT_ASSERT_OK(ctrun_inject_parse("hang:rank=0:every=1s:count=2", 0, &d, &eb));
    CT_ASSERT(ctrun_inject_pending(&d, 0));
    d.specs[0].fired = 2;
    CT_ASSERT(!ctrun_inject_pending(&d, 0));
    ctrun_inject_free(&a);
    ctrun_inject_free(&b);
    ctrun_inject_free(&c);
    ctrun_inject_free(&d);
}

static void test_recovery_table(void)
{
    ctrun_recovery_t r = {0};
    const uint64_t ms = 1000000;
    CT_ASSERT_OK(ctrun_recovery_heartbeat(&r, 0, 0, 10 * ms));
    CT_ASSERT_OK(ctrun_recovery_heartbeat(&r, 0, 37, 20 * ms));
    CT_ASSERT(ctrun_recovery_progressed(&r, 0));
    CT_ASSERT_OK(ctrun_recovery_add(&r, 0, 1, 1, "injected kill at step 37 (spec 1)", 30 * ms,
                                    (int64_t)(2 * ms)));
    CT_ASSERT_OK(ctrun_recovery_add(&r, 0, 0, 0, "exit 1", 31 * ms, -1));
    ctrun_recovery_end_attempt(&r, 0);
    /* attempt 1 resumes at step 30 and crashes before doing a step */
    CT_ASSERT_OK(ctrun_recovery_heartbeat(&r, 1, 30, 150 * ms));
    CT_ASSERT(!ctrun_recovery_progressed(&r, 1));
    CT_ASSERT_OK(ctrun_recovery_add(&r, 1, 0, 0, "signal SIGSEGV", 160 * ms, -1));
    ctrun_recovery_end_attempt(&r, 1);
    CT_ASSERT(!ctrun_recovery_progressed(&r, 2)); /* no heartbeat at all */
    CT_ASSERT_EQ(r.rows[0].resume_ns, (int64_t)(120 * ms));
    CT_ASSERT_EQ(r.rows[0].failed_step, 37);
    CT_ASSERT_EQ(r.rows[0].resume_step, 30);
    CT_ASSERT_EQ(r.rows[2].resume_ns, -1);
    char *text = NULL, *json = NULL;
    CT_ASSERT_OK(ctrun_recovery_format(&r, 2, &text));
    CT_ASSERT_STR_CONTAINS(text, "ctrun recovery: 3 failures over 2 attempts");
    CT_ASSERT_STR_CONTAINS(text, "injected kill at step 37 (spec 1)");
    CT_ASSERT_STR_CONTAINS(text, "2.00 ms");
    CT_ASSERT_STR_CONTAINS(text, "120 ms");
    CT_ASSERT_STR_CONTAINS(text, "7 (37 -> 30)");
    CT_ASSERT_OK(ctrun_recovery_json(&r, 2, 1, &json));
    CT_ASSERT_STR_CONTAINS(json, "\"steps_replayed\": 7");
    CT_ASSERT_STR_CONTAINS(json, "\"detection_latency_ms\": null");
    CT_ASSERT_STR_CONTAINS(json, "\"exit_code\": 1");
    free(text);
    free(json);
    ctrun_recovery_free(&r);
}

/* --warm_restart: the table and report.json say which attempts' workers were forked warm. */
static void test_recovery_warm_attempts(void)
{
    ctrun_recovery_t r = {0};
    CT_ASSERT_OK(ctrun_recovery_started(&r, 0, 2, 0));
    CT_ASSERT_OK(ctrun_recovery_add(&r, 0, 1, 1, "exit 3", 1000, -1));
    CT_ASSERT_OK(ctrun_recovery_started(&r, 1, 2, 2));
    char *text = NULL, *json = NULL;
    CT_ASSERT_OK(ctrun_recovery_format(&r, 2, &text));
    CT_ASSERT_STR_CONTAINS(text, "attempt 1: 2 of 2 local workers forked from warm standbys");
    CT_ASSERT_STR_NOT_CONTAINS(text, "attempt 0: ");
    CT_ASSERT_OK(ctrun_recovery_json(&r, 2, 0, &json));
    CT_ASSERT_STR_CONTAINS(json, "\"attempt_starts\"");
    CT_ASSERT_STR_CONTAINS(json, "\"warm_workers\": 2");
    CT_ASSERT_STR_CONTAINS(json, "\"warm_workers\": 0");
    free(text);
    free(json);
    ctrun_recovery_free(&r);
}

int main(void)
{
    CT_RUN(test_parse_every_kind);
    CT_RUN(test_parse_errors_name_the_spec);
    CT_RUN(test_arm_lowest_step_per_rank);
    CT_RUN(test_seeded_choices_are_reproducible);
    CT_RUN(test_recovery_table);
    CT_RUN(test_recovery_warm_attempts);
    return 0;
}
