/*
 * test_lm_model.c - the language-model family's passes (models/lm/ctrain_lm.c) on the CPU op
 * table:
 *   - finite differences (no Python): GPT-2 and Qwen2 configurations with random weights, the
 *     loss's gradient for three entries of every tensor against central differences (step 1e-2)
 *     of the float32 loss, within 2e-2 relative; freezing (frozen ranges stay exactly zero, the
 *     other gradients do not change by a bit) and the one-line errors; activation recomputation
 *     (the same loss, gradients and input gradient, bit for bit, in a smaller arena);
 *   - with transformers (the PyTorch 2.x venv; that case skips without it): tiny GPT2LMHeadModel
 *     and Qwen2ForCausalLM models (tied and untied, grouped-query, GELU tanh and erf, per-layer
 *     attention scaling) saved by save_pretrained (lm_model.py): logits within 1e-4, the mean
 *     next-token loss within 1e-5 relative, every parameter's gradient within 1e-4 of the largest
 *     entry of that tensor's gradient (and 1e-5 absolute), and with every weight frozen, the
 *     gradient of the input embeddings likewise.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_child.h"
#include "ct_ops.h"
#include "ct_test.h"
#include "ctrain_lm.h"
#include "ctrain_lm_cfg.h"
#include "ctworker.h"

static const char *tmp_root;
static const char *script;

enum { LM_B = 3, LM_L = 9 };

/* the same formula as lm_model.py */
static void lm_ids(int32_t *ids, int32_t *tgt, int V)
{
    for (int b = 0; b < LM_B; b++)
        for (int t = 0; t < LM_L; t++)
            ids[b * LM_L + t] = (b * 31 + t * 7 + 3 + (t * t) % 5) % V;
    for (int b = 0; b < LM_B; b++)
        for (int t = 0; t < LM_L; t++)
            tgt[b * LM_L + t] = t + 1 < LM_L ? ids[b * LM_L + t + 1] : -100;
}

static float lm_loss(ctrain_lm_t *m, const int32_t *ids, const int32_t *tgt, bool backward)
{
    ctrain_lm_batch_t b = {LM_B, LM_L, ids, NULL, tgt, NULL};
    float loss = 0.0f;
    ct_errbuf_t eb;
    int rc = ctrain_lm_forward_backward(m, &b, (float)(LM_B * (LM_L - 1)), backward, &loss, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    return loss;
}

/* ---- finite differences ------------------------------------------------------------------------
 */

static void random_cfg(ctrain_lm_cfg_t *c, ctrain_lm_arch_t arch, bool tied)
{
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->head = true;
    c->vocab = 29;
    c->hidden = 12;
    c->layers = 2;
    c->heads = arch == CTRAIN_LM_GPT2 ? 3 : 4;
    c->kv_heads = arch == CTRAIN_LM_GPT2 ? 3 : 2;
    c->head_dim = arch == CTRAIN_LM_GPT2 ? 4 : 6; /* Qwen2: NH * HD != C */
    c->inner = 20;
    c->max_pos = 16;
    c->eps = 1e-5;
    c->rope_theta = 10000.0;
    c->act = arch == CTRAIN_LM_GPT2 ? CTRAIN_LM_ACT_GELU_TANH : CTRAIN_LM_ACT_SILU;
    c->tied = tied;
    c->scale_attn = true;
    c->pad_id = -1;
    snprintf(c->prefix, sizeof c->prefix, "%s", arch == CTRAIN_LM_GPT2 ? "transformer." : "model.");
}

static void lmm_fill_random(ctrain_lm_t *m, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        bool norm_w = t->role == CTRAIN_LM_T_LN1_W || t->role == CTRAIN_LM_T_LN2_W ||
                      t->role == CTRAIN_LM_T_LNF_W;
        for (size_t k = 0; k < n; k++) {
            float u = (float)rand() / (float)RAND_MAX - 0.5f;
            m->params_mem[m->offset[i] + k] = norm_w ? 1.0f + 0.4f * u : 0.8f * u;
        }
    }
}

