/*
 * ctrain_sasrec.c - the model kinds SASRec (docs/models.md §2) and TiSASRec (§3): their parameter
 * tables with the references' state_dict names, the activation arena, and the forward and
 * backward passes of the block layouts, the mHC variant of pre_ln (§7) and the three losses,
 * every op called through the dispatch table (ct_ops.h) so the same code runs on any backend.
 * The two kinds share everything but the embedding and the attention sub-layer, so one file
 * holds both and the layouts (and mHC) work for either.
 *
 * ---- legend ----------------------------------------------------------------------------------
 *   B rows (users) of the micro-batch, L = maxlen, C = hidden_units, NH heads, N = B*L rows of
 *   the (N,C) stream, V = items + 1, n mHC streams, T = time_span. x is the block's input
 *   stream, LNa / LNf the block's attention_layernorms / forward_layernorms, FFN = conv1 ->
 *   dropout -> ReLU -> conv2 -> dropout (ReLU after the first dropout equals ReLU before it).
 *
 *   post_ln       s1 = x + A(x,x);   y = LNa(s1);  s2 = y + FFN(y);   out = LNf(s2)
 *   pre_ln        xn = LNa(x); s1 = x + A(xn,xn);  y = LNf(s1);       out = s1 + FFN(y)
 *   original      q = LNa(x);  s1 = q + A(q,x);    y = LNf(s1);       out = y + FFN(y)
 *   original2020  original, then out *= (seq != 0); also after the embedding dropout
 *   pre_ln + mHC  X (N,n,C): U = H^pre X; X1 = H^res X + H^post^T A(LNa(U), LNa(U));
 *                 U1 = H^pre' X1; out = H^res' X1 + H^post'^T FFN(LNf(U1))   (7.2; the
 *                 coefficients of each of the two mHC layers from its own input streams)
 * A(q-source, kv-source) is the kind's attention sub-layer:
 *   SASRec    in_proj (packed q|k|v) -> causal softmax attention with dropout on the
 *             probabilities -> out_proj;
 *   TiSASRec  Q_w, K_w, V_w; k += P^K, v += P^V (the dropped absolute-position rows); the
 *             time-aware attention of ct_tisas_attention_* with the interval tables R^K, R^V;
 *             no output projection.
 * The embedding: SASRec sqrt(C) E[seq] + P[pid] (pid by the layout's rule); TiSASRec
 * sqrt(C) E[seq] (positions act only inside attention); then dropout, then the timeline mask
 * where the model has one (TiSASRec always: after the embedding and after every block, on all
 * n streams with mHC). mHC replicates the embedding into the n streams and averages them before
 * the final LayerNorm. Then F = last_layernorm(...), and the loss: BCE on r+ = F . E[pos],
 * r- = F . E[neg]; or softmax cross-entropy over every item; or over the positive and the
 * sequence's sampled negatives.
 *
 * TiSASRec's four gathered tensors (P^K, P^V per (b,t,c); R^K, R^V per (b,i,j,c)) each get their
 * own dropout, drawn once per pass and shared by all blocks, as in the reference: P^K and P^V
 * are formed once per pass ((B,L,C) each); the interval tensors are never formed - their
 * masks are drawn once per pass as bits (B*L*L*C bits each, 1/32 of the float tensor) and the
 * attention reads R^K, R^V rows from the tables (see kernels/cpu/tisas.c).
 *
 * ---- backward conventions ------------------------------------------------------------------
 * Ops ACCUMULATE gradients (ct_kernels.h). Every activation-gradient buffer is zeroed (or
 * overwritten by a copy) right before the first op that adds into it; where a gradient simply
 * passes through a sum (residual), the same buffer serves both branches or is copied, never
 * recomputed. Each block's backward takes d(out) in a buffer it may overwrite and ADDS d(x)
 * into a buffer the caller zeroed (with mHC both are (N,n,C) stream gradients).
 *
 * ---- padding-query skipping (ct_kernels.h's contract) -------------------------------------------
 * Training: the last block's attention skips padding queries (their rows reach only logits the
 * loss ignores); under the timeline mask every block does (padding rows are zeroed after each
 * block). TiSASRec's attention writes padding query rows as zeros (the reference's uniform rows
 * are zeroed by its timeline mask). Evaluation: the last block computes only column L-1, the
 * one that is scored. The result is bitwise what no skipping gives (cfg.no_skip; tests compare
 * both).
 *
 * Not here: the loss normaliser's meaning (the caller's count), optimizer and data.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain_model_internal.h"

/* Offsets of one block's tensors in the flat buffers. */
typedef struct ctrain_sasrec__blk_params {
    size_t ln1_w, ln1_b; /* attention_layernorms.l */
    size_t in_w, in_b;   /* SASRec: attention_layers.l.in_proj_{weight (3C,C), bias (3C)} */
    size_t out_w, out_b; /* SASRec: attention_layers.l.out_proj.{weight (C,C), bias (C)} */
    size_t qw, qb, kw, kb, vw, vb; /* TiSASRec: attention_layers.l.{Q,K,V}_w.{weight, bias} */
    size_t ln2_w, ln2_b;           /* forward_layernorms.l */
    size_t c1_w, c1_b;             /* forward_layers.l.conv1.{weight (C,C,1), bias (C)} */
    size_t c2_w, c2_b;             /* forward_layers.l.conv2 */
    /* mHC: {attention,forward}_hc.l.{phi (nC,K), alpha (3), bias (K)}; [0] attention, [1] FFN */
    size_t hc_phi[2], hc_alpha[2], hc_bias[2];
} ctrain_sasrec__blk_params_t;

/* One mHC layer's saved activations. */
typedef struct ctrain_sasrec__hc_acts {
    float *u;                   /* (N,C) H^pre X, the sub-layer input */
    float *hpre, *hpost, *hres; /* (N,n), (N,n), (N,n,n) */
    float *proj, *rstd;         /* (N,K), (N) for the coefficients' backward */
    float *Y;                   /* (N,n,C) the layer's output streams */
} ctrain_sasrec__hc_acts_t;

/* One block's saved activations (N = max_batch * L rows each). */
typedef struct ctrain_sasrec__blk_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N): y (post_ln), xn (pre_ln) or q */
    float *qkv;                       /* SASRec (N,3C) packed q|k|v; TiSASRec q, k, v (N,C) each */
    float *att;                       /* (B,NH,L,L) softmax probabilities before dropout */
    float *ao;                        /* (N,C) SASRec: attention output before out_proj */
    float *s1;                        /* (N,C) the attention residual sum (mHC: the branch) */
    float *ln2;                       /* (N,C) y = LNf(.) (not post_ln: out is LNf's output) */
    float *ln2_mean, *ln2_rstd;       /* (N) LNf statistics */
    float *h;                         /* (N,C) FFN hidden, after dropout and ReLU */
    float *s2;                        /* (N,C) post_ln only: y + FFN(y), LNf's input */
    float *out;                       /* (N,C) the block output (mHC: the FFN branch) */
    ctrain_sasrec__hc_acts_t hc[2];   /* mHC: around the attention (0) and the FFN (1) */
} ctrain_sasrec__blk_acts_t;

typedef struct ctrain_sasrec__sasrec {
    size_t wte, wpe, lnf_w, lnf_b;
    size_t pk, pv, rk, rv; /* TiSASRec: abs_pos_{K,V}_emb, time_matrix_{K,V}_emb */
    ctrain_sasrec__blk_params_t blk[CTRAIN_MODEL_MAX_BLOCKS];

    void *arena;
    int32_t *seq, *pos, *neg;    /* (B,L) inputs copied to the backend */
    int32_t *row_neg;            /* (B,M) sampled-CE negatives */
    int64_t *tseq;               /* (B,L) TiSASRec scaled times */
    int32_t *eval_qmask;         /* (B,L) 1 in column L-1 only */
    float *x0;                   /* (N,C) embedding output */
    float *X0;                   /* (N,n,C) mHC: the embedding in every stream */
    float *xc;                   /* (N,C) mHC: the streams' average, the final LN's input */
    float *pkd, *pvd;            /* (N,C) TiSASRec: the pass's dropped absolute-position rows */
    uint32_t *mask_rk, *mask_rv; /* TiSASRec with dropout: the pass's interval masks as bits */
    ctrain_sasrec__blk_acts_t act[CTRAIN_MODEL_MAX_BLOCKS];
    float *lnf, *lnf_mean, *lnf_rstd;             /* (N,C), (N), (N) final LayerNorm */
    float *pos_logits, *neg_logits, *dpos, *dneg; /* (N) */
    float *loss;                                  /* (1) */
    /* gradient scratch, (N,C) each unless noted, reused by every block */
    float *g_cur, *g_in; /* (N,C), or (N,n,C) with mHC: the block-boundary gradients */
    float *g_mid;        /* (N,n,C) mHC: between a block's two mHC layers */
    float *g_a, *g_b, *g_h, *g_hp, *g_ao, *g_u;
    float *g_qkv;                     /* (N,3C) */
    float *g_pk, *g_pv;               /* (N,C) TiSASRec: d(dropped P^K, P^V) over all blocks */
    float *g_hpre, *g_hpost, *g_hres; /* mHC: (N,n), (N,n), (N,n,n) */
    float *att_fwd_scratch, *att_bwd_scratch, *mhc_scratch, *loss_scratch;
    int last_B; /* rows of the last forward_backward (for logits) */
} ctrain_sasrec__sasrec_t;

