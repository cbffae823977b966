/*
 * ctrain_lm.c - the language-model family's passes (ctrain_lm.h): the flat buffers, the
 * activation arena, loading from a Hugging Face folder, freezing, and GPT-2's and Qwen2's
 * forward and backward composed from the op table's entries, the same code on every backend.
 *
 * Qwen2's q, k and v projections (and their biases) sit next to each other in the flat buffer,
 * so one linear with the stacked ((NH + 2 KVH) HD, C) weight writes the packed rows the
 * grouped-query attention reads; RoPE then rotates that packed buffer in place, viewed as rows of
 * one head each, with the value heads given position 0 (cos 1, sin 0: unchanged).
 *
 * With activation recomputation the arena holds every block's input but one block's other
 * activations, shared by all blocks; the backward runs each block's forward again (the same ops
 * on the same input: the same bits) just before that block's backward, except the last block's,
 * whose activations are still there from the forward.
 *
 * Not here: the op kernels (kernels/), config.json and the tensor list (ctrain_lm_cfg.c), reading
 * a Hugging Face folder (ctrain_lm_load.c, so that this file needs no file I/O), the optimizer
 * and the training loop.
 */
#include "ctrain_lm.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One block's saved activations (backend memory). */
typedef struct ctrain_lm__layer {
    float *res;                           /* (N,C) the block's input */
    float *mid;                           /* (N,C) after the attention's residual */
    float *ln1, *ln2;                     /* (N,C) the norms' outputs */
    float *mean1, *rstd1, *mean2, *rstd2; /* (N) (means: GPT-2 only) */
    float *qkv;                           /* (N,W) packed q|k|v (Qwen2: after RoPE) */
    float *att;                           /* (B,NH,L,L) at the largest B*L */
    float *atty;                          /* (N,Q) the attention's output */
    float *fc, *act;                      /* GPT-2: (N,I) c_fc's output and its GELU */
    float *gate, *up;                     /* Qwen2: (N,I) */
    float *h;                             /* Qwen2: (N,I) silu(gate) * up */
} ctrain_lm__layer_t;

typedef struct ctrain_lm__impl {
    void *arena;
    ctrain_lm__layer_t *lay; /* layers entries */
    float *res_out;          /* (N,C) the last block's output */
    float *lnf, *meanf, *rstdf;
    float *dres, *dln, *datty, *dqkv, *dqkv2, *di1, *di2, *di3; /* backward scratch */
    float *gqa_scratch, *ce_scratch, *sink, *loss, *wpe_rows;
    float *rope_cos, *rope_sin;      /* (P,HD/2) Qwen2 */
    int32_t *ids, *tgt, *pos, *hpos; /* (N), (N), (N), (N * (NH + 2 KVH)) */
    int32_t *hpos_host;
    int B, L; /* of the last pass */
} ctrain_lm__impl_t;

static size_t ctrain_lm__align(size_t floats)
{
    return (floats + 15) & ~(size_t)15; /* 64 bytes */
}

int ctrain_lm_find(const ctrain_lm_t *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    return -1;
}

/* The flat-buffer index of the first tensor of role in layer (or -1 outside the blocks). */
static int ctrain_lm__idx(const ctrain_lm_t *m, ctrain_lm_role_t role, int layer)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].role == role && m->tensors[i].layer == layer)
            return i;
    return -1;
}

float *ctrain_lm_tensor(const ctrain_lm_t *m, int i)
{
    return (m->frozen[i] && m->frozen_mem ? m->frozen_mem : m->params_mem) + m->offset[i];
}

static float *ctrain_lm__p(const ctrain_lm_t *m, ctrain_lm_role_t role, int layer)
{
    int i = ctrain_lm__idx(m, role, layer);
    return i < 0 ? NULL : ctrain_lm_tensor(m, i);
}

/* The gradient of a tensor, or NULL when it is frozen (or absent). */
static float *ctrain_lm__g(const ctrain_lm_t *m, ctrain_lm_role_t role, int layer)
{
    int i = ctrain_lm__idx(m, role, layer);
    return i < 0 || m->frozen[i] ? NULL : m->grads_mem + m->offset[i];
}

/* A norm weight's gradient: a frozen one goes to the sink (norm backwards always write it). */
static float *ctrain_lm__gs(const ctrain_lm_t *m, ctrain_lm_role_t role, int layer, int which)
{
    float *g = ctrain_lm__g(m, role, layer);
    const ctrain_lm__impl_t *im = m->impl;
    return g ? g : im->sink + (size_t)which * m->cfg.hidden;
}

