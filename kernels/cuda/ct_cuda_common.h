/*
 * ct_cuda_common.h - what the files of kernels/cuda share and nothing else (not installed, not
 * for callers of ct_kernels_cuda.h): the launch and shared-memory macros, the launch and shape
 * checks (error checks themselves: common/ct_cuda_check.h), warp and block
 * reductions with a fixed order, the launch geometry of grid-stride loops and reductions, and
 * the row-sorted item scatter that embed.cu and loss.cu both use.
 *
 * Kernels launch through CT_LAUNCH and take dynamic shared memory through CT_DYNAMIC_SMEM, not
 * through <<<>>> and `extern __shared__` directly, so the same source also compiles as plain
 * C++ against the CPU emulator of tests/kernels/emu (CT_CUDA_EMULATED), which runs every
 * kernel thread by thread in CI machines without a GPU.
 */
#ifndef CT_CUDA_COMMON_H
#define CT_CUDA_COMMON_H

#include <stdint.h>

#include "ct_cuda_check.h"
#include "ct_kernels_cuda.h"
#include "ct_philox.h"

#ifdef CT_CUDA_EMULATED
#define CT_LAUNCH(kernel, grid, block, smem, stream, ...)                           \
    ct_emu_launch(reinterpret_cast<const void *>(&kernel), dim3(grid), dim3(block), \
                  (size_t)(smem), (cudaStream_t)(stream), [=]() { kernel(__VA_ARGS__); })
#define CT_DYNAMIC_SMEM(type, name) type *name = reinterpret_cast<type *>(ct_emu_dynamic_smem())
#else
#define CT_LAUNCH(kernel, grid, block, smem, stream, ...) \
    kernel<<<(grid), (block), (smem), (cudaStream_t)(stream)>>>(__VA_ARGS__)
#define CT_DYNAMIC_SMEM(type, name)                               \
    extern __shared__ __align__(16) unsigned char ct__dyn_smem[]; \
    type *name = reinterpret_cast<type *>(ct__dyn_smem)
#endif

#define CT__FULL_MASK 0xffffffffu

/* After a kernel launch: reports a bad configuration or an earlier asynchronous error. */
#define CT_CUDA_CHECK_LAUNCH() CT_CUDA_CHECK(cudaGetLastError(), NULL)

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

/* cublasSgemm, or with CT_CUDA_CTX_BF16 the same product with bfloat16 factors and float
 * accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_16BF). Every matrix product of
 * kernels/cuda goes through here. */
