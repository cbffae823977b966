/*
 * linear.cu - fully connected layers on cuBLAS sgemm, the twins of kernels/cpu/linear.c: the
 * plain linear (y = x W^T + b; also the FFN's kernel-size-1 convolutions and the attention's
 * output projection) and the attention's packed input projection, whose query part may read a
 * different input than its key/value part.
 *
 * Row-major (N,K) buffers are column-major (K,N) matrices to cuBLAS, so every product below is
 * the transpose of the CPU's: out^T = W inp^T, dinp^T += W^T dout^T, dweight^T += inp^T dout.
 * Leading dimensions let the packed projection read and write its q, k, v columns in place.
 * The bias is broadcast into out before the product (beta = 1), as the CPU does. The bias
 * gradient is a column sum over rows: blocks of rows write partial sums to ctx->scratch and a
 * second kernel adds them in row-block order, so it is deterministic; the split depends only on
 * (N, OC).
 *
 * Not here: cuBLASLt epilogues (bias fused into the product, bias gradient with the weight
 * gradient). They would save one pass over out per call; see bench/gpu for the numbers that
 * should decide it.
 */
#include "ct_cuda_common.h"

__global__ void ct_cuda_linear__bias_fill_kernel(float *out, int ldo, const float *bias, int64_t n,
                                                 int OC)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / OC;
        const int o = (int)(i - r * OC);
        out[r * ldo + o] = bias[o];
    }
}

/* Column sums of x (N rows of OC columns, ld apart) over rows [p*R, p*R + R): a block of 32
 * columns by 8 row lanes, the 8 lanes' sums added in lane order. direct: add into dst[c]
 * (one part covers all rows); otherwise write dst[p*OC + c]. */
__global__ void ct_cuda_linear__colsum_part_kernel(float *dst, int direct, const float *x, int ld,
                                                   int N, int OC, int R)
{
    __shared__ float sh[8][33];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int c = (int)blockIdx.x * 32 + tx;
    const int64_t r0 = (int64_t)blockIdx.y * R;
    const int64_t r1 = r0 + R < N ? r0 + R : N;
    float acc = 0.0f;
    if (c < OC)
        for (int64_t r = r0 + ty; r < r1; r += 8)
            acc += x[r * ld + c];
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < OC) {
        float t = sh[0][tx];
#pragma unroll
        for (int k = 1; k < 8; k++)
            t += sh[k][tx];
        if (direct)
            dst[c] += t;
        else
            dst[(int64_t)blockIdx.y * OC + c] = t;
    }
}

__global__ void ct_cuda_linear__colsum_final_kernel(float *dbias, const float *part, int parts,
                                                    int OC)
{
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= OC)
        return;
    float t = 0.0f;
#pragma unroll 8
    for (int p = 0; p < parts; p++)
        t += part[(int64_t)p * OC + c];
    dbias[c] += t;
}

/* dbias[c] += sum over the N rows of x[r, c]. */
static int ct_cuda_linear__colsum(float *dbias, const float *x, int ld, int N, int OC,
                                  const ct_cuda_ctx_t *ctx)
{
    const int64_t max_parts = (int64_t)(CT_CUDA_CTX_SCRATCH / (size_t)OC);
    int64_t parts = CT_CEIL_DIV((int64_t)N, (int64_t)64);
    if (parts > max_parts)
        parts = max_parts;
    if (parts > 4096)
        parts = 4096;
    if (parts < 1)
        parts = 1;
    const int R = (int)CT_CEIL_DIV((int64_t)N, parts);
    dim3 grid((unsigned)CT_CEIL_DIV(OC, 32), (unsigned)parts);
    dim3 block(32, 8);
    if (parts == 1) {
        CT_LAUNCH(ct_cuda_linear__colsum_part_kernel, grid, block, 0, ctx->stream, dbias, 1, x, ld,
                  N, OC, R);
        CT_CUDA_CHECK_LAUNCH();
        return 0;
    }
    CT_LAUNCH(ct_cuda_linear__colsum_part_kernel, grid, block, 0, ctx->stream, ctx->scratch, 0, x,
              ld, N, OC, R);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_linear__colsum_final_kernel, (unsigned)CT_CEIL_DIV(OC, 128), 128, 0,
              ctx->stream, dbias, ctx->scratch, (int)parts, OC);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* out[r, 0:OC] = inp[r, 0:IC] W^T + bias, rows of out ldo apart and of inp ldi apart. */
static int ct_cuda_linear__linear_fwd(float *out, int ldo, const float *inp, int ldi,
                                      const float *weight, const float *bias, int N, int IC, int OC,
                                      const ct_cuda_ctx_t *ctx)
{
    if (N <= 0 || OC <= 0)
        return 0;
    float alpha = 1.0f, beta = 0.0f;
    if (bias) {
        const int64_t n = (int64_t)N * OC;
        CT_LAUNCH(ct_cuda_linear__bias_fill_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0,
                  ctx->stream, out, ldo, bias, n, OC);
        CT_CUDA_CHECK_LAUNCH();
        beta = 1.0f;
    }
    CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &alpha, weight, IC, inp, ldi,
                             &beta, out, ldo), NULL);
    return 0;
}

