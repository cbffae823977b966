/*
 * ct_sasrec.c - SASRec (sasrec-spec.md 2) as a ct_model kind: its parameter table with
 * SASRec.pytorch's names, its activation arena, and the forward and backward passes of the
 * four block layouts, every op called through the dispatch table (ct_ops.h) so the same code
 * runs on any backend.
 *
 * ---- legend ----------------------------------------------------------------------------------
 *   B rows (users) of the micro-batch, L = maxlen, C = hidden_units, NH heads, N = B*L rows of
 *   the (N,C) stream, V = items + 1. x is the block's input stream, LNa / LNf the block's
 *   attention_layernorms / forward_layernorms, FFN = conv1 -> dropout -> ReLU -> conv2 ->
 *   dropout (ReLU after the first dropout equals ReLU before it).
 *
 *   post_ln       s1 = x + MHA(x,x,x);  y = LNa(s1);  s2 = y + FFN(y);   out = LNf(s2)
 *   pre_ln        xn = LNa(x); s1 = x + MHA(xn,xn,xn); y = LNf(s1);      out = s1 + FFN(y)
 *   original      q = LNa(x);  s1 = q + MHA(q,x,x);  y = LNf(s1);        out = y + FFN(y)
 *   original2020  original, then out *= (seq != 0); also after the embedding dropout
 * then F = last_layernorm(x of the last block), r+ = F . E[pos], r- = F . E[neg], BCE.
 * MHA = in_proj (packed q|k|v) -> causal softmax attention with dropout on the probabilities
 * -> out_proj. The embedding is sqrt(C) E[seq] + P[pid], pid by the layout's rule, then dropout.
 *
 * ---- backward conventions ------------------------------------------------------------------
 * Ops ACCUMULATE gradients (ct_kernels.h). Every activation-gradient buffer is zeroed (or
 * overwritten by a copy) right before the first op that adds into it; where a gradient simply
 * passes through a sum (residual), the same buffer serves both branches or is copied, never
 * recomputed. Each block's backward takes d(out) in a buffer it may overwrite and ADDS d(x)
 * into a buffer the caller zeroed.
 *
 * ---- padding-query skipping (ct_kernels.h's contract) -------------------------------------------
 * Training: the last block's attention skips padding queries (their rows reach only logits the
 * loss ignores); under the timeline mask every block does (padding rows are zeroed after each
 * block). Evaluation: the last block computes only column L-1, the one that is scored. The
 * result is bitwise what no skipping gives (cfg.no_skip; tests compare both).
 *
 * Not here: TiSASRec (its own kind), mHC (a future layout whose blocks carry n streams),
 * the loss normaliser's meaning (the caller's count), optimizer and data.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_model_internal.h"

/* Offsets of one block's tensors in the flat buffers. */
typedef struct ct__blk_params {
    size_t ln1_w, ln1_b; /* attention_layernorms.l */
    size_t in_w, in_b;   /* attention_layers.l.in_proj_{weight (3C,C), bias (3C)} */
    size_t out_w, out_b; /* attention_layers.l.out_proj.{weight (C,C), bias (C)} */
    size_t ln2_w, ln2_b; /* forward_layernorms.l */
    size_t c1_w, c1_b;   /* forward_layers.l.conv1.{weight (C,C,1), bias (C)} */
    size_t c2_w, c2_b;   /* forward_layers.l.conv2 */
} ct__blk_params_t;

/* One block's saved activations (N = max_batch * L rows each). */
typedef struct ct__blk_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N): y (post_ln), xn (pre_ln) or q */
    float *qkv;                       /* (N,3C) packed q|k|v */
    float *att;                       /* (B,NH,L,L) softmax probabilities before dropout */
    float *ao;                        /* (N,C) attention output before out_proj */
    float *s1;                        /* (N,C) the attention residual sum */
    float *ln2;                       /* (N,C) y = LNf(s1) (not post_ln: out is LNf's output) */
    float *ln2_mean, *ln2_rstd;       /* (N) LNf statistics */
    float *h;                         /* (N,C) FFN hidden, after dropout and ReLU */
    float *s2;                        /* (N,C) post_ln only: y + FFN(y), LNf's input */
    float *out;                       /* (N,C) the block output */
} ct__blk_acts_t;