static inline cublasStatus_t ct__gemm(const ct_cuda_ctx_t *ctx, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k, const float *alpha,
                                      const float *A, int lda, const float *B, int ldb,
                                      const float *beta, float *C, int ldc)
{
    if (ctx->flags & CT_CUDA_CTX_BF16)
        return cublasGemmEx(ctx->blas, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                            ldb, beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF,
                            CUBLAS_GEMM_DEFAULT);
    return cublasSgemm(ctx->blas, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Threads per block of the element-wise and reduction kernels. */
#define CT__THREADS 256

/* A grid-stride loop: i takes every index in [0, n) once across the grid's threads. */
#define CT__FOR_EACH(i, n)                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* Blocks for a grid-stride loop over n elements, one element per thread per pass. The cap only
 * bounds the grid; the loop covers the rest. */
static inline unsigned ct__grid_1d(int64_t n, int threads)
{
    int64_t g = CT_CEIL_DIV(n, (int64_t)threads);
    if (g > (1 << 20))
        g = 1 << 20;
    return g < 1 ? 1u : (unsigned)g;
}

/* The body of an entry point that runs one grid-stride kernel over n elements: checks n,
 * launches (nothing for n == 0), checks the launch and returns 0 from the caller. */
#define CT__LAUNCH_1D(kernel, n, stream, ...)                                                \
    do {                                                                                     \
        CT_CUDA_REQUIRE((n) >= 0);                                                           \
        if ((n) == 0)                                                                        \
            return 0;                                                                        \
        CT_LAUNCH(kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0, stream, __VA_ARGS__); \
        CT_CUDA_CHECK_LAUNCH();                                                              \
        return 0;                                                                            \
    } while (0)

/* Blocks of a deterministic reduction over n elements: one per 1024 elements, at most
 * CT_REDUCE_CUDA_PARTS, at least 1. A function of n alone, so the split - and with it every
 * rounding - is the same on every device. */
static inline unsigned ct__reduce_parts(int64_t n)
{
    int64_t p = CT_CEIL_DIV(n, (int64_t)1024);
    if (p > CT_REDUCE_CUDA_PARTS)
        p = CT_REDUCE_CUDA_PARTS;
    return p < 1 ? 1u : (unsigned)p;
}

/* Butterfly sums over the 32 lanes of a full warp: every lane ends with the same bits. */
__device__ __forceinline__ float ct__warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(CT__FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ double ct__warp_sum_f64(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(CT__FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ long long ct__warp_sum_i64(long long v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(CT__FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float ct__warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(CT__FULL_MASK, v, o));
    return v;
}

/* Sum of v over a 1-D block (blockDim.x a multiple of 32, at most 1024) in a fixed order:
 * butterflies within warps, then warp 0 over the warps' sums. sh: 32 doubles of shared memory.
 * The result is valid in every thread of warp 0. Contains __syncthreads: every thread of the
 * block must call it. */
__device__ __forceinline__ double ct__block_sum_f64(double v, double *sh)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    v = ct__warp_sum_f64(v);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    double t = 0.0;
    if (w == 0)
        t = ct__warp_sum_f64(lane < nw ? sh[lane] : 0.0);
    __syncthreads(); /* sh may be reused by the caller */
    return t;
}

__device__ __forceinline__ long long ct__block_sum_i64(long long v, long long *sh)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    v = ct__warp_sum_i64(v);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    long long t = 0;
    if (w == 0)
        t = ct__warp_sum_i64(lane < nw ? sh[lane] : 0);
    __syncthreads();
    return t;
}

/* Sum of the `parts` doubles of a reduction's first pass (parts <= CT_REDUCE_CUDA_PARTS), in
 * the fixed order of ct__block_sum_f64, by a block of CT_REDUCE_CUDA_PARTS threads. */
__device__ __forceinline__ double ct__sum_partials(const double *partials, unsigned parts,
                                                   double *sh)
{
    double v = threadIdx.x < parts ? partials[threadIdx.x] : 0.0;
    return ct__block_sum_f64(v, sh);
}

/* First pass of a sum of squares: block b adds x[i]^2 in double over i = b*blockDim + t +
 * k*gridDim*blockDim and writes partials[b]. Launched with ct__reduce_parts(n) blocks of
 * CT__THREADS; used by ct_sumsq_cuda and ct_l2_penalty_cuda. (A template only so that the files
 * that do not launch it do not get an unused copy.) */
template <int UNUSED = 0>
__global__ void ct__sumsq_part_kernel(double *partials, const float *x, int64_t n)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    const double t = ct__block_sum_f64(s, sh);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = t;
}

/* ---- the row-sorted item scatter (embed.cu) ---------------------------------------------------
 * dst[ids[r]] += rowscale(r) * src[r] for every row r with ids[r] != skip, rowscale(r) =
 * rowscale[r] when rowscale is not NULL, else scale. With scratch == NULL by float atomics; with
 * scratch (ct__scatter_rows_scratch(n) bytes) by a stable sort of the rows by id and one warp
 * per id adding its rows in row order with the CPU's rounding (one multiply, one add per
 * element), which reproduces the CPU's loop bit for bit.
 *   dst: (V,C) +=   src: (n,C)   ids: (n)   rowscale: (n) or NULL */
int ct__scatter_rows_cuda(float *dst, void *scratch, const float *src, const int32_t *ids,
                          const float *rowscale, float scale, int n, int C, int32_t skip,
                          cudaStream_t stream);
int ct__scatter_rows_scratch(size_t *nbytes, int n);

#endif /* CT_CUDA_COMMON_H */
