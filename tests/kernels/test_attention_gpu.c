/*
 * test_attention_gpu.c (gpu suite) - the fused causal attention kernels against the CPU twins
 * (kernels/cpu/attention.c): forward outputs and saved probabilities (poisoned first), the
 * backward twice from random initial gradients (+=), with dropout on the probabilities (the
 * kernels draw the CPU's Philox numbers themselves) and without, for every head-width
 * instantiation of the kernels (head widths 4, 12, 16, 30, 50, 64 -> 2, 4, 4, 8, 13, 16 float4
 * chunks), sequence lengths from one partial tile (5) to the largest supported (256), and 1 to
 * 3 heads. Then the padding-query skip contract of ct_kernels.h on the GPU: rows that are not
 * skipped bit-identical to no skipping, skipped rows' out and att exactly zero, and every
 * gradient bit-identical to no skipping when the skipped rows' dout is zero.
 *
 * Tolerances: both sides are float with different summation orders (OpenBLAS's blocked sgemm
 * and eight partial sums on the CPU; warp butterflies, lane groups and fused multiply-adds on the
 * GPU). A probability is a softmax of at most 256 logits of a few units: its rounding is a few
 * 1e-8; atol = 1e-6. An output is a sum of <= 256 probability-weighted values of size <= 1.5:
 * sqrt(256) * 6e-8 * 1.5 = 1.4e-6 typically and 256 * 6e-8 * 1.5 = 2.3e-5 at worst per side;
 * atol = 1e-5, rtol = 1e-4. The gradients chain three such products (dP = dO V^T, the softmax
 * backward, dS K and dS^T Q summed over up to 256 rows) on values of order 1 and were measured
 * against the CPU's at a few 1e-6 (emulator): atol = 3e-5, rtol = 2e-4. A wrong mask, scale,
 * index, dropout element or lost row moves values by 1e-3 or more.
 */
#include "gcheck.h"

typedef struct att_bufs {
    float *qkv, *out, *att, *dout, *dqkv0; /* host */
    float *d_qkv, *d_out, *d_att, *d_dout, *d_dqkv, *d_scr;
} att_bufs_t;

/* The backward's stored dS (ct_kernels_cuda.h: scratch after the B*NH*L row constants) against
 * dS recomputed here in double from the same att, dout, values and dropout factors (the CPU's
 * dropout op on ones gives a row's factors); entries right of the diagonal are not stored. A
 * softmax-backward entry is P (g - c) with g a head-width dot product: atol = 1e-6, rtol = 1e-4. */
static void check_stored_ds(const float *d_scr, const float *att, const float *qkv,
                            const float *dout, int B, int L, int C, int NH, ct_dropout_t drop)
{
    const int HS = C / NH, C3 = 3 * C;
    const int64_t nrow = (int64_t)B * NH * L, natt = nrow * L;
    float *ds = KC_ALLOC(float, natt), *f = KC_ALLOC(float, L), *ones = KC_ALLOC(float, L);
    double *g = KC_ALLOC(double, L);
    gk_download(ds, d_scr + nrow, sizeof(float) * natt);
    float *got = KC_ALLOC(float, natt), *ref = KC_ALLOC(float, natt);
    int64_t n = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < L; i++) {
                const int64_t row = ((int64_t)b * NH + h) * L + i;
                const float *P = att + row * L;
                for (int j = 0; j < L; j++)
                    ones[j] = 1.0f;
                ct_dropout_t dr = drop;
                dr.offset = drop.offset + (uint64_t)row * (uint64_t)L;
                ct_dropout_cpu(f, ones, i + 1, dr);
                double c = 0.0;
                for (int j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HS; d++)
                        s += (double)dout[((int64_t)b * L + i) * C + h * HS + d] *
                             (double)qkv[((int64_t)b * L + j) * C3 + 2 * C + h * HS + d];
                    g[j] = s * (double)f[j];
                    c += (double)P[j] * g[j];
                }
                for (int j = 0; j <= i; j++) {
                    got[n] = ds[row * L + j];
                    ref[n++] = (float)((double)P[j] * (g[j] - c));
                }
            }
    gk_check("dS stored in scratch", got, ref, n, 1e-6, 1e-4);
    free(ds), free(f), free(ones), free(g), free(got), free(ref);
}

