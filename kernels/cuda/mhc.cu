/*
 * mhc.cu - the ops of mHC residual streams, the twins of kernels/cpu/mhc.c (semantics in
 * ct_kernels.h): Sinkhorn-Knopp and its backward, the per-token mappings H^pre, H^post, H^res
 * and their backward, the stream mixing on either side of a sub-layer, and the expansion into
 * and average over the streams.
 *
 * The per-token work is tiny (n <= 8 streams, 20 Sinkhorn iterations on an n x n matrix), so
 * one thread takes one matrix or token and runs the CPU's loops in the CPU's order; the
 * exponential is the CPU's polynomial (ct__exp_nonpos), spelled with round-to-nearest
 * intrinsics so that no multiply-add is fused. The products with phi (N x nC by nC x K) are
 * cuBLAS sgemms, as on the CPU. The mixing kernels give each output element to one thread,
 * which adds over streams in the CPU's order. Sums over tokens (the bias and gate gradients)
 * run in a fixed block split in double, so they are deterministic, though not the CPU's float
 * accumulation.
 *
 * Not here: where the mHC layers sit in a block (the model), the bias initialisation.
 */
#include <math.h>

#include "ct_cuda_common.h"

/* e^x for x <= 0: the CPU's ct__exp_nonpos (kernels/cpu/ct_kernels_cpu.h), operation for
 * operation. */
__device__ __forceinline__ float ct_cuda_mhc__exp_nonpos_dev(float x)
{
    const float big = 12582912.0f;
    const float xc = x < -87.3f ? -87.3f : x;
    const float n = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504088896341f), big), big);
    float r = __fsub_rn(xc, __fmul_rn(n, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    const float e = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
    union {
        int32_t i;
        float f;
    } two;
    two.i = (int32_t)((uint32_t)((int32_t)n + 127) << 23);
    return x < -87.3f ? 0.0f : __fmul_rn(e, two.f);
}

__device__ __forceinline__ float ct_cuda_mhc__sigmoid_dev(float x)
{
    return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

/* ct_cuda_mhc__sinkhorn1 of mhc.c: out = Sinkhorn(z); with it != NULL the iterates and reciprocal
 * sums are kept (the same layout). */
__device__ void ct_cuda_mhc__sinkhorn1_dev(float *out, const float *z, int n, int iters, float *it,
                                  float *ri, float *ci, int64_t ld)
{
    const int nn = n * n;
    float m[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
    float mx = z[0];
    for (int x = 1; x < nn; x++)
        mx = z[x] > mx ? z[x] : mx;
    for (int x = 0; x < nn; x++)
        m[x] = ct_cuda_mhc__exp_nonpos_dev(__fsub_rn(z[x], mx));
    if (it)
        for (int x = 0; x < nn; x++)
            it[((int64_t)2 * iters * nn + x) * ld] = m[x];
    for (int t = 0; t < iters; t++) {
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int j = 0; j < n; j++)
                s = __fadd_rn(s, m[i * n + j]);
            const float r = __fdiv_rn(1.0f, s);
            for (int j = 0; j < n; j++)
                m[i * n + j] = __fmul_rn(m[i * n + j], r);
            if (ri)
                ri[(int64_t)(t * n + i) * ld] = r;
        }
        if (it)
            for (int x = 0; x < nn; x++)
                it[((int64_t)(2 * t) * nn + x) * ld] = m[x];
        float cs[CT_MHC_MAX_STREAMS];
        for (int j = 0; j < n; j++)
            cs[j] = m[j];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < n; j++)
                cs[j] = __fadd_rn(cs[j], m[i * n + j]);
        for (int j = 0; j < n; j++)
            cs[j] = __fdiv_rn(1.0f, cs[j]);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                m[i * n + j] = __fmul_rn(m[i * n + j], cs[j]);
        if (ci)
            for (int j = 0; j < n; j++)
                ci[(int64_t)(t * n + j) * ld] = cs[j];
        if (it)
            for (int x = 0; x < nn; x++)
                it[((int64_t)(2 * t + 1) * nn + x) * ld] = m[x];
    }
    for (int x = 0; x < nn; x++)
        out[x] = m[x];
}

/* ct_cuda_mhc__sinkhorn1_bwd of mhc.c: dz += d Sinkhorn(z) given dout; scratch:
 * CT_SINKHORN_BWD_SCRATCH(n, iters) floats of this thread's own. */