/* Everything one pass (a training micro-batch or an evaluation batch) needs. */
typedef struct ctrain_sasrec__pass {
    ctrain_model_t *m;
    ctrain_sasrec__sasrec_t *s;
    ct_ops_t *o;
    const float *W; /* params */
    float *G;       /* grads */
    int B, L, C, NH, N, n;
    int64_t NC, NS; /* N*C, and N*n*C with mHC */
    bool train, ti, mhc, timeline;
    uint64_t seed;
    int64_t step, row0;
} ctrain_sasrec__pass_t;

/* ---- helpers --------------------------------------------------------------------------------- */

static ct_dropout_t ctrain_sasrec__drop(const ctrain_sasrec__pass_t *p, int site, int64_t per_row)
{
    if (!p->train || p->m->cfg.dropout == 0.0f) {
        ct_dropout_t none = {0.0f, 0, 0, 0};
        return none;
    }
    return ctrain_model_dropout_site(p->m->cfg.dropout, p->seed, p->step, site, p->row0, per_row);
}

static int ctrain_sasrec__site_attn(int l)
{
    return 1 + 3 * l;
}
static int ctrain_sasrec__site_ffn1(int l)
{
    return 2 + 3 * l;
}
static int ctrain_sasrec__site_ffn2(int l)
{
    return 3 + 3 * l;
}

/* The query mask of block l's attention (NULL: every query row). */
static const int32_t *ctrain_sasrec__qmask(const ctrain_sasrec__pass_t *p, int l)
{
    const ctrain_model_cfg_t *c = &p->m->cfg;
    if (c->no_skip)
        return NULL;
    bool last = l == c->num_blocks - 1;
    if (!p->train && last)
        return p->s->eval_qmask;
    if (last || p->timeline)
        return p->s->seq;
    return NULL;
}

static void ctrain_sasrec__dropout(const ctrain_sasrec__pass_t *p, float *x, int64_t n,
                                   ct_dropout_t d)
{
    if (d.p > 0.0f)
        p->o->dropout(p->o, x, x, n, d);
}

/* ---- sub-layers ---------------------------------------------------------------------------- */

static ct_dropout_t ctrain_sasrec__drop_att(const ctrain_sasrec__pass_t *p, int l)
{
    return ctrain_sasrec__drop(p, ctrain_sasrec__site_attn(l), (int64_t)p->NH * p->L * p->L);
}

/* The interval tensors' dropout masks of this pass (NULL when there is no dropout). */
static const uint32_t *ctrain_sasrec__mask_rk(const ctrain_sasrec__pass_t *p)
{
    return p->train && p->m->cfg.dropout > 0.0f ? p->s->mask_rk : NULL;
}
static const uint32_t *ctrain_sasrec__mask_rv(const ctrain_sasrec__pass_t *p)
{
    return p->train && p->m->cfg.dropout > 0.0f ? p->s->mask_rv : NULL;
}

/* s1 = res + A(xq, xkv); res may be NULL (mHC: s1 is the branch alone). */
static void ctrain_sasrec__attn_forward(const ctrain_sasrec__pass_t *p, int l, const float *xq,
                                        const float *xkv, const float *res)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    if (p->ti) {
        float *q = a->qkv, *k = a->qkv + p->NC, *v = a->qkv + 2 * p->NC;
        o->linear_forward(o, q, xq, p->W + w->qw, p->W + w->qb, p->N, p->C, p->C);
        o->linear_forward(o, k, xkv, p->W + w->kw, p->W + w->kb, p->N, p->C, p->C);
        o->residual_forward(o, k, k, s->pkd, p->NC);
        o->linear_forward(o, v, xkv, p->W + w->vw, p->W + w->vb, p->N, p->C, p->C);
        o->residual_forward(o, v, v, s->pvd, p->NC);
        o->tisas_attention_forward(o, a->s1, a->att, s->att_fwd_scratch, q, k, v, p->W + s->rk,
                                   p->W + s->rv, s->tseq, ctrain_sasrec__qmask(p, l), p->B, p->L,
                                   p->C, p->NH, p->m->cfg.time_span, ctrain_sasrec__drop_att(p, l),
                                   ctrain_sasrec__mask_rk(p), ctrain_sasrec__mask_rv(p),
                                   p->m->cfg.dropout);
    } else {
        o->qkv_forward(o, a->qkv, xq, xkv, p->W + w->in_w, p->W + w->in_b, p->N, p->C);
        o->attention_forward(o, a->ao, a->att, s->att_fwd_scratch, a->qkv,
                             ctrain_sasrec__qmask(p, l), p->B, p->L, p->C, p->NH,
                             ctrain_sasrec__drop_att(p, l));
        o->linear_forward(o, a->s1, a->ao, p->W + w->out_w, p->W + w->out_b, p->N, p->C, p->C);
    }
    if (res)
        o->residual_forward(o, a->s1, res, a->s1, p->NC);
}

/* ga: d(attention branch output), read only; adds into dxq and dxkv (which may be equal). */
static void ctrain_sasrec__attn_backward(const ctrain_sasrec__pass_t *p, int l, const float *ga,
                                         const float *xq, const float *xkv, float *dxq, float *dxkv)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    if (p->ti) {
        const float *q = a->qkv, *k = a->qkv + p->NC, *v = a->qkv + 2 * p->NC;
        float *dq = s->g_qkv, *dk = s->g_qkv + p->NC, *dv = s->g_qkv + 2 * p->NC;
        o->zero(o, s->g_qkv, 3 * nb);
        o->tisas_attention_backward(
            o, dq, dk, dv, p->G + s->rk, p->G + s->rv, s->att_bwd_scratch, ga, a->att, q, k, v,
            p->W + s->rk, p->W + s->rv, s->tseq, ctrain_sasrec__qmask(p, l), p->B, p->L, p->C,
            p->NH, p->m->cfg.time_span, ctrain_sasrec__drop_att(p, l), ctrain_sasrec__mask_rk(p),
            ctrain_sasrec__mask_rv(p), p->m->cfg.dropout);
        /* k = K_w xkv + P^K: the position rows collect d k from every block */
        o->residual_forward(o, s->g_pk, s->g_pk, dk, p->NC);
        o->residual_forward(o, s->g_pv, s->g_pv, dv, p->NC);
        o->linear_backward(o, dxq, p->G + w->qw, p->G + w->qb, dq, xq, p->W + w->qw, p->N, p->C,
                           p->C);
        o->linear_backward(o, dxkv, p->G + w->kw, p->G + w->kb, dk, xkv, p->W + w->kw, p->N, p->C,
                           p->C);
        o->linear_backward(o, dxkv, p->G + w->vw, p->G + w->vb, dv, xkv, p->W + w->vw, p->N, p->C,
                           p->C);
        return;
    }
    o->zero(o, s->g_ao, nb);
    o->linear_backward(o, s->g_ao, p->G + w->out_w, p->G + w->out_b, ga, a->ao, p->W + w->out_w,
                       p->N, p->C, p->C);
    o->zero(o, s->g_qkv, 3 * nb);
    o->attention_backward(o, s->g_qkv, s->att_bwd_scratch, s->g_ao, a->att, a->qkv,
                          ctrain_sasrec__qmask(p, l), p->B, p->L, p->C, p->NH,
                          ctrain_sasrec__drop_att(p, l));
    o->qkv_backward(o, dxq, dxkv, p->G + w->in_w, p->G + w->in_b, s->g_qkv, xq, xkv, p->W + w->in_w,
                    p->N, p->C);
}

