/*
 * test_comm_nccl.c (suite gpu; built with NCCL only) - the NCCL communicator where a GPU is
 * visible; exits 77 (skip) when none is.
 *   - unique-ID exchange: ct_worker_init with CTRUN_COMM_BACKEND=nccl as rank 0 of a launched
 *     world of one puts exactly 128 bytes under ctworker/<run id>/attempt_<n>/nccl/0 in the
 *     store (what the other ranks WAIT for and GET);
 *   - a one-rank communicator: allreduce (f32, f64, bf16; sum and avg) of device and of host
 *     buffers (staged) is the identity, broadcast / allgather / barrier work, a timeout setting
 *     sticks;
 *   - with two or more GPUs: two processes (comm_worker hello) sum their ranks over NCCL.
 * Usage: test_comm_nccl PATH_TO_CTRUN_STORE PATH_TO_COMM_WORKER
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "ct_comm_internal.h"
#include "ct_ranks.h"
#include "ct_store_client.h"
#include "ct_test.h"

#define CUDA_OK(call)                                                              \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        CT_ASSERT_MSG(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

static ct_store_proc_t store;
static const char *worker;
static ct_worker_t w;

static void set_env(void)
{
    char port[16];
    snprintf(port, sizeof port, "%d", store.port);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("TORCHELASTIC_RUN_ID", "nccl-test", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
    setenv("TORCHELASTIC_MAX_RESTARTS", "2", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("CTRUN_COMM_BACKEND", "nccl", 1);
    setenv("CTRUN_COMM_TIMEOUT", "60", 1);
}

static void test_unique_id_exchange(void)
{
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ct_worker_init(&w, NULL, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_EQ(ct_comm_backend(w.comm), CT_COMM_NCCL);
    ct_store_client_t st;
    ct_store_client_opts_t so = {.timeout_ms = 10000};
    CT_ASSERT_OK(ct_store_client_connect(&st, "127.0.0.1", store.port, &so, &eb));
    ct_store_bytes_t v;
    CT_ASSERT_OK(ct_store_get(&st, "ctworker/nccl-test/attempt_1/nccl/0", &v, &eb));
    CT_ASSERT_EQ(v.len, 128);
    ct_store_client_close(&st);
}

static void test_one_rank_collectives(void)
{
    ct_errbuf_t eb;
    enum { N = 100003 };
    float *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back);
    CT_ASSERT(h && back);
    for (int i = 0; i < N; i++)
        h[i] = (float)i * 0.5f - 7.0f;
    float *d;
    CUDA_OK(cudaMalloc((void **)&d, N * sizeof *d));
    CUDA_OK(cudaMemcpy(d, h, N * sizeof *d, cudaMemcpyHostToDevice));
    CT_ASSERT_MSG(ct_comm_allreduce(w.comm, d, N, CT_DTYPE_F32, CT_COMM_SUM, &eb) == 0, "%s",
                  eb.msg);
    CT_ASSERT_MSG(ct_comm_allreduce(w.comm, d, N, CT_DTYPE_F32, CT_COMM_AVG, &eb) == 0, "%s",
                  eb.msg);
    CUDA_OK(cudaMemcpy(back, d, N * sizeof *d, cudaMemcpyDeviceToHost));
    CT_ASSERT(memcmp(back, h, N * sizeof *h) == 0);
    /* host memory: staged */
    memcpy(back, h, N * sizeof *h);
    CT_ASSERT_MSG(ct_comm_allreduce(w.comm, back, N, CT_DTYPE_F32, CT_COMM_SUM, &eb) == 0, "%s",
                  eb.msg);
    CT_ASSERT(memcmp(back, h, N * sizeof *h) == 0);
    double dd[3] = {1.25, -2.0, 1e300};
    CT_ASSERT_OK(ct_comm_allreduce(w.comm, dd, 3, CT_DTYPE_F64, CT_COMM_SUM, &eb));
    CT_ASSERT(dd[0] == 1.25 && dd[1] == -2.0 && dd[2] == 1e300);
    uint16_t bf[2] = {0x3F80, 0xC000}; /* 1.0, -2.0 */
    CT_ASSERT_OK(ct_comm_allreduce(w.comm, bf, 2, CT_DTYPE_BF16, CT_COMM_AVG, &eb));
    CT_ASSERT(bf[0] == 0x3F80 && bf[1] == 0xC000);
    uint8_t b[5] = {1, 2, 3, 4, 5}, g[5] = {0};
    CT_ASSERT_OK(ct_comm_broadcast(w.comm, b, 5, 0, &eb));
    CT_ASSERT_OK(ct_comm_allgather(w.comm, b, g, 5, &eb));
    CT_ASSERT(memcmp(b, g, 5) == 0);
    CT_ASSERT_OK(ct_comm_barrier(w.comm, &eb));
    ct_comm_set_timeout(w.comm, 5000);
    CT_ASSERT_EQ(ct_comm_timeout(w.comm), 5000);
    CT_ASSERT_OK(ct_comm_barrier(w.comm, &eb));
    CUDA_OK(cudaFree(d));
    free(h);
    free(back);
    ct_worker_close(&w);
}

static void test_two_gpus(void)
{
    if (ct__comm_gpu_count() < 2) {
        printf("  one GPU: the two-process case needs two\n");
        return;
    }
    char *argv[] = {(char *)worker, "hello", NULL};
    const char *env[] = {"CTRUN_COMM_BACKEND=nccl", NULL};
    ct_ranks_opts_t o = {
        .world = 2, .port = store.port, .run_id = "nccl-two", .timeout_s = 120, .env = env};
    ct_ranks_t g;
    CT_ASSERT_OK(ct_ranks_start(&g, &o, argv));
    int rc = ct_ranks_wait(&g, 300000);
    if (rc != 0)
        ct_ranks_dump(&g);
    CT_ASSERT_EQ(rc, 0);
    CT_ASSERT_STR_CONTAINS(g.child[1].out, "sum 1");
    ct_ranks_close(&g);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_comm_nccl PATH_TO_CTRUN_STORE PATH_TO_COMM_WORKER\n");
        return 2;
    }
    if (ct__comm_gpu_count() == 0)
        CT_SKIP("no GPU visible (cudaGetDeviceCount)");
    worker = argv[2];
    CT_ASSERT_OK(ct_store_proc_start(&store, argv[1]));
    set_env();
    CT_RUN(test_unique_id_exchange);
    CT_RUN(test_one_rank_collectives);
    CT_RUN(test_two_gpus);
    ct_store_proc_stop(&store);
    return 0;
}
