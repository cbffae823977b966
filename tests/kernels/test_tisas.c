/*
 * test_tisas.c - TiSASRec's time-aware attention (kernels/cpu/tisas.c) against the float64
 * reference that builds what TiSASRec.pytorch builds - the (B,L,L,C) interval key and value
 * tensors, materialised, each element with its own dropout factor, padding query rows with
 * uniform weights - with every dropout on and off:
 *   - forward: real query rows equal the reference, padding rows (qmask = seq) are zero, att
 *     rows are probabilities;
 *   - backward: d q, d k, d v, d R^K, d R^V against central finite differences of the
 *     reference (objective sum w . out over the real rows: what the op's contract says a
 *     skipped row's gradient is), and the accumulate (+=) contract;
 *   - skipping: the rows qmask keeps, and every gradient, are bit-for-bit what qmask = NULL
 *     gives when the skipped rows' upstream gradient is zero;
 *   - the interval masks (ct_tisas_mask_cpu): every bit of the rows computed is the reference's
 *     per-element rule, at offsets where the vector paths apply and where they do not;
 *   - the intervals: clipped at T, padding (time 0) against real items included.
 * Sizes: one partial tile (L = 7, 2 heads), and two tiles with a ragged end (L = 27).
 *
 * Tolerances (atol + rtol |ref|): the op is float32 with sums of at most L products of order
 * 1 per logit and per output (softmax of logits of a few units, interval rows of size <= 1),
 * so rounding stays near sqrt(L) * 6e-8 ~ 4e-7; measured at most a few 1e-7. atol 2e-6, rtol
 * 2e-5 as for plain attention (test_attention.c), where every mistake this test is for (a
 * wrong interval row, a mask element keyed wrongly, a missing term) moves values by 1e-2 or
 * more. Finite differences in double are accurate to ~1e-9.
 */
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

typedef struct tcase {
    int B, L, C, NH, T;
    const int64_t *ts;
    const int32_t *seq;
    ct_dropout_t da, dk, dv;
    double *q, *k, *v, *rk, *rv; /* the point finite differences move */
    double *out;
    const float *w; /* upstream gradient, zero on padding rows */
} tcase_t;

static double objective(void *p)
{
    tcase_t *t = p;
    ref_tisas_attention(t->out, t->q, t->k, t->v, t->rk, t->rv, t->ts, t->seq, t->B, t->L, t->C,
                        t->NH, t->T, t->da, t->dk, t->dv);
    return kc_dot(t->out, t->w, (int64_t)t->B * t->L * t->C);
}

