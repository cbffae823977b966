/*
 * test_mhc.c - the mHC ops (kernels/cpu/mhc.c):
 *   - Sinkhorn-Knopp: the output is doubly stochastic (non-negative, columns summing to 1 to
 *     rounding, rows to within the method's convergence after 20 iterations), equals the
 *     float64 reference, and its backward through all iterations matches central finite
 *     differences (also for 1 iteration and n = 3);
 *   - the per-token mappings H^pre, H^post, H^res (RMSNorm, projection, gates, biases,
 *     sigmoid / 2 sigmoid / Sinkhorn): forward against the reference, backward for X, phi,
 *     alpha and the biases against finite differences, an all-zero token (a padding row after
 *     the timeline mask) included;
 *   - the stream mixing before and after a sub-layer, and the expansion / average at the ends:
 *     forward against the reference, backward against finite differences;
 *   - the accumulate (+=) contract of every backward.
 *
 * Tolerances (atol + rtol |ref|): 20 Sinkhorn iterations are 40 divisions by sums of n = 4
 * terms, each rounding at 6e-8 relative, so float results stay within ~40 * 4 * 6e-8 = 1e-5
 * relative at the very worst and measure a few 1e-7; the mixing ops are sums of n products.
 * atol 2e-6, rtol 2e-5 throughout (as for the other kernels), while the mistakes this test is
 * for (a transposed H^res, a missing row or column step, a gate applied to the wrong block of
 * the projection, the RMS path of the gradient left out) move values by 1e-2 or more. The
 * doubly-stochastic check allows 1e-5 on the row sums (convergence, measured ~1e-7 here) and
 * 2e-6 on the column sums (normalised last: rounding only).
 */
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

#define ITERS 20

/* ---- Sinkhorn ------------------------------------------------------------------------------- */

typedef struct sk_case {
    int M, n, iters;
    double *z, *out;
    const float *w;
} sk_case_t;

static double sk_objective(void *p)
{
    sk_case_t *s = p;
    const int nn = s->n * s->n;
    for (int r = 0; r < s->M; r++)
        ref_sinkhorn(s->out + r * nn, s->z + r * nn, s->n, s->iters);
    return kc_dot(s->out, s->w, (int64_t)s->M * nn);
}

static void check_sinkhorn(int M, int n, int iters, float spread, uint64_t stream)
{
    printf("sinkhorn M=%d n=%d iters=%d logits in +-%.1f\n", M, n, iters, (double)spread);
    const int64_t cnt = (int64_t)M * n * n;
    float *z = KC_ALLOC(float, cnt), *out = KC_ALLOC(float, cnt), *w = KC_ALLOC(float, cnt);
    float *dz = KC_ALLOC(float, cnt), *dz1 = KC_ALLOC(float, cnt);
    float *scr = KC_ALLOC(float, CT_SINKHORN_BWD_SCRATCH(n, iters));
    kc_fill(z, cnt, -spread, spread, stream);
    kc_fill(w, cnt, -1.0f, 1.0f, stream + 1);
    kc_poison(out, cnt);
    ct_sinkhorn_forward_cpu(out, z, M, n, iters);
    KC_ASSERT_FINITE(out, cnt);
    if (iters >= 20) {
        double worst_r = 0.0, worst_c = 0.0;
        for (int r = 0; r < M; r++) {
            const float *m = out + (size_t)r * n * n;
            for (int i = 0; i < n; i++) {
                double rs = 0.0, cs = 0.0;
                for (int j = 0; j < n; j++) {
                    CT_ASSERT(m[i * n + j] >= 0.0f);
                    rs += m[i * n + j];
                    cs += m[j * n + i];
                }
                worst_r = fmax(worst_r, fabs(rs - 1.0));
                worst_c = fmax(worst_c, fabs(cs - 1.0));
            }
        }
        printf("  doubly stochastic: max |row sum - 1| %.2e, max |column sum - 1| %.2e\n", worst_r,
               worst_c);
        CT_ASSERT_MSG(worst_r <= 1e-5, "row sums off by %g", worst_r);
        CT_ASSERT_MSG(worst_c <= 2e-6, "column sums off by %g", worst_c);
    }
    sk_case_t sc = {M, n, iters, KC_ALLOC(double, cnt), KC_ALLOC(double, cnt), w};
    kc_to_double(sc.z, z, cnt);
    double *ref = KC_ALLOC(double, cnt), *g = KC_ALLOC(double, cnt);
    for (int r = 0; r < M; r++)
        ref_sinkhorn(ref + (size_t)r * n * n, sc.z + (size_t)r * n * n, n, iters);
    kc_check("sinkhorn out", out, ref, cnt, 2e-6, 2e-5);
    ct_sinkhorn_backward_cpu(dz, scr, w, z, M, n, iters);
    kc_fd_grad(g, sc.z, cnt, 1e-5, sk_objective, &sc);
    kc_check("d logits vs finite diff", dz, g, cnt, 2e-6, 2e-5);
    memcpy(dz1, dz, (size_t)cnt * sizeof *dz);
    ct_sinkhorn_backward_cpu(dz, scr, w, z, M, n, iters);
    KC_ASSERT_DOUBLED(dz, dz1, cnt);
    free(z), free(out), free(w), free(dz), free(dz1), free(scr), free(sc.z), free(sc.out);
    free(ref), free(g);
}

