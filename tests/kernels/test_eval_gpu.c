/*
 * test_eval_gpu.c (gpu suite) - evaluation on the GPU against the CPU twins
 * (kernels/cpu/eval.c): candidate scores and all-item scores, from packed user vectors and,
 * through ldf, straight from the last column of a (U,L,C) final-LN output (outputs poisoned);
 * and the full-ranking ranks, which are integer counts and must equal the CPU's exactly, on
 * scores with many ties, NaN scores, and exclusion lists with repeats, the padding id, ids out
 * of range and the target itself.
 *
 * Score tolerance: a float dot product of C = 50 terms in [-1,1): about
 * sqrt(50) * 6e-8 * 2.4 = 1e-6 typical, 7e-6 at the very worst per side; atol = 1e-5,
 * rtol = 2e-5. Reading the wrong row (a wrong ldf) is off by order 1.
 */
#include "gcheck.h"

enum { U = 6, L = 4, C = 50, V = 300, K = 11 };

static ct_cuda_ctx_t ctx;

static void test_scores(void)
{
    float *hidden = gk_host_rand(U * L * C, -1.0f, 1.0f, 131);
    float *wte = gk_host_rand(V * C, -1.0f, 1.0f, 132);
    float *ref = KC_ALLOC(float, U *V), *got = KC_ALLOC(float, U *V);
    int32_t cand[U * K];
    for (int u = 0; u < U; u++)
        for (int k = 0; k < K; k++)
            cand[u * K + k] = 1 + (u * 7 + k * 13) % (V - 1); /* duplicates allowed */
    float *d_hidden = gk_dup(float, hidden, U *L *C), *d_wte = gk_dup(float, wte, V *C);
    int32_t *d_cand = gk_dup(int32_t, cand, U * K);
    float *d_sc = gk_alloc(float, U *K), *d_sa = gk_alloc(float, U *V);
    /* The last column of (U,L,C): feats = hidden + (L-1)*C, ldf = L*C. */
    const float *src = hidden + (L - 1) * C, *d_src = d_hidden + (L - 1) * C;

    ct_score_candidates_cpu(ref, src, wte, cand, U, K, C, L * C);
    CT_ASSERT_OK(ct_score_candidates_cuda(d_sc, d_src, d_wte, d_cand, U, K, C, L * C, NULL));
    gk_download(got, d_sc, sizeof(float) * U * K);
    gk_check("candidate scores", got, ref, U * K, 1e-5, 2e-5);

    ct_score_all_cpu(ref, src, wte, U, V, C, L * C);
    CT_ASSERT_OK(ct_score_all_cuda(d_sa, d_src, d_wte, U, V, C, L * C, &ctx));
    gk_download(got, d_sa, sizeof(float) * U * V);
    gk_check("all-item scores", got, ref, U * V, 1e-5, 2e-5);

    /* packed (U,C) vectors, ldf = C */
    float *packed = KC_ALLOC(float, U *C);
    for (int u = 0; u < U; u++)
        memcpy(packed + u * C, src + u * L * C, C * sizeof(float));
    float *d_packed = gk_dup(float, packed, U *C);
    gk_poison(d_sa, sizeof(float) * U * V);
    CT_ASSERT_OK(ct_score_all_cuda(d_sa, d_packed, d_wte, U, V, C, C, &ctx));
    gk_download(got, d_sa, sizeof(float) * U * V);
    gk_check("all-item scores, packed", got, ref, U * V, 1e-5, 2e-5);

    CT_ASSERT_ERR(ct_score_all_cuda(d_sa, d_packed, d_wte, U, V, C, C - 1, &ctx), CT_ERANGE_VALUE);
    gk_free_all();
    free(hidden), free(wte), free(ref), free(got), free(packed);
}

static void test_ranks(void)
{
    enum { RU = 9, RV = 1200 };
    float *s = gk_host_rand(RU * RV, 0.0f, 1.0f, 133);
    for (int i = 0; i < RU * RV; i++)
        s[i] = floorf(s[i] * 16.0f); /* 16 distinct values: ties everywhere */
    s[3 * RV + 17] = NAN;            /* a NaN among others counts against the target */
    int32_t targets[RU], off[RU + 1], excl[RU * 40];
    int32_t ref[RU], got[RU];
    int ne = 0;
    for (int u = 0; u < RU; u++) {
        targets[u] = 1 + (u * 131) % (RV - 1);
        off[u] = ne;
        /* sorted, with repeats, 0, the target and an id past the table */
        int32_t e = 0;
        for (int k = 0; k < 30; k++) {
            excl[ne++] = e;
            if (k % 4 != 1)
                e += 1 + (k * 37 + u) % 60;
        }
        excl[ne++] = targets[u];
        excl[ne++] = RV + 5;
        /* keep it sorted as the contract asks: insert the target in order */
        for (int k = ne - 2; k > off[u] && excl[k - 1] > excl[k]; k--) {
            int32_t t = excl[k];
            excl[k] = excl[k - 1];
            excl[k - 1] = t;
        }
    }
    off[RU] = ne;
    s[5 * RV + targets[5]] = NAN; /* a NaN target: everything counts */
    float *d_s = gk_dup(float, s, RU *RV);
    int32_t *d_t = gk_dup(int32_t, targets, RU), *d_off = gk_dup(int32_t, off, RU + 1);
    int32_t *d_ex = gk_dup(int32_t, excl, ne), *d_r = gk_alloc(int32_t, RU);

    for (int with_excl = 0; with_excl < 2; with_excl++) {
        ct_rank_all_cpu(ref, s, targets, with_excl ? off : NULL, excl, RU, RV);
        CT_ASSERT_OK(ct_rank_all_cuda(d_r, d_s, d_t, with_excl ? d_off : NULL, d_ex, RU, RV, NULL));
        gk_download(got, d_r, sizeof got);
        for (int u = 0; u < RU; u++) {
            printf("  user %d%s: rank %d (CPU %d)\n", u, with_excl ? " with exclusions" : "",
                   got[u], ref[u]);
            CT_ASSERT_EQ(got[u], ref[u]);
        }
    }
    CT_ASSERT_ERR(ct_rank_all_cuda(d_r, d_s, d_t, NULL, NULL, RU, 1, NULL), CT_ERANGE_VALUE);
    gk_free_all();
    free(s);
}

int main(void)
{
    gk_require_gpu();
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_ASSERT_OK(ct_cuda_ctx_init(&ctx, NULL, 0));
    CT_RUN(test_scores);
    CT_RUN(test_ranks);
    ct_cuda_ctx_close(&ctx);
    return 0;
}
