/*
 * sasrec_tiny.c - the whole-model composite of sasrec_tiny.h: float forward/backward from the
 * ct ops (through a tiny_ops_t table: the CPU ops here, the CUDA twins in test_sasrec_gpu.c),
 * float64 forward from ref64. Both follow the same layout table; the float backward relies on
 * the ops' accumulate (+=) contract, zeroing each activation gradient before the first op that
 * adds into it.
 */
#include "sasrec_tiny.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "sasrec_tiny_ops.h"

/* ---- parameters ------------------------------------------------------------------------- */

void tiny_params_layout(tiny_params_t *pt, const tiny_cfg_t *cfg)
{
    size_t C = (size_t)cfg->C, off = 0;
    memset(pt, 0, sizeof *pt);
    pt->P = cfg->pos_mode == CT_POS_PADDED ? cfg->L + 1 : cfg->L;
    pt->wte = off, off += (size_t)cfg->V * C;
    pt->wpe = off, off += (size_t)pt->P * C;
    for (int l = 0; l < cfg->nblocks; l++) {
        tiny_block_params_t *b = &pt->blk[l];
        b->ln1_w = off, off += C;
        b->ln1_b = off, off += C;
        b->in_w = off, off += 3 * C * C;
        b->in_b = off, off += 3 * C;
        b->out_w = off, off += C * C;
        b->out_b = off, off += C;
        b->ln2_w = off, off += C;
        b->ln2_b = off, off += C;
        b->c1_w = off, off += C * C;
        b->c1_b = off, off += C;
        b->c2_w = off, off += C * C;
        b->c2_b = off, off += C;
    }
    pt->lnf_w = off, off += C;
    pt->lnf_b = off, off += C;
    pt->total = off;
}

static void tiny__fill(float *x, size_t n, float lo, float hi, uint64_t stream, uint64_t *ctr)
{
    ct_rng_uniform_cpu(x, (int64_t)n, 0x7e57, stream, *ctr);
    *ctr += n;
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
}

void tiny_params_init(float *params, const tiny_params_t *pt, const tiny_cfg_t *cfg,
                      uint64_t stream)
{
    size_t C = (size_t)cfg->C;
    uint64_t ctr = 0;
    tiny__fill(params, pt->total, -0.5f, 0.5f, stream, &ctr);
    memset(params + pt->wte, 0, C * sizeof *params);
    if (cfg->pos_mode == CT_POS_PADDED)
        memset(params + pt->wpe, 0, C * sizeof *params);
    for (int l = 0; l < cfg->nblocks; l++) {
        const tiny_block_params_t *b = &pt->blk[l];
        size_t ln[] = {b->ln1_w, b->ln2_w},
               bias[] = {b->ln1_b, b->ln2_b, b->in_b, b->out_b, b->c1_b, b->c2_b};
        for (int i = 0; i < 2; i++)
            tiny__fill(params + ln[i], C, 0.8f, 1.2f, stream, &ctr);
        for (int i = 0; i < 6; i++)
            tiny__fill(params + bias[i], i == 2 ? 3 * C : C, -0.1f, 0.1f, stream, &ctr);
    }
    tiny__fill(params + pt->lnf_w, C, 0.8f, 1.2f, stream, &ctr);
    tiny__fill(params + pt->lnf_b, C, -0.1f, 0.1f, stream, &ctr);
}

static ct_dropout_t tiny__site(const tiny_cfg_t *cfg, uint64_t stream)
{
    ct_dropout_t d = {cfg->p_drop, cfg->seed, stream, 0};
    return d;
}

/* ---- the float model ---------------------------------------------------------------------- */

typedef struct tiny_block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* LNa output and stats */
    float *qkv, *att, *ao, *a;        /* packed qkv, probabilities, heads out, out_proj out */
    float *s1;                        /* the attention residual sum */
    float *ln2, *ln2_mean, *ln2_rstd; /* LNf output and stats */
    float *h, *f, *s2;                /* FFN hidden (after ReLU), FFN out, FFN residual sum */
    float *out;                       /* block output (after the timeline mask if any) */
} tiny_block_acts_t;

