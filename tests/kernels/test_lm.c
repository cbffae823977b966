/*
 * test_lm.c - the language models' ops (kernels/cpu/lm.c): RMSNorm, GELU (tanh and erf), SwiGLU
 * and RoPE, each forward against its float64 formula (ref64.c) and each gradient against central
 * finite differences of that formula; the accumulate contract; poisoned outputs; RoPE's table
 * against the float64 cosine of transformers' float32 angles; and the next-token loss through the
 * LM head (ct_lm_ce_loss_cpu in kernels/cpu/loss.c: several chunks, ignored rows, a frozen head,
 * the loss alone); GPT-2's Conv1D (kernels/cpu/linear.c) against float64 sums. Widths are
 * Qwen2's head width 64 and odd ones (13, 7 pairs) so the eight-wide loops meet their tails.
 *
 * Tolerances (|got - ref| <= atol + rtol |ref|; each case prints its worst element):
 *   RMSNorm: the row sum is double, so the error is the float element work: x * s, then
 *     * weight, then the backward's products: a few float roundings (6e-8 each) of values up to
 *     ~4: atol 1e-6, rtol 1e-5 forward, 5e-6 / 2e-5 backward (gradients of order 1..10).
 *   GELU, SwiGLU: erff, expf are within 1-2 ulp (GELU's tanh form is x sigmoid(2u), a few
 *     roundings more); forward and backward values are O(1..3): atol 1e-6, rtol 1e-5.
 *   RoPE: two products and a sum per element: atol 1e-6, rtol 1e-5; the table: cosf/sinf of the
 *     same float32 angle, 2 ulp of 1: 3e-7.
 *   LM loss: the loss within 1e-6; gradients are of order 1/count (~1e-2..1e-3): atol 1e-7,
 *     rtol 1e-4 for the float logits, softmax and products.
 * A wrong term (a missing mean, a wrong sign, a swapped half) moves results by 1e-2 or more.
 */
#include <math.h>
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

#define LM_EPS 1e-6f /* Qwen2's rms_norm_eps */

/* ---- RMSNorm ----------------------------------------------------------------------------------
 */

typedef struct rms_case {
    int N, C;
    double *x, *w, *out;
    const float *dout;
} rms_case_t;

static double rms_objective(void *p)
{
    rms_case_t *c = p;
    ref_rmsnorm(c->out, c->x, c->w, c->N, c->C, LM_EPS);
    return kc_dot(c->out, c->dout, (int64_t)c->N * c->C);
}

static void rms_check(int N, int C, uint64_t stream)
{
    printf("case rmsnorm N=%d C=%d\n", N, C);
    const int64_t n = (int64_t)N * C;
    float *x = KC_ALLOC(float, n), *w = KC_ALLOC(float, C), *out = KC_ALLOC(float, n);
    float *rstd = KC_ALLOC(float, N), *dout = KC_ALLOC(float, n), *dx = KC_ALLOC(float, n);
    float *dw = KC_ALLOC(float, C), *dx1 = KC_ALLOC(float, n), *dw1 = KC_ALLOC(float, C);
    double *x64 = KC_ALLOC(double, n), *w64 = KC_ALLOC(double, C), *ref = KC_ALLOC(double, n);
    double *g = KC_ALLOC(double, n);
    /* rows of different scale: rstd from about 0.3 to 3 */
    kc_fill(x, n, -1.0f, 1.0f, stream);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++)
            x[r * C + c] *= 0.5f + 3.0f * (float)(r % 4) / 3;
    kc_fill(w, C, 0.5f, 1.5f, stream + 1);
    kc_fill(dout, n, -1.0f, 1.0f, stream + 2);
    kc_poison(out, n);
    kc_poison(rstd, N);
    ct_rmsnorm_forward_cpu(out, rstd, x, w, N, C, LM_EPS);
    KC_ASSERT_FINITE(out, n);
    KC_ASSERT_FINITE(rstd, N);
    kc_to_double(x64, x, n);
    kc_to_double(w64, w, C);
    ref_rmsnorm(ref, x64, w64, N, C, LM_EPS);
    kc_check("rmsnorm out", out, ref, n, 1e-6, 1e-5);

    ct_rmsnorm_backward_cpu(dx, dw, dout, x, w, rstd, N, C);
    rms_case_t rc = {N, C, x64, w64, KC_ALLOC(double, n), dout};
    kc_fd_grad(g, x64, n, 1e-5, rms_objective, &rc);
    kc_check("d inp vs finite diff", dx, g, n, 5e-6, 2e-5);
    kc_fd_grad(g, w64, C, 1e-5, rms_objective, &rc);
    kc_check("d weight vs finite diff", dw, g, C, 5e-6, 2e-5);
    memcpy(dx1, dx, (size_t)n * sizeof *dx);
    memcpy(dw1, dw, (size_t)C * sizeof *dw);
    ct_rmsnorm_backward_cpu(dx, dw, dout, x, w, rstd, N, C);
    KC_ASSERT_DOUBLED(dx, dx1, n);
    KC_ASSERT_DOUBLED(dw, dw1, C);
    free(rc.out);
    free(x), free(w), free(out), free(rstd), free(dout), free(dx), free(dw), free(dx1);
    free(dw1), free(x64), free(w64), free(ref), free(g);
}

