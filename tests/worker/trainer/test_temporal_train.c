/*
 * test_temporal_train.c - ctrain --model temporal against the PyTorch program, end to end: runs
 * the script it is given - temporal_train.py (stage 1), temporal_align.py (stage 2; see their
 * docstrings: 20 steps from the same weights, a kill and resume under ctrun) or temporal_fly.py
 * (the curves generated at start against the same run on a cache) - with the PyTorch
 * 2.x interpreter on ctrain and ctrun, in a temporary folder removed at exit. Skips (77) without
 * that interpreter, or when it lacks torch, numpy, safetensors or yaml.
 *
 * Usage: test_temporal_train SCRIPT_PY CTRAIN CTRUN
 */
#include <stdio.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s TEMPORAL_TRAIN_PY CTRAIN CTRUN\n", argv[0]);
        return 2;
    }
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    const char *dir = ct_test_tmpdir("ct_temporal_train_");
    char *args[] = {(char *)py, argv[1], argv[2], argv[3], (char *)dir, NULL};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, args, NULL));
    CT_ASSERT_OK(ct_child_wait(&c, 300000));
    printf("%s", c.out);
    fprintf(stderr, "%s", c.err);
    int code = c.exit_code;
    ct_child_close(&c);
    if (code == 77)
        CT_SKIP("%s lacks torch, numpy, safetensors or yaml", py);
    CT_ASSERT_EQ(code, 0);
    return 0;
}
