/*
 * rng.cu - GPU fill of Philox draws, the twin of kernels/cpu/rng.c. Each thread computes one
 * Philox block (four draws) and writes the lanes that fall inside [offset, offset + n), so a
 * fill that starts mid-block gives exactly the CPU's numbers.
 */
#include "ct_cuda_common.h"

template <bool UNIT>
__global__ void ct_rng_kernel(void *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                              uint64_t nblocks)
{
    uint64_t first_block = offset / 4;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < nblocks;
         t += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t block = first_block + t;
        ct_philox_block_t b = ct_philox_block_at(seed, stream, block);
        for (int lane = 0; lane < 4; lane++) {
            uint64_t k = block * 4 + (uint64_t)lane;
            if (k < offset || k - offset >= (uint64_t)n)
                continue;
            uint64_t i = k - offset;
            if (UNIT)
                ((float *)out)[i] = ct_philox_to_unit_float(b.v[lane]);
            else
                ((uint32_t *)out)[i] = b.v[lane];
        }
    }
}

template <bool UNIT>
static int ct_rng_launch(void *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                         ct_stream_t s)
{
    if (n <= 0)
        return 0;
    uint64_t last = offset + (uint64_t)n - 1;
    uint64_t nblocks = last / 4 - offset / 4 + 1;
    const int threads = 256;
    uint64_t grid = CT_CEIL_DIV(nblocks, (uint64_t)threads);
    if (grid > 65535u * 16u)
        grid = 65535u * 16u; /* the grid-stride loop covers the rest */
    CT_LAUNCH(ct_rng_kernel<UNIT>, (unsigned)grid, threads, 0, s, out, n, seed, stream, offset,
              nblocks);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_rng_u32_cuda(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream,
                               uint64_t offset, ct_stream_t s)
{
    return ct_rng_launch<false>(out, n, seed, stream, offset, s);
}

extern "C" int ct_rng_uniform_cuda(float *out, int64_t n, uint64_t seed, uint64_t stream,
                                   uint64_t offset, ct_stream_t s)
{
    return ct_rng_launch<true>(out, n, seed, stream, offset, s);
}
