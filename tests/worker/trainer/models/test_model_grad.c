/*
 * test_model_grad.c - the whole-model gradient check of ctrain's REAL model code
 * (worker/trainer/models/sasrec/ctrain_sasrec.c through the CPU dispatch table) on tiny models
 * (B=2, L=5, d=8, h=2, 2 blocks, 20 items; TiSASRec with time_span 6, mHC with 4 streams):
 *   - SASRec in each block layout - post_ln (HEAD's default), pre_ln (--norm_first), original
 *     (the published checkpoints' layout, 2024 ids), original2020 (absolute ids, timeline mask);
 *   - TiSASRec (TiSASRec.pytorch's layout, and pre_ln);
 *   - SASRec + mHC and TiSASRec + mHC (pre_ln wrapped in 4 residual streams);
 *   - the three losses (BCE; softmax cross-entropy over all items; sampled softmax with 5
 *     negatives per sequence);
 * each with dropout off and on (p = 0.3 at every site, TiSASRec's position and interval tensors
 * included, the masks of a step other than 0 and rows at an offset of the global batch, so the
 * keying is exercised), and with the model's l2_emb term (ctrain_model_l2 in the model's form) in
 * some cases.
 *
 * For every parameter tensor, found by its state_dict name: the float analytic gradient
 * against central finite differences (every element, or 128 spread over tensors larger than
 * that) of the independent float64 forward of sasrec_ref64.c
 * (which builds TiSASRec's (B,L,L,C) interval tensors explicitly and gives padding queries the
 * reference's uniform weights). SASRec's padding rows (item row 0; positional row 0 with padded
 * ids) are asserted to get exactly zero gradient (padding_idx) and are not compared. Also: loss
 * and logits against float64; padding-query skipping gives bit-identical loss and gradients
 * (no_skip); splitting the batch into micro-batches (row0 > 0) gives the same gradients up to
 * summation order (what data parallelism and --grad_accum rely on); the evaluation features
 * (last column, the last block computing only that column) against float64 and bit-identical
 * to no skipping; mHC at its initialisation computes exactly the pre_ln model it wraps; the
 * host-copy path of non-host backends; and the initialisation's distributions.
 *
 * Tolerances (|got - ref| <= atol + rtol |ref|, the worst element printed as a percentage):
 * the finite differences are accurate to ~1e-9 (h = 1e-5 on a loss of ~1.5), so what is
 * measured is the float error of the analytic chain: ~60 ops rounding at 6e-8 relative (a few
 * hundred with mHC's Sinkhorn iterations, which are contractions and do not amplify), the
 * LayerNorms multiplying errors by rstd (up to ~3 here) on the way back - a few 1e-7 on
 * gradients of order 0.01-0.5. atol 2e-6 with rtol 2e-5 keeps a margin of several times over
 * that, while the mistakes this test exists for (a residual into the wrong branch, an
 * overwrite instead of +=, a mask or a LayerNorm in the wrong place, a dropout site keyed
 * wrongly, a stream mixed with the wrong coefficient) move gradients by 1e-3 to 1e-1. The
 * loss, logits and features use the same tolerance (forward errors are below 5e-7). The
 * micro-batch split changes only the order of float sums of two rows: 1e-6 absolute.
 */
#include <errno.h>
#include <string.h>

#include "ctrain_model.h"
#include "kcheck.h"
#include "ref64.h"
#include "sasrec_ref64.h"

enum { B = 2, L = 5, C = 8, NH = 2, NI = 20, NB = 2, T = 6, M = 5, NS = 4 };

/* Row 0: a user with 4 interactions, left-padded; row 1: a full window. seq = S[0..m-2],
 * pos = S[1..m-1] right-aligned as the sampler builds them; negatives avoid S. Times: padding
 * 0, row 1 with intervals past T (clipped) and a repeat (interval 0). */
