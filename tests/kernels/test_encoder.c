/*
 * test_encoder.c - the temporal encoder's ops (kernels/cpu/encoder.c) against float64
 * references written here: bidirectional attention forward and backward with and without
 * dropout on the probabilities (the reference's backward itself checked by central differences
 * of its forward), the mask token's select and its gradient, and the masked squared error.
 * Outputs are poisoned first; backwards must accumulate.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_philox.h"
#include "kcheck.h"

enum { B = 2, L = 7, C = 12, NH = 3, HS = C / NH, C3 = 3 * C };

/* out (B,L,C) of qkv (B,L,3C) in double; keep: the dropout factors (B,NH,L,L). */
static void ref_forward(double *out, const double *qkv, const double *keep)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < L; i++) {
                double s[L], mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < L; j++) {
                    s[j] = 0.0;
                    for (int e = 0; e < HS; e++)
                        s[j] += qkv[(b * L + i) * C3 + h * HS + e] *
                                qkv[(b * L + j) * C3 + C + h * HS + e];
                    s[j] /= sqrt((double)HS);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < L; j++)
                    sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double o = 0.0;
                    for (int j = 0; j < L; j++)
                        o += s[j] / sum * keep[((b * NH + h) * L + i) * L + j] *
                             qkv[(b * L + j) * C3 + 2 * C + h * HS + e];
                    out[(b * L + i) * C + h * HS + e] = o;
                }
            }
}

static double ref_loss(const double *qkv, const double *keep, const double *g)
{
    static double out[B * L * C];
    ref_forward(out, qkv, keep);
    double l = 0.0;
    for (int i = 0; i < B * L * C; i++)
        l += out[i] * g[i];
    return l;
}

/* d(sum(out * g))/d(qkv) by central differences in double. */
static void ref_backward(double *dqkv, double *qkv, const double *keep, const double *g)
{
    for (int i = 0; i < B * L * C3; i++) {
        const double x = qkv[i], h = 1e-6;
        qkv[i] = x + h;
        double up = ref_loss(qkv, keep, g);
        qkv[i] = x - h;
        double dn = ref_loss(qkv, keep, g);
        qkv[i] = x;
        dqkv[i] = (up - dn) / (2 * h);
    }
}

static void check_attention(float p)
{
    static float qkv[B * L * C3], out[B * L * C], att[B * NH * L * L], g[B * L * C],
        dqkv[B * L * C3], dqkv2[B * L * C3], scratch[2 * L + L * HS];
    static double qd[B * L * C3], keep[B * NH * L * L], gd[B * L * C], od[B * L * C],
        dqd[B * L * C3];
    kc_fill(qkv, B * L * C3, -1.5f, 1.5f, 11);
    kc_fill(g, B * L * C, -1.0f, 1.0f, 12);
    kc_to_double(qd, qkv, B * L * C3);
    kc_to_double(gd, g, B * L * C);
    ct_dropout_t drop = {p, 99, 5, 1000};
    uint32_t u[B * NH * L * L];
    ct_rng_u32_cpu(u, B * NH * L * L, drop.seed, drop.stream, drop.offset);
    for (int i = 0; i < B * NH * L * L; i++)
        keep[i] = p > 0.0f ? ct_philox_dropout_factor(u[i], p, 1.0f / (1.0f - p)) : 1.0;
    kc_poison(out, B * L * C);
    kc_poison(att, B * NH * L * L);
    ct_enc_attention_forward_cpu(out, att, scratch, qkv, B, L, C, NH, drop);
    KC_ASSERT_FINITE(att, B * NH * L * L);
    ref_forward(od, qd, keep);
    kc_check(p > 0 ? "attention fwd, dropout" : "attention fwd", out, od, B * L * C, 1e-6, 1e-5);
    memset(dqkv, 0, sizeof dqkv);
    ct_enc_attention_backward_cpu(dqkv, scratch, g, att, qkv, B, L, C, NH, drop);
    ref_backward(dqd, qd, keep, gd);
    kc_check(p > 0 ? "attention bwd, dropout" : "attention bwd", dqkv, dqd, B * L * C3, 1e-5, 1e-4);
    /* accumulates */
    memcpy(dqkv2, dqkv, sizeof dqkv);
    ct_enc_attention_backward_cpu(dqkv2, scratch, g, att, qkv, B, L, C, NH, drop);
    for (int i = 0; i < B * L * C3; i++)
        CT_ASSERT(fabsf(dqkv2[i] - 2.0f * dqkv[i]) <= 1e-6f * (1.0f + fabsf(dqkv[i])));
}

static void test_attention(void)
{
    check_attention(0.0f);
    check_attention(0.3f);
}

static void test_mask_token(void)
{
    enum { N = 9, W = 5 };
    float x[N * W], tok[W], y[N * W], dy[N * W], dx[N * W], dt[W];
    int32_t m[N] = {0, 1, 0, 0, 1, 1, 0, 0, 1};
    kc_fill(x, N * W, -1.0f, 1.0f, 21);
    kc_fill(tok, W, -1.0f, 1.0f, 22);
    kc_fill(dy, N * W, -1.0f, 1.0f, 23);
    kc_poison(y, N * W);
    ct_mask_token_forward_cpu(y, x, tok, m, N, W);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < W; c++)
            CT_ASSERT(y[r * W + c] == (m[r] ? tok[c] : x[r * W + c]));
    for (int i = 0; i < N * W; i++)
        dx[i] = 1.0f;
    for (int c = 0; c < W; c++)
        dt[c] = 1.0f;
    ct_mask_token_backward_cpu(dx, dt, dy, m, N, W);
    for (int c = 0; c < W; c++) {
        float want = 1.0f;
        for (int r = 0; r < N; r++) {
            CT_ASSERT(dx[r * W + c] == (m[r] ? 1.0f : 1.0f + dy[r * W + c]));
            if (m[r])
                want += dy[r * W + c];
        }
        CT_ASSERT(dt[c] == want);
    }
}

static void test_masked_mse(void)
{
    enum { N = 6, P = 4 };
    float x[N * P], y[N * P], d[N * P], loss = NAN;
    int32_t m[N] = {1, 0, 0, 1, 1, 0};
    kc_fill(x, N * P, -2.0f, 2.0f, 31);
    kc_fill(y, N * P, -2.0f, 2.0f, 32);
    kc_poison(d, N * P);
    const float count = 3.0f * P * 2.0f; /* as if another micro-batch held as many */
    ct_masked_mse_cpu(&loss, d, x, y, m, N, P, count);
    double want = 0.0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < P; c++) {
            double e = m[r] ? (double)x[r * P + c] - y[r * P + c] : 0.0;
            want += e * e;
            CT_ASSERT(fabs(d[r * P + c] - 2.0 * e / count) <= 1e-6);
        }
    CT_ASSERT(fabs(loss - want / count) <= 1e-6 * want);
    float l2 = NAN;
    ct_masked_mse_cpu(&l2, NULL, x, y, m, N, P, count); /* no gradient wanted */
    CT_ASSERT(l2 == loss);
}

int main(void)
{
    CT_RUN(test_attention);
    CT_RUN(test_mask_token);
    CT_RUN(test_masked_mse);
    return 0;
}
