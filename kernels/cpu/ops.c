/*
 * ops.c - the CPU backend of the dispatch table (ct_ops.h): one-line forwarders to the
 * ct_*_cpu functions, and host memory. The forwarders exist only because the table's entries
 * take the table as their first argument (the CUDA backend needs its stream from it); they add
 * no behaviour, so a model run through this table computes exactly what direct calls compute.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_ops.h"

/* ---- memory -------------------------------------------------------------------------------- */

static int ct_cpu_ops__cpu_alloc(ct_ops_t *o, void **p, size_t nbytes)
{
    (void)o;
    /* aligned_alloc wants a size that is a multiple of the alignment. */
    size_t n = (nbytes + 63) / 64 * 64;
    *p = aligned_alloc(64, n ? n : 64);
    return *p ? 0 : -ENOMEM;
}

static void ct_cpu_ops__cpu_release(ct_ops_t *o, void *p)
{
    (void)o;
    free(p);
}

static void ct_cpu_ops__cpu_zero(ct_ops_t *o, void *p, size_t nbytes)
{
    (void)o;
    memset(p, 0, nbytes);
}

static void ct_cpu_ops__cpu_copy(ct_ops_t *o, void *dst, const void *src, size_t nbytes,
                                 ct_copy_kind_t kind)
{
    (void)o, (void)kind;
    if (dst != src && nbytes > 0)
        memmove(dst, src, nbytes);
}

static int ct_cpu_ops__cpu_sync(ct_ops_t *o)
{
    return ct_ops_status(o);
}

static void ct_cpu_ops__cpu_close(ct_ops_t *o)
{
    (void)o; /* host memory belongs to its users; the table holds nothing */
}

static size_t ct_cpu_ops__cpu_attention_scratch(ct_ops_t *o, int B, int L, int NH,
                                                ct_att_scratch_t which)
{
    (void)o, (void)B, (void)NH;
    return which == CT_ATT_SCRATCH_FWD ? CT_ATTENTION_FWD_SCRATCH(L) : CT_ATTENTION_BWD_SCRATCH(L);
}

static size_t ct_cpu_ops__cpu_scratch(ct_ops_t *o, ct_scratch_op_t op, int64_t a, int64_t b,
                                      int64_t c, int64_t rows)
{
    (void)o, (void)rows;
    switch (op) {
    case CT_SCRATCH_TISAS_FWD:
        return CT_TISAS_ATTENTION_FWD_SCRATCH(a, b);
    case CT_SCRATCH_TISAS_BWD:
        return CT_TISAS_ATTENTION_BWD_SCRATCH(a, b);
    case CT_SCRATCH_SINKHORN_BWD:
        return CT_SINKHORN_BWD_SCRATCH(a, b);
    case CT_SCRATCH_MHC_COEFFS_BWD:
        return CT_MHC_COEFFS_BWD_SCRATCH(a, b, c);
    case CT_SCRATCH_CE:
        return CT_CE_SCRATCH(a, b);
    case CT_SCRATCH_SAMPLED_CE:
        return CT_SAMPLED_CE_SCRATCH(a, b, c);
    case CT_SCRATCH_GQA_BWD:
        return (size_t)c; /* one row of d scores */
    }
    return 0;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static void ct_cpu_ops__dropout(ct_ops_t *o, float *out, const float *inp, int64_t n,
                                ct_dropout_t d)
{
    (void)o;
    ct_dropout_cpu(out, inp, n, d);
}

static void ct_cpu_ops__timeline_mask(ct_ops_t *o, float *out, const float *inp, const int32_t *seq,
                                      int N, int C)
{
    (void)o;
    ct_timeline_mask_cpu(out, inp, seq, N, C);
}

static void ct_cpu_ops__embed_forward(ct_ops_t *o, float *out, const float *wte, const float *wpe,
                                      const int32_t *seq, int B, int L, int C, float scale,
                                      ct_pos_mode_t pm)
{
    (void)o;
    ct_embed_forward_cpu(out, wte, wpe, seq, B, L, C, scale, pm);
}

static void ct_cpu_ops__embed_backward(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                                       const int32_t *seq, int B, int L, int C, float scale,
                                       ct_pos_mode_t pm)
{
    (void)o;
    ct_embed_backward_cpu(dwte, dwpe, dout, seq, B, L, C, scale, pm);
}

static void ct_cpu_ops__layernorm_forward(ct_ops_t *o, float *out, float *mean, float *rstd,
                                          const float *inp, const float *w, const float *b, int N,
                                          int C, float eps)
{
    (void)o;
    ct_layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C, eps);
}