static void fd_check(ctrain_lm_arch_t arch, bool tied)
{
    ctrain_lm_cfg_t c;
    random_cfg(&c, arch, tied);
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ctrain_lm_t *m = NULL;
    ct_errbuf_t eb;
    int rc = ctrain_lm_create(&m, &c, &ops, LM_B * LM_L, LM_L, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    lmm_fill_random(m, 7);
    int32_t ids[LM_B * LM_L], tgt[LM_B * LM_L];
    lm_ids(ids, tgt, c.vocab);
    ctrain_lm_zero_grad(m);
    lm_loss(m, ids, tgt, true);
    double worst = 0.0;
    int checked = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        /* three entries of each tensor (the token table: rows the ids use) */
        for (int s = 0; s < 3; s++) {
            size_t k = t->role == CTRAIN_LM_T_WTE
                           ? (size_t)ids[s * 5] * (size_t)c.hidden + (size_t)s
                           : (n * (size_t)(2 * s + 1)) / 7;
            float *p = &m->params_mem[m->offset[i] + k];
            const float keep = *p, h = 1e-2f;
            *p = keep + h;
            double lp = lm_loss(m, ids, tgt, false);
            *p = keep - h;
            double lm = lm_loss(m, ids, tgt, false);
            *p = keep;
            double fd = (lp - lm) / (2.0 * (double)h);
            double g = m->grads_mem[m->offset[i] + k];
            double err = fabs(fd - g) / (fabs(fd) + 1e-2);
            CT_ASSERT_MSG(err < 2e-2, "%s[%zu]: gradient %.6g, finite difference %.6g", t->name, k,
                          g, fd);
            if (err > worst)
                worst = err;
            checked++;
        }
    }
    printf("  %s%s: %d entries, worst relative difference %.2e\n", ctrain_lm_arch_name(&c),
           tied ? " (tied)" : "", checked, worst);
    ctrain_lm_destroy(m);
    ops.close(&ops);
}

static void test_finite_differences(void)
{
    fd_check(CTRAIN_LM_GPT2, true);
    fd_check(CTRAIN_LM_QWEN2, false);
    fd_check(CTRAIN_LM_QWEN2, true);
}

/* Freezing a prefix leaves those ranges at zero and every other gradient as it was. */
static void freeze_check(ctrain_lm_t *m, const char *prefix, const int32_t *ids, const int32_t *tgt)
{
    ct_errbuf_t eb;
    float *full = malloc(m->num_params * sizeof *full);
    CT_ASSERT(full != NULL);
    ctrain_lm_zero_grad(m);
    lm_loss(m, ids, tgt, true);
    memcpy(full, m->grads_mem, m->num_params * sizeof *full);
    CT_ASSERT_MSG(ctrain_lm_freeze(m, prefix, true, &eb) == 0, "%s", eb.msg);
    ctrain_lm_zero_grad(m);
    lm_loss(m, ids, tgt, true);
    int frozen = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        bool f = strncmp(t->name, prefix, strlen(prefix)) == 0;
        frozen += f;
        for (size_t k = 0; k < n; k++) {
            float g = m->grads_mem[m->offset[i] + k];
            if (f)
                CT_ASSERT_MSG(g == 0.0f, "frozen %s[%zu] got %g", t->name, k, (double)g);
            else
                CT_ASSERT_MSG(g == full[m->offset[i] + k], "%s[%zu]: %g frozen vs %g", t->name, k,
                              (double)g, (double)full[m->offset[i] + k]);
        }
    }
    CT_ASSERT(frozen > 0);
    CT_ASSERT_OK(ctrain_lm_freeze(m, prefix, false, &eb));
    free(full);
}

