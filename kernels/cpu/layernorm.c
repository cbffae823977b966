/*
 * layernorm.c - LayerNorm over the last dimension, forward and backward (llm.c's formulation):
 * mean and 1/std are saved by the forward so the backward needs one pass per row. The row sums
 * (mean, variance, the backward's two means) run in double, left to right over the C channels:
 * fixed order, so every run gives the same bits, and a row whose mean is large next to its
 * spread keeps its precision (float sums lost ~1e-6 there). Per-element work is float.
 */
#include <math.h>

#include "ct_kernels.h"

void ct_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float *o = out + (size_t)r * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++)
            sum += x[c];
        float m = (float)(sum / C);
        /* Two passes: the variance of (x - m), not E[x^2] - m^2, which cancels badly when the
         * mean is large next to the spread. Biased (divide by C), as PyTorch. */
        double var = 0.0;
        for (int c = 0; c < C; c++) {
            double dx = (double)x[c] - m;
            var += dx * dx;
        }
        float s = (float)(1.0 / sqrt(var / C + eps));
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

void ct_layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        const float *d = dout + (size_t)r * C;
        float *dx = dinp + (size_t)r * C;
        float m = mean[r], s = rstd[r];
        /* With xhat = (x - m) s and g = dout * weight (the gradient w.r.t. xhat):
         *   dx = s * (g - mean(g) - xhat * mean(g * xhat)). */
        double gsum = 0.0, gxsum = 0.0;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = d[c] * weight[c];
            gsum += g;
            gxsum += (double)g * xhat;
        }
        float gmean = (float)(gsum / C), gxmean = (float)(gxsum / C);
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = d[c] * weight[c];
            dbias[c] += d[c];
            dweight[c] += d[c] * xhat;
            dx[c] += (g - gmean - xhat * gxmean) * s;
        }
    }
}
