/*
 * mhc.c - the ops of mHC residual streams (docs/models.md §7; semantics in ct_kernels.h): the
 * Sinkhorn-Knopp projection and its backward, the per-token mappings H^pre, H^post, H^res
 * (RMSNorm of the flattened streams, one sgemm for all three projections, the gates and biases,
 * sigmoid / 2 sigmoid / Sinkhorn), the stream mixing on either side of a sub-layer, and the
 * expansion of the embedding into n streams and their average at the end.
 *
 * Sinkhorn's backward goes through the iterations with the iterates recomputed per matrix from
 * the logits (a matrix is n x n = 16 floats at n = 4, so 20 iterations of rows-then-columns
 * are 640 floats of scratch) instead of storing them for every token: recomputation is cheaper
 * than the memory traffic of storing 40 iterates per token.
 *
 * The mixing ops are small loops over n streams of C channels per token; every sum runs in a
 * fixed order (streams in order, tokens in order), so results are the same on every run.
 *
 * Not here: where the mHC layers sit in a block and which sub-layer they wrap (the model), the
 * initialisation of the biases (ctrain_model.c).
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

/* ---- Sinkhorn-Knopp -------------------------------------------------------------------------- */

/* One matrix: M0 = exp(Z - max Z), then iters x (rows to sum 1, then columns to sum 1). A row
 * or column is scaled by the reciprocal of its sum (one division per row instead of n). With
 * it != NULL the iterates are kept for the backward: it[2t] = R_t (rows normalised),
 * it[2t+1] = M_t (columns normalised), t = 0..iters-1, n*n floats each, and M0 at it[2*iters];
 * ri[t*n + i] and ci[t*n + j] the reciprocal row and column sums used. */
static void ct_cpu_mhc__sinkhorn1(float *out, const float *z, int n, int iters, float *it,
                                  float *ri, float *ci)
{
    const int nn = n * n;
    float mx = z[0];
    for (int x = 1; x < nn; x++)
        mx = z[x] > mx ? z[x] : mx;
    float m[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
    for (int x = 0; x < nn; x++)
        m[x] = ct__exp_nonpos(z[x] - mx);
    if (it)
        memcpy(it + (size_t)2 * iters * nn, m, (size_t)nn * sizeof *m);
    for (int t = 0; t < iters; t++) {
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int j = 0; j < n; j++)
                s += m[i * n + j];
            const float r = 1.0f / s;
            for (int j = 0; j < n; j++)
                m[i * n + j] *= r;
            if (ri)
                ri[t * n + i] = r;
        }
        if (it)
            memcpy(it + (size_t)(2 * t) * nn, m, (size_t)nn * sizeof *m);
        float cs[CT_MHC_MAX_STREAMS];
        for (int j = 0; j < n; j++)
            cs[j] = m[j];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < n; j++)
                cs[j] += m[i * n + j];
        for (int j = 0; j < n; j++)
            cs[j] = 1.0f / cs[j];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                m[i * n + j] *= cs[j];
        if (ci)
            memcpy(ci + (size_t)t * n, cs, (size_t)n * sizeof *cs);
        if (it)
            memcpy(it + (size_t)(2 * t + 1) * nn, m, (size_t)nn * sizeof *m);
    }
    memcpy(out, m, (size_t)nn * sizeof *m);
}

