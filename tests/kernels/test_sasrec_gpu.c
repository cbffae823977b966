/*
 * test_sasrec_gpu.c (gpu suite) - a whole tiny SASRec, forward and backward, through the CUDA
 * twins against the same model through the CPU ops: one model code path (sasrec_tiny.c) run on
 * two op tables (sasrec_tiny_ops.h), so what is compared is the composition of every op as the
 * trainer uses them - in-place calls, the += contract across residual branches and the tied
 * item table, dropout sites regenerated in the backward, the padding-query skip. For each block
 * layout (post_ln, pre_ln, original, and the 2020 variant with absolute positions and the
 * timeline mask), with dropout on and off and the l2_emb term on in half the cases:
 *   - the loss, the positive and negative logits and every parameter gradient against the CPU;
 *   - a second GPU run giving the same loss and gradients bit for bit (no reduction depends on
 *     timing when the item-table scatter is the sorted one);
 *   - padding-query skipping (the last block, every block under the timeline mask) giving the
 *     bit-identical loss and gradients on the GPU;
 *   - the atomic item-table scatter within tolerance of the CPU;
 *   - padding rows (item 0; positional row 0 with padded ids) getting exactly zero gradient.
 *
 * Tolerances: both sides are float; they differ in the order of additions inside ~60 ops
 * (matrix products, attention sums, row reductions) and in fused multiply-adds on the GPU.
 * Each op's difference is a few float roundings of its partial sums (1e-7..1e-6 relative, the op
 * tests), and the backward multiplies differences by the LayerNorms' rstd (up to ~3 here) on the
 * way down. Gradients of order 0.01-1 then differ by a few 1e-6; atol = 2e-5, rtol = 2e-4. The
 * loss and logits: atol = 1e-5, rtol = 1e-5. The mistakes this test exists for (an op reading
 * the wrong buffer, a gradient overwritten instead of added, a mask in the wrong place, a lost
 * dropout site) move gradients by 1e-3 to 1e-1.
 */
#include "gcheck.h"
#include "sasrec_tiny.h"
#include "sasrec_tiny_ops.h"

enum { B = 4, L = 24, C = 16, NH = 2, V = 40, NB = 2 };

/* ---- the CUDA op table ----------------------------------------------------------------------- */

typedef struct gpu_state {
    ct_cuda_ctx_t ctx;
    float *att_scratch, *ln_scratch;
    double *reduce_scratch;
    void *scatter_scratch; /* NULL: atomic item-table scatter */
    int64_t *count;
} gpu_state_t;

#define ST ((gpu_state_t *)st)
#define S  (ST->ctx.stream)