static void check_case(int B, int L, int C, int NH, float p)
{
    printf("case B=%d L=%d C=%d NH=%d (head width %d) p=%.2f\n", B, L, C, NH, C / NH, (double)p);
    const int64_t nqkv = (int64_t)B * L * 3 * C, nout = (int64_t)B * L * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    ct_dropout_t drop = {p, 2024, 1 + (uint64_t)L, 3 * (uint64_t)C};
    float *qkv = gk_host_rand(nqkv, -1.5f, 1.5f, 61), *dout = gk_host_rand(nout, -1.0f, 1.0f, 62);
    float *dqkv0 = gk_host_rand(nqkv, -1.0f, 1.0f, 63);
    float *out = KC_ALLOC(float, nout), *att = KC_ALLOC(float, natt);
    float *dqkv = KC_ALLOC(float, nqkv), *got = KC_ALLOC(float, natt > nqkv ? natt : nqkv);
    float *fs = KC_ALLOC(float, CT_ATTENTION_FWD_SCRATCH(L));
    float *bs = KC_ALLOC(float, CT_ATTENTION_BWD_SCRATCH(L));
    float *d_qkv = gk_dup(float, qkv, nqkv), *d_out = gk_alloc(float, nout);
    float *d_att = gk_alloc(float, natt), *d_dout = gk_dup(float, dout, nout);
    float *d_dqkv = gk_dup(float, dqkv0, nqkv);
    float *d_scr = gk_alloc(float, CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));

    ct_attention_forward_cpu(out, att, fs, qkv, NULL, B, L, C, NH, drop);
    CT_ASSERT_OK(
        ct_attention_forward_cuda(d_out, d_att, NULL, d_qkv, NULL, B, L, C, NH, drop, NULL));
    gk_download(got, d_att, sizeof(float) * natt);
    gk_check("att (probabilities)", got, att, natt, 1e-6, 1e-5);
    for (int64_t r = 0; r < (int64_t)B * NH * L; r++)
        for (int j = (int)(r % L) + 1; j < L; j++)
            CT_ASSERT_MSG(got[r * L + j] == 0.0f, "att row %lld col %d = %g right of the diagonal",
                          (long long)r, j, (double)got[r * L + j]);
    gk_download(got, d_out, sizeof(float) * nout);
    gk_check("out", got, out, nout, 1e-5, 1e-4);

    /* Backward twice from the same random gradient, both from the CPU's probabilities. */
    memcpy(dqkv, dqkv0, sizeof(float) * nqkv);
    gk_upload(d_att, att, sizeof(float) * natt);
    float *d_dqkv_rc = gk_dup(float, dqkv0, nqkv);
    for (int k = 0; k < 2; k++) {
        ct_attention_backward_cpu(dqkv, bs, dout, att, qkv, NULL, B, L, C, NH, drop);
        /* Poisoned scratch (NaN): a read of anything the call did not write shows. */
        gk_poison(d_scr, sizeof(float) * CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));
        CT_ASSERT_OK(ct_attention_backward_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, NULL, B, L, C,
                                                NH, drop, NULL));
        if (k == 0)
            check_stored_ds(d_scr, att, qkv, dout, B, L, C, NH, drop);
        gk_poison(d_scr, sizeof(float) * CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));
        CT_ASSERT_OK(ct_attention_backward_recompute_cuda(d_dqkv_rc, d_scr, d_dout, d_att, d_qkv,
                                                          NULL, B, L, C, NH, drop, NULL));
    }
    gk_download(got, d_dqkv, sizeof(float) * nqkv);
    gk_check("dqkv x2", got, dqkv, nqkv, 3e-5, 2e-4);
    gk_download(got, d_dqkv_rc, sizeof(float) * nqkv);
    gk_check("dqkv x2 (recompute baseline)", got, dqkv, nqkv, 3e-5, 2e-4);

    gk_free_all();
    free(qkv), free(dout), free(dqkv0), free(out), free(att), free(dqkv), free(got), free(fs);
    free(bs);
}

