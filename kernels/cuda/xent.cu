/*
 * xent.cu - the softmax cross-entropy losses, full (over every item; over every token for the
 * language models) and sampled (the positive against the sequence's M negatives): the twins of
 * ct_ce_loss_cpu, ct_lm_ce_loss_cpu and ct_sampled_ce_loss_cpu (semantics in ct_kernels.h). Loss and gradient in one pass, as on the CPU.
 *
 * Full CE: rows in chunks of CT_CE_CUDA_ROWS(V) (bounded scratch whatever the catalogue): the
 * chunk's logits by one sgemm, one block per row for max, the double sum of exponentials, the
 * row's loss term and the gradient (softmax - onehot) / count written over the logits (rows of
 * up to 4096 classes held in registers: one read and one write of the logits; longer rows read
 * three times and written twice, ct_ce_loss_multipass_cuda's path at every size); rows
 * without a target get zeros, so the two gradient sgemms (d feats += d logits E, d E += d
 * logits^T feats) can run over the whole chunk.
 * Sampled CE: one warp per position: lanes over the M + 1 classes for the logits, warp max and
 * double sum, the gradient per class kept in scratch; d feats by lanes over channels; the
 * positive's table row by float atomics. One block per sequence then adds each negative's
 * table gradient (its classes' gradients times the feature rows, positions in order) with one
 * atomic add per element: sequences may share items, so the table gradient of both losses is
 * order-dependent in its last bits.
 * The loss is sum of the rows' double terms in a fixed order, times 1 / count.
 *
 * Not here: the scores of evaluation (eval.cu), BCE (loss.cu).
 */
#include <math.h>

#include "ct_cuda_common.h"

/* Row-major sgemm as cblas (see mhc.cu). */
static int ct_cuda_xent__xent_sgemm(const ct_cuda_ctx_t *ctx, bool ta, bool tb, int m, int nc,
                                    int k, float alpha, const float *A, int lda, const float *B,
                                    int ldb, float beta, float *C, int ldc)
{
    if (m == 0 || nc == 0)
        return 0;
    CT_CUBLAS_CHECK(ct__gemm(ctx, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             nc, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc), NULL);
    return 0;
}

/* The doubles of scratch that follow its first nf floats, 8-byte aligned (scratch is). */
static inline double *ct_cuda_xent__doubles_after(float *scratch, size_t nf)
{
    return reinterpret_cast<double *>(scratch + (nf + 1) / 2 * 2);
}

/* Max over a 1-D block (blockDim a multiple of 32); valid in every thread. sh: 33 floats. */
__device__ __forceinline__ float ct_cuda_xent__block_max(float v, float *sh)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    v = ct__warp_max(v);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = ct__warp_max(lane < nw ? sh[lane] : -INFINITY);
        if (lane == 0)
            sh[32] = t;
    }
    __syncthreads();
    const float r = sh[32];
    __syncthreads();
    return r;
}

/* One block per row of the chunk: lg (NI classes) becomes the gradient row. */
__global__ void ct_cuda_xent__ce_row_kernel(float *lg, double *rowloss, const int32_t *pos, int r0,
                                            int NI, int lo, double inv)
{
    __shared__ float shf[33];
    __shared__ double shd[32];
    const int64_t k = blockIdx.x, r = r0 + k;
    float *row = lg + k * NI;
    const int32_t t = pos[r] - lo; /* the class; < 0: no target */
    if (t < 0) {
        for (int i = (int)threadIdx.x; i < NI; i += (int)blockDim.x)
            row[i] = 0.0f;
        if (threadIdx.x == 0)
            rowloss[r] = 0.0;
        return; /* the whole block */
    }
    /* read the target's logit before the barrier: after it, threads overwrite the row */
    const float lt = row[t];
    float mx = -INFINITY;
    for (int i = (int)threadIdx.x; i < NI; i += (int)blockDim.x)
        mx = fmaxf(mx, row[i]);
    mx = ct_cuda_xent__block_max(mx, shf);
    const double zt = (double)lt - (double)mx;
    double s = 0.0;
    for (int i = (int)threadIdx.x; i < NI; i += (int)blockDim.x) {
        const float e = expf(row[i] - mx);
        row[i] = e;
        s += (double)e;
    }
    s = ct__block_sum_f64(s, shd);
    if (threadIdx.x == 0)
        shd[0] = s;
    __syncthreads();
    s = shd[0];
    const float scale = (float)(inv / s);
    for (int i = (int)threadIdx.x; i < NI; i += (int)blockDim.x)
        row[i] = row[i] * scale;
    __syncthreads();
    if (threadIdx.x == 0) {
        row[t] -= (float)inv;
        rowloss[r] = log(s) - zt;
    }
}

