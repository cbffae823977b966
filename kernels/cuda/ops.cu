/*
 * ops.cu - the CUDA backend of the dispatch table (ct_ops.h): one stream and one cuBLAS context
 * per table, device memory, and forwarders to the ct_*_cuda twins. Each forwarder latches the
 * first failing launcher's code into o->status (the model checks it once per step through
 * sync) and adds no arithmetic of its own, so a model run through this table computes what the
 * CUDA twins compute.
 *
 * The table owns the scratch that the CUDA twins need beyond what the model passes: partial
 * sums of layernorm's weight gradients, the sorted item scatter of the embedding and score
 * backwards (the deterministic path: the CPU's order of additions into each item row), and the
 * double partials of the reductions. Their sizes depend on the batch, so the general scratch
 * grows on first use (a cudaFree waits for queued work; that happens in the first step only).
 *
 * Copies: host to device are stream-ordered (pageable sources are staged by the driver before
 * the call returns, so callers may reuse their buffer at once); device to host wait for the
 * stream, so the host value is valid when copy returns (the model reads losses and the trainer
 * reads the loss slot right after).
 *
 * Mixed precision (amp) is the context's: bf16 factors in the matrix products only.
 *
 * Not here: which device a process uses (the trainer's --device and LOCAL_RANK), multi-GPU
 * communication (libctworker's NCCL communicator).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cuda_common.h"
#include "ct_ops.h"

/* A buffer alloc() gave, with its size. */
typedef struct ct_cuda_ops__held {
    void *p;
    size_t nbytes;
} ct_cuda_ops__held_t;

typedef struct ct_cuda_ops__cuda_ops {
    int device;
    cudaStream_t stream;
    ct_cuda_ctx_t ctx;
    double *partials; /* CT_REDUCE_CUDA_PARTS doubles for the reductions */
    void *scratch;    /* general scratch, grown on demand */
    size_t scratch_nbytes;
    ct_cuda_ops__held_t *held; /* what alloc() gave and release() has not taken back */
    size_t n_held, cap_held;
} ct_cuda_ops__cuda_ops_t;

static ct_cuda_ops__cuda_ops_t *ct_cuda_ops__st(ct_ops_t *o)
{
    return (ct_cuda_ops__cuda_ops_t *)o->impl;
}

static void ct_cuda_ops__latch(ct_ops_t *o, int rc)
{
    if (rc != 0 && o->status == 0)
        o->status = rc;
}

static void ct_cuda_ops__latch_cuda(ct_ops_t *o, cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        ct_log_error("CUDA backend: %s: %s", what, cudaGetErrorString(e));
        ct_cuda_ops__latch(o, CT_ECUDA);
    }
}

/* o->mem_live grows (add) or shrinks by nbytes; o->mem_peak follows. */
static void ct_cuda_ops__count(ct_ops_t *o, size_t nbytes, bool add)
{
    o->mem_live = add ? o->mem_live + nbytes : o->mem_live - nbytes;
    if (o->mem_live > o->mem_peak)
        o->mem_peak = o->mem_live;
}

/* The general scratch, at least nbytes; NULL (and a latched error) when it cannot grow. */
static void *ct_cuda_ops__scratch(ct_ops_t *o, size_t nbytes)
{
    ct_cuda_ops__cuda_ops_t *st = ct_cuda_ops__st(o);
    if (nbytes <= st->scratch_nbytes)
        return st->scratch;
    if (st->scratch) {
        ct_cuda_ops__latch_cuda(o, cudaFree(st->scratch), "cudaFree(scratch)");
        ct_cuda_ops__count(o, st->scratch_nbytes, false);
        st->scratch = NULL, st->scratch_nbytes = 0;
    }
    size_t want = nbytes + nbytes / 2; /* room for a larger batch without another round */
    cudaError_t e = cudaMalloc(&st->scratch, want);
    if (e != cudaSuccess) {
        st->scratch = NULL;
        ct_cuda_ops__latch_cuda(o, e, "cudaMalloc(scratch)");
        return NULL;
    }
    st->scratch_nbytes = want;
    ct_cuda_ops__count(o, want, true);
    return st->scratch;
}

/* ---- memory -------------------------------------------------------------------------------- */