typedef struct ct__sasrec {
    size_t wte, wpe, lnf_w, lnf_b;
    ct__blk_params_t blk[CT_MODEL_MAX_BLOCKS];

    void *arena;
    int32_t *seq, *pos, *neg; /* (B,L) inputs copied to the backend */
    int32_t *eval_qmask;      /* (B,L) 1 in column L-1 only */
    float *x0;                /* (N,C) embedding output */
    ct__blk_acts_t act[CT_MODEL_MAX_BLOCKS];
    float *lnf, *lnf_mean, *lnf_rstd;             /* (N,C), (N), (N) final LayerNorm */
    float *pos_logits, *neg_logits, *dpos, *dneg; /* (N) */
    float *loss;                                  /* (1) */
    /* gradient scratch, (N,C) each unless noted, reused by every block */
    float *g_cur, *g_in, *g_a, *g_b, *g_h, *g_hp, *g_ao;
    float *g_qkv; /* (N,3C) */
    float *att_fwd_scratch, *att_bwd_scratch;
    int last_B; /* rows of the last forward_backward (for logits) */
} ct__sasrec_t;

/* Everything one pass (a training micro-batch or an evaluation batch) needs. */
typedef struct ct__pass {
    ct_model_t *m;
    ct__sasrec_t *s;
    ct_ops_t *o;
    const float *W; /* params */
    float *G;       /* grads */
    int B, L, C, NH, N;
    int64_t NC;
    bool train;
    uint64_t seed;
    int64_t step, row0;
} ct__pass_t;

/* ---- helpers --------------------------------------------------------------------------------- */

static ct_dropout_t ct__drop(const ct__pass_t *p, int site, int64_t per_row)
{
    if (!p->train || p->m->cfg.dropout == 0.0f) {
        ct_dropout_t none = {0.0f, 0, 0, 0};
        return none;
    }
    return ct_model_dropout_site(p->m->cfg.dropout, p->seed, p->step, site, p->row0, per_row);
}

static int ct__site_attn(int l)
{
    return 1 + 3 * l;
}
static int ct__site_ffn1(int l)
{
    return 2 + 3 * l;
}
static int ct__site_ffn2(int l)
{
    return 3 + 3 * l;
}

/* The query mask of block l's attention (NULL: every query row). */
static const int32_t *ct__qmask(const ct__pass_t *p, int l)
{
    const ct_model_cfg_t *c = &p->m->cfg;
    if (c->no_skip)
        return NULL;
    bool last = l == c->num_blocks - 1;
    if (!p->train && last)
        return p->s->eval_qmask;
    if (last || ct_layout_timeline(c->layout))
        return p->s->seq;
    return NULL;
}

static void ct__dropout(const ct__pass_t *p, float *x, int64_t n, ct_dropout_t d)
{
    if (d.p > 0.0f)
        p->o->dropout(p->o, x, x, n, d);
}

/* ---- sub-layers ---------------------------------------------------------------------------- */

/* s1 = res + out_proj(attention(in_proj(xq, xkv))) */
static void ct__attn_forward(const ct__pass_t *p, int l, const float *xq, const float *xkv,
                             const float *res)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct_ops_t *o = p->o;
    o->qkv_forward(o, a->qkv, xq, xkv, p->W + w->in_w, p->W + w->in_b, p->N, p->C);
    o->attention_forward(o, a->ao, a->att, p->s->att_fwd_scratch, a->qkv, ct__qmask(p, l), p->B,
                         p->L, p->C, p->NH,
                         ct__drop(p, ct__site_attn(l), (int64_t)p->NH * p->L * p->L));
    o->linear_forward(o, a->s1, a->ao, p->W + w->out_w, p->W + w->out_b, p->N, p->C, p->C);
    o->residual_forward(o, a->s1, res, a->s1, p->NC);
}

