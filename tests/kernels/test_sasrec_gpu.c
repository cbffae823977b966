/*
 * test_sasrec_gpu.c (gpu suite) - ctrain's own model (worker/trainer/models/ctrain_model.c,
 * ctrain_sasrec.c) on the CUDA op table (kernels/cuda/ops.cu) against the same model on the CPU
 * table: one model code path run on two backends, so what is compared is the composition of every
 * op as the trainer uses it - in-place calls, the += contract across residual branches, mHC streams
 * and the tied item table, dropout sites and TiSASRec's interval masks regenerated from the same
 * counters, the padding-query skip, the device-memory handling of the model (arena, flat buffers,
 * scalar results fetched from the device). For SASRec (post_ln with BCE and l2_emb; the 2020 layout
 * with the full CE loss), TiSASRec (BCE), TiSASRec + mHC (sampled CE) and SASRec + mHC, all
 * with dropout on except the last:
 *   - the initial parameters are bit-identical (initialised on the host, copied up);
 *   - the whole-model gradient of the first step (every parameter tensor, the loss slot aside)
 *     and the loss;
 *   - a 20-step training trajectory (zero_grad, forward_backward, l2_emb, the gradient norm,
 *     clipping, Adam - what ctrain_train.c's step does on one rank): every step's loss, the squared
 *     gradient norm, and the parameters after the last step;
 *   - the evaluation features (dropout-free forward of column L-1) after training;
 *   - --use_amp (bf16 matrix products): the loss deviation from float32 over 20 steps, measured
 *     and bounded (measure_amp).
 * Built twice: against the real CUDA library (suite gpu, exit 77 without a GPU) and against the
 * CPU emulator of tests/kernels/emu (suite kernels), where the model sources are compiled again
 * against the emulated kernels.
 *
 * Tolerances: both sides are float; they differ in the order of additions inside ~100 ops
 * (matrix products, attention sums, row reductions, the CE softmax sums), in exp (the CPU's
 * polynomial against expf, 2 ulp) and, on a GPU, in fused multiply-adds and the atomics of the
 * item and interval tables. Each op's difference is a few float roundings of its partial sums
 * (1e-7..1e-6 relative, the op tests), amplified by the LayerNorms' rstd on the way down:
 * first-step gradients of order 0.01-1 differ by a few 1e-6, so atol 2e-5, rtol 2e-4, and the
 * loss by a few 1e-7 relative (rtol 1e-5). Over 20 Adam steps at lr 1e-3 the differences stay
 * of the same order as the parameters move by ~lr per step whatever the gradient's last bits
 * (Adam normalises them), so losses within 1e-4 relative and parameters within 5e-5 of each
 * other (but see check_params for the parameters whose gradient is exactly zero); the features
 * after training, atol 5e-4, rtol 5e-4 (LayerNorm outputs of order
 * 1). A misplaced op (a dropout site keyed wrongly, a gradient overwritten instead of added,
 * a missing term, a host pointer where a device one belongs) moves these by 1e-3 to 1e-1.
 */
#include <math.h>

#include "ctrain_model.h"
#include "gcheck.h"

enum { B = 4, L = 12, C = 16, NH = 2, ITEMS = 39, NB = 2, M = 5, STEPS = 20 };

typedef struct batch {
    int32_t seq[B * L], pos[B * L], neg[B * L], row_neg[B * M];
    int64_t tseq[B * L];
    float count;
} batch_t;

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Left-padded sequences of random lengths, next-item targets, one negative per position,
 * M per sequence (some 0: padding negatives get no gradient), increasing times. */
