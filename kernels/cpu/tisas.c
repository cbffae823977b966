/*
 * tisas.c - TiSASRec's time-aware attention, forward and backward (semantics in ct_kernels.h),
 * computed without materialising any of the (B,L,L,C) float tensors the reference builds: the
 * interval key and value rows R^K[tau_ij], R^V[tau_ij] are read from their (T+1, C) tables
 * inside the loops that need them, and their dropout masks - one draw per (b,i,j,c) element,
 * exactly the elements the reference drops - come as bits (ct_tisas_mask_cpu), unpacked one
 * query row at a time into a scratch row of (i+1) x C factors.
 *
 * Why bits and not regeneration inside these loops: the reference draws each interval tensor's
 * mask once per forward and every block uses it, in the forward and in the backward, so a
 * regenerating kernel draws it 2 x (blocks) x 2 times per step; at TiSASRec's sizes that was
 * over half of the step on the CPU (perf: 53% in Philox at L = 50). Drawing it once per pass
 * into B*L*L*C bits - 1/32 of the float tensor, 2 MB per tensor at L = 50, B = 128 - and
 * reading the bits everywhere computes exactly the same masks at a quarter of the draws.
 *
 * Why the direct gather-dot and not the product-then-gather of docs/models.md §3.6 (Q (R^K)^T
 * once, then gather at tau): with dropout on the interval tensors the product cannot be
 * formed at all (every (i,j) pair has its own mask over c), and without dropout it costs
 * L (T+1) C multiply-adds per sequence against L^2 C / 2 for the gather-dot - more whenever
 * T + 1 > L / 2, which holds at every setting of the references (T = 256, L = 50 or 200). The
 * bucket-sum of the values (sum a_ij into an L x (T+1) histogram, then times R^V) has the same
 * trade-off. So one code path serves training and evaluation, and the two differ only in
 * whether factors are generated.
 *
 * The parts that are plain attention (q . k_j with the absolute-position keys already added to
 * k, the probabilities times v) use the row tiles of attention.c and sgemm; the interval terms
 * and the softmax are fused row loops. Every sum runs in a fixed order, so results are the same
 * on every run; interval-table gradients are scattered row by row in (b, h, i, j) order.
 *
 * Not done here: the projections (linear.c), building k + P^K and v + P^V (the caller adds
 * the dropped absolute-position rows), padding query rows' uniform weights (see ct_kernels.h).
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

/* Query rows per tile, as in attention.c (the same trade-off between work above the diagonal
 * and sgemm efficiency). */
#define CT__TIS_TILE 24

static inline int ct_cpu_tisas__tile_skipped(const int32_t *qm, int i0, int i1)
{
    if (!qm)
        return 0;
    for (int i = i0; i < i1; i++)
        if (qm[i] != 0)
            return 0;
    return 1;
}

/* tau[j] = min(|t_i - t_j|, T) for j = 0..i. */
static inline void ct_cpu_tisas__taus(int32_t *tau, const int64_t *ts, int i, int T)
{
    const int64_t ti = ts[i];
    for (int j = 0; j <= i; j++) {
        int64_t d = ti >= ts[j] ? ti - ts[j] : ts[j] - ti;
        tau[j] = d > (int64_t)T ? T : (int32_t)d;
    }
}

/* f[0..n) = the dropout factors (0 or keep_scale) of a row's mask bits; written without
 * branches, 32 at a time, so that the compiler vectorizes it (a bit times keep_scale is exactly
 * 0 or keep_scale). */
static inline void ct_cpu_tisas__factors(float *f, int64_t n, const uint32_t *bits,
                                         float keep_scale)
{
    int64_t x = 0;
    for (; x + 32 <= n; x += 32) {
        const uint32_t w = bits[x >> 5];
        for (int k = 0; k < 32; k++)
            f[x + k] = (float)((w >> k) & 1u) * keep_scale;
    }
    for (; x < n; x++)
        f[x] = (float)((bits[x >> 5] >> (x & 31)) & 1u) * keep_scale;
}

/* Where row (b, i)'s mask bits start. */
static inline const uint32_t *ct_cpu_tisas__row_bits(const uint32_t *bits, int b, int i, int L,
                                                     int C)
{
    return bits + ((size_t)b * (size_t)L + (size_t)i) * CT_TISAS_MASK_WORDS(L, C);
}

void ct_tisas_mask_cpu(uint32_t *bits, const int32_t *qmask, int B, int L, int C, ct_dropout_t drop)
{
    const size_t W = CT_TISAS_MASK_WORDS(L, C);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            if (qmask && qmask[(size_t)b * L + i] == 0)
                continue;
            uint64_t first =
                drop.offset +
                (((uint64_t)b * (uint64_t)L + (uint64_t)i) * (uint64_t)L) * (uint64_t)C;
            ct__keep_bits_span(bits + ((size_t)b * L + i) * W, (int64_t)(i + 1) * C, drop.p,
                               drop.seed, drop.stream, first);
        }
}

