/*
 * encoder.cu - the temporal encoder's ops (--model temporal), the twins of kernels/cpu/encoder.c:
 * bidirectional attention over a packed projection with dropout on the probabilities, the
 * learned mask token, the masked squared error, and the projector's attention of K learned
 * queries over each sequence.
 *
 * Attention forward, one warp per query row (sequence, head, i): lane j scores key j with the
 * CPU's sum over the head's columns in order (round-to-nearest intrinsics, no contraction), the
 * softmax's max and sum are warp reductions (another order than the CPU's loop: within float
 * rounding), expf is the device's (within 2 ulp of glibc's). The row's dropped probabilities are
 * drawn from the same Philox element indices as the CPU's and staged in shared memory; the
 * weighted sum of values runs with lanes over the head's columns and keys in order (the CPU's
 * order). Backward, two kernels with no atomics: per query row the gradient of the dropped
 * probabilities, the row dot (a warp sum), the scores' gradients dS and the dropped
 * probabilities to scratch and dQ in key order; then per key row dK += sum_i dS_ij Q_i and
 * dV += sum_i drop(P)_ij dO_i in query order: the CPU's orders, so the gradients differ from the
 * CPU's only through the softmax's and the row dot's sums. Row kernels, not cuBLAS: the
 * encoder's sequences are short (tens of patches).
 *
 * The projector's attention has the same structure without dropout, its queries shared by every
 * sequence: dQ takes one warp per (head, query) adding over the sequences, then keys, in order.
 *
 * The mask token and the masked squared error are element-wise (the CPU's bits) but for the
 * token's gradient (one thread per channel adding the masked rows in row order: the CPU's bits)
 * and the loss (each row's sum in double in order, the rows in a fixed block order).
 *
 * Not here: the projections, LayerNorm and feed-forward (linear.cu, layernorm.cu,
 * elementwise.cu), the model (worker/trainer/models/temporal/).
 */
#include <math.h>

#include "ct_cuda_common.h"

#define CT__ENC_WARPS 4 /* warps (rows) per block */

typedef struct ct_cuda_encoder__drop {
    uint64_t seed, stream, offset;
    float p, keep;
    int on;
} ct_cuda_encoder__drop_t;

static ct_cuda_encoder__drop_t ct_cuda_encoder__drop_of(ct_dropout_t d)
{
    ct_cuda_encoder__drop_t r;
    r.seed = d.seed, r.stream = d.stream, r.offset = d.offset, r.p = d.p;
    r.on = d.p > 0.0f;
    r.keep = r.on ? 1.0f / (1.0f - d.p) : 1.0f; /* the CPU's expression, in float on the host */
    return r;
}

/* The dropout factor of element idx of d's stream (1 when d is off). */
__device__ __forceinline__ float ct_cuda_encoder__factor(const ct_cuda_encoder__drop_t &d,
                                                         uint64_t idx)
{
    if (!d.on)
        return 1.0f;
    const uint64_t k = d.offset + idx;
    const ct_philox_block_t r = ct_philox_block_at(d.seed, d.stream, k / 4);
    return ct_philox_dropout_factor(r.v[k % 4], d.p, d.keep);
}

/* a . b over n floats in order, rounded as the CPU's loop. */
__device__ __forceinline__ float ct_cuda_encoder__dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int e = 0; e < n; e++)
        s = __fadd_rn(s, __fmul_rn(a[e], b[e]));
    return s;
}

/* The softmax of a row of L scores in p (scaled in place by the caller's rule), by one warp:
 * p[j] <- exp(p[j] - max); returns the sum. */
__device__ __forceinline__ float ct_cuda_encoder__exp_row(float *p, int L, float mx, int lane)
{
    mx = ct__warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < L; j += 32) {
        const float ex = expf(__fsub_rn(p[j], mx));
        p[j] = ex;
        sum = __fadd_rn(sum, ex);
    }
    return ct__warp_sum(sum);
}

