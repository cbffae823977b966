/*
 * test_sasrec_grad.c - the whole-model gradient check: a tiny SASRec (B=2, L=5, d=8, h=2,
 * 2 blocks, 20 items) assembled from the ct ops (sasrec_tiny.c), for each block layout -
 * post_ln (HEAD's default), pre_ln (--norm_first), original (the published checkpoints' layout,
 * HEAD-2024 ids), and original with absolute positions and the timeline mask (the 2020 variant)
 * - with dropout off, and on (p = 0.3 at every site, masks regenerated from the counter-based
 * generator, so the model is a fixed function the reference can differentiate), and with the
 * l2_emb term on in half the cases.
 *
 * For every parameter: the float analytic gradient against central finite differences of an
 * independent float64 forward (ref64.c). The padding rows (item row 0; positional row 0 with
 * padded ids) are not compared: padding_idx means they get no gradient although they are used,
 * and the test asserts that they got exactly zero. Also: the float loss and logits against the
 * float64 ones, and padding-query skipping (the last block, every block under the timeline
 * mask) giving the bit-identical loss and gradients.
 *
 * Tolerances (|got - ref| <= atol + rtol |ref|, per tensor, the worst element printed as a
 * percentage): the finite differences are accurate to ~1e-9 (h = 1e-5 on a loss of ~1.5,
 * kcheck.h), so what is measured is the float error of the analytic chain. That chain has ~60
 * ops, each rounding at 6e-8 relative, and the LayerNorms multiply errors by rstd (up to ~3
 * here) on the way back: errors of a few 1e-7 on gradients of order 0.01-0.5, and we measure
 * at most 6.4e-7. atol = 2e-6 with rtol = 2e-5 keeps a 3x margin over that; the mistakes this
 * test exists for (a residual into the wrong branch, an overwrite instead of +=, a mask or a
 * LayerNorm term in the wrong place) move gradients by 1e-3 to 1e-1. The loss and logits use
 * the same tolerance (forward errors measure <= 4.4e-7).
 */
#include <string.h>

#include "kcheck.h"
#include "sasrec_tiny.h"

enum { B = 2, L = 5, C = 8, NH = 2, V = 21, NB = 2 };

/* Row 0: a user with 4 interactions, left-padded; row 1: a full window. seq = S[0..m-2] and
 * pos = S[1..m-1] right-aligned as the reference's sampler builds them; negatives avoid S. */
static const int32_t seq[B * L] = {0, 0, 3, 7, 1, 4, 9, 15, 2, 20};
static const int32_t pos[B * L] = {0, 0, 7, 1, 12, 9, 15, 2, 20, 8};
static const int32_t neg[B * L] = {0, 0, 5, 9, 2, 5, 11, 3, 17, 6};

typedef struct ref_ctx {
    const tiny_cfg_t *cfg;
    const tiny_params_t *pt;
    double *params;
} ref_ctx_t;

static double ref_objective(void *p)
{
    ref_ctx_t *r = p;
    return tiny_loss_ref(r->cfg, r->pt, r->params, seq, pos, neg, NULL, NULL);
}

