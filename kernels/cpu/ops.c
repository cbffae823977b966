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

static int ct__cpu_alloc(ct_ops_t *o, void **p, size_t nbytes)
{
    (void)o;
    /* aligned_alloc wants a size that is a multiple of the alignment. */
    size_t n = (nbytes + 63) / 64 * 64;
    *p = aligned_alloc(64, n ? n : 64);
    return *p ? 0 : -ENOMEM;
}

static void ct__cpu_release(ct_ops_t *o, void *p)
{
    (void)o;
    free(p);
}

static void ct__cpu_zero(ct_ops_t *o, void *p, size_t nbytes)
{
    (void)o;
    memset(p, 0, nbytes);
}

static void ct__cpu_copy(ct_ops_t *o, void *dst, const void *src, size_t nbytes,
                         ct_copy_kind_t kind)
{
    (void)o, (void)kind;
    if (dst != src && nbytes > 0)
        memmove(dst, src, nbytes);
}

static int ct__cpu_sync(ct_ops_t *o)
{
    return ct_ops_status(o);
}

static size_t ct__cpu_attention_scratch(ct_ops_t *o, int B, int L, int NH, ct_att_scratch_t which)
{
    (void)o, (void)B, (void)NH;
    return which == CT_ATT_SCRATCH_FWD ? CT_ATTENTION_FWD_SCRATCH(L) : CT_ATTENTION_BWD_SCRATCH(L);
}

/* ---- ops ----------------------------------------------------------------------------------- */

static void ct__dropout(ct_ops_t *o, float *out, const float *inp, int64_t n, ct_dropout_t d)
{
    (void)o;
    ct_dropout_cpu(out, inp, n, d);
}

static void ct__timeline_mask(ct_ops_t *o, float *out, const float *inp, const int32_t *seq, int N,
                              int C)
{
    (void)o;
    ct_timeline_mask_cpu(out, inp, seq, N, C);
}

static void ct__embed_forward(ct_ops_t *o, float *out, const float *wte, const float *wpe,
                              const int32_t *seq, int B, int L, int C, float scale,
                              ct_pos_mode_t pm)
{
    (void)o;
    ct_embed_forward_cpu(out, wte, wpe, seq, B, L, C, scale, pm);
}

static void ct__embed_backward(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                               const int32_t *seq, int B, int L, int C, float scale,
                               ct_pos_mode_t pm)
{
    (void)o;
    ct_embed_backward_cpu(dwte, dwpe, dout, seq, B, L, C, scale, pm);
}

static void ct__layernorm_forward(ct_ops_t *o, float *out, float *mean, float *rstd,
                                  const float *inp, const float *w, const float *b, int N, int C,
                                  float eps)
{
    (void)o;
    ct_layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C, eps);
}

