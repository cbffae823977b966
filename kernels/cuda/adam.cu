/*
 * adam.cu - the optimizer step over one flat buffer and the sum of squares for gradient
 * clipping, the twins of kernels/cpu/adam.c.
 *
 * The Adam scalars (bias-corrected step size, sqrt of the second correction, the betas and eps
 * as floats) are formed on the host with the CPU's double expressions and rounded to float
 * once; the kernel then does the CPU's float arithmetic one operation at a time with
 * round-to-nearest intrinsics (IEEE division and square root, no fused multiply-add), so
 * parameters and both moments come out bit-identical to ct_adam_update_cpu.
 */
#include <math.h>

#include "ct_cuda_common.h"

__global__ void ct_cuda_adam__adam_kernel(float *params, float *m, float *v, const float *grads,
                                          int64_t n, float step_size, float bc2_sqrt, float w1,
                                          float b2, float w2, float epsf, float grad_scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float g = __fmul_rn(grads[i], grad_scale);
        const float m0 = m[i], v0 = v[i];
        const float mi = __fadd_rn(m0, __fmul_rn(w1, __fsub_rn(g, m0)));
        const float vi = __fadd_rn(__fmul_rn(v0, b2), __fmul_rn(w2, __fmul_rn(g, g)));
        m[i] = mi;
        v[i] = vi;
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), epsf);
        params[i] = __fadd_rn(params[i], __fmul_rn(-step_size, __fdiv_rn(mi, denom)));
    }
}

extern "C" int ct_adam_update_cuda(float *params, float *m, float *v, const float *grads, int64_t n,
                                   double lr, double beta1, double beta2, double eps,
                                   float grad_scale, int64_t step, ct_stream_t stream)
{
    CT_CUDA_REQUIRE(n >= 0 && step >= 1);
    if (n == 0)
        return 0;
    /* Exactly the CPU's expressions. */
    double bc1 = 1.0 - pow(beta1, (double)step);
    double bc2 = 1.0 - pow(beta2, (double)step);
    const float step_size = (float)(lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float w1 = (float)(1.0 - beta1), b2 = (float)beta2, w2 = (float)(1.0 - beta2);
    const float epsf = (float)eps;
    CT_LAUNCH(ct_cuda_adam__adam_kernel, ct__grid_1d(n, CT__THREADS), CT__THREADS, 0, stream,
              params, m, v, grads, n, step_size, bc2_sqrt, w1, b2, w2, epsf, grad_scale);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}

__global__ void ct_cuda_adam__sumsq_final_kernel(float *out, const double *partials, unsigned parts)
{
    __shared__ double sh[32];
    const double t = ct__sum_partials(partials, parts, sh);
    if (threadIdx.x == 0)
        *out = (float)t;
}

extern "C" int ct_sumsq_cuda(float *out, double *scratch, const float *x, int64_t n,
                             ct_stream_t stream)
{
    CT_CUDA_REQUIRE(n >= 0);
    const unsigned parts = ct__reduce_parts(n);
    CT_LAUNCH(ct__sumsq_part_kernel<0>, parts, CT__THREADS, 0, stream, scratch, x, n);
    CT_CUDA_CHECK_LAUNCH();
    CT_LAUNCH(ct_cuda_adam__sumsq_final_kernel, 1, CT_REDUCE_CUDA_PARTS, 0, stream, out, scratch,
              parts);
    CT_CUDA_CHECK_LAUNCH();
    return 0;
}