struct tiny_model {
    tiny_cfg_t cfg;
    float *x0; /* embedding output (N,C) */
    tiny_block_acts_t blk[TINY_MAX_BLOCKS];
    float *lnf, *lnf_mean, *lnf_rstd;             /* final LN (N,C), (N), (N) */
    float *pos_logits, *neg_logits, *dpos, *dneg; /* (N) */
    /* gradient buffers, (N,C) each unless noted; named after the tensor they are d() of */
    float *gF, *gcur, *gin, *gy, *gf, *gh, *ghp, *gs1, *gs2, *ga, *gao, *gq;
    float *gqkv;    /* (N,3C) */
    float *scalars; /* (2): the BCE loss and the l2 penalty, where the ops write them */
    tiny_ops_t *ops;
    tiny_ops_t *own_ops; /* the CPU table tiny_model_create made, or NULL */
    void *mem[64];
    int nmem;
};

/* Calls op `name` of the model's table. */
#define OP(name, ...) m->ops->name(m->ops->state, __VA_ARGS__)

static float *tiny__alloc(tiny_model_t *m, size_t n)
{
    float *p = OP(alloc, (n ? n : 1) * sizeof *p);
    if (!p)
        abort();
    m->mem[m->nmem++] = p;
    return p;
}

tiny_model_t *tiny_model_create(const tiny_cfg_t *cfg)
{
    tiny_ops_t *ops = tiny_ops_cpu_create(cfg);
    if (!ops)
        return NULL;
    tiny_model_t *m = tiny_model_create_on(cfg, ops);
    if (!m) {
        ops->destroy(ops);
        return NULL;
    }
    m->own_ops = ops;
    return m;
}

tiny_model_t *tiny_model_create_on(const tiny_cfg_t *cfg, tiny_ops_t *ops)
{
    tiny_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    m->ops = ops;
    size_t N = (size_t)cfg->B * cfg->L, C = (size_t)cfg->C, L = (size_t)cfg->L;
    m->x0 = tiny__alloc(m, N * C);
    for (int l = 0; l < cfg->nblocks; l++) {
        tiny_block_acts_t *a = &m->blk[l];
        a->ln1 = tiny__alloc(m, N * C);
        a->ln1_mean = tiny__alloc(m, N);
        a->ln1_rstd = tiny__alloc(m, N);
        a->qkv = tiny__alloc(m, N * 3 * C);
        a->att = tiny__alloc(m, (size_t)cfg->B * cfg->NH * L * L);
        a->ao = tiny__alloc(m, N * C);
        a->a = tiny__alloc(m, N * C);
        a->s1 = tiny__alloc(m, N * C);
        a->ln2 = tiny__alloc(m, N * C);
        a->ln2_mean = tiny__alloc(m, N);
        a->ln2_rstd = tiny__alloc(m, N);
        a->h = tiny__alloc(m, N * C);
        a->f = tiny__alloc(m, N * C);
        a->s2 = tiny__alloc(m, N * C);
        a->out = tiny__alloc(m, N * C);
    }
    m->lnf = tiny__alloc(m, N * C);
    m->lnf_mean = tiny__alloc(m, N);
    m->lnf_rstd = tiny__alloc(m, N);
    m->pos_logits = tiny__alloc(m, N);
    m->neg_logits = tiny__alloc(m, N);
    m->dpos = tiny__alloc(m, N);
    m->dneg = tiny__alloc(m, N);
    float **g[] = {&m->gF,  &m->gcur, &m->gin, &m->gy, &m->gf,  &m->gh,
                   &m->ghp, &m->gs1,  &m->gs2, &m->ga, &m->gao, &m->gq};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        *g[i] = tiny__alloc(m, N * C);
    m->gqkv = tiny__alloc(m, N * 3 * C);
    m->scalars = tiny__alloc(m, 2);
    return m;
}

void tiny_model_destroy(tiny_model_t *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nmem; i++)
        OP(release, m->mem[i]);
    if (m->own_ops)
        m->own_ops->destroy(m->own_ops);
    free(m);
}

/* Which attentions may skip padding queries: the last block (its padding rows only reach
 * ignored logits) and, with the timeline mask, every block (their padding rows are zeroed). */