static void ct__layernorm_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                   const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, int N, int C)
{
    (void)o;
    ct_layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

static void ct__linear_forward(ct_ops_t *o, float *out, const float *inp, const float *w,
                               const float *b, int N, int IC, int OC)
{
    (void)o;
    ct_linear_forward_cpu(out, inp, w, b, N, IC, OC);
}

static void ct__linear_backward(ct_ops_t *o, float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, int N, int IC, int OC)
{
    (void)o;
    ct_linear_backward_cpu(dinp, dw, db, dout, inp, w, N, IC, OC);
}

static void ct__qkv_forward(ct_ops_t *o, float *qkv, const float *xq, const float *xkv,
                            const float *w, const float *b, int N, int C)
{
    (void)o;
    ct_qkv_forward_cpu(qkv, xq, xkv, w, b, N, C);
}

static void ct__qkv_backward(ct_ops_t *o, float *dxq, float *dxkv, float *dw, float *db,
                             const float *dqkv, const float *xq, const float *xkv, const float *w,
                             int N, int C)
{
    (void)o;
    ct_qkv_backward_cpu(dxq, dxkv, dw, db, dqkv, xq, xkv, w, N, C);
}

static void ct__attention_forward(ct_ops_t *o, float *out, float *att, float *scratch,
                                  const float *qkv, const int32_t *qmask, int B, int L, int C,
                                  int NH, ct_dropout_t d)
{
    (void)o;
    ct_attention_forward_cpu(out, att, scratch, qkv, qmask, B, L, C, NH, d);
}

static void ct__attention_backward(ct_ops_t *o, float *dqkv, float *scratch, const float *dout,
                                   const float *att, const float *qkv, const int32_t *qmask, int B,
                                   int L, int C, int NH, ct_dropout_t d)
{
    (void)o;
    ct_attention_backward_cpu(dqkv, scratch, dout, att, qkv, qmask, B, L, C, NH, d);
}

static void ct__relu_forward(ct_ops_t *o, float *out, const float *inp, int64_t n)
{
    (void)o;
    ct_relu_forward_cpu(out, inp, n);
}

static void ct__relu_backward(ct_ops_t *o, float *dinp, const float *dout, const float *out,
                              int64_t n)
{
    (void)o;
    ct_relu_backward_cpu(dinp, dout, out, n);
}

static void ct__residual_forward(ct_ops_t *o, float *out, const float *a, const float *b, int64_t n)
{
    (void)o;
    ct_residual_forward_cpu(out, a, b, n);
}

static void ct__residual_backward(ct_ops_t *o, float *da, float *db, const float *dout, int64_t n)
{
    (void)o;
    ct_residual_backward_cpu(da, db, dout, n);
}

static void ct__score_forward(ct_ops_t *o, float *logits, const float *feats, const float *wte,
                              const int32_t *ids, int N, int C)
{
    (void)o;
    ct_score_forward_cpu(logits, feats, wte, ids, N, C);
}

static void ct__score_backward(ct_ops_t *o, float *dfeats, float *dwte, const float *dlogits,
                               const float *feats, const float *wte, const int32_t *ids, int N,
                               int C)
{
    (void)o;
    ct_score_backward_cpu(dfeats, dwte, dlogits, feats, wte, ids, N, C);
}

static void ct__bce_loss(ct_ops_t *o, float *loss, float *dpos, float *dneg, const float *pl,
                         const float *nl, const int32_t *pos, int N, float count)
{
    (void)o;
    ct_bce_loss_cpu(loss, dpos, dneg, pl, nl, pos, N, count);
}

static void ct__l2_penalty(ct_ops_t *o, float *penalty, float *dw, const float *w, int64_t n,
                           float lambda, ct_l2_mode_t mode)
{
    (void)o;
    ct_l2_penalty_cpu(penalty, dw, w, n, lambda, mode);
}

static void ct__adam_update(ct_ops_t *o, float *params, float *m, float *v, const float *grads,
                            int64_t n, double lr, double beta1, double beta2, double eps,
                            float grad_scale, int64_t step)
{
    (void)o;
    ct_adam_update_cpu(params, m, v, grads, n, lr, beta1, beta2, eps, grad_scale, step);
}

static void ct__sumsq(ct_ops_t *o, float *out, const float *x, int64_t n)
{
    (void)o;
    ct_sumsq_cpu(out, x, n);
}

static void ct__score_candidates(ct_ops_t *o, float *scores, const float *feats, const float *wte,
                                 const int32_t *cand, int U, int K, int C, int ldf)
{
    (void)o;
    ct_score_candidates_cpu(scores, feats, wte, cand, U, K, C, ldf);
}

static void ct__score_all(ct_ops_t *o, float *scores, const float *feats, const float *wte, int U,
                          int V, int C, int ldf)
{
    (void)o;
    ct_score_all_cpu(scores, feats, wte, U, V, C, ldf);
}

void ct_ops_cpu_init(ct_ops_t *o)
{
    *o = (ct_ops_t){
        .name = "cpu",
        .host_memory = true,
        .alloc = ct__cpu_alloc,
        .release = ct__cpu_release,
        .zero = ct__cpu_zero,
        .copy = ct__cpu_copy,
        .sync = ct__cpu_sync,
        .attention_scratch = ct__cpu_attention_scratch,
        .dropout = ct__dropout,
        .timeline_mask = ct__timeline_mask,
        .embed_forward = ct__embed_forward,
        .embed_backward = ct__embed_backward,
        .layernorm_forward = ct__layernorm_forward,
        .layernorm_backward = ct__layernorm_backward,
        .linear_forward = ct__linear_forward,
        .linear_backward = ct__linear_backward,
        .qkv_forward = ct__qkv_forward,
        .qkv_backward = ct__qkv_backward,
        .attention_forward = ct__attention_forward,
        .attention_backward = ct__attention_backward,
        .relu_forward = ct__relu_forward,
        .relu_backward = ct__relu_backward,
        .residual_forward = ct__residual_forward,
        .residual_backward = ct__residual_backward,
        .score_forward = ct__score_forward,
        .score_backward = ct__score_backward,
        .bce_loss = ct__bce_loss,
        .l2_penalty = ct__l2_penalty,
        .adam_update = ct__adam_update,
        .sumsq = ct__sumsq,
        .score_candidates = ct__score_candidates,
        .score_all = ct__score_all,
    };
}