static const int32_t seq[B * L] = {0, 0, 3, 7, 1, 4, 9, 15, 2, 20};
static const int32_t pos[B * L] = {0, 0, 7, 1, 12, 9, 15, 2, 20, 8};
static const int32_t neg[B * L] = {0, 0, 5, 9, 2, 5, 11, 3, 17, 6};
static const int64_t tseq[B * L] = {0, 0, 2, 3, 9, 1, 4, 4, 12, 30};
static const int32_t row_neg[B * M] = {5, 9, 2, 16, 5, 5, 11, 3, 17, 6};
#define COUNT  7.0f /* targets (pos != 0) */
#define FD_MAX 128  /* finite differences per tensor (see check_model) */
#define SEED   2024u
#define STEP   3
#define ROW0   5

typedef struct variant {
    const char *name;
    ctrain_model_kind_t kind;
    ctrain_layout_t layout;
    int streams;
    ctrain_loss_t loss;
} variant_t;

static ct_ops_t ops;

static ctrain_model_cfg_t cfg_of(const variant_t *v, float p, bool no_skip)
{
    ctrain_model_cfg_t cfg = {.kind = v->kind,
                              .layout = v->layout,
                              .num_items = NI,
                              .maxlen = L,
                              .hidden = C,
                              .num_heads = NH,
                              .num_blocks = NB,
                              .mhc_streams = v->streams,
                              .time_span = v->kind == CTRAIN_MODEL_TISASREC ? T : 0,
                              .dropout = p,
                              .no_skip = no_skip,
                              .loss = v->loss,
                              .num_negatives = M};
    return cfg;
}

static ctrain_model_t *make(const variant_t *v, float p, bool no_skip, int max_batch)
{
    ctrain_model_cfg_t cfg = cfg_of(v, p, no_skip);
    ctrain_model_t *m = NULL;
    ct_errbuf_t eb;
    int rc = ctrain_model_create(&m, &cfg, &ops, max_batch, &eb);
    CT_ASSERT_MSG(rc == 0, "ctrain_model_create: %s", eb.msg);
    return m;
}

/* Random parameters well inside the nonlinearities: tables and matrices U(-0.5, 0.5),
 * LayerNorm weights 1 + U(-0.2, 0.2), biases and mHC gates U(-0.1, 0.1), padding rows zero. */
static void random_params(ctrain_model_t *m, uint64_t stream)
{
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *p = &m->params[i];
        float *w = m->params_mem + p->offset;
        bool ln_w = p->init == CTRAIN_INIT_ONES;
        if (p->ndim >= 2)
            kc_fill(w, (int64_t)p->numel, -0.5f, 0.5f, stream * 100 + (uint64_t)i);
        else if (ln_w)
            kc_fill(w, (int64_t)p->numel, 0.8f, 1.2f, stream * 100 + (uint64_t)i);
        else
            kc_fill(w, (int64_t)p->numel, -0.1f, 0.1f, stream * 100 + (uint64_t)i);
        if (p->zero_row0)
            memset(w, 0, (size_t)p->shape[1] * sizeof *w);
    }
}

static ref_batch_t ref_batch(int b0, int nb, double count, bool dropout, int64_t row0)
{
    ref_batch_t r = {.B = nb,
                     .seq = seq + b0 * L,
                     .pos = pos + b0 * L,
                     .neg = neg + b0 * L,
                     .tseq = tseq + b0 * L,
                     .row_neg = row_neg + b0 * M,
                     .count = count,
                     .seed = SEED,
                     .step = STEP,
                     .row0 = row0,
                     .dropout = dropout};
    return r;
}

typedef struct ref_ctx {
    const ctrain_model_t *m;
    double *W;
    float p, l2;
} ref_ctx_t;

static double ref_objective(void *vp)
{
    ref_ctx_t *r = vp;
    ref_batch_t rb = ref_batch(0, B, COUNT, r->p > 0, ROW0);
    double loss = sasrec_ref_forward(r->m, r->W, &rb, NULL, NULL, NULL);
    if (r->l2 > 0)
        for (int i = 0; i < r->m->n_params; i++) {
            const ctrain_param_t *e = &r->m->params[i];
            if (e->l2)
                loss += ref_l2(r->W + e->offset, (int64_t)e->numel, r->l2,
                               ctrain_model_l2_mode(&r->m->cfg));
        }
    return loss;
}

