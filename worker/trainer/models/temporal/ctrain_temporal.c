/*
 * ctrain_temporal.c - the --model temporal family of ctrain_temporal.h: its descriptor, the
 * parameter table under the reference's names with PyTorch's initialisations, and the forward
 * and backward passes of a micro-batch on the op table (ct_ops.h: one code path for the CPU and
 * CUDA backends, on the CPU the same bits as the CPU kernels called directly); in --stage align
 * the projector's passes and the rows handed to the frozen LM (ctrain_lm.h runs it). A
 * micro-batch's patches and masks are gathered on the host and copied to the backend; the
 * embeddings' mean over the patches is taken on the host after the states' copy back. Not here:
 * the data, the masks' draws, the LM's loading and evaluation (ctrain_temporal_task.c).
 */
#include "ctrain_temporal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "ct_kernels.h"
#include "ctrain_lm.h"
#include "ctrain_model_internal.h"

/* Offsets (floats, into the flat buffers) of one encoder layer's tensors. */
typedef struct ctrain_temporal__layer_off {
    size_t in_w, in_b, out_w, out_b, l1_w, l1_b, l2_w, l2_b, n1_w, n1_b, n2_w, n2_b;
} ctrain_temporal__layer_off_t;

/* One layer's saved activations, (R = B * n rows). */
typedef struct ctrain_temporal__acts {
    float *x;             /* (R,C) the layer's input */
    float *ln1, *m1, *r1; /* (R,C), (R), (R) */
    float *qkv;           /* (R,3C) */
    float *att;           /* (B,NH,n,n) */
    float *ao;            /* (R,C) attention output before out_proj */
    float *x1;            /* (R,C) after the attention's residual */
    float *ln2, *m2, *r2;
    float *f1;  /* (R,F) ReLU output */
    float *f1d; /* (R,F) after dropout */
} ctrain_temporal__acts_t;

typedef struct ctrain_temporal__impl {
    size_t emb_w, emb_b, mask_tok, pos, norm_w, norm_b, rec_w, rec_b;
    ctrain_temporal__layer_off_t *lo;
    /* backend memory (ct_ops.h): every buffer a pass reads or writes */
    ctrain_temporal__acts_t *a; /* num_blocks + 1 (the last holds only x: the encoder output) */
    float *patches, *emb, *x0, *lnf, *mf, *rf, *pred, *dpred; /* (R,P) (R,C) ... */
    float *d0, *d1, *d2, *dqkv, *df, *dff, *scratch, *loss;
    int32_t *mask; /* (R) */
    void **held;   /* what o->alloc gave, for destroy */
    int n_held;
    /* host memory: a micro-batch's patches and masks before their copy, the embeddings' states
     * after theirs */
    float *h_patches, *h_lnf; /* (R,P), (R,C) */
    int32_t *h_mask;          /* (R) */
    /* --stage align: the projector's offsets and activations (BK = B * K rows) and the LM's
     * rows (LM = K + n_prompt + text_cap tokens at most), backend; the rows' token ids (soft
     * tokens' places included, their embeddings overwritten) and targets, host */
    size_t pq, pin_w, pin_b, pout_w, pout_b, pln_w, pln_b, p1_w, p1_b, p2_w, p2_b;
    float *qp, *kp, *vp, *patt, *pao, *pqb, *py, *pz, *pmu, *prs, *pu, *pg, *soft;
    float *dqp, *dkp, *dvp, *dpao, *dpy, *dpz, *dpu, *dpg, *dsoft;
    float *embeds, *dembeds; /* (max_batch, LM, H) */
    int32_t *d_ids;          /* (max_batch, LM) */
    int32_t *h_ids, *h_tgt;  /* (max_batch, LM) */
} ctrain_temporal__impl_t;

static const ctrain_temporal_spec_t *ctrain_temporal__spec(const ctrain_model_t *m)
{
    return m->cfg.ext;
}

/* Gathers rows' patches and masks from the batch's ids (ids[r*stride]) and mask (pos; NULL:
 * nothing masked) on the host and copies them to the backend. */
static void ctrain_temporal__gather(ctrain_model_t *m, const int32_t *ids, int stride,
                                    const int32_t *mask, int B)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, P = sp->patch_len;
    for (int r = 0; r < B; r++) {
        memcpy(im->h_patches + (size_t)r * n * P,
               sp->patches + (size_t)ids[(size_t)r * stride] * n * P,
               (size_t)n * P * sizeof(float));
        for (int j = 0; j < n; j++)
            im->h_mask[(size_t)r * n + j] = mask ? mask[(size_t)r * n + j] != 0 : 0;
    }
    o->copy(o, im->patches, im->h_patches, (size_t)B * n * P * sizeof(float), CT_COPY_H2D);
    o->copy(o, im->mask, im->h_mask, (size_t)B * n * sizeof(int32_t), CT_COPY_H2D);
}

static ct_dropout_t ctrain_temporal__drop(const ctrain_model_t *m, bool train, uint64_t seed,
                                          int64_t step, int site, int64_t row0, int64_t per_row)
{
    return ctrain_model_dropout_site(train ? m->cfg.dropout : 0.0f, seed, step, site, row0,
                                     per_row);
}

