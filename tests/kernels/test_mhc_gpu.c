/*
 * test_mhc_gpu.c (gpu suite) - the mHC ops on the GPU (kernels/cuda/mhc.cu) against their CPU
 * twins (kernels/cpu/mhc.c): Sinkhorn forward and backward, the per-token mappings forward
 * (hpre, hpost, hres, proj, rstd on poisoned outputs) and backward (dX, dphi, dalpha, dbias
 * added twice onto random gradients: the += contract), and the stream mixing (pre, post,
 * expand, collapse) forward and backward, for n = 1, 4 and 8 streams (n = 8 is the largest the
 * ops take) and token counts that leave a partial block.
 *
 * Tolerances (atol + rtol |ref|): the stream mixing and Sinkhorn run the CPU's operations in
 * the CPU's order, rounded (no fused multiply-adds), so they are checked bit for bit. What
 * goes through an sgemm (proj = X phi, and the (X phi) path of the backward: cuBLAS against
 * the CPU BLAS, another summation order over nC <= 256 terms of order 1) and what depends on
 * it (gates, H^res, the rstd path) differs by a few ulps of the sums: atol 2e-5, rtol 1e-4.
 * The gradients of alpha and of the biases are sums over all tokens, in double on the GPU and
 * in float on the CPU: same tolerance against values of order N. A wrong index, a transposed
 * mapping or a missing term moves values by 1e-2 or more.
 */
#include <string.h>

#include "gcheck.h"

#define ITERS 20

static void check_sinkhorn(int M, int n)
{
    const int64_t sz = (int64_t)M * n * n;
    float *z = gk_host_rand(sz, -3, 3, 1), *dout = gk_host_rand(sz, -1, 1, 2);
    float *g0 = gk_host_rand(sz, -1, 1, 3);
    float *ref = KC_ALLOC(float, sz), *got = KC_ALLOC(float, sz);
    float *sc = KC_ALLOC(float, CT_SINKHORN_BWD_SCRATCH(n, ITERS));
    ct_sinkhorn_forward_cpu(ref, z, M, n, ITERS);
    float *dz = gk_dup(float, z, sz), *dres = gk_alloc(float, sz);
    CT_ASSERT_OK(ct_sinkhorn_forward_cuda(dres, dz, M, n, ITERS, NULL));
    gk_download(got, dres, (size_t)sz * 4);
    gk_check("sinkhorn forward", got, ref, sz, 1e-6, 1e-5);
    memcpy(ref, g0, (size_t)sz * 4);
    ct_sinkhorn_backward_cpu(ref, sc, dout, z, M, n, ITERS);
    ct_sinkhorn_backward_cpu(ref, sc, dout, z, M, n, ITERS);
    float *dg = gk_dup(float, g0, sz), *dd = gk_dup(float, dout, sz);
    float *gs = gk_alloc(float, CT_SINKHORN_BWD_CUDA_SCRATCH(M, n, ITERS));
    CT_ASSERT_OK(ct_sinkhorn_backward_cuda(dg, gs, dd, dz, M, n, ITERS, NULL));
    CT_ASSERT_OK(ct_sinkhorn_backward_cuda(dg, gs, dd, dz, M, n, ITERS, NULL));
    gk_download(got, dg, (size_t)sz * 4);
    gk_check("sinkhorn backward x2", got, ref, sz, 1e-5, 1e-4);
    gk_free_all();
    free(z), free(dout), free(g0), free(ref), free(got), free(sc);
}

