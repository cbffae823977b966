/*
 * ct_model.c - the kind-independent part of ct_model.h: configuration (names, checks, JSON),
 * the parameter table and the flat buffers, initialisation (the references' rules and mHC's),
 * the whole-buffer steps (l2_emb, gradient norm, Adam), checkpoint views and loading parameters
 * from a state dict. The forward and backward passes belong to the kinds (ct_sasrec.c).
 */
#include "ct_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ct_model_internal.h"

#define CT_RNG_PURPOSE_INIT 257u

/* ---- configuration ------------------------------------------------------------------------- */

static const char *const ct__layout_names[CT_LAYOUT_COUNT] = {
    [CT_LAYOUT_POST_LN] = "post_ln",
    [CT_LAYOUT_PRE_LN] = "pre_ln",
    [CT_LAYOUT_ORIGINAL] = "original",
    [CT_LAYOUT_ORIGINAL2020] = "original2020",
};

const char *ct_layout_name(ct_layout_t layout)
{
    return (unsigned)layout < CT_LAYOUT_COUNT ? ct__layout_names[layout] : "?";
}

int ct_layout_parse(const char *text, ct_layout_t *out, ct_errbuf_t *eb)
{
    for (int i = 0; i < CT_LAYOUT_COUNT; i++) {
        if (strcmp(text, ct__layout_names[i]) == 0) {
            *out = (ct_layout_t)i;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE,
                         "\"%s\" is not a layout (expected post_ln, pre_ln, original or "
                         "original2020)",
                         text);
}

static const char *const ct__kind_names[CT_MODEL_KIND_COUNT] = {
    [CT_MODEL_SASREC] = "sasrec",
    [CT_MODEL_TISASREC] = "tisasrec",
};

const char *ct_model_kind_name(ct_model_kind_t kind)
{
    return (unsigned)kind < CT_MODEL_KIND_COUNT ? ct__kind_names[kind] : "?";
}

int ct_model_kind_parse(const char *text, ct_model_kind_t *out, ct_errbuf_t *eb)
{
    for (int i = 0; i < CT_MODEL_KIND_COUNT; i++) {
        if (strcmp(text, ct__kind_names[i]) == 0) {
            *out = (ct_model_kind_t)i;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a model (expected sasrec or tisasrec)",
                         text);
}

static const char *const ct__loss_names[CT_LOSS_COUNT] = {
    [CT_LOSS_BCE] = "bce",
    [CT_LOSS_CE] = "ce",
    [CT_LOSS_SAMPLED_CE] = "sampled_ce",
};

const char *ct_loss_name(ct_loss_t loss)
{
    return (unsigned)loss < CT_LOSS_COUNT ? ct__loss_names[loss] : "?";
}

int ct_loss_parse(const char *text, ct_loss_t *out, ct_errbuf_t *eb)
{
    for (int i = 0; i < CT_LOSS_COUNT; i++) {
        if (strcmp(text, ct__loss_names[i]) == 0) {
            *out = (ct_loss_t)i;
            return 0;
        }
    }
    return ct_errbuf_set(eb, CT_EPARSE, "\"%s\" is not a loss (expected bce, ce or sampled_ce)",
                         text);
}

ct_pos_mode_t ct_layout_pos_mode(ct_layout_t layout)
{
    return layout == CT_LAYOUT_ORIGINAL2020 ? CT_POS_ABSOLUTE : CT_POS_PADDED;
}

bool ct_layout_timeline(ct_layout_t layout)
{
    return layout == CT_LAYOUT_ORIGINAL2020;
}

bool ct_model_timeline(const ct_model_cfg_t *cfg)
{
    return cfg->kind == CT_MODEL_TISASREC || ct_layout_timeline(cfg->layout);
}

int ct_model_pos_rows(const ct_model_cfg_t *cfg)
{
    return ct_layout_pos_mode(cfg->layout) == CT_POS_PADDED ? cfg->maxlen + 1 : cfg->maxlen;
}

ct_l2_mode_t ct_model_l2_mode(const ct_model_cfg_t *cfg)
{
    return cfg->kind == CT_MODEL_TISASREC ? CT_L2_NORM : CT_L2_SQUARED;
}

const char *ct_model_title(const ct_model_cfg_t *cfg)
{
    bool ti = cfg->kind == CT_MODEL_TISASREC;
    if (cfg->mhc_streams > 0)
        return ti ? "TiSASRec+mHC" : "SASRec+mHC";
    return ti ? "TiSASRec" : "SASRec";
}

int ct_model_cfg_check(const ct_model_cfg_t *c, ct_errbuf_t *eb)
{
    if ((unsigned)c->kind >= CT_MODEL_KIND_COUNT)
        return ct_errbuf_set(eb, -EINVAL, "model kind %d is not known", (int)c->kind);
    if ((unsigned)c->layout >= CT_LAYOUT_COUNT)
        return ct_errbuf_set(eb, -EINVAL, "layout %d is not known", (int)c->layout);
    if (c->mhc_streams != 0 && (c->mhc_streams < 2 || c->mhc_streams > CT_MHC_MAX_STREAMS))
        return ct_errbuf_set(eb, -EINVAL, "mHC streams %d out of range (2..%d, or 0 for none)",
                             c->mhc_streams, CT_MHC_MAX_STREAMS);
    if (c->mhc_streams > 0 && c->layout != CT_LAYOUT_PRE_LN)
        return ct_errbuf_set(
            eb, -EINVAL,
            "mHC wraps the sub-layers of the pre_ln layout, not %s (docs/models.md "
            "§7.4: the other layouts have no clean identity path)",
            ct_layout_name(c->layout));
    if (c->kind == CT_MODEL_TISASREC) {
        if (c->layout != CT_LAYOUT_ORIGINAL2020 && c->layout != CT_LAYOUT_PRE_LN)
            return ct_errbuf_set(eb, -EINVAL,
                                 "TiSASRec runs its reference's layout (original2020) or pre_ln, "
                                 "not %s",
                                 ct_layout_name(c->layout));
        if (c->time_span < 1 || c->time_span > CT_MODEL_MAX_TIME_SPAN)
            return ct_errbuf_set(eb, -EINVAL, "time_span %d out of range (1..%d)", c->time_span,
                                 CT_MODEL_MAX_TIME_SPAN);
    }
    if ((unsigned)c->loss >= CT_LOSS_COUNT)
        return ct_errbuf_set(eb, -EINVAL, "loss %d is not known", (int)c->loss);
    if (c->loss == CT_LOSS_SAMPLED_CE && (c->num_negatives < 1 || c->num_negatives > 1000000))
        return ct_errbuf_set(eb, -EINVAL, "num_negatives %d out of range (1..1000000)",
                             c->num_negatives);
    if (c->num_items < 1)
        return ct_errbuf_set(eb, -EINVAL, "the dataset has no items");
    if (c->maxlen < 1 || c->maxlen > CT_MODEL_MAX_LEN)
        return ct_errbuf_set(eb, -EINVAL, "maxlen %d out of range (1..%d)", c->maxlen,
                             CT_MODEL_MAX_LEN);
    if (c->hidden < 1 || c->hidden > CT_MODEL_MAX_HIDDEN)
        return ct_errbuf_set(eb, -EINVAL, "hidden_units %d out of range (1..%d)", c->hidden,
                             CT_MODEL_MAX_HIDDEN);
    if (c->num_heads < 1 || c->hidden % c->num_heads != 0)
        return ct_errbuf_set(eb, -EINVAL,
                             "num_heads %d does not divide hidden_units %d (each head gets "
                             "hidden_units / num_heads columns)",
                             c->num_heads, c->hidden);
    if (c->num_blocks < 1 || c->num_blocks > CT_MODEL_MAX_BLOCKS)
        return ct_errbuf_set(eb, -EINVAL, "num_blocks %d out of range (1..%d)", c->num_blocks,
                             CT_MODEL_MAX_BLOCKS);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return ct_errbuf_set(eb, -EINVAL, "dropout_rate %g out of range [0, 1)",
                             (double)c->dropout);
    return 0;
}

json_t *ct_model_cfg_to_json(const ct_model_cfg_t *c)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:i}", "kind",
                     ct_model_kind_name(c->kind), "layout", ct_layout_name(c->layout), "num_items",
                     (json_int_t)c->num_items, "maxlen", (json_int_t)c->maxlen, "hidden_units",
                     (json_int_t)c->hidden, "num_heads", (json_int_t)c->num_heads, "num_blocks",
                     (json_int_t)c->num_blocks, "dropout_rate", (double)c->dropout, "mhc_streams",
                     (json_int_t)c->mhc_streams, "time_span", (json_int_t)c->time_span);
}

