/*
 * test_elementwise.c - ReLU, residual add and scale (kernels/cpu/elementwise.c): exact values
 * (these ops round at most once per element, so results are compared bit for bit against the
 * same expression), the ReLU backward taken from the forward's output (so an in-place forward
 * still has what its backward needs), the accumulate contract and poisoned outputs; and the
 * softmaxes' exponential (ct__exp_nonpos of kernels/cpu/ct_kernels_cpu.h) against the exact
 * value over its whole range.
 */
#include <string.h>

#include "cpu/ct_kernels_cpu.h"
#include "kcheck.h"

enum { N = 1001 };

static void test_relu(void)
{
    static float x[N], y[N], dy[N], dx[N], y2[N];
    kc_fill(x, N, -1.0f, 1.0f, 1);
    x[0] = 0.0f; /* the kink: gradient 0 there, as PyTorch's (x > 0) */
    kc_fill(dy, N, -1.0f, 1.0f, 2);
    kc_poison(y, N);
    ct_relu_forward_cpu(y, x, N);
    KC_ASSERT_FINITE(y, N);
    ct_relu_backward_cpu(dx, dy, y, N);
    for (int i = 0; i < N; i++) {
        CT_ASSERT(y[i] == (x[i] > 0.0f ? x[i] : 0.0f));
        CT_ASSERT(dx[i] == (x[i] > 0.0f ? dy[i] : 0.0f));
    }
    ct_relu_backward_cpu(dx, dy, y, N);
    for (int i = 0; i < N; i++)
        CT_ASSERT(dx[i] == (x[i] > 0.0f ? 2.0f * dy[i] : 0.0f));
    memcpy(y2, x, sizeof x);
    ct_relu_forward_cpu(y2, y2, N); /* in place */
    CT_ASSERT(memcmp(y, y2, sizeof y) == 0);
}

static void test_residual(void)
{
    static float a[N], b[N], y[N], dy[N], da[N], db[N];
    kc_fill(a, N, -1.0f, 1.0f, 3);
    kc_fill(b, N, -1.0f, 1.0f, 4);
    kc_fill(dy, N, -1.0f, 1.0f, 5);
    kc_poison(y, N);
    ct_residual_forward_cpu(y, a, b, N);
    for (int i = 0; i < N; i++)
        CT_ASSERT(y[i] == a[i] + b[i]);
    ct_residual_backward_cpu(da, db, dy, N);
    ct_residual_backward_cpu(da, db, dy, N);
    for (int i = 0; i < N; i++)
        CT_ASSERT(da[i] == 2.0f * dy[i] && db[i] == 2.0f * dy[i]);
    ct_residual_forward_cpu(a, a, b, N); /* in place on the first input */
    CT_ASSERT(memcmp(a, y, sizeof y) == 0);
}

static void test_scale(void)
{
    static float x[N], y[N];
    kc_fill(x, N, -1.0f, 1.0f, 6);
    memcpy(y, x, sizeof x);
    ct_scale_cpu(y, 0.375f, N);
    for (int i = 0; i < N; i++)
        CT_ASSERT(y[i] == x[i] * 0.375f);
}

/* Every float in [-87.3, 0] on a fine grid (2^21 points, both ends, the values near 0 and the
 * multiples of ln2 where the reduction switches) within 2 ulp (2 * 2^-23 relative) of exp()
 * in double; 0 below the range; NaN in, NaN out. */
static void test_exp(void)
{
    double worst = 0.0;
    float at = 0.0f;
    const int n = 1 << 21;
    for (int k = 0; k <= n; k++) {
        float x = -87.3f * (float)k / (float)n;
        double want = exp((double)x), got = ct__exp_nonpos(x);
        double rel = fabs(got - want) / want;
        if (rel > worst)
            worst = rel, at = x;
    }
    for (int k = 1; k <= 125; k++) {
        float x = -(float)k * 0.693147180559945309f;
        for (int d = -2; d <= 2; d++) {
            float y = nextafterf(x, d < 0 ? -INFINITY : 0.0f);
            double rel = fabs(ct__exp_nonpos(y) - exp((double)y)) / exp((double)y);
            if (rel > worst)
                worst = rel, at = y;
        }
    }
    printf("  exp: worst relative error %.3g at %.9g (%.2f ulp)\n", worst, (double)at,
           worst / 1.1920929e-7);
    CT_ASSERT_MSG(worst <= 2.0 * 1.1920929e-7, "exp off by %.3g at %.9g", worst, (double)at);
    CT_ASSERT(ct__exp_nonpos(0.0f) == 1.0f);
    CT_ASSERT(ct__exp_nonpos(-88.0f) == 0.0f && ct__exp_nonpos(-1e30f) == 0.0f);
    CT_ASSERT(isnan(ct__exp_nonpos(NAN)));
}

int main(void)
{
    CT_RUN(test_exp);
    CT_RUN(test_relu);
    CT_RUN(test_residual);
    CT_RUN(test_scale);
    return 0;
}