static void test_rmsnorm(void)
{
    rms_check(8, 64, 10);
    rms_check(5, 13, 20);
}

/* A row of zeros (a padding position): rstd = 1/sqrt(eps), output 0, finite gradients. */
static void test_rmsnorm_zero_row(void)
{
    enum { C = 8 };
    float x[C] = {0}, w[C], out[C], rstd, dout[C], dx[C] = {0}, dw[C] = {0};
    kc_fill(w, C, 0.5f, 1.5f, 30);
    kc_fill(dout, C, -1.0f, 1.0f, 31);
    ct_rmsnorm_forward_cpu(out, &rstd, x, w, 1, C, LM_EPS);
    CT_ASSERT_CLOSE(rstd, 1e3, 0, 1e-6);
    for (int c = 0; c < C; c++)
        CT_ASSERT(out[c] == 0.0f);
    ct_rmsnorm_backward_cpu(dx, dw, dout, x, w, &rstd, 1, C);
    for (int c = 0; c < C; c++) {
        CT_ASSERT_CLOSE(dx[c], dout[c] * w[c] * 1e3, 0, 1e-6);
        CT_ASSERT(dw[c] == 0.0f);
    }
}

/* ---- GELU and SwiGLU --------------------------------------------------------------------------
 */

typedef struct ew_case {
    int64_t n;
    ct_gelu_kind_t kind;
    double *a, *b, *out; /* gelu: a; swiglu: a = gate, b = up */
    const float *dout;
} ew_case_t;

static double gelu_objective(void *p)
{
    ew_case_t *c = p;
    ref_gelu(c->out, c->a, c->n, c->kind);
    return kc_dot(c->out, c->dout, c->n);
}

static double swiglu_objective(void *p)
{
    ew_case_t *c = p;
    ref_swiglu(c->out, c->a, c->b, c->n);
    return kc_dot(c->out, c->dout, c->n);
}

static void test_gelu(void)
{
    enum { n = 515 };
    for (int kind = CT_GELU_TANH; kind <= CT_GELU_ERF; kind++) {
        printf("case gelu %s\n", kind == CT_GELU_TANH ? "tanh" : "erf");
        float *x = KC_ALLOC(float, n), *out = KC_ALLOC(float, n), *dout = KC_ALLOC(float, n);
        float *dx = KC_ALLOC(float, n), *dx1 = KC_ALLOC(float, n);
        double *x64 = KC_ALLOC(double, n), *ref = KC_ALLOC(double, n), *g = KC_ALLOC(double, n);
        kc_fill(x, n, -5.0f, 5.0f, 40 + (uint64_t)kind);
        x[0] = 0.0f, x[1] = -12.0f, x[2] = 12.0f; /* the middle and both saturated ends */
        kc_fill(dout, n, -1.0f, 1.0f, 42);
        kc_poison(out, n);
        ct_gelu_forward_cpu(out, x, n, (ct_gelu_kind_t)kind);
        KC_ASSERT_FINITE(out, n);
        kc_to_double(x64, x, n);
        ref_gelu(ref, x64, n, (ct_gelu_kind_t)kind);
        kc_check("gelu out", out, ref, n, 1e-6, 1e-5);
        ct_gelu_backward_cpu(dx, dout, x, n, (ct_gelu_kind_t)kind);
        ew_case_t c = {n, (ct_gelu_kind_t)kind, x64, NULL, KC_ALLOC(double, n), dout};
        kc_fd_grad(g, x64, n, 1e-5, gelu_objective, &c);
        kc_check("d inp vs finite diff", dx, g, n, 1e-6, 1e-5);
        memcpy(dx1, dx, n * sizeof *dx);
        ct_gelu_backward_cpu(dx, dout, x, n, (ct_gelu_kind_t)kind);
        KC_ASSERT_DOUBLED(dx, dx1, n);
        free(c.out);
        free(x), free(out), free(dout), free(dx), free(dx1), free(x64), free(ref), free(g);
    }
}

