/*
 * dropout.cu - dropout with masks regenerated from Philox, and the timeline mask; the twins of
 * kernels/cpu/dropout.c. Each dropout thread computes one Philox block (four draws) and applies
 * the lanes that fall inside the tensor, so a tensor whose offset starts mid-block gets exactly
 * the CPU's draws; the factor and the single multiply are the CPU's, so the result is
 * bit-identical. Attention's dropout on probabilities is fused into attention.cu instead.
 */
#include "ct_cuda_common.h"

__global__ void ct_cuda_dropout__dropout_kernel(float *out, const float *inp, int64_t n, float p,
                                   float keep_scale, uint64_t seed, uint64_t stream,
                                   uint64_t offset, uint64_t nblocks)
{
    const uint64_t first = offset / 4;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < nblocks;
         t += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t kb = first + t;
        const ct_philox_block_t r = ct_philox_block_at(seed, stream, kb);
#pragma unroll
        for (int lane = 0; lane < 4; lane++) {
            const uint64_t k = kb * 4 + (uint64_t)lane;
            if (k < offset || k - offset >= (uint64_t)n)
                continue;
            const uint64_t i = k - offset;
            out[i] = inp[i] * ct_philox_dropout_factor(r.v[lane], p, keep_scale);
        }
    }
}

extern "C" int ct_dropout_cuda(float *out, const float *inp, int64_t n, ct_dropout_t drop,
                               ct_stream_t stream)
{
    CT_CUDA_REQUIRE(n >= 0);
    CT_CUDA_REQUIRE(drop.p < 1.0f);
    if (n == 0)
        return 0;
    if (drop.p <= 0.0f) {
        if (out != inp)
            CT_CUDA_CHECK(cudaMemcpyAsync(out, inp, (size_t)n * sizeof *out,
                                          cudaMemcpyDeviceToDevice, (cudaStream_t)stream), NULL);
        return 0;
    }
    /* The CPU's expression, evaluated in float on the host. */
    const float keep_scale = 1.0f / (1.0f - drop.p);
    const uint64_t nblocks = (drop.offset + (uint64_t)n - 1) / 4 - drop.offset / 4 + 1;
    CT_LAUNCH(ct_cuda_dropout__dropout_kernel, ct__grid_1d((int64_t)nblocks, CT__THREADS),
              CT__THREADS, 0, stream, out, inp, n, drop.p, keep_scale, drop.seed, drop.stream,
              drop.offset, nblocks);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

__global__ void ct_cuda_dropout__timeline_kernel(float *out, const float *inp, const int32_t *seq,
                                                 int64_t n, int C)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        /* Zeros written, not x * 0, which keeps NaN/inf of padding rows out (as the CPU). */
        out[i] = seq[i / C] != 0 ? inp[i] : 0.0f;
    }
}

extern "C" int ct_timeline_mask_cuda(float *out, const float *inp, const int32_t *seq, int N, int C,
                                     ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 0);
    const int64_t n = (int64_t)N * C;
    if (n == 0)
        return 0;
    CT_LAUNCH(ct_cuda_dropout__timeline_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0, stream,
              out, inp, seq, n, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
