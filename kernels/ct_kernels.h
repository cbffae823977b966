/*
 * ct_kernels.h - the CPU compute functions. Every op has a CPU function here, in
 * kernels/cpu/<op>.c, and (in builds with CUDA) a twin in ct_kernels_cuda.h with the same name
 * stem and argument order plus a trailing stream. Arguments go outputs first, then inputs,
 * then sizes; each buffer is commented with its shape.
 *
 * The CPU versions are the reference the GPU versions are tested against, and also the fast
 * CPU path: they must stay readable and exact.
 */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random numbers (kernels/cpu/rng.c) -------------------------------------------------
 * Draw k of stream (seed, stream) is lane k % 4 of Philox4x32-10 block k / 4; see
 * ct_philox.h. out[i] is draw offset + i, so a buffer can be filled in pieces, on any device,
 * in any order, and always holds the same numbers. */

/* out: (n) raw 32-bit draws. */
void ct_rng_u32_cpu(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);

/* out: (n) uniform floats in [0, 1). */
void ct_rng_uniform_cpu(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);

#ifdef __cplusplus
}
#endif

#endif /* CT_KERNELS_H */
