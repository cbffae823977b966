/*
 * test_embed.c - the embedding lookup and its scatter-add backward (kernels/cpu/embed.c) under
 * both positional-id rules and without a positional table. Proves: the forward equals
 * scale * E[item] + P[pid] with HEAD's ids (t + 1 for items, 0 for padding) or the 2020 ids
 * (t everywhere); the backward equals the finite-difference gradient for every table row that
 * autograd would train, and leaves the padding rows (item row 0 always, positional row 0 in the
 * padded rule) exactly untouched - padding_idx semantics; the accumulate contract; poisoned
 * outputs. Repeated items in a batch exercise the scatter's accumulation.
 *
 * Tolerances: each output is one multiply-add in float (error <= 1 ulp of values below 3, so
 * 3e-7), each gradient element a sum of at most B*L = 14 scaled terms of size <= 2.8 (error
 * about 14 * 6e-8 * 2.8 = 2.4e-6 at the worst); atol = 3e-6, rtol = 1e-5. A wrong id rule puts
 * whole rows in the wrong place (errors of order 1).
 */
#include <math.h>
#include <string.h>

#include "kcheck.h"
#include "ref64.h"

enum { B = 2, L = 7, C = 8, V = 6 };

/* Row 0: left-padded; row 1: full. Item 3 appears three times. */
static const int32_t seq[B * L] = {0, 0, 0, 3, 5, 3, 1, 2, 3, 4, 5, 1, 2, 2};

typedef struct emb_case {
    double *wte, *wpe, *out;
    ct_pos_mode_t mode;
    double scale;
    const float *dout;
} emb_case_t;

static double emb_objective(void *p)
{
    emb_case_t *c = p;
    ref_embed(c->out, c->wte, c->wpe, seq, B, L, C, c->scale, c->mode);
    return kc_dot(c->out, c->dout, B * L * C);
}

static void check_mode(ct_pos_mode_t mode, int with_pos)
{
    const int P = mode == CT_POS_PADDED ? L + 1 : L;
    printf("mode %s, positional table %s\n", mode == CT_POS_PADDED ? "padded" : "absolute",
           with_pos ? "yes" : "no");
    const float scale = sqrtf((float)C);
    float wte[V * C], wpe[(L + 1) * C], out[B * L * C], dout[B * L * C];
    float dwte[V * C] = {0}, dwpe[(L + 1) * C] = {0}, dwte1[V * C], dwpe1[(L + 1) * C];
    double wte64[V * C], wpe64[(L + 1) * C], ref[B * L * C], g[V * C], gp[(L + 1) * C];
    kc_fill(wte, V * C, -1.0f, 1.0f, 1);
    kc_fill(wpe, P * C, -1.0f, 1.0f, 2);
    kc_fill(dout, B * L * C, -1.0f, 1.0f, 3);
    kc_poison(out, B * L * C);
    const float *pos = with_pos ? wpe : NULL;
    ct_embed_forward_cpu(out, wte, pos, seq, B, L, C, scale, mode);
    KC_ASSERT_FINITE(out, B * L * C);
    kc_to_double(wte64, wte, V * C);
    kc_to_double(wpe64, wpe, P * C);
    emb_case_t ec = {wte64, with_pos ? wpe64 : NULL, ref, mode, (double)scale, dout};
    emb_objective(&ec);
    kc_check("embed out", out, ref, B * L * C, 3e-6, 1e-5);
    /* The id rules spelled out on two positions: padding (b=0,t=1) and the newest item. */
    for (int c = 0; c < C && with_pos; c++) {
        float want_pad =
            wte[0 * C + c] * scale + (mode == CT_POS_PADDED ? wpe[0 * C + c] : wpe[1 * C + c]);
        CT_ASSERT(out[(0 * L + 1) * C + c] == want_pad);
        float want_last = wte[1 * C + c] * scale + wpe[(mode == CT_POS_PADDED ? L : L - 1) * C + c];
        CT_ASSERT(out[(0 * L + L - 1) * C + c] == want_last);
    }

    ct_embed_backward_cpu(dwte, with_pos ? dwpe : NULL, dout, seq, B, L, C, scale, mode);
    double out2[B * L * C];
    ec.out = out2;
    kc_fd_grad(g, wte64, V * C, 1e-5, emb_objective, &ec);
    /* Row 0 of the item table is padding_idx: it gets nothing although it is used. */
    for (int c = 0; c < C; c++) {
        CT_ASSERT(dwte[c] == 0.0f);
        CT_ASSERT(fabs(g[c]) > 0.0); /* ... and the math says it would */
    }
    kc_check("d item table (rows 1..)", dwte + C, g + C, (V - 1) * C, 3e-6, 1e-5);
    if (with_pos) {
        kc_fd_grad(gp, wpe64, P * C, 1e-5, emb_objective, &ec);
        int first = mode == CT_POS_PADDED ? 1 : 0;
        if (first)
            for (int c = 0; c < C; c++)
                CT_ASSERT(dwpe[c] == 0.0f);
        kc_check("d positional table", dwpe + first * C, gp + first * C, (P - first) * C, 3e-6,
                 1e-5);
    }
    memcpy(dwte1, dwte, sizeof dwte);
    memcpy(dwpe1, dwpe, sizeof dwpe);
    ct_embed_backward_cpu(dwte, with_pos ? dwpe : NULL, dout, seq, B, L, C, scale, mode);
    KC_ASSERT_DOUBLED(dwte, dwte1, V * C);
    KC_ASSERT_DOUBLED(dwpe, dwpe1, (L + 1) * C);
}

static void test_padded(void)
{
    check_mode(CT_POS_PADDED, 1);
}

static void test_absolute(void)
{
    check_mode(CT_POS_ABSOLUTE, 1);
}

static void test_no_positional_table(void)
{
    check_mode(CT_POS_PADDED, 0);
}

int main(void)
{
    CT_RUN(test_padded);
    CT_RUN(test_absolute);
    CT_RUN(test_no_positional_table);
    return 0;
}