__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__att_fwd_kernel(float *out, float *att, const float *qkv, int B, int L, int C,
                                    int NH, float scale, ct_cuda_encoder__drop_t d)
{
    CT_DYNAMIC_SMEM(float, sh);
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w;
    if (row >= (int64_t)B * NH * L)
        return; /* the whole warp */
    const int HS = C / NH, C3 = 3 * C, i = (int)(row % L), h = (int)(row / L % NH);
    const int64_t b = row / L / NH;
    const float *q = qkv + (b * L + i) * C3 + h * HS;
    float *A = att + row * L, *pd = sh + (int64_t)w * L;
    float mx = -INFINITY;
    for (int j = lane; j < L; j += 32) {
        const float s =
            __fmul_rn(ct_cuda_encoder__dot(q, qkv + (b * L + j) * C3 + C + h * HS, HS), scale);
        A[j] = s;
        mx = fmaxf(mx, s);
    }
    const float inv = __fdiv_rn(1.0f, ct_cuda_encoder__exp_row(A, L, mx, lane));
    for (int j = lane; j < L; j += 32) {
        const float p = __fmul_rn(A[j], inv);
        A[j] = p;
        pd[j] = __fmul_rn(p, ct_cuda_encoder__factor(d, (uint64_t)row * L + j));
    }
    __syncwarp();
    for (int e = lane; e < HS; e += 32) {
        const float *v = qkv + b * L * C3 + 2 * C + h * HS + e;
        float acc = 0.0f;
        for (int j = 0; j < L; j++)
            acc = __fadd_rn(acc, __fmul_rn(pd[j], v[(int64_t)j * C3]));
        out[(b * L + i) * C + h * HS + e] = acc;
    }
}

/* Per query row: dS and drop(P) to scratch (rows of L), dQ += scale-free sum_j dS_ij K_j. */
__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__att_bwd_q_kernel(float *dqkv, float *ds, float *pdrop, const float *dout,
                                      const float *att, const float *qkv, int B, int L, int C,
                                      int NH, float scale, ct_cuda_encoder__drop_t d)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w;
    if (row >= (int64_t)B * NH * L)
        return;
    const int HS = C / NH, C3 = 3 * C, i = (int)(row % L), h = (int)(row / L % NH);
    const int64_t b = row / L / NH;
    const float *go = dout + (b * L + i) * C + h * HS, *A = att + row * L;
    float *S = ds + row * L, *PD = pdrop + row * L;
    float dot = 0.0f;
    for (int j = lane; j < L; j += 32) {
        const float f = ct_cuda_encoder__factor(d, (uint64_t)row * L + j);
        const float dp =
            __fmul_rn(ct_cuda_encoder__dot(go, qkv + (b * L + j) * C3 + 2 * C + h * HS, HS), f);
        S[j] = dp;
        PD[j] = __fmul_rn(A[j], f);
        dot = __fadd_rn(dot, __fmul_rn(dp, A[j]));
    }
    dot = ct__warp_sum(dot);
    for (int j = lane; j < L; j += 32)
        S[j] = __fmul_rn(__fmul_rn(A[j], __fsub_rn(S[j], dot)), scale);
    __syncwarp();
    for (int e = lane; e < HS; e += 32) {
        float *dq = dqkv + (b * L + i) * C3 + h * HS + e;
        const float *k = qkv + b * L * C3 + C + h * HS + e;
        float acc = *dq;
        for (int j = 0; j < L; j++)
            acc = __fadd_rn(acc, __fmul_rn(S[j], k[(int64_t)j * C3]));
        *dq = acc;
    }
}

/* Per key row (sequence, head, j): dK_j += sum_i dS_ij Q_i, dV_j += sum_i drop(P)_ij dO_i. */
__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__att_bwd_kv_kernel(float *dqkv, const float *ds, const float *pdrop,
                                       const float *dout, const float *qkv, int B, int L, int C,
                                       int NH)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w;
    if (row >= (int64_t)B * NH * L)
        return;
    const int HS = C / NH, C3 = 3 * C, j = (int)(row % L), h = (int)(row / L % NH);
    const int64_t b = row / L / NH, bh = row / L;
    const float *S = ds + bh * L * L + j, *PD = pdrop + bh * L * L + j;
    for (int e = lane; e < HS; e += 32) {
        float *dk = dqkv + (b * L + j) * C3 + C + h * HS + e, *dv = dk + C;
        const float *q = qkv + b * L * C3 + h * HS + e, *go = dout + b * L * C + h * HS + e;
        float ak = *dk, av = *dv;
        for (int i = 0; i < L; i++) {
            ak = __fadd_rn(ak, __fmul_rn(S[(int64_t)i * L], q[(int64_t)i * C3]));
            av = __fadd_rn(av, __fmul_rn(PD[(int64_t)i * L], go[(int64_t)i * C]));
        }
        *dk = ak, *dv = av;
    }
}

