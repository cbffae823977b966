/*
 * test_temporal_gpu.c (gpu suite) - the temporal encoder (worker/trainer/models/temporal/
 * ctrain_temporal.c, --model temporal) on the CUDA op table against the same model on the CPU
 * table: one code path on two backends, so what is compared is the composition of the ops as the
 * model uses them - the patches and masks gathered on the host and copied up, the mask token,
 * the bidirectional attention's and the three other dropout sites' draws keyed by (step, row),
 * the += contract of the gradients across the residual branches, the loss fetched from the
 * device, AdamW's decay on the device. Stage reconstruct with dropout 0.1 and weight decay 0.01:
 *   - the initial parameters are bit-identical (initialised on the host, copied up);
 *   - the first step's loss and every parameter tensor's gradient;
 *   - 10 training steps (zero_grad, forward_backward, the gradient norm, clipping, AdamW - what
 *     ctrain_train.c's step does on one rank): every step's loss and the parameters after the
 *     last one;
 *   - the evaluation's squared-error sum (ctrain_temporal_eval) and the embeddings
 *     (ctrain_temporal_embed) of the trained models.
 * Stage align, the same with the projector's K soft tokens, a prompt and each curve's
 * description into a frozen tiny Qwen2 (each table's own, the same weights): the rows built on
 * the backend (the LM's table rows gathered, the soft tokens copied in, their gradient copied
 * out of d embeds), the first step's gradients, 10 AdamW steps, and the evaluation's
 * cross-entropy sums with each curve's own description and with another's
 * (ctrain_temporal_align_eval). Each side's family check_backend must accept its table first:
 * the emulator's device memory is host memory, so a model that computed on the host would pass
 * the comparisons; that check is what tells it apart. Then --use_amp (test_amp).
 * Built twice: against the real CUDA library (suite gpu, exit 77 without a GPU) and against the
 * CPU emulator (suite kernels), the model sources compiled again against the emulated kernels.
 *
 * Tolerances: both sides are float; they differ in the order of additions inside the matrix
 * products (OpenBLAS against cuBLAS), the attention's softmax sums and row dot (warp sums), the
 * LayerNorms' reductions and expf (2 ulp). Each op's difference is a few float roundings
 * (1e-7..1e-6 relative, the op tests), amplified by the LayerNorms' rstd on the way down: the
 * first step's gradients, of order 1e-3..1, within atol 2e-5, rtol 2e-4, the loss within 1e-5
 * relative. Over 10 AdamW steps at lr 1e-3 the parameters move by about lr per step whatever the
 * gradients' last bits (Adam normalises them): losses within 1e-4 relative, parameters within
 * 5e-5 of each other but for those whose gradient is zero in exact arithmetic (the attention's
 * key bias) and so pure rounding noise that Adam turns into steps of about lr: all within
 * 2 lr steps, 99% within 5e-5. The evaluation sum (of squared errors of order 1) within 1e-4
 * relative, the embeddings (means of LayerNorm outputs of order 1) within 5e-4. A misplaced op
 * (a dropout site keyed wrongly, a gradient overwritten instead of added, a host pointer where a
 * device one belongs, the decay skipped) moves these by 1e-3 or more.
 */
#include <math.h>

#include "ctrain_lm.h"
#include "ctrain_model.h"
#include "ctrain_temporal.h"
#include "gcheck.h"

enum { B = 4, N = 8, P = 6, C = 16, NH = 2, NB = 2, F = 24, CURVES = 23, STEPS = 10 };

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

typedef struct batch {
    int32_t seq[B * N], pos[B * N];
    float count;
} batch_t;

/* B random curves, 3 of the N patches of each masked (at random places). */
static void make_batch(batch_t *b, int step)
{
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(step + 1) * 0xBF58476D1CE4E5B9ull;
    int masked = 0;
    for (int r = 0; r < B; r++) {
        const int32_t curve = (int32_t)(rnd() % CURVES);
        for (int j = 0; j < N; j++)
            b->seq[r * N + j] = curve, b->pos[r * N + j] = 0;
        for (int k = 0; k < 3;) {
            const int j = (int)(rnd() % N);
            if (!b->pos[r * N + j])
                b->pos[r * N + j] = 1, k++, masked++;
        }
    }
    b->count = (float)(masked * P);
}

static void to_host(ct_ops_t *o, float *host, const float *dev, size_t n)
{
    o->copy(o, host, dev, n * sizeof(float), CT_COPY_D2H);
    CT_ASSERT_OK(o->sync(o));
}

