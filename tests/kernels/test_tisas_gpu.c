/*
 * test_tisas_gpu.c (gpu suite) - TiSASRec's ops on the GPU (kernels/cuda/tisas.cu) against their
 * CPU twins (kernels/cpu/tisas.c, ct_rows_broadcast_*_cpu):
 *   - the interval masks and the row broadcast (forward and backward): bit for bit (the same
 *     Philox draws and keep rule; one copy or one ordered sum per element);
 *   - the attention forward (out, att) on poisoned outputs, and the backward (d q, d k, d v,
 *     d R^K, d R^V added twice onto random gradients: the += contract) within tolerance, with
 *     every dropout on and off, with padding queries skipped (qmask = seq) and not;
 *   - every padding query row of out and att is exactly zero when skipped.
 * Sizes: L = 7 with two heads (one partial warp of keys), and L = 40 (keys past one warp's
 * 32 lanes) with one head of width 12; intervals clipped at T and against padding times.
 *
 * Tolerances (atol + rtol |ref|): the GPU sums the same products in another order (lanes take
 * keys, channels are summed serially, the CPU uses sgemm tiles and 8-way partial sums) and uses
 * expf where the CPU uses its polynomial (2 ulp), so values differ by a few float ulps of the
 * largest terms: logits of a few units, outputs and gradients of order 1 summed over <= L
 * terms, so ~sqrt(L) * 1e-7. atol 1e-5, rtol 1e-4 leave an order of magnitude; every bug this
 * test is for (a wrong tau, a mask bit keyed wrongly, a missing term, a dropped row) moves
 * values by 1e-2 or more. The interval-table gradients are atomics (order varies): same bound.
 */
#include <string.h>

#include "gcheck.h"