/* f = FFN(y) */
static void ctrain_sasrec__ffn_forward(const ctrain_sasrec__pass_t *p, int l, const float *y,
                                       float *f)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ct_ops_t *o = p->o;
    int64_t per_row = (int64_t)p->L * p->C;
    o->linear_forward(o, a->h, y, p->W + w->c1_w, p->W + w->c1_b, p->N, p->C, p->C);
    ctrain_sasrec__dropout(p, a->h, p->NC,
                           ctrain_sasrec__drop(p, ctrain_sasrec__site_ffn1(l), per_row));
    o->relu_forward(o, a->h, a->h, p->NC);
    o->linear_forward(o, f, a->h, p->W + w->c2_w, p->W + w->c2_b, p->N, p->C, p->C);
    ctrain_sasrec__dropout(p, f, p->NC,
                           ctrain_sasrec__drop(p, ctrain_sasrec__site_ffn2(l), per_row));
}

/* gf: d(f), overwritten; adds d(y) into gy. */
static void ctrain_sasrec__ffn_backward(const ctrain_sasrec__pass_t *p, int l, const float *y,
                                        float *gf, float *gy)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    int64_t per_row = (int64_t)p->L * p->C;
    ctrain_sasrec__dropout(p, gf, p->NC,
                           ctrain_sasrec__drop(p, ctrain_sasrec__site_ffn2(l), per_row));
    o->zero(o, s->g_h, nb);
    o->linear_backward(o, s->g_h, p->G + w->c2_w, p->G + w->c2_b, gf, a->h, p->W + w->c2_w, p->N,
                       p->C, p->C);
    o->zero(o, s->g_hp, nb);
    o->relu_backward(o, s->g_hp, s->g_h, a->h, p->NC);
    ctrain_sasrec__dropout(p, s->g_hp, p->NC,
                           ctrain_sasrec__drop(p, ctrain_sasrec__site_ffn1(l), per_row));
    o->linear_backward(o, gy, p->G + w->c1_w, p->G + w->c1_b, s->g_hp, y, p->W + w->c1_w, p->N,
                       p->C, p->C);
}

static void ctrain_sasrec__ln_forward(const ctrain_sasrec__pass_t *p, float *out, float *mean,
                                      float *rstd, const float *x, size_t w, size_t b)
{
    p->o->layernorm_forward(p->o, out, mean, rstd, x, p->W + w, p->W + b, p->N, p->C,
                            CT_SASREC_LN_EPS);
}

static void ctrain_sasrec__ln_backward(const ctrain_sasrec__pass_t *p, float *dx, const float *dout,
                                       const float *x, size_t w, size_t b, const float *mean,
                                       const float *rstd)
{
    p->o->layernorm_backward(p->o, dx, p->G + w, p->G + b, dout, x, p->W + w, mean, rstd, p->N,
                             p->C);
}

/* ---- the block layouts ----------------------------------------------------------------------- */

static void ctrain_sasrec__post_ln_forward(const ctrain_sasrec__pass_t *p, int l, const float *x)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__attn_forward(p, l, x, x, x); /* s1 = x + A(x,x) */
    ctrain_sasrec__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, a->s1, w->ln1_w,
                              w->ln1_b); /* y */
    ctrain_sasrec__ffn_forward(p, l, a->ln1, a->s2);
    p->o->residual_forward(p->o, a->s2, a->ln1, a->s2, p->NC); /* s2 = y + FFN(y) */
    ctrain_sasrec__ln_forward(p, a->out, a->ln2_mean, a->ln2_rstd, a->s2, w->ln2_w, w->ln2_b);
}

static void ctrain_sasrec__post_ln_backward(const ctrain_sasrec__pass_t *p, int l, const float *x,
                                            float *gout, float *gin)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gs2 = s->g_a, *gy = s->g_b, *gs1 = s->g_a;
    o->zero(o, gs2, nb);
    ctrain_sasrec__ln_backward(p, gs2, gout, a->s2, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    o->copy(o, gy, gs2, nb, CT_COPY_D2D);               /* s2 = y + f: d(y) starts as d(s2) ... */
    ctrain_sasrec__ffn_backward(p, l, a->ln1, gs2, gy); /* ... and d(f) = d(s2) */
    o->zero(o, gs1, nb);
    ctrain_sasrec__ln_backward(p, gs1, gy, a->s1, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
    o->residual_forward(o, gin, gin, gs1, p->NC); /* s1 = x + attn: d(x) += d(s1) */
    ctrain_sasrec__attn_backward(p, l, gs1, x, x, gin, gin);
}

static void ctrain_sasrec__pre_ln_forward(const ctrain_sasrec__pass_t *p, int l, const float *x)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b); /* xn */
    ctrain_sasrec__attn_forward(p, l, a->ln1, a->ln1, x); /* s1 = x + A(xn,xn) */
    ctrain_sasrec__ln_forward(p, a->ln2, a->ln2_mean, a->ln2_rstd, a->s1, w->ln2_w,
                              w->ln2_b); /* y */
    ctrain_sasrec__ffn_forward(p, l, a->ln2, a->out);
    p->o->residual_forward(p->o, a->out, a->s1, a->out, p->NC); /* out = s1 + FFN(y) */
    if (p->timeline)
        p->o->timeline_mask(p->o, a->out, a->out, p->s->seq, p->N, p->C);
}

static void ctrain_sasrec__pre_ln_backward(const ctrain_sasrec__pass_t *p, int l, const float *x,
                                           float *gout, float *gin)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gs1 = s->g_a, *gy = s->g_b, *gxn = s->g_b;
    if (p->timeline)
        o->timeline_mask(o, gout, gout, s->seq, p->N, p->C);
    o->copy(o, gs1, gout, nb, CT_COPY_D2D); /* out = s1 + f: d(s1) starts as d(out) */
    o->zero(o, gy, nb);
    ctrain_sasrec__ffn_backward(p, l, a->ln2, gout, gy); /* d(f) = d(out) */
    ctrain_sasrec__ln_backward(p, gs1, gy, a->s1, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    o->residual_forward(o, gin, gin, gs1, p->NC); /* s1 = x + attn */
    o->zero(o, gxn, nb);
    ctrain_sasrec__attn_backward(p, l, gs1, a->ln1, a->ln1, gxn, gxn);
    ctrain_sasrec__ln_backward(p, gin, gxn, x, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
}

static void ctrain_sasrec__original_forward(const ctrain_sasrec__pass_t *p, int l, const float *x)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b); /* q */
    ctrain_sasrec__attn_forward(p, l, a->ln1, x, a->ln1); /* s1 = q + A(q,x) */
    ctrain_sasrec__ln_forward(p, a->ln2, a->ln2_mean, a->ln2_rstd, a->s1, w->ln2_w,
                              w->ln2_b); /* y */
    ctrain_sasrec__ffn_forward(p, l, a->ln2, a->out);
    p->o->residual_forward(p->o, a->out, a->ln2, a->out, p->NC); /* out = y + FFN(y) */
    if (p->timeline)
        p->o->timeline_mask(p->o, a->out, a->out, p->s->seq, p->N, p->C);
}

static void ctrain_sasrec__original_backward(const ctrain_sasrec__pass_t *p, int l, const float *x,
                                             float *gout, float *gin)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gy = s->g_b, *gs1 = s->g_a, *gq = s->g_b;
    if (p->timeline)
        o->timeline_mask(o, gout, gout, s->seq, p->N, p->C);
    o->copy(o, gy, gout, nb, CT_COPY_D2D); /* out = y + f */
    ctrain_sasrec__ffn_backward(p, l, a->ln2, gout, gy);
    o->zero(o, gs1, nb);
    ctrain_sasrec__ln_backward(p, gs1, gy, a->s1, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    o->copy(o, gq, gs1, nb, CT_COPY_D2D); /* s1 = q + attn: d(q) starts as d(s1) */
    ctrain_sasrec__attn_backward(p, l, gs1, a->ln1, x, gq, gin);
    ctrain_sasrec__ln_backward(p, gin, gq, x, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
}

/* ---- mHC (pre_ln with n residual streams) ---------------------------------------------------- */

/* The coefficients of mHC layer k of block l from its input streams X, and u = H^pre X. */
static void ctrain_sasrec__hc_in_forward(const ctrain_sasrec__pass_t *p, int l, int k,
                                         const float *X)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__hc_acts_t *h = &p->s->act[l].hc[k];
    ct_ops_t *o = p->o;
    o->mhc_coeffs_forward(o, h->hpre, h->hpost, h->hres, h->proj, h->rstd, X, p->W + w->hc_phi[k],
                          p->W + w->hc_alpha[k], p->W + w->hc_bias[k], p->N, p->n, p->C,
                          CTRAIN_MHC_ITERS, CTRAIN_MHC_RMS_EPS);
    o->mhc_pre_forward(o, h->u, X, h->hpre, p->N, p->n, p->C);
}