static void check_params(const float *got, const float *ref, size_t n)
{
    size_t off = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        worst = d > worst ? d : worst;
        off += d > 5e-5;
        CT_ASSERT_MSG(d <= 2 * 1e-3 * STEPS, "parameter %zu: cuda %.9g cpu %.9g", i, (double)got[i],
                      (double)ref[i]);
    }
    printf("  parameters after %d steps: %zu of %zu differ by more than 5e-5, worst %.2e\n", STEPS,
           off, n, worst);
    CT_ASSERT_MSG(off * 100 <= n, "%zu of %zu parameters differ by more than 5e-5", off, n);
}

static void test_reconstruct(void)
{
    float *curves = gk_host_rand((int64_t)CURVES * N * P, -2.0f, 2.0f, 91);
    ctrain_temporal_spec_t spec = {.patch_len = P,
                                   .ff_dim = F,
                                   .weight_decay = 0.01,
                                   .patches = curves,
                                   .curves = CURVES,
                                   .stage = 0};
    ctrain_model_cfg_t cfg = {.kind = CTRAIN_MODEL_TEMPORAL,
                              .layout = CTRAIN_LAYOUT_PRE_LN,
                              .maxlen = N,
                              .hidden = C,
                              .num_heads = NH,
                              .num_blocks = NB,
                              .dropout = 0.1f,
                              .ext = &spec};
    ct_errbuf_t eb;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    /* the family says it runs on the CUDA table (the emulator's device memory is host memory:
     * this is what tells a model that computes on the host apart) */
    CT_ASSERT_MSG(ctrain_family(CTRAIN_MODEL_TEMPORAL)->check_backend(&cfg, &gpu, &eb) == 0, "%s",
                  eb.msg);
    ctrain_model_t *mc = NULL, *mg = NULL;
    CT_ASSERT_MSG(ctrain_model_create(&mc, &cfg, &cpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_model_create(&mg, &cfg, &gpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_OK(ctrain_model_init_params(mc, 5));
    CT_ASSERT_OK(ctrain_model_init_params(mg, 5));
    const size_t np = mc->num_params;
    CT_ASSERT(mg->num_params == np);
    float *got = KC_ALLOC(float, np + 1);
    to_host(&gpu, got, mg->params_mem, np);
    GK_ASSERT_BITEQ("initial parameters", got, mc->params_mem, (int64_t)np);

    batch_t bt;
    double worst_loss = 0.0;
    for (int step = 1; step <= STEPS; step++) {
        make_batch(&bt, step);
        ctrain_model_batch_t mb = {.B = B, .seq = bt.seq, .pos = bt.pos, .row0 = 4 * step};
        float lc = 0, lg = 0, sc = 0, sg = 0;
        ctrain_model_zero_grad(mc);
        ctrain_model_zero_grad(mg);
        CT_ASSERT_OK(ctrain_model_forward_backward(mc, &mb, bt.count, 13, step, &lc));
        CT_ASSERT_OK(ctrain_model_forward_backward(mg, &mb, bt.count, 13, step, &lg));
        CT_ASSERT(isfinite(lc) && isfinite(lg) && lc > 0.0f);
        if (step == 1) {
            CT_ASSERT_CLOSE(lg, lc, 1e-6, 1e-5);
            to_host(&gpu, got, mg->grads_mem, np);
            for (int i = 0; i < mc->n_params; i++) {
                const ctrain_param_t *p = &mc->params[i];
                gk_check(p->name, got + p->offset, mc->grads_mem + p->offset, (int64_t)p->numel,
                         2e-5, 2e-4);
            }
        }
        CT_ASSERT_CLOSE(lg, lc, 1e-5, 1e-4);
        const double d = fabs((double)lg - lc) / fabs((double)lc);
        worst_loss = d > worst_loss ? d : worst_loss;
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mc, &sc));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mg, &sg));
        CT_ASSERT_CLOSE(sg, sc, 1e-6, 1e-3);
        CT_ASSERT_OK(ctrain_model_adam(mc, 1e-3, ct_clip_coef(sc, 1.0f), step));
        CT_ASSERT_OK(ctrain_model_adam(mg, 1e-3, ct_clip_coef(sg, 1.0f), step));
        if (step == 1 || step == STEPS)
            printf("  step %2d loss cpu %.7f cuda %.7f\n", step, (double)lc, (double)lg);
    }
    printf("  %d-step losses: worst relative difference %.2e\n", STEPS, worst_loss);
    to_host(&gpu, got, mg->params_mem, np);
    check_params(got, mc->params_mem, np);

    /* the evaluation's sum and the embeddings of the trained models */
    make_batch(&bt, 100);
    double ec = 0.0, eg = 0.0;
    CT_ASSERT_MSG(ctrain_temporal_eval(mc, bt.seq, bt.pos, B, &ec, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_temporal_eval(mg, bt.seq, bt.pos, B, &eg, &eb) == 0, "%s", eb.msg);
    printf("  evaluation sum cpu %.7f cuda %.7f\n", ec, eg);
    CT_ASSERT(ec > 0.0);
    CT_ASSERT_CLOSE(eg, ec, 1e-6, 1e-4);
    int32_t zero[B * N] = {0};
    float ehc[B * C], ehg[B * C];
    CT_ASSERT_MSG(ctrain_temporal_embed(mc, bt.seq, zero, B, ehc, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_temporal_embed(mg, bt.seq, zero, B, ehg, &eb) == 0, "%s", eb.msg);
    gk_check("embeddings", ehg, ehc, B * C, 5e-4, 5e-4);

    ctrain_model_destroy(mc);
    ctrain_model_destroy(mg);
    ct_ops_close(&gpu);
    ct_ops_close(&cpu);
    free(got);
    free(curves);
}

/* --use_amp: the same training with the CUDA table's bf16 matrix products against the CPU's
 * float32 (the attention's row kernels, LayerNorm and the rest stay float): bf16 factors carry
 * 8 bits, so a product of 16..24 terms is off by about 1e-3 relative, and the loss of 10 steps
 * stays within 2e-2 of float32's (measured: printed); and it must differ (bf16 products ran).
 * With a GPU visible, --device auto trains the family on it (cpu_only is false). */
static void test_amp(void)
{
    CT_ASSERT_MSG(!ctrain_family(CTRAIN_MODEL_TEMPORAL)->cpu_only,
                  "--device auto would keep the temporal encoder on the CPU");
    float *curves = gk_host_rand((int64_t)CURVES * N * P, -2.0f, 2.0f, 91);
    ctrain_temporal_spec_t spec = {
        .patch_len = P, .ff_dim = F, .weight_decay = 0.01, .patches = curves, .curves = CURVES};
    ctrain_model_cfg_t cfg = {.kind = CTRAIN_MODEL_TEMPORAL,
                              .layout = CTRAIN_LAYOUT_PRE_LN,
                              .maxlen = N,
                              .hidden = C,
                              .num_heads = NH,
                              .num_blocks = NB,
                              .dropout = 0.1f,
                              .ext = &spec};
    ct_errbuf_t eb;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, true));
    ctrain_model_t *mc = NULL, *mg = NULL;
    CT_ASSERT_MSG(ctrain_model_create(&mc, &cfg, &cpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_model_create(&mg, &cfg, &gpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_OK(ctrain_model_init_params(mc, 5));
    CT_ASSERT_OK(ctrain_model_init_params(mg, 5));
    batch_t bt;
    double worst = 0.0, first = 0.0;
    for (int step = 1; step <= STEPS; step++) {
        make_batch(&bt, step);
        ctrain_model_batch_t mb = {.B = B, .seq = bt.seq, .pos = bt.pos, .row0 = 4 * step};
        float lc = 0, lg = 0, sc = 0, sg = 0;
        ctrain_model_zero_grad(mc);
        ctrain_model_zero_grad(mg);
        CT_ASSERT_OK(ctrain_model_forward_backward(mc, &mb, bt.count, 13, step, &lc));
        CT_ASSERT_OK(ctrain_model_forward_backward(mg, &mb, bt.count, 13, step, &lg));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mc, &sc));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mg, &sg));
        CT_ASSERT(isfinite(lg) && isfinite(sg));
        const double d = fabs((double)lg - lc) / fabs((double)lc);
        first = step == 1 ? d : first;
        worst = d > worst ? d : worst;
        CT_ASSERT_MSG(d < 2e-2, "step %d: bf16 loss %.7f, float32 %.7f", step, (double)lg,
                      (double)lc);
        CT_ASSERT_OK(ctrain_model_adam(mc, 1e-3, ct_clip_coef(sc, 1.0f), step));
        CT_ASSERT_OK(ctrain_model_adam(mg, 1e-3, ct_clip_coef(sg, 1.0f), step));
    }
    printf("  bf16 against float32 over %d steps: loss deviation %.2e at step 1, worst %.2e\n",
           STEPS, first, worst);
    CT_ASSERT_MSG(worst > 1e-6, "the bf16 run equals float32 (%.2e): no bf16 products ran", worst);
    ctrain_model_destroy(mc);
    ctrain_model_destroy(mg);
    ct_ops_close(&gpu);
    ct_ops_close(&cpu);
    free(curves);
}