static unsigned ct_cuda_encoder__grid(int64_t rows)
{
    return (unsigned)CT_CEIL_DIV(rows, (int64_t)CT__ENC_WARPS);
}

extern "C" int ct_enc_attention_forward_cuda(float *out, float *att, const float *qkv, int B, int L,
                                             int C, int NH, ct_dropout_t drop, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 1 && L <= CT_ENC_ATTENTION_CUDA_MAX_L && NH >= 1 && C >= NH &&
                    C % NH == 0);
    CT_CUDA_REQUIRE(drop.p < 1.0f);
    if (B == 0)
        return 0;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const int64_t rows = (int64_t)B * NH * L;
    CT_LAUNCH(ct_cuda_encoder__att_fwd_kernel, ct_cuda_encoder__grid(rows), CT__ENC_WARPS * 32,
              (size_t)CT__ENC_WARPS * L * sizeof(float), stream, out, att, qkv, B, L, C, NH, scale,
              ct_cuda_encoder__drop_of(drop));
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_enc_attention_backward_cuda(float *dqkv, float *scratch, const float *dout,
                                              const float *att, const float *qkv, int B, int L,
                                              int C, int NH, ct_dropout_t drop, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 1 && L <= CT_ENC_ATTENTION_CUDA_MAX_L && NH >= 1 && C >= NH &&
                    C % NH == 0);
    CT_CUDA_REQUIRE(drop.p < 1.0f);
    if (B == 0)
        return 0;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const int64_t rows = (int64_t)B * NH * L;
    float *ds = scratch, *pdrop = scratch + rows * L;
    CT_LAUNCH(ct_cuda_encoder__att_bwd_q_kernel, ct_cuda_encoder__grid(rows), CT__ENC_WARPS * 32, 0,
              stream, dqkv, ds, pdrop, dout, att, qkv, B, L, C, NH, scale,
              ct_cuda_encoder__drop_of(drop));
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_encoder__att_bwd_kv_kernel, ct_cuda_encoder__grid(rows), CT__ENC_WARPS * 32,
              0, stream, dqkv, ds, pdrop, dout, qkv, B, L, C, NH);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- the mask token and the masked squared error ------------------------------------------ */

__global__ void ct_cuda_encoder__mask_fwd_kernel(float *out, const float *inp, const float *token,
                                                 const int32_t *mask, int64_t n, int C)
{
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = x / C;
        out[x] = mask[r] ? token[x % C] : inp[x];
    }
}

__global__ void ct_cuda_encoder__mask_bwd_inp_kernel(float *dinp, const float *dout,
                                                     const int32_t *mask, int64_t n, int C)
{
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x)
        if (!mask[x / C])
            dinp[x] = __fadd_rn(dinp[x], dout[x]);
}

__global__ void ct_cuda_encoder__mask_bwd_token_kernel(float *dtoken, const float *dout,
                                                       const int32_t *mask, int N, int C)
{
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= C)
        return;
    float acc = dtoken[c];
    for (int r = 0; r < N; r++)
        if (mask[r])
            acc = __fadd_rn(acc, dout[(int64_t)r * C + c]);
    dtoken[c] = acc;
}

extern "C" int ct_mask_token_forward_cuda(float *out, const float *inp, const float *token,
                                          const int32_t *mask, int N, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    const int64_t n = (int64_t)N * C;
    CT__LAUNCH_1D(ct_cuda_encoder__mask_fwd_kernel, n, stream, out, inp, token, mask, n, C);
}

extern "C" int ct_mask_token_backward_cuda(float *dinp, float *dtoken, const float *dout,
                                           const int32_t *mask, int N, int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && C >= 1);
    if (N == 0)
        return 0;
    const int64_t n = (int64_t)N * C;
    CT_LAUNCH(ct_cuda_encoder__mask_bwd_inp_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0,
              stream, dinp, dout, mask, n, C);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_encoder__mask_bwd_token_kernel, (unsigned)CT_CEIL_DIV(C, CT__THREADS),
              CT__THREADS, 0, stream, dtoken, dout, mask, N, C);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