static void check_case(int B, int L, int C, int NH, int T, float p, int skip, uint64_t stream)
{
    printf("case B=%d L=%d C=%d NH=%d T=%d p=%.2f skip=%d\n", B, L, C, NH, T, p, skip);
    const int64_t N = (int64_t)B * L, nx = N * C, nr = (int64_t)(T + 1) * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    const size_t W = CT_TISAS_MASK_WORDS(L, C);
    int32_t *seq = KC_ALLOC(int32_t, N);
    int64_t *ts = KC_ALLOC(int64_t, N);
    for (int b = 0; b < B; b++) {
        int pad = (b * 3) % (L / 2 + 1); /* left padding of each sequence */
        int64_t t = 1 + b;
        for (int i = 0; i < L; i++) {
            seq[b * L + i] = i < pad ? 0 : 1 + (b * 7 + i) % 13;
            t += (i * 5 + b) % 4;
            ts[b * L + i] = i < pad ? 0 : t;
        }
    }
    ct_dropout_t da = {p, 99, stream, 13}, dk = {p, 99, stream + 1, 7}, dv = {p, 99, stream + 2, 2};
    const int32_t *qm = skip ? seq : NULL;
    float *q = gk_host_rand(nx, -1, 1, stream + 10), *k = gk_host_rand(nx, -1, 1, stream + 11);
    float *v = gk_host_rand(nx, -1, 1, stream + 12), *rk = gk_host_rand(nr, -1, 1, stream + 13);
    float *rv = gk_host_rand(nr, -1, 1, stream + 14), *dout = gk_host_rand(nx, -1, 1, stream + 15);
    if (skip)
        for (int64_t r = 0; r < N; r++)
            if (seq[r] == 0)
                memset(dout + r * C, 0, (size_t)C * sizeof *dout);

    /* masks */
    uint32_t *mk = NULL, *mv = NULL, *gmk = NULL, *gmv = NULL;
    uint32_t *dmk = NULL, *dmv = NULL;
    if (p > 0.0f) {
        mk = KC_ALLOC(uint32_t, N * W), mv = KC_ALLOC(uint32_t, N * W);
        gmk = KC_ALLOC(uint32_t, N * W), gmv = KC_ALLOC(uint32_t, N * W);
        memset(mk, 0, N * W * 4), memset(mv, 0, N * W * 4);
        ct_tisas_mask_cpu(mk, qm, B, L, C, dk);
        ct_tisas_mask_cpu(mv, qm, B, L, C, dv);
        dmk = gk_alloc(uint32_t, N * W), dmv = gk_alloc(uint32_t, N * W);
        GK_CUDA_OK(cudaMemset(dmk, 0, N * W * 4));
        GK_CUDA_OK(cudaMemset(dmv, 0, N * W * 4));
        CT_ASSERT_OK(
            ct_tisas_mask_cuda(dmk, qm ? gk_dup(int32_t, seq, N) : NULL, B, L, C, dk, NULL));
        CT_ASSERT_OK(
            ct_tisas_mask_cuda(dmv, qm ? gk_dup(int32_t, seq, N) : NULL, B, L, C, dv, NULL));
        gk_download(gmk, dmk, N * W * 4);
        gk_download(gmv, dmv, N * W * 4);
        CT_ASSERT(memcmp(gmk, mk, N * W * 4) == 0);
        CT_ASSERT(memcmp(gmv, mv, N * W * 4) == 0);
        printf("  %-28s bit-identical\n", "interval masks");
        /* the per-word baseline: the same words written, the same bits */
        uint32_t *dpw = gk_alloc(uint32_t, N * W);
        GK_CUDA_OK(cudaMemset(dpw, 0, N * W * 4));
        CT_ASSERT_OK(ct_tisas_mask_perword_cuda(dpw, qm ? gk_dup(int32_t, seq, N) : NULL, B, L, C,
                                                dk, NULL));
        gk_download(gmk, dpw, N * W * 4);
        CT_ASSERT(memcmp(gmk, mk, N * W * 4) == 0);
        printf("  %-28s bit-identical\n", "interval masks (per-word)");
    }
    const float prkv = p;

    /* CPU reference */
    float *out = KC_ALLOC(float, nx), *att = KC_ALLOC(float, natt);
    float *sf = KC_ALLOC(float, CT_TISAS_ATTENTION_FWD_SCRATCH(L, C));
    float *sb = KC_ALLOC(float, CT_TISAS_ATTENTION_BWD_SCRATCH(L, C));
    ct_tisas_attention_forward_cpu(out, att, sf, q, k, v, rk, rv, ts, qm, B, L, C, NH, T, da, mk,
                                   mv, prkv);
    float *g0[5], *ref[5];
    const int64_t gn[5] = {nx, nx, nx, nr, nr};
    for (int x = 0; x < 5; x++) {
        g0[x] = gk_host_rand(gn[x], -1, 1, stream + 20 + (uint64_t)x);
        ref[x] = KC_ALLOC(float, gn[x]);
        memcpy(ref[x], g0[x], (size_t)gn[x] * sizeof(float));
    }
    for (int rep = 0; rep < 2; rep++)
        ct_tisas_attention_backward_cpu(ref[0], ref[1], ref[2], ref[3], ref[4], sb, dout, att, q, k,
                                        v, rk, rv, ts, qm, B, L, C, NH, T, da, mk, mv, prkv);

    /* GPU */
    float *dq_ = gk_dup(float, q, nx), *dk_ = gk_dup(float, k, nx), *dv_ = gk_dup(float, v, nx);
    float *drk_ = gk_dup(float, rk, nr), *drv_ = gk_dup(float, rv, nr);
    int64_t *dts = gk_dup(int64_t, ts, N);
    int32_t *dqm = qm ? gk_dup(int32_t, seq, N) : NULL;
    float *dout_ = gk_dup(float, dout, nx), *gout = gk_alloc(float, nx);
    float *gatt = gk_alloc(float, natt);
    float *gsb = gk_alloc(float, CT_TISAS_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));
    CT_ASSERT_OK(ct_tisas_attention_forward_cuda(gout, gatt, NULL, dq_, dk_, dv_, drk_, drv_, dts,
                                                 dqm, B, L, C, NH, T, da, dmk, dmv, prkv, NULL));
    float *got = KC_ALLOC(float, natt > nx ? natt : nx);
    gk_download(got, gout, (size_t)nx * sizeof(float));
    gk_check("tisas out", got, out, nx, 1e-5, 1e-4);
    if (skip)
        for (int64_t r = 0; r < N; r++)
            if (seq[r] == 0)
                for (int c = 0; c < C; c++)
                    CT_ASSERT(got[r * C + c] == 0.0f);
    gk_download(got, gatt, (size_t)natt * sizeof(float));
    gk_check("tisas att", got, att, natt, 1e-6, 1e-4);
    float *dg[5];
    for (int x = 0; x < 5; x++)
        dg[x] = gk_dup(float, g0[x], gn[x]);
    for (int rep = 0; rep < 2; rep++)
        CT_ASSERT_OK(ct_tisas_attention_backward_cuda(dg[0], dg[1], dg[2], dg[3], dg[4], gsb, dout_,
                                                      gatt, dq_, dk_, dv_, drk_, drv_, dts, dqm, B,
                                                      L, C, NH, T, da, dmk, dmv, prkv, NULL));
    static const char *const nm[5] = {"tisas dq", "tisas dk", "tisas dv", "tisas drk", "tisas drv"};
    for (int x = 0; x < 5; x++) {
        float *h = KC_ALLOC(float, gn[x]);
        gk_download(h, dg[x], (size_t)gn[x] * sizeof(float));
        gk_check(nm[x], h, ref[x], gn[x], 1e-5, 1e-4);
        free(h);
    }

    gk_free_all();
    for (int x = 0; x < 5; x++)
        free(g0[x]), free(ref[x]);
    free(seq), free(ts), free(q), free(k), free(v), free(rk), free(rv), free(dout), free(out);
    free(att), free(sf), free(sb), free(got), free(mk), free(mv), free(gmk), free(gmv);
}