static void *g_alloc(void *st, size_t nbytes)
{
    (void)st;
    void *p = NULL;
    GK_CUDA_OK(cudaMalloc(&p, nbytes ? nbytes : 1));
    GK_CUDA_OK(cudaMemset(p, 0, nbytes ? nbytes : 1));
    return p;
}
static void g_release(void *st, void *p)
{
    (void)st;
    GK_CUDA_OK(cudaFree(p));
}
static void g_zero(void *st, void *p, size_t nbytes)
{
    GK_CUDA_OK(cudaMemsetAsync(p, 0, nbytes, (cudaStream_t)S));
}
static void g_to_host(void *st, void *host, const void *p, size_t nbytes)
{
    GK_CUDA_OK(cudaStreamSynchronize((cudaStream_t)S));
    gk_download(host, p, nbytes);
}
static void g_embed_forward(void *st, float *out, const float *wte, const float *wpe,
                            const int32_t *seq, int b, int l, int c, float scale,
                            ct_pos_mode_t mode)
{
    CT_ASSERT_OK(ct_embed_forward_cuda(out, wte, wpe, seq, b, l, c, scale, mode, S));
}
static void g_embed_backward(void *st, float *dwte, float *dwpe, const float *dout,
                             const int32_t *seq, int b, int l, int c, float scale,
                             ct_pos_mode_t mode)
{
    CT_ASSERT_OK(ct_embed_backward_cuda(dwte, dwpe, ST->scatter_scratch, dout, seq, b, l, c, scale,
                                        mode, S));
}
static void g_dropout(void *st, float *out, const float *inp, int64_t n, ct_dropout_t drop)
{
    CT_ASSERT_OK(ct_dropout_cuda(out, inp, n, drop, S));
}
static void g_timeline_mask(void *st, float *out, const float *inp, const int32_t *seq, int n,
                            int c)
{
    CT_ASSERT_OK(ct_timeline_mask_cuda(out, inp, seq, n, c, S));
}
static void g_layernorm_forward(void *st, float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int n, int c, float eps)
{
    CT_ASSERT_OK(ct_layernorm_forward_cuda(out, mean, rstd, inp, w, b, n, c, eps, S));
}
static void g_layernorm_backward(void *st, float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int n, int c)
{
    CT_ASSERT_OK(ct_layernorm_backward_cuda(dinp, dw, db, ST->ln_scratch, dout, inp, w, mean, rstd,
                                            n, c, S));
}
static void g_qkv_forward(void *st, float *qkv, const float *xq, const float *xkv, const float *w,
                          const float *b, int n, int c)
{
    CT_ASSERT_OK(ct_qkv_forward_cuda(qkv, xq, xkv, w, b, n, c, &ST->ctx));
}
static void g_qkv_backward(void *st, float *dxq, float *dxkv, float *dw, float *db,
                           const float *dqkv, const float *xq, const float *xkv, const float *w,
                           int n, int c)
{
    CT_ASSERT_OK(ct_qkv_backward_cuda(dxq, dxkv, dw, db, dqkv, xq, xkv, w, n, c, &ST->ctx));
}
static void g_attention_forward(void *st, float *out, float *att, const float *qkv,
                                const int32_t *qmask, int b, int l, int c, int nh,
                                ct_dropout_t drop)
{
    CT_ASSERT_OK(ct_attention_forward_cuda(out, att, NULL, qkv, qmask, b, l, c, nh, drop, S));
}
static void g_attention_backward(void *st, float *dqkv, const float *dout, const float *att,
                                 const float *qkv, const int32_t *qmask, int b, int l, int c,
                                 int nh, ct_dropout_t drop)
{
    CT_ASSERT_OK(ct_attention_backward_cuda(dqkv, ST->att_scratch, dout, att, qkv, qmask, b, l, c,
                                            nh, drop, S));
}
static void g_linear_forward(void *st, float *out, const float *inp, const float *w, const float *b,
                             int n, int ic, int oc)
{
    CT_ASSERT_OK(ct_linear_forward_cuda(out, inp, w, b, n, ic, oc, &ST->ctx));
}
static void g_linear_backward(void *st, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, int n, int ic, int oc)
{
    CT_ASSERT_OK(ct_linear_backward_cuda(dinp, dw, db, dout, inp, w, n, ic, oc, &ST->ctx));
}
static void g_residual_forward(void *st, float *out, const float *a, const float *b, int64_t n)
{
    CT_ASSERT_OK(ct_residual_forward_cuda(out, a, b, n, S));
}
static void g_residual_backward(void *st, float *da, float *db, const float *dout, int64_t n)
{
    CT_ASSERT_OK(ct_residual_backward_cuda(da, db, dout, n, S));
}
static void g_relu_forward(void *st, float *out, const float *inp, int64_t n)
{
    CT_ASSERT_OK(ct_relu_forward_cuda(out, inp, n, S));
}
static void g_relu_backward(void *st, float *dinp, const float *dout, const float *out, int64_t n)
{
    CT_ASSERT_OK(ct_relu_backward_cuda(dinp, dout, out, n, S));
}
static void g_score_forward(void *st, float *logits, const float *feats, const float *wte,
                            const int32_t *ids, int n, int c)
{
    CT_ASSERT_OK(ct_score_forward_cuda(logits, feats, wte, ids, n, c, S));
}
static void g_score_backward(void *st, float *dfeats, float *dwte, const float *dlogits,
                             const float *feats, const float *wte, const int32_t *ids, int n, int c)
{
    CT_ASSERT_OK(ct_score_backward_cuda(dfeats, dwte, ST->scatter_scratch, dlogits, feats, wte, ids,
                                        n, c, S));
}
static void g_bce_loss(void *st, float *loss, float *dpos, float *dneg, const float *pl,
                       const float *nl, const int32_t *pos, int n, float count)
{
    CT_ASSERT_OK(ct_bce_loss_cuda(loss, dpos, dneg, ST->reduce_scratch, pl, nl, pos, n, count, S));
}
static int64_t g_count_nonzero(void *st, const int32_t *ids, int64_t n)
{
    int64_t k = -1;
    CT_ASSERT_OK(ct_count_nonzero_cuda(ST->count, ids, n, S));
    g_to_host(st, &k, ST->count, sizeof k);
    return k;
}
static void g_l2_penalty(void *st, float *pen, float *dw, const float *w, int64_t n, float lambda,
                         ct_l2_mode_t mode)
{
    CT_ASSERT_OK(ct_l2_penalty_cuda(pen, dw, ST->reduce_scratch, w, n, lambda, mode, S));
}

