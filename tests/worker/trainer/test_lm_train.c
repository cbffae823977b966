/*
 * test_lm_train.c - ctrain --model lm against transformers, end to end: runs lm_train.py (see
 * its docstring: inference, ten training steps on 1 and 2 ranks and with --freeze, --save_hf)
 * with the PyTorch 2.x interpreter on ctrain and ctrun, in a temporary folder removed at exit.
 * Skips (77) without that interpreter, or when it lacks torch, transformers or tokenizers.
 *
 * Usage: test_lm_train LM_TRAIN_PY CTRAIN CTRUN
 *        test_lm_train perm SEED N EPOCHS   (for lm_train.py: the order of N samples in each
 *                                            epoch, ct_shard_permutation's, one line an epoch)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctworker.h"

static int test_lm_train__perm(uint64_t seed, int64_t n, int64_t epochs)
{
    ct_shard_t s = {
        .n_samples = n, .global_batch = 1, .world_size = 1, .seed = seed, .shuffle = true};
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    if (!perm)
        return 1;
    for (int64_t e = 0; e < epochs; e++) {
        ct_shard_permutation(&s, e, perm);
        for (int64_t i = 0; i < n; i++)
            printf("%s%" PRId64, i ? " " : "", perm[i]);
        printf("\n");
    }
    free(perm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "perm") == 0)
        return test_lm_train__perm(strtoull(argv[2], NULL, 10), strtoll(argv[3], NULL, 10),
                                   strtoll(argv[4], NULL, 10));
    if (argc != 4) {
        fprintf(stderr, "usage: %s LM_TRAIN_PY CTRAIN CTRUN\n", argv[0]);
        return 2;
    }
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    const char *dir = ct_test_tmpdir("ct_lm_train_");
    char *args[] = {(char *)py, argv[1], argv[2], argv[3], (char *)dir, argv[0], NULL};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, args, NULL));
    CT_ASSERT_OK(ct_child_wait(&c, 600000));
    printf("%s", c.out);
    fprintf(stderr, "%s", c.err);
    int code = c.exit_code;
    ct_child_close(&c);
    if (code == 77)
        CT_SKIP("%s lacks torch, transformers or tokenizers", py);
    CT_ASSERT_EQ(code, 0);
    return 0;
}
