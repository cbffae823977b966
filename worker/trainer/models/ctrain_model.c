/*
 * ctrain_model.c - the family-independent part of ctrain_model.h: the parameter table and the
 * flat buffers, creating a model through its family (ctrain_registry.c), initialisation (the
 * references' rules and mHC's), the whole-buffer steps (l2_emb, gradient norm, Adam),
 * checkpoint views and loading parameters from a state dict. A family's configuration and its
 * passes live in its folder (models/sasrec/).
 */
#include "ctrain_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_log.h"
#include "ctrain_model_internal.h"

#define CTRAIN_RNG_PURPOSE_INIT 257u

/* ---- the table and the buffers ----------------------------------------------------------- */

ctrain_param_t *ctrain_model__param_add(ctrain_model_t *m, const char *name, int ndim,
                                        const int64_t *shape, ctrain_param_init_t init)
{
    ctrain_param_t *t = realloc(m->params, (size_t)(m->n_params + 1) * sizeof *t);
    if (!t)
        return NULL;
    m->params = t;
    ctrain_param_t *p = &t[m->n_params++];
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

const ctrain_param_t *ctrain_model_find(const ctrain_model_t *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return &m->params[i];
    return NULL;
}

int ctrain_model_create(ctrain_model_t **out, const ctrain_model_cfg_t *cfg, ct_ops_t *ops,
                        int max_batch, ct_errbuf_t *eb)
{
    *out = NULL;
    const ctrain_family_t *fam = ctrain_family(cfg->kind);
    if (fam == NULL)
        return ct_errbuf_set(eb, -EINVAL, "model kind %d is not known", (int)cfg->kind);
    int rc = fam->check_cfg ? fam->check_cfg(cfg, eb) : ctrain_model_cfg_check(cfg, eb);
    if (rc != 0)
        return rc;
    if (max_batch < 1)
        return ct_errbuf_set(eb, -EINVAL, "micro-batch of %d rows", max_batch);
    ctrain_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    m->cfg = *cfg;
    m->ops = ops;
    m->max_batch = max_batch;
    rc = fam->build(m, eb);
    if (rc != 0)
        goto fail;

    size_t P = m->num_params;
    rc = -ENOMEM;
    if (ops->alloc(ops, (void **)&m->params_mem, P * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->grads_mem, (P + CTRAIN_MODEL_GRAD_EXTRA) * sizeof(float)) !=
            0 ||
        ops->alloc(ops, (void **)&m->m_mem, P * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->v_mem, P * sizeof(float)) != 0 ||
        ops->alloc(ops, (void **)&m->scalars, 4 * sizeof(float)) != 0) {
        ct_errbuf_set(eb, rc, "out of memory for %zu parameters", P);
        goto fail;
    }
    ops->zero(ops, m->params_mem, P * sizeof(float));
    ops->zero(ops, m->grads_mem, (P + CTRAIN_MODEL_GRAD_EXTRA) * sizeof(float));
    ops->zero(ops, m->m_mem, P * sizeof(float));
    ops->zero(ops, m->v_mem, P * sizeof(float));
    if (!ops->host_memory) {
        m->host_mirror = calloc(3 * P, sizeof(float));
        if (!m->host_mirror) {
            ct_errbuf_set(eb, rc, "out of memory for the host copy of %zu parameters", P);
            goto fail;
        }
    }
    m->view_names = calloc((size_t)m->n_params * 3, CTRAIN_PARAM_NAME_MAX + 32);
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
    ctrain_model_destroy(m);
    return rc;
}

void ctrain_model_destroy(ctrain_model_t *m)
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

void ctrain_model_grads_ready(ctrain_model_t *m, int block)
{
    if (!m->grads_ready || block >= m->ready_upto)
        return;
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *p = &m->params[i];
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

void ctrain_model_zero_grad(ctrain_model_t *m)
{
    m->ops->zero(m->ops, m->grads_mem, (m->num_params + CTRAIN_MODEL_GRAD_EXTRA) * sizeof(float));
}

const float *ctrain_model_item_table(const ctrain_model_t *m)
{
    /* Every kind names its item table item_emb.weight and builds it first. */
    return m->params_mem + m->params[0].offset;
}

/* ---- initialisation -------------------------------------------------------------------------- */

/* A standard normal from two 32-bit draws (Box-Muller in double; u1 in (0, 1] so the log is
 * finite). */
static double ctrain_model__normal(ct_rng_t *r)
{
    double u1 = ((double)ct_rng_u32(r) + 1.0) / 4294967296.0;
    double u2 = (double)ct_rng_u32(r) / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* fan_in + fan_out as torch.nn.init._calculate_fan_in_and_fan_out counts them: dims 2.. are
 * the receptive field. */
static double ctrain_model__fans(const ctrain_param_t *p)
{
    double rf = 1.0;
    for (int i = 2; i < p->ndim; i++)
        rf *= (double)p->shape[i];
    return ((double)p->shape[1] + (double)p->shape[0]) * rf;
}

/* An mHC layer's biases (K = 2n + n^2: pre, post, res; see ctrain_model_init_params). */
static void ctrain_model__mhc_bias(float *w, int n, int layer)
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

static void ctrain_model__init_tensor(float *w, const ctrain_param_t *p, uint64_t seed, int index)
{
    ct_rng_t r;
    ct_rng_init(&r, seed, CT_RNG_STREAM(CTRAIN_RNG_PURPOSE_INIT, (uint64_t)index), 0);
    switch (p->init) {
    case CTRAIN_INIT_XAVIER_NORMAL: {
        double std = sqrt(2.0 / ctrain_model__fans(p));
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)(std * ctrain_model__normal(&r));
        break;
    }
    case CTRAIN_INIT_XAVIER_UNIFORM: {
        double bound = sqrt(6.0 / ctrain_model__fans(p));
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)((2.0 * (double)ct_rng_uniform(&r) - 1.0) * bound);
        break;
    }
    case CTRAIN_INIT_CONSTANT:
        for (size_t i = 0; i < p->numel; i++)
            w[i] = p->init_value;
        break;
    case CTRAIN_INIT_MHC_BIAS: {
        int n = 1;
        while (CT_MHC_COEFFS(n) < (int)p->numel)
            n++;
        ctrain_model__mhc_bias(w, n, p->init_index);
        break;
    }
    case CTRAIN_INIT_FANIN_UNIFORM: {
        double bound = 1.0 / sqrt((double)p->fan_in);
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)((2.0 * (double)ct_rng_uniform(&r) - 1.0) * bound);
        break;
    }
    case CTRAIN_INIT_NORMAL:
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)((double)p->init_value * ctrain_model__normal(&r));
        break;
    case CTRAIN_INIT_ZEROS:
        memset(w, 0, p->numel * sizeof *w);
        break;
    case CTRAIN_INIT_ONES:
        for (size_t i = 0; i < p->numel; i++)
            w[i] = 1.0f;
        break;
    }
    if (p->zero_row0)
        memset(w, 0, (size_t)p->shape[1] * sizeof *w);
}