__global__ void ct_cuda_encoder__mse_rows_kernel(double *rowsum, float *dpred, const float *pred,
                                                 const float *target, const int32_t *mask, int N,
                                                 int P, float g)
{
    for (int r = (int)(blockIdx.x * blockDim.x + threadIdx.x); r < N;
         r += (int)(gridDim.x * blockDim.x)) {
        const float *x = pred + (int64_t)r * P, *y = target + (int64_t)r * P;
        float *dd = dpred ? dpred + (int64_t)r * P : NULL;
        double s = 0.0;
        for (int c = 0; c < P; c++) {
            const float e = mask[r] ? __fsub_rn(x[c], y[c]) : 0.0f;
            s += (double)e * (double)e;
            if (dd)
                dd[c] = __fmul_rn(g, e);
        }
        rowsum[r] = s;
    }
}

__global__ void ct_cuda_encoder__mse_sum_kernel(float *loss, const double *rowsum, int N,
                                                double count)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int r = (int)threadIdx.x; r < N; r += (int)blockDim.x)
        s += rowsum[r];
    const double t = ct__block_sum_f64(s, sh);
    if (threadIdx.x == 0)
        *loss = (float)(t / count);
}

extern "C" int ct_masked_mse_cuda(float *loss, float *dpred, double *scratch, const float *pred,
                                  const float *target, const int32_t *mask, int N, int P,
                                  float count, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(N >= 0 && P >= 1);
    const float g = 2.0f / count; /* the CPU's expression */
    if (N > 0) {
        CT_LAUNCH(ct_cuda_encoder__mse_rows_kernel, ct__grid_1d(N, CT__THREADS), CT__THREADS, 0,
                  stream, scratch, dpred, pred, target, mask, N, P, g);
        CT_CUDA_CHECK_LAUNCH();
    }
    CT_LAUNCH(ct_cuda_encoder__mse_sum_kernel, 1, CT__THREADS, 0, stream, loss, scratch, N,
              (double)count);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- the projector's attention ------------------------------------------------------------ */

__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__qatt_fwd_kernel(float *out, float *att, const float *q, const float *k,
                                     const float *v, int B, int K, int L, int C, int NH,
                                     float scale)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w; /* (b, h, t) */
    if (row >= (int64_t)B * NH * K)
        return;
    const int D = C / NH, t = (int)(row % K), h = (int)(row / K % NH);
    const int64_t b = row / K / NH;
    const float *qt = q + (int64_t)t * C + h * D;
    float *p = att + row * L;
    float mx = -INFINITY;
    for (int j = lane; j < L; j += 32) {
        const float s = __fmul_rn(ct_cuda_encoder__dot(qt, k + (b * L + j) * C + h * D, D), scale);
        p[j] = s;
        mx = fmaxf(mx, s);
    }
    const float sum = ct_cuda_encoder__exp_row(p, L, mx, lane);
    for (int j = lane; j < L; j += 32)
        p[j] = __fdiv_rn(p[j], sum);
    __syncwarp();
    for (int e = lane; e < D; e += 32) {
        const float *vv = v + b * L * C + h * D + e;
        float acc = 0.0f;
        for (int j = 0; j < L; j++)
            acc = __fadd_rn(acc, __fmul_rn(p[j], vv[(int64_t)j * C]));
        out[(b * K + t) * C + h * D + e] = acc;
    }
}

/* Per (b, h, t): dS to scratch. */
__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__qatt_bwd_s_kernel(float *ds, const float *dout, const float *att,
                                       const float *v, int B, int K, int L, int C, int NH,
                                       float scale)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w;
    if (row >= (int64_t)B * NH * K)
        return;
    const int D = C / NH, t = (int)(row % K), h = (int)(row / K % NH);
    const int64_t b = row / K / NH;
    const float *p = att + row * L, *go = dout + (b * K + t) * C + h * D;
    float *S = ds + row * L;
    float dot = 0.0f;
    for (int j = lane; j < L; j += 32) {
        const float s = ct_cuda_encoder__dot(go, v + (b * L + j) * C + h * D, D);
        S[j] = s;
        dot = __fadd_rn(dot, __fmul_rn(p[j], s));
    }
    dot = ct__warp_sum(dot);
    for (int j = lane; j < L; j += 32)
        S[j] = __fmul_rn(__fmul_rn(p[j], __fsub_rn(S[j], dot)), scale);
}

