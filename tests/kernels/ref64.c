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

void ref_tisas_attention(double *out, const double *q, const double *k, const double *v,
                         const double *rk, const double *rv, const int64_t *tseq,
                         const int32_t *seq, int B, int L, int C, int NH, int T,
                         ct_dropout_t drop_att, ct_dropout_t drop_rk, ct_dropout_t drop_rv)
{
    const int HS = C / NH;
    const size_t n4 = (size_t)B * L * L * C;
    double *tk = malloc(n4 * sizeof *tk), *tv = malloc(n4 * sizeof *tv);
    double *w = malloc((size_t)L * sizeof *w);
    /* the reference's materialised interval tensors, each with its own dropout */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            for (int j = 0; j < L; j++) {
                int64_t d = tseq[b * L + i] - tseq[b * L + j];
                d = d < 0 ? -d : d;
                int tau = d > T ? T : (int)d;
                for (int c = 0; c < C; c++) {
                    size_t e = (((size_t)b * L + i) * L + j) * C + c;
                    tk[e] = rk[tau * C + c] * ref_dropout_factor(drop_rk, e);
                    tv[e] = rv[tau * C + c] * ref_dropout_factor(drop_rv, e);
                }
            }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < L; i++) {
                const double *qi = q + (b * L + i) * C + h * HS;
                if (seq[b * L + i] == 0) {
                    /* TiSASRec.pytorch's padding query: every logit replaced, uniform weights */
                    for (int j = 0; j < L; j++)
                        w[j] = 1.0 / L;
                } else {
                    double mx = -INFINITY, sum = 0.0;
                    for (int j = 0; j <= i; j++) {
                        const double *kj = k + (b * L + j) * C + h * HS;
                        const double *tkij = tk + (((size_t)b * L + i) * L + j) * C + h * HS;
                        double s = 0.0;
                        for (int c = 0; c < HS; c++)
                            s += qi[c] * (kj[c] + tkij[c]);
                        w[j] = s / sqrt((double)HS);
                        mx = fmax(mx, w[j]);
                    }
                    for (int j = 0; j <= i; j++) {
                        w[j] = exp(w[j] - mx);
                        sum += w[j];
                    }
                    for (int j = 0; j < L; j++)
                        w[j] = j <= i ? w[j] / sum : 0.0;
                }
                double *o = out + (b * L + i) * C + h * HS;
                for (int c = 0; c < HS; c++)
                    o[c] = 0.0;
                for (int j = 0; j < L; j++) {
                    uint64_t idx = (((uint64_t)b * NH + h) * L + i) * L + j;
                    double a = w[j] * ref_dropout_factor(drop_att, idx);
                    const double *vj = v + (b * L + j) * C + h * HS;
                    const double *tvij = tv + (((size_t)b * L + i) * L + j) * C + h * HS;
                    for (int c = 0; c < HS; c++)
                        o[c] += a * (vj[c] + tvij[c]);
                }
            }
    free(tk), free(tv), free(w);
}

void ref_sinkhorn(double *out, const double *z, int n, int iters)
{
    double m[64];
    double mx = z[0];
    for (int x = 1; x < n * n; x++)
        mx = fmax(mx, z[x]);
    for (int x = 0; x < n * n; x++)
        m[x] = exp(z[x] - mx);
    for (int t = 0; t < iters; t++) {
        for (int i = 0; i < n; i++) {
            double s = 0.0;
            for (int j = 0; j < n; j++)
                s += m[i * n + j];
            for (int j = 0; j < n; j++)
                m[i * n + j] /= s;
        }
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int i = 0; i < n; i++)
                s += m[i * n + j];
            for (int i = 0; i < n; i++)
                m[i * n + j] /= s;
        }
    }
    memcpy(out, m, (size_t)n * n * sizeof *out);
}

static double ref_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

void ref_mhc_coeffs(double *hpre, double *hpost, double *hres, const double *X, const double *phi,
                    const double *alpha, const double *bias, int N, int n, int C, int iters,
                    double eps)
{
    const int D = n * C, K = CT_MHC_COEFFS(n);
    double *xh = malloc((size_t)D * sizeof *xh), *pr = malloc((size_t)K * sizeof *pr);
    double z[64];
    for (int r = 0; r < N; r++) {
        double ss = 0.0;
        for (int c = 0; c < D; c++)
            ss += X[r * D + c] * X[r * D + c];
        double rs = 1.0 / sqrt(ss / D + eps);
        for (int c = 0; c < D; c++)
            xh[c] = X[r * D + c] * rs;
        for (int o = 0; o < K; o++) {
            double s = 0.0;
            for (int c = 0; c < D; c++)
                s += xh[c] * phi[c * K + o];
            pr[o] = s;
        }
        for (int s = 0; s < n; s++) {
            hpre[r * n + s] = ref_sigmoid(alpha[0] * pr[s] + bias[s]);
            hpost[r * n + s] = 2.0 * ref_sigmoid(alpha[1] * pr[n + s] + bias[n + s]);
        }
        for (int x = 0; x < n * n; x++)
            z[x] = alpha[2] * pr[2 * n + x] + bias[2 * n + x];
        ref_sinkhorn(hres + (size_t)r * n * n, z, n, iters);
    }
    free(xh), free(pr);
}

void ref_mhc_pre(double *u, const double *X, const double *hpre, int N, int n, int C)
{
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int t = 0; t < n; t++)
                s += hpre[r * n + t] * X[(r * n + t) * C + c];
            u[r * C + c] = s;
        }
}