static void ct_cpu_ops__layernorm_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                           const float *dout, const float *inp, const float *w,
                                           const float *mean, const float *rstd, int N, int C)
{
    (void)o;
    ct_layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

static void ct_cpu_ops__linear_forward(ct_ops_t *o, float *out, const float *inp, const float *w,
                                       const float *b, int N, int IC, int OC)
{
    (void)o;
    ct_linear_forward_cpu(out, inp, w, b, N, IC, OC);
}

static void ct_cpu_ops__linear_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                        const float *dout, const float *inp, const float *w, int N,
                                        int IC, int OC)
{
    (void)o;
    ct_linear_backward_cpu(dinp, dw, db, dout, inp, w, N, IC, OC);
}

static void ct_cpu_ops__conv1d_forward(ct_ops_t *o, float *out, const float *inp, const float *w,
                                       const float *b, int N, int IC, int OC)
{
    (void)o;
    ct_conv1d_forward_cpu(out, inp, w, b, N, IC, OC);
}

static void ct_cpu_ops__conv1d_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                        const float *dout, const float *inp, const float *w, int N,
                                        int IC, int OC)
{
    (void)o;
    ct_conv1d_backward_cpu(dinp, dw, db, dout, inp, w, N, IC, OC);
}

static void ct_cpu_ops__qkv_forward(ct_ops_t *o, float *qkv, const float *xq, const float *xkv,
                                    const float *w, const float *b, int N, int C)
{
    (void)o;
    ct_qkv_forward_cpu(qkv, xq, xkv, w, b, N, C);
}

static void ct_cpu_ops__qkv_backward(ct_ops_t *o, float *dxq, float *dxkv, float *dw, float *db,
                                     const float *dqkv, const float *xq, const float *xkv,
                                     const float *w, int N, int C)
{
    (void)o;
    ct_qkv_backward_cpu(dxq, dxkv, dw, db, dqkv, xq, xkv, w, N, C);
}

static void ct_cpu_ops__attention_forward(ct_ops_t *o, float *out, float *att, float *scratch,
                                          const float *qkv, const int32_t *qmask, int B, int L,
                                          int C, int NH, ct_dropout_t d)
{
    (void)o;
    ct_attention_forward_cpu(out, att, scratch, qkv, qmask, B, L, C, NH, d);
}

static void ct_cpu_ops__attention_backward(ct_ops_t *o, float *dqkv, float *scratch,
                                           const float *dout, const float *att, const float *qkv,
                                           const int32_t *qmask, int B, int L, int C, int NH,
                                           ct_dropout_t d)
{
    (void)o;
    ct_attention_backward_cpu(dqkv, scratch, dout, att, qkv, qmask, B, L, C, NH, d);
}

static void ct_cpu_ops__relu_forward(ct_ops_t *o, float *out, const float *inp, int64_t n)
{
    (void)o;
    ct_relu_forward_cpu(out, inp, n);
}

static void ct_cpu_ops__relu_backward(ct_ops_t *o, float *dinp, const float *dout, const float *out,
                                      int64_t n)
{
    (void)o;
    ct_relu_backward_cpu(dinp, dout, out, n);
}

static void ct_cpu_ops__residual_forward(ct_ops_t *o, float *out, const float *a, const float *b,
                                         int64_t n)
{
    (void)o;
    ct_residual_forward_cpu(out, a, b, n);
}

static void ct_cpu_ops__residual_backward(ct_ops_t *o, float *da, float *db, const float *dout,
                                          int64_t n)
{
    (void)o;
    ct_residual_backward_cpu(da, db, dout, n);
}

static void ct_cpu_ops__score_forward(ct_ops_t *o, float *logits, const float *feats,
                                      const float *wte, const int32_t *ids, int N, int C)
{
    (void)o;
    ct_score_forward_cpu(logits, feats, wte, ids, N, C);
}

static void ct_cpu_ops__score_backward(ct_ops_t *o, float *dfeats, float *dwte,
                                       const float *dlogits, const float *feats, const float *wte,
                                       const int32_t *ids, int N, int C)
{
    (void)o;
    ct_score_backward_cpu(dfeats, dwte, dlogits, feats, wte, ids, N, C);
}

