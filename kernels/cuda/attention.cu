/*
 * attention.cu - causal multi-head attention on packed qkv, forward and backward, the twins of
 * kernels/cpu/attention.c (semantics, dropout indexing and the skip contract: ct_kernels.h).
 *
 * Forward, one block per (query tile of CT__ATT_TQ rows, head, sequence): the block stages the
 * keys and values its rows can see (rows 0 .. end of tile) and its queries in shared memory,
 * then each warp takes one query row at a time: lane j scores key j (the query in registers,
 * the key row read as float4), warp-wide max and sum give the softmax, the row is written to att
 * (pre-dropout, zeros right of the diagonal), the dropout factors are drawn in place (each lane
 * computes whole Philox blocks and applies the draws that fall in the row), and the weighted sum
 * of values is taken by groups of lanes over float4 chunks of the head, combined by shuffles.
 *
 * Backward, two kernels with no atomics, dP and dS computed once:
 *   dQ: the forward's layout with dO in place of Q: dP_j = dO_i . V_j, the dropout factors,
 *       c_i = sum_j P_ij g_ij, dS_ij = P_ij (g_ij - c_i), dQ_i += scale sum_j dS_ij K_j; dS_ij
 *       (j <= i) goes to scratch, and the row's dropout pattern as bits (one word per 32 keys,
 *       built by shuffles), with c_i.
 *   dK, dV: one block per (key tile of 32, head, sequence); thread (warp w, lane r) keeps key
 *       j0 + r's float4 chunks w, w + 4, ... of dK and dV in registers. The block walks the query
 *       rows i >= j0 in chunks of 32, skipping chunks that are all padding, stages their Q and
 *       dO rows and dS_ij, drop(P)_ij = P_ij * factor_ij (att and the bits) for the tile's keys,
 *       and every thread adds dS_ij Q_i and drop(P)_ij dO_i in row order.
 * The previous dK/dV kernel, which recomputed dP_ij and the dropout factors per (i, j) with
 * lane = key and warps over query rows (combined through shared memory), is kept behind
 * ct_attention_backward_recompute_cuda as the benchmark's baseline.
 * The work per element is the CPU's formula; sums run in a different order (float rounding
 * differs, the tests bound it). Skipped query rows (qmask) cost nothing beyond writing their
 * zeros, and a tile whose rows are all skipped returns at once.
 *
 * Head rows are padded to a multiple of four floats with zeros (the template parameter NV is
 * the number of float4 chunks), and shared-memory rows are an odd number of float4 apart, so the
 * per-lane float4 reads of different rows hit distinct banks. Range: L <= 256, head width <= 64
 * (CT_ATTENTION_CUDA_MAX_*): keys and values of a whole sequence fit in shared memory.
 *
 * Not here: the input and output projections (linear.cu), key-padding masks (the reference has
 * none), TiSASRec's interval terms.
 */
#include <math.h>

#include "ct_cuda_common.h"

#define CT__ATT_TQ       32 /* query rows per block (forward, dQ) */
#define CT__ATT_WARPS    8  /* warps per block (forward, dQ) */
#define CT__ATT_KV_WARPS 4  /* warps per block (dK, dV); the key tile is 32 wide */

typedef struct ct_cuda_attention__att_drop {
    uint64_t seed, stream, offset;
    float p, keep;
    int on;
} ct_cuda_attention__att_drop_t;

/* float4 chunks between consecutive shared-memory rows: odd, so that eight lanes reading 16
 * bytes of eight consecutive rows cover all 32 banks. */
template <int NV> struct ct_cuda_attention__att_geom {
    static constexpr int LD4 = NV | 1;
};

__device__ __forceinline__ float ct_cuda_attention__dot4(float4 a, float4 b, float s)
{
    s += a.x * b.x;
    s += a.y * b.y;
    s += a.z * b.z;
    s += a.w * b.w;
    return s;
}

__device__ __forceinline__ void ct_cuda_attention__axpy4(float4 &acc, float a, float4 x)
{
    acc.x += a * x.x;
    acc.y += a * x.y;
    acc.z += a * x.z;
    acc.w += a * x.w;
}

/* Stages rows [r0, r1) of a head's columns (src + r*ld, HS floats each) into dst rows of LD4
 * float4, zero-padded; all threads of the block take part. */
__device__ __forceinline__ void ct_cuda_attention__att_stage(float4 *dst, const float *src,
                                                             int64_t ld, int r0, int r1, int HS,
                                                             int LD4)
{
    float *d = reinterpret_cast<float *>(dst);
    const int LD = 4 * LD4;
    const int n = (r1 - r0) * LD;
    for (int idx = (int)threadIdx.x; idx < n; idx += (int)blockDim.x) {
        const int r = idx / LD, c = idx - r * LD;
        d[idx] = c < HS ? src[(int64_t)(r0 + r) * ld + c] : 0.0f;
    }
}

/* Multiplies buf[j], j = 0..i, by the dropout factors of draws base + j; the warp computes whole
 * Philox blocks, lane by lane, and each draw lands in the one slot it belongs to. Callers
 * __syncwarp before and after (the lane-to-element mapping differs from theirs). */