/* ga: d(attention branch output), read only; adds into dxq and dxkv (which may be equal). */
static void ct__attn_backward(const ct__pass_t *p, int l, const float *ga, const float *xq,
                              const float *xkv, float *dxq, float *dxkv)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    o->zero(o, s->g_ao, nb);
    o->linear_backward(o, s->g_ao, p->G + w->out_w, p->G + w->out_b, ga, a->ao, p->W + w->out_w,
                       p->N, p->C, p->C);
    o->zero(o, s->g_qkv, 3 * nb);
    o->attention_backward(o, s->g_qkv, s->att_bwd_scratch, s->g_ao, a->att, a->qkv, ct__qmask(p, l),
                          p->B, p->L, p->C, p->NH,
                          ct__drop(p, ct__site_attn(l), (int64_t)p->NH * p->L * p->L));
    o->qkv_backward(o, dxq, dxkv, p->G + w->in_w, p->G + w->in_b, s->g_qkv, xq, xkv, p->W + w->in_w,
                    p->N, p->C);
}

/* f = FFN(y) */
static void ct__ffn_forward(const ct__pass_t *p, int l, const float *y, float *f)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct_ops_t *o = p->o;
    int64_t per_row = (int64_t)p->L * p->C;
    o->linear_forward(o, a->h, y, p->W + w->c1_w, p->W + w->c1_b, p->N, p->C, p->C);
    ct__dropout(p, a->h, p->NC, ct__drop(p, ct__site_ffn1(l), per_row));
    o->relu_forward(o, a->h, a->h, p->NC);
    o->linear_forward(o, f, a->h, p->W + w->c2_w, p->W + w->c2_b, p->N, p->C, p->C);
    ct__dropout(p, f, p->NC, ct__drop(p, ct__site_ffn2(l), per_row));
}

/* gf: d(f), overwritten; adds d(y) into gy. */
static void ct__ffn_backward(const ct__pass_t *p, int l, const float *y, float *gf, float *gy)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    int64_t per_row = (int64_t)p->L * p->C;
    ct__dropout(p, gf, p->NC, ct__drop(p, ct__site_ffn2(l), per_row));
    o->zero(o, s->g_h, nb);
    o->linear_backward(o, s->g_h, p->G + w->c2_w, p->G + w->c2_b, gf, a->h, p->W + w->c2_w, p->N,
                       p->C, p->C);
    o->zero(o, s->g_hp, nb);
    o->relu_backward(o, s->g_hp, s->g_h, a->h, p->NC);
    ct__dropout(p, s->g_hp, p->NC, ct__drop(p, ct__site_ffn1(l), per_row));
    o->linear_backward(o, gy, p->G + w->c1_w, p->G + w->c1_b, s->g_hp, y, p->W + w->c1_w, p->N,
                       p->C, p->C);
}

static void ct__ln_forward(const ct__pass_t *p, float *out, float *mean, float *rstd,
                           const float *x, size_t w, size_t b)
{
    p->o->layernorm_forward(p->o, out, mean, rstd, x, p->W + w, p->W + b, p->N, p->C,
                            CT_SASREC_LN_EPS);
}

static void ct__ln_backward(const ct__pass_t *p, float *dx, const float *dout, const float *x,
                            size_t w, size_t b, const float *mean, const float *rstd)
{
    p->o->layernorm_backward(p->o, dx, p->G + w, p->G + b, dout, x, p->W + w, mean, rstd, p->N,
                             p->C);
}

/* ---- the block layouts ----------------------------------------------------------------------- */

static void ct__post_ln_forward(const ct__pass_t *p, int l, const float *x)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__attn_forward(p, l, x, x, x); /* s1 = x + MHA(x,x,x) */
    ct__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, a->s1, w->ln1_w, w->ln1_b); /* y */
    ct__ffn_forward(p, l, a->ln1, a->s2);
    p->o->residual_forward(p->o, a->s2, a->ln1, a->s2, p->NC); /* s2 = y + FFN(y) */
    ct__ln_forward(p, a->out, a->ln2_mean, a->ln2_rstd, a->s2, w->ln2_w, w->ln2_b);
}

