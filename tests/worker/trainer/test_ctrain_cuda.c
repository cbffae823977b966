/*
 * test_ctrain_cuda.c (suites gpu and multi-gpu) - ctrain on GPUs as real processes: a
 * ctrun-store on loopback and W ctrain processes with the torchrun environment
 * (tests/ct_ranks.h), as test_ctrain_ring.c does for the CPU ring. Exit 77 without a GPU
 * (gpu), or with fewer than 2 GPUs (multi-gpu, selected by the first argument).
 *   gpu:
 *     - --device cuda trains the trajectory of --device cpu (train_compare.h: the losses and
 *       every evaluation metric; the parameters), one process;
 *     - a 1-rank NCCL job (--backend nccl, the bucketed stream-ordered reduction overlapped
 *       with the backward pass, with its watchdog) trains what the plain CUDA process trains,
 *       both with this test's store and under ctrun --standalone (its store, its environment);
 *     - --use_amp trains to a finite loss close to float32's (the bf16 deviation is measured by
 *       test_sasrec_gpu; here the flag's plumbing end to end);
 *     - a model the GPU kernels cannot take (SASRec at --maxlen 300) fails before its first
 *       step with one line naming the limit;
 *     - a collective that never completes, on one GPU: the 1-rank job's communication stream
 *       stalls at its third gradient reduction (CT_TEST_NCCL_STALL_AT_REDUCE=0:2, as a peer
 *       that never joins leaves it); with --collective_timeout 3 the watchdog must abort the
 *       communicator and end the rank non-zero, naming the reduction, within 60 s.
 *   multi-gpu:
 *     - 2 ranks on NCCL (the unique-ID exchange through the store, the gradient buckets, the
 *       evaluation sums) train what 1 process trains with the same global batch;
 *     - an injected collective hang: rank 1 dies instead of joining its third gradient
 *       reduction (CT_TEST_NCCL_EXIT_AT_REDUCE=1:2), so rank 0's all-reduce never completes;
 *       with --collective_timeout 5 rank 0's watchdog must abort the communicator and exit
 *       non-zero with its message on stderr well within the test's 120 s, instead of hanging.
 * Usage: test_ctrain_cuda gpu|multi-gpu PATH_TO_CTRUN_STORE PATH_TO_CTRAIN PATH_TO_CTRUN
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_kernels_cuda.h"
#include "ct_ranks.h"
#include "ct_test.h"
#include "ct_time.h"
#include "train_compare.h"

static ct_store_proc_t store;
static const char *ctrain;
static const char *ctrun;
static char root[256];
static int run_counter;

#define CFG                                                                                \
    "--dataset", "synthetic:users=250,items=120,len=24,seed=5", "--maxlen", "20",          \
        "--hidden_units", "16", "--num_heads", "2", "--batch_size", "32", "--lr", "0.005", \
        "--eval_every", "1", "--dropout_rate", "0.2", "--seed", "11", "--num_epochs", "1"

static void dir_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", root, name);
}

/* Trains with W ranks (W = 0: a plain process without launcher variables) and returns the
 * ranks' combined status (0: all exited 0); extra arguments end with NULL. */
static int train(int w, const char *dir, const char *const *env, const char **extra)
{
    char *argv[48];
    int n = 0;
    const char *args[] = {ctrain, "--train_dir", dir, CFG};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        argv[n++] = (char *)args[i];
    for (; extra && *extra && n < 46; extra++)
        argv[n++] = (char *)*extra;
    argv[n] = NULL;
    ct_ranks_t g;
    if (w == 0) {
        const char *clear[] = {
            "RANK",        "WORLD_SIZE",  "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "CTRUN_HEARTBEAT_FD", "TORCHELASTIC_ERROR_FILE",
            NULL};
        ct_child_opts_t o = {.env = clear};
        memset(&g, 0, sizeof g);
        CT_ASSERT_OK(ct_child_start(&g.child[0], argv, &o));
        g.n = 1;
    } else {
        char id[32];
        snprintf(id, sizeof id, "ctrain-cuda-%d", ++run_counter);
        ct_ranks_opts_t o = {
            .world = w, .port = store.port, .run_id = id, .timeout_s = 120, .env = env};
        CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    }
    int rc = ct_ranks_wait(&g, 120000);
    if (rc != 0)
        ct_ranks_dump(&g);
    ct_ranks_close(&g);
    return rc;
}

