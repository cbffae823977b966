/*
 * test_loss.c - the training head (kernels/cpu/loss.c): tied-embedding scores forward and
 * backward (padding_idx honoured), SASRec's BCE loss against the direct formula
 * -log sigmoid(r+) - log(1 - sigmoid(r-)) averaged over positions with pos != 0, its gradient
 * against finite differences, the count argument (a global batch's normaliser), stability at
 * extreme logits, the three l2_emb forms against their formulas and finite differences, and the
 * two softmax cross-entropy losses (full catalogue; sampled negatives shared by a row) with
 * their fused gradients against the float64 formulas and finite differences.
 *
 * Tolerances: scores are float dot products of C = 8 terms (error ~1e-7 on values ~1):
 * atol 1e-6, rtol 1e-5. The loss is summed in double, so only the final float rounding
 * remains: rtol 1e-6. d(logits) are sigmoids divided by count, computed in double and rounded
 * once: rtol 1e-6 plus atol 1e-9 for values near 0. The l2 penalty sums in double and rounds
 * once (rtol 1e-6); its gradient is one float product per element (rtol 1e-6).
 */
#include <math.h>
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

enum { N = 10, C = 8, V = 7 };

/* Positions 0..2 have no target (pos = 0, as left padding); ids repeat. */
static const int32_t pos_ids[N] = {0, 0, 0, 3, 1, 6, 3, 2, 5, 4};
static const int32_t neg_ids[N] = {0, 0, 0, 5, 2, 1, 4, 6, 6, 3};

typedef struct score_case {
    double *feats, *wte, *out;
    const int32_t *ids;
    const float *w;
} score_case_t;

static double score_objective(void *p)
{
    score_case_t *s = p;
    ref_score(s->out, s->feats, s->wte, s->ids, N, C);
    return kc_dot(s->out, s->w, N);
}

static void test_scores(void)
{
    float feats[N * C], wte[V * C], logits[N], dl[N], df[N * C] = {0}, dw[V * C] = {0};
    double f64[N * C], w64[V * C], ref[N], g[N * C > V * C ? N * C : V * C], out[N];
    kc_fill(feats, N * C, -1.0f, 1.0f, 1);
    kc_fill(wte, V * C, -1.0f, 1.0f, 2);
    kc_fill(dl, N, -1.0f, 1.0f, 3);
    kc_poison(logits, N);
    ct_score_forward_cpu(logits, feats, wte, neg_ids, N, C);
    kc_to_double(f64, feats, N * C);
    kc_to_double(w64, wte, V * C);
    score_case_t sc = {f64, w64, ref, neg_ids, dl};
    score_objective(&sc);
    /* Every row is scored, padding included (the reference computes them; the loss drops them). */
    kc_check("scores", logits, ref, N, 1e-6, 1e-5);

    ct_score_backward_cpu(df, dw, dl, feats, wte, neg_ids, N, C);
    sc.out = out;
    kc_fd_grad(g, f64, N * C, 1e-5, score_objective, &sc);
    kc_check("d feats vs finite diff", df, g, N * C, 1e-6, 1e-5);
    kc_fd_grad(g, w64, V * C, 1e-5, score_objective, &sc);
    for (int c = 0; c < C; c++)
        CT_ASSERT(dw[c] == 0.0f); /* item 0 is padding_idx */
    kc_check("d item table (rows 1..)", dw + C, g + C, (V - 1) * C, 1e-6, 1e-5);
}

typedef struct bce_case {
    double *pl, *nl;
    double count;
} bce_case_t;

static double bce_objective(void *p)
{
    bce_case_t *b = p;
    return ref_bce(b->pl, b->nl, pos_ids, N, b->count);
}

static void test_bce(void)
{
    float pl[N], nl[N], dp[N], dn[N], loss;
    double p64[N], n64[N], g[N];
    kc_fill(pl, N, -4.0f, 4.0f, 4);
    kc_fill(nl, N, -4.0f, 4.0f, 5);
    kc_poison(dp, N);
    kc_poison(dn, N);
    float count = (float)ct_count_nonzero_cpu(pos_ids, N);
    CT_ASSERT(count == 7.0f);
    ct_bce_loss_cpu(&loss, dp, dn, pl, nl, pos_ids, N, count);
    KC_ASSERT_FINITE(dp, N);
    KC_ASSERT_FINITE(dn, N);
    kc_to_double(p64, pl, N);
    kc_to_double(n64, nl, N);
    /* The direct formula, written out here once more. */
    double s = 0.0;
    for (int r = 0; r < N; r++)
        if (pos_ids[r]) {
            s += -log(1.0 / (1.0 + exp(-p64[r])));
            s += -log(1.0 - 1.0 / (1.0 + exp(-n64[r])));
        }
    CT_ASSERT_CLOSE(loss, s / 7.0, 0, 1e-6);
    bce_case_t bc = {p64, n64, 7.0};
    kc_fd_grad(g, p64, N, 1e-6, bce_objective, &bc);
    kc_check("d pos logits vs finite diff", dp, g, N, 1e-9, 1e-6);
    kc_fd_grad(g, n64, N, 1e-6, bce_objective, &bc);
    kc_check("d neg logits vs finite diff", dn, g, N, 1e-9, 1e-6);
    for (int r = 0; r < 3; r++)
        CT_ASSERT(dp[r] == 0.0f && dn[r] == 0.0f);

    /* A global count (these 7 targets are a third of a 21-target batch): the loss and the
     * gradients are exactly a third (1/21 against 1/7, within the final rounding). */
    float loss3, dp3[N], dn3[N];
    ct_bce_loss_cpu(&loss3, dp3, dn3, pl, nl, pos_ids, N, 21.0f);
    CT_ASSERT_CLOSE(loss3, loss / 3.0, 0, 1e-6);
    for (int r = 0; r < N; r++)
        CT_ASSERT_CLOSE(dp3[r], dp[r] / 3.0, 1e-12, 1e-6);
    /* count 0: nothing to average, a zero loss and zero gradients instead of NaN. */
    ct_bce_loss_cpu(&loss3, dp3, dn3, pl, nl, pos_ids, N, 0.0f);
    CT_ASSERT(loss3 == 0.0f);
    for (int r = 0; r < N; r++)
        CT_ASSERT(dp3[r] == 0.0f && dn3[r] == 0.0f);
}

