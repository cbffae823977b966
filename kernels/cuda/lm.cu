/*
 * lm.cu - the language models' ops, the twins of kernels/cpu/lm.c: RMSNorm, GELU, SwiGLU's gate,
 * RoPE, grouped-query causal attention (its own section below), the token embedding (its
 * gradient through embed.cu's row-sorted scatter: the CPU's bits with scratch). RoPE's table is the
 * CPU's (ct_rope_table_cpu, computed once and copied to the device).
 *
 * RMSNorm: one warp per row, the row sums in double as on the CPU (so rstd nearly always rounds
 * to the CPU's float) and the per-element formulas with round-to-nearest intrinsics: where rstd
 * agrees, out and dinp agree bit for bit. The weight gradient is a column sum over rows: each
 * warp of each block of CT_RMSNORM_BWD_CUDA_ROWS rows adds its rows into its own partial in
 * scratch (lanes own channels: no two threads touch one element, no shared memory, so any width
 * works), and a second kernel adds the partials in order: deterministic, no atomics.
 * RoPE is two products and a sum per element with the same intrinsics: the CPU's bits.
 * GELU (the tanh form as x sigmoid(2u), the CPU's formula) and SwiGLU call the device's erff /
 * expf, which are within 2 ulp of glibc's.
 *
 * Not here: the table (the CPU computes it), the LM head's loss (xent.cu).
 */
#include "ct_cuda_common.h"

#define CT__RMS_WARPS CT_RMSNORM_CUDA_WARPS

/* ---- RMSNorm ----------------------------------------------------------------------------------
 */

__global__ void __launch_bounds__(CT__RMS_WARPS * 32)
    ct_cuda_lm__rms_fwd_kernel(float *out, float *rstd, const float *inp, const float *weight,
                               int N, int C, float eps)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t row = (int64_t)blockIdx.x * CT__RMS_WARPS + (threadIdx.x >> 5);
    if (row >= N)
        return; /* the whole warp; no block-wide barrier */
    const float *x = inp + row * C;
    float *o = out + row * C;
    double a = 0.0;
    for (int c = lane; c < C; c += 32)
        a += (double)x[c] * x[c];
    const float s = (float)(1.0 / sqrt(ct__warp_sum_f64(a) / C + (double)eps));
    for (int c = lane; c < C; c += 32)
        o[c] = __fmul_rn(weight[c], __fmul_rn(x[c], s));
    if (lane == 0)
        rstd[row] = s;
}

extern "C" int ct_rmsnorm_forward_cuda(float *out, float *rstd, const float *inp,
                                       const float *weight, int N, int C, float eps,
                                       ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    if (N == 0)
        return 0;
    CT_LAUNCH(ct_cuda_lm__rms_fwd_kernel, (unsigned)CT_CEIL_DIV(N, CT__RMS_WARPS),
              CT__RMS_WARPS * 32, 0, stream, out, rstd, inp, weight, N, C, eps);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* Block p, warp w: rows p*R + w, p*R + w + WARPS, ...; its dweight partial is
 * part[(p * WARPS + w) * C ..]. */
__global__ void __launch_bounds__(CT__RMS_WARPS * 32)
    ct_cuda_lm__rms_bwd_kernel(float *dinp, float *part, const float *dout, const float *inp,
                               const float *weight, const float *rstd, int N, int C)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    float *acc = part + ((size_t)blockIdx.x * CT__RMS_WARPS + w) * C;
    for (int c = lane; c < C; c += 32)
        acc[c] = 0.0f;
    const int64_t r0 = (int64_t)blockIdx.x * CT_RMSNORM_BWD_CUDA_ROWS;
    const int64_t r1 = r0 + CT_RMSNORM_BWD_CUDA_ROWS < N ? r0 + CT_RMSNORM_BWD_CUDA_ROWS : N;
    for (int64_t row = r0 + w; row < r1; row += CT__RMS_WARPS) {
        const float *x = inp + row * C;
        const float *d = dout + row * C;
        float *dx = dinp + row * C;
        const float s = rstd[row];
        /* dx = s (g - xhat mean(g xhat)), g = dout weight, xhat = x s; (double)g * xhat is
         * exact, as on the CPU */
        double gx = 0.0;
        for (int c = lane; c < C; c += 32)
            gx += (double)__fmul_rn(d[c], weight[c]) * __fmul_rn(x[c], s);
        const float gxmean = (float)(ct__warp_sum_f64(gx) / C);
        for (int c = lane; c < C; c += 32) {
            const float xhat = __fmul_rn(x[c], s);
            acc[c] = __fadd_rn(acc[c], __fmul_rn(d[c], xhat));
            dx[c] = __fadd_rn(
                dx[c],
                __fmul_rn(__fsub_rn(__fmul_rn(d[c], weight[c]), __fmul_rn(xhat, gxmean)), s));
        }
    }
}