static void test_swiglu(void)
{
    enum { n = 517 };
    printf("case swiglu\n");
    float *gt = KC_ALLOC(float, n), *up = KC_ALLOC(float, n), *out = KC_ALLOC(float, n);
    float *dout = KC_ALLOC(float, n), *dg = KC_ALLOC(float, n), *du = KC_ALLOC(float, n);
    float *dg1 = KC_ALLOC(float, n), *du1 = KC_ALLOC(float, n);
    double *g64 = KC_ALLOC(double, n), *u64 = KC_ALLOC(double, n), *ref = KC_ALLOC(double, n);
    double *g = KC_ALLOC(double, n);
    kc_fill(gt, n, -6.0f, 6.0f, 50);
    gt[0] = 0.0f, gt[1] = -20.0f, gt[2] = 20.0f;
    kc_fill(up, n, -2.0f, 2.0f, 51);
    kc_fill(dout, n, -1.0f, 1.0f, 52);
    kc_poison(out, n);
    ct_swiglu_forward_cpu(out, gt, up, n);
    KC_ASSERT_FINITE(out, n);
    kc_to_double(g64, gt, n);
    kc_to_double(u64, up, n);
    ref_swiglu(ref, g64, u64, n);
    kc_check("swiglu out", out, ref, n, 1e-6, 1e-5);
    ct_swiglu_backward_cpu(dg, du, dout, gt, up, n);
    ew_case_t c = {n, CT_GELU_TANH, g64, u64, KC_ALLOC(double, n), dout};
    kc_fd_grad(g, g64, n, 1e-5, swiglu_objective, &c);
    kc_check("d gate vs finite diff", dg, g, n, 1e-6, 1e-5);
    kc_fd_grad(g, u64, n, 1e-5, swiglu_objective, &c);
    kc_check("d up vs finite diff", du, g, n, 1e-6, 1e-5);
    memcpy(dg1, dg, n * sizeof *dg);
    memcpy(du1, du, n * sizeof *du);
    ct_swiglu_backward_cpu(dg, du, dout, gt, up, n);
    KC_ASSERT_DOUBLED(dg, dg1, n);
    KC_ASSERT_DOUBLED(du, du1, n);
    free(c.out);
    free(gt), free(up), free(out), free(dout), free(dg), free(du), free(dg1), free(du1);
    free(g64), free(u64), free(ref), free(g);
}

/* ---- RoPE -------------------------------------------------------------------------------------
 */

/* The table: inv_freq and the angle in float32 as transformers rounds them, the cosine of that
 * float angle within 2 ulp; and at a long position, the float32 angle is what the table holds
 * (the exact angle would differ by far more than the tolerance). */