/* ---- --stage align: the projector's K soft tokens into a frozen tiny Qwen2 ------------------ */

enum { K = 2, NP = 3, TCAP = 6, LMAX = K + NP + TCAP };

/* test_lm_model_gpu.c's tiny Qwen2 (width 16, grouped-query attention, RoPE, SwiGLU). */
static void lm_cfg(ctrain_lm_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->arch = CTRAIN_LM_QWEN2;
    c->head = true;
    c->vocab = 37;
    c->hidden = 16;
    c->layers = 2;
    c->heads = 4;
    c->kv_heads = 2;
    c->head_dim = 6;
    c->inner = 24;
    c->max_pos = 16;
    c->eps = 1e-5;
    c->rope_theta = 10000.0;
    c->act = CTRAIN_LM_ACT_SILU;
    c->tied = false;
    c->scale_attn = true;
    c->pad_id = -1;
    snprintf(c->prefix, sizeof c->prefix, "model.");
}

/* The frozen LM on o with the weights w (LayerNorm gains around 1). */
static ctrain_lm_t *open_lm(ct_ops_t *o, const ctrain_lm_cfg_t *c, float **w)
{
    ct_errbuf_t eb;
    ctrain_lm_t *lm = NULL;
    const ctrain_lm_opts_t opts = {.weights_only = true};
    CT_ASSERT_MSG(ctrain_lm_create_opts(&lm, c, o, B * LMAX, LMAX, &opts, &eb) == 0, "%s", eb.msg);
    const size_t np = lm->num_params;
    if (!*w) {
        *w = gk_host_rand((int64_t)np, -0.4f, 0.4f, 93);
        for (int i = 0; i < lm->n_tensors; i++) {
            const ctrain_lm_role_t r = lm->tensors[i].role;
            if (r == CTRAIN_LM_T_LN1_W || r == CTRAIN_LM_T_LN2_W || r == CTRAIN_LM_T_LNF_W)
                for (int64_t k = 0; k < lm->tensors[i].shape[0]; k++)
                    (*w)[lm->offset[i] + (size_t)k] += 1.0f;
        }
    }
    o->copy(o, lm->params_mem, *w, np * sizeof(float), CT_COPY_H2D);
    CT_ASSERT_OK(o->sync(o));
    return lm;
}

