/*
 * layernorm.cu - LayerNorm over the last dimension, forward and backward; the twins of
 * kernels/cpu/layernorm.c (llm.c's formulation: mean and 1/std saved by the forward).
 *
 * One warp per row. The row sums (mean, variance, the backward's two means) are taken in double
 * as on the CPU, so their float results nearly always equal the CPU's, and the per-element
 * formulas are the CPU's float expressions with round-to-nearest intrinsics: where mean and
 * rstd agree, the outputs agree bit for bit. The weight and bias gradients are column sums over
 * all rows; each block of CT_LAYERNORM_BWD_CUDA_ROWS rows (up to 16 warps, so that a batch's
 * blocks are resident at once and each warp takes only a few rows) keeps per-warp sums in shared
 * memory, adds its warps in order into one partial per block, and a second kernel, one warp per
 * column, adds the partials in a fixed order: deterministic, no atomics. The previous launch (4
 * warps a block, 16 rows each, one thread per column adding every partial in turn) is kept
 * behind ct_layernorm_backward_4warp_cuda as the benchmark's baseline.
 */
#include "ct_cuda_common.h"

#define CT__LN_WARPS 4

__global__ void __launch_bounds__(CT__LN_WARPS * 32)
    ct_cuda_layernorm__ln_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                     const float *weight, const float *bias, int N, int C,
                                     float eps)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t row = (int64_t)blockIdx.x * CT__LN_WARPS + (threadIdx.x >> 5);
    if (row >= N)
        return; /* the whole warp; the kernel has no block-wide barrier */
    const float *x = inp + row * C;
    float *o = out + row * C;
    double s = 0.0;
    for (int c = lane; c < C; c += 32)
        s += (double)x[c];
    const float m = (float)(ct__warp_sum_f64(s) / C);
    /* Two passes: the variance of (x - m), biased (divide by C), as the CPU. */
    double a = 0.0;
    for (int c = lane; c < C; c += 32) {
        const double d = (double)x[c] - m;
        a += d * d;
    }
    const float rs = (float)(1.0 / sqrt(ct__warp_sum_f64(a) / C + (double)eps));
    for (int c = lane; c < C; c += 32)
        o[c] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x[c], m), rs), weight[c]), bias[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

extern "C" int ct_layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C,
                                         float eps, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1 && C <= CT_LAYERNORM_CUDA_MAX_C);
    if (N == 0)
        return 0;
    CT_LAUNCH(ct_cuda_layernorm__ln_fwd_kernel, (unsigned)CT_CEIL_DIV(N, CT__LN_WARPS),
              CT__LN_WARPS * 32, 0, stream, out, mean, rstd, inp, weight, bias, N, C, eps);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* Block p: rows p*R .. p*R+R-1, warp w of the block's nw taking every nw-th of them. dinp is
 * written per row; the row's contributions to dweight and dbias go to the warp's own sums in
 * shared memory (lanes own channels, so no two threads touch one element), which the block then
 * adds in warp order into part[p] = [dweight partial (C) | dbias partial (C)]. The launcher picks
 * nw: up to CT__LN_BWD_MAX_WARPS (R / nw rows per warp, so that the blocks of a batch are
 * resident together and each warp's chain of row latencies is short), fewer for wide rows. */
#define CT__LN_BWD_MAX_WARPS 16
__global__ void __launch_bounds__(CT__LN_BWD_MAX_WARPS * 32)
    ct_cuda_layernorm__ln_bwd_kernel(float *dinp, float *part, const float *dout, const float *inp,
                                     const float *weight, const float *mean, const float *rstd,
                                     int N, int C)
{
    CT_DYNAMIC_SMEM(float, sh); /* [nw][2][C] */
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    float *acc_dw = sh + (size_t)w * 2 * C;
    float *acc_db = acc_dw + C;
    for (int c = lane; c < C; c += 32) {
        acc_dw[c] = 0.0f;
        acc_db[c] = 0.0f;
    }
    const int64_t r0 = (int64_t)blockIdx.x * CT_LAYERNORM_BWD_CUDA_ROWS;
    const int64_t r1 = r0 + CT_LAYERNORM_BWD_CUDA_ROWS < N ? r0 + CT_LAYERNORM_BWD_CUDA_ROWS : N;
    for (int64_t row = r0 + w; row < r1; row += nw) {
        const float *x = inp + row * C;
        const float *d = dout + row * C;
        float *dx = dinp + row * C;
        const float m = mean[row], s = rstd[row];
        /* With xhat = (x - m) s and g = dout * weight: dx = s (g - mean(g) - xhat mean(g xhat)).
         * (double)g * xhat is exact (a float product fits a double), as on the CPU. */
        double ga = 0.0, gx = 0.0;
        for (int c = lane; c < C; c += 32) {
            const float xhat = __fmul_rn(__fsub_rn(x[c], m), s);
            const float g = __fmul_rn(d[c], weight[c]);
            ga += g;
            gx += (double)g * xhat;
        }
        const float gmean = (float)(ct__warp_sum_f64(ga) / C);
        const float gxmean = (float)(ct__warp_sum_f64(gx) / C);
        for (int c = lane; c < C; c += 32) {
            const float xhat = __fmul_rn(__fsub_rn(x[c], m), s);
            const float g = __fmul_rn(d[c], weight[c]);
            acc_db[c] = __fadd_rn(acc_db[c], d[c]);
            acc_dw[c] = __fadd_rn(acc_dw[c], __fmul_rn(d[c], xhat));
            dx[c] = __fadd_rn(
                dx[c], __fmul_rn(__fsub_rn(__fsub_rn(g, gmean), __fmul_rn(xhat, gxmean)), s));
        }
    }
    __syncthreads();
    float *dst = part + (size_t)blockIdx.x * 2 * C;
    for (int j = (int)threadIdx.x; j < 2 * C; j += (int)blockDim.x) {
        float t = sh[j];
        for (int k = 1; k < nw; k++)
            t = __fadd_rn(t, sh[(size_t)k * 2 * C + j]);
        dst[j] = t;
    }
}

/* dweight[c] += sum_p part[p][c], dbias[c] += sum_p part[p][C + c], p in order. */
__global__ void ct_cuda_layernorm__ln_bwd_final_kernel(float *dweight, float *dbias,
                                                       const float *part, int parts, int C)
{
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= 2 * C)
        return;
    float t = 0.0f;
#pragma unroll 8
    for (int p = 0; p < parts; p++)
        t = __fadd_rn(t, part[(size_t)p * 2 * C + j]);
    float *d = j < C ? dweight + j : dbias + (j - C);
    *d = __fadd_rn(*d, t);
}