static void test_rope_table(void)
{
    enum { P = 40000, HD = 64, H = HD / 2 };
    const float theta = 1000000.0f; /* Qwen2.5's rope_theta */
    float *cs = KC_ALLOC(float, (size_t)P *H), *sn = KC_ALLOC(float, (size_t)P *H);
    kc_poison(cs, (int64_t)P * H);
    kc_poison(sn, (int64_t)P * H);
    ct_rope_table_cpu(cs, sn, P, HD, theta);
    KC_ASSERT_FINITE(cs, (int64_t)P * H);
    KC_ASSERT_FINITE(sn, (int64_t)P * H);
    double worst = 0.0, exact_off = 0.0;
    for (int i = 0; i < H; i++) {
        double inv64 = 1.0 / pow(1e6, 2.0 * i / HD);
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
        CT_ASSERT_CLOSE(inv, inv64, 0, 1e-6);
        for (int p = 0; p < P; p += 37) {
            double a = (double)((float)p * inv);
            worst = fmax(worst, fabs(cs[(size_t)p * H + i] - cos(a)));
            worst = fmax(worst, fabs(sn[(size_t)p * H + i] - sin(a)));
            exact_off = fmax(exact_off, fabs(cos(a) - cos((double)p * inv64)));
        }
    }
    printf("  table: max |err| %.2e against the float32 angles (%.2e from exact angles)\n", worst,
           exact_off);
    CT_ASSERT(worst <= 3e-7);
    CT_ASSERT(cs[0] == 1.0f && sn[0] == 0.0f);
    free(cs), free(sn);
}

typedef struct rope_case {
    int N, NH, HD;
    double *x, *cs, *sn, *out;
    const int32_t *pos;
    const float *dout;
} rope_case_t;

static double rope_objective(void *p)
{
    rope_case_t *c = p;
    ref_rope(c->out, c->x, c->cs, c->sn, c->pos, c->N, c->NH, c->HD);
    return kc_dot(c->out, c->dout, (int64_t)c->N * c->NH * c->HD);
}

static void rope_check(int N, int NH, int HD, uint64_t stream)
{
    printf("case rope N=%d NH=%d HD=%d\n", N, NH, HD);
    const int P = 300, H = HD / 2;
    const int64_t n = (int64_t)N * NH * HD;
    float *cs = KC_ALLOC(float, (size_t)P *H), *sn = KC_ALLOC(float, (size_t)P *H);
    ct_rope_table_cpu(cs, sn, P, HD, 10000.0f);
    int32_t *pos = KC_ALLOC(int32_t, N);
    for (int r = 0; r < N; r++)
        pos[r] = (int32_t)((r * 97 + 3) % P);
    float *x = KC_ALLOC(float, n), *out = KC_ALLOC(float, n), *dout = KC_ALLOC(float, n);
    float *dx = KC_ALLOC(float, n), *dx1 = KC_ALLOC(float, n), *inplace = KC_ALLOC(float, n);
    double *x64 = KC_ALLOC(double, n), *cs64 = KC_ALLOC(double, (size_t)P *H);
    double *sn64 = KC_ALLOC(double, (size_t)P *H), *ref = KC_ALLOC(double, n);
    double *g = KC_ALLOC(double, n);
    kc_fill(x, n, -2.0f, 2.0f, stream);
    kc_fill(dout, n, -1.0f, 1.0f, stream + 1);
    kc_poison(out, n);
    ct_rope_forward_cpu(out, x, cs, sn, pos, N, NH, HD);
    KC_ASSERT_FINITE(out, n);
    kc_to_double(x64, x, n);
    kc_to_double(cs64, cs, (int64_t)P * H);
    kc_to_double(sn64, sn, (int64_t)P * H);
    ref_rope(ref, x64, cs64, sn64, pos, N, NH, HD);
    kc_check("rope out", out, ref, n, 1e-6, 1e-5);
    memcpy(inplace, x, (size_t)n * sizeof *x);
    ct_rope_forward_cpu(inplace, inplace, cs, sn, pos, N, NH, HD);
    CT_ASSERT(memcmp(inplace, out, (size_t)n * sizeof *out) == 0);

    ct_rope_backward_cpu(dx, dout, cs, sn, pos, N, NH, HD);
    rope_case_t c = {N, NH, HD, x64, cs64, sn64, KC_ALLOC(double, n), pos, dout};
    kc_fd_grad(g, x64, n, 1e-5, rope_objective, &c);
    kc_check("d inp vs finite diff", dx, g, n, 1e-6, 1e-5);
    memcpy(dx1, dx, (size_t)n * sizeof *dx);
    ct_rope_backward_cpu(dx, dout, cs, sn, pos, N, NH, HD);
    KC_ASSERT_DOUBLED(dx, dx1, n);
    free(c.out);
    free(cs), free(sn), free(pos), free(x), free(out), free(dout), free(dx), free(dx1);
    free(inplace), free(x64), free(cs64), free(sn64), free(ref), free(g);
}