__device__ __forceinline__ void
ct_cuda_attention__att_drop_row(float *buf, int i, uint64_t base,
                                const ct_cuda_attention__att_drop_t &dr, int lane)
{
    const uint64_t kb0 = base / 4, kb1 = (base + (uint64_t)i) / 4;
    for (uint64_t kb = kb0 + (uint64_t)lane; kb <= kb1; kb += 32) {
        const ct_philox_block_t r = ct_philox_block_at(dr.seed, dr.stream, kb);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const uint64_t d = kb * 4 + (uint64_t)q;
            if (d >= base && d <= base + (uint64_t)i) {
                const int j = (int)(d - base);
                buf[j] = buf[j] * ct_philox_dropout_factor(r.v[q], dr.p, dr.keep);
            }
        }
    }
}

/* out4 = sum_{j <= i} w[j] * rows[j] over a warp: lane (g, c) = (lane / NV, lane % NV) adds the
 * rows j = g, g + G, ... of chunk c, then the G groups are added by shuffles. The total is
 * valid in lanes 0..NV-1 (chunk = lane). */
template <int NV>
__device__ __forceinline__ float4 ct_cuda_attention__att_weighted_rows(const float *w,
                                                                       const float4 *rows, int i,
                                                                       int lane)
{
    constexpr int G = 32 / NV;
    static_assert((G & (G - 1)) == 0, "lane groups must be a power of two");
    constexpr int LD4 = ct_cuda_attention__att_geom<NV>::LD4;
    const int g = lane / NV, c = lane - (lane / NV) * NV;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (g < G)
        for (int j = g; j <= i; j += G)
            ct_cuda_attention__axpy4(acc, w[j], rows[j * LD4 + c]);
#pragma unroll
    for (int off = G / 2; off >= 1; off >>= 1) {
        acc.x += __shfl_down_sync(CT__FULL_MASK, acc.x, off * NV);
        acc.y += __shfl_down_sync(CT__FULL_MASK, acc.y, off * NV);
        acc.z += __shfl_down_sync(CT__FULL_MASK, acc.z, off * NV);
        acc.w += __shfl_down_sync(CT__FULL_MASK, acc.w, off * NV);
    }
    return acc;
}

/* Whether any query row of [i0, i1) is used; the same answer in every thread. */
__device__ __forceinline__ bool ct_cuda_attention__att_tile_used(const int32_t *qm, int i0, int i1)
{
    if (!qm)
        return true;
    for (int i = i0; i < i1; i++)
        if (qm[i] != 0)
            return true;
    return false;
}

/* Shared memory of the forward and dQ kernels: keys and values for L rows, the tile's
 * queries (or dO rows), one row buffer of L floats per warp. */
static size_t ct_cuda_attention__att_rows_smem(int L, int LD4, int row_bufs = 1)
{
    return ((size_t)2 * L + CT__ATT_TQ) * LD4 * sizeof(float4) +
           (size_t)row_bufs * CT__ATT_WARPS * L * sizeof(float);
}

/* ---- forward ------------------------------------------------------------------------------- */