static void test_cuda_matches_cpu(void)
{
    char dc[300], dg[300], dn[300], da[300];
    dir_path(dc, sizeof dc, "cpu");
    dir_path(dg, sizeof dg, "cuda");
    dir_path(dn, sizeof dn, "nccl1");
    dir_path(da, sizeof da, "amp");
    const char *cpu[] = {"--device", "cpu", NULL};
    const char *cuda[] = {"--device", "cuda", NULL};
    const char *nccl[] = {"--device", "cuda", "--backend", "nccl", "--collective_timeout",
                          "60",       NULL};
    const char *amp[] = {"--device", "cuda", "--use_amp", NULL};
    CT_ASSERT_EQ(train(0, dc, NULL, cpu), 0);
    CT_ASSERT_EQ(train(0, dg, NULL, cuda), 0);
    printf("--device cuda against --device cpu\n");
    train_same_metrics(dc, dg);
    train_same_params(dc, dg);
    CT_ASSERT_EQ(train(1, dn, NULL, nccl), 0);
    printf("1-rank NCCL job against the plain CUDA process\n");
    train_same_metrics(dg, dn);
    train_same_params(dg, dn);
    CT_ASSERT_EQ(train(0, da, NULL, amp), 0);

    /* the same 1-rank NCCL job through the launcher itself: ctrun's store, its worker
     * environment, the unique ID through that store */
    char dl[300];
    dir_path(dl, sizeof dl, "ctrun-nccl1");
    char *argv[] = {(char *)ctrun, "--standalone", "--nproc_per_node", "1",    "--max_restarts",
                    "0",           (char *)ctrain, "--train_dir",      dl,     CFG,
                    "--device",    "cuda",         "--backend",        "nccl", NULL};
    const char *clear[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
                           "MASTER_ADDR", "MASTER_PORT", "CTRUN_HEARTBEAT_FD", NULL};
    ct_child_opts_t o = {.env = clear};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, argv, &o));
    CT_ASSERT_OK(ct_child_wait(&c, 180000));
    if (c.exit_code != 0)
        fprintf(stderr, "ctrun: %s\n%s\n", c.out, c.err);
    CT_ASSERT_EQ(c.exit_code, 0);
    ct_child_close(&c);
    printf("1-rank NCCL job under ctrun against the plain CUDA process\n");
    train_same_metrics(dg, dl);
    train_same_params(dg, dl);
}

static void test_shape_refused(void)
{
    char d[300];
    dir_path(d, sizeof d, "too-long");
    char *argv[] = {(char *)ctrain,
                    "--train_dir",
                    d,
                    "--dataset",
                    "synthetic:users=50,items=40,len=24,seed=5",
                    "--no_time",
                    "--no_mhc",
                    "--maxlen",
                    "300",
                    "--device",
                    "cuda",
                    NULL};
    const char *clear[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                           "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE",
                           NULL};
    ct_child_opts_t o = {.env = clear};
    ct_child_t c;
    CT_ASSERT_OK(ct_child_start(&c, argv, &o));
    CT_ASSERT_OK(ct_child_wait(&c, 60000));
    CT_ASSERT_NE(c.exit_code, 0);
    CT_ASSERT_STR_CONTAINS(c.err, "GPU kernels take --maxlen <= 256");
    ct_child_close(&c);
}