void ctrain_lm_destroy(ctrain_lm_t *m)
{
    if (!m)
        return;
    ctrain_lm__impl_t *im = m->impl;
    if (im) {
        m->ops->sync(m->ops);
        m->ops->release(m->ops, im->arena);
        free(im->lay);
        free(im->hpos_host);
        free(im);
    }
    if (m->own_buffers) {
        m->ops->release(m->ops, m->params_mem);
        m->ops->release(m->ops, m->grads_mem);
    }
    free(m->tensors);
    free(m->offset);
    free(m->frozen);
    free(m);
}

/* The activation arena of m for passes of up to m->max_rows rows: sizes first, then pointers.
 * Without recomputation every block keeps all its activations; with it, every block keeps its
 * input (res) and the other per-block pointers of every block name one shared set, which the
 * forward overwrites block after block and the backward refills block by block. */
static int ctrain_lm__arena(ctrain_lm_t *m)
{
    ct_ops_t *ops = m->ops;
    const ctrain_lm_cfg_t *cfg = &m->cfg;
    ctrain_lm__impl_t *im = m->impl;
    const bool gpt2 = cfg->arch == CTRAIN_LM_GPT2;
    const size_t N = (size_t)m->max_rows, C = (size_t)cfg->hidden, I = (size_t)cfg->inner;
    const size_t NH = (size_t)cfg->heads, KVH = (size_t)cfg->kv_heads, HD = (size_t)cfg->head_dim;
    const size_t Q = NH * HD, W = (NH + 2 * KVH) * HD;
    const size_t Lm = (size_t)m->max_len, Bmax = (N + Lm - 1) / Lm;
    /* att holds (B,NH,L,L) for any B*L <= max_rows with L <= max_len: at most N/L*L*L = N*L */
    const size_t att = N * NH * Lm;
    /* (B,NH,L) with B = ceil(N / max_len) covers every B*L <= N with L <= max_len */
    const size_t gqa =
        ops->scratch(ops, CT_SCRATCH_GQA_BWD, (int64_t)Bmax, (int64_t)NH, (int64_t)Lm, (int64_t)N);
    const size_t ce = ops->scratch(ops, CT_SCRATCH_CE, cfg->vocab, (int64_t)C, 0, (int64_t)N);
    size_t rest = 0; /* one block's activations other than its input */
#define CT__SZ(x) rest += ctrain_lm__align(x)
    CT__SZ(N * C), CT__SZ(N * C), CT__SZ(N * C); /* mid ln1 ln2 */
    CT__SZ(N), CT__SZ(N), CT__SZ(N), CT__SZ(N);
    CT__SZ(N * W), CT__SZ(att), CT__SZ(N * Q);
    if (gpt2)
        CT__SZ(N * I), CT__SZ(N * I);
    else
        CT__SZ(N * I), CT__SZ(N * I), CT__SZ(N * I);
#undef CT__SZ
    const size_t P = (size_t)cfg->max_pos, H = HD / 2, heads_all = NH + 2 * KVH;
    const size_t layers = (size_t)cfg->layers;
    size_t total =
        layers * ctrain_lm__align(N * C) + (m->recompute ? (layers > 0 ? rest : 0) : layers * rest);
    const size_t tail[] = {N * C,
                           N * C,
                           N,
                           N,
                           N * C,
                           N * C,
                           N * Q,
                           N * W,
                           N * W,
                           N * I,
                           N * I,
                           N * I,
                           gqa,
                           ce,
                           2 * C,
                           1,
                           N * C,
                           gpt2 ? 0 : P * H,
                           gpt2 ? 0 : P * H,
                           N,
                           N,
                           N,
                           N * heads_all};
    for (size_t k = 0; k < sizeof tail / sizeof tail[0]; k++)
        total += ctrain_lm__align(tail[k]);
    int rc = ops->alloc(ops, &im->arena, total * sizeof(float));
    if (rc != 0)
        return rc;
    m->act_bytes = total * sizeof(float);
    ops->zero(ops, im->arena, total * sizeof(float));
    float *p = im->arena;
#define CT__TAKE(dst, x)          \
    do {                          \
        (dst) = (void *)p;        \
        p += ctrain_lm__align(x); \
    } while (0)
    for (int l = 0; l < cfg->layers; l++) {
        ctrain_lm__layer_t *y = &im->lay[l];
        if (m->recompute && l > 0) {
            *y = im->lay[0]; /* the shared set */
            CT__TAKE(y->res, N * C);
            continue;
        }
        CT__TAKE(y->res, N * C);
        CT__TAKE(y->mid, N * C);
        CT__TAKE(y->ln1, N * C);
        CT__TAKE(y->ln2, N * C);
        CT__TAKE(y->mean1, N);
        CT__TAKE(y->rstd1, N);
        CT__TAKE(y->mean2, N);
        CT__TAKE(y->rstd2, N);
        CT__TAKE(y->qkv, N * W);
        CT__TAKE(y->att, att);
        CT__TAKE(y->atty, N * Q);
        if (gpt2) {
            CT__TAKE(y->fc, N * I);
            CT__TAKE(y->act, N * I);
        } else {
            CT__TAKE(y->gate, N * I);
            CT__TAKE(y->up, N * I);
            CT__TAKE(y->h, N * I);
        }
    }
    CT__TAKE(im->res_out, N * C);
    CT__TAKE(im->lnf, N * C);
    CT__TAKE(im->meanf, N);
    CT__TAKE(im->rstdf, N);
    CT__TAKE(im->dres, N * C);
    CT__TAKE(im->dln, N * C);
    CT__TAKE(im->datty, N * Q);
    CT__TAKE(im->dqkv, N * W);
    CT__TAKE(im->dqkv2, N * W);
    CT__TAKE(im->di1, N * I);
    CT__TAKE(im->di2, N * I);
    CT__TAKE(im->di3, N * I);
    CT__TAKE(im->gqa_scratch, gqa);
    CT__TAKE(im->ce_scratch, ce);
    CT__TAKE(im->sink, 2 * C);
    CT__TAKE(im->loss, 1);
    CT__TAKE(im->wpe_rows, N * C);
    CT__TAKE(im->rope_cos, gpt2 ? 0 : P * H);
    CT__TAKE(im->rope_sin, gpt2 ? 0 : P * H);
    CT__TAKE(im->ids, N);
    CT__TAKE(im->tgt, N);
    CT__TAKE(im->pos, N);
    CT__TAKE(im->hpos, N * heads_all);
#undef CT__TAKE
    return 0;
}

