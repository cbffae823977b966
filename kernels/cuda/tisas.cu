/*
 * tisas.cu - TiSASRec's time-aware attention, its interval-mask bits and the absolute-position
 * row broadcast: the twins of kernels/cpu/tisas.c and ct_rows_broadcast_*_cpu (semantics in
 * ct_kernels.h). As on the CPU, no (B,L,L,C) float tensor is formed: the interval key and
 * value rows are read from their (T+1, C) tables at tau_ij inside the kernels, and the
 * interval dropout is read from the keep bits that ct_tisas_mask_cuda draws once per pass
 * (exactly the CPU's bits: the same Philox draw per element, the same keep rule; one block per
 * row, threads over the row's words, each Philox block computed once; the previous launch, one
 * thread per word of every row, is kept behind ct_tisas_mask_perword_cuda as the benchmark's
 * baseline).
 *
 * Forward, one warp per query row (b, h, i): lane j scores key j (q_i . k_j plus the interval
 * term, both summed over the head's channels in channel order), warp-wide max and sum give the
 * softmax, the row goes to att (zeros right of the diagonal), the attention dropout factor of
 * (b,h,i,j) is regenerated from Philox, and the weighted sums of v_j + R^V[tau_ij] f_ij are
 * taken with lanes over channels. The row's scores, dropped weights and taus live in shared
 * memory (L floats + L ints per warp).
 *
 * Backward, two kernels:
 *   per query row (warp): dP_ij = dO_i . (v_j + R^V[tau] fV), the dropout factor, the softmax
 *     backward dS_ij = P_ij (g_ij - sum_j P_ij g_ij), dQ_i += scale sum_j dS_ij (k_j +
 *     R^K[tau] fK); d R^V[tau_ij] += pd_ij dO_i fV and d R^K[tau_ij] += scale dS_ij q_i fK,
 *     summed in registers over each run of equal tau along the row and added by one float
 *     atomic per run (many rows share an interval bucket; the order of those additions varies
 *     between runs, as with the item-table atomics of embed.cu). dS and the dropped
 *     probabilities pd go to scratch ((B,NH,L,L) each, the size of att).
 *   per key row (warp, lanes over channels): dV_j += sum_{i>=j} pd_ij dO_i, dK_j += scale
 *     sum_{i>=j} dS_ij Q_i, rows in order: no atomics, deterministic.
 * Padding query rows (qmask == 0) are written as zeros in the forward and contribute nothing
 * to the backward, as on the CPU.
 *
 * Not here: the projections (linear.cu) and adding the dropped absolute-position rows to k and
 * v (the model, with ct_residual_forward_cuda).
 */
#include <math.h>

#include "ct_cuda_common.h"

#define CT__TIS_WARPS 4 /* warps (rows) per block */

typedef struct ct_cuda_tisas__tis_drop {
    uint64_t seed, stream, offset;
    float p, keep;
    int on;
} ct_cuda_tisas__tis_drop_t;

/* The attention dropout factor of draw idx (1 without dropout). */
__device__ __forceinline__ float ct_cuda_tisas__tis_factor(const ct_cuda_tisas__tis_drop_t &d,
                                                           uint64_t idx)
{
    if (!d.on)
        return 1.0f;
    const ct_philox_block_t r = ct_philox_block_at(d.seed, d.stream, idx >> 2);
    return ct_philox_dropout_factor(r.v[idx & 3], d.p, d.keep);
}

/* The interval dropout factor of channel bit x of a row's mask (keep when bits is NULL). */
__device__ __forceinline__ float ct_cuda_tisas__tis_bit(const uint32_t *bits, int64_t x, float keep)
{
    if (!bits)
        return 1.0f;
    return ((bits[x >> 5] >> (x & 31)) & 1u) ? keep : 0.0f;
}

/* ---- absolute-position rows ------------------------------------------------------------------ */

__global__ void ct_cuda_tisas__rows_bcast_fwd_kernel(float *out, const float *table, int64_t n,
                                                     int64_t LC)
{
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x)
        out[x] = table[x % LC];
}