/* The forward pass of B gathered rows into the activations; pred at the end. */
static void ctrain_temporal__forward(ctrain_model_t *m, int B, bool train, uint64_t seed,
                                     int64_t step, int64_t row0)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, P = sp->patch_len, C = m->cfg.hidden, NH = m->cfg.num_heads;
    const int F = sp->ff_dim, R = B * n;
    const float *w = m->params_mem;
    o->linear_forward(o, im->emb, im->patches, w + im->emb_w, w + im->emb_b, R, P, C);
    o->mask_token_forward(o, im->x0, im->emb, w + im->mask_tok, im->mask, R, C);
    o->rows_broadcast_forward(o, im->a[0].x, w + im->pos, B, n, C);
    o->residual_forward(o, im->a[0].x, im->a[0].x, im->x0, (int64_t)R * C);
    for (int l = 0; l < m->cfg.num_blocks; l++) {
        ctrain_temporal__acts_t *a = &im->a[l];
        const ctrain_temporal__layer_off_t *lo = &im->lo[l];
        const int site = 1 + 4 * l;
        o->layernorm_forward(o, a->ln1, a->m1, a->r1, a->x, w + lo->n1_w, w + lo->n1_b, R, C,
                             CTRAIN_TEMPORAL_LN_EPS);
        o->linear_forward(o, a->qkv, a->ln1, w + lo->in_w, w + lo->in_b, R, C, 3 * C);
        o->enc_attention_forward(
            o, a->ao, a->att, im->scratch, a->qkv, B, n, C, NH,
            ctrain_temporal__drop(m, train, seed, step, site, row0, (int64_t)NH * n * n));
        o->linear_forward(o, im->d0, a->ao, w + lo->out_w, w + lo->out_b, R, C, C);
        o->dropout(o, im->d0, im->d0, (int64_t)R * C,
                   ctrain_temporal__drop(m, train, seed, step, site + 1, row0, (int64_t)n * C));
        o->residual_forward(o, a->x1, a->x, im->d0, (int64_t)R * C);
        o->layernorm_forward(o, a->ln2, a->m2, a->r2, a->x1, w + lo->n2_w, w + lo->n2_b, R, C,
                             CTRAIN_TEMPORAL_LN_EPS);
        o->linear_forward(o, a->f1, a->ln2, w + lo->l1_w, w + lo->l1_b, R, C, F);
        o->relu_forward(o, a->f1, a->f1, (int64_t)R * F);
        o->dropout(o, a->f1d, a->f1, (int64_t)R * F,
                   ctrain_temporal__drop(m, train, seed, step, site + 2, row0, (int64_t)n * F));
        o->linear_forward(o, im->d0, a->f1d, w + lo->l2_w, w + lo->l2_b, R, F, C);
        o->dropout(o, im->d0, im->d0, (int64_t)R * C,
                   ctrain_temporal__drop(m, train, seed, step, site + 3, row0, (int64_t)n * C));
        o->residual_forward(o, im->a[l + 1].x, a->x1, im->d0, (int64_t)R * C);
    }
    o->layernorm_forward(o, im->lnf, im->mf, im->rf, im->a[m->cfg.num_blocks].x, w + im->norm_w,
                         w + im->norm_b, R, C, CTRAIN_TEMPORAL_LN_EPS);
    o->linear_forward(o, im->pred, im->lnf, w + im->rec_w, w + im->rec_b, R, C, P);
}

/* The backward pass; from_proj: d1 already holds d(encoder output after its LayerNorm) and
 * the reconstruction head is skipped. */
static void ctrain_temporal__backward(ctrain_model_t *m, int B, uint64_t seed, int64_t step,
                                      int64_t row0, bool from_proj)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, P = sp->patch_len, C = m->cfg.hidden, NH = m->cfg.num_heads;
    const int F = sp->ff_dim, R = B * n;
    const size_t RC = (size_t)R * C;
    const float *w = m->params_mem;
    float *g = m->grads_mem;
    /* dx (d0) <- d(encoder output) */
    if (!from_proj) {
        o->zero(o, im->d1, RC * sizeof(float));
        o->linear_backward(o, im->d1, g + im->rec_w, g + im->rec_b, im->dpred, im->lnf,
                           w + im->rec_w, R, C, P);
    }
    o->zero(o, im->d0, RC * sizeof(float));
    o->layernorm_backward(o, im->d0, g + im->norm_w, g + im->norm_b, im->d1,
                          im->a[m->cfg.num_blocks].x, w + im->norm_w, im->mf, im->rf, R, C);
    ctrain_model_grads_ready(m, m->cfg.num_blocks);
    for (int l = m->cfg.num_blocks - 1; l >= 0; l--) {
        ctrain_temporal__acts_t *a = &im->a[l];
        const ctrain_temporal__layer_off_t *lo = &im->lo[l];
        const int site = 1 + 4 * l;
        /* feed-forward branch: d0 is d(x2) = d(x1) through the residual */
        o->dropout(o, im->d1, im->d0, (int64_t)RC,
                   ctrain_temporal__drop(m, true, seed, step, site + 3, row0, (int64_t)n * C));
        o->zero(o, im->df, (size_t)R * F * sizeof(float));
        o->linear_backward(o, im->df, g + lo->l2_w, g + lo->l2_b, im->d1, a->f1d, w + lo->l2_w, R,
                           F, C);
        o->dropout(o, im->df, im->df, (int64_t)R * F,
                   ctrain_temporal__drop(m, true, seed, step, site + 2, row0, (int64_t)n * F));
        o->zero(o, im->dff, (size_t)R * F * sizeof(float));
        o->relu_backward(o, im->dff, im->df, a->f1, (int64_t)R * F);
        o->zero(o, im->d2, RC * sizeof(float));
        o->linear_backward(o, im->d2, g + lo->l1_w, g + lo->l1_b, im->dff, a->ln2, w + lo->l1_w, R,
                           C, F);
        o->layernorm_backward(o, im->d0, g + lo->n2_w, g + lo->n2_b, im->d2, a->x1, w + lo->n2_w,
                              a->m2, a->r2, R, C);
        /* attention branch: d0 is now d(x1) */
        o->dropout(o, im->d1, im->d0, (int64_t)RC,
                   ctrain_temporal__drop(m, true, seed, step, site + 1, row0, (int64_t)n * C));
        o->zero(o, im->d2, RC * sizeof(float));
        o->linear_backward(o, im->d2, g + lo->out_w, g + lo->out_b, im->d1, a->ao, w + lo->out_w, R,
                           C, C);
        o->zero(o, im->dqkv, 3 * RC * sizeof(float));
        o->enc_attention_backward(
            o, im->dqkv, im->scratch, im->d2, a->att, a->qkv, B, n, C, NH,
            ctrain_temporal__drop(m, true, seed, step, site, row0, (int64_t)NH * n * n));
        o->zero(o, im->d1, RC * sizeof(float));
        o->linear_backward(o, im->d1, g + lo->in_w, g + lo->in_b, im->dqkv, a->ln1, w + lo->in_w, R,
                           C, 3 * C);
        o->layernorm_backward(o, im->d0, g + lo->n1_w, g + lo->n1_b, im->d1, a->x, w + lo->n1_w,
                              a->m1, a->r1, R, C);
        ctrain_model_grads_ready(m, l);
    }
    /* x = where(mask, token, embed(patches)) + pos */
    o->rows_broadcast_backward(o, g + im->pos, im->d0, B, n, C);
    o->zero(o, im->d1, RC * sizeof(float));
    o->mask_token_backward(o, im->d1, g + im->mask_tok, im->d0, im->mask, R, C);
    o->linear_backward(o, NULL, g + im->emb_w, g + im->emb_b, im->d1, im->patches, w + im->emb_w, R,
                       P, C);
    ctrain_model_grads_ready(m, -1);
}