static void test_sinkhorn(void)
{
    check_sinkhorn(6, 4, ITERS, 2.0f, 10);
    check_sinkhorn(3, 3, ITERS, 1.0f, 20);
    check_sinkhorn(4, 4, 1, 2.0f, 30);
    /* mHC's starting point: diagonal 0, off-diagonal -8 plus a little */
    enum { n = 4 };
    float z[n * n], out[n * n];
    for (int i = 0; i < n * n; i++)
        z[i] = i % (n + 1) == 0 ? 0.0f : -8.0f + 0.01f * (float)i;
    ct_sinkhorn_forward_cpu(out, z, 1, n, ITERS);
    for (int i = 0; i < n; i++)
        CT_ASSERT_MSG(out[i * n + i] > 0.998f, "H^res[%d][%d] = %g at initialisation", i, i,
                      (double)out[i * n + i]);
}

/* ---- the mappings -----------------------------------------------------------------------------
 */

enum { CN = 5, CS = 4, CC = 3, CD = CS * CC, CK = CT_MHC_COEFFS(CS) };
#define EPS 1e-6f

typedef struct co_case {
    double *X, *phi, *alpha, *bias;
    double *hpre, *hpost, *hres;
    const float *wpre, *wpost, *wres;
} co_case_t;

static double co_objective(void *p)
{
    co_case_t *c = p;
    ref_mhc_coeffs(c->hpre, c->hpost, c->hres, c->X, c->phi, c->alpha, c->bias, CN, CS, CC, ITERS,
                   (double)EPS);
    return kc_dot(c->hpre, c->wpre, CN * CS) + kc_dot(c->hpost, c->wpost, CN * CS) +
           kc_dot(c->hres, c->wres, CN * CS * CS);
}

