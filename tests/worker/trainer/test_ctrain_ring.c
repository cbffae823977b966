/*
 * test_ctrain_ring.c (suite e2e) - ctrain as real processes on the CPU ring: a ctrun-store on
 * loopback and W ctrain processes with the torchrun environment (tests/ct_ranks.h; runs through
 * ctrun come with the launcher). It proves:
 *   - W = 2 and W = 3 train the trajectory of one process with the same global batch, up to
 *     float summation order (train_compare.h: losses, every evaluation metric - which needs
 *     the evaluation sums reduced over the ranks' users - and the parameters);
 *   - the ring makes it reproducible: a second W = 2 run ends with every tensor, Adam's moments
 *     included, bit-identical to the first;
 *   - resume: a W = 2 run of one epoch, then a W = 2 run of two in the same folder (rank 0
 *     picks the checkpoint and broadcasts its name, rank 1 loads that file) ends bit-identical
 *     to the uninterrupted two-epoch run;
 *   - skipping non-finite steps (--skip_invalid_loss) is decided on reduced values, so the
 *     ranks agree and the run skips exactly what one process skips;
 *   - every rank exits 0, and only rank 0 writes the outputs.
 * Usage: test_ctrain_ring PATH_TO_CTRUN_STORE PATH_TO_CTRAIN
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ct_ranks.h"
#include "ct_test.h"
#include "train_compare.h"

static ct_store_proc_t store;
static const char *ctrain;
static char root[256];
static int run_counter;

#define CFG                                                                                \
    "--dataset", "synthetic:users=250,items=120,len=24,seed=5", "--maxlen", "20",          \
        "--hidden_units", "16", "--num_heads", "2", "--batch_size", "32", "--lr", "0.005", \
        "--eval_every", "1", "--dropout_rate", "0.2", "--seed", "11"

static void dir_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", root, name);
}

/* Trains with W ranks (W = 1: a plain process, no launcher variables) and checks that every
 * rank exited 0. The extra arguments end with NULL. */
static void train(int w, const char *dir, const char *epochs, const char *extra1,
                  const char *extra2)
{
    char *argv[32];
    int n = 0;
    const char *args[] = {ctrain, "--train_dir", dir, "--num_epochs", epochs, CFG};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        argv[n++] = (char *)args[i];
    if (extra1)
        argv[n++] = (char *)extra1;
    if (extra2)
        argv[n++] = (char *)extra2;
    argv[n] = NULL;
    ct_ranks_t g;
    if (w == 1) {
        const char *env[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "TORCHELASTIC_RESTART_COUNT",
                             "CTRUN_HEARTBEAT_FD",
                             "TORCHELASTIC_ERROR_FILE",
                             NULL};
        ct_child_opts_t o = {.env = env};
        memset(&g, 0, sizeof g);
        CT_ASSERT_OK(ct_child_start(&g.child[0], argv, &o));
        g.n = 1;
    } else {
        char id[32];
        snprintf(id, sizeof id, "ctrain-%d", ++run_counter);
        ct_ranks_opts_t o = {.world = w, .port = store.port, .run_id = id, .timeout_s = 120};
        CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    }
    int rc = ct_ranks_wait(&g, 600000);
    if (rc != 0)
        ct_ranks_dump(&g);
    CT_ASSERT_EQ(rc, 0);
    for (int r = 1; r < w; r++)
        CT_ASSERT_MSG(g.child[r].out == NULL || g.child[r].out[0] == '\0',
                      "rank %d wrote to stdout: %s", r, g.child[r].out);
    if (w > 1)
        CT_ASSERT_STR_CONTAINS(g.child[0].out, "# summary:");
    ct_ranks_close(&g);
}

static void test_matches_one_process(void)
{
    char d1[300], d2[300], d2b[300], d3[300];
    dir_path(d1, sizeof d1, "w1");
    dir_path(d2, sizeof d2, "w2");
    dir_path(d2b, sizeof d2b, "w2b");
    dir_path(d3, sizeof d3, "w3");
    train(1, d1, "2", NULL, NULL);
    train(2, d2, "2", NULL, NULL);
    train(3, d3, "2", NULL, NULL);
    printf("W=2 on the ring against W=1\n");
    train_same_metrics(d1, d2);
    train_same_params(d1, d2);
    printf("W=3 on the ring against W=1\n");
    train_same_metrics(d1, d3);
    train_same_params(d1, d3);
    train(2, d2b, "2", NULL, NULL);
    printf("W=2 twice: bit for bit\n");
    train_same_bits(d2, d2b);
}

static void test_resume(void)
{
    char d2[300], dr[300];
    dir_path(d2, sizeof d2, "w2");
    dir_path(dr, sizeof dr, "resumed");
    train(2, dr, "1", NULL, NULL);
    /* The second run continues from the first one's final checkpoint (step 8 of 16). */
    char *argv[] = {(char *)ctrain, "--train_dir", dr, "--num_epochs", "2", CFG, NULL};
    ct_ranks_t g;
    ct_ranks_opts_t o = {
        .world = 2, .port = store.port, .run_id = "ctrain-resume", .timeout_s = 120};
    CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    int rc = ct_ranks_wait(&g, 600000);
    if (rc != 0)
        ct_ranks_dump(&g);
    CT_ASSERT_EQ(rc, 0);
    CT_ASSERT_STR_CONTAINS(g.child[0].out, "# resumed from");
    CT_ASSERT_STR_CONTAINS(g.child[0].out, "final.safetensors: step 8 (epoch 1, batch 0 of it), "
                                           "trained by 2 ranks");
    ct_ranks_close(&g);
    printf("W=2 for 1 epoch, resumed by W=2 for the 2nd, against W=2 for 2: bit for bit\n");
    train_same_bits(d2, dr);
}

static int64_t skipped_steps(const char *dir)
{
    char p[400];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_error_t je;
    json_t *s = json_load_file(p, 0, &je);
    CT_ASSERT_MSG(s != NULL, "%s: %s", p, je.text);
    int64_t n = json_integer_value(json_object_get(s, "skipped_steps"));
    json_decref(s);
    return n;
}

static void test_skip_agreement(void)
{
    char d1[300], d2[300];
    dir_path(d1, sizeof d1, "skip1");
    dir_path(d2, sizeof d2, "skip2");
    /* lr 1e30 turns the parameters to inf/NaN after the first update; every later step has a
     * non-finite loss and is skipped. */
    train(1, d1, "2", "--lr=1e30", "--skip_invalid_loss");
    train(2, d2, "2", "--lr=1e30", "--skip_invalid_loss");
    int64_t s1 = skipped_steps(d1), s2 = skipped_steps(d2);
    printf("  skipped: %lld alone, %lld on 2 ranks\n", (long long)s1, (long long)s2);
    CT_ASSERT_EQ(s1, 15);
    CT_ASSERT_EQ(s2, s1);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_ctrain_ring PATH_TO_CTRUN_STORE PATH_TO_CTRAIN\n");
        return 2;
    }
    ctrain = argv[2];
    snprintf(root, sizeof root, "/tmp/ct_ctrain_ring.XXXXXX");
    CT_ASSERT(mkdtemp(root) != NULL);
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[1]));
    CT_RUN(test_matches_one_process);
    CT_RUN(test_resume);
    CT_RUN(test_skip_agreement);
    ct_store_proc_stop(&store);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return 0;
}