static void make_batch(batch_t *b, int step)
{
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(step + 1) * 0xBF58476D1CE4E5B9ull;
    int targets = 0;
    for (int r = 0; r < B; r++) {
        int len = 2 + (int)(rnd() % (L - 1)); /* items in the window, plus the target after it */
        int64_t t = 1 + rnd() % 5;
        for (int i = 0; i < L; i++) {
            int real = i >= L - len + 1;
            int x = r * L + i;
            b->seq[x] = real ? 1 + (int32_t)(rnd() % ITEMS) : 0;
            t += rnd() % 4;
            b->tseq[x] = real ? t : 0;
            b->neg[x] = 1 + (int32_t)(rnd() % ITEMS);
        }
        for (int i = 0; i < L; i++) {
            int x = r * L + i;
            b->pos[x] =
                b->seq[x] == 0 ? 0 : (i + 1 < L ? b->seq[x + 1] : 1 + (int32_t)(rnd() % ITEMS));
            targets += b->pos[x] != 0;
        }
        for (int k = 0; k < M; k++)
            b->row_neg[r * M + k] = k == M - 1 ? 0 : 1 + (int32_t)(rnd() % ITEMS);
    }
    b->count = (float)targets;
}

static void to_host(ct_ops_t *o, float *host, const float *dev, size_t n)
{
    o->copy(o, host, dev, n * sizeof(float), CT_COPY_D2H);
    CT_ASSERT_OK(o->sync(o));
}

/* The parameters after STEPS Adam steps. Parameters whose gradient is zero in exact arithmetic
 * (the key bias of attention: softmax ignores a constant per row) get rounding noise of either
 * sign on each side, which Adam normalises into steps of about lr: they may end anywhere within
 * lr * STEPS of each other. Every other parameter moves by the same normalised steps on both
 * sides, so at least 99% must agree within 5e-5, and all within 2 lr STEPS. */
static void check_params(const float *got, const float *ref, size_t P)
{
    size_t off = 0;
    double worst = 0.0;
    for (size_t i = 0; i < P; i++) {
        double d = fabs((double)got[i] - ref[i]);
        worst = d > worst ? d : worst;
        off += d > 5e-5;
        CT_ASSERT_MSG(d <= 2 * 1e-3 * STEPS, "parameter %zu: cuda %.9g cpu %.9g", i, (double)got[i],
                      (double)ref[i]);
    }
    printf("  parameters after %d steps: %zu of %zu differ by more than 5e-5, worst %.2e\n", STEPS,
           off, P, worst);
    CT_ASSERT_MSG(off * 100 <= P, "%zu of %zu parameters differ by more than 5e-5", off, P);
}

