/*
 * test_xent_gpu.c (gpu suite) - the softmax cross-entropy losses on the GPU (kernels/cuda/
 * xent.cu) against their CPU twins (ct_ce_loss_cpu, ct_sampled_ce_loss_cpu): the loss on a
 * poisoned output, d feats and d E added twice onto random gradients (the += contract), rows
 * without a target in every sequence, negatives that repeat an item and that are padding (0,
 * which gets no gradient), a catalogue large enough that the full loss runs in several chunks
 * of rows, and count <= 0 (loss 0, nothing added). The full loss's rows held in registers
 * (catalogues up to 4096) against the multi-pass baseline: the same bits.
 *
 * Tolerances (atol + rtol |ref|): logits are sgemm / serial dot products over C <= 16 terms of
 * order 1 (another order than the CPU's), the softmax uses expf where the CPU uses its
 * polynomial (2 ulp), sums of exponentials are double on both; the gradients are of order
 * 1 / count and their sums over rows run in another order (atomics for the table). So values
 * agree to a few float ulps of their magnitude: atol 1e-6 on gradients of order 1e-2, rtol
 * 1e-4, and rtol 1e-5 (atol 1e-7, for the zero of count <= 0) on the loss. A wrong class index, a
 * missed padding rule or a row that should be ignored changes them by 1e-3 or more.
 */
#include <string.h>

#include "gcheck.h"

static void check_ce(int B, int L, int C, int V, float count_override)
{
    const int N = B * L;
    printf("ce N=%d C=%d V=%d rows/chunk=%zu\n", N, C, V, CT_CE_CUDA_ROWS(V));
    float *feats = gk_host_rand((int64_t)N * C, -1, 1, 1),
          *wte = gk_host_rand((int64_t)V * C, -1, 1, 2);
    int32_t *pos = KC_ALLOC(int32_t, N);
    int targets = 0;
    for (int r = 0; r < N; r++) {
        pos[r] = (r % L) < (r / L) % 3 ? 0 : 1 + (r * 7919) % (V - 1);
        targets += pos[r] != 0;
    }
    const float count = count_override != 0.0f ? count_override : (float)targets;
    float *gf0 = gk_host_rand((int64_t)N * C, -1, 1, 3),
          *ge0 = gk_host_rand((int64_t)V * C, -1, 1, 4);
    float *rf = KC_ALLOC(float, (int64_t)N *C), *re = KC_ALLOC(float, (int64_t)V *C);
    memcpy(rf, gf0, (size_t)N * C * 4), memcpy(re, ge0, (size_t)V * C * 4);
    float *sc = KC_ALLOC(float, CT_CE_SCRATCH(V, C));
    float loss = 0.0f;
    for (int rep = 0; rep < 2; rep++)
        ct_ce_loss_cpu(&loss, rf, re, sc, feats, wte, pos, N, C, V, count);

    ct_cuda_ctx_t ctx;
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    float *dl = gk_alloc(float, 1), *df = gk_dup(float, gf0, (int64_t)N *C);
    float *de = gk_dup(float, ge0, (int64_t)V *C);
    float *dfe = gk_dup(float, feats, (int64_t)N *C), *dw = gk_dup(float, wte, (int64_t)V *C);
    int32_t *dp = gk_dup(int32_t, pos, N);
    float *gsc = gk_alloc(float, CT_CE_CUDA_SCRATCH(N, V));
    for (int rep = 0; rep < 2; rep++)
        CT_ASSERT_OK(ct_ce_loss_cuda(dl, df, de, gsc, dfe, dw, dp, N, C, V, count, &ctx));
    float gl;
    float *got = KC_ALLOC(float, (int64_t)(N > V ? N : V) * C);
    gk_download(&gl, dl, 4);
    gk_check("ce loss", &gl, &loss, 1, 1e-7, 1e-5);
    gk_download(got, df, (size_t)N * C * 4);
    gk_check("ce dfeats x2", got, rf, (int64_t)N * C, 1e-6, 1e-4);
    gk_download(got, de, (size_t)V * C * 4);
    gk_check("ce dwte x2", got, re, (int64_t)V * C, 1e-6, 1e-4);

    /* The multi-pass baseline from the same starting gradients: the same bits (the register
     * kernel keeps each thread's elements and their order). */
    float *got2 = KC_ALLOC(float, (int64_t)(N > V ? N : V) * C);
    float *dl2 = gk_alloc(float, 1), *df2 = gk_dup(float, gf0, (int64_t)N *C);
    float *de2 = gk_dup(float, ge0, (int64_t)V *C);
    GK_CUDA_OK(cudaMemcpy(df, gf0, (size_t)N * C * 4, cudaMemcpyHostToDevice));
    GK_CUDA_OK(cudaMemcpy(de, ge0, (size_t)V * C * 4, cudaMemcpyHostToDevice));
    for (int rep = 0; rep < 2; rep++) {
        CT_ASSERT_OK(ct_ce_loss_cuda(dl, df, de, gsc, dfe, dw, dp, N, C, V, count, &ctx));
        CT_ASSERT_OK(
            ct_ce_loss_multipass_cuda(dl2, df2, de2, gsc, dfe, dw, dp, N, C, V, count, &ctx));
    }
    gk_download(got, dl, 4), gk_download(got2, dl2, 4);
    GK_ASSERT_BITEQ("ce loss (multi-pass baseline)", got, got2, 1);
    gk_download(got, df, (size_t)N * C * 4), gk_download(got2, df2, (size_t)N * C * 4);
    GK_ASSERT_BITEQ("ce dfeats (multi-pass baseline)", got, got2, (int64_t)N * C);
    gk_download(got, de, (size_t)V * C * 4), gk_download(got2, de2, (size_t)V * C * 4);
    GK_ASSERT_BITEQ("ce dwte (multi-pass baseline)", got, got2, (int64_t)V * C);
    free(got2);
    ct_cuda_ctx_close(&ctx);
    gk_free_all();
    free(feats), free(wte), free(pos), free(gf0), free(ge0), free(rf), free(re), free(sc),
        free(got);
}