/* The backward of ctrain_sasrec__hc_in_forward: du (N,C) read; adds into dX; uses the g_h* buffers,
 * which hold d(hpost), d(hres) from the layer's post backward and get d(hpre) here. */
static void ctrain_sasrec__hc_in_backward(const ctrain_sasrec__pass_t *p, int l, int k,
                                          const float *X, const float *du, float *dX)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__hc_acts_t *h = &p->s->act[l].hc[k];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    o->zero(o, s->g_hpre, (size_t)p->N * p->n * sizeof(float));
    o->mhc_pre_backward(o, dX, s->g_hpre, du, X, h->hpre, p->N, p->n, p->C);
    o->mhc_coeffs_backward(o, dX, p->G + w->hc_phi[k], p->G + w->hc_alpha[k], p->G + w->hc_bias[k],
                           s->mhc_scratch, s->g_hpre, s->g_hpost, s->g_hres, X, p->W + w->hc_phi[k],
                           p->W + w->hc_alpha[k], p->W + w->hc_bias[k], h->proj, h->rstd, p->N,
                           p->n, p->C, CTRAIN_MHC_ITERS);
}

/* Y = H^res X + H^post^T f's backward: reads dY; adds into dX; writes d f into df (zeroed
 * here) and d(hpost), d(hres) into the g_h* buffers. */
static void ctrain_sasrec__hc_out_backward(const ctrain_sasrec__pass_t *p, int l, int k,
                                           const float *X, const float *f, const float *dY,
                                           float *dX, float *df)
{
    ctrain_sasrec__hc_acts_t *h = &p->s->act[l].hc[k];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    o->zero(o, df, (size_t)p->NC * sizeof(float));
    o->zero(o, s->g_hpost, (size_t)p->N * p->n * sizeof(float));
    o->zero(o, s->g_hres, (size_t)p->N * p->n * p->n * sizeof(float));
    o->mhc_post_backward(o, dX, df, s->g_hres, s->g_hpost, dY, X, f, h->hres, h->hpost, p->N, p->n,
                         p->C);
}

/* X: the block's input streams (N,n,C); the output streams land in act[l].hc[1].Y. */
static void ctrain_sasrec__mhc_forward(const ctrain_sasrec__pass_t *p, int l, const float *X)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ct_ops_t *o = p->o;
    /* attention sub-layer: f_a = A(LNa(u), LNa(u)) */
    ctrain_sasrec__hc_in_forward(p, l, 0, X);
    ctrain_sasrec__ln_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, a->hc[0].u, w->ln1_w, w->ln1_b);
    ctrain_sasrec__attn_forward(p, l, a->ln1, a->ln1, NULL);
    o->mhc_post_forward(o, a->hc[0].Y, X, a->s1, a->hc[0].hres, a->hc[0].hpost, p->N, p->n, p->C);
    /* FFN sub-layer: f_f = FFN(LNf(u1)) */
    ctrain_sasrec__hc_in_forward(p, l, 1, a->hc[0].Y);
    ctrain_sasrec__ln_forward(p, a->ln2, a->ln2_mean, a->ln2_rstd, a->hc[1].u, w->ln2_w, w->ln2_b);
    ctrain_sasrec__ffn_forward(p, l, a->ln2, a->out);
    o->mhc_post_forward(o, a->hc[1].Y, a->hc[0].Y, a->out, a->hc[1].hres, a->hc[1].hpost, p->N,
                        p->n, p->C);
    if (p->timeline)
        o->timeline_mask(o, a->hc[1].Y, a->hc[1].Y, p->s->seq, p->N, p->n * p->C);
}

static void ctrain_sasrec__mhc_backward(const ctrain_sasrec__pass_t *p, int l, const float *X,
                                        float *gout, float *gin)
{
    const ctrain_sasrec__blk_params_t *w = &p->s->blk[l];
    ctrain_sasrec__blk_acts_t *a = &p->s->act[l];
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    size_t nb = (size_t)p->NC * sizeof(float);
    float *gf = s->g_a, *gy = s->g_b, *gu = s->g_u, *gmid = s->g_mid;
    if (p->timeline)
        o->timeline_mask(o, gout, gout, s->seq, p->N, p->n * p->C);
    /* FFN sub-layer */
    o->zero(o, gmid, (size_t)p->NS * sizeof(float));
    ctrain_sasrec__hc_out_backward(p, l, 1, a->hc[0].Y, a->out, gout, gmid, gf);
    o->zero(o, gy, nb);
    ctrain_sasrec__ffn_backward(p, l, a->ln2, gf, gy);
    o->zero(o, gu, nb);
    ctrain_sasrec__ln_backward(p, gu, gy, a->hc[1].u, w->ln2_w, w->ln2_b, a->ln2_mean, a->ln2_rstd);
    ctrain_sasrec__hc_in_backward(p, l, 1, a->hc[0].Y, gu, gmid);
    /* attention sub-layer */
    ctrain_sasrec__hc_out_backward(p, l, 0, X, a->s1, gmid, gin, gf);
    o->zero(o, gy, nb);
    ctrain_sasrec__attn_backward(p, l, gf, a->ln1, a->ln1, gy, gy);
    o->zero(o, gu, nb);
    ctrain_sasrec__ln_backward(p, gu, gy, a->hc[0].u, w->ln1_w, w->ln1_b, a->ln1_mean, a->ln1_rstd);
    ctrain_sasrec__hc_in_backward(p, l, 0, X, gu, gin);
}

typedef void (*ctrain_sasrec__blk_fwd_fn)(const ctrain_sasrec__pass_t *p, int l, const float *x);
typedef void (*ctrain_sasrec__blk_bwd_fn)(const ctrain_sasrec__pass_t *p, int l, const float *x,
                                          float *gout, float *gin);

static const struct {
    ctrain_sasrec__blk_fwd_fn fwd;
    ctrain_sasrec__blk_bwd_fn bwd;
} ctrain_sasrec__layouts[CTRAIN_LAYOUT_COUNT] = {
    [CTRAIN_LAYOUT_POST_LN] = {ctrain_sasrec__post_ln_forward, ctrain_sasrec__post_ln_backward},
    [CTRAIN_LAYOUT_PRE_LN] = {ctrain_sasrec__pre_ln_forward, ctrain_sasrec__pre_ln_backward},
    [CTRAIN_LAYOUT_ORIGINAL] = {ctrain_sasrec__original_forward, ctrain_sasrec__original_backward},
    [CTRAIN_LAYOUT_ORIGINAL2020] = {ctrain_sasrec__original_forward,
                                    ctrain_sasrec__original_backward},
};

static ctrain_sasrec__blk_fwd_fn ctrain_sasrec__fwd_of(const ctrain_sasrec__pass_t *p)
{
    return p->mhc ? ctrain_sasrec__mhc_forward : ctrain_sasrec__layouts[p->m->cfg.layout].fwd;
}

static ctrain_sasrec__blk_bwd_fn ctrain_sasrec__bwd_of(const ctrain_sasrec__pass_t *p)
{
    return p->mhc ? ctrain_sasrec__mhc_backward : ctrain_sasrec__layouts[p->m->cfg.layout].bwd;
}

/* Block l's output: streams with mHC, else the (N,C) stream. */
static const float *ctrain_sasrec__blk_out(const ctrain_sasrec__pass_t *p, int l)
{
    return p->mhc ? p->s->act[l].hc[1].Y : p->s->act[l].out;
}

/* ---- whole passes ---------------------------------------------------------------------------- */

static void ctrain_sasrec__pass_init(ctrain_sasrec__pass_t *p, ctrain_model_t *m, int B, bool train)
{
    const ctrain_model_cfg_t *c = &m->cfg;
    *p = (ctrain_sasrec__pass_t){.m = m,
                                 .s = m->impl,
                                 .o = m->ops,
                                 .W = m->params_mem,
                                 .G = m->grads_mem,
                                 .B = B,
                                 .L = c->maxlen,
                                 .C = c->hidden,
                                 .NH = c->num_heads,
                                 .N = B * c->maxlen,
                                 .n = c->mhc_streams > 0 ? c->mhc_streams : 1,
                                 .train = train,
                                 .ti = c->kind == CTRAIN_MODEL_TISASREC,
                                 .mhc = c->mhc_streams > 0,
                                 .timeline = ctrain_model_timeline(c)};
    p->NC = (int64_t)p->N * p->C;
    p->NS = p->NC * p->n;
}