/* Forward + backward + l2 of the float model; returns the total loss. */
static float run(ctrain_model_t *m, float l2, int b0, int nb, int64_t row0)
{
    ctrain_model_batch_t mb = {.B = nb,
                               .seq = seq + b0 * L,
                               .pos = pos + b0 * L,
                               .neg = neg + b0 * L,
                               .tseq = tseq + b0 * L,
                               .row_neg = row_neg + b0 * M,
                               .row0 = row0};
    float loss = 0, pen = 0;
    CT_ASSERT_OK(ctrain_model_forward_backward(m, &mb, COUNT, SEED, STEP, &loss));
    CT_ASSERT_OK(ctrain_model_l2(m, l2, ctrain_model_l2_mode(&m->cfg), &pen));
    return loss + pen;
}

static void check_model(const variant_t *v, float p, float l2)
{
    printf("model %s, dropout %.1f, l2_emb %g\n", v->name, (double)p, (double)l2);
    ctrain_model_t *m = make(v, p, false, B);
    size_t P = m->num_params;
    random_params(m, 1 + (uint64_t)v->layout + 10 * (uint64_t)v->kind);
    double *W = KC_ALLOC(double, P);
    kc_to_double(W, m->params_mem, (int64_t)P);

    kc_poison(m->grads_mem, (int64_t)P);
    ctrain_model_zero_grad(m);
    float loss = run(m, l2, 0, B, ROW0);
    KC_ASSERT_FINITE(m->grads_mem, (int64_t)P);
    ref_ctx_t rc = {m, W, p, l2};
    double rloss = ref_objective(&rc);
    printf("  loss float %.8f, float64 %.8f (%zu parameters)\n", (double)loss, rloss, P);
    kc_check("loss", &loss, &rloss, 1, 2e-6, 1e-5);
    if (v->loss == CTRAIN_LOSS_BCE) {
        float pl[B * L], nl[B * L];
        double rpl[B * L], rnl[B * L];
        CT_ASSERT_OK(m->vt->logits(m, pl, nl, B * L));
        ref_batch_t rb = ref_batch(0, B, COUNT, p > 0, ROW0);
        sasrec_ref_forward(m, W, &rb, rpl, rnl, NULL);
        kc_check("pos logits", pl, rpl, B * L, 2e-6, 1e-5);
        kc_check("neg logits", nl, rnl, B * L, 2e-6, 1e-5);
    } else {
        float pl[B * L], nl[B * L];
        CT_ASSERT_ERR(m->vt->logits(m, pl, nl, B * L), -EINVAL);
    }

    double worst = 0.0;
    float *sel = KC_ALLOC(float, P);
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *t = &m->params[i];
        size_t skip = 0;
        if (t->zero_row0) {
            /* padding_idx: used, yet no gradient */
            for (int64_t c = 0; c < t->shape[1]; c++)
                CT_ASSERT_MSG(m->grads_mem[t->offset + (size_t)c] == 0.0f,
                              "%s row 0 got gradient %g", t->name,
                              (double)m->grads_mem[t->offset + (size_t)c]);
            skip = (size_t)t->shape[1];
        }
        /* Every element of tensors up to FD_MAX elements; of larger ones (mHC's phi, the
         * packed in_proj) FD_MAX elements evenly spread, first and last included: each
         * finite difference costs two float64 forward passes, and under the sanitizers the
         * whole set would take minutes while a sample of 128 catches any systematic error (a
         * wrong row, column, block or scale shows in most elements). */
        size_t n = t->numel - skip, stride = n > FD_MAX ? (n + FD_MAX - 1) / FD_MAX : 1, k = 0;
        double *ref = KC_ALLOC(double, n);
        for (size_t e = 0; e < n; e += stride) {
            size_t x = t->offset + skip + (e + stride >= n && stride > 1 ? n - 1 : e);
            double x0 = W[x];
            W[x] = x0 + 1e-5;
            double jp = ref_objective(&rc);
            W[x] = x0 - 1e-5;
            double jm = ref_objective(&rc);
            W[x] = x0;
            ref[k] = (jp - jm) / 2e-5;
            sel[k++] = m->grads_mem[x];
        }
        worst = fmax(worst, kc_check(t->name, sel, ref, (int64_t)k, 2e-6, 2e-5));
        free(ref);
    }
    free(sel);
    printf("  worst tensor: %.1f%% of its tolerance\n", worst);

    /* Padding-query skipping changes nothing, bit for bit. */
    ctrain_model_t *ms = make(v, p, true, B);
    memcpy(ms->params_mem, m->params_mem, P * sizeof(float));
    ctrain_model_zero_grad(ms);
    float loss_ns = run(ms, l2, 0, B, ROW0);
    CT_ASSERT_MSG(loss_ns == loss, "loss %.9g without skipping, %.9g with", (double)loss_ns,
                  (double)loss);
    for (size_t i = 0; i < P; i++)
        CT_ASSERT_MSG(ms->grads_mem[i] == m->grads_mem[i],
                      "gradient %zu: %.9g without skipping, %.9g with", i, (double)ms->grads_mem[i],
                      (double)m->grads_mem[i]);
    printf("  padding-query skipping: loss and all %zu gradients identical\n", P);

    /* Two micro-batches of one row each (row0 = ROW0 and ROW0 + 1): the same gradients. */
    ctrain_model_t *m1 = make(v, p, false, 1);
    memcpy(m1->params_mem, m->params_mem, P * sizeof(float));
    ctrain_model_zero_grad(m1);
    float la = run(m1, 0.0f, 0, 1, ROW0), lb = run(m1, l2, 1, 1, ROW0 + 1);
    double whole = loss;
    float split = la + lb;
    kc_check("loss of 2 micro-batches", &split, &whole, 1, 1e-6, 1e-6);
    double *gd = KC_ALLOC(double, P);
    kc_to_double(gd, m->grads_mem, (int64_t)P);
    kc_check("grads of 2 micro-batches", m1->grads_mem, gd, (int64_t)P, 1e-6, 1e-6);

    /* Evaluation features: column L-1, the last block computing only that column. */
    const float *f = NULL, *fn = NULL;
    int ldf = 0, ldn = 0;
    CT_ASSERT_OK(ctrain_model_forward_features(m, seq, tseq, B, &f, &ldf));
    CT_ASSERT_OK(ctrain_model_forward_features(ms, seq, tseq, B, &fn, &ldn));
    double rf[B * C];
    float got[B * C];
    ref_batch_t rb = ref_batch(0, B, 0, false, 0);
    rb.pos = NULL, rb.neg = NULL;
    sasrec_ref_forward(m, W, &rb, NULL, NULL, rf);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            got[b * C + c] = f[(size_t)b * ldf + c];
            CT_ASSERT(fn[(size_t)b * ldn + c] == got[b * C + c]);
        }
    kc_check("eval features (column L-1)", got, rf, B * C, 2e-6, 1e-5);
    if (v->kind == CTRAIN_MODEL_TISASREC)
        CT_ASSERT_ERR(ctrain_model_forward_features(m, seq, NULL, B, &f, &ldf), -EINVAL);

    ctrain_model_destroy(m1);
    ctrain_model_destroy(ms);
    ctrain_model_destroy(m);
    free(W), free(gd);
}