template <int NV>
__global__ void __launch_bounds__(CT__ATT_WARPS * 32)
    ct_cuda_attention__att_fwd_kernel(float *out, float *att, const float *qkv,
                                      const int32_t *qmask, int L, int C, int NH, float scale,
                                      ct_cuda_attention__att_drop_t dr)
{
    constexpr int LD4 = ct_cuda_attention__att_geom<NV>::LD4;
    CT_DYNAMIC_SMEM(float4, sm4);
    const int HS = C / NH, C3 = 3 * C;
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int i0 = (int)blockIdx.x * CT__ATT_TQ;
    const int i1 = i0 + CT__ATT_TQ < L ? i0 + CT__ATT_TQ : L;
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int32_t *qm = qmask ? qmask + (int64_t)b * L : NULL;
    const float *qb = qkv + (int64_t)b * L * C3 + (int64_t)h * HS; /* q of row 0; k, v at +C, +2C */
    float *ob = out + (int64_t)b * L * C + (int64_t)h * HS;
    float *ab = att + ((int64_t)b * NH + h) * L * L;

    if (!ct_cuda_attention__att_tile_used(qm, i0, i1)) {
        /* Every row skipped: zeros, and no staging. The whole block leaves here. */
        for (int idx = (int)threadIdx.x; idx < (i1 - i0) * L; idx += (int)blockDim.x)
            ab[(int64_t)i0 * L + idx] = 0.0f;
        for (int idx = (int)threadIdx.x; idx < (i1 - i0) * HS; idx += (int)blockDim.x)
            ob[(int64_t)(i0 + idx / HS) * C + idx % HS] = 0.0f;
        return;
    }

    float4 *Ks = sm4;
    float4 *Vs = Ks + (size_t)L * LD4;
    float4 *Qs = Vs + (size_t)L * LD4;
    float *buf = reinterpret_cast<float *>(Qs + (size_t)CT__ATT_TQ * LD4) + (size_t)warp * L;
    ct_cuda_attention__att_stage(Ks, qb + C, C3, 0, i1, HS, LD4);
    ct_cuda_attention__att_stage(Vs, qb + 2 * C, C3, 0, i1, HS, LD4);
    ct_cuda_attention__att_stage(Qs, qb + (int64_t)i0 * C3, C3, 0, i1 - i0, HS, LD4);
    __syncthreads();

    for (int i = i0 + warp; i < i1; i += CT__ATT_WARPS) {
        float *arow = ab + (int64_t)i * L;
        float *orow = ob + (int64_t)i * C;
        if (qm && qm[i] == 0) {
            for (int j = lane; j < L; j += 32)
                arow[j] = 0.0f;
            for (int d = lane; d < HS; d += 32)
                orow[d] = 0.0f;
            continue;
        }
        float4 q[NV];
#pragma unroll
        for (int c = 0; c < NV; c++)
            q[c] = Qs[(i - i0) * LD4 + c];

        /* S_ij = (q_i . k_j) * scale, lane j; then the softmax over j <= i. */
        float mx = -INFINITY;
        for (int j = lane; j <= i; j += 32) {
            const float4 *kr = Ks + j * LD4;
            float s = 0.0f;
#pragma unroll
            for (int c = 0; c < NV; c++)
                s = ct_cuda_attention__dot4(q[c], kr[c], s);
            s *= scale;
            buf[j] = s;
            mx = fmaxf(mx, s);
        }
        mx = ct__warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j <= i; j += 32) {
            const float e = expf(buf[j] - mx);
            buf[j] = e;
            sum += e;
        }
        const float inv = 1.0f / ct__warp_sum(sum);
        for (int j = lane; j < L; j += 32) {
            float p = 0.0f;
            if (j <= i) {
                p = buf[j] * inv;
                buf[j] = p;
            }
            arow[j] = p; /* saved for the backward before dropout */
        }
        if (dr.on) {
            __syncwarp();
            ct_cuda_attention__att_drop_row(
                buf, i, dr.offset + (((uint64_t)b * NH + h) * L + i) * L, dr, lane);
        }
        __syncwarp();
        const float4 o = ct_cuda_attention__att_weighted_rows<NV>(buf, Vs, i, lane);
        if (lane < NV) {
            const int d = 4 * lane;
            if (d < HS)
                orow[d] = o.x;
            if (d + 1 < HS)
                orow[d + 1] = o.y;
            if (d + 2 < HS)
                orow[d + 2] = o.z;
            if (d + 3 < HS)
                orow[d + 3] = o.w;
        }
        __syncwarp(); /* buf is rewritten by the next row */
    }
}

/* ---- backward: dQ and the row constants ------------------------------------------------------ */