typedef struct named {
    const char *name;
    size_t off, n;
} named_t;

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
    float *params = KC_ALLOC(float, pt.total), *grads = KC_ALLOC(float, pt.total);
    float *grads_skip = KC_ALLOC(float, pt.total);
    double *p64 = KC_ALLOC(double, pt.total), *g64 = KC_ALLOC(double, pt.total);
    float pl[B * L], nl[B * L];
    double rpl[B * L], rnl[B * L];
    tiny_params_init(params, &pt, &cfg, 1 + (uint64_t)layout);
    kc_to_double(p64, params, (int64_t)pt.total);

    tiny_model_t *m = tiny_model_create(&cfg);
    CT_ASSERT(m != NULL);
    kc_poison(grads, (int64_t)pt.total);
    float loss = tiny_forward_backward(m, &pt, params, grads, seq, pos, neg, pl, nl);
    KC_ASSERT_FINITE(grads, (int64_t)pt.total);
    double rloss = tiny_loss_ref(&cfg, &pt, p64, seq, pos, neg, rpl, rnl);
    printf("  loss float %.8f, float64 %.8f\n", (double)loss, rloss);
    kc_check("loss", &loss, &rloss, 1, 2e-6, 1e-5);
    kc_check("pos logits", pl, rpl, B * L, 2e-6, 1e-5);
    kc_check("neg logits", nl, rnl, B * L, 2e-6, 1e-5);

    ref_ctx_t rc = {&cfg, &pt, p64};
    kc_fd_grad(g64, p64, (int64_t)pt.total, 1e-5, ref_objective, &rc);

    /* Padding rows: no gradient (padding_idx), although the finite difference sees them. */
    size_t C_ = C;
    for (size_t c = 0; c < C_; c++) {
        CT_ASSERT(grads[pt.wte + c] == 0.0f);
        if (pos_mode == CT_POS_PADDED)
            CT_ASSERT(grads[pt.wpe + c] == 0.0f);
    }
    size_t pfirst = pos_mode == CT_POS_PADDED ? 1 : 0;
    named_t t[3 + 12 * NB + 2];
    int nt = 0;
    t[nt++] = (named_t){"item_emb (rows 1..)", pt.wte + C_, (size_t)(V - 1) * C_};
    t[nt++] = (named_t){pfirst ? "pos_emb (rows 1..)" : "pos_emb", pt.wpe + pfirst * C_,
                        (size_t)(pt.P - (int)pfirst) * C_};
    static const char *bn[] = {"attn_ln.w",       "attn_ln.b",     "in_proj_weight", "in_proj_bias",
                               "out_proj.weight", "out_proj.bias", "fwd_ln.w",       "fwd_ln.b",
                               "conv1.weight",    "conv1.bias",    "conv2.weight",   "conv2.bias"};
    static char names[NB][12][40];
    for (int l = 0; l < NB; l++) {
        const tiny_block_params_t *b = &pt.blk[l];
        size_t offs[12] = {b->ln1_w, b->ln1_b, b->in_w, b->in_b, b->out_w, b->out_b,
                           b->ln2_w, b->ln2_b, b->c1_w, b->c1_b, b->c2_w,  b->c2_b};
        size_t ns[12] = {C_, C_, 3 * C_ * C_, 3 * C_, C_ * C_, C_,
                         C_, C_, C_ * C_,     C_,     C_ * C_, C_};
        for (int k = 0; k < 12; k++) {
            snprintf(names[l][k], sizeof names[l][k], "%d.%s", l, bn[k]);
            t[nt++] = (named_t){names[l][k], offs[k], ns[k]};
        }
    }
    t[nt++] = (named_t){"last_layernorm.w", pt.lnf_w, C_};
    t[nt++] = (named_t){"last_layernorm.b", pt.lnf_b, C_};
    double worst = 0.0;
    for (int k = 0; k < nt; k++)
        worst = fmax(worst, kc_check(t[k].name, grads + t[k].off, g64 + t[k].off, (int64_t)t[k].n,
                                     2e-6, 2e-5));
    printf("  worst tensor: %.1f%% of its tolerance\n", worst);

    /* Padding-query skipping: the same loss and gradients, bit for bit. */
    tiny_cfg_t cs = cfg;
    cs.skip_padding = 1;
    tiny_model_t *ms = tiny_model_create(&cs);
    CT_ASSERT(ms != NULL);
    float loss_skip = tiny_forward_backward(ms, &pt, params, grads_skip, seq, pos, neg, NULL, NULL);
    CT_ASSERT_MSG(loss_skip == loss, "loss %.9g with skipping, %.9g without", (double)loss_skip,
                  (double)loss);
    for (size_t i = 0; i < pt.total; i++)
        CT_ASSERT_MSG(grads_skip[i] == grads[i], "gradient %zu: %.9g with skipping, %.9g without",
                      i, (double)grads_skip[i], (double)grads[i]);
    printf("  padding-query skipping: loss and all %zu gradients identical\n", pt.total);

    tiny_model_destroy(ms);
    tiny_model_destroy(m);
    free(params), free(grads), free(grads_skip), free(p64), free(g64);
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
    CT_ASSERT_OK(ct_cpu_set_threads(1));
    CT_RUN(test_post_ln);
    CT_RUN(test_pre_ln);
    CT_RUN(test_original);
    CT_RUN(test_original_2020);
    return 0;
}
