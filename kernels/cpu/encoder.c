/*
 * encoder.c - the ops of a bidirectional Transformer encoder over patches (the temporal encoder,
 * --model temporal) that the decoder ops do not cover: attention without a causal or padding
 * mask, the learned mask token that replaces masked rows, the mean squared error over masked
 * rows, and the projector's attention of K learned queries over each sequence. Plain loops in a
 * fixed order (bit-reproducible); the attention's products run per (sequence, head) over
 * head-width columns of the packed projection. The projector's attention keeps the float
 * formulas the model computed before it was an op, so its results did not change.
 *
 * Not here: the projections, LayerNorm and feed-forward (linear.c, layernorm.c,
 * elementwise.c), the model (worker/trainer/models/temporal/).
 */
#include <math.h>
#include <string.h>

#include "ct_kernels.h"
#include "ct_philox.h"

#define CT_CPU_ENCODER__MAX_L 4096 /* keys per row the dropout factors are drawn for at once */

/* keep[j] <- the dropout factor of elements idx .. idx + L - 1 of drop's stream (1 when
 * p == 0), drawn a row at a time (four draws per Philox block). */
static void ct_cpu_encoder__keep_row(float *keep, ct_dropout_t drop, uint64_t idx, int L,
                                     float keep_scale)
{
    if (drop.p <= 0.0f) {
        for (int j = 0; j < L; j++)
            keep[j] = 1.0f;
        return;
    }
    uint32_t u[CT_CPU_ENCODER__MAX_L];
    ct_rng_u32_cpu(u, L, drop.seed, drop.stream, drop.offset + idx);
    for (int j = 0; j < L; j++)
        keep[j] = ct_philox_dropout_factor(u[j], drop.p, keep_scale);
}

/* kt (HS, L) <- the head's column block of L rows of the packed projection at col, transposed,
 * so that a query's scores against every key accumulate over e in vector lanes over j (each
 * score still sums its HS products in order e = 0, 1, ...). */
static void ct_cpu_encoder__transpose(float *kt, const float *qkv, int b, int L, int C3, int col,
                                      int HS)
{
    for (int j = 0; j < L; j++) {
        const float *k = qkv + ((size_t)b * L + j) * C3 + col;
        for (int e = 0; e < HS; e++)
            kt[(size_t)e * L + j] = k[e];
    }
}

void ct_enc_attention_forward_cpu(float *out, float *att, float *scratch, const float *qkv, int B,
                                  int L, int C, int NH, ct_dropout_t drop)
{
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const float keep_scale = drop.p > 0.0f ? 1.0f / (1.0f - drop.p) : 1.0f;
    float *kt = scratch; /* (HS, L) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *A = att + ((size_t)b * NH + h) * L * L;
            ct_cpu_encoder__transpose(kt, qkv, b, L, C3, C + h * HS, HS);
            for (int i = 0; i < L; i++) {
                const float *q = qkv + ((size_t)b * L + i) * C3 + h * HS;
                float *row = A + (size_t)i * L;
                for (int j = 0; j < L; j++)
                    row[j] = 0.0f;
                for (int e = 0; e < HS; e++) {
                    const float qe = q[e], *ke = kt + (size_t)e * L;
                    for (int j = 0; j < L; j++)
                        row[j] += qe * ke[j];
                }
                float mx = -INFINITY;
                for (int j = 0; j < L; j++) {
                    row[j] *= scale;
                    mx = row[j] > mx ? row[j] : mx;
                }
                float sum = 0.0f;
                for (int j = 0; j < L; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                const float inv = 1.0f / sum;
                for (int j = 0; j < L; j++)
                    row[j] *= inv;
                float *o = out + ((size_t)b * L + i) * C + h * HS;
                for (int e = 0; e < HS; e++)
                    o[e] = 0.0f;
                float keep[CT_CPU_ENCODER__MAX_L];
                ct_cpu_encoder__keep_row(keep, drop, (((uint64_t)b * NH + h) * L + i) * L, L,
                                         keep_scale);
                for (int j = 0; j < L; j++) {
                    const float p = row[j] * keep[j];
                    const float *v = qkv + ((size_t)b * L + j) * C3 + 2 * C + h * HS;
                    for (int e = 0; e < HS; e++)
                        o[e] += p * v[e];
                }
            }
        }
}

void ct_enc_attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *att,
                                   const float *qkv, int B, int L, int C, int NH, ct_dropout_t drop)
{
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const float keep_scale = drop.p > 0.0f ? 1.0f / (1.0f - drop.p) : 1.0f;
    float *dp = scratch, *keep = scratch + L, *vt = scratch + 2 * (size_t)L; /* (L) (L) (HS,L) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *A = att + ((size_t)b * NH + h) * L * L;
            ct_cpu_encoder__transpose(vt, qkv, b, L, C3, 2 * C + h * HS, HS);
            for (int i = 0; i < L; i++) {
                const float *row = A + (size_t)i * L;
                const float *go = dout + ((size_t)b * L + i) * C + h * HS;
                ct_cpu_encoder__keep_row(keep, drop, (((uint64_t)b * NH + h) * L + i) * L, L,
                                         keep_scale);
                /* d(dropped probabilities) = dout . v_j, then dv */
                for (int j = 0; j < L; j++)
                    dp[j] = 0.0f;
                for (int e = 0; e < HS; e++) {
                    const float ge = go[e], *ve = vt + (size_t)e * L;
                    for (int j = 0; j < L; j++)
                        dp[j] += ge * ve[j];
                }
                float dot = 0.0f;
                for (int j = 0; j < L; j++) {
                    float *dv = dqkv + ((size_t)b * L + j) * C3 + 2 * C + h * HS;
                    const float p = row[j] * keep[j];
                    for (int e = 0; e < HS; e++)
                        dv[e] += p * go[e];
                    dp[j] *= keep[j];
                    dot += dp[j] * row[j];
                }
                /* softmax backward, then the scores' factors */
                const float *q = qkv + ((size_t)b * L + i) * C3 + h * HS;
                float *dq = dqkv + ((size_t)b * L + i) * C3 + h * HS;
                for (int j = 0; j < L; j++) {
                    const float ds = row[j] * (dp[j] - dot) * scale;
                    const float *k = qkv + ((size_t)b * L + j) * C3 + C + h * HS;
                    float *dk = dqkv + ((size_t)b * L + j) * C3 + C + h * HS;
                    for (int e = 0; e < HS; e++) {
                        dq[e] += ds * k[e];
                        dk[e] += ds * q[e];
                    }
                }
            }
        }
}

