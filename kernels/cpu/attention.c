/*
 * attention.c - causal multi-head attention on packed qkv, forward and backward, with dropout on
 * the probabilities (masks regenerated, never stored) and optional skipping of padding queries.
 * Semantics and the skip contract are in ct_kernels.h; this comment is about how.
 *
 * Per (sequence b, head h) the query rows are cut into tiles of CT__ATT_TILE rows whose edges
 * sit at fixed multiples of the tile size. A tile of rows i0..i1-1 only needs keys 0..i1-1
 * (causality), so every product is an sgemm on that block: the work above the diagonal that
 * is done is at most one tile wide, and a tile whose queries are all skipped costs nothing.
 * The tile grid never moves, so the matrix products that make a row's values have the same
 * shapes with or without skipping - that is what keeps used rows bitwise identical.
 *
 * Softmax, the dropout factors and the softmax backward are fused row loops; their sums are
 * float, over eight partial accumulators in a fixed pattern (ct_kernels_cpu.h). The
 * probabilities kept for the backward are the pre-dropout ones (the softmax backward needs them
 * where the mask dropped an element); the dropped copy is rebuilt in scratch when needed.
 *
 * Not done here: the input and output projections (linear.c), key-padding masks (the reference
 * has none), any head width other than C / NH.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

/* Query rows per tile: small enough that the wasted work above the diagonal (about L * T / 2
 * dot products per head against L^2 / 2 useful ones) stays small, large enough for sgemm to run
 * near its speed. At ml-1m sizes (L = 200, HS = 50, dropout 0.2; bench/kernels_bench.c) tiles
 * of 16, 24, 32, 48, 64 and 200 rows took 44, 43, 46, 45, 45 and 53 ms forward + backward. */
#define CT__ATT_TILE 24

static inline int ct_cpu_attention__tile_skipped(const int32_t *qm, int i0, int i1)
{
    if (!qm)
        return 0;
    for (int i = i0; i < i1; i++)
        if (qm[i] != 0)
            return 0;
    return 1;
}

/* The dropout factors of row i of head (b, h): mk[j] for j = 0..i (0 or 1/(1-p)). */
static inline void ct_cpu_attention__row_factors(float *mk, int i, int L, uint64_t draw_row0,
                                                 ct_dropout_t drop, float keep_scale)
{
    /* ct__dropout_span multiplies an input by the factors; feeding it ones yields the factors. */
    for (int j = 0; j <= i; j++)
        mk[j] = 1.0f;
    ct__dropout_span(mk, mk, i + 1, drop.p, keep_scale, drop.seed, drop.stream,
                     draw_row0 + (uint64_t)i * (uint64_t)L);
}

CT__MULTIVERSION void ct_attention_forward_cpu(float *out, float *att, float *scratch,
                                               const float *qkv, const int32_t *qmask, int B, int L,
                                               int C, int NH, ct_dropout_t drop)
{
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const int dropping = drop.p > 0.0f;
    const float keep_scale = dropping ? 1.0f / (1.0f - drop.p) : 1.0f;

    for (int b = 0; b < B; b++) {
        const int32_t *qm = qmask ? qmask + (size_t)b * L : NULL;
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * L * C3 + (size_t)h * HS;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *o = out + (size_t)b * L * C + (size_t)h * HS;
            float *a = att + ((size_t)b * NH + h) * L * L;
            uint64_t draw0 = drop.offset + ((uint64_t)b * NH + (uint64_t)h) * L * L;

            for (int i0 = 0; i0 < L; i0 += CT__ATT_TILE) {
                int i1 = i0 + CT__ATT_TILE < L ? i0 + CT__ATT_TILE : L;
                int m = i1 - i0, kn = i1;
                if (ct_cpu_attention__tile_skipped(qm, i0, i1)) {
                    memset(a + (size_t)i0 * L, 0, (size_t)m * L * sizeof *a);
                    for (int i = i0; i < i1; i++)
                        memset(o + (size_t)i * C, 0, (size_t)HS * sizeof *o);
                    continue;
                }
                /* S = scale * Q K^T for the tile's rows and keys 0..i1-1. */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, HS, scale,
                            q + (size_t)i0 * C3, C3, k, C3, 0.0f, a + (size_t)i0 * L, L);
                for (int i = i0; i < i1; i++) {
                    float *r = a + (size_t)i * L;
                    if (qm && qm[i] == 0) {
                        memset(r, 0, (size_t)L * sizeof *r);
                        continue;
                    }
                    float mx = ct__max_f32(r, i + 1);
                    for (int j = 0; j <= i; j++)
                        r[j] = ct__exp_nonpos(r[j] - mx);
                    float inv = 1.0f / ct__sum8_f32(r, i + 1);
                    for (int j = 0; j <= i; j++)
                        r[j] *= inv;
                    memset(r + i + 1, 0, (size_t)(L - i - 1) * sizeof *r);
                }
                /* out = drop(P) V over the tile; rows of P are zero right of the diagonal. */
                const float *pm = a + (size_t)i0 * L;
                if (dropping) {
                    for (int i = i0; i < i1; i++) {
                        float *pd = scratch + (size_t)(i - i0) * L;
                        const float *r = a + (size_t)i * L;
                        if (qm && qm[i] == 0) {
                            memset(pd, 0, (size_t)kn * sizeof *pd);
                            continue;
                        }
                        ct__dropout_span(pd, r, i + 1, drop.p, keep_scale, drop.seed, drop.stream,
                                         draw0 + (uint64_t)i * (uint64_t)L);
                        memset(pd + i + 1, 0, (size_t)(kn - i - 1) * sizeof *pd);
                    }
                    pm = scratch;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, kn, 1.0f, pm, L, v,
                            C3, 0.0f, o + (size_t)i0 * C, C);
            }
        }
    }
}

