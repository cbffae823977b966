/*
 * test_rng_gpu.c (gpu suite) - the CUDA Philox fill against its CPU twin, bit for bit, at
 * offsets that start and end mid-block and at a size that needs the grid-stride loop. The
 * output is poisoned first so an element the kernel skipped cannot pass. Skips (77) when no
 * GPU is visible.
 */
#include <cuda_runtime_api.h>

#include "ct_kernels.h"
#include "ct_kernels_cuda.h"
#include "ct_test.h"

#define CUDA_OK(call)                                                              \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        CT_ASSERT_MSG(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

static void check_case(int64_t n, uint64_t seed, uint64_t stream, uint64_t offset)
{
    uint32_t *want = malloc((size_t)n * sizeof *want);
    uint32_t *got = malloc((size_t)n * sizeof *got);
    float *wantf = malloc((size_t)n * sizeof *wantf);
    float *gotf = malloc((size_t)n * sizeof *gotf);
    CT_ASSERT(want && got && wantf && gotf);
    ct_rng_u32_cpu(want, n, seed, stream, offset);
    ct_rng_uniform_cpu(wantf, n, seed, stream, offset);

    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, (size_t)n * 4));
    CUDA_OK(cudaMemset(d, 0xA5, (size_t)n * 4)); /* poison */
    CT_ASSERT_OK(ct_rng_u32_cuda(d, n, seed, stream, offset, NULL));
    CUDA_OK(cudaMemcpy(got, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemset(d, 0xFF, (size_t)n * 4)); /* poison: NaN as floats */
    CT_ASSERT_OK(ct_rng_uniform_cuda(d, n, seed, stream, offset, NULL));
    CUDA_OK(cudaMemcpy(gotf, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(d));

    for (int64_t i = 0; i < n; i++) {
        CT_ASSERT_MSG(got[i] == want[i], "u32 n=%lld offset=%llu: element %lld is %08x, CPU %08x",
                      (long long)n, (unsigned long long)offset, (long long)i, got[i], want[i]);
        CT_ASSERT_MSG(memcmp(&gotf[i], &wantf[i], 4) == 0, "uniform element %lld: %.9g vs %.9g",
                      (long long)i, gotf[i], wantf[i]);
    }
    free(want);
    free(got);
    free(wantf);
    free(gotf);
}

static void test_gpu_matches_cpu(void)
{
    check_case(1, 0, 0, 0);
    check_case(7, 42, 7, 13);
    check_case(1000, 0x299f31d0a4093822ull, 3, 0xfffffffffull); /* counter crosses 2^32 blocks */
    check_case(4096 * 1024 + 3, 1234, 5, 2);                    /* thousands of thread blocks */
}

int main(void)
{
    if (ct_cuda_device_count() < 1)
        CT_SKIP("no CUDA device visible");
    CT_RUN(test_gpu_matches_cpu);
    return 0;
}
