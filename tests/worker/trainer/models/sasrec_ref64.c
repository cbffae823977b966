/*
 * sasrec_ref64.c - the float64 reference model of sasrec_ref64.h, straight from the equations
 * of docs/models.md.
 */
#include "sasrec_ref64.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"

/* The parameter called name (printf-style), as a pointer into W. */
__attribute__((format(printf, 3, 4))) static const double *P(const ctrain_model_t *m,
                                                             const double *W, const char *fmt, ...)
{
    char name[CTRAIN_PARAM_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const ctrain_param_t *p = ctrain_model_find(m, name);
    if (!p) {
        fprintf(stderr, "sasrec_ref64: no parameter %s\n", name);
        abort();
    }
    return W + p->offset;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        abort();
    return p;
}

typedef struct ref_ctx {
    const ctrain_model_t *m;
    const double *W;
    const ref_batch_t *b;
    int L, C, NH, N;
    float p;
    double *pkd, *pvd; /* TiSASRec's dropped absolute-position rows, (N,C) */
    double *tmp;       /* (3N,C) scratch of the attention */
} ref_ctx_t;

static ct_dropout_t drop_of(const ref_ctx_t *r, int site, int64_t per_row)
{
    return ctrain_model_dropout_site(r->p, r->b->seed, r->b->step, site, r->b->row0, per_row);
}

/* out = A(xq, xkv) of block l, the kind's attention sub-layer without residual. */
static void attention(const ref_ctx_t *r, int l, double *out, const double *xq, const double *xkv)
{
    const ctrain_model_t *m = r->m;
    const double *W = r->W;
    const int N = r->N, C = r->C, L = r->L, B = r->b->B;
    const size_t NC = (size_t)N * C;
    ct_dropout_t da = drop_of(r, 1 + 3 * l, (int64_t)r->NH * L * L);
    if (m->cfg.kind == CTRAIN_MODEL_TISASREC) {
        double *q = r->tmp, *k = q + NC, *v = k + NC;
        ref_linear(q, xq, P(m, W, "attention_layers.%d.Q_w.weight", l),
                   P(m, W, "attention_layers.%d.Q_w.bias", l), N, C, C);
        ref_linear(k, xkv, P(m, W, "attention_layers.%d.K_w.weight", l),
                   P(m, W, "attention_layers.%d.K_w.bias", l), N, C, C);
        ref_linear(v, xkv, P(m, W, "attention_layers.%d.V_w.weight", l),
                   P(m, W, "attention_layers.%d.V_w.bias", l), N, C, C);
        for (size_t i = 0; i < NC; i++)
            k[i] += r->pkd[i], v[i] += r->pvd[i];
        ref_tisas_attention(out, q, k, v, P(m, W, "time_matrix_K_emb.weight"),
                            P(m, W, "time_matrix_V_emb.weight"), r->b->tseq, r->b->seq, B, L, C,
                            r->NH, m->cfg.time_span, da,
                            drop_of(r, CTRAIN_SITE_TIME_K, (int64_t)L * L * C),
                            drop_of(r, CTRAIN_SITE_TIME_V, (int64_t)L * L * C));
        return;
    }
    double *qkv = r->tmp, *ao = r->tmp + 3 * NC;
    ref_qkv(qkv, xq, xkv, P(m, W, "attention_layers.%d.in_proj_weight", l),
            P(m, W, "attention_layers.%d.in_proj_bias", l), N, C);
    ref_attention(ao, qkv, B, L, C, r->NH, da);
    ref_linear(out, ao, P(m, W, "attention_layers.%d.out_proj.weight", l),
               P(m, W, "attention_layers.%d.out_proj.bias", l), N, C, C);
}

/* out = FFN(y) of block l (no residual). */
static void ffn(const ref_ctx_t *r, int l, double *out, const double *y)
{
    const ctrain_model_t *m = r->m;
    const double *W = r->W;
    const int N = r->N, C = r->C;
    const size_t NC = (size_t)N * C;
    double *h = xcalloc(NC, sizeof *h);
    ref_linear(h, y, P(m, W, "forward_layers.%d.conv1.weight", l),
               P(m, W, "forward_layers.%d.conv1.bias", l), N, C, C);
    ref_dropout(h, (int64_t)NC, drop_of(r, 2 + 3 * l, (int64_t)r->L * C));
    ref_relu(h, (int64_t)NC);
    ref_linear(out, h, P(m, W, "forward_layers.%d.conv2.weight", l),
               P(m, W, "forward_layers.%d.conv2.bias", l), N, C, C);
    ref_dropout(out, (int64_t)NC, drop_of(r, 3 + 3 * l, (int64_t)r->L * C));
    free(h);
}

/* One mHC layer around a sub-layer: X (N,n,C) -> Y. k = 0 wraps the attention (LNa), 1 the FFN
 * (LNf). */
static void mhc_layer(const ref_ctx_t *r, int l, int k, double *Y, const double *X)
{
    const ctrain_model_t *m = r->m;
    const double *W = r->W;
    const int N = r->N, C = r->C, n = m->cfg.mhc_streams;
    const size_t NC = (size_t)N * C;
    const char *which = k ? "forward_hc" : "attention_hc";
    double *hpre = xcalloc((size_t)N * n, sizeof(double));
    double *hpost = xcalloc((size_t)N * n, sizeof(double));
    double *hres = xcalloc((size_t)N * n * n, sizeof(double));
    double *u = xcalloc(NC, sizeof(double)), *xn = xcalloc(NC, sizeof(double));
    double *f = xcalloc(NC, sizeof(double));
    ref_mhc_coeffs(hpre, hpost, hres, X, P(m, W, "%s.%d.phi", which, l),
                   P(m, W, "%s.%d.alpha", which, l), P(m, W, "%s.%d.bias", which, l), N, n, C,
                   CTRAIN_MHC_ITERS, (double)CTRAIN_MHC_RMS_EPS);
    ref_mhc_pre(u, X, hpre, N, n, C);
    const char *ln = k ? "forward_layernorms" : "attention_layernorms";
    ref_layernorm(xn, u, P(m, W, "%s.%d.weight", ln, l), P(m, W, "%s.%d.bias", ln, l), N, C,
                  CT_SASREC_LN_EPS);
    if (k)
        ffn(r, l, f, xn);
    else
        attention(r, l, f, xn, xn);
    ref_mhc_post(Y, X, f, hres, hpost, N, n, C);
    free(hpre), free(hpost), free(hres), free(u), free(xn), free(f);
}

double sasrec_ref_forward(const ctrain_model_t *m, const double *W, const ref_batch_t *b,
                          double *pos_logits, double *neg_logits, double *feats)
{
    const ctrain_model_cfg_t *c = &m->cfg;
    const int B = b->B, L = c->maxlen, C = c->hidden, N = B * L;
    const int n = c->mhc_streams > 0 ? c->mhc_streams : 1;
    const size_t NC = (size_t)N * C, NS = NC * n;
    const double eps = CT_SASREC_LN_EPS;
    const bool timeline = ctrain_model_timeline(c), ti = c->kind == CTRAIN_MODEL_TISASREC;
    const ctrain_layout_t lay = c->layout;
    ref_ctx_t r = {m,
                   W,
                   b,
                   L,
                   C,
                   c->num_heads,
                   N,
                   b->dropout ? c->dropout : 0.0f,
                   NULL,
                   NULL,
                   xcalloc(4 * NC, sizeof(double))};
    double *x = xcalloc(NS, sizeof *x), *y = xcalloc(NS, sizeof *x);
    double *ln1 = xcalloc(NC, sizeof *x), *ln2 = xcalloc(NC, sizeof *x);
    double *t = xcalloc(NC, sizeof *x), *s1 = xcalloc(NC, sizeof *x);

    ref_embed(x, P(m, W, "item_emb.weight"), ti ? NULL : P(m, W, "pos_emb.weight"), b->seq, B, L, C,
              (double)sqrtf((float)C), ctrain_layout_pos_mode(lay));
    ref_dropout(x, (int64_t)NC, drop_of(&r, 0, (int64_t)L * C));
    if (timeline)
        ref_timeline_mask(x, b->seq, N, C);
    if (ti) {
        /* P^K, P^V gathered per (b,t) and each dropped out per element */
        r.pkd = xcalloc(NC, sizeof(double)), r.pvd = xcalloc(NC, sizeof(double));
        const double *pk = P(m, W, "abs_pos_K_emb.weight"), *pv = P(m, W, "abs_pos_V_emb.weight");
        for (int bb = 0; bb < B; bb++)
            for (int tt = 0; tt < L; tt++)
                for (int cc = 0; cc < C; cc++) {
                    size_t e = ((size_t)bb * L + tt) * C + cc;
                    r.pkd[e] =
                        pk[tt * C + cc] *
                        ref_dropout_factor(drop_of(&r, CTRAIN_SITE_ABS_POS_K, (int64_t)L * C), e);
                    r.pvd[e] =
                        pv[tt * C + cc] *
                        ref_dropout_factor(drop_of(&r, CTRAIN_SITE_ABS_POS_V, (int64_t)L * C), e);
                }
    }
    if (c->mhc_streams > 0) {
        /* the embedding in every stream */
        memcpy(y, x, NC * sizeof *x);
        for (int rr = 0; rr < N; rr++)
            for (int s = 0; s < n; s++)
                memcpy(x + ((size_t)rr * n + s) * C, y + (size_t)rr * C, (size_t)C * sizeof *x);
    }
    for (int l = 0; l < c->num_blocks; l++) {
        if (c->mhc_streams > 0) {
            mhc_layer(&r, l, 0, y, x);
            mhc_layer(&r, l, 1, x, y);
            if (timeline)
                ref_timeline_mask(x, b->seq, N, n * C);
            continue;
        }
        const double *ln1w = P(m, W, "attention_layernorms.%d.weight", l);
        const double *ln1b = P(m, W, "attention_layernorms.%d.bias", l);
        const double *ln2w = P(m, W, "forward_layernorms.%d.weight", l);
        const double *ln2b = P(m, W, "forward_layernorms.%d.bias", l);
        /* attention: which stream feeds the queries, the keys/values and the residual */
        const double *xq = x, *xkv = x, *res = x;
        if (lay != CTRAIN_LAYOUT_POST_LN) {
            ref_layernorm(ln1, x, ln1w, ln1b, N, C, eps);
            xq = ln1;
            xkv = lay == CTRAIN_LAYOUT_PRE_LN ? ln1 : x;
            res = lay == CTRAIN_LAYOUT_PRE_LN ? x : ln1;
        }
        attention(&r, l, t, xq, xkv);
        for (size_t i = 0; i < NC; i++)
            s1[i] = res[i] + t[i];
        /* FFN input: post_ln normalises with LNa, the others with LNf */
        const double *yy;
        if (lay == CTRAIN_LAYOUT_POST_LN) {
            ref_layernorm(ln1, s1, ln1w, ln1b, N, C, eps);
            yy = ln1;
        } else {
            ref_layernorm(ln2, s1, ln2w, ln2b, N, C, eps);
            yy = ln2;
        }
        ffn(&r, l, t, yy);
        const double *fres = lay == CTRAIN_LAYOUT_PRE_LN ? s1 : yy;
        for (size_t i = 0; i < NC; i++)
            t[i] += fres[i];
        if (lay == CTRAIN_LAYOUT_POST_LN)
            ref_layernorm(x, t, ln2w, ln2b, N, C, eps);
        else
            memcpy(x, t, NC * sizeof *x);
        if (timeline)
            ref_timeline_mask(x, b->seq, N, C);
    }
    if (c->mhc_streams > 0) {
        /* the streams' average */
        for (int rr = 0; rr < N; rr++)
            for (int cc = 0; cc < C; cc++) {
                double s = 0.0;
                for (int k = 0; k < n; k++)
                    s += x[((size_t)rr * n + k) * C + cc];
                y[(size_t)rr * C + cc] = s / n;
            }
        memcpy(x, y, NC * sizeof *x);
    }
    ref_layernorm(t, x, P(m, W, "last_layernorm.weight"), P(m, W, "last_layernorm.bias"), N, C,
                  eps);
    double loss = 0.0;
    const double *wte = P(m, W, "item_emb.weight");
    if (b->pos) {
        switch (c->loss) {
        case CTRAIN_LOSS_CE:
            loss = ref_ce(t, wte, b->pos, N, C, c->num_items + 1, b->count);
            break;
        case CTRAIN_LOSS_SAMPLED_CE:
            loss = ref_sampled_ce(t, wte, b->pos, b->row_neg, B, L, C, c->num_negatives, b->count);
            break;
        default: {
            double *pl = xcalloc((size_t)N, sizeof *pl), *nl = xcalloc((size_t)N, sizeof *nl);
            ref_score(pl, t, wte, b->pos, N, C);
            ref_score(nl, t, wte, b->neg, N, C);
            loss = ref_bce(pl, nl, b->pos, N, b->count);
            if (pos_logits)
                memcpy(pos_logits, pl, (size_t)N * sizeof *pl);
            if (neg_logits)
                memcpy(neg_logits, nl, (size_t)N * sizeof *nl);
            free(pl), free(nl);
        }
        }
    }
    if (feats)
        for (int bb = 0; bb < B; bb++)
            memcpy(feats + (size_t)bb * C, t + ((size_t)bb * L + L - 1) * C, (size_t)C * sizeof *t);
    free(x), free(y), free(ln1), free(ln2), free(t), free(s1), free(r.tmp), free(r.pkd);
    free(r.pvd);
    return loss;
}
