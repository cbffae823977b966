/*
 * lm.c - the element-wise and row-wise ops of the language models (GPT-2, Qwen2) that SASRec
 * does not have: RMSNorm, GELU (tanh and erf forms), SwiGLU's gate, rotary position embedding
 * (RoPE), grouped-query causal attention over a packed q/k/v projection, the token (and
 * position) embedding. Each computes what
 * transformers computes in float32 (the formulas of Qwen2RMSNorm, NewGELUActivation /
 * GELUActivation, Qwen2MLP, Qwen2RotaryEmbedding and apply_rotary_pos_emb), with RMSNorm's row sums
 * in double over eight partial accumulators (ct_kernels_cpu.h) so that the same inputs give the
 * same bits on every run. GELU's tanh form is computed as x sigmoid(2u) with one expf, equal to
 * 0.5 x (1 + tanh u) within a few ulp (closer for negative x, where 1 + tanh u cancels), and
 * with glibc's expf 4 to 7 times faster than through tanhf (AMD EPYC, AVX-512: 1.57M elements
 * forward 25.7 -> 3.9 ms, backward 27.6 -> 6.4 ms).
 *
 * Not here: SASRec's attention and embedding (attention.c, embed.c), the LM head's loss (loss.c),
 * CUDA twins
 * (kernels/cuda), which ops a model calls in which order (the trainer).
 */
#include <math.h>

#include "ct_kernels.h"
#include "ct_kernels_cpu.h"

/* ---- RMSNorm ----------------------------------------------------------------------------------
 */

CT__MULTIVERSION void ct_rmsnorm_forward_cpu(float *out, float *rstd, const float *inp,
                                             const float *weight, int N, int C, float eps)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float *o = out + (size_t)r * C;
        double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= C; c += 8)
            for (int k = 0; k < 8; k++)
                a[k] += (double)x[c + k] * x[c + k];
        for (int k = 0; c < C; c++, k++)
            a[k] += (double)x[c] * x[c];
        float s = (float)(1.0 / sqrt(ct__combine8_f64(a) / C + eps));
        /* weight * (x * s), in transformers' order */
        for (c = 0; c < C; c++)
            o[c] = weight[c] * (x[c] * s);
        rstd[r] = s;
    }
}

CT__MULTIVERSION void ct_rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout,
                                              const float *inp, const float *weight,
                                              const float *rstd, int N, int C)
{
    float *restrict dw = dweight;
    for (int r = 0; r < N; r++) {
        const float *restrict x = inp + (size_t)r * C;
        const float *restrict d = dout + (size_t)r * C;
        float *restrict dx = dinp + (size_t)r * C;
        const float s = rstd[r];
        /* With xhat = x s and g = dout * weight: dx = s * (g - xhat * mean(g * xhat)). */
        double gx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= C; c += 8)
            for (int k = 0; k < 8; k++)
                gx[k] += (double)(d[c + k] * weight[c + k]) * (x[c + k] * s);
        for (int k = 0; c < C; c++, k++)
            gx[k] += (double)(d[c] * weight[c]) * (x[c] * s);
        const float gxmean = (float)(ct__combine8_f64(gx) / C);
        for (c = 0; c < C; c++) {
            float xhat = x[c] * s;
            dw[c] += d[c] * xhat;
            dx[c] += (d[c] * weight[c] - xhat * gxmean) * s;
        }
    }
}

/* ---- GELU -------------------------------------------------------------------------------------
 */

#define CT_LM__SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2 / pi) */
#define CT_LM__GELU_A         0.044715f
#define CT_LM__INV_SQRT_2     0.7071067811865476f
#define CT_LM__INV_SQRT_2PI   0.3989422804014327f /* 1 / sqrt(2 pi) */

CT__MULTIVERSION void ct_gelu_forward_cpu(float *out, const float *inp, int64_t n,
                                          ct_gelu_kind_t kind)
{
    if (kind == CT_GELU_TANH) {
        /* 0.5 x (1 + tanh u) = x sigmoid(2u): one expf instead of tanhf (which goes through
         * expm1f), the same value within a few ulp */
        for (int64_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = CT_LM__SQRT_2_OVER_PI * (x + CT_LM__GELU_A * (x * x * x));
            out[i] = x / (1.0f + expf(-2.0f * u));
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float x = inp[i];
            out[i] = 0.5f * x * (1.0f + erff(x * CT_LM__INV_SQRT_2));
        }
    }
}