static const int32_t *tiny__qmask(const tiny_cfg_t *cfg, int l, const int32_t *seq)
{
    if (!cfg->skip_padding)
        return NULL;
    return (l == cfg->nblocks - 1 || cfg->timeline) ? seq : NULL;
}

static void tiny__block_forward(tiny_model_t *m, int l, const tiny_params_t *pt,
                                const float *params, const float *x, const int32_t *seq)
{
    const tiny_cfg_t *c = &m->cfg;
    const tiny_block_params_t *p = &pt->blk[l];
    tiny_block_acts_t *a = &m->blk[l];
    const int N = c->B * c->L, C = c->C;
    const float eps = CT_SASREC_LN_EPS;
    const float *W = params;
    const int32_t *qm = tiny__qmask(c, l, seq);

    /* attention sub-layer: which input feeds queries, keys/values and the residual */
    const float *xq = x, *xkv = x, *res = x;
    if (c->layout == TINY_PRE_LN || c->layout == TINY_ORIGINAL) {
        OP(layernorm_forward, a->ln1, a->ln1_mean, a->ln1_rstd, x, W + p->ln1_w, W + p->ln1_b, N, C,
           eps);
        xq = a->ln1;
        xkv = c->layout == TINY_PRE_LN ? a->ln1 : x;
        res = c->layout == TINY_PRE_LN ? x : a->ln1;
    }
    OP(qkv_forward, a->qkv, xq, xkv, W + p->in_w, W + p->in_b, N, C);
    OP(attention_forward, a->ao, a->att, a->qkv, qm, c->B, c->L, C, c->NH,
       tiny__site(c, 1 + 3 * (uint64_t)l));
    OP(linear_forward, a->a, a->ao, W + p->out_w, W + p->out_b, N, C, C);
    OP(residual_forward, a->s1, res, a->a, (int64_t)N * C);

    /* FFN sub-layer input y and its residual */
    const float *y;
    if (c->layout == TINY_POST_LN) {
        OP(layernorm_forward, a->ln1, a->ln1_mean, a->ln1_rstd, a->s1, W + p->ln1_w, W + p->ln1_b,
           N, C, eps);
        y = a->ln1;
    } else {
        OP(layernorm_forward, a->ln2, a->ln2_mean, a->ln2_rstd, a->s1, W + p->ln2_w, W + p->ln2_b,
           N, C, eps);
        y = a->ln2;
    }
    OP(linear_forward, a->h, y, W + p->c1_w, W + p->c1_b, N, C, C);
    OP(dropout, a->h, a->h, (int64_t)N * C, tiny__site(c, 2 + 3 * (uint64_t)l));
    OP(relu_forward, a->h, a->h, (int64_t)N * C);
    OP(linear_forward, a->f, a->h, W + p->c2_w, W + p->c2_b, N, C, C);
    OP(dropout, a->f, a->f, (int64_t)N * C, tiny__site(c, 3 + 3 * (uint64_t)l));
    const float *fres = c->layout == TINY_PRE_LN ? a->s1 : y;
    if (c->layout == TINY_POST_LN) {
        OP(residual_forward, a->s2, fres, a->f, (int64_t)N * C);
        OP(layernorm_forward, a->out, a->ln2_mean, a->ln2_rstd, a->s2, W + p->ln2_w, W + p->ln2_b,
           N, C, eps);
    } else {
        OP(residual_forward, a->out, fres, a->f, (int64_t)N * C);
    }
    if (c->timeline)
        OP(timeline_mask, a->out, a->out, seq, N, C);
}

/* The block's backward. gout: d(block output), modified (timeline mask); gin: d(block input),
 * accumulated. Each gradient buffer is zeroed right before the first op that adds into it;
 * a residual backward into a freshly zeroed buffer is a copy. */