template <int NV>
__global__ void __launch_bounds__(CT__ATT_WARPS * 32)
    ct_cuda_attention__att_bwd_q_kernel(bool store, float *dqkv, float *crow, float *dsg,
                                        uint32_t *dbits, const float *dout, const float *att,
                                        const float *qkv, const int32_t *qmask, int L, int C,
                                        int NH, float scale, ct_cuda_attention__att_drop_t dr)
{
    constexpr int LD4 = ct_cuda_attention__att_geom<NV>::LD4;
    CT_DYNAMIC_SMEM(float4, sm4);
    const int HS = C / NH, C3 = 3 * C;
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int i0 = (int)blockIdx.x * CT__ATT_TQ;
    const int i1 = i0 + CT__ATT_TQ < L ? i0 + CT__ATT_TQ : L;
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int32_t *qm = qmask ? qmask + (int64_t)b * L : NULL;
    if (!ct_cuda_attention__att_tile_used(qm, i0, i1))
        return; /* skipped rows add nothing */
    const float *qb = qkv + (int64_t)b * L * C3 + (int64_t)h * HS;
    const float *dob = dout + (int64_t)b * L * C + (int64_t)h * HS;
    float *dqb = dqkv + (int64_t)b * L * C3 + (int64_t)h * HS;
    const float *ab = att + ((int64_t)b * NH + h) * L * L;
    float *cb = crow + ((int64_t)b * NH + h) * L;

    float4 *Ks = sm4;
    float4 *Vs = Ks + (size_t)L * LD4;
    float4 *Ds = Vs + (size_t)L * LD4;
    float *buf = reinterpret_cast<float *>(Ds + (size_t)CT__ATT_TQ * LD4) + (size_t)warp * L;
    /* store: a second row per warp for the dropout factors, which the dK/dV kernel gets as bits */
    float *fb = reinterpret_cast<float *>(Ds + (size_t)CT__ATT_TQ * LD4) +
                (size_t)(CT__ATT_WARPS + warp) * L;
    const int W = CT_CEIL_DIV(L, 32);
    ct_cuda_attention__att_stage(Ks, qb + C, C3, 0, i1, HS, LD4);
    ct_cuda_attention__att_stage(Vs, qb + 2 * C, C3, 0, i1, HS, LD4);
    ct_cuda_attention__att_stage(Ds, dob + (int64_t)i0 * C, C, 0, i1 - i0, HS, LD4);
    __syncthreads();

    for (int i = i0 + warp; i < i1; i += CT__ATT_WARPS) {
        if (qm && qm[i] == 0)
            continue; /* its dout counts as zero */
        const float *arow = ab + (int64_t)i * L;
        float4 dO[NV];
#pragma unroll
        for (int c = 0; c < NV; c++)
            dO[c] = Ds[(i - i0) * LD4 + c];

        /* dPd_j = dO_i . V_j: the gradient w.r.t. the dropped probabilities. */
        for (int j = lane; j <= i; j += 32) {
            const float4 *vr = Vs + j * LD4;
            float s = 0.0f;
#pragma unroll
            for (int c = 0; c < NV; c++)
                s = ct_cuda_attention__dot4(dO[c], vr[c], s);
            buf[j] = s;
        }
        if (dr.on && !store) {
            /* g_j = dPd_j * factor_j: the gradient w.r.t. the probabilities. */
            __syncwarp();
            ct_cuda_attention__att_drop_row(
                buf, i, dr.offset + (((uint64_t)b * NH + h) * L + i) * L, dr, lane);
            __syncwarp();
        } else if (dr.on) {
            /* The same product through a row of factors (1 * factor is the factor exactly), whose
             * kept/dropped pattern goes to dbits: one word per 32 keys, bit = lane. */
            for (int j = lane; j <= i; j += 32)
                fb[j] = 1.0f;
            __syncwarp();
            ct_cuda_attention__att_drop_row(fb, i, dr.offset + (((uint64_t)b * NH + h) * L + i) * L,
                                            dr, lane);
            __syncwarp();
            uint32_t *brow = dbits + (((int64_t)b * NH + h) * L + i) * W;
            for (int jb = 0; jb <= i; jb += 32) {
                const int j = jb + lane;
                uint32_t w = 0u;
                if (j <= i) {
                    buf[j] = buf[j] * fb[j];
                    w = fb[j] != 0.0f ? 1u << lane : 0u;
                }
#pragma unroll
                for (int off = 16; off >= 1; off >>= 1)
                    w |= __shfl_xor_sync(CT__FULL_MASK, w, off);
                if (lane == 0)
                    brow[jb / 32] = w;
            }
            __syncwarp();
        }
        /* Softmax backward: dS_j = P_j (g_j - c), c = sum_j P_j g_j. */
        float part = 0.0f;
        for (int j = lane; j <= i; j += 32)
            part += arow[j] * buf[j];
        const float c = ct__warp_sum(part);
        float *dsrow = store ? dsg + (((int64_t)b * NH + h) * L + i) * L : NULL;
        for (int j = lane; j <= i; j += 32) {
            buf[j] = arow[j] * (buf[j] - c);
            if (store)
                dsrow[j] = buf[j];
        }
        if (lane == 0)
            cb[i] = c;
        __syncwarp();
        /* dQ_i += scale * sum_j dS_j K_j */
        const float4 a = ct_cuda_attention__att_weighted_rows<NV>(buf, Ks, i, lane);
        if (lane < NV) {
            float *dq = dqb + (int64_t)i * C3 + 4 * lane;
            const int d = 4 * lane;
            if (d < HS)
                dq[0] += scale * a.x;
            if (d + 1 < HS)
                dq[1] += scale * a.y;
            if (d + 2 < HS)
                dq[2] += scale * a.z;
            if (d + 3 < HS)
                dq[3] += scale * a.w;
        }
        __syncwarp();
    }
}

/* ---- backward: dK and dV --------------------------------------------------------------------- */

/* Shared memory of the dK/dV kernel: the tile's 32 value rows, each warp's staged dO_i and Q_i,
 * and each warp's 32 x (dV, dK) partial sums for the final combination. */
template <int NV> static size_t ct_cuda_attention__kv_smem()
{
    constexpr int LD4 = ct_cuda_attention__att_geom<NV>::LD4;
    constexpr int RS4 = (2 * NV) | 1;
    return ((size_t)32 * LD4 + (size_t)CT__ATT_KV_WARPS * 2 * LD4 +
            (size_t)CT__ATT_KV_WARPS * 32 * RS4) *
           sizeof(float4);
}