static void g_destroy(tiny_ops_t *o)
{
    gpu_state_t *s = o->state;
    GK_CUDA_OK(cudaFree(s->att_scratch));
    GK_CUDA_OK(cudaFree(s->ln_scratch));
    GK_CUDA_OK(cudaFree(s->reduce_scratch));
    GK_CUDA_OK(cudaFree(s->scatter_scratch));
    GK_CUDA_OK(cudaFree(s->count));
    ct_cuda_ctx_close(&s->ctx);
    free(s);
    free(o);
}

/* The CUDA table for cfg on a stream of its own; sorted: the deterministic item scatter. */
static tiny_ops_t *gpu_ops_create(const tiny_cfg_t *cfg, cudaStream_t stream, int sorted)
{
    tiny_ops_t *o = KC_ALLOC(tiny_ops_t, 1);
    gpu_state_t *s = KC_ALLOC(gpu_state_t, 1);
    const int n = cfg->B * cfg->L;
    o->state = s;
    CT_ASSERT_OK(ct_cuda_ctx_init(&s->ctx, stream, 0));
    GK_CUDA_OK(cudaMalloc((void **)&s->att_scratch,
                          sizeof(float) * CT_ATTENTION_BWD_CUDA_SCRATCH(cfg->B, cfg->L, cfg->NH)));
    GK_CUDA_OK(cudaMalloc((void **)&s->ln_scratch,
                          sizeof(float) * CT_LAYERNORM_BWD_CUDA_SCRATCH(n, cfg->C)));
    GK_CUDA_OK(cudaMalloc((void **)&s->reduce_scratch, sizeof(double) * CT_REDUCE_CUDA_PARTS));
    GK_CUDA_OK(cudaMalloc((void **)&s->count, sizeof(int64_t)));
    if (sorted) {
        size_t a = 0, b = 0;
        CT_ASSERT_OK(ct_embed_backward_cuda_scratch(&a, cfg->B, cfg->L));
        CT_ASSERT_OK(ct_score_backward_cuda_scratch(&b, n));
        GK_CUDA_OK(cudaMalloc(&s->scatter_scratch, a > b ? a : b));
    }
    o->destroy = g_destroy;
    o->alloc = g_alloc;
    o->release = g_release;
    o->zero = g_zero;
    o->to_host = g_to_host;
    o->embed_forward = g_embed_forward;
    o->embed_backward = g_embed_backward;
    o->dropout = g_dropout;
    o->timeline_mask = g_timeline_mask;
    o->layernorm_forward = g_layernorm_forward;
    o->layernorm_backward = g_layernorm_backward;
    o->qkv_forward = g_qkv_forward;
    o->qkv_backward = g_qkv_backward;
    o->attention_forward = g_attention_forward;
    o->attention_backward = g_attention_backward;
    o->linear_forward = g_linear_forward;
    o->linear_backward = g_linear_backward;
    o->residual_forward = g_residual_forward;
    o->residual_backward = g_residual_backward;
    o->relu_forward = g_relu_forward;
    o->relu_backward = g_relu_backward;
    o->score_forward = g_score_forward;
    o->score_backward = g_score_backward;
    o->bce_loss = g_bce_loss;
    o->count_nonzero = g_count_nonzero;
    o->l2_penalty = g_l2_penalty;
    return o;
}

/* ---- the comparison ----------------------------------------------------------------------------
 */