int ct_model_cfg_from_json(const json_t *obj, ct_model_cfg_t *c, ct_errbuf_t *eb)
{
    const char *kind = NULL, *layout = NULL;
    json_int_t items = 0, maxlen = 0, hidden = 0, heads = 0, blocks = 0, streams = 0, span = 0;
    double dropout = 0.0;
    json_error_t je;
    if (json_unpack_ex((json_t *)obj, &je, 0, "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:F, s?I, s?I}",
                       "kind", &kind, "layout", &layout, "num_items", &items, "maxlen", &maxlen,
                       "hidden_units", &hidden, "num_heads", &heads, "num_blocks", &blocks,
                       "dropout_rate", &dropout, "mhc_streams", &streams, "time_span", &span) != 0)
        return ct_errbuf_set(eb, CT_EFORMAT, "model configuration: %s", je.text);
    ct_model_cfg_t n = {.kind = CT_MODEL_SASREC};
    if (ct_model_kind_parse(kind, &n.kind, eb) != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "model configuration");
    if (streams < 0 || streams > CT_MHC_MAX_STREAMS || span < 0 || span > CT_MODEL_MAX_TIME_SPAN)
        return ct_errbuf_set(eb, CT_EFORMAT,
                             "model configuration: mhc_streams or time_span out "
                             "of range");
    n.mhc_streams = (int)streams;
    n.time_span = (int)span;
    int rc = ct_layout_parse(layout, &n.layout, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "model configuration");
    if (items < 1 || items > INT32_MAX || maxlen < 1 || maxlen > CT_MODEL_MAX_LEN || hidden < 1 ||
        hidden > CT_MODEL_MAX_HIDDEN || heads < 1 || heads > hidden || blocks < 1 ||
        blocks > CT_MODEL_MAX_BLOCKS)
        return ct_errbuf_set(eb, CT_EFORMAT, "model configuration: a size is out of range");
    n.num_items = (int32_t)items;
    n.maxlen = (int)maxlen;
    n.hidden = (int)hidden;
    n.num_heads = (int)heads;
    n.num_blocks = (int)blocks;
    n.dropout = (float)dropout;
    rc = ct_model_cfg_check(&n, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, CT_EFORMAT, "model configuration");
    n.no_skip = c->no_skip;
    n.loss = c->loss;
    n.num_negatives = c->num_negatives;
    *c = n;
    return 0;
}