static void check_sampled(int B, int L, int C, int V, int M, float count_override)
{
    const int N = B * L;
    printf("sampled ce B=%d L=%d C=%d V=%d M=%d\n", B, L, C, V, M);
    float *feats = gk_host_rand((int64_t)N * C, -1, 1, 11),
          *wte = gk_host_rand((int64_t)V * C, -1, 1, 12);
    int32_t *pos = KC_ALLOC(int32_t, N), *neg = KC_ALLOC(int32_t, (int64_t)B * M);
    int targets = 0;
    for (int r = 0; r < N; r++) {
        pos[r] = (r % L) < (r / L) % 4 ? 0 : 1 + (r * 31) % (V - 1);
        targets += pos[r] != 0;
    }
    for (int x = 0; x < B * M; x++)
        neg[x] = x % 5 == 4 ? 0 : 1 + (x * 13) % (V - 1); /* repeats across sequences, and 0 */
    const float count = count_override != 0.0f ? count_override : (float)targets;
    float *gf0 = gk_host_rand((int64_t)N * C, -1, 1, 13),
          *ge0 = gk_host_rand((int64_t)V * C, -1, 1, 14);
    float *rf = KC_ALLOC(float, (int64_t)N *C), *re = KC_ALLOC(float, (int64_t)V *C);
    memcpy(rf, gf0, (size_t)N * C * 4), memcpy(re, ge0, (size_t)V * C * 4);
    float *sc = KC_ALLOC(float, CT_SAMPLED_CE_SCRATCH(L, M, C));
    float loss = 0.0f;
    for (int rep = 0; rep < 2; rep++)
        ct_sampled_ce_loss_cpu(&loss, rf, re, sc, feats, wte, pos, neg, B, L, C, M, count);

    float *dl = gk_alloc(float, 1), *df = gk_dup(float, gf0, (int64_t)N *C);
    float *de = gk_dup(float, ge0, (int64_t)V *C);
    float *dfe = gk_dup(float, feats, (int64_t)N *C), *dw = gk_dup(float, wte, (int64_t)V *C);
    int32_t *dp = gk_dup(int32_t, pos, N), *dn = gk_dup(int32_t, neg, (int64_t)B * M);
    float *gsc = gk_alloc(float, CT_SAMPLED_CE_CUDA_SCRATCH(N, M));
    for (int rep = 0; rep < 2; rep++)
        CT_ASSERT_OK(
            ct_sampled_ce_loss_cuda(dl, df, de, gsc, dfe, dw, dp, dn, B, L, C, M, count, NULL));
    float gl;
    float *got = KC_ALLOC(float, (int64_t)(N > V ? N : V) * C);
    gk_download(&gl, dl, 4);
    gk_check("sampled ce loss", &gl, &loss, 1, 1e-7, 1e-5);
    gk_download(got, df, (size_t)N * C * 4);
    gk_check("sampled ce dfeats x2", got, rf, (int64_t)N * C, 1e-6, 1e-4);
    gk_download(got, de, (size_t)V * C * 4);
    gk_check("sampled ce dwte x2", got, re, (int64_t)V * C, 1e-6, 1e-4);
    gk_free_all();
    free(feats), free(wte), free(pos), free(neg), free(gf0), free(ge0), free(rf), free(re);
    free(sc), free(got);
}

static void test_ce(void)
{
    check_ce(3, 7, 8, 40, 0.0f);
    /* 16 Mi floats / V rows per chunk: V = 300000 gives 55 rows a chunk, so 3 chunks */
    check_ce(4, 40, 4, 300000, 0.0f);
    check_ce(2, 5, 8, 40, -1.0f);
    /* ml-1m's catalogue: 3416 classes, the register kernel's 16-per-thread instantiation */
    check_ce(2, 9, 8, 3417, 0.0f);
    /* 2049 classes: 8 per thread is one short, 16 per thread leaves most slots empty */
    check_ce(2, 3, 4, 2050, 0.0f);
}

static void test_sampled(void)
{
    check_sampled(3, 7, 8, 40, 5, 0.0f);
    check_sampled(2, 40, 6, 30, 37, 0.0f);
    check_sampled(2, 5, 8, 40, 3, -1.0f);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_ce);
    CT_RUN(test_sampled);
    return 0;
}
