/*
 * test_layernorm_gpu.c (gpu suite) - LayerNorm forward and backward on the GPU against the CPU
 * twins (kernels/cpu/layernorm.c): outputs poisoned first, gradients from random initial values
 * through two backward calls (+=), rows whose mean is large next to their spread, channel
 * counts below, at and above a warp, and row counts that leave the last block of the weight
 * gradient's partial sums ragged.
 *
 * Tolerances: mean, rstd and the backward's row means are double sums rounded to float, as on
 * the CPU, so they nearly always round to the CPU's float; the per-element formulas are the
 * CPU's float operations. The forward and dinp are therefore equal up to a one-ulp difference
 * of mean or rstd propagated through (x - m) * s * w: atol = 1e-6, rtol = 2e-6 (a wrong term
 * moves values by 1e-2 or more). dweight and dbias are sums over N <= 300 rows of terms of size
 * <= 3 (dout in [-1,1) times xhat up to ~2), added in another order than the CPU's row order:
 * about sqrt(300) * 6e-8 * 30 = 3e-5 at worst for partial sums of ~30; atol = 1e-4, rtol = 1e-5.
 */
#include "gcheck.h"

static void check_case(int N, int C, float offset)
{
    printf("case N=%d C=%d offset=%g\n", N, C, (double)offset);
    const int64_t NC = (int64_t)N * C;
    const size_t nb = (size_t)NC * sizeof(float);
    float *x = gk_host_rand(NC, -1.0f, 1.0f, 31);
    for (int64_t i = 0; i < NC; i++)
        x[i] += offset * (float)((i / C) % 3); /* some rows far from zero */
    float *w = gk_host_rand(C, 0.5f, 1.5f, 32), *bias = gk_host_rand(C, -0.5f, 0.5f, 33);
    float *dout = gk_host_rand(NC, -1.0f, 1.0f, 34), *dx0 = gk_host_rand(NC, -1.0f, 1.0f, 35);
    float *dw0 = gk_host_rand(C, -1.0f, 1.0f, 36), *db0 = gk_host_rand(C, -1.0f, 1.0f, 37);
    float *out = KC_ALLOC(float, NC), *mean = KC_ALLOC(float, N), *rstd = KC_ALLOC(float, N);
    float *got = KC_ALLOC(float, NC), *gm = KC_ALLOC(float, N), *gr = KC_ALLOC(float, N);
    float *dx = KC_ALLOC(float, NC), *dw = KC_ALLOC(float, C), *db = KC_ALLOC(float, C);
    float *gw = KC_ALLOC(float, C), *gb = KC_ALLOC(float, C);

    float *d_x = gk_dup(float, x, NC), *d_w = gk_dup(float, w, C), *d_b = gk_dup(float, bias, C);
    float *d_out = gk_alloc(float, NC), *d_mean = gk_alloc(float, N), *d_rstd = gk_alloc(float, N);
    float *d_dout = gk_dup(float, dout, NC), *d_dx = gk_dup(float, dx0, NC);
    float *d_dw = gk_dup(float, dw0, C), *d_db = gk_dup(float, db0, C);
    float *d_scr = gk_alloc(float, CT_LAYERNORM_BWD_CUDA_SCRATCH(N, C));

    ct_layernorm_forward_cpu(out, mean, rstd, x, w, bias, N, C, CT_SASREC_LN_EPS);
    CT_ASSERT_OK(ct_layernorm_forward_cuda(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C,
                                           CT_SASREC_LN_EPS, NULL));
    gk_download(got, d_out, nb);
    gk_download(gm, d_mean, sizeof(float) * N);
    gk_download(gr, d_rstd, sizeof(float) * N);
    gk_check("forward out", got, out, NC, 1e-6, 2e-6);
    gk_check("mean", gm, mean, N, 0.0, 2e-7);
    gk_check("rstd", gr, rstd, N, 0.0, 2e-7);

    /* Backward twice, both sides from the same random gradients and the CPU's saved stats. */
    memcpy(dx, dx0, nb);
    memcpy(dw, dw0, sizeof(float) * C);
    memcpy(db, db0, sizeof(float) * C);
    gk_upload(d_mean, mean, sizeof(float) * N);
    gk_upload(d_rstd, rstd, sizeof(float) * N);
    for (int k = 0; k < 2; k++) {
        ct_layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, N, C);
        CT_ASSERT_OK(ct_layernorm_backward_cuda(d_dx, d_dw, d_db, d_scr, d_dout, d_x, d_w, d_mean,
                                                d_rstd, N, C, NULL));
    }
    gk_download(got, d_dx, nb);
    gk_download(gw, d_dw, sizeof(float) * C);
    gk_download(gb, d_db, sizeof(float) * C);
    gk_check("dinp x2", got, dx, NC, 1e-6, 2e-6);
    gk_check("dweight x2", gw, dw, C, 1e-4, 1e-5);
    gk_check("dbias x2", gb, db, C, 1e-4, 1e-5);

    /* The 4-warp baseline from the same gradients: dinp the same bits (per-row work unchanged),
     * the column sums in another order, so against the CPU as above. */
    float *bx = KC_ALLOC(float, NC);
    GK_CUDA_OK(cudaMemcpy(d_dx, dx0, nb, cudaMemcpyHostToDevice));
    GK_CUDA_OK(cudaMemcpy(d_dw, dw0, sizeof(float) * C, cudaMemcpyHostToDevice));
    GK_CUDA_OK(cudaMemcpy(d_db, db0, sizeof(float) * C, cudaMemcpyHostToDevice));
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(ct_layernorm_backward_4warp_cuda(d_dx, d_dw, d_db, d_scr, d_dout, d_x, d_w,
                                                      d_mean, d_rstd, N, C, NULL));
    gk_download(bx, d_dx, nb);
    GK_ASSERT_BITEQ("dinp x2 (4-warp baseline)", bx, got, NC);
    gk_download(gw, d_dw, sizeof(float) * C);
    gk_download(gb, d_db, sizeof(float) * C);
    gk_check("dweight x2 (4-warp baseline)", gw, dw, C, 1e-4, 1e-5);
    gk_check("dbias x2 (4-warp baseline)", gb, db, C, 1e-4, 1e-5);
    free(bx);

    gk_free_all();
    free(x), free(w), free(bias), free(dout), free(dx0), free(dw0), free(db0), free(out);
    free(mean), free(rstd), free(got), free(gm), free(gr), free(dx), free(dw), free(db), free(gw);
    free(gb);
}

static void test_layernorm(void)
{
    check_case(1, 50, 0.0f);
    check_case(70, 50, 100.0f);
    check_case(300, 33, 0.0f); /* 5 row blocks, the last one ragged */
    check_case(9, 1024, 3.0f); /* the widest rows */
    check_case(130, 7, 0.0f);
    check_case(2200, 50, 0.0f); /* 35 row blocks: more partials than a warp's lanes */
}

static void test_bad_arguments(void)
{
    CT_ASSERT_ERR(ct_layernorm_forward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 4,
                                            CT_LAYERNORM_CUDA_MAX_C + 1, 1e-5f, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_layernorm_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                             4, 0, NULL),
                  CT_ERANGE_VALUE);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_layernorm);
    CT_RUN(test_bad_arguments);
    return 0;
}
