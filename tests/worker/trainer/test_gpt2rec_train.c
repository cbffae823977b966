/*
 * test_gpt2rec_train.c - ctrain --model gpt2rec against examples/pytorch/gpt2rec_ddp.py, end to
 * end: runs gpt2rec_train.py (see its docstring: the same steps from the same weights, ID-only
 * and with cached text embeddings, on 1 and 2 ranks; the program's checkpoints through the
 * converter; a kill and exact resume under ctrun; bad input) with the PyTorch 2.x interpreter, in a temporary folder removed at exit. Skips (77)
 * without that interpreter, or when it lacks torch, transformers, tokenizers or safetensors.
 *
 * Usage: test_gpt2rec_train GPT2REC_TRAIN_PY CTRAIN CTRUN EXAMPLE_PY
 *        test_gpt2rec_train batches RATINGS SPLIT SEED BATCH EPOCHS
 *            (for gpt2rec_train.py: the rows ctrain trains on, one line per optimizer step of
 *            one rank, "user,positive,negative" separated by blanks, ids numbered as ctrain
 *            and the reference number them)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_test.h"
#include "ctrain_gpt2rec.h"
#include "ctworker.h"

static int test_gpt2rec_train__batches(const char *ratings, const char *split, uint64_t seed,
                                       int64_t batch, int64_t epochs)
{
    ctrain_gpt2rec_data_t d;
    ct_errbuf_t eb;
    double fr[3];
    if (ctrain_gpt2rec_split_parse(split, fr, &eb) != 0 ||
        ctrain_gpt2rec_data_load(&d, ratings, NULL, fr, &eb) != 0) {
        fprintf(stderr, "%s\n", eb.msg);
        return 1;
    }
    /* the trainer's shard: every step's global batch, one rank */
    ct_shard_t s = {.n_samples = d.n_train,
                    .global_batch = batch,
                    .world_size = 1,
                    .rank = 0,
                    .seed = seed,
                    .shuffle = true,
                    .drop_last = false};
    int64_t *perm = malloc((size_t)d.n_train * sizeof *perm);
    if (!perm)
        return 1;
    const int64_t steps = ct_shard_steps_per_epoch(&s) * epochs;
    int64_t perm_epoch = -1;
    for (int64_t step = 0; step < steps; step++) {
        int64_t epoch, pos, begin, count;
        ct_shard_locate(&s, step, &epoch, &pos);
        if (epoch != perm_epoch) {
            ct_shard_permutation(&s, epoch, perm);
            perm_epoch = epoch;
        }
        ct_shard_range(&s, pos, &begin, &count);
        for (int64_t j = begin; j < begin + count; j++) {
            const int64_t k = perm[j];
            const int32_t u = d.tr_u[k];
            printf("%s%d,%d,%d", j > begin ? " " : "", u, d.tr_i[k],
                   ctrain_gpt2rec_negative(&d, u, seed, (uint64_t)(epoch * d.n_train + j)));
        }
        printf("\n");
    }
    free(perm);
    ctrain_gpt2rec_data_free(&d);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "batches") == 0)
        return test_gpt2rec_train__batches(argv[2], argv[3], strtoull(argv[4], NULL, 10),
                                           strtoll(argv[5], NULL, 10), strtoll(argv[6], NULL, 10));
    if (argc != 5) {
        fprintf(stderr, "usage: %s GPT2REC_TRAIN_PY CTRAIN CTRUN EXAMPLE_PY\n", argv[0]);
        return 2;
    }
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    const char *dir = ct_test_tmpdir("ct_gpt2rec_train_");
    char *args[] = {(char *)py, argv[1], argv[2], argv[3], argv[4], (char *)dir, argv[0], NULL};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, args, NULL));
    CT_ASSERT_OK(ct_child_wait(&c, 600000));
    printf("%s", c.out);
    fprintf(stderr, "%s", c.err);
    int code = c.exit_code;
    ct_child_close(&c);
    if (code == 77)
        CT_SKIP("%s lacks torch, transformers, tokenizers or safetensors", py);
    CT_ASSERT_EQ(code, 0);
    return 0;
}
