/*
 * ct_kernels_cuda.h - the CUDA twins of ct_kernels.h: same name stem with _cuda instead of
 * _cpu, same arguments, plus a trailing stream. Pointers are device pointers. Each launcher
 * checks its launch with cudaGetLastError and returns 0 or CT_ECUDA (the detail logged with
 * file and line). Only builds with CUDA compile and link these.
 *
 * The header is plain C: the stream is declared through CUDA's own opaque struct name, so C
 * code can pass a cudaStream_t without including CUDA headers.
 */
#ifndef CT_KERNELS_CUDA_H
#define CT_KERNELS_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *ct_stream_t; /* identical to cudaStream_t; NULL = default stream */

/* Number of CUDA devices this process can use (CUDA_VISIBLE_DEVICES respected); 0 when there
 * is no GPU or no driver. Never fails: the reason for 0 is logged at debug level. */
int ct_cuda_device_count(void);

/* out: (n) raw 32-bit draws, as ct_rng_u32_cpu. */
int ct_rng_u32_cuda(uint32_t *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                    ct_stream_t s);

/* out: (n) uniform floats in [0, 1), as ct_rng_uniform_cpu. */
int ct_rng_uniform_cuda(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                        ct_stream_t s);

#ifdef __cplusplus
}
#endif

#endif /* CT_KERNELS_CUDA_H */
