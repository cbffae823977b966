/*
 * eval.c - scores for evaluation: a user's final hidden vector against candidate items (the
 * sampled protocol) or against every item (full ranking, one sgemm), and the target's rank among
 * all items with seen items excluded (a count, no sort). The metrics belong to the trainer.
 */
#include <cblas.h>

#include "ct_kernels.h"

void ct_score_candidates_cpu(float *scores, const float *feats, const float *wte,
                             const int32_t *cand, int U, int K, int C, int ldf)
{
    for (int u = 0; u < U; u++) {
        const float *f = feats + (size_t)u * ldf;
        for (int k = 0; k < K; k++) {
            const float *e = wte + (size_t)cand[(size_t)u * K + k] * C;
            float s = 0.0f;
            for (int c = 0; c < C; c++)
                s += f[c] * e[c];
            scores[(size_t)u * K + k] = s;
        }
    }
}

void ct_score_all_cpu(float *scores, const float *feats, const float *wte, int U, int V, int C,
                      int ldf)
{
    if (U <= 0 || V <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, U, V, C, 1.0f, feats, ldf, wte, C, 0.0f,
                scores, V);
}

void ct_rank_all_cpu(int32_t *ranks, const float *scores, const int32_t *targets,
                     const int32_t *excl_off, const int32_t *excl, int U, int V)
{
    for (int u = 0; u < U; u++) {
        const float *s = scores + (size_t)u * V;
        const int32_t t = targets[u];
        const float st = s[t];
        int32_t r = 0;
        for (int i = 1; i < V; i++)
            r += i != t && !(s[i] < st);
        if (excl_off) {
            /* Take back what the excluded items counted; a repeated entry only once. */
            for (int32_t k = excl_off[u]; k < excl_off[u + 1]; k++) {
                int32_t e = excl[k];
                if (e <= 0 || e >= V || e == t || (k > excl_off[u] && excl[k - 1] == e))
                    continue;
                r -= !(s[e] < st);
            }
        }
        ranks[u] = r;
    }
}
