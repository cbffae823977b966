/*
 * test_elementwise_gpu.c (gpu suite) - ReLU, residual and scale on the GPU against their CPU
 * twins (kernels/cpu/elementwise.c), bit for bit: each is one float operation per element, so
 * any difference is a bug, not rounding. Forward outputs are poisoned first (every element
 * must be written); backward gradients start from random values and must equal the CPU's
 * after two calls (the += contract). In-place forms are checked too. Sizes include one that is
 * not a multiple of the block and one that needs the grid-stride loop's second pass.
 */
#include "gcheck.h"

static void check_n(int64_t n)
{
    printf("n=%lld\n", (long long)n);
    float *x = gk_host_rand(n, -1.0f, 1.0f, 1), *y = gk_host_rand(n, -1.0f, 1.0f, 2);
    float *g0 = gk_host_rand(n, -1.0f, 1.0f, 3), *g1 = gk_host_rand(n, -1.0f, 1.0f, 4);
    float *ref = KC_ALLOC(float, n), *ref2 = KC_ALLOC(float, n), *got = KC_ALLOC(float, n);
    float *got2 = KC_ALLOC(float, n);
    const size_t nb = (size_t)n * sizeof(float);
    float *dx = gk_dup(float, x, n), *dy = gk_dup(float, y, n), *dout = gk_alloc(float, n);
    float *dg0 = gk_alloc(float, n), *dg1 = gk_alloc(float, n);

    /* relu forward, out of place and in place */
    ct_relu_forward_cpu(ref, x, n);
    CT_ASSERT_OK(ct_relu_forward_cuda(dout, dx, n, NULL));
    gk_download(got, dout, nb);
    GK_ASSERT_BITEQ("relu forward", got, ref, n);
    float *dxi = gk_dup(float, x, n);
    CT_ASSERT_OK(ct_relu_forward_cuda(dxi, dxi, n, NULL));
    gk_download(got, dxi, nb);
    GK_ASSERT_BITEQ("relu forward in place", got, ref, n);

    /* relu backward twice: dinp += dout where out > 0 (out = the forward's output) */
    memcpy(ref2, g0, nb);
    ct_relu_backward_cpu(ref2, y, ref, n);
    ct_relu_backward_cpu(ref2, y, ref, n);
    gk_upload(dg0, g0, nb);
    float *drelu = gk_dup(float, ref, n);
    CT_ASSERT_OK(ct_relu_backward_cuda(dg0, dy, drelu, n, NULL));
    CT_ASSERT_OK(ct_relu_backward_cuda(dg0, dy, drelu, n, NULL));
    gk_download(got, dg0, nb);
    GK_ASSERT_BITEQ("relu backward x2", got, ref2, n);

    /* residual forward, then in place on either input */
    ct_residual_forward_cpu(ref, x, y, n);
    gk_poison(dout, nb);
    CT_ASSERT_OK(ct_residual_forward_cuda(dout, dx, dy, n, NULL));
    gk_download(got, dout, nb);
    GK_ASSERT_BITEQ("residual forward", got, ref, n);
    gk_upload(dxi, x, nb);
    CT_ASSERT_OK(ct_residual_forward_cuda(dxi, dxi, dy, n, NULL));
    gk_download(got, dxi, nb);
    GK_ASSERT_BITEQ("residual forward in place", got, ref, n);

    /* residual backward twice into two random gradients */
    memcpy(ref, g0, nb);
    memcpy(ref2, g1, nb);
    ct_residual_backward_cpu(ref, ref2, y, n);
    ct_residual_backward_cpu(ref, ref2, y, n);
    gk_upload(dg0, g0, nb);
    gk_upload(dg1, g1, nb);
    CT_ASSERT_OK(ct_residual_backward_cuda(dg0, dg1, dy, n, NULL));
    CT_ASSERT_OK(ct_residual_backward_cuda(dg0, dg1, dy, n, NULL));
    gk_download(got, dg0, nb);
    gk_download(got2, dg1, nb);
    GK_ASSERT_BITEQ("residual backward dinp1", got, ref, n);
    GK_ASSERT_BITEQ("residual backward dinp2", got2, ref2, n);

    /* scale in place */
    memcpy(ref, x, nb);
    ct_scale_cpu(ref, 0.3f, n);
    gk_upload(dxi, x, nb);
    CT_ASSERT_OK(ct_scale_cuda(dxi, 0.3f, n, NULL));
    gk_download(got, dxi, nb);
    GK_ASSERT_BITEQ("scale", got, ref, n);

    gk_free_all();
    free(x), free(y), free(g0), free(g1), free(ref), free(ref2), free(got), free(got2);
}

static void test_sizes(void)
{
    check_n(1);
    check_n(1000);
    check_n(300001);
}

static void test_empty_and_bad(void)
{
    /* n = 0 is a no-op; a negative size is refused before any CUDA call. */
    CT_ASSERT_OK(ct_relu_forward_cuda(NULL, NULL, 0, NULL));
    CT_ASSERT_ERR(ct_scale_cuda(NULL, 1.0f, -1, NULL), CT_ERANGE_VALUE);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_sizes);
    CT_RUN(test_empty_and_bad);
    return 0;
}