static int ct_cuda_ops__alloc(ct_ops_t *o, void **p, size_t nbytes)
{
    ct_cuda_ops__cuda_ops_t *st = ct_cuda_ops__st(o);
    if (st->n_held == st->cap_held) {
        const size_t cap = st->cap_held ? 2 * st->cap_held : 64;
        ct_cuda_ops__held_t *h = (ct_cuda_ops__held_t *)realloc(st->held, cap * sizeof *h);
        if (!h) {
            *p = NULL;
            return -ENOMEM;
        }
        st->held = h, st->cap_held = cap;
    }
    const size_t n = nbytes ? nbytes : 256;
    cudaError_t e = cudaMalloc(p, n);
    if (e != cudaSuccess) {
        *p = NULL;
        ct_log_error("CUDA backend: cudaMalloc(%zu bytes): %s", nbytes, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? -ENOMEM : CT_ECUDA;
    }
    st->held[st->n_held++] = {*p, n};
    ct_cuda_ops__count(o, n, true);
    return 0;
}

static void ct_cuda_ops__release(ct_ops_t *o, void *p)
{
    if (!p)
        return;
    ct_cuda_ops__cuda_ops_t *st = ct_cuda_ops__st(o);
    for (size_t i = st->n_held; i-- > 0;) /* the latest first: buffers go in reverse order */
        if (st->held[i].p == p) {
            ct_cuda_ops__count(o, st->held[i].nbytes, false);
            st->held[i] = st->held[--st->n_held];
            break;
        }
    ct_cuda_ops__latch_cuda(o, cudaFree(p), "cudaFree");
}

static void ct_cuda_ops__zero(ct_ops_t *o, void *p, size_t nbytes)
{
    if (nbytes)
        ct_cuda_ops__latch_cuda(o, cudaMemsetAsync(p, 0, nbytes, ct_cuda_ops__st(o)->stream),
                                "cudaMemsetAsync");
}

static void ct_cuda_ops__copy(ct_ops_t *o, void *dst, const void *src, size_t nbytes,
                              ct_copy_kind_t kind)
{
    if (nbytes == 0 || dst == src)
        return;
    cudaStream_t s = ct_cuda_ops__st(o)->stream;
    enum cudaMemcpyKind k = kind == CT_COPY_H2D   ? cudaMemcpyHostToDevice
                            : kind == CT_COPY_D2H ? cudaMemcpyDeviceToHost
                                                  : cudaMemcpyDeviceToDevice;
    ct_cuda_ops__latch_cuda(o, cudaMemcpyAsync(dst, src, nbytes, k, s), "cudaMemcpyAsync");
    if (kind == CT_COPY_D2H)
        ct_cuda_ops__latch_cuda(o, cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

static int ct_cuda_ops__sync(ct_ops_t *o)
{
    ct_cuda_ops__latch_cuda(o, cudaStreamSynchronize(ct_cuda_ops__st(o)->stream),
                            "cudaStreamSynchronize");
    return ct_ops_status(o);
}

static size_t ct_cuda_ops__attention_scratch(ct_ops_t *o, int B, int L, int NH,
                                             ct_att_scratch_t which)
{
    (void)o;
    return which == CT_ATT_SCRATCH_FWD ? CT_ATTENTION_FWD_CUDA_SCRATCH(B, L, NH)
                                       : CT_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH);
}

static size_t ct_cuda_ops__scratch_size(ct_ops_t *o, ct_scratch_op_t op, int64_t a, int64_t b,
                                        int64_t c, int64_t rows)
{
    (void)o;
    switch (op) {
    case CT_SCRATCH_TISAS_FWD:
        return 0;
    case CT_SCRATCH_TISAS_BWD:
        return CT_TISAS_ATTENTION_BWD_CUDA_SCRATCH(rows / (a > 0 ? a : 1), a, c);
    case CT_SCRATCH_SINKHORN_BWD:
        return CT_SINKHORN_BWD_CUDA_SCRATCH(rows, a, b);
    case CT_SCRATCH_MHC_COEFFS_BWD:
        return CT_MHC_COEFFS_BWD_CUDA_SCRATCH(a, b, c);
    case CT_SCRATCH_CE:
        return CT_CE_CUDA_SCRATCH(rows, a);
    case CT_SCRATCH_SAMPLED_CE:
        return CT_SAMPLED_CE_CUDA_SCRATCH(rows, b);
    case CT_SCRATCH_GQA_BWD:
        return CT_GQA_BWD_CUDA_SCRATCH(a, b, c);
    }
    return 0;
}

static void ct_cuda_ops__close(ct_ops_t *o)
{
    ct_cuda_ops__cuda_ops_t *st = ct_cuda_ops__st(o);
    if (!st)
        return;
    ct_cuda_ctx_close(&st->ctx); /* waits for the stream */
    if (st->partials)
        (void)cudaFree(st->partials);
    if (st->scratch)
        (void)cudaFree(st->scratch);
    if (st->stream)
        (void)cudaStreamDestroy(st->stream);
    free(st->held);
    free(st);
    o->impl = NULL;
    o->stream = NULL;
}

/* ---- ops ----------------------------------------------------------------------------------- */

#define CT__S (ct_cuda_ops__st(o)->stream)
#define CT__C (&ct_cuda_ops__st(o)->ctx)

static void ct_cuda_ops__dropout(ct_ops_t *o, float *out, const float *inp, int64_t n,
                                 ct_dropout_t d)
{
    ct_cuda_ops__latch(o, ct_dropout_cuda(out, inp, n, d, CT__S));
}

static void ct_cuda_ops__timeline_mask(ct_ops_t *o, float *out, const float *inp,
                                       const int32_t *seq, int N, int C)
{
    ct_cuda_ops__latch(o, ct_timeline_mask_cuda(out, inp, seq, N, C, CT__S));
}

static void ct_cuda_ops__embed_forward(ct_ops_t *o, float *out, const float *wte, const float *wpe,
                                       const int32_t *seq, int B, int L, int C, float scale,
                                       ct_pos_mode_t pm)
{
    ct_cuda_ops__latch(o, ct_embed_forward_cuda(out, wte, wpe, seq, B, L, C, scale, pm, CT__S));
}

static void ct_cuda_ops__embed_backward(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                                        const int32_t *seq, int B, int L, int C, float scale,
                                        ct_pos_mode_t pm)
{
    size_t nb = 0;
    int rc = ct_embed_backward_cuda_scratch(&nb, B, L);
    void *sc = rc == 0 ? ct_cuda_ops__scratch(o, nb) : NULL;
    if (rc != 0 || !sc)
        return ct_cuda_ops__latch(o, rc != 0 ? rc : CT_ECUDA);
    ct_cuda_ops__latch(
        o, ct_embed_backward_cuda(dwte, dwpe, sc, dout, seq, B, L, C, scale, pm, CT__S));
}

static void ct_cuda_ops__layernorm_forward(ct_ops_t *o, float *out, float *mean, float *rstd,
                                           const float *inp, const float *w, const float *b, int N,
                                           int C, float eps)
{
    ct_cuda_ops__latch(o, ct_layernorm_forward_cuda(out, mean, rstd, inp, w, b, N, C, eps, CT__S));
}

static void ct_cuda_ops__layernorm_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                            const float *dout, const float *inp, const float *w,
                                            const float *mean, const float *rstd, int N, int C)
{
    float *sc =
        (float *)ct_cuda_ops__scratch(o, CT_LAYERNORM_BWD_CUDA_SCRATCH(N, C) * sizeof(float));
    if (!sc)
        return;
    ct_cuda_ops__latch(
        o, ct_layernorm_backward_cuda(dinp, dw, db, sc, dout, inp, w, mean, rstd, N, C, CT__S));
}

static void ct_cuda_ops__linear_forward(ct_ops_t *o, float *out, const float *inp, const float *w,
                                        const float *b, int N, int IC, int OC)
{
    ct_cuda_ops__latch(o, ct_linear_forward_cuda(out, inp, w, b, N, IC, OC, CT__C));
}

static void ct_cuda_ops__linear_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                         const float *dout, const float *inp, const float *w, int N,
                                         int IC, int OC)
{
    ct_cuda_ops__latch(o, ct_linear_backward_cuda(dinp, dw, db, dout, inp, w, N, IC, OC, CT__C));
}

