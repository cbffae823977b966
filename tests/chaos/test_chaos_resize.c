/*
 * test_chaos_resize.c - elastic resume: one ctrain run whose world size changes 2 -> 1 -> 2.
 * Three ctrun jobs share a --train_dir: 2 ranks until an injected kill (no restarts left, the
 * job fails), 1 rank from its checkpoint until another kill, 2 ranks again to the end. Each
 * resumes from the latest checkpoint of the previous size (global batch and data position
 * carried over), the run finishes, and its metrics and weights match an uninterrupted 2-rank
 * run's within float-summation noise (train_compare.h). ctrun's world size is fixed for a job,
 * so the change happens between jobs (as after a node loss with a static node count); no
 * process of any job survives it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chaos.h"
#include "train_compare.h"

static void run_job(const char *tag, const char *nproc, const char *inject, const char *dir,
                    int want_exit, const char *want_resume)
{
    ct_child_t c;
    const char *args[] = {"--standalone", nproc, "--max_restarts=0", "--inject",
                          inject ? inject : "", CHAOS_TRAIN_ARGS(dir, "4"), NULL};
    chaos_run(&c, tag, NULL, 240000, args);
    CT_ASSERT_MSG(c.exit_code == want_exit, "%s: exit %d, want %d:\n%.1500s", tag, c.exit_code,
                  want_exit, chaos_tail(&c));
    if (want_resume != NULL)
        CT_ASSERT_STR_CONTAINS(c.out, want_resume);
    ct_child_close(&c);
    chaos_assert_no_survivors(tag, 10000);
}

static void test_two_one_two(void)
{
    char clean[600], dir[600];
    chaos_dir(clean, sizeof clean, "clean");
    chaos_dir(dir, sizeof dir, "resized");
    run_job("resize-clean", "--nproc_per_node=2", NULL, clean, 0, NULL);
    run_job("resize-2", "--nproc_per_node=2", "kill:rank=1:at=step=20", dir, 1, NULL);
    run_job("resize-1", "--nproc_per_node=1", "kill:rank=0:at=step=40", dir, 1,
            "step_000000000018.safetensors: step 18 (epoch 1, batch 3 of it), trained by 2 ranks");
    run_job("resize-2b", "--nproc_per_node=2", NULL, dir, 0,
            "step_000000000039.safetensors: step 39 (epoch 2, batch 9 of it), trained by 1 rank");
    train_same_metrics(clean, dir);
    train_same_params(clean, dir);
}

int main(int argc, char **argv)
{
    chaos_init(argc, argv, "chaos_resize");
    CT_RUN(test_two_one_two);
    return 0;
}