static void ct_cpu_ops__bce_loss(ct_ops_t *o, float *loss, float *dpos, float *dneg,
                                 const float *pl, const float *nl, const int32_t *pos, int N,
                                 float count)
{
    (void)o;
    ct_bce_loss_cpu(loss, dpos, dneg, pl, nl, pos, N, count);
}

static void ct_cpu_ops__l2_penalty(ct_ops_t *o, float *penalty, float *dw, const float *w,
                                   int64_t n, float lambda, ct_l2_mode_t mode)
{
    (void)o;
    ct_l2_penalty_cpu(penalty, dw, w, n, lambda, mode);
}

static void ct_cpu_ops__adam_update(ct_ops_t *o, float *params, float *m, float *v,
                                    const float *grads, int64_t n, double lr, double beta1,
                                    double beta2, double eps, float grad_scale, int64_t step)
{
    (void)o;
    ct_adam_update_cpu(params, m, v, grads, n, lr, beta1, beta2, eps, grad_scale, step);
}

static void ct_cpu_ops__sumsq(ct_ops_t *o, float *out, const float *x, int64_t n)
{
    (void)o;
    ct_sumsq_cpu(out, x, n);
}

static void ct_cpu_ops__score_candidates(ct_ops_t *o, float *scores, const float *feats,
                                         const float *wte, const int32_t *cand, int U, int K, int C,
                                         int ldf)
{
    (void)o;
    ct_score_candidates_cpu(scores, feats, wte, cand, U, K, C, ldf);
}

static void ct_cpu_ops__score_all(ct_ops_t *o, float *scores, const float *feats, const float *wte,
                                  int U, int V, int C, int ldf)
{
    (void)o;
    ct_score_all_cpu(scores, feats, wte, U, V, C, ldf);
}

static void ct_cpu_ops__rows_broadcast_forward(ct_ops_t *o, float *out, const float *table, int B,
                                               int L, int C)
{
    (void)o;
    ct_rows_broadcast_forward_cpu(out, table, B, L, C);
}

static void ct_cpu_ops__rows_broadcast_backward(ct_ops_t *o, float *dtable, const float *dout,
                                                int B, int L, int C)
{
    (void)o;
    ct_rows_broadcast_backward_cpu(dtable, dout, B, L, C);
}

static void ct_cpu_ops__tisas_attention_forward(ct_ops_t *o, float *out, float *att, float *scratch,
                                                const float *q, const float *k, const float *v,
                                                const float *rk, const float *rv,
                                                const int64_t *tseq, const int32_t *qmask, int B,
                                                int L, int C, int NH, int T, ct_dropout_t da,
                                                const uint32_t *mk, const uint32_t *mv, float p)
{
    (void)o;
    ct_tisas_attention_forward_cpu(out, att, scratch, q, k, v, rk, rv, tseq, qmask, B, L, C, NH, T,
                                   da, mk, mv, p);
}

static void ct_cpu_ops__tisas_attention_backward(
    ct_ops_t *o, float *dq, float *dk, float *dv, float *drk, float *drv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k, const float *v,
    const float *rk, const float *rv, const int64_t *tseq, const int32_t *qmask, int B, int L,
    int C, int NH, int T, ct_dropout_t da, const uint32_t *mk, const uint32_t *mv, float p)
{
    (void)o;
    ct_tisas_attention_backward_cpu(dq, dk, dv, drk, drv, scratch, dout, att, q, k, v, rk, rv, tseq,
                                    qmask, B, L, C, NH, T, da, mk, mv, p);
}

static void ct_cpu_ops__tisas_mask(ct_ops_t *o, uint32_t *bits, const int32_t *qmask, int B, int L,
                                   int C, ct_dropout_t drop)
{
    (void)o;
    ct_tisas_mask_cpu(bits, qmask, B, L, C, drop);
}

static void ct_cpu_ops__sinkhorn_forward(ct_ops_t *o, float *out, const float *logits, int M, int n,
                                         int iters)
{
    (void)o;
    ct_sinkhorn_forward_cpu(out, logits, M, n, iters);
}

static void ct_cpu_ops__sinkhorn_backward(ct_ops_t *o, float *dlogits, float *scratch,
                                          const float *dout, const float *logits, int M, int n,
                                          int iters)
{
    (void)o;
    ct_sinkhorn_backward_cpu(dlogits, scratch, dout, logits, M, n, iters);
}