static void ct_cuda_ops__conv1d_forward(ct_ops_t *o, float *out, const float *inp, const float *w,
                                        const float *b, int N, int IC, int OC)
{
    ct_cuda_ops__latch(o, ct_conv1d_forward_cuda(out, inp, w, b, N, IC, OC, CT__C));
}

static void ct_cuda_ops__conv1d_backward(ct_ops_t *o, float *dinp, float *dw, float *db,
                                         const float *dout, const float *inp, const float *w, int N,
                                         int IC, int OC)
{
    ct_cuda_ops__latch(o, ct_conv1d_backward_cuda(dinp, dw, db, dout, inp, w, N, IC, OC, CT__C));
}

static void ct_cuda_ops__qkv_forward(ct_ops_t *o, float *qkv, const float *xq, const float *xkv,
                                     const float *w, const float *b, int N, int C)
{
    ct_cuda_ops__latch(o, ct_qkv_forward_cuda(qkv, xq, xkv, w, b, N, C, CT__C));
}

static void ct_cuda_ops__qkv_backward(ct_ops_t *o, float *dxq, float *dxkv, float *dw, float *db,
                                      const float *dqkv, const float *xq, const float *xkv,
                                      const float *w, int N, int C)
{
    ct_cuda_ops__latch(o, ct_qkv_backward_cuda(dxq, dxkv, dw, db, dqkv, xq, xkv, w, N, C, CT__C));
}

static void ct_cuda_ops__attention_forward(ct_ops_t *o, float *out, float *att, float *scratch,
                                           const float *qkv, const int32_t *qmask, int B, int L,
                                           int C, int NH, ct_dropout_t d)
{
    ct_cuda_ops__latch(
        o, ct_attention_forward_cuda(out, att, scratch, qkv, qmask, B, L, C, NH, d, CT__S));
}

static void ct_cuda_ops__attention_backward(ct_ops_t *o, float *dqkv, float *scratch,
                                            const float *dout, const float *att, const float *qkv,
                                            const int32_t *qmask, int B, int L, int C, int NH,
                                            ct_dropout_t d)
{
    ct_cuda_ops__latch(
        o, ct_attention_backward_cuda(dqkv, scratch, dout, att, qkv, qmask, B, L, C, NH, d, CT__S));
}

static void ct_cuda_ops__relu_forward(ct_ops_t *o, float *out, const float *inp, int64_t n)
{
    ct_cuda_ops__latch(o, ct_relu_forward_cuda(out, inp, n, CT__S));
}

static void ct_cuda_ops__relu_backward(ct_ops_t *o, float *dinp, const float *dout,
                                       const float *out, int64_t n)
{
    ct_cuda_ops__latch(o, ct_relu_backward_cuda(dinp, dout, out, n, CT__S));
}

static void ct_cuda_ops__residual_forward(ct_ops_t *o, float *out, const float *a, const float *b,
                                          int64_t n)
{
    ct_cuda_ops__latch(o, ct_residual_forward_cuda(out, a, b, n, CT__S));
}

static void ct_cuda_ops__residual_backward(ct_ops_t *o, float *da, float *db, const float *dout,
                                           int64_t n)
{
    ct_cuda_ops__latch(o, ct_residual_backward_cuda(da, db, dout, n, CT__S));
}

static void ct_cuda_ops__score_forward(ct_ops_t *o, float *logits, const float *feats,
                                       const float *wte, const int32_t *ids, int N, int C)
{
    ct_cuda_ops__latch(o, ct_score_forward_cuda(logits, feats, wte, ids, N, C, CT__S));
}