/* dz += d Sinkhorn(z) given d out, through the kept iterates. */
static void ct_cpu_mhc__sinkhorn1_bwd(float *dz, const float *dout, const float *z, int n,
                                      int iters, float *scratch)
{
    const int nn = n * n;
    float *it = scratch, *ri = it + (size_t)(2 * iters + 1) * nn, *ci = ri + (size_t)iters * n;
    float out[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS], g[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
    ct_cpu_mhc__sinkhorn1(out, z, n, iters, it, ri, ci);
    memcpy(g, dout, (size_t)nn * sizeof *g);
    for (int t = iters - 1; t >= 0; t--) {
        /* columns: y = x * r per column (r = 1 / sum)  ->  dx = (dy - sum_i dy y) * r */
        const float *y = it + (size_t)(2 * t + 1) * nn;
        float d[CT_MHC_MAX_STREAMS];
        for (int j = 0; j < n; j++)
            d[j] = g[j] * y[j];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < n; j++)
                d[j] += g[i * n + j] * y[i * n + j];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                g[i * n + j] = (g[i * n + j] - d[j]) * ci[t * n + j];
        /* rows, the same along each row */
        y = it + (size_t)(2 * t) * nn;
        for (int i = 0; i < n; i++) {
            float e = 0.0f;
            for (int j = 0; j < n; j++)
                e += g[i * n + j] * y[i * n + j];
            const float r = ri[t * n + i];
            for (int j = 0; j < n; j++)
                g[i * n + j] = (g[i * n + j] - e) * r;
        }
    }
    /* M0 = exp(z - max z): the shift cancels in the first normalisation, so d z = d M0 * M0 */
    const float *m0 = it + (size_t)2 * iters * nn;
    for (int x = 0; x < nn; x++)
        dz[x] += g[x] * m0[x];
}

void ct_sinkhorn_forward_cpu(float *out, const float *logits, int M, int n, int iters)
{
    const size_t nn = (size_t)n * n;
    for (int r = 0; r < M; r++)
        ct_cpu_mhc__sinkhorn1(out + r * nn, logits + r * nn, n, iters, NULL, NULL, NULL);
}

CT__MULTIVERSION void ct_sinkhorn_backward_cpu(float *dlogits, float *scratch, const float *dout,
                                               const float *logits, int M, int n, int iters)
{
    const size_t nn = (size_t)n * n;
    for (int r = 0; r < M; r++)
        ct_cpu_mhc__sinkhorn1_bwd(dlogits + r * nn, dout + r * nn, logits + r * nn, n, iters,
                                  scratch);
}

/* ---- the per-token mappings ---------------------------------------------------------------- */