static const variant_t sas_post = {"SASRec post_ln", CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_POST_LN, 0,
                                   CTRAIN_LOSS_BCE};
static const variant_t sas_pre = {"SASRec pre_ln", CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_PRE_LN, 0,
                                  CTRAIN_LOSS_BCE};
static const variant_t sas_orig = {"SASRec original", CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_ORIGINAL,
                                   0, CTRAIN_LOSS_BCE};
static const variant_t sas_2020 = {"SASRec original2020", CTRAIN_MODEL_SASREC,
                                   CTRAIN_LAYOUT_ORIGINAL2020, 0, CTRAIN_LOSS_BCE};
static const variant_t tis = {"TiSASRec", CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_ORIGINAL2020, 0,
                              CTRAIN_LOSS_BCE};
static const variant_t tis_pre = {"TiSASRec pre_ln", CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_PRE_LN, 0,
                                  CTRAIN_LOSS_BCE};
static const variant_t sas_mhc = {"SASRec+mHC", CTRAIN_MODEL_SASREC, CTRAIN_LAYOUT_PRE_LN, NS,
                                  CTRAIN_LOSS_BCE};
static const variant_t tis_mhc = {"TiSASRec+mHC", CTRAIN_MODEL_TISASREC, CTRAIN_LAYOUT_PRE_LN, NS,
                                  CTRAIN_LOSS_BCE};