static int ctrain_temporal__check_rows(const ctrain_model_t *m, int B)
{
    return B < 1 || B > m->max_batch ? -EINVAL : 0;
}

/* ---- --stage align: the projector and the frozen LM ------------------------------------------ */

/* The projector's forward over the encoder output (lnf, B rows of n patches): soft (B*K, H). */
static void ctrain_temporal__proj_forward(ctrain_model_t *m, int B)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, C = m->cfg.hidden, NH = m->cfg.num_heads, K = sp->soft_tokens;
    const int H = sp->lm_hidden, BK = B * K;
    const float *w = m->params_mem;
    /* the queries' projection is the same for every row */
    o->linear_forward(o, im->qp, w + im->pq, w + im->pin_w, w + im->pin_b, K, C, C);
    o->linear_forward(o, im->kp, im->lnf, w + im->pin_w + (size_t)C * C, w + im->pin_b + C, B * n,
                      C, C);
    o->linear_forward(o, im->vp, im->lnf, w + im->pin_w + 2 * (size_t)C * C, w + im->pin_b + 2 * C,
                      B * n, C, C);
    o->query_attention_forward(o, im->pao, im->patt, im->qp, im->kp, im->vp, B, K, n, C, NH);
    o->linear_forward(o, im->py, im->pao, w + im->pout_w, w + im->pout_b, BK, C, C);
    /* + the queries (row r's is query r % K) */
    o->rows_broadcast_forward(o, im->pqb, w + im->pq, B, K, C);
    o->residual_forward(o, im->py, im->py, im->pqb, (int64_t)BK * C);
    o->layernorm_forward(o, im->pz, im->pmu, im->prs, im->py, w + im->pln_w, w + im->pln_b, BK, C,
                         CTRAIN_TEMPORAL_LN_EPS);
    o->linear_forward(o, im->pu, im->pz, w + im->p1_w, w + im->p1_b, BK, C, H);
    o->gelu_forward(o, im->pg, im->pu, (int64_t)BK * H, CT_GELU_ERF);
    o->linear_forward(o, im->soft, im->pg, w + im->p2_w, w + im->p2_b, BK, H, H);
}

/* d1 <- d(lnf) from dsoft, the projector's gradients added. */
static void ctrain_temporal__proj_backward(ctrain_model_t *m, int B)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, C = m->cfg.hidden, NH = m->cfg.num_heads, K = sp->soft_tokens;
    const int H = sp->lm_hidden, BK = B * K;
    const float *w = m->params_mem;
    float *g = m->grads_mem;
    o->zero(o, im->dpg, (size_t)BK * H * sizeof(float));
    o->linear_backward(o, im->dpg, g + im->p2_w, g + im->p2_b, im->dsoft, im->pg, w + im->p2_w, BK,
                       H, H);
    o->zero(o, im->dpu, (size_t)BK * H * sizeof(float));
    o->gelu_backward(o, im->dpu, im->dpg, im->pu, (int64_t)BK * H, CT_GELU_ERF);
    o->zero(o, im->dpz, (size_t)BK * C * sizeof(float));
    o->linear_backward(o, im->dpz, g + im->p1_w, g + im->p1_b, im->dpu, im->pz, w + im->p1_w, BK, C,
                       H);
    o->zero(o, im->dpy, (size_t)BK * C * sizeof(float));
    o->layernorm_backward(o, im->dpy, g + im->pln_w, g + im->pln_b, im->dpz, im->py, w + im->pln_w,
                          im->pmu, im->prs, BK, C);
    /* y = out_proj(attention) + queries */
    o->rows_broadcast_backward(o, g + im->pq, im->dpy, B, K, C);
    o->zero(o, im->dpao, (size_t)BK * C * sizeof(float));
    o->linear_backward(o, im->dpao, g + im->pout_w, g + im->pout_b, im->dpy, im->pao,
                       w + im->pout_w, BK, C, C);
    o->zero(o, im->dqp, (size_t)K * C * sizeof(float));
    o->zero(o, im->dkp, (size_t)B * n * C * sizeof(float));
    o->zero(o, im->dvp, (size_t)B * n * C * sizeof(float));
    o->query_attention_backward(o, im->dqp, im->dkp, im->dvp, im->dpao, im->patt, im->qp, im->kp,
                                im->vp, B, K, n, C, NH);
    /* the in-projection: q from the queries, k and v from lnf */
    o->linear_backward(o, g + im->pq, g + im->pin_w, g + im->pin_b, im->dqp, w + im->pq,
                       w + im->pin_w, K, C, C);
    o->zero(o, im->d1, (size_t)B * n * C * sizeof(float));
    o->linear_backward(o, im->d1, g + im->pin_w + (size_t)C * C, g + im->pin_b + C, im->dkp,
                       im->lnf, w + im->pin_w + (size_t)C * C, B * n, C, C);
    o->linear_backward(o, im->d1, g + im->pin_w + 2 * (size_t)C * C, g + im->pin_b + 2 * C, im->dvp,
                       im->lnf, w + im->pin_w + 2 * (size_t)C * C, B * n, C, C);
}