static void ct_cpu_ops__mhc_coeffs_forward(ct_ops_t *o, float *hpre, float *hpost, float *hres,
                                           float *proj, float *rstd, const float *X,
                                           const float *phi, const float *alpha, const float *bias,
                                           int N, int n, int C, int iters, float eps)
{
    (void)o;
    ct_mhc_coeffs_forward_cpu(hpre, hpost, hres, proj, rstd, X, phi, alpha, bias, N, n, C, iters,
                              eps);
}

static void ct_cpu_ops__mhc_coeffs_backward(ct_ops_t *o, float *dX, float *dphi, float *dalpha,
                                            float *dbias, float *scratch, const float *dhpre,
                                            const float *dhpost, const float *dhres, const float *X,
                                            const float *phi, const float *alpha, const float *bias,
                                            const float *proj, const float *rstd, int N, int n,
                                            int C, int iters)
{
    (void)o;
    ct_mhc_coeffs_backward_cpu(dX, dphi, dalpha, dbias, scratch, dhpre, dhpost, dhres, X, phi,
                               alpha, bias, proj, rstd, N, n, C, iters);
}

static void ct_cpu_ops__mhc_pre_forward(ct_ops_t *o, float *u, const float *X, const float *hpre,
                                        int N, int n, int C)
{
    (void)o;
    ct_mhc_pre_forward_cpu(u, X, hpre, N, n, C);
}

static void ct_cpu_ops__mhc_pre_backward(ct_ops_t *o, float *dX, float *dhpre, const float *du,
                                         const float *X, const float *hpre, int N, int n, int C)
{
    (void)o;
    ct_mhc_pre_backward_cpu(dX, dhpre, du, X, hpre, N, n, C);
}

static void ct_cpu_ops__mhc_post_forward(ct_ops_t *o, float *Y, const float *X, const float *f,
                                         const float *hres, const float *hpost, int N, int n, int C)
{
    (void)o;
    ct_mhc_post_forward_cpu(Y, X, f, hres, hpost, N, n, C);
}

static void ct_cpu_ops__mhc_post_backward(ct_ops_t *o, float *dX, float *df, float *dhres,
                                          float *dhpost, const float *dY, const float *X,
                                          const float *f, const float *hres, const float *hpost,
                                          int N, int n, int C)
{
    (void)o;
    ct_mhc_post_backward_cpu(dX, df, dhres, dhpost, dY, X, f, hres, hpost, N, n, C);
}

static void ct_cpu_ops__mhc_expand_forward(ct_ops_t *o, float *X, const float *x, int N, int n,
                                           int C)
{
    (void)o;
    ct_mhc_expand_forward_cpu(X, x, N, n, C);
}

static void ct_cpu_ops__mhc_expand_backward(ct_ops_t *o, float *dx, const float *dX, int N, int n,
                                            int C)
{
    (void)o;
    ct_mhc_expand_backward_cpu(dx, dX, N, n, C);
}

static void ct_cpu_ops__mhc_collapse_forward(ct_ops_t *o, float *x, const float *X, int N, int n,
                                             int C)
{
    (void)o;
    ct_mhc_collapse_forward_cpu(x, X, N, n, C);
}

static void ct_cpu_ops__mhc_collapse_backward(ct_ops_t *o, float *dX, const float *dx, int N, int n,
                                              int C)
{
    (void)o;
    ct_mhc_collapse_backward_cpu(dX, dx, N, n, C);
}

static void ct_cpu_ops__ce_loss(ct_ops_t *o, float *loss, float *dfeats, float *dwte,
                                float *scratch, const float *feats, const float *wte,
                                const int32_t *pos, int N, int C, int V, float count)
{
    (void)o;
    ct_ce_loss_cpu(loss, dfeats, dwte, scratch, feats, wte, pos, N, C, V, count);
}

static void ct_cpu_ops__sampled_ce_loss(ct_ops_t *o, float *loss, float *dfeats, float *dwte,
                                        float *scratch, const float *feats, const float *wte,
                                        const int32_t *pos, const int32_t *neg, int B, int L, int C,
                                        int M, float count)
{
    (void)o;
    ct_sampled_ce_loss_cpu(loss, dfeats, dwte, scratch, feats, wte, pos, neg, B, L, C, M, count);
}

/* ---- the language models ---- */