static void test_sasrec_layouts(void)
{
    check_model(&sas_post, 0.0f, 0.0f);
    check_model(&sas_post, 0.3f, 0.01f);
    check_model(&sas_pre, 0.0f, 0.01f);
    check_model(&sas_pre, 0.3f, 0.0f);
    check_model(&sas_orig, 0.0f, 0.0f);
    check_model(&sas_orig, 0.3f, 0.01f);
    check_model(&sas_2020, 0.0f, 0.01f);
    check_model(&sas_2020, 0.3f, 0.0f);
}

static void test_tisasrec(void)
{
    check_model(&tis, 0.0f, 0.0f);
    check_model(&tis, 0.3f, 0.01f); /* TiSASRec's l2 form: the norm of each of five tables */
    check_model(&tis_pre, 0.3f, 0.0f);
}

static void test_mhc(void)
{
    check_model(&sas_mhc, 0.0f, 0.0f);
    check_model(&sas_mhc, 0.3f, 0.01f);
    check_model(&tis_mhc, 0.0f, 0.01f);
    check_model(&tis_mhc, 0.3f, 0.0f);
}

static void test_losses(void)
{
    variant_t v = sas_post;
    v.name = "SASRec post_ln, full cross-entropy", v.loss = CTRAIN_LOSS_CE;
    check_model(&v, 0.3f, 0.0f);
    v = sas_pre;
    v.name = "SASRec pre_ln, sampled cross-entropy", v.loss = CTRAIN_LOSS_SAMPLED_CE;
    check_model(&v, 0.0f, 0.0f);
    v = tis_mhc;
    v.name = "TiSASRec+mHC, sampled cross-entropy", v.loss = CTRAIN_LOSS_SAMPLED_CE;
    check_model(&v, 0.3f, 0.0f);
    v = tis;
    v.name = "TiSASRec, full cross-entropy", v.loss = CTRAIN_LOSS_CE;
    check_model(&v, 0.0f, 0.01f);
}

/* At its initialisation (phi 0, gates 0.01, ctrain_model_init_params's biases) an mHC model
 * computes what the plain pre_ln model with the same shared tensors computes: the streams start as
 * equal copies, H^res is row-stochastic, H^pre sums to 1 and H^post is 1. Everything but the
 * sigmoid's and Sinkhorn's last bits is exact, so the agreement is at float rounding: 1e-5. */