template <int NV>
__global__ void __launch_bounds__(CT__ATT_KV_WARPS * 32)
    ct_cuda_attention__att_bwd_kv_kernel(float *dqkv, const float *crow, const float *dout,
                                         const float *att, const float *qkv, const int32_t *qmask,
                                         int L, int C, int NH, float scale,
                                         ct_cuda_attention__att_drop_t dr)
{
    constexpr int LD4 = ct_cuda_attention__att_geom<NV>::LD4;
    constexpr int RS4 = (2 * NV) | 1;
    CT_DYNAMIC_SMEM(float4, sm4);
    const int HS = C / NH, C3 = 3 * C;
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int j0 = (int)blockIdx.x * 32;
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int32_t *qm = qmask ? qmask + (int64_t)b * L : NULL;
    const float *qb = qkv + (int64_t)b * L * C3 + (int64_t)h * HS;
    const float *dob = dout + (int64_t)b * L * C + (int64_t)h * HS;
    float *dqb = dqkv + (int64_t)b * L * C3 + (int64_t)h * HS;
    const float *ab = att + ((int64_t)b * NH + h) * L * L;
    const float *cb = crow + ((int64_t)b * NH + h) * L;
    const int jn = j0 + 32 < L ? 32 : L - j0; /* keys in this tile */

    float4 *Vt = sm4;
    float4 *rowv = Vt + 32 * LD4 + (size_t)warp * 2 * LD4; /* this warp's dO_i, Q_i */
    float4 *red = Vt + 32 * LD4 + (size_t)CT__ATT_KV_WARPS * 2 * LD4;
    ct_cuda_attention__att_stage(Vt, qb + 2 * C, C3, j0, j0 + jn, HS, LD4);
    for (int idx = jn * 4 * LD4 + (int)threadIdx.x; idx < 32 * 4 * LD4; idx += (int)blockDim.x)
        reinterpret_cast<float *>(Vt)[idx] = 0.0f; /* rows past L: zeros, never used */
    __syncthreads();

    const int j = j0 + lane;
    float4 v[NV], dv[NV], dk[NV];
#pragma unroll
    for (int c = 0; c < NV; c++) {
        v[c] = Vt[lane * LD4 + c];
        dv[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        dk[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float *rowf = reinterpret_cast<float *>(rowv);
    for (int i = j0 + warp; i < L; i += CT__ATT_KV_WARPS) {
        if (qm && qm[i] == 0)
            continue;
        __syncwarp(); /* the previous row's reads of rowv are done */
        for (int d = lane; d < 4 * LD4; d += 32) {
            rowf[d] = d < HS ? dob[(int64_t)i * C + d] : 0.0f;
            rowf[4 * LD4 + d] = d < HS ? qb[(int64_t)i * C3 + d] : 0.0f;
        }
        __syncwarp();
        const bool live = j <= i; /* j < L follows: i < L */
        const float P = live ? ab[(int64_t)i * L + j] : 0.0f;
        float f = 1.0f;
        if (dr.on) {
            /* Draws base .. base+31 for keys j0 .. j0+31 span at most 9 Philox blocks: lanes
             * 0..8 compute them, every lane takes its word by shuffle. */
            const uint64_t base = dr.offset + (((uint64_t)b * NH + h) * L + i) * L + j0;
            const uint64_t kb0 = base / 4;
            const uint64_t nblk = (base + 31) / 4 - kb0 + 1;
            ct_philox_block_t blk = {{0u, 0u, 0u, 0u}};
            if ((uint64_t)lane < nblk)
                blk = ct_philox_block_at(dr.seed, dr.stream, kb0 + (uint64_t)lane);
            const uint64_t dd = base + (uint64_t)lane;
            const int src = (int)(dd / 4 - kb0), q = (int)(dd % 4);
            const uint32_t x0 = __shfl_sync(CT__FULL_MASK, blk.v[0], src);
            const uint32_t x1 = __shfl_sync(CT__FULL_MASK, blk.v[1], src);
            const uint32_t x2 = __shfl_sync(CT__FULL_MASK, blk.v[2], src);
            const uint32_t x3 = __shfl_sync(CT__FULL_MASK, blk.v[3], src);
            const uint32_t x = q == 0 ? x0 : q == 1 ? x1 : q == 2 ? x2 : x3;
            f = ct_philox_dropout_factor(x, dr.p, dr.keep);
        }
        if (live) {
            const float4 *dO = rowv;
            const float4 *Q = rowv + LD4;
            float s = 0.0f;
#pragma unroll
            for (int c = 0; c < NV; c++)
                s = ct_cuda_attention__dot4(dO[c], v[c], s);
            const float g = s * f;
            const float dS = P * (g - cb[i]);
            const float pd = P * f;
#pragma unroll
            for (int c = 0; c < NV; c++) {
                ct_cuda_attention__axpy4(dv[c], pd, dO[c]);
                ct_cuda_attention__axpy4(dk[c], dS, Q[c]);
            }
        }
    }
    /* Combine the warps' sums in warp order and add them to dV and dK. */
    float4 *mine = red + ((size_t)warp * 32 + lane) * RS4;
#pragma unroll
    for (int c = 0; c < NV; c++) {
        mine[c] = dv[c];
        mine[NV + c] = dk[c];
    }
    __syncthreads();
    for (int idx = (int)threadIdx.x; idx < jn * HS; idx += (int)blockDim.x) {
        const int r = idx / HS, d = idx - r * HS;
        float sv = 0.0f, sk = 0.0f;
#pragma unroll
        for (int w = 0; w < CT__ATT_KV_WARPS; w++) {
            const float *part = reinterpret_cast<const float *>(red + ((size_t)w * 32 + r) * RS4);
            sv += part[d];
            sk += part[4 * NV + d];
        }
        float *dst = dqb + (int64_t)(j0 + r) * C3 + d;
        dst[2 * C] += sv;
        dst[C] += scale * sk;
    }
}

/* ---- backward: dK and dV from the stored dS ------------------------------------------------- */

/* Shared memory of the kernel below: a chunk of CT__ATT_TQ query rows' Q and dO (NV float4
 * each) and their dS and drop(P) over the tile's 32 keys. */
template <int NV> static size_t ct_cuda_attention__kvs_smem()
{
    return ((size_t)2 * CT__ATT_TQ * NV * 4 + (size_t)2 * CT__ATT_TQ * 32) * sizeof(float);
}

/* One block per (key tile of 32, head, sequence), CT__ATT_KV_WARPS warps: thread (warp w,
 * lane r) owns key j0 + r and the float4 chunks w, w + 4, ... of its dK and dV rows in
 * registers. The block walks the query rows i >= j0 in chunks of CT__ATT_TQ, skipping chunks
 * whose rows are all padding, stages the chunk's Q and dO rows and its dS_ij and
 * drop(P)_ij = P_ij * factor_ij (from att and the dropout bits), then every thread adds
 * dS_ij Q_i and drop(P)_ij dO_i over the chunk's rows in row order: dK = scale dS^T Q and
 * dV = drop(P)^T dO with nothing recomputed. Reads of Q and dO are warp-uniform (broadcast),
 * of dS and drop(P) one bank per lane. */
template <int NV>
__global__ void __launch_bounds__(CT__ATT_KV_WARPS * 32)
    ct_cuda_attention__att_bwd_kvs_kernel(float *dqkv, const float *dsg, const uint32_t *dbits,
                                          const float *dout, const float *att, const float *qkv,
                                          const int32_t *qmask, int L, int C, int NH, float scale,
                                          ct_cuda_attention__att_drop_t dr)
{
    constexpr int CPW = (NV + CT__ATT_KV_WARPS - 1) / CT__ATT_KV_WARPS; /* chunks per warp */
    constexpr int TI = CT__ATT_TQ;
    CT_DYNAMIC_SMEM(float4, sm4);
    const int HS = C / NH, C3 = 3 * C, W = CT_CEIL_DIV(L, 32);
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int j0 = (int)blockIdx.x * 32;
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int32_t *qm = qmask ? qmask + (int64_t)b * L : NULL;
    const int64_t bh = (int64_t)b * NH + h;
    const float *qb = qkv + (int64_t)b * L * C3 + (int64_t)h * HS;
    const float *dob = dout + (int64_t)b * L * C + (int64_t)h * HS;
    float *dqb = dqkv + (int64_t)b * L * C3 + (int64_t)h * HS;
    const float *ab = att + bh * L * L;
    const float *db = dsg + bh * L * L;
    const uint32_t *bb = dbits + bh * L * W;

    float4 *Qs = sm4;
    float4 *Os = Qs + TI * NV;
    float *Ss = reinterpret_cast<float *>(Os + TI * NV);
    float *Ps = Ss + TI * 32;
    float4 dk[CPW], dv[CPW];
#pragma unroll
    for (int m = 0; m < CPW; m++) {
        dk[m] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        dv[m] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const int j = j0 + lane;
    for (int i0 = j0; i0 < L; i0 += TI) {
        const int i1 = i0 + TI < L ? i0 + TI : L;
        if (!ct_cuda_attention__att_tile_used(qm, i0, i1))
            continue;    /* padding rows add nothing; the same branch in every thread */
        __syncthreads(); /* the previous chunk's reads are done */
        float *qf = reinterpret_cast<float *>(Qs), *of = reinterpret_cast<float *>(Os);
        for (int idx = (int)threadIdx.x; idx < TI * NV * 4; idx += (int)blockDim.x) {
            const int r = idx / (NV * 4), d = idx - r * (NV * 4), i = i0 + r;
            const bool in = i < i1 && d < HS;
            qf[idx] = in ? qb[(int64_t)i * C3 + d] : 0.0f;
            of[idx] = in ? dob[(int64_t)i * C + d] : 0.0f;
        }
        for (int r = warp; r < TI; r += CT__ATT_KV_WARPS) {
            const int i = i0 + r;
            float sv = 0.0f, pv = 0.0f;
            if (i < i1 && j <= i && !(qm && qm[i] == 0)) {
                sv = db[(int64_t)i * L + j];
                pv = ab[(int64_t)i * L + j];
                if (dr.on)
                    pv = (bb[(int64_t)i * W + j0 / 32] >> lane) & 1u ? pv * dr.keep : 0.0f;
            }
            Ss[r * 32 + lane] = sv;
            Ps[r * 32 + lane] = pv;
        }
        __syncthreads();
        const int rn = i1 - i0;
        for (int r = 0; r < rn; r++) {
            const float sv = Ss[r * 32 + lane], pv = Ps[r * 32 + lane];
#pragma unroll
            for (int m = 0; m < CPW; m++) {
                const int c = warp + m * CT__ATT_KV_WARPS;
                if (c < NV) {
                    ct_cuda_attention__axpy4(dk[m], sv, Qs[r * NV + c]);
                    ct_cuda_attention__axpy4(dv[m], pv, Os[r * NV + c]);
                }
            }
        }
    }
    if (j >= L)
        return;
    float *dst = dqb + (int64_t)j * C3;
#pragma unroll
    for (int m = 0; m < CPW; m++) {
        const int c = warp + m * CT__ATT_KV_WARPS;
        if (c >= NV)
            continue;
        const float kx[4] = {dk[m].x, dk[m].y, dk[m].z, dk[m].w};
        const float vx[4] = {dv[m].x, dv[m].y, dv[m].z, dv[m].w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = 4 * c + e;
            if (d < HS) {
                dst[C + d] += scale * kx[e];
                dst[2 * C + d] += vx[e];
            }
        }
    }
}

/* ---- launchers ------------------------------------------------------------------------------ */

/* Raises the kernel's dynamic shared-memory limit to nbytes when it needs more than the default
 * 48 KiB, after checking the device allows that much. */
template <typename K> static int ct_cuda_attention__smem(K *kernel, size_t nbytes)
{
    if (nbytes <= 48 * 1024)
        return 0;
    int dev = 0, optin = 0;
    CT_CUDA_CHECK(cudaGetDevice(&dev), NULL);
    CT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                  NULL);
    if (nbytes > (size_t)optin) {
        ct_log_error("attention: %zu bytes of shared memory needed, the device allows %d", nbytes,
                     optin);
        return CT_ERANGE_VALUE;
    }
    CT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)nbytes),
        NULL);
    return 0;
}

