/*
 * test_bpr_gpu.c (gpu suite) - the GPT-2 recommender's ops on the GPU against their CPU twins
 * (kernels/cpu/bpr.c): BPR over a micro-batch with and without projected texts, and the mean
 * pool of hidden states over each item's tokens with its backward.
 *
 * Bit for bit: the mean pool and its backward (each channel's rows added in order, one division).
 * Within tolerance: BPR's two dot products are warp sums of D = 64 products of order 1 in another
 * order (about 8 * 6e-8 * sqrt(64) = 4e-6 on x), and the device's expf / log1pf are within 2 ulp
 * of glibc's: g (of order 1 / count) and the gradients (g u + l2 v) get rtol 2e-5 with atol
 * 1e-7 / count; the loss, a double sum of those softplus values, rtol 2e-6. A wrong index or a
 * swapped sign is off by order 1.
 */
#include "gcheck.h"

enum { U = 37, I = 53, D = 64, B = 300, NP = 40 };

static void bpr_case(int with_proj, float count, float lambda)
{
    printf("bpr proj=%d count=%g lambda=%g\n", with_proj, (double)count, (double)lambda);
    float *user = gk_host_rand(U * D, -0.5f, 0.5f, 11),
          *item = gk_host_rand(I * D, -0.5f, 0.5f, 12);
    float *proj = gk_host_rand(NP * D, -0.5f, 0.5f, 13), *u = gk_host_rand(B * 5, 0.0f, 1.0f, 14);
    int32_t idx[B * CT_BPR_IDX];
    for (int r = 0; r < B; r++) {
        idx[r * 5 + 0] = (int32_t)(u[r * 5 + 0] * U);
        idx[r * 5 + 1] = (int32_t)(u[r * 5 + 1] * I);
        idx[r * 5 + 2] = (int32_t)(u[r * 5 + 2] * I);
        idx[r * 5 + 3] = (int32_t)(u[r * 5 + 3] * NP);
        idx[r * 5 + 4] = (int32_t)(u[r * 5 + 4] * NP);
    }
    /* a few large scores, where an unstable softplus overflows */
    for (int k = 0; k < D; k++)
        user[k] = 3.0f, item[(size_t)idx[1] * D + k] = 2.0f;
    float loss = 0.0f, got_loss = 0.0f;
    float *du = KC_ALLOC(float, B *D), *dvpn = KC_ALLOC(float, 2 * B * D);
    float *got = KC_ALLOC(float, 2 * B * D);
    ct_bpr_loss_cpu(&loss, du, dvpn, user, item, with_proj ? proj : NULL, idx, B, D, count, lambda);
    float *d_user = gk_dup(float, user, U *D), *d_item = gk_dup(float, item, I *D);
    float *d_proj = gk_dup(float, proj, NP *D), *d_loss = gk_alloc(float, 1);
    float *d_du = gk_alloc(float, B *D), *d_dvpn = gk_alloc(float, 2 * B * D);
    double *d_sc = gk_alloc(double, B);
    int32_t *d_idx = gk_dup(int32_t, idx, B * CT_BPR_IDX);
    gk_poison(d_du, sizeof(float) * B * D);
    gk_poison(d_dvpn, sizeof(float) * 2 * B * D);
    CT_ASSERT_OK(ct_bpr_loss_cuda(d_loss, d_du, d_dvpn, d_sc, d_user, d_item,
                                  with_proj ? d_proj : NULL, d_idx, B, D, count, lambda, NULL));
    gk_download(&got_loss, d_loss, sizeof got_loss);
    gk_check("bpr loss", &got_loss, &loss, 1, 1e-30, 2e-6);
    gk_download(got, d_du, sizeof(float) * B * D);
    gk_check("bpr du", got, du, B * D, 1e-7 / count, 2e-5);
    gk_download(got, d_dvpn, sizeof(float) * 2 * B * D);
    gk_check("bpr dv+ dv-", got, dvpn, 2 * B * D, 1e-7 / count, 2e-5);
    gk_free_all();
    free(user), free(item), free(proj), free(u), free(du), free(dvpn), free(got);
}

static void test_bpr(void)
{
    bpr_case(1, (float)B, 1e-4f);
    bpr_case(0, (float)B, 1e-4f);
    bpr_case(1, 4096.0f, 0.0f); /* a micro-batch of a larger step, no penalty */
    /* no rows: the loss is 0 */
    float *d_loss = gk_alloc(float, 1), got = 1.0f;
    double *d_sc = gk_alloc(double, 1);
    CT_ASSERT_OK(
        ct_bpr_loss_cuda(d_loss, NULL, NULL, d_sc, NULL, NULL, NULL, NULL, 0, D, 1.0f, 0.0f, NULL));
    gk_download(&got, d_loss, sizeof got);
    CT_ASSERT(got == 0.0f);
    gk_free_all();
}

static void test_mean_pool(void)
{
    enum { N = 45, L = 19, C = 70 };
    float *h = gk_host_rand(N * L * C, -2.0f, 2.0f, 21),
          *dout = gk_host_rand(N * C, -1.0f, 1.0f, 22);
    float *u = gk_host_rand(N, 0.0f, 1.0f, 23);
    int32_t len[N];
    for (int k = 0; k < N; k++)
        len[k] = 1 + (int32_t)(u[k] * L);
    len[0] = 1, len[1] = L;
    float *out = KC_ALLOC(float, N *C), *dh = KC_ALLOC(float, N *L *C);
    float *got = KC_ALLOC(float, N *L *C);
    ct_mean_pool_forward_cpu(out, h, len, N, L, C);
    ct_mean_pool_backward_cpu(dh, dout, len, N, L, C);
    float *d_h = gk_dup(float, h, N *L *C), *d_dout = gk_dup(float, dout, N *C);
    int32_t *d_len = gk_dup(int32_t, len, N);
    float *d_out = gk_alloc(float, N *C), *d_dh = gk_alloc(float, N *L *C);
    gk_poison(d_dh, sizeof(float) * N * L * C);
    CT_ASSERT_OK(ct_mean_pool_forward_cuda(d_out, d_h, d_len, N, L, C, NULL));
    CT_ASSERT_OK(ct_mean_pool_backward_cuda(d_dh, d_dout, d_len, N, L, C, NULL));
    gk_download(got, d_out, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("mean pool", got, out, N * C);
    gk_download(got, d_dh, sizeof(float) * N * L * C);
    GK_ASSERT_BITEQ("mean pool backward", got, dh, N * L * C);
    CT_ASSERT_ERR(ct_mean_pool_forward_cuda(d_out, d_h, d_len, N, 0, C, NULL), CT_ERANGE_VALUE);
    gk_free_all();
    free(h), free(dout), free(u), free(out), free(dh), free(got);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_bpr);
    CT_RUN(test_mean_pool);
    return 0;
}