/* Per key row (b, h, j): dK_j += sum_t dS_tj q_t, dV_j += sum_t P_tj dO_t, t in order. */
__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__qatt_bwd_kv_kernel(float *dk, float *dv, const float *ds, const float *dout,
                                        const float *att, const float *q, int B, int K, int L,
                                        int C, int NH)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w;
    if (row >= (int64_t)B * NH * L)
        return;
    const int D = C / NH, j = (int)(row % L), h = (int)(row / L % NH);
    const int64_t b = row / L / NH, bh = row / L;
    const float *S = ds + bh * K * L + j, *p = att + bh * K * L + j;
    for (int e = lane; e < D; e += 32) {
        float *gk = dk + (b * L + j) * C + h * D + e, *gv = dv + (b * L + j) * C + h * D + e;
        const float *qt = q + h * D + e, *go = dout + b * K * C + h * D + e;
        float ak = *gk, av = *gv;
        for (int t = 0; t < K; t++) {
            av = __fadd_rn(av, __fmul_rn(p[(int64_t)t * L], go[(int64_t)t * C]));
            ak = __fadd_rn(ak, __fmul_rn(S[(int64_t)t * L], qt[(int64_t)t * C]));
        }
        *gk = ak, *gv = av;
    }
}

/* Per (h, t): dq_t += sum_b sum_j dS_btj k_bj, b then j in order. */
__global__ void __launch_bounds__(CT__ENC_WARPS * 32)
    ct_cuda_encoder__qatt_bwd_q_kernel(float *dq, const float *ds, const float *k, int B, int K,
                                       int L, int C, int NH)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__ENC_WARPS + w; /* (h, t) */
    if (row >= (int64_t)NH * K)
        return;
    const int D = C / NH, t = (int)(row % K), h = (int)(row / K);
    for (int e = lane; e < D; e += 32) {
        float *g = dq + (int64_t)t * C + h * D + e;
        float acc = *g;
        for (int64_t b = 0; b < B; b++) {
            const float *S = ds + ((b * NH + h) * K + t) * L;
            const float *kk = k + b * L * C + h * D + e;
            for (int j = 0; j < L; j++)
                acc = __fadd_rn(acc, __fmul_rn(S[j], kk[(int64_t)j * C]));
        }
        *g = acc;
    }
}

extern "C" int ct_query_attention_forward_cuda(float *out, float *att, const float *q,
                                               const float *k, const float *v, int B, int K, int L,
                                               int C, int NH, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && K >= 1 && L >= 1 && L <= 4096 && NH >= 1 && C >= NH && C % NH == 0);
    if (B == 0)
        return 0;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    CT_LAUNCH(ct_cuda_encoder__qatt_fwd_kernel, ct_cuda_encoder__grid((int64_t)B * NH * K),
              CT__ENC_WARPS * 32, 0, stream, out, att, q, k, v, B, K, L, C, NH, scale);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_query_attention_backward_cuda(float *dq, float *dk, float *dv, float *scratch,
                                                const float *dout, const float *att, const float *q,
                                                const float *k, const float *v, int B, int K, int L,
                                                int C, int NH, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && K >= 1 && L >= 1 && L <= 4096 && NH >= 1 && C >= NH && C % NH == 0);
    if (B == 0)
        return 0;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    CT_LAUNCH(ct_cuda_encoder__qatt_bwd_s_kernel, ct_cuda_encoder__grid((int64_t)B * NH * K),
              CT__ENC_WARPS * 32, 0, stream, scratch, dout, att, v, B, K, L, C, NH, scale);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_encoder__qatt_bwd_kv_kernel, ct_cuda_encoder__grid((int64_t)B * NH * L),
              CT__ENC_WARPS * 32, 0, stream, dk, dv, scratch, dout, att, q, B, K, L, C, NH);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_encoder__qatt_bwd_q_kernel, ct_cuda_encoder__grid((int64_t)NH * K),
              CT__ENC_WARPS * 32, 0, stream, dq, scratch, k, B, K, L, C, NH);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