/* sum_c x[c] * (y[c] * f[c]) over eight partial sums (ct_kernels_cpu.h's pattern). */
static inline float ct_cpu_tisas__dot3_8(const float *x, const float *y, const float *f, int n)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int c = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++)
            a[k] += x[c + k] * (y[c + k] * f[c + k]);
    for (int k = 0; c < n; c++, k++)
        a[k] += x[c] * (y[c] * f[c]);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

CT__MULTIVERSION void ct_tisas_attention_forward_cpu(float *out, float *att, float *scratch,
                                                     const float *q, const float *k, const float *v,
                                                     const float *rk, const float *rv,
                                                     const int64_t *tseq, const int32_t *qmask,
                                                     int B, int L, int C, int NH, int T,
                                                     ct_dropout_t drop_att, const uint32_t *mask_rk,
                                                     const uint32_t *mask_rv, float p_rkv)
{
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const int datt = drop_att.p > 0.0f, drk = mask_rk != NULL, drv = mask_rv != NULL;
    const float keep_rkv = p_rkv > 0.0f ? 1.0f / (1.0f - p_rkv) : 1.0f;
    const float keep_att = datt ? 1.0f / (1.0f - drop_att.p) : 1.0f;
    const size_t TL = (size_t)(CT__TIS_TILE < L ? CT__TIS_TILE : L) * (size_t)L;
    float *pd = scratch;                            /* (tile, L) dropped probabilities */
    float *fk = pd + TL;                            /* (L, C) interval-key factors of one row */
    float *fv = fk + (size_t)L * C;                 /* (L, C) interval-value factors of one row */
    int32_t *tau = (int32_t *)(fv + (size_t)L * C); /* (L) */

    for (int b = 0; b < B; b++) {
        const int32_t *qm = qmask ? qmask + (size_t)b * L : NULL;
        const int64_t *ts = tseq + (size_t)b * L;
        for (int h = 0; h < NH; h++) {
            const size_t hc = (size_t)h * HS;
            const float *qb = q + (size_t)b * L * C + hc;
            const float *kb = k + (size_t)b * L * C + hc;
            const float *vb = v + (size_t)b * L * C + hc;
            float *ob = out + (size_t)b * L * C + hc;
            float *a = att + ((size_t)b * NH + h) * L * L;
            const uint64_t draw0 = drop_att.offset + ((uint64_t)b * NH + (uint64_t)h) * L * L;

            for (int i0 = 0; i0 < L; i0 += CT__TIS_TILE) {
                const int i1 = i0 + CT__TIS_TILE < L ? i0 + CT__TIS_TILE : L;
                const int m = i1 - i0, kn = i1;
                if (ct_cpu_tisas__tile_skipped(qm, i0, i1)) {
                    memset(a + (size_t)i0 * L, 0, (size_t)m * L * sizeof *a);
                    for (int i = i0; i < i1; i++)
                        memset(ob + (size_t)i * C, 0, (size_t)HS * sizeof *ob);
                    continue;
                }
                /* S = scale * Q K^T over the tile's rows and keys 0..i1-1 */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, HS, scale,
                            qb + (size_t)i0 * C, C, kb, C, 0.0f, a + (size_t)i0 * L, L);
                for (int i = i0; i < i1; i++) {
                    float *r = a + (size_t)i * L;
                    if (qm && qm[i] == 0) {
                        memset(r, 0, (size_t)L * sizeof *r);
                        continue;
                    }
                    ct_cpu_tisas__taus(tau, ts, i, T);
                    const float *qi = qb + (size_t)i * C;
                    if (drk) {
                        ct_cpu_tisas__factors(fk, (int64_t)(i + 1) * C,
                                              ct_cpu_tisas__row_bits(mask_rk, b, i, L, C),
                                              keep_rkv);
                        for (int j = 0; j <= i; j++)
                            r[j] += scale * ct_cpu_tisas__dot3_8(qi, rk + (size_t)tau[j] * C + hc,
                                                                 fk + (size_t)j * C + hc, HS);
                    } else {
                        for (int j = 0; j <= i; j++)
                            r[j] += scale * ct__dot8_f32(qi, rk + (size_t)tau[j] * C + hc, HS);
                    }
                    float mx = ct__max_f32(r, i + 1);
                    for (int j = 0; j <= i; j++)
                        r[j] = ct__exp_nonpos(r[j] - mx);
                    float inv = 1.0f / ct__sum8_f32(r, i + 1);
                    for (int j = 0; j <= i; j++)
                        r[j] *= inv;
                    memset(r + i + 1, 0, (size_t)(L - i - 1) * sizeof *r);
                }
                /* out = drop(P) V, rows of P zero right of the diagonal */
                const float *pm = a + (size_t)i0 * L;
                if (datt) {
                    for (int i = i0; i < i1; i++) {
                        float *pr = pd + (size_t)(i - i0) * L;
                        if (qm && qm[i] == 0) {
                            memset(pr, 0, (size_t)kn * sizeof *pr);
                            continue;
                        }
                        ct__dropout_span(pr, a + (size_t)i * L, i + 1, drop_att.p, keep_att,
                                         drop_att.seed, drop_att.stream,
                                         draw0 + (uint64_t)i * (uint64_t)L);
                        memset(pr + i + 1, 0, (size_t)(kn - i - 1) * sizeof *pr);
                    }
                    pm = pd;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, kn, 1.0f, pm, L, vb,
                            C, 0.0f, ob + (size_t)i0 * C, C);
                /* + sum_j drop(P)_ij drop(R^V[tau_ij]) */
                for (int i = i0; i < i1; i++) {
                    if (qm && qm[i] == 0)
                        continue;
                    const float *w = pm + (size_t)(i - i0) * L;
                    float *oi = ob + (size_t)i * C;
                    ct_cpu_tisas__taus(tau, ts, i, T);
                    if (drv)
                        ct_cpu_tisas__factors(fv, (int64_t)(i + 1) * C,
                                              ct_cpu_tisas__row_bits(mask_rv, b, i, L, C),
                                              keep_rkv);
                    for (int j = 0; j <= i; j++) {
                        const float wj = w[j];
                        if (wj == 0.0f)
                            continue; /* dropped: adds nothing */
                        const float *rj = rv + (size_t)tau[j] * C + hc;
                        if (drv) {
                            const float *fj = fv + (size_t)j * C + hc;
                            for (int c = 0; c < HS; c++)
                                oi[c] += wj * (rj[c] * fj[c]);
                        } else {
                            for (int c = 0; c < HS; c++)
                                oi[c] += wj * rj[c];
                        }
                    }
                }
            }
        }
    }
}

