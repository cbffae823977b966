/*
 * ct_rng.c - sequential draws over the counter-based Philox generator of kernels/ct_philox.h
 * (the one implementation of Philox in the tree), plus bias-free integer ranges. The struct
 * only caches the current 4-lane block; the sequence itself is a pure function of
 * (seed, stream, offset), so a generator can be re-created at any offset.
 */
#include "ct_philox.h"
#include "ctworker.h"

void ct_rng_init(ct_rng_t *r, uint64_t seed, uint64_t stream, uint64_t offset)
{
    r->seed = seed;
    r->stream = stream;
    r->offset = offset;
    r->cached_block = UINT64_MAX;
}

uint32_t ct_rng_u32(ct_rng_t *r)
{
    uint64_t k = r->offset++;
    uint64_t block = k / 4;
    if (block != r->cached_block) {
        ct_philox_block_t b = ct_philox_block_at(r->seed, r->stream, block);
        for (int i = 0; i < 4; i++)
            r->cache[i] = b.v[i];
        r->cached_block = block;
    }
    return r->cache[k % 4];
}

uint64_t ct_rng_u64(ct_rng_t *r)
{
    uint64_t lo = ct_rng_u32(r);
    uint64_t hi = ct_rng_u32(r);
    return lo | hi << 32;
}

uint64_t ct_rng_below(ct_rng_t *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    if (n == (uint64_t)1 << 32)
        return ct_rng_u32(r);
    if (n < (uint64_t)1 << 32) {
        /* Lemire (2019): the high half of x * n is uniform in [0, n) once the low halves that
         * would over-represent some values (fewer than 2^32 mod n of them) are rejected. */
        uint32_t n32 = (uint32_t)n;
        uint64_t m = (uint64_t)ct_rng_u32(r) * n32;
        uint32_t low = (uint32_t)m;
        if (low < n32) {
            uint32_t threshold = (uint32_t)(-n32) % n32;
            while (low < threshold) {
                m = (uint64_t)ct_rng_u32(r) * n32;
                low = (uint32_t)m;
            }
        }
        return m >> 32;
    }
    /* Beyond 32 bits: draw under the smallest covering bit mask and reject (p >= 1/2 each). */
    uint64_t mask = n - 1;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t x;
    do {
        x = ct_rng_u64(r) & mask;
    } while (x >= n);
    return x;
}

float ct_rng_uniform(ct_rng_t *r)
{
    return ct_philox_to_unit_float(ct_rng_u32(r));
}