const char *ct_model_cfg_diff(const ct_model_cfg_t *a, const ct_model_cfg_t *b, char *what,
                              size_t size)
{
    const char *field = NULL;
    long long x = 0, y = 0;
    if (a->kind != b->kind) {
        snprintf(what, size, "kind: %s vs %s", ct_model_kind_name(a->kind),
                 ct_model_kind_name(b->kind));
        return "kind";
    } else if (a->layout != b->layout) {
        snprintf(what, size, "layout: %s vs %s", ct_layout_name(a->layout),
                 ct_layout_name(b->layout));
        return "layout";
    } else if (a->num_items != b->num_items)
        field = "num_items", x = a->num_items, y = b->num_items;
    else if (a->maxlen != b->maxlen)
        field = "maxlen", x = a->maxlen, y = b->maxlen;
    else if (a->hidden != b->hidden)
        field = "hidden_units", x = a->hidden, y = b->hidden;
    else if (a->num_heads != b->num_heads)
        field = "num_heads", x = a->num_heads, y = b->num_heads;
    else if (a->num_blocks != b->num_blocks)
        field = "num_blocks", x = a->num_blocks, y = b->num_blocks;
    else if (a->mhc_streams != b->mhc_streams)
        field = "mhc_streams", x = a->mhc_streams, y = b->mhc_streams;
    else if (a->time_span != b->time_span)
        field = "time_span", x = a->time_span, y = b->time_span;
    if (field)
        snprintf(what, size, "%s: %lld vs %lld", field, x, y);
    return field;
}