static int ctrain_lm__create(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                             int max_rows, int max_len, bool own, const ctrain_lm_opts_t *opts,
                             ct_errbuf_t *eb)
{
    *out = NULL;
    int rc = ctrain_lm_cfg_check(cfg, eb);
    if (rc != 0)
        return rc;
    if (max_len < 1 || max_len > cfg->max_pos || max_rows < max_len)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "language model: %d tokens per row (the model takes 1..%d) in %d rows",
                             max_len, cfg->max_pos, max_rows);
    if (cfg->arch == CTRAIN_LM_QWEN2 && cfg->head_dim % 2 != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "language model: RoPE needs an even head_dim, got %d", cfg->head_dim);
    ctrain_lm_t *m = calloc(1, sizeof *m);
    ctrain_lm__impl_t *im = calloc(1, sizeof *im);
    if (!m || !im) {
        free(m);
        free(im);
        return -ENOMEM;
    }
    m->cfg = *cfg;
    m->ops = ops;
    m->max_rows = max_rows;
    m->max_len = max_len;
    m->recompute = opts && opts->recompute;
    m->weights_only = opts && opts->weights_only;
    m->impl = im;
    rc = ctrain_lm_cfg_tensors(cfg, &m->tensors, &m->n_tensors);
    if (rc != 0)
        goto fail;
    m->offset = calloc((size_t)m->n_tensors, sizeof *m->offset);
    m->frozen = calloc((size_t)m->n_tensors, sizeof *m->frozen);
    im->lay = calloc((size_t)cfg->layers, sizeof *im->lay);
    if (!m->offset || !m->frozen || !im->lay) {
        rc = -ENOMEM;
        goto fail;
    }
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        m->offset[i] = off;
        off += (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
    }
    m->own_buffers = own;
    if (own) {
        m->num_params = off;
        rc = ops->alloc(ops, (void **)&m->params_mem, off * sizeof(float));
        if (rc == 0 && !m->weights_only)
            rc = ops->alloc(ops, (void **)&m->grads_mem, off * sizeof(float));
        if (rc != 0)
            goto fail;
        ops->zero(ops, m->params_mem, off * sizeof(float));
        if (m->grads_mem)
            ops->zero(ops, m->grads_mem, off * sizeof(float));
    }
    if (m->weights_only)
        for (int i = 0; i < m->n_tensors; i++)
            m->frozen[i] = true;
    rc = ctrain_lm__arena(m);
    if (rc != 0)
        goto fail;
    const bool gpt2 = cfg->arch == CTRAIN_LM_GPT2;
    const size_t N = (size_t)max_rows, P = (size_t)cfg->max_pos, H = (size_t)cfg->head_dim / 2;
    im->hpos_host = malloc(N * (size_t)(cfg->heads + 2 * cfg->kv_heads) * sizeof *im->hpos_host);
    if (!im->hpos_host) {
        rc = -ENOMEM;
        goto fail;
    }
    if (!gpt2) {
        float *tab = malloc(2 * P * H * sizeof *tab);
        if (!tab) {
            rc = -ENOMEM;
            goto fail;
        }
        ct_rope_table_cpu(tab, tab + P * H, (int)P, cfg->head_dim, (float)cfg->rope_theta);
        ops->copy(ops, im->rope_cos, tab, P * H * sizeof *tab, CT_COPY_H2D);
        ops->copy(ops, im->rope_sin, tab + P * H, P * H * sizeof *tab, CT_COPY_H2D);
        rc = ops->sync(ops);
        free(tab);
        if (rc != 0)
            goto fail;
    }
    *out = m;
    return 0;