static void test_shapes(void)
{
    check_case(2, 5, 8, 2, 0.0f);
    check_case(2, 5, 8, 2, 0.3f);
    check_case(3, 33, 36, 3, 0.2f);
    check_case(2, 37, 16, 1, 0.5f);
    check_case(1, 70, 60, 2, 0.25f);
    check_case(2, 200, 50, 1, 0.2f); /* SASRec ml-1m: L = 200, d = 50, one head */
    check_case(1, 256, 64, 1, 0.1f);
}

/* The skip contract on the GPU itself: with qmask (left padding), against the same GPU run
 * without it. */
static void check_skip(int B, int L, int C, int NH, float p)
{
    printf("skip B=%d L=%d C=%d NH=%d p=%.2f\n", B, L, C, NH, (double)p);
    const int64_t nqkv = (int64_t)B * L * 3 * C, nout = (int64_t)B * L * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    const int HS = C / NH;
    ct_dropout_t drop = {p, 99, 5, 0};
    int32_t *qm = KC_ALLOC(int32_t, (int64_t)B * L);
    for (int b = 0; b < B; b++) /* row b: b * L / B padding columns, one sequence fully padded */
        for (int t = 0; t < L; t++)
            qm[b * L + t] = (b == B - 1 && B > 2) ? 0 : t >= b * L / B ? 7 + t : 0;
    float *qkv = gk_host_rand(nqkv, -1.5f, 1.5f, 71), *dout = gk_host_rand(nout, -1.0f, 1.0f, 72);
    for (int64_t r = 0; r < (int64_t)B * L; r++)
        if (qm[r] == 0)
            for (int c = 0; c < C; c++)
                dout[r * C + c] = 0.0f; /* what the contract demands of skipped rows */
    float *out0 = KC_ALLOC(float, nout), *out1 = KC_ALLOC(float, nout);
    float *att0 = KC_ALLOC(float, natt), *att1 = KC_ALLOC(float, natt);
    float *g0 = KC_ALLOC(float, nqkv), *g1 = KC_ALLOC(float, nqkv), *g2 = KC_ALLOC(float, nqkv);
    float *g0r = KC_ALLOC(float, nqkv);
    float *ref_out = KC_ALLOC(float, nout), *ref_att = KC_ALLOC(float, natt);
    float *fs = KC_ALLOC(float, CT_ATTENTION_FWD_SCRATCH(L));
    int32_t *d_qm = gk_dup(int32_t, qm, (int64_t)B * L);
    float *d_qkv = gk_dup(float, qkv, nqkv), *d_dout = gk_dup(float, dout, nout);
    float *d_out = gk_alloc(float, nout), *d_att = gk_alloc(float, natt);
    float *d_dqkv = gk_alloc(float, nqkv);
    float *d_scr = gk_alloc(float, CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));

    CT_ASSERT_OK(
        ct_attention_forward_cuda(d_out, d_att, NULL, d_qkv, NULL, B, L, C, NH, drop, NULL));
    gk_download(out0, d_out, sizeof(float) * nout);
    gk_download(att0, d_att, sizeof(float) * natt);
    GK_CUDA_OK(cudaMemset(d_dqkv, 0, sizeof(float) * nqkv));
    CT_ASSERT_OK(ct_attention_backward_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, NULL, B, L, C, NH,
                                            drop, NULL));
    gk_download(g0, d_dqkv, sizeof(float) * nqkv);
    GK_CUDA_OK(cudaMemset(d_dqkv, 0, sizeof(float) * nqkv));
    CT_ASSERT_OK(ct_attention_backward_recompute_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, NULL, B,
                                                      L, C, NH, drop, NULL));
    gk_download(g0r, d_dqkv, sizeof(float) * nqkv);

    gk_poison(d_out, sizeof(float) * nout);
    gk_poison(d_att, sizeof(float) * natt);
    CT_ASSERT_OK(
        ct_attention_forward_cuda(d_out, d_att, NULL, d_qkv, d_qm, B, L, C, NH, drop, NULL));
    gk_download(out1, d_out, sizeof(float) * nout);
    gk_download(att1, d_att, sizeof(float) * natt);
    GK_CUDA_OK(cudaMemset(d_dqkv, 0, sizeof(float) * nqkv));
    gk_poison(d_scr, sizeof(float) * CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH));
    CT_ASSERT_OK(ct_attention_backward_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, d_qm, B, L, C, NH,
                                            drop, NULL));
    gk_download(g1, d_dqkv, sizeof(float) * nqkv);
    /* The recompute baseline keeps the same contract. */
    GK_CUDA_OK(cudaMemset(d_dqkv, 0, sizeof(float) * nqkv));
    CT_ASSERT_OK(ct_attention_backward_recompute_cuda(d_dqkv, d_scr, d_dout, d_att, d_qkv, d_qm, B,
                                                      L, C, NH, drop, NULL));
    gk_download(g2, d_dqkv, sizeof(float) * nqkv);

    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            const int64_t r = (int64_t)b * L + i;
            const int used = qm[r] != 0;
            for (int h = 0; h < NH; h++) {
                const float *a0 = att0 + ((int64_t)(b * NH + h) * L + i) * L;
                const float *a1 = att1 + ((int64_t)(b * NH + h) * L + i) * L;
                for (int j = 0; j < L; j++)
                    CT_ASSERT_MSG(used ? memcmp(&a0[j], &a1[j], 4) == 0 : a1[j] == 0.0f,
                                  "att b=%d h=%d i=%d j=%d: %g with skipping, %g without", b, h, i,
                                  j, (double)a1[j], (double)a0[j]);
                for (int d = 0; d < HS; d++) {
                    const int64_t k = r * C + h * HS + d;
                    CT_ASSERT_MSG(used ? memcmp(&out0[k], &out1[k], 4) == 0 : out1[k] == 0.0f,
                                  "out b=%d i=%d h=%d d=%d: %g with skipping, %g without", b, i, h,
                                  d, (double)out1[k], (double)out0[k]);
                }
            }
        }
    GK_ASSERT_BITEQ("dqkv with skipping", g1, g0, nqkv);
    GK_ASSERT_BITEQ("dqkv with skipping (recompute baseline)", g2, g0r, nqkv);

    /* And the skipped forward against the CPU's skipped forward. */
    ct_attention_forward_cpu(ref_out, ref_att, fs, qkv, qm, B, L, C, NH, drop);
    gk_check("out with skipping vs CPU", out1, ref_out, nout, 1e-5, 1e-4);
    gk_check("att with skipping vs CPU", att1, ref_att, natt, 1e-6, 1e-5);

    gk_free_all();
    free(qm), free(qkv), free(dout), free(out0), free(out1), free(att0), free(att1), free(g0);
    free(g1), free(g2), free(g0r), free(ref_out), free(ref_att), free(fs);
}