/* One thread per table element, sequences in order: the CPU's additions, bit for bit. */
__global__ void ct_cuda_tisas__rows_bcast_bwd_kernel(float *dtable, const float *dout, int B,
                                                     int64_t LC)
{
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < LC;
         x += (int64_t)gridDim.x * blockDim.x) {
        float acc = dtable[x];
        for (int b = 0; b < B; b++)
            acc = __fadd_rn(acc, dout[(int64_t)b * LC + x]);
        dtable[x] = acc;
    }
}

extern "C" int ct_rows_broadcast_forward_cuda(float *out, const float *table, int B, int L, int C,
                                              ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 0 && C >= 0);
    const int64_t LC = (int64_t)L * C, n = LC * B;
    if (n == 0)
        return 0;
    CT_LAUNCH(ct_cuda_tisas__rows_bcast_fwd_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0,
              stream, out, table, n, LC);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_rows_broadcast_backward_cuda(float *dtable, const float *dout, int B, int L,
                                               int C, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 0 && C >= 0);
    const int64_t LC = (int64_t)L * C;
    if (LC == 0 || B == 0)
        return 0;
    CT_LAUNCH(ct_cuda_tisas__rows_bcast_bwd_kernel, ct__grid_1d(LC, CT__THREADS), CT__THREADS, 0,
              stream, dtable, dout, B, LC);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* ---- interval masks -------------------------------------------------------------------------- */

/* One thread per (row, word): bit k of row (b,i) is draw offset + row*L*C + k. Only the words
 * the row's (i+1)*C elements occupy are written, as on the CPU. */
__global__ void ct_cuda_tisas__tisas_mask_kernel(uint32_t *bits, const int32_t *qmask, int64_t rows,
                                                 int L, int C, int64_t W, float p, uint64_t seed,
                                                 uint64_t stream, uint64_t offset)
{
    const int64_t total = rows * W;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = x / W, w = x - row * W;
        const int i = (int)(row % L);
        const int64_t n = (int64_t)(i + 1) * C;
        if (w * 32 >= n || (qmask && qmask[row] == 0))
            continue;
        const uint64_t first = offset + (uint64_t)row * (uint64_t)L * (uint64_t)C;
        uint32_t word = 0;
        uint64_t have = ~(uint64_t)0;
        ct_philox_block_t r = {{0, 0, 0, 0}};
        for (int k = 0; k < 32 && w * 32 + k < n; k++) {
            const uint64_t d = first + (uint64_t)(w * 32 + k);
            if ((d >> 2) != have) {
                have = d >> 2;
                r = ct_philox_block_at(seed, stream, have);
            }
            if (ct_philox_to_unit_float(r.v[d & 3]) >= p)
                word |= 1u << k;
        }
        bits[row * W + w] = word;
    }
}

/* One block per row (b, i), blockIdx.x = i, blockIdx.y = b: no index division, a padding row's
 * block leaves at once, and the threads loop over only the (i + 1) * C bits the row has, so no
 * thread is launched for the words right of the diagonal. The words and bits are the kernel
 * above's. */
__global__ void __launch_bounds__(128)
    ct_cuda_tisas__tisas_mask_row_kernel(uint32_t *bits, const int32_t *qmask, int L, int C,
                                         int64_t W, float p, uint64_t seed, uint64_t stream,
                                         uint64_t offset)
{
    const int i = (int)blockIdx.x;
    const int64_t row = (int64_t)blockIdx.y * L + i;
    if (qmask && qmask[row] == 0)
        return; /* the whole block */
    const int64_t n = (int64_t)(i + 1) * C;
    const int64_t nw = (n + 31) / 32;
    const uint64_t first = offset + (uint64_t)row * (uint64_t)L * (uint64_t)C;
    uint32_t *out = bits + row * W;
    for (int64_t w = threadIdx.x; w < nw; w += blockDim.x) {
        const int kn = n - w * 32 < 32 ? (int)(n - w * 32) : 32;
        const uint64_t d0 = first + (uint64_t)(w * 32);
        uint32_t word = 0;
        /* the Philox blocks that hold draws d0 .. d0 + kn - 1, each computed once */
        for (uint64_t kb = d0 >> 2; kb <= (d0 + (uint64_t)kn - 1) >> 2; kb++) {
            const ct_philox_block_t r = ct_philox_block_at(seed, stream, kb);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const uint64_t d = kb * 4 + (uint64_t)q;
                if (d >= d0 && d < d0 + (uint64_t)kn && ct_philox_to_unit_float(r.v[q]) >= p)
                    word |= 1u << (int)(d - d0);
            }
        }
        out[w] = word;
    }
}