static void tiny__block_backward(tiny_model_t *m, int l, const tiny_params_t *pt,
                                 const float *params, float *grads, const float *x, float *gout,
                                 float *gin, const int32_t *seq)
{
    const tiny_cfg_t *c = &m->cfg;
    const tiny_block_params_t *p = &pt->blk[l];
    tiny_block_acts_t *a = &m->blk[l];
    const int N = c->B * c->L, C = c->C;
    const int64_t NC = (int64_t)N * C;
    const size_t nb = (size_t)NC * sizeof(float);
    const float *W = params;
    float *G = grads;
    const int32_t *qm = tiny__qmask(c, l, seq);

    if (c->timeline)
        OP(timeline_mask, gout, gout, seq, N, C);

    /* ---- FFN sub-layer: out = res + f (post_ln: s2 = y + f, out = LNf(s2)) ---- */
    const float *y = c->layout == TINY_POST_LN ? a->ln1 : a->ln2; /* FFN input */
    float *gres = c->layout == TINY_PRE_LN ? m->gs1 : m->gy;      /* d(FFN residual input) */
    OP(zero, m->gy, nb);
    OP(zero, m->gs1, nb);
    OP(zero, m->gf, nb);
    if (c->layout == TINY_POST_LN) {
        OP(zero, m->gs2, nb);
        OP(layernorm_backward, m->gs2, G + p->ln2_w, G + p->ln2_b, gout, a->s2, W + p->ln2_w,
           a->ln2_mean, a->ln2_rstd, N, C);
        OP(residual_backward, gres, m->gf, m->gs2, NC);
    } else {
        OP(residual_backward, gres, m->gf, gout, NC);
    }
    OP(dropout, m->gf, m->gf, NC, tiny__site(c, 3 + 3 * (uint64_t)l));
    OP(zero, m->gh, nb);
    OP(linear_backward, m->gh, G + p->c2_w, G + p->c2_b, m->gf, a->h, W + p->c2_w, N, C, C);
    OP(zero, m->ghp, nb);
    OP(relu_backward, m->ghp, m->gh, a->h, NC);
    OP(dropout, m->ghp, m->ghp, NC, tiny__site(c, 2 + 3 * (uint64_t)l));
    OP(linear_backward, m->gy, G + p->c1_w, G + p->c1_b, m->ghp, y, W + p->c1_w, N, C, C);

    /* ---- the LayerNorm between the sub-layers, into gs1 = d(s1) ---- */
    if (c->layout == TINY_POST_LN)
        OP(layernorm_backward, m->gs1, G + p->ln1_w, G + p->ln1_b, m->gy, a->s1, W + p->ln1_w,
           a->ln1_mean, a->ln1_rstd, N, C);
    else
        OP(layernorm_backward, m->gs1, G + p->ln2_w, G + p->ln2_b, m->gy, a->s1, W + p->ln2_w,
           a->ln2_mean, a->ln2_rstd, N, C);

    /* ---- attention sub-layer: s1 = res + a ---- */
    OP(zero, m->ga, nb);
    OP(zero, m->gq, nb);
    OP(residual_backward, c->layout == TINY_ORIGINAL ? m->gq : gin, m->ga, m->gs1, NC);
    OP(zero, m->gao, nb);
    OP(linear_backward, m->gao, G + p->out_w, G + p->out_b, m->ga, a->ao, W + p->out_w, N, C, C);
    OP(zero, m->gqkv, 3 * nb);
    OP(attention_backward, m->gqkv, m->gao, a->att, a->qkv, qm, c->B, c->L, C, c->NH,
       tiny__site(c, 1 + 3 * (uint64_t)l));
    switch (c->layout) {
    case TINY_POST_LN:
        OP(qkv_backward, gin, gin, G + p->in_w, G + p->in_b, m->gqkv, x, x, W + p->in_w, N, C);
        break;
    case TINY_PRE_LN: /* q, k, v all from LNa(x) */
        OP(qkv_backward, m->gq, m->gq, G + p->in_w, G + p->in_b, m->gqkv, a->ln1, a->ln1,
           W + p->in_w, N, C);
        OP(layernorm_backward, gin, G + p->ln1_w, G + p->ln1_b, m->gq, x, W + p->ln1_w, a->ln1_mean,
           a->ln1_rstd, N, C);
        break;
    case TINY_ORIGINAL: /* q = LNa(x) (which is also the residual), k and v from x */
        OP(qkv_backward, m->gq, gin, G + p->in_w, G + p->in_b, m->gqkv, a->ln1, x, W + p->in_w, N,
           C);
        OP(layernorm_backward, gin, G + p->ln1_w, G + p->ln1_b, m->gq, x, W + p->ln1_w, a->ln1_mean,
           a->ln1_rstd, N, C);
        break;
    }
}