void ref_mhc_post(double *Y, const double *X, const double *f, const double *hres,
                  const double *hpost, int N, int n, int C)
{
    for (int r = 0; r < N; r++)
        for (int s = 0; s < n; s++)
            for (int c = 0; c < C; c++) {
                double y = hpost[r * n + s] * f[r * C + c];
                for (int t = 0; t < n; t++)
                    y += hres[(r * n + s) * n + t] * X[(r * n + t) * C + c];
                Y[(r * n + s) * C + c] = y;
            }
}

double ref_ce(const double *feats, const double *wte, const int32_t *pos, int N, int C, int V,
              double count)
{
    double total = 0.0;
    double *lg = malloc((size_t)V * sizeof *lg);
    for (int r = 0; r < N; r++) {
        if (pos[r] == 0)
            continue;
        double mx = -INFINITY, s = 0.0;
        for (int i = 1; i < V; i++) {
            double d = 0.0;
            for (int c = 0; c < C; c++)
                d += feats[r * C + c] * wte[i * C + c];
            lg[i] = d;
            mx = fmax(mx, d);
        }
        for (int i = 1; i < V; i++)
            s += exp(lg[i] - mx);
        total += mx + log(s) - lg[pos[r]];
    }
    free(lg);
    return count > 0 ? total / count : 0.0;
}

double ref_sampled_ce(const double *feats, const double *wte, const int32_t *pos,
                      const int32_t *neg, int B, int L, int C, int M, double count)
{
    double total = 0.0;
    double *lg = malloc((size_t)(M + 1) * sizeof *lg);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L; t++) {
            int r = b * L + t;
            if (pos[r] == 0)
                continue;
            double mx = -INFINITY, s = 0.0;
            for (int k = 0; k <= M; k++) {
                int32_t id = k == 0 ? pos[r] : neg[b * M + k - 1];
                double d = 0.0;
                for (int c = 0; c < C; c++)
                    d += feats[r * C + c] * wte[id * C + c];
                lg[k] = d;
                mx = fmax(mx, d);
            }
            for (int k = 0; k <= M; k++)
                s += exp(lg[k] - mx);
            total += mx + log(s) - lg[0];
        }
    free(lg);
    return count > 0 ? total / count : 0.0;
}

void ref_rmsnorm(double *out, const double *inp, const double *w, int N, int C, double eps)
{
    for (int r = 0; r < N; r++) {
        const double *x = inp + (size_t)r * C;
        double ms = 0.0;
        for (int c = 0; c < C; c++)
            ms += x[c] * x[c];
        double s = 1.0 / sqrt(ms / C + eps);
        for (int c = 0; c < C; c++)
            out[(size_t)r * C + c] = w[c] * x[c] * s;
    }
}

void ref_gelu(double *out, const double *inp, int64_t n, ct_gelu_kind_t kind)
{
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        if (kind == CT_GELU_TANH)
            out[i] = 0.5 * x *
                     (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
        else
            out[i] = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    }
}

void ref_swiglu(double *out, const double *gate, const double *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

void ref_rope(double *out, const double *inp, const double *cos_t, const double *sin_t,
              const int32_t *pos, int N, int NH, int HD)
{
    const int H = HD / 2;
    for (int r = 0; r < N; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HD; i++) {
                size_t base = ((size_t)r * NH + h) * HD;
                double c = cos_t[(size_t)pos[r] * H + i % H], s = sin_t[(size_t)pos[r] * H + i % H];
                double rot = i < H ? -inp[base + i + H] : inp[base + i - H];
                out[base + i] = inp[base + i] * c + rot * s;
            }
}

double ref_lm_ce(const double *feats, const double *wte, const int32_t *tgt, int N, int C, int V,
                 double count)
{
    double total = 0.0;
    double *lg = malloc((size_t)V * sizeof *lg);
    for (int r = 0; r < N; r++) {
        if (tgt[r] < 0)
            continue;
        double mx = -INFINITY, s = 0.0;
        for (int i = 0; i < V; i++) {
            double d = 0.0;
            for (int c = 0; c < C; c++)
                d += feats[(size_t)r * C + c] * wte[(size_t)i * C + c];
            lg[i] = d;
            mx = fmax(mx, d);
        }
        for (int i = 0; i < V; i++)
            s += exp(lg[i] - mx);
        total += mx + log(s) - lg[tgt[r]];
    }
    free(lg);
    return count > 0 ? total / count : 0.0;
}

void ref_gqa_attention(double *out, const double *qkv, int B, int L, int NH, int KVH, int HD,
                       double scale)
{
    const size_t W = (size_t)(NH + 2 * KVH) * HD;
    double *p = malloc((size_t)L * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kh = h / (NH / KVH);
            for (int i = 0; i < L; i++) {
                const double *q = qkv + ((size_t)b * L + i) * W + (size_t)h * HD;
                double mx = -INFINITY, s = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * L + j) * W + (size_t)(NH + kh) * HD;
                    double d = 0.0;
                    for (int c = 0; c < HD; c++)
                        d += q[c] * k[c];
                    p[j] = d * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++)
                    s += (p[j] = exp(p[j] - mx));
                double *o = out + ((size_t)b * L + i) * NH * HD + (size_t)h * HD;
                for (int c = 0; c < HD; c++) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; j++)
                        acc += p[j] / s *
                               qkv[((size_t)b * L + j) * W + (size_t)(NH + KVH + kh) * HD + c];
                    o[c] = acc;
                }
            }
        }
    free(p);
}