CT__MULTIVERSION void ct_tisas_attention_backward_cpu(
    float *dq, float *dk, float *dv, float *drk, float *drv, float *scratch, const float *dout,
    const float *att, const float *q, const float *k, const float *v, const float *rk,
    const float *rv, const int64_t *tseq, const int32_t *qmask, int B, int L, int C, int NH, int T,
    ct_dropout_t drop_att, const uint32_t *mask_rk, const uint32_t *mask_rv, float p_rkv)
{
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const int datt = drop_att.p > 0.0f, dk_on = mask_rk != NULL, dv_on = mask_rv != NULL;
    const float keep_rkv = p_rkv > 0.0f ? 1.0f / (1.0f - p_rkv) : 1.0f;
    const float keep_att = datt ? 1.0f / (1.0f - drop_att.p) : 1.0f;
    const size_t TL = (size_t)(CT__TIS_TILE < L ? CT__TIS_TILE : L) * (size_t)L;
    float *dp = scratch;            /* (tile, L) d(dropped P), then dS */
    float *pd = dp + TL;            /* (tile, L) dropped P */
    float *mk = pd + TL;            /* (L) attention dropout factors of one row */
    float *fk = mk + L;             /* (L, C) */
    float *fv = fk + (size_t)L * C; /* (L, C) */
    int32_t *tau = (int32_t *)(fv + (size_t)L * C);

    for (int b = 0; b < B; b++) {
        const int32_t *qm = qmask ? qmask + (size_t)b * L : NULL;
        const int64_t *ts = tseq + (size_t)b * L;
        for (int h = 0; h < NH; h++) {
            const size_t hc = (size_t)h * HS, base = (size_t)b * L * C + hc;
            const float *qb = q + base, *kb = k + base, *vb = v + base, *dob = dout + base;
            float *dqb = dq + base, *dkb = dk + base, *dvb = dv + base;
            const float *a = att + ((size_t)b * NH + h) * L * L;
            const uint64_t draw0 = drop_att.offset + ((uint64_t)b * NH + (uint64_t)h) * L * L;

            for (int i0 = 0; i0 < L; i0 += CT__TIS_TILE) {
                const int i1 = i0 + CT__TIS_TILE < L ? i0 + CT__TIS_TILE : L;
                const int m = i1 - i0, kn = i1;
                if (ct_cpu_tisas__tile_skipped(qm, i0, i1))
                    continue;
                /* dPd = dO V^T, plus the interval values' share; d R^V */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kn, HS, 1.0f,
                            dob + (size_t)i0 * C, C, vb, C, 0.0f, dp, L);
                for (int i = i0; i < i1; i++) {
                    const float *P = a + (size_t)i * L;
                    float *g = dp + (size_t)(i - i0) * L;
                    float *pdr = pd + (size_t)(i - i0) * L;
                    if (qm && qm[i] == 0) {
                        memset(g, 0, (size_t)kn * sizeof *g);
                        if (datt)
                            memset(pdr, 0, (size_t)kn * sizeof *pdr);
                        continue;
                    }
                    const float *doi = dob + (size_t)i * C;
                    ct_cpu_tisas__taus(tau, ts, i, T);
                    if (dv_on)
                        ct_cpu_tisas__factors(fv, (int64_t)(i + 1) * C,
                                              ct_cpu_tisas__row_bits(mask_rv, b, i, L, C),
                                              keep_rkv);
                    if (datt) {
                        for (int j = 0; j <= i; j++)
                            mk[j] = 1.0f;
                        ct__dropout_span(mk, mk, i + 1, drop_att.p, keep_att, drop_att.seed,
                                         drop_att.stream, draw0 + (uint64_t)i * (uint64_t)L);
                    }
                    for (int j = 0; j <= i; j++) {
                        const float *rj = rv + (size_t)tau[j] * C + hc;
                        float *drj = drv + (size_t)tau[j] * C + hc;
                        const float w = datt ? P[j] * mk[j] : P[j];
                        if (dv_on) {
                            const float *fj = fv + (size_t)j * C + hc;
                            g[j] += ct_cpu_tisas__dot3_8(doi, rj, fj, HS);
                            if (w != 0.0f)
                                for (int c = 0; c < HS; c++)
                                    drj[c] += w * (doi[c] * fj[c]);
                        } else {
                            g[j] += ct__dot8_f32(doi, rj, HS);
                            if (w != 0.0f)
                                for (int c = 0; c < HS; c++)
                                    drj[c] += w * doi[c];
                        }
                    }
                    if (datt) {
                        for (int j = 0; j <= i; j++) {
                            pdr[j] = P[j] * mk[j];
                            g[j] *= mk[j];
                        }
                        memset(pdr + i + 1, 0, (size_t)(kn - i - 1) * sizeof *pdr);
                    }
                    /* softmax backward: dS = P (dP - sum_j P dP), zero right of the diagonal */
                    float cdot = ct__dot8_f32(P, g, i + 1);
                    for (int j = 0; j <= i; j++)
                        g[j] = P[j] * (g[j] - cdot);
                    memset(g + i + 1, 0, (size_t)(kn - i - 1) * sizeof *g);
                }
                const float *pm = datt ? pd : a + (size_t)i0 * L;
                /* dV += drop(P)^T dO; dQ += scale dS K; dK += scale dS^T Q */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, HS, m, 1.0f, pm, L,
                            dob + (size_t)i0 * C, C, 1.0f, dvb, C);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, kn, scale, dp, L, kb,
                            C, 1.0f, dqb + (size_t)i0 * C, C);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, HS, m, scale, dp, L,
                            qb + (size_t)i0 * C, C, 1.0f, dkb, C);
                /* the interval keys' share of dQ, and d R^K */
                for (int i = i0; i < i1; i++) {
                    if (qm && qm[i] == 0)
                        continue;
                    const float *g = dp + (size_t)(i - i0) * L;
                    const float *qi = qb + (size_t)i * C;
                    float *dqi = dqb + (size_t)i * C;
                    ct_cpu_tisas__taus(tau, ts, i, T);
                    if (dk_on)
                        ct_cpu_tisas__factors(fk, (int64_t)(i + 1) * C,
                                              ct_cpu_tisas__row_bits(mask_rk, b, i, L, C),
                                              keep_rkv);
                    for (int j = 0; j <= i; j++) {
                        const float s = scale * g[j];
                        if (s == 0.0f)
                            continue;
                        const float *rj = rk + (size_t)tau[j] * C + hc;
                        float *drj = drk + (size_t)tau[j] * C + hc;
                        if (dk_on) {
                            const float *fj = fk + (size_t)j * C + hc;
                            for (int c = 0; c < HS; c++) {
                                dqi[c] += s * (rj[c] * fj[c]);
                                drj[c] += s * (qi[c] * fj[c]);
                            }
                        } else {
                            for (int c = 0; c < HS; c++) {
                                dqi[c] += s * rj[c];
                                drj[c] += s * qi[c];
                            }
                        }
                    }
                }
            }
        }
    }
}