/* dweight[c] += sum_q part[q][c], q in order. */
__global__ void ct_cuda_lm__rms_bwd_final_kernel(float *dweight, const float *part, int parts,
                                                 int C)
{
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= C)
        return;
    float t = 0.0f;
    for (int q = 0; q < parts; q++)
        t = __fadd_rn(t, part[(size_t)q * C + c]);
    dweight[c] = __fadd_rn(dweight[c], t);
}

extern "C" int ct_rmsnorm_backward_cuda(float *dinp, float *dweight, float *scratch,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *rstd, int N, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    if (N == 0)
        return 0;
    const int blocks = (int)CT_CEIL_DIV(N, CT_RMSNORM_BWD_CUDA_ROWS);
    CT_LAUNCH(ct_cuda_lm__rms_bwd_kernel, (unsigned)blocks, CT__RMS_WARPS * 32, 0, stream, dinp,
              scratch, dout, inp, weight, rstd, N, C);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_lm__rms_bwd_final_kernel, (unsigned)CT_CEIL_DIV(C, 128), 128, 0, stream,
              dweight, scratch, blocks * CT__RMS_WARPS, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- GELU and SwiGLU --------------------------------------------------------------------------
 */

#define CT__SQRT_2_OVER_PI 0.7978845608028654f
#define CT__GELU_A         0.044715f
#define CT__INV_SQRT_2     0.7071067811865476f
#define CT__INV_SQRT_2PI   0.3989422804014327f

__global__ void ct_cuda_lm__gelu_fwd_kernel(float *out, const float *inp, int64_t n, int kind)
{
    CT__FOR_EACH(i, n)
    {
        const float x = inp[i];
        if (kind == CT_GELU_TANH) {
            const float u =
                __fmul_rn(CT__SQRT_2_OVER_PI,
                          __fadd_rn(x, __fmul_rn(CT__GELU_A, __fmul_rn(__fmul_rn(x, x), x))));
            /* x sigmoid(2u), as the CPU computes 0.5 x (1 + tanh u) */
            out[i] = __fdiv_rn(x, __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, u))));
        } else {
            out[i] =
                __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, erff(__fmul_rn(x, CT__INV_SQRT_2))));
        }
    }
}