__device__ void ct_cuda_mhc__sinkhorn1_bwd_dev(float *dz, const float *dout, const float *z, int n,
                                      int iters, float *scratch, int64_t ld)
{
    const int nn = n * n;
    float *it = scratch, *ri = it + (int64_t)(2 * iters + 1) * nn * ld;
    float *ci = ri + (int64_t)iters * n * ld;
    float out[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS], g[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
    ct_cuda_mhc__sinkhorn1_dev(out, z, n, iters, it, ri, ci, ld);
    for (int x = 0; x < nn; x++)
        g[x] = dout[x];
    for (int t = iters - 1; t >= 0; t--) {
        const float *y = it + (int64_t)(2 * t + 1) * nn * ld;
        float d[CT_MHC_MAX_STREAMS];
        for (int j = 0; j < n; j++)
            d[j] = __fmul_rn(g[j], y[j * ld]);
        for (int i = 1; i < n; i++)
            for (int j = 0; j < n; j++)
                d[j] = __fadd_rn(d[j], __fmul_rn(g[i * n + j], y[(i * n + j) * ld]));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                g[i * n + j] =
                    __fmul_rn(__fsub_rn(g[i * n + j], d[j]), ci[(int64_t)(t * n + j) * ld]);
        y = it + (int64_t)(2 * t) * nn * ld;
        for (int i = 0; i < n; i++) {
            float e = 0.0f;
            for (int j = 0; j < n; j++)
                e = __fadd_rn(e, __fmul_rn(g[i * n + j], y[(i * n + j) * ld]));
            const float r = ri[(int64_t)(t * n + i) * ld];
            for (int j = 0; j < n; j++)
                g[i * n + j] = __fmul_rn(__fsub_rn(g[i * n + j], e), r);
        }
    }
    const float *m0 = it + (int64_t)2 * iters * nn * ld;
    for (int x = 0; x < nn; x++)
        dz[x] = __fadd_rn(dz[x], __fmul_rn(g[x], m0[x * ld]));
}

/* ---- Sinkhorn ------------------------------------------------------------------------------- */

__global__ void ct_cuda_mhc__sinkhorn_fwd_kernel(float *out, const float *logits, int M, int n,
                                                 int iters)
{
    const int64_t nn = (int64_t)n * n;
    CT__FOR_EACH(r, M)
    {
        ct_cuda_mhc__sinkhorn1_dev(out + r * nn, logits + r * nn, n, iters, NULL, NULL, NULL, 0);
    }
}

__global__ void ct_cuda_mhc__sinkhorn_bwd_kernel(float *dlogits, float *scratch, const float *dout,
                                        const float *logits, int M, int n, int iters)
{
    const int64_t nn = (int64_t)n * n;
    CT__FOR_EACH(r, M)
    {
        /* matrix r's scratch: element e at scratch[e * M + r], so a warp's accesses coalesce */
        ct_cuda_mhc__sinkhorn1_bwd_dev(dlogits + r * nn, dout + r * nn, logits + r * nn, n, iters,
                                       scratch + r, M);
    }
}

static int ct_cuda_mhc__mhc_shape(int N, int n, int C)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 0 && n >= 1 && n <= CT_MHC_MAX_STREAMS);
    return 0;
}