static void test_attention(void)
{
    check_case(2, 7, 8, 2, 5, 0.0f, 0, 100);
    check_case(2, 7, 8, 2, 5, 0.3f, 1, 200);
    check_case(2, 40, 12, 1, 30, 0.2f, 1, 300);
    check_case(1, 40, 12, 1, 30, 0.0f, 0, 400);
}

static void test_broadcast(void)
{
    const int B = 3, L = 9, C = 5;
    const int64_t n = (int64_t)B * L * C, lc = (int64_t)L * C;
    float *tab = gk_host_rand(lc, -1, 1, 1), *d = gk_host_rand(n, -1, 1, 2);
    float *g = gk_host_rand(lc, -1, 1, 3), *ref = KC_ALLOC(float, n), *got = KC_ALLOC(float, n);
    ct_rows_broadcast_forward_cpu(ref, tab, B, L, C);
    float *dout = gk_alloc(float, n);
    CT_ASSERT_OK(ct_rows_broadcast_forward_cuda(dout, gk_dup(float, tab, lc), B, L, C, NULL));
    gk_download(got, dout, (size_t)n * 4);
    GK_ASSERT_BITEQ("rows_broadcast forward", got, ref, n);
    memcpy(ref, g, (size_t)lc * 4);
    ct_rows_broadcast_backward_cpu(ref, d, B, L, C);
    float *dg = gk_dup(float, g, lc);
    CT_ASSERT_OK(ct_rows_broadcast_backward_cuda(dg, gk_dup(float, d, n), B, L, C, NULL));
    gk_download(got, dg, (size_t)lc * 4);
    GK_ASSERT_BITEQ("rows_broadcast backward", got, ref, lc);
    gk_free_all();
    free(tab), free(d), free(g), free(ref), free(got);
}

static void test_bad_shapes(void)
{
    ct_dropout_t none = {0, 0, 0, 0};
    /* C not a multiple of NH, L beyond the kernels' range: refused before any CUDA call */
    CT_ASSERT_ERR(ct_tisas_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                  NULL, NULL, 1, 4, 7, 2, 3, none, NULL, NULL, 0.0f,
                                                  NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_tisas_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                   NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1,
                                                   CT_TISAS_CUDA_MAX_L + 1, 8, 2, 3, none, NULL,
                                                   NULL, 0.0f, NULL),
                  CT_ERANGE_VALUE);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_broadcast);
    CT_RUN(test_attention);
    CT_RUN(test_bad_shapes);
    return 0;
}