static void test_coeffs(void)
{
    float X[CN * CD], phi[CD * CK], alpha[3] = {0.7f, -0.4f, 0.9f}, bias[CK];
    float hpre[CN * CS], hpost[CN * CS], hres[CN * CS * CS], proj[CN * CK], rstd[CN];
    float wpre[CN * CS], wpost[CN * CS], wres[CN * CS * CS];
    float dX[CN * CD] = {0}, dphi[CD * CK] = {0}, dalpha[3] = {0}, dbias[CK] = {0};
    float *scr = KC_ALLOC(float, CT_MHC_COEFFS_BWD_SCRATCH(CN, CS, ITERS));
    kc_fill(X, CN * CD, -1.0f, 1.0f, 40);
    memset(X + 2 * CD, 0, CD * sizeof *X); /* a padding token */
    kc_fill(phi, CD * CK, -0.5f, 0.5f, 41);
    kc_fill(bias, CK, -1.0f, 1.0f, 42);
    kc_fill(wpre, CN * CS, -1.0f, 1.0f, 43);
    kc_fill(wpost, CN * CS, -1.0f, 1.0f, 44);
    kc_fill(wres, CN * CS * CS, -1.0f, 1.0f, 45);
    kc_poison(hpre, CN * CS), kc_poison(hpost, CN * CS), kc_poison(hres, CN * CS * CS);
    ct_mhc_coeffs_forward_cpu(hpre, hpost, hres, proj, rstd, X, phi, alpha, bias, CN, CS, CC, ITERS,
                              EPS);
    KC_ASSERT_FINITE(hres, CN * CS * CS);
    co_case_t c = {KC_ALLOC(double, CN *CD),
                   KC_ALLOC(double, CD *CK),
                   KC_ALLOC(double, 3),
                   KC_ALLOC(double, CK),
                   KC_ALLOC(double, CN *CS),
                   KC_ALLOC(double, CN *CS),
                   KC_ALLOC(double, CN *CS *CS),
                   wpre,
                   wpost,
                   wres};
    kc_to_double(c.X, X, CN * CD), kc_to_double(c.phi, phi, CD * CK);
    kc_to_double(c.alpha, alpha, 3), kc_to_double(c.bias, bias, CK);
    co_objective(&c);
    kc_check("hpre", hpre, c.hpre, CN * CS, 2e-6, 2e-5);
    kc_check("hpost", hpost, c.hpost, CN * CS, 2e-6, 2e-5);
    kc_check("hres", hres, c.hres, CN * CS * CS, 2e-6, 2e-5);

    ct_mhc_coeffs_backward_cpu(dX, dphi, dalpha, dbias, scr, wpre, wpost, wres, X, phi, alpha, bias,
                               proj, rstd, CN, CS, CC, ITERS);
    double g[CD * CK];
    kc_fd_grad(g, c.X, CN * CD, 1e-5, co_objective, &c);
    kc_check("d X vs finite diff", dX, g, CN * CD, 2e-6, 2e-5);
    kc_fd_grad(g, c.phi, CD * CK, 1e-5, co_objective, &c);
    kc_check("d phi vs finite diff", dphi, g, CD * CK, 2e-6, 2e-5);
    kc_fd_grad(g, c.alpha, 3, 1e-5, co_objective, &c);
    kc_check("d alpha vs finite diff", dalpha, g, 3, 2e-6, 2e-5);
    kc_fd_grad(g, c.bias, CK, 1e-5, co_objective, &c);
    kc_check("d bias vs finite diff", dbias, g, CK, 2e-6, 2e-5);

    float dX1[CN * CD], dphi1[CD * CK];
    memcpy(dX1, dX, sizeof dX), memcpy(dphi1, dphi, sizeof dphi);
    ct_mhc_coeffs_backward_cpu(dX, dphi, dalpha, dbias, scr, wpre, wpost, wres, X, phi, alpha, bias,
                               proj, rstd, CN, CS, CC, ITERS);
    KC_ASSERT_DOUBLED(dX, dX1, CN * CD);
    KC_ASSERT_DOUBLED(dphi, dphi1, CD * CK);
    free(scr), free(c.X), free(c.phi), free(c.alpha), free(c.bias), free(c.hpre), free(c.hpost);
    free(c.hres);
}

/* ---- mixing -----------------------------------------------------------------------------------
 */

enum { MN = 4, MS = 3, MC = 5 };

typedef struct mix_case {
    double *X, *f, *h, *hp; /* X (N,n,C), f (N,C), h = hpre (N,n) or hres (N,n,n), hp (N,n) */
    double *y;
    const float *w;
    int post;
} mix_case_t;

static double mix_objective(void *p)
{
    mix_case_t *m = p;
    if (m->post) {
        ref_mhc_post(m->y, m->X, m->f, m->h, m->hp, MN, MS, MC);
        return kc_dot(m->y, m->w, MN * MS * MC);
    }
    ref_mhc_pre(m->y, m->X, m->h, MN, MS, MC);
    return kc_dot(m->y, m->w, MN * MC);
}

