/*
 * ct_cuda_check.h - the one set of CUDA and cuBLAS error checks, for the kernels (C++ under
 * nvcc) and libctworker (C): each names the failing call, the file and line and the library's
 * error string in one line and turns the failure into CT_ECUDA or CT_ECUBLAS. With an error
 * buffer the line goes there (the caller reports it); with eb = NULL it is logged at once
 * (the kernels' launchers, whose callers only see the code).
 *
 *   CT_CUDA_CHECK(call, eb)               on failure: returns CT_ECUDA
 *   CT_CUDA_CHECK_GOTO(call, rc, eb, l)   on failure: rc = CT_ECUDA, goto l (for clean-up)
 *   CT_CUBLAS_CHECK(call, eb), CT_CUBLAS_CHECK_GOTO(call, rc, eb, l)   the same for cuBLAS
 *
 * Only for builds with CUDA (include it from CUDA-only files). Not here: NCCL's checks (they
 * also need the communicator's last-error text: ct_comm_nccl.c), kernel shape requirements
 * (kernels/cuda/ct_cuda_common.h).
 */
#ifndef CT_CUDA_CHECK_H
#define CT_CUDA_CHECK_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "ct_error.h"
#include "ct_log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The failure of a CUDA call: into eb, or logged when eb is NULL. Returns CT_ECUDA. */
static inline int ct_cuda_check_fail(ct_errbuf_t *eb, cudaError_t e, const char *call,
                                     const char *file, int line)
{
    if (eb == NULL) {
        ct_log_error("CUDA error at %s:%d: %s (%s)", file, line, cudaGetErrorString(e), call);
        return CT_ECUDA;
    }
    return ct_errbuf_set(eb, CT_ECUDA, "CUDA error at %s:%d: %s (%s)", file, line,
                         cudaGetErrorString(e), call);
}

/* The failure of a cuBLAS call, likewise. Returns CT_ECUBLAS. */
static inline int ct_cublas_check_fail(ct_errbuf_t *eb, cublasStatus_t s, const char *call,
                                       const char *file, int line)
{
    if (eb == NULL) {
        ct_log_error("cuBLAS error at %s:%d: %s (%s)", file, line, cublasGetStatusString(s),
                     call);
        return CT_ECUBLAS;
    }
    return ct_errbuf_set(eb, CT_ECUBLAS, "cuBLAS error at %s:%d: %s (%s)", file, line,
                         cublasGetStatusString(s), call);
}

#ifdef __cplusplus
}
#endif

#define CT_CUDA_CHECK(call, eb)                                                        \
    do {                                                                               \
        cudaError_t ct__cuda_e = (call);                                               \
        if (ct__cuda_e != cudaSuccess)                                                 \
            return ct_cuda_check_fail((eb), ct__cuda_e, #call, __FILE__, __LINE__);    \
    } while (0)

#define CT_CUDA_CHECK_GOTO(call, rc, eb, label)                                        \
    do {                                                                               \
        cudaError_t ct__cuda_e = (call);                                               \
        if (ct__cuda_e != cudaSuccess) {                                               \
            (rc) = ct_cuda_check_fail((eb), ct__cuda_e, #call, __FILE__, __LINE__);    \
            goto label;                                                                \
        }                                                                              \
    } while (0)

#define CT_CUBLAS_CHECK(call, eb)                                                      \
    do {                                                                               \
        cublasStatus_t ct__cublas_s = (call);                                          \
        if (ct__cublas_s != CUBLAS_STATUS_SUCCESS)                                     \
            return ct_cublas_check_fail((eb), ct__cublas_s, #call, __FILE__, __LINE__); \
    } while (0)

#define CT_CUBLAS_CHECK_GOTO(call, rc, eb, label)                                      \
    do {                                                                               \
        cublasStatus_t ct__cublas_s = (call);                                          \
        if (ct__cublas_s != CUBLAS_STATUS_SUCCESS) {                                   \
            (rc) = ct_cublas_check_fail((eb), ct__cublas_s, #call, __FILE__, __LINE__); \
            goto label;                                                                \
        }                                                                              \
    } while (0)

#endif /* CT_CUDA_CHECK_H */