extern "C" int ct_sinkhorn_forward_cuda(float *out, const float *logits, int M, int n, int iters,
                                        ct_stream_t stream)
{
    int rc = ct_cuda_mhc__mhc_shape(M, n, 0);
    if (rc != 0)
        return rc;
    CT_CUDA_REQUIRE(iters >= 0);
    if (M == 0)
        return 0;
    CT_LAUNCH(ct_cuda_mhc__sinkhorn_fwd_kernel, ct__grid_1d(M, 128), 128, 0, stream, out, logits, M,
              n, iters);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_sinkhorn_backward_cuda(float *dlogits, float *scratch, const float *dout,
                                         const float *logits, int M, int n, int iters,
                                         ct_stream_t stream)
{
    int rc = ct_cuda_mhc__mhc_shape(M, n, 0);
    if (rc != 0)
        return rc;
    CT_CUDA_REQUIRE(iters >= 0);
    if (M == 0)
        return 0;
    CT_LAUNCH(ct_cuda_mhc__sinkhorn_bwd_kernel, ct__grid_1d(M, 128), 128, 0, stream, dlogits,
              scratch, dout, logits, M, n, iters);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- the per-token mappings ------------------------------------------------------------------ */

/* Row-major C (m x nc, ldc) = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor, ...):
 * the column-major product of the transposes, operands swapped. */
static int ct_cuda_mhc__sgemm_rm(const ct_cuda_ctx_t *ctx, bool ta, bool tb, int m, int nc, int k,
                        float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc)
{
    if (m == 0 || nc == 0)
        return 0;
    CT_CUBLAS_CHECK(ct__gemm(ctx, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             nc, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc), NULL);
    return 0;
}

/* One thread per token: the RMS factor (double, in channel order), the scaled projections, the
 * gates and H^res. */
__global__ void ct_cuda_mhc__mhc_coeffs_fwd_kernel(float *hpre, float *hpost, float *hres,
                                                   float *proj, float *rstd, const float *X,
                                                   const float *alpha, const float *bias, int N,
                                                   int n, int C, int iters, float eps)
{
    const int D = n * C, K = CT_MHC_COEFFS(n), nn = n * n;
    CT__FOR_EACH(r, N)
    {
        const float *x = X + r * D;
        double ss = 0.0;
        for (int c = 0; c < D; c++)
            ss += (double)x[c] * x[c];
        const float rs = (float)(1.0 / sqrt(ss / D + (double)eps));
        rstd[r] = rs;
        float *pr = proj + r * K;
        for (int c = 0; c < K; c++)
            pr[c] = __fmul_rn(pr[c], rs);
        const float a0 = alpha[0], a1 = alpha[1], a2 = alpha[2];
        for (int s = 0; s < n; s++) {
            hpre[r * n + s] = ct_cuda_mhc__sigmoid_dev(__fadd_rn(__fmul_rn(a0, pr[s]), bias[s]));
            hpost[r * n + s] =
                2.0f * ct_cuda_mhc__sigmoid_dev(__fadd_rn(__fmul_rn(a1, pr[n + s]), bias[n + s]));
        }
        float z[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
        for (int x2 = 0; x2 < nn; x2++)
            z[x2] = __fadd_rn(__fmul_rn(a2, pr[2 * n + x2]), bias[2 * n + x2]);
        ct_cuda_mhc__sinkhorn1_dev(hres + r * nn, z, n, iters, NULL, NULL, NULL, 0);
    }
}

extern "C" int ct_mhc_coeffs_forward_cuda(float *hpre, float *hpost, float *hres, float *proj,
                                          float *rstd, const float *X, const float *phi,
                                          const float *alpha, const float *bias, int N, int n,
                                          int C, int iters, float eps, const ct_cuda_ctx_t *ctx)
{
    int rc = ct_cuda_mhc__mhc_shape(N, n, C);
    if (rc != 0)
        return rc;
    CT_CUDA_REQUIRE(C >= 1 && iters >= 0);
    if (N == 0)
        return 0;
    const int D = n * C, K = CT_MHC_COEFFS(n);
    if ((rc = ct_cuda_mhc__sgemm_rm(ctx, false, false, N, K, D, 1.0f, X, D, phi, K, 0.0f, proj,
                                    K)) != 0)
        return rc;
    CT_LAUNCH(ct_cuda_mhc__mhc_coeffs_fwd_kernel, ct__grid_1d(N, 128), 128, 0, ctx->stream, hpre,
              hpost, hres, proj, rstd, X, alpha, bias, N, n, C, iters, eps);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* One thread per token: d(pre-activation) into gpre (for the bias and gate sums), the rstd path
 * of dX, and rstd * alpha * d(pre-activation) into dp (for the sgemms). Two memory layouts
 * (the same arithmetic): spread (the default), where token r's Sinkhorn iterates sit at
 * sk[e * N + r] so that a warp's 32 tokens touch consecutive words, and the rstd path's
 * coefficient goes to cf[r] for ct_cuda_mhc__mhc_rstd_dx_kernel to apply one thread per element;
 * or per-token (the baseline kept for the benchmark), where each token's iterates are one block
 * of sk and its thread adds the rstd path over its own row of dX. */
__global__ void ct_cuda_mhc__mhc_coeffs_bwd_kernel(
    bool spread, float *dX, float *dp, float *gpre, float *sk, float *cf, const float *dhpre,
    const float *dhpost, const float *dhres, const float *X, const float *alpha, const float *bias,
    const float *proj, const float *rstd, int N, int n, int C, int iters)
{
    const int D = n * C, K = CT_MHC_COEFFS(n), nn = n * n;
    const int64_t sb = (int64_t)CT_SINKHORN_BWD_SCRATCH(n, iters);
    CT__FOR_EACH(r, N)
    {
        const float *pr = proj + r * K;
        float *g = gpre + r * K, *d = dp + r * K;
        const float a0 = alpha[0], a1 = alpha[1], a2 = alpha[2];
        for (int s = 0; s < n; s++) {
            const float sp = ct_cuda_mhc__sigmoid_dev(__fadd_rn(__fmul_rn(a0, pr[s]), bias[s]));
            const float so =
                ct_cuda_mhc__sigmoid_dev(__fadd_rn(__fmul_rn(a1, pr[n + s]), bias[n + s]));
            g[s] = __fmul_rn(__fmul_rn(dhpre[r * n + s], sp), __fsub_rn(1.0f, sp));
            g[n + s] =
                __fmul_rn(__fmul_rn(__fmul_rn(dhpost[r * n + s], 2.0f), so), __fsub_rn(1.0f, so));
        }
        float z[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS],
            dz[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
        for (int x = 0; x < nn; x++) {
            z[x] = __fadd_rn(__fmul_rn(a2, pr[2 * n + x]), bias[2 * n + x]);
            dz[x] = 0.0f;
        }
        ct_cuda_mhc__sinkhorn1_bwd_dev(dz, dhres + r * nn, z, n, iters,
                                       spread ? sk + r : sk + r * sb, spread ? (int64_t)N : 1);
        for (int x = 0; x < nn; x++)
            g[2 * n + x] = dz[x];
        float dd = 0.0f;
        for (int c = 0; c < K; c++) {
            const float a = c < n ? a0 : c < 2 * n ? a1 : a2;
            d[c] = __fmul_rn(g[c], a);
            dd = __fadd_rn(dd, __fmul_rn(d[c], pr[c]));
        }
        const float rs = rstd[r];
        const float coef = __fdiv_rn(__fmul_rn(__fmul_rn(-dd, rs), rs), (float)D);
        if (spread) {
            cf[r] = coef;
        } else {
            const float *x = X + r * D;
            float *dx = dX + r * D;
            for (int c = 0; c < D; c++)
                dx[c] = __fadd_rn(dx[c], __fmul_rn(coef, x[c]));
        }
        for (int c = 0; c < K; c++)
            d[c] = __fmul_rn(d[c], rs);
    }
}

/* dX[r, c] += cf[r] * X[r, c], one thread per element: the per-token kernel's rstd-path loop. */
__global__ void ct_cuda_mhc__mhc_rstd_dx_kernel(float *dX, const float *cf, const float *X,
                                                int64_t N, int D)
{
    const bool narrow = N * D <= (int64_t)UINT32_MAX; /* a 32-bit division finds the row */
    CT__FOR_EACH(e, N * D)
    {
        const int64_t r = narrow ? (int64_t)((uint32_t)e / (uint32_t)D) : e / D;
        dX[e] = __fadd_rn(dX[e], __fmul_rn(cf[r], X[e]));
    }
}

/* Block c < K: dbias[c] += sum over tokens of gpre[., c]; block K + grp: dalpha[grp] += sum
 * over tokens and the group's columns of gpre * proj. Double sums, fixed split: deterministic. */
__global__ void ct_cuda_mhc__mhc_coeffs_sums_kernel(float *dbias, float *dalpha, const float *gpre,
                                           const float *proj, int N, int n)
{
    __shared__ double sh[32];
    const int K = CT_MHC_COEFFS(n);
    const int c = (int)blockIdx.x;
    double s = 0.0;
    if (c < K) {
        for (int64_t r = threadIdx.x; r < N; r += blockDim.x)
            s += (double)gpre[r * K + c];
    } else {
        const int grp = c - K;
        const int c0 = grp == 0   ? 0
                       : grp == 1 ? n
                                  : 2 * n,
                  c1 = grp == 0   ? n
                       : grp == 1 ? 2 * n
                                  : K;
        for (int64_t r = threadIdx.x; r < N; r += blockDim.x)
            for (int cc = c0; cc < c1; cc++)
                s += (double)gpre[r * K + cc] * proj[r * K + cc];
    }
    const double t = ct__block_sum_f64(s, sh);
    if (threadIdx.x == 0) {
        if (c < K)
            dbias[c] += (float)t;
        else
            dalpha[c - K] += (float)t;
    }
}

/* The sums above split over CT__MHC_SUM_SLICES slices of rows: block (c, sl) writes the double
 * sum of its slice to part[c * slices + sl]; ct_cuda_mhc__mhc_coeffs_sums_final_kernel adds the
 * slices in order. The same fixed order on every run; 27 x 32 blocks at n = 4 instead of 27. */
#define CT__MHC_SUM_SLICES 32
__global__ void ct_cuda_mhc__mhc_coeffs_sums_part_kernel(double *part, const float *gpre,
                                                         const float *proj, int N, int n)
{
    __shared__ double sh[32];
    const int K = CT_MHC_COEFFS(n);
    const int c = (int)blockIdx.x, sl = (int)blockIdx.y, slices = (int)gridDim.y;
    const int64_t rows = ((int64_t)N + slices - 1) / slices;
    const int64_t r0 = (int64_t)sl * rows, r1 = r0 + rows < N ? r0 + rows : N;
    double s = 0.0;
    if (c < K) {
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            s += (double)gpre[r * K + c];
    } else {
        const int grp = c - K;
        const int c0 = grp == 0   ? 0
                       : grp == 1 ? n
                                  : 2 * n,
                  c1 = grp == 0   ? n
                       : grp == 1 ? 2 * n
                                  : K;
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            for (int cc = c0; cc < c1; cc++)
                s += (double)gpre[r * K + cc] * proj[r * K + cc];
    }
    const double t = ct__block_sum_f64(s, sh);
    if (threadIdx.x == 0)
        part[(int64_t)c * slices + sl] = t;
}

__global__ void ct_cuda_mhc__mhc_coeffs_sums_final_kernel(float *dbias, float *dalpha,
                                                          const double *part, int n, int slices)
{
    const int K = CT_MHC_COEFFS(n);
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= K + 3)
        return;
    double t = 0.0;
    for (int sl = 0; sl < slices; sl++)
        t += part[(int64_t)c * slices + sl];
    if (c < K)
        dbias[c] += (float)t;
    else
        dalpha[c - K] += (float)t;
}

static int ct_cuda_mhc__coeffs_bwd(bool spread, float *dX, float *dphi, float *dalpha, float *dbias,
                                   float *scratch, const float *dhpre, const float *dhpost,
                                   const float *dhres, const float *X, const float *phi,
                                   const float *alpha, const float *bias, const float *proj,
                                   const float *rstd, int N, int n, int C, int iters,
                                   const ct_cuda_ctx_t *ctx)
{
    int rc = ct_cuda_mhc__mhc_shape(N, n, C);
    if (rc != 0)
        return rc;
    CT_CUDA_REQUIRE(C >= 1 && iters >= 0);
    if (N == 0)
        return 0;
    const int D = n * C, K = CT_MHC_COEFFS(n);
    float *dp = scratch, *gpre = dp + (size_t)N * K, *sk = gpre + (size_t)N * K;
    float *cf = sk + (size_t)N * CT_SINKHORN_BWD_SCRATCH(n, iters);
    CT_LAUNCH(ct_cuda_mhc__mhc_coeffs_bwd_kernel, ct__grid_1d(N, 128), 128, 0, ctx->stream, spread,
              dX, dp, gpre, sk, cf, dhpre, dhpost, dhres, X, alpha, bias, proj, rstd, N, n, C,
              iters);
    CT_CUDA_CHECK_LAUNCH();
    if (spread) {
        CT_LAUNCH(ct_cuda_mhc__mhc_rstd_dx_kernel, ct__grid_1d((int64_t)N * D, CT__THREADS),
                  CT__THREADS, 0, ctx->stream, dX, cf, X, (int64_t)N, D);
        CT_CUDA_CHECK_LAUNCH();
    }
    if (spread) {
        /* the doubles after cf, 8-byte aligned (scratch is): an even float offset */
        const size_t off = (size_t)(cf - scratch) + (size_t)N;
        double *part = reinterpret_cast<double *>(scratch + (off + 1) / 2 * 2);
        CT_LAUNCH(ct_cuda_mhc__mhc_coeffs_sums_part_kernel,
                  dim3((unsigned)(K + 3), CT__MHC_SUM_SLICES), CT__THREADS, 0, ctx->stream, part,
                  gpre, proj, N, n);
        CT_CUDA_CHECK_LAUNCH();
        CT_LAUNCH(ct_cuda_mhc__mhc_coeffs_sums_final_kernel, 1, 128, 0, ctx->stream, dbias, dalpha,
                  part, n, CT__MHC_SUM_SLICES);
    } else {
        CT_LAUNCH(ct_cuda_mhc__mhc_coeffs_sums_kernel, K + 3, CT__THREADS, 0, ctx->stream, dbias,
                  dalpha, gpre, proj, N, n);
    }
    CT_CUDA_CHECK_LAUNCH();
    /* the (X phi) path: dX += dp phi^T; dphi += X^T dp */
    if ((rc = ct_cuda_mhc__sgemm_rm(ctx, false, true, N, D, K, 1.0f, dp, K, phi, K, 1.0f, dX, D)) !=
        0)
        return rc;
    return ct_cuda_mhc__sgemm_rm(ctx, true, false, D, K, N, 1.0f, X, D, dp, K, 1.0f, dphi, K);
}

extern "C" int ct_mhc_coeffs_backward_cuda(float *dX, float *dphi, float *dalpha, float *dbias,
                                           float *scratch, const float *dhpre, const float *dhpost,
                                           const float *dhres, const float *X, const float *phi,
                                           const float *alpha, const float *bias, const float *proj,
                                           const float *rstd, int N, int n, int C, int iters,
                                           const ct_cuda_ctx_t *ctx)
{
    return ct_cuda_mhc__coeffs_bwd(true, dX, dphi, dalpha, dbias, scratch, dhpre, dhpost, dhres, X,
                                   phi, alpha, bias, proj, rstd, N, n, C, iters, ctx);
}

extern "C" int ct_mhc_coeffs_backward_pertoken_cuda(
    float *dX, float *dphi, float *dalpha, float *dbias, float *scratch, const float *dhpre,
    const float *dhpost, const float *dhres, const float *X, const float *phi, const float *alpha,
    const float *bias, const float *proj, const float *rstd, int N, int n, int C, int iters,
    const ct_cuda_ctx_t *ctx)
{
    return ct_cuda_mhc__coeffs_bwd(false, dX, dphi, dalpha, dbias, scratch, dhpre, dhpost, dhres, X,
                                   phi, alpha, bias, proj, rstd, N, n, C, iters, ctx);
}

/* ---- stream mixing ----------------------------------------------------------------------------
 */

/* u[r,c] = sum_s hpre[r,s] X[r,s,c], streams in order. */
__global__ void ct_cuda_mhc__mhc_pre_fwd_kernel(float *u, const float *X, const float *hpre, int N,
                                                int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * C)
    {
        const int64_t r = e / C, c = e - r * C;
        const float *x = X + r * n * C + c, *h = hpre + r * n;
        float o = __fmul_rn(h[0], x[0]);
        for (int s = 1; s < n; s++)
            o = __fadd_rn(o, __fmul_rn(h[s], x[(int64_t)s * C]));
        u[e] = o;
    }
}

/* dX[r,s,c] += hpre[r,s] du[r,c] */
__global__ void ct_cuda_mhc__mhc_pre_bwd_x_kernel(float *dX, const float *du, const float *hpre,
                                                  int N, int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * n * C)
    {
        const int64_t rs = e / C, c = e - rs * C, r = rs / n;
        dX[e] = __fadd_rn(dX[e], __fmul_rn(hpre[rs], du[r * C + c]));
    }
}

/* dhpre[r,s] += sum_c X[r,s,c] du[r,c], channels in order. */
__global__ void ct_cuda_mhc__mhc_pre_bwd_h_kernel(float *dhpre, const float *du, const float *X,
                                                  int N, int n, int C)
{
    CT__FOR_EACH(rs, (int64_t)N * n)
    {
        const int64_t r = rs / n;
        const float *x = X + rs * C, *g = du + r * C;
        float acc = 0.0f;
        for (int c = 0; c < C; c++)
            acc = __fadd_rn(acc, __fmul_rn(x[c], g[c]));
        dhpre[rs] = __fadd_rn(dhpre[rs], acc);
    }
}

/* Y[r,s,c] = hpost[r,s] f[r,c] + sum_t hres[r,s,t] X[r,t,c] */
__global__ void ct_cuda_mhc__mhc_post_fwd_kernel(float *Y, const float *X, const float *f,
                                                 const float *hres, const float *hpost, int N,
                                                 int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * n * C)
    {
        const int64_t rs = e / C, c = e - rs * C, r = rs / n;
        const int s = (int)(rs - r * n);
        float y = __fmul_rn(hpost[rs], f[r * C + c]);
        const float *hr = hres + (r * n + s) * n, *x = X + r * n * C + c;
        for (int t = 0; t < n; t++)
            y = __fadd_rn(y, __fmul_rn(hr[t], x[(int64_t)t * C]));
        Y[e] = y;
    }
}

/* Per (r, c): df[r,c] += sum_s hpost[r,s] dY[r,s,c]; dX[r,t,c] += sum_s hres[r,s,t] dY[r,s,c]
 * (s in order, as the CPU's loop nest adds them). */
__global__ void ct_cuda_mhc__mhc_post_bwd_xf_kernel(float *dX, float *df, const float *dY,
                                                    const float *hres, const float *hpost, int N,
                                                    int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * C)
    {
        const int64_t r = e / C, c = e - r * C;
        const float *gy = dY + r * n * C + c, *hr = hres + r * n * n, *hp = hpost + r * n;
        float acc = df[e];
        for (int s = 0; s < n; s++)
            acc = __fadd_rn(acc, __fmul_rn(hp[s], gy[(int64_t)s * C]));
        df[e] = acc;
        for (int t = 0; t < n; t++) {
            float *d = dX + (r * n + t) * C + c;
            float a = *d;
            for (int s = 0; s < n; s++)
                a = __fadd_rn(a, __fmul_rn(hr[s * n + t], gy[(int64_t)s * C]));
            *d = a;
        }
    }
}

