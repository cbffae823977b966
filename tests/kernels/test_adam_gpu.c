/*
 * test_adam_gpu.c (gpu suite) - the fused Adam step and the sum of squares on the GPU against
 * the CPU twins (kernels/cpu/adam.c). Adam must be bit-identical: the scalars are formed on the
 * host by the CPU's expressions and the kernel does the CPU's float operations one by one with
 * round-to-nearest intrinsics (IEEE division and square root, no fused multiply-add), so
 * parameters, m and v are compared bit for bit over several steps, with and without a
 * gradient scale, on a buffer of SASRec's size (212,000 floats, plus one). The sum of squares
 * is a double sum rounded to float once, in another order than the CPU's: rtol = 3e-7 (two float
 * ulps; the double's own error is ~1e-16).
 */
#include "gcheck.h"

static void test_adam(void)
{
    const int64_t n = 212001;
    const size_t nb = (size_t)n * sizeof(float);
    float *p = gk_host_rand(n, -0.5f, 0.5f, 101), *m = KC_ALLOC(float, n), *v = KC_ALLOC(float, n);
    float *got = KC_ALLOC(float, n);
    float *d_p = gk_dup(float, p, n), *d_m = gk_alloc(float, n), *d_v = gk_alloc(float, n);
    float *d_g = gk_alloc(float, n);
    GK_CUDA_OK(cudaMemset(d_m, 0, nb));
    GK_CUDA_OK(cudaMemset(d_v, 0, nb));
    for (int64_t step = 1; step <= 6; step++) {
        /* Gradients of varied magnitude, including exact zeros. */
        float *g = gk_host_rand(n, -1.0f, 1.0f, 110 + (uint64_t)step);
        for (int64_t i = 0; i < n; i += 17)
            g[i] = 0.0f;
        for (int64_t i = 5; i < n; i += 101)
            g[i] *= 1e-6f;
        const float scale = step % 2 ? 1.0f : 0.37f;
        gk_upload(d_g, g, nb);
        ct_adam_update_cpu(p, m, v, g, n, 1e-3, CT_SASREC_ADAM_BETA1, CT_SASREC_ADAM_BETA2,
                           CT_SASREC_ADAM_EPS, scale, step);
        CT_ASSERT_OK(ct_adam_update_cuda(d_p, d_m, d_v, d_g, n, 1e-3, CT_SASREC_ADAM_BETA1,
                                         CT_SASREC_ADAM_BETA2, CT_SASREC_ADAM_EPS, scale, step,
                                         NULL));
        printf("step %lld, grad_scale %g:\n", (long long)step, (double)scale);
        gk_download(got, d_p, nb);
        GK_ASSERT_BITEQ("params", got, p, n);
        gk_download(got, d_m, nb);
        GK_ASSERT_BITEQ("m", got, m, n);
        gk_download(got, d_v, nb);
        GK_ASSERT_BITEQ("v", got, v, n);
        free(g);
    }
    CT_ASSERT_ERR(ct_adam_update_cuda(d_p, d_m, d_v, d_g, n, 1e-3, 0.9, 0.98, 1e-8, 1.0f, 0, NULL),
                  CT_ERANGE_VALUE);
    gk_free_all();
    free(p), free(m), free(v), free(got);
}

static void test_sumsq(void)
{
    const int64_t sizes[] = {0, 1, 1000, 212001, 3000007};
    for (int k = 0; k < 5; k++) {
        const int64_t n = sizes[k];
        float *x = gk_host_rand(n, -2.0f, 2.0f, 120);
        float ref = NAN, got = NAN;
        float *d_x = gk_dup(float, x, n), *d_out = gk_alloc(float, 1);
        double *d_scr = gk_alloc(double, CT_SUMSQ_CUDA_SCRATCH);
        ct_sumsq_cpu(&ref, x, n);
        CT_ASSERT_OK(ct_sumsq_cuda(d_out, d_scr, d_x, n, NULL));
        gk_download(&got, d_out, sizeof got);
        gk_check("sumsq", &got, &ref, 1, 1e-30, 3e-7);
        /* the clipping factor a trainer derives from it */
        CT_ASSERT_CLOSE(ct_clip_coef(got, 1.0f), ct_clip_coef(ref, 1.0f), 0.0, 1e-6);
        gk_free_all();
        free(x);
    }
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_adam);
    CT_RUN(test_sumsq);
    return 0;
}
