/*
 * adam.c - the optimizer step over one flat buffer and the gradient-norm helpers for clipping.
 * It follows torch.optim.Adam's single-tensor arithmetic (lerp for the first moment, the bias
 * corrections folded into a step size and a divisor) so a trajectory can be compared with
 * PyTorch's to float rounding. Weight decay is not here: the references have none, and their
 * l2_emb term is a loss term (ct_l2_penalty_cpu).
 */
#include <math.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

CT__MULTIVERSION void ct_adam_update_cpu(float *params, float *m, float *v, const float *grads,
                                         int64_t n, double lr, double beta1, double beta2,
                                         double eps, float grad_scale, int64_t step)
{
    double bc1 = 1.0 - pow(beta1, (double)step);
    double bc2 = 1.0 - pow(beta2, (double)step);
    const float step_size = (float)(lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float w1 = (float)(1.0 - beta1), b2 = (float)beta2, w2 = (float)(1.0 - beta2);
    const float epsf = (float)eps;
    for (int64_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = m[i] + w1 * (g - m[i]);
        float vi = v[i] * b2 + w2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + epsf;
        params[i] += -step_size * (mi / denom);
    }
}

CT__MULTIVERSION void ct_sumsq_cpu(float *out, const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    *out = (float)s;
}

float ct_clip_coef(float sumsq, float max_norm)
{
    if (!(max_norm > 0.0f))
        return 1.0f;
    double coef = (double)max_norm / (sqrt((double)sumsq) + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}
