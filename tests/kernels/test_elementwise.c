/*
 * test_elementwise.c - ReLU, residual add and scale (kernels/cpu/elementwise.c): exact values
 * (these ops round at most once per element, so results are compared bit for bit against the
 * same expression), the ReLU backward taken from the forward's output (so an in-place forward
 * still has what its backward needs), the accumulate contract and poisoned outputs.
 */
#include <string.h>

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

int main(void)
{
    CT_RUN(test_relu);
    CT_RUN(test_residual);
    CT_RUN(test_scale);
    return 0;
}
