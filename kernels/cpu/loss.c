/*
 * loss.c - what sits after the final LayerNorm in training: the tied-embedding scores of the
 * positive and negative items, SASRec's BCE loss with its gradient, the two softmax
 * cross-entropy losses (over the whole catalogue - or every token of a language model's
 * vocabulary through its LM head - and over a row's sampled negatives) with their gradients,
 * and the l2_emb regulariser. The model's choice of which ids to score and
 * which count to divide by belongs to the caller.
 *
 * The cross-entropy losses compute loss and gradient in one pass: their logits ((rows, items)
 * for the full softmax) are far too large to keep between a forward and a backward call, and
 * recomputing them would cost a third more than the fused pass. Only positions with a target
 * are scored; the full softmax takes them in chunks of CT_CE_CHUNK rows, three sgemms a chunk.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

CT__MULTIVERSION void ct_score_forward_cpu(float *logits, const float *feats, const float *wte,
                                           const int32_t *ids, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *f = feats + (size_t)r * C;
        const float *e = wte + (size_t)ids[r] * C;
        float s = 0.0f;
        for (int c = 0; c < C; c++)
            s += f[c] * e[c];
        logits[r] = s;
    }
}

CT__MULTIVERSION void ct_score_backward_cpu(float *dfeats, float *dwte, const float *dlogits,
                                            const float *feats, const float *wte,
                                            const int32_t *ids, int N, int C)
{
    for (int r = 0; r < N; r++) {
        float d = dlogits[r];
        const float *f = feats + (size_t)r * C;
        const float *e = wte + (size_t)ids[r] * C;
        float *df = dfeats + (size_t)r * C;
        for (int c = 0; c < C; c++)
            df[c] += d * e[c];
        if (ids[r] != 0) {
            float *de = dwte + (size_t)ids[r] * C;
            for (int c = 0; c < C; c++)
                de[c] += d * f[c];
        }
    }
}

/* log(1 + e^x) without overflow for large x or loss of precision for very negative x. */
static inline double ct_cpu_loss__softplus(double x)
{
    return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x)));
}

/* 1 / (1 + e^-x), evaluated on the side where the exponential cannot overflow. */
static inline double ct_cpu_loss__sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

CT__MULTIVERSION void ct_bce_loss_cpu(float *loss, float *dpos, float *dneg,
                                      const float *pos_logits, const float *neg_logits,
                                      const int32_t *pos, int N, float count)
{
    double sum = 0.0;
    double inv = count > 0.0f ? 1.0 / (double)count : 0.0;
    for (int r = 0; r < N; r++) {
        if (pos[r] == 0 || count <= 0.0f) {
            dpos[r] = 0.0f;
            dneg[r] = 0.0f;
            continue;
        }
        double xp = pos_logits[r], xn = neg_logits[r];
        /* -log sigmoid(xp) = softplus(-xp);  -log(1 - sigmoid(xn)) = softplus(xn). */
        sum += ct_cpu_loss__softplus(-xp) + ct_cpu_loss__softplus(xn);
        dpos[r] = (float)(-ct_cpu_loss__sigmoid(-xp) * inv);
        dneg[r] = (float)(ct_cpu_loss__sigmoid(xn) * inv);
    }
    *loss = (float)(sum * inv);
}

int64_t ct_count_nonzero_cpu(const int32_t *ids, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += ids[i] != 0;
    return k;
}

CT__MULTIVERSION void ct_l2_penalty_cpu(float *penalty, float *dw, const float *w, int64_t n,
                                        float lambda, ct_l2_mode_t mode)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)w[i] * w[i];
    double value, g; /* penalty value, and d penalty / d w_i = g * w_i */
    switch (mode) {
    case CT_L2_NORM: {
        double norm = sqrt(ss);
        value = lambda * norm;
        /* The norm is not differentiable at w = 0; autograd's subgradient there is 0. */
        g = norm > 0.0 ? lambda / norm : 0.0;
        break;
    }
    case CT_L2_HALF_SQUARED:
        value = 0.5 * lambda * ss;
        g = lambda;
        break;
    case CT_L2_SQUARED:
    default:
        value = lambda * ss;
        g = 2.0 * lambda;
        break;
    }
    *penalty = (float)value;
    if (g != 0.0) {
        float gf = (float)g;
        for (int64_t i = 0; i < n; i++)
            dw[i] += gf * w[i];
    }
}