template <int NV>
static int ct_cuda_attention__att_fwd_launch(float *out, float *att, const float *qkv,
                                             const int32_t *qmask, int B, int L, int C, int NH,
                                             float scale, ct_cuda_attention__att_drop_t dr,
                                             cudaStream_t stream)
{
    const size_t smem = ct_cuda_attention__att_rows_smem(L, ct_cuda_attention__att_geom<NV>::LD4);
    int rc = ct_cuda_attention__smem(ct_cuda_attention__att_fwd_kernel<NV>, smem);
    if (rc != 0)
        return rc;
    dim3 grid((unsigned)CT_CEIL_DIV(L, CT__ATT_TQ), (unsigned)NH, (unsigned)B);
    CT_LAUNCH(ct_cuda_attention__att_fwd_kernel<NV>, grid, CT__ATT_WARPS * 32, smem, stream, out,
              att, qkv, qmask, L, C, NH, scale, dr);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* The backward: dQ (and the stored dS and dropout bits when `store`), then dK and dV, either
 * from the stored dS (store) or recomputing dP (the recompute baseline). */
template <int NV>
static int ct_cuda_attention__att_bwd_launch(float *dqkv, float *scratch, const float *dout,
                                             const float *att, const float *qkv,
                                             const int32_t *qmask, int B, int L, int C, int NH,
                                             float scale, ct_cuda_attention__att_drop_t dr,
                                             bool store, cudaStream_t stream)
{
    constexpr int LD4 = ct_cuda_attention__att_geom<NV>::LD4;
    const size_t smem_q = ct_cuda_attention__att_rows_smem(L, LD4, store ? 2 : 1);
    const size_t smem_kv =
        store ? ct_cuda_attention__kvs_smem<NV>() : ct_cuda_attention__kv_smem<NV>();
    const int64_t nrow = (int64_t)B * NH * L;
    float *crow = scratch;
    float *dsg = store ? scratch + nrow : NULL;
    uint32_t *dbits = store ? reinterpret_cast<uint32_t *>(scratch + nrow + nrow * L) : NULL;
    int rc = ct_cuda_attention__smem(ct_cuda_attention__att_bwd_q_kernel<NV>, smem_q);
    if (rc == 0)
        rc = store ? ct_cuda_attention__smem(ct_cuda_attention__att_bwd_kvs_kernel<NV>, smem_kv)
                   : ct_cuda_attention__smem(ct_cuda_attention__att_bwd_kv_kernel<NV>, smem_kv);
    if (rc != 0)
        return rc;
    dim3 grid_q((unsigned)CT_CEIL_DIV(L, CT__ATT_TQ), (unsigned)NH, (unsigned)B);
    CT_LAUNCH(ct_cuda_attention__att_bwd_q_kernel<NV>, grid_q, CT__ATT_WARPS * 32, smem_q, stream,
              store, dqkv, crow, dsg, dbits, dout, att, qkv, qmask, L, C, NH, scale, dr);
    CT_CUDA_CHECK_LAUNCH();
    /* Needs the first kernel's outputs: same stream, so in order. */
    dim3 grid_kv((unsigned)CT_CEIL_DIV(L, 32), (unsigned)NH, (unsigned)B);
    if (store)
        CT_LAUNCH(ct_cuda_attention__att_bwd_kvs_kernel<NV>, grid_kv, CT__ATT_KV_WARPS * 32,
                  smem_kv, stream, dqkv, dsg, dbits, dout, att, qkv, qmask, L, C, NH, scale, dr);
    else
        CT_LAUNCH(ct_cuda_attention__att_bwd_kv_kernel<NV>, grid_kv, CT__ATT_KV_WARPS * 32, smem_kv,
                  stream, dqkv, crow, dout, att, qkv, qmask, L, C, NH, scale, dr);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

/* The instantiation for a head width: float4 chunks 2, 4, 8, 13 (SASRec's 50) or 16. */
static int ct_cuda_attention__att_nv(int HS)
{
    const int nv = (HS + 3) / 4;
    return nv <= 2 ? 2 : nv <= 4 ? 4 : nv <= 8 ? 8 : nv <= 13 ? 13 : 16;
}

static ct_cuda_attention__att_drop_t ct_cuda_attention__att_dropout(ct_dropout_t drop)
{
    ct_cuda_attention__att_drop_t d;
    d.seed = drop.seed;
    d.stream = drop.stream;
    d.offset = drop.offset;
    d.on = drop.p > 0.0f;
    d.p = drop.p;
    d.keep = d.on ? 1.0f / (1.0f - drop.p) : 1.0f; /* the CPU's expression */
    return d;
}

#define CT__ATT_CHECK_SHAPE()                                                         \
    do {                                                                              \
        CT_CUDA_REQUIRE(B >= 0 && B <= 65535 && NH >= 1 && NH <= 65535);              \
        CT_CUDA_REQUIRE(L >= 0 && L <= CT_ATTENTION_CUDA_MAX_L);                      \
        CT_CUDA_REQUIRE(C >= 1 && C % NH == 0 && C / NH <= CT_ATTENTION_CUDA_MAX_HS); \
        CT_CUDA_REQUIRE(drop.p < 1.0f); /* p <= 0: no dropout, as on the CPU */       \
    } while (0)

extern "C" int ct_attention_forward_cuda(float *out, float *att, float *scratch, const float *qkv,
                                         const int32_t *qmask, int B, int L, int C, int NH,
                                         ct_dropout_t drop, ct_stream_t stream)
{
    (void)scratch; /* the CPU's dropped-probability tile; the GPU keeps it in shared memory */
    CT__ATT_CHECK_SHAPE();
    if (B == 0 || L == 0)
        return 0;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const ct_cuda_attention__att_drop_t dr = ct_cuda_attention__att_dropout(drop);
    cudaStream_t s = (cudaStream_t)stream;
    switch (ct_cuda_attention__att_nv(HS)) {
    case 2:
        return ct_cuda_attention__att_fwd_launch<2>(out, att, qkv, qmask, B, L, C, NH, scale, dr,
                                                    s);
    case 4:
        return ct_cuda_attention__att_fwd_launch<4>(out, att, qkv, qmask, B, L, C, NH, scale, dr,
                                                    s);
    case 8:
        return ct_cuda_attention__att_fwd_launch<8>(out, att, qkv, qmask, B, L, C, NH, scale, dr,
                                                    s);
    case 13:
        return ct_cuda_attention__att_fwd_launch<13>(out, att, qkv, qmask, B, L, C, NH, scale, dr,
                                                     s);
    default:
        return ct_cuda_attention__att_fwd_launch<16>(out, att, qkv, qmask, B, L, C, NH, scale, dr,
                                                     s);
    }
}

static int ct_cuda_attention__att_bwd(float *dqkv, float *scratch, const float *dout,
                                      const float *att, const float *qkv, const int32_t *qmask,
                                      int B, int L, int C, int NH, ct_dropout_t drop, bool store,
                                      cudaStream_t s)
{
    if (B == 0 || L == 0)
        return 0;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const ct_cuda_attention__att_drop_t dr = ct_cuda_attention__att_dropout(drop);
    switch (ct_cuda_attention__att_nv(HS)) {
    case 2:
        return ct_cuda_attention__att_bwd_launch<2>(dqkv, scratch, dout, att, qkv, qmask, B, L, C,
                                                    NH, scale, dr, store, s);
    case 4:
        return ct_cuda_attention__att_bwd_launch<4>(dqkv, scratch, dout, att, qkv, qmask, B, L, C,
                                                    NH, scale, dr, store, s);
    case 8:
        return ct_cuda_attention__att_bwd_launch<8>(dqkv, scratch, dout, att, qkv, qmask, B, L, C,
                                                    NH, scale, dr, store, s);
    case 13:
        return ct_cuda_attention__att_bwd_launch<13>(dqkv, scratch, dout, att, qkv, qmask, B, L, C,
                                                     NH, scale, dr, store, s);
    default:
        return ct_cuda_attention__att_bwd_launch<16>(dqkv, scratch, dout, att, qkv, qmask, B, L, C,
                                                     NH, scale, dr, store, s);
    }
}

extern "C" int ct_attention_backward_cuda(float *dqkv, float *scratch, const float *dout,
                                          const float *att, const float *qkv, const int32_t *qmask,
                                          int B, int L, int C, int NH, ct_dropout_t drop,
                                          ct_stream_t stream)
{
    CT__ATT_CHECK_SHAPE();
    return ct_cuda_attention__att_bwd(dqkv, scratch, dout, att, qkv, qmask, B, L, C, NH, drop, true,
                                      (cudaStream_t)stream);
}

extern "C" int ct_attention_backward_recompute_cuda(float *dqkv, float *scratch, const float *dout,
                                                    const float *att, const float *qkv,
                                                    const int32_t *qmask, int B, int L, int C,
                                                    int NH, ct_dropout_t drop, ct_stream_t stream)
{
    CT__ATT_CHECK_SHAPE();
    return ct_cuda_attention__att_bwd(dqkv, scratch, dout, att, qkv, qmask, B, L, C, NH, drop,
                                      false, (cudaStream_t)stream);
}