void ct_mask_token_forward_cpu(float *out, const float *inp, const float *token,
                               const int32_t *mask, int N, int C)
{
    for (int r = 0; r < N; r++)
        memcpy(out + (size_t)r * C, mask[r] ? token : inp + (size_t)r * C, (size_t)C * sizeof *out);
}

void ct_mask_token_backward_cpu(float *dinp, float *dtoken, const float *dout, const int32_t *mask,
                                int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *g = dout + (size_t)r * C;
        float *d = mask[r] ? dtoken : dinp + (size_t)r * C;
        for (int c = 0; c < C; c++)
            d[c] += g[c];
    }
}

void ct_masked_mse_cpu(float *loss, float *dpred, const float *pred, const float *target,
                       const int32_t *mask, int N, int P, float count)
{
    double sum = 0.0;
    const float g = 2.0f / count;
    for (int r = 0; r < N; r++) {
        const float *x = pred + (size_t)r * P, *y = target + (size_t)r * P;
        float *d = dpred ? dpred + (size_t)r * P : NULL;
        for (int c = 0; c < P; c++) {
            const float e = mask[r] ? x[c] - y[c] : 0.0f;
            sum += (double)e * (double)e;
            if (d)
                d[c] = g * e;
        }
    }
    *loss = (float)(sum / (double)count);
}

void ct_query_attention_forward_cpu(float *out, float *att, const float *q, const float *k,
                                    const float *v, int B, int K, int L, int C, int NH)
{
    const int D = C / NH;
    const float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < K; t++) {
                float *p = att + (((size_t)b * NH + h) * K + t) * L;
                const float *qt = q + (size_t)t * C + h * D;
                float mx = -INFINITY;
                for (int j = 0; j < L; j++) {
                    const float *kk = k + ((size_t)b * L + j) * C + h * D;
                    float sc = 0.0f;
                    for (int e = 0; e < D; e++)
                        sc += qt[e] * kk[e];
                    p[j] = sc * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                float sum = 0.0f;
                for (int j = 0; j < L; j++) {
                    p[j] = expf(p[j] - mx);
                    sum += p[j];
                }
                float *o = out + ((size_t)b * K + t) * C + h * D;
                for (int e = 0; e < D; e++)
                    o[e] = 0.0f;
                for (int j = 0; j < L; j++) {
                    p[j] /= sum;
                    const float *vv = v + ((size_t)b * L + j) * C + h * D;
                    for (int e = 0; e < D; e++)
                        o[e] += p[j] * vv[e];
                }
            }
}

void ct_query_attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout,
                                     const float *att, const float *q, const float *k,
                                     const float *v, int B, int K, int L, int C, int NH)
{
    const int D = C / NH;
    const float scale = 1.0f / sqrtf((float)D);
    float dp[CT_CPU_ENCODER__MAX_L];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < K; t++) {
                const float *p = att + (((size_t)b * NH + h) * K + t) * L;
                const float *go = dout + ((size_t)b * K + t) * C + h * D;
                float dot = 0.0f;
                for (int j = 0; j < L; j++) {
                    const float *vv = v + ((size_t)b * L + j) * C + h * D;
                    float *dvv = dv + ((size_t)b * L + j) * C + h * D;
                    float s = 0.0f;
                    for (int e = 0; e < D; e++) {
                        s += go[e] * vv[e];
                        dvv[e] += p[j] * go[e];
                    }
                    dp[j] = s;
                    dot += p[j] * s;
                }
                const float *qt = q + (size_t)t * C + h * D;
                float *dqt = dq + (size_t)t * C + h * D;
                for (int j = 0; j < L; j++) {
                    const float ds = p[j] * (dp[j] - dot) * scale;
                    const float *kk = k + ((size_t)b * L + j) * C + h * D;
                    float *dkk = dk + ((size_t)b * L + j) * C + h * D;
                    for (int e = 0; e < D; e++) {
                        dqt[e] += ds * kk[e];
                        dkk[e] += ds * qt[e];
                    }
                }
            }
}