fail:
    if (rc == -ENOMEM && eb)
        ct_errbuf_set(eb, rc, "language model: out of memory for %zu parameters and %d rows",
                      m->num_params, max_rows);
    ctrain_lm_destroy(m);
    return rc;
}

int ctrain_lm_create(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops, int max_rows,
                     int max_len, ct_errbuf_t *eb)
{
    return ctrain_lm__create(out, cfg, ops, max_rows, max_len, true, NULL, eb);
}

int ctrain_lm_create_opts(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                          int max_rows, int max_len, const ctrain_lm_opts_t *opts, ct_errbuf_t *eb)
{
    return ctrain_lm__create(out, cfg, ops, max_rows, max_len, true, opts, eb);
}

int ctrain_lm_create_shared(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                            int max_rows, int max_len, ct_errbuf_t *eb)
{
    return ctrain_lm__create(out, cfg, ops, max_rows, max_len, false, NULL, eb);
}

int ctrain_lm_create_shared_opts(ctrain_lm_t **out, const ctrain_lm_cfg_t *cfg, ct_ops_t *ops,
                                 int max_rows, int max_len, const ctrain_lm_opts_t *opts,
                                 ct_errbuf_t *eb)
{
    return ctrain_lm__create(out, cfg, ops, max_rows, max_len, false, opts, eb);
}

void ctrain_lm_views(const ctrain_lm_t *m, bool grads, ct_tensor_view_t *views)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        memset(&views[i], 0, sizeof views[i]);
        views[i].name = t->name;
        views[i].dtype = CT_DTYPE_F32;
        views[i].ndim = t->ndim;
        views[i].shape[0] = t->shape[0];
        views[i].shape[1] = t->ndim == 2 ? t->shape[1] : 0;
        views[i].data = !grads ? ctrain_lm_tensor(m, i)
                        : (m->frozen[i] && m->frozen_mem) || !m->grads_mem
                            ? NULL
                            : m->grads_mem + m->offset[i];
    }
}

int ctrain_lm_freeze(ctrain_lm_t *m, const char *prefix, bool frozen, ct_errbuf_t *eb)
{
    const size_t n = strlen(prefix);
    int hits = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        bool in = strncmp(t->name, prefix, n) == 0;
        if (t->group > 0)
            for (int j = 0; j < m->n_tensors; j++)
                if (m->tensors[j].group == t->group &&
                    (strncmp(m->tensors[j].name, prefix, n) == 0) != in)
                    return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                         "freezing \"%s\": %s is computed together with %s, which "
                                         "it does not match; freeze both or neither",
                                         prefix, t->name, m->tensors[j].name);
        hits += in;
    }
    if (hits == 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "freezing \"%s\": no tensor of the model has that name prefix",
                             prefix);
    if (!frozen && m->weights_only)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "thawing \"%s\": the model holds weights only (no gradient buffer)",
                             prefix);
    for (int i = 0; i < m->n_tensors; i++)
        if (strncmp(m->tensors[i].name, prefix, n) == 0)
            m->frozen[i] = frozen;
    return 0;
}

void ctrain_lm_zero_grad(ctrain_lm_t *m)
{
    if (m->grads_mem == NULL) /* weights only */
        return;
    m->ops->zero(m->ops, m->grads_mem, m->num_params * sizeof(float));
}

/* The attention scale of block l. */
static float ctrain_lm__scale(const ctrain_lm_cfg_t *c, int l)
{
    double s = 1.0;
    if (c->arch == CTRAIN_LM_QWEN2 || c->scale_attn)
        s /= sqrt((double)c->head_dim);
    if (c->arch == CTRAIN_LM_GPT2 && c->scale_by_layer)
        s /= (double)(l + 1);
    return (float)s;
}