static void check_coeffs(int N, int n, int C)
{
    printf("coeffs N=%d n=%d C=%d\n", N, n, C);
    const int D = n * C, K = CT_MHC_COEFFS(n), nn = n * n;
    float *X = gk_host_rand((int64_t)N * D, -1, 1, 10),
          *phi = gk_host_rand((int64_t)D * K, -0.3f, 0.3f, 11);
    float alpha[3] = {0.7f, 1.3f, 0.9f};
    float *bias = gk_host_rand(K, -1, 1, 12);
    float *hpre = KC_ALLOC(float, (int64_t)N *n), *hpost = KC_ALLOC(float, (int64_t)N *n);
    float *hres = KC_ALLOC(float, (int64_t)N *nn), *proj = KC_ALLOC(float, (int64_t)N *K);
    float *rstd = KC_ALLOC(float, N);
    ct_mhc_coeffs_forward_cpu(hpre, hpost, hres, proj, rstd, X, phi, alpha, bias, N, n, C, ITERS,
                              1e-6f);
    float *dX = gk_dup(float, X, (int64_t)N *D), *dphi = gk_dup(float, phi, (int64_t)D *K);
    float *dal = gk_dup(float, alpha, 3), *dbias = gk_dup(float, bias, K);
    float *ghpre = gk_alloc(float, (int64_t)N *n), *ghpost = gk_alloc(float, (int64_t)N *n);
    float *ghres = gk_alloc(float, (int64_t)N *nn), *gproj = gk_alloc(float, (int64_t)N *K);
    float *grstd = gk_alloc(float, N);
    ct_cuda_ctx_t ctx;
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    CT_ASSERT_OK(ct_mhc_coeffs_forward_cuda(ghpre, ghpost, ghres, gproj, grstd, dX, dphi, dal,
                                            dbias, N, n, C, ITERS, 1e-6f, &ctx));
    float *got = KC_ALLOC(float, (int64_t)N *D > (int64_t)D * K ? (int64_t)N * D : (int64_t)D * K);
    gk_download(got, ghpre, (size_t)N * n * 4);
    gk_check("coeffs hpre", got, hpre, (int64_t)N * n, 2e-5, 1e-4);
    gk_download(got, ghpost, (size_t)N * n * 4);
    gk_check("coeffs hpost", got, hpost, (int64_t)N * n, 2e-5, 1e-4);
    gk_download(got, ghres, (size_t)N * nn * 4);
    gk_check("coeffs hres", got, hres, (int64_t)N * nn, 2e-5, 1e-4);
    gk_download(got, gproj, (size_t)N * K * 4);
    gk_check("coeffs proj", got, proj, (int64_t)N * K, 2e-5, 1e-4);
    gk_download(got, grstd, (size_t)N * 4);
    gk_check("coeffs rstd", got, rstd, N, 1e-6, 1e-6);

    /* backward twice onto random gradients */
    float *dhpre = gk_host_rand((int64_t)N * n, -1, 1, 20),
          *dhpost = gk_host_rand((int64_t)N * n, -1, 1, 21);
    float *dhres = gk_host_rand((int64_t)N * nn, -1, 1, 22);
    float *rX = gk_host_rand((int64_t)N * D, -1, 1, 23),
          *rphi = gk_host_rand((int64_t)D * K, -1, 1, 24);
    float ral[3] = {0.1f, -0.2f, 0.3f};
    float *rb = gk_host_rand(K, -1, 1, 25);
    float *gX = gk_dup(float, rX, (int64_t)N *D), *gphi = gk_dup(float, rphi, (int64_t)D *K);
    float *gal = gk_dup(float, ral, 3), *gb = gk_dup(float, rb, K);
    float *sc = KC_ALLOC(float, CT_MHC_COEFFS_BWD_SCRATCH(N, n, ITERS));
    for (int rep = 0; rep < 2; rep++)
        ct_mhc_coeffs_backward_cpu(rX, rphi, ral, rb, sc, dhpre, dhpost, dhres, X, phi, alpha, bias,
                                   proj, rstd, N, n, C, ITERS);
    float *gsc = gk_alloc(float, CT_MHC_COEFFS_BWD_CUDA_SCRATCH(N, n, ITERS));
    float *ddpre = gk_dup(float, dhpre, (int64_t)N *n),
          *ddpost = gk_dup(float, dhpost, (int64_t)N *n);
    float *ddres = gk_dup(float, dhres, (int64_t)N *nn);
    gk_poison(gsc, sizeof(float) * CT_MHC_COEFFS_BWD_CUDA_SCRATCH(N, n, ITERS));
    for (int rep = 0; rep < 2; rep++)
        CT_ASSERT_OK(ct_mhc_coeffs_backward_cuda(gX, gphi, gal, gb, gsc, ddpre, ddpost, ddres, dX,
                                                 dphi, dal, dbias, gproj, grstd, N, n, C, ITERS,
                                                 &ctx));
    gk_download(got, gX, (size_t)N * D * 4);
    gk_check("coeffs dX", got, rX, (int64_t)N * D, 2e-5, 1e-4);
    gk_download(got, gphi, (size_t)D * K * 4);
    gk_check("coeffs dphi", got, rphi, (int64_t)D * K, 2e-5, 1e-4);
    gk_download(got, gal, 3 * 4);
    gk_check("coeffs dalpha", got, ral, 3, 2e-5, 1e-4);
    gk_download(got, gb, (size_t)K * 4);
    gk_check("coeffs dbias", got, rb, K, 2e-5, 1e-4);

    /* The per-token baseline (its own memory layout, the same arithmetic) from the same starting
     * gradients: dX and dphi bit-identical to the above; dalpha and dbias are double sums in
     * another order, so equal to float rounding. The scratch is poisoned (NaN) first. */
    float *bX = gk_host_rand((int64_t)N * D, -1, 1, 23),
          *bphi = gk_host_rand((int64_t)D * K, -1, 1, 24);
    float *bbias = gk_host_rand(K, -1, 1, 25);
    float bal[3] = {0.1f, -0.2f, 0.3f};
    float *pX = gk_dup(float, bX, (int64_t)N *D), *pphi = gk_dup(float, bphi, (int64_t)D *K);
    float *pal = gk_dup(float, bal, 3), *pb = gk_dup(float, bbias, K);
    gk_poison(gsc, sizeof(float) * CT_MHC_COEFFS_BWD_CUDA_SCRATCH(N, n, ITERS));
    for (int rep = 0; rep < 2; rep++)
        CT_ASSERT_OK(ct_mhc_coeffs_backward_pertoken_cuda(pX, pphi, pal, pb, gsc, ddpre, ddpost,
                                                          ddres, dX, dphi, dal, dbias, gproj, grstd,
                                                          N, n, C, ITERS, &ctx));
    float *want = KC_ALLOC(float, (int64_t)N *D > (int64_t)D * K ? (int64_t)N * D : (int64_t)D * K);
    const struct {
        const char *what;
        float *a, *b;
        int64_t n;
    } pairs[] = {{"coeffs dX (per-token baseline)", gX, pX, (int64_t)N * D},
                 {"coeffs dphi (per-token baseline)", gphi, pphi, (int64_t)D * K},
                 {"coeffs dalpha (per-token baseline)", gal, pal, 3},
                 {"coeffs dbias (per-token baseline)", gb, pb, K}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        gk_download(got, pairs[i].b, (size_t)pairs[i].n * 4);
        gk_download(want, pairs[i].a, (size_t)pairs[i].n * 4);
        if (i < 2)
            GK_ASSERT_BITEQ(pairs[i].what, got, want, pairs[i].n);
        else
            gk_check(pairs[i].what, got, want, pairs[i].n, 1e-7, 1e-6);
    }
    free(bX), free(bphi), free(bbias), free(want);
    ct_cuda_ctx_close(&ctx);
    gk_free_all();
    free(X), free(phi), free(bias), free(hpre), free(hpost), free(hres), free(proj), free(rstd);
    free(got), free(dhpre), free(dhpost), free(dhres), free(rX), free(rphi), free(rb), free(sc);
}

