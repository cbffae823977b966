/*
 * ct_ops.h - the dispatch table through which model code calls the compute ops: one struct of
 * function pointers whose entries have the signatures of ct_kernels.h with the table itself as
 * the first argument, plus the few memory operations a model needs (allocate, zero, copy,
 * synchronise). The models (worker/trainer/models/sasrec/ctrain_sasrec.c: SASRec, TiSASRec, mHC;
 * models/lm/ctrain_lm.c: GPT-2, Qwen2; models/gpt2rec/, models/temporal/: the GPT-2 recommender
 * and the temporal encoder) are written once against this table; a backend fills it in:
 *   - CPU (kernels/cpu/ops.c, ct_ops_cpu_init): each entry calls the ct_*_cpu function; memory
 *     is host memory (host_memory = true), copies are memcpy, nothing can fail.
 *   - CUDA (kernels/cuda/ops.cu, ct_ops_cuda_init): each entry calls the ct_*_cuda twin of
 *     ct_kernels_cuda.h on the table's own stream and cuBLAS context; memory is device memory.
 *     A launch error is latched into o->status (the first one wins) instead of being returned
 *     by every call, so model code stays as readable as the CPU reference: it checks
 *     ct_ops_status (or the sync entry) once per step and fails the step with that code. The
 *     scratch the CUDA twins need beyond the caller's (layernorm's partial sums, the sorted
 *     item scatter, the reductions' partials) is the table's, grown on first use.
 *
 * Pointers passed to op entries are backend memory (from o->alloc); only copy() moves data
 * between host and backend memory. Scalars an op produces (loss, penalty, sum of squares) are
 * written to backend memory and fetched with copy(CT_COPY_D2H).
 *
 * ct_ops_open picks the backend for a device name ("cpu", "cuda", "auto"), so that callers never
 * need to know whether this build has CUDA.
 *
 * What is deliberately not here: anything model-shaped (parameter tables, layouts),
 * communicators.
 */
#ifndef CT_OPS_H
#define CT_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ct_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_ops ct_ops_t;

typedef enum ct_copy_kind {
    CT_COPY_H2D = 0, /* host -> backend */
    CT_COPY_D2H = 1, /* backend -> host */
    CT_COPY_D2D = 2, /* backend -> backend */
} ct_copy_kind_t;

/* Which scratch buffer of the attention op a size is asked for. */
typedef enum ct_att_scratch {
    CT_ATT_SCRATCH_FWD = 0,
    CT_ATT_SCRATCH_BWD = 1,
} ct_att_scratch_t;

/* The other ops that take scratch, and what the three size arguments of scratch() mean. The
 * fourth, rows, is the most rows one call will take (B*L, or M matrices for Sinkhorn): the CPU
 * sizes its scratch per row or per sequence and ignores it, the GPU works on all rows at once. */
typedef enum ct_scratch_op {
    CT_SCRATCH_TISAS_FWD = 0,  /* (L, C, NH) */
    CT_SCRATCH_TISAS_BWD = 1,  /* (L, C, NH) */
    CT_SCRATCH_SINKHORN_BWD,   /* (n, iters, -) */
    CT_SCRATCH_MHC_COEFFS_BWD, /* (N, n, iters) */
    CT_SCRATCH_CE,             /* (V, C, -) */
    CT_SCRATCH_SAMPLED_CE,     /* (L, M, C) */
    CT_SCRATCH_GQA_BWD,        /* (B, NH, L) */
} ct_scratch_op_t;

/* The largest shapes a backend's kernels take (0: no limit), so a model can refuse a
 * configuration before its first step rather than fail inside it. */
typedef struct ct_ops_limits {
    int attention_max_l, attention_max_hs; /* attention_forward: L, C / NH */
    int tisas_max_l, tisas_max_hs;         /* tisas_attention_forward: L, C / NH */
    int layernorm_max_c;                   /* layernorm_forward: C */
    int enc_attention_max_l;               /* enc_attention_forward: L */
} ct_ops_limits_t;