static void check_case(int B, int L, int C, int NH, int T, float p, const int32_t *seq,
                       const int64_t *ts, uint64_t stream)
{
    printf("case B=%d L=%d C=%d NH=%d T=%d p=%.2f\n", B, L, C, NH, T, p);
    const int64_t nx = (int64_t)B * L * C, nr = (int64_t)(T + 1) * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    ct_dropout_t da = {p, 1234, 77, 5}, dk = {p, 1234, 78, 11}, dv = {p, 1234, 79, 3};
    /* the interval masks as bits, for the rows the op computes; checked against the reference's
     * per-element rule */
    const size_t W = CT_TISAS_MASK_WORDS(L, C);
    uint32_t *mk = KC_ALLOC(uint32_t, (size_t)B * L * W),
             *mv = KC_ALLOC(uint32_t, (size_t)B * L * W);
    ct_tisas_mask_cpu(mk, seq, B, L, C, dk);
    ct_tisas_mask_cpu(mv, seq, B, L, C, dv);
    int64_t kept = 0, total = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            if (seq[b * L + i] == 0)
                continue;
            for (int j = 0; j <= i; j++)
                for (int c = 0; c < C; c++) {
                    uint64_t e = (((uint64_t)b * L + i) * L + j) * C + c, bit = (uint64_t)j * C + c;
                    const uint32_t *rk_row = mk + ((size_t)b * L + i) * W;
                    const uint32_t *rv_row = mv + ((size_t)b * L + i) * W;
                    int kk = (rk_row[bit / 32] >> (bit % 32)) & 1,
                        kv = (rv_row[bit / 32] >> (bit % 32)) & 1;
                    CT_ASSERT_MSG(kk == (ref_dropout_factor(dk, e) != 0.0), "R^K mask bit %llu",
                                  (unsigned long long)e);
                    CT_ASSERT_MSG(kv == (ref_dropout_factor(dv, e) != 0.0), "R^V mask bit %llu",
                                  (unsigned long long)e);
                    kept += kk, total++;
                }
        }
    if (p > 0)
        printf("  interval masks: %lld of %lld elements kept (p = %.2f), bits equal the reference "
               "rule\n",
               (long long)kept, (long long)total, (double)p);
    const uint32_t *mkp = p > 0 ? mk : NULL, *mvp = p > 0 ? mv : NULL;
    float *q = KC_ALLOC(float, nx), *k = KC_ALLOC(float, nx), *v = KC_ALLOC(float, nx);
    float *rk = KC_ALLOC(float, nr), *rv = KC_ALLOC(float, nr);
    float *out = KC_ALLOC(float, nx), *att = KC_ALLOC(float, natt), *dout = KC_ALLOC(float, nx);
    float *dq = KC_ALLOC(float, nx), *dkk = KC_ALLOC(float, nx), *dvv = KC_ALLOC(float, nx);
    float *drk = KC_ALLOC(float, nr), *drv = KC_ALLOC(float, nr);
    float *fs = KC_ALLOC(float, CT_TISAS_ATTENTION_FWD_SCRATCH(L, C));
    float *bs = KC_ALLOC(float, CT_TISAS_ATTENTION_BWD_SCRATCH(L, C));
    kc_fill(q, nx, -1.5f, 1.5f, stream);
    kc_fill(k, nx, -1.0f, 1.0f, stream + 1);
    kc_fill(v, nx, -1.0f, 1.0f, stream + 2);
    kc_fill(rk, nr, -1.0f, 1.0f, stream + 3);
    kc_fill(rv, nr, -1.0f, 1.0f, stream + 4);
    kc_fill(dout, nx, -1.0f, 1.0f, stream + 5);
    kc_poison(out, nx);
    kc_poison(att, natt);
    kc_poison(fs, (int64_t)CT_TISAS_ATTENTION_FWD_SCRATCH(L, C));
    kc_poison(bs, (int64_t)CT_TISAS_ATTENTION_BWD_SCRATCH(L, C));
    ct_tisas_attention_forward_cpu(out, att, fs, q, k, v, rk, rv, ts, seq, B, L, C, NH, T, da, mkp,
                                   mvp, p);
    KC_ASSERT_FINITE(out, nx);
    KC_ASSERT_FINITE(att, natt);

    tcase_t tc = {.B = B,
                  .L = L,
                  .C = C,
                  .NH = NH,
                  .T = T,
                  .ts = ts,
                  .seq = seq,
                  .da = da,
                  .dk = dk,
                  .dv = dv};
    tc.q = KC_ALLOC(double, nx), tc.k = KC_ALLOC(double, nx), tc.v = KC_ALLOC(double, nx);
    tc.rk = KC_ALLOC(double, nr), tc.rv = KC_ALLOC(double, nr), tc.out = KC_ALLOC(double, nx);
    kc_to_double(tc.q, q, nx), kc_to_double(tc.k, k, nx), kc_to_double(tc.v, v, nx);
    kc_to_double(tc.rk, rk, nr), kc_to_double(tc.rv, rv, nr);
    ref_tisas_attention(tc.out, tc.q, tc.k, tc.v, tc.rk, tc.rv, ts, seq, B, L, C, NH, T, da, dk,
                        dv);

    /* real rows against the reference, padding rows zero; probabilities */
    float *got = KC_ALLOC(float, nx);
    double *want = KC_ALLOC(double, nx);
    int64_t nreal = 0;
    for (int64_t r = 0; r < (int64_t)B * L; r++) {
        if (seq[r] == 0) {
            for (int c = 0; c < C; c++)
                CT_ASSERT(out[r * C + c] == 0.0f);
            continue;
        }
        memcpy(got + nreal * C, out + r * C, (size_t)C * sizeof *got);
        memcpy(want + nreal * C, tc.out + r * C, (size_t)C * sizeof *want);
        nreal++;
    }
    kc_check("out (real rows)", got, want, nreal * C, 2e-6, 2e-5);
    for (int64_t r = 0; r < (int64_t)B * NH * L; r++) {
        int b = (int)(r / ((int64_t)NH * L)), i = (int)(r % L);
        double s = 0.0;
        for (int j = 0; j < L; j++) {
            CT_ASSERT(att[r * L + j] >= 0.0f);
            if (j > i)
                CT_ASSERT(att[r * L + j] == 0.0f);
            s += att[r * L + j];
        }
        CT_ASSERT_CLOSE(s, seq[b * L + i] != 0 ? 1.0 : 0.0, 1e-5, 0);
    }

    /* backward against finite differences of the reference, upstream zero on padding rows */
    float *w = KC_ALLOC(float, nx);
    memcpy(w, dout, (size_t)nx * sizeof *w);
    for (int64_t r = 0; r < (int64_t)B * L; r++)
        if (seq[r] == 0)
            memset(w + r * C, 0, (size_t)C * sizeof *w);
    tc.w = w;
    ct_tisas_attention_backward_cpu(dq, dkk, dvv, drk, drv, bs, dout, att, q, k, v, rk, rv, ts, seq,
                                    B, L, C, NH, T, da, mkp, mvp, p);
    double *g = KC_ALLOC(double, nx > nr ? nx : nr);
    kc_fd_grad(g, tc.q, nx, 1e-5, objective, &tc);
    kc_check("d q vs finite diff", dq, g, nx, 2e-6, 2e-5);
    kc_fd_grad(g, tc.k, nx, 1e-5, objective, &tc);
    kc_check("d k vs finite diff", dkk, g, nx, 2e-6, 2e-5);
    kc_fd_grad(g, tc.v, nx, 1e-5, objective, &tc);
    kc_check("d v vs finite diff", dvv, g, nx, 2e-6, 2e-5);
    kc_fd_grad(g, tc.rk, nr, 1e-5, objective, &tc);
    kc_check("d R^K vs finite diff", drk, g, nr, 2e-6, 2e-5);
    kc_fd_grad(g, tc.rv, nr, 1e-5, objective, &tc);
    kc_check("d R^V vs finite diff", drv, g, nr, 2e-6, 2e-5);

    /* += */
    float *c1 = KC_ALLOC(float, nx), *c2 = KC_ALLOC(float, nr);
    memcpy(c1, dq, (size_t)nx * sizeof *c1);
    memcpy(c2, drv, (size_t)nr * sizeof *c2);
    ct_tisas_attention_backward_cpu(dq, dkk, dvv, drk, drv, bs, dout, att, q, k, v, rk, rv, ts, seq,
                                    B, L, C, NH, T, da, mkp, mvp, p);
    KC_ASSERT_DOUBLED(dq, c1, nx);
    KC_ASSERT_DOUBLED(drv, c2, nr);

    /* skipping: qmask = seq against qmask = NULL with zero upstream on the skipped rows (the
     * masks of every row, then) */
    ct_tisas_mask_cpu(mk, NULL, B, L, C, dk);
    ct_tisas_mask_cpu(mv, NULL, B, L, C, dv);
    float *o1 = KC_ALLOC(float, nx), *a1 = KC_ALLOC(float, natt);
    float *e[5], *f[5];
    int64_t ne[5] = {nx, nx, nx, nr, nr};
    for (int x = 0; x < 5; x++)
        e[x] = KC_ALLOC(float, ne[x]), f[x] = KC_ALLOC(float, ne[x]);
    ct_tisas_attention_forward_cpu(o1, a1, fs, q, k, v, rk, rv, ts, NULL, B, L, C, NH, T, da, mkp,
                                   mvp, p);
    for (int64_t r = 0; r < (int64_t)B * L; r++)
        if (seq[r] != 0)
            for (int c = 0; c < C; c++)
                CT_ASSERT_MSG(o1[r * C + c] == out[r * C + c], "row %lld differs without qmask",
                              (long long)r);
    ct_tisas_attention_backward_cpu(e[0], e[1], e[2], e[3], e[4], bs, w, a1, q, k, v, rk, rv, ts,
                                    NULL, B, L, C, NH, T, da, mkp, mvp, p);
    ct_tisas_attention_backward_cpu(f[0], f[1], f[2], f[3], f[4], bs, dout, att, q, k, v, rk, rv,
                                    ts, seq, B, L, C, NH, T, da, mkp, mvp, p);
    for (int x = 0; x < 5; x++)
        for (int64_t i = 0; i < ne[x]; i++)
            CT_ASSERT_MSG(e[x][i] == f[x][i], "gradient %d[%lld]: %.9g without skipping, %.9g with",
                          x, (long long)i, (double)e[x][i], (double)f[x][i]);
    printf("  skipping padding queries: used rows and all gradients identical\n");

    for (int x = 0; x < 5; x++)
        free(e[x]), free(f[x]);
    free(o1), free(a1), free(c1), free(c2), free(g), free(w), free(got), free(want), free(mk);
    free(mv);
    free(tc.q), free(tc.k), free(tc.v), free(tc.rk), free(tc.rv), free(tc.out);
    free(q), free(k), free(v), free(rk), free(rv), free(out), free(att), free(dout), free(dq);
    free(dkk), free(dvv), free(drk), free(drv), free(fs), free(bs);
}