static inline float ct_cpu_mhc__sigmoid(float x)
{
    return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

CT__MULTIVERSION void ct_mhc_coeffs_forward_cpu(float *hpre, float *hpost, float *hres, float *proj,
                                                float *rstd, const float *X, const float *phi,
                                                const float *alpha, const float *bias, int N, int n,
                                                int C, int iters, float eps)
{
    const int D = n * C, K = CT_MHC_COEFFS(n), nn = n * n;
    /* proj = X phi, then each row scaled by its RMS factor (the same as normalising first) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, K, D, 1.0f, X, D, phi, K, 0.0f, proj,
                K);
    for (int r = 0; r < N; r++) {
        const float *x = X + (size_t)r * D;
        double ss = 0.0;
        for (int c = 0; c < D; c++)
            ss += (double)x[c] * x[c];
        const float rs = (float)(1.0 / sqrt(ss / D + (double)eps));
        rstd[r] = rs;
        float *pr = proj + (size_t)r * K;
        for (int c = 0; c < K; c++)
            pr[c] *= rs;
        float z[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
        for (int s = 0; s < n; s++) {
            hpre[(size_t)r * n + s] = ct_cpu_mhc__sigmoid(alpha[0] * pr[s] + bias[s]);
            hpost[(size_t)r * n + s] =
                2.0f * ct_cpu_mhc__sigmoid(alpha[1] * pr[n + s] + bias[n + s]);
        }
        for (int x2 = 0; x2 < nn; x2++)
            z[x2] = alpha[2] * pr[2 * n + x2] + bias[2 * n + x2];
        ct_cpu_mhc__sinkhorn1(hres + (size_t)r * nn, z, n, iters, NULL, NULL, NULL);
    }
}

CT__MULTIVERSION void
ct_mhc_coeffs_backward_cpu(float *dX, float *dphi, float *dalpha, float *dbias, float *scratch,
                           const float *dhpre, const float *dhpost, const float *dhres,
                           const float *X, const float *phi, const float *alpha, const float *bias,
                           const float *proj, const float *rstd, int N, int n, int C, int iters)
{
    const int D = n * C, K = CT_MHC_COEFFS(n), nn = n * n;
    float *dp = scratch;            /* (N, K): d proj, then times rstd */
    float *sk = dp + (size_t)N * K; /* Sinkhorn iterates of one token */
    double da[3] = {0.0, 0.0, 0.0};
    for (int r = 0; r < N; r++) {
        const float *pr = proj + (size_t)r * K;
        float *g = dp + (size_t)r * K;
        float z[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS],
            dz[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
        for (int s = 0; s < n; s++) {
            const float sp = ct_cpu_mhc__sigmoid(alpha[0] * pr[s] + bias[s]);
            const float so = ct_cpu_mhc__sigmoid(alpha[1] * pr[n + s] + bias[n + s]);
            g[s] = dhpre[(size_t)r * n + s] * sp * (1.0f - sp);
            g[n + s] = dhpost[(size_t)r * n + s] * 2.0f * so * (1.0f - so);
        }
        for (int x = 0; x < nn; x++) {
            z[x] = alpha[2] * pr[2 * n + x] + bias[2 * n + x];
            dz[x] = 0.0f;
        }
        ct_cpu_mhc__sinkhorn1_bwd(dz, dhres + (size_t)r * nn, z, n, iters, sk);
        memcpy(g + 2 * n, dz, (size_t)nn * sizeof *dz);
        /* g holds d(pre-activation) now: bias and gate gradients, then d proj */
        for (int c = 0; c < K; c++)
            dbias[c] += g[c];
        for (int c = 0; c < K; c++) {
            const int grp = c < n ? 0 : c < 2 * n ? 1 : 2;
            da[grp] += (double)g[c] * pr[c];
            g[c] *= alpha[grp];
        }
        /* proj = rstd (X phi): the rstd path of d X, d X_k += -(dproj . proj) rstd^2 X_k / D */
        float dd = 0.0f;
        for (int c = 0; c < K; c++)
            dd += g[c] * pr[c];
        const float rs = rstd[r];
        const float coef = -dd * rs * rs / (float)D;
        const float *x = X + (size_t)r * D;
        float *dx = dX + (size_t)r * D;
        for (int c = 0; c < D; c++)
            dx[c] += coef * x[c];
        for (int c = 0; c < K; c++)
            g[c] *= rs;
    }
    for (int k = 0; k < 3; k++)
        dalpha[k] += (float)da[k];
    /* the (X phi) path: dX += (rstd dproj) phi^T; dphi += X^T (rstd dproj) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, D, K, 1.0f, dp, K, phi, K, 1.0f, dX, D);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, K, N, 1.0f, X, D, dp, K, 1.0f, dphi, K);
}

/* ---- stream mixing --------------------------------------------------------------------------- */

CT__MULTIVERSION void ct_mhc_pre_forward_cpu(float *u, const float *X, const float *hpre, int N,
                                             int n, int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = X + (size_t)r * n * C, *h = hpre + (size_t)r * n;
        float *o = u + (size_t)r * C;
        for (int c = 0; c < C; c++)
            o[c] = h[0] * x[c];
        for (int s = 1; s < n; s++)
            for (int c = 0; c < C; c++)
                o[c] += h[s] * x[(size_t)s * C + c];
    }
}

CT__MULTIVERSION void ct_mhc_pre_backward_cpu(float *dX, float *dhpre, const float *du,
                                              const float *X, const float *hpre, int N, int n,
                                              int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = X + (size_t)r * n * C, *h = hpre + (size_t)r * n;
        const float *g = du + (size_t)r * C;
        float *dx = dX + (size_t)r * n * C;
        for (int s = 0; s < n; s++) {
            float acc = 0.0f;
            for (int c = 0; c < C; c++) {
                dx[(size_t)s * C + c] += h[s] * g[c];
                acc += x[(size_t)s * C + c] * g[c];
            }
            dhpre[(size_t)r * n + s] += acc;
        }
    }
}

CT__MULTIVERSION void ct_mhc_post_forward_cpu(float *Y, const float *X, const float *f,
                                              const float *hres, const float *hpost, int N, int n,
                                              int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = X + (size_t)r * n * C, *hr = hres + (size_t)r * n * n;
        const float *hp = hpost + (size_t)r * n, *fr = f + (size_t)r * C;
        float *y = Y + (size_t)r * n * C;
        for (int s = 0; s < n; s++) {
            float *ys = y + (size_t)s * C;
            for (int c = 0; c < C; c++)
                ys[c] = hp[s] * fr[c];
            for (int t = 0; t < n; t++) {
                const float w = hr[s * n + t];
                const float *xt = x + (size_t)t * C;
                for (int c = 0; c < C; c++)
                    ys[c] += w * xt[c];
            }
        }
    }
}