static void ct_cpu_ops__rmsnorm_forward(ct_ops_t *o, float *out, float *rstd, const float *inp,
                                        const float *w, int N, int C, float eps)
{
    (void)o;
    ct_rmsnorm_forward_cpu(out, rstd, inp, w, N, C, eps);
}

static void ct_cpu_ops__rmsnorm_backward(ct_ops_t *o, float *dinp, float *dw, const float *dout,
                                         const float *inp, const float *w, const float *rstd, int N,
                                         int C)
{
    (void)o;
    ct_rmsnorm_backward_cpu(dinp, dw, dout, inp, w, rstd, N, C);
}

static void ct_cpu_ops__gelu_forward(ct_ops_t *o, float *out, const float *inp, int64_t n,
                                     ct_gelu_kind_t kind)
{
    (void)o;
    ct_gelu_forward_cpu(out, inp, n, kind);
}

static void ct_cpu_ops__gelu_backward(ct_ops_t *o, float *dinp, const float *dout, const float *inp,
                                      int64_t n, ct_gelu_kind_t kind)
{
    (void)o;
    ct_gelu_backward_cpu(dinp, dout, inp, n, kind);
}

static void ct_cpu_ops__swiglu_forward(ct_ops_t *o, float *out, const float *gate, const float *up,
                                       int64_t n)
{
    (void)o;
    ct_swiglu_forward_cpu(out, gate, up, n);
}

static void ct_cpu_ops__swiglu_backward(ct_ops_t *o, float *dgate, float *dup, const float *dout,
                                        const float *gate, const float *up, int64_t n)
{
    (void)o;
    ct_swiglu_backward_cpu(dgate, dup, dout, gate, up, n);
}

static void ct_cpu_ops__rope_forward(ct_ops_t *o, float *out, const float *inp, const float *cs,
                                     const float *sn, const int32_t *pos, int N, int NH, int HD)
{
    (void)o;
    ct_rope_forward_cpu(out, inp, cs, sn, pos, N, NH, HD);
}

static void ct_cpu_ops__rope_backward(ct_ops_t *o, float *dinp, const float *dout, const float *cs,
                                      const float *sn, const int32_t *pos, int N, int NH, int HD)
{
    (void)o;
    ct_rope_backward_cpu(dinp, dout, cs, sn, pos, N, NH, HD);
}

static void ct_cpu_ops__gqa_attention_forward(ct_ops_t *o, float *out, float *att, const float *qkv,
                                              int B, int L, int NH, int KVH, int HD, float scale)
{
    (void)o;
    ct_gqa_attention_forward_cpu(out, att, qkv, B, L, NH, KVH, HD, scale);
}

static void ct_cpu_ops__gqa_attention_backward(ct_ops_t *o, float *dqkv, float *scratch,
                                               const float *dout, const float *att,
                                               const float *qkv, int B, int L, int NH, int KVH,
                                               int HD, float scale)
{
    (void)o;
    ct_gqa_attention_backward_cpu(dqkv, scratch, dout, att, qkv, B, L, NH, KVH, HD, scale);
}

static void ct_cpu_ops__lm_embed_forward(ct_ops_t *o, float *out, const float *wte,
                                         const float *wpe, const int32_t *ids, const int32_t *pos,
                                         int N, int C)
{
    (void)o;
    ct_lm_embed_forward_cpu(out, wte, wpe, ids, pos, N, C);
}

static void ct_cpu_ops__lm_embed_backward(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                                          const int32_t *ids, const int32_t *pos, int N, int C,
                                          int32_t skip_id)
{
    (void)o;
    ct_lm_embed_backward_cpu(dwte, dwpe, dout, ids, pos, N, C, skip_id);
}

static void ct_cpu_ops__lm_ce_loss(ct_ops_t *o, float *loss, float *dfeats, float *dwte,
                                   float *scratch, const float *feats, const float *wte,
                                   const int32_t *tgt, int N, int C, int V, float count)
{
    (void)o;
    ct_lm_ce_loss_cpu(loss, dfeats, dwte, scratch, feats, wte, tgt, N, C, V, count);
}

static void ct_cpu_ops__scale(ct_ops_t *o, float *x, float s, int64_t n)
{
    (void)o;
    ct_scale_cpu(x, s, n);
}