/* ---- the table and the buffers ----------------------------------------------------------- */

ct_param_t *ct__param_add(ct_model_t *m, const char *name, int ndim, const int64_t *shape,
                          ct_param_init_t init)
{
    ct_param_t *t = realloc(m->params, (size_t)(m->n_params + 1) * sizeof *t);
    if (!t)
        return NULL;
    m->params = t;
    ct_param_t *p = &t[m->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->offset = m->num_params;
    p->init = init;
    p->block = -1;
    m->num_params += p->numel;
    return p;
}

const ct_param_t *ct_model_find(const ct_model_t *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return &m->params[i];
    return NULL;
}

int ct_model_create(ct_model_t **out, const ct_model_cfg_t *cfg, ct_ops_t *ops, int max_batch,
                    ct_errbuf_t *eb)
{
    *out = NULL;
    int rc = ct_model_cfg_check(cfg, eb);
    if (rc != 0)
        return rc;
    if (max_batch < 1)
        return ct_errbuf_set(eb, -EINVAL, "micro-batch of %d rows", max_batch);
    ct_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    m->cfg = *cfg;
    m->ops = ops;
    m->max_batch = max_batch;
    rc = ct__sasrec_build(m, eb);
    if (rc != 0)
        goto fail;

    size_t P = m->num_params;
    rc = -ENOMEM;
    if (ops->alloc(ops, (void **)&m->params_mem, P * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->grads_mem, (P + CT_MODEL_GRAD_EXTRA) * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->m_mem, P * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->v_mem, P * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->scalars, 4 * sizeof(float)) != 0) {
        ct_errbuf_set(eb, rc, "out of memory for %zu parameters", P);
        goto fail;
    }
    ops->zero(ops, m->params_mem, P * sizeof(float));
    ops->zero(ops, m->grads_mem, (P + CT_MODEL_GRAD_EXTRA) * sizeof(float));
    ops->zero(ops, m->m_mem, P * sizeof(float));
    ops->zero(ops, m->v_mem, P * sizeof(float));
    if (!ops->host_memory) {
        m->host_mirror = calloc(3 * P, sizeof(float));
        if (!m->host_mirror) {
            ct_errbuf_set(eb, rc, "out of memory for the host copy of %zu parameters", P);
            goto fail;
        }
    }
    m->view_names = calloc((size_t)m->n_params * 3, CT_PARAM_NAME_MAX + 32);
    m->ready_ranges = calloc((size_t)m->n_params, sizeof *m->ready_ranges);
    if (!m->view_names || !m->ready_ranges) {
        ct_errbuf_set(eb, rc, "out of memory");
        goto fail;
    }
    rc = ops->sync(ops);
    if (rc != 0) {
        ct_errbuf_set(eb, rc, "the %s backend failed while setting up the model", ops->name);
        goto fail;
    }
    *out = m;
    return 0;
fail:
    ct_model_destroy(m);
    return rc;
}

void ct_model_destroy(ct_model_t *m)
{
    if (!m)
        return;
    if (m->vt && m->vt->destroy)
        m->vt->destroy(m);
    ct_ops_t *o = m->ops;
    o->release(o, m->params_mem);
    o->release(o, m->grads_mem);
    o->release(o, m->m_mem);
    o->release(o, m->v_mem);
    o->release(o, m->scalars);
    free(m->host_mirror);
    free(m->view_names);
    free(m->ready_ranges);
    free(m->params);
    free(m);
}

void ct_model_grads_ready(ct_model_t *m, int block)
{
    if (!m->grads_ready || block >= m->ready_upto)
        return;
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ct_param_t *p = &m->params[i];
        if (p->block < block || p->block >= m->ready_upto)
            continue;
        if (n > 0 && m->ready_ranges[n - 1][0] + m->ready_ranges[n - 1][1] == (int64_t)p->offset)
            m->ready_ranges[n - 1][1] += (int64_t)p->numel;
        else
            m->ready_ranges[n][0] = (int64_t)p->offset, m->ready_ranges[n++][1] = (int64_t)p->numel;
    }
    m->ready_upto = block;
    if (n > 0 && m->ready_rc == 0)
        m->ready_rc = m->grads_ready(m->grads_ready_ctx, m->grads_mem, m->ready_ranges, n);
}

