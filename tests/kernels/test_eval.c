/*
 * test_ctrain_eval.c - evaluation scores (kernels/cpu/eval.c): candidate lists and all items
 * against float64 dot products, read both from packed (U,C) vectors and, through ldf, straight from
 * the last column of a (U,L,C) final-LN output; poisoned outputs. Full-ranking ranks against a
 * brute force over an explicit exclusion set, with ctrain_eval_rank's tie rule (equal and NaN
 * scores count against the target).
 *
 * Tolerance: each score is a float dot product of C = 50 terms in [-1,1]: about
 * sqrt(50) * 6e-8 * 2.4 = 1e-6 typical (partial sums reach ~2.4), 7e-6 at the very worst;
 * atol = 5e-6, rtol = 2e-5. Reading the wrong row (a wrong ldf) is off by order 1.
 */
#include "kcheck.h"

enum { U = 5, L = 4, C = 50, V = 30, K = 11 };

static double dot64(const float *a, const float *b)
{
    double s = 0.0;
    for (int c = 0; c < C; c++)
        s += (double)a[c] * b[c];
    return s;
}

static void test_scores(void)
{
    static float hidden[U * L * C], wte[V * C], packed[U * C], sc[U * K], sa[U * V];
    static double rc[U * K], ra[U * V];
    int32_t cand[U * K];
    kc_fill(hidden, U * L * C, -1.0f, 1.0f, 1);
    kc_fill(wte, V * C, -1.0f, 1.0f, 2);
    for (int u = 0; u < U; u++) {
        memcpy(packed + u * C, hidden + (u * L + L - 1) * C, C * sizeof(float));
        for (int k = 0; k < K; k++)
            cand[u * K + k] = (u * 7 + k * 13) % V; /* duplicates allowed, as the protocol's */
    }
    for (int u = 0; u < U; u++) {
        for (int k = 0; k < K; k++)
            rc[u * K + k] = dot64(packed + u * C, wte + cand[u * K + k] * C);
        for (int i = 0; i < V; i++)
            ra[u * V + i] = dot64(packed + u * C, wte + i * C);
    }
    /* Packed vectors (ldf = C) and the last column of (U,L,C) (ldf = L*C). */
    const float *src[2] = {packed, hidden + (L - 1) * C};
    const int ldf[2] = {C, L * C};
    for (int s = 0; s < 2; s++) {
        printf(" ldf=%d:", ldf[s]);
        kc_poison(sc, U * K);
        ct_score_candidates_cpu(sc, src[s], wte, cand, U, K, C, ldf[s]);
        kc_check("candidate scores", sc, rc, U * K, 5e-6, 2e-5);
        printf(" ldf=%d:", ldf[s]);
        kc_poison(sa, U * V);
        ct_score_all_cpu(sa, src[s], wte, U, V, C, ldf[s]);
        kc_check("all-item scores", sa, ra, U * V, 5e-6, 2e-5);
    }
}

/* The rank by definition: items 1..V-1 other than the target and outside the user's exclusion
 * set, scoring higher, equal or NaN. */
static int32_t brute_rank(const float *s, int32_t t, const int32_t *ex, int ne, int nv)
{
    char *excluded = KC_ALLOC(char, nv);
    for (int k = 0; k < ne; k++)
        if (ex[k] > 0 && ex[k] < nv)
            excluded[ex[k]] = 1;
    int32_t r = 0;
    for (int i = 1; i < nv; i++)
        if (i != t && !excluded[i] && !(s[i] < s[t]))
            r++;
    free(excluded);
    return r;
}

static void test_ranks(void)
{
    enum { RU = 5, RV = 97 };
    static float s[RU * RV];
    kc_fill(s, RU * RV, 0.0f, 1.0f, 7);
    for (int i = 0; i < RU * RV; i++)
        s[i] = floorf(s[i] * 8.0f); /* ties everywhere */
    s[2 * RV + 40] = NAN;
    int32_t targets[RU] = {1, 50, 96, 3, 60}, ranks[RU];
    /* sorted lists with repeats, 0, the target, an id past the table; user 4 excludes nothing */
    static const int32_t excl[] = {0,  2,  2,  5,  9,   9, 9, 40, 96,      /* user 0 */
                                   50, 51, 52, 52,                         /* user 1 */
                                   1,  40, 95, 96, 200,                    /* user 2 */
                                   3,  3,  4,  5,  6,   7, 8, 9,  10, 11}; /* user 3 */
    const int32_t off[RU + 1] = {0, 9, 13, 18, 28, 28};
    s[0 * RV + 1] = 4.0f; /* the target ties with many */
    ct_rank_all_cpu(ranks, s, targets, off, excl, RU, RV);
    for (int u = 0; u < RU; u++) {
        int32_t want = brute_rank(s + u * RV, targets[u], excl + off[u], off[u + 1] - off[u], RV);
        printf("  user %d: rank %d (brute force %d)\n", u, ranks[u], want);
        CT_ASSERT_EQ(ranks[u], want);
    }
    /* Without exclusions it is ctrain_eval_rank's count over all items but the padding one. */
    ct_rank_all_cpu(ranks, s, targets, NULL, NULL, RU, RV);
    for (int u = 0; u < RU; u++)
        CT_ASSERT_EQ(ranks[u], brute_rank(s + u * RV, targets[u], NULL, 0, RV));
}

int main(void)
{
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_scores);
    CT_RUN(test_ranks);
    return 0;
}
