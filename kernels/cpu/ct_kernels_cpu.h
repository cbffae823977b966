/*
 * ct_kernels_cpu.h - helpers shared between the files of kernels/cpu and nothing else (not
 * installed, not for callers of ct_kernels.h).
 */
#ifndef CT_KERNELS_CPU_H
#define CT_KERNELS_CPU_H

#include <stdint.h>

/* out[i] = inp[i] * (keep ? keep_scale : 0) with the keep decision of draw first + i of
 * (seed, stream) (ct_philox_dropout_factor). out may equal inp. */
void ct__dropout_span(float *out, const float *inp, int64_t n, float p, float keep_scale,
                      uint64_t seed, uint64_t stream, uint64_t first);

#endif /* CT_KERNELS_CPU_H */