__global__ void ct_cuda_lm__gelu_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                            int64_t n, int kind)
{
    CT__FOR_EACH(i, n)
    {
        const float x = inp[i];
        float dg;
        if (kind == CT_GELU_TANH) {
            const float u =
                __fmul_rn(CT__SQRT_2_OVER_PI,
                          __fadd_rn(x, __fmul_rn(CT__GELU_A, __fmul_rn(__fmul_rn(x, x), x))));
            /* s = sigmoid(2u) = 0.5 (1 + tanh u), 0.5 (1 - tanh^2 u) = 2 s (1 - s) */
            const float sg = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, u))));
            const float du =
                __fmul_rn(CT__SQRT_2_OVER_PI,
                          __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f, CT__GELU_A), __fmul_rn(x, x))));
            dg = __fadd_rn(
                sg,
                __fmul_rn(__fmul_rn(__fmul_rn(2.0f, x), __fmul_rn(sg, __fsub_rn(1.0f, sg))), du));
        } else {
            const float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(x, CT__INV_SQRT_2))));
            const float pdf = __fmul_rn(CT__INV_SQRT_2PI, expf(__fmul_rn(__fmul_rn(-0.5f, x), x)));
            dg = __fadd_rn(cdf, __fmul_rn(x, pdf));
        }
        dinp[i] = __fadd_rn(dinp[i], __fmul_rn(dout[i], dg));
    }
}

__global__ void ct_cuda_lm__swiglu_fwd_kernel(float *out, const float *gate, const float *up,
                                              int64_t n)
{
    CT__FOR_EACH(i, n)
    {
        const float g = gate[i];
        out[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
    }
}

__global__ void ct_cuda_lm__swiglu_bwd_kernel(float *dgate, float *dup, const float *dout,
                                              const float *gate, const float *up, int64_t n)
{
    CT__FOR_EACH(i, n)
    {
        const float g = gate[i], d = dout[i];
        const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
        const float dsilu = __fmul_rn(sig, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
        dgate[i] = __fadd_rn(dgate[i], __fmul_rn(__fmul_rn(d, up[i]), dsilu));
        dup[i] = __fadd_rn(dup[i], __fmul_rn(d, __fmul_rn(g, sig)));
    }
}

extern "C" int ct_gelu_forward_cuda(float *out, const float *inp, int64_t n, ct_gelu_kind_t kind,
                                    ct_stream_t stream)
{
    CT_CUDA_REQUIRE(kind == CT_GELU_TANH || kind == CT_GELU_ERF);
    CT__LAUNCH_1D(ct_cuda_lm__gelu_fwd_kernel, n, stream, out, inp, n, (int)kind);
}

extern "C" int ct_gelu_backward_cuda(float *dinp, const float *dout, const float *inp, int64_t n,
                                     ct_gelu_kind_t kind, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(kind == CT_GELU_TANH || kind == CT_GELU_ERF);
    CT__LAUNCH_1D(ct_cuda_lm__gelu_bwd_kernel, n, stream, dinp, dout, inp, n, (int)kind);
}

extern "C" int ct_swiglu_forward_cuda(float *out, const float *gate, const float *up, int64_t n,
                                      ct_stream_t stream)
{
    CT__LAUNCH_1D(ct_cuda_lm__swiglu_fwd_kernel, n, stream, out, gate, up, n);
}

extern "C" int ct_swiglu_backward_cuda(float *dgate, float *dup, const float *dout,
                                       const float *gate, const float *up, int64_t n,
                                       ct_stream_t stream)
{
    CT__LAUNCH_1D(ct_cuda_lm__swiglu_bwd_kernel, n, stream, dgate, dup, dout, gate, up, n);
}

/* ---- RoPE -------------------------------------------------------------------------------------
 */

/* One thread per (row, head, pair i < H). */
__global__ void ct_cuda_lm__rope_kernel(float *out, const float *inp, const float *cos_t,
                                        const float *sin_t, const int32_t *pos, int N, int NH,
                                        int HD, int backward)
{
    const int H = HD / 2;
    const int64_t total = (int64_t)N * NH * H;
    CT__FOR_EACH(k, total)
    {
        const int i = (int)(k % H);
        const int64_t rh = k / H; /* row * NH + head */
        const int64_t r = rh / NH;
        const float c = cos_t[(int64_t)pos[r] * H + i], s = sin_t[(int64_t)pos[r] * H + i];
        const float *x = inp + rh * HD;
        float *o = out + rh * HD;
        const float x1 = x[i], x2 = x[i + H];
        if (!backward) {
            o[i] = __fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, s));
            o[i + H] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
        } else {
            o[i] = __fadd_rn(o[i], __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
            o[i + H] = __fadd_rn(o[i + H], __fsub_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
        }
    }
}

extern "C" int ct_rope_forward_cuda(float *out, const float *inp, const float *cos_t,
                                    const float *sin_t, const int32_t *pos, int N, int NH, int HD,
                                    ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && NH >= 1 && HD >= 2 && HD % 2 == 0);
    const int64_t n = (int64_t)N * NH * (HD / 2);
    CT__LAUNCH_1D(ct_cuda_lm__rope_kernel, n, stream, out, inp, cos_t, sin_t, pos, N, NH, HD, 0);
}

extern "C" int ct_rope_backward_cuda(float *dinp, const float *dout, const float *cos_t,
                                     const float *sin_t, const int32_t *pos, int N, int NH, int HD,
                                     ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && NH >= 1 && HD >= 2 && HD % 2 == 0);
    const int64_t n = (int64_t)N * NH * (HD / 2);
    CT__LAUNCH_1D(ct_cuda_lm__rope_kernel, n, stream, dinp, dout, cos_t, sin_t, pos, N, NH, HD, 1);
}

