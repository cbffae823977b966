/*
 * test_loss_gpu.c (gpu suite) - the ops after the final LayerNorm on the GPU against their CPU
 * twins (kernels/cpu/loss.c): tied-embedding scores and their backward, the BCE loss and its
 * gradients, the count of targets and the three l2_emb penalties.
 *
 * Bit for bit: dfeats (one multiply and one add per element), the item-table gradient with
 * scratch (rows sorted by item, the CPU's order), the count (integers), and dw of the squared
 * penalties (factor independent of the sum). Within tolerance, each for its reason:
 *   - scores: float dot products of 50 terms in [-1,1) in another order: about
 *     sqrt(50) * 6e-8 * 3 = 1.3e-6 at most; atol = 5e-6, rtol = 2e-5.
 *   - the atomic item-table gradient: sums of up to ~30 rows of size <= 1 in a varying order;
 *     atol = 2e-5, rtol = 1e-5 (a lost row is off by order 0.1).
 *   - loss, dpos, dneg and the penalty values: double arithmetic (device exp/log1p within one
 *     double ulp of glibc's, sums in another order) rounded to float once, so they can differ
 *     from the CPU's float only when the double lands within ~1e-16 of a rounding boundary:
 *     rtol = 3e-7 (about two float ulps), which also bounds the norm penalty's gradient factor
 *     (atol = 1e-30 only keeps exact zeros from dividing by a zero tolerance).
 * Logits include +-80, where an unstable softplus or sigmoid overflows.
 */
#include "gcheck.h"

enum { N = 300, C = 50, V = 40 };

static void make_ids(int32_t *ids, int n, uint64_t stream, int zero_every)
{
    float *u = gk_host_rand(n, 0.0f, 1.0f, stream);
    for (int r = 0; r < n; r++)
        ids[r] = r % zero_every == 0 ? 0 : 1 + (int32_t)(u[r] * (V - 1));
    free(u);
}