/* Embedding, blocks, final LayerNorm: s->lnf. Returns the final LayerNorm's input. */
static const float *ctrain_sasrec__forward(const ctrain_sasrec__pass_t *p)
{
    const ctrain_model_cfg_t *c = &p->m->cfg;
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    const int64_t lc = (int64_t)p->L * p->C;
    o->embed_forward(o, s->x0, p->W + s->wte, p->ti ? NULL : p->W + s->wpe, s->seq, p->B, p->L,
                     p->C, sqrtf((float)p->C), ctrain_layout_pos_mode(c->layout));
    ctrain_sasrec__dropout(p, s->x0, p->NC, ctrain_sasrec__drop(p, 0, lc));
    if (p->timeline)
        o->timeline_mask(o, s->x0, s->x0, s->seq, p->N, p->C);
    if (p->ti) {
        /* the pass's absolute-position rows, each tensor with its own dropout */
        o->rows_broadcast_forward(o, s->pkd, p->W + s->pk, p->B, p->L, p->C);
        ctrain_sasrec__dropout(p, s->pkd, p->NC, ctrain_sasrec__drop(p, CTRAIN_SITE_ABS_POS_K, lc));
        o->rows_broadcast_forward(o, s->pvd, p->W + s->pv, p->B, p->L, p->C);
        ctrain_sasrec__dropout(p, s->pvd, p->NC, ctrain_sasrec__drop(p, CTRAIN_SITE_ABS_POS_V, lc));
        if (ctrain_sasrec__mask_rk(p)) {
            /* the interval masks, for the query rows every block computes (under the timeline
             * mask: the real items; all rows without skipping) */
            const int32_t *rows = c->no_skip ? NULL : s->seq;
            o->tisas_mask(o, s->mask_rk, rows, p->B, p->L, p->C,
                          ctrain_sasrec__drop(p, CTRAIN_SITE_TIME_K, lc * p->L));
            o->tisas_mask(o, s->mask_rv, rows, p->B, p->L, p->C,
                          ctrain_sasrec__drop(p, CTRAIN_SITE_TIME_V, lc * p->L));
        }
    }
    const float *x = s->x0;
    if (p->mhc) {
        o->mhc_expand_forward(o, s->X0, s->x0, p->N, p->n, p->C);
        x = s->X0;
    }
    ctrain_sasrec__blk_fwd_fn fwd = ctrain_sasrec__fwd_of(p);
    for (int l = 0; l < c->num_blocks; l++) {
        fwd(p, l, x);
        x = ctrain_sasrec__blk_out(p, l);
    }
    if (p->mhc) {
        o->mhc_collapse_forward(o, s->xc, x, p->N, p->n, p->C);
        x = s->xc;
    }
    ctrain_sasrec__ln_forward(p, s->lnf, s->lnf_mean, s->lnf_rstd, x, s->lnf_w, s->lnf_b);
    return x;
}

/* The loss of the final features; writes d(lnf) into s->g_cur (zeroed here first). */
static void ctrain_sasrec__loss_forward_backward(const ctrain_sasrec__pass_t *p, float count)
{
    const ctrain_model_cfg_t *c = &p->m->cfg;
    ctrain_sasrec__sasrec_t *s = p->s;
    ct_ops_t *o = p->o;
    const int V = c->num_items + 1;
    o->zero(o, s->g_cur, (size_t)p->NC * sizeof(float));
    switch (c->loss) {
    case CTRAIN_LOSS_CE:
        o->ce_loss(o, s->loss, s->g_cur, p->G + s->wte, s->loss_scratch, s->lnf, p->W + s->wte,
                   s->pos, p->N, p->C, V, count);
        break;
    case CTRAIN_LOSS_SAMPLED_CE:
        o->sampled_ce_loss(o, s->loss, s->g_cur, p->G + s->wte, s->loss_scratch, s->lnf,
                           p->W + s->wte, s->pos, s->row_neg, p->B, p->L, p->C, c->num_negatives,
                           count);
        break;
    case CTRAIN_LOSS_BCE:
    default:
        o->score_forward(o, s->pos_logits, s->lnf, p->W + s->wte, s->pos, p->N, p->C);
        o->score_forward(o, s->neg_logits, s->lnf, p->W + s->wte, s->neg, p->N, p->C);
        o->bce_loss(o, s->loss, s->dpos, s->dneg, s->pos_logits, s->neg_logits, s->pos, p->N,
                    count);
        o->score_backward(o, s->g_cur, p->G + s->wte, s->dpos, s->lnf, p->W + s->wte, s->pos, p->N,
                          p->C);
        o->score_backward(o, s->g_cur, p->G + s->wte, s->dneg, s->lnf, p->W + s->wte, s->neg, p->N,
                          p->C);
        break;
    }
}

static int ctrain_sasrec__forward_backward(ctrain_model_t *m, const ctrain_model_batch_t *b,
                                           float count, uint64_t seed, int64_t step, float *loss)
{
    ctrain_sasrec__pass_t p;
    ctrain_sasrec__pass_init(&p, m, b->B, true);
    p.seed = seed, p.step = step, p.row0 = b->row0;
    ctrain_sasrec__sasrec_t *s = p.s;
    ct_ops_t *o = p.o;
    const ctrain_model_cfg_t *c = &m->cfg;
    size_t ni = (size_t)p.N * sizeof(int32_t), nb = (size_t)p.NC * sizeof(float);
    if (b->B < 1 || b->B > m->max_batch || (p.ti && !b->tseq) ||
        (c->loss == CTRAIN_LOSS_SAMPLED_CE && !b->row_neg) ||
        (c->loss == CTRAIN_LOSS_BCE && !b->neg))
        return -EINVAL;
    s->last_B = b->B;
    o->copy(o, s->seq, b->seq, ni, CT_COPY_H2D);
    o->copy(o, s->pos, b->pos, ni, CT_COPY_H2D);
    if (c->loss == CTRAIN_LOSS_BCE)
        o->copy(o, s->neg, b->neg, ni, CT_COPY_H2D);
    if (c->loss == CTRAIN_LOSS_SAMPLED_CE)
        o->copy(o, s->row_neg, b->row_neg, (size_t)b->B * c->num_negatives * sizeof(int32_t),
                CT_COPY_H2D);
    if (p.ti)
        o->copy(o, s->tseq, b->tseq, (size_t)p.N * sizeof(int64_t), CT_COPY_H2D);

    /* ---- forward and loss ---- */
    const float *x_last = ctrain_sasrec__forward(&p);
    ctrain_sasrec__loss_forward_backward(&p, count);

    /* ---- backward ---- */
    const int64_t lc = (int64_t)p.L * p.C;
    o->zero(o, s->g_in, nb);
    ctrain_sasrec__ln_backward(&p, s->g_in, s->g_cur, x_last, s->lnf_w, s->lnf_b, s->lnf_mean,
                               s->lnf_rstd);
    float *gcur = s->g_in, *gin = s->g_cur;
    if (p.mhc) {
        o->zero(o, gin, (size_t)p.NS * sizeof(float));
        o->mhc_collapse_backward(o, gin, gcur, p.N, p.n, p.C);
        float *t = gcur;
        gcur = gin;
        gin = t;
    }
    if (p.ti) {
        o->zero(o, s->g_pk, nb);
        o->zero(o, s->g_pv, nb);
    }
    ctrain_sasrec__blk_bwd_fn bwd = ctrain_sasrec__bwd_of(&p);
    for (int l = c->num_blocks - 1; l >= 0; l--) {
        const float *xin = l > 0 ? ctrain_sasrec__blk_out(&p, l - 1) : (p.mhc ? s->X0 : s->x0);
        o->zero(o, gin, (size_t)p.NS * sizeof(float));
        bwd(&p, l, xin, gcur, gin);
        ctrain_model_grads_ready(m, l); /* and the final LayerNorm's, with the last block's */
        float *t = gcur;
        gcur = gin;
        gin = t;
    }
    if (p.mhc) {
        o->zero(o, gin, nb);
        o->mhc_expand_backward(o, gin, gcur, p.N, p.n, p.C);
        gcur = gin;
    }
    if (p.timeline)
        o->timeline_mask(o, gcur, gcur, s->seq, p.N, p.C);
    ctrain_sasrec__dropout(&p, gcur, p.NC, ctrain_sasrec__drop(&p, 0, lc));
    o->embed_backward(o, p.G + s->wte, p.ti ? NULL : p.G + s->wpe, gcur, s->seq, p.B, p.L, p.C,
                      sqrtf((float)p.C), ctrain_layout_pos_mode(c->layout));
    if (p.ti) {
        ctrain_sasrec__dropout(&p, s->g_pk, p.NC,
                               ctrain_sasrec__drop(&p, CTRAIN_SITE_ABS_POS_K, lc));
        o->rows_broadcast_backward(o, p.G + s->pk, s->g_pk, p.B, p.L, p.C);
        ctrain_sasrec__dropout(&p, s->g_pv, p.NC,
                               ctrain_sasrec__drop(&p, CTRAIN_SITE_ABS_POS_V, lc));
        o->rows_broadcast_backward(o, p.G + s->pv, s->g_pv, p.B, p.L, p.C);
    }
    o->copy(o, loss, s->loss, sizeof *loss, CT_COPY_D2H);
    return o->sync(o);
}