static void test_freezing_and_errors(void)
{
    ctrain_lm_cfg_t c;
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ct_errbuf_t eb;
    int32_t ids[LM_B * LM_L], tgt[LM_B * LM_L];
    for (int a = 0; a < 2; a++) {
        random_cfg(&c, a == 0 ? CTRAIN_LM_GPT2 : CTRAIN_LM_QWEN2, a == 0);
        ctrain_lm_t *m = NULL;
        CT_ASSERT_OK(ctrain_lm_create(&m, &c, &ops, LM_B * LM_L, LM_L, &eb));
        lmm_fill_random(m, 11);
        lm_ids(ids, tgt, c.vocab);
        freeze_check(m, a == 0 ? "transformer.h.0." : "model.layers.1.", ids, tgt);
        freeze_check(m, a == 0 ? "transformer.wte." : "model.norm.", ids, tgt);
        freeze_check(m, a == 0 ? "transformer.ln_f." : "lm_head.", ids, tgt);
        /* a part of a fused group, a prefix that matches nothing */
        if (a == 1) {
            CT_ASSERT_EQ(ctrain_lm_freeze(m, "model.layers.0.self_attn.k_proj", true, &eb),
                         CT_ERANGE_VALUE);
            printf("  %s\n", eb.msg);
            CT_ASSERT(strstr(eb.msg, "q_proj") != NULL);
        }
        CT_ASSERT_EQ(ctrain_lm_freeze(m, "nothing.", true, &eb), CT_ERANGE_VALUE);
        CT_ASSERT(strstr(eb.msg, "nothing.") != NULL);
        /* bad ids, a batch over the limits */
        ids[4] = c.vocab;
        ctrain_lm_batch_t b = {LM_B, LM_L, ids, NULL, tgt, NULL};
        float loss;
        CT_ASSERT_EQ(ctrain_lm_forward_backward(m, &b, 1.0f, true, &loss, &eb), -EINVAL);
        printf("  %s\n", eb.msg);
        CT_ASSERT(strstr(eb.msg, "row 0, column 4") != NULL);
        ids[4] = 0;
        b.L = LM_L + 1;
        CT_ASSERT_EQ(ctrain_lm_forward_backward(m, &b, 1.0f, true, &loss, &eb), -EINVAL);
        ctrain_lm_destroy(m);
    }
    /* more tokens per row than the model has positions */
    random_cfg(&c, CTRAIN_LM_GPT2, true);
    ctrain_lm_t *m = NULL;
    CT_ASSERT_EQ(ctrain_lm_create(&m, &c, &ops, 64, c.max_pos + 1, &eb), CT_ERANGE_VALUE);
    CT_ASSERT(m == NULL);
    printf("  %s\n", eb.msg);
    ops.close(&ops);
}

/* ---- activation recomputation -------------------------------------------------------------------
 */

