/*
 * bpr.cu - the GPT-2 recommender's ops, the twins of kernels/cpu/bpr.c: BPR over a micro-batch
 * and the mean of hidden states over each item's tokens.
 *
 * BPR: one warp per interaction; lanes take channels, the two dot products are warp sums (in
 * another order than the CPU's row loop: within float rounding), the per-element formulas use
 * round-to-nearest intrinsics (no contraction), expf and log1pf are the device's (within 2 ulp of
 * glibc's). Each row's softplus goes to scratch in double; one block adds them in a fixed order.
 * The mean pool adds each channel's rows in order with one thread per (item, channel): the CPU's
 * bits, as is its backward.
 *
 * Not here: the scatter of the gradients (lm_embed_backward's row-sorted scatter), the
 * projection (linear.cu).
 */
#include "ct_cuda_common.h"

#define CT__BPR_WARPS 4

__global__ void __launch_bounds__(CT__BPR_WARPS * 32)
    ct_cuda_bpr__rows_kernel(double *rowloss, float *du, float *dvpn, const float *user,
                             const float *item, const float *proj, const int32_t *idx, int B, int D,
                             float inv, float l2)
{
    const int lane = (int)(threadIdx.x & 31);
    const int r = (int)(blockIdx.x * CT__BPR_WARPS + (threadIdx.x >> 5));
    if (r >= B)
        return; /* the whole warp */
    const int32_t *x5 = idx + (int64_t)r * CT_BPR_IDX;
    const float *eu = user + (int64_t)x5[0] * D;
    const float *ip = item + (int64_t)x5[1] * D, *in = item + (int64_t)x5[2] * D;
    const float *pp = proj ? proj + (int64_t)x5[3] * D : NULL;
    const float *pn = proj ? proj + (int64_t)x5[4] * D : NULL;
    float *gu = du + (int64_t)r * D, *gp = dvpn + (int64_t)2 * r * D, *gn = gp + D;
    float sp = 0.0f, sn = 0.0f;
    for (int k = lane; k < D; k += 32) {
        const float vp = pp ? __fadd_rn(ip[k], pp[k]) : ip[k];
        const float vn = pn ? __fadd_rn(in[k], pn[k]) : in[k];
        gp[k] = vp, gn[k] = vn;
        sp = __fadd_rn(sp, __fmul_rn(eu[k], vp));
        sn = __fadd_rn(sn, __fmul_rn(eu[k], vn));
    }
    const float x = __fsub_rn(ct__warp_sum(sp), ct__warp_sum(sn));
    const float g = -inv / (1.0f + expf(x));
    __syncwarp();
    for (int k = lane; k < D; k += 32) {
        const float vp = gp[k], vn = gn[k], e = eu[k];
        gu[k] = __fadd_rn(__fmul_rn(g, __fsub_rn(vp, vn)), __fmul_rn(l2, e));
        gp[k] = __fadd_rn(__fmul_rn(g, e), __fmul_rn(l2, vp));
        gn[k] = __fadd_rn(__fmul_rn(-g, e), __fmul_rn(l2, vn));
    }
    if (lane == 0)
        rowloss[r] = x > 0.0f ? (double)log1pf(expf(-x)) : (double)(-x + log1pf(expf(x)));
}

__global__ void ct_cuda_bpr__sum_kernel(float *loss, const double *rowloss, int B, double count)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int r = threadIdx.x; r < B; r += blockDim.x)
        s += rowloss[r];
    const double t = ct__block_sum_f64(s, sh);
    if (threadIdx.x == 0)
        *loss = (float)(t / count);
}

extern "C" int ct_bpr_loss_cuda(float *loss, float *du, float *dvpn, double *scratch,
                                const float *user, const float *item, const float *proj,
                                const int32_t *idx, int B, int D, float count, float lambda,
                                ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && D >= 1);
    const float inv = 1.0f / count, l2 = 2.0f * lambda * inv;
    if (B > 0) {
        CT_LAUNCH(ct_cuda_bpr__rows_kernel, (unsigned)CT_CEIL_DIV(B, CT__BPR_WARPS),
                  CT__BPR_WARPS * 32, 0, stream, scratch, du, dvpn, user, item, proj, idx, B, D,
                  inv, l2);
        CT_CUDA_CHECK_LAUNCH();
    }
    CT_LAUNCH(ct_cuda_bpr__sum_kernel, 1, CT__THREADS, 0, stream, loss, scratch, B, (double)count);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

__global__ void ct_cuda_bpr__pool_fwd_kernel(float *out, const float *h, const int32_t *len, int N,
                                             int L, int C)
{
    CT__FOR_EACH(e, (int64_t)N * C)
    {
        const int64_t k = e / C;
        const int c = (int)(e % C);
        float acc = 0.0f;
        for (int j = 0; j < len[k]; j++)
            acc = __fadd_rn(acc, h[(k * L + j) * C + c]);
        out[e] = __fdiv_rn(acc, (float)len[k]);
    }
}

__global__ void ct_cuda_bpr__pool_bwd_kernel(float *dh, const float *dout, const int32_t *len,
                                             int N, int L, int C)
{
    CT__FOR_EACH(e, (int64_t)N * L * C)
    {
        const int c = (int)(e % C);
        const int64_t kj = e / C, k = kj / L;
        const int j = (int)(kj % L);
        dh[e] = j < len[k] ? __fdiv_rn(dout[k * C + c], (float)len[k]) : 0.0f;
    }
}

extern "C" int ct_mean_pool_forward_cuda(float *out, const float *h, const int32_t *len, int N,
                                         int L, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && L >= 1 && C >= 1);
    if (N == 0)
        return 0;
    CT_LAUNCH(ct_cuda_bpr__pool_fwd_kernel, ct__grid_1d((int64_t)N * C, CT__THREADS), CT__THREADS,
              0, stream, out, h, len, N, L, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_mean_pool_backward_cuda(float *dh, const float *dout, const int32_t *len, int N,
                                          int L, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && L >= 1 && C >= 1);
    if (N == 0)
        return 0;
    CT_LAUNCH(ct_cuda_bpr__pool_bwd_kernel, ct__grid_1d((int64_t)N * L * C, CT__THREADS),
              CT__THREADS, 0, stream, dh, dout, len, N, L, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