/* Left-padded sequences of random lengths (one full, one of length 1); pos = the next items,
 * neg = random items where pos != 0 (the reference's sampler's shape). */
static void make_batch(int32_t *seq, int32_t *pos, int32_t *neg)
{
    float *u = gk_host_rand(3 * B * L, 0.0f, 1.0f, 141);
    for (int b = 0; b < B; b++) {
        int len = b == 0 ? L : b == 1 ? 1 : 1 + (int)(u[b] * (float)(L - 1));
        for (int t = 0; t < L; t++) {
            int k = b * L + t, real = t >= L - len;
            seq[k] = real ? 1 + (int32_t)(u[B * L + k] * (V - 1)) : 0;
            neg[k] = real ? 1 + (int32_t)(u[2 * B * L + k] * (V - 1)) : 0;
        }
        for (int t = 0; t < L; t++) {
            int k = b * L + t;
            pos[k] = seq[k] == 0 ? 0 : t + 1 < L ? seq[k + 1] : 1 + (seq[k] * 7) % (V - 1);
        }
    }
    free(u);
}

static float run_gpu(const tiny_cfg_t *cfg, const tiny_params_t *pt, const float *params,
                     float *grads, const int32_t *seq, const int32_t *pos, const int32_t *neg,
                     float *pl, float *nl, int sorted)
{
    cudaStream_t stream = NULL;
    GK_CUDA_OK(cudaStreamCreate(&stream));
    tiny_ops_t *ops = gpu_ops_create(cfg, stream, sorted);
    tiny_model_t *m = tiny_model_create_on(cfg, ops);
    CT_ASSERT(m != NULL);
    const int n = cfg->B * cfg->L;
    float *d_params = gk_dup(float, params, pt->total), *d_grads = gk_alloc(float, pt->total);
    int32_t *d_seq = gk_dup(int32_t, seq, n), *d_pos = gk_dup(int32_t, pos, n);
    int32_t *d_neg = gk_dup(int32_t, neg, n);
    float loss = tiny_forward_backward(m, pt, d_params, d_grads, d_seq, d_pos, d_neg, pl, nl);
    gk_download(grads, d_grads, sizeof(float) * pt->total);
    tiny_model_destroy(m);
    ops->destroy(ops);
    GK_CUDA_OK(cudaStreamDestroy(stream));
    gk_free_all();
    return loss;
}