/* ---- grouped-query causal attention ------------------------------------------------------------
 * The products run on cuBLAS, one strided batch over the sequences per query head h (key head
 * kh = h / (NH / KVH)), on the packed (B, L, NH + 2 KVH, HD) rows in place:
 *   forward   att_h = scale Q_h K_khᵀ (full L x L; the mask is the softmax's), then one warp per
 *             row turns it into probabilities (max, expf, the sum in double, zeros above the
 *             diagonal), then out_h = att_h V_kh;
 *   backward  scratch_h = dout_h V_khᵀ (dP), one warp per row makes it
 *             dS = scale p (dP - Σ p dP) (zeros above the diagonal), then dq_h += dS K_kh,
 *             dk_kh += dSᵀ Q_h, dv_kh += att_hᵀ dout_h; the group's heads add into dk and dv one
 *             after the other on the stream (a fixed order, no atomics).
 * The products are float (cublasSgemm numerics) also under CT_CUDA_CTX_BF16: the CPU twin's
 * tolerances hold. cuBLAS computes the masked upper triangles too (twice the causal work, at
 * tensor-core-free sgemm speed still far ahead of a warp per row).
 *
 * The row-wise kernels below (..._rowwise_cuda) are the previous implementation, kept as the
 * baseline bench/gpu/kernels_bench_gpu times the products against: one warp per (sequence,
 * head, query row) for the forward and for the backward's d scores and dq; one warp per
 * (sequence, key head, key row) for dk and dv. Lanes take key rows for the scores and channels
 * for the products; the probabilities and d scores go through global memory (att and scratch),
 * with __syncwarp between a warp's writes and its reads. The sums run in other orders than the
 * CPU's, so results agree within float rounding. */

#define CT__GQA_WARPS 4

