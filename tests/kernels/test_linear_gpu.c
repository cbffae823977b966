/*
 * test_linear_gpu.c (gpu suite) - the cuBLAS linear and packed-QKV ops against their CPU twins
 * (kernels/cpu/linear.c): forward with and without bias (outputs poisoned), backward twice from
 * random initial gradients (+=), the optional NULL gradients, the packed projection for
 * self-attention (one input, one gradient), for the original layout (q from another input) and
 * for one input with two gradients, and row counts on both sides of the bias gradient's
 * single-pass / two-pass split.
 *
 * Tolerances: an output or input gradient is a float dot product of at most 150 terms of size
 * <= 1 (inputs in [-1,1)), whose rounding in another order than OpenBLAS's moves it by about
 * sqrt(150) * 6e-8 * 5 = 4e-6 at most (partial sums of a few units): atol = 2e-5, rtol = 1e-5.
 * The weight and bias gradients are sums over N <= 1000 rows: partial sums reach ~30 and the
 * reordering error sqrt(1000) * 6e-8 * 30 = 6e-5; atol = 3e-4, rtol = 2e-5. A transposed or
 * offset operand moves values by order 1.
 */
#include "gcheck.h"

static ct_cuda_ctx_t ctx;

static void check_linear(int N, int IC, int OC, int with_bias, int with_dinp)
{
    printf("linear N=%d IC=%d OC=%d%s%s\n", N, IC, OC, with_bias ? "" : ", no bias",
           with_dinp ? "" : ", no dinp");
    const int64_t ni = (int64_t)N * IC, no = (int64_t)N * OC, nw = (int64_t)OC * IC;
    float *x = gk_host_rand(ni, -1.0f, 1.0f, 41), *w = gk_host_rand(nw, -1.0f, 1.0f, 42);
    float *b = gk_host_rand(OC, -1.0f, 1.0f, 43), *dy = gk_host_rand(no, -1.0f, 1.0f, 44);
    float *dx = gk_host_rand(ni, -1.0f, 1.0f, 45), *dw = gk_host_rand(nw, -1.0f, 1.0f, 46);
    float *db = gk_host_rand(OC, -1.0f, 1.0f, 47);
    float *y = KC_ALLOC(float, no), *got = KC_ALLOC(float, no > nw ? (no > ni ? no : ni) : nw);
    float *d_x = gk_dup(float, x, ni), *d_w = gk_dup(float, w, nw), *d_b = gk_dup(float, b, OC);
    float *d_y = gk_alloc(float, no), *d_dy = gk_dup(float, dy, no);
    float *d_dx = gk_dup(float, dx, ni), *d_dw = gk_dup(float, dw, nw);
    float *d_db = gk_dup(float, db, OC);

    ct_linear_forward_cpu(y, x, w, with_bias ? b : NULL, N, IC, OC);
    CT_ASSERT_OK(ct_linear_forward_cuda(d_y, d_x, d_w, with_bias ? d_b : NULL, N, IC, OC, &ctx));
    gk_download(got, d_y, sizeof(float) * no);
    gk_check("forward", got, y, no, 2e-5, 1e-5);

    for (int k = 0; k < 2; k++) {
        ct_linear_backward_cpu(with_dinp ? dx : NULL, dw, with_bias ? db : NULL, dy, x, w, N, IC,
                               OC);
        CT_ASSERT_OK(ct_linear_backward_cuda(with_dinp ? d_dx : NULL, d_dw, with_bias ? d_db : NULL,
                                             d_dy, d_x, d_w, N, IC, OC, &ctx));
    }
    gk_download(got, d_dx, sizeof(float) * ni);
    gk_check("dinp x2", got, dx, ni, 2e-5, 1e-5);
    gk_download(got, d_dw, sizeof(float) * nw);
    gk_check("dweight x2", got, dw, nw, 3e-4, 2e-5);
    gk_download(got, d_db, sizeof(float) * OC);
    gk_check("dbias x2", got, db, OC, 3e-4, 2e-5);

    gk_free_all();
    free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(y), free(got);
}

/* layout 0: self-attention (xq == xkv, one gradient); 1: q from another input, two gradients;
 * 2: one input, two gradients. */