void ct_model_zero_grad(ct_model_t *m)
{
    m->ops->zero(m->ops, m->grads_mem, (m->num_params + CT_MODEL_GRAD_EXTRA) * sizeof(float));
}

const float *ct_model_item_table(const ct_model_t *m)
{
    /* Every kind names its item table item_emb.weight and builds it first. */
    return m->params_mem + m->params[0].offset;
}

/* ---- initialisation -------------------------------------------------------------------------- */

/* A standard normal from two 32-bit draws (Box-Muller in double; u1 in (0, 1] so the log is
 * finite). */
static double ct__normal(ct_rng_t *r)
{
    double u1 = ((double)ct_rng_u32(r) + 1.0) / 4294967296.0;
    double u2 = (double)ct_rng_u32(r) / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* fan_in + fan_out as torch.nn.init._calculate_fan_in_and_fan_out counts them: dims 2.. are
 * the receptive field. */
static double ct__fans(const ct_param_t *p)
{
    double rf = 1.0;
    for (int i = 2; i < p->ndim; i++)
        rf *= (double)p->shape[i];
    return ((double)p->shape[1] + (double)p->shape[0]) * rf;
}

/* An mHC layer's biases (K = 2n + n^2: pre, post, res; see ct_model_init_params). */
static void ct__mhc_bias(float *w, int n, int layer)
{
    /* H^pre = sigmoid(b): 0.97 on the chosen stream and 0.01 on the n - 1 others sums to 1 at
     * n = 4; for other n the others share 0.03 so the sum stays 1. */
    const double other = 0.03 / (double)(n - 1), chosen = 0.97;
    for (int s = 0; s < n; s++) {
        double h = s == layer % n ? chosen : other;
        w[s] = (float)log(h / (1.0 - h));
        w[n + s] = 0.0f; /* H^post = 2 sigmoid(0) = 1 */
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            w[2 * n + i * n + j] = i == j ? 0.0f : -8.0f;
}

static void ct__init_tensor(float *w, const ct_param_t *p, uint64_t seed, int index)
{
    ct_rng_t r;
    ct_rng_init(&r, seed, CT_RNG_STREAM(CT_RNG_PURPOSE_INIT, (uint64_t)index), 0);
    switch (p->init) {
    case CT_INIT_XAVIER_NORMAL: {
        double std = sqrt(2.0 / ct__fans(p));
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)(std * ct__normal(&r));
        break;
    }
    case CT_INIT_XAVIER_UNIFORM: {
        double bound = sqrt(6.0 / ct__fans(p));
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)((2.0 * (double)ct_rng_uniform(&r) - 1.0) * bound);
        break;
    }
    case CT_INIT_CONSTANT:
        for (size_t i = 0; i < p->numel; i++)
            w[i] = p->init_value;
        break;
    case CT_INIT_MHC_BIAS: {
        int n = 1;
        while (CT_MHC_COEFFS(n) < (int)p->numel)
            n++;
        ct__mhc_bias(w, n, p->init_index);
        break;
    }
    case CT_INIT_FANIN_UNIFORM: {
        double bound = 1.0 / sqrt((double)p->fan_in);
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)((2.0 * (double)ct_rng_uniform(&r) - 1.0) * bound);
        break;
    }
    case CT_INIT_ZEROS:
        memset(w, 0, p->numel * sizeof *w);
        break;
    case CT_INIT_ONES:
        for (size_t i = 0; i < p->numel; i++)
            w[i] = 1.0f;
        break;
    }
    if (p->zero_row0)
        memset(w, 0, (size_t)p->shape[1] * sizeof *w);
}