/* The kernel above with the row held in registers, for rows of NI <= PER * CT__THREADS classes:
 * one read and one write of the row instead of three reads and two writes. Element i stays with
 * thread i % CT__THREADS, which adds its exponentials in the same order as above: the results
 * are the same bits. */
template <int PER>
__global__ void __launch_bounds__(CT__THREADS)
    ct_cuda_xent__ce_row_reg_kernel(float *lg, double *rowloss, const int32_t *pos, int r0, int NI,
                                    int lo, double inv)
{
    __shared__ float shf[33];
    __shared__ double shd[32];
    const int64_t k = blockIdx.x, r = r0 + k;
    float *row = lg + k * NI;
    const int32_t t = pos[r] - lo;
    const int tid = (int)threadIdx.x;
    if (t < 0) {
#pragma unroll
        for (int q = 0; q < PER; q++)
            if (tid + q * CT__THREADS < NI)
                row[tid + q * CT__THREADS] = 0.0f;
        if (tid == 0)
            rowloss[r] = 0.0;
        return; /* the whole block */
    }
    float v[PER];
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const int i = tid + q * CT__THREADS;
        v[q] = i < NI ? row[i] : -INFINITY;
        mx = fmaxf(mx, v[q]);
    }
    const float lt = row[t]; /* every thread reads it before any writes (the barrier below) */
    mx = ct_cuda_xent__block_max(mx, shf);
    const double zt = (double)lt - (double)mx;
    double s = 0.0;
#pragma unroll
    for (int q = 0; q < PER; q++)
        if (tid + q * CT__THREADS < NI) {
            v[q] = expf(v[q] - mx);
            s += (double)v[q];
        }
    s = ct__block_sum_f64(s, shd);
    if (tid == 0)
        shd[0] = s;
    __syncthreads();
    s = shd[0];
    const float scale = (float)(inv / s);
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const int i = tid + q * CT__THREADS;
        if (i < NI)
            /* rounded as the two-step update above (product stored, then the subtraction): no
             * fused multiply-add */
            row[i] = i == t ? __fsub_rn(__fmul_rn(v[q], scale), (float)inv) : v[q] * scale;
    }
    if (tid == 0)
        rowloss[r] = log(s) - zt;
}

/* Rows of at most this many classes take the register kernel. */
#define CT__CE_REG_PER 16

/* loss = (sum of rowloss in a fixed order) * inv; one block. */
__global__ void ct_cuda_xent__xent_total_kernel(float *loss, const double *rowloss, int64_t N,
                                                double inv)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x)
        s += rowloss[r];
    const double t = ct__block_sum_f64(s, sh);
    if (threadIdx.x == 0)
        loss[0] = (float)(t * inv);
}