static int ctrain_sasrec__forward_features(ctrain_model_t *m, const int32_t *seq,
                                           const int64_t *tseq, int B, const float **feats,
                                           int *ldf)
{
    ctrain_sasrec__pass_t p;
    if (B < 1 || B > m->max_batch)
        return -EINVAL;
    ctrain_sasrec__pass_init(&p, m, B, false);
    if (p.ti && !tseq)
        return -EINVAL; /* TiSASRec needs the times of the window */
    ct_ops_t *o = p.o;
    o->copy(o, p.s->seq, seq, (size_t)p.N * sizeof(int32_t), CT_COPY_H2D);
    if (p.ti)
        o->copy(o, p.s->tseq, tseq, (size_t)p.N * sizeof(int64_t), CT_COPY_H2D);
    ctrain_sasrec__forward(&p);
    *feats = p.s->lnf + (size_t)(p.L - 1) * p.C;
    *ldf = p.L * p.C;
    return o->sync(o);
}

static int ctrain_sasrec__logits(ctrain_model_t *m, float *pos_logits, float *neg_logits, int64_t n)
{
    ctrain_sasrec__sasrec_t *s = m->impl;
    ct_ops_t *o = m->ops;
    int64_t have = (int64_t)s->last_B * m->cfg.maxlen;
    if (n > have || m->cfg.loss != CTRAIN_LOSS_BCE)
        return -EINVAL;
    o->copy(o, pos_logits, s->pos_logits, (size_t)n * sizeof(float), CT_COPY_D2H);
    o->copy(o, neg_logits, s->neg_logits, (size_t)n * sizeof(float), CT_COPY_D2H);
    return o->sync(o);
}

static void ctrain_sasrec__destroy(ctrain_model_t *m)
{
    ctrain_sasrec__sasrec_t *s = m->impl;
    if (!s)
        return;
    m->ops->release(m->ops, s->arena);
    free(s);
    m->impl = NULL;
}

static const ctrain_model_vtbl_t ctrain_sasrec__sasrec_vtbl = {
    .forward_backward = ctrain_sasrec__forward_backward,
    .forward_features = ctrain_sasrec__forward_features,
    .logits = ctrain_sasrec__logits,
    .destroy = ctrain_sasrec__destroy,
};

/* ---- building -------------------------------------------------------------------------------- */

/* Assigns (or, with c->base == NULL, measures) every arena buffer. */
static void ctrain_sasrec__carve_arena(ctrain_sasrec__sasrec_t *s, const ctrain_model_t *m,
                                       ctrain_model__carve_t *c)
{
    const ctrain_model_cfg_t *cfg = &m->cfg;
    const bool ti = cfg->kind == CTRAIN_MODEL_TISASREC, mhc = cfg->mhc_streams > 0;
    const size_t B = (size_t)m->max_batch, L = (size_t)cfg->maxlen, C = (size_t)cfg->hidden;
    const size_t n = mhc ? (size_t)cfg->mhc_streams : 1, K = (size_t)CT_MHC_COEFFS(n);
    const size_t N = B * L, NC = N * C, NS = NC * n, V = (size_t)cfg->num_items + 1;
    ct_ops_t *o = m->ops;
    s->seq = CTRAIN_MODEL__CARVE_I32(c, N);
    s->pos = CTRAIN_MODEL__CARVE_I32(c, N);
    s->neg = CTRAIN_MODEL__CARVE_I32(c, N);
    s->eval_qmask = CTRAIN_MODEL__CARVE_I32(c, N);
    s->row_neg = cfg->loss == CTRAIN_LOSS_SAMPLED_CE
                     ? CTRAIN_MODEL__CARVE_I32(c, B * (size_t)cfg->num_negatives)
                     : NULL;
    s->tseq = ti ? CTRAIN_MODEL__CARVE_I64(c, N) : NULL;
    s->x0 = CTRAIN_MODEL__CARVE_F32(c, NC);
    s->X0 = mhc ? CTRAIN_MODEL__CARVE_F32(c, NS) : NULL;
    s->xc = mhc ? CTRAIN_MODEL__CARVE_F32(c, NC) : NULL;
    s->pkd = ti ? CTRAIN_MODEL__CARVE_F32(c, NC) : NULL;
    s->pvd = ti ? CTRAIN_MODEL__CARVE_F32(c, NC) : NULL;
    const bool masks = ti && cfg->dropout > 0.0f;
    const size_t mw = N * CT_TISAS_MASK_WORDS(L, C);
    s->mask_rk = masks ? (uint32_t *)ctrain_model__carve_take(c, mw * sizeof(uint32_t)) : NULL;
    s->mask_rv = masks ? (uint32_t *)ctrain_model__carve_take(c, mw * sizeof(uint32_t)) : NULL;
    for (int l = 0; l < cfg->num_blocks; l++) {
        ctrain_sasrec__blk_acts_t *a = &s->act[l];
        bool post = cfg->layout == CTRAIN_LAYOUT_POST_LN;
        a->ln1 = CTRAIN_MODEL__CARVE_F32(c, NC);
        a->ln1_mean = CTRAIN_MODEL__CARVE_F32(c, N);
        a->ln1_rstd = CTRAIN_MODEL__CARVE_F32(c, N);
        a->qkv = CTRAIN_MODEL__CARVE_F32(c, 3 * NC);
        a->att = CTRAIN_MODEL__CARVE_F32(c, B * (size_t)cfg->num_heads * L * L);
        a->ao = ti ? NULL : CTRAIN_MODEL__CARVE_F32(c, NC);
        a->s1 = CTRAIN_MODEL__CARVE_F32(c, NC);
        a->ln2 = post ? NULL : CTRAIN_MODEL__CARVE_F32(c, NC);
        a->ln2_mean = CTRAIN_MODEL__CARVE_F32(c, N);
        a->ln2_rstd = CTRAIN_MODEL__CARVE_F32(c, N);
        a->h = CTRAIN_MODEL__CARVE_F32(c, NC);
        a->s2 = post ? CTRAIN_MODEL__CARVE_F32(c, NC) : NULL;
        a->out = CTRAIN_MODEL__CARVE_F32(c, NC);
        for (int k = 0; k < 2 && mhc; k++) {
            ctrain_sasrec__hc_acts_t *h = &a->hc[k];
            h->u = CTRAIN_MODEL__CARVE_F32(c, NC);
            h->hpre = CTRAIN_MODEL__CARVE_F32(c, N * n);
            h->hpost = CTRAIN_MODEL__CARVE_F32(c, N * n);
            h->hres = CTRAIN_MODEL__CARVE_F32(c, N * n * n);
            h->proj = CTRAIN_MODEL__CARVE_F32(c, N * K);
            h->rstd = CTRAIN_MODEL__CARVE_F32(c, N);
            h->Y = CTRAIN_MODEL__CARVE_F32(c, NS);
        }
    }
    s->lnf = CTRAIN_MODEL__CARVE_F32(c, NC);
    s->lnf_mean = CTRAIN_MODEL__CARVE_F32(c, N);
    s->lnf_rstd = CTRAIN_MODEL__CARVE_F32(c, N);
    s->pos_logits = CTRAIN_MODEL__CARVE_F32(c, N);
    s->neg_logits = CTRAIN_MODEL__CARVE_F32(c, N);
    s->dpos = CTRAIN_MODEL__CARVE_F32(c, N);
    s->dneg = CTRAIN_MODEL__CARVE_F32(c, N);
    s->loss = CTRAIN_MODEL__CARVE_F32(c, 1);
    s->g_cur = CTRAIN_MODEL__CARVE_F32(c, NS);
    s->g_in = CTRAIN_MODEL__CARVE_F32(c, NS);
    s->g_mid = mhc ? CTRAIN_MODEL__CARVE_F32(c, NS) : NULL;
    float **g[] = {&s->g_a, &s->g_b, &s->g_h, &s->g_hp, &s->g_ao, &s->g_u};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        *g[i] = CTRAIN_MODEL__CARVE_F32(c, NC);
    s->g_qkv = CTRAIN_MODEL__CARVE_F32(c, 3 * NC);
    s->g_pk = ti ? CTRAIN_MODEL__CARVE_F32(c, NC) : NULL;
    s->g_pv = ti ? CTRAIN_MODEL__CARVE_F32(c, NC) : NULL;
    s->g_hpre = mhc ? CTRAIN_MODEL__CARVE_F32(c, N * n) : NULL;
    s->g_hpost = mhc ? CTRAIN_MODEL__CARVE_F32(c, N * n) : NULL;
    s->g_hres = mhc ? CTRAIN_MODEL__CARVE_F32(c, N * n * n) : NULL;
    int Bi = m->max_batch, Li = cfg->maxlen, NH = cfg->num_heads;
    if (ti) {
        s->att_fwd_scratch = CTRAIN_MODEL__CARVE_F32(
            c, o->scratch(o, CT_SCRATCH_TISAS_FWD, Li, cfg->hidden, NH, (int64_t)N));
        s->att_bwd_scratch = CTRAIN_MODEL__CARVE_F32(
            c, o->scratch(o, CT_SCRATCH_TISAS_BWD, Li, cfg->hidden, NH, (int64_t)N));
    } else {
        s->att_fwd_scratch =
            CTRAIN_MODEL__CARVE_F32(c, o->attention_scratch(o, Bi, Li, NH, CT_ATT_SCRATCH_FWD));
        s->att_bwd_scratch =
            CTRAIN_MODEL__CARVE_F32(c, o->attention_scratch(o, Bi, Li, NH, CT_ATT_SCRATCH_BWD));
    }
    s->mhc_scratch =
        mhc ? CTRAIN_MODEL__CARVE_F32(c, o->scratch(o, CT_SCRATCH_MHC_COEFFS_BWD, (int64_t)N,
                                                    (int64_t)n, CTRAIN_MHC_ITERS, (int64_t)N))
            : NULL;
    s->loss_scratch = NULL;
    if (cfg->loss == CTRAIN_LOSS_CE)
        s->loss_scratch = CTRAIN_MODEL__CARVE_F32(
            c, o->scratch(o, CT_SCRATCH_CE, (int64_t)V, (int64_t)C, 0, (int64_t)N));
    else if (cfg->loss == CTRAIN_LOSS_SAMPLED_CE)
        s->loss_scratch =
            CTRAIN_MODEL__CARVE_F32(c, o->scratch(o, CT_SCRATCH_SAMPLED_CE, (int64_t)L,
                                                  cfg->num_negatives, (int64_t)C, (int64_t)N));
}

