/*
 * kcheck.h - numerical test helpers for the kernel tests (header-only, static, so that failures
 * report through ct_test.h with the running case's name): seeded random fills, NaN poisoning,
 * central finite differences in double, and llm.c-style comparison that reports the worst
 * element as a percentage of its tolerance.
 *
 * Tolerance rule everywhere: |got - ref| <= atol + rtol * |ref|, ref being the float64 value.
 * Each call site says why its atol and rtol are what they are.
 */
#ifndef KCHECK_H
#define KCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ct_kernels.h"
#include "ct_test.h"

/* x[i] uniform in [lo, hi), from the project's generator (stream chosen by the caller so that
 * every buffer of a test gets different numbers). */
__attribute__((unused)) static void kc_fill(float *x, int64_t n, float lo, float hi,
                                            uint64_t stream)
{
    ct_rng_uniform_cpu(x, n, 0x5eed, stream, 0);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
}

__attribute__((unused)) static void kc_poison(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
}

__attribute__((unused)) static void kc_to_double(double *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i];
}

/* Every element written (no NaN left from poisoning, nothing infinite). */
#define KC_ASSERT_FINITE(x, n)                                                      \
    do {                                                                            \
        for (int64_t kc__i = 0; kc__i < (int64_t)(n); kc__i++)                      \
            CT_ASSERT_MSG(isfinite((x)[kc__i]), "%s[%lld] = %g (not written?)", #x, \
                          (long long)kc__i, (double)(x)[kc__i]);                    \
    } while (0)

/* Compares got (float) with ref (double) element-wise and prints one line:
 *   what: n=.. max|err|=.. worst [i] got .. ref .. = ..% of tolerance
 * Fails the test when the worst element exceeds 100% of its tolerance (or is NaN). Returns the
 * worst percentage so a caller can print or aggregate it. */
__attribute__((unused)) static double kc_check_at(const char *file, int line, const char *what,
                                                  const float *got, const double *ref, int64_t n,
                                                  double atol, double rtol)
{
    double worst = 0.0, max_err = 0.0;
    int64_t wi = -1;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        double tol = atol + rtol * fabs(ref[i]);
        double pct = isnan(err) ? INFINITY : 100.0 * err / tol;
        if (err > max_err || isnan(err))
            max_err = isnan(err) ? INFINITY : err;
        if (wi < 0 || pct > worst) {
            worst = pct;
            wi = i;
        }
    }
    if (wi < 0) {
        printf("  %-28s n=0\n", what);
        return 0.0;
    }
    printf("  %-28s n=%-6lld max|err|=%.2e worst [%lld] got %+.6e ref %+.6e = %5.1f%% of tol\n",
           what, (long long)n, max_err, (long long)wi, (double)got[wi], ref[wi], worst);
    if (!(worst <= 100.0))
        ct_test__fail(file, line,
                      "%s: element %lld got %.9g, ref %.9g, %.1f%% of tolerance "
                      "(atol %.1e, rtol %.1e)",
                      what, (long long)wi, (double)got[wi], ref[wi], worst, atol, rtol);
    return worst;
}
#define kc_check(what, got, ref, n, atol, rtol) \
    kc_check_at(__FILE__, __LINE__, what, got, ref, n, atol, rtol)

/* Central finite differences of a scalar function J of x (double), for every i in [0, n):
 * grad[i] = (J(x + h e_i) - J(x - h e_i)) / 2h. x is restored exactly after each element.
 * With inputs of order 1 and h = 1e-5 the truncation error (h^2 |J'''| / 6) and the rounding
 * error (1e-16 |J| / h) are both around 1e-9, far below the float errors under test. */
typedef double (*kc_objective_fn)(void *ctx);
__attribute__((unused)) static void kc_fd_grad(double *grad, double *x, int64_t n, double h,
                                               kc_objective_fn J, void *ctx)
{
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double jp = J(ctx);
        x[i] = x0 - h;
        double jm = J(ctx);
        x[i] = x0;
        grad[i] = (jp - jm) / (2.0 * h);
    }
}

/* sum_i w[i] * y[i]: the objective whose gradient w.r.t. y is w (the upstream gradient). */
__attribute__((unused)) static double kc_dot(const double *y, const float *w, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += y[i] * (double)w[i];
    return s;
}

/* The accumulate (+=) contract of a backward: called a second time on the same inputs it must
 * add the same values again, so every element becomes twice the first result. Not bit-exact:
 * a reduction inside the op (over rows, over attention tiles) adds its terms one by one to the
 * running total, which rounds differently from doubling the finished sum; 1e-5 of the largest
 * element allows for that (float rounding is 6e-8 per addition), while an op that overwrites
 * would leave elements at 1x, off by 100%. */
__attribute__((unused)) static void kc_assert_doubled_at(const char *file, int line,
                                                         const char *what, const float *second,
                                                         const float *first, int64_t n)
{
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)first[i]));
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)second[i] - 2.0 * (double)first[i]);
        if (!(err <= 1e-5 * mx))
            ct_test__fail(file, line, "%s[%lld] = %.9g after two calls, %.9g after one (not +=?)",
                          what, (long long)i, (double)second[i], (double)first[i]);
    }
}
#define KC_ASSERT_DOUBLED(second, first, n) \
    kc_assert_doubled_at(__FILE__, __LINE__, #second, second, first, n)

#define KC_ALLOC(type, n) kc_alloc_at(__FILE__, __LINE__, sizeof(type), (size_t)(n))
__attribute__((unused)) static void *kc_alloc_at(const char *file, int line, size_t size, size_t n)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        ct_test__fail(file, line, "out of memory (%zu x %zu bytes)", n, size);
    return p;
}

#endif /* KCHECK_H */