static void check_init_is_pre_ln(const variant_t *mv, const variant_t *pv)
{
    ctrain_model_t *a = make(mv, 0.0f, false, B), *b = make(pv, 0.0f, false, B);
    CT_ASSERT_OK(ctrain_model_init_params(a, 11));
    CT_ASSERT_OK(ctrain_model_init_params(b, 12));
    int shared = 0;
    for (int i = 0; i < b->n_params; i++) {
        const ctrain_param_t *t = &b->params[i], *s = ctrain_model_find(a, t->name);
        CT_ASSERT_MSG(s != NULL && s->numel == t->numel, "%s missing from %s", t->name, mv->name);
        memcpy(b->params_mem + t->offset, a->params_mem + s->offset, t->numel * sizeof(float));
        shared++;
    }
    CT_ASSERT_EQ(a->n_params, shared + 6 * NB);
    ctrain_model_zero_grad(a), ctrain_model_zero_grad(b);
    float la = run(a, 0.0f, 0, B, 0), lb = run(b, 0.0f, 0, B, 0);
    double ld = lb;
    printf("  %s at initialisation: loss %.8f, %s %.8f\n", mv->name, (double)la, pv->name, ld);
    kc_check("loss, mHC vs pre_ln", &la, &ld, 1, 1e-5, 1e-5);
    for (int i = 0; i < b->n_params; i++) {
        const ctrain_param_t *t = &b->params[i], *s = ctrain_model_find(a, t->name);
        double *gb = KC_ALLOC(double, t->numel);
        kc_to_double(gb, b->grads_mem + t->offset, (int64_t)t->numel);
        kc_check(t->name, a->grads_mem + s->offset, gb, (int64_t)t->numel, 1e-5, 1e-4);
        free(gb);
    }
    ctrain_model_destroy(a);
    ctrain_model_destroy(b);
}

static void test_mhc_init(void)
{
    check_init_is_pre_ln(&sas_mhc, &sas_pre);
    check_init_is_pre_ln(&tis_mhc, &tis_pre);
}

/* A backend whose memory is not host-visible (here: host memory flagged otherwise, which is
 * enough to route checkpoints through the host copy): views, to_host and from_host. */
static void test_host_mirror(void)
{
    ct_ops_t dev;
    ct_ops_cpu_init(&dev);
    dev.host_memory = false;
    ctrain_model_cfg_t cfg = cfg_of(&tis_mhc, 0.0f, false);
    ctrain_model_t *a = NULL, *d = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ctrain_model_create(&a, &cfg, &ops, B, &eb));
    CT_ASSERT_OK(ctrain_model_create(&d, &cfg, &dev, B, &eb));
    CT_ASSERT(a->host_mirror == NULL && d->host_mirror != NULL);
    CT_ASSERT_OK(ctrain_model_init_params(a, 7));
    CT_ASSERT_OK(ctrain_model_init_params(d, 7));
    CT_ASSERT(memcmp(a->params_mem, d->params_mem, a->num_params * sizeof(float)) == 0);
    a->m_mem[3] = 1.5f, d->m_mem[3] = 1.5f;
    CT_ASSERT_OK(ctrain_model_to_host(d));
    ct_tensor_view_t va[3 * 64], vd[3 * 64];
    size_t na = ctrain_model_views(a, CTRAIN_MODEL_VIEW_PARAMS | CTRAIN_MODEL_VIEW_ADAM, va);
    size_t nd = ctrain_model_views(d, CTRAIN_MODEL_VIEW_PARAMS | CTRAIN_MODEL_VIEW_ADAM, vd);
    CT_ASSERT_EQ(na, nd);
    CT_ASSERT_EQ(na, (size_t)3 * a->n_params);
    for (size_t i = 0; i < na; i++) {
        CT_ASSERT_STR_EQ(va[i].name, vd[i].name);
        CT_ASSERT(memcmp(va[i].data, vd[i].data, (size_t)ct_tensor_nbytes(&va[i])) == 0);
    }
    CT_ASSERT_STR_EQ(va[a->n_params].name, "optimizer.exp_avg.item_emb.weight");
    CT_ASSERT_STR_EQ(va[2 * a->n_params].name, "optimizer.exp_avg_sq.item_emb.weight");
    d->host_mirror[0] = 9.0f;
    CT_ASSERT_OK(ctrain_model_from_host(d));
    CT_ASSERT(d->params_mem[0] == 9.0f);
    ctrain_model_destroy(a);
    ctrain_model_destroy(d);
}