__global__ void __launch_bounds__(CT__GQA_WARPS * 32)
    ct_cuda_lm__gqa_fwd_kernel(float *out, float *att, const float *qkv, int B, int L, int NH,
                               int KVH, int HD, float scale)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * CT__GQA_WARPS + (threadIdx.x >> 5);
    if (wid >= (int64_t)B * NH * L)
        return; /* the whole warp */
    const int i = (int)(wid % L), h = (int)(wid / L % NH);
    const int64_t b = wid / L / NH;
    const int kh = h / (NH / KVH);
    const int64_t W = (int64_t)(NH + 2 * KVH) * HD;
    const float *base = qkv + b * L * W;
    const float *q = base + (int64_t)i * W + (int64_t)h * HD;
    float *p = att + wid * L;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += 32) {
        const float *k = base + (int64_t)j * W + (int64_t)(NH + kh) * HD;
        float d = 0.0f;
        for (int c = 0; c < HD; c++)
            d = __fadd_rn(d, __fmul_rn(q[c], k[c]));
        const float s = __fmul_rn(d, scale);
        p[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = ct__warp_max(mx);
    double sum = 0.0;
    for (int j = lane; j <= i; j += 32) {
        const float e = expf(__fsub_rn(p[j], mx));
        p[j] = e;
        sum += (double)e;
    }
    const float inv = (float)(1.0 / ct__warp_sum_f64(sum));
    for (int j = lane; j < L; j += 32)
        p[j] = j <= i ? __fmul_rn(p[j], inv) : 0.0f;
    __syncwarp();
    float *o = out + (b * L + i) * (int64_t)NH * HD + (int64_t)h * HD;
    for (int c = lane; c < HD; c += 32) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++)
            acc = __fadd_rn(
                acc, __fmul_rn(p[j], base[(int64_t)j * W + (int64_t)(NH + KVH + kh) * HD + c]));
        o[c] = acc;
    }
}

extern "C" int ct_gqa_attention_forward_rowwise_cuda(float *out, float *att, const float *qkv, int B, int L,
                                             int NH, int KVH, int HD, float scale,
                                             ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 1 && NH >= 1 && KVH >= 1 && NH % KVH == 0 && HD >= 1);
    const int64_t warps = (int64_t)B * NH * L;
    if (warps == 0)
        return 0;
    CT_LAUNCH(ct_cuda_lm__gqa_fwd_kernel, (unsigned)CT_CEIL_DIV(warps, CT__GQA_WARPS),
              CT__GQA_WARPS * 32, 0, stream, out, att, qkv, B, L, NH, KVH, HD, scale);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* Per (b, h, i): ds[b,h,i,:] = scale * p (dp - sum p dp), dp_j = dout_i . v_j; dq_i += ds k. */
__global__ void __launch_bounds__(CT__GQA_WARPS * 32)
    ct_cuda_lm__gqa_bwd_q_kernel(float *dqkv, float *ds, const float *dout, const float *att,
                                 const float *qkv, int B, int L, int NH, int KVH, int HD,
                                 float scale)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * CT__GQA_WARPS + (threadIdx.x >> 5);
    if (wid >= (int64_t)B * NH * L)
        return;
    const int i = (int)(wid % L), h = (int)(wid / L % NH);
    const int64_t b = wid / L / NH;
    const int kh = h / (NH / KVH);
    const int64_t W = (int64_t)(NH + 2 * KVH) * HD;
    const float *base = qkv + b * L * W;
    const float *g = dout + (b * L + i) * (int64_t)NH * HD + (int64_t)h * HD;
    const float *p = att + wid * L;
    float *dsr = ds + wid * L;
    double pdp = 0.0;
    for (int j = lane; j <= i; j += 32) {
        const float *v = base + (int64_t)j * W + (int64_t)(NH + KVH + kh) * HD;
        float d = 0.0f;
        for (int c = 0; c < HD; c++)
            d = __fadd_rn(d, __fmul_rn(g[c], v[c]));
        dsr[j] = d;
        pdp += (double)p[j] * d;
    }
    const float t = (float)ct__warp_sum_f64(pdp);
    for (int j = lane; j < L; j += 32)
        dsr[j] = j <= i ? __fmul_rn(__fmul_rn(p[j], __fsub_rn(dsr[j], t)), scale) : 0.0f;
    __syncwarp();
    float *dq = dqkv + (b * L + i) * W + (int64_t)h * HD;
    for (int c = lane; c < HD; c += 32) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++)
            acc = __fadd_rn(acc,
                            __fmul_rn(dsr[j], base[(int64_t)j * W + (int64_t)(NH + kh) * HD + c]));
        dq[c] = __fadd_rn(dq[c], acc);
    }
}

