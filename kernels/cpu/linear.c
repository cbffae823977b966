/*
 * linear.c - fully connected layers on sgemm: the plain linear (y = x W^T + b, also the FFN's
 * kernel-size-1 convolutions and the attention output projection) and the attention's packed
 * input projection, whose query part may read a different input than its key/value part, and
 * GPT-2's Conv1D (the same product with the weight stored (in, out)).
 *
 * Both are written once, on helpers that take leading dimensions, so the packed projection
 * writes q, k and v straight into their columns of the (N,3C) buffer without a copy. Bias sums
 * in the backward run over rows in order (fixed order, deterministic); the matrix products are
 * OpenBLAS's, deterministic for a given shape and thread count.
 */
#include <cblas.h>
#include <string.h>

#include "ct_kernels.h"

/* out[r, 0:OC] = inp[r, 0:IC] W^T + bias, rows of out ldo apart and of inp ldi apart. */
static void ct_cpu_linear__linear_fwd(float *out, int ldo, const float *inp, int ldi,
                                      const float *weight, const float *bias, int N, int IC, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    float beta = 0.0f;
    if (bias) {
        for (int r = 0; r < N; r++)
            memcpy(out + (size_t)r * ldo, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, ldi, weight, IC,
                beta, out, ldo);
}

/* The backward of ct_cpu_linear__linear_fwd, all three gradients accumulated; dout rows lds apart.
 */
static void ct_cpu_linear__linear_bwd(float *dinp, int ldi, float *dweight, float *dbias,
                                      const float *dout, int lds, const float *inp,
                                      const float *weight, int N, int IC, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, lds, weight,
                    IC, 1.0f, dinp, ldi);
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, lds, inp, ldi,
                    1.0f, dweight, IC);
    if (dbias) {
        for (int r = 0; r < N; r++) {
            const float *d = dout + (size_t)r * lds;
            for (int o = 0; o < OC; o++)
                dbias[o] += d[o];
        }
    }
}

void ct_linear_forward_cpu(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int IC, int OC)
{
    ct_cpu_linear__linear_fwd(out, OC, inp, IC, weight, bias, N, IC, OC);
}

void ct_linear_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC)
{
    ct_cpu_linear__linear_bwd(dinp, IC, dweight, dbias, dout, OC, inp, weight, N, IC, OC);
}

void ct_conv1d_forward_cpu(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int IC, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    float beta = 0.0f;
    if (bias) {
        for (int r = 0; r < N; r++)
            memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, IC, 1.0f, inp, IC, weight, OC,
                beta, out, OC);
}

void ct_conv1d_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, IC, OC, 1.0f, dout, OC, weight, OC,
                    1.0f, dinp, IC);
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IC, OC, N, 1.0f, inp, IC, dout, OC,
                    1.0f, dweight, OC);
    if (dbias) {
        for (int r = 0; r < N; r++) {
            const float *d = dout + (size_t)r * OC;
            for (int o = 0; o < OC; o++)
                dbias[o] += d[o];
        }
    }
}

void ct_qkv_forward_cpu(float *qkv, const float *xq, const float *xkv, const float *weight,
                        const float *bias, int N, int C)
{
    if (xq == xkv) {
        ct_cpu_linear__linear_fwd(qkv, 3 * C, xq, C, weight, bias, N, C, 3 * C);
        return;
    }
    /* Rows 0..C-1 of the weight make q from xq, rows C..3C-1 make k and v from xkv. */
    ct_cpu_linear__linear_fwd(qkv, 3 * C, xq, C, weight, bias, N, C, C);
    ct_cpu_linear__linear_fwd(qkv + C, 3 * C, xkv, C, weight + (size_t)C * C,
                              bias ? bias + C : NULL, N, C, 2 * C);
}

void ct_qkv_backward_cpu(float *dxq, float *dxkv, float *dweight, float *dbias, const float *dqkv,
                         const float *xq, const float *xkv, const float *weight, int N, int C)
{
    if (xq == xkv && dxq == dxkv) {
        ct_cpu_linear__linear_bwd(dxq, C, dweight, dbias, dqkv, 3 * C, xq, weight, N, C, 3 * C);
        return;
    }
    ct_cpu_linear__linear_bwd(dxq, C, dweight, dbias, dqkv, 3 * C, xq, weight, N, C, C);
    ct_cpu_linear__linear_bwd(dxkv, C, dweight + (size_t)C * C, dbias ? dbias + C : NULL, dqkv + C,
                              3 * C, xkv, weight + (size_t)C * C, N, C, 2 * C);
}