/* Classes lo..V-1; dfeats or dwte NULL: that gradient is not computed. */
static int ct_cuda_xent__ce(float *loss, float *dfeats, float *dwte, float *scratch,
                            const float *feats, const float *wte, const int32_t *pos, int N, int C,
                            int V, int lo, float count, bool regs, const ct_cuda_ctx_t *ctx)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1 && V >= lo + 1);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    if (count <= 0.0f || N == 0) {
        CT_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof *loss, st), NULL);
        return 0;
    }
    const double inv = 1.0 / (double)count;
    const int NI = V - lo, R = (int)CT_CE_CUDA_ROWS(V);
    const float *E = wte + (size_t)lo * C;
    float *lg = scratch;
    double *rowloss = ct_cuda_xent__doubles_after(scratch, CT_CE_CUDA_ROWS(V) * (size_t)V);
    int rc;
    for (int r0 = 0; r0 < N; r0 += R) {
        const int m = N - r0 < R ? N - r0 : R;
        const float *f = feats + (size_t)r0 * C;
        if ((rc = ct_cuda_xent__xent_sgemm(ctx, false, true, m, NI, C, 1.0f, f, C, E, C, 0.0f, lg,
                                           NI)) != 0)
            return rc;
        if (regs && NI <= 8 * CT__THREADS)
            CT_LAUNCH(ct_cuda_xent__ce_row_reg_kernel<8>, m, CT__THREADS, 0, st, lg, rowloss, pos,
                      r0, NI, lo, inv);
        else if (regs && NI <= CT__CE_REG_PER * CT__THREADS)
            CT_LAUNCH(ct_cuda_xent__ce_row_reg_kernel<CT__CE_REG_PER>, m, CT__THREADS, 0, st, lg,
                      rowloss, pos, r0, NI, lo, inv);
        else
            CT_LAUNCH(ct_cuda_xent__ce_row_kernel, m, CT__THREADS, 0, st, lg, rowloss, pos, r0, NI,
                      lo, inv);
        CT_CUDA_CHECK_LAUNCH();
        if (dfeats && (rc = ct_cuda_xent__xent_sgemm(ctx, false, false, m, C, NI, 1.0f, lg, NI, E,
                                                     C, 1.0f, dfeats + (size_t)r0 * C, C)) != 0)
            return rc;
        if (dwte && (rc = ct_cuda_xent__xent_sgemm(ctx, true, false, NI, C, m, 1.0f, lg, NI, f, C,
                                                   1.0f, dwte + (size_t)lo * C, C)) != 0)
            return rc;
    }
    CT_LAUNCH(ct_cuda_xent__xent_total_kernel, 1, CT__THREADS, 0, st, loss, rowloss, (int64_t)N,
              inv);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_ce_loss_cuda(float *loss, float *dfeats, float *dwte, float *scratch,
                               const float *feats, const float *wte, const int32_t *pos, int N,
                               int C, int V, float count, const ct_cuda_ctx_t *ctx)
{
    return ct_cuda_xent__ce(loss, dfeats, dwte, scratch, feats, wte, pos, N, C, V, 1, count, true,
                            ctx);
}

extern "C" int ct_ce_loss_multipass_cuda(float *loss, float *dfeats, float *dwte, float *scratch,
                                         const float *feats, const float *wte, const int32_t *pos,
                                         int N, int C, int V, float count, const ct_cuda_ctx_t *ctx)
{
    return ct_cuda_xent__ce(loss, dfeats, dwte, scratch, feats, wte, pos, N, C, V, 1, count, false,
                            ctx);
}

extern "C" int ct_lm_ce_loss_cuda(float *loss, float *dfeats, float *dwte, float *scratch,
                                  const float *feats, const float *wte, const int32_t *tgt, int N,
                                  int C, int V, float count, const ct_cuda_ctx_t *ctx)
{
    return ct_cuda_xent__ce(loss, dfeats, dwte, scratch, feats, wte, tgt, N, C, V, 0, count, true,
                            ctx);
}