struct ct_ops {
    const char *name; /* "cpu", "cuda" */
    bool host_memory; /* alloc() returns host memory: callers may read and write it directly */
    ct_ops_limits_t limits;
    int status;   /* first failure latched since the last ct_ops_status (0: none) */
    void *stream; /* the backend's queue (cudaStream_t); NULL on the CPU */
    void *impl;   /* the backend's state (CUDA: context and scratch); NULL on the CPU */
    /* Bytes of backend memory the table holds now and held at most so far: what alloc() gave
     * and release() has not taken back, plus the backend's own scratch and cuBLAS workspace.
     * Counted by the CUDA backend (device memory; the CUDA context itself is not in it); 0 on
     * the CPU, which does not count. */
    size_t mem_live, mem_peak;

    /* ---- memory ---- */
    /* *p <- nbytes of backend memory (64-byte aligned). 0 or -ENOMEM / CT_ECUDA. */
    int (*alloc)(ct_ops_t *o, void **p, size_t nbytes);
    void (*release)(ct_ops_t *o, void *p); /* NULL is fine */
    void (*zero)(ct_ops_t *o, void *p, size_t nbytes);
    void (*copy)(ct_ops_t *o, void *dst, const void *src, size_t nbytes, ct_copy_kind_t kind);
    /* Waits for queued work; returns o->status and clears it. */
    int (*sync)(ct_ops_t *o);
    /* Scratch floats the attention op needs for sequences of length L (B rows, NH heads). */
    size_t (*attention_scratch)(ct_ops_t *o, int B, int L, int NH, ct_att_scratch_t which);
    /* Scratch floats of the other ops (see ct_scratch_op_t for a, b, c and rows). */
    size_t (*scratch)(ct_ops_t *o, ct_scratch_op_t op, int64_t a, int64_t b, int64_t c,
                      int64_t rows);
    /* Frees what the backend holds (waiting for its queue first); the table is unusable after.
     * Safe to call twice. */
    void (*close)(ct_ops_t *o);