static void test_rope(void)
{
    rope_check(6, 4, 64, 60);
    rope_check(5, 3, 14, 70);
}

/* ---- grouped-query causal attention ------------------------------------------------------------
 */

typedef struct gqa_case {
    int B, L, NH, KVH, HD;
    double scale, *qkv, *out;
    const float *dout;
} gqa_case_t;

static double gqa_objective(void *p)
{
    gqa_case_t *c = p;
    ref_gqa_attention(c->out, c->qkv, c->B, c->L, c->NH, c->KVH, c->HD, c->scale);
    return kc_dot(c->out, c->dout, (int64_t)c->B * c->L * c->NH * c->HD);
}

/* Forward against float64, the saved probabilities (rows sum to 1, zeros above the diagonal),
 * the packed gradient against finite differences, the += contract. Tolerances: scores of order
 * 1..4 through float dot products and the softmax, outputs of order 1: atol 1e-6, rtol 1e-5;
 * gradients of order 0.1..1: atol 2e-6, rtol 2e-5. */
static void gqa_check(int B, int L, int NH, int KVH, int HD, uint64_t stream)
{
    printf("case gqa B=%d L=%d NH=%d KVH=%d HD=%d\n", B, L, NH, KVH, HD);
    const int64_t W = (int64_t)(NH + 2 * KVH) * HD, n = (int64_t)B * L * W;
    const int64_t no = (int64_t)B * L * NH * HD, na = (int64_t)B * NH * L * L;
    const float scale = 1.0f / sqrtf((float)HD);
    float *qkv = KC_ALLOC(float, n), *out = KC_ALLOC(float, no), *att = KC_ALLOC(float, na);
    float *dout = KC_ALLOC(float, no), *dqkv = KC_ALLOC(float, n), *dqkv1 = KC_ALLOC(float, n);
    float *scr = KC_ALLOC(float, L);
    double *q64 = KC_ALLOC(double, n), *ref = KC_ALLOC(double, no), *g = KC_ALLOC(double, n);
    kc_fill(qkv, n, -1.5f, 1.5f, stream);
    kc_fill(dout, no, -1.0f, 1.0f, stream + 1);
    kc_poison(out, no);
    kc_poison(att, na);
    ct_gqa_attention_forward_cpu(out, att, qkv, B, L, NH, KVH, HD, scale);
    KC_ASSERT_FINITE(out, no);
    KC_ASSERT_FINITE(att, na);
    for (int64_t r = 0; r < (int64_t)B * NH * L; r++) {
        const int i = (int)(r % L);
        double s = 0.0;
        for (int j = 0; j < L; j++) {
            s += att[r * L + j];
            if (j > i)
                CT_ASSERT(att[r * L + j] == 0.0f);
        }
        CT_ASSERT_CLOSE(s, 1.0, 1e-6, 0);
    }
    kc_to_double(q64, qkv, n);
    ref_gqa_attention(ref, q64, B, L, NH, KVH, HD, scale);
    kc_check("gqa out", out, ref, no, 1e-6, 1e-5);
    ct_gqa_attention_backward_cpu(dqkv, scr, dout, att, qkv, B, L, NH, KVH, HD, scale);
    gqa_case_t c = {B, L, NH, KVH, HD, scale, q64, KC_ALLOC(double, no), dout};
    kc_fd_grad(g, q64, n, 1e-5, gqa_objective, &c);
    kc_check("d qkv vs finite diff", dqkv, g, n, 2e-6, 2e-5);
    memcpy(dqkv1, dqkv, (size_t)n * sizeof *dqkv);
    ct_gqa_attention_backward_cpu(dqkv, scr, dout, att, qkv, B, L, NH, KVH, HD, scale);
    KC_ASSERT_DOUBLED(dqkv, dqkv1, n);
    free(c.out);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(dqkv1), free(scr), free(q64);
    free(ref), free(g);
}

static void test_gqa_attention(void)
{
    gqa_check(2, 7, 4, 2, 8, 100);  /* two query heads per key head */
    gqa_check(1, 9, 6, 1, 5, 110);  /* one key head for all (multi-query), odd width */
    gqa_check(2, 6, 3, 3, 16, 120); /* KVH = NH: GPT-2's multi-head attention */
}