/* ---- softmax cross-entropy losses ------------------------------------------------------------ */

/* Row r of logits (n entries, class tgt) -> loss contribution lse - logits[tgt] (returned) and
 * the gradient (softmax - onehot) * inv written over the logits. Separate passes (max, exp,
 * sum, scale) so that all but the exponentials vectorize; the sum is in double over eight
 * partial sums (ct_kernels_cpu.h's fixed pattern). */
static inline double ct_cpu_loss__softmax_xent_row(float *lg, int n, int tgt, double inv)
{
    const float mx = ct__max_f32(lg, n);
    const double zt = (double)lg[tgt] - (double)mx;
    for (int i = 0; i < n; i++)
        lg[i] = ct__exp_nonpos(lg[i] - mx);
    const double s = ct__sum8_f64(lg, n);
    const float scale = (float)(inv / s);
    for (int i = 0; i < n; i++)
        lg[i] *= scale;
    lg[tgt] -= (float)inv;
    /* -log softmax(target) = logsumexp - logit_t = log(s) - (logit_t - mx) */
    return log(s) - zt;
}

/* Softmax cross-entropy over classes lo..V-1 (rows of wte); row r has a target iff
 * pos[r] >= lo. dfeats or dwte NULL: that gradient is not computed. */
static void ct_cpu_loss__ce(float *loss, float *dfeats, float *dwte, float *scratch,
                            const float *feats, const float *wte, const int32_t *pos, int N, int C,
                            int V, int lo, float count)
{
    const int NI = V - lo;
    const float *E = wte + (size_t)lo * C;
    const double inv = count > 0.0f ? 1.0 / (double)count : 0.0;
    float *fc = scratch;                                /* (CH, C) gathered feature rows */
    float *lg = fc + (size_t)CT_CE_CHUNK * C;           /* (CH, NI) logits, then their gradient */
    float *dfc = lg + (size_t)CT_CE_CHUNK * NI;         /* (CH, C) */
    int *rows = (int *)(dfc + (size_t)CT_CE_CHUNK * C); /* (CH) the rows gathered */
    double sum = 0.0;
    int r = 0;
    while (r < N && count > 0.0f) {
        int m = 0;
        for (; r < N && m < CT_CE_CHUNK; r++) {
            if (pos[r] < lo)
                continue;
            rows[m] = r;
            memcpy(fc + (size_t)m * C, feats + (size_t)r * C, (size_t)C * sizeof *fc);
            m++;
        }
        if (m == 0)
            break;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, NI, C, 1.0f, fc, C, E, C, 0.0f, lg,
                    NI);
        for (int k = 0; k < m; k++)
            sum += ct_cpu_loss__softmax_xent_row(lg + (size_t)k * NI, NI, pos[rows[k]] - lo, inv);
        /* d feats = d logits E;  d E += d logits^T feats */
        if (dwte)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, NI, C, m, 1.0f, lg, NI, fc, C,
                        1.0f, dwte + (size_t)lo * C, C);
        if (!dfeats)
            continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, C, NI, 1.0f, lg, NI, E, C, 0.0f,
                    dfc, C);
        for (int k = 0; k < m; k++) {
            float *d = dfeats + (size_t)rows[k] * C;
            const float *g = dfc + (size_t)k * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c];
        }
    }
    *loss = (float)(sum * inv);
}

