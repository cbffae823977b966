/*
 * ctrain_lm_family.c - the --model lm family of ctrain_lm_family.h: its descriptor, the
 * parameter table of the trainable tensors, the frozen tensors' own buffer, and the passes of
 * a micro-batch through ctrain_lm.c. Not here: the text data and evaluation (ctrain_lm_task.c).
 */
#include "ctrain_lm_family.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain_model_internal.h"

typedef struct ctrain_lm_family__impl {
    ctrain_lm_t *lm;
    size_t frozen_floats;
    int32_t *ids, *tgt; /* host (max_batch * maxlen): a micro-batch cut to its used columns */
} ctrain_lm_family__impl_t;

ctrain_lm_t *ctrain_lm_family_lm(ctrain_model_t *m)
{
    ctrain_lm_family__impl_t *im = m->impl;
    im->lm->params_mem = m->params_mem;
    im->lm->grads_mem = m->grads_mem;
    return im->lm;
}

size_t ctrain_lm_family_frozen_floats(const ctrain_model_t *m)
{
    const ctrain_lm_family__impl_t *im = m->impl;
    return im->frozen_floats;
}

/* The columns a pass needs: up to the last target of any row (at least 1). */
static int ctrain_lm_family__cols(const int32_t *tgt, int B, int L)
{
    int used = 1;
    for (int r = 0; r < B; r++)
        for (int j = L - 1; j >= used; j--)
            if (tgt[(size_t)r * L + j] >= 0) {
                used = j + 1;
                break;
            }
    return used;
}

static int ctrain_lm_family__pass(ctrain_model_t *m, const int32_t *ids, const int32_t *tgt, int B,
                                  float count, bool backward, float *loss, ct_errbuf_t *eb)
{
    ctrain_lm_family__impl_t *im = m->impl;
    const int L = m->cfg.maxlen, Lc = ctrain_lm_family__cols(tgt, B, L);
    for (int r = 0; r < B; r++) {
        memcpy(im->ids + (size_t)r * Lc, ids + (size_t)r * L, (size_t)Lc * sizeof *ids);
        memcpy(im->tgt + (size_t)r * Lc, tgt + (size_t)r * L, (size_t)Lc * sizeof *tgt);
    }
    ctrain_lm_batch_t b = {.B = B, .L = Lc, .ids = im->ids, .tgt = im->tgt};
    return ctrain_lm_forward_backward(ctrain_lm_family_lm(m), &b, count, backward, loss, eb);
}

static int ctrain_lm_family__forward_backward(ctrain_model_t *m, const ctrain_model_batch_t *b,
                                              float count, uint64_t seed, int64_t step, float *loss)
{
    (void)seed, (void)step; /* no dropout: transformers' evaluation-mode computation */
    ct_errbuf_t eb;
    return ctrain_lm_family__pass(m, b->seq, b->pos, b->B, count, true, loss, &eb);
}

int ctrain_lm_family_eval(ctrain_model_t *m, const int32_t *ids, const int32_t *tgt, int B, int L,
                          double *sum, ct_errbuf_t *eb)
{
    if (L != m->cfg.maxlen || B > m->max_batch)
        return ct_errbuf_set(eb, -EINVAL, "language model: %d rows of %d tokens (up to %d of %d)",
                             B, L, m->max_batch, m->cfg.maxlen);
    float l = 0.0f;
    int rc = ctrain_lm_family__pass(m, ids, tgt, B, 1.0f, false, &l, eb);
    *sum = l;
    return rc;
}

static int ctrain_lm_family__features(ctrain_model_t *m, const int32_t *seq, const int64_t *tseq,
                                      int B, const float **feats, int *ldf)
{
    (void)m, (void)seq, (void)tseq, (void)B, (void)feats, (void)ldf;
    return -ENOTSUP; /* the LM is evaluated by its loss (ctrain_lm_family_eval) */
}

static int ctrain_lm_family__logits(ctrain_model_t *m, float *pos_logits, float *neg_logits,
                                    int64_t n)
{
    (void)m, (void)pos_logits, (void)neg_logits, (void)n;
    return -EINVAL;
}

static void ctrain_lm_family__destroy(ctrain_model_t *m)
{
    ctrain_lm_family__impl_t *im = m->impl;
    if (!im)
        return;
    if (im->lm) {
        m->ops->sync(m->ops);
        m->ops->release(m->ops, im->lm->frozen_mem);
        ctrain_lm_destroy(im->lm);
    }
    free(im->ids);
    free(im->tgt);
    free(im);
    m->impl = NULL;
}