static void run_variant(const char *title, ctrain_model_cfg_t cfg, float l2)
{
    printf("%s\n", title);
    ct_errbuf_t eb;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, false));
    ctrain_model_t *mc = NULL, *mg = NULL;
    CT_ASSERT_MSG(ctrain_model_create(&mc, &cfg, &cpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_model_create(&mg, &cfg, &gpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_OK(ctrain_model_init_params(mc, 7));
    CT_ASSERT_OK(ctrain_model_init_params(mg, 7));
    const size_t P = mc->num_params;
    CT_ASSERT(mg->num_params == P);
    float *got = KC_ALLOC(float, P + 1);
    to_host(&gpu, got, mg->params_mem, P);
    GK_ASSERT_BITEQ("initial parameters", got, mc->params_mem, (int64_t)P);

    const ct_l2_mode_t mode = ctrain_model_l2_mode(&cfg);
    batch_t bt;
    double worst_loss = 0.0;
    for (int step = 1; step <= STEPS; step++) {
        make_batch(&bt, step);
        ctrain_model_batch_t mb = {.B = B,
                                   .seq = bt.seq,
                                   .pos = bt.pos,
                                   .neg = bt.neg,
                                   .tseq = cfg.kind == CTRAIN_MODEL_TISASREC ? bt.tseq : NULL,
                                   .row_neg = bt.row_neg,
                                   .row0 = 0};
        float lc = 0, lg = 0, pc = 0, pg = 0, sc = 0, sg = 0;
        ctrain_model_zero_grad(mc);
        ctrain_model_zero_grad(mg);
        CT_ASSERT_OK(ctrain_model_forward_backward(mc, &mb, bt.count, 11, step, &lc));
        CT_ASSERT_OK(ctrain_model_forward_backward(mg, &mb, bt.count, 11, step, &lg));
        CT_ASSERT_OK(ctrain_model_l2(mc, l2, mode, &pc));
        CT_ASSERT_OK(ctrain_model_l2(mg, l2, mode, &pg));
        lc += pc, lg += pg;
        if (step == 1) {
            CT_ASSERT_CLOSE(lg, lc, 1e-6, 1e-5);
            to_host(&gpu, got, mg->grads_mem, P);
            for (int i = 0; i < mc->n_params; i++) {
                const ctrain_param_t *p = &mc->params[i];
                gk_check(p->name, got + p->offset, mc->grads_mem + p->offset, (int64_t)p->numel,
                         2e-5, 2e-4);
            }
        }
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mc, &sc));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mg, &sg));
        CT_ASSERT_CLOSE(sg, sc, 1e-6, 1e-3);
        CT_ASSERT(isfinite(lc) && isfinite(lg));
        CT_ASSERT_CLOSE(lg, lc, 1e-5, 1e-4);
        double d = fabs((double)lg - lc) / fabs((double)lc);
        worst_loss = d > worst_loss ? d : worst_loss;
        /* clipping from each side's own norm, as each trainer would */
        CT_ASSERT_OK(ctrain_model_adam(mc, 1e-3, ct_clip_coef(sc, 1.0f), step));
        CT_ASSERT_OK(ctrain_model_adam(mg, 1e-3, ct_clip_coef(sg, 1.0f), step));
        if (step == 1 || step == STEPS)
            printf("  step %2d loss cpu %.7f cuda %.7f\n", step, (double)lc, (double)lg);
    }
    printf("  20-step losses: worst relative difference %.2e\n", worst_loss);
    to_host(&gpu, got, mg->params_mem, P);
    check_params(got, mc->params_mem, P);

    /* evaluation features of the trained models */
    make_batch(&bt, 100);
    const float *fc = NULL, *fg = NULL;
    int ldc = 0, ldg = 0;
    const int64_t *ts = cfg.kind == CTRAIN_MODEL_TISASREC ? bt.tseq : NULL;
    CT_ASSERT_OK(ctrain_model_forward_features(mc, bt.seq, ts, B, &fc, &ldc));
    CT_ASSERT_OK(ctrain_model_forward_features(mg, bt.seq, ts, B, &fg, &ldg));
    CT_ASSERT_EQ(ldc, ldg);
    for (int r = 0; r < B; r++) {
        float row[C];
        to_host(&gpu, row, fg + (size_t)r * ldg, C);
        gk_check("features", row, fc + (size_t)r * ldc, C, 5e-4, 5e-4);
    }

    ctrain_model_destroy(mc);
    ctrain_model_destroy(mg);
    ct_ops_close(&gpu);
    ct_ops_close(&cpu);
    free(got);
}

/* --use_amp: the same model with bf16 matrix products (ct_ops_cuda_init's amp) against the CPU
 * in float32 over STEPS training steps. The loss deviation is measured and printed: each product
 * of C = 16 bf16 factors carries a relative error of about 2^-9 / sqrt(...) ~ 1e-3, which moves
 * the loss by ~1e-3 relative and the trajectory a little further; it must stay under 2e-2
 * relative at every step (a bf16 mistake - factors truncated wrongly, a product in the wrong
 * precision kept in bf16 - shows as 1e-1 or a diverging loss), and must not be float32's 1e-6
 * (which would mean the products did not run in bf16 at all). */