/* TiSASRec.pytorch's state_dict names, in its order, then mHC's. */
static void test_tisasrec_names(void)
{
    ctrain_model_t *m = make(&tis_mhc, 0.0f, false, 1);
    static const char *const want[] = {"item_emb.weight",
                                       "abs_pos_K_emb.weight",
                                       "abs_pos_V_emb.weight",
                                       "time_matrix_K_emb.weight",
                                       "time_matrix_V_emb.weight",
                                       "attention_layernorms.0.weight",
                                       "attention_layernorms.0.bias",
                                       "attention_layernorms.1.weight",
                                       "attention_layernorms.1.bias",
                                       "attention_layers.0.Q_w.weight",
                                       "attention_layers.0.Q_w.bias",
                                       "attention_layers.0.K_w.weight",
                                       "attention_layers.0.K_w.bias",
                                       "attention_layers.0.V_w.weight",
                                       "attention_layers.0.V_w.bias"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CT_ASSERT_STR_EQ(m->params[i].name, want[i]);
    const ctrain_param_t *t = ctrain_model_find(m, "time_matrix_V_emb.weight");
    CT_ASSERT(t && t->shape[0] == T + 1 && t->shape[1] == C && t->l2);
    t = ctrain_model_find(m, "abs_pos_K_emb.weight");
    CT_ASSERT(t && t->shape[0] == L && t->l2);
    t = ctrain_model_find(m, "forward_layers.1.conv2.weight");
    CT_ASSERT(t && t->ndim == 3 && t->shape[2] == 1);
    CT_ASSERT_STR_EQ(m->params[m->n_params - 13].name, "last_layernorm.bias");
    t = ctrain_model_find(m, "attention_hc.0.phi");
    CT_ASSERT(t && t->shape[0] == NS * C && t->shape[1] == CT_MHC_COEFFS(NS));
    CT_ASSERT(ctrain_model_find(m, "forward_hc.1.bias") != NULL);
    CT_ASSERT(ctrain_model_find(m, "pos_emb.weight") == NULL);
    ctrain_model_destroy(m);
}

/* The references' initialisations, statistically, on models big enough to measure. */
static void check_init(ctrain_model_kind_t kind, int streams)
{
    ctrain_model_cfg_t cfg = {.kind = kind,
                              .layout = kind == CTRAIN_MODEL_TISASREC && !streams
                                            ? CTRAIN_LAYOUT_ORIGINAL2020
                                        : streams ? CTRAIN_LAYOUT_PRE_LN
                                                  : CTRAIN_LAYOUT_POST_LN,
                              .num_items = 3000,
                              .maxlen = 50,
                              .hidden = 64,
                              .num_heads = 1,
                              .num_blocks = 1,
                              .mhc_streams = streams,
                              .time_span = kind == CTRAIN_MODEL_TISASREC ? 256 : 0};
    ctrain_model_t *m = NULL, *m2 = NULL;
    ct_errbuf_t eb;
    CT_ASSERT_OK(ctrain_model_create(&m, &cfg, &ops, 1, &eb));
    CT_ASSERT_OK(ctrain_model_create(&m2, &cfg, &ops, 1, &eb));
    CT_ASSERT_OK(ctrain_model_init_params(m, 1));
    CT_ASSERT_OK(ctrain_model_init_params(m2, 1));
    CT_ASSERT(memcmp(m->params_mem, m2->params_mem, m->num_params * sizeof(float)) == 0);
    CT_ASSERT_OK(ctrain_model_init_params(m2, 2));
    CT_ASSERT(memcmp(m->params_mem, m2->params_mem, m->num_params * sizeof(float)) != 0);
    for (int i = 0; i < m->n_params; i++) {
        const ctrain_param_t *p = &m->params[i];
        const float *w = m->params_mem + p->offset;
        size_t first = p->zero_row0 ? (size_t)p->shape[1] : 0;
        for (size_t k = 0; k < first; k++)
            CT_ASSERT(w[k] == 0.0f);
        double s = 0, s2 = 0, mx = 0;
        size_t n = p->numel - first;
        for (size_t k = first; k < p->numel; k++) {
            s += w[k], s2 += (double)w[k] * w[k];
            mx = fmax(mx, fabs(w[k]));
        }
        double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
        double rf = p->ndim == 3 ? (double)p->shape[2] : 1.0;
        double fans = p->ndim >= 2 ? (double)(p->shape[0] + p->shape[1]) * rf : 1.0;
        switch (p->init) {
        case CTRAIN_INIT_XAVIER_NORMAL:
        case CTRAIN_INIT_XAVIER_UNIFORM: {
            double want = sqrt(2.0 / fans); /* both have variance 2 / (fan_in + fan_out) */
            /* n >= 3200 samples: the sample sd is within ~1.3% (1 sigma) of the truth. */
            printf("  %-40s %s sd %.5f (want %.5f)\n", p->name,
                   p->init == CTRAIN_INIT_XAVIER_NORMAL ? "xavier_normal " : "xavier_uniform", sd,
                   want);
            CT_ASSERT_MSG(fabs(sd / want - 1) < 0.07 && fabs(mean) < 4 * want / sqrt((double)n),
                          "%s: sd %g mean %g, want sd %g", p->name, sd, mean, want);
            if (p->init == CTRAIN_INIT_XAVIER_UNIFORM)
                CT_ASSERT(mx <= sqrt(6.0 / fans) * (1 + 1e-6) && mx > 0.9 * sqrt(6.0 / fans));
            break;
        }
        case CTRAIN_INIT_FANIN_UNIFORM: {
            double bound = 1.0 / sqrt((double)p->fan_in);
            CT_ASSERT_MSG(mx <= bound && mx > 0.5 * bound, "%s: max |w| %g, bound %g", p->name, mx,
                          bound);
            break;
        }
        case CTRAIN_INIT_NORMAL:
            CT_ASSERT_MSG(fabs(sd / p->init_value - 1) < 0.07, "%s: sd %g, want %g", p->name, sd,
                          (double)p->init_value);
            break;
        case CTRAIN_INIT_ZEROS:
            CT_ASSERT(mx == 0.0);
            break;
        case CTRAIN_INIT_ONES:
            CT_ASSERT(mean == 1.0 && sd == 0.0);
            break;
        case CTRAIN_INIT_CONSTANT:
            CT_ASSERT(sd == 0.0 && mean == (double)CTRAIN_MHC_ALPHA_INIT);
            break;
        case CTRAIN_INIT_MHC_BIAS: {
            /* H^pre sums to 1 with most weight on stream (index mod n); H^post = 1 */
            const int nn = streams;
            double sum = 0.0;
            for (int k = 0; k < nn; k++) {
                double h = 1.0 / (1.0 + exp(-(double)w[k]));
                sum += h;
                if (k == p->init_index % nn)
                    CT_ASSERT(h > 0.9);
                CT_ASSERT(w[nn + k] == 0.0f);
            }
            CT_ASSERT_CLOSE(sum, 1.0, 1e-6, 0);
            float hres[CT_MHC_MAX_STREAMS * CT_MHC_MAX_STREAMS];
            ct_sinkhorn_forward_cpu(hres, w + 2 * nn, 1, nn, CTRAIN_MHC_ITERS);
            for (int k = 0; k < nn; k++)
                CT_ASSERT(hres[k * nn + k] > 0.998f);
            break;
        }
        }
    }
    ctrain_model_destroy(m);
    ctrain_model_destroy(m2);
}

static void test_init(void)
{
    check_init(CTRAIN_MODEL_SASREC, 0);
    check_init(CTRAIN_MODEL_TISASREC, 0);
    check_init(CTRAIN_MODEL_TISASREC, 4);
}

int main(void)
{
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    ct_ops_cpu_init(&ops);
    CT_RUN(test_sasrec_layouts);
    CT_RUN(test_tisasrec);
    CT_RUN(test_mhc);
    CT_RUN(test_losses);
    CT_RUN(test_mhc_init);
    CT_RUN(test_host_mirror);
    CT_RUN(test_tisasrec_names);
    CT_RUN(test_init);
    return 0;
}