static void test_bce_extremes(void)
{
    /* softplus(1000) = 1000 and softplus(-1000) = 0 in exact arithmetic; a naive
     * log(1 + exp(x)) overflows to inf, and log(sigmoid) of -1000 gives -inf. */
    int32_t pos[2] = {1, 1};
    float pl[2] = {-1000.0f, 1000.0f}, nl[2] = {1000.0f, -1000.0f}, dp[2], dn[2], loss;
    ct_bce_loss_cpu(&loss, dp, dn, pl, nl, pos, 2, 2.0f);
    CT_ASSERT_CLOSE(loss, (1000.0 + 0.0 + 1000.0 + 0.0) / 2.0, 0, 1e-7);
    CT_ASSERT_CLOSE(dp[0], -0.5, 0, 1e-7); /* sigmoid saturated: full gradient / count */
    CT_ASSERT(dp[1] == 0.0f || fabsf(dp[1]) < 1e-30f);
    CT_ASSERT_CLOSE(dn[0], 0.5, 0, 1e-7);
    CT_ASSERT(dn[1] == 0.0f || fabsf(dn[1]) < 1e-30f);
    /* Moderate-large logits where float exp would still be fine but precision matters. */
    float pl2[2] = {30.0f, -30.0f}, nl2[2] = {-30.0f, 30.0f};
    ct_bce_loss_cpu(&loss, dp, dn, pl2, nl2, pos, 2, 2.0f);
    CT_ASSERT_CLOSE(loss, (log1p(exp(-30.0)) * 2 + (30.0 + log1p(exp(-30.0))) * 2) / 2.0, 0, 1e-6);
}

typedef struct l2_case {
    double *w;
    int64_t n;
    double lambda;
    ct_l2_mode_t mode;
} l2_case_t;

static double l2_objective(void *p)
{
    l2_case_t *c = p;
    return ref_l2(c->w, c->n, c->lambda, c->mode);
}

static void test_l2(void)
{
    enum { M = 40 };
    const char *names[] = {"squared", "norm", "half squared"};
    float w[M], dw[M], pen;
    double w64[M], g[M];
    kc_fill(w, M, -1.0f, 1.0f, 6);
    kc_to_double(w64, w, M);
    for (int mode = 0; mode < 3; mode++) {
        memset(dw, 0, sizeof dw);
        ct_l2_penalty_cpu(&pen, dw, w, M, 5e-3f, (ct_l2_mode_t)mode);
        l2_case_t lc = {w64, M, (double)5e-3f, (ct_l2_mode_t)mode};
        CT_ASSERT_CLOSE(pen, l2_objective(&lc), 0, 1e-6);
        kc_fd_grad(g, w64, M, 1e-6, l2_objective, &lc);
        printf(" l2 %s:", names[mode]);
        kc_check("d w vs finite diff", dw, g, M, 1e-10, 1e-6);
    }
    /* HEAD's form: penalty lambda |w|^2, gradient 2 lambda w. */
    memset(dw, 0, sizeof dw);
    ct_l2_penalty_cpu(&pen, dw, w, M, 0.5f, CT_L2_SQUARED);
    for (int i = 0; i < M; i++)
        CT_ASSERT(dw[i] == 1.0f * w[i]);
    /* The norm at w = 0: autograd's subgradient 0, not NaN. */
    float z[3] = {0}, dz[3] = {0};
    ct_l2_penalty_cpu(&pen, dz, z, 3, 1.0f, CT_L2_NORM);
    CT_ASSERT(pen == 0.0f && dz[0] == 0.0f && dz[1] == 0.0f && dz[2] == 0.0f);
}

/* ---- softmax cross-entropy ------------------------------------------------------------------- */