static void check_mixing(int N, int n, int C)
{
    printf("mixing N=%d n=%d C=%d\n", N, n, C);
    const int64_t NS = (int64_t)N * n * C, NC = (int64_t)N * C, Nn = (int64_t)N * n;
    const int64_t Nnn = Nn * n;
    float *X = gk_host_rand(NS, -1, 1, 30), *f = gk_host_rand(NC, -1, 1, 31);
    float *hpre = gk_host_rand(Nn, 0, 1, 32), *hpost = gk_host_rand(Nn, 0, 2, 33);
    float *hres = gk_host_rand(Nnn, 0, 1, 34), *dY = gk_host_rand(NS, -1, 1, 35);
    float *du = gk_host_rand(NC, -1, 1, 36);
    float *ref = KC_ALLOC(float, NS), *got = KC_ALLOC(float, NS + Nnn); /* Nnn > NS when n > C */
    float *dX = gk_dup(float, X, NS), *df = gk_dup(float, f, NC), *dhpre = gk_dup(float, hpre, Nn);
    float *dhpost = gk_dup(float, hpost, Nn), *dhres = gk_dup(float, hres, Nnn);
    float *ddY = gk_dup(float, dY, NS), *ddu = gk_dup(float, du, NC);
    float *out = gk_alloc(float, NS);

    ct_mhc_pre_forward_cpu(ref, X, hpre, N, n, C);
    CT_ASSERT_OK(ct_mhc_pre_forward_cuda(out, dX, dhpre, N, n, C, NULL));
    gk_download(got, out, (size_t)NC * 4);
    GK_ASSERT_BITEQ("pre forward", got, ref, NC);

    ct_mhc_post_forward_cpu(ref, X, f, hres, hpost, N, n, C);
    gk_poison(out, (size_t)NS * 4);
    CT_ASSERT_OK(ct_mhc_post_forward_cuda(out, dX, df, dhres, dhpost, N, n, C, NULL));
    gk_download(got, out, (size_t)NS * 4);
    GK_ASSERT_BITEQ("post forward", got, ref, NS);

    ct_mhc_expand_forward_cpu(ref, f, N, n, C);
    gk_poison(out, (size_t)NS * 4);
    CT_ASSERT_OK(ct_mhc_expand_forward_cuda(out, df, N, n, C, NULL));
    gk_download(got, out, (size_t)NS * 4);
    GK_ASSERT_BITEQ("expand forward", got, ref, NS);

    ct_mhc_collapse_forward_cpu(ref, X, N, n, C);
    gk_poison(out, (size_t)NC * 4);
    CT_ASSERT_OK(ct_mhc_collapse_forward_cuda(out, dX, N, n, C, NULL));
    gk_download(got, out, (size_t)NC * 4);
    GK_ASSERT_BITEQ("collapse forward", got, ref, NC);

    /* backwards, each twice onto random gradients */
    float *a0 = gk_host_rand(NS, -1, 1, 40), *a1 = gk_host_rand(NC, -1, 1, 41);
    float *a2 = gk_host_rand(Nnn, -1, 1, 42), *a3 = gk_host_rand(Nn, -1, 1, 43);
    float *r0 = KC_ALLOC(float, NS), *r1 = KC_ALLOC(float, NC), *r2 = KC_ALLOC(float, Nnn);
    float *r3 = KC_ALLOC(float, Nn);
    memcpy(r0, a0, NS * 4), memcpy(r3, a3, Nn * 4);
    float *g0 = gk_dup(float, a0, NS), *g3 = gk_dup(float, a3, Nn);
    for (int rep = 0; rep < 2; rep++) {
        ct_mhc_pre_backward_cpu(r0, r3, du, X, hpre, N, n, C);
        CT_ASSERT_OK(ct_mhc_pre_backward_cuda(g0, g3, ddu, dX, dhpre, N, n, C, NULL));
    }
    gk_download(got, g0, (size_t)NS * 4);
    GK_ASSERT_BITEQ("pre backward dX", got, r0, NS);
    gk_download(got, g3, (size_t)Nn * 4);
    GK_ASSERT_BITEQ("pre backward dhpre", got, r3, Nn);

    memcpy(r0, a0, NS * 4), memcpy(r1, a1, NC * 4), memcpy(r2, a2, Nnn * 4), memcpy(r3, a3, Nn * 4);
    gk_upload(g0, a0, NS * 4), gk_upload(g3, a3, Nn * 4);
    float *g1 = gk_dup(float, a1, NC), *g2 = gk_dup(float, a2, Nnn);
    for (int rep = 0; rep < 2; rep++) {
        ct_mhc_post_backward_cpu(r0, r1, r2, r3, dY, X, f, hres, hpost, N, n, C);
        CT_ASSERT_OK(
            ct_mhc_post_backward_cuda(g0, g1, g2, g3, ddY, dX, df, dhres, dhpost, N, n, C, NULL));
    }
    gk_download(got, g0, (size_t)NS * 4);
    GK_ASSERT_BITEQ("post backward dX", got, r0, NS);
    gk_download(got, g1, (size_t)NC * 4);
    GK_ASSERT_BITEQ("post backward df", got, r1, NC);
    gk_download(got, g2, (size_t)Nnn * 4);
    GK_ASSERT_BITEQ("post backward dhres", got, r2, Nnn);
    gk_download(got, g3, (size_t)Nn * 4);
    GK_ASSERT_BITEQ("post backward dhpost", got, r3, Nn);

    memcpy(r1, a1, NC * 4);
    gk_upload(g1, a1, NC * 4);
    for (int rep = 0; rep < 2; rep++) {
        ct_mhc_expand_backward_cpu(r1, dY, N, n, C);
        CT_ASSERT_OK(ct_mhc_expand_backward_cuda(g1, ddY, N, n, C, NULL));
    }
    gk_download(got, g1, (size_t)NC * 4);
    GK_ASSERT_BITEQ("expand backward", got, r1, NC);

    memcpy(r0, a0, NS * 4);
    gk_upload(g0, a0, NS * 4);
    for (int rep = 0; rep < 2; rep++) {
        ct_mhc_collapse_backward_cpu(r0, du, N, n, C);
        CT_ASSERT_OK(ct_mhc_collapse_backward_cuda(g0, ddu, N, n, C, NULL));
    }
    gk_download(got, g0, (size_t)NS * 4);
    GK_ASSERT_BITEQ("collapse backward", got, r0, NS);

    gk_free_all();
    free(X), free(f), free(hpre), free(hpost), free(hres), free(dY), free(du), free(ref), free(got);
    free(a0), free(a1), free(a2), free(a3), free(r0), free(r1), free(r2), free(r3);
}

static void test_sinkhorn(void)
{
    check_sinkhorn(37, 4);
    check_sinkhorn(5, 8);
    check_sinkhorn(3, 1);
}

static void test_coeffs(void)
{
    check_coeffs(37, 4, 8);
    check_coeffs(9, 8, 4);
    check_coeffs(5, 1, 6);
    check_coeffs(7, 3, 5); /* odd n and N: the float counts before the sums' doubles are odd */
}

static void test_mixing(void)
{
    check_mixing(37, 4, 10);
    check_mixing(3, 8, 5);
    check_mixing(300, 2, 3);
}

static void test_bad_shapes(void)
{
    CT_ASSERT_ERR(ct_sinkhorn_forward_cuda(NULL, NULL, 1, CT_MHC_MAX_STREAMS + 1, 2, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_mhc_pre_forward_cuda(NULL, NULL, NULL, -1, 4, 8, NULL), CT_ERANGE_VALUE);
    CT_ASSERT_OK(ct_mhc_expand_forward_cuda(NULL, NULL, 0, 4, 8, NULL));
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_sinkhorn);
    CT_RUN(test_coeffs);
    CT_RUN(test_mixing);
    CT_RUN(test_bad_shapes);
    return 0;
}
