/*
 * eval.c - scores for evaluation: a user's final hidden vector against candidate items (the
 * sampled protocol) or against every item (full ranking, one sgemm). Ranking, exclusion of seen
 * items and the metrics belong to the trainer.
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
