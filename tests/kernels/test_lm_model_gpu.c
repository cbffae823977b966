/*
 * test_lm_model_gpu.c (gpu suite; kernels suite on the emulator) - the language-model family's
 * passes (worker/trainer/models/lm/ctrain_lm.c) on the CUDA op table against the same code on the
 * CPU table: GPT-2 (tied, as GPT2LMHeadModel always is; GELU tanh) and Qwen2 (untied and tied,
 * grouped-query, NH * HD != C) with the same random weights and token ids: the loss within 1e-5
 * relative, the logits within 1e-4, every parameter's gradient within 1e-4 of the largest entry
 * of that tensor's gradient (1e-5 absolute), and with some tensors frozen and the token rows given
 * as input embeddings, the frozen ranges untouched and the input gradient likewise close; the
 * same with the CUDA model recomputing its activations in the backward. With bf16 matrix
 * products (--use_amp) the loss and gradients within bf16's rounding of the float32 CPU model's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_ops.h"
#include "ctrain_lm.h"
#include "gcheck.h"

enum { LMG_B = 3, LMG_L = 11 };

static void lmg_cfg(ctrain_lm_cfg_t *c, ctrain_lm_arch_t arch, bool tied)
{
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->head = true;
    c->vocab = 37;
    c->hidden = 16;
    c->layers = 2;
    c->heads = 4;
    c->kv_heads = arch == CTRAIN_LM_GPT2 ? 4 : 2;
    c->head_dim = arch == CTRAIN_LM_GPT2 ? 4 : 6;
    c->inner = 24;
    c->max_pos = 16;
    c->eps = 1e-5;
    c->rope_theta = 10000.0;
    c->act = arch == CTRAIN_LM_GPT2 ? CTRAIN_LM_ACT_GELU_TANH : CTRAIN_LM_ACT_SILU;
    c->tied = tied;
    c->scale_attn = true;
    c->pad_id = -1;
    snprintf(c->prefix, sizeof c->prefix, "%s", arch == CTRAIN_LM_GPT2 ? "transformer." : "model.");
}

static double lmg_maxdiff(const float *a, const float *b, size_t n, double *scale)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    *scale = s;
    return d;
}

/* recompute: the CUDA model recomputes its activations in the backward (the CPU one does not). */
static void lmg_case(ctrain_lm_arch_t arch, bool tied, bool recompute)
{
    ctrain_lm_cfg_t c;
    lmg_cfg(&c, arch, tied);
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    ctrain_lm_t *mc = NULL, *mg = NULL;
    ct_errbuf_t eb;
    const int N = LMG_B * LMG_L, C = c.hidden, V = c.vocab;
    int rc = ctrain_lm_create(&mc, &c, &cpu, N, LMG_L, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    const ctrain_lm_opts_t opts = {.recompute = recompute};
    rc = ctrain_lm_create_opts(&mg, &c, &gpu, N, LMG_L, &opts, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    const size_t P = mc->num_params;
    float *w = gk_host_rand((int64_t)P, -0.4f, 0.4f, 500 + (uint64_t)arch * 2 + tied);
    for (int i = 0; i < mc->n_tensors; i++) {
        ctrain_lm_role_t r = mc->tensors[i].role;
        if (r == CTRAIN_LM_T_LN1_W || r == CTRAIN_LM_T_LN2_W || r == CTRAIN_LM_T_LNF_W)
            for (int64_t k = 0; k < mc->tensors[i].shape[0]; k++)
                w[mc->offset[i] + (size_t)k] += 1.0f;
    }
    memcpy(mc->params_mem, w, P * sizeof *w);
    gpu.copy(&gpu, mg->params_mem, w, P * sizeof *w, CT_COPY_H2D);
    int32_t ids[LMG_B * LMG_L], tgt[LMG_B * LMG_L];
    for (int r = 0; r < N; r++)
        ids[r] = (r * 13 + 5) % V;
    for (int r = 0; r < N; r++)
        tgt[r] = r % LMG_L + 1 < LMG_L ? ids[r + 1] : -100;
    const float count = (float)(LMG_B * (LMG_L - 1));
    ctrain_lm_batch_t b = {LMG_B, LMG_L, ids, NULL, tgt, NULL};
    float lc, lg;
    ctrain_lm_zero_grad(mc);
    ctrain_lm_zero_grad(mg);
    CT_ASSERT_OK(ctrain_lm_forward_backward(mc, &b, count, true, &lc, &eb));
    CT_ASSERT_OK(ctrain_lm_forward_backward(mg, &b, count, true, &lg, &eb));
    CT_ASSERT_MSG(fabs((double)lc - lg) <= 1e-5 * fabs((double)lc), "loss cpu %.8g cuda %.8g",
                  (double)lc, (double)lg);
    float *logc = malloc((size_t)N * V * sizeof *logc),
          *logg = malloc((size_t)N * V * sizeof *logg);
    float *gg = malloc(P * sizeof *gg);
    CT_ASSERT(logc && logg && gg);
    CT_ASSERT_OK(ctrain_lm_logits(mc, logc, N));
    CT_ASSERT_OK(ctrain_lm_logits(mg, logg, N));
    double s, dl = lmg_maxdiff(logg, logc, (size_t)N * V, &s);
    CT_ASSERT_MSG(dl <= 1e-4, "logits differ by %.3g", dl);
    gpu.copy(&gpu, gg, mg->grads_mem, P * sizeof *gg, CT_COPY_D2H);
    CT_ASSERT_OK(gpu.sync(&gpu));
    double worst = 0.0;
    for (int i = 0; i < mc->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &mc->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        double d = lmg_maxdiff(gg + mc->offset[i], mc->grads_mem + mc->offset[i], n, &s);
        CT_ASSERT_MSG(d <= fmax(1e-5, 1e-4 * s), "%s: cuda and cpu differ by %.3g (largest %.3g)",
                      t->name, d, s);
        worst = fmax(worst, d / fmax(s, 1e-30));
    }

    /* frozen blocks and the token table, the token rows as input embeddings */
    const char *frz = arch == CTRAIN_LM_GPT2 ? "transformer.h.1." : "model.layers.0.";
    CT_ASSERT_OK(ctrain_lm_freeze(mc, frz, true, &eb));
    CT_ASSERT_OK(ctrain_lm_freeze(mg, frz, true, &eb));
    float *emb = malloc((size_t)N * C * sizeof *emb), *dc = calloc((size_t)N * C, sizeof *dc);
    float *dg = malloc((size_t)N * C * sizeof *dg);
    CT_ASSERT(emb && dc && dg);
    for (int r = 0; r < N; r++)
        memcpy(emb + (size_t)r * C, w + (size_t)ids[r] * C, (size_t)C * sizeof *emb);
    float *g_emb = NULL, *g_d = NULL;
    CT_ASSERT_OK(gpu.alloc(&gpu, (void **)&g_emb, (size_t)N * C * sizeof(float)));
    CT_ASSERT_OK(gpu.alloc(&gpu, (void **)&g_d, (size_t)N * C * sizeof(float)));
    gpu.copy(&gpu, g_emb, emb, (size_t)N * C * sizeof(float), CT_COPY_H2D);
    gpu.zero(&gpu, g_d, (size_t)N * C * sizeof(float));
    ctrain_lm_zero_grad(mc);
    ctrain_lm_zero_grad(mg);
    ctrain_lm_batch_t bc = {LMG_B, LMG_L, NULL, emb, tgt, dc};
    ctrain_lm_batch_t bg = {LMG_B, LMG_L, NULL, g_emb, tgt, g_d};
    CT_ASSERT_OK(ctrain_lm_forward_backward(mc, &bc, count, true, &lc, &eb));
    CT_ASSERT_OK(ctrain_lm_forward_backward(mg, &bg, count, true, &lg, &eb));
    gpu.copy(&gpu, dg, g_d, (size_t)N * C * sizeof(float), CT_COPY_D2H);
    gpu.copy(&gpu, gg, mg->grads_mem, P * sizeof *gg, CT_COPY_D2H);
    CT_ASSERT_OK(gpu.sync(&gpu));
    double de = lmg_maxdiff(dg, dc, (size_t)N * C, &s);
    CT_ASSERT_MSG(de <= fmax(1e-5, 1e-4 * s), "input embedding gradient differs by %.3g", de);
    for (int i = 0; i < mc->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &mc->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        bool fr = mc->frozen[i];
        double d = lmg_maxdiff(gg + mc->offset[i], mc->grads_mem + mc->offset[i], n, &s);
        if (fr)
            CT_ASSERT_MSG(s == 0.0 && d == 0.0, "%s: frozen, yet a gradient was written", t->name);
        else
            CT_ASSERT_MSG(d <= fmax(1e-5, 1e-4 * s), "%s (embeddings in): differ by %.3g", t->name,
                          d);
    }
    printf("  %s%s%s: loss %.7f, logits max diff %.1e, gradients worst %.1e of the tensor's "
           "largest, input embedding gradient %.1e\n",
           ctrain_lm_arch_name(&c), tied ? " (tied)" : "", recompute ? " (CUDA recomputing)" : "",
           (double)lc, dl, worst, de);
    gpu.release(&gpu, g_emb);
    gpu.release(&gpu, g_d);
    ctrain_lm_destroy(mc);
    ctrain_lm_destroy(mg);
    CT_ASSERT_OK(ct_ops_status(&gpu));
    ct_ops_close(&gpu);
    free(w), free(logc), free(logg), free(gg), free(emb), free(dc), free(dg);
}

/* --use_amp: the CUDA model with bf16 matrix products (ct_ops_cuda_init's amp: bf16 factors,
 * float accumulation) against the float32 CPU model. The loss and every gradient must move (the
 * products really are bf16) and stay within bf16's rounding, amplified by the depth: the loss
 * within 1e-2 relative and the gradients within 3e-2 in relative L2 norm (measured on the
 * emulator: 3e-4 and 7e-3 for GPT-2, 4e-4 and 1.4e-2 for Qwen2). */
static void lmg_amp_case(ctrain_lm_arch_t arch, bool tied)
{
    ctrain_lm_cfg_t c;
    lmg_cfg(&c, arch, tied);
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, true));
    ctrain_lm_t *mc = NULL, *mg = NULL;
    ct_errbuf_t eb;
    const int N = LMG_B * LMG_L, V = c.vocab;
    int rc = ctrain_lm_create(&mc, &c, &cpu, N, LMG_L, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    rc = ctrain_lm_create(&mg, &c, &gpu, N, LMG_L, &eb);
    CT_ASSERT_MSG(rc == 0, "%s", eb.msg);
    const size_t P = mc->num_params;
    float *w = gk_host_rand((int64_t)P, -0.4f, 0.4f, 700 + (uint64_t)arch * 2 + tied);
    for (int i = 0; i < mc->n_tensors; i++) {
        ctrain_lm_role_t r = mc->tensors[i].role;
        if (r == CTRAIN_LM_T_LN1_W || r == CTRAIN_LM_T_LN2_W || r == CTRAIN_LM_T_LNF_W)
            for (int64_t k = 0; k < mc->tensors[i].shape[0]; k++)
                w[mc->offset[i] + (size_t)k] += 1.0f;
    }
    memcpy(mc->params_mem, w, P * sizeof *w);
    gpu.copy(&gpu, mg->params_mem, w, P * sizeof *w, CT_COPY_H2D);
    int32_t ids[LMG_B * LMG_L], tgt[LMG_B * LMG_L];
    for (int r = 0; r < N; r++)
        ids[r] = (r * 7 + 3) % V;
    for (int r = 0; r < N; r++)
        tgt[r] = r % LMG_L + 1 < LMG_L ? ids[r + 1] : -100;
    const float count = (float)(LMG_B * (LMG_L - 1));
    ctrain_lm_batch_t b = {LMG_B, LMG_L, ids, NULL, tgt, NULL};
    float lc, lg;
    ctrain_lm_zero_grad(mc);
    ctrain_lm_zero_grad(mg);
    CT_ASSERT_OK(ctrain_lm_forward_backward(mc, &b, count, true, &lc, &eb));
    CT_ASSERT_OK(ctrain_lm_forward_backward(mg, &b, count, true, &lg, &eb));
    const double dloss = fabs((double)lc - lg) / fabs((double)lc);
    float *gg = malloc(P * sizeof *gg);
    CT_ASSERT(gg);
    gpu.copy(&gpu, gg, mg->grads_mem, P * sizeof *gg, CT_COPY_D2H);
    CT_ASSERT_OK(gpu.sync(&gpu));
    /* the gradients as one vector (tensors whose gradients are sums of terms that nearly
     * cancel, Qwen2's key bias rotated by RoPE, have large relative errors of no consequence);
     * the worst entry, against the model's largest, is reported */
    double worst = 0.0, s, all = 0.0;
    lmg_maxdiff(gg, mc->grads_mem, P, &all);
    const char *worst_name = "";
    for (int i = 0; i < mc->n_tensors; i++) {
        const ctrain_lm_tensor_t *t = &mc->tensors[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        double d = lmg_maxdiff(gg + mc->offset[i], mc->grads_mem + mc->offset[i], n, &s) / all;
        if (d > worst)
            worst = d, worst_name = t->name;
    }
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < P; k++) {
        const double e = (double)gg[k] - (double)mc->grads_mem[k];
        num += e * e;
        den += (double)mc->grads_mem[k] * mc->grads_mem[k];
    }
    const double l2 = sqrt(num / den);
    printf("  %s%s, bf16 products: loss %.7f (float32 %.7f, %.1e relative), gradients %.1e "
           "off in relative L2 norm, the worst entry %.1e of the largest (%s)\n",
           ctrain_lm_arch_name(&c), tied ? " (tied)" : "", (double)lg, (double)lc, dloss, l2,
           worst, worst_name);
    CT_ASSERT_MSG(dloss > 0.0 && worst > 1e-6, "bf16 products changed nothing: amp not applied");
    CT_ASSERT_MSG(dloss <= 1e-2, "bf16 loss %.3g relative off the float32 loss", dloss);
    CT_ASSERT_MSG(l2 <= 3e-2, "bf16 gradients %.3g off in relative L2 norm", l2);
    ctrain_lm_destroy(mc);
    ctrain_lm_destroy(mg);
    CT_ASSERT_OK(ct_ops_status(&gpu));
    ct_ops_close(&gpu);
    free(w), free(gg);
}

static void test_amp(void)
{
    lmg_amp_case(CTRAIN_LM_GPT2, true);
    lmg_amp_case(CTRAIN_LM_QWEN2, false);
}

static void test_models(void)
{
    lmg_case(CTRAIN_LM_GPT2, true, false);
    lmg_case(CTRAIN_LM_QWEN2, false, false);
    lmg_case(CTRAIN_LM_QWEN2, true, false);
    lmg_case(CTRAIN_LM_GPT2, true, true);
    lmg_case(CTRAIN_LM_QWEN2, false, true);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_models);
    CT_RUN(test_amp);
    return 0;
}
