/*
 * test_gpt2rec_gpu.c (gpu suite) - the GPT-2 recommender's model
 * (worker/trainer/models/gpt2rec/ctrain_gpt2rec.c) on the CUDA op table against the same model
 * on the CPU table, in its three modes: ID embeddings only, cached text embeddings (projected),
 * and dynamic (a tiny GPT-2 fine-tuned through the mean of its hidden states). One model code
 * path on two backends, so what is compared is the composition of the ops as the trainer uses
 * them: the micro-batch's indices copied up, the row gradients scattered into the tables in row
 * order, the projection's and the LM's gradients, the scalar loss fetched from the device.
 *   - the initial parameters are bit-identical (initialised on the host, copied up);
 *   - the first step's loss and every gradient tensor;
 *   - 10 Adam steps: every step's loss, then the parameters, the item vectors and the user table.
 * Built twice: against the real CUDA library (suite gpu, exit 77 without a GPU) and against the
 * CPU emulator (suite kernels).
 *
 * Tolerances: the sides differ in the order of the sums inside the dot products, the projection
 * (cuBLAS against the CPU BLAS) and the LM's ops, and in expf / log1pf (2 ulp): gradients of
 * order 1e-3..1 atol 2e-6 (ID and cached) or 2e-5 (dynamic, the LM's LayerNorms amplify), rtol
 * 2e-4; losses rtol 1e-5; after 10 Adam steps at lr 1e-2 the parameters within 1e-4 (Adam
 * normalises the gradients' last bits into steps of about lr). A row scattered into the wrong
 * item, a missing L2 term or a gradient overwritten instead of added moves them by 1e-3 or more.
 */
#include <math.h>

#include "ctrain_gpt2rec.h"
#include "ctrain_model.h"
#include "gcheck.h"

enum { NU = 13, NI = 29, D = 16, T = 12, B = 24, TL = 6, STEPS = 10 };

static void to_host(ct_ops_t *o, float *host, const float *dev, size_t n)
{
    o->copy(o, host, dev, n * sizeof(float), CT_COPY_D2H);
    CT_ASSERT_OK(o->sync(o));
}

static void tiny_gpt2(ctrain_lm_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->arch = CTRAIN_LM_GPT2;
    c->head = true;
    c->vocab = 37;
    c->hidden = 16;
    c->layers = 2;
    c->heads = 4;
    c->kv_heads = 4;
    c->head_dim = 4;
    c->inner = 24;
    c->max_pos = 16;
    c->eps = 1e-5;
    c->act = CTRAIN_LM_ACT_GELU_TANH;
    c->tied = true;
    c->scale_attn = true;
    c->pad_id = -1;
    snprintf(c->prefix, sizeof c->prefix, "transformer.");
}