static void test_mixing(void)
{
    float X[MN * MS * MC], f[MN * MC], hpre[MN * MS], hres[MN * MS * MS], hpost[MN * MS];
    float u[MN * MC], Y[MN * MS * MC], wu[MN * MC], wy[MN * MS * MC];
    kc_fill(X, MN * MS * MC, -1.0f, 1.0f, 50);
    kc_fill(f, MN * MC, -1.0f, 1.0f, 51);
    kc_fill(hpre, MN * MS, 0.0f, 1.0f, 52);
    kc_fill(hres, MN * MS * MS, 0.0f, 1.0f, 53);
    kc_fill(hpost, MN * MS, 0.0f, 2.0f, 54);
    kc_fill(wu, MN * MC, -1.0f, 1.0f, 55);
    kc_fill(wy, MN * MS * MC, -1.0f, 1.0f, 56);
    mix_case_t m = {KC_ALLOC(double, MN *MS *MC),
                    KC_ALLOC(double, MN *MC),
                    KC_ALLOC(double, MN *MS *MS),
                    KC_ALLOC(double, MN *MS),
                    KC_ALLOC(double, MN *MS *MC),
                    wu,
                    0};
    double g[MN * MS * MS * MC];

    /* pre */
    kc_poison(u, MN * MC);
    ct_mhc_pre_forward_cpu(u, X, hpre, MN, MS, MC);
    kc_to_double(m.X, X, MN * MS * MC), kc_to_double(m.h, hpre, MN * MS);
    mix_objective(&m);
    kc_check("pre: u", u, m.y, MN * MC, 2e-6, 2e-5);
    float dX[MN * MS * MC] = {0}, dh[MN * MS * MS] = {0}, df[MN * MC] = {0}, dhp[MN * MS] = {0};
    ct_mhc_pre_backward_cpu(dX, dh, wu, X, hpre, MN, MS, MC);
    kc_fd_grad(g, m.X, MN * MS * MC, 1e-5, mix_objective, &m);
    kc_check("pre: d X", dX, g, MN * MS * MC, 2e-6, 2e-5);
    kc_fd_grad(g, m.h, MN * MS, 1e-5, mix_objective, &m);
    kc_check("pre: d hpre", dh, g, MN * MS, 2e-6, 2e-5);

    /* post */
    memset(dX, 0, sizeof dX), memset(dh, 0, sizeof dh);
    m.post = 1, m.w = wy;
    kc_poison(Y, MN * MS * MC);
    ct_mhc_post_forward_cpu(Y, X, f, hres, hpost, MN, MS, MC);
    kc_to_double(m.f, f, MN * MC), kc_to_double(m.h, hres, MN * MS * MS);
    kc_to_double(m.hp, hpost, MN * MS);
    mix_objective(&m);
    kc_check("post: Y", Y, m.y, MN * MS * MC, 2e-6, 2e-5);
    ct_mhc_post_backward_cpu(dX, df, dh, dhp, wy, X, f, hres, hpost, MN, MS, MC);
    kc_fd_grad(g, m.X, MN * MS * MC, 1e-5, mix_objective, &m);
    kc_check("post: d X", dX, g, MN * MS * MC, 2e-6, 2e-5);
    kc_fd_grad(g, m.f, MN * MC, 1e-5, mix_objective, &m);
    kc_check("post: d f", df, g, MN * MC, 2e-6, 2e-5);
    kc_fd_grad(g, m.h, MN * MS * MS, 1e-5, mix_objective, &m);
    kc_check("post: d hres", dh, g, MN * MS * MS, 2e-6, 2e-5);
    kc_fd_grad(g, m.hp, MN * MS, 1e-5, mix_objective, &m);
    kc_check("post: d hpost", dhp, g, MN * MS, 2e-6, 2e-5);
    float dX1[MN * MS * MC], df1[MN * MC];
    memcpy(dX1, dX, sizeof dX), memcpy(df1, df, sizeof df);
    ct_mhc_post_backward_cpu(dX, df, dh, dhp, wy, X, f, hres, hpost, MN, MS, MC);
    KC_ASSERT_DOUBLED(dX, dX1, MN * MS * MC);
    KC_ASSERT_DOUBLED(df, df1, MN * MC);

    /* the ends: expansion then average is the identity; their backwards are each other */
    float x[MN * MC], back[MN * MC], E[MN * MS * MC], dx[MN * MC] = {0}, dE[MN * MS * MC] = {0};
    kc_fill(x, MN * MC, -1.0f, 1.0f, 57);
    ct_mhc_expand_forward_cpu(E, x, MN, MS, MC);
    for (int r = 0; r < MN; r++)
        for (int s = 0; s < MS; s++)
            CT_ASSERT(memcmp(E + (r * MS + s) * MC, x + r * MC, MC * sizeof *x) == 0);
    ct_mhc_collapse_forward_cpu(back, X, MN, MS, MC);
    for (int r = 0; r < MN; r++)
        for (int c = 0; c < MC; c++) {
            double s = 0.0;
            for (int t = 0; t < MS; t++)
                s += X[(r * MS + t) * MC + c];
            CT_ASSERT_CLOSE(back[r * MC + c], s / MS, 1e-6, 1e-6);
        }
    ct_mhc_expand_backward_cpu(dx, wy, MN, MS, MC);
    ct_mhc_collapse_backward_cpu(dE, wu, MN, MS, MC);
    for (int r = 0; r < MN; r++)
        for (int c = 0; c < MC; c++) {
            double s = 0.0;
            for (int t = 0; t < MS; t++) {
                s += wy[(r * MS + t) * MC + c];
                CT_ASSERT_CLOSE(dE[(r * MS + t) * MC + c], wu[r * MC + c] / (double)MS, 1e-7, 1e-6);
            }
            CT_ASSERT_CLOSE(dx[r * MC + c], s, 1e-6, 1e-6);
        }
    free(m.X), free(m.f), free(m.h), free(m.hp), free(m.y);
}

int main(void)
{
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_sinkhorn);
    CT_RUN(test_coeffs);
    CT_RUN(test_mixing);
    return 0;
}