static int ct_cuda_tisas__mask(bool per_row, uint32_t *bits, const int32_t *qmask, int B, int L,
                               int C, ct_dropout_t drop, cudaStream_t stream)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 0 && C >= 0);
    CT_CUDA_REQUIRE(drop.p < 1.0f);
    per_row = per_row && B <= 65535; /* the grid's y extent */
    const int64_t rows = (int64_t)B * L, W = (int64_t)CT_TISAS_MASK_WORDS(L, C);
    if (rows == 0 || W == 0)
        return 0;
    if (per_row)
        CT_LAUNCH(ct_cuda_tisas__tisas_mask_row_kernel, dim3((unsigned)L, (unsigned)B), 128, 0,
                  stream, bits, qmask, L, C, W, drop.p, drop.seed, drop.stream, drop.offset);
    else
        CT_LAUNCH(ct_cuda_tisas__tisas_mask_kernel, ct__grid_1d(rows * W, CT__THREADS), CT__THREADS,
                  0, stream, bits, qmask, rows, L, C, W, drop.p, drop.seed, drop.stream,
                  drop.offset);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_tisas_mask_cuda(uint32_t *bits, const int32_t *qmask, int B, int L, int C,
                                  ct_dropout_t drop, ct_stream_t stream)
{
    return ct_cuda_tisas__mask(true, bits, qmask, B, L, C, drop, (cudaStream_t)stream);
}

extern "C" int ct_tisas_mask_perword_cuda(uint32_t *bits, const int32_t *qmask, int B, int L, int C,
                                          ct_dropout_t drop, ct_stream_t stream)
{
    return ct_cuda_tisas__mask(false, bits, qmask, B, L, C, drop, (cudaStream_t)stream);
}

/* ---- attention ------------------------------------------------------------------------------- */

/* Shared memory of one warp: scores/weights (L floats), taus (L ints), q_i and dO_i (HS each). */
static inline size_t ct_cuda_tisas__tis_smem(int L, int HS)
{
    return (size_t)CT__TIS_WARPS * (2 * (size_t)L + 2 * (size_t)HS) * sizeof(float);
}

/* The taus of row i of sequence b into tau[0..i]; lanes split the keys. */
__device__ __forceinline__ void ct_cuda_tisas__tis_taus(int *tau, const int64_t *ts, int i, int T,
                                                        int lane)
{
    const int64_t ti = ts[i];
    for (int j = lane; j <= i; j += 32) {
        const int64_t d = ti >= ts[j] ? ti - ts[j] : ts[j] - ti;
        tau[j] = d > (int64_t)T ? T : (int)d;
    }
}