static void ct__post_ln_backward(const ct__pass_t *p, int l, const float *x, float *gout,
                                 float *gin)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gs2 = s->g_a, *gy = s->g_b, *gs1 = s->g_a;
    o->zero(o, gs2, nb);
    ct__ln_backward(p, gs2, gout, a->s2, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    o->copy(o, gy, gs2, nb, CT_COPY_D2D);    /* s2 = y + f: d(y) starts as d(s2) ... */
    ct__ffn_backward(p, l, a->ln1, gs2, gy); /* ... and d(f) = d(s2) */
    o->zero(o, gs1, nb);
    ct__ln_backward(p, gs1, gy, a->s1, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
    o->residual_forward(o, gin, gin, gs1, p->NC); /* s1 = x + attn: d(x) += d(s1) */
    ct__attn_backward(p, l, gs1, x, x, gin, gin);
}

static void ct__pre_ln_forward(const ct__pass_t *p, int l, const float *x)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b); /* xn */
    ct__attn_forward(p, l, a->ln1, a->ln1, x); /* s1 = x + MHA(xn,xn,xn) */
    ct__ln_forward(p, a->ln2, a->ln2_mean, a->ln2_rstd, a->s1, w->ln2_w, w->ln2_b); /* y */
    ct__ffn_forward(p, l, a->ln2, a->out);
    p->o->residual_forward(p->o, a->out, a->s1, a->out, p->NC); /* out = s1 + FFN(y) */
}

static void ct__pre_ln_backward(const ct__pass_t *p, int l, const float *x, float *gout, float *gin)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gs1 = s->g_a, *gy = s->g_b, *gxn = s->g_b;
    o->copy(o, gs1, gout, nb, CT_COPY_D2D); /* out = s1 + f: d(s1) starts as d(out) */
    o->zero(o, gy, nb);
    ct__ffn_backward(p, l, a->ln2, gout, gy); /* d(f) = d(out) */
    ct__ln_backward(p, gs1, gy, a->s1, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    o->residual_forward(o, gin, gin, gs1, p->NC); /* s1 = x + attn */
    o->zero(o, gxn, nb);
    ct__attn_backward(p, l, gs1, a->ln1, a->ln1, gxn, gxn);
    ct__ln_backward(p, gin, gxn, x, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
}

static void ct__original_forward(const ct__pass_t *p, int l, const float *x)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b); /* q */
    ct__attn_forward(p, l, a->ln1, x, a->ln1); /* s1 = q + MHA(q,x,x) */
    ct__ln_forward(p, a->ln2, a->ln2_mean, a->ln2_rstd, a->s1, w->ln2_w, w->ln2_b); /* y */
    ct__ffn_forward(p, l, a->ln2, a->out);
    p->o->residual_forward(p->o, a->out, a->ln2, a->out, p->NC); /* out = y + FFN(y) */
    if (ct_layout_timeline(p->m->cfg.layout))
        p->o->timeline_mask(p->o, a->out, a->out, p->s->seq, p->N, p->C);
}