static void ctrain_lm__norm_fwd(ctrain_lm_t *m, float *out, float *mean, float *rstd,
                                const float *inp, ctrain_lm_role_t w, ctrain_lm_role_t b, int l,
                                int N)
{
    ct_ops_t *o = m->ops;
    const int C = m->cfg.hidden;
    if (m->cfg.arch == CTRAIN_LM_GPT2)
        o->layernorm_forward(o, out, mean, rstd, inp, ctrain_lm__p(m, w, l), ctrain_lm__p(m, b, l),
                             N, C, (float)m->cfg.eps);
    else
        o->rmsnorm_forward(o, out, rstd, inp, ctrain_lm__p(m, w, l), N, C, (float)m->cfg.eps);
}

static void ctrain_lm__norm_bwd(ctrain_lm_t *m, float *dinp, const float *dout, const float *inp,
                                const float *mean, const float *rstd, ctrain_lm_role_t w,
                                ctrain_lm_role_t b, int l, int N)
{
    ct_ops_t *o = m->ops;
    const int C = m->cfg.hidden;
    if (m->cfg.arch == CTRAIN_LM_GPT2)
        o->layernorm_backward(o, dinp, ctrain_lm__gs(m, w, l, 0), ctrain_lm__gs(m, b, l, 1), dout,
                              inp, ctrain_lm__p(m, w, l), mean, rstd, N, C);
    else
        o->rmsnorm_backward(o, dinp, ctrain_lm__gs(m, w, l, 0), dout, inp, ctrain_lm__p(m, w, l),
                            rstd, N, C);
}

static const float *ctrain_lm__head(const ctrain_lm_t *m)
{
    return m->cfg.tied ? ctrain_lm__p(m, CTRAIN_LM_T_WTE, -1)
                       : ctrain_lm__p(m, CTRAIN_LM_T_HEAD, -1);
}

/* Block l's forward from its input im->lay[l].res into its saved activations, and with next,
 * the block's output into next; without (the backward's recomputation) it stops at the FFN's
 * hidden activation, the last thing the block's backward reads. */
static void ctrain_lm__block_fwd(ctrain_lm_t *m, int l, int B, int L, float *next)
{
    ct_ops_t *o = m->ops;
    ctrain_lm__impl_t *im = m->impl;
    const ctrain_lm_cfg_t *c = &m->cfg;
    const int N = B * L, C = c->hidden, I = c->inner, NH = c->heads, KVH = c->kv_heads;
    const int HD = c->head_dim, Q = NH * HD, W = (NH + 2 * KVH) * HD;
    const bool gpt2 = c->arch == CTRAIN_LM_GPT2;
    ctrain_lm__layer_t *y = &im->lay[l];
    ctrain_lm__norm_fwd(m, y->ln1, y->mean1, y->rstd1, y->res, CTRAIN_LM_T_LN1_W, CTRAIN_LM_T_LN1_B,
                        l, N);
    if (gpt2) {
        o->conv1d_forward(o, y->qkv, y->ln1, ctrain_lm__p(m, CTRAIN_LM_T_QKV_W, l),
                          ctrain_lm__p(m, CTRAIN_LM_T_QKV_B, l), N, C, W);
    } else {
        o->linear_forward(o, y->qkv, y->ln1, ctrain_lm__p(m, CTRAIN_LM_T_Q_W, l),
                          ctrain_lm__p(m, CTRAIN_LM_T_Q_B, l), N, C, W);
        o->rope_forward(o, y->qkv, y->qkv, im->rope_cos, im->rope_sin, im->hpos, N * (NH + 2 * KVH),
                        1, HD);
    }
    o->gqa_attention_forward(o, y->atty, y->att, y->qkv, B, L, NH, KVH, HD, ctrain_lm__scale(c, l));
    if (gpt2)
        o->conv1d_forward(o, y->mid, y->atty, ctrain_lm__p(m, CTRAIN_LM_T_O_W, l),
                          ctrain_lm__p(m, CTRAIN_LM_T_O_B, l), N, C, C);
    else
        o->linear_forward(o, y->mid, y->atty, ctrain_lm__p(m, CTRAIN_LM_T_O_W, l), NULL, N, Q, C);
    o->residual_forward(o, y->mid, y->mid, y->res, (int64_t)N * C);
    ctrain_lm__norm_fwd(m, y->ln2, y->mean2, y->rstd2, y->mid, CTRAIN_LM_T_LN2_W, CTRAIN_LM_T_LN2_B,
                        l, N);
    if (gpt2) {
        o->conv1d_forward(o, y->fc, y->ln2, ctrain_lm__p(m, CTRAIN_LM_T_FC_W, l),
                          ctrain_lm__p(m, CTRAIN_LM_T_FC_B, l), N, C, I);
        o->gelu_forward(o, y->act, y->fc, (int64_t)N * I,
                        c->act == CTRAIN_LM_ACT_GELU ? CT_GELU_ERF : CT_GELU_TANH);
        if (next)
            o->conv1d_forward(o, next, y->act, ctrain_lm__p(m, CTRAIN_LM_T_FC2_W, l),
                              ctrain_lm__p(m, CTRAIN_LM_T_FC2_B, l), N, I, C);
    } else {
        o->linear_forward(o, y->gate, y->ln2, ctrain_lm__p(m, CTRAIN_LM_T_GATE_W, l), NULL, N, C,
                          I);
        o->linear_forward(o, y->up, y->ln2, ctrain_lm__p(m, CTRAIN_LM_T_UP_W, l), NULL, N, C, I);
        o->swiglu_forward(o, y->h, y->gate, y->up, (int64_t)N * I);
        if (next)
            o->linear_forward(o, next, y->h, ctrain_lm__p(m, CTRAIN_LM_T_DOWN_W, l), NULL, N, I, C);
    }
    if (next)
        o->residual_forward(o, next, next, y->mid, (int64_t)N * C);
}

