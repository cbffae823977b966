/*
 * test_layernorm.c - LayerNorm (kernels/cpu/layernorm.c): the forward against the float64
 * formula, the saved mean and rstd, and every gradient (input, weight, bias) against central
 * finite differences of the float64 forward; the accumulate contract; poisoned outputs. Rows
 * have different offsets and spreads, C is 50 (SASRec) and 13 (odd), eps is SASRec's 1e-8.
 *
 * Tolerances: the op sums rows in double, so its error is that of the float element work:
 * x - mean rounds at half an ulp of the row's offset (1.2e-7 for offsets near 2), which the
 * output multiplies by rstd * weight (up to 3.3 * 1.5): about 6e-7 at worst, measured 5e-7.
 * atol = 2e-6, rtol = 1e-5 leaves a 3x margin. The backward does the same rounding once more
 * before its sums and multiplies by rstd again; its gradients are of order 1 and measure
 * <= 1e-6 off, so atol = 5e-6, rtol = 2e-5. A wrong term in the backward formula (a missing
 * mean or xhat term, a wrong divisor) moves gradients by 1e-2 or more.
 */
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

typedef struct ln_case {
    int N, C;
    double *x, *w, *b, *out;
    const float *dout;
} ln_case_t;

static double ln_objective(void *p)
{
    ln_case_t *c = p;
    ref_layernorm(c->out, c->x, c->w, c->b, c->N, c->C, CT_SASREC_LN_EPS);
    return kc_dot(c->out, c->dout, (int64_t)c->N * c->C);
}

static void check_case(int N, int C, uint64_t stream)
{
    printf("case N=%d C=%d\n", N, C);
    const int64_t n = (int64_t)N * C;
    float *x = KC_ALLOC(float, n), *w = KC_ALLOC(float, C), *b = KC_ALLOC(float, C);
    float *out = KC_ALLOC(float, n), *mean = KC_ALLOC(float, N), *rstd = KC_ALLOC(float, N);
    float *dout = KC_ALLOC(float, n), *dx = KC_ALLOC(float, n), *dw = KC_ALLOC(float, C);
    float *db = KC_ALLOC(float, C), *dx1 = KC_ALLOC(float, n), *dw1 = KC_ALLOC(float, C);
    float *db1 = KC_ALLOC(float, C);
    double *x64 = KC_ALLOC(double, n), *w64 = KC_ALLOC(double, C), *b64 = KC_ALLOC(double, C);
    double *ref = KC_ALLOC(double, n), *g = KC_ALLOC(double, n);

    /* Row r: offset in [-2, 2), spread 0.3 .. 2 (so rstd runs from 0.5 to about 3). */
    kc_fill(x, n, -1.0f, 1.0f, stream);
    for (int r = 0; r < N; r++) {
        float off = -2.0f + 4.0f * (float)r / (float)N, spread = 0.3f + 1.7f * (float)(r % 4) / 3;
        for (int c = 0; c < C; c++)
            x[r * C + c] = off + spread * x[r * C + c];
    }
    kc_fill(w, C, 0.5f, 1.5f, stream + 1);
    kc_fill(b, C, -0.5f, 0.5f, stream + 2);
    kc_fill(dout, n, -1.0f, 1.0f, stream + 3);
    kc_poison(out, n);
    kc_poison(mean, N);
    kc_poison(rstd, N);
    ct_layernorm_forward_cpu(out, mean, rstd, x, w, b, N, C, CT_SASREC_LN_EPS);
    KC_ASSERT_FINITE(out, n);
    KC_ASSERT_FINITE(mean, N);
    KC_ASSERT_FINITE(rstd, N);

    kc_to_double(x64, x, n);
    kc_to_double(w64, w, C);
    kc_to_double(b64, b, C);
    ref_layernorm(ref, x64, w64, b64, N, C, CT_SASREC_LN_EPS);
    kc_check("layernorm out", out, ref, n, 2e-6, 1e-5);
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += x64[r * C + c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x64[r * C + c] - m) * (x64[r * C + c] - m);
        v /= C;
        CT_ASSERT_CLOSE(mean[r], m, 1e-6, 1e-5);
        CT_ASSERT_CLOSE(rstd[r], 1.0 / sqrt(v + 1e-8), 1e-6, 1e-5);
    }

    ct_layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, N, C);
    ln_case_t lc = {N, C, x64, w64, b64, KC_ALLOC(double, n), dout};
    kc_fd_grad(g, x64, n, 1e-5, ln_objective, &lc);
    kc_check("d inp vs finite diff", dx, g, n, 5e-6, 2e-5);
    kc_fd_grad(g, w64, C, 1e-5, ln_objective, &lc);
    kc_check("d weight vs finite diff", dw, g, C, 5e-6, 2e-5);
    kc_fd_grad(g, b64, C, 1e-5, ln_objective, &lc);
    kc_check("d bias vs finite diff", db, g, C, 5e-6, 2e-5);

    memcpy(dx1, dx, (size_t)n * sizeof *dx);
    memcpy(dw1, dw, (size_t)C * sizeof *dw);
    memcpy(db1, db, (size_t)C * sizeof *db);
    ct_layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, N, C);
    KC_ASSERT_DOUBLED(dx, dx1, n);
    KC_ASSERT_DOUBLED(dw, dw1, C);
    KC_ASSERT_DOUBLED(db, db1, C);

    free(lc.out);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dx), free(dw);
    free(db), free(dx1), free(dw1), free(db1), free(x64), free(w64), free(b64), free(ref);
    free(g);
}

static void test_sasrec_width(void)
{
    check_case(12, 50, 10);
}

static void test_odd_width(void)
{
    check_case(9, 13, 20);
}

/* A constant row (a padding row of zeros in HEAD's pre-LN layout): variance 0, rstd =
 * 1/sqrt(eps) = 1e4, output = bias exactly, and finite gradients. */
static void test_constant_row(void)
{
    enum { C = 8 };
    float x[C] = {0}, w[C], b[C], out[C], mean, rstd, dout[C], dx[C] = {0}, dw[C] = {0},
          db[C] = {0};
    kc_fill(w, C, 0.5f, 1.5f, 30);
    kc_fill(b, C, -0.5f, 0.5f, 31);
    kc_fill(dout, C, -1.0f, 1.0f, 32);
    ct_layernorm_forward_cpu(out, &mean, &rstd, x, w, b, 1, C, CT_SASREC_LN_EPS);
    CT_ASSERT_CLOSE(rstd, 1e4, 0, 1e-6);
    for (int c = 0; c < C; c++)
        CT_ASSERT(out[c] == b[c]);
    ct_layernorm_backward_cpu(dx, dw, db, dout, x, w, &mean, &rstd, 1, C);
    KC_ASSERT_FINITE(dx, C);
    for (int c = 0; c < C; c++) {
        CT_ASSERT(dw[c] == 0.0f); /* xhat = 0 */
        CT_ASSERT(db[c] == dout[c]);
    }
}

int main(void)
{
    CT_RUN(test_sasrec_width);
    CT_RUN(test_odd_width);
    CT_RUN(test_constant_row);
    return 0;
}
