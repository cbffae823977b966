/*
 * test_chaos_torn.c - kills inside checkpoint writes: one 2-rank ctrain job under ctrun with 20
 * torn_ckpt specs (at checkpoint steps 3, 6, ..., 60, the phase of each - tensors written but
 * no header, file renamed but `latest` not moved, `latest` moved but not pruned - drawn from
 * the seed) finishes; every one of the 20 fired (the recovery table); no torn checkpoint was
 * ever loaded (no "is damaged" fallback was needed: the torn files never became `latest`, and
 * every resume loaded a complete, CRC-checked file); and the final state is bit for bit the
 * clean run's. No process of either job survives it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "train_compare.h"

static void test_twenty_torn_checkpoints(void)
{
    char clean[600], chaos[600], logs[600];
    chaos_dir(clean, sizeof clean, "clean");
    chaos_dir(chaos, sizeof chaos, "chaos");
    chaos_dir(logs, sizeof logs, "logs");
    ct_child_t c;
    {
        const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=0",
                              CHAOS_TRAIN_ARGS(clean, "5"), NULL};
        chaos_run(&c, "torn-clean", NULL, 240000, args);
        CT_ASSERT_MSG(c.exit_code == 0, "clean run failed:\n%.1500s", chaos_tail(&c));
        ct_child_close(&c);
        chaos_assert_no_survivors("torn-clean", 10000);
    }
    char spec[2048] = "";
    for (int k = 1; k <= 20; k++) {
        char one[64];
        snprintf(one, sizeof one, "%storn_ckpt:at=step=%d:phase=any", k > 1 ? ";" : "", 3 * k);
        strncat(spec, one, sizeof spec - strlen(spec) - 1);
    }
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=30",
                          "--inject", spec, "--inject_seed", "11", "--log_dir", logs,
                          CHAOS_TRAIN_ARGS(chaos, "5"), NULL};
    chaos_run(&c, "torn-chaos", NULL, 500000, args);
    CT_ASSERT_MSG(c.exit_code == 0, "chaos run failed:\n%.1500s", chaos_tail(&c));
    CT_ASSERT_EQ(chaos_count(c.err, "SIGKILL inside the checkpoint write"), 20);
    /* all three windows were hit */
    CT_ASSERT_GT(chaos_count(c.err, "(phase data)"), 0);
    CT_ASSERT_GT(chaos_count(c.err, "(phase file)"), 0);
    CT_ASSERT_GT(chaos_count(c.err, "(phase latest)"), 0);
    CT_ASSERT_EQ(chaos_count(c.err, "is damaged"), 0);
    CT_ASSERT_EQ(chaos_count(c.out, "# resumed from"), 20);
    json_t *report = chaos_report(logs);
    CT_ASSERT_EQ(chaos_count_causes(report, "injected torn_ckpt at step"), 20);
    json_decref(report);
    ct_child_close(&c);
    chaos_assert_no_survivors("torn-chaos", 10000);
    train_same_bits(clean, chaos);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_torn");
    CT_RUN(test_twenty_torn_checkpoints);
    return 0;
}