static int ctrain_lm__pass(ctrain_lm_t *m, const ctrain_lm_batch_t *b, float count, bool backward,
                           const float *dhidden, float *loss, ct_errbuf_t *eb)
{
    ct_ops_t *o = m->ops;
    ctrain_lm__impl_t *im = m->impl;
    const ctrain_lm_cfg_t *c = &m->cfg;
    const int B = b->B, L = b->L;
    if (B < 1 || L < 1 || L > m->max_len || (int64_t)B * L > m->max_rows)
        return ct_errbuf_set(eb, -EINVAL,
                             "language model: a batch of %d rows of %d tokens (this model takes "
                             "up to %d tokens per row, %d in all)",
                             B, L, m->max_len, m->max_rows);
    const int N = B * L, C = c->hidden, I = c->inner, NH = c->heads, KVH = c->kv_heads;
    const int HD = c->head_dim, Q = NH * HD, W = (NH + 2 * KVH) * HD, V = c->vocab;
    const bool gpt2 = c->arch == CTRAIN_LM_GPT2;

    /* ids, targets, positions to the backend */
    int32_t *pos = im->hpos_host; /* (N) then, for Qwen2, (N * (NH + 2 KVH)) head positions */
    for (int r = 0; r < N; r++) {
        if (!b->embeds && (b->ids[r] < 0 || b->ids[r] >= V))
            return ct_errbuf_set(eb, -EINVAL,
                                 "language model: token id %d at row %d, column %d "
                                 "is outside the vocabulary of %d",
                                 b->ids[r], r / L, r % L, V);
        if (b->tgt && b->tgt[r] >= V)
            return ct_errbuf_set(eb, -EINVAL,
                                 "language model: target %d at row %d, column %d "
                                 "is outside the vocabulary of %d",
                                 b->tgt[r], r / L, r % L, V);
    }
    if (!b->embeds)
        o->copy(o, im->ids, b->ids, (size_t)N * sizeof(int32_t), CT_COPY_H2D);
    if (b->tgt)
        o->copy(o, im->tgt, b->tgt, (size_t)N * sizeof(int32_t), CT_COPY_H2D);
    for (int r = 0; r < N; r++)
        pos[r] = r % L;
    o->copy(o, im->pos, pos, (size_t)N * sizeof(int32_t), CT_COPY_H2D);
    if (!gpt2) {
        const int ha = NH + 2 * KVH;
        for (int r = 0; r < N; r++)
            for (int h = 0; h < ha; h++)
                pos[(size_t)r * ha + h] = h < NH + KVH ? r % L : 0;
        o->copy(o, im->hpos, pos, (size_t)N * ha * sizeof(int32_t), CT_COPY_H2D);
    }
    im->B = B;
    im->L = L;

    /* ---- forward ---- */
    const float *wte = ctrain_lm__p(m, CTRAIN_LM_T_WTE, -1);
    const float *wpe = gpt2 ? ctrain_lm__p(m, CTRAIN_LM_T_WPE, -1) : NULL;
    float *x0 = c->layers > 0 ? im->lay[0].res : im->res_out;
    if (b->embeds) {
        if (wpe) {
            o->lm_embed_forward(o, im->wpe_rows, wpe, NULL, im->pos, im->pos, N, C);
            o->residual_forward(o, x0, b->embeds, im->wpe_rows, (int64_t)N * C);
        } else {
            o->copy(o, x0, b->embeds, (size_t)N * C * sizeof(float), CT_COPY_D2D);
        }
    } else {
        o->lm_embed_forward(o, x0, wte, wpe, im->ids, im->pos, N, C);
    }
    for (int l = 0; l < c->layers; l++)
        ctrain_lm__block_fwd(m, l, B, L, l + 1 < c->layers ? im->lay[l + 1].res : im->res_out);
    ctrain_lm__norm_fwd(m, im->lnf, im->meanf, im->rstdf, im->res_out, CTRAIN_LM_T_LNF_W,
                        CTRAIN_LM_T_LNF_B, -1, N);

    /* ---- loss (and the gradient of the final features) ---- */
    const float *head = ctrain_lm__head(m);
    float *dhead =
        c->tied ? ctrain_lm__g(m, CTRAIN_LM_T_WTE, -1) : ctrain_lm__g(m, CTRAIN_LM_T_HEAD, -1);
    if (backward)
        o->zero(o, im->dln, (size_t)N * C * sizeof(float));
    if (b->tgt) {
        o->lm_ce_loss(o, im->loss, backward ? im->dln : NULL, backward ? dhead : NULL,
                      im->ce_scratch, im->lnf, head, im->tgt, N, C, V, count);
        o->copy(o, loss, im->loss, sizeof(float), CT_COPY_D2H);
    } else {
        *loss = 0.0f;
    }
    if (backward && dhidden)
        o->residual_forward(o, im->dln, im->dln, dhidden, (int64_t)N * C);
    if (!backward || (!b->tgt && !dhidden))
        return o->sync(o);

    /* ---- backward ---- */
    float *dres = im->dres;
    o->zero(o, dres, (size_t)N * C * sizeof(float));
    ctrain_lm__norm_bwd(m, dres, im->dln, im->res_out, im->meanf, im->rstdf, CTRAIN_LM_T_LNF_W,
                        CTRAIN_LM_T_LNF_B, -1, N);
    for (int l = c->layers - 1; l >= 0; l--) {
        ctrain_lm__layer_t *y = &im->lay[l];
        /* the shared set holds the last block's activations from the forward */
        if (m->recompute && l + 1 < c->layers)
            ctrain_lm__block_fwd(m, l, B, L, NULL);
        /* the FFN: dres is d next = d (mid + ffn) */
        o->zero(o, im->dln, (size_t)N * C * sizeof(float));
        if (gpt2) {
            o->zero(o, im->di1, (size_t)N * I * sizeof(float));
            o->zero(o, im->di2, (size_t)N * I * sizeof(float));
            o->conv1d_backward(o, im->di1, ctrain_lm__g(m, CTRAIN_LM_T_FC2_W, l),
                               ctrain_lm__g(m, CTRAIN_LM_T_FC2_B, l), dres, y->act,
                               ctrain_lm__p(m, CTRAIN_LM_T_FC2_W, l), N, I, C);
            o->gelu_backward(o, im->di2, im->di1, y->fc, (int64_t)N * I,
                             c->act == CTRAIN_LM_ACT_GELU ? CT_GELU_ERF : CT_GELU_TANH);
            o->conv1d_backward(o, im->dln, ctrain_lm__g(m, CTRAIN_LM_T_FC_W, l),
                               ctrain_lm__g(m, CTRAIN_LM_T_FC_B, l), im->di2, y->ln2,
                               ctrain_lm__p(m, CTRAIN_LM_T_FC_W, l), N, C, I);
        } else {
            o->zero(o, im->di1, (size_t)N * I * sizeof(float));
            o->zero(o, im->di2, (size_t)N * I * sizeof(float));
            o->zero(o, im->di3, (size_t)N * I * sizeof(float));
            o->linear_backward(o, im->di1, ctrain_lm__g(m, CTRAIN_LM_T_DOWN_W, l), NULL, dres, y->h,
                               ctrain_lm__p(m, CTRAIN_LM_T_DOWN_W, l), N, I, C);
            o->swiglu_backward(o, im->di2, im->di3, im->di1, y->gate, y->up, (int64_t)N * I);
            o->linear_backward(o, im->dln, ctrain_lm__g(m, CTRAIN_LM_T_GATE_W, l), NULL, im->di2,
                               y->ln2, ctrain_lm__p(m, CTRAIN_LM_T_GATE_W, l), N, C, I);
            o->linear_backward(o, im->dln, ctrain_lm__g(m, CTRAIN_LM_T_UP_W, l), NULL, im->di3,
                               y->ln2, ctrain_lm__p(m, CTRAIN_LM_T_UP_W, l), N, C, I);
        }
        ctrain_lm__norm_bwd(m, dres, im->dln, y->mid, y->mean2, y->rstd2, CTRAIN_LM_T_LN2_W,
                            CTRAIN_LM_T_LN2_B, l, N);
        /* the attention: dres is now d mid = d (res + attn) */
        o->zero(o, im->datty, (size_t)N * Q * sizeof(float));
        o->zero(o, im->dqkv, (size_t)N * W * sizeof(float));
        o->zero(o, im->dln, (size_t)N * C * sizeof(float));
        if (gpt2)
            o->conv1d_backward(o, im->datty, ctrain_lm__g(m, CTRAIN_LM_T_O_W, l),
                               ctrain_lm__g(m, CTRAIN_LM_T_O_B, l), dres, y->atty,
                               ctrain_lm__p(m, CTRAIN_LM_T_O_W, l), N, C, C);
        else
            o->linear_backward(o, im->datty, ctrain_lm__g(m, CTRAIN_LM_T_O_W, l), NULL, dres,
                               y->atty, ctrain_lm__p(m, CTRAIN_LM_T_O_W, l), N, Q, C);
        o->gqa_attention_backward(o, im->dqkv, im->gqa_scratch, im->datty, y->att, y->qkv, B, L, NH,
                                  KVH, HD, ctrain_lm__scale(c, l));
        if (gpt2) {
            o->conv1d_backward(o, im->dln, ctrain_lm__g(m, CTRAIN_LM_T_QKV_W, l),
                               ctrain_lm__g(m, CTRAIN_LM_T_QKV_B, l), im->dqkv, y->ln1,
                               ctrain_lm__p(m, CTRAIN_LM_T_QKV_W, l), N, C, W);
        } else {
            o->zero(o, im->dqkv2, (size_t)N * W * sizeof(float));
            o->rope_backward(o, im->dqkv2, im->dqkv, im->rope_cos, im->rope_sin, im->hpos,
                             N * (NH + 2 * KVH), 1, HD);
            o->linear_backward(o, im->dln, ctrain_lm__g(m, CTRAIN_LM_T_Q_W, l),
                               ctrain_lm__g(m, CTRAIN_LM_T_Q_B, l), im->dqkv2, y->ln1,
                               ctrain_lm__p(m, CTRAIN_LM_T_Q_W, l), N, C, W);
        }
        ctrain_lm__norm_bwd(m, dres, im->dln, y->res, y->mean1, y->rstd1, CTRAIN_LM_T_LN1_W,
                            CTRAIN_LM_T_LN1_B, l, N);
    }
    /* the embedding */
    float *dwte = b->embeds ? NULL : ctrain_lm__g(m, CTRAIN_LM_T_WTE, -1);
    float *dwpe = gpt2 ? ctrain_lm__g(m, CTRAIN_LM_T_WPE, -1) : NULL;
    if (dwte || dwpe)
        o->lm_embed_backward(o, dwte, dwpe, dres, b->embeds ? im->pos : im->ids, im->pos, N, C,
                             gpt2 ? -1 : c->pad_id);
    if (b->embeds && b->dembeds)
        o->residual_forward(o, b->dembeds, b->dembeds, dres, (int64_t)N * C);
    return o->sync(o);
}