static void test_stall_detected(void)
{
    char d[300];
    dir_path(d, sizeof d, "stall");
    const char *env[] = {"CT_TEST_NCCL_STALL_AT_REDUCE=0:2", NULL};
    char *argv[] = {
        (char *)ctrain, "--train_dir",          d,   CFG, "--device", "cuda", "--backend",
        "nccl",         "--collective_timeout", "3", NULL};
    ct_ranks_t g;
    ct_ranks_opts_t o = {
        .world = 1, .port = store.port, .run_id = "ctrain-cuda-stall", .timeout_s = 60, .env = env};
    int64_t t0 = ct_time_ms();
    CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    int rc = ct_ranks_wait(&g, 60000);
    int64_t took = ct_time_ms() - t0;
    printf("stalled reduction: rank done (%d) after %lld ms\n", rc, (long long)took);
    if (rc == -ETIMEDOUT)
        ct_ranks_dump(&g);
    CT_ASSERT_NE(rc, -ETIMEDOUT);
    CT_ASSERT_NE(g.child[0].exit_code, 0);
    CT_ASSERT_STR_CONTAINS(g.child[0].err, "CT_TEST_NCCL_STALL_AT_REDUCE");
    CT_ASSERT_STR_CONTAINS(g.child[0].err, "NCCL watchdog");
    CT_ASSERT_STR_CONTAINS(g.child[0].err, "did not complete in time");
    ct_ranks_close(&g);
}

static void test_two_ranks(void)
{
    char d1[300], d2[300];
    dir_path(d1, sizeof d1, "cuda1");
    dir_path(d2, sizeof d2, "nccl2");
    const char *cuda[] = {"--device", "cuda", NULL};
    const char *nccl[] = {"--device", "cuda", "--backend", "nccl", NULL};
    CT_ASSERT_EQ(train(0, d1, NULL, cuda), 0);
    CT_ASSERT_EQ(train(2, d2, NULL, nccl), 0);
    printf("2 ranks on NCCL against 1 CUDA process\n");
    train_same_metrics(d1, d2);
    train_same_params(d1, d2);
}

static void test_hang_detected(void)
{
    char d[300];
    dir_path(d, sizeof d, "hang");
    const char *env[] = {"CT_TEST_NCCL_EXIT_AT_REDUCE=1:2", NULL};
    char *argv[] = {
        (char *)ctrain, "--train_dir",          d,   CFG, "--device", "cuda", "--backend",
        "nccl",         "--collective_timeout", "5", NULL};
    ct_ranks_t g;
    ct_ranks_opts_t o = {
        .world = 2, .port = store.port, .run_id = "ctrain-cuda-hang", .timeout_s = 120, .env = env};
    int64_t t0 = ct_time_ms();
    CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    int rc = ct_ranks_wait(&g, 120000);
    int64_t took = ct_time_ms() - t0;
    printf("injected hang: ranks done (%d) after %lld ms\n", rc, (long long)took);
    if (rc == -ETIMEDOUT)
        ct_ranks_dump(&g);
    CT_ASSERT_NE(rc, -ETIMEDOUT); /* both exited by themselves: nobody had to be killed */
    CT_ASSERT_NE(g.child[0].exit_code, 0);
    CT_ASSERT_STR_CONTAINS(g.child[0].err, "NCCL watchdog");
    CT_ASSERT_STR_CONTAINS(g.child[1].err, "CT_TEST_NCCL_EXIT_AT_REDUCE");
    ct_ranks_close(&g);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s gpu|multi-gpu CTRUN_STORE CTRAIN CTRUN\n", argv[0]);
        return 2;
    }
    const bool multi = strcmp(argv[1], "multi-gpu") == 0;
    const int gpus = ct_cuda_device_count();
    if (gpus < (multi ? 2 : 1))
        CT_SKIP(multi ? "fewer than 2 CUDA devices visible" : "no CUDA device visible");
    ctrain = argv[3];
    ctrun = argv[4];
    snprintf(root, sizeof root, "/tmp/ct-ctrain-cuda-%d", (int)getpid());
    CT_ASSERT(mkdir(root, 0700) == 0);
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[2]));
    if (multi) {
        CT_RUN(test_two_ranks);
        CT_RUN(test_hang_detected);
    } else {
        CT_RUN(test_cuda_matches_cpu);
        CT_RUN(test_shape_refused);
        CT_RUN(test_stall_detected);
    }
    ct_store_proc_stop(&store);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CT_ASSERT(system(cmd) == 0);
    return 0;
}