/* Rows' LM inputs into embeds: the soft tokens, the prompt's and the description's embeddings
 * (text[r]'s: the LM's table rows gathered on the backend), targets on the description's tokens
 * (h_tgt); returns the length L (the longest row's), *tokens the targets' count. */
static int ctrain_temporal__lm_rows(ctrain_model_t *m, const int32_t *text, int stride, int B,
                                    int64_t *tokens)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int K = sp->soft_tokens, H = sp->lm_hidden, head = K + sp->n_prompt;
    int T = 1;
    for (int r = 0; r < B; r++)
        T = sp->text_len[text[(size_t)r * stride]] > T ? sp->text_len[text[(size_t)r * stride]] : T;
    const int L = head + T;
    int wte = 0;
    for (int i = 0; i < sp->lm->n_tensors; i++)
        if (sp->lm->tensors[i].role == CTRAIN_LM_T_WTE)
            wte = i;
    *tokens = 0;
    for (int r = 0; r < B; r++) {
        const int32_t *ids = sp->text + (size_t)text[(size_t)r * stride] * sp->text_cap;
        const int len = sp->text_len[text[(size_t)r * stride]];
        int32_t *row = im->h_ids + (size_t)r * L, *tg = im->h_tgt + (size_t)r * L;
        for (int t = 0; t < L; t++)
            row[t] = t < K            ? ids[0] /* a valid row; the soft token replaces it */
                     : t < head       ? sp->prompt[t - K]
                     : t - head < len ? ids[t - head]
                                      : ids[len - 1];
        for (int t = 0; t < L; t++)
            tg[t] = t + 1 >= head && t + 1 - head < len ? ids[t + 1 - head] : -1;
        *tokens += len;
    }
    o->copy(o, im->d_ids, im->h_ids, (size_t)B * L * sizeof(int32_t), CT_COPY_H2D);
    o->lm_embed_forward(o, im->embeds, ctrain_lm_tensor(sp->lm, wte), NULL, im->d_ids, NULL, B * L,
                        H);
    for (int r = 0; r < B; r++)
        o->copy(o, im->embeds + (size_t)r * L * H, im->soft + (size_t)r * K * H,
                (size_t)K * H * sizeof(float), CT_COPY_D2D);
    return L;
}

static int ctrain_temporal__align_fb(ctrain_model_t *m, const ctrain_model_batch_t *b, float count,
                                     uint64_t seed, int64_t step, float *loss)
{
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, K = sp->soft_tokens, H = sp->lm_hidden, B = b->B;
    ctrain_temporal__gather(m, b->seq, n, b->pos, B);
    ctrain_temporal__forward(m, B, true, seed, step, b->row0);
    ctrain_temporal__proj_forward(m, B);
    int64_t tokens = 0;
    const int L = ctrain_temporal__lm_rows(m, b->seq, n, B, &tokens);
    o->zero(o, im->dembeds, (size_t)B * L * H * sizeof(float));
    ctrain_lm_batch_t lb = {
        .B = B, .L = L, .embeds = im->embeds, .tgt = im->h_tgt, .dembeds = im->dembeds};
    /* this micro-batch's token mean, weighted by its share of the step's curves (count) */
    const float denom = (float)((double)tokens * count / B);
    ct_errbuf_t eb;
    int rc = ctrain_lm_forward_backward(sp->lm, &lb, denom, true, loss, &eb);
    if (rc != 0)
        return rc;
    for (int r = 0; r < B; r++)
        o->copy(o, im->dsoft + (size_t)r * K * H, im->dembeds + (size_t)r * L * H,
                (size_t)K * H * sizeof(float), CT_COPY_D2D);
    ctrain_temporal__proj_backward(m, B);
    ctrain_temporal__backward(m, B, seed, step, b->row0, true);
    return o->sync(o);
}

int ctrain_temporal_align_eval(ctrain_model_t *m, const int32_t *curve, const int32_t *text, int B,
                               double *sum, int64_t *tokens, ct_errbuf_t *eb)
{
    if (ctrain_temporal__check_rows(m, B) != 0)
        return ct_errbuf_set(eb, -EINVAL, "temporal encoder: %d rows (up to %d)", B, m->max_batch);
    ctrain_temporal__impl_t *im = m->impl;
    const ctrain_temporal_spec_t *sp = ctrain_temporal__spec(m);
    ctrain_temporal__gather(m, curve, 1, NULL, B);
    ctrain_temporal__forward(m, B, false, 0, 0, 0);
    ctrain_temporal__proj_forward(m, B);
    const int L = ctrain_temporal__lm_rows(m, text, 1, B, tokens);
    ctrain_lm_batch_t lb = {.B = B, .L = L, .embeds = im->embeds, .tgt = im->h_tgt};
    float l = 0.0f;
    int rc = ctrain_lm_forward_backward(sp->lm, &lb, 1.0f, false, &l, eb);
    *sum = l;
    return rc;
}