/* mode 0: ID only; 1: cached texts; 2: dynamic (the LM). */
static void run_mode(int mode)
{
    static const char *const names[] = {"ID only", "cached text", "dynamic text"};
    printf("gpt2rec, %s\n", names[mode]);
    ctrain_lm_cfg_t lmc;
    tiny_gpt2(&lmc);
    int32_t tokens[NI * TL], tok_len[NI];
    float *ru = gk_host_rand(NI * (TL + 1), 0.0f, 1.0f, 31);
    for (int i = 0; i < NI; i++) {
        tok_len[i] = 1 + (int32_t)(ru[i] * TL);
        for (int j = 0; j < TL; j++)
            tokens[i * TL + j] = j < tok_len[i] ? (int32_t)(ru[NI + i * TL + j] * lmc.vocab) : 0;
    }
    ctrain_gpt2rec_spec_t spec = {.n_users = NU,
                                  .n_items = NI,
                                  .dim = D,
                                  .text_dim = mode == 0 ? 0 : mode == 1 ? T : lmc.hidden,
                                  .l2 = 1e-3f,
                                  .lm = mode == 2 ? &lmc : NULL,
                                  .lm_lr_ratio = 0.5,
                                  .text_len = TL,
                                  .tokens = tokens,
                                  .tok_len = tok_len};
    ctrain_model_cfg_t cfg = {.kind = CTRAIN_MODEL_GPT2REC,
                              .layout = CTRAIN_LAYOUT_PRE_LN,
                              .num_items = NI,
                              .maxlen = 1,
                              .hidden = D,
                              .num_heads = 1,
                              .ext = &spec};
    ct_errbuf_t eb;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    ctrain_model_t *mc = NULL, *mg = NULL;
    CT_ASSERT_MSG(ctrain_model_create(&mc, &cfg, &cpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_model_create(&mg, &cfg, &gpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_OK(ctrain_gpt2rec_init(mc, 7));
    CT_ASSERT_OK(ctrain_gpt2rec_init(mg, 7));
    const size_t P = mc->num_params;
    CT_ASSERT(mg->num_params == P);
    float *got = KC_ALLOC(float, P);
    to_host(&gpu, got, mg->params_mem, P);
    GK_ASSERT_BITEQ("initial parameters", got, mc->params_mem, (int64_t)P);
    if (mode == 2) { /* the LM's tensors start at zero: random weights on both sides */
        float *w = gk_host_rand((int64_t)P, -0.3f, 0.3f, 33);
        memcpy(mc->params_mem, w, P * sizeof *w);
        gpu.copy(&gpu, mg->params_mem, w, P * sizeof *w, CT_COPY_H2D);
        free(w);
    }
    if (mode == 1) {
        float *text = gk_host_rand(NI * T, -1.0f, 1.0f, 32);
        CT_ASSERT_OK(ctrain_gpt2rec_set_text(mc, text));
        CT_ASSERT_OK(ctrain_gpt2rec_set_text(mg, text));
        free(text);
    }
    const double atol = mode == 2 ? 2e-5 : 2e-6;
    int32_t seq[B], pos[B], neg[B];
    for (int step = 1; step <= STEPS; step++) {
        float *r = gk_host_rand(3 * B, 0.0f, 1.0f, 40 + (uint64_t)step);
        for (int k = 0; k < B; k++) {
            seq[k] = (int32_t)(r[3 * k] * NU);
            pos[k] = (int32_t)(r[3 * k + 1] * NI);
            neg[k] = (pos[k] + 1 + (int32_t)(r[3 * k + 2] * (NI - 1))) % NI;
        }
        free(r);
        ctrain_model_batch_t mb = {.B = B, .seq = seq, .pos = pos, .neg = neg};
        float lc = 0.0f, lg = 0.0f, sc = 0.0f, sg = 0.0f;
        ctrain_model_zero_grad(mc);
        ctrain_model_zero_grad(mg);
        /* count: the step's rows over two micro-batches, as with accumulation */
        CT_ASSERT_OK(ctrain_model_forward_backward(mc, &mb, 2.0f * B, 11, step, &lc));
        CT_ASSERT_OK(ctrain_model_forward_backward(mg, &mb, 2.0f * B, 11, step, &lg));
        CT_ASSERT(isfinite(lc) && lc > 0.0f);
        CT_ASSERT_CLOSE(lg, lc, 1e-7, 1e-5);
        if (step == 1) {
            to_host(&gpu, got, mg->grads_mem, P);
            for (int i = 0; i < mc->n_params; i++) {
                const ctrain_param_t *p = &mc->params[i];
                gk_check(p->name, got + p->offset, mc->grads_mem + p->offset, (int64_t)p->numel,
                         atol, 2e-4);
            }
        }
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mc, &sc));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mg, &sg));
        CT_ASSERT_CLOSE(sg, sc, 1e-9, 1e-3);
        CT_ASSERT_OK(ctrain_model_adam(mc, 1e-2, 1.0f, step));
        CT_ASSERT_OK(ctrain_model_adam(mg, 1e-2, 1.0f, step));
        if (step == 1 || step == STEPS)
            printf("  step %2d loss cpu %.7f cuda %.7f\n", step, (double)lc, (double)lg);
    }
    to_host(&gpu, got, mg->params_mem, P);
    gk_check("parameters after 10 steps", got, mc->params_mem, (int64_t)P, 1e-4, 1e-3);
    float *vc = KC_ALLOC(float, NI * D), *vg = KC_ALLOC(float, NI * D);
    CT_ASSERT_OK(ctrain_gpt2rec_item_vectors(mc, vc));
    CT_ASSERT_OK(ctrain_gpt2rec_item_vectors(mg, vg));
    gk_check("item vectors", vg, vc, NI * D, 1e-4, 1e-3);
    const float *uc = ctrain_gpt2rec_user_table(mc), *ug = ctrain_gpt2rec_user_table(mg);
    CT_ASSERT(uc && ug && ug != mg->params_mem);
    gk_check("user table", ug, uc, NU * D, 1e-4, 1e-3);
    ctrain_model_destroy(mc);
    ctrain_model_destroy(mg);
    ct_ops_close(&gpu);
    ct_ops_close(&cpu);
    free(got), free(vc), free(vg), free(ru);
}

static void test_modes(void)
{
    for (int mode = 0; mode < 3; mode++)
        run_mode(mode);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_modes);
    return 0;
}