int ct_model_init_params(ct_model_t *m, uint64_t seed)
{
    ct_ops_t *o = m->ops;
    size_t P = m->num_params;
    float *host = o->host_memory ? m->params_mem : m->host_mirror;
    for (int i = 0; i < m->n_params; i++)
        ct__init_tensor(host + m->params[i].offset, &m->params[i], seed, i);
    if (!o->host_memory)
        o->copy(o, m->params_mem, host, P * sizeof(float), CT_COPY_H2D);
    o->zero(o, m->m_mem, P * sizeof(float));
    o->zero(o, m->v_mem, P * sizeof(float));
    return o->sync(o);
}

/* ---- whole-buffer steps ---------------------------------------------------------------------- */

int ct_model_l2(ct_model_t *m, float lambda, ct_l2_mode_t mode, float *penalty)
{
    ct_ops_t *o = m->ops;
    double total = 0.0;
    *penalty = 0.0f;
    if (lambda == 0.0f)
        return 0;
    for (int i = 0; i < m->n_params; i++) {
        const ct_param_t *p = &m->params[i];
        if (!p->l2)
            continue;
        float pen = 0.0f;
        o->l2_penalty(o, m->scalars, m->grads_mem + p->offset, m->params_mem + p->offset,
                      (int64_t)p->numel, lambda, mode);
        o->copy(o, &pen, m->scalars, sizeof pen, CT_COPY_D2H);
        total += pen;
    }
    *penalty = (float)total;
    return o->sync(o);
}

int ct_model_grad_sumsq(ct_model_t *m, float *sumsq)
{
    ct_ops_t *o = m->ops;
    o->sumsq(o, m->scalars, m->grads_mem, (int64_t)m->num_params);
    o->copy(o, sumsq, m->scalars, sizeof *sumsq, CT_COPY_D2H);
    return o->sync(o);
}

int ct_model_adam(ct_model_t *m, double lr, float grad_scale, int64_t t)
{
    ct_ops_t *o = m->ops;
    o->adam_update(o, m->params_mem, m->m_mem, m->v_mem, m->grads_mem, (int64_t)m->num_params, lr,
                   CT_SASREC_ADAM_BETA1, CT_SASREC_ADAM_BETA2, CT_SASREC_ADAM_EPS, grad_scale, t);
    return o->sync(o);
}

/* ---- checkpoint views ------------------------------------------------------------------------ */

size_t ct_model_views(ct_model_t *m, unsigned which, ct_tensor_view_t *views)
{
    static const char *const prefix[3] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
    size_t P = m->num_params, n = 0;
    float *base[3];
    if (m->ops->host_memory) {
        base[0] = m->params_mem, base[1] = m->m_mem, base[2] = m->v_mem;
    } else {
        base[0] = m->host_mirror, base[1] = m->host_mirror + P, base[2] = m->host_mirror + 2 * P;
    }
    for (int k = 0; k < 3; k++) {
        if (k == 0 && !(which & CT_MODEL_VIEW_PARAMS))
            continue;
        if (k > 0 && !(which & CT_MODEL_VIEW_ADAM))
            continue;
        for (int i = 0; i < m->n_params; i++) {
            const ct_param_t *p = &m->params[i];
            char *name = m->view_names + ((size_t)k * m->n_params + i) * (CT_PARAM_NAME_MAX + 32);
            snprintf(name, CT_PARAM_NAME_MAX + 32, "%s%s", prefix[k], p->name);
            ct_tensor_view_t *v = &views[n++];
            memset(v, 0, sizeof *v);
            v->name = name;
            v->dtype = CT_DTYPE_F32;
            v->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++)
                v->shape[d] = p->shape[d];
            v->data = base[k] + p->offset;
        }
    }
    return n;
}