/* Per (b, kh, j): dk_j += sum over the group's heads h and rows i >= j of ds[b,h,i,j] q_i;
 * dv_j += the same sums of att[b,h,i,j] dout_i. */
__global__ void __launch_bounds__(CT__GQA_WARPS * 32)
    ct_cuda_lm__gqa_bwd_kv_kernel(float *dqkv, const float *ds, const float *dout, const float *att,
                                  const float *qkv, int B, int L, int NH, int KVH, int HD)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * CT__GQA_WARPS + (threadIdx.x >> 5);
    if (wid >= (int64_t)B * KVH * L)
        return;
    const int j = (int)(wid % L), kh = (int)(wid / L % KVH);
    const int64_t b = wid / L / KVH;
    const int rep = NH / KVH;
    const int64_t W = (int64_t)(NH + 2 * KVH) * HD, OW = (int64_t)NH * HD;
    const float *base = qkv + b * L * W;
    float *dk = dqkv + (b * L + j) * W + (int64_t)(NH + kh) * HD;
    float *dv = dqkv + (b * L + j) * W + (int64_t)(NH + KVH + kh) * HD;
    for (int c = lane; c < HD; c += 32) {
        float ak = 0.0f, av = 0.0f;
        for (int h = kh * rep; h < (kh + 1) * rep; h++) {
            const int64_t row0 = (b * NH + h) * L;
            for (int i = j; i < L; i++) {
                const float s = ds[(row0 + i) * L + j], p = att[(row0 + i) * L + j];
                ak = __fadd_rn(ak, __fmul_rn(s, base[(int64_t)i * W + (int64_t)h * HD + c]));
                av = __fadd_rn(av, __fmul_rn(p, dout[(b * L + i) * OW + (int64_t)h * HD + c]));
            }
        }
        dk[c] = __fadd_rn(dk[c], ak);
        dv[c] = __fadd_rn(dv[c], av);
    }
}

extern "C" int ct_gqa_attention_backward_rowwise_cuda(float *dqkv, float *scratch, const float *dout,
                                              const float *att, const float *qkv, int B, int L,
                                              int NH, int KVH, int HD, float scale,
                                              ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 1 && NH >= 1 && KVH >= 1 && NH % KVH == 0 && HD >= 1);
    const int64_t qw = (int64_t)B * NH * L, kw = (int64_t)B * KVH * L;
    if (qw == 0)
        return 0;
    CT_LAUNCH(ct_cuda_lm__gqa_bwd_q_kernel, (unsigned)CT_CEIL_DIV(qw, CT__GQA_WARPS),
              CT__GQA_WARPS * 32, 0, stream, dqkv, scratch, dout, att, qkv, B, L, NH, KVH, HD,
              scale);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_lm__gqa_bwd_kv_kernel, (unsigned)CT_CEIL_DIV(kw, CT__GQA_WARPS),
              CT__GQA_WARPS * 32, 0, stream, dqkv, scratch, dout, att, qkv, B, L, NH, KVH, HD);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* One warp per (sequence, head, query row i) of att (B, NH, L, L) holding the scaled scores:
 * the probabilities of keys 0..i, zeros after. */
__global__ void __launch_bounds__(CT__GQA_WARPS * 32)
    ct_cuda_lm__gqa_softmax_kernel(float *att, int64_t rows, int L)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * CT__GQA_WARPS + (threadIdx.x >> 5);
    if (wid >= rows)
        return; /* the whole warp */
    const int i = (int)(wid % L);
    float *p = att + wid * L;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += 32)
        mx = fmaxf(mx, p[j]);
    mx = ct__warp_max(mx);
    double sum = 0.0;
    for (int j = lane; j <= i; j += 32) {
        const float e = expf(__fsub_rn(p[j], mx));
        p[j] = e;
        sum += (double)e;
    }
    const float inv = (float)(1.0 / ct__warp_sum_f64(sum));
    for (int j = lane; j < L; j += 32)
        p[j] = j <= i ? __fmul_rn(p[j], inv) : 0.0f;
}

