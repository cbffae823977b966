/*
 * layernorm.c - LayerNorm over the last dimension, forward and backward (llm.c's formulation):
 * mean and 1/std are saved by the forward so the backward needs one pass per row.
 *
 * The row sums (mean, variance, the backward's two means) run in double over eight partial
 * accumulators in a fixed pattern (ct_kernels_cpu.h): the same bits on every run, a row whose
 * mean is large next to its spread keeps its precision (float sums lost ~1e-6 there), and the
 * partials vectorize instead of waiting on one dependent add per channel. Per-element work is
 * float.
 */
#include <math.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

CT__MULTIVERSION void ct_layernorm_forward_cpu(float *out, float *mean, float *rstd,
                                               const float *inp, const float *weight,
                                               const float *bias, int N, int C, float eps)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float *o = out + (size_t)r * C;
        float m = (float)(ct__sum8_f64(x, C) / C);
        /* Two passes: the variance of (x - m), not E[x^2] - m^2, which cancels badly when the
         * mean is large next to the spread. Biased (divide by C), as PyTorch. */
        double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= C; c += 8)
            for (int k = 0; k < 8; k++) {
                double d = (double)x[c + k] - m;
                a[k] += d * d;
            }
        for (int k = 0; c < C; c++, k++) {
            double d = (double)x[c] - m;
            a[k] += d * d;
        }
        float s = (float)(1.0 / sqrt(ct__combine8_f64(a) / C + eps));
        for (c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

CT__MULTIVERSION void ct_layernorm_backward_cpu(float *dinp, float *dweight, float *dbias,
                                                const float *dout, const float *inp,
                                                const float *weight, const float *mean,
                                                const float *rstd, int N, int C)
{
    /* The gradients never alias the inputs or each other; saying so lets the last loop
     * vectorize without run-time overlap checks. */
    float *restrict dw = dweight, *restrict db = dbias;
    for (int r = 0; r < N; r++) {
        const float *restrict x = inp + (size_t)r * C;
        const float *restrict d = dout + (size_t)r * C;
        float *restrict dx = dinp + (size_t)r * C;
        float m = mean[r], s = rstd[r];
        /* With xhat = (x - m) s and g = dout * weight (the gradient w.r.t. xhat):
         *   dx = s * (g - mean(g) - xhat * mean(g * xhat)). */
        double ga[8] = {0, 0, 0, 0, 0, 0, 0, 0}, gx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= C; c += 8)
            for (int k = 0; k < 8; k++) {
                float xhat = (x[c + k] - m) * s;
                float g = d[c + k] * weight[c + k];
                ga[k] += g;
                gx[k] += (double)g * xhat;
            }
        for (int k = 0; c < C; c++, k++) {
            float xhat = (x[c] - m) * s;
            float g = d[c] * weight[c];
            ga[k] += g;
            gx[k] += (double)g * xhat;
        }
        float gmean = (float)(ct__combine8_f64(ga) / C);
        float gxmean = (float)(ct__combine8_f64(gx) / C);
        for (c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = d[c] * weight[c];
            db[c] += d[c];
            dw[c] += d[c] * xhat;
            dx[c] += (g - gmean - xhat * gxmean) * s;
        }
    }
}