/* Per (r, s, t) with t < n: dhres[r,s,t] += sum_c dY[r,s,c] X[r,t,c]; t == n: dhpost[r,s] +=
 * sum_c dY[r,s,c] f[r,c]. Channels in order. */
__global__ void ct_cuda_mhc__mhc_post_bwd_h_kernel(float *dhres, float *dhpost, const float *dY,
                                          const float *X, const float *f, int N, int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * n * (n + 1))
    {
        const int64_t rs = e / (n + 1), r = rs / n;
        const int t = (int)(e - rs * (n + 1));
        const float *gs = dY + rs * C;
        const float *y = t < n ? X + (r * n + t) * C : f + r * C;
        float acc = 0.0f;
        for (int c = 0; c < C; c++)
            acc = __fadd_rn(acc, __fmul_rn(gs[c], y[c]));
        if (t < n)
            dhres[rs * n + t] = __fadd_rn(dhres[rs * n + t], acc);
        else
            dhpost[rs] = __fadd_rn(dhpost[rs], acc);
    }
}

__global__ void ct_cuda_mhc__mhc_expand_fwd_kernel(float *X, const float *x, int N, int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * n * C)
    {
        const int64_t rs = e / C, c = e - rs * C, r = rs / n;
        X[e] = x[r * C + c];
    }
}