static void ct__original_backward(const ct__pass_t *p, int l, const float *x, float *gout,
                                  float *gin)
{
    const ct__blk_params_t *w = &p->s->blk[l];
    ct__blk_acts_t *a = &p->s->act[l];
    ct__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gy = s->g_b, *gs1 = s->g_a, *gq = s->g_b;
    if (ct_layout_timeline(p->m->cfg.layout))
        o->timeline_mask(o, gout, gout, s->seq, p->N, p->C);
    o->copy(o, gy, gout, nb, CT_COPY_D2D); /* out = y + f */
    ct__ffn_backward(p, l, a->ln2, gout, gy);
    o->zero(o, gs1, nb);
    ct__ln_backward(p, gs1, gy, a->s1, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    o->copy(o, gq, gs1, nb, CT_COPY_D2D); /* s1 = q + attn: d(q) starts as d(s1) */
    ct__attn_backward(p, l, gs1, a->ln1, x, gq, gin);
    ct__ln_backward(p, gin, gq, x, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
}

typedef void (*ct__blk_fwd_fn)(const ct__pass_t *p, int l, const float *x);
typedef void (*ct__blk_bwd_fn)(const ct__pass_t *p, int l, const float *x, float *gout, float *gin);

static const struct {
    ct__blk_fwd_fn fwd;
    ct__blk_bwd_fn bwd;
} ct__layouts[CT_LAYOUT_COUNT] = {
    [CT_LAYOUT_POST_LN] = {ct__post_ln_forward, ct__post_ln_backward},
    [CT_LAYOUT_PRE_LN] = {ct__pre_ln_forward, ct__pre_ln_backward},
    [CT_LAYOUT_ORIGINAL] = {ct__original_forward, ct__original_backward},
    [CT_LAYOUT_ORIGINAL2020] = {ct__original_forward, ct__original_backward},
};

/* ---- whole passes ---------------------------------------------------------------------------- */

static void ct__pass_init(ct__pass_t *p, ct_model_t *m, int B, bool train)
{
    const ct_model_cfg_t *c = &m->cfg;
    *p = (ct__pass_t){.m = m,
                      .s = m->impl,
                      .o = m->ops,
                      .W = m->params_mem,
                      .G = m->grads_mem,
                      .B = B,
                      .L = c->maxlen,
                      .C = c->hidden,
                      .NH = c->num_heads,
                      .N = B * c->maxlen,
                      .train = train};
    p->NC = (int64_t)p->N * p->C;
}

/* Embedding, blocks, final LayerNorm: s->lnf. Returns the last block's output. */
static const float *ct__forward(const ct__pass_t *p)
{
    const ct_model_cfg_t *c = &p->m->cfg;
    ct__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    o->embed_forward(o, s->x0, p->W + s->wte, p->W + s->wpe, s->seq, p->B, p->L, p->C,
                     sqrtf((float)p->C), ct_layout_pos_mode(c->layout));
    ct__dropout(p, s->x0, p->NC, ct__drop(p, 0, (int64_t)p->L * p->C));
    if (ct_layout_timeline(c->layout))
        o->timeline_mask(o, s->x0, s->x0, s->seq, p->N, p->C);
    const float *x = s->x0;
    for (int l = 0; l < c->num_blocks; l++) {
        ct__layouts[c->layout].fwd(p, l, x);
        x = s->act[l].out;
    }
    ct__ln_forward(p, s->lnf, s->lnf_mean, s->lnf_rstd, x, s->lnf_w, s->lnf_b);
    return x;
}

static int ct__forward_backward(ct_model_t *m, const ct_model_batch_t *b, float count,
                                uint64_t seed, int64_t step, float *loss)
{
    ct__pass_t p;
    ct__pass_init(&p, m, b->B, true);
    p.seed = seed, p.step = step, p.row0 = b->row0;
    ct__sasrec_t *s = p.s;
    ct_ops_t *o = p.o;
    const ct_model_cfg_t *c = &m->cfg;
    size_t ni = (size_t)p.N * sizeof(int32_t), nb = (size_t)p.NC * sizeof(float);
    if (b->B < 1 || b->B > m->max_batch)
        return -EINVAL;
    s->last_B = b->B;
    o->copy(o, s->seq, b->seq, ni, CT_COPY_H2D);
    o->copy(o, s->pos, b->pos, ni, CT_COPY_H2D);
    o->copy(o, s->neg, b->neg, ni, CT_COPY_H2D);

    /* ---- forward ---- */
    const float *x_last = ct__forward(&p);
    o->score_forward(o, s->pos_logits, s->lnf, p.W + s->wte, s->pos, p.N, p.C);
    o->score_forward(o, s->neg_logits, s->lnf, p.W + s->wte, s->neg, p.N, p.C);
    o->bce_loss(o, s->loss, s->dpos, s->dneg, s->pos_logits, s->neg_logits, s->pos, p.N, count);

    /* ---- backward ---- */
    o->zero(o, s->g_cur, nb);
    o->score_backward(o, s->g_cur, p.G + s->wte, s->dpos, s->lnf, p.W + s->wte, s->pos, p.N, p.C);
    o->score_backward(o, s->g_cur, p.G + s->wte, s->dneg, s->lnf, p.W + s->wte, s->neg, p.N, p.C);
    o->zero(o, s->g_in, nb);
    ct__ln_backward(&p, s->g_in, s->g_cur, x_last, s->lnf_w, s->lnf_b, s->lnf_mean, s->lnf_rstd);
    float *gcur = s->g_in, *gin = s->g_cur;
    for (int l = c->num_blocks - 1; l >= 0; l--) {
        const float *xin = l > 0 ? s->act[l - 1].out : s->x0;
        o->zero(o, gin, nb);
        ct__layouts[c->layout].bwd(&p, l, xin, gcur, gin);
        float *t = gcur;
        gcur = gin;
        gin = t;
    }
    if (ct_layout_timeline(c->layout))
        o->timeline_mask(o, gcur, gcur, s->seq, p.N, p.C);
    ct__dropout(&p, gcur, p.NC, ct__drop(&p, 0, (int64_t)p.L * p.C));
    o->embed_backward(o, p.G + s->wte, p.G + s->wpe, gcur, s->seq, p.B, p.L, p.C, sqrtf((float)p.C),
                      ct_layout_pos_mode(c->layout));
    o->copy(o, loss, s->loss, sizeof *loss, CT_COPY_D2H);
    return o->sync(o);
}

static int ct__forward_features(ct_model_t *m, const int32_t *seq, const int64_t *tseq, int B,
                                const float **feats, int *ldf)
{
    (void)tseq; /* SASRec has no time input */
    ct__pass_t p;
    if (B < 1 || B > m->max_batch)
        return -EINVAL;
    ct__pass_init(&p, m, B, false);
    ct_ops_t *o = p.o;
    o->copy(o, p.s->seq, seq, (size_t)p.N * sizeof(int32_t), CT_COPY_H2D);
    ct__forward(&p);
    *feats = p.s->lnf + (size_t)(p.L - 1) * p.C;
    *ldf = p.L * p.C;
    return o->sync(o);
}

static int ct__logits(ct_model_t *m, float *pos_logits, float *neg_logits, int64_t n)
{
    ct__sasrec_t *s = m->impl;
    ct_ops_t *o = m->ops;
    int64_t have = (int64_t)s->last_B * m->cfg.maxlen;
    if (n > have)
        return -EINVAL;
    o->copy(o, pos_logits, s->pos_logits, (size_t)n * sizeof(float), CT_COPY_D2H);
    o->copy(o, neg_logits, s->neg_logits, (size_t)n * sizeof(float), CT_COPY_D2H);
    return o->sync(o);
}

static void ct__destroy(ct_model_t *m)
{
    ct__sasrec_t *s = m->impl;
    if (!s)
        return;
    m->ops->release(m->ops, s->arena);
    free(s);
    m->impl = NULL;
}

static const ct_model_vtbl_t ct__sasrec_vtbl = {
    .forward_backward = ct__forward_backward,
    .forward_features = ct__forward_features,
    .logits = ct__logits,
    .destroy = ct__destroy,
};

/* ---- building -------------------------------------------------------------------------------- */

/* Assigns (or, with c->base == NULL, measures) every arena buffer. */
static void ct__carve_arena(ct__sasrec_t *s, const ct_model_t *m, ct__carve_t *c)
{
    const ct_model_cfg_t *cfg = &m->cfg;
    size_t B = (size_t)m->max_batch, L = (size_t)cfg->maxlen, C = (size_t)cfg->hidden;
    size_t N = B * L, NC = N * C;
    ct_ops_t *o = m->ops;
    s->seq = CT__CARVE_I32(c, N);
    s->pos = CT__CARVE_I32(c, N);
    s->neg = CT__CARVE_I32(c, N);
    s->eval_qmask = CT__CARVE_I32(c, N);
    s->x0 = CT__CARVE_F32(c, NC);
    for (int l = 0; l < cfg->num_blocks; l++) {
        ct__blk_acts_t *a = &s->act[l];
        bool post = cfg->layout == CT_LAYOUT_POST_LN;
        a->ln1 = CT__CARVE_F32(c, NC);
        a->ln1_mean = CT__CARVE_F32(c, N);
        a->ln1_rstd = CT__CARVE_F32(c, N);
        a->qkv = CT__CARVE_F32(c, 3 * NC);
        a->att = CT__CARVE_F32(c, B * (size_t)cfg->num_heads * L * L);
        a->ao = CT__CARVE_F32(c, NC);
        a->s1 = CT__CARVE_F32(c, NC);
        a->ln2 = post ? NULL : CT__CARVE_F32(c, NC);
        a->ln2_mean = CT__CARVE_F32(c, N);
        a->ln2_rstd = CT__CARVE_F32(c, N);
        a->h = CT__CARVE_F32(c, NC);
        a->s2 = post ? CT__CARVE_F32(c, NC) : NULL;
        a->out = CT__CARVE_F32(c, NC);
    }
    s->lnf = CT__CARVE_F32(c, NC);
    s->lnf_mean = CT__CARVE_F32(c, N);
    s->lnf_rstd = CT__CARVE_F32(c, N);
    s->pos_logits = CT__CARVE_F32(c, N);
    s->neg_logits = CT__CARVE_F32(c, N);
    s->dpos = CT__CARVE_F32(c, N);
    s->dneg = CT__CARVE_F32(c, N);
    s->loss = CT__CARVE_F32(c, 1);
    float **g[] = {&s->g_cur, &s->g_in, &s->g_a, &s->g_b, &s->g_h, &s->g_hp, &s->g_ao};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        *g[i] = CT__CARVE_F32(c, NC);
    s->g_qkv = CT__CARVE_F32(c, 3 * NC);
    int Bi = m->max_batch, Li = cfg->maxlen, NH = cfg->num_heads;
    s->att_fwd_scratch = CT__CARVE_F32(c, o->attention_scratch(o, Bi, Li, NH, CT_ATT_SCRATCH_FWD));
    s->att_bwd_scratch = CT__CARVE_F32(c, o->attention_scratch(o, Bi, Li, NH, CT_ATT_SCRATCH_BWD));
}

/* The table, in SASRec.pytorch's state_dict order (module registration order). */
static int ct__build_table(ct_model_t *m, ct__sasrec_t *s)
{
    const ct_model_cfg_t *c = &m->cfg;
    const int64_t C = c->hidden, V = (int64_t)c->num_items + 1, P = ct_model_pos_rows(c);
    const int nb = c->num_blocks;
    char name[CT_PARAM_NAME_MAX];
    ct_param_t *t;
#define CT__ADD(nm, nd, init, ...)                               \
    do {                                                         \
        const int64_t shape_[] = {__VA_ARGS__};                  \
        if (!(t = ct__param_add(m, (nm), (nd), shape_, (init)))) \
            return -ENOMEM;                                      \
    } while (0)

    CT__ADD("item_emb.weight", 2, CT_INIT_XAVIER_NORMAL, V, C);
    t->zero_row0 = true, t->l2 = true, s->wte = t->offset;
    CT__ADD("pos_emb.weight", 2, CT_INIT_XAVIER_NORMAL, P, C);
    t->zero_row0 = ct_layout_pos_mode(c->layout) == CT_POS_PADDED, s->wpe = t->offset;
    for (int l = 0; l < nb; l++) {
        snprintf(name, sizeof name, "attention_layernorms.%d.weight", l);
        CT__ADD(name, 1, CT_INIT_ONES, C);
        s->blk[l].ln1_w = t->offset;
        snprintf(name, sizeof name, "attention_layernorms.%d.bias", l);
        CT__ADD(name, 1, CT_INIT_ZEROS, C);
        s->blk[l].ln1_b = t->offset;
    }
    for (int l = 0; l < nb; l++) {
        /* MultiheadAttention's biases start at 0 (its _reset_parameters). */
        snprintf(name, sizeof name, "attention_layers.%d.in_proj_weight", l);
        CT__ADD(name, 2, CT_INIT_XAVIER_NORMAL, 3 * C, C);
        s->blk[l].in_w = t->offset;
        snprintf(name, sizeof name, "attention_layers.%d.in_proj_bias", l);
        CT__ADD(name, 1, CT_INIT_ZEROS, 3 * C);
        s->blk[l].in_b = t->offset;
        snprintf(name, sizeof name, "attention_layers.%d.out_proj.weight", l);
        CT__ADD(name, 2, CT_INIT_XAVIER_NORMAL, C, C);
        s->blk[l].out_w = t->offset;
        snprintf(name, sizeof name, "attention_layers.%d.out_proj.bias", l);
        CT__ADD(name, 1, CT_INIT_ZEROS, C);
        s->blk[l].out_b = t->offset;
    }
    for (int l = 0; l < nb; l++) {
        snprintf(name, sizeof name, "forward_layernorms.%d.weight", l);
        CT__ADD(name, 1, CT_INIT_ONES, C);
        s->blk[l].ln2_w = t->offset;
        snprintf(name, sizeof name, "forward_layernorms.%d.bias", l);
        CT__ADD(name, 1, CT_INIT_ZEROS, C);
        s->blk[l].ln2_b = t->offset;
    }
    for (int l = 0; l < nb; l++) {
        /* Conv1d(C, C, kernel_size=1): weight (C, C, 1), bias U(+-1/sqrt(C * 1)). */
        size_t *w[2] = {&s->blk[l].c1_w, &s->blk[l].c2_w},
               *b[2] = {&s->blk[l].c1_b, &s->blk[l].c2_b};
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "forward_layers.%d.conv%d.weight", l, k + 1);
            CT__ADD(name, 3, CT_INIT_XAVIER_NORMAL, C, C, 1);
            *w[k] = t->offset;
            snprintf(name, sizeof name, "forward_layers.%d.conv%d.bias", l, k + 1);
            CT__ADD(name, 1, CT_INIT_FANIN_UNIFORM, C);
            t->fan_in = (int)C;
            *b[k] = t->offset;
        }
    }
    CT__ADD("last_layernorm.weight", 1, CT_INIT_ONES, C);
    s->lnf_w = t->offset;
    CT__ADD("last_layernorm.bias", 1, CT_INIT_ZEROS, C);
    s->lnf_b = t->offset;
#undef CT__ADD
    return 0;
}