enum { SB = 2, SL = 5, SM = 3 };
/* (B=2, L=5) targets with left padding; a row's negatives avoid its targets, one repeats */
static const int32_t sce_neg[SB * SM] = {2, 4, 4, 1, 6, 5};

typedef struct ce_case {
    double *feats, *wte;
    double count;
    int sampled;
} ce_case_t;

static double ce_objective(void *p)
{
    ce_case_t *c = p;
    if (c->sampled)
        return ref_sampled_ce(c->feats, c->wte, pos_ids, sce_neg, SB, SL, C, SM, c->count);
    return ref_ce(c->feats, c->wte, pos_ids, N, C, V, c->count);
}

/* Loss and both gradients against the reference and finite differences; the gradient of the
 * padding row of the table is zero; count scales everything; +=. Logits here are dot products
 * of C = 8 terms of size <= 1 (up to ~3): the softmax of a few units. The loss sums in double
 * and rounds once (rtol 1e-6 plus the float logits' 1e-7 error); the gradients are a softmax
 * (float, ~1e-7) times rows of size 1 summed over at most 7 terms: atol 1e-6, rtol 1e-5. */
static void check_ce(int sampled, double count)
{
    printf("%s cross-entropy, count %g\n", sampled ? "sampled" : "full", count);
    float feats[N * C], wte[V * C], loss = NAN, df[N * C] = {0}, dw[V * C] = {0};
    float df1[N * C], dw1[V * C];
    kc_fill(feats, N * C, -1.0f, 1.0f, 60);
    kc_fill(wte, V * C, -1.0f, 1.0f, 61);
    size_t ns = sampled ? CT_SAMPLED_CE_SCRATCH(SL, SM, C) : CT_CE_SCRATCH(V, C);
    float *scr = KC_ALLOC(float, ns);
    kc_poison(scr, (int64_t)ns);
    if (sampled)
        ct_sampled_ce_loss_cpu(&loss, df, dw, scr, feats, wte, pos_ids, sce_neg, SB, SL, C, SM,
                               (float)count);
    else
        ct_ce_loss_cpu(&loss, df, dw, scr, feats, wte, pos_ids, N, C, V, (float)count);
    ce_case_t cc = {KC_ALLOC(double, N *C), KC_ALLOC(double, V *C), count, sampled};
    kc_to_double(cc.feats, feats, N * C);
    kc_to_double(cc.wte, wte, V * C);
    double rl = ce_objective(&cc);
    kc_check("loss", &loss, &rl, 1, 1e-7, 1e-6);
    double g[N * C];
    kc_fd_grad(g, cc.feats, N * C, 1e-5, ce_objective, &cc);
    kc_check("d feats vs finite diff", df, g, N * C, 1e-6, 1e-5);
    for (int r = 0; r < N; r++)
        if (pos_ids[r] == 0)
            for (int c = 0; c < C; c++)
                CT_ASSERT(df[r * C + c] == 0.0f);
    kc_fd_grad(g, cc.wte, V * C, 1e-5, ce_objective, &cc);
    kc_check("d wte vs finite diff", dw, g, V * C, 1e-6, 1e-5);
    for (int c = 0; c < C; c++)
        CT_ASSERT(dw[c] == 0.0f); /* item 0 is not a class, and padding gets no gradient */
    memcpy(df1, df, sizeof df), memcpy(dw1, dw, sizeof dw);
    if (sampled)
        ct_sampled_ce_loss_cpu(&loss, df, dw, scr, feats, wte, pos_ids, sce_neg, SB, SL, C, SM,
                               (float)count);
    else
        ct_ce_loss_cpu(&loss, df, dw, scr, feats, wte, pos_ids, N, C, V, (float)count);
    KC_ASSERT_DOUBLED(df, df1, N * C);
    KC_ASSERT_DOUBLED(dw, dw1, V * C);
    free(scr), free(cc.feats), free(cc.wte);
}

static void test_ce(void)
{
    check_ce(0, 7.0);  /* this batch's targets */
    check_ce(0, 20.0); /* a larger global batch's */
    check_ce(1, 7.0);
    check_ce(1, 13.0);
    /* count 0: nothing */
    float feats[N * C], wte[V * C], loss = NAN, df[N * C] = {0}, dw[V * C] = {0};
    float *scr = KC_ALLOC(float, CT_CE_SCRATCH(V, C));
    kc_fill(feats, N * C, -1.0f, 1.0f, 62);
    kc_fill(wte, V * C, -1.0f, 1.0f, 63);
    ct_ce_loss_cpu(&loss, df, dw, scr, feats, wte, pos_ids, N, C, V, 0.0f);
    CT_ASSERT(loss == 0.0f);
    for (int i = 0; i < N * C; i++)
        CT_ASSERT(df[i] == 0.0f);
    free(scr);
}

int main(void)
{
    CT_RUN(test_scores);
    CT_RUN(test_bce);
    CT_RUN(test_bce_extremes);
    CT_RUN(test_l2);
    CT_RUN(test_ce);
    return 0;
}