#define CT__ADD(nm, nd, init, ...)                                         \
    do {                                                                   \
        const int64_t shape_[] = {__VA_ARGS__};                            \
        if (!(t = ctrain_model__param_add(m, (nm), (nd), shape_, (init)))) \
            return -ENOMEM;                                                \
    } while (0)

/* The LayerNorms, FFNs and the final LayerNorm (both kinds); a is the attention's part. */
static int ctrain_sasrec__table_blocks(ctrain_model_t *m, ctrain_sasrec__sasrec_t *s,
                                       int (*attn)(ctrain_model_t *, ctrain_sasrec__sasrec_t *,
                                                   int))
{
    const ctrain_model_cfg_t *c = &m->cfg;
    const int64_t C = c->hidden;
    const int nb = c->num_blocks;
    const ctrain_param_init_t xav =
        c->kind == CTRAIN_MODEL_TISASREC ? CTRAIN_INIT_XAVIER_UNIFORM : CTRAIN_INIT_XAVIER_NORMAL;
    char name[CTRAIN_PARAM_NAME_MAX];
    ctrain_param_t *t;
    for (int l = 0; l < nb; l++) {
        snprintf(name, sizeof name, "attention_layernorms.%d.weight", l);
        CT__ADD(name, 1, CTRAIN_INIT_ONES, C);
        t->block = l, s->blk[l].ln1_w = t->offset;
        snprintf(name, sizeof name, "attention_layernorms.%d.bias", l);
        CT__ADD(name, 1, CTRAIN_INIT_ZEROS, C);
        t->block = l, s->blk[l].ln1_b = t->offset;
    }
    for (int l = 0; l < nb; l++)
        if (attn(m, s, l) != 0)
            return -ENOMEM;
    for (int l = 0; l < nb; l++) {
        snprintf(name, sizeof name, "forward_layernorms.%d.weight", l);
        CT__ADD(name, 1, CTRAIN_INIT_ONES, C);
        t->block = l, s->blk[l].ln2_w = t->offset;
        snprintf(name, sizeof name, "forward_layernorms.%d.bias", l);
        CT__ADD(name, 1, CTRAIN_INIT_ZEROS, C);
        t->block = l, s->blk[l].ln2_b = t->offset;
    }
    for (int l = 0; l < nb; l++) {
        /* Conv1d(C, C, kernel_size=1): weight (C, C, 1), bias U(+-1/sqrt(C * 1)). */
        size_t *w[2] = {&s->blk[l].c1_w, &s->blk[l].c2_w},
               *b[2] = {&s->blk[l].c1_b, &s->blk[l].c2_b};
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "forward_layers.%d.conv%d.weight", l, k + 1);
            CT__ADD(name, 3, xav, C, C, 1);
            t->block = l, *w[k] = t->offset;
            snprintf(name, sizeof name, "forward_layers.%d.conv%d.bias", l, k + 1);
            CT__ADD(name, 1, CTRAIN_INIT_FANIN_UNIFORM, C);
            t->fan_in = (int)C;
            t->block = l, *b[k] = t->offset;
        }
    }
    CT__ADD("last_layernorm.weight", 1, CTRAIN_INIT_ONES, C);
    t->block = nb, s->lnf_w = t->offset;
    CT__ADD("last_layernorm.bias", 1, CTRAIN_INIT_ZEROS, C);
    t->block = nb, s->lnf_b = t->offset;
    return 0;
}

/* SASRec.pytorch's attention module: packed in_proj, out_proj (biases start at 0,
 * MultiheadAttention's _reset_parameters). */
static int ctrain_sasrec__table_mha(ctrain_model_t *m, ctrain_sasrec__sasrec_t *s, int l)
{
    const int64_t C = m->cfg.hidden;
    char name[CTRAIN_PARAM_NAME_MAX];
    ctrain_param_t *t;
    snprintf(name, sizeof name, "attention_layers.%d.in_proj_weight", l);
    CT__ADD(name, 2, CTRAIN_INIT_XAVIER_NORMAL, 3 * C, C);
    t->block = l, s->blk[l].in_w = t->offset;
    snprintf(name, sizeof name, "attention_layers.%d.in_proj_bias", l);
    CT__ADD(name, 1, CTRAIN_INIT_ZEROS, 3 * C);
    t->block = l, s->blk[l].in_b = t->offset;
    snprintf(name, sizeof name, "attention_layers.%d.out_proj.weight", l);
    CT__ADD(name, 2, CTRAIN_INIT_XAVIER_NORMAL, C, C);
    t->block = l, s->blk[l].out_w = t->offset;
    snprintf(name, sizeof name, "attention_layers.%d.out_proj.bias", l);
    CT__ADD(name, 1, CTRAIN_INIT_ZEROS, C);
    t->block = l, s->blk[l].out_b = t->offset;
    return 0;
}

/* TiSASRec.pytorch's TimeAwareMultiHeadAttention: three nn.Linear (biases keep PyTorch's
 * default U(+-1/sqrt(C)); the reference's xavier loop skips 1-d tensors). */
static int ctrain_sasrec__table_tisas(ctrain_model_t *m, ctrain_sasrec__sasrec_t *s, int l)
{
    const int64_t C = m->cfg.hidden;
    char name[CTRAIN_PARAM_NAME_MAX];
    ctrain_param_t *t;
    static const char *const nm[3] = {"Q_w", "K_w", "V_w"};
    size_t *w[3] = {&s->blk[l].qw, &s->blk[l].kw, &s->blk[l].vw};
    size_t *b[3] = {&s->blk[l].qb, &s->blk[l].kb, &s->blk[l].vb};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "attention_layers.%d.%s.weight", l, nm[k]);
        CT__ADD(name, 2, CTRAIN_INIT_XAVIER_UNIFORM, C, C);
        t->block = l, *w[k] = t->offset;
        snprintf(name, sizeof name, "attention_layers.%d.%s.bias", l, nm[k]);
        CT__ADD(name, 1, CTRAIN_INIT_FANIN_UNIFORM, C);
        t->fan_in = (int)C;
        t->block = l, *b[k] = t->offset;
    }
    return 0;
}