int ct__sasrec_build(ct_model_t *m, ct_errbuf_t *eb)
{
    ct__sasrec_t *s = calloc(1, sizeof *s);
    if (!s)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    m->impl = s;
    m->vt = &ct__sasrec_vtbl;
    if (ct__build_table(m, s) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");

    ct_ops_t *o = m->ops;
    ct__carve_t c = {NULL, 0};
    ct__carve_arena(s, m, &c);
    size_t bytes = c.used;
    if (o->alloc(o, &s->arena, bytes) != 0)
        return ct_errbuf_set(eb, -ENOMEM,
                             "out of memory for %.1f MB of activations (lower "
                             "--batch_size or --maxlen)",
                             (double)bytes / 1e6);
    c = (ct__carve_t){s->arena, 0};
    ct__carve_arena(s, m, &c);

    /* The evaluation query mask: column L-1 of every row. */
    size_t N = (size_t)m->max_batch * (size_t)m->cfg.maxlen;
    int32_t *mask = calloc(N, sizeof *mask);
    if (!mask)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    for (size_t r = 0; r < (size_t)m->max_batch; r++)
        mask[r * (size_t)m->cfg.maxlen + (size_t)m->cfg.maxlen - 1] = 1;
    o->copy(o, s->eval_qmask, mask, N * sizeof *mask, CT_COPY_H2D);
    int rc = o->sync(o);
    free(mask);
    if (rc != 0)
        return ct_errbuf_set(eb, rc, "the %s backend failed while setting up the model", o->name);
    return 0;
}