__global__ void ct_cuda_mhc__mhc_expand_bwd_kernel(float *dx, const float *dX, int N, int n, int C)
{
    CT__FOR_EACH(e, (int64_t)N * C)
    {
        const int64_t r = e / C, c = e - r * C;
        float d = dx[e];
        for (int s = 0; s < n; s++)
            d = __fadd_rn(d, dX[(r * n + s) * C + c]);
        dx[e] = d;
    }
}

__global__ void ct_cuda_mhc__mhc_collapse_fwd_kernel(float *x, const float *X, int N, int n, int C,
                                            float inv)
{
    CT__FOR_EACH(e, (int64_t)N * C)
    {
        const int64_t r = e / C, c = e - r * C;
        float o = X[r * n * C + c];
        for (int s = 1; s < n; s++)
            o = __fadd_rn(o, X[(r * n + s) * C + c]);
        x[e] = __fmul_rn(o, inv);
    }
}

__global__ void ct_cuda_mhc__mhc_collapse_bwd_kernel(float *dX, const float *dx, int N, int n,
                                                     int C, float inv)
{
    CT__FOR_EACH(e, (int64_t)N * n * C)
    {
        const int64_t rs = e / C, c = e - rs * C, r = rs / n;
        dX[e] = __fadd_rn(dX[e], __fmul_rn(dx[r * C + c], inv));
    }
}

