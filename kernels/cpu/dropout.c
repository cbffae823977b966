/*
 * dropout.c - dropout with regenerated masks, and the timeline mask. Both are their own
 * backward: the forward multiplies the activation by a mask, the backward multiplies the
 * gradient by the same mask, which for dropout is recomputed from (seed, stream, offset) with
 * the Philox generator instead of being stored.
 *
 * ct__dropout_span is shared with attention.c (declared in ct_kernels_cpu.h): it computes one
 * Philox block per four consecutive elements, the same draws ct_rng_u32_cpu would return.
 */
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"
#include "ct_philox.h"

void ct__dropout_span(float *out, const float *inp, int64_t n, float p, float keep_scale,
                      uint64_t seed, uint64_t stream, uint64_t first)
{
    int64_t i = 0;
    while (i < n) {
        uint64_t k = first + (uint64_t)i;
        ct_philox_block_t b = ct_philox_block_at(seed, stream, k / 4);
        for (unsigned lane = (unsigned)(k % 4); lane < 4 && i < n; lane++, i++)
            out[i] = inp[i] * ct_philox_dropout_factor(b.v[lane], p, keep_scale);
    }
}

void ct_dropout_cpu(float *out, const float *inp, int64_t n, ct_dropout_t drop)
{
    if (drop.p <= 0.0f) {
        if (out != inp)
            memmove(out, inp, (size_t)n * sizeof *out);
        return;
    }
    ct__dropout_span(out, inp, n, drop.p, 1.0f / (1.0f - drop.p), drop.seed, drop.stream,
                     drop.offset);
}

void ct_timeline_mask_cpu(float *out, const float *inp, const int32_t *seq, int N, int C)
{
    for (int r = 0; r < N; r++) {
        float *o = out + (size_t)r * C;
        const float *x = inp + (size_t)r * C;
        if (seq[r] != 0) {
            if (o != x)
                memcpy(o, x, (size_t)C * sizeof *o);
        } else {
            /* Written as zeros rather than x * 0, which keeps NaN/inf of padding rows out. */
            memset(o, 0, (size_t)C * sizeof *o);
        }
    }
}