/* The backend's status after a pass, as a one-line error for the evaluation's callers. */
static int ctrain_temporal__status(ctrain_model_t *m, ct_errbuf_t *eb)
{
    const int rc = m->ops->sync(m->ops);
    return rc == 0 ? 0
                   : ct_errbuf_set(eb, rc, "temporal encoder: the %s backend failed a pass",
                                   m->ops->name);
}

static int ctrain_temporal__forward_backward(ctrain_model_t *m, const ctrain_model_batch_t *b,
                                             float count, uint64_t seed, int64_t step, float *loss)
{
    if (ctrain_temporal__check_rows(m, b->B) != 0)
        return -EINVAL;
    if (ctrain_temporal__spec(m)->stage == 1)
        return ctrain_temporal__align_fb(m, b, count, seed, step, loss);
    ctrain_temporal__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, P = ctrain_temporal__spec(m)->patch_len;
    ctrain_temporal__gather(m, b->seq, n, b->pos, b->B);
    ctrain_temporal__forward(m, b->B, true, seed, step, b->row0);
    o->masked_mse(o, im->loss, im->dpred, im->pred, im->patches, im->mask, b->B * n, P, count);
    ctrain_temporal__backward(m, b->B, seed, step, b->row0, false);
    o->copy(o, loss, im->loss, sizeof *loss, CT_COPY_D2H);
    return o->sync(o);
}

int ctrain_temporal_eval(ctrain_model_t *m, const int32_t *ids, const int32_t *mask, int B,
                         double *sum, ct_errbuf_t *eb)
{
    if (ctrain_temporal__check_rows(m, B) != 0)
        return ct_errbuf_set(eb, -EINVAL, "temporal encoder: %d rows (up to %d)", B, m->max_batch);
    ctrain_temporal__impl_t *im = m->impl;
    ct_ops_t *o = m->ops;
    const int n = m->cfg.maxlen, P = ctrain_temporal__spec(m)->patch_len;
    ctrain_temporal__gather(m, ids, n, mask, B);
    ctrain_temporal__forward(m, B, false, 0, 0, 0);
    float l = 0.0f;
    o->masked_mse(o, im->loss, NULL, im->pred, im->patches, im->mask, B * n, P, 1.0f);
    o->copy(o, &l, im->loss, sizeof l, CT_COPY_D2H);
    *sum = l;
    return ctrain_temporal__status(m, eb);
}

int ctrain_temporal_embed(ctrain_model_t *m, const int32_t *ids, const int32_t *zero_mask, int B,
                          float *out, ct_errbuf_t *eb)
{
    if (ctrain_temporal__check_rows(m, B) != 0)
        return ct_errbuf_set(eb, -EINVAL, "temporal encoder: %d rows (up to %d)", B, m->max_batch);
    ctrain_temporal__impl_t *im = m->impl;
    const int n = m->cfg.maxlen, C = m->cfg.hidden;
    ctrain_temporal__gather(m, ids, n, zero_mask, B);
    ctrain_temporal__forward(m, B, false, 0, 0, 0);
    m->ops->copy(m->ops, im->h_lnf, im->lnf, (size_t)B * n * C * sizeof(float), CT_COPY_D2H);
    int rc = ctrain_temporal__status(m, eb);
    if (rc != 0)
        return rc;
    for (int r = 0; r < B; r++)
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int j = 0; j < n; j++)
                s += im->h_lnf[((size_t)r * n + j) * C + c];
            out[(size_t)r * C + c] = (float)(s / n);
        }
    return 0;
}

static int ctrain_temporal__features(ctrain_model_t *m, const int32_t *seq, const int64_t *tseq,
                                     int B, const float **feats, int *ldf)
{
    (void)m, (void)seq, (void)tseq, (void)B, (void)feats, (void)ldf;
    return -ENOTSUP; /* evaluated by its reconstruction error (ctrain_temporal_eval) */
}

static int ctrain_temporal__logits(ctrain_model_t *m, float *pos_logits, float *neg_logits,
                                   int64_t n)
{
    (void)m, (void)pos_logits, (void)neg_logits, (void)n;
    return -EINVAL;
}

static void ctrain_temporal__destroy(ctrain_model_t *m)
{
    ctrain_temporal__impl_t *im = m->impl;
    if (!im)
        return;
    for (int i = 0; i < im->n_held; i++)
        m->ops->release(m->ops, im->held[i]);
    free(im->held);
    free(im->a);
    free(im->lo);
    free(im->h_patches);
    free(im->h_mask);
    free(im->h_lnf);
    free(im->h_ids);
    free(im->h_tgt);
    free(im);
    m->impl = NULL;
}

static const ctrain_model_vtbl_t ctrain_temporal__vt = {
    .forward_backward = ctrain_temporal__forward_backward,
    .forward_features = ctrain_temporal__features,
    .logits = ctrain_temporal__logits,
    .destroy = ctrain_temporal__destroy,
};

/* Adds a parameter; returns its offset, or SIZE_MAX when out of memory. */
static size_t ctrain_temporal__add(ctrain_model_t *m, const char *name, int64_t d0, int64_t d1,
                                   ctrain_param_init_t init, int fan_in, float value, int block)
{
    int64_t shape[3] = {d0, d1, 0};
    ctrain_param_t *p = ctrain_model__param_add(m, name, d1 > 0 ? 2 : 1, shape, init);
    if (!p)
        return SIZE_MAX;
    p->fan_in = fan_in;
    p->init_value = value;
    p->block = block;
    return p->offset;
}

