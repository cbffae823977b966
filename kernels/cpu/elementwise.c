/*
 * elementwise.c - the small element-wise ops: ReLU, residual add, scaling. Plain loops the
 * compiler can vectorize; nothing here reduces, so the order of evaluation cannot change bits.
 */
#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

CT__MULTIVERSION void ct_relu_forward_cpu(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

CT__MULTIVERSION void ct_relu_backward_cpu(float *dinp, const float *dout, const float *out,
                                           int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        /* Load dout unconditionally: a select the compiler can vectorize, not a branch that
         * mispredicts on every other element. */
        float g = dout[i];
        dinp[i] += out[i] > 0.0f ? g : 0.0f;
    }
}

CT__MULTIVERSION void ct_residual_forward_cpu(float *out, const float *inp1, const float *inp2,
                                              int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = inp1[i] + inp2[i];
}

CT__MULTIVERSION void ct_residual_backward_cpu(float *dinp1, float *dinp2, const float *dout,
                                               int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

CT__MULTIVERSION void ct_scale_cpu(float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}