static void ct_cpu_ops__enc_attention_forward(ct_ops_t *o, float *out, float *att, float *scratch,
                                              const float *qkv, int B, int L, int C, int NH,
                                              ct_dropout_t drop)
{
    (void)o;
    ct_enc_attention_forward_cpu(out, att, scratch, qkv, B, L, C, NH, drop);
}

static void ct_cpu_ops__enc_attention_backward(ct_ops_t *o, float *dqkv, float *scratch,
                                               const float *dout, const float *att,
                                               const float *qkv, int B, int L, int C, int NH,
                                               ct_dropout_t drop)
{
    (void)o;
    ct_enc_attention_backward_cpu(dqkv, scratch, dout, att, qkv, B, L, C, NH, drop);
}

static void ct_cpu_ops__mask_token_forward(ct_ops_t *o, float *out, const float *inp,
                                           const float *token, const int32_t *mask, int N, int C)
{
    (void)o;
    ct_mask_token_forward_cpu(out, inp, token, mask, N, C);
}

static void ct_cpu_ops__mask_token_backward(ct_ops_t *o, float *dinp, float *dtoken,
                                            const float *dout, const int32_t *mask, int N, int C)
{
    (void)o;
    ct_mask_token_backward_cpu(dinp, dtoken, dout, mask, N, C);
}

static void ct_cpu_ops__masked_mse(ct_ops_t *o, float *loss, float *dpred, const float *pred,
                                   const float *target, const int32_t *mask, int N, int P,
                                   float count)
{
    (void)o;
    ct_masked_mse_cpu(loss, dpred, pred, target, mask, N, P, count);
}

static void ct_cpu_ops__query_attention_forward(ct_ops_t *o, float *out, float *att, const float *q,
                                                const float *k, const float *v, int B, int K, int L,
                                                int C, int NH)
{
    (void)o;
    ct_query_attention_forward_cpu(out, att, q, k, v, B, K, L, C, NH);
}

static void ct_cpu_ops__query_attention_backward(ct_ops_t *o, float *dq, float *dk, float *dv,
                                                 const float *dout, const float *att,
                                                 const float *q, const float *k, const float *v,
                                                 int B, int K, int L, int C, int NH)
{
    (void)o;
    ct_query_attention_backward_cpu(dq, dk, dv, dout, att, q, k, v, B, K, L, C, NH);
}

static void ct_cpu_ops__bpr_loss(ct_ops_t *o, float *loss, float *du, float *dvpn,
                                 const float *user, const float *item, const float *proj,
                                 const int32_t *idx, int B, int D, float count, float lambda)
{
    (void)o;
    ct_bpr_loss_cpu(loss, du, dvpn, user, item, proj, idx, B, D, count, lambda);
}

static void ct_cpu_ops__mean_pool_forward(ct_ops_t *o, float *out, const float *h,
                                          const int32_t *len, int N, int L, int C)
{
    (void)o;
    ct_mean_pool_forward_cpu(out, h, len, N, L, C);
}

static void ct_cpu_ops__mean_pool_backward(ct_ops_t *o, float *dh, const float *dout,
                                           const int32_t *len, int N, int L, int C)
{
    (void)o;
    ct_mean_pool_backward_cpu(dh, dout, len, N, L, C);
}

