/*
 * loss.cu - what sits after the final LayerNorm in training, the twins of kernels/cpu/loss.c:
 * tied-embedding scores of the positive and negative items and their backward, SASRec's BCE
 * loss with its gradient, the count of targets, and the l2_emb regulariser.
 *
 * Reductions (the loss, the table's sum of squares, the count) have a fixed split into blocks
 * that depends on the size only, and add the blocks' partials in a fixed order; the loss and the
 * penalty sum in double with the CPU's formulas (stable softplus and sigmoid), so they round to
 * the CPU's floats unless a double rounding of a different summation order crosses a float
 * boundary. The count is an integer, exact by construction.
 */
#include "ct_cuda_common.h"

/* One warp per row: logits[r] = feats[r] . wte[ids[r]]. */
__global__ void ct_cuda_loss__score_fwd_kernel(float *logits, const float *feats, const float *wte,
                                               const int32_t *ids, int N, int C)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= N)
        return; /* the whole warp */
    const float *f = feats + r * C;
    const float *e = wte + (int64_t)ids[r] * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += f[c] * e[c];
    s = ct__warp_sum(s);
    if (lane == 0)
        logits[r] = s;
}

extern "C" int ct_score_forward_cuda(float *logits, const float *feats, const float *wte,
                                     const int32_t *ids, int N, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 0);
    if (N == 0)
        return 0;
    CT_LAUNCH(ct_cuda_loss__score_fwd_kernel, (unsigned)CT_CEIL_DIV(N, CT__THREADS / 32),
              CT__THREADS, 0, stream, logits, feats, wte, ids, N, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* dfeats[r, c] += dlogits[r] * wte[ids[r], c]: one thread per element (rows are owned). */
__global__ void ct_cuda_loss__score_dfeats_kernel(float *dfeats, const float *dlogits,
                                                  const float *wte, const int32_t *ids, int64_t n,
                                                  int C)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C;
        const float e = wte[(int64_t)ids[r] * C + (i - r * C)];
        dfeats[i] = __fadd_rn(dfeats[i], __fmul_rn(dlogits[r], e));
    }
}

extern "C" int ct_score_backward_cuda(float *dfeats, float *dwte, void *scratch,
                                      const float *dlogits, const float *feats, const float *wte,
                                      const int32_t *ids, int N, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 0);
    CT_CUDA_REQUIRE(((uintptr_t)scratch & 15) == 0); /* before the first launch below */
    const int64_t n = (int64_t)N * C;
    if (n == 0)
        return 0;
    CT_LAUNCH(ct_cuda_loss__score_dfeats_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0,
              stream, dfeats, dlogits, wte, ids, n, C);
    CT_CUDA_CHECK_LAUNCH();
    /* dwte[ids[r]] += dlogits[r] * feats[r], except id 0. */
    return ct__scatter_rows_cuda(dwte, scratch, feats, ids, dlogits, 0.0f, N, C, 0,
                                 (cudaStream_t)stream);
}

extern "C" int ct_score_backward_cuda_scratch(size_t *nbytes, int N)
{
    CT_CUDA_REQUIRE(N >= 0);
    return ct__scatter_rows_scratch(nbytes, N);
}

/* ---- BCE ----------------------------------------------------------------------------------- */

/* log(1 + e^x) without overflow, and 1 / (1 + e^-x) on the side where exp cannot overflow: the
 * CPU's functions, in double. */
__device__ __forceinline__ double ct_cuda_loss__softplus(double x)
{
    return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x)));
}

__device__ __forceinline__ double ct_cuda_loss__sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}

__global__ void ct_cuda_loss__bce_kernel(float *dpos, float *dneg, double *partials,
                                         const float *pos_logits, const float *neg_logits,
                                         const int32_t *pos, int N, double inv, int active)
{
    __shared__ double sh[32];
    double sum = 0.0;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < N;
         r += (int64_t)gridDim.x * blockDim.x) {
        if (pos[r] == 0 || !active) {
            dpos[r] = 0.0f;
            dneg[r] = 0.0f;
            continue;
        }
        const double xp = pos_logits[r], xn = neg_logits[r];
        /* -log sigmoid(xp) = softplus(-xp);  -log(1 - sigmoid(xn)) = softplus(xn). */
        sum += ct_cuda_loss__softplus(-xp) + ct_cuda_loss__softplus(xn);
        dpos[r] = (float)(-ct_cuda_loss__sigmoid(-xp) * inv);
        dneg[r] = (float)(ct_cuda_loss__sigmoid(xn) * inv);
    }
    const double t = ct__block_sum_f64(sum, sh);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = t;
}

