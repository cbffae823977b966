/*
 * context.cu - ct_cuda_ctx_t: the cuBLAS handle, its workspace and the launchers' scratch, made
 * once per stream. It owns their lifetime and nothing else; the stream itself stays the
 * caller's, and which device the context lives on is whatever device is current at init.
 */
#include <string.h>

#include "ct_cuda_common.h"

extern "C" int ct_cuda_ctx_init(ct_cuda_ctx_t *ctx, ct_stream_t stream, unsigned flags)
{
    int rc = 0;
    cublasHandle_t h = NULL;
    memset(ctx, 0, sizeof *ctx);
    if (ct_cuda_device_count() < 1) {
        ct_log_error("ct_cuda_ctx_init: no CUDA device visible");
        return CT_ENOGPU;
    }
    ctx->stream = stream;
    ctx->flags = flags;
    CT_CUBLAS_CHECK_GOTO(cublasCreate(&h), rc, NULL, fail);
    ctx->blas = h;
    CT_CUDA_CHECK_GOTO(cudaMalloc(&ctx->workspace, CT_CUDA_CTX_WORKSPACE_NBYTES), rc, NULL, fail);
    ctx->workspace_nbytes = CT_CUDA_CTX_WORKSPACE_NBYTES;
    CT_CUDA_CHECK_GOTO(cudaMalloc((void **)&ctx->scratch, CT_CUDA_CTX_SCRATCH * sizeof(float)), rc, NULL, fail);
    /* cublasSetStream resets the handle to its default workspace, so the workspace is set
     * after the stream. */
    CT_CUBLAS_CHECK_GOTO(cublasSetStream(h, (cudaStream_t)stream), rc, NULL, fail);
    CT_CUBLAS_CHECK_GOTO(cublasSetWorkspace(h, ctx->workspace, ctx->workspace_nbytes), rc, NULL, fail);
    CT_CUBLAS_CHECK_GOTO(cublasSetMathMode(h, (flags & CT_CUDA_CTX_TF32)
                                                  ? CUBLAS_TF32_TENSOR_OP_MATH
                                                  : CUBLAS_DEFAULT_MATH), rc, NULL, fail);
    CT_CUBLAS_CHECK_GOTO(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), rc, NULL, fail);
    return 0;
fail:
    ct_cuda_ctx_close(ctx);
    return rc;
}

extern "C" void ct_cuda_ctx_close(ct_cuda_ctx_t *ctx)
{
    if (!ctx)
        return;
    /* The workspace and scratch may still be in use by queued work. Errors here are only
     * logged: there is nothing left to undo. */
    if (ctx->blas || ctx->workspace || ctx->scratch) {
        cudaError_t e = cudaStreamSynchronize((cudaStream_t)ctx->stream);
        if (e != cudaSuccess)
            ct_log_warn("ct_cuda_ctx_close: stream synchronise: %s", cudaGetErrorString(e));
    }
    if (ctx->blas) {
        cublasStatus_t s = cublasDestroy(ctx->blas);
        if (s != CUBLAS_STATUS_SUCCESS)
            ct_log_warn("ct_cuda_ctx_close: cublasDestroy: %s", cublasGetStatusString(s));
    }
    if (ctx->workspace)
        (void)cudaFree(ctx->workspace);
    if (ctx->scratch)
        (void)cudaFree(ctx->scratch);
    memset(ctx, 0, sizeof *ctx);
}
