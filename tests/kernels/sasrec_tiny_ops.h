/*
 * sasrec_tiny_ops.h - the table of ops the float tiny model (sasrec_tiny.c) runs on: memory
 * handling plus every ct_* op it calls, each with the CPU op's arguments after a state pointer
 * (scratch is the implementation's business, so it is left out). The CPU table calls the
 * kernels/cpu functions on host memory; test_sasrec_gpu.c fills one with the CUDA twins on
 * device memory, so one model code path is checked on both devices - the shape of the dispatch
 * table a trainer uses. Test code.
 */
#ifndef SASREC_TINY_OPS_H
#define SASREC_TINY_OPS_H

#include "sasrec_tiny.h"

struct tiny_ops {
    void *state; /* the implementation's (scratch, context) */
    void (*destroy)(struct tiny_ops *o);
    void *(*alloc)(void *st, size_t nbytes); /* zeroed */
    void (*release)(void *st, void *p);
    void (*zero)(void *st, void *p, size_t nbytes);
    void (*to_host)(void *st, void *host, const void *p, size_t nbytes);

    void (*embed_forward)(void *st, float *out, const float *wte, const float *wpe,
                          const int32_t *seq, int B, int L, int C, float scale,
                          ct_pos_mode_t pos_mode);
    void (*embed_backward)(void *st, float *dwte, float *dwpe, const float *dout,
                           const int32_t *seq, int B, int L, int C, float scale,
                           ct_pos_mode_t pos_mode);
    void (*dropout)(void *st, float *out, const float *inp, int64_t n, ct_dropout_t drop);
    void (*timeline_mask)(void *st, float *out, const float *inp, const int32_t *seq, int N, int C);
    void (*layernorm_forward)(void *st, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
    void (*layernorm_backward)(void *st, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);
    void (*qkv_forward)(void *st, float *qkv, const float *xq, const float *xkv,
                        const float *weight, const float *bias, int N, int C);
    void (*qkv_backward)(void *st, float *dxq, float *dxkv, float *dweight, float *dbias,
                         const float *dqkv, const float *xq, const float *xkv, const float *weight,
                         int N, int C);
    void (*attention_forward)(void *st, float *out, float *att, const float *qkv,
                              const int32_t *qmask, int B, int L, int C, int NH, ct_dropout_t drop);
    void (*attention_backward)(void *st, float *dqkv, const float *dout, const float *att,
                               const float *qkv, const int32_t *qmask, int B, int L, int C, int NH,
                               ct_dropout_t drop);
    void (*linear_forward)(void *st, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC);
    void (*linear_backward)(void *st, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int IC, int OC);
    void (*residual_forward)(void *st, float *out, const float *inp1, const float *inp2, int64_t n);
    void (*residual_backward)(void *st, float *dinp1, float *dinp2, const float *dout, int64_t n);
    void (*relu_forward)(void *st, float *out, const float *inp, int64_t n);
    void (*relu_backward)(void *st, float *dinp, const float *dout, const float *out, int64_t n);
    void (*score_forward)(void *st, float *logits, const float *feats, const float *wte,
                          const int32_t *ids, int N, int C);
    void (*score_backward)(void *st, float *dfeats, float *dwte, const float *dlogits,
                           const float *feats, const float *wte, const int32_t *ids, int N, int C);
    void (*bce_loss)(void *st, float *loss, float *dpos, float *dneg, const float *pos_logits,
                     const float *neg_logits, const int32_t *pos, int N, float count);
    int64_t (*count_nonzero)(void *st, const int32_t *ids, int64_t n);
    void (*l2_penalty)(void *st, float *penalty, float *dw, const float *w, int64_t n, float lambda,
                       ct_l2_mode_t mode);
};

/* The CPU table for a config (its state holds the attention scratch). */
tiny_ops_t *tiny_ops_cpu_create(const tiny_cfg_t *cfg);

#endif /* SASREC_TINY_OPS_H */