/* With KVH = NH and scale 1/sqrt(HD), the op is SASRec's multi-head attention without dropout:
 * the same outputs as ct_attention_forward_cpu on the same packed [q|k|v] within float
 * rounding (the two sum in different orders). */
static void test_gqa_is_mha(void)
{
    enum { B = 2, L = 10, NH = 2, HD = 25, C = NH * HD };
    const int64_t n = (int64_t)B * L * 3 * C, no = (int64_t)B * L * C;
    float *qkv = KC_ALLOC(float, n), *o1 = KC_ALLOC(float, no), *o2 = KC_ALLOC(float, no);
    float *a1 = KC_ALLOC(float, (int64_t)B *NH *L *L), *a2 = KC_ALLOC(float, (int64_t)B *NH *L *L);
    double *r = KC_ALLOC(double, no);
    kc_fill(qkv, n, -1.0f, 1.0f, 130);
    ct_dropout_t nodrop;
    memset(&nodrop, 0, sizeof nodrop);
    ct_attention_forward_cpu(o1, a1, NULL, qkv, NULL, B, L, C, NH, nodrop);
    ct_gqa_attention_forward_cpu(o2, a2, qkv, B, L, NH, NH, HD, 1.0f / sqrtf((float)HD));
    kc_to_double(r, o1, no);
    kc_check("gqa vs attention.c", o2, r, no, 1e-6, 1e-5);
    free(qkv), free(o1), free(o2), free(a1), free(a2), free(r);
}

/* ---- token embedding ------------------------------------------------------------------------- */

/* Forward bit for bit against the sum written out (one addition per element); the backward
 * against float64 sums per table row: repeated ids add up, the skipped id (a padding_idx) and
 * a NULL (frozen) table get nothing, token 0 is a real token. */
static void test_lm_embed(void)
{
    enum { N = 23, C = 10, V = 9, P = 30 };
    float *wte = KC_ALLOC(float, V *C), *wpe = KC_ALLOC(float, P *C), *out = KC_ALLOC(float, N *C);
    float *dout = KC_ALLOC(float, N *C), *dwte = KC_ALLOC(float, V *C),
          *dwpe = KC_ALLOC(float, P *C);
    double *rte = KC_ALLOC(double, V *C), *rpe = KC_ALLOC(double, P *C);
    int32_t ids[N], pos[N];
    for (int r = 0; r < N; r++)
        ids[r] = (r * 5) % V, pos[r] = (r * 7) % P;
    kc_fill(wte, V * C, -1, 1, 140);
    kc_fill(wpe, P * C, -1, 1, 141);
    kc_fill(dout, N * C, -1, 1, 142);
    kc_poison(out, N * C);
    ct_lm_embed_forward_cpu(out, wte, wpe, ids, pos, N, C);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++)
            CT_ASSERT(out[r * C + c] == wte[ids[r] * C + c] + wpe[pos[r] * C + c]);
    ct_lm_embed_forward_cpu(out, wte, NULL, ids, pos, N, C);
    for (int r = 0; r < N; r++)
        CT_ASSERT(memcmp(out + r * C, wte + ids[r] * C, C * sizeof(float)) == 0);

    const int32_t skip = 3;
    ct_lm_embed_backward_cpu(dwte, dwpe, dout, ids, pos, N, C, skip);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            if (ids[r] != skip)
                rte[ids[r] * C + c] += dout[r * C + c];
            rpe[pos[r] * C + c] += dout[r * C + c];
        }
    kc_check("embed dwte", dwte, rte, V * C, 1e-6, 1e-6);
    kc_check("embed dwpe", dwpe, rpe, P * C, 1e-6, 1e-6);
    for (int c = 0; c < C; c++)
        CT_ASSERT(dwte[skip * C + c] == 0.0f);
    memset(dwpe, 0, P * C * sizeof(float));
    ct_lm_embed_backward_cpu(NULL, dwpe, dout, ids, pos, N, C, -1); /* frozen token table */
    kc_check("embed dwpe, frozen wte", dwpe, rpe, P * C, 1e-6, 1e-6);
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(rte), free(rpe);
}

/* ---- the next-token loss --------------------------------------------------------------------- */

typedef struct lce_case {
    int N, C, V;
    double *f, *w;
    const int32_t *tgt;
    double count;
} lce_case_t;