CT__MULTIVERSION void ct_mhc_post_backward_cpu(float *dX, float *df, float *dhres, float *dhpost,
                                               const float *dY, const float *X, const float *f,
                                               const float *hres, const float *hpost, int N, int n,
                                               int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = X + (size_t)r * n * C, *hr = hres + (size_t)r * n * n;
        const float *hp = hpost + (size_t)r * n, *fr = f + (size_t)r * C;
        const float *gy = dY + (size_t)r * n * C;
        float *dx = dX + (size_t)r * n * C, *dfr = df + (size_t)r * C;
        float *dhr = dhres + (size_t)r * n * n, *dhp = dhpost + (size_t)r * n;
        for (int s = 0; s < n; s++) {
            const float *gs = gy + (size_t)s * C;
            float acc = 0.0f;
            for (int c = 0; c < C; c++) {
                dfr[c] += hp[s] * gs[c];
                acc += gs[c] * fr[c];
            }
            dhp[s] += acc;
            for (int t = 0; t < n; t++) {
                const float w = hr[s * n + t];
                const float *xt = x + (size_t)t * C;
                float *dxt = dx + (size_t)t * C;
                float a2 = 0.0f;
                for (int c = 0; c < C; c++) {
                    dxt[c] += w * gs[c];
                    a2 += gs[c] * xt[c];
                }
                dhr[s * n + t] += a2;
            }
        }
    }
}

CT__MULTIVERSION void ct_mhc_expand_forward_cpu(float *X, const float *x, int N, int n, int C)
{
    for (int r = 0; r < N; r++)
        for (int s = 0; s < n; s++)
            memcpy(X + ((size_t)r * n + s) * C, x + (size_t)r * C, (size_t)C * sizeof *X);
}

CT__MULTIVERSION void ct_mhc_expand_backward_cpu(float *dx, const float *dX, int N, int n, int C)
{
    for (int r = 0; r < N; r++) {
        float *d = dx + (size_t)r * C;
        for (int s = 0; s < n; s++) {
            const float *g = dX + ((size_t)r * n + s) * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c];
        }
    }
}

CT__MULTIVERSION void ct_mhc_collapse_forward_cpu(float *x, const float *X, int N, int n, int C)
{
    const float inv = 1.0f / (float)n;
    for (int r = 0; r < N; r++) {
        float *o = x + (size_t)r * C;
        const float *g = X + (size_t)r * n * C;
        for (int c = 0; c < C; c++)
            o[c] = g[c];
        for (int s = 1; s < n; s++)
            for (int c = 0; c < C; c++)
                o[c] += g[(size_t)s * C + c];
        for (int c = 0; c < C; c++)
            o[c] *= inv;
    }
}

CT__MULTIVERSION void ct_mhc_collapse_backward_cpu(float *dX, const float *dx, int N, int n, int C)
{
    const float inv = 1.0f / (float)n;
    for (int r = 0; r < N; r++) {
        const float *g = dx + (size_t)r * C;
        for (int s = 0; s < n; s++) {
            float *d = dX + ((size_t)r * n + s) * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c] * inv;
        }
    }
}
