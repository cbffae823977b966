/*
 * ref64.c - the float64 reference ops (see ref64.h). Written for obviousness, not speed.
 */
#include "ref64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_philox.h"

double ref_dropout_factor(ct_dropout_t drop, uint64_t i)
{
    if (drop.p <= 0.0f)
        return 1.0;
    uint64_t k = drop.offset + i;
    uint32_t x = ct_philox_block_at(drop.seed, drop.stream, k / 4).v[k % 4];
    return ct_philox_to_unit_float(x) >= drop.p ? 1.0 / (1.0 - (double)drop.p) : 0.0;
}

void ref_embed(double *out, const double *wte, const double *wpe, const int32_t *seq, int B, int L,
               int C, double scale, ct_pos_mode_t mode)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L; t++) {
            int32_t id = seq[b * L + t];
            int pid = mode == CT_POS_PADDED ? (id != 0 ? t + 1 : 0) : t;
            for (int c = 0; c < C; c++)
                out[(b * L + t) * C + c] = wte[id * C + c] * scale + (wpe ? wpe[pid * C + c] : 0.0);
        }
}

void ref_dropout(double *x, int64_t n, ct_dropout_t drop)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= ref_dropout_factor(drop, (uint64_t)i);
}

void ref_timeline_mask(double *x, const int32_t *seq, int N, int C)
{
    for (int r = 0; r < N; r++)
        if (seq[r] == 0)
            for (int c = 0; c < C; c++)
                x[r * C + c] = 0.0;
}

void ref_layernorm(double *out, const double *inp, const double *w, const double *b, int N, int C,
                   double eps)
{
    for (int r = 0; r < N; r++) {
        const double *x = inp + r * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= C;
        /* eps is the float the op uses (1e-8f), widened. */
        double s = 1.0 / sqrt(v + eps);
        for (int c = 0; c < C; c++)
            out[r * C + c] = (x[c] - m) * s * w[c] + b[c];
    }
}

void ref_linear(double *out, const double *inp, const double *w, const double *b, int N, int IC,
                int OC)
{
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < IC; i++)
                s += inp[r * IC + i] * w[o * IC + i];
            out[r * OC + o] = s;
        }
}

void ref_qkv(double *qkv, const double *xq, const double *xkv, const double *w, const double *b,
             int N, int C)
{
    for (int r = 0; r < N; r++)
        for (int o = 0; o < 3 * C; o++) {
            const double *x = o < C ? xq : xkv;
            double s = b[o];
            for (int i = 0; i < C; i++)
                s += x[r * C + i] * w[o * C + i];
            qkv[r * 3 * C + o] = s;
        }
}

void ref_attention(double *out, const double *qkv, int B, int L, int C, int NH, ct_dropout_t drop)
{
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc((size_t)L * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < L; i++) {
                const double *q = qkv + (b * L + i) * 3 * C + h * HS;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + (b * L + j) * 3 * C + C + h * HS;
                    double s = 0.0;
                    for (int c = 0; c < HS; c++)
                        s += q[c] * k[c];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++) {
                    p[j] = exp(p[j] - mx);
                    sum += p[j];
                }
                for (int c = 0; c < HS; c++)
                    out[(b * L + i) * C + h * HS + c] = 0.0;
                for (int j = 0; j <= i; j++) {
                    uint64_t idx = (((uint64_t)b * NH + h) * L + i) * L + j;
                    double a = p[j] / sum * ref_dropout_factor(drop, idx);
                    const double *v = qkv + (b * L + j) * 3 * C + 2 * C + h * HS;
                    for (int c = 0; c < HS; c++)
                        out[(b * L + i) * C + h * HS + c] += a * v[c];
                }
            }
    free(p);
}

void ref_relu(double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void ref_score(double *logits, const double *feats, const double *wte, const int32_t *ids, int N,
               int C)
{
    for (int r = 0; r < N; r++) {
        double s = 0.0;
        for (int c = 0; c < C; c++)
            s += feats[r * C + c] * wte[ids[r] * C + c];
        logits[r] = s;
    }
}

double ref_bce(const double *pos_logits, const double *neg_logits, const int32_t *pos, int N,
               double count)
{
    /* The textbook form: -log sigmoid(x+) - log(1 - sigmoid(x-)), fine in double for the
     * moderate logits the tests use (the op's stable softplus is tested at extremes apart). */
    double s = 0.0;
    for (int r = 0; r < N; r++) {
        if (pos[r] == 0)
            continue;
        double sp = 1.0 / (1.0 + exp(-pos_logits[r]));
        double sn = 1.0 / (1.0 + exp(-neg_logits[r]));
        s += -log(sp) - log(1.0 - sn);
    }
    return count > 0 ? s / count : 0.0;
}

double ref_l2(const double *w, int64_t n, double lambda, ct_l2_mode_t mode)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += w[i] * w[i];
    switch (mode) {
    case CT_L2_NORM:
        return lambda * sqrt(ss);
    case CT_L2_HALF_SQUARED:
        return 0.5 * lambda * ss;
    case CT_L2_SQUARED:
    default:
        return lambda * ss;
    }
}