static void test_scores(void)
{
    int32_t ids[N];
    make_ids(ids, N, 81, 7);
    float *feats = gk_host_rand(N * C, -1.0f, 1.0f, 82),
          *wte = gk_host_rand(V * C, -1.0f, 1.0f, 83);
    float *dlog = gk_host_rand(N, -1.0f, 1.0f, 84), *df0 = gk_host_rand(N * C, -1.0f, 1.0f, 85);
    float *dw0 = gk_host_rand(V * C, -1.0f, 1.0f, 86);
    float logits[N], got_l[N];
    float *df = KC_ALLOC(float, N *C), *dw = KC_ALLOC(float, V *C), *got = KC_ALLOC(float, N *C);
    int32_t *d_ids = gk_dup(int32_t, ids, N);
    float *d_feats = gk_dup(float, feats, N *C), *d_wte = gk_dup(float, wte, V *C);
    float *d_log = gk_alloc(float, N), *d_dlog = gk_dup(float, dlog, N);
    float *d_df = gk_dup(float, df0, N *C), *d_dw = gk_dup(float, dw0, V *C);

    ct_score_forward_cpu(logits, feats, wte, ids, N, C);
    CT_ASSERT_OK(ct_score_forward_cuda(d_log, d_feats, d_wte, d_ids, N, C, NULL));
    gk_download(got_l, d_log, sizeof got_l);
    gk_check("score forward", got_l, logits, N, 5e-6, 2e-5);

    size_t nbytes = 0;
    CT_ASSERT_OK(ct_score_backward_cuda_scratch(&nbytes, N));
    void *scratch = gk_alloc_bytes(nbytes);
    memcpy(df, df0, sizeof(float) * N * C);
    memcpy(dw, dw0, sizeof(float) * V * C);
    for (int k = 0; k < 2; k++) {
        ct_score_backward_cpu(df, dw, dlog, feats, wte, ids, N, C);
        CT_ASSERT_OK(
            ct_score_backward_cuda(d_df, d_dw, scratch, d_dlog, d_feats, d_wte, d_ids, N, C, NULL));
    }
    gk_download(got, d_df, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("dfeats x2", got, df, N * C);
    gk_download(got, d_dw, sizeof(float) * V * C);
    GK_ASSERT_BITEQ("dwte x2 (sorted)", got, dw, V * C);

    gk_upload(d_dw, dw0, sizeof(float) * V * C);
    for (int k = 0; k < 2; k++)
        CT_ASSERT_OK(
            ct_score_backward_cuda(d_df, d_dw, NULL, d_dlog, d_feats, d_wte, d_ids, N, C, NULL));
    gk_download(got, d_dw, sizeof(float) * V * C);
    gk_check("dwte x2 (atomics)", got, dw, V * C, 2e-5, 1e-5);
    GK_ASSERT_BITEQ("dwte padding row", got, dw0, C);

    /* Misaligned scratch is refused before anything runs: dfeats stays as it was. */
    gk_upload(d_df, df0, sizeof(float) * N * C);
    CT_ASSERT_ERR(ct_score_backward_cuda(d_df, d_dw, (char *)scratch + 4, d_dlog, d_feats, d_wte,
                                         d_ids, N, C, NULL),
                  CT_ERANGE_VALUE);
    gk_download(got, d_df, sizeof(float) * N * C);
    GK_ASSERT_BITEQ("dfeats untouched", got, df0, N * C);

    gk_free_all();
    free(feats), free(wte), free(dlog), free(df0), free(dw0), free(df), free(dw), free(got);
}

static void check_bce(int n, float count)
{
    printf("bce N=%d count=%g\n", n, (double)count);
    int32_t *pos = KC_ALLOC(int32_t, n);
    make_ids(pos, n, 91, 3);
    float *pl = gk_host_rand(n, -5.0f, 5.0f, 92), *nl = gk_host_rand(n, -5.0f, 5.0f, 93);
    if (n > 4) {
        pl[1] = 80.0f, pl[2] = -80.0f, nl[4] = 80.0f, nl[1] = -80.0f;
    }
    float *dp = KC_ALLOC(float, n), *dn = KC_ALLOC(float, n), *got = KC_ALLOC(float, n);
    float loss = NAN, got_loss = NAN;
    int32_t *d_pos = gk_dup(int32_t, pos, n);
    float *d_pl = gk_dup(float, pl, n), *d_nl = gk_dup(float, nl, n);
    float *d_dp = gk_alloc(float, n), *d_dn = gk_alloc(float, n), *d_loss = gk_alloc(float, 1);
    double *d_scr = gk_alloc(double, CT_BCE_LOSS_CUDA_SCRATCH);

    ct_bce_loss_cpu(&loss, dp, dn, pl, nl, pos, n, count);
    CT_ASSERT_OK(ct_bce_loss_cuda(d_loss, d_dp, d_dn, d_scr, d_pl, d_nl, d_pos, n, count, NULL));
    gk_download(&got_loss, d_loss, sizeof got_loss);
    gk_check("loss", &got_loss, &loss, 1, 1e-30, 3e-7);
    gk_download(got, d_dp, sizeof(float) * n);
    gk_check("dpos", got, dp, n, 1e-30, 3e-7);
    gk_download(got, d_dn, sizeof(float) * n);
    gk_check("dneg", got, dn, n, 1e-30, 3e-7);
    gk_free_all();
    free(pos), free(pl), free(nl), free(dp), free(dn), free(got);
}

static void test_bce(void)
{
    int32_t pos[N];
    make_ids(pos, N, 91, 3);
    check_bce(N, (float)ct_count_nonzero_cpu(pos, N));
    check_bce(N, 1000.0f); /* a global count (data parallel) */
    check_bce(N, 0.0f);    /* no targets: zero loss and gradients */
    check_bce(70001, 5000.0f);
    check_bce(0, 1.0f);
}

static void test_count(void)
{
    const int64_t sizes[] = {0, 1, 300, 1000003};
    for (int k = 0; k < 4; k++) {
        const int64_t n = sizes[k];
        int32_t *ids = KC_ALLOC(int32_t, n);
        for (int64_t i = 0; i < n; i++)
            ids[i] = (int32_t)((i * 7919) % 5); /* 0 every fifth */
        int32_t *d_ids = gk_dup(int32_t, ids, n);
        int64_t *d_count = gk_alloc(int64_t, 1), got = -1;
        CT_ASSERT_OK(ct_count_nonzero_cuda(d_count, d_ids, n, NULL));
        gk_download(&got, d_count, sizeof got);
        printf("  count n=%lld: %lld\n", (long long)n, (long long)got);
        CT_ASSERT_EQ(got, ct_count_nonzero_cpu(ids, n));
        gk_free_all();
        free(ids);
    }
}

static void check_l2(int64_t n, float lambda, ct_l2_mode_t mode, int zero_w)
{
    printf("l2 n=%lld lambda=%g mode=%d%s\n", (long long)n, (double)lambda, (int)mode,
           zero_w ? " (w = 0)" : "");
    float *w = gk_host_rand(n, -1.0f, 1.0f, 95), *dw0 = gk_host_rand(n, -1.0f, 1.0f, 96);
    if (zero_w)
        memset(w, 0, sizeof(float) * n);
    float *dw = KC_ALLOC(float, n), *got = KC_ALLOC(float, n);
    float pen = NAN, got_pen = NAN;
    float *d_w = gk_dup(float, w, n), *d_dw = gk_dup(float, dw0, n), *d_pen = gk_alloc(float, 1);
    double *d_scr = gk_alloc(double, CT_L2_PENALTY_CUDA_SCRATCH);
    memcpy(dw, dw0, sizeof(float) * n);
    ct_l2_penalty_cpu(&pen, dw, w, n, lambda, mode);
    CT_ASSERT_OK(ct_l2_penalty_cuda(d_pen, d_dw, d_scr, d_w, n, lambda, mode, NULL));
    gk_download(&got_pen, d_pen, sizeof got_pen);
    gk_check("penalty", &got_pen, &pen, 1, 1e-30, 3e-7);
    gk_download(got, d_dw, sizeof(float) * n);
    if (mode == CT_L2_NORM)
        gk_check("dw", got, dw, n, 1e-30, 3e-7);
    else
        GK_ASSERT_BITEQ("dw", got, dw, n);
    gk_free_all();
    free(w), free(dw0), free(dw), free(got);
}

static void test_l2(void)
{
    for (int mode = 0; mode < 3; mode++) {
        check_l2(V * C, 0.01f, (ct_l2_mode_t)mode, 0);
        check_l2(500001, 0.5f, (ct_l2_mode_t)mode, 0); /* more elements than partial blocks */
    }
    check_l2(100, 0.01f, CT_L2_NORM, 1); /* the norm's subgradient at 0 */
    check_l2(100, 0.0f, CT_L2_SQUARED, 0);
    check_l2(0, 0.01f, CT_L2_NORM, 0);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_scores);
    CT_RUN(test_bce);
    CT_RUN(test_count);
    CT_RUN(test_l2);
    return 0;
}