static void ct_cuda_ops__score_backward(ct_ops_t *o, float *dfeats, float *dwte,
                                        const float *dlogits, const float *feats, const float *wte,
                                        const int32_t *ids, int N, int C)
{
    size_t nb = 0;
    int rc = ct_score_backward_cuda_scratch(&nb, N);
    void *sc = rc == 0 ? ct_cuda_ops__scratch(o, nb) : NULL;
    if (rc != 0 || !sc)
        return ct_cuda_ops__latch(o, rc != 0 ? rc : CT_ECUDA);
    ct_cuda_ops__latch(
        o, ct_score_backward_cuda(dfeats, dwte, sc, dlogits, feats, wte, ids, N, C, CT__S));
}

static void ct_cuda_ops__bce_loss(ct_ops_t *o, float *loss, float *dpos, float *dneg,
                                  const float *pl, const float *nl, const int32_t *pos, int N,
                                  float count)
{
    ct_cuda_ops__latch(o, ct_bce_loss_cuda(loss, dpos, dneg, ct_cuda_ops__st(o)->partials, pl, nl,
                                           pos, N, count, CT__S));
}

static void ct_cuda_ops__l2_penalty(ct_ops_t *o, float *penalty, float *dw, const float *w,
                                    int64_t n, float lambda, ct_l2_mode_t mode)
{
    ct_cuda_ops__latch(o, ct_l2_penalty_cuda(penalty, dw, ct_cuda_ops__st(o)->partials, w, n,
                                             lambda, mode, CT__S));
}

static void ct_cuda_ops__adam_update(ct_ops_t *o, float *params, float *m, float *v,
                                     const float *grads, int64_t n, double lr, double b1, double b2,
                                     double eps, float gs, int64_t step)
{
    ct_cuda_ops__latch(
        o, ct_adam_update_cuda(params, m, v, grads, n, lr, b1, b2, eps, gs, step, CT__S));
}

static void ct_cuda_ops__sumsq(ct_ops_t *o, float *out, const float *x, int64_t n)
{
    ct_cuda_ops__latch(o, ct_sumsq_cuda(out, ct_cuda_ops__st(o)->partials, x, n, CT__S));
}

static void ct_cuda_ops__score_candidates(ct_ops_t *o, float *scores, const float *feats,
                                          const float *wte, const int32_t *cand, int U, int K,
                                          int C, int ldf)
{
    ct_cuda_ops__latch(o, ct_score_candidates_cuda(scores, feats, wte, cand, U, K, C, ldf, CT__S));
}

static void ct_cuda_ops__score_all(ct_ops_t *o, float *scores, const float *feats, const float *wte,
                                   int U, int V, int C, int ldf)
{
    ct_cuda_ops__latch(o, ct_score_all_cuda(scores, feats, wte, U, V, C, ldf, CT__C));
}

static void ct_cuda_ops__rows_broadcast_forward(ct_ops_t *o, float *out, const float *table, int B,
                                                int L, int C)
{
    ct_cuda_ops__latch(o, ct_rows_broadcast_forward_cuda(out, table, B, L, C, CT__S));
}

static void ct_cuda_ops__rows_broadcast_backward(ct_ops_t *o, float *dtable, const float *dout,
                                                 int B, int L, int C)
{
    ct_cuda_ops__latch(o, ct_rows_broadcast_backward_cuda(dtable, dout, B, L, C, CT__S));
}

static void ct_cuda_ops__tisas_attention_forward(ct_ops_t *o, float *out, float *att,
                                                 float *scratch, const float *q, const float *k,
                                                 const float *v, const float *rk, const float *rv,
                                                 const int64_t *tseq, const int32_t *qmask, int B,
                                                 int L, int C, int NH, int T, ct_dropout_t da,
                                                 const uint32_t *mrk, const uint32_t *mrv,
                                                 float p_rkv)
{
    ct_cuda_ops__latch(o, ct_tisas_attention_forward_cuda(out, att, scratch, q, k, v, rk, rv, tseq,
                                                          qmask, B, L, C, NH, T, da, mrk, mrv,
                                                          p_rkv, CT__S));
}

static void ct_cuda_ops__tisas_attention_backward(
    ct_ops_t *o, float *dq, float *dk, float *dv, float *drk, float *drv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k, const float *v,
    const float *rk, const float *rv, const int64_t *tseq, const int32_t *qmask, int B, int L,
    int C, int NH, int T, ct_dropout_t da, const uint32_t *mrk, const uint32_t *mrv, float p_rkv)
{
    ct_cuda_ops__latch(o, ct_tisas_attention_backward_cuda(dq, dk, dv, drk, drv, scratch, dout, att,
                                                           q, k, v, rk, rv, tseq, qmask, B, L, C,
                                                           NH, T, da, mrk, mrv, p_rkv, CT__S));
}

static void ct_cuda_ops__tisas_mask(ct_ops_t *o, uint32_t *bits, const int32_t *qmask, int B, int L,
                                    int C, ct_dropout_t d)
{
    ct_cuda_ops__latch(o, ct_tisas_mask_cuda(bits, qmask, B, L, C, d, CT__S));
}

static void ct_cuda_ops__sinkhorn_forward(ct_ops_t *o, float *out, const float *logits, int M,
                                          int n, int iters)
{
    ct_cuda_ops__latch(o, ct_sinkhorn_forward_cuda(out, logits, M, n, iters, CT__S));
}

static void ct_cuda_ops__sinkhorn_backward(ct_ops_t *o, float *dlogits, float *scratch,
                                           const float *dout, const float *logits, int M, int n,
                                           int iters)
{
    ct_cuda_ops__latch(
        o, ct_sinkhorn_backward_cuda(dlogits, scratch, dout, logits, M, n, iters, CT__S));
}