/* One warp per column j of the partials: lane l adds parts l, l + 32, ... in order, then the
 * lanes are added by a fixed butterfly: deterministic, and a chain of parts / 32 loads instead
 * of parts. */
__global__ void ct_cuda_layernorm__ln_bwd_final_warp_kernel(float *dweight, float *dbias,
                                                            const float *part, int parts, int C)
{
    const int lane = (int)(threadIdx.x & 31);
    const int j = (int)(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
    if (j >= 2 * C)
        return; /* the whole warp */
    float t = 0.0f;
    for (int p = lane; p < parts; p += 32)
        t = __fadd_rn(t, part[(size_t)p * 2 * C + j]);
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        t = __fadd_rn(t, __shfl_xor_sync(CT__FULL_MASK, t, o));
    if (lane == 0) {
        float *d = j < C ? dweight + j : dbias + (j - C);
        *d = __fadd_rn(*d, t);
    }
}

/* wide: the launch described above ct_cuda_layernorm__ln_bwd_kernel and the warp-per-column
 * final sum; otherwise the previous launch (4 warps, one thread per column for the final sum),
 * kept as the benchmark's baseline. */
static int ct_cuda_layernorm__bwd(bool wide, float *dinp, float *dweight, float *dbias,
                                  float *scratch, const float *dout, const float *inp,
                                  const float *weight, const float *mean, const float *rstd, int N,
                                  int C, cudaStream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1 && C <= CT_LAYERNORM_CUDA_MAX_C);
    if (N == 0)
        return 0;
    const int parts = (int)CT_CEIL_DIV(N, CT_LAYERNORM_BWD_CUDA_ROWS);
    int nw = CT__LN_WARPS;
    if (wide) {
        /* as many warps as 48 KiB of sums allow (C = 50: 16; C = 1024: 6) */
        nw = (int)((size_t)48 * 1024 / ((size_t)2 * C * sizeof(float)));
        nw = nw > CT__LN_BWD_MAX_WARPS ? CT__LN_BWD_MAX_WARPS : nw < 1 ? 1 : nw;
    }
    const size_t smem = (size_t)nw * 2 * C * sizeof(float);
    CT_LAUNCH(ct_cuda_layernorm__ln_bwd_kernel, (unsigned)parts, nw * 32, smem, stream, dinp,
              scratch, dout, inp, weight, mean, rstd, N, C);
    CT_CUDA_CHECK_LAUNCH();
    if (wide)
        CT_LAUNCH(ct_cuda_layernorm__ln_bwd_final_warp_kernel, (unsigned)CT_CEIL_DIV(2 * C, 4), 128,
                  0, stream, dweight, dbias, scratch, parts, C);
    else
        CT_LAUNCH(ct_cuda_layernorm__ln_bwd_final_kernel, (unsigned)CT_CEIL_DIV(2 * C, 128), 128, 0,
                  stream, dweight, dbias, scratch, parts, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, float *scratch,
                                          const float *dout, const float *inp, const float *weight,
                                          const float *mean, const float *rstd, int N, int C,
                                          ct_stream_t stream)
{
    return ct_cuda_layernorm__bwd(true, dinp, dweight, dbias, scratch, dout, inp, weight, mean,
                                  rstd, N, C, (cudaStream_t)stream);
}

extern "C" int ct_layernorm_backward_4warp_cuda(float *dinp, float *dweight, float *dbias,
                                                float *scratch, const float *dout, const float *inp,
                                                const float *weight, const float *mean,
                                                const float *rstd, int N, int C, ct_stream_t stream)
{
    return ct_cuda_layernorm__bwd(false, dinp, dweight, dbias, scratch, dout, inp, weight, mean,
                                  rstd, N, C, (cudaStream_t)stream);
}
