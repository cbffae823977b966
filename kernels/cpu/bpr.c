/*
 * bpr.c - the GPT-2 recommender's own ops (--model gpt2rec): BPR over a micro-batch of
 * (user, positive, negative) interactions with the reference's L2 term in the gradients, and the
 * mean of an LM's hidden states over each item's tokens (and its gradient). Plain loops in row
 * order; the float formulas are those the recommender computed before these ops existed, so the
 * CPU backend's results did not change bit for bit when the model moved onto the op table.
 *
 * Not here: scattering the per-row gradients into the tables (lm_embed_backward does, in row
 * order), the text projection (linear.c), the model (worker/trainer/models/gpt2rec/).
 */
#include <math.h>
#include <stddef.h>

#include "ct_kernels.h"

static float ct_cpu_bpr__dot(const float *a, const float *b, int n)
{
    float acc = 0.0f;
    for (int k = 0; k < n; k++)
        acc += a[k] * b[k];
    return acc;
}

void ct_bpr_loss_cpu(float *loss, float *du, float *dvpn, const float *user, const float *item,
                     const float *proj, const int32_t *idx, int B, int D, float count, float lambda)
{
    const float inv = 1.0f / count, l2 = 2.0f * lambda * inv;
    double total = 0.0;
    for (int r = 0; r < B; r++) {
        const int32_t *x5 = idx + (size_t)r * CT_BPR_IDX;
        const float *eu = user + (size_t)x5[0] * D;
        const float *ip = item + (size_t)x5[1] * D, *in = item + (size_t)x5[2] * D;
        const float *pp = proj ? proj + (size_t)x5[3] * D : NULL;
        const float *pn = proj ? proj + (size_t)x5[4] * D : NULL;
        float *gu = du + (size_t)r * D;
        float *gp = dvpn + (size_t)2 * r * D, *gn = gp + D;
        /* the item vectors v = item + proj go through gp and gn before their gradients do */
        for (int k = 0; k < D; k++) {
            gp[k] = pp ? ip[k] + pp[k] : ip[k];
            gn[k] = pn ? in[k] + pn[k] : in[k];
        }
        const float x = ct_cpu_bpr__dot(eu, gp, D) - ct_cpu_bpr__dot(eu, gn, D);
        /* -log sigmoid(x) = softplus(-x), computed stably */
        total += x > 0 ? log1pf(expf(-x)) : -x + log1pf(expf(x));
        const float g = -inv / (1.0f + expf(x)); /* d/dx softplus(-x) = -sigmoid(-x) */
        for (int k = 0; k < D; k++) {
            const float vp = gp[k], vn = gn[k];
            gu[k] = g * (vp - vn) + l2 * eu[k];
            gp[k] = g * eu[k] + l2 * vp;
            gn[k] = -g * eu[k] + l2 * vn;
        }
    }
    *loss = (float)(total / count);
}

void ct_mean_pool_forward_cpu(float *out, const float *h, const int32_t *len, int N, int L, int C)
{
    for (int k = 0; k < N; k++) {
        float *o = out + (size_t)k * C;
        for (int c = 0; c < C; c++)
            o[c] = 0.0f;
        for (int j = 0; j < len[k]; j++) {
            const float *x = h + ((size_t)k * L + j) * C;
            for (int c = 0; c < C; c++)
                o[c] += x[c];
        }
        for (int c = 0; c < C; c++)
            o[c] /= (float)len[k];
    }
}

void ct_mean_pool_backward_cpu(float *dh, const float *dout, const int32_t *len, int N, int L,
                               int C)
{
    for (int k = 0; k < N; k++)
        for (int j = 0; j < L; j++) {
            float *d = dh + ((size_t)k * L + j) * C;
            for (int c = 0; c < C; c++)
                d[c] = j < len[k] ? dout[(size_t)k * C + c] / (float)len[k] : 0.0f;
        }
}