static void ct_cuda_ops__mhc_coeffs_forward(ct_ops_t *o, float *hpre, float *hpost, float *hres,
                                            float *proj, float *rstd, const float *X,
                                            const float *phi, const float *alpha, const float *bias,
                                            int N, int n, int C, int iters, float eps)
{
    ct_cuda_ops__latch(o, ct_mhc_coeffs_forward_cuda(hpre, hpost, hres, proj, rstd, X, phi, alpha,
                                                     bias, N, n, C, iters, eps, CT__C));
}

static void ct_cuda_ops__mhc_coeffs_backward(ct_ops_t *o, float *dX, float *dphi, float *dalpha,
                                             float *dbias, float *scratch, const float *dhpre,
                                             const float *dhpost, const float *dhres,
                                             const float *X, const float *phi, const float *alpha,
                                             const float *bias, const float *proj,
                                             const float *rstd, int N, int n, int C, int iters)
{
    ct_cuda_ops__latch(o, ct_mhc_coeffs_backward_cuda(dX, dphi, dalpha, dbias, scratch, dhpre,
                                                      dhpost, dhres, X, phi, alpha, bias, proj,
                                                      rstd, N, n, C, iters, CT__C));
}

static void ct_cuda_ops__mhc_pre_forward(ct_ops_t *o, float *u, const float *X, const float *hpre,
                                         int N, int n, int C)
{
    ct_cuda_ops__latch(o, ct_mhc_pre_forward_cuda(u, X, hpre, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_pre_backward(ct_ops_t *o, float *dX, float *dhpre, const float *du,
                                          const float *X, const float *hpre, int N, int n, int C)
{
    ct_cuda_ops__latch(o, ct_mhc_pre_backward_cuda(dX, dhpre, du, X, hpre, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_post_forward(ct_ops_t *o, float *Y, const float *X, const float *f,
                                          const float *hres, const float *hpost, int N, int n,
                                          int C)
{
    ct_cuda_ops__latch(o, ct_mhc_post_forward_cuda(Y, X, f, hres, hpost, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_post_backward(ct_ops_t *o, float *dX, float *df, float *dhres,
                                           float *dhpost, const float *dY, const float *X,
                                           const float *f, const float *hres, const float *hpost,
                                           int N, int n, int C)
{
    ct_cuda_ops__latch(
        o, ct_mhc_post_backward_cuda(dX, df, dhres, dhpost, dY, X, f, hres, hpost, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_expand_forward(ct_ops_t *o, float *X, const float *x, int N, int n,
                                            int C)
{
    ct_cuda_ops__latch(o, ct_mhc_expand_forward_cuda(X, x, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_expand_backward(ct_ops_t *o, float *dx, const float *dX, int N, int n,
                                             int C)
{
    ct_cuda_ops__latch(o, ct_mhc_expand_backward_cuda(dx, dX, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_collapse_forward(ct_ops_t *o, float *x, const float *X, int N, int n,
                                              int C)
{
    ct_cuda_ops__latch(o, ct_mhc_collapse_forward_cuda(x, X, N, n, C, CT__S));
}

static void ct_cuda_ops__mhc_collapse_backward(ct_ops_t *o, float *dX, const float *dx, int N,
                                               int n, int C)
{
    ct_cuda_ops__latch(o, ct_mhc_collapse_backward_cuda(dX, dx, N, n, C, CT__S));
}

static void ct_cuda_ops__ce_loss(ct_ops_t *o, float *loss, float *dfeats, float *dwte,
                                 float *scratch, const float *feats, const float *wte,
                                 const int32_t *pos, int N, int C, int V, float count)
{
    ct_cuda_ops__latch(
        o, ct_ce_loss_cuda(loss, dfeats, dwte, scratch, feats, wte, pos, N, C, V, count, CT__C));
}

static void ct_cuda_ops__sampled_ce_loss(ct_ops_t *o, float *loss, float *dfeats, float *dwte,
                                         float *scratch, const float *feats, const float *wte,
                                         const int32_t *pos, const int32_t *neg, int B, int L,
                                         int C, int M, float count)
{
    ct_cuda_ops__latch(o, ct_sampled_ce_loss_cuda(loss, dfeats, dwte, scratch, feats, wte, pos, neg,
                                                  B, L, C, M, count, CT__S));
}

/* ---- the language models ---- */

static void ct_cuda_ops__rmsnorm_forward(ct_ops_t *o, float *out, float *rstd, const float *inp,
                                         const float *w, int N, int C, float eps)
{
    ct_cuda_ops__latch(o, ct_rmsnorm_forward_cuda(out, rstd, inp, w, N, C, eps, CT__S));
}

static void ct_cuda_ops__rmsnorm_backward(ct_ops_t *o, float *dinp, float *dw, const float *dout,
                                          const float *inp, const float *w, const float *rstd,
                                          int N, int C)
{
    float *sc = (float *)ct_cuda_ops__scratch(o, CT_RMSNORM_BWD_CUDA_SCRATCH(N, C) * sizeof(float));
    if (!sc)
        return;
    ct_cuda_ops__latch(o, ct_rmsnorm_backward_cuda(dinp, dw, sc, dout, inp, w, rstd, N, C, CT__S));
}

static void ct_cuda_ops__gelu_forward(ct_ops_t *o, float *out, const float *inp, int64_t n,
                                      ct_gelu_kind_t kind)
{
    ct_cuda_ops__latch(o, ct_gelu_forward_cuda(out, inp, n, kind, CT__S));
}

static void ct_cuda_ops__gelu_backward(ct_ops_t *o, float *dinp, const float *dout,
                                       const float *inp, int64_t n, ct_gelu_kind_t kind)
{
    ct_cuda_ops__latch(o, ct_gelu_backward_cuda(dinp, dout, inp, n, kind, CT__S));
}

static void ct_cuda_ops__swiglu_forward(ct_ops_t *o, float *out, const float *gate, const float *up,
                                        int64_t n)
{
    ct_cuda_ops__latch(o, ct_swiglu_forward_cuda(out, gate, up, n, CT__S));
}

static void ct_cuda_ops__swiglu_backward(ct_ops_t *o, float *dgate, float *dup, const float *dout,
                                         const float *gate, const float *up, int64_t n)
{
    ct_cuda_ops__latch(o, ct_swiglu_backward_cuda(dgate, dup, dout, gate, up, n, CT__S));
}

static void ct_cuda_ops__rope_forward(ct_ops_t *o, float *out, const float *inp, const float *cs,
                                      const float *sn, const int32_t *pos, int N, int NH, int HD)
{
    ct_cuda_ops__latch(o, ct_rope_forward_cuda(out, inp, cs, sn, pos, N, NH, HD, CT__S));
}

static void ct_cuda_ops__rope_backward(ct_ops_t *o, float *dinp, const float *dout, const float *cs,
                                       const float *sn, const int32_t *pos, int N, int NH, int HD)
{
    ct_cuda_ops__latch(o, ct_rope_backward_cuda(dinp, dout, cs, sn, pos, N, NH, HD, CT__S));
}

static void ct_cuda_ops__gqa_attention_forward(ct_ops_t *o, float *out, float *att,
                                               const float *qkv, int B, int L, int NH, int KVH,
                                               int HD, float scale)
{
    ct_cuda_ops__latch(
        o, ct_gqa_attention_forward_cuda(out, att, qkv, B, L, NH, KVH, HD, scale, CT__C));
}

static void ct_cuda_ops__gqa_attention_backward(ct_ops_t *o, float *dqkv, float *scratch,
                                                const float *dout, const float *att,
                                                const float *qkv, int B, int L, int NH, int KVH,
                                                int HD, float scale)
{
    ct_cuda_ops__latch(o, ct_gqa_attention_backward_cuda(dqkv, scratch, dout, att, qkv, B, L, NH,
                                                         KVH, HD, scale, CT__C));
}

static void ct_cuda_ops__lm_embed_forward(ct_ops_t *o, float *out, const float *wte,
                                          const float *wpe, const int32_t *ids, const int32_t *pos,
                                          int N, int C)
{
    ct_cuda_ops__latch(o, ct_lm_embed_forward_cuda(out, wte, wpe, ids, pos, N, C, CT__S));
}

static void ct_cuda_ops__lm_embed_backward(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                                           const int32_t *ids, const int32_t *pos, int N, int C,
                                           int32_t skip_id)
{
    size_t nb = 0;
    int rc = ct_embed_backward_cuda_scratch(&nb, 1, N);
    void *sc = rc == 0 ? ct_cuda_ops__scratch(o, nb) : NULL;
    if (rc != 0 || !sc)
        return ct_cuda_ops__latch(o, rc != 0 ? rc : CT_ECUDA);
    ct_cuda_ops__latch(
        o, ct_lm_embed_backward_cuda(dwte, dwpe, sc, dout, ids, pos, N, C, skip_id, CT__S));
}

static void ct_cuda_ops__lm_ce_loss(ct_ops_t *o, float *loss, float *dfeats, float *dwte,
                                    float *scratch, const float *feats, const float *wte,
                                    const int32_t *tgt, int N, int C, int V, float count)
{
    ct_cuda_ops__latch(
        o, ct_lm_ce_loss_cuda(loss, dfeats, dwte, scratch, feats, wte, tgt, N, C, V, count, CT__C));
}

static void ct_cuda_ops__scale(ct_ops_t *o, float *x, float s, int64_t n)
{
    ct_cuda_ops__latch(o, ct_scale_cuda(x, s, n, CT__S));
}

static void ct_cuda_ops__enc_attention_forward(ct_ops_t *o, float *out, float *att, float *scratch,
                                               const float *qkv, int B, int L, int C, int NH,
                                               ct_dropout_t drop)
{
    (void)scratch; /* the CPU's; the rows are staged in shared memory */
    ct_cuda_ops__latch(o, ct_enc_attention_forward_cuda(out, att, qkv, B, L, C, NH, drop, CT__S));
}

static void ct_cuda_ops__enc_attention_backward(ct_ops_t *o, float *dqkv, float *scratch,
                                                const float *dout, const float *att,
                                                const float *qkv, int B, int L, int C, int NH,
                                                ct_dropout_t drop)
{
    (void)scratch; /* the CPU's; the table's own holds dS and the dropped probabilities */
    float *sc = (float *)ct_cuda_ops__scratch(
        o, (B > 0 ? CT_ENC_ATTENTION_BWD_CUDA_SCRATCH(B, L, NH) : 1) * sizeof(float));
    if (!sc)
        return;
    ct_cuda_ops__latch(
        o, ct_enc_attention_backward_cuda(dqkv, sc, dout, att, qkv, B, L, C, NH, drop, CT__S));
}

static void ct_cuda_ops__mask_token_forward(ct_ops_t *o, float *out, const float *inp,
                                            const float *token, const int32_t *mask, int N, int C)
{
    ct_cuda_ops__latch(o, ct_mask_token_forward_cuda(out, inp, token, mask, N, C, CT__S));
}

static void ct_cuda_ops__mask_token_backward(ct_ops_t *o, float *dinp, float *dtoken,
                                             const float *dout, const int32_t *mask, int N, int C)
{
    ct_cuda_ops__latch(o, ct_mask_token_backward_cuda(dinp, dtoken, dout, mask, N, C, CT__S));
}

static void ct_cuda_ops__masked_mse(ct_ops_t *o, float *loss, float *dpred, const float *pred,
                                    const float *target, const int32_t *mask, int N, int P,
                                    float count)
{
    double *sc = (double *)ct_cuda_ops__scratch(o, (size_t)(N > 0 ? N : 1) * sizeof(double));
    if (!sc)
        return;
    ct_cuda_ops__latch(o,
                       ct_masked_mse_cuda(loss, dpred, sc, pred, target, mask, N, P, count, CT__S));
}

static void ct_cuda_ops__query_attention_forward(ct_ops_t *o, float *out, float *att,
                                                 const float *q, const float *k, const float *v,
                                                 int B, int K, int L, int C, int NH)
{
    ct_cuda_ops__latch(o,
                       ct_query_attention_forward_cuda(out, att, q, k, v, B, K, L, C, NH, CT__S));
}

static void ct_cuda_ops__query_attention_backward(ct_ops_t *o, float *dq, float *dk, float *dv,
                                                  const float *dout, const float *att,
                                                  const float *q, const float *k, const float *v,
                                                  int B, int K, int L, int C, int NH)
{
    float *sc = (float *)ct_cuda_ops__scratch(
        o, (B > 0 ? CT_QUERY_ATTENTION_BWD_CUDA_SCRATCH(B, K, L, NH) : 1) * sizeof(float));
    if (!sc)
        return;
    ct_cuda_ops__latch(o, ct_query_attention_backward_cuda(dq, dk, dv, sc, dout, att, q, k, v, B, K,
                                                           L, C, NH, CT__S));
}

static void ct_cuda_ops__bpr_loss(ct_ops_t *o, float *loss, float *du, float *dvpn,
                                  const float *user, const float *item, const float *proj,
                                  const int32_t *idx, int B, int D, float count, float lambda)
{
    double *sc = (double *)ct_cuda_ops__scratch(o, (size_t)(B > 0 ? B : 1) * sizeof(double));
    if (!sc)
        return;
    ct_cuda_ops__latch(
        o, ct_bpr_loss_cuda(loss, du, dvpn, sc, user, item, proj, idx, B, D, count, lambda, CT__S));
}

static void ct_cuda_ops__mean_pool_forward(ct_ops_t *o, float *out, const float *h,
                                           const int32_t *len, int N, int L, int C)
{
    ct_cuda_ops__latch(o, ct_mean_pool_forward_cuda(out, h, len, N, L, C, CT__S));
}

static void ct_cuda_ops__mean_pool_backward(ct_ops_t *o, float *dh, const float *dout,
                                            const int32_t *len, int N, int L, int C)
{
    ct_cuda_ops__latch(o, ct_mean_pool_backward_cuda(dh, dout, len, N, L, C, CT__S));
}

#undef CT__S
#undef CT__C

extern "C" int ct_ops_cuda_init(ct_ops_t *o, int device, bool amp)
{
    memset(o, 0, sizeof *o);
    int count = ct_cuda_device_count();
    if (device < 0 || device >= count) {
        ct_log_error("CUDA backend: device %d asked for, %d visible", device, count);
        return CT_ENOGPU;
    }
    ct_cuda_ops__cuda_ops_t *st = (ct_cuda_ops__cuda_ops_t *)calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->device = device;
    o->impl = st;
    o->close = ct_cuda_ops__close;
    int rc = 0;
    CT_CUDA_CHECK_GOTO(cudaSetDevice(device), rc, NULL, fail);
    CT_CUDA_CHECK_GOTO(cudaStreamCreate(&st->stream), rc, NULL, fail);
    if ((rc = ct_cuda_ctx_init(&st->ctx, (ct_stream_t)st->stream, amp ? CT_CUDA_CTX_BF16 : 0)) != 0)
        goto fail;
    CT_CUDA_CHECK_GOTO(cudaMalloc((void **)&st->partials, CT_REDUCE_CUDA_PARTS * sizeof(double)),
                       rc, NULL, fail);
    ct_cuda_ops__count(o,
                       st->ctx.workspace_nbytes + CT_CUDA_CTX_SCRATCH * sizeof(float) +
                           CT_REDUCE_CUDA_PARTS * sizeof(double),
                       true);
    o->name = amp ? "cuda (bf16 matmuls)" : "cuda";
    o->host_memory = false;
    o->limits.attention_max_l = CT_ATTENTION_CUDA_MAX_L;
    o->limits.attention_max_hs = CT_ATTENTION_CUDA_MAX_HS;
    o->limits.tisas_max_l = CT_TISAS_CUDA_MAX_L;
    o->limits.tisas_max_hs = CT_TISAS_CUDA_MAX_HS;
    o->limits.layernorm_max_c = CT_LAYERNORM_CUDA_MAX_C;
    o->limits.enc_attention_max_l = CT_ENC_ATTENTION_CUDA_MAX_L;
    o->stream = st->stream;
    o->alloc = ct_cuda_ops__alloc;
    o->release = ct_cuda_ops__release;
    o->zero = ct_cuda_ops__zero;
    o->copy = ct_cuda_ops__copy;
    o->sync = ct_cuda_ops__sync;
    o->attention_scratch = ct_cuda_ops__attention_scratch;
    o->scratch = ct_cuda_ops__scratch_size;
    o->dropout = ct_cuda_ops__dropout;
    o->timeline_mask = ct_cuda_ops__timeline_mask;
    o->embed_forward = ct_cuda_ops__embed_forward;
    o->embed_backward = ct_cuda_ops__embed_backward;
    o->layernorm_forward = ct_cuda_ops__layernorm_forward;
    o->layernorm_backward = ct_cuda_ops__layernorm_backward;
    o->linear_forward = ct_cuda_ops__linear_forward;
    o->linear_backward = ct_cuda_ops__linear_backward;
    o->conv1d_forward = ct_cuda_ops__conv1d_forward;
    o->conv1d_backward = ct_cuda_ops__conv1d_backward;
    o->qkv_forward = ct_cuda_ops__qkv_forward;
    o->qkv_backward = ct_cuda_ops__qkv_backward;
    o->attention_forward = ct_cuda_ops__attention_forward;
    o->attention_backward = ct_cuda_ops__attention_backward;
    o->relu_forward = ct_cuda_ops__relu_forward;
    o->relu_backward = ct_cuda_ops__relu_backward;
    o->residual_forward = ct_cuda_ops__residual_forward;
    o->residual_backward = ct_cuda_ops__residual_backward;
    o->score_forward = ct_cuda_ops__score_forward;
    o->score_backward = ct_cuda_ops__score_backward;
    o->bce_loss = ct_cuda_ops__bce_loss;
    o->l2_penalty = ct_cuda_ops__l2_penalty;
    o->adam_update = ct_cuda_ops__adam_update;
    o->sumsq = ct_cuda_ops__sumsq;
    o->score_candidates = ct_cuda_ops__score_candidates;
    o->score_all = ct_cuda_ops__score_all;
    o->rows_broadcast_forward = ct_cuda_ops__rows_broadcast_forward;
    o->rows_broadcast_backward = ct_cuda_ops__rows_broadcast_backward;
    o->tisas_attention_forward = ct_cuda_ops__tisas_attention_forward;
    o->tisas_attention_backward = ct_cuda_ops__tisas_attention_backward;
    o->tisas_mask = ct_cuda_ops__tisas_mask;
    o->sinkhorn_forward = ct_cuda_ops__sinkhorn_forward;
    o->sinkhorn_backward = ct_cuda_ops__sinkhorn_backward;
    o->mhc_coeffs_forward = ct_cuda_ops__mhc_coeffs_forward;
    o->mhc_coeffs_backward = ct_cuda_ops__mhc_coeffs_backward;
    o->mhc_pre_forward = ct_cuda_ops__mhc_pre_forward;
    o->mhc_pre_backward = ct_cuda_ops__mhc_pre_backward;
    o->mhc_post_forward = ct_cuda_ops__mhc_post_forward;
    o->mhc_post_backward = ct_cuda_ops__mhc_post_backward;
    o->mhc_expand_forward = ct_cuda_ops__mhc_expand_forward;
    o->mhc_expand_backward = ct_cuda_ops__mhc_expand_backward;
    o->mhc_collapse_forward = ct_cuda_ops__mhc_collapse_forward;
    o->mhc_collapse_backward = ct_cuda_ops__mhc_collapse_backward;
    o->ce_loss = ct_cuda_ops__ce_loss;
    o->sampled_ce_loss = ct_cuda_ops__sampled_ce_loss;
    o->rmsnorm_forward = ct_cuda_ops__rmsnorm_forward;
    o->rmsnorm_backward = ct_cuda_ops__rmsnorm_backward;
    o->gelu_forward = ct_cuda_ops__gelu_forward;
    o->gelu_backward = ct_cuda_ops__gelu_backward;
    o->swiglu_forward = ct_cuda_ops__swiglu_forward;
    o->swiglu_backward = ct_cuda_ops__swiglu_backward;
    o->rope_forward = ct_cuda_ops__rope_forward;
    o->rope_backward = ct_cuda_ops__rope_backward;
    o->gqa_attention_forward = ct_cuda_ops__gqa_attention_forward;
    o->gqa_attention_backward = ct_cuda_ops__gqa_attention_backward;
    o->lm_embed_forward = ct_cuda_ops__lm_embed_forward;
    o->lm_embed_backward = ct_cuda_ops__lm_embed_backward;
    o->lm_ce_loss = ct_cuda_ops__lm_ce_loss;
    o->scale = ct_cuda_ops__scale;
    o->enc_attention_forward = ct_cuda_ops__enc_attention_forward;
    o->enc_attention_backward = ct_cuda_ops__enc_attention_backward;
    o->mask_token_forward = ct_cuda_ops__mask_token_forward;
    o->mask_token_backward = ct_cuda_ops__mask_token_backward;
    o->masked_mse = ct_cuda_ops__masked_mse;
    o->query_attention_forward = ct_cuda_ops__query_attention_forward;
    o->query_attention_backward = ct_cuda_ops__query_attention_backward;
    o->bpr_loss = ct_cuda_ops__bpr_loss;
    o->mean_pool_forward = ct_cuda_ops__mean_pool_forward;
    o->mean_pool_backward = ct_cuda_ops__mean_pool_backward;
    return 0;
fail:
    ct_cuda_ops__close(o);
    memset(o, 0, sizeof *o);
    return rc;
}