/* One warp per row of ds (B, NH, L, L) holding dP = dout V^T: ds = scale p (dP - sum p dP) over
 * keys 0..i, zeros after. */
__global__ void __launch_bounds__(CT__GQA_WARPS * 32)
    ct_cuda_lm__gqa_dsoftmax_kernel(float *ds, const float *att, int64_t rows, int L, float scale)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t wid = (int64_t)blockIdx.x * CT__GQA_WARPS + (threadIdx.x >> 5);
    if (wid >= rows)
        return;
    const int i = (int)(wid % L);
    const float *p = att + wid * L;
    float *d = ds + wid * L;
    double pdp = 0.0;
    for (int j = lane; j <= i; j += 32)
        pdp += (double)p[j] * d[j];
    const float t = (float)ct__warp_sum_f64(pdp);
    for (int j = lane; j < L; j += 32)
        d[j] = j <= i ? __fmul_rn(__fmul_rn(p[j], __fsub_rn(d[j], t)), scale) : 0.0f;
}

#define CT__GQA_SGEMM(ta, tb, m, n, k, alpha, A, lda, sA, Bm, ldb, sB, beta, C, ldc, sC)       \
    CT_CUBLAS_CHECK(cublasSgemmStridedBatched(ctx->blas, ta, tb, m, n, k, alpha, A, lda, sA,  \
                                              Bm, ldb, sB, beta, C, ldc, sC, B),              \
                    NULL)

extern "C" int ct_gqa_attention_forward_cuda(float *out, float *att, const float *qkv, int B, int L,
                                             int NH, int KVH, int HD, float scale,
                                             const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && B >= 0 && L >= 1 && NH >= 1 && KVH >= 1 && NH % KVH == 0 && HD >= 1);
    if (B == 0)
        return 0;
    const long long W = (long long)(NH + 2 * KVH) * HD, LL = (long long)L * L;
    const long long sq = (long long)L * W, sa = (long long)NH * LL, so = (long long)L * NH * HD;
    const float one = 1.0f, zero = 0.0f;
    for (int h = 0; h < NH; h++) {
        const int kh = h / (NH / KVH);
        const float *q = qkv + (int64_t)h * HD, *k = qkv + (int64_t)(NH + kh) * HD;
        CT__GQA_SGEMM(CUBLAS_OP_T, CUBLAS_OP_N, L, L, HD, &scale, k, (int)W, sq, q, (int)W, sq,
                      &zero, att + h * LL, L, sa);
    }
    const int64_t rows = (int64_t)B * NH * L;
    CT_LAUNCH(ct_cuda_lm__gqa_softmax_kernel, (unsigned)CT_CEIL_DIV(rows, CT__GQA_WARPS),
              CT__GQA_WARPS * 32, 0, ctx->stream, att, rows, L);
    CT_CUDA_CHECK_LAUNCH();
    for (int h = 0; h < NH; h++) {
        const int kh = h / (NH / KVH);
        const float *v = qkv + (int64_t)(NH + KVH + kh) * HD;
        CT__GQA_SGEMM(CUBLAS_OP_N, CUBLAS_OP_N, HD, L, L, &one, v, (int)W, sq, att + h * LL, L, sa,
                      &zero, out + (int64_t)h * HD, NH * HD, so);
    }
    return 0;
}