static void check_model(tiny_layout_t layout, ct_pos_mode_t pos_mode, int timeline, float p,
                        float l2)
{
    static const char *lname[] = {"post_ln", "pre_ln", "original"};
    tiny_cfg_t cfg = {B, L, C, NH, V, NB, layout, pos_mode, timeline, p, 2024, l2, 0};
    printf("model %s, %s ids%s, dropout %.1f, l2_emb %g\n", lname[layout],
           pos_mode == CT_POS_PADDED ? "padded" : "absolute", timeline ? ", timeline mask" : "",
           (double)p, (double)l2);
    tiny_params_t pt;
    tiny_params_layout(&pt, &cfg);
    const size_t n = pt.total;
    float *params = KC_ALLOC(float, n), *gc = KC_ALLOC(float, n), *gg = KC_ALLOC(float, n);
    float *gg2 = KC_ALLOC(float, n);
    float plc[B * L], nlc[B * L], plg[B * L], nlg[B * L];
    int32_t seq[B * L], pos[B * L], neg[B * L];
    make_batch(seq, pos, neg);
    tiny_params_init(params, &pt, &cfg, 1 + (uint64_t)layout);

    tiny_model_t *mc = tiny_model_create(&cfg);
    CT_ASSERT(mc != NULL);
    const float loss_c = tiny_forward_backward(mc, &pt, params, gc, seq, pos, neg, plc, nlc);
    tiny_model_destroy(mc);

    kc_poison(gg, (int64_t)n);
    const float loss_g = run_gpu(&cfg, &pt, params, gg, seq, pos, neg, plg, nlg, 1);
    printf("  loss CPU %.8f, GPU %.8f\n", (double)loss_c, (double)loss_g);
    gk_check("loss", &loss_g, &loss_c, 1, 1e-5, 1e-5);
    gk_check("pos logits", plg, plc, B * L, 1e-5, 1e-5);
    gk_check("neg logits", nlg, nlc, B * L, 1e-5, 1e-5);
    double worst = 0.0;
    const size_t CC = C;
    worst =
        fmax(worst, gk_check("item_emb", gg + pt.wte, gc + pt.wte, (int64_t)(V * CC), 2e-5, 2e-4));
    worst = fmax(worst,
                 gk_check("pos_emb", gg + pt.wpe, gc + pt.wpe, (int64_t)(pt.P * CC), 2e-5, 2e-4));
    for (int l = 0; l < NB; l++) {
        const tiny_block_params_t *b = &pt.blk[l];
        const size_t start = b->ln1_w, end = b->c2_b + CC;
        char name[32];
        snprintf(name, sizeof name, "block %d", l);
        worst =
            fmax(worst, gk_check(name, gg + start, gc + start, (int64_t)(end - start), 2e-5, 2e-4));
    }
    worst = fmax(worst, gk_check("last_layernorm", gg + pt.lnf_w, gc + pt.lnf_w, (int64_t)(2 * CC),
                                 2e-5, 2e-4));
    printf("  worst tensor: %.1f%% of its tolerance\n", worst);
    for (size_t c = 0; c < CC; c++) {
        CT_ASSERT(gg[pt.wte + c] == 0.0f);
        if (pos_mode == CT_POS_PADDED)
            CT_ASSERT(gg[pt.wpe + c] == 0.0f);
    }

    /* Determinism: the same run again, bit for bit. */
    const float loss_g2 = run_gpu(&cfg, &pt, params, gg2, seq, pos, neg, NULL, NULL, 1);
    CT_ASSERT_MSG(memcmp(&loss_g2, &loss_g, sizeof loss_g) == 0, "loss %.9g then %.9g",
                  (double)loss_g, (double)loss_g2);
    GK_ASSERT_BITEQ("gradients, second run", gg2, gg, (int64_t)n);

    /* Padding-query skipping: the same loss and gradients, bit for bit. */
    tiny_cfg_t cs = cfg;
    cs.skip_padding = 1;
    const float loss_s = run_gpu(&cs, &pt, params, gg2, seq, pos, neg, NULL, NULL, 1);
    CT_ASSERT_MSG(memcmp(&loss_s, &loss_g, sizeof loss_g) == 0,
                  "loss %.9g with skipping, %.9g "
                  "without",
                  (double)loss_s, (double)loss_g);
    GK_ASSERT_BITEQ("gradients with skipping", gg2, gg, (int64_t)n);

    /* The atomic item-table scatter: within tolerance of the CPU. */
    run_gpu(&cfg, &pt, params, gg2, seq, pos, neg, NULL, NULL, 0);
    gk_check("all gradients, atomics", gg2, gc, (int64_t)n, 2e-5, 2e-4);

    free(params), free(gc), free(gg), free(gg2);
}

static void test_post_ln(void)
{
    check_model(TINY_POST_LN, CT_POS_PADDED, 0, 0.0f, 0.0f);
    check_model(TINY_POST_LN, CT_POS_PADDED, 0, 0.3f, 0.01f);
}

static void test_pre_ln(void)
{
    check_model(TINY_PRE_LN, CT_POS_PADDED, 0, 0.0f, 0.01f);
    check_model(TINY_PRE_LN, CT_POS_PADDED, 0, 0.3f, 0.0f);
}

static void test_original(void)
{
    check_model(TINY_ORIGINAL, CT_POS_PADDED, 0, 0.0f, 0.0f);
    check_model(TINY_ORIGINAL, CT_POS_PADDED, 0, 0.3f, 0.01f);
}

static void test_original_2020(void)
{
    check_model(TINY_ORIGINAL, CT_POS_ABSOLUTE, 1, 0.0f, 0.01f);
    check_model(TINY_ORIGINAL, CT_POS_ABSOLUTE, 1, 0.3f, 0.0f);
}

int main(void)
{
    gk_require_gpu();
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_post_ln);
    CT_RUN(test_pre_ln);
    CT_RUN(test_original);
    CT_RUN(test_original_2020);
    return 0;
}
