/*
 * test_adam.c - the optimizer step and the clipping helpers (kernels/cpu/adam.c): two Adam steps
 * against numbers worked out by hand from torch.optim.Adam's formulas with SASRec's betas, the
 * grad_scale argument, and the global-norm helpers against clip_grad_norm_'s definition.
 *
 * Tolerance: the op works in float, so each updated value carries a few float roundings of the
 * terms that make it (parameters near 1, updates near 1e-2): rtol 1e-6 and atol 1e-7 (the
 * spacing of floats near 1 is 1.2e-7). A wrong bias correction, a missing eps or an eps inside
 * the square root misses by 1e-4 or more.
 */
#include <math.h>

#include "kcheck.h"

/* p0 = (1, -0.5, 0.25); g1 = (0.1, -0.2, 0); g2 = (0.3, 0.1, -0.4); lr = 0.01, beta1 = 0.9,
 * beta2 = 0.98, eps = 1e-8.
 * Step 1: m = 0.1 g1 = (0.01, -0.02, 0), v = 0.02 g1^2 = (2e-4, 8e-4, 0); the bias corrections
 *   1 - 0.9 = 0.1 and 1 - 0.98 = 0.02 undo those factors, so m^ = g1, v^ = g1^2 and the update is
 *   lr * g1 / (|g1| + eps): p = (1 - 0.01 * 0.1/(0.1 + 1e-8), -0.5 + 0.01 * 0.2/(0.2 + 1e-8),
 *   0.25) = (0.990000001, -0.4900000005, 0.25) - the first step moves every parameter with a
 *   gradient by lr, whatever the gradient's size; the zero gradient moves nothing.
 * Step 2: m = 0.9 m + 0.1 g2 = (0.039, -0.008, -0.04);
 *   v = 0.98 v + 0.02 g2^2 = (0.001996, 0.000984, 0.0032);
 *   bias corrections 1 - 0.81 = 0.19 and 1 - 0.9604 = 0.0396;
 *   m^ = (0.2052632, -0.0421053, -0.2105263), sqrt(v^) = (0.2245085, 0.1576328, 0.2842676);
 *   update = lr * m^ / (sqrt(v^) + eps) = (0.0091428, -0.0026711, -0.0074059);
 *   p = (0.9808572201, -0.4873289235, 0.2574059194). */
static void test_two_steps_by_hand(void)
{
    float p[3] = {1.0f, -0.5f, 0.25f}, m[3] = {0}, v[3] = {0};
    const float g1[3] = {0.1f, -0.2f, 0.0f}, g2[3] = {0.3f, 0.1f, -0.4f};
    ct_adam_update_cpu(p, m, v, g1, 3, 0.01, CT_SASREC_ADAM_BETA1, CT_SASREC_ADAM_BETA2,
                       CT_SASREC_ADAM_EPS, 1.0f, 1);
    const double want1[3] = {0.9900000009999999, -0.4900000005, 0.25};
    for (int i = 0; i < 3; i++)
        CT_ASSERT_CLOSE(p[i], want1[i], 1e-7, 1e-6);
    CT_ASSERT_CLOSE(m[0], 0.01, 1e-9, 1e-6);
    CT_ASSERT_CLOSE(v[1], 8e-4, 1e-10, 1e-6);
    ct_adam_update_cpu(p, m, v, g2, 3, 0.01, CT_SASREC_ADAM_BETA1, CT_SASREC_ADAM_BETA2,
                       CT_SASREC_ADAM_EPS, 1.0f, 2);
    const double want2[3] = {0.9808572201237715, -0.48732892353391216, 0.25740591936024754};
    const double wm[3] = {0.039, -0.008, -0.04}, wv[3] = {0.001996, 0.000984, 0.0032};
    for (int i = 0; i < 3; i++) {
        CT_ASSERT_CLOSE(p[i], want2[i], 1e-7, 1e-6);
        CT_ASSERT_CLOSE(m[i], wm[i], 1e-9, 1e-6);
        CT_ASSERT_CLOSE(v[i], wv[i], 1e-10, 1e-6);
    }
}

/* grad_scale multiplies the gradient before anything else: halved gradients with scale 2 give
 * bit-identical state to the plain gradients (both products are exact). */
static void test_grad_scale(void)
{
    enum { N = 1000 };
    static float p1[N], m1[N], v1[N], p2[N], m2[N], v2[N], g[N], gh[N];
    kc_fill(p1, N, -1.0f, 1.0f, 1);
    memcpy(p2, p1, sizeof p1);
    for (int step = 1; step <= 3; step++) {
        kc_fill(g, N, -1.0f, 1.0f, 10 + (uint64_t)step);
        for (int i = 0; i < N; i++)
            gh[i] = g[i] * 0.5f;
        ct_adam_update_cpu(p1, m1, v1, g, N, 1e-3, 0.9, 0.98, 1e-8, 1.0f, step);
        ct_adam_update_cpu(p2, m2, v2, gh, N, 1e-3, 0.9, 0.98, 1e-8, 2.0f, step);
    }
    CT_ASSERT(memcmp(p1, p2, sizeof p1) == 0);
    CT_ASSERT(memcmp(v1, v2, sizeof v1) == 0);
}

static void test_norm_and_clip(void)
{
    float g[4] = {3.0f, -4.0f, 0.0f, 12.0f}, ss;
    ct_sumsq_cpu(&ss, g, 4);
    CT_ASSERT(ss == 169.0f); /* norm 13 */
    /* clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied only when below 1. */
    CT_ASSERT_CLOSE(ct_clip_coef(ss, 6.5f), 6.5 / (13.0 + 1e-6), 0, 1e-7);
    CT_ASSERT(ct_clip_coef(ss, 13.5f) == 1.0f);
    CT_ASSERT(ct_clip_coef(ss, 0.0f) == 1.0f); /* no clipping */
    CT_ASSERT(ct_clip_coef(0.0f, 1.0f) == 1.0f);
    /* After scaling by the coefficient the norm is max_norm. */
    float c = ct_clip_coef(ss, 1.0f);
    ct_scale_cpu(g, c, 4);
    ct_sumsq_cpu(&ss, g, 4);
    CT_ASSERT_CLOSE(sqrt(ss), 1.0, 1e-6, 0);
}

int main(void)
{
    CT_RUN(test_two_steps_by_hand);
    CT_RUN(test_grad_scale);
    CT_RUN(test_norm_and_clip);
    return 0;
}