extern "C" int ct_gqa_attention_backward_cuda(float *dqkv, float *scratch, const float *dout,
                                              const float *att, const float *qkv, int B, int L,
                                              int NH, int KVH, int HD, float scale,
                                              const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(ctx && B >= 0 && L >= 1 && NH >= 1 && KVH >= 1 && NH % KVH == 0 && HD >= 1);
    if (B == 0)
        return 0;
    const long long W = (long long)(NH + 2 * KVH) * HD, LL = (long long)L * L;
    const long long sq = (long long)L * W, sa = (long long)NH * LL, so = (long long)L * NH * HD;
    const float one = 1.0f, zero = 0.0f;
    for (int h = 0; h < NH; h++) {
        const int kh = h / (NH / KVH);
        const float *v = qkv + (int64_t)(NH + KVH + kh) * HD;
        CT__GQA_SGEMM(CUBLAS_OP_T, CUBLAS_OP_N, L, L, HD, &one, v, (int)W, sq,
                      dout + (int64_t)h * HD, NH * HD, so, &zero, scratch + h * LL, L, sa);
    }
    const int64_t rows = (int64_t)B * NH * L;
    CT_LAUNCH(ct_cuda_lm__gqa_dsoftmax_kernel, (unsigned)CT_CEIL_DIV(rows, CT__GQA_WARPS),
              CT__GQA_WARPS * 32, 0, ctx->stream, scratch, att, rows, L, scale);
    CT_CUDA_CHECK_LAUNCH();
    for (int h = 0; h < NH; h++) {
        const int kh = h / (NH / KVH);
        const float *q = qkv + (int64_t)h * HD, *k = qkv + (int64_t)(NH + kh) * HD;
        const float *ds = scratch + h * LL, *a = att + h * LL, *g = dout + (int64_t)h * HD;
        float *dq = dqkv + (int64_t)h * HD, *dk = dqkv + (int64_t)(NH + kh) * HD;
        float *dv = dqkv + (int64_t)(NH + KVH + kh) * HD;
        CT__GQA_SGEMM(CUBLAS_OP_N, CUBLAS_OP_N, HD, L, L, &one, k, (int)W, sq, ds, L, sa, &one, dq,
                      (int)W, sq);
        CT__GQA_SGEMM(CUBLAS_OP_N, CUBLAS_OP_T, HD, L, L, &one, q, (int)W, sq, ds, L, sa, &one, dk,
                      (int)W, sq);
        CT__GQA_SGEMM(CUBLAS_OP_N, CUBLAS_OP_T, HD, L, L, &one, g, NH * HD, so, a, L, sa, &one, dv,
                      (int)W, sq);
    }
    return 0;
}

/* ---- token (and position) embedding ------------------------------------------------------------
 */

__global__ void ct_cuda_lm__embed_fwd_kernel(float *out, const float *wte, const float *wpe,
                                             const int32_t *ids, const int32_t *pos, int64_t n,
                                             int C)
{
    CT__FOR_EACH(i, n)
    {
        const int64_t r = i / C;
        const int c = (int)(i - r * C);
        const float e = wte[(int64_t)ids[r] * C + c];
        out[i] = wpe ? __fadd_rn(e, wpe[(int64_t)pos[r] * C + c]) : e;
    }
}

extern "C" int ct_lm_embed_forward_cuda(float *out, const float *wte, const float *wpe,
                                        const int32_t *ids, const int32_t *pos, int N, int C,
                                        ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    const int64_t n = (int64_t)N * C;
    CT__LAUNCH_1D(ct_cuda_lm__embed_fwd_kernel, n, stream, out, wte, wpe, ids, pos, n, C);
}

extern "C" int ct_lm_embed_backward_cuda(float *dwte, float *dwpe, void *scratch, const float *dout,
                                         const int32_t *ids, const int32_t *pos, int N, int C,
                                         int32_t skip_id, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    int rc = 0;
    if (dwte)
        rc = ct__scatter_rows_cuda(dwte, scratch, dout, ids, NULL, 1.0f, N, C, skip_id,
                                   (cudaStream_t)stream);
    if (rc == 0 && dwpe)
        rc = ct__scatter_rows_cuda(dwpe, scratch, dout, pos, NULL, 1.0f, N, C, -1,
                                   (cudaStream_t)stream);
    return rc;
}