static const ctrain_model_vtbl_t ctrain_lm_family__vt = {
    .forward_backward = ctrain_lm_family__forward_backward,
    .forward_features = ctrain_lm_family__features,
    .logits = ctrain_lm_family__logits,
    .destroy = ctrain_lm_family__destroy,
};

/* Freezes every prefix of the comma-separated list. */
static int ctrain_lm_family__freeze(ctrain_lm_t *lm, const char *list, ct_errbuf_t *eb)
{
    char one[CTRAIN_LM_FREEZE_MAX];
    for (const char *p = list; *p != '\0';) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof one)
            return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                                 "--freeze: an empty or too long prefix in "
                                 "\"%.200s\"",
                                 list);
        memcpy(one, p, n);
        one[n] = '\0';
        int rc = ctrain_lm_freeze(lm, one, true, eb);
        if (rc != 0)
            return ct_errbuf_wrap(eb, rc, "--freeze");
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int ctrain_lm_family__build(ctrain_model_t *m, ct_errbuf_t *eb)
{
    const ctrain_lm_model_spec_t *spec = m->cfg.ext;
    ctrain_lm_family__impl_t *im = calloc(1, sizeof *im);
    if (!im)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    m->impl = im;
    m->vt = &ctrain_lm_family__vt;
    const int L = m->cfg.maxlen;
    const size_t cells = (size_t)m->max_batch * (size_t)L;
    if (cells > (size_t)INT32_MAX)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "language model: %d rows of %d tokens per micro-batch is too many",
                             m->max_batch, L);
    const ctrain_lm_opts_t opts = {.recompute = spec->recompute};
    int rc = ctrain_lm_create_shared_opts(&im->lm, &spec->cfg, m->ops, (int)cells, L, &opts, eb);
    if (rc != 0)
        return rc;
    if ((rc = ctrain_lm_family__freeze(im->lm, spec->freeze, eb)) != 0)
        return rc;
    ctrain_lm_t *lm = im->lm;
    for (int i = 0; i < lm->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &lm->tensors[i];
        const size_t numel = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        if (lm->frozen[i]) {
            lm->offset[i] = im->frozen_floats;
            im->frozen_floats += numel;
            continue;
        }
        int64_t shape[3] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0, 0};
        ctrain_param_t *p = ctrain_model__param_add(m, t->name, t->ndim, shape, CTRAIN_INIT_ZEROS);
        if (!p)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
        lm->offset[i] = p->offset;
    }
    if (m->n_params == 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--freeze: \"%s\" freezes every tensor; nothing is left to train",
                             spec->freeze);
    im->ids = malloc(cells * sizeof *im->ids);
    im->tgt = malloc(cells * sizeof *im->tgt);
    if (!im->ids || !im->tgt)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    if (im->frozen_floats > 0) {
        if (m->ops->alloc(m->ops, (void **)&lm->frozen_mem, im->frozen_floats * sizeof(float)) != 0)
            return ct_errbuf_set(eb, -ENOMEM, "out of memory for %zu frozen parameters",
                                 im->frozen_floats);
        m->ops->zero(m->ops, lm->frozen_mem, im->frozen_floats * sizeof(float));
    }
    return 0;
}

static int ctrain_lm_family__check_cfg(const ctrain_model_cfg_t *mc, ct_errbuf_t *eb)
{
    const ctrain_lm_model_spec_t *spec = mc->ext;
    if (spec == NULL)
        return ct_errbuf_set(eb, -EINVAL, "language model: no configuration (--lm_dir)");
    int rc = ctrain_lm_cfg_check(&spec->cfg, eb);
    if (rc != 0)
        return rc;
    if (mc->maxlen < 2 || mc->maxlen > spec->cfg.max_pos)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--maxlen %d: the model takes 2..%d tokens per line", mc->maxlen,
                             spec->cfg.max_pos);
    return 0;
}

const ctrain_family_t ctrain_lm_family = {
    .name = "lm",
    .title = "LM",
    .kind = CTRAIN_MODEL_LM,
    .uses_times = false,
    .min_eval_len = 0,
    .eval_excludes_target = false,
    .layout = CTRAIN_LAYOUT_PRE_LN,
    .layouts = 1u << CTRAIN_LAYOUT_PRE_LN,
    .maxlen = 0, /* the model's max positions */
    .num_epochs = 1,
    .l2_emb = 0.0,
    .has_time_span = false,
    .build = ctrain_lm_family__build,
    .check_backend = NULL,
    .check_cfg = ctrain_lm_family__check_cfg,
    .takes_mhc = false,
    .own_weights = true,
};