static double lce_objective(void *p)
{
    lce_case_t *c = p;
    return ref_lm_ce(c->f, c->w, c->tgt, c->N, c->C, c->V, c->count);
}

/* N rows (more than one chunk of CT_CE_CHUNK when N > 128), targets 0..V-1 with token 0 and
 * V-1 among them, every seventh row ignored (-100). Loss against the float64 formula, both
 * gradients against finite differences, the += contract, and the NULL gradients (loss alone;
 * a frozen table) giving the same loss and the same feature gradient. */
static void lce_check(int N, int C, int V, uint64_t stream)
{
    printf("case lm ce N=%d C=%d V=%d\n", N, C, V);
    const int64_t nf = (int64_t)N * C, nw = (int64_t)V * C;
    float *f = KC_ALLOC(float, nf), *w = KC_ALLOC(float, nw), *df = KC_ALLOC(float, nf);
    float *dw = KC_ALLOC(float, nw), *df1 = KC_ALLOC(float, nf), *dw1 = KC_ALLOC(float, nw);
    float *df2 = KC_ALLOC(float, nf), *scr = KC_ALLOC(float, CT_CE_SCRATCH(V, C));
    int32_t *tgt = KC_ALLOC(int32_t, N);
    double *f64 = KC_ALLOC(double, nf), *w64 = KC_ALLOC(double, nw);
    double *g = KC_ALLOC(double, nf > nw ? nf : nw);
    kc_fill(f, nf, -1.0f, 1.0f, stream);
    kc_fill(w, nw, -1.0f, 1.0f, stream + 1);
    int count = 0;
    for (int r = 0; r < N; r++) {
        tgt[r] = r % 7 == 3 ? -100 : (int32_t)((r * 37 + (r % 5 == 0 ? 0 : 11)) % V);
        count += tgt[r] >= 0;
    }
    tgt[0] = 0, tgt[1] = V - 1;
    float loss = NAN, loss2 = NAN;
    ct_lm_ce_loss_cpu(&loss, df, dw, scr, f, w, tgt, N, C, V, (float)count);
    kc_to_double(f64, f, nf);
    kc_to_double(w64, w, nw);
    lce_case_t c = {N, C, V, f64, w64, tgt, (double)count};
    double ref = lce_objective(&c);
    printf("  loss %.7f, float64 %.7f\n", loss, ref);
    CT_ASSERT_CLOSE(loss, ref, 1e-6, 1e-6);
    kc_fd_grad(g, f64, nf, 1e-5, lce_objective, &c);
    kc_check("d feats vs finite diff", df, g, nf, 1e-7, 1e-4);
    kc_fd_grad(g, w64, nw, 1e-5, lce_objective, &c);
    kc_check("d wte vs finite diff", dw, g, nw, 1e-7, 1e-4);
    memcpy(df1, df, (size_t)nf * sizeof *df);
    memcpy(dw1, dw, (size_t)nw * sizeof *dw);
    ct_lm_ce_loss_cpu(&loss2, df, dw, scr, f, w, tgt, N, C, V, (float)count);
    KC_ASSERT_DOUBLED(df, df1, nf);
    KC_ASSERT_DOUBLED(dw, dw1, nw);
    /* a frozen head: the same loss and feature gradient, no table gradient */
    ct_lm_ce_loss_cpu(&loss2, df2, NULL, scr, f, w, tgt, N, C, V, (float)count);
    CT_ASSERT(loss2 == loss);
    CT_ASSERT(memcmp(df2, df1, (size_t)nf * sizeof *df) == 0);
    /* evaluation: the loss alone */
    ct_lm_ce_loss_cpu(&loss2, NULL, NULL, scr, f, w, tgt, N, C, V, (float)count);
    CT_ASSERT(loss2 == loss);
    free(f), free(w), free(df), free(dw), free(df1), free(dw1), free(df2), free(scr), free(tgt);
    free(f64), free(w64), free(g);
}

static void test_lm_ce(void)
{
    lce_check(20, 16, 97, 80);
    lce_check(300, 6, 40, 90);
}

