/*
 * loss.c - what sits after the final LayerNorm in training: the tied-embedding scores of the
 * positive and negative items, SASRec's BCE loss with its gradient, and the l2_emb regulariser.
 * The model's choice of which ids to score and which count to divide by belongs to the caller.
 */
#include <math.h>

#include "ct_kernels.h"

void ct_score_forward_cpu(float *logits, const float *feats, const float *wte, const int32_t *ids,
                          int N, int C)
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

void ct_score_backward_cpu(float *dfeats, float *dwte, const float *dlogits, const float *feats,
                           const float *wte, const int32_t *ids, int N, int C)
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
static inline double ct__softplus(double x)
{
    return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x)));
}

/* 1 / (1 + e^-x), evaluated on the side where the exponential cannot overflow. */
static inline double ct__sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void ct_bce_loss_cpu(float *loss, float *dpos, float *dneg, const float *pos_logits,
                     const float *neg_logits, const int32_t *pos, int N, float count)
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
        sum += ct__softplus(-xp) + ct__softplus(xn);
        dpos[r] = (float)(-ct__sigmoid(-xp) * inv);
        dneg[r] = (float)(ct__sigmoid(xn) * inv);
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

void ct_l2_penalty_cpu(float *penalty, float *dw, const float *w, int64_t n, float lambda,
                       ct_l2_mode_t mode)
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
