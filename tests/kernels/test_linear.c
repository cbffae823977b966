/*
 * test_linear.c - the sgemm layers (kernels/cpu/linear.c): the linear y = x W^T + b with and
 * without bias, and the attention's packed input projection, both self-attention (one input,
 * one fused sgemm) and the original layout's split form (queries from one input, keys and
 * values from another). Forward against float64 loops; every gradient (inputs, weight, bias)
 * against central finite differences; NULL gradient pointers; the accumulate contract;
 * poisoned outputs.
 *
 * Tolerances: every value is a float dot product of K terms, K up to 50 (SASRec's width; the
 * packed projection's key/value input gradient sums over 2C = 48 outputs; weight gradients sum
 * over N <= 10 rows). With factors in [-1, 1] the partial sums grow to about sqrt(K) / 3 = 2.4,
 * each addition rounds by 6e-8 of that, and K such roundings add up to about
 * sqrt(K) * 1.4e-7 = 1e-6 (we measure below 1e-6). atol = 1e-5 with rtol = 2e-5 leaves a
 * margin of 5 or more; a transposed weight, a wrong leading dimension or a missing bias changes
 * values by order 1.
 */
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

typedef struct lin_case {
    int N, IC, OC, qkv; /* qkv: the packed projection (IC = OC / 3 = C) */
    double *x, *xkv, *w, *b, *out;
    const float *dout;
} lin_case_t;

static double lin_objective(void *p)
{
    lin_case_t *c = p;
    if (c->qkv)
        ref_qkv(c->out, c->x, c->xkv, c->w, c->b, c->N, c->IC);
    else
        ref_linear(c->out, c->x, c->w, c->b, c->N, c->IC, c->OC);
    return kc_dot(c->out, c->dout, (int64_t)c->N * c->OC);
}

static void check_linear(int N, int IC, int OC, int with_bias)
{
    printf("linear N=%d IC=%d OC=%d bias=%d\n", N, IC, OC, with_bias);
    const int64_t ni = (int64_t)N * IC, no = (int64_t)N * OC, nw = (int64_t)OC * IC;
    float *x = KC_ALLOC(float, ni), *w = KC_ALLOC(float, nw), *b = KC_ALLOC(float, OC);
    float *y = KC_ALLOC(float, no), *dy = KC_ALLOC(float, no), *dx = KC_ALLOC(float, ni);
    float *dw = KC_ALLOC(float, nw), *db = KC_ALLOC(float, OC), *dx1 = KC_ALLOC(float, ni);
    float *dw1 = KC_ALLOC(float, nw), *db1 = KC_ALLOC(float, OC);
    double *x64 = KC_ALLOC(double, ni), *w64 = KC_ALLOC(double, nw), *b64 = KC_ALLOC(double, OC);
    double *ref = KC_ALLOC(double, no), *g = KC_ALLOC(double, nw > ni ? nw : ni);
    kc_fill(x, ni, -1.0f, 1.0f, 1);
    kc_fill(w, nw, -1.0f, 1.0f, 2);
    kc_fill(b, OC, -1.0f, 1.0f, 3);
    kc_fill(dy, no, -1.0f, 1.0f, 4);
    kc_poison(y, no);
    ct_linear_forward_cpu(y, x, w, with_bias ? b : NULL, N, IC, OC);
    KC_ASSERT_FINITE(y, no);
    kc_to_double(x64, x, ni);
    kc_to_double(w64, w, nw);
    kc_to_double(b64, b, OC);
    lin_case_t lc = {N, IC, OC, 0, x64, NULL, w64, with_bias ? b64 : NULL, ref, dy};
    lin_objective(&lc);
    kc_check("linear out", y, ref, no, 1e-5, 2e-5);

    ct_linear_backward_cpu(dx, dw, with_bias ? db : NULL, dy, x, w, N, IC, OC);
    lc.out = KC_ALLOC(double, no);
    kc_fd_grad(g, x64, ni, 1e-5, lin_objective, &lc);
    kc_check("d inp vs finite diff", dx, g, ni, 1e-5, 2e-5);
    kc_fd_grad(g, w64, nw, 1e-5, lin_objective, &lc);
    kc_check("d weight vs finite diff", dw, g, nw, 1e-5, 2e-5);
    if (with_bias) {
        kc_fd_grad(g, b64, OC, 1e-5, lin_objective, &lc);
        kc_check("d bias vs finite diff", db, g, OC, 1e-5, 2e-5);
    } else {
        for (int o = 0; o < OC; o++)
            CT_ASSERT(db[o] == 0.0f); /* NULL dbias: nothing written anywhere */
    }

    memcpy(dx1, dx, (size_t)ni * sizeof *dx);
    memcpy(dw1, dw, (size_t)nw * sizeof *dw);
    memcpy(db1, db, (size_t)OC * sizeof *db);
    ct_linear_backward_cpu(dx, dw, with_bias ? db : NULL, dy, x, w, N, IC, OC);
    KC_ASSERT_DOUBLED(dx, dx1, ni);
    KC_ASSERT_DOUBLED(dw, dw1, nw);
    KC_ASSERT_DOUBLED(db, db1, OC);

    /* dinp NULL: the weight gradient alone, the same values again. */
    memset(dw, 0, (size_t)nw * sizeof *dw);
    ct_linear_backward_cpu(NULL, dw, NULL, dy, x, w, N, IC, OC);
    CT_ASSERT(memcmp(dw, dw1, (size_t)nw * sizeof *dw) == 0);

    free(lc.out);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(dx1);
    free(dw1), free(db1), free(x64), free(w64), free(b64), free(ref), free(g);
}