CT__MULTIVERSION void ct_attention_backward_cpu(float *dqkv, float *scratch, const float *dout,
                                                const float *att, const float *qkv,
                                                const int32_t *qmask, int B, int L, int C, int NH,
                                                ct_dropout_t drop)
{
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const int dropping = drop.p > 0.0f;
    const float keep_scale = dropping ? 1.0f / (1.0f - drop.p) : 1.0f;
    /* scratch: dP of the tile (T,L), drop(P) of the tile (T,L), one row of factors (L), with
     * T = min(tile, L) rows so that it fits CT_ATTENTION_BWD_SCRATCH(L) for every L. */
    const size_t T = CT__ATT_TILE < L ? CT__ATT_TILE : (size_t)L;
    float *dp = scratch;
    float *pd = scratch + T * L;
    float *mk = scratch + 2 * T * L;

    for (int b = 0; b < B; b++) {
        const int32_t *qm = qmask ? qmask + (size_t)b * L : NULL;
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * L * C3 + (size_t)h * HS;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *dq = dqkv + (size_t)b * L * C3 + (size_t)h * HS;
            float *dk = dq + C;
            float *dv = dq + 2 * C;
            const float *dO = dout + (size_t)b * L * C + (size_t)h * HS;
            const float *a = att + ((size_t)b * NH + h) * L * L;
            uint64_t draw0 = drop.offset + ((uint64_t)b * NH + (uint64_t)h) * L * L;

            for (int i0 = 0; i0 < L; i0 += CT__ATT_TILE) {
                int i1 = i0 + CT__ATT_TILE < L ? i0 + CT__ATT_TILE : L;
                int m = i1 - i0, kn = i1;
                if (ct_cpu_attention__tile_skipped(qm, i0, i1))
                    continue;
                /* dPd = dO V^T: the gradient w.r.t. the dropped probabilities. */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, HS, 1.0f,
                            dO + (size_t)i0 * C, C, v, C3, 0.0f, dp, L);
                const float *pm = a + (size_t)i0 * L;
                for (int i = i0; i < i1; i++) {
                    const float *P = a + (size_t)i * L;
                    float *g = dp + (size_t)(i - i0) * L;
                    float *pdr = pd + (size_t)(i - i0) * L;
                    if (qm && qm[i] == 0) {
                        /* A skipped row: its P row is zero, and its gradient is taken as zero. */
                        memset(g, 0, (size_t)kn * sizeof *g);
                        if (dropping)
                            memset(pdr, 0, (size_t)kn * sizeof *pdr);
                        continue;
                    }
                    if (dropping) {
                        ct_cpu_attention__row_factors(mk, i, L, draw0, drop, keep_scale);
                        for (int j = 0; j <= i; j++) {
                            pdr[j] = P[j] * mk[j];
                            g[j] *= mk[j];
                        }
                        memset(pdr + i + 1, 0, (size_t)(kn - i - 1) * sizeof *pdr);
                    }
                    /* Softmax backward: dS = P * (dP - sum_j P dP), zero right of the diagonal. */
                    float c = ct__dot8_f32(P, g, i + 1);
                    for (int j = 0; j <= i; j++)
                        g[j] = P[j] * (g[j] - c);
                    memset(g + i + 1, 0, (size_t)(kn - i - 1) * sizeof *g);
                }
                if (dropping)
                    pm = pd;
                /* dV += drop(P)^T dO */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, HS, m, 1.0f, pm, L,
                            dO + (size_t)i0 * C, C, 1.0f, dv, C3);
                /* dQ += scale dS K ; dK += scale dS^T Q */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, kn, scale, dp, L, k,
                            C3, 1.0f, dq + (size_t)i0 * C3, C3);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, HS, m, scale, dp, L,
                            q + (size_t)i0 * C3, C3, 1.0f, dk, C3);
            }
        }
    }
}
