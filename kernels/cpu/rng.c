/*
 * rng.c - CPU fill of Philox draws (the reference for kernels/cuda/rng.cu). Whole blocks are
 * computed once and their four lanes copied out; a partial block at either end is handled by
 * the same loop.
 */
#include "ct_kernels.h"
#include "ct_philox.h"

void ct_rng_u32_cpu(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset)
{
    int64_t i = 0;
    while (i < n) {
        uint64_t k = offset + (uint64_t)i;
        ct_philox_block_t b = ct_philox_block_at(seed, stream, k / 4);
        for (unsigned lane = (unsigned)(k % 4); lane < 4 && i < n; lane++)
            out[i++] = b.v[lane];
    }
}

void ct_rng_uniform_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset)
{
    int64_t i = 0;
    while (i < n) {
        uint64_t k = offset + (uint64_t)i;
        ct_philox_block_t b = ct_philox_block_at(seed, stream, k / 4);
        for (unsigned lane = (unsigned)(k % 4); lane < 4 && i < n; lane++)
            out[i++] = ct_philox_to_unit_float(b.v[lane]);
    }
}
