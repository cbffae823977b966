/*
 * ct_cuda_check.h - the CUDA and cuBLAS error checks used by every launcher: each names the
 * file, line, the library's error string and the failing call in one log line and turns the
 * failure into CT_ECUDA or CT_ECUBLAS; and the shape check that launchers run before any CUDA
 * call. Private to kernels/cuda (C++ translation units compiled by nvcc).
 */
#ifndef CT_CUDA_CHECK_H
#define CT_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "ct_error.h"
#include "ct_log.h"

/* Evaluates a CUDA call; on failure logs it and returns CT_ECUDA from the enclosing function. */
#define CT_CUDA_CHECK(call)                                                  \
    do {                                                                     \
        cudaError_t ct__e = (call);                                          \
        if (ct__e != cudaSuccess) {                                          \
            ct_log_error("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__, \
                         cudaGetErrorString(ct__e), #call);                  \
            return CT_ECUDA;                                                 \
        }                                                                    \
    } while (0)

/* The same, but stores CT_ECUDA in rc and jumps to label, for functions that clean up. */
#define CT_CUDA_CHECK_GOTO(call, rc, label)                                  \
    do {                                                                     \
        cudaError_t ct__e = (call);                                          \
        if (ct__e != cudaSuccess) {                                          \
            ct_log_error("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__, \
                         cudaGetErrorString(ct__e), #call);                  \
            (rc) = CT_ECUDA;                                                 \
            goto label;                                                      \
        }                                                                    \
    } while (0)

/* After a kernel launch: reports a bad configuration or an earlier asynchronous error. */
#define CT_CUDA_CHECK_LAUNCH() CT_CUDA_CHECK(cudaGetLastError())

/* Evaluates a cuBLAS call; on failure logs it and returns CT_ECUBLAS. */
#define CT_CUBLAS_CHECK(call)                                                  \
    do {                                                                       \
        cublasStatus_t ct__s = (call);                                         \
        if (ct__s != CUBLAS_STATUS_SUCCESS) {                                  \
            ct_log_error("cuBLAS error at %s:%d: %s (%s)", __FILE__, __LINE__, \
                         cublasGetStatusString(ct__s), #call);                 \
            return CT_ECUBLAS;                                                 \
        }                                                                      \
    } while (0)

/* The same, storing CT_ECUBLAS in rc and jumping to label. */
#define CT_CUBLAS_CHECK_GOTO(call, rc, label)                                  \
    do {                                                                       \
        cublasStatus_t ct__s = (call);                                         \
        if (ct__s != CUBLAS_STATUS_SUCCESS) {                                  \
            ct_log_error("cuBLAS error at %s:%d: %s (%s)", __FILE__, __LINE__, \
                         cublasGetStatusString(ct__s), #call);                 \
            (rc) = CT_ECUBLAS;                                                 \
            goto label;                                                        \
        }                                                                      \
    } while (0)

/* A launcher's precondition on its shapes: when cond is false, logs the condition with the
 * function, file and line and returns CT_ERANGE_VALUE. Launchers check before any CUDA call. */
#define CT_CUDA_REQUIRE(cond)                                                               \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            ct_log_error("%s: unsupported arguments at %s:%d: need %s", __func__, __FILE__, \
                         __LINE__, #cond);                                                  \
            return CT_ERANGE_VALUE;                                                         \
        }                                                                                   \
    } while (0)

#define CT_CEIL_DIV(a, b) (((a) + (b)-1) / (b))

#endif /* CT_CUDA_CHECK_H */