void ct_ce_loss_cpu(float *loss, float *dfeats, float *dwte, float *scratch, const float *feats,
                    const float *wte, const int32_t *pos, int N, int C, int V, float count)
{
    ct_cpu_loss__ce(loss, dfeats, dwte, scratch, feats, wte, pos, N, C, V, 1, count);
}

void ct_lm_ce_loss_cpu(float *loss, float *dfeats, float *dwte, float *scratch, const float *feats,
                       const float *wte, const int32_t *tgt, int N, int C, int V, float count)
{
    ct_cpu_loss__ce(loss, dfeats, dwte, scratch, feats, wte, tgt, N, C, V, 0, count);
}

CT__MULTIVERSION void ct_sampled_ce_loss_cpu(float *loss, float *dfeats, float *dwte,
                                             float *scratch, const float *feats, const float *wte,
                                             const int32_t *pos, const int32_t *neg, int B, int L,
                                             int C, int M, float count)
{
    const int K = M + 1; /* class 0 = the positive, 1..M the row's negatives */
    const double inv = count > 0.0f ? 1.0 / (double)count : 0.0;
    float *en = scratch;                    /* (M, C) the row's negative embeddings */
    float *fr = en + (size_t)M * C;         /* (L, C) the row's feature rows with a target */
    float *lg = fr + (size_t)L * C;         /* (L, K) logits, then their gradient */
    float *dfr = lg + (size_t)L * K;        /* (L, C) */
    float *den = dfr + (size_t)L * C;       /* (M, C) */
    int *ts = (int *)(den + (size_t)M * C); /* (L) the positions gathered */
    double sum = 0.0;
    for (int b = 0; b < B && count > 0.0f; b++) {
        const int32_t *pb = pos + (size_t)b * L;
        const int32_t *nb = neg + (size_t)b * M;
        int m = 0;
        for (int t = 0; t < L; t++) {
            if (pb[t] == 0)
                continue;
            ts[m] = t;
            memcpy(fr + (size_t)m * C, feats + ((size_t)b * L + t) * C, (size_t)C * sizeof *fr);
            m++;
        }
        if (m == 0)
            continue;
        for (int k = 0; k < M; k++)
            memcpy(en + (size_t)k * C, wte + (size_t)nb[k] * C, (size_t)C * sizeof *en);
        /* logits: column 0 the positive, columns 1..M the negatives */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, M, C, 1.0f, fr, C, en, C, 0.0f,
                    lg + 1, K);
        for (int k = 0; k < m; k++) {
            const float *e = wte + (size_t)pb[ts[k]] * C, *f = fr + (size_t)k * C;
            float s = 0.0f;
            for (int c = 0; c < C; c++)
                s += f[c] * e[c];
            lg[(size_t)k * K] = s;
            sum += ct_cpu_loss__softmax_xent_row(lg + (size_t)k * K, K, 0, inv);
        }
        /* d feats = d lneg En + d lpos E[pos];  d En = d lneg^T feats;  d E[pos] += d lpos f */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, C, M, 1.0f, lg + 1, K, en, C,
                    0.0f, dfr, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, C, m, 1.0f, lg + 1, K, fr, C, 0.0f,
                    den, C);
        for (int k = 0; k < m; k++) {
            const int32_t id = pb[ts[k]];
            const float g0 = lg[(size_t)k * K];
            const float *e = wte + (size_t)id * C, *f = fr + (size_t)k * C;
            float *d = dfeats + ((size_t)b * L + ts[k]) * C, *de = dwte + (size_t)id * C;
            const float *g = dfr + (size_t)k * C;
            for (int c = 0; c < C; c++) {
                d[c] += g[c] + g0 * e[c];
                de[c] += g0 * f[c];
            }
        }
        for (int k = 0; k < M; k++) {
            if (nb[k] == 0)
                continue; /* padding_idx: no gradient */
            float *de = dwte + (size_t)nb[k] * C;
            const float *g = den + (size_t)k * C;
            for (int c = 0; c < C; c++)
                de[c] += g[c];
        }
    }
    *loss = (float)(sum * inv);
}