CT__MULTIVERSION void ct_gelu_backward_cpu(float *dinp, const float *dout, const float *inp,
                                           int64_t n, ct_gelu_kind_t kind)
{
    if (kind == CT_GELU_TANH) {
        for (int64_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = CT_LM__SQRT_2_OVER_PI * (x + CT_LM__GELU_A * (x * x * x));
            /* s = 0.5 (1 + tanh u) = sigmoid(2u), and 0.5 (1 - tanh^2 u) = 2 s (1 - s) */
            float sg = 1.0f / (1.0f + expf(-2.0f * u));
            float du = CT_LM__SQRT_2_OVER_PI * (1.0f + 3.0f * CT_LM__GELU_A * (x * x));
            dinp[i] += dout[i] * (sg + 2.0f * x * (sg * (1.0f - sg)) * du);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float x = inp[i];
            float cdf = 0.5f * (1.0f + erff(x * CT_LM__INV_SQRT_2));
            float pdf = CT_LM__INV_SQRT_2PI * expf(-0.5f * x * x);
            dinp[i] += dout[i] * (cdf + x * pdf);
        }
    }
}

/* ---- SwiGLU -----------------------------------------------------------------------------------
 */

CT__MULTIVERSION void ct_swiglu_forward_cpu(float *out, const float *gate, const float *up,
                                            int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        /* silu(g) = g / (1 + exp(-g)), as torch computes it */
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

CT__MULTIVERSION void ct_swiglu_backward_cpu(float *dgate, float *dup, const float *dout,
                                             const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        float silu = g * sig;
        /* d silu / dg = sig * (1 + g * (1 - sig)) */
        dgate[i] += dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
        dup[i] += dout[i] * silu;
    }
}

/* ---- RoPE -------------------------------------------------------------------------------------
 */

void ct_rope_table_cpu(float *cos_t, float *sin_t, int P, int HD, float theta)
{
    const int H = HD / 2;
    for (int i = 0; i < H; i++) {
        /* inv_freq = 1 / theta ** (arange(0, HD, 2).float() / HD), all in float32 */
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
        for (int p = 0; p < P; p++) {
            /* the angle is one float32 product (transformers' matmul over a length-1 axis) */
            float a = (float)p * inv_freq;
            cos_t[(size_t)p * H + i] = cosf(a);
            sin_t[(size_t)p * H + i] = sinf(a);
        }
    }
}