static void check_qkv(int N, int C, int layout)
{
    static const char *names[] = {"self", "cross", "one input, two gradients"};
    printf("qkv N=%d C=%d %s\n", N, C, names[layout]);
    const int64_t nx = (int64_t)N * C, nq = 3 * nx, nw = 3 * (int64_t)C * C;
    float *xq = gk_host_rand(nx, -1.0f, 1.0f, 51), *xkv = gk_host_rand(nx, -1.0f, 1.0f, 52);
    float *w = gk_host_rand(nw, -1.0f, 1.0f, 53), *b = gk_host_rand(3 * C, -1.0f, 1.0f, 54);
    float *dqkv = gk_host_rand(nq, -1.0f, 1.0f, 55), *dxq = gk_host_rand(nx, -1.0f, 1.0f, 56);
    float *dxkv = gk_host_rand(nx, -1.0f, 1.0f, 57), *dw = gk_host_rand(nw, -1.0f, 1.0f, 58);
    float *db = gk_host_rand(3 * C, -1.0f, 1.0f, 59);
    float *qkv = KC_ALLOC(float, nq), *got = KC_ALLOC(float, nq > nw ? nq : nw);
    float *d_xq = gk_dup(float, xq, nx), *d_xkv = gk_dup(float, xkv, nx);
    float *d_w = gk_dup(float, w, nw), *d_b = gk_dup(float, b, 3 * C);
    float *d_qkv = gk_alloc(float, nq), *d_dqkv = gk_dup(float, dqkv, nq);
    float *d_dxq = gk_dup(float, dxq, nx), *d_dxkv = gk_dup(float, dxkv, nx);
    float *d_dw = gk_dup(float, dw, nw), *d_db = gk_dup(float, db, 3 * C);

    const float *hk = layout == 1 ? xkv : xq, *dk = layout == 1 ? d_xkv : d_xq;
    float *hdk = layout == 0 ? dxq : dxkv, *ddk = layout == 0 ? d_dxq : d_dxkv;
    ct_qkv_forward_cpu(qkv, xq, hk, w, b, N, C);
    CT_ASSERT_OK(ct_qkv_forward_cuda(d_qkv, d_xq, dk, d_w, d_b, N, C, &ctx));
    gk_download(got, d_qkv, sizeof(float) * nq);
    gk_check("forward", got, qkv, nq, 2e-5, 1e-5);
    for (int k = 0; k < 2; k++) {
        ct_qkv_backward_cpu(dxq, hdk, dw, db, dqkv, xq, hk, w, N, C);
        CT_ASSERT_OK(
            ct_qkv_backward_cuda(d_dxq, ddk, d_dw, d_db, d_dqkv, d_xq, dk, d_w, N, C, &ctx));
    }
    gk_download(got, d_dxq, sizeof(float) * nx);
    gk_check("dxq x2", got, dxq, nx, 2e-5, 1e-5);
    if (layout != 0) {
        gk_download(got, d_dxkv, sizeof(float) * nx);
        gk_check("dxkv x2", got, dxkv, nx, 2e-5, 1e-5);
    }
    gk_download(got, d_dw, sizeof(float) * nw);
    gk_check("dweight x2", got, dw, nw, 3e-4, 2e-5);
    gk_download(got, d_db, sizeof(float) * 3 * C);
    gk_check("dbias x2", got, db, 3 * C, 3e-4, 2e-5);

    gk_free_all();
    free(xq), free(xkv), free(w), free(b), free(dqkv), free(dxq), free(dxkv), free(dw), free(db);
    free(qkv), free(got);
}

static void test_linear(void)
{
    check_linear(30, 50, 50, 1, 1);   /* bias gradient in one pass */
    check_linear(1000, 50, 50, 1, 1); /* 16 partial row blocks */
    check_linear(77, 20, 35, 0, 1);
    check_linear(65, 50, 50, 1, 0);
    check_linear(1, 3, 1, 1, 1);
}

static void test_qkv(void)
{
    for (int layout = 0; layout < 3; layout++)
        check_qkv(200, 50, layout);
    check_qkv(5, 8, 1);
}

static void test_context_and_bad_arguments(void)
{
    ct_cuda_ctx_t none;
    memset(&none, 0, sizeof none);
    CT_ASSERT_ERR(ct_linear_forward_cuda(NULL, NULL, NULL, NULL, 4, 4, 4, &none), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_linear_forward_cuda(NULL, NULL, NULL, NULL, 4, 0, 4, &ctx), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_qkv_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, -1, 4, &ctx),
                  CT_ERANGE_VALUE);
    /* Empty shapes are no-ops. */
    CT_ASSERT_OK(ct_linear_forward_cuda(NULL, NULL, NULL, NULL, 0, 4, 4, &ctx));
    /* Closing twice is safe. */
    ct_cuda_ctx_t c2;
    CT_ASSERT_OK(ct_cuda_ctx_init(&c2, NULL, CT_CUDA_CTX_TF32));
    CT_ASSERT(c2.blas != NULL && c2.workspace != NULL && c2.scratch != NULL);
    ct_cuda_ctx_close(&c2);
    ct_cuda_ctx_close(&c2);
    CT_ASSERT(c2.blas == NULL);
}

int main(void)
{
    gk_require_gpu();
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    CT_RUN(test_linear);
    CT_RUN(test_qkv);
    CT_RUN(test_context_and_bad_arguments);
    ct_cuda_ctx_close(&ctx);
    return 0;
}