__global__ void ct_cuda_loss__bce_final_kernel(float *loss, const double *partials, unsigned parts,
                                               double inv)
{
    __shared__ double sh[32];
    const double t = ct__sum_partials(partials, parts, sh);
    if (threadIdx.x == 0)
        *loss = (float)(t * inv);
}

extern "C" int ct_bce_loss_cuda(float *loss, float *dpos, float *dneg, double *scratch,
                                const float *pos_logits, const float *neg_logits,
                                const int32_t *pos, int N, float count, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0);
    const double inv = count > 0.0f ? 1.0 / (double)count : 0.0;
    const unsigned parts = ct__reduce_parts(N);
    CT_LAUNCH(ct_cuda_loss__bce_kernel, parts, CT__THREADS, 0, stream, dpos, dneg, scratch,
              pos_logits, neg_logits, pos, N, inv, count > 0.0f);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_loss__bce_final_kernel, 1, CT_REDUCE_CUDA_PARTS, 0, stream, loss, scratch,
              parts, inv);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- count ------------------------------------------------------------------------------- */

__global__ void ct_cuda_loss__count_kernel(unsigned long long *count, const int32_t *ids, int64_t n)
{
    __shared__ long long sh[32];
    long long k = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        k += ids[i] != 0;
    const long long t = ct__block_sum_i64(k, sh);
    if (threadIdx.x == 0 && t != 0)
        atomicAdd(count, (unsigned long long)t); /* integer adds: exact in any order */
}

extern "C" int ct_count_nonzero_cuda(int64_t *count, const int32_t *ids, int64_t n,
                                     ct_stream_t stream)
{
    CT_CUDA_REQUIRE(n >= 0);
    CT_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, (cudaStream_t)stream), NULL);
    if (n == 0)
        return 0;
    CT_LAUNCH(ct_cuda_loss__count_kernel, ct__reduce_parts(n), CT__THREADS, 0, stream,
              (unsigned long long *)count, ids, n);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- l2 penalty -------------------------------------------------------------------------- */

/* Every block adds the partial sums of squares itself (the same order in every block, so every
 * block gets the same bits), derives value and gradient factor with the CPU's formulas, and
 * applies dw += g * w to its share of the elements; block 0 writes the penalty. */
__global__ void ct_cuda_loss__l2_apply_kernel(float *penalty, float *dw, const double *partials,
                                              unsigned parts, const float *w, int64_t n,
                                              float lambda, int mode)
{
    __shared__ double sh[32];
    __shared__ double ss_sh;
    const double t = ct__sum_partials(partials, parts, sh);
    if (threadIdx.x == 0)
        ss_sh = t;
    __syncthreads();
    const double ss = ss_sh;
    double value, g; /* penalty value, and d penalty / d w_i = g * w_i */
    if (mode == CT_L2_NORM) {
        const double norm = sqrt(ss);
        value = lambda * norm;
        g = norm > 0.0 ? lambda / norm : 0.0; /* autograd's subgradient at 0 */
    } else if (mode == CT_L2_HALF_SQUARED) {
        value = 0.5 * lambda * ss;
        g = lambda;
    } else {
        value = lambda * ss;
        g = 2.0 * lambda;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *penalty = (float)value;
    if (g == 0.0)
        return;
    const float gf = (float)g;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dw[i] = __fadd_rn(dw[i], __fmul_rn(gf, w[i]));
}

extern "C" int ct_l2_penalty_cuda(float *penalty, float *dw, double *scratch, const float *w,
                                  int64_t n, float lambda, ct_l2_mode_t mode, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(n >= 0);
    CT_CUDA_REQUIRE(mode == CT_L2_SQUARED || mode == CT_L2_NORM || mode == CT_L2_HALF_SQUARED);
    const unsigned parts = ct__reduce_parts(n);
    CT_LAUNCH(ct__sumsq_part_kernel<0>, parts, CT__THREADS, 0, stream, scratch, w, n);
    CT_CUDA_CHECK_LAUNCH();
    /* The apply kernel's block size must cover the partials (ct__sum_partials). */
    CT_LAUNCH(ct_cuda_loss__l2_apply_kernel, ct__grid_1d(n, CT_REDUCE_CUDA_PARTS),
              CT_REDUCE_CUDA_PARTS, 0, stream, penalty, dw, scratch, parts, w, n, lambda,
              (int)mode);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