    /* ---- the ops of ct_kernels.h, same arguments after o ---- */
    void (*dropout)(ct_ops_t *o, float *out, const float *inp, int64_t n, ct_dropout_t drop);
    void (*timeline_mask)(ct_ops_t *o, float *out, const float *inp, const int32_t *seq, int N,
                          int C);
    void (*embed_forward)(ct_ops_t *o, float *out, const float *wte, const float *wpe,
                          const int32_t *seq, int B, int L, int C, float scale,
                          ct_pos_mode_t pos_mode);
    void (*embed_backward)(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                           const int32_t *seq, int B, int L, int C, float scale,
                           ct_pos_mode_t pos_mode);
    void (*layernorm_forward)(ct_ops_t *o, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
    void (*layernorm_backward)(ct_ops_t *o, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);
    void (*linear_forward)(ct_ops_t *o, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC);
    void (*linear_backward)(ct_ops_t *o, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N, int IC,
                            int OC);
    void (*qkv_forward)(ct_ops_t *o, float *qkv, const float *xq, const float *xkv,
                        const float *weight, const float *bias, int N, int C);
    void (*qkv_backward)(ct_ops_t *o, float *dxq, float *dxkv, float *dweight, float *dbias,
                         const float *dqkv, const float *xq, const float *xkv, const float *weight,
                         int N, int C);
    void (*attention_forward)(ct_ops_t *o, float *out, float *att, float *scratch, const float *qkv,
                              const int32_t *qmask, int B, int L, int C, int NH, ct_dropout_t drop);
    void (*attention_backward)(ct_ops_t *o, float *dqkv, float *scratch, const float *dout,
                               const float *att, const float *qkv, const int32_t *qmask, int B,
                               int L, int C, int NH, ct_dropout_t drop);
    void (*relu_forward)(ct_ops_t *o, float *out, const float *inp, int64_t n);
    void (*relu_backward)(ct_ops_t *o, float *dinp, const float *dout, const float *out, int64_t n);
    void (*residual_forward)(ct_ops_t *o, float *out, const float *inp1, const float *inp2,
                             int64_t n);
    void (*residual_backward)(ct_ops_t *o, float *dinp1, float *dinp2, const float *dout,
                              int64_t n);
    void (*score_forward)(ct_ops_t *o, float *logits, const float *feats, const float *wte,
                          const int32_t *ids, int N, int C);
    void (*score_backward)(ct_ops_t *o, float *dfeats, float *dwte, const float *dlogits,
                           const float *feats, const float *wte, const int32_t *ids, int N, int C);
    void (*bce_loss)(ct_ops_t *o, float *loss, float *dpos, float *dneg, const float *pos_logits,
                     const float *neg_logits, const int32_t *pos, int N, float count);
    void (*l2_penalty)(ct_ops_t *o, float *penalty, float *dw, const float *w, int64_t n,
                       float lambda, ct_l2_mode_t mode);
    void (*adam_update)(ct_ops_t *o, float *params, float *m, float *v, const float *grads,
                        int64_t n, double lr, double beta1, double beta2, double eps,
                        float grad_scale, int64_t step);
    void (*sumsq)(ct_ops_t *o, float *out, const float *x, int64_t n);
    void (*scale)(ct_ops_t *o, float *x, float s, int64_t n); /* x *= s (AdamW's decay) */
    void (*score_candidates)(ct_ops_t *o, float *scores, const float *feats, const float *wte,
                             const int32_t *cand, int U, int K, int C, int ldf);
    void (*score_all)(ct_ops_t *o, float *scores, const float *feats, const float *wte, int U,
                      int V, int C, int ldf);

    /* ---- TiSASRec, mHC, cross-entropy losses ---- */
    void (*rows_broadcast_forward)(ct_ops_t *o, float *out, const float *table, int B, int L,
                                   int C);
    void (*rows_broadcast_backward)(ct_ops_t *o, float *dtable, const float *dout, int B, int L,
                                    int C);
    void (*tisas_attention_forward)(ct_ops_t *o, float *out, float *att, float *scratch,
                                    const float *q, const float *k, const float *v, const float *rk,
                                    const float *rv, const int64_t *tseq, const int32_t *qmask,
                                    int B, int L, int C, int NH, int T, ct_dropout_t drop_att,
                                    const uint32_t *mask_rk, const uint32_t *mask_rv, float p_rkv);
    void (*tisas_attention_backward)(ct_ops_t *o, float *dq, float *dk, float *dv, float *drk,
                                     float *drv, float *scratch, const float *dout,
                                     const float *att, const float *q, const float *k,
                                     const float *v, const float *rk, const float *rv,
                                     const int64_t *tseq, const int32_t *qmask, int B, int L, int C,
                                     int NH, int T, ct_dropout_t drop_att, const uint32_t *mask_rk,
                                     const uint32_t *mask_rv, float p_rkv);
    void (*tisas_mask)(ct_ops_t *o, uint32_t *bits, const int32_t *qmask, int B, int L, int C,
                       ct_dropout_t drop);
    void (*sinkhorn_forward)(ct_ops_t *o, float *out, const float *logits, int M, int n, int iters);
    void (*sinkhorn_backward)(ct_ops_t *o, float *dlogits, float *scratch, const float *dout,
                              const float *logits, int M, int n, int iters);
    void (*mhc_coeffs_forward)(ct_ops_t *o, float *hpre, float *hpost, float *hres, float *proj,
                               float *rstd, const float *X, const float *phi, const float *alpha,
                               const float *bias, int N, int n, int C, int iters, float eps);
    void (*mhc_coeffs_backward)(ct_ops_t *o, float *dX, float *dphi, float *dalpha, float *dbias,
                                float *scratch, const float *dhpre, const float *dhpost,
                                const float *dhres, const float *X, const float *phi,
                                const float *alpha, const float *bias, const float *proj,
                                const float *rstd, int N, int n, int C, int iters);
    void (*mhc_pre_forward)(ct_ops_t *o, float *u, const float *X, const float *hpre, int N, int n,
                            int C);
    void (*mhc_pre_backward)(ct_ops_t *o, float *dX, float *dhpre, const float *du, const float *X,
                             const float *hpre, int N, int n, int C);
    void (*mhc_post_forward)(ct_ops_t *o, float *Y, const float *X, const float *f,
                             const float *hres, const float *hpost, int N, int n, int C);
    void (*mhc_post_backward)(ct_ops_t *o, float *dX, float *df, float *dhres, float *dhpost,
                              const float *dY, const float *X, const float *f, const float *hres,
                              const float *hpost, int N, int n, int C);
    void (*mhc_expand_forward)(ct_ops_t *o, float *X, const float *x, int N, int n, int C);
    void (*mhc_expand_backward)(ct_ops_t *o, float *dx, const float *dX, int N, int n, int C);
    void (*mhc_collapse_forward)(ct_ops_t *o, float *x, const float *X, int N, int n, int C);
    void (*mhc_collapse_backward)(ct_ops_t *o, float *dX, const float *dx, int N, int n, int C);
    void (*ce_loss)(ct_ops_t *o, float *loss, float *dfeats, float *dwte, float *scratch,
                    const float *feats, const float *wte, const int32_t *pos, int N, int C, int V,
                    float count);
    void (*sampled_ce_loss)(ct_ops_t *o, float *loss, float *dfeats, float *dwte, float *scratch,
                            const float *feats, const float *wte, const int32_t *pos,
                            const int32_t *neg, int B, int L, int C, int M, float count);

    /* ---- the language models (RMSNorm, GELU, SwiGLU, RoPE, grouped-query attention, token
     * embedding, next-token loss); the CUDA backend takes the RMSNorm and embedding backwards'
     * scratch from its own, the attention backward's and the loss's from the caller
     * (CT_SCRATCH_GQA_BWD, CT_SCRATCH_CE). RoPE's tables are backend memory. ---- */
    void (*rmsnorm_forward)(ct_ops_t *o, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps);
    void (*rmsnorm_backward)(ct_ops_t *o, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N,
                             int C);
    void (*gelu_forward)(ct_ops_t *o, float *out, const float *inp, int64_t n, ct_gelu_kind_t kind);
    void (*gelu_backward)(ct_ops_t *o, float *dinp, const float *dout, const float *inp, int64_t n,
                          ct_gelu_kind_t kind);
    void (*swiglu_forward)(ct_ops_t *o, float *out, const float *gate, const float *up, int64_t n);
    void (*swiglu_backward)(ct_ops_t *o, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, int64_t n);
    void (*rope_forward)(ct_ops_t *o, float *out, const float *inp, const float *cos_t,
                         const float *sin_t, const int32_t *pos, int N, int NH, int HD);
    void (*rope_backward)(ct_ops_t *o, float *dinp, const float *dout, const float *cos_t,
                          const float *sin_t, const int32_t *pos, int N, int NH, int HD);
    void (*gqa_attention_forward)(ct_ops_t *o, float *out, float *att, const float *qkv, int B,
                                  int L, int NH, int KVH, int HD, float scale);
    void (*gqa_attention_backward)(ct_ops_t *o, float *dqkv, float *scratch, const float *dout,
                                   const float *att, const float *qkv, int B, int L, int NH,
                                   int KVH, int HD, float scale);
    void (*lm_embed_forward)(ct_ops_t *o, float *out, const float *wte, const float *wpe,
                             const int32_t *ids, const int32_t *pos, int N, int C);
    void (*lm_embed_backward)(ct_ops_t *o, float *dwte, float *dwpe, const float *dout,
                              const int32_t *ids, const int32_t *pos, int N, int C,
                              int32_t skip_id);
    void (*lm_ce_loss)(ct_ops_t *o, float *loss, float *dfeats, float *dwte, float *scratch,
                       const float *feats, const float *wte, const int32_t *tgt, int N, int C,
                       int V, float count);
    /* The GPT-2 recommender's BPR and mean pool (ct_bpr_loss_cpu, ct_mean_pool_*_cpu). */
    void (*bpr_loss)(ct_ops_t *o, float *loss, float *du, float *dvpn, const float *user,
                     const float *item, const float *proj, const int32_t *idx, int B, int D,
                     float count, float lambda);
    void (*mean_pool_forward)(ct_ops_t *o, float *out, const float *h, const int32_t *len, int N,
                              int L, int C);
    void (*mean_pool_backward)(ct_ops_t *o, float *dh, const float *dout, const int32_t *len,
                               int N, int L, int C);
    /* GPT-2's Conv1D (weight (IC,OC)); linear_backward and this take dweight NULL for a frozen
     * weight. */
    void (*conv1d_forward)(ct_ops_t *o, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC);
    void (*conv1d_backward)(ct_ops_t *o, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N, int IC,
                            int OC);

    /* ---- the temporal encoder (ct_enc_attention_*_cpu, ct_mask_token_*_cpu, ct_masked_mse_cpu,
     * ct_query_attention_*_cpu). The attention's scratch is the CPU's (CT_ENC_ATTENTION_*_SCRATCH
     * floats of backend memory); the CUDA backend takes its own instead. masked_mse writes the
     * loss to backend memory. ---- */
    void (*enc_attention_forward)(ct_ops_t *o, float *out, float *att, float *scratch,
                                  const float *qkv, int B, int L, int C, int NH, ct_dropout_t drop);
    void (*enc_attention_backward)(ct_ops_t *o, float *dqkv, float *scratch, const float *dout,
                                   const float *att, const float *qkv, int B, int L, int C, int NH,
                                   ct_dropout_t drop);
    void (*mask_token_forward)(ct_ops_t *o, float *out, const float *inp, const float *token,
                               const int32_t *mask, int N, int C);
    void (*mask_token_backward)(ct_ops_t *o, float *dinp, float *dtoken, const float *dout,
                                const int32_t *mask, int N, int C);
    void (*masked_mse)(ct_ops_t *o, float *loss, float *dpred, const float *pred,
                       const float *target, const int32_t *mask, int N, int P, float count);
    void (*query_attention_forward)(ct_ops_t *o, float *out, float *att, const float *q,
                                    const float *k, const float *v, int B, int K, int L, int C,
                                    int NH);
    void (*query_attention_backward)(ct_ops_t *o, float *dq, float *dk, float *dv,
                                     const float *dout, const float *att, const float *q,
                                     const float *k, const float *v, int B, int K, int L, int C,
                                     int NH);
};

/* Fills o with the CPU backend (kernels/cpu/ops.c). Never fails. */
void ct_ops_cpu_init(ct_ops_t *o);

/* Fills o with the CUDA backend on device `device` (kernels/cuda/ops.cu; builds with CUDA only):
 * makes it current, creates a stream and a cuBLAS context. amp false: full float precision
 * everywhere (no TF32); amp true: bf16 autocast of the matrix products (CT_CUDA_CTX_BF16 of
 * ct_kernels_cuda.h: bf16 factors, float accumulation; parameters, optimizer state and every
 * other op stay float). Returns 0, CT_ENOGPU (no such device), CT_ECUDA or CT_ECUBLAS; on
 * failure nothing is left allocated. Release with o->close. */
int ct_ops_cuda_init(ct_ops_t *o, int device, bool amp);

/* CUDA devices visible to this process; 0 in builds without CUDA or without a usable driver. */
int ct_ops_device_count(void);

/* Whether this build has the CUDA backend. */
bool ct_ops_have_cuda(void);

/* Picks and fills the backend for `device`: "cpu"; "cuda" (device local_rank modulo the visible
 * ones, as torchrun's jobs take cuda:LOCAL_RANK; CT_ENOGPU with one line when none is visible or
 * the build has no CUDA); "auto" (cuda when a device is visible, else cpu). amp asks for the CUDA
 * backend's bf16 matrix products; on the CPU it is CT_ENOGPU (the CPU computes in float32). The
 * message in eb starts with what was asked for ("cuda: ...", "amp: ..."), for the caller to
 * prefix with its flag. Release with ct_ops_close. */
int ct_ops_open(ct_ops_t *o, const char *device, int local_rank, bool amp, ct_errbuf_t *eb);

/* o->close when there is one. */
static inline void ct_ops_close(ct_ops_t *o)
{
    if (o->close)
        o->close(o);
}

/* Returns the latched status and clears it (0 when every op since the last call succeeded). */
static inline int ct_ops_status(ct_ops_t *o)
{
    int rc = o->status;
    o->status = 0;
    return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* CT_OPS_H */
