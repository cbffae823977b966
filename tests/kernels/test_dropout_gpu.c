/*
 * test_dropout_gpu.c (gpu suite) - dropout and the timeline mask on the GPU against their CPU
 * twins (kernels/cpu/dropout.c), bit for bit: the masks come from the same Philox draws, so the
 * GPU must drop exactly the CPU's elements and scale the others by the same float. Cases: draw
 * offsets that start and end mid-block, sizes below one Philox block and above the grid, p = 0
 * (a copy, in place or not), in-place use, and the same call applied twice (forward, then the
 * backward on the gradient) giving the CPU's twice-masked values. The timeline mask: padding
 * rows become exact zeros even where the input holds NaN or inf.
 */
#include "gcheck.h"

static void check_dropout(int64_t n, float p, uint64_t offset)
{
    printf("dropout n=%lld p=%.2f offset=%llu\n", (long long)n, (double)p,
           (unsigned long long)offset);
    ct_dropout_t drop = {p, 0x1234abcdull, 9, offset};
    const size_t nb = (size_t)n * sizeof(float);
    float *x = gk_host_rand(n, -2.0f, 2.0f, 11), *ref = KC_ALLOC(float, n);
    float *got = KC_ALLOC(float, n);
    float *dx = gk_dup(float, x, n), *dout = gk_alloc(float, n);

    ct_dropout_cpu(ref, x, n, drop);
    CT_ASSERT_OK(ct_dropout_cuda(dout, dx, n, drop, NULL));
    gk_download(got, dout, nb);
    GK_ASSERT_BITEQ("dropout", got, ref, n);

    /* in place, twice: the backward reapplies the same mask to the gradient */
    ct_dropout_cpu(ref, ref, n, drop);
    CT_ASSERT_OK(ct_dropout_cuda(dx, dx, n, drop, NULL));
    CT_ASSERT_OK(ct_dropout_cuda(dx, dx, n, drop, NULL));
    gk_download(got, dx, nb);
    GK_ASSERT_BITEQ("dropout in place x2", got, ref, n);

    if (p > 0.0f && n >= 1000) {
        /* The mask is not trivially all-kept or all-dropped. */
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; i++)
            dropped += got[i] == 0.0f;
        CT_ASSERT(dropped > 0 && dropped < n);
    }
    gk_free_all();
    free(x), free(ref), free(got);
}

static void test_dropout(void)
{
    check_dropout(1, 0.5f, 0);
    check_dropout(3, 0.3f, 6);                   /* inside one Philox block */
    check_dropout(1001, 0.2f, 13);               /* starts and ends mid-block */
    check_dropout(1000, 0.0f, 0);                /* p = 0: a copy */
    check_dropout(700001, 0.5f, 0xffffffffdull); /* block counter crosses 2^32 */
}

static void test_timeline(void)
{
    enum { N = 37, C = 50 };
    int32_t seq[N];
    for (int r = 0; r < N; r++)
        seq[r] = r % 3 == 0 ? 0 : 5 + r;
    float *x = gk_host_rand(N * C, -1.0f, 1.0f, 12);
    x[0] = NAN; /* padding rows are written as zeros, not x * 0 */
    x[3 * C + 1] = INFINITY;
    float *ref = KC_ALLOC(float, N *C), *got = KC_ALLOC(float, N *C);
    float *dx = gk_dup(float, x, N *C), *dout = gk_alloc(float, N *C);
    int32_t *dseq = gk_dup(int32_t, seq, N);
    ct_timeline_mask_cpu(ref, x, seq, N, C);
    CT_ASSERT_OK(ct_timeline_mask_cuda(dout, dx, dseq, N, C, NULL));
    gk_download(got, dout, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("timeline mask", got, ref, N * C);
    CT_ASSERT_OK(ct_timeline_mask_cuda(dx, dx, dseq, N, C, NULL));
    gk_download(got, dx, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("timeline mask in place", got, ref, N * C);
    gk_free_all();
    free(x), free(ref), free(got);
}

static void test_bad_arguments(void)
{
    ct_dropout_t drop = {1.0f, 0, 0, 0};
    CT_ASSERT_ERR(ct_dropout_cuda(NULL, NULL, 4, drop, NULL), CT_ERANGE_VALUE);
    drop.p = 0.5f;
    CT_ASSERT_ERR(ct_dropout_cuda(NULL, NULL, -1, drop, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_timeline_mask_cuda(NULL, NULL, NULL, -1, 4, NULL), CT_ERANGE_VALUE);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_dropout);
    CT_RUN(test_timeline);
    CT_RUN(test_bad_arguments);
    return 0;
}