__global__ void ct_cuda_tisas__tisas_fwd_kernel(float *out, float *att, const float *q,
                                                const float *k, const float *v, const float *rk,
                                                const float *rv, const int64_t *tseq,
                                                const int32_t *qmask, int B, int L, int C, int NH,
                                                int T, ct_cuda_tisas__tis_drop_t da,
                                                const uint32_t *mask_rk, const uint32_t *mask_rv,
                                                float keep_rkv, float scale)
{
    CT_DYNAMIC_SMEM(float, sm);
    const int HS = C / NH, lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__TIS_WARPS + warp;
    if (row >= (int64_t)B * NH * L)
        return; /* the whole warp: rows are warp-uniform */
    float *w = sm + (size_t)warp * (2 * L + 2 * HS);
    int *tau = reinterpret_cast<int *>(w + L);
    float *qs = w + 2 * L;
    const int i = (int)(row % L);
    const int64_t bh = row / L;
    const int h = (int)(bh % NH), b = (int)(bh / NH);
    const int64_t hc = (int64_t)h * HS, rb = (int64_t)b * L;
    float *a = att + row * L;
    float *orow = out + (rb + i) * C + hc;
    if (qmask && qmask[rb + i] == 0) {
        for (int j = lane; j < L; j += 32)
            a[j] = 0.0f;
        for (int c = lane; c < HS; c += 32)
            orow[c] = 0.0f;
        return;
    }
    const size_t W = CT_TISAS_MASK_WORDS(L, C);
    const uint32_t *bk = mask_rk ? mask_rk + (size_t)(rb + i) * W : NULL;
    const uint32_t *bv = mask_rv ? mask_rv + (size_t)(rb + i) * W : NULL;
    for (int c = lane; c < HS; c += 32)
        qs[c] = q[(rb + i) * C + hc + c];
    ct_cuda_tisas__tis_taus(tau, tseq + rb, i, T, lane);
    __syncwarp();
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += 32) {
        const float *kj = k + (rb + j) * C + hc, *rj = rk + (int64_t)tau[j] * C + hc;
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = 0; c < HS; c++) {
            s1 += qs[c] * kj[c];
            s2 += qs[c] * (rj[c] * ct_cuda_tisas__tis_bit(bk, (int64_t)j * C + hc + c, keep_rkv));
        }
        const float s = scale * s1 + scale * s2;
        w[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = ct__warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        const float e = expf(w[j] - mx);
        w[j] = e;
        sum += e;
    }
    sum = ct__warp_sum(sum);
    const float inv = 1.0f / sum;
    const uint64_t draw0 = da.offset + (uint64_t)row * (uint64_t)L;
    for (int j = lane; j < L; j += 32) {
        if (j <= i) {
            const float P = w[j] * inv;
            a[j] = P;
            w[j] = P * ct_cuda_tisas__tis_factor(da, draw0 + (uint64_t)j);
        } else {
            a[j] = 0.0f;
        }
    }
    __syncwarp();
    for (int c = lane; c < HS; c += 32) {
        float acc_v = 0.0f, acc_r = 0.0f;
        for (int j = 0; j <= i; j++) {
            const float wj = w[j];
            if (wj == 0.0f)
                continue; /* dropped: adds nothing */
            acc_v += wj * v[(rb + j) * C + hc + c];
            acc_r += wj * (rv[(int64_t)tau[j] * C + hc + c] *
                           ct_cuda_tisas__tis_bit(bv, (int64_t)j * C + hc + c, keep_rkv));
        }
        orow[c] = acc_v + acc_r;
    }
}

