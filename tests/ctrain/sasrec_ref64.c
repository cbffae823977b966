/*
 * sasrec_ref64.c - the float64 reference SASRec of sasrec_ref64.h, straight from the spec's
 * block equations.
 */
#include "sasrec_ref64.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"

/* The parameter called name (printf-style), as a pointer into W. */
__attribute__((format(printf, 3, 4))) static const double *P(const ct_model_t *m, const double *W,
                                                             const char *fmt, ...)
{
    char name[CT_PARAM_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const ct_param_t *p = ct_model_find(m, name);
    if (!p) {
        fprintf(stderr, "sasrec_ref64: no parameter %s\n", name);
        abort();
    }
    return W + p->offset;
}

double sasrec_ref_forward(const ct_model_t *m, const double *W, const int32_t *seq,
                          const int32_t *pos, const int32_t *neg, int B, double count,
                          uint64_t seed, int64_t step, int64_t row0, bool dropout,
                          double *pos_logits, double *neg_logits, double *feats)
{
    const ct_model_cfg_t *c = &m->cfg;
    const int L = c->maxlen, C = c->hidden, NH = c->num_heads, N = B * L;
    const size_t NC = (size_t)N * C;
    const double eps = CT_SASREC_LN_EPS;
    const float p = dropout ? c->dropout : 0.0f;
    const bool timeline = ct_layout_timeline(c->layout);
    const ct_layout_t lay = c->layout;
    double *x = calloc(NC, sizeof *x), *ln1 = calloc(NC, sizeof *x), *ln2 = calloc(NC, sizeof *x);
    double *qkv = calloc(3 * NC, sizeof *x), *ao = calloc(NC, sizeof *x);
    double *t = calloc(NC, sizeof *x), *s1 = calloc(NC, sizeof *x), *h = calloc(NC, sizeof *x);
    double *pl = calloc((size_t)N, sizeof *x), *nl = calloc((size_t)N, sizeof *x);
    if (!x || !ln1 || !ln2 || !qkv || !ao || !t || !s1 || !h || !pl || !nl)
        abort();
#define DROP(site, per_row) ct_model_dropout_site(p, seed, step, (site), row0, (per_row))

    ref_embed(x, P(m, W, "item_emb.weight"), P(m, W, "pos_emb.weight"), seq, B, L, C,
              (double)sqrtf((float)C), ct_layout_pos_mode(lay));
    ref_dropout(x, (int64_t)NC, DROP(0, (int64_t)L * C));
    if (timeline)
        ref_timeline_mask(x, seq, N, C);
    for (int l = 0; l < c->num_blocks; l++) {
        const double *ln1w = P(m, W, "attention_layernorms.%d.weight", l);
        const double *ln1b = P(m, W, "attention_layernorms.%d.bias", l);
        const double *ln2w = P(m, W, "forward_layernorms.%d.weight", l);
        const double *ln2b = P(m, W, "forward_layernorms.%d.bias", l);
        /* attention: which stream feeds the queries, the keys/values and the residual */
        const double *xq = x, *xkv = x, *res = x;
        if (lay != CT_LAYOUT_POST_LN) {
            ref_layernorm(ln1, x, ln1w, ln1b, N, C, eps);
            xq = ln1;
            xkv = lay == CT_LAYOUT_PRE_LN ? ln1 : x;
            res = lay == CT_LAYOUT_PRE_LN ? x : ln1;
        }
        ref_qkv(qkv, xq, xkv, P(m, W, "attention_layers.%d.in_proj_weight", l),
                P(m, W, "attention_layers.%d.in_proj_bias", l), N, C);
        ref_attention(ao, qkv, B, L, C, NH, DROP(1 + 3 * l, (int64_t)NH * L * L));
        ref_linear(t, ao, P(m, W, "attention_layers.%d.out_proj.weight", l),
                   P(m, W, "attention_layers.%d.out_proj.bias", l), N, C, C);
        for (size_t i = 0; i < NC; i++)
            s1[i] = res[i] + t[i];
        /* FFN input y: post_ln normalises with LNa, the others with LNf */
        const double *y;
        if (lay == CT_LAYOUT_POST_LN) {
            ref_layernorm(ln1, s1, ln1w, ln1b, N, C, eps);
            y = ln1;
        } else {
            ref_layernorm(ln2, s1, ln2w, ln2b, N, C, eps);
            y = ln2;
        }
        ref_linear(h, y, P(m, W, "forward_layers.%d.conv1.weight", l),
                   P(m, W, "forward_layers.%d.conv1.bias", l), N, C, C);
        ref_dropout(h, (int64_t)NC, DROP(2 + 3 * l, (int64_t)L * C));
        ref_relu(h, (int64_t)NC);
        ref_linear(t, h, P(m, W, "forward_layers.%d.conv2.weight", l),
                   P(m, W, "forward_layers.%d.conv2.bias", l), N, C, C);
        ref_dropout(t, (int64_t)NC, DROP(3 + 3 * l, (int64_t)L * C));
        const double *fres = lay == CT_LAYOUT_PRE_LN ? s1 : y;
        for (size_t i = 0; i < NC; i++)
            t[i] += fres[i];
        if (lay == CT_LAYOUT_POST_LN)
            ref_layernorm(x, t, ln2w, ln2b, N, C, eps);
        else
            memcpy(x, t, NC * sizeof *x);
        if (timeline)
            ref_timeline_mask(x, seq, N, C);
    }
#undef DROP
    ref_layernorm(t, x, P(m, W, "last_layernorm.weight"), P(m, W, "last_layernorm.bias"), N, C,
                  eps);
    double loss = 0.0;
    if (pos && neg) {
        const double *wte = P(m, W, "item_emb.weight");
        ref_score(pl, t, wte, pos, N, C);
        ref_score(nl, t, wte, neg, N, C);
        loss = ref_bce(pl, nl, pos, N, count);
        if (pos_logits)
            memcpy(pos_logits, pl, (size_t)N * sizeof *pl);
        if (neg_logits)
            memcpy(neg_logits, nl, (size_t)N * sizeof *nl);
    }
    if (feats)
        for (int b = 0; b < B; b++)
            memcpy(feats + (size_t)b * C, t + ((size_t)b * L + L - 1) * C, (size_t)C * sizeof *t);
    free(x), free(ln1), free(ln2), free(qkv), free(ao), free(t), free(s1), free(h), free(pl),
        free(nl);
    return loss;
}
