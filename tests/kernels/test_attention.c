/*
 * test_attention.c - causal multi-head attention (kernels/cpu/attention.c): the forward against
 * the naive float64 reference (with and without probability dropout), the backward against
 * central finite differences of that reference, the accumulate contract, and the padding-skip
 * contract of ct_kernels.h: rows that are not skipped, and every gradient, bit-for-bit what no
 * skipping gives. Sizes cover one partial tile (L = 5), several tiles with a ragged end (L = 37,
 * 70) and 1 to 3 heads.
 *
 * Tolerances (|got - ref| <= atol + rtol |ref|): float32 rounds at 6e-8 relative. An output
 * here is a sum of at most 70 probability-weighted values of size <= 1.5, after a softmax over
 * at most 70 logits of a few units: the errors of its ~70 roundings add up to about
 * sqrt(70) * 6e-8 * 1.5 = 8e-7 typically and 70 * 6e-8 * 1.5 = 6e-6 at the very worst; we
 * measure at most 2e-7. atol = 2e-6 with rtol = 2e-5 covers the typical case 2.5 times over,
 * and every error this test exists to catch (a wrong mask, scale, index or dropout element)
 * moves values by 1e-3 or more. The gradients chain three such products (dP = dO V^T, the
 * softmax backward, dS K) and are compared with finite differences accurate to ~1e-9
 * (kcheck.h); they are of order 1 like the outputs and measure at most 4e-7 off, so the same
 * tolerances hold.
 */
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

typedef struct att_case {
    int B, L, C, NH;
    ct_dropout_t drop;
    double *qkv64;  /* (B,L,3C) the point finite differences move */
    double *out64;  /* (B,L,C) scratch for the reference */
    const float *w; /* (B,L,C) upstream gradient = weights of the objective */
} att_case_t;

static double att_objective(void *p)
{
    att_case_t *a = p;
    ref_attention(a->out64, a->qkv64, a->B, a->L, a->C, a->NH, a->drop);
    return kc_dot(a->out64, a->w, (int64_t)a->B * a->L * a->C);
}

static void check_case(int B, int L, int C, int NH, float p, uint64_t stream)
{
    printf("case B=%d L=%d C=%d NH=%d p=%.2f\n", B, L, C, NH, p);
    const int64_t nqkv = (int64_t)B * L * 3 * C, nout = (int64_t)B * L * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    ct_dropout_t drop = {p, 1234, 77, 5};
    float *qkv = KC_ALLOC(float, nqkv), *out = KC_ALLOC(float, nout), *att = KC_ALLOC(float, natt);
    float *dout = KC_ALLOC(float, nout), *dqkv = KC_ALLOC(float, nqkv);
    float *dqkv1 = KC_ALLOC(float, nqkv);
    float *fs = KC_ALLOC(float, CT_ATTENTION_FWD_SCRATCH(L));
    float *bs = KC_ALLOC(float, CT_ATTENTION_BWD_SCRATCH(L));
    double *qkv64 = KC_ALLOC(double, nqkv), *ref = KC_ALLOC(double, nout);
    double *gref = KC_ALLOC(double, nqkv);

    /* q and k of size ~1.5 give logits of a few units: softmaxes that are neither uniform nor
     * one-hot, so every path carries weight. */
    kc_fill(qkv, nqkv, -1.5f, 1.5f, stream);
    kc_fill(dout, nout, -1.0f, 1.0f, stream + 1);
    kc_poison(out, nout);
    kc_poison(att, natt);
    kc_poison(fs, (int64_t)CT_ATTENTION_FWD_SCRATCH(L));
    kc_poison(bs, (int64_t)CT_ATTENTION_BWD_SCRATCH(L));
    ct_attention_forward_cpu(out, att, fs, qkv, NULL, B, L, C, NH, drop);
    KC_ASSERT_FINITE(out, nout);
    KC_ASSERT_FINITE(att, natt);

    /* att rows: probabilities summing to 1, zero right of the diagonal. */
    for (int64_t r = 0; r < (int64_t)B * NH * L; r++) {
        int i = (int)(r % L);
        double s = 0.0;
        for (int j = 0; j < L; j++) {
            float v = att[r * L + j];
            if (j > i)
                CT_ASSERT_MSG(v == 0.0f, "att row %lld col %d = %g above the diagonal",
                              (long long)r, j, (double)v);
            CT_ASSERT(v >= 0.0f);
            s += v;
        }
        CT_ASSERT_CLOSE(s, 1.0, 1e-5, 0);
    }

    kc_to_double(qkv64, qkv, nqkv);
    ref_attention(ref, qkv64, B, L, C, NH, drop);
    kc_check("attention out", out, ref, nout, 2e-6, 2e-5);

    ct_attention_backward_cpu(dqkv, bs, dout, att, qkv, NULL, B, L, C, NH, drop);
    att_case_t ac = {B, L, C, NH, drop, qkv64, KC_ALLOC(double, nout), dout};
    kc_fd_grad(gref, qkv64, nqkv, 1e-5, att_objective, &ac);
    kc_check("d qkv vs finite diff", dqkv, gref, nqkv, 2e-6, 2e-5);

    memcpy(dqkv1, dqkv, (size_t)nqkv * sizeof *dqkv);
    ct_attention_backward_cpu(dqkv, bs, dout, att, qkv, NULL, B, L, C, NH, drop);
    KC_ASSERT_DOUBLED(dqkv, dqkv1, nqkv);

    free(ac.out64);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(dqkv1), free(fs), free(bs);
    free(qkv64), free(ref), free(gref);
}