CT__MULTIVERSION void ct_rope_forward_cpu(float *out, const float *inp, const float *cos_t,
                                          const float *sin_t, const int32_t *pos, int N, int NH,
                                          int HD)
{
    const int H = HD / 2;
    for (int r = 0; r < N; r++) {
        const float *cs = cos_t + (size_t)pos[r] * H, *sn = sin_t + (size_t)pos[r] * H;
        for (int h = 0; h < NH; h++) {
            const float *x = inp + ((size_t)r * NH + h) * HD;
            float *o = out + ((size_t)r * NH + h) * HD;
            for (int i = 0; i < H; i++) {
                /* x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1) */
                float x1 = x[i], x2 = x[i + H];
                o[i] = x1 * cs[i] + -x2 * sn[i];
                o[i + H] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

CT__MULTIVERSION void ct_rope_backward_cpu(float *dinp, const float *dout, const float *cos_t,
                                           const float *sin_t, const int32_t *pos, int N, int NH,
                                           int HD)
{
    const int H = HD / 2;
    for (int r = 0; r < N; r++) {
        const float *cs = cos_t + (size_t)pos[r] * H, *sn = sin_t + (size_t)pos[r] * H;
        for (int h = 0; h < NH; h++) {
            const float *d = dout + ((size_t)r * NH + h) * HD;
            float *dx = dinp + ((size_t)r * NH + h) * HD;
            for (int i = 0; i < H; i++) {
                /* the transpose of the rotation by +angle: a rotation by -angle */
                float d1 = d[i], d2 = d[i + H];
                dx[i] += d1 * cs[i] + d2 * sn[i];
                dx[i + H] += d2 * cs[i] - d1 * sn[i];
            }
        }
    }
}

/* ---- grouped-query causal attention ------------------------------------------------------------
 */

/* The base of q, k and v of head h (kv head kh) in row t of sequence b, in the packed
 * (B,L,(NH+2KVH)*HD) buffer. */
#define CT_LM__QKV_W(NH, KVH, HD) ((size_t)((NH) + 2 * (KVH)) * (size_t)(HD))

CT__MULTIVERSION void ct_gqa_attention_forward_cpu(float *out, float *att, const float *qkv, int B,
                                                   int L, int NH, int KVH, int HD, float scale)
{
    const size_t W = CT_LM__QKV_W(NH, KVH, HD), OW = (size_t)NH * HD;
    const int rep = NH / KVH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kh = h / rep;
            const float *base = qkv + (size_t)b * L * W;
            const size_t qo = (size_t)h * HD, ko = ((size_t)NH + kh) * HD,
                         vo = ((size_t)NH + KVH + kh) * HD;
            for (int i = 0; i < L; i++) {
                float *p = att + (((size_t)b * NH + h) * L + i) * L;
                const float *q = base + (size_t)i * W + qo;
                for (int j = 0; j <= i; j++)
                    p[j] = ct__dot8_f32(q, base + (size_t)j * W + ko, HD) * scale;
                const float mx = ct__max_f32(p, i + 1);
                for (int j = 0; j <= i; j++)
                    p[j] = ct__exp_nonpos(p[j] - mx);
                const float inv = (float)(1.0 / ct__sum8_f64(p, i + 1));
                for (int j = 0; j <= i; j++)
                    p[j] *= inv;
                for (int j = i + 1; j < L; j++)
                    p[j] = 0.0f;
                float *o = out + ((size_t)b * L + i) * OW + (size_t)h * HD;
                for (int d = 0; d < HD; d++)
                    o[d] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const float *v = base + (size_t)j * W + vo;
                    const float pj = p[j];
                    for (int d = 0; d < HD; d++)
                        o[d] += pj * v[d];
                }
            }
        }
}

CT__MULTIVERSION void ct_gqa_attention_backward_cpu(float *dqkv, float *scratch, const float *dout,
                                                    const float *att, const float *qkv, int B,
                                                    int L, int NH, int KVH, int HD, float scale)
{
    const size_t W = CT_LM__QKV_W(NH, KVH, HD), OW = (size_t)NH * HD;
    const int rep = NH / KVH;
    float *dp = scratch; /* (L) d probabilities, then d scores, of one query row */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kh = h / rep;
            const float *base = qkv + (size_t)b * L * W;
            float *dbase = dqkv + (size_t)b * L * W;
            const size_t qo = (size_t)h * HD, ko = ((size_t)NH + kh) * HD,
                         vo = ((size_t)NH + KVH + kh) * HD;
            for (int i = 0; i < L; i++) {
                const float *p = att + (((size_t)b * NH + h) * L + i) * L;
                const float *g = dout + ((size_t)b * L + i) * OW + (size_t)h * HD;
                /* dv_j += p_ij g;  dp_ij = g . v_j */
                for (int j = 0; j <= i; j++) {
                    const float *v = base + (size_t)j * W + vo;
                    float *dv = dbase + (size_t)j * W + vo;
                    const float pj = p[j];
                    for (int d = 0; d < HD; d++)
                        dv[d] += pj * g[d];
                    dp[j] = ct__dot8_f32(g, v, HD);
                }
                /* ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij), times the scale of the scores */
                double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int j = 0; j <= i; j++)
                    a[j & 7] += (double)p[j] * dp[j];
                const float pdp = (float)ct__combine8_f64(a);
                for (int j = 0; j <= i; j++)
                    dp[j] = p[j] * (dp[j] - pdp) * scale;
                /* dq_i += sum_j ds_ij k_j;  dk_j += ds_ij q_i */
                const float *q = base + (size_t)i * W + qo;
                float *dq = dbase + (size_t)i * W + qo;
                for (int j = 0; j <= i; j++) {
                    const float *k = base + (size_t)j * W + ko;
                    float *dk = dbase + (size_t)j * W + ko;
                    const float s = dp[j];
                    for (int d = 0; d < HD; d++) {
                        dq[d] += s * k[d];
                        dk[d] += s * q[d];
                    }
                }
            }
        }
}

/* ---- token (and position) embedding ------------------------------------------------------------
 */

void ct_lm_embed_forward_cpu(float *out, const float *wte, const float *wpe, const int32_t *ids,
                             const int32_t *pos, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *e = wte + (size_t)ids[r] * C;
        float *o = out + (size_t)r * C;
        if (wpe) {
            const float *p = wpe + (size_t)pos[r] * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        } else {
            for (int c = 0; c < C; c++)
                o[c] = e[c];
        }
    }
}

void ct_lm_embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *ids,
                              const int32_t *pos, int N, int C, int32_t skip_id)
{
    for (int r = 0; r < N; r++) {
        const float *d = dout + (size_t)r * C;
        if (dwte && ids[r] != skip_id) {
            float *g = dwte + (size_t)ids[r] * C;
            for (int c = 0; c < C; c++)
                g[c] += d[c];
        }
        if (dwpe) {
            float *g = dwpe + (size_t)pos[r] * C;
            for (int c = 0; c < C; c++)
                g[c] += d[c];
        }
    }
}