__global__ void ct_cuda_tisas__tisas_bwd_q_kernel(
    float *dq, float *drk, float *drv, float *dS, float *pd, const float *dout, const float *att,
    const float *q, const float *k, const float *v, const float *rk, const float *rv,
    const int64_t *tseq, const int32_t *qmask, int B, int L, int C, int NH, int T,
    ct_cuda_tisas__tis_drop_t da, const uint32_t *mask_rk, const uint32_t *mask_rv, float keep_rkv,
    float scale)
{
    CT_DYNAMIC_SMEM(float, sm);
    const int HS = C / NH, lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__TIS_WARPS + warp;
    if (row >= (int64_t)B * NH * L)
        return;
    float *g = sm + (size_t)warp * (2 * L + 2 * HS);
    int *tau = reinterpret_cast<int *>(g + L);
    float *qs = g + 2 * L, *dos = qs + HS;
    const int i = (int)(row % L);
    const int64_t bh = row / L;
    const int h = (int)(bh % NH), b = (int)(bh / NH);
    const int64_t hc = (int64_t)h * HS, rb = (int64_t)b * L;
    float *dSr = dS + row * L, *pdr = pd + row * L;
    if (qmask && qmask[rb + i] == 0) {
        for (int j = lane; j <= i; j += 32)
            dSr[j] = 0.0f, pdr[j] = 0.0f;
        return;
    }
    const float *P = att + row * L;
    const size_t W = CT_TISAS_MASK_WORDS(L, C);
    const uint32_t *bk = mask_rk ? mask_rk + (size_t)(rb + i) * W : NULL;
    const uint32_t *bv = mask_rv ? mask_rv + (size_t)(rb + i) * W : NULL;
    for (int c = lane; c < HS; c += 32) {
        qs[c] = q[(rb + i) * C + hc + c];
        dos[c] = dout[(rb + i) * C + hc + c];
    }
    ct_cuda_tisas__tis_taus(tau, tseq + rb, i, T, lane);
    __syncwarp();
    const uint64_t draw0 = da.offset + (uint64_t)row * (uint64_t)L;
    float cdot = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        const float *vj = v + (rb + j) * C + hc, *rj = rv + (int64_t)tau[j] * C + hc;
        const float mk = ct_cuda_tisas__tis_factor(da, draw0 + (uint64_t)j);
        const float wd = da.on ? P[j] * mk : P[j];
        float gv = 0.0f, gr = 0.0f;
        for (int c = 0; c < HS; c++) {
            const float f = ct_cuda_tisas__tis_bit(bv, (int64_t)j * C + hc + c, keep_rkv);
            gv += dos[c] * vj[c];
            gr += dos[c] * (rj[c] * f);
        }
        float gj = gv + gr;
        if (da.on)
            gj *= mk;
        g[j] = gj;
        pdr[j] = wd;
        cdot += P[j] * gj;
    }
    cdot = ct__warp_sum(cdot);
    for (int j = lane; j <= i; j += 32) {
        const float s = P[j] * (g[j] - cdot);
        g[j] = s;
        dSr[j] = s;
    }
    __syncwarp();
    /* dQ_i and the row's shares of d R^K and d R^V, lanes over channels, keys in order. The
     * table gradients are summed in registers over each run of keys with the same interval and
     * added once per run: taus fall monotonically along a row of a time-ordered sequence, and
     * clamped or equal timestamps make long runs, so this replaces one atomic per (j, c) (which
     * serialised on the few hot rows: 50 ms for B=128, L=200) with one per distinct interval. */
    for (int c = lane; c < HS; c += 32) {
        float acc_k = 0.0f, acc_r = 0.0f, run_k = 0.0f, run_v = 0.0f;
        for (int j = 0; j <= i; j++) {
            const float s = g[j];
            const int t = tau[j];
            const int64_t x = (int64_t)j * C + hc + c;
            const float fk = ct_cuda_tisas__tis_bit(bk, x, keep_rkv);
            acc_k += s * k[(rb + j) * C + hc + c];
            acc_r += s * (rk[(int64_t)t * C + hc + c] * fk);
            run_k += (scale * s) * (qs[c] * fk);
            run_v += pdr[j] * (dos[c] * ct_cuda_tisas__tis_bit(bv, x, keep_rkv));
            if (j == i || tau[j + 1] != t) {
                if (run_k != 0.0f)
                    atomicAdd(&drk[(int64_t)t * C + hc + c], run_k);
                if (run_v != 0.0f)
                    atomicAdd(&drv[(int64_t)t * C + hc + c], run_v);
                run_k = 0.0f, run_v = 0.0f;
            }
        }
        float *d = dq + (rb + i) * C + hc + c;
        *d += scale * acc_k + scale * acc_r;
    }
}

/* dK_j, dV_j for key row (b, h, j), lanes over channels, query rows i >= j in order. */
__global__ void ct_cuda_tisas__tisas_bwd_kv_kernel(float *dk, float *dv, const float *dS,
                                                   const float *pd, const float *dout,
                                                   const float *q, const int32_t *qmask, int B,
                                                   int L, int C, int NH, float scale)
{
    const int HS = C / NH, lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int64_t row = (int64_t)blockIdx.x * CT__TIS_WARPS + warp;
    if (row >= (int64_t)B * NH * L)
        return;
    const int j = (int)(row % L);
    const int64_t bh = row / L;
    const int h = (int)(bh % NH), b = (int)(bh / NH);
    const int64_t hc = (int64_t)h * HS, rb = (int64_t)b * L;
    for (int c = lane; c < HS; c += 32) {
        float acc_v = 0.0f, acc_k = 0.0f;
        for (int i = j; i < L; i++) {
            if (qmask && qmask[rb + i] == 0)
                continue;
            const int64_t e = (bh * L + i) * L + j;
            acc_v += pd[e] * dout[(rb + i) * C + hc + c];
            acc_k += dS[e] * q[(rb + i) * C + hc + c];
        }
        dv[(rb + j) * C + hc + c] += acc_v;
        dk[(rb + j) * C + hc + c] += scale * acc_k;
    }
}

static ct_cuda_tisas__tis_drop_t ct_cuda_tisas__tis_drop_of(ct_dropout_t d)
{
    ct_cuda_tisas__tis_drop_t r;
    r.seed = d.seed, r.stream = d.stream, r.offset = d.offset, r.p = d.p;
    r.on = d.p > 0.0f;
    r.keep = r.on ? 1.0f / (1.0f - d.p) : 1.0f;
    return r;
}