float tiny_forward_backward(tiny_model_t *m, const tiny_params_t *pt, const float *params,
                            float *grads, const int32_t *seq, const int32_t *pos,
                            const int32_t *neg, float *pos_logits, float *neg_logits)
{
    const tiny_cfg_t *c = &m->cfg;
    const int N = c->B * c->L, C = c->C;
    const int64_t NC = (int64_t)N * C;
    const size_t nb = (size_t)NC * sizeof(float);
    const float scale = sqrtf((float)C);
    const float *W = params;
    float *G = grads;

    /* ---- forward ---- */
    OP(embed_forward, m->x0, W + pt->wte, W + pt->wpe, seq, c->B, c->L, C, scale, c->pos_mode);
    OP(dropout, m->x0, m->x0, NC, tiny__site(c, 0));
    if (c->timeline)
        OP(timeline_mask, m->x0, m->x0, seq, N, C);
    const float *x = m->x0;
    for (int l = 0; l < c->nblocks; l++) {
        tiny__block_forward(m, l, pt, params, x, seq);
        x = m->blk[l].out;
    }
    OP(layernorm_forward, m->lnf, m->lnf_mean, m->lnf_rstd, x, W + pt->lnf_w, W + pt->lnf_b, N, C,
       CT_SASREC_LN_EPS);
    OP(score_forward, m->pos_logits, m->lnf, W + pt->wte, pos, N, C);
    OP(score_forward, m->neg_logits, m->lnf, W + pt->wte, neg, N, C);
    OP(zero, m->scalars, 2 * sizeof(float)); /* no l2 term: penalty 0 */
    float count = (float)OP(count_nonzero, pos, N);
    OP(bce_loss, m->scalars, m->dpos, m->dneg, m->pos_logits, m->neg_logits, pos, N, count);
    OP(zero, grads, pt->total * sizeof *grads);
    if (c->l2_emb > 0.0f)
        OP(l2_penalty, m->scalars + 1, G + pt->wte, W + pt->wte, (int64_t)c->V * C, c->l2_emb,
           CT_L2_SQUARED);
    if (pos_logits)
        OP(to_host, pos_logits, m->pos_logits, (size_t)N * sizeof *pos_logits);
    if (neg_logits)
        OP(to_host, neg_logits, m->neg_logits, (size_t)N * sizeof *neg_logits);

    /* ---- backward ---- */
    OP(zero, m->gF, nb);
    OP(score_backward, m->gF, G + pt->wte, m->dpos, m->lnf, W + pt->wte, pos, N, C);
    OP(score_backward, m->gF, G + pt->wte, m->dneg, m->lnf, W + pt->wte, neg, N, C);
    OP(zero, m->gcur, nb);
    OP(layernorm_backward, m->gcur, G + pt->lnf_w, G + pt->lnf_b, m->gF, x, W + pt->lnf_w,
       m->lnf_mean, m->lnf_rstd, N, C);
    for (int l = c->nblocks - 1; l >= 0; l--) {
        const float *xin = l > 0 ? m->blk[l - 1].out : m->x0;
        OP(zero, m->gin, nb);
        tiny__block_backward(m, l, pt, params, grads, xin, m->gcur, m->gin, seq);
        float *t = m->gcur;
        m->gcur = m->gin;
        m->gin = t;
    }
    if (c->timeline)
        OP(timeline_mask, m->gcur, m->gcur, seq, N, C);
    OP(dropout, m->gcur, m->gcur, NC, tiny__site(c, 0));
    OP(embed_backward, G + pt->wte, G + pt->wpe, m->gcur, seq, c->B, c->L, C, scale, c->pos_mode);
    float sc[2];
    OP(to_host, sc, m->scalars, sizeof sc);
    return sc[0] + sc[1];
}

/* ---- the CPU op table ------------------------------------------------------------------------ */

typedef struct tiny_cpu_state {
    float *att_fwd_scratch, *att_bwd_scratch;
} tiny_cpu_state_t;