void ct_ops_cpu_init(ct_ops_t *o)
{
    *o = (ct_ops_t){
        .name = "cpu",
        .host_memory = true,
        .alloc = ct_cpu_ops__cpu_alloc,
        .release = ct_cpu_ops__cpu_release,
        .zero = ct_cpu_ops__cpu_zero,
        .copy = ct_cpu_ops__cpu_copy,
        .sync = ct_cpu_ops__cpu_sync,
        .attention_scratch = ct_cpu_ops__cpu_attention_scratch,
        .scratch = ct_cpu_ops__cpu_scratch,
        .close = ct_cpu_ops__cpu_close,
        .dropout = ct_cpu_ops__dropout,
        .timeline_mask = ct_cpu_ops__timeline_mask,
        .embed_forward = ct_cpu_ops__embed_forward,
        .embed_backward = ct_cpu_ops__embed_backward,
        .layernorm_forward = ct_cpu_ops__layernorm_forward,
        .layernorm_backward = ct_cpu_ops__layernorm_backward,
        .linear_forward = ct_cpu_ops__linear_forward,
        .linear_backward = ct_cpu_ops__linear_backward,
        .conv1d_forward = ct_cpu_ops__conv1d_forward,
        .conv1d_backward = ct_cpu_ops__conv1d_backward,
        .qkv_forward = ct_cpu_ops__qkv_forward,
        .qkv_backward = ct_cpu_ops__qkv_backward,
        .attention_forward = ct_cpu_ops__attention_forward,
        .attention_backward = ct_cpu_ops__attention_backward,
        .relu_forward = ct_cpu_ops__relu_forward,
        .relu_backward = ct_cpu_ops__relu_backward,
        .residual_forward = ct_cpu_ops__residual_forward,
        .residual_backward = ct_cpu_ops__residual_backward,
        .score_forward = ct_cpu_ops__score_forward,
        .score_backward = ct_cpu_ops__score_backward,
        .bce_loss = ct_cpu_ops__bce_loss,
        .l2_penalty = ct_cpu_ops__l2_penalty,
        .adam_update = ct_cpu_ops__adam_update,
        .sumsq = ct_cpu_ops__sumsq,
        .score_candidates = ct_cpu_ops__score_candidates,
        .score_all = ct_cpu_ops__score_all,
        .rows_broadcast_forward = ct_cpu_ops__rows_broadcast_forward,
        .rows_broadcast_backward = ct_cpu_ops__rows_broadcast_backward,
        .tisas_attention_forward = ct_cpu_ops__tisas_attention_forward,
        .tisas_attention_backward = ct_cpu_ops__tisas_attention_backward,
        .tisas_mask = ct_cpu_ops__tisas_mask,
        .sinkhorn_forward = ct_cpu_ops__sinkhorn_forward,
        .sinkhorn_backward = ct_cpu_ops__sinkhorn_backward,
        .mhc_coeffs_forward = ct_cpu_ops__mhc_coeffs_forward,
        .mhc_coeffs_backward = ct_cpu_ops__mhc_coeffs_backward,
        .mhc_pre_forward = ct_cpu_ops__mhc_pre_forward,
        .mhc_pre_backward = ct_cpu_ops__mhc_pre_backward,
        .mhc_post_forward = ct_cpu_ops__mhc_post_forward,
        .mhc_post_backward = ct_cpu_ops__mhc_post_backward,
        .mhc_expand_forward = ct_cpu_ops__mhc_expand_forward,
        .mhc_expand_backward = ct_cpu_ops__mhc_expand_backward,
        .mhc_collapse_forward = ct_cpu_ops__mhc_collapse_forward,
        .mhc_collapse_backward = ct_cpu_ops__mhc_collapse_backward,
        .ce_loss = ct_cpu_ops__ce_loss,
        .sampled_ce_loss = ct_cpu_ops__sampled_ce_loss,
        .rmsnorm_forward = ct_cpu_ops__rmsnorm_forward,
        .rmsnorm_backward = ct_cpu_ops__rmsnorm_backward,
        .gelu_forward = ct_cpu_ops__gelu_forward,
        .gelu_backward = ct_cpu_ops__gelu_backward,
        .swiglu_forward = ct_cpu_ops__swiglu_forward,
        .swiglu_backward = ct_cpu_ops__swiglu_backward,
        .rope_forward = ct_cpu_ops__rope_forward,
        .rope_backward = ct_cpu_ops__rope_backward,
        .gqa_attention_forward = ct_cpu_ops__gqa_attention_forward,
        .gqa_attention_backward = ct_cpu_ops__gqa_attention_backward,
        .lm_embed_forward = ct_cpu_ops__lm_embed_forward,
        .lm_embed_backward = ct_cpu_ops__lm_embed_backward,
        .lm_ce_loss = ct_cpu_ops__lm_ce_loss,
        .scale = ct_cpu_ops__scale,
        .enc_attention_forward = ct_cpu_ops__enc_attention_forward,
        .enc_attention_backward = ct_cpu_ops__enc_attention_backward,
        .mask_token_forward = ct_cpu_ops__mask_token_forward,
        .mask_token_backward = ct_cpu_ops__mask_token_backward,
        .masked_mse = ct_cpu_ops__masked_mse,
        .query_attention_forward = ct_cpu_ops__query_attention_forward,
        .query_attention_backward = ct_cpu_ops__query_attention_backward,
        .bpr_loss = ct_cpu_ops__bpr_loss,
        .mean_pool_forward = ct_cpu_ops__mean_pool_forward,
        .mean_pool_backward = ct_cpu_ops__mean_pool_backward,
    };
}
