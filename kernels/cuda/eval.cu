/*
 * eval.cu - scores for evaluation and full-ranking ranks, the twins of kernels/cpu/eval.c:
 * candidate lists (one warp per user and candidate), every item (one cuBLAS sgemm), and the
 * target's rank among all items counted on the device (one block per user), which is what full
 * ranking needs back on the host instead of U*V scores. Metrics belong to the trainer.
 */
#include "ct_cuda_common.h"

__global__ void ct_cuda_eval__score_cand_kernel(float *scores, const float *feats, const float *wte,
                                      const int32_t *cand, int64_t n, int K, int C, int ldf)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t idx = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (idx >= n)
        return; /* the whole warp */
    const float *f = feats + (idx / K) * ldf;
    const float *e = wte + (int64_t)cand[idx] * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += f[c] * e[c];
    s = ct__warp_sum(s);
    if (lane == 0)
        scores[idx] = s;
}

extern "C" int ct_score_candidates_cuda(float *scores, const float *feats, const float *wte,
                                        const int32_t *cand, int U, int K, int C, int ldf,
                                        ct_stream_t stream)
{
    CT_CUDA_REQUIRE(U >= 0 && K >= 0 && C >= 0 && ldf >= C);
    const int64_t n = (int64_t)U * K;
    if (n == 0)
        return 0;
    CT_LAUNCH(ct_cuda_eval__score_cand_kernel,
              (unsigned)CT_CEIL_DIV(n, (int64_t)(CT__THREADS / 32)), CT__THREADS, 0, stream, scores,
              feats, wte, cand, n, K, C, ldf);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_score_all_cuda(float *scores, const float *feats, const float *wte, int U, int V,
                                 int C, int ldf, const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && ctx->blas);
    CT_CUDA_REQUIRE(U >= 0 && V >= 0 && C >= 1 && ldf >= C);
    if (U == 0 || V == 0)
        return 0;
    /* scores^T (V,U) = wte (V,C) feats^T (C,U), column-major. */
    const float one = 1.0f, zero = 0.0f;
    CT_CUBLAS_CHECK(ct__gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, V, U, C, &one, wte, C, feats, ldf,
                             &zero, scores, V), NULL);
    return 0;
}

/* Block u: counts items scoring at least the target's (ct_rank_all_cpu's rule), then takes back
 * the excluded ones that counted. Integer counts, so the order of the block's sum is free. */
__global__ void ct_cuda_eval__rank_all_kernel(int32_t *ranks, const float *scores,
                                              const int32_t *targets, const int32_t *excl_off,
                                              const int32_t *excl, int V)
{
    __shared__ long long sh[32];
    const int64_t u = blockIdx.x;
    const float *s = scores + u * V;
    const int32_t t = targets[u];
    const float st = s[t];
    long long r = 0;
    for (int i = 1 + (int)threadIdx.x; i < V; i += (int)blockDim.x)
        r += i != t && !(s[i] < st);
    if (excl_off) {
        const int32_t k0 = excl_off[u], k1 = excl_off[u + 1];
        for (int32_t k = k0 + (int32_t)threadIdx.x; k < k1; k += (int32_t)blockDim.x) {
            const int32_t e = excl[k];
            if (e <= 0 || e >= V || e == t || (k > k0 && excl[k - 1] == e))
                continue;
            r -= !(s[e] < st);
        }
    }
    const long long total = ct__block_sum_i64(r, sh);
    if (threadIdx.x == 0)
        ranks[u] = (int32_t)total;
}

extern "C" int ct_rank_all_cuda(int32_t *ranks, const float *scores, const int32_t *targets,
                                const int32_t *excl_off, const int32_t *excl, int U, int V,
                                ct_stream_t stream)
{
    CT_CUDA_REQUIRE(U >= 0 && V >= 2);
    if (U == 0)
        return 0;
    CT_LAUNCH(ct_cuda_eval__rank_all_kernel, (unsigned)U, CT__THREADS, 0, stream, ranks, scores,
              targets, excl_off, excl, V);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