/* Shape checks shared by both directions; also opts the kernels into the shared memory. */
static int ct_cuda_tisas__tis_check(int B, int L, int C, int NH, int T, float p_att, float p_rkv)
{
    CT_CUDA_REQUIRE(B >= 0 && L >= 1 && NH >= 1 && C >= NH && C % NH == 0 && T >= 0);
    CT_CUDA_REQUIRE(L <= CT_TISAS_CUDA_MAX_L && C / NH <= CT_TISAS_CUDA_MAX_HS);
    CT_CUDA_REQUIRE(p_att < 1.0f && p_rkv < 1.0f);
    return 0;
}

extern "C" int ct_tisas_attention_forward_cuda(float *out, float *att, float *scratch,
                                               const float *q, const float *k, const float *v,
                                               const float *rk, const float *rv,
                                               const int64_t *tseq, const int32_t *qmask, int B,
                                               int L, int C, int NH, int T, ct_dropout_t drop_att,
                                               const uint32_t *mask_rk, const uint32_t *mask_rv,
                                               float p_rkv, ct_stream_t stream)
{
    (void)scratch;
    int rc = ct_cuda_tisas__tis_check(B, L, C, NH, T, drop_att.p, p_rkv);
    if (rc != 0)
        return rc;
    const int64_t rows = (int64_t)B * NH * L;
    if (rows == 0)
        return 0;
    const size_t smem = ct_cuda_tisas__tis_smem(L, C / NH);
    CT_CUDA_CHECK(cudaFuncSetAttribute(ct_cuda_tisas__tisas_fwd_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  NULL);
    const float keep_rkv = p_rkv > 0.0f ? 1.0f / (1.0f - p_rkv) : 1.0f;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    CT_LAUNCH(ct_cuda_tisas__tisas_fwd_kernel, (unsigned)CT_CEIL_DIV(rows, (int64_t)CT__TIS_WARPS),
              32 * CT__TIS_WARPS, smem, stream, out, att, q, k, v, rk, rv, tseq, qmask, B, L, C, NH,
              T, ct_cuda_tisas__tis_drop_of(drop_att), mask_rk, mask_rv, keep_rkv, scale);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int ct_tisas_attention_backward_cuda(float *dq, float *dk, float *dv, float *drk,
                                                float *drv, float *scratch, const float *dout,
                                                const float *att, const float *q, const float *k,
                                                const float *v, const float *rk, const float *rv,
                                                const int64_t *tseq, const int32_t *qmask, int B,
                                                int L, int C, int NH, int T, ct_dropout_t drop_att,
                                                const uint32_t *mask_rk, const uint32_t *mask_rv,
                                                float p_rkv, ct_stream_t stream)
{
    int rc = ct_cuda_tisas__tis_check(B, L, C, NH, T, drop_att.p, p_rkv);
    if (rc != 0)
        return rc;
    const int64_t rows = (int64_t)B * NH * L;
    if (rows == 0)
        return 0;
    float *dS = scratch, *pd = scratch + (size_t)rows * (size_t)L;
    const size_t smem = ct_cuda_tisas__tis_smem(L, C / NH);
    CT_CUDA_CHECK(cudaFuncSetAttribute(ct_cuda_tisas__tisas_bwd_q_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  NULL);
    const float keep_rkv = p_rkv > 0.0f ? 1.0f / (1.0f - p_rkv) : 1.0f;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const unsigned grid = (unsigned)CT_CEIL_DIV(rows, (int64_t)CT__TIS_WARPS);
    CT_LAUNCH(ct_cuda_tisas__tisas_bwd_q_kernel, grid, 32 * CT__TIS_WARPS, smem, stream, dq, drk,
              drv, dS, pd, dout, att, q, k, v, rk, rv, tseq, qmask, B, L, C, NH, T,
              ct_cuda_tisas__tis_drop_of(drop_att), mask_rk, mask_rv, keep_rkv, scale);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_tisas__tisas_bwd_kv_kernel, grid, 32 * CT__TIS_WARPS, 0, stream, dk, dv, dS,
              pd, dout, q, qmask, B, L, C, NH, scale);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