static void test_small(void)
{
    check_case(2, 5, 8, 2, 0.0f, 10); /* the tiny model's shape: one partial tile */
    check_case(2, 5, 8, 2, 0.3f, 11);
}

static void test_tiles(void)
{
    check_case(1, 37, 6, 1, 0.0f, 20); /* two tiles, the second of 5 rows */
    check_case(1, 37, 6, 1, 0.25f, 21);
    check_case(1, 70, 6, 3, 0.2f, 22); /* three tiles, three heads of width 2 */
}

/* With qmask: rows it keeps and all gradients equal (==, so +0 and -0 compare equal) the
 * unskipped run; skipped rows of out and att are zero; dout on skipped rows is ignored. */
static void check_skip(int B, int L, int C, int NH, float p, const int32_t *qmask)
{
    const int64_t nqkv = (int64_t)B * L * 3 * C, nout = (int64_t)B * L * C;
    const int64_t natt = (int64_t)B * NH * L * L;
    const int HS = C / NH;
    ct_dropout_t drop = {p, 99, 3, 0};
    float *qkv = KC_ALLOC(float, nqkv), *dout = KC_ALLOC(float, nout);
    float *dout0 = KC_ALLOC(float, nout);
    float *o1 = KC_ALLOC(float, nout), *o2 = KC_ALLOC(float, nout);
    float *a1 = KC_ALLOC(float, natt), *a2 = KC_ALLOC(float, natt);
    float *g1 = KC_ALLOC(float, nqkv), *g2 = KC_ALLOC(float, nqkv);
    float *fs = KC_ALLOC(float, CT_ATTENTION_FWD_SCRATCH(L));
    float *bs = KC_ALLOC(float, CT_ATTENTION_BWD_SCRATCH(L));
    kc_fill(qkv, nqkv, -1.5f, 1.5f, 31);
    kc_fill(dout, nout, -1.0f, 1.0f, 32);
    /* The contract: whatever reaches a skipped row is unused, so its true gradient is zero. */
    memcpy(dout0, dout, (size_t)nout * sizeof *dout);
    for (int64_t r = 0; r < (int64_t)B * L; r++)
        if (qmask[r] == 0)
            memset(dout0 + r * C, 0, (size_t)C * sizeof *dout0);

    kc_poison(o2, nout);
    kc_poison(a2, natt);
    ct_attention_forward_cpu(o1, a1, fs, qkv, NULL, B, L, C, NH, drop);
    ct_attention_forward_cpu(o2, a2, fs, qkv, qmask, B, L, C, NH, drop);
    KC_ASSERT_FINITE(o2, nout);
    KC_ASSERT_FINITE(a2, natt);
    int skipped = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            int keep = qmask[b * L + i] != 0;
            skipped += !keep;
            for (int c = 0; c < C; c++) {
                size_t k = ((size_t)b * L + i) * C + c;
                if (keep)
                    CT_ASSERT_MSG(o2[k] == o1[k], "out[%d,%d,%d] %.9g vs %.9g", b, i, c,
                                  (double)o2[k], (double)o1[k]);
                else
                    CT_ASSERT(o2[k] == 0.0f);
            }
            for (int h = 0; h < NH; h++)
                for (int j = 0; j < L; j++) {
                    size_t k = (((size_t)b * NH + h) * L + i) * L + j;
                    CT_ASSERT(keep ? a2[k] == a1[k] : a2[k] == 0.0f);
                }
        }
    CT_ASSERT(skipped > 0);
    (void)HS;

    ct_attention_backward_cpu(g1, bs, dout0, a1, qkv, NULL, B, L, C, NH, drop);
    ct_attention_backward_cpu(g2, bs, dout, a2, qkv, qmask, B, L, C, NH, drop);
    for (int64_t i = 0; i < nqkv; i++)
        CT_ASSERT_MSG(g1[i] == g2[i], "dqkv[%lld] %.9g (no skip) vs %.9g (skip)", (long long)i,
                      (double)g1[i], (double)g2[i]);
    printf("  skip B=%d L=%d NH=%d p=%.2f: %d of %d query rows skipped, used rows and gradients "
           "identical\n",
           B, L, NH, p, skipped, B * L);
    free(qkv), free(dout), free(dout0), free(o1), free(o2), free(a1), free(a2), free(g1);
    free(g2), free(fs), free(bs);
}

static void test_skip_padding(void)
{
    enum { B = 3, L = 70 };
    int32_t qmask[B * L];
    for (int t = 0; t < L; t++) {
        qmask[0 * L + t] = t >= 40; /* left padding: tile 0 skipped, tile 1 partly */
        qmask[1 * L + t] = t + 1;   /* no padding */
        qmask[2 * L + t] = (t * 7) % 5 != 0 ? t : 0; /* holes anywhere (and t = 0) */
    }
    check_skip(B, L, 8, 2, 0.0f, qmask);
    check_skip(B, L, 8, 2, 0.3f, qmask);
    check_skip(B, L, 6, 1, 0.1f, qmask);
    int32_t small[2 * 5] = {0, 0, 3, 4, 5, 0, 0, 0, 0, 9};
    check_skip(2, 5, 8, 2, 0.3f, small);
}

int main(void)
{
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_small);
    CT_RUN(test_tiles);
    CT_RUN(test_skip_padding);
    return 0;
}