int ctrain_model_init_params(ctrain_model_t *m, uint64_t seed)
{
    ct_ops_t *o = m->ops;
    size_t P = m->num_params;
    float *host = o->host_memory ? m->params_mem : m->host_mirror;
    for (int i = 0; i < m->n_params; i++)
        ctrain_model__init_tensor(host + m->params[i].offset, &m->params[i], seed, i);
    if (!o->host_memory)
        o->copy(o, m->params_mem, host, P * sizeof(float), CT_COPY_H2D);
    o->zero(o, m->m_mem, P * sizeof(float));
    o->zero(o, m->v_mem, P * sizeof(float));
    return o->sync(o);
}

/* ---- whole-buffer steps ---------------------------------------------------------------------- */

int ctrain_model_l2(ctrain_model_t *m, float lambda, ct_l2_mode_t mode, float *penalty)
{
    ct_ops_t *o = m->ops;
    double total = 0.0;
    *penalty = 0.0f;
    if (lambda == 0.0f)
        return 0;
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *p = &m->params[i];
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

int ctrain_model_grad_sumsq(ctrain_model_t *m, float *sumsq)
{
    ct_ops_t *o = m->ops;
    o->sumsq(o, m->scalars, m->grads_mem, (int64_t)m->num_params);
    o->copy(o, sumsq, m->scalars, sizeof *sumsq, CT_COPY_D2H);
    return o->sync(o);
}

static double ctrain_model__beta2(const ctrain_model_t *m)
{
    const ctrain_family_t *f = ctrain_family(m->cfg.kind);
    return f && f->adam_beta2 > 0 ? f->adam_beta2 : CT_SASREC_ADAM_BETA2;
}

int ctrain_model_adam(ctrain_model_t *m, double lr, float grad_scale, int64_t t)
{
    ct_ops_t *o = m->ops;
    if (m->weight_decay > 0.0)
        o->scale(o, m->params_mem, (float)(1.0 - lr * m->weight_decay), (int64_t)m->num_params);
    const size_t n1 = m->lr2_ratio > 0 && m->lr2_from < m->num_params ? m->lr2_from : m->num_params;
    o->adam_update(o, m->params_mem, m->m_mem, m->v_mem, m->grads_mem, (int64_t)n1, lr,
                   CT_SASREC_ADAM_BETA1, ctrain_model__beta2(m), CT_SASREC_ADAM_EPS, grad_scale, t);
    if (n1 < m->num_params)
        o->adam_update(o, m->params_mem + n1, m->m_mem + n1, m->v_mem + n1, m->grads_mem + n1,
                       (int64_t)(m->num_params - n1), lr * m->lr2_ratio, CT_SASREC_ADAM_BETA1,
                       ctrain_model__beta2(m), CT_SASREC_ADAM_EPS, grad_scale, t);
    return o->sync(o);
}

/* ---- checkpoint views ------------------------------------------------------------------------ */

size_t ctrain_model_views(ctrain_model_t *m, unsigned which, ct_tensor_view_t *views)
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
        if (k == 0 && !(which & CTRAIN_MODEL_VIEW_PARAMS))
            continue;
        if (k > 0 && !(which & CTRAIN_MODEL_VIEW_ADAM))
            continue;
        for (int i = 0; i < m->n_params; i++) {
            const ctrain_param_t *p = &m->params[i];
            char *name =
                m->view_names + ((size_t)k * m->n_params + i) * (CTRAIN_PARAM_NAME_MAX + 32);
            snprintf(name, CTRAIN_PARAM_NAME_MAX + 32, "%s%s", prefix[k], p->name);
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

int ctrain_model_to_host(ctrain_model_t *m)
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

int ctrain_model_from_host(ctrain_model_t *m)
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

static void ctrain_model__shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < size)
        snprintf(buf + k, size - k, ")");
}