static void *cpu_alloc(void *st, size_t nbytes)
{
    (void)st;
    return calloc(1, nbytes ? nbytes : 1);
}
static void cpu_release(void *st, void *p)
{
    (void)st;
    free(p);
}
static void cpu_zero(void *st, void *p, size_t nbytes)
{
    (void)st;
    memset(p, 0, nbytes);
}
static void cpu_to_host(void *st, void *host, const void *p, size_t nbytes)
{
    (void)st;
    memcpy(host, p, nbytes);
}
static void cpu_embed_forward(void *st, float *out, const float *wte, const float *wpe,
                              const int32_t *seq, int B, int L, int C, float scale,
                              ct_pos_mode_t pos_mode)
{
    (void)st;
    ct_embed_forward_cpu(out, wte, wpe, seq, B, L, C, scale, pos_mode);
}
static void cpu_embed_backward(void *st, float *dwte, float *dwpe, const float *dout,
                               const int32_t *seq, int B, int L, int C, float scale,
                               ct_pos_mode_t pos_mode)
{
    (void)st;
    ct_embed_backward_cpu(dwte, dwpe, dout, seq, B, L, C, scale, pos_mode);
}
static void cpu_dropout(void *st, float *out, const float *inp, int64_t n, ct_dropout_t drop)
{
    (void)st;
    ct_dropout_cpu(out, inp, n, drop);
}
static void cpu_timeline_mask(void *st, float *out, const float *inp, const int32_t *seq, int N,
                              int C)
{
    (void)st;
    ct_timeline_mask_cpu(out, inp, seq, N, C);
}
static void cpu_layernorm_forward(void *st, float *out, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int N, int C, float eps)
{
    (void)st;
    ct_layernorm_forward_cpu(out, mean, rstd, inp, weight, bias, N, C, eps);
}
static void cpu_layernorm_backward(void *st, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   const float *mean, const float *rstd, int N, int C)
{
    (void)st;
    ct_layernorm_backward_cpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
static void cpu_qkv_forward(void *st, float *qkv, const float *xq, const float *xkv,
                            const float *weight, const float *bias, int N, int C)
{
    (void)st;
    ct_qkv_forward_cpu(qkv, xq, xkv, weight, bias, N, C);
}
static void cpu_qkv_backward(void *st, float *dxq, float *dxkv, float *dweight, float *dbias,
                             const float *dqkv, const float *xq, const float *xkv,
                             const float *weight, int N, int C)
{
    (void)st;
    ct_qkv_backward_cpu(dxq, dxkv, dweight, dbias, dqkv, xq, xkv, weight, N, C);
}
static void cpu_attention_forward(void *st, float *out, float *att, const float *qkv,
                                  const int32_t *qmask, int B, int L, int C, int NH,
                                  ct_dropout_t drop)
{
    tiny_cpu_state_t *s = st;
    ct_attention_forward_cpu(out, att, s->att_fwd_scratch, qkv, qmask, B, L, C, NH, drop);
}
static void cpu_attention_backward(void *st, float *dqkv, const float *dout, const float *att,
                                   const float *qkv, const int32_t *qmask, int B, int L, int C,
                                   int NH, ct_dropout_t drop)
{
    tiny_cpu_state_t *s = st;
    ct_attention_backward_cpu(dqkv, s->att_bwd_scratch, dout, att, qkv, qmask, B, L, C, NH, drop);
}
static void cpu_linear_forward(void *st, float *out, const float *inp, const float *weight,
                               const float *bias, int N, int IC, int OC)
{
    (void)st;
    ct_linear_forward_cpu(out, inp, weight, bias, N, IC, OC);
}
static void cpu_linear_backward(void *st, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight, int N,
                                int IC, int OC)
{
    (void)st;
    ct_linear_backward_cpu(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}
static void cpu_residual_forward(void *st, float *out, const float *inp1, const float *inp2,
                                 int64_t n)
{
    (void)st;
    ct_residual_forward_cpu(out, inp1, inp2, n);
}
static void cpu_residual_backward(void *st, float *dinp1, float *dinp2, const float *dout,
                                  int64_t n)
{
    (void)st;
    ct_residual_backward_cpu(dinp1, dinp2, dout, n);
}
static void cpu_relu_forward(void *st, float *out, const float *inp, int64_t n)
{
    (void)st;
    ct_relu_forward_cpu(out, inp, n);
}
static void cpu_relu_backward(void *st, float *dinp, const float *dout, const float *out, int64_t n)
{
    (void)st;
    ct_relu_backward_cpu(dinp, dout, out, n);
}
static void cpu_score_forward(void *st, float *logits, const float *feats, const float *wte,
                              const int32_t *ids, int N, int C)
{
    (void)st;
    ct_score_forward_cpu(logits, feats, wte, ids, N, C);
}
static void cpu_score_backward(void *st, float *dfeats, float *dwte, const float *dlogits,
                               const float *feats, const float *wte, const int32_t *ids, int N,
                               int C)
{
    (void)st;
    ct_score_backward_cpu(dfeats, dwte, dlogits, feats, wte, ids, N, C);
}
static void cpu_bce_loss(void *st, float *loss, float *dpos, float *dneg, const float *pos_logits,
                         const float *neg_logits, const int32_t *pos, int N, float count)
{
    (void)st;
    ct_bce_loss_cpu(loss, dpos, dneg, pos_logits, neg_logits, pos, N, count);
}
static int64_t cpu_count_nonzero(void *st, const int32_t *ids, int64_t n)
{
    (void)st;
    return ct_count_nonzero_cpu(ids, n);
}
static void cpu_l2_penalty(void *st, float *penalty, float *dw, const float *w, int64_t n,
                           float lambda, ct_l2_mode_t mode)
{
    (void)st;
    ct_l2_penalty_cpu(penalty, dw, w, n, lambda, mode);
}

static void cpu_destroy(tiny_ops_t *o)
{
    if (!o)
        return;
    tiny_cpu_state_t *s = o->state;
    if (s) {
        free(s->att_fwd_scratch);
        free(s->att_bwd_scratch);
        free(s);
    }
    free(o);
}

tiny_ops_t *tiny_ops_cpu_create(const tiny_cfg_t *cfg)
{
    tiny_ops_t *o = calloc(1, sizeof *o);
    tiny_cpu_state_t *s = calloc(1, sizeof *s);
    if (!o || !s) {
        free(o);
        free(s);
        return NULL;
    }
    o->state = s;
    s->att_fwd_scratch = calloc(CT_ATTENTION_FWD_SCRATCH(cfg->L) + 1, sizeof(float));
    s->att_bwd_scratch = calloc(CT_ATTENTION_BWD_SCRATCH(cfg->L) + 1, sizeof(float));
    if (!s->att_fwd_scratch || !s->att_bwd_scratch) {
        cpu_destroy(o);
        return NULL;
    }
    o->destroy = cpu_destroy;
    o->alloc = cpu_alloc;
    o->release = cpu_release;
    o->zero = cpu_zero;
    o->to_host = cpu_to_host;
    o->embed_forward = cpu_embed_forward;
    o->embed_backward = cpu_embed_backward;
    o->dropout = cpu_dropout;
    o->timeline_mask = cpu_timeline_mask;
    o->layernorm_forward = cpu_layernorm_forward;
    o->layernorm_backward = cpu_layernorm_backward;
    o->qkv_forward = cpu_qkv_forward;
    o->qkv_backward = cpu_qkv_backward;
    o->attention_forward = cpu_attention_forward;
    o->attention_backward = cpu_attention_backward;
    o->linear_forward = cpu_linear_forward;
    o->linear_backward = cpu_linear_backward;
    o->residual_forward = cpu_residual_forward;
    o->residual_backward = cpu_residual_backward;
    o->relu_forward = cpu_relu_forward;
    o->relu_backward = cpu_relu_backward;
    o->score_forward = cpu_score_forward;
    o->score_backward = cpu_score_backward;
    o->bce_loss = cpu_bce_loss;
    o->count_nonzero = cpu_count_nonzero;
    o->l2_penalty = cpu_l2_penalty;
    return o;
}

/* ---- the float64 reference model ------------------------------------------------------------ */

double tiny_loss_ref(const tiny_cfg_t *c, const tiny_params_t *pt, const double *W,
                     const int32_t *seq, const int32_t *pos, const int32_t *neg, double *pos_logits,
                     double *neg_logits)
{
    const int N = c->B * c->L, C = c->C;
    const size_t NC = (size_t)N * C;
    const double eps = CT_SASREC_LN_EPS;
    double *x = calloc(NC, sizeof *x), *ln1 = calloc(NC, sizeof *x), *ln2 = calloc(NC, sizeof *x);
    double *qkv = calloc(3 * NC, sizeof *x), *ao = calloc(NC, sizeof *x);
    double *t = calloc(NC, sizeof *x), *s1 = calloc(NC, sizeof *x), *h = calloc(NC, sizeof *x);
    double *pl = calloc((size_t)N, sizeof *x), *nl = calloc((size_t)N, sizeof *x);
    if (!x || !ln1 || !ln2 || !qkv || !ao || !t || !s1 || !h || !pl || !nl)
        abort();

    ref_embed(x, W + pt->wte, W + pt->wpe, seq, c->B, c->L, C, (double)sqrtf((float)C),
              c->pos_mode);
    ref_dropout(x, (int64_t)NC, tiny__site(c, 0));
    if (c->timeline)
        ref_timeline_mask(x, seq, N, C);
    for (int l = 0; l < c->nblocks; l++) {
        const tiny_block_params_t *p = &pt->blk[l];
        const double *xq = x, *xkv = x, *res = x;
        if (c->layout != TINY_POST_LN) {
            ref_layernorm(ln1, x, W + p->ln1_w, W + p->ln1_b, N, C, eps);
            xq = ln1;
            xkv = c->layout == TINY_PRE_LN ? ln1 : x;
            res = c->layout == TINY_PRE_LN ? x : ln1;
        }
        ref_qkv(qkv, xq, xkv, W + p->in_w, W + p->in_b, N, C);
        ref_attention(ao, qkv, c->B, c->L, C, c->NH, tiny__site(c, 1 + 3 * (uint64_t)l));
        ref_linear(t, ao, W + p->out_w, W + p->out_b, N, C, C);
        for (size_t i = 0; i < NC; i++)
            s1[i] = res[i] + t[i];
        const double *y;
        if (c->layout == TINY_POST_LN) {
            ref_layernorm(ln1, s1, W + p->ln1_w, W + p->ln1_b, N, C, eps);
            y = ln1;
        } else {
            ref_layernorm(ln2, s1, W + p->ln2_w, W + p->ln2_b, N, C, eps);
            y = ln2;
        }
        ref_linear(h, y, W + p->c1_w, W + p->c1_b, N, C, C);
        ref_dropout(h, (int64_t)NC, tiny__site(c, 2 + 3 * (uint64_t)l));
        ref_relu(h, (int64_t)NC);
        ref_linear(t, h, W + p->c2_w, W + p->c2_b, N, C, C);
        ref_dropout(t, (int64_t)NC, tiny__site(c, 3 + 3 * (uint64_t)l));
        const double *fres = c->layout == TINY_PRE_LN ? s1 : y;
        for (size_t i = 0; i < NC; i++)
            t[i] += fres[i];
        if (c->layout == TINY_POST_LN)
            ref_layernorm(x, t, W + p->ln2_w, W + p->ln2_b, N, C, eps);
        else
            memcpy(x, t, NC * sizeof *x);
        if (c->timeline)
            ref_timeline_mask(x, seq, N, C);
    }
    ref_layernorm(t, x, W + pt->lnf_w, W + pt->lnf_b, N, C, eps);
    ref_score(pl, t, W + pt->wte, pos, N, C);
    ref_score(nl, t, W + pt->wte, neg, N, C);
    double count = 0;
    for (int r = 0; r < N; r++)
        count += pos[r] != 0;
    double loss = ref_bce(pl, nl, pos, N, count);
    if (c->l2_emb > 0.0f)
        loss += ref_l2(W + pt->wte, (int64_t)c->V * C, c->l2_emb, CT_L2_SQUARED);
    if (pos_logits)
        memcpy(pos_logits, pl, (size_t)N * sizeof *pl);
    if (neg_logits)
        memcpy(neg_logits, nl, (size_t)N * sizeof *nl);
    free(x), free(ln1), free(ln2), free(qkv), free(ao), free(t), free(s1), free(h), free(pl),
        free(nl);
    return loss;
}