/* One pass of b on m (grads zeroed first); the loss. */
static float lmm_pass(ctrain_lm_t *m, ctrain_lm_batch_t *b, float count)
{
    ct_errbuf_t eb;
    float loss = 0.0f;
    ctrain_lm_zero_grad(m);
    int rc = ctrain_lm_forward_backward(m, b, count, true, &loss, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    return loss;
}

/* The same weights with and without recomputation (three blocks, so one keeps its activations
 * from the forward and two are recomputed): the same loss, gradients and input gradient, bit for
 * bit, from token ids, from input embeddings with some tensors frozen, and from a shorter batch;
 * and a smaller arena. */
static void recompute_check(ctrain_lm_arch_t arch, bool tied)
{
    ctrain_lm_cfg_t c;
    random_cfg(&c, arch, tied);
    c.layers = 3;
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ct_errbuf_t eb;
    ctrain_lm_t *m[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        ctrain_lm_opts_t opts = {.recompute = k == 1};
        CT_ASSERT_MSG(ctrain_lm_create_opts(&m[k], &c, &ops, LM_B * LM_L, LM_L, &opts, &eb) == 0,
                      "%s", eb.msg);
        CT_ASSERT(m[k]->recompute == (k == 1));
        lmm_fill_random(m[k], 5);
    }
    const size_t n = m[0]->num_params, E = (size_t)LM_B * LM_L * (size_t)c.hidden;
    int32_t ids[LM_B * LM_L], tgt[LM_B * LM_L];
    lm_ids(ids, tgt, c.vocab);
    float *embeds = malloc(E * sizeof *embeds), *dembeds[2];
    float *grads = malloc(n * sizeof *grads);
    CT_ASSERT(embeds && grads);
    for (size_t i = 0; i < E; i++)
        embeds[i] = m[0]->params_mem[(size_t)ids[i / (size_t)c.hidden] * (size_t)c.hidden +
                                     i % (size_t)c.hidden];
    for (int k = 0; k < 2; k++) {
        dembeds[k] = calloc(E, sizeof *dembeds[k]);
        CT_ASSERT(dembeds[k] != NULL);
    }
    const char *freeze = arch == CTRAIN_LM_GPT2 ? "transformer.h.1." : "model.layers.1.mlp.";
    int32_t tgt7[2 * 7]; /* 2 rows of 7 tokens (ids[0..13]): a pass smaller than the arena */
    for (int r = 0; r < 2 * 7; r++)
        tgt7[r] = (r + 1) % 7 == 0 ? -100 : ids[r + 1];
    for (int pass = 0; pass < 3; pass++) {
        float loss[2];
        for (int k = 0; k < 2; k++) {
            ctrain_lm_batch_t b = {LM_B, LM_L, ids, NULL, tgt, NULL};
            if (pass == 1) {
                b.embeds = embeds;
                b.dembeds = dembeds[k];
                CT_ASSERT_OK(ctrain_lm_freeze(m[k], freeze, true, &eb));
            } else if (pass == 2) {
                b.B = 2;
                b.L = 7;
                b.tgt = tgt7;
            }
            loss[k] = lmm_pass(m[k], &b, 17.0f);
            if (pass == 1)
                CT_ASSERT_OK(ctrain_lm_freeze(m[k], freeze, false, &eb));
            if (k == 0)
                memcpy(grads, m[0]->grads_mem, n * sizeof *grads);
        }
        CT_ASSERT_MSG(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0,
                      "pass %d: loss %.9g without recomputation, %.9g with", pass, (double)loss[0],
                      (double)loss[1]);
        for (int i = 0; i < m[0]->n_tensors; i++) {
            const ctrain_lm_tensor_t *t = &m[0]->tensors[i];
            size_t cnt = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
            for (size_t e = 0; e < cnt; e++) {
                float a = grads[m[0]->offset[i] + e], r = m[1]->grads_mem[m[1]->offset[i] + e];
                CT_ASSERT_MSG(memcmp(&a, &r, sizeof a) == 0,
                              "pass %d: %s[%zu]: %.9g without recomputation, %.9g with", pass,
                              t->name, e, (double)a, (double)r);
            }
        }
        bool nonzero = false;
        for (size_t i = 0; i < n; i++)
            nonzero |= grads[i] != 0.0f;
        CT_ASSERT(nonzero);
    }
    CT_ASSERT(memcmp(dembeds[0], dembeds[1], E * sizeof *dembeds[0]) == 0);
    /* three blocks' activations against one block's and three inputs */
    CT_ASSERT_MSG(m[1]->act_bytes < m[0]->act_bytes, "arena %zu bytes with, %zu without",
                  m[1]->act_bytes, m[0]->act_bytes);
    printf("  %s%s: gradients identical; arena %zu bytes without recomputation, %zu with\n",
           ctrain_lm_arch_name(&c), tied ? " (tied)" : "", m[0]->act_bytes, m[1]->act_bytes);
    free(embeds);
    free(grads);
    for (int k = 0; k < 2; k++) {
        free(dembeds[k]);
        ctrain_lm_destroy(m[k]);
    }
    ops.close(&ops);
}

static void test_recompute(void)
{
    recompute_check(CTRAIN_LM_GPT2, true);
    recompute_check(CTRAIN_LM_QWEN2, false);
    recompute_check(CTRAIN_LM_QWEN2, true);
}

/* A weights-only model (a frozen backbone): no gradient buffer, every tensor frozen, thawing
 * refused, and the same loss and input gradient, bit for bit, as a model frozen by prefix. */
static void weights_only_check(ctrain_lm_arch_t arch, bool tied)
{
    ctrain_lm_cfg_t c;
    random_cfg(&c, arch, tied);
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ct_errbuf_t eb;
    ctrain_lm_t *m[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        ctrain_lm_opts_t opts = {.weights_only = k == 1};
        CT_ASSERT_MSG(ctrain_lm_create_opts(&m[k], &c, &ops, LM_B * LM_L, LM_L, &opts, &eb) == 0,
                      "%s", eb.msg);
        lmm_fill_random(m[k], 9);
    }
    CT_ASSERT_OK(ctrain_lm_freeze(m[0], "", true, &eb));
    CT_ASSERT(m[1]->weights_only && m[1]->grads_mem == NULL && m[0]->grads_mem != NULL);
    for (int i = 0; i < m[1]->n_tensors; i++)
        CT_ASSERT(m[1]->frozen[i]);
    CT_ASSERT_ERR(ctrain_lm_freeze(m[1], "", false, &eb), CT_ERANGE_VALUE);
    CT_ASSERT_STR_CONTAINS(eb.msg, "weights only");
    const size_t E = (size_t)LM_B * LM_L * (size_t)c.hidden;
    int32_t ids[LM_B * LM_L], tgt[LM_B * LM_L];
    lm_ids(ids, tgt, c.vocab);
    float *embeds = malloc(E * sizeof *embeds), *dembeds[2];
    CT_ASSERT(embeds != NULL);
    for (size_t i = 0; i < E; i++)
        embeds[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    float loss[2];
    for (int k = 0; k < 2; k++) {
        dembeds[k] = calloc(E, sizeof *dembeds[k]);
        CT_ASSERT(dembeds[k] != NULL);
        ctrain_lm_batch_t b = {LM_B, LM_L, NULL, embeds, tgt, dembeds[k]};
        loss[k] = lmm_pass(m[k], &b, 17.0f);
    }
    CT_ASSERT(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0);
    CT_ASSERT(memcmp(dembeds[0], dembeds[1], E * sizeof *dembeds[0]) == 0);
    bool nonzero = false;
    for (size_t i = 0; i < E; i++)
        nonzero |= dembeds[1][i] != 0.0f;
    CT_ASSERT_MSG(nonzero, "no gradient reached the input embeddings");
    for (size_t i = 0; i < m[0]->num_params; i++)
        CT_ASSERT(m[0]->grads_mem[i] == 0.0f);
    printf("  %s%s: weights only, %zu floats of gradient buffer saved; loss and input gradient "
           "identical\n",
           ctrain_lm_arch_name(&c), tied ? " (tied)" : "", m[0]->num_params);
    free(embeds);
    for (int k = 0; k < 2; k++) {
        free(dembeds[k]);
        ctrain_lm_destroy(m[k]);
    }
    ops.close(&ops);
}

static void test_weights_only(void)
{
    weights_only_check(CTRAIN_LM_GPT2, true);
    weights_only_check(CTRAIN_LM_QWEN2, false);
}

/* ---- with transformers ------------------------------------------------------------------------
 */

/* A float32 tensor of the reference file, malloc'd. */
static float *ref_tensor(ct_st_file_t *f, const char *name, int64_t expect)
{
    const ct_st_tensor_t *t = ct_st_find(f, name);
    CT_ASSERT_MSG(t != NULL, "the reference has no %s", name);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    CT_ASSERT_MSG(n == expect, "%s: %lld elements, expected %lld", name, (long long)n,
                  (long long)expect);
    float *buf = malloc((size_t)n * sizeof *buf);
    CT_ASSERT(buf != NULL);
    ct_tensor_view_t v = {0};
    v.name = t->name;
    v.dtype = CT_DTYPE_F32;
    v.ndim = t->ndim;
    memcpy(v.shape, t->shape, sizeof v.shape);
    v.data = buf;
    ct_errbuf_t eb;
    int rc = ct_st_read(f, &v, 1, CT_ST_ALLOW_EXTRA, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    return buf;
}

/* max |a - b| over n, and max |b|. */
static double max_diff(const float *a, const float *b, size_t n, double *scale)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    *scale = s;
    return d;
}

static void lmm_check_model(const char *dir, const char *name)
{
    char mdir[400], ref[500];
    snprintf(mdir, sizeof mdir, "%s/%s", dir, name);
    snprintf(ref, sizeof ref, "%s/%s.ref.safetensors", dir, name);
    ct_ops_t ops;
    ct_ops_cpu_init(&ops);
    ctrain_lm_t *m = NULL;
    ct_errbuf_t eb;
    int rc = ctrain_lm_open(&m, mdir, &ops, LM_B * LM_L, LM_L, &eb);
    CT_ASSERT_MSG(rc == 0, "%s: %s", name, eb.msg);
    const int V = m->cfg.vocab, C = m->cfg.hidden, N = LM_B * LM_L;
    int32_t ids[LM_B * LM_L], tgt[LM_B * LM_L];
    lm_ids(ids, tgt, V);
    ct_st_file_t *rf = NULL;
    CT_ASSERT_OK(ct_st_open(&rf, ref, &eb));

    ctrain_lm_zero_grad(m);
    float loss = lm_loss(m, ids, tgt, true);
    float *ref_loss = ref_tensor(rf, "loss", 1);
    double lrel = fabs((double)loss - ref_loss[0]) / fabs((double)ref_loss[0]);
    CT_ASSERT_MSG(lrel <= 1e-5, "%s: loss %.8g, transformers %.8g", name, (double)loss,
                  (double)ref_loss[0]);

    float *logits = malloc((size_t)N * V * sizeof *logits);
    CT_ASSERT(logits != NULL);
    CT_ASSERT_OK(ctrain_lm_logits(m, logits, N));
    float *ref_logits = ref_tensor(rf, "logits", (int64_t)N * V);
    double s, dl = max_diff(logits, ref_logits, (size_t)N * V, &s);
    CT_ASSERT_MSG(dl <= 1e-4, "%s: logits differ by %.3g (largest %.3g)", name, dl, s);

    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < m->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &m->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        char key[160];
        snprintf(key, sizeof key, "grad.%s", t->name);
        float *g = ref_tensor(rf, key, (int64_t)n);
        double d = max_diff(m->grads_mem + m->offset[i], g, n, &s);
        double tol = fmax(1e-5, 1e-4 * s);
        CT_ASSERT_MSG(d <= tol, "%s: %s differs by %.3g (largest entry %.3g)", name, t->name, d, s);
        if (d / fmax(s, 1e-30) > worst) {
            worst = d / fmax(s, 1e-30);
            worst_name = t->name;
        }
        free(g);
    }

    /* every weight frozen, the token rows as input embeddings */
    CT_ASSERT_OK(ctrain_lm_freeze(m, "", true, &eb));
    ctrain_lm_zero_grad(m);
    float *emb = malloc((size_t)N * C * sizeof *emb), *demb = calloc((size_t)N * C, sizeof *demb);
    CT_ASSERT(emb && demb);
    const float *wte = m->params_mem + m->offset[0]; /* the token table comes first */
    for (int r = 0; r < N; r++)
        memcpy(emb + (size_t)r * C, wte + (size_t)ids[r] * C, (size_t)C * sizeof *emb);
    ctrain_lm_batch_t b = {LM_B, LM_L, NULL, emb, tgt, demb};
    float loss2;
    rc = ctrain_lm_forward_backward(m, &b, (float)(LM_B * (LM_L - 1)), true, &loss2, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    CT_ASSERT_MSG(fabs((double)loss2 - ref_loss[0]) <= 1e-5 * fabs((double)ref_loss[0]),
                  "%s: loss from embeddings %.8g", name, (double)loss2);
    for (size_t k = 0; k < m->num_params; k++)
        CT_ASSERT_MSG(m->grads_mem[k] == 0.0f, "%s: frozen gradient %zu written", name, k);
    float *ref_demb = ref_tensor(rf, "dembeds", (int64_t)N * C);
    double de = max_diff(demb, ref_demb, (size_t)N * C, &s);
    CT_ASSERT_MSG(de <= fmax(1e-5, 1e-4 * s),
                  "%s: input embedding gradient differs by %.3g "
                  "(largest %.3g)",
                  name, de, s);

    printf("  %-18s %s: loss %.7f (rel. diff %.1e), logits max diff %.1e, gradients worst "
           "%.1e of the tensor's largest (%s), input embedding gradient %.1e\n",
           name, ctrain_lm_arch_name(&m->cfg), (double)loss, lrel, dl, worst, worst_name, de);
    free(emb);
    free(demb);
    free(ref_demb);
    free(ref_loss);
    free(logits);
    free(ref_logits);
    ct_st_close(rf);
    ctrain_lm_destroy(m);
    ops.close(&ops);
}

static void test_transformers(void)
{
    const char *py = ct_test_torch2_python();
    if (access(py, X_OK) != 0)
        CT_SKIP("no PyTorch 2.x interpreter at %s (set CTRUN_TORCH2_PYTHON)", py);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/hf", tmp_root);
    CT_ASSERT(mkdir(dir, 0755) == 0 || errno == EEXIST);
    ct_child_t ch;
    char *argv[] = {(char *)py, (char *)script, "make", dir, NULL};
    CT_ASSERT_OK(ct_child_run(&ch, argv, NULL, 300000));
    if (ch.exit_code == 77) {
        printf("%s", ch.out);
        ct_child_close(&ch);
        CT_SKIP("%s cannot import torch and transformers", py);
    }
    CT_ASSERT_MSG(ch.exit_code == 0, "lm_model.py make failed:\n%s%s", ch.out, ch.err);
    printf("%s", ch.out);
    ct_child_close(&ch);
    static const char *const models[] = {"gpt2", "gpt2_layer_scale", "qwen2", "qwen2_tied"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        lmm_check_model(dir, models[k]);
}

/* argv[1]: lm_model.py; argv[2] "transformers" runs that case alone (meson test
 * lm_model_transformers, which may skip), otherwise the others run. */
int main(int argc, char **argv)
{
    CT_ASSERT(argc >= 2);
    script = argv[1];
    tmp_root = ct_test_tmpdir("ct_lm_model_");
    if (argc >= 3 && strcmp(argv[2], "transformers") == 0) {
        CT_RUN(test_transformers);
        return 0;
    }
    CT_RUN(test_finite_differences);
    CT_RUN(test_freezing_and_errors);
    CT_RUN(test_recompute);
    CT_RUN(test_weights_only);
    return 0;
}