#define CT__MHC_LAUNCH(kernel, count, stream, ...)                                               \
    do {                                                                                         \
        int ct__rc = ct_cuda_mhc__mhc_shape(N, n, C);                                            \
        if (ct__rc != 0)                                                                         \
            return ct__rc;                                                                       \
        const int64_t ct__n = (count);                                                           \
        if (ct__n == 0)                                                                          \
            return 0;                                                                            \
        CT_LAUNCH(kernel, ct__grid_1d(ct__n, CT__THREADS), CT__THREADS, 0, stream, __VA_ARGS__); \
        CT_CUDA_CHECK_LAUNCH();                                                                  \
    } while (0)

extern "C" int ct_mhc_pre_forward_cuda(float *u, const float *X, const float *hpre, int N, int n,
                                       int C, ct_stream_t stream)
{
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_pre_fwd_kernel, (int64_t)N * C, stream, u, X, hpre, N, n, C);
    return 0;
}

extern "C" int ct_mhc_pre_backward_cuda(float *dX, float *dhpre, const float *du, const float *X,
                                        const float *hpre, int N, int n, int C, ct_stream_t stream)
{
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_pre_bwd_x_kernel, (int64_t)N * n * C, stream, dX, du, hpre, N,
                   n, C);
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_pre_bwd_h_kernel, (int64_t)N * n, stream, dhpre, du, X, N, n,
                   C);
    return 0;
}