static void measure_amp(const char *title, ctrain_model_cfg_t cfg)
{
    printf("%s, --use_amp\n", title);
    ct_errbuf_t eb;
    ct_ops_t cpu, gpu;
    ct_ops_cpu_init(&cpu);
    CT_ASSERT_OK(ct_ops_cuda_init(&gpu, 0, true));
    ctrain_model_t *mc = NULL, *mg = NULL;
    CT_ASSERT_MSG(ctrain_model_create(&mc, &cfg, &cpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_MSG(ctrain_model_create(&mg, &cfg, &gpu, B, &eb) == 0, "%s", eb.msg);
    CT_ASSERT_OK(ctrain_model_init_params(mc, 7));
    CT_ASSERT_OK(ctrain_model_init_params(mg, 7));
    batch_t bt;
    double worst = 0.0, first = 0.0;
    for (int step = 1; step <= STEPS; step++) {
        make_batch(&bt, step);
        ctrain_model_batch_t mb = {.B = B,
                                   .seq = bt.seq,
                                   .pos = bt.pos,
                                   .neg = bt.neg,
                                   .tseq = cfg.kind == CTRAIN_MODEL_TISASREC ? bt.tseq : NULL,
                                   .row_neg = bt.row_neg,
                                   .row0 = 0};
        float lc = 0, lg = 0, sc = 0, sg = 0;
        ctrain_model_zero_grad(mc);
        ctrain_model_zero_grad(mg);
        CT_ASSERT_OK(ctrain_model_forward_backward(mc, &mb, bt.count, 11, step, &lc));
        CT_ASSERT_OK(ctrain_model_forward_backward(mg, &mb, bt.count, 11, step, &lg));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mc, &sc));
        CT_ASSERT_OK(ctrain_model_grad_sumsq(mg, &sg));
        CT_ASSERT(isfinite(lg) && isfinite(sg));
        const double d = fabs((double)lg - lc) / fabs((double)lc);
        if (step == 1)
            first = d;
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
}

static ctrain_model_cfg_t base_cfg(ctrain_model_kind_t kind, ctrain_layout_t layout,
                                   ctrain_loss_t loss, int mhc, float dropout)
{
    ctrain_model_cfg_t c = {.kind = kind,
                            .layout = layout,
                            .num_items = ITEMS,
                            .maxlen = L,
                            .hidden = C,
                            .num_heads = NH,
                            .num_blocks = NB,
                            .mhc_streams = mhc,
                            .time_span = kind == CTRAIN_MODEL_TISASREC ? 6 : 0,
                            .dropout = dropout,
                            .no_skip = false,
                            .loss = loss,
                            .num_negatives = loss == CTRAIN_LOSS_SAMPLED_CE ? M : 0};
    ct_errbuf_t eb;
    CT_ASSERT_MSG(ctrain_model_cfg_check(&c, &eb) == 0, "%s", eb.msg);
    return c;
}

static void test_sasrec(void)
{
    run_variant("SASRec post_ln, BCE, l2_emb, dropout 0.2",
                base_cfg(CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_POST_LN, CTRAIN_LOSS_BCE, 0, 0.2f),
                1e-3f);
    run_variant("SASRec original2020 (timeline mask), full CE, dropout 0.2",
                base_cfg(CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_ORIGINAL2020, CTRAIN_LOSS_CE, 0, 0.2f),
                0.0f);
}

static void test_tisasrec(void)
{
    run_variant(
        "TiSASRec, BCE, l2_emb, dropout 0.2",
        base_cfg(CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_ORIGINAL2020, CTRAIN_LOSS_BCE, 0, 0.2f),
        1e-3f);
}

static void test_mhc(void)
{
    run_variant(
        "TiSASRec + mHC (4 streams), sampled CE, dropout 0.1",
        base_cfg(CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_PRE_LN, CTRAIN_LOSS_SAMPLED_CE, 4, 0.1f),
        0.0f);
    run_variant("SASRec + mHC (2 streams), BCE, no dropout",
                base_cfg(CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_PRE_LN, CTRAIN_LOSS_BCE, 2, 0.0f),
                0.0f);
}

static void test_amp(void)
{
    measure_amp("SASRec post_ln, BCE, dropout 0.2",
                base_cfg(CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_POST_LN, CTRAIN_LOSS_BCE, 0, 0.2f));
    measure_amp("TiSASRec + mHC (4 streams), full CE, dropout 0.1",
                base_cfg(CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_PRE_LN, CTRAIN_LOSS_CE, 4, 0.1f));
}

int main(void)
{
    gk_require_gpu();
    CT_RUN(test_sasrec);
    CT_RUN(test_tisasrec);
    CT_RUN(test_mhc);
    CT_RUN(test_amp);
    return 0;
}