int ctrain_model_load_params(ctrain_model_t *m, const char *path, ct_errbuf_t *eb)
{
    return ctrain_model_load_params_opt(m, path, NULL, NULL, eb);
}

int ctrain_model_load_params_opt(ctrain_model_t *m, const char *path, const char *optional_prefix,
                                 bool *skipped, ct_errbuf_t *eb)
{
    ct_st_file_t *f = NULL;
    if (skipped)
        *skipped = false;
    int rc = ct_st_open(&f, path, eb);
    if (rc != 0)
        return rc;
    ct_tensor_view_t *views = calloc((size_t)m->n_params, sizeof *views);
    float *pos_tmp = NULL;
    if (!views) {
        ct_st_close(f);
        return ct_errbuf_set(eb, -ENOMEM, "out of memory");
    }
    size_t n = ctrain_model_views(m, CTRAIN_MODEL_VIEW_PARAMS, views);
    if (optional_prefix) {
        const size_t plen = strlen(optional_prefix);
        bool any = false;
        for (size_t k = 0; k < ct_st_count(f) && !any; k++)
            any = strncmp(ct_st_tensor_at(f, k)->name, optional_prefix, plen) == 0;
        for (size_t i = 0; i < n && !any;)
            if (strncmp(views[i].name, optional_prefix, plen) == 0) {
                views[i] = views[--n];
                if (skipped)
                    *skipped = true;
            } else {
                i++;
            }
    }
    const ctrain_family_t *fam = ctrain_family(m->cfg.kind);
    const char *hint = fam ? fam->state_dict_hint : NULL;
    /* Check every tensor first, so the message names the first that does not fit. */
    for (size_t i = 0; i < n; i++) {
        const ct_st_tensor_t *t = ct_st_find(f, views[i].name);
        char want[64], got[64];
        if (!t && hint) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH, "%s: no tensor \"%s\" (%s)", path, views[i].name,
                               hint);
            goto out;
        }
        if (!t) {
            rc = ct_errbuf_set(eb, CT_EMISMATCH,
                               "%s: no tensor \"%s\" (is it a %s state dict with as many "
                               "blocks as --num_blocks?)",
                               path, views[i].name, ctrain_model_title(&m->cfg));
            goto out;
        }
        ctrain_model__shape_text(want, sizeof want, views[i].ndim, views[i].shape);
        ctrain_model__shape_text(got, sizeof got, t->ndim, t->shape);
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
                               "%s: tensor \"%s\" has shape %s, this model's is %s (%s)", path,
                               views[i].name, got, want,
                               hint ? hint
                                    : "check --model, --hidden_units, --maxlen, --layout, "
                                      "--time_span and the dataset");
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