/* One warp per position r = (b, t): the K = M + 1 logits into G[r], then their gradient. */
__global__ void ct_cuda_xent__sce_row_kernel(float *dfeats, float *dwte, float *G, double *rowloss,
                                   const float *feats, const float *wte, const int32_t *pos,
                                   const int32_t *neg, int64_t N, int L, int C, int M, double inv)
{
    const int lane = (int)(threadIdx.x & 31);
    const int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= N)
        return; /* the whole warp */
    const int K = M + 1;
    float *g = G + r * K;
    const int32_t p = pos[r];
    if (p == 0) {
        for (int k = lane; k < K; k += 32)
            g[k] = 0.0f;
        if (lane == 0)
            rowloss[r] = 0.0;
        return;
    }
    const int64_t b = r / L;
    const float *f = feats + r * C;
    float mx = -INFINITY;
    for (int k = lane; k < K; k += 32) {
        const int32_t id = k == 0 ? p : neg[b * M + k - 1];
        const float *e = wte + (int64_t)id * C;
        float s = 0.0f;
        for (int c = 0; c < C; c++)
            s += f[c] * e[c];
        g[k] = s;
        mx = fmaxf(mx, s);
    }
    mx = ct__warp_max(mx);
    /* class 0 is lane 0's: only it reads g[0] before overwriting it below */
    const double z0 = lane == 0 ? (double)g[0] - (double)mx : 0.0;
    double s = 0.0;
    for (int k = lane; k < K; k += 32) {
        const float e = expf(g[k] - mx);
        g[k] = e;
        s += (double)e;
    }
    s = ct__warp_sum_f64(s);
    const float scale = (float)(inv / s);
    for (int k = lane; k < K; k += 32)
        g[k] = g[k] * scale - (k == 0 ? (float)inv : 0.0f);
    if (lane == 0)
        rowloss[r] = log(s) - z0;
    __syncwarp();
    const float g0 = g[0];
    const float *ep = wte + (int64_t)p * C;
    float *d = dfeats + r * C;
    for (int c = lane; c < C; c += 32) {
        float acc = 0.0f;
        for (int k = 1; k < K; k++)
            acc += g[k] * wte[(int64_t)neg[b * M + k - 1] * C + c];
        d[c] += acc + g0 * ep[c];
        atomicAdd(&dwte[(int64_t)p * C + c], g0 * f[c]);
    }
}

/* One block per sequence: dwte[neg[b,k]] += sum_t G[b,t,k+1] feats[b,t] for non-padding ids. */
__global__ void ct_cuda_xent__sce_neg_kernel(float *dwte, const float *G, const float *feats,
                                   const int32_t *pos, const int32_t *neg, int L, int C, int M)
{
    const int64_t b = blockIdx.x;
    const int K = M + 1;
    for (int x = (int)threadIdx.x; x < M * C; x += (int)blockDim.x) {
        const int k = x / C, c = x - k * C;
        const int32_t id = neg[b * M + k];
        if (id == 0)
            continue; /* padding_idx: no gradient */
        float acc = 0.0f;
        for (int t = 0; t < L; t++) {
            const int64_t r = b * L + t;
            if (pos[r] == 0)
                continue;
            acc += G[r * K + k + 1] * feats[r * C + c];
        }
        atomicAdd(&dwte[(int64_t)id * C + c], acc);
    }
}

extern "C" int ct_sampled_ce_loss_cuda(float *loss, float *dfeats, float *dwte, float *scratch,
                                       const float *feats, const float *wte, const int32_t *pos,
                                       const int32_t *neg, int B, int L, int C, int M, float count,
                                       ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 1 && C >= 1 && M >= 1);
    cudaStream_t st = (cudaStream_t)stream;
    const int64_t N = (int64_t)B * L;
    if (count <= 0.0f || N == 0) {
        CT_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof *loss, st), NULL);
        return 0;
    }
    const double inv = 1.0 / (double)count;
    float *G = scratch;
    double *rowloss = ct_cuda_xent__doubles_after(scratch, (size_t)N * ((size_t)M + 1));
    const int warps = 4;
    CT_LAUNCH(ct_cuda_xent__sce_row_kernel, (unsigned)CT_CEIL_DIV(N, (int64_t)warps), 32 * warps, 0,
              st, dfeats, dwte, G, rowloss, feats, wte, pos, neg, N, L, C, M, inv);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_xent__sce_neg_kernel, (unsigned)B, CT__THREADS, 0, st, dwte, G, feats, pos,
              neg, L, C, M);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_xent__xent_total_kernel, 1, CT__THREADS, 0, st, loss, rowloss, N, inv);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
