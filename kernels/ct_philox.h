/*
 * ct_philox.h - the Philox4x32-10 counter-based generator (Salmon et al., SC'11), one inline
 * function shared verbatim by the CPU code and the CUDA kernels, so both draw bit-identical
 * numbers for the same (key, counter).
 *
 * A counter-based generator has no state to carry: the k-th draw of a stream is a pure
 * function of (seed, stream, k). That is what makes a resumed run replay exactly the draws the
 * dead run would have made, and what lets a GPU thread compute its own draw without a shared
 * sequence. This header is C and CUDA at once; it holds no globals.
 */
#ifndef CT_PHILOX_H
#define CT_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define CT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CT_HOST_DEVICE static inline
#endif

typedef struct ct_philox_block {
    uint32_t v[4];
} ct_philox_block_t;

/* The multipliers and Weyl key increments of Philox4x32 from the paper. */
#define CT_PHILOX_M0 0xD2511F53u
#define CT_PHILOX_M1 0xCD9E8D57u
#define CT_PHILOX_W0 0x9E3779B9u
#define CT_PHILOX_W1 0xBB67AE85u

CT_HOST_DEVICE ct_philox_block_t ct_philox4x32_round(ct_philox_block_t c, uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)CT_PHILOX_M0 * c.v[0];
    uint64_t p1 = (uint64_t)CT_PHILOX_M1 * c.v[2];
    ct_philox_block_t r;
    r.v[0] = (uint32_t)(p1 >> 32) ^ c.v[1] ^ k0;
    r.v[1] = (uint32_t)p1;
    r.v[2] = (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1;
    r.v[3] = (uint32_t)p0;
    return r;
}

/* Ten rounds over counter ctr with key (k0, k1); the key is bumped between rounds. */
CT_HOST_DEVICE ct_philox_block_t ct_philox4x32_10(ct_philox_block_t ctr, uint32_t k0, uint32_t k1)
{
    ctr = ct_philox4x32_round(ctr, k0, k1);
    for (int i = 1; i < 10; i++) {
        k0 += CT_PHILOX_W0;
        k1 += CT_PHILOX_W1;
        ctr = ct_philox4x32_round(ctr, k0, k1);
    }
    return ctr;
}

/* The project's mapping from (seed, stream, index) to a counter and key: the key is the seed,
 * the counter's low half the block index (index / 4), its high half the stream. Each block
 * yields four 32-bit draws; draw `index` is lane index % 4 of its block. */
CT_HOST_DEVICE ct_philox_block_t ct_philox_block_at(uint64_t seed, uint64_t stream, uint64_t block)
{
    ct_philox_block_t c;
    c.v[0] = (uint32_t)block;
    c.v[1] = (uint32_t)(block >> 32);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    return ct_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* A uniform float in [0, 1) from the top 24 bits of a draw (every value exactly representable,
 * 1.0 never produced). */
CT_HOST_DEVICE float ct_philox_to_unit_float(uint32_t x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* The dropout rule every device shares: an element whose draw is x is kept iff its unit float
 * is >= p (so it is kept with probability 1 - p, to 2^-24), and a kept element is multiplied by
 * 1 / (1 - p) computed in float. Regenerating the draw from (seed, stream, index) in the
 * backward pass, on either device, gives exactly the forward's mask: nothing is stored. */
CT_HOST_DEVICE float ct_philox_dropout_factor(uint32_t x, float p, float keep_scale)
{
    return ct_philox_to_unit_float(x) >= p ? keep_scale : 0.0f;
}

#endif /* CT_PHILOX_H */