extern "C" int ct_mhc_post_forward_cuda(float *Y, const float *X, const float *f, const float *hres,
                                        const float *hpost, int N, int n, int C, ct_stream_t stream)
{
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_post_fwd_kernel, (int64_t)N * n * C, stream, Y, X, f, hres,
                   hpost, N, n, C);
    return 0;
}

extern "C" int ct_mhc_post_backward_cuda(float *dX, float *df, float *dhres, float *dhpost,
                                         const float *dY, const float *X, const float *f,
                                         const float *hres, const float *hpost, int N, int n, int C,
                                         ct_stream_t stream)
{
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_post_bwd_xf_kernel, (int64_t)N * C, stream, dX, df, dY, hres,
                   hpost, N, n, C);
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_post_bwd_h_kernel, (int64_t)N * n * (n + 1), stream, dhres,
                   dhpost, dY, X, f, N, n, C);
    return 0;
}

extern "C" int ct_mhc_expand_forward_cuda(float *X, const float *x, int N, int n, int C,
                                          ct_stream_t stream)
{
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_expand_fwd_kernel, (int64_t)N * n * C, stream, X, x, N, n, C);
    return 0;
}

extern "C" int ct_mhc_expand_backward_cuda(float *dx, const float *dX, int N, int n, int C,
                                           ct_stream_t stream)
{
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_expand_bwd_kernel, (int64_t)N * C, stream, dx, dX, N, n, C);
    return 0;
}

extern "C" int ct_mhc_collapse_forward_cuda(float *x, const float *X, int N, int n, int C,
                                            ct_stream_t stream)
{
    const float inv = 1.0f / (float)n;
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_collapse_fwd_kernel, (int64_t)N * C, stream, x, X, N, n, C,
                   inv);
    return 0;
}

extern "C" int ct_mhc_collapse_backward_cuda(float *dX, const float *dx, int N, int n, int C,
                                             ct_stream_t stream)
{
    const float inv = 1.0f / (float)n;
    CT__MHC_LAUNCH(ct_cuda_mhc__mhc_collapse_bwd_kernel, (int64_t)N * n * C, stream, dX, dx, N, n,
                   C, inv);
    return 0;
}