/* Carves n floats from *cur. */
static float *ctrain_temporal__take(float **cur, size_t n)
{
    float *p = *cur;
    *cur += (n + 15) / 16 * 16;
    return p;
}

/* *p <- nfloats of backend memory, held for destroy; 0 or the backend's error. */
static int ctrain_temporal__alloc(ctrain_model_t *m, void **p, size_t nfloats)
{
    ctrain_temporal__impl_t *im = m->impl;
    int rc = m->ops->alloc(m->ops, p, nfloats * sizeof(float));
    if (rc != 0)
        return rc;
    im->held[im->n_held++] = *p;
    return 0;
}

static int ctrain_temporal__build(ctrain_model_t *m, ct_errbuf_t *eb)
{
    const ctrain_temporal_spec_t *sp = m->cfg.ext;
    ctrain_temporal__impl_t *im = calloc(1, sizeof *im);
    if (!im)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    m->impl = im;
    m->vt = &ctrain_temporal__vt;
    const int n = m->cfg.maxlen, P = sp->patch_len, C = m->cfg.hidden, NH = m->cfg.num_heads;
    const int F = sp->ff_dim, NB = m->cfg.num_blocks;
    bool oom = false;
#define CT__ADD(dst, ...)                             \
    do {                                              \
        (dst) = ctrain_temporal__add(m, __VA_ARGS__); \
        oom |= (dst) == SIZE_MAX;                     \
    } while (0)
    /* PyTorch's initialisations: Linear U(+-1/sqrt(fan_in)) for weight and bias;
     * MultiheadAttention's in_proj xavier_uniform with zero biases, its out_proj weight as a
     * Linear with a zero bias; LayerNorm 1 / 0; mask_token 0; pos N(0, 0.02^2). */
    CT__ADD(im->emb_w, "embed.weight", C, P, CTRAIN_INIT_FANIN_UNIFORM, P, 0.0f, -1);
    CT__ADD(im->emb_b, "embed.bias", C, 0, CTRAIN_INIT_FANIN_UNIFORM, P, 0.0f, -1);
    CT__ADD(im->mask_tok, "mask_token", C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, -1);
    CT__ADD(im->pos, "pos", n, C, CTRAIN_INIT_NORMAL, 0, 0.02f, -1);
    im->lo = calloc((size_t)NB, sizeof *im->lo);
    if (!im->lo)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    for (int l = 0; l < NB; l++) {
        ctrain_temporal__layer_off_t *o = &im->lo[l];
        char nm[CTRAIN_PARAM_NAME_MAX];
#define CT__NAME(suffix) (snprintf(nm, sizeof nm, "layers.%d.%s", l, suffix), nm)
        CT__ADD(o->in_w, CT__NAME("self_attn.in_proj_weight"), 3 * C, C, CTRAIN_INIT_XAVIER_UNIFORM,
                0, 0.0f, l);
        CT__ADD(o->in_b, CT__NAME("self_attn.in_proj_bias"), 3 * C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f,
                l);
        CT__ADD(o->out_w, CT__NAME("self_attn.out_proj.weight"), C, C, CTRAIN_INIT_FANIN_UNIFORM, C,
                0.0f, l);
        CT__ADD(o->out_b, CT__NAME("self_attn.out_proj.bias"), C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, l);
        CT__ADD(o->l1_w, CT__NAME("linear1.weight"), F, C, CTRAIN_INIT_FANIN_UNIFORM, C, 0.0f, l);
        CT__ADD(o->l1_b, CT__NAME("linear1.bias"), F, 0, CTRAIN_INIT_FANIN_UNIFORM, C, 0.0f, l);
        CT__ADD(o->l2_w, CT__NAME("linear2.weight"), C, F, CTRAIN_INIT_FANIN_UNIFORM, F, 0.0f, l);
        CT__ADD(o->l2_b, CT__NAME("linear2.bias"), C, 0, CTRAIN_INIT_FANIN_UNIFORM, F, 0.0f, l);
        CT__ADD(o->n1_w, CT__NAME("norm1.weight"), C, 0, CTRAIN_INIT_ONES, 0, 0.0f, l);
        CT__ADD(o->n1_b, CT__NAME("norm1.bias"), C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, l);
        CT__ADD(o->n2_w, CT__NAME("norm2.weight"), C, 0, CTRAIN_INIT_ONES, 0, 0.0f, l);
        CT__ADD(o->n2_b, CT__NAME("norm2.bias"), C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, l);
#undef CT__NAME
    }
    CT__ADD(im->norm_w, "norm.weight", C, 0, CTRAIN_INIT_ONES, 0, 0.0f, NB);
    CT__ADD(im->norm_b, "norm.bias", C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, NB);
    CT__ADD(im->rec_w, "recon.weight", P, C, CTRAIN_INIT_FANIN_UNIFORM, C, 0.0f, NB);
    CT__ADD(im->rec_b, "recon.bias", P, 0, CTRAIN_INIT_FANIN_UNIFORM, C, 0.0f, NB);
    const int K = sp->soft_tokens, H = sp->lm_hidden;
    if (sp->stage == 1) {
        /* the Projector: queries N(0, 0.02^2), nn.MultiheadAttention as above, LayerNorm,
         * Linear(C, H), GELU, Linear(H, H) */
        CT__ADD(im->pq, "projector.queries", K, C, CTRAIN_INIT_NORMAL, 0, 0.02f, NB);
        CT__ADD(im->pin_w, "projector.attn.in_proj_weight", 3 * C, C, CTRAIN_INIT_XAVIER_UNIFORM, 0,
                0.0f, NB);
        CT__ADD(im->pin_b, "projector.attn.in_proj_bias", 3 * C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, NB);
        CT__ADD(im->pout_w, "projector.attn.out_proj.weight", C, C, CTRAIN_INIT_FANIN_UNIFORM, C,
                0.0f, NB);
        CT__ADD(im->pout_b, "projector.attn.out_proj.bias", C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, NB);
        CT__ADD(im->pln_w, "projector.mlp.0.weight", C, 0, CTRAIN_INIT_ONES, 0, 0.0f, NB);
        CT__ADD(im->pln_b, "projector.mlp.0.bias", C, 0, CTRAIN_INIT_ZEROS, 0, 0.0f, NB);
        CT__ADD(im->p1_w, "projector.mlp.1.weight", H, C, CTRAIN_INIT_FANIN_UNIFORM, C, 0.0f, NB);
        CT__ADD(im->p1_b, "projector.mlp.1.bias", H, 0, CTRAIN_INIT_FANIN_UNIFORM, C, 0.0f, NB);
        CT__ADD(im->p2_w, "projector.mlp.3.weight", H, H, CTRAIN_INIT_FANIN_UNIFORM, H, 0.0f, NB);
        CT__ADD(im->p2_b, "projector.mlp.3.bias", H, 0, CTRAIN_INIT_FANIN_UNIFORM, H, 0.0f, NB);
    }
#undef CT__ADD
    if (oom)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    m->weight_decay = sp->weight_decay; /* AdamW; its betas are the family's (0.9, 0.999) */

    const size_t R = (size_t)m->max_batch * (size_t)n, RC = R * (size_t)C;
    im->a = calloc((size_t)NB + 1, sizeof *im->a);
    im->held = calloc((size_t)NB + 8, sizeof *im->held);
    if (!im->a || !im->held)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the model");
    const size_t per_layer =
        16 * 16 + RC * 9 + 4 * R + R * (size_t)F * 2 + (size_t)m->max_batch * NH * n * n;
    void *mem = NULL;
    int rc;
    for (int l = 0; l <= NB; l++) {
        if ((rc = ctrain_temporal__alloc(m, &mem, l < NB ? per_layer : RC + 16)) != 0)
            return ct_errbuf_set(eb, rc, "out of memory for the activations");
        float *cur = mem;
        ctrain_temporal__acts_t *a = &im->a[l];
        a->x = ctrain_temporal__take(&cur, RC);
        if (l == NB)
            break;
        a->ln1 = ctrain_temporal__take(&cur, RC);
        a->m1 = ctrain_temporal__take(&cur, R);
        a->r1 = ctrain_temporal__take(&cur, R);
        a->qkv = ctrain_temporal__take(&cur, 3 * RC);
        a->att = ctrain_temporal__take(&cur, (size_t)m->max_batch * NH * n * n);
        a->ao = ctrain_temporal__take(&cur, RC);
        a->x1 = ctrain_temporal__take(&cur, RC);
        a->ln2 = ctrain_temporal__take(&cur, RC);
        a->m2 = ctrain_temporal__take(&cur, R);
        a->r2 = ctrain_temporal__take(&cur, R);
        a->f1 = ctrain_temporal__take(&cur, R * (size_t)F);
        a->f1d = ctrain_temporal__take(&cur, R * (size_t)F);
    }
    const size_t RP = R * (size_t)P, RF = R * (size_t)F;
    const size_t att_scratch = CT_ENC_ATTENTION_BWD_SCRATCH(n, C, NH);
    const size_t shared = 32 * 16 + RP * 3 + RC * 9 + 3 * R + RF * 2 + att_scratch + 1;
    if ((rc = ctrain_temporal__alloc(m, &mem, shared)) != 0)
        return ct_errbuf_set(eb, rc, "out of memory for the activations");
    float *cur = mem;
    im->patches = ctrain_temporal__take(&cur, RP);
    im->emb = ctrain_temporal__take(&cur, RC);
    im->x0 = ctrain_temporal__take(&cur, RC);
    im->lnf = ctrain_temporal__take(&cur, RC);
    im->mf = ctrain_temporal__take(&cur, R);
    im->rf = ctrain_temporal__take(&cur, R);
    im->pred = ctrain_temporal__take(&cur, RP);
    im->dpred = ctrain_temporal__take(&cur, RP);
    im->d0 = ctrain_temporal__take(&cur, RC);
    im->d1 = ctrain_temporal__take(&cur, RC);
    im->d2 = ctrain_temporal__take(&cur, RC);
    im->dqkv = ctrain_temporal__take(&cur, 3 * RC);
    im->df = ctrain_temporal__take(&cur, RF);
    im->dff = ctrain_temporal__take(&cur, RF);
    im->scratch = ctrain_temporal__take(&cur, att_scratch);
    im->loss = ctrain_temporal__take(&cur, 1);
    im->mask = (int32_t *)ctrain_temporal__take(&cur, R); /* int32 in float-sized cells */
    im->h_patches = malloc(RP * sizeof *im->h_patches);
    im->h_mask = malloc(R * sizeof *im->h_mask);
    im->h_lnf = malloc(RC * sizeof *im->h_lnf);
    if (!im->h_patches || !im->h_mask || !im->h_lnf)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the activations");
    if (sp->stage != 1)
        return 0;
    const size_t BK = (size_t)m->max_batch * K, KC = (size_t)K * C, BKC = BK * C, BKH = BK * H;
    const size_t patt = (size_t)m->max_batch * NH * K * n;
    const size_t LM = (size_t)K + (size_t)sp->n_prompt + (size_t)sp->text_cap;
    const size_t cells = (size_t)m->max_batch * LM;
    if ((rc = ctrain_temporal__alloc(
             m, &mem, 32 * 16 + 2 * KC + 4 * RC + patt + 8 * BKC + 2 * BK + 6 * BKH)) != 0)
        return ct_errbuf_set(eb, rc, "out of memory for the projector's activations");
    cur = mem;
    im->qp = ctrain_temporal__take(&cur, KC);
    im->dqp = ctrain_temporal__take(&cur, KC);
    im->kp = ctrain_temporal__take(&cur, RC);
    im->vp = ctrain_temporal__take(&cur, RC);
    im->dkp = ctrain_temporal__take(&cur, RC);
    im->dvp = ctrain_temporal__take(&cur, RC);
    im->patt = ctrain_temporal__take(&cur, patt);
    im->pao = ctrain_temporal__take(&cur, BKC);
    im->pqb = ctrain_temporal__take(&cur, BKC);
    im->py = ctrain_temporal__take(&cur, BKC);
    im->pz = ctrain_temporal__take(&cur, BKC);
    im->dpao = ctrain_temporal__take(&cur, BKC);
    im->dpy = ctrain_temporal__take(&cur, BKC);
    im->dpz = ctrain_temporal__take(&cur, BKC);
    im->pmu = ctrain_temporal__take(&cur, BK);
    im->prs = ctrain_temporal__take(&cur, BK);
    im->pu = ctrain_temporal__take(&cur, BKH);
    im->pg = ctrain_temporal__take(&cur, BKH);
    im->soft = ctrain_temporal__take(&cur, BKH);
    im->dpu = ctrain_temporal__take(&cur, BKH);
    im->dpg = ctrain_temporal__take(&cur, BKH);
    im->dsoft = ctrain_temporal__take(&cur, BKH);
    if ((rc = ctrain_temporal__alloc(m, &mem, 2 * cells * (size_t)H + cells + 64)) != 0)
        return ct_errbuf_set(eb, rc, "out of memory for the LM's inputs");
    cur = mem;
    im->embeds = ctrain_temporal__take(&cur, cells * (size_t)H);
    im->dembeds = ctrain_temporal__take(&cur, cells * (size_t)H);
    im->d_ids = (int32_t *)ctrain_temporal__take(&cur, cells); /* int32 in float-sized cells */
    im->h_ids = malloc(cells * sizeof *im->h_ids);
    im->h_tgt = malloc(cells * sizeof *im->h_tgt);
    if (!im->h_ids || !im->h_tgt)
        return ct_errbuf_set(eb, -ENOMEM, "out of memory for the LM's inputs");
    return 0;
}