int ctrain_lm_forward_backward(ctrain_lm_t *m, const ctrain_lm_batch_t *b, float count,
                               bool backward, float *loss, ct_errbuf_t *eb)
{
    return ctrain_lm__pass(m, b, count, backward, NULL, loss, eb);
}

int ctrain_lm_backward_hidden(ctrain_lm_t *m, const ctrain_lm_batch_t *b, const float *dhidden,
                              ct_errbuf_t *eb)
{
    ctrain_lm_batch_t nb = *b;
    nb.tgt = NULL;
    float unused = 0.0f;
    return ctrain_lm__pass(m, &nb, 1.0f, true, dhidden, &unused, eb);
}

const float *ctrain_lm_hidden(const ctrain_lm_t *m)
{
    const ctrain_lm__impl_t *im = m->impl;
    return im->lnf;
}

int ctrain_lm_logits(ctrain_lm_t *m, float *logits, int64_t rows)
{
    ct_ops_t *o = m->ops;
    ctrain_lm__impl_t *im = m->impl;
    const int V = m->cfg.vocab, C = m->cfg.hidden;
    if (rows != (int64_t)im->B * im->L || rows <= 0)
        return -EINVAL;
    float *d = NULL;
    int rc = o->alloc(o, (void **)&d, (size_t)rows * V * sizeof(float));
    if (rc != 0)
        return rc;
    o->linear_forward(o, d, im->lnf, ctrain_lm__head(m), NULL, (int)rows, C, V);
    o->copy(o, logits, d, (size_t)rows * V * sizeof(float), CT_COPY_D2H);
    rc = o->sync(o);
    o->release(o, d);
    return rc;
}