static void test_small(void)
{
    enum { B = 2, L = 7 };
    /* row 0: three padding columns (time 0), gaps of 0..9 units; row 1: full, with an interval
     * past T (clipped) and repeated times (interval 0) */
    const int32_t seq[B * L] = {0, 0, 0, 4, 9, 2, 7, 3, 1, 8, 6, 5, 2, 9};
    const int64_t ts[B * L] = {0, 0, 0, 1, 2, 4, 11, 1, 1, 3, 30, 31, 31, 40};
    check_case(B, L, 6, 2, 5, 0.0f, seq, ts, 10);
    check_case(B, L, 6, 2, 5, 0.3f, seq, ts, 20);
    check_case(B, L, 8, 1, 12, 0.2f, seq, ts, 30);
}

static void test_tiles(void)
{
    enum { B = 2, L = 27 };
    int32_t seq[B * L];
    int64_t ts[B * L];
    for (int t = 0; t < L; t++) {
        seq[t] = t >= 24 ? t : 0; /* tile 0 all padding, tile 1 real */
        ts[t] = t >= 24 ? 1 + (t - 24) * 3 : 0;
        seq[L + t] = 1 + t % 9;
        ts[L + t] = 1 + (t * t) % 50;
    }
    check_case(B, L, 4, 1, 40, 0.25f, seq, ts, 40);
}

int main(void)
{
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_small);
    CT_RUN(test_tiles);
    return 0;
}