/* ---- GPT-2's Conv1D (kernels/cpu/linear.c) -----------------------------------------------------
 * out = inp W + b with W stored (in, out), against the float64 sums; the backward's three
 * gradients accumulated twice onto random starting values; dweight NULL leaves the rest as they
 * are. Sums of IC (or N) products of values of order 1: atol 1e-5, rtol 1e-5. */
static void conv1d_check(int N, int IC, int OC)
{
    printf("conv1d N=%d IC=%d OC=%d\n", N, IC, OC);
    float *x = KC_ALLOC(float, N *IC), *w = KC_ALLOC(float, IC *OC), *b = KC_ALLOC(float, OC);
    float *out = KC_ALLOC(float, N *OC), *dout = KC_ALLOC(float, N *OC);
    float *dx = KC_ALLOC(float, N *IC), *dw = KC_ALLOC(float, IC *OC), *db = KC_ALLOC(float, OC);
    double *rf = KC_ALLOC(double, N *OC), *rdx = KC_ALLOC(double, N *IC);
    double *rdw = KC_ALLOC(double, IC *OC), *rdb = KC_ALLOC(double, OC);
    kc_fill(x, N * IC, -1, 1, 700), kc_fill(w, IC * OC, -1, 1, 701), kc_fill(b, OC, -1, 1, 702);
    kc_fill(dout, N * OC, -1, 1, 703), kc_fill(dx, N * IC, -1, 1, 704);
    kc_fill(dw, IC * OC, -1, 1, 705), kc_fill(db, OC, -1, 1, 706);
    kc_to_double(rdx, dx, N * IC), kc_to_double(rdw, dw, IC * OC), kc_to_double(rdb, db, OC);
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int i = 0; i < IC; i++)
                s += (double)x[r * IC + i] * w[i * OC + o];
            rf[r * OC + o] = s;
        }
    kc_poison(out, N * OC);
    ct_conv1d_forward_cpu(out, x, w, b, N, IC, OC);
    kc_check("conv1d out", out, rf, N * OC, 1e-5, 1e-5);
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < N; r++)
            for (int o = 0; o < OC; o++) {
                double g = dout[r * OC + o];
                rdb[o] += g;
                for (int i = 0; i < IC; i++) {
                    rdx[r * IC + i] += g * w[i * OC + o];
                    rdw[i * OC + o] += g * x[r * IC + i];
                }
            }
    for (int k = 0; k < 2; k++)
        ct_conv1d_backward_cpu(dx, dw, db, dout, x, w, N, IC, OC);
    kc_check("conv1d dinp x2", dx, rdx, N * IC, 1e-5, 1e-5);
    kc_check("conv1d dweight x2", dw, rdw, IC * OC, 1e-5, 1e-5);
    kc_check("conv1d dbias x2", db, rdb, OC, 1e-5, 1e-5);
    /* a frozen weight: dweight NULL, dinp and dbias as before */
    float *dw2 = KC_ALLOC(float, IC *OC);
    memcpy(dw2, dw, (size_t)IC * OC * sizeof *dw2);
    ct_conv1d_backward_cpu(dx, NULL, NULL, dout, x, w, N, IC, OC);
    CT_ASSERT(memcmp(dw2, dw, (size_t)IC * OC * sizeof *dw2) == 0);
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++)
            for (int i = 0; i < IC; i++)
                rdx[r * IC + i] += (double)dout[r * OC + o] * w[i * OC + o];
    kc_check("conv1d dinp, frozen weight", dx, rdx, N * IC, 1e-5, 1e-5);
    free(x), free(w), free(b), free(out), free(dout), free(dx), free(dw), free(db), free(rf);
    free(rdx), free(rdw), free(rdb), free(dw2);
}

static void test_conv1d(void)
{
    conv1d_check(7, 16, 48);
    conv1d_check(33, 13, 5);
}

int main(void)
{
    CT_RUN(test_rmsnorm);
    CT_RUN(test_rmsnorm_zero_row);
    CT_RUN(test_gelu);
    CT_RUN(test_swiglu);
    CT_RUN(test_rope_table);
    CT_RUN(test_rope);
    CT_RUN(test_gqa_attention);
    CT_RUN(test_gqa_is_mha);
    CT_RUN(test_lm_embed);
    CT_RUN(test_lm_ce);
    CT_RUN(test_conv1d);
    return 0;
}