static int ctrain_temporal__check_cfg(const ctrain_model_cfg_t *mc, ct_errbuf_t *eb)
{
    const ctrain_temporal_spec_t *sp = mc->ext;
    if (sp == NULL)
        return ct_errbuf_set(eb, -EINVAL, "temporal encoder: no configuration");
    if (mc->maxlen < 1 || sp->patch_len < 1 || sp->ff_dim < 1)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "temporal encoder: %d patches of %d points, feed-forward %d (each "
                             "must be >= 1)",
                             mc->maxlen, sp->patch_len, sp->ff_dim);
    if (mc->hidden < 1 || mc->num_heads < 1 || mc->hidden % mc->num_heads != 0)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--num_heads: %d does not divide --hidden_units %d", mc->num_heads,
                             mc->hidden);
    if (sp->stage == 1 && (sp->soft_tokens < 1 || sp->lm_hidden < 1))
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "temporal encoder: %d soft tokens of width %d",
                             sp->soft_tokens, sp->lm_hidden);
    if (mc->num_blocks < 1 || 1 + 4 * mc->num_blocks > 252)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE, "--num_blocks: %d (1..62 for this model)",
                             mc->num_blocks);
    return 0;
}

static int ctrain_temporal__check_backend(const ctrain_model_cfg_t *mc, const ct_ops_t *ops,
                                          ct_errbuf_t *eb)
{
    if (ops->limits.layernorm_max_c > 0 && mc->hidden > ops->limits.layernorm_max_c)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "--hidden_units %d: the %s backend's LayerNorm takes at most %d",
                             mc->hidden, ops->name, ops->limits.layernorm_max_c);
    if (ops->limits.enc_attention_max_l > 0 && mc->maxlen > ops->limits.enc_attention_max_l)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "temporal encoder: %d patches per curve; the %s backend's attention "
                             "takes at most %d (raise --patch_len)",
                             mc->maxlen, ops->name, ops->limits.enc_attention_max_l);
    return 0;
}

const ctrain_family_t ctrain_temporal_family = {
    .name = "temporal",
    .title = "temporal encoder",
    .kind = CTRAIN_MODEL_TEMPORAL,
    .uses_times = false,
    .min_eval_len = 0,
    .eval_excludes_target = false,
    .layout = CTRAIN_LAYOUT_PRE_LN,
    .layouts = 1u << CTRAIN_LAYOUT_PRE_LN,
    .maxlen = 0,     /* the curve's patches */
    .num_epochs = 3,  /* the reference's training.reconstruct_epochs */
    .eval_every = 1,  /* the reference evaluates after every epoch */
    .batch_size = 16, /* curves per step over all ranks: the reference's data.batch_size */
    .l2_emb = 0.0,
    .has_time_span = false,
    .build = ctrain_temporal__build,
    .check_backend = ctrain_temporal__check_backend,
    .check_cfg = ctrain_temporal__check_cfg,
    .takes_mhc = false,
    .own_weights = false,
    .adam_beta2 = 0.999, /* torch.optim.AdamW's default */
    .cpu_only = false,
};