int ct_model_to_host(ct_model_t *m)
{
    ct_ops_t *o = m->ops;
    if (o->host_memory)
        return 0;
    size_t P = m->num_params, nb = P * sizeof(float);
    o->copy(o, m->host_mirror, m->params_mem, nb, CT_COPY_D2H);
    o->copy(o, m->host_mirror + P, m->m_mem, nb, CT_COPY_D2H);
    o->copy(o, m->host_mirror + 2 * P, m->v_mem, nb, CT_COPY_D2H);
    return o->sync(o);
}

int ct_model_from_host(ct_model_t *m)
{
    ct_ops_t *o = m->ops;
    if (o->host_memory)
        return 0;
    size_t P = m->num_params, nb = P * sizeof(float);
    o->copy(o, m->params_mem, m->host_mirror, nb, CT_COPY_H2D);
    o->copy(o, m->m_mem, m->host_mirror + P, nb, CT_COPY_H2D);
    o->copy(o, m->v_mem, m->host_mirror + 2 * P, nb, CT_COPY_H2D);
    return o->sync(o);
}

/* ---- loading a state dict -------------------------------------------------------------------- */

static void ct__shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < size)
        snprintf(buf + k, size - k, ")");
}

int ct_model_load_params(ct_model_t *m, const char *path, ct_errbuf_t *eb)
{
    ct_st_file_t *f = NULL;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    ct_tensor_view_t *views = calloc((size_t)m->n_params, sizeof *views);
    float *pos_tmp = NULL;
    if (!views) {
        ct_st_close(f);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    size_t n = ct_model_views(m, CT_MODEL_VIEW_PARAMS, views);
    /* Check every tensor first, so the message names the first that does not fit. */
    for (size_t i = 0; i < n; i++) {
        const ct_st_tensor_t *t = ct_st_find(f, views[i].name);
        char want[64], got[64];
        if (!t) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "%s: no tensor \"%s\" (is it a %s state dict with as many "
                               "blocks as --num_blocks?)",
                               path, views[i].name, ct_model_title(&m->cfg));
            goto out;
        }
        ct__shape_text(want, sizeof want, views[i].ndim, views[i].shape);
        ct__shape_text(got, sizeof got, t->ndim, t->shape);
        if (t->dtype != CT_DTYPE_F32) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH, "%s: tensor \"%s\" is %s, expected F32", path,
                               views[i].name, ct_dtype_name(t->dtype));
            goto out;
        }
        bool same = t->ndim == views[i].ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == views[i].shape[d];
        bool longer_ok = strcmp(views[i].name, "pos_emb.weight") == 0 ||
                         strcmp(views[i].name, "time_matrix_K_emb.weight") == 0;
        bool longer_pos = longer_ok && t->ndim == 2 && t->shape[1] == views[i].shape[1] &&
                          t->shape[0] > views[i].shape[0];
        if (!same && !longer_pos) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "%s: tensor \"%s\" has shape %s, this model's is "
                               "%s (check --model, --hidden_units, --maxlen, --layout, "
                               "--time_span and the dataset)",
                               path, views[i].name, got, want);
            goto out;
        }
        if (longer_pos) {
            /* Read the whole table into a temporary and keep the rows this model uses. */
            pos_tmp = malloc((size_t)t->shape[0] * (size_t)t->shape[1] * sizeof *pos_tmp);
            if (!pos_tmp) {
                rc = ct_errbuf_set(eb, -ENOMEM, "out of memory");
                goto out;
            }
            ct_tensor_view_t tmp = views[i];
            float *dst = views[i].data;
            size_t keep = (size_t)views[i].shape[0] * (size_t)views[i].shape[1];
            tmp.shape[0] = t->shape[0];
            tmp.data = pos_tmp;
            rc = ct_st_read(f, &tmp, 1, CT_ST_ALLOW_EXTRA, eb);
            if (rc != 0)
                goto out;
            memcpy(dst, pos_tmp, keep * sizeof *dst);
            ct_log_info("%s: %s has %lld rows; using the first %lld", path, views[i].name,
                        (long long)t->shape[0], (long long)views[i].shape[0]);
            views[i] = views[--n]; /* loaded; drop it from the list */
            i--;
        }
    }
    rc = ct_st_read(f, views, n, CT_ST_ALLOW_EXTRA, eb);
    if (rc == 0 && !m->ops->host_memory) {
        ct_ops_t *o = m->ops;
        o->copy(o, m->params_mem, m->host_mirror, m->num_params * sizeof(float), CT_COPY_H2D);
        rc = o->sync(o);
    }