static void test_skip(void)
{
    check_skip(3, 70, 16, 2, 0.3f); /* one sequence entirely padding: every tile skipped */
    check_skip(2, 200, 50, 1, 0.2f);
    check_skip(2, 9, 8, 1, 0.0f);
}

static void test_range(void)
{
    ct_dropout_t none = {0.0f, 0, 0, 0};
    /* Outside the fused kernels' range, or not a valid shape: refused before any CUDA call. */
    CT_ASSERT_ERR(ct_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, 1,
                                            CT_ATTENTION_CUDA_MAX_L + 1, 8, 1, none, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_attention_forward_cuda(NULL, NULL, NULL, NULL, NULL, 1, 8,
                                            2 * CT_ATTENTION_CUDA_MAX_HS + 2, 2, none, NULL),
                  CT_ERANGE_VALUE);
    CT_ASSERT_ERR(
        ct_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 8, 10, 3, none, NULL),
        CT_ERANGE_VALUE);
    CT_ASSERT_ERR(ct_attention_backward_recompute_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 8, 10,
                                                       3, none, NULL),
                  CT_ERANGE_VALUE);
    none.p = 1.0f;
    CT_ASSERT_ERR(
        ct_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 8, 8, 1, none, NULL),
        CT_ERANGE_VALUE);
}

int main(void)
{
    gk_require_gpu();
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_shapes);
    CT_RUN(test_skip);
    CT_RUN(test_range);
    return 0;
}