/* mHC's tensors, after the reference's own (names of ours: the references have no mHC). */
static int ctrain_sasrec__table_mhc(ctrain_model_t *m, ctrain_sasrec__sasrec_t *s)
{
    const ctrain_model_cfg_t *c = &m->cfg;
    const int64_t n = c->mhc_streams, D = n * c->hidden, K = CT_MHC_COEFFS(n);
    static const char *const which[2] = {"attention_hc", "forward_hc"};
    char name[CTRAIN_PARAM_NAME_MAX];
    ctrain_param_t *t;
    for (int k = 0; k < 2; k++)
        for (int l = 0; l < c->num_blocks; l++) {
            snprintf(name, sizeof name, "%s.%d.phi", which[k], l);
            CT__ADD(name, 2, CTRAIN_INIT_ZEROS, D, K);
            t->block = l, s->blk[l].hc_phi[k] = t->offset;
            snprintf(name, sizeof name, "%s.%d.alpha", which[k], l);
            CT__ADD(name, 1, CTRAIN_INIT_CONSTANT, 3);
            t->init_value = CTRAIN_MHC_ALPHA_INIT;
            t->block = l, s->blk[l].hc_alpha[k] = t->offset;
            snprintf(name, sizeof name, "%s.%d.bias", which[k], l);
            CT__ADD(name, 1, CTRAIN_INIT_MHC_BIAS, K);
            t->init_index = 2 * l + k; /* mHC layers in network order */
            t->block = l, s->blk[l].hc_bias[k] = t->offset;
        }
    return 0;
}

/* The table, in the reference's state_dict order (module registration order), mHC after it. */
static int ctrain_sasrec__build_table(ctrain_model_t *m, ctrain_sasrec__sasrec_t *s)
{
    const ctrain_model_cfg_t *c = &m->cfg;
    const int64_t C = c->hidden, V = (int64_t)c->num_items + 1;
    ctrain_param_t *t;
    if (c->kind == CTRAIN_MODEL_TISASREC) {
        const int64_t L = c->maxlen, T1 = (int64_t)c->time_span + 1;
        /* xavier_uniform_ on every table, the padding row included (the reference does not
         * re-zero it; the timeline mask makes it harmless). */
        CT__ADD("item_emb.weight", 2, CTRAIN_INIT_XAVIER_UNIFORM, V, C);
        t->l2 = true, s->wte = t->offset;
        CT__ADD("abs_pos_K_emb.weight", 2, CTRAIN_INIT_XAVIER_UNIFORM, L, C);
        t->l2 = true, s->pk = t->offset;
        CT__ADD("abs_pos_V_emb.weight", 2, CTRAIN_INIT_XAVIER_UNIFORM, L, C);
        t->l2 = true, s->pv = t->offset;
        CT__ADD("time_matrix_K_emb.weight", 2, CTRAIN_INIT_XAVIER_UNIFORM, T1, C);
        t->l2 = true, s->rk = t->offset;
        CT__ADD("time_matrix_V_emb.weight", 2, CTRAIN_INIT_XAVIER_UNIFORM, T1, C);
        t->l2 = true, s->rv = t->offset;
        if (ctrain_sasrec__table_blocks(m, s, ctrain_sasrec__table_tisas) != 0)
            return -ENOMEM;
    } else {
        const int64_t P = ctrain_model_pos_rows(c);
        CT__ADD("item_emb.weight", 2, CTRAIN_INIT_XAVIER_NORMAL, V, C);
        t->zero_row0 = true, t->l2 = true, s->wte = t->offset;
        CT__ADD("pos_emb.weight", 2, CTRAIN_INIT_XAVIER_NORMAL, P, C);
        t->zero_row0 = ctrain_layout_pos_mode(c->layout) == CT_POS_PADDED, s->wpe = t->offset;
        if (ctrain_sasrec__table_blocks(m, s, ctrain_sasrec__table_mha) != 0)
            return -ENOMEM;
    }
    if (c->mhc_streams > 0 && ctrain_sasrec__table_mhc(m, s) != 0)
        return -ENOMEM;
    return 0;
}
#undef CT__ADD

static int ctrain_sasrec__build(ctrain_model_t *m, ct_errbuf_t *eb)
{
    ctrain_sasrec__sasrec_t *s = calloc(1, sizeof *s);
    if (!s)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    m->impl = s;
    m->vt = &ctrain_sasrec__sasrec_vtbl;
    if (ctrain_sasrec__build_table(m, s) != 0)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");

    ct_ops_t *o = m->ops;
    ctrain_model__carve_t c = {NULL, 0};
    ctrain_sasrec__carve_arena(s, m, &c);
    size_t bytes = c.used;
    if (o->alloc(o, &s->arena, bytes) != 0)
        return ct_errbuf_set(eb, -ENOMEM,
                             "out of memory for %.1f MB of activations (lower "
                             "--batch_size or --maxlen)",
                             (double)bytes / 1e6);
    c = (ctrain_model__carve_t){s->arena, 0};
    ctrain_sasrec__carve_arena(s, m, &c);

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

/* ---- the family descriptors (ctrain_model.h's registry) ----------------------------------- */

/* The CUDA kernels' ranges (ct_ops_t.limits; the CPU has none), told before the first step
 * fails: TiSASRec's attention has its own. */
static int ctrain_sasrec__check_backend(const ctrain_model_cfg_t *mc, const ct_ops_t *ops,
                                        ct_errbuf_t *eb)
{
    const ct_ops_limits_t *lim = &ops->limits;
    const bool ti = mc->kind == CTRAIN_MODEL_TISASREC;
    const int max_l = ti ? lim->tisas_max_l : lim->attention_max_l;
    const int max_hs = ti ? lim->tisas_max_hs : lim->attention_max_hs;
    const int max_c = lim->layernorm_max_c;
    const int hs = mc->hidden / mc->num_heads;
    if ((max_l > 0 && mc->maxlen > max_l) || (max_hs > 0 && hs > max_hs) ||
        (max_c > 0 && mc->hidden > max_c))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--device cuda: %s's GPU kernels take --maxlen <= %d, "
                             "hidden_units / num_heads <= %d and hidden_units <= %d (got %d, %d, "
                             "%d); use --device cpu",
                             ti ? "TiSASRec" : "SASRec", max_l, max_hs, max_c, mc->maxlen, hs,
                             mc->hidden);
    return 0;
}

/* SASRec.pytorch HEAD's defaults and rules. */
const ctrain_family_t ctrain_sasrec_family = {
    .name = "sasrec",
    .title = "SASRec",
    .kind = CTRAIN_MODEL_SASREC,
    .uses_times = false,
    .min_eval_len =
        4, /* SASRec.pytorch splits users with >= 4 interactions (docs/models.md §1.3) */
    .eval_excludes_target = false,
    .layout = CTRAIN_LAYOUT_POST_LN,
    .layouts = (1u << CTRAIN_LAYOUT_POST_LN) | (1u << CTRAIN_LAYOUT_PRE_LN) |
               (1u << CTRAIN_LAYOUT_ORIGINAL) | (1u << CTRAIN_LAYOUT_ORIGINAL2020),
    .maxlen = 200,
    .num_epochs = 1000,
    .l2_emb = 0.0,
    .has_time_span = false,
    .build = ctrain_sasrec__build,
    .check_backend = ctrain_sasrec__check_backend,
    .takes_mhc = true,
};

/* TiSASRec.pytorch's defaults and rules. */
const ctrain_family_t ctrain_tisasrec_family = {
    .name = "tisasrec",
    .title = "TiSASRec",
    .kind = CTRAIN_MODEL_TISASREC,
    .uses_times = true,
    .min_eval_len = 3, /* TiSASRec.pytorch splits users with >= 3 interactions */
    .eval_excludes_target = true,
    .layout = CTRAIN_LAYOUT_ORIGINAL2020,
    .layouts = (1u << CTRAIN_LAYOUT_ORIGINAL2020) | (1u << CTRAIN_LAYOUT_PRE_LN),
    .maxlen = 50,
    .num_epochs = 201,
    .l2_emb = 5e-5,
    .has_time_span = true,
    .build = ctrain_sasrec__build,
    .check_backend = ctrain_sasrec__check_backend,
    .takes_mhc = true,
};