out:
    free(pos_tmp);
    free(views);
    ct_st_close(f);
    return rc;
}

int ct_model_cfg_from_state_dict(const char *path, ct_model_cfg_t *cfg, int *pos_rows,
                                 ct_errbuf_t *eb)
{
    ct_st_file_t *f = NULL;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    const ct_st_tensor_t *e = ct_st_find(f, "item_emb.weight");
    const ct_st_tensor_t *p = ct_st_find(f, "pos_emb.weight");
    const ct_st_tensor_t *pk = ct_st_find(f, "abs_pos_K_emb.weight");
    const ct_st_tensor_t *tv = ct_st_find(f, "time_matrix_V_emb.weight");
    const ct_st_tensor_t *hc = ct_st_find(f, "attention_hc.0.phi");
    bool ti = pk && pk->ndim == 2 && tv && tv->ndim == 2 && tv->shape[0] >= 2;
    if (!e || e->ndim != 2 || e->shape[0] < 2 || (!ti && (!p || p->ndim != 2))) {
        ct_st_close(f);
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "%s: not a SASRec or TiSASRec state dict (no 2-d item_emb.weight "
                             "with pos_emb.weight or abs_pos_K_emb.weight)",
                             path);
    }
    int blocks = 0;
    for (size_t i = 0; i < ct_st_count(f); i++) {
        const char *name = ct_st_tensor_at(f, i)->name;
        int b = -1, k = 0;
        int got = ti ? sscanf(name, "attention_layers.%d.Q_w.weight%n", &b, &k)
                     : sscanf(name, "attention_layers.%d.in_proj_weight%n", &b, &k);
        if (got == 1 && name[k] == '\0' && b + 1 > blocks)
            blocks = b + 1;
    }
    if (e->shape[0] - 1 > INT32_MAX || e->shape[1] > CT_MODEL_MAX_HIDDEN || blocks < 1 ||
        blocks > CT_MODEL_MAX_BLOCKS) {
        ct_st_close(f);
        return ct_errbuf_set(eb, CT_EMISMATCH,
                             "%s: item_emb.weight (%lld x %lld) or %d blocks "
                             "out of range",
                             path, (long long)e->shape[0], (long long)e->shape[1], blocks);
    }
    int streams = 0;
    if (hc && hc->ndim == 2 && e->shape[1] > 0 && hc->shape[0] % e->shape[1] == 0)
        streams = (int)(hc->shape[0] / e->shape[1]);
    if ((ti && (pk->shape[0] > CT_MODEL_MAX_LEN || tv->shape[0] - 1 > CT_MODEL_MAX_TIME_SPAN)) ||
        streams > CT_MHC_MAX_STREAMS) {
        ct_st_close(f);
        return ct_errbuf_set(eb, CT_EMISMATCH, "%s: a table or the mHC streams out of range", path);
    }
    cfg->kind = ti ? CT_MODEL_TISASREC : CT_MODEL_SASREC;
    cfg->num_items = (int32_t)(e->shape[0] - 1);
    cfg->hidden = (int)e->shape[1];
    cfg->num_blocks = blocks;
    cfg->mhc_streams = streams;
    if (ti) {
        cfg->maxlen = (int)pk->shape[0];
        cfg->time_span = (int)(tv->shape[0] - 1);
        *pos_rows = 0;
    } else {
        cfg->time_span = 0;
        *pos_rows = p->shape[0] > INT32_MAX ? INT32_MAX : (int)p->shape[0];
    }
    ct_st_close(f);
    return 0;
}