static void test_linear(void)
{
    check_linear(8, 50, 50, 1); /* SASRec's FFN / out_proj shape */
    check_linear(7, 5, 11, 1);
    check_linear(7, 5, 11, 0);
}

/* split = 0: self-attention (xq == xkv, dxq == dxkv); 1: separate inputs and gradients. */
static void check_qkv(int N, int C, int split)
{
    printf("qkv N=%d C=%d split=%d\n", N, C, split);
    const int64_t nx = (int64_t)N * C, nq = (int64_t)N * 3 * C, nw = 3 * (int64_t)C * C;
    float *xq = KC_ALLOC(float, nx), *xkv = KC_ALLOC(float, nx), *w = KC_ALLOC(float, nw);
    float *b = KC_ALLOC(float, 3 * C), *qkv = KC_ALLOC(float, nq), *dqkv = KC_ALLOC(float, nq);
    float *dxq = KC_ALLOC(float, nx), *dxkv = KC_ALLOC(float, nx), *dw = KC_ALLOC(float, nw);
    float *db = KC_ALLOC(float, 3 * C);
    double *xq64 = KC_ALLOC(double, nx), *xkv64 = KC_ALLOC(double, nx);
    double *w64 = KC_ALLOC(double, nw), *b64 = KC_ALLOC(double, 3 * C);
    double *ref = KC_ALLOC(double, nq), *g = KC_ALLOC(double, nw);
    kc_fill(xq, nx, -1.0f, 1.0f, 11);
    kc_fill(xkv, nx, -1.0f, 1.0f, 12);
    kc_fill(w, nw, -1.0f, 1.0f, 13);
    kc_fill(b, 3 * C, -1.0f, 1.0f, 14);
    kc_fill(dqkv, nq, -1.0f, 1.0f, 15);
    const float *kv = split ? xkv : xq;
    kc_poison(qkv, nq);
    ct_qkv_forward_cpu(qkv, xq, kv, w, b, N, C);
    KC_ASSERT_FINITE(qkv, nq);
    kc_to_double(xq64, xq, nx);
    kc_to_double(xkv64, xkv, nx);
    kc_to_double(w64, w, nw);
    kc_to_double(b64, b, 3 * C);
    lin_case_t lc = {N, C, 3 * C, 1, xq64, split ? xkv64 : xq64, w64, b64, ref, dqkv};
    lin_objective(&lc);
    kc_check("qkv out", qkv, ref, nq, 1e-5, 2e-5);

    float *dkv = split ? dxkv : dxq;
    ct_qkv_backward_cpu(dxq, dkv, dw, db, dqkv, xq, kv, w, N, C);
    lc.out = KC_ALLOC(double, nq);
    /* With split = 0 both pointers of the objective are xq64, so moving it moves q, k and v,
     * and dxq must hold the sum of the three paths. */
    kc_fd_grad(g, xq64, nx, 1e-5, lin_objective, &lc);
    kc_check("d xq vs finite diff", dxq, g, nx, 1e-5, 2e-5);
    if (split) {
        kc_fd_grad(g, xkv64, nx, 1e-5, lin_objective, &lc);
        kc_check("d xkv vs finite diff", dxkv, g, nx, 1e-5, 2e-5);
    }
    kc_fd_grad(g, w64, nw, 1e-5, lin_objective, &lc);
    kc_check("d weight vs finite diff", dw, g, nw, 1e-5, 2e-5);
    kc_fd_grad(g, b64, 3 * C, 1e-5, lin_objective, &lc);
    kc_check("d bias vs finite diff", db, g, 3 * C, 1e-5, 2e-5);
    free(lc.out);
    free(xq), free(xkv), free(w), free(b), free(qkv), free(dqkv), free(dxq), free(dxkv), free(dw);
    free(db), free(xq64), free(xkv64), free(w64), free(b64), free(ref), free(g);
}

static void test_qkv(void)
{
    check_qkv(10, 8, 0);
    check_qkv(10, 8, 1);
    check_qkv(6, 24, 1);
}

int main(void)
{
    CT_ASSERT_ERR(ct_cpu_set_threads(0), CT_ERANGE_VALUE);
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_linear);
    CT_RUN(test_qkv);
    return 0;
}