/* The backward of ct_cuda_linear__linear_fwd, all three gradients accumulated; dout rows lds apart.
 */
static int ct_cuda_linear__linear_bwd(float *dinp, int ldi, float *dweight, float *dbias,
                                      const float *dout, int lds, const float *inp,
                                      const float *weight, int N, int IC, int OC,
                                      const ct_cuda_ctx_t *ctx)
{
    if (N <= 0 || OC <= 0)
        return 0;
    float one = 1.0f;
    if (dinp)
        CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, weight, IC, dout,
                                 lds, &one, dinp, ldi), NULL);
    if (dweight)
        CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, ldi, dout,
                                 lds, &one, dweight, IC), NULL);
    if (dbias)
        return ct_cuda_linear__colsum(dbias, dout, lds, N, OC, ctx);
    return 0;
}

extern "C" int ct_linear_forward_cuda(float *out, const float *inp, const float *weight,
                                      const float *bias, int N, int IC, int OC,
                                      const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(N >= 0 && IC >= 1 && OC >= 0);
    return ct_cuda_linear__linear_fwd(out, OC, inp, IC, weight, bias, N, IC, OC, ctx);
}

extern "C" int ct_linear_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const float *inp, const float *weight, int N, int IC, int OC,
                                       const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(N >= 0 && IC >= 1 && OC >= 0);
    return ct_cuda_linear__linear_bwd(dinp, IC, dweight, dbias, dout, OC, inp, weight, N, IC, OC,
                                      ctx);
}

/* GPT-2's Conv1D, weight (IC,OC) row-major: in cuBLAS's column-major terms
 * out^T (OC,N) = W^T (OC,IC) inp^T (IC,N), where the stored W already reads as W^T (ld OC). */
extern "C" int ct_conv1d_forward_cuda(float *out, const float *inp, const float *weight,
                                      const float *bias, int N, int IC, int OC,
                                      const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(N >= 0 && IC >= 1 && OC >= 0);
    if (N <= 0 || OC <= 0)
        return 0;
    float alpha = 1.0f, beta = 0.0f;
    if (bias) {
        const int64_t n = (int64_t)N * OC;
        CT_LAUNCH(ct_cuda_linear__bias_fill_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0,
                  ctx->stream, out, OC, bias, n, OC);
        CT_CUDA_CHECK_LAUNCH();
        beta = 1.0f;
    }
    CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, OC, N, IC, &alpha, weight, OC, inp, IC,
                             &beta, out, OC), NULL);
    return 0;
}

/* dinp^T (IC,N) += W (IC,OC) dout^T (OC,N); dW^T (OC,IC) += dout^T (OC,N) inp (N,IC). */
extern "C" int ct_conv1d_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const float *inp, const float *weight, int N, int IC, int OC,
                                       const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(N >= 0 && IC >= 1 && OC >= 0);
    if (N <= 0 || OC <= 0)
        return 0;
    float one = 1.0f;
    if (dinp)
        CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, IC, N, OC, &one, weight, OC, dout,
                                 OC, &one, dinp, IC), NULL);
    if (dweight)
        CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, OC, IC, N, &one, dout, OC, inp, IC,
                                 &one, dweight, OC), NULL);
    if (dbias)
        return ct_cuda_linear__colsum(dbias, dout, OC, N, OC, ctx);
    return 0;
}

extern "C" int ct_qkv_forward_cuda(float *qkv, const float *xq, const float *xkv,
                                   const float *weight, const float *bias, int N, int C,
                                   const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    if (xq == xkv)
        return ct_cuda_linear__linear_fwd(qkv, 3 * C, xq, C, weight, bias, N, C, 3 * C, ctx);
    /* Rows 0..C-1 of the weight make q from xq, rows C..3C-1 make k and v from xkv. */
    int rc = ct_cuda_linear__linear_fwd(qkv, 3 * C, xq, C, weight, bias, N, C, C, ctx);
    if (rc != 0)
        return rc;
    return ct_cuda_linear__linear_fwd(qkv + C, 3 * C, xkv, C, weight + (size_t)C * C,
                                      bias ? bias + C : NULL, N, C, 2 * C, ctx);
}

extern "C" int ct_qkv_backward_cuda(float *dxq, float *dxkv, float *dweight, float *dbias,
                                    const float *dqkv, const float *xq, const float *xkv,
                                    const float *weight, int N, int C, const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    if (xq == xkv && dxq == dxkv)
        return ct_cuda_linear__linear_bwd(dxq, C, dweight, dbias, dqkv, 3 * C, xq, weight, N, C,
                                          3 * C, ctx);
    int rc =
        ct_cuda_linear__linear_bwd(dxq, C, dweight, dbias, dqkv, 3 * C, xq, weight, N, C, C, ctx);
    if (rc != 0)
        return rc;
    return ct_cuda_linear__linear_bwd(dxkv, C, dweight + (size_t)C * C, dbias ? dbias + C : NULL,
                                      dqkv + C, 3 * C, xkv, weight + (size_t)C * C, N, C, 2 * C,
                                      ctx);
}
