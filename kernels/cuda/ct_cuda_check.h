/*
 * ct_cuda_check.h - the CUDA error check used by every launcher: it names the file, line and
 * CUDA's error string in one log line and turns the failure into CT_ECUDA. Private to
 * kernels/cuda (C++ translation units compiled by nvcc).
 */
#ifndef CT_CUDA_CHECK_H
#define CT_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "ct_error.h"
#include "ct_log.h"

/* Evaluates a CUDA call; on failure logs it and returns CT_ECUDA from the enclosing function. */
#define CT_CUDA_CHECK(call)                                                                       \
    do {                                                                                          \
        cudaError_t ct__e = (call);                                                               \
        if (ct__e != cudaSuccess) {                                                               \
            ct_log_error("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__,                      \
                         cudaGetErrorString(ct__e), #call);                                       \
            return CT_ECUDA;                                                                      \
        }                                                                                         \
    } while (0)

/* The same, but stores CT_ECUDA in rc and jumps to label, for functions that clean up. */
#define CT_CUDA_CHECK_GOTO(call, rc, label)                                                       \
    do {                                                                                          \
        cudaError_t ct__e = (call);                                                               \
        if (ct__e != cudaSuccess) {                                                               \
            ct_log_error("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__,                      \
                         cudaGetErrorString(ct__e), #call);                                       \
            (rc) = CT_ECUDA;                                                                      \
            goto label;                                                                           \
        }                                                                                         \
    } while (0)

/* After a kernel launch: reports a bad configuration or an earlier asynchronous error. */
#define CT_CUDA_CHECK_LAUNCH() CT_CUDA_CHECK(cudaGetLastError())

#define CT_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

#endif /* CT_CUDA_CHECK_H */