static void test_align(void)
{
    float *curves = gk_host_rand((int64_t)CURVES * N * P, -2.0f, 2.0f, 92);
    int32_t text[CURVES * TCAP], text_len[CURVES], prompt[NP] = {3, 17, 29};
    rng_state = 77;
    for (int i = 0; i < CURVES; i++) {
        text_len[i] = 2 + (int)(rnd() % (TCAP - 1));
        for (int t = 0; t < TCAP; t++)
            text[i * TCAP + t] = t + 1 == text_len[i] ? 36 : (int32_t)(rnd() % 36); /* eos 36 */
    }
    ctrain_lm_cfg_t lc;
    lm_cfg(&lc);
    ctrain_temporal_spec_t spec = {.patch_len = P,
                                   .ff_dim = F,
                                   .weight_decay = 0.01,
                                   .patches = curves,
                                   .curves = CURVES,
                                   .stage = 1,
                                   .soft_tokens = K,
                                   .lm_hidden = lc.hidden,
                                   .text = text,
                                   .text_len = text_len,
                                   .text_cap = TCAP,
                                   .prompt = prompt,
                                   .n_prompt = NP};
    ctrain_temporal_spec_t spec_c = spec, spec_g = spec; /* each table's own LM */
    ctrain_model_cfg_t cfg = {.kind = CTRAIN_MODEL_TEMPORAL,
                              .layout = CTRAIN_LAYOUT_PRE_LN,
                              .maxlen = N,
                              .hidden = C,
                              .num_heads = NH,
                              .num_blocks = NB,
                              .dropout = 0.1f};
    ctrain_model_cfg_t cfg_c = cfg, cfg_g = cfg;
    cfg_c.ext = &spec_c, cfg_g.ext = &spec_g;
    ct_errbuf_t eb;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    CT_ASSERT_MSG(ctrain_family(CTRAIN_MODEL_TEMPORAL)->check_backend(&cfg_g, &gpu, &eb) == 0, "%s",
                  eb.msg);
    float *lw = NULL;
    spec_c.lm = open_lm(&cpu, &lc, &lw);
    spec_g.lm = open_lm(&gpu, &lc, &lw);
    ctrain_model_t *mc = NULL, *mg = NULL;
    CT_ASSERT_MSG(ctrain_model_create(&mc, &cfg_c, &cpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_model_create(&mg, &cfg_g, &gpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_OK(ctrain_model_init_params(mc, 6));
    CT_ASSERT_OK(ctrain_model_init_params(mg, 6));
    const size_t np = mc->num_params;
    float *got = KC_ALLOC(float, np + 1);
    to_host(&gpu, got, mg->params_mem, np);
    GK_ASSERT_BITEQ("initial parameters", got, mc->params_mem, (int64_t)np);

    batch_t bt;
    double worst_loss = 0.0;
    for (int step = 1; step <= STEPS; step++) {
        make_batch(&bt, step);
        memset(bt.pos, 0, sizeof bt.pos); /* nothing masked in stage 2 */
        ctrain_model_batch_t mb = {.B = B, .seq = bt.seq, .pos = bt.pos, .row0 = 4 * step};
        float lcpu = 0, lgpu = 0, sc = 0, sg = 0;
        ctrain_model_zero_grad(mc);
        ctrain_model_zero_grad(mg);
        CT_ASSERT_OK(ctrain_model_forward_backward(mc, &mb, (float)B, 17, step, &lcpu));
        CT_ASSERT_OK(ctrain_model_forward_backward(mg, &mb, (float)B, 17, step, &lgpu));
        CT_ASSERT(isfinite(lcpu) && isfinite(lgpu) && lcpu > 0.0f);
        if (step == 1) {
            CT_ASSERT_CLOSE(lgpu, lcpu, 1e-6, 1e-5);
            to_host(&gpu, got, mg->grads_mem, np);
            for (int i = 0; i < mc->n_params; i++) {
                const ctrain_param_t *p = &mc->params[i];
                gk_check(p->name, got + p->offset, mc->grads_mem + p->offset, (int64_t)p->numel,
                         2e-5, 2e-4);
            }
        }
        CT_ASSERT_CLOSE(lgpu, lcpu, 1e-5, 1e-4);
        const double d = fabs((double)lgpu - lcpu) / fabs((double)lcpu);
        worst_loss = d > worst_loss ? d : worst_loss;
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mc, &sc));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mg, &sg));
        CT_ASSERT_CLOSE(sg, sc, 1e-6, 1e-3);
        CT_ASSERT_OK(ctrain_model_adam(mc, 1e-3, ct_clip_coef(sc, 1.0f), step));
        CT_ASSERT_OK(ctrain_model_adam(mg, 1e-3, ct_clip_coef(sg, 1.0f), step));
        if (step == 1 || step == STEPS)
            printf("  step %2d loss cpu %.7f cuda %.7f\n", step, (double)lcpu, (double)lgpu);
    }
    printf("  %d-step losses: worst relative difference %.2e\n", STEPS, worst_loss);
    to_host(&gpu, got, mg->params_mem, np);
    check_params(got, mc->params_mem, np);

    /* the evaluation: each curve's own description, then the next curve's */
    int32_t curve[B], own[B], other[B];
    for (int r = 0; r < B; r++)
        curve[r] = own[r] = (int32_t)(r * 5 % CURVES), other[r] = (int32_t)((r * 5 + 1) % CURVES);
    for (int pass = 0; pass < 2; pass++) {
        double ec = 0.0, eg = 0.0;
        int64_t tc = 0, tg = 0;
        const int32_t *txt = pass == 0 ? own : other;
        CT_ASSERT_MSG(ctrain_temporal_align_eval(mc, curve, txt, B, &ec, &tc, &eb) == 0, "%s",
                      eb.msg);
        CT_ASSERT_MSG(ctrain_temporal_align_eval(mg, curve, txt, B, &eg, &tg, &eb) == 0, "%s",
                      eb.msg);
        printf("  align evaluation (%s descriptions): cpu %.7f cuda %.7f over %lld tokens\n",
               pass == 0 ? "own" : "other", ec, eg, (long long)tc);
        CT_ASSERT_EQ(tc, tg);
        CT_ASSERT(ec > 0.0);
        CT_ASSERT_CLOSE(eg, ec, 1e-6, 1e-4);
    }

    ctrain_model_destroy(mc);
    ctrain_model_destroy(mg);
    ctrain_lm_destroy(spec_c.lm);
    ctrain_lm_destroy(spec_g.lm);
    ct_ops_close(&gpu);
    ct_ops_close(&cpu);
    free(got);
    free(lw);
    free(curves);
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_reconstruct);
    CT_RUN(test_align);
    CT_RUN(test_amp);
    return 0;
}
