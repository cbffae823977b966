/*
 * test_chaos_kills.c - exact resume under seeded worker kills: a 2-rank ctrain run under ctrun
 * with 5 kills (steps drawn from this test's seed, ranks drawn by --inject_seed) completes, its
 * recovery table lists the 5 injected kills, and its final.safetensors (model and optimizer
 * state) is bit for bit the clean run's. After each job no process of it survives.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "train_compare.h"

#define CHAOS_EPOCHS "4" /* 60 steps */
#define CHAOS_STEPS  60

static void test_five_seeded_kills_bit_identical(void)
{
    char clean[600], chaos[600], logs[600];
    chaos_dir(clean, sizeof clean, "clean");
    chaos_dir(chaos, sizeof chaos, "chaos");
    chaos_dir(logs, sizeof logs, "logs");
    ct_child_t c;
    {
        const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=0",
                              CHAOS_TRAIN_ARGS(clean, CHAOS_EPOCHS), NULL};
        chaos_run(&c, "kills-clean", NULL, 240000, args);
        CT_ASSERT_MSG(c.exit_code == 0, "clean run failed:\n%.1500s", chaos_tail(&c));
        ct_child_close(&c);
        chaos_assert_no_survivors("kills-clean", 10000);
    }
    /* Five distinct kill steps in 1..CHAOS_STEPS-1, from a fixed seed (a linear congruential
     * generator, so the test is the same everywhere). */
    unsigned seed = 20261122u;
    int steps[5];
    char spec[512] = "";
    for (int k = 0; k < 5; k++) {
        int s;
        bool dup;
        do {
            seed = seed * 1103515245u + 12345u;
            s = 1 + (int)((seed >> 8) % (CHAOS_STEPS - 1));
            dup = false;
            for (int j = 0; j < k; j++)
                dup = dup || steps[j] == s;
        } while (dup);
        steps[k] = s;
        char one[64];
        snprintf(one, sizeof one, "%skill:rank=any:at=step=%d", k ? ";" : "", s);
        strncat(spec, one, sizeof spec - strlen(spec) - 1);
    }
    const char *args[] = {"--standalone", "--nproc_per_node=2", "--max_restarts=12",
                          "--inject", spec, "--inject_seed", "7", "--log_dir", logs,
                          CHAOS_TRAIN_ARGS(chaos, CHAOS_EPOCHS), NULL};
    chaos_run(&c, "kills-chaos", NULL, 300000, args);
    CT_ASSERT_MSG(c.exit_code == 0, "chaos run (%.200s) failed:\n%.1500s", spec, chaos_tail(&c));
    CT_ASSERT_EQ(chaos_count(c.err, "fault injection (CTRUN_INJECT=kill@"), 5);
    CT_ASSERT_GE(chaos_count(c.out, "# resumed from"), 5);
    json_t *report = chaos_report(logs);
    CT_ASSERT_EQ(chaos_count_causes(report, "injected kill at step"), 5);
    CT_ASSERT_EQ(json_integer_value(json_object_get(report, "exit_code")), 0);
    json_decref(report);
    ct_child_close(&c);
    chaos_assert_no_survivors("kills-chaos", 10000);
    train_same_bits(clean, chaos);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_kills");
    CT_RUN(test_five_seeded_kills_bit_identical);
    return 0;
}
